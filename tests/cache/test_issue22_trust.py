"""Trust against hostile files and values (issue 22): marking never follows a link, a directory
above the cache that anyone may rename in, commands that would replace a user's file, values
no path may hold, and a full disk named in the error."""

import os
import subprocess
import time

import pytest

import tack.cache
from tack.cache import bundle, size

from .conftest import KMOD_LAUNCHES, check_results, compiled, entry_files, run_child, run_cli

HOURS_AGO = 3 * 3600


def test_touch_if_stale_never_follows_a_link(tmp_path):
    """size.touch_if_stale on a link to an old file outside the cache: the file's mtime stays;
    on the cache's own old file it is bumped."""
    old = time.time() - HOURS_AGO
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the cache's")
    os.utime(outside, (old, old))
    link = tmp_path / "entry.tvar"
    link.symlink_to(outside)
    assert size.touch_if_stale(str(link)) is False
    assert outside.stat().st_mtime == pytest.approx(old)
    mine = tmp_path / "mine.tvar"
    mine.write_bytes(b"x")
    os.utime(mine, (old, old))
    assert size.touch_if_stale(str(mine)) is True
    assert mine.stat().st_mtime > old + 3600


def test_warm_load_marks_the_variant_it_read(warm):
    """The control of the link tests: an old variant loaded is marked used (through its
    descriptor), with its lowered entry."""
    cache, src = warm
    old = time.time() - HOURS_AGO
    for p in entry_files(cache):
        os.utime(p, (old, old))
    run = run_child(cache, src, KMOD_LAUNCHES)
    check_results(run)
    assert run.stats["hits"]["variant"] == 3
    assert all(p.stat().st_mtime > old + 3600 for p in entry_files(cache))


@pytest.mark.parametrize("mode, refused", [(0o777, True), (0o1777, False), (0o775, False)])
def test_parent_writable_by_others(warm, tmp_path, mode, refused):
    """A cache directory below one that others may write without the sticky bit (anyone could
    rename the cache away and put their own in its place) is not used: one warning naming that
    directory and the fix.  With the sticky bit (/tmp), or writable by a group only, it is used."""
    cache, src = warm
    parent = tmp_path / "shared"
    parent.mkdir()
    moved = parent / "cache"
    os.rename(cache, moved)
    os.chmod(parent, mode)
    run = run_child(moved, src, KMOD_LAUNCHES)
    check_results(run)
    if refused:
        assert len(run.warnings) == 1, run.warnings
        msg = run.warnings[0]["message"]
        assert str(parent) in msg and "without the sticky bit" in msg and "chmod o-w" in msg, msg
        assert all(compiled(r) for r in run.results)
        assert run.stats["bytes_read"] == 0 and run.stats["bytes_written"] == 0
        cli = run_cli(moved, "clear")
        assert cli.rc == 1 and "sticky" in cli.stderr, cli.stderr
        info = run_cli(moved, "info")
        assert info.rc == 0 and "NOT USED" in info.stdout and "sticky" in info.stdout, info.stdout
        assert entry_files(moved)
    else:
        assert run.warnings == [] and run.stats["hits"]["variant"] == 3


def test_a_cache_below_a_parent_open_to_others_is_refused_before_it_is_made(warm, tmp_path):
    """A missing cache directory below one others may write (no sticky bit), deeper levels not
    made either, was made first and refused after: the directories were left behind.  Now
    nothing is made, the one warning names the open directory, and the kernels compile."""
    _, src = warm
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(parent, 0o777)
    try:
        for cache in (parent / "cache", parent / "not" / "yet" / "cache"):
            run = run_child(cache, src, KMOD_LAUNCHES)
            check_results(run)
            assert len(run.warnings) == 1, run.warnings
            assert str(parent) in run.warnings[0]["message"], run.warnings
            assert all(compiled(r) for r in run.results)
            assert os.listdir(parent) == [], os.listdir(parent)
    finally:
        os.chmod(parent, 0o755)


