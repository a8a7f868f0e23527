"""Nothing the cache did not make is ever deleted, replaced or read as its own: clear, prune, the
stale-temporary sweep and bundle removal check each file's content before deleting it, and never
delete a directory recursively."""

import json
import os
import time

import numpy as np

from tack.cache import bundle, bundle_write, entry, size

from .conftest import EXPECTED, check_results, current_version, entry_files, run_child, run_cli


def _user_tree(root, files):
    """Write a user's files (relative path -> bytes) under ``root``; -> {path: bytes}."""
    made = {}
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        made[p] = data
    return made


def _unchanged(made):
    return {p: (p.read_bytes() if p.exists() else None) for p in made} == made


def test_clear_all_keeps_directories_that_only_look_like_versions(warm):
    """clear --all leaves a user's '2024-runs/lowered/...' and '1.0/variants/..' trees, whose names and
    layout look like version directories, with every file in them."""
    cache, _ = warm
    made = _user_tree(cache, {
        "2024-runs/lowered/results.csv": b"t,x\n0,1\n",
        "1.0/variants/ab/notes.tvar": b"my own file with the entry suffix",
        "1.0/variants/readme.txt": b"hello",
        "9/lowered/cd/" + "cd" + "0" * 62 + ".tlk": b"not an entry, though named like one",
    })
    run = run_cli(cache, "clear", "--all")
    assert run.rc == 0, run.stderr
    assert _unchanged(made)
    assert entry_files(cache) == [p for p in entry_files(cache) if p in made]
    assert "left in place, not recognizable as the cache's own files" in run.stdout


def test_clear_keeps_a_users_file_inside_a_version_directory(warm):
    """clear deletes this version's entries but not a user's file inside its directories, which
    stay (with that file) and are listed as left in place."""
    cache, _ = warm
    version = current_version()
    made = _user_tree(cache / version, {"variants/zz/keep.me": b"mine", "my-notes.txt": b"mine too"})
    run = run_cli(cache, "clear")
    assert run.rc == 0, run.stderr
    assert _unchanged(made)
    assert [p for p in entry_files(cache) if p not in made] == []
    assert str(cache / version / "variants" / "zz" / "keep.me") in run.stdout
    # and the version directory, for my-notes.txt beside variants/ (it was not listed, as it
    # held a listed file deeper)
    assert f"  {cache / version}\n" in run.stdout, run.stdout


def test_clear_deletes_a_zero_filled_entry_a_crash_left(warm):
    """An entry whose name a power loss kept and whose bytes it did not (all zeros) was left in
    place by clear, "not made by Tack", its directories with it: at an entry's own place in a
    version directory it is the cache's, and goes.  The same zeros outside that layout stay."""
    cache, _ = warm
    version = current_version()
    entry = next(p for p in entry_files(cache) if p.suffix == ".tvar" and p.parts[-4] == version)
    entry.write_bytes(b"\0" * entry.stat().st_size)
    made = _user_tree(cache, {"9/lowered/cd/" + "cd" + "0" * 62 + ".tlk": b"\0" * 100})
    run = run_cli(cache, "clear")
    assert run.rc == 0, run.stderr
    assert not entry.exists() and not (cache / version / "variants").exists()
    assert "left in place" not in run.stdout, run.stdout
    assert _unchanged(made)


def test_prune_never_deletes_a_users_file_named_like_an_entry(warm):
    """prune --max-size 1 deletes every entry, but not a user's file with an entry's suffix and name
    inside a version directory: each file is checked by its header first."""
    cache, _ = warm
    version = current_version()
    fake = "ab" + "1" * 62
    made = _user_tree(cache / version, {f"variants/ab/{fake}.tvar": b"x" * 5000,
                                        f"lowered/ab/{fake}.tlk": b"TACKENT1 but not really"})
    old = time.time() - 10 * 86400          # oldest of all: first in line to go
    for p in made:
        os.utime(p, (old, old))
    run = run_cli(cache, "prune", "--max-size", "1")
    assert run.rc == 0, run.stderr
    assert _unchanged(made)
    assert [p for p in entry_files(cache) if p not in made] == []


