"""``python -m tack.cache``: info, info --json, prune, clear, clear --all, usage errors and help."""

import json
import os
import re
import shutil
import stat
import time

import pytest

from tack.cache import cli, size
from tack.cache.keys import shown_version

from .conftest import current_version, drop_dac_caps, entry_files, run_cli

OTHER_VERSION = "0.0.1"


@pytest.fixture
def populated(warm):
    """The stored KMOD cache plus another version's copy of its entries, a bundle and a foreign file."""
    cache, _ = warm
    (this,) = [d for d in cache.iterdir() if d.is_dir()]
    shutil.copytree(this, cache / OTHER_VERSION)
    from tack.cache import bundle_write
    (cache / "bundle-x86_64").write_bytes(bundle_write.pack([], {"arch": "znver3", "machine": "x86_64",
                                                                  "tack": this.name}))
    (cache / "bundle-notes.txt").write_text("a user's file that happens to start with bundle-")
    (cache / "notes.txt").write_text("not Tack's")
    return cache, this.name


def test_info(populated):
    """info prints the directory, mode and limit with their sources, entries per version and level, sizes in binary units, and the bundles."""
    cache, this = populated
    run = run_cli(cache, "info", env={"TACK_CACHE_SIZE": "500M"})
    assert run.rc == 0, run.stderr
    out = run.stdout
    lines = out.splitlines()
    assert f"directory:    {cache}  (environment)" in lines
    assert "mode:         write  (default)" in lines
    assert "size limit:   500.0 MiB  (environment)" in lines
    assert f"tack version: {shown_version(this)}" in lines
    assert "across 2 Tack version(s)" in out and "entries:      12 (" in out
    assert f"  {shown_version(this)}  <- this version" in lines
    assert f"  {OTHER_VERSION}" in lines
    level_lines = [ln.split() for ln in lines if ln.strip().startswith(("lowered", "variants"))]
    assert [(ln[0], ln[1], ln[2]) for ln in level_lines] == [
        ("lowered", "3", "entries"), ("variants", "3", "entries")] * 2
    assert all(ln[-1] == "KiB" for ln in level_lines)
    assert "bundle-x86_64  arch znver3 (x86_64), 0 entries" in out
    # a file named like a bundle that is not one is listed as such (never silently omitted)
    assert any("bundle-notes.txt" in ln and "NOT A BUNDLE, ignored" in ln for ln in lines)
    assert not any(ln.strip().startswith("notes.txt") for ln in lines)
    assert run.stderr == ""


def test_info_json(populated):
    """info --json gives every setting with its source, entries and bytes per version and level, totals and bundles."""
    cache, this = populated
    run = run_cli(cache, "info", "--json", env={"TACK_CACHE": "read"})
    assert run.rc == 0, run.stderr
    info = json.loads(run.stdout)
    assert set(info) >= {"directory", "mode", "max_size", "sources", "tack_version", "exists", "trusted",
                         "untrusted_reason", "versions", "total_bytes", "total_entries",
                         "last_size_check", "bundles"}
    assert (info["directory"], info["mode"], info["max_size"]) == (str(cache), "read", 1 << 30)
    assert info["sources"] == {"directory": "environment", "mode": "environment", "max_size": "default"}
    assert info["tack_version"] == this and info["exists"] and info["trusted"]
    assert set(info["versions"]) == {this, OTHER_VERSION}
    for levels in info["versions"].values():
        assert levels["lowered"]["entries"] == 3 and levels["variants"]["entries"] == 3
        assert levels["lowered"]["bytes"] > 0 and levels["variants"]["bytes"] > 0
    assert info["total_entries"] == 12
    assert info["total_bytes"] == sum(p.stat().st_size for p in entry_files(cache))
    assert [(b["name"], b["status"]) for b in info["bundles"]] == [
        ("bundle-notes.txt", "foreign"), ("bundle-x86_64", "ok")]
    assert info["last_size_check"] is not None


def test_info_without_directory(cache_dir):
    """info with no cache directory yet says so and exits 0, creating nothing."""
    run = run_cli(cache_dir, "info")
    assert run.rc == 0, run.stderr
    assert "no cache directory yet" in run.stdout
    assert not os.path.lexists(cache_dir)


def test_prune(populated):
    """prune under the default limit deletes nothing; --max-size 200M is accepted and reported in MiB."""
    cache, _ = populated
    before = sorted(entry_files(cache))
    run = run_cli(cache, "prune")
    assert run.rc == 0, run.stderr
    assert run.stdout.startswith("pruned 0 entries") and "limit 1.0 GiB" in run.stdout
    run = run_cli(cache, "prune", "--max-size", "200M")
    assert run.rc == 0, run.stderr
    assert "pruned 0 entries" in run.stdout and "limit 200.0 MiB" in run.stdout
    assert sorted(entry_files(cache)) == before