@pytest.fixture
def packed_cache(warm):
    cache, _ = warm
    run = run_cli(cache, "pack")
    assert run.rc == 0, run.stderr
    (path,) = [p for p in cache.iterdir() if p.name.startswith("bundle-")]
    return cache, path


def _relabelled(src, dst, **fields):
    """A copy at ``dst`` of the bundle at ``src`` whose header says ``fields`` instead."""
    from tack.cache import bundle_write
    b = bundle.read(str(src), tack_version=None)
    try:
        entries, meta = bundle_write.valid_entries(b), dict(b.meta)
    finally:
        b.close()
    for name in ("entries", "bytes"):
        meta.pop(name, None)
    bundle_write.write(str(dst), entries, dict(meta, **fields))
    return len(entries)


@pytest.mark.parametrize("fields", [{"arch": "cpu:zen2"}, {"machine": "aarch64", "arch": "cpu:neoverse_v1"}])
def test_pack_output_onto_another_machines_bundle(packed_cache, tmp_path, fields):
    """pack --output onto a Tack bundle for another microarchitecture or machine (a site's zen2
    bundle): refused, naming what it holds, the bundle kept; with --force replaced, saying what
    went.  It was replaced without a word: the zen2 entries were gone, and x86_64_v4 code lay
    under the zen2 name.  One for the same (this host's bundle, of another Tack and LLVM: a job
    script's fixed --output after an upgrade) is stale, and replaced without --force."""
    cache, packed = packed_cache
    other = tmp_path / "bundle-x86_64-cpu-zen2-c70a7b2b4208"
    n = _relabelled(packed, other, **fields)
    before = other.read_bytes()
    run = run_cli(cache, "pack", "--output", str(other))
    assert run.rc == 1, run.stdout + run.stderr
    arch = fields["arch"]
    assert f"not replacing {other}: it is a Tack bundle for {arch} ({fields.get('machine', 'x86_64')})" \
        in run.stderr and f"its {n} entr" in run.stderr and "--force" in run.stderr, run.stderr
    assert other.read_bytes() == before
    run = run_cli(cache, "pack", "--output", str(other), "--force")
    assert run.rc == 0, run.stderr
    assert f"note: --force replaced what was there: it is a Tack bundle for {arch}" in run.stdout, run.stdout
    assert bundle.header(str(other))["arch"] != arch
    same = tmp_path / "mine.bundle"
    _relabelled(packed, same, tack="0.0.1+another", target_key="f" * 64)    # another Tack and LLVM
    run = run_cli(cache, "pack", "--output", str(same))
    assert run.rc == 0 and "--force" not in run.stdout, run.stdout + run.stderr
    assert bundle.header(str(same))["tack"] != "0.0.1+another"


def test_pack_output_onto_a_users_file(packed_cache, tmp_path):
    """pack --output onto an existing file that is not a bundle: refused, exit 1, the file kept;
    with --force it is replaced; onto a Tack bundle (one Tack wrote) it is replaced without."""
    cache, _ = packed_cache
    mine = tmp_path / "results.csv"
    mine.write_text("a user's file\n")
    run = run_cli(cache, "pack", "--output", str(mine))
    assert run.rc == 1 and "not replacing" in run.stderr and "--force" in run.stderr, run.stderr
    assert mine.read_text() == "a user's file\n"
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]
    run = run_cli(cache, "pack", "--output", str(mine), "--force")
    assert run.rc == 0, run.stderr
    assert mine.read_bytes().startswith(bundle.MAGIC)
    # it said "the bundle it replaced could not be read (... too short to be a bundle)"
    assert "note: --force replaced what was there: it is not a Tack bundle" in run.stdout, run.stdout
    assert "could not be read" not in run.stdout, run.stdout
    run = run_cli(cache, "pack", "--output", str(mine))      # a bundle now: Tack's to replace
    assert run.rc == 0, run.stderr
    assert "note:" not in run.stdout, run.stdout