def test_stale_sweep_keeps_a_users_file_named_like_a_temporary(warm):
    """The stale-temporary sweep deletes an old temporary holding the start of an entry, and keeps
    an old file with a temporary's name whose content is not Tack's."""
    cache, _ = warm
    entry = entry_files(cache)[0]
    ours = entry.with_name(entry.name + ".tmp.123.aaaa")
    ours.write_bytes(entry.read_bytes()[:40])
    theirs = entry.with_name(entry.name + ".tmp.124.bbbb")
    theirs.write_bytes(b"a user's data")
    old = time.time() - 3 * 3600
    for p in (ours, theirs):
        os.utime(p, (old, old))
    assert size.remove_stale_temporaries(str(cache)) == 1
    assert not ours.exists() and theirs.read_bytes() == b"a user's data"


def test_clear_all_deletes_damaged_bundles_but_not_foreign_ones(warm):
    """clear --all deletes Tack's bundles, damaged ones too, and keeps files named bundle-* that
    are not Tack bundles (empty, random, a directory)."""
    cache, _ = warm
    good = bundle_write.pack([], {"arch": "zen3", "machine": "x86_64"})
    (cache / "bundle-good").write_bytes(good)
    (cache / "bundle-damaged").write_bytes(good[:-3] + b"xyz")
    made = _user_tree(cache, {"bundle-empty": b"", "bundle-random": os.urandom(300),
                              "bundle-dir/inside": b"keep"})
    run = run_cli(cache, "clear", "--all")
    assert run.rc == 0, run.stderr
    assert not (cache / "bundle-good").exists() and not (cache / "bundle-damaged").exists()
    assert _unchanged(made)


def test_info_reports_damaged_empty_and_random_bundles(warm):
    """info lists a damaged bundle as DAMAGED with why, and empty or random files named like bundles
    as not bundles, instead of listing the damaged one as normal and omitting the others."""
    cache, _ = warm
    good = bundle_write.pack([], {"arch": "zen3", "machine": "x86_64"})
    (cache / "bundle-damaged").write_bytes(good[:-3] + b"xyz")
    _user_tree(cache, {"bundle-empty": b"", "bundle-random": os.urandom(300)})
    run = run_cli(cache, "info")
    assert run.rc == 0, run.stderr
    line = {ln.split()[0]: ln for ln in run.stdout.splitlines() if ln.strip().startswith("bundle-")}
    assert "DAMAGED, not used" in line["bundle-damaged"]
    assert "NOT A BUNDLE, ignored: empty" in line["bundle-empty"]
    assert "NOT A BUNDLE, ignored: not a Tack bundle" in line["bundle-random"]


def test_info_says_a_bundle_damaged_in_one_entry_still_serves_the_others(warm):
    """A bundle one of whose entries is damaged still serves the others (the runtime refuses that
    entry alone): info says so, where it said "DAMAGED, not used" of it, and its JSON marks it
    ``partly``; a bundle damaged in its header stays "not used"."""
    cache, _ = warm
    assert run_cli(cache, "pack").rc == 0
    (packed,) = cache.glob("bundle-*")
    data = bytearray(packed.read_bytes())
    data[-1] ^= 0xFF                        # the last entry's last byte
    packed.write_bytes(bytes(data))
    run = run_cli(cache, "info")
    assert run.rc == 0, run.stderr
    (line,) = [ln for ln in run.stdout.splitlines() if ln.strip().startswith("bundle-")]
    assert "DAMAGED in part, its other entries still used: 1 of" in line and "not used" not in line, line
    (listed,) = json.loads(run_cli(cache, "info", "--json").stdout)["bundles"]
    assert listed["status"] == "damaged" and listed["partly"] is True, listed


def test_version_directories_carry_a_marker_and_the_new_root_a_cachedir_tag(cache_dir, stored_kmod):
    """The cache marks each version directory it creates, and tags a root it created itself
    (CACHEDIR.TAG, so backup tools skip it); clear removes the marker with the directory."""
    cache = stored_kmod.cache
    version = current_version()
    assert size.is_marker(str(cache / version / size.VERSION_MARKER))
    assert (cache / "CACHEDIR.TAG").read_bytes().startswith(
        b"Signature: 8a477f597d28d172789f06886806bc55")