def test_prune_to_small_size(populated):
    """prune --max-size below the total deletes entries down to 90% of it and leaves the bundle and foreign file."""
    cache, _ = populated
    total = sum(p.stat().st_size for p in entry_files(cache))
    limit = total // 2
    run = run_cli(cache, "prune", "--max-size", str(limit))
    assert run.rc == 0, run.stderr
    count = int(run.stdout.split()[1])
    assert count > 0 and len(entry_files(cache)) == 12 - count
    assert sum(p.stat().st_size for p in entry_files(cache)) <= 0.9 * limit
    assert (cache / "bundle-x86_64").exists() and (cache / "notes.txt").exists()


def test_prune_unlimited_overrides_the_limit(populated):
    """prune --max-size unlimited keeps everything even when TACK_CACHE_SIZE is tiny."""
    cache, _ = populated
    before = sorted(entry_files(cache))
    run = run_cli(cache, "prune", "--max-size", "unlimited", env={"TACK_CACHE_SIZE": "1K"})
    assert run.rc == 0, run.stderr
    assert run.stdout.startswith("pruned 0 entries") and "limit unlimited" in run.stdout, run.stdout
    assert sorted(entry_files(cache)) == before


@pytest.mark.parametrize("args", [["prune", "--max-size", "12Q"], ["prune", "--max-size=-1G"],
                                  ["prune", "--max-size", "0"], ["prune", "--max-size", "0.0M"]])
def test_prune_bad_size(populated, args):
    """prune with a bad --max-size is bad usage: exit status 2, the usage and a line naming the
    option, and nothing deleted.  So is 0, as everywhere a size is set: it deleted every entry
    (ccache's -M 0 is no limit); the line names clear, the command for that."""
    cache, _ = populated
    before = sorted(entry_files(cache))
    run = run_cli(cache, *args)
    assert run.rc == 2
    assert run.stdout == ""
    assert run.stderr.startswith("usage: python -m tack.cache prune")
    assert "argument --max-size" in run.stderr.strip().splitlines()[-1]
    if args[-1].startswith("0"):
        assert "keeps no entry" in run.stderr and "python -m tack.cache clear" in run.stderr
    assert sorted(entry_files(cache)) == before


def test_clear(populated):
    """clear deletes this version's entries only; other versions, bundles and foreign files stay."""
    cache, this = populated
    run = run_cli(cache, "clear")
    assert run.rc == 0, run.stderr
    assert not (cache / this).exists()
    assert sorted(e[3] for e in size.entries(str(cache))) == [OTHER_VERSION] * 6
    assert (cache / "bundle-x86_64").exists() and (cache / "notes.txt").exists()


def test_clear_all(populated):
    """clear --all deletes every version's entries, the bundles and the stamp, and leaves a foreign file in place."""
    cache, _ = populated
    assert (cache / size.STAMP).exists()
    run = run_cli(cache, "clear", "--all")
    assert run.rc == 0, run.stderr
    assert sorted(os.listdir(cache)) == ["CACHEDIR.TAG", "bundle-notes.txt", "notes.txt"]
    assert (cache / "notes.txt").read_text() == "not Tack's"


def test_clear_all_deletes_a_dead_packs_temporary_bundle_and_names_a_young_one(populated):
    """A pack that died left ``bundle-<name>.tmp.<pid>.<hex>`` in the cache directory, and clear
    --all left it there with no word.  One an hour old (its writer surely dead, the size check's
    rule) is deleted; a younger one (a pack may be writing it now) is kept and named."""
    cache, _ = populated
    head = (cache / "bundle-x86_64").read_bytes()
    old = cache / "bundle-x86_64-0123456789abcdef.tmp.99999.0badf00d"
    young = cache / "bundle-x86_64-0123456789abcdef.tmp.99998.0badf00e"
    old.write_bytes(head)
    young.write_bytes(head)
    os.utime(old, (time.time() - 7200,) * 2)
    run = run_cli(cache, "clear", "--all")
    assert run.rc == 0, run.stderr
    assert not old.exists()
    assert young.read_bytes() == head
    assert "pack's temporary file" in run.stdout and str(young) in run.stdout, run.stdout
    assert sorted(os.listdir(cache)) == ["CACHEDIR.TAG", "bundle-notes.txt", young.name, "notes.txt"]


@pytest.mark.parametrize("command", ["prune", "clear"])
def test_untrusted_directory_is_not_touched(populated, command):
    """prune and clear refuse a group-writable directory with a one-line error (exit 1) and delete nothing."""
    cache, _ = populated
    os.chmod(cache, 0o770)
    before = sorted(entry_files(cache))
    run = run_cli(cache, command, *(["--max-size", "1K"] if command == "prune" else []))
    assert run.rc == 1
    assert len(run.stderr.strip().splitlines()) == 1 and "writable by its group" in run.stderr
    assert sorted(entry_files(cache)) == before