@pytest.mark.parametrize("content", [b"notes\n", b""])
def test_pack_onto_a_file_named_like_a_bundle(packed_cache, content):
    """pack onto a file at the bundle's own name that is not a bundle: refused, the file kept;
    packing again onto the bundle pack wrote is fine."""
    cache, path = packed_cache
    assert run_cli(cache, "pack").rc == 0                     # its own bundle: replaced
    path.write_bytes(content)
    run = run_cli(cache, "pack")
    assert run.rc == 1 and str(path) in run.stderr and "not a Tack bundle" in run.stderr, run.stderr
    assert path.read_bytes() == content


def test_export_onto_existing_files(packed_cache, tmp_path):
    """export onto files that hold something else: refused before anything is written, the files
    kept; run again onto its own output: fine; with --force: replaced."""
    cache, bpath = packed_cache
    out = tmp_path / "out"
    first = run_cli(cache, "export", str(bpath), "--output", str(out))
    assert first.rc == 0, first.stderr
    files = sorted(out.iterdir())
    assert files
    again = run_cli(cache, "export", str(bpath), "--output", str(out))
    assert again.rc == 0, again.stderr
    files[0].write_bytes(b"the user's edit")
    for f in files[1:]:
        f.unlink()
    run = run_cli(cache, "export", str(bpath), "--output", str(out))
    assert run.rc == 1 and "not replacing" in run.stderr and str(files[0]) in run.stderr, run.stderr
    assert files[0].read_bytes() == b"the user's edit"
    assert sorted(out.iterdir()) == files[:1]                 # nothing written before refusing
    run = run_cli(cache, "export", str(bpath), "--output", str(out), "--force")
    assert run.rc == 0 and files[0].read_bytes() != b"the user's edit"
    assert sorted(out.iterdir()) == files


@pytest.fixture
def full_disk(tmp_path):
    """A 256 KiB tmpfs filled to the last byte (root only: mount)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full disk is made by mounting a 256 KiB tmpfs, which needs root")
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip("a full disk is made by mounting a 256 KiB tmpfs, and this machine refuses "
                    f"the mount: {got.stderr.strip()}")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_pack_on_a_full_disk_names_the_file(packed_cache, full_disk):
    """pack onto a full disk: exit 1 and one line naming the bundle's path and the reason."""
    cache, _ = packed_cache
    run = run_cli(cache, "pack", "--output", str(full_disk))
    assert run.rc == 1 and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert f"cannot write {full_disk}/bundle-" in line and "No space left on device" in line, line
    assert "error: :" not in line
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]   # no temporary left


@pytest.mark.parametrize("value", ["/x/a\x00b", "/x/a\nb", "/x/a\rb", "/x/\x1bb"])
def test_configure_refuses_a_control_character(value):
    """configure(directory=...) with a NUL, newline or other control character: ValueError now,
    naming it, not a failure at first use."""
    with pytest.raises(ValueError, match="control character"):
        tack.cache.configure(directory=value)