def test_existing_user_directory_gets_no_cachedir_tag(cache_dir, stored_kmod, tmp_path):
    """A TACK_CACHE_DIR the user made already (it may hold their files) is never tagged."""
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    run = run_child(mine, stored_kmod.src, [{"kernel": "k_main", "n": 5}])
    check_results(run)
    assert not (mine / "CACHEDIR.TAG").exists()
    assert (mine / current_version() / size.VERSION_MARKER).exists()


def test_a_store_never_replaces_what_is_not_a_regular_file(warm):
    """An entry path taken by a directory of the user's: the kernel compiles and runs, one
    warning, and the directory (with its file) is still there."""
    cache, src = warm
    path = next(p for p in entry_files(cache) if p.parts[-3] == "variants")
    path.unlink()
    (path / "inside").parent.mkdir()
    (path / "inside").write_bytes(b"keep")
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}, {"kernel": "k_other", "n": 5},
                                 {"kernel": "k_tmpl", "n": 5, "template": "Policy"}])
    check_results(run, EXPECTED)
    assert (path / "inside").read_bytes() == b"keep"
    assert len(run.warnings) <= 1


def test_prune_that_cannot_delete_fails(warm):
    """prune on a cache whose entries cannot be deleted exits 1 naming the file, not 0."""
    from .conftest import drop_dac_caps
    cache, _ = warm
    dirs = {p.parent for p in entry_files(cache)}
    for d in dirs:
        os.chmod(d, 0o500)
    try:
        run = run_cli(cache, "prune", "--max-size", "1", preexec_fn=drop_dac_caps)
    finally:
        for d in dirs:
            os.chmod(d, 0o700)
    assert run.rc == 1
    assert "cannot delete" in run.stderr and "still over its limit" in run.stderr


def test_numbers_too_large_are_errors_not_tracebacks(warm):
    """A 311-digit size in TACK_CACHE_SIZE is a warning and the default; in --max-size bad usage;
    in configure() a ValueError; TACK_NUM_THREADS likewise a warning: never an OverflowError."""
    import pytest

    import tack.cache
    import tack.config
    cache, src = warm
    huge = "9" * 311
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}],
                    env={"TACK_CACHE_SIZE": huge + "G", "TACK_NUM_THREADS": huge})
    check_results(run)
    msgs = " ".join(w["message"] for w in run.warnings)
    assert "TACK_CACHE_SIZE" in msgs and "too large" in msgs and "TACK_NUM_THREADS" in msgs
    assert "Traceback" not in run.stderr
    cli = run_cli(cache, "prune", "--max-size", huge)
    assert cli.rc == 2 and "too large a size" in cli.stderr and "Traceback" not in cli.stderr
    with pytest.raises(ValueError, match="too large a size"):
        tack.cache.configure(max_size=huge)
    with pytest.raises(ValueError, match="too large a size"):
        tack.cache.configure(max_size=10 ** 400)
    with pytest.raises(ValueError, match="from 1 to"):
        tack.config.num_threads = 10 ** 400
    assert tack.cache.parse_size("1.5G") == 3 << 29 and tack.cache.parse_size(str(2 ** 62)) == 2 ** 62
    np.testing.assert_equal(entry.MAGIC, b"TACKENT4")


def test_info_says_a_bundle_whose_every_entry_is_damaged_serves_none(warm):
    """A bundle whose one index block is damaged (every entry of a small bundle under it) serves
    nothing; info said "DAMAGED in part, its other entries still used: N of N entries are
    damaged".  It says "not used" now, and its JSON does not mark it ``partly``."""
    cache, _ = warm
    assert run_cli(cache, "pack").rc == 0
    (packed,) = cache.glob("bundle-*")
    data = bytearray(packed.read_bytes())
    opened = bundle.Bundle(bytes(data), str(packed))
    assert opened._nblocks == 1 and len(opened) > 1
    data[opened._start + 3] ^= 0x04                     # in the index block's first row
    packed.write_bytes(bytes(data))
    run = run_cli(cache, "info")
    assert run.rc == 0, run.stderr
    (line,) = [ln for ln in run.stdout.splitlines() if ln.strip().startswith("bundle-")]
    assert f"DAMAGED, not used: all {len(opened)} of its entries are damaged" in line, line
    (listed,) = json.loads(run_cli(cache, "info", "--json").stdout)["bundles"]
    assert listed["status"] == "damaged" and not listed.get("partly"), listed