@pytest.mark.parametrize("argv", [["frobnicate"], [], ["info", "--bogus"]])
def test_bad_usage_exits_2(argv, cache_dir):
    """An unknown command, no command or an unknown option exits with status 2."""
    run = run_cli(cache_dir, *argv)
    assert run.rc == 2
    assert "usage:" in run.stderr


@pytest.mark.parametrize("argv", [["clear", "--bogus"], ["prune", "--all"], ["info", "extra"]])
def test_a_commands_unknown_argument_gets_the_commands_usage(argv, cache_dir):
    """``clear --bogus`` printed the program's usage (``[-h] COMMAND ...``), which does not say
    what clear takes: argparse hands a subcommand's unknown arguments to the top-level parser."""
    run = run_cli(cache_dir, *argv)
    assert run.rc == 2
    assert run.stderr.startswith(f"usage: python -m tack.cache {argv[0]} [-h]"), run.stderr
    assert run.stderr.splitlines()[-1] == (f"python -m tack.cache {argv[0]}: error: "
                                           f"unrecognized arguments: {argv[1]}"), run.stderr


@pytest.mark.parametrize("argv", [["--help"], ["info", "--help"], ["prune", "--help"], ["clear", "--help"]])
def test_help(argv, capsys):
    """--help of the program and of each command prints usage and exits 0."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m tack.cache")
    if argv[0] != "--help":
        assert f"python -m tack.cache {argv[0]}" in out


@pytest.mark.parametrize("tool", ["tack.cache", "tack.site"])
def test_version_option(tool):
    """``--version`` (Spack, conda and ccache have one; Tack's tools had none: a usage error)
    prints Tack's version and the id of the version directory its entries are kept under, and
    exits 0."""
    import subprocess
    import sys
    from tack._version import __version__
    r = subprocess.run([sys.executable, "-m", tool, "--version"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == f"tack {__version__} (cache entries under {current_version()})\n", r.stdout


def test_version_is_this_checkout(populated):
    """The version directory the cache writes is tack_version_id() of this checkout."""
    cache, this = populated
    assert this == current_version()


def test_info_into_a_closed_pipe_is_not_an_error(tmp_path):
    """`info | head -0`: the reader leaves before info writes; exit status 0 and nothing on stderr."""
    import os as _os
    import subprocess as _sp
    import sys as _sys
    env = dict(_os.environ, TACK_CACHE_DIR=str(tmp_path / "c"))
    read_end, write_end = _os.pipe()
    _os.close(read_end)                                    # nobody will read
    proc = _sp.run([_sys.executable, "-m", "tack.cache", "info"], stdout=write_end,
                   stderr=_sp.PIPE, text=True, env=env, timeout=60)
    _os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    assert "Broken pipe" not in proc.stderr and "Error" not in proc.stderr


def test_clear_that_fails_names_the_path(populated):
    """clear that cannot delete (a read-only level, permissions enforced) exits 1 with one line
    naming the whole path at fault."""
    cache, this = populated
    level = cache / this / "variants"
    os.chmod(level, 0o500)
    try:
        run = run_cli(cache, "clear", preexec_fn=drop_dac_caps)
    finally:
        os.chmod(level, 0o700)
    assert run.rc == 1, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tack.cache: error: cannot delete "), lines
    assert str(level) in lines[0] and "Permission denied" in lines[0], lines


def test_info_on_a_regular_file(tmp_path):
    """TACK_CACHE_DIR naming a regular file: info says it is not used and why (not 'no cache
    directory yet'), and leaves the file alone."""
    path = tmp_path / "a-file"
    path.write_text("mine")
    run = run_cli(path, "info")
    assert run.rc == 0, run.stderr
    assert "no cache directory yet" not in run.stdout
    assert f"NOT USED: {path} is not a directory" in run.stdout, run.stdout
    data = json.loads(run_cli(path, "info", "--json").stdout)
    assert data["trusted"] is False and "not a directory" in data["untrusted_reason"]
    assert path.read_text() == "mine"


def test_info_with_a_fifo_as_the_size_stamp(populated):
    """A FIFO where the size check's stamp goes stopped ``info`` with an error (rc 1) and no
    report: info now reports the cache, says why no size check runs, and leaves the FIFO alone."""
    cache, _ = populated
    stamp = cache / "size-check.stamp"
    stamp.unlink(missing_ok=True)
    os.mkfifo(stamp)
    run = run_cli(cache, "info")
    assert run.rc == 0, run.stderr
    assert "entries:" in run.stdout and "last size check: never" in run.stdout, run.stdout
    assert f"{stamp} is a FIFO, not a regular file: no size check runs" in run.stdout, run.stdout
    data = json.loads(run_cli(cache, "info", "--json").stdout)
    assert data["total_entries"] > 0 and "FIFO" in data["size_check_problem"]
    assert stat.S_ISFIFO(os.lstat(stamp).st_mode)


def test_info_names_this_hosts_variants_as_pack_takes_them(warm):
    """The name info lists this host's variants under is one pack --arch takes (issue 22: info
    said cpu:host, pack refused it and named cpu:<microarchitecture>); cpu:host is taken too."""
    cache, _ = warm
    run = run_cli(cache, "info")
    assert run.rc == 0, run.stderr
    labels = [ln.split()[1] for ln in run.stdout.splitlines() if ln.strip().startswith("for ")]
    assert len(labels) == 1, run.stdout
    for i, arch in enumerate((labels[0], "cpu:host")):
        out = cache / f"b{i}"
        packed = run_cli(cache, "pack", "--arch", arch, "--output", str(out))
        assert packed.rc == 0, (arch, packed.stderr)
        assert f"for {labels[0]} " in packed.stdout and out.is_file(), packed.stdout


def test_versions_are_shown_short_and_keyed_whole(warm, monkeypatch):
    """A checkout's version (0.1.0+src. and 64 hex digits) is shown cut to 12 hex digits by info
    and clear, so their lines fit a terminal; the directory and --json keep the whole id."""
    from tack.cache import keys
    assert shown_version("0.1.0+src." + "ab" * 32) == "0.1.0+src." + "ab" * 6
    assert shown_version("0.1.0") == "0.1.0"
    cache, _ = warm
    (this,) = [d.name for d in cache.iterdir() if d.is_dir()]
    if "+src." not in this:
        pytest.skip("Tack runs as installed here (a release version, no '+src.' hash to shorten); "
                    "the shortening is a checkout's")
    short = shown_version(this)
    assert len(short.split("+src.")[1]) == 12
    info = run_cli(cache, "info")
    assert f"tack version: {short}" in info.stdout.splitlines() and this not in info.stdout
    assert all(len(ln) < 80 for ln in info.stdout.splitlines() if short in ln), info.stdout
    assert json.loads(run_cli(cache, "info", "--json").stdout)["tack_version"] == this
    cleared = run_cli(cache, "clear")
    assert cleared.rc == 0 and f"version {short}'s entries" in cleared.stdout, cleared.stdout
    assert this not in cleared.stdout


def _packed(cache):
    """{(kind, key)} of the bundles a pack wrote in ``cache``."""
    from tack.cache import bundle
    got = set()
    for p in cache.glob("bundle-*"):
        if p.name != "bundle-notes.txt":
            got |= set(bundle.read(str(p)).index)
    return got


def test_pack_leaves_out_entries_a_run_would_not_load(warm):
    """An entry others may write (mode 0666) is refused by every run, and was packed all the
    same: code anyone could have rewritten, then loaded from a bundle the run trusts."""
    cache, _ = warm
    from tack.cache import entry
    victim = entry_files(cache)[-1]
    victim.chmod(0o666)
    key = victim.name.split(".")[0]
    assert run_cli(cache, "pack").rc == 0
    packed = _packed(cache)
    assert packed and key not in {k for _, k in packed}


def test_a_second_pack_keeps_what_the_first_bundle_holds(warm):
    """pack, then entries gone from the directory (a clear: a run then loads them from the
    bundle), then pack again: the second bundle dropped them, and they compiled again."""
    cache, _ = warm
    assert run_cli(cache, "pack").rc == 0
    first = _packed(cache)
    for p in entry_files(cache)[: len(entry_files(cache)) // 2]:
        p.unlink()
    run = run_cli(cache, "pack")
    assert run.rc == 0, run.stderr
    assert _packed(cache) == first


def test_clear_all_leaves_a_users_own_directories(warm):
    """``clear --all`` in a directory that also holds the user's own (``2024/lowered/ab``,
    ``3d-models/lowered``: named like no version of Tack): they are left, as everything the
    cache did not make (they were removed, taken for old versions' directories)."""
    cache, _ = warm
    for d in ("2024/lowered/ab", "2024/variants", "3d-models/lowered"):
        (cache / d).mkdir(parents=True)
    (cache / "2024" / "README").write_text("mine")
    assert run_cli(cache, "clear", "--all").rc == 0
    for d in ("2024/lowered/ab", "2024/variants", "3d-models/lowered"):
        assert (cache / d).is_dir(), d
    assert entry_files(cache) == [] or all(p.parts[-4] in ("2024", "3d-models") for p in entry_files(cache))


def test_info_says_which_bundles_a_run_would_not_use(populated):
    """A bundle another Tack packed, and one others may write: info said "ok" for both while a
    run refused each; and a TACK_CACHE_BUNDLES entry a run ignores is said, as the run says it."""
    cache, this = populated
    from tack.cache import bundle_write
    (cache / "bundle-x86_64").write_bytes(bundle_write.pack([], {"arch": "znver3", "machine": "x86_64",
                                                                  "tack": "0.0.9"}))
    (cache / "bundle-aarch64").write_bytes(bundle_write.pack([], {"arch": "neoverse_n1", "machine": "aarch64",
                                                                   "tack": this}))
    (cache / "bundle-aarch64").chmod(0o666)
    run = run_cli(cache, "info", "--json", env={"TACK_CACHE_BUNDLES": "relative/bundles"})
    assert run.rc == 0, run.stderr
    info = json.loads(run.stdout)
    status = {b["name"]: b["status"] for b in info["bundles"]}
    assert status["bundle-x86_64"] == "stale" and status["bundle-aarch64"] == "untrusted", status
    assert any("relative/bundles" in w and "not an absolute path" in w for w in info["site_bundles_ignored"])
    text = run_cli(cache, "info", env={"TACK_CACHE_BUNDLES": "relative/bundles"}).stdout
    assert "STALE, not used: made by Tack 0.0.9" in text and "UNTRUSTED, not used" in text, text


def test_export_from_a_directory_counts_what_it_skips(warm, tmp_path):
    """A damaged entry in the cache directory: export skipped it and said nothing (from a bundle
    it said how many); now it counts them alike."""
    cache, _ = warm
    victim = next(p for p in entry_files(cache) if p.parts[-3] == "variants")
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))
    run = run_cli(cache, "export", str(cache), "--output", str(tmp_path / "out"))
    assert run.rc == 0, run.stderr
    assert "1 damaged entry skipped" in run.stdout, run.stdout


def test_export_of_a_bundle_counts_the_rows_of_a_damaged_index_block(warm, tmp_path):
    """A byte flipped in a packed bundle's index (its one block): every entry of the block is
    refused, which info says, and export said "exported 0 file(s)", counting no damage; it now
    counts them as the damaged entries it skipped."""
    from tack.cache import bundle
    cache, _ = warm
    assert run_cli(cache, "pack").rc == 0
    (path,) = sorted(cache.glob("bundle-*"))
    data = bytearray(path.read_bytes())
    _, _, count, per, mlen, _ = bundle._HEAD.unpack_from(data)
    index = bundle._HEAD.size + mlen + -(-count // per) * bundle._RECORD
    data[index + 5] ^= 1
    bad = tmp_path / "bad.bundle"
    bad.write_bytes(bytes(data))
    run = run_cli(cache, "export", str(bad), "--output", str(tmp_path / "out"))
    assert run.rc == 0, run.stderr
    assert f"{count} damaged entries skipped" in run.stdout, run.stdout


@pytest.mark.parametrize("env, line", [
    ({}, "under MPI:    bundle  (default)"),
    ({"TACK_CACHE_MPI": "read"}, "under MPI:    read  (TACK_CACHE_MPI)"),
    ({"TACK_CACHE": "off"}, "under MPI:    off  (TACK_CACHE)"),
    ({"TACK_CACHE": "write", "TACK_CACHE_MPI": "bundle"}, "under MPI:    bundle  (TACK_CACHE_MPI)"),
    ({"TACK_CACHE_MPI": "bogus"}, "under MPI:    bundle  (default: TACK_CACHE_MPI: 'bogus' is not a "
                                  "cache mode; use one of write, read, bundle, off; an MPI launch "
                                  "uses the default)"),
])
def test_info_shows_the_mode_under_mpi(tmp_path, env, line):
    """info, outside an MPI launch, shows the mode a job's ranks would use and what sets it (the
    rule a launch resolves by), and a bad TACK_CACHE_MPI, which only a launch warned of before;
    --json too."""
    cache = tmp_path / "cache"
    run = run_cli(cache, "info", env=env)
    assert run.rc == 0, run.stderr
    assert line in run.stdout.splitlines(), run.stdout
    as_json = json.loads(run_cli(cache, "info", "--json", env=env).stdout)
    mode, source = line.split()[2], line.split("(")[1].split(")")[0].split(":")[0]
    assert (as_json["mpi_mode"], as_json["mpi_mode_source"]) == (mode, source)
    assert (as_json["mpi_mode_problem"] is not None) == ("bogus" in line)


@pytest.mark.parametrize("args, option", [
    (["pack", "--output", ""], "--output"),
    (["export", "{cache}", "--output", ""], "--output"),
    (["export", "", "--output", "{out}"], "BUNDLE_OR_DIR"),
])
def test_an_empty_path_is_bad_usage(warm, tmp_path, args, option):
    """``pack --output "$OUTDIR"`` with OUTDIR unset packed into the cache directory, as if no
    --output were given; export wrote into the current directory.  Now an empty path is bad
    usage naming the argument (exit status 2), and nothing is written."""
    cache, _ = warm
    here = tmp_path / "here"
    here.mkdir()
    before = sorted(os.listdir(cache))
    run = run_cli(cache, *[a.format(cache=cache, out=tmp_path / "out") for a in args], cwd=here)
    assert run.rc == 2, (run.stdout, run.stderr)
    assert run.stderr.splitlines()[-1].endswith(
        f": error: argument {option}: an empty path (an unset variable?)"), run.stderr
    assert sorted(os.listdir(cache)) == before and os.listdir(here) == []
    assert not (tmp_path / "out").exists()


def test_a_pack_that_cannot_write_names_the_path_given_not_its_temporary_file(warm, tmp_path):
    """pack --output into a directory that is not there: the error named the temporary file
    (FILE.tmp.<pid>.<hex>); now the path given.  Into a directory it may not write: the
    bundle's own path there."""
    cache, _ = warm
    output = tmp_path / "no" / "such" / "mybundle"
    run = run_cli(cache, "pack", "--output", str(output))
    assert run.rc == 1, (run.stdout, run.stderr)
    assert run.stderr == f"tack.cache: error: cannot write {output}: No such file or directory\n", run.stderr
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o500)
    try:
        run = run_cli(cache, "pack", "--output", str(closed), preexec_fn=drop_dac_caps)
    finally:
        closed.chmod(0o700)
    assert run.rc == 1, (run.stdout, run.stderr)
    assert re.fullmatch(rf"tack\.cache: error: cannot write {re.escape(str(closed))}/bundle-[^/.]+-[0-9a-z_.-]+: "
                        r"Permission denied\n", run.stderr) and ".tmp." not in run.stderr, run.stderr


def test_export_says_which_path_it_cannot_read_and_an_output_that_is_a_file(warm, tmp_path):
    """A source that cannot be read (not there, a device) was reported as "cannot write
    SOURCE"; an --output that is a file got "it cannot be read (Not a directory); use --force",
    and with --force "cannot write ...: File exists".  Now each says what is wrong with which."""
    cache, _ = warm
    missing = tmp_path / "no-such-bundle"
    out = tmp_path / "out"
    run = run_cli(cache, "export", str(missing), "--output", str(out))
    assert (run.rc, run.stderr) == (1, f"tack.cache: error: cannot read {missing}: no such bundle "
                                       "or cache directory\n"), run.stderr
    run = run_cli(cache, "export", "/dev/zero", "--output", str(out))
    assert (run.rc, run.stderr) == (1, "tack.cache: error: cannot read /dev/zero: a character "
                                       "device, not a regular file\n"), run.stderr
    assert not out.exists()
    assert run_cli(cache, "pack").rc == 0
    (packed,) = [p for p in cache.glob("bundle-*")]
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    for force in ([], ["--force"]):
        run = run_cli(cache, "export", str(packed), "--output", str(a_file), *force)
        assert (run.rc, run.stderr) == (1, f"tack.cache: error: --output {a_file} is not a "
                                           "directory\n"), (force, run.stderr)
    assert a_file.read_text() == "mine"
    run = run_cli(cache, "export", str(packed), "--output", str(out))
    assert run.rc == 0 and run.stdout.endswith(f"to {out}\n"), run.stderr


def test_info_says_when_a_missing_cache_directory_can_never_be_made(tmp_path):
    """``info`` said "no cache directory yet (created when a kernel is first stored)" of a
    directory below a file, which no store can make (every run warned "Not a directory"), and of
    one below a directory others may write, which the runtime refuses: it now says NOT USED and
    why; a plain missing directory is still "no cache directory yet".  ``prune --help`` printed
    "90%%"."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    run = run_cli(afile / "sub" / "cache", "info")
    assert run.rc == 0 and f"NOT USED: {afile} is not a directory" in run.stdout, run.stdout
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    try:
        run = run_cli(shared / "cache", "info")
        assert run.rc == 0 and "NOT USED" in run.stdout and "sticky" in run.stdout, run.stdout
        data = json.loads(run_cli(shared / "cache", "info", "--json").stdout)
        assert data["trusted"] is False and "sticky" in data["untrusted_reason"]
    finally:
        os.chmod(shared, 0o755)
    run = run_cli(tmp_path / "new" / "cache", "info")
    assert "status:       no cache directory yet" in run.stdout, run.stdout
    run = run_cli(tmp_path / "new" / "cache", "prune", "--help")
    assert "until 90% of" in " ".join(run.stdout.split()) and "%%" not in run.stdout


def test_pack_takes_the_name_info_lists_for_a_devices_driver_built_code(tmp_path):
    """A device's driver-built code (OpenCL's program binary, stored back under the device's key)
    is listed by info as ``opencl:0``, and pack's 'no entries' message named it among what the
    cache holds, yet ``pack --arch opencl:0`` was refused: opencl is no kind code is built for.
    The name info lists is one pack takes; a kind that is nobody's name is still refused."""
    import tack.aot
    from tack.kernels.contour import tack_warm
    kernel, args, grid = tack_warm((8, 8, 8))[0]
    a = tack.aot.compile(kernel, "cpu:x86_64_v3", args, grid=grid)
    # as opencl_runtime.store_back describes the driver's build: another key, the device's arch
    driver_built = a._replace(key="d" * 64, meta=dict(a.meta, arch="opencl:0", target_key="e" * 64))
    cache = tmp_path / "cache"
    tack.aot.save([a, driver_built], str(cache))
    info = run_cli(cache, "info")
    assert info.rc == 0, info.stderr
    labels = {ln.split()[1] for ln in info.stdout.splitlines() if ln.strip().startswith("for ")}
    assert labels == {"cpu:x86_64_v3", "opencl:0"}, info.stdout
    out = tmp_path / "b"
    packed = run_cli(cache, "pack", "--arch", "opencl:0", "--output", str(out))
    assert packed.rc == 0, packed.stderr
    assert "for opencl:0 " in packed.stdout and out.is_file(), packed.stdout
    typo = run_cli(cache, "pack", "--arch", "opencl:1", "--output", str(tmp_path / "c"))
    assert typo.rc == 1 and "unknown kind 'opencl'" in typo.stderr, typo.stderr
    assert not (tmp_path / "c").exists()


def test_export_splits_an_opencl_drivers_binary_from_its_spirv(tmp_path):
    """The program binary an OpenCL driver built, stored back with its SPIR-V in Level Zero's
    container (opencl_runtime.store_back), was exported whole as one .spv.clbin file no tool
    reads; export writes each part, .spv and .clbin, as it does Level Zero's .spv and .zebin."""
    import tack.aot
    from tack.backends.gpu import pack_level_zero
    from tack.kernels.contour import tack_warm
    kernel, args, grid = tack_warm((8, 8, 8))[0]
    a = tack.aot.compile(kernel, "cpu:x86_64_v3", args, grid=grid)
    spirv, binary = b"\x03\x02\x23\x07" + b"s" * 60, b"\x7fELF" + b"b" * 60
    driver_built = a._replace(key="d" * 64, payload=pack_level_zero(spirv, binary),
                              meta=dict(a.meta, backend="opencl", arch="opencl:0", suffix=".spv.clbin",
                                        target_key="e" * 64))
    cache = tmp_path / "cache"
    tack.aot.save([driver_built], str(cache))
    out = tmp_path / "out"
    run = run_cli(cache, "export", str(cache), "--output", str(out))
    assert run.rc == 0, run.stderr
    got = {p.name.rsplit("-", 1)[0] + p.name[p.name.index("."):]: p.read_bytes() for p in out.iterdir()}
    assert got == {f"{a.meta['kernel'].rsplit('.', 1)[-1]}-opencl-0.spv": spirv,
                   f"{a.meta['kernel'].rsplit('.', 1)[-1]}-opencl-0.clbin": binary}, sorted(got)


def test_info_lists_site_bundles_without_a_cache_directory_and_says_an_untrusted_site_is_not_used(
        tmp_path):
    """``info`` stopped at "no cache directory yet", listing no site bundle, where a new user of
    a site (nothing in their home yet) asks what serves them; and it listed the bundles of a
    site directory others may write as usable, where every job refuses them."""
    from tack.cache import bundle_write
    site = tmp_path / "site"
    site.mkdir()
    os.chmod(site, 0o755)
    name = "bundle-x86_64-cpu-x86_64_v3-0123456789ab"
    (site / name).write_bytes(bundle_write.pack([], {"arch": "cpu:x86_64_v3", "machine": "x86_64",
                                                      "tack": "another"}))
    env = {"TACK_CACHE_BUNDLES": str(site)}
    run = run_cli(tmp_path / "none", "info", env=env)
    assert run.rc == 0 and "status:       no cache directory yet" in run.stdout, run.stdout
    assert f"site bundles: {site} (1)\n  {name}" in run.stdout, run.stdout
    os.chmod(site, 0o777)
    run = run_cli(tmp_path / "none", "info", env=env)
    assert (f"site bundles: {site} (1)  NOT USED: the directory {site} is writable by its group "
            "and others (mode 0777)") in run.stdout, run.stdout
    run = run_cli(tmp_path / "none", "info", "--json", env=env)
    (listed,) = json.loads(run.stdout)["site_bundles"]
    assert "writable by its group and others" in listed["untrusted"]
    os.chmod(site, 0o755)


def test_info_counts_only_what_prune_and_the_limit_count(populated):
    """A file named like an entry that the cache did not write is neither counted against the
    limit nor deleted; info counted it (listed as a damaged variant), so it said a cache was
    over a limit that prune said it was under.  It is listed apart now, and the totals agree."""
    cache, this = populated
    (fan,) = [p for p in (cache / this / "variants").iterdir()][:1]
    foreign = fan / ("ab" * 32 + ".tvar")
    foreign.write_bytes(os.urandom(100_000))
    info = json.loads(run_cli(cache, "info", "--json").stdout)
    assert info["total_entries"] == 12
    assert info["total_bytes"] == sum(p.stat().st_size for p in entry_files(cache)) - 100_000
    assert info["not_entries"] == {"files": 1, "bytes": 100_000}
    assert "damaged" not in info["versions"][this].get("targets", {})
    run = run_cli(cache, "info")
    assert "  not counted: 1 file(s) named like entries that the cache did not write" in run.stdout
    limit = info["total_bytes"] + 50_000                # over it with the file, under without
    pruned = run_cli(cache, "prune", "--max-size", str(limit))
    assert pruned.rc == 0 and "pruned 0 entries" in pruned.stdout, pruned.stdout
    assert foreign.exists()


def test_two_clears_at_once_neither_fails_nor_calls_the_cache_s_files_foreign(populated, monkeypatch):
    """Two ``clear``s (or a clear and a prune) at once: the second's listing met directories the
    first had removed (``FileNotFoundError``: exit 1), and the files the first deleted under its
    feet were listed "left in place, not recognizable as the cache's own".  Here the other clear
    runs whole at this one's first deletion; this one then finds gone what it listed, and says
    nothing of it."""
    cache, this = populated
    real, others = size.delete_own, []

    def another_clear_meanwhile(path):
        if not others:
            others.append(None)
            others[0] = cli.clear_version(str(cache), this)
        return real(path)
    monkeypatch.setattr(size, "delete_own", another_clear_meanwhile)
    deleted, kept = cli.clear_version(str(cache), this)
    (other_deleted, other_kept), = others
    assert kept == [] and other_kept == [], (kept, other_kept)
    assert deleted + other_deleted == 6 and other_deleted >= 5
    assert not (cache / this).exists()
    assert sorted(e[3] for e in size.entries(str(cache))) == [OTHER_VERSION] * 6


@pytest.mark.parametrize("name", ["size-check.stamp", "size-check.claim"])
def test_a_size_check_file_that_is_a_directory_is_said_as_it_is(populated, name, tmp_path):
    """A directory where the size check keeps its stamp or claim: each storing process said
    "cannot check the kernel cache's size ...; trying again in an hour", though no check ever
    runs until it is removed (nothing can record one), and ``info`` said nothing of a claim so.
    The warning now says that, and how to remove it; ``info`` names the claim as it names the
    stamp."""
    from .conftest import child_env
    import subprocess
    import sys
    cache, src = populated
    path = cache / name
    path.unlink(missing_ok=True)
    path.mkdir()
    for f in cache.glob("size-check.*"):
        if f != path and f.is_file():
            f.unlink()
    code = ("import warnings, numpy as np, tack\nwarnings.simplefilter('always')\n"
            "@tack.kernel\ndef k_new_one(a, out):\n    i = tack.tid()\n    out[i] = a[i] * 7.0 + 3.0\n"
            "out = np.zeros(4)\ntack.launch(k_new_one, dim=4, args=(np.arange(4.0), out))\n"
            "assert out.tolist() == [3.0, 10.0, 17.0, 24.0]\n")
    script = tmp_path / "store_one.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], env=child_env(cache, TACK_CACHE_SIZE="1K"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "trying again in an hour" not in p.stderr, p.stderr
    assert (f"{path} is a directory, not a regular file, where the size check keeps its own file; "
            f"no size check runs until it is removed (rm -r {path})") in p.stderr, p.stderr
    run = run_cli(cache, "info")
    assert run.rc == 0 and f"{path} is a directory, not a regular file: no size check runs" in run.stdout, run.stdout
    assert path.is_dir()


def test_info_on_a_cache_directory_its_owner_cannot_list(populated):
    """A cache directory of mode 0300 (searchable, not readable) serves and stores as usual, but
    ``info`` stopped with "error: ...: Permission denied" (rc 1) and no settings: it now reports
    the settings, says the entries cannot be listed and why, and exits 0."""
    cache, _ = populated
    os.chmod(cache, 0o300)
    try:
        run = run_cli(cache, "info", preexec_fn=drop_dac_caps)
        data = json.loads(run_cli(cache, "info", "--json", preexec_fn=drop_dac_caps).stdout)
    finally:
        os.chmod(cache, 0o700)
    assert run.rc == 0, run.stderr
    assert f"directory:    {cache}" in run.stdout
    assert f"entries:      not counted: cannot list {cache} (Permission denied)" in run.stdout, run.stdout
    assert data["unlisted"] == f"cannot list {cache} (Permission denied)" and data["total_entries"] is None
    assert "last size check: " in run.stdout and "bundles:      not listed" in run.stdout, run.stdout


def test_info_says_a_size_check_is_claimed_and_a_stamp_of_time_zero_is_a_time(populated):
    """A claim a pruner left when it was killed blocks the size checks for up to ten minutes,
    and ``info`` said nothing of it: it now says since when a check is claimed.  A stamp dated
    0 (the epoch) was shown as "never"."""
    cache, _ = populated
    claim, stamp = cache / "size-check.claim", cache / "size-check.stamp"
    claim.write_text("")
    stamp.write_text("")
    os.utime(stamp, (0, 0))
    run = run_cli(cache, "info")
    assert run.rc == 0, run.stderr
    assert "last size check: never" not in run.stdout, run.stdout
    assert "  a size check is claimed since " in run.stdout and "10 minutes" in run.stdout, run.stdout
    assert json.loads(run_cli(cache, "info", "--json").stdout)["size_check_claimed"] == os.stat(claim).st_mtime