def test_environment_directory_with_a_newline(monkeypatch, tmp_path):
    """TACK_CACHE_DIR holding a newline: one warning naming the variable, the default used."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TACK_CACHE_DIR", str(tmp_path / "a\nb"))
    with pytest.warns(RuntimeWarning, match="TACK_CACHE_DIR.*control character"):
        s = tack.cache.settings()
    assert s.directory == str(tmp_path / "xdg" / "tack")


def test_bundle_directory_with_a_newline(tmp_path):
    """A TACK_CACHE_BUNDLES entry holding a newline is left out, with a warning."""
    from tack.cache.stores import site_dirs
    said = []
    good = str(tmp_path)
    assert site_dirs({"TACK_CACHE_BUNDLES": f"{tmp_path}/a\nb:{good}"}, said.append) == [good]
    assert len(said) == 1 and "control character" in said[0]


@pytest.mark.parametrize("text", ["١٢٣", "١٢٣M", "12٣", "１２M", "1.٥G"])
def test_non_ascii_digits_are_not_a_size(text, monkeypatch):
    """Digits of other scripts (Arabic-Indic, full width) are not read as a size."""
    with pytest.raises(ValueError):
        tack.cache.parse_size(text)
    monkeypatch.setenv("TACK_CACHE_SIZE", text)
    with pytest.warns(RuntimeWarning, match="TACK_CACHE_SIZE"):
        assert tack.cache.settings().max_size == tack.cache.DEFAULT_SIZE


def _lstats_of(monkeypatch):
    """Count os.lstat calls by path from here on (os.path.realpath's too)."""
    from tack.cache import trust
    calls = []
    real = os.lstat

    def counting(p, *a, **k):
        calls.append(os.fsdecode(p))
        return real(p, *a, **k)
    monkeypatch.setattr(os, "lstat", counting)
    return trust, calls


def test_parents_are_each_checked_with_one_lstat(tmp_path, monkeypatch):
    """check_parents with no symbolic link above: one lstat per directory above, up to /
    (realpath's walk and a second walk made two), and nothing refused under a private parent."""
    d = tmp_path / "a" / "b" / "cache"
    d.mkdir(parents=True)
    trust, calls = _lstats_of(monkeypatch)
    trust.check_parents(str(d))
    above = [str(p) for p in d.parents]
    assert sorted(calls) == sorted(above), calls


def test_a_parent_open_to_others_is_named_whichever_way_it_is_reached(tmp_path, monkeypatch):
    """A directory writable by others without the sticky bit above the cache is refused and
    named by its real path, whether the cache's path runs through it or through a symbolic link
    to a directory below it; with the sticky bit, or writable by its group only, it is not."""
    from tack.cache import trust
    shared = tmp_path / "shared"
    real = shared / "real" / "cache"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(shared / "real")
    for mode, refused in ((0o777, True), (0o1777, False), (0o775, False)):
        os.chmod(shared, mode)
        for path in (real, link / "cache"):
            if refused:
                with pytest.raises(trust.Untrusted) as e:
                    trust.check_parents(str(path))
                msg = str(e.value)
                assert msg.startswith(f"the directory {shared}, above {path},"), msg
                assert f"chmod o-w {shared}" in msg, msg
            else:
                trust.check_parents(str(path))
    os.chmod(shared, 0o755)
    # Open to others below the link: named by its real path, not the link's.
    below = shared / "real" / "ww"
    (below / "sub" / "cache").mkdir(parents=True)
    os.chmod(below, 0o777)
    try:
        with pytest.raises(trust.Untrusted) as e:
            trust.check_parents(str(link / "ww" / "sub" / "cache"))
        assert str(e.value).startswith(f"the directory {below}, above "), str(e.value)
    finally:
        os.chmod(below, 0o755)
    # A parent not made yet: nothing to ask, nothing refused (as before).
    trust.check_parents(str(tmp_path / "not" / "yet" / "cache"))
    # Through the link, the real directories are the ones checked (each once more than the link).
    os.chmod(shared, 0o777)
    _, calls = _lstats_of(monkeypatch)
    with pytest.raises(trust.Untrusted):
        trust.check_parents(str(link / "cache"))
    assert str(shared / "real") in calls and str(shared) in calls


def test_a_link_held_by_a_directory_open_to_others_is_refused(tmp_path):
    """A cache path through a symbolic link that sits in a directory anyone may write (no sticky
    bit) was used without a word: only the link's real target and what lies above it were
    checked, not the directory holding the link, where anyone could point it elsewhere."""
    from tack.cache import trust
    open_dir = tmp_path / "open"
    target = tmp_path / "private" / "target"
    target.mkdir(parents=True)
    open_dir.mkdir()
    (open_dir / "link").symlink_to(target)
    os.chmod(open_dir, 0o777)
    try:
        with pytest.raises(trust.Untrusted) as e:
            trust.check_parents(str(open_dir / "link" / "cache"))
        assert str(e.value).startswith(f"the directory {open_dir}, above "), str(e.value)
        os.chmod(open_dir, 0o1777)              # sticky: the link cannot be replaced by others
        trust.check_parents(str(open_dir / "link" / "cache"))
    finally:
        os.chmod(open_dir, 0o755)
    trust.check_parents(str(open_dir / "link" / "cache"))
