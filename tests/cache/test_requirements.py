"""Requirements of the cache that no other test checks: Tack's version id, timing stats, removal of damaged
entries, trust messages and levels, platform default directories, LRU marks in read mode, logging through
the ``tack.cache`` logger, a directory that vanishes, and configure()'s errors."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tack._version
import tack.cache

from .conftest import (KMOD, check_results, child_env, compiled, decode_entry, loaded, one_entry,
                       run_child, snapshot, write_module)

HOUR = 3600
VERSION = tack._version.__version__
PACKAGE = Path(tack.__file__).parent


# ---------------------------------------------------------------------------------------------
# 1. Tack's version id: a release's version, or a checkout's version plus a hash of its sources
# ---------------------------------------------------------------------------------------------

def copy_package(parent: Path) -> Path:
    """Copy the ``tack`` package (without __pycache__) into ``parent``; -> the copy's package directory."""
    parent.mkdir(parents=True, exist_ok=True)
    dst = parent / "tack"
    shutil.copytree(PACKAGE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def version_id_of(parent: Path, cwd: Path) -> str:
    """tack.cache.keys.tack_version_id() as a new process computes it with ``parent`` first on sys.path."""
    code = "import tack, tack.cache.keys as k; print(tack.__file__); print(k.tack_version_id())"
    p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=child_env(None, PYTHONPATH=str(parent)),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    where, version_id = p.stdout.strip().splitlines()[-2:]
    assert Path(where).parent == parent / "tack", f"imported {where}, not the copy in {parent}"
    return version_id


def test_installed_release_version_id_is_the_version(tmp_path):
    """A copy of the package with no pyproject.toml or .git beside it (an installed release) has exactly __version__ as its id."""
    site = tmp_path / "site-packages"
    copy_package(site)
    assert version_id_of(site, tmp_path) == VERSION


def test_installed_version_id_is_the_wheels_record_of_its_sources(tmp_path):
    """An installed Tack (a wheel's RECORD beside it) was only __version__, so a reinstall of
    another commit under the same number served the old commit's entries.  Its id is
    <version>+rec.<hash of RECORD's lines for tack's .py files>: the same for any install of the
    same wheel (other lines, the order, a relocated prefix's scripts do not count), another for
    another source."""
    site = tmp_path / "site-packages"
    copy_package(site)
    info = site / f"tack-{VERSION}.dist-info"
    info.mkdir()
    lines = ["tack/__init__.py,sha256=AAAA,100", "tack/api.py,sha256=BBBB,200",
             "tack/cache/keys.py,sha256=CCCC,300"]
    other = [f"tack-{VERSION}.dist-info/RECORD,,", "tack/__pycache__/api.cpython-311.pyc,,",
             "../../../bin/tack-demo,sha256=DDDD,50"]
    (info / "RECORD").write_text("\n".join(lines + other) + "\n")
    base = version_id_of(site, tmp_path)
    assert re.fullmatch(re.escape(VERSION) + r"\+rec\.[0-9a-f]{64}", base), base
    (info / "RECORD").write_text("\n".join(other[::-1] + ["../bin/other,sha256=EEEE,9"] + lines[::-1]))
    assert version_id_of(site, tmp_path) == base
    (info / "RECORD").write_text("\n".join(lines[:2] + ["tack/cache/keys.py,sha256=CCCD,300"] + other))
    edited = version_id_of(site, tmp_path)
    assert edited != base and edited.startswith(f"{VERSION}+rec.")
    from tack.cache.keys import shown_version
    assert shown_version(edited) == edited[:len(VERSION) + 5 + 12]
    from tack.cache.size import _version_name
    assert _version_name(os.path.basename(edited)) and _version_name(base)

def test_checkout_version_id_tracks_source_edits_not_pycache(tmp_path):
    """A checkout's id is <version>+src.<hash>: stable, unchanged by __pycache__ contents, changed by a new mtime or size of a source file."""
    checkout = tmp_path / "checkout"
    pkg = copy_package(checkout)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'tack'\n")

    base = version_id_of(checkout, tmp_path)
    assert re.fullmatch(re.escape(VERSION) + r"\+src\.[0-9a-f]{64}", base), base
    assert version_id_of(checkout, tmp_path) == base

    # Whatever a __pycache__ holds (byte code, even a stray .py) is not part of the sources.
    pycache = pkg / "cache" / "__pycache__"
    pycache.mkdir()
    (pycache / "keys.cpython-311.pyc").write_bytes(b"\0" * 100)
    (pycache / "stray.py").write_text("x = 1\n")
    assert version_id_of(checkout, tmp_path) == base

    # A source file touched with a new modification time, its bytes the same.
    touched = pkg / "cache" / "size.py"
    st = touched.stat()
    os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    after_touch = version_id_of(checkout, tmp_path)
    assert after_touch != base and after_touch.startswith(f"{VERSION}+src.")

    # A source file whose size changes, its modification time put back.
    grown = pkg / "backends" / "cpu.py"
    st = grown.stat()
    with open(grown, "a") as f:
        f.write("\n# edited\n")
    os.utime(grown, ns=(st.st_atime_ns, st.st_mtime_ns))
    after_growth = version_id_of(checkout, tmp_path)
    assert after_growth not in (base, after_touch) and after_growth.startswith(f"{VERSION}+src.")


# ---------------------------------------------------------------------------------------------
# 2. stats(): seconds spent loading and storing
# ---------------------------------------------------------------------------------------------

def test_stats_count_load_and_store_seconds(tmp_path, cache_dir):
    """store_seconds > 0 in a process that stored entries; load_seconds > 0 in a fresh process that loaded its variant."""
    src = write_module(tmp_path / "src", KMOD)
    launches = [{"kernel": "k_other", "n": 5}]
    cold = run_child(cache_dir, src, launches)
    check_results(cold)
    assert cold.stats["bytes_written"] > 0
    assert cold.stats["store_seconds"] > 0
    warm = run_child(cache_dir, src, launches)
    check_results(warm)
    assert loaded(warm.result("k_other"))
    assert warm.stats["hits"]["variant"] == 1
    assert warm.stats["load_seconds"] > 0


# ---------------------------------------------------------------------------------------------
# 3. Damaged entries: removed in write mode, left alone in read mode
# ---------------------------------------------------------------------------------------------

# k_main's variant is damaged, its lowered entry rejected (OFFSET changed) and the front end fails on the new
# OFFSET: nothing is stored again for k_main, so whether the damaged file was removed is plain to see.
NO_RESTORE = '''
mod.OFFSET = "not a constant"
try:
    tack.launch(mod.k_main, 5, (np.arange(5.0), np.zeros(5)))
    extra = "ran"
except Exception as e:
    extra = type(e).__name__
'''


def damage(path: Path) -> bytes:
    """Truncate an entry to half its length; -> the damaged bytes."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path.read_bytes()


def test_damaged_entry_is_removed_in_write_mode(warm):
    """In write mode a damaged variant entry is deleted when read, even when the kernel then fails to compile and nothing replaces it."""
    cache, src = warm
    victim = one_entry(cache, "variants", "k_main")
    damage(victim)
    run = run_child(cache, src, [], prelude=NO_RESTORE)
    assert run.data["extra"] == "CompileError", run.data["extra"]
    assert run.stats["damaged"] == 1
    assert run.stats["bytes_written"] == 0
    assert not victim.exists()


def test_damaged_entry_is_replaced_in_write_mode(warm):
    """In write mode, after a run that met a damaged variant entry, its damaged bytes are gone: a valid entry is in its place."""
    cache, src = warm
    victim = one_entry(cache, "variants", "k_main")
    bad = damage(victim)
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}])
    check_results(run)
    assert compiled(run.result("k_main")) and run.stats["damaged"] == 1
    assert victim.read_bytes() != bad
    _, meta, _ = decode_entry(victim)
    assert meta["kernel"].endswith("k_main")


def test_damaged_entry_is_left_alone_in_read_mode(warm):
    """TACK_CACHE=read: a damaged variant entry is ignored (the kernel compiles, right) but left exactly as it was."""
    cache, src = warm
    victim = one_entry(cache, "variants", "k_main")
    bad = damage(victim)
    before = snapshot(cache)
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}], env={"TACK_CACHE": "read"})
    check_results(run)
    assert compiled(run.result("k_main")) and run.stats["damaged"] == 1
    assert victim.read_bytes() == bad
    assert snapshot(cache) == before


# ---------------------------------------------------------------------------------------------
# 4, 5. Trust: the warning says how to fix it, and every level below the version directory is checked
# ---------------------------------------------------------------------------------------------

def test_group_writable_directory_warning_says_how_to_fix(warm):
    """The warning about a group-writable cache directory names it and says to run chmod go-w on it."""
    cache, src = warm
    os.chmod(cache, 0o775)
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}])
    check_results(run)
    assert len(run.warnings) == 1, run.warnings
    message = run.warnings[0]["message"]
    assert "chmod go-w" in message and str(cache) in message, message


def variants_level(cache):
    (level,) = cache.glob("*/variants")
    return level


def fan_of_k_main(cache):
    return one_entry(cache, "variants", "k_main").parent


@pytest.mark.parametrize("level", [variants_level, fan_of_k_main], ids=["variants", "fan"])
def test_untrusted_level_below_version_directory(level, warm):
    """A group-writable variants/ or two-hex-digit fan directory: one warning naming it with its fix, no variant loaded, right results."""
    cache, src = warm
    target = level(cache)
    os.chmod(target, 0o770)
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}])
    check_results(run)
    assert compiled(run.result("k_main"))
    assert run.stats["hits"]["variant"] == 0
    assert len(run.warnings) == 1, run.warnings
    message = run.warnings[0]["message"]
    assert run.warnings[0]["category"] == "TackWarning"
    assert "writable by its group" in message and f"chmod go-w {target}" in message, message


# ---------------------------------------------------------------------------------------------
# 6. The platform's default directory
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def home(monkeypatch, tmp_path):
    """No TACK_CACHE_DIR, XDG_CACHE_HOME or LOCALAPPDATA; HOME is a fresh directory."""
    h = tmp_path / "home"
    h.mkdir()
    for var in ("TACK_CACHE_DIR", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(h))
    return h


def test_default_directory_on_macos(home, monkeypatch):
    """On macOS the default directory is ~/Library/Caches/tack, and settings() uses it."""
    monkeypatch.setattr(sys, "platform", "darwin")
    want = os.path.join(str(home), "Library", "Caches", "tack")
    assert tack.cache.default_directory() == want
    assert tack.cache.settings().directory == want


def test_default_directory_on_windows(home, monkeypatch, tmp_path):
    """On Windows the default directory is %LOCALAPPDATA%\\tack\\Cache (and ~/AppData/Local/tack/Cache without it)."""
    monkeypatch.setattr(sys, "platform", "win32")
    assert tack.cache.default_directory() == os.path.join(str(home), "AppData", "Local", "tack", "Cache")
    local = tmp_path / "LocalAppData"
    monkeypatch.setenv("LOCALAPPDATA", str(local))
    assert tack.cache.default_directory() == os.path.join(str(local), "tack", "Cache")


def test_default_directory_on_linux_honours_only_absolute_xdg(home, monkeypatch, tmp_path):
    """On Linux an absolute XDG_CACHE_HOME gives $XDG_CACHE_HOME/tack; a relative one is ignored (~/.cache/tack)."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tack.cache.default_directory() == os.path.join(str(tmp_path / "xdg"), "tack")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")
    assert tack.cache.default_directory() == os.path.join(str(home), ".cache", "tack")
    assert tack.cache.settings().directory == os.path.join(str(home), ".cache", "tack")


def test_an_xdg_cache_home_with_a_control_character_is_ignored_as_a_relative_one(home, monkeypatch,
                                                                                tmp_path):
    """An XDG_CACHE_HOME holding a newline was used as it was (a directory named ``x<newline>y``),
    where TACK_CACHE_DIR's check refuses one so: it is ignored, as a relative one is."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x\ny"))
    assert tack.cache.default_directory() == os.path.join(str(home), ".cache", "tack")


def test_without_any_home_the_default_is_a_directory_of_the_users_in_the_temporary_one(home, monkeypatch):
    """HOME unset and an account the password database lacks (a container's arbitrary uid):
    ``~`` stays ``~``, and the default cache was ``~/.cache/tack``, made below the working
    directory.  It is a directory of the user's in the system's temporary directory."""
    import tempfile
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("HOME")
    monkeypatch.setattr(os.path, "expanduser", lambda p: p)
    import pwd
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))
    got = tack.cache.default_directory()
    assert got == os.path.join(tempfile.gettempdir(), f"tack-cache-{os.getuid()}") and os.path.isabs(got)


def test_a_cache_directory_in_the_home_of_no_account_is_refused(monkeypatch):
    """TACK_CACHE_DIR='~nosuchuser/x' (a user with no account here) made a directory named
    '~nosuchuser' in the working directory, silently: it is refused, naming the user, as an
    unset $VAR is, and the default used."""
    with pytest.raises(ValueError, match="names the home of user 'nosuchuser', who has no account here"):
        tack.cache.check_cache_directory("~nosuchuser/x", "TACK_CACHE_DIR")
    assert tack.cache.check_cache_directory("~/x", "TACK_CACHE_DIR") == os.path.join(os.path.expanduser("~"), "x")


# 7. Read mode marks loaded entries used: test_size.py, test_loading_marks_old_entries_used[read]


# ---------------------------------------------------------------------------------------------
# 8. Logging through the standard ``tack.cache`` logger, without TACK_CACHE_LOG
# ---------------------------------------------------------------------------------------------

DEBUG_LOGGING = "import logging\nlogging.basicConfig(level=logging.DEBUG)\n"


def cache_log_lines(stderr: str) -> list:
    return [ln for ln in stderr.splitlines() if ln.startswith("DEBUG:tack.cache:")]


def test_debug_logging_without_tack_cache_log(tmp_path, cache_dir):
    """With logging configured at DEBUG (and no TACK_CACHE_LOG), tack.cache logs a cold kernel's entry as missing and a warm one as loaded."""
    src = write_module(tmp_path / "src", KMOD)
    launches = [{"kernel": "k_other", "n": 5}]
    cold = run_child(cache_dir, src, launches, prelude=DEBUG_LOGGING)
    check_results(cold)
    lines = cache_log_lines(cold.stderr)
    assert any("k_other" in ln and "missing" in ln for ln in lines), cold.stderr
    assert not any("loaded" in ln for ln in lines), cold.stderr

    warm = run_child(cache_dir, src, launches, prelude=DEBUG_LOGGING)
    check_results(warm)
    assert loaded(warm.result("k_other"))
    lines = cache_log_lines(warm.stderr)
    assert any("k_other" in ln and "loaded from the cache" in ln for ln in lines), warm.stderr


# ---------------------------------------------------------------------------------------------
# 9. A cache directory removed while the process runs
# ---------------------------------------------------------------------------------------------

VANISH = '''
import os, shutil
shutil.rmtree(os.environ["TACK_CACHE_DIR"])
out = np.zeros(5)
tack.launch(mod.k_other, 5, (np.arange(5.0), out))
extra = out.tolist()
'''


def test_directory_removed_while_running(tmp_path, cache_dir):
    """The cache directory deleted after a first kernel stored its entries: a second kernel runs right, no exception, at most one warning."""
    src = write_module(tmp_path / "src", KMOD)
    run = run_child(cache_dir, src, [{"kernel": "k_main", "n": 5}], after=VANISH)
    assert run.rc == 0, run.stderr
    check_results(run)
    assert run.data["extra"] == [a * a - 1.0 for a in range(5)]
    assert run.stats["misses"]["variant"] == 2
    assert len(run.warnings) <= 1, run.warnings
    assert all(w["category"] == "TackWarning" for w in run.warnings)


# ---------------------------------------------------------------------------------------------
# 10. configure(): a bad value names its parameter, and a call with one bad value changes nothing
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    ({"mode": "bogus"}, "mode"),
    ({"max_size": "12Q"}, "max_size"),
    ({"directory": ""}, "directory"),
])
def test_configure_error_names_the_parameter(kwargs, name):
    """configure() with a bad value raises a ValueError whose message names the parameter."""
    with pytest.raises(ValueError) as info:
        tack.cache.configure(**kwargs)
    assert re.search(rf"\b{name}\b", str(info.value)), str(info.value)


@pytest.mark.parametrize("value", [5, 2.5, ["/tmp/x"]])
def test_configure_a_directory_that_is_no_path_says_its_type(value):
    """configure(directory=5) said the directory "must be a non-empty path"; it says it is a
    path's type that is wanted, naming the parameter and what was given."""
    with pytest.raises(ValueError) as info:       # as every bad value of configure's
        tack.cache.configure(directory=value)
    msg = str(info.value)
    assert "configure(directory=...)" in msg and "a str or os.PathLike" in msg, msg
    assert type(value).__name__ in msg and "non-empty" not in msg, msg


def test_configure_with_one_bad_value_changes_nothing(tmp_path, cache_dir):
    """configure() with good values beside a bad one raises and applies none of them."""
    good = tmp_path / "configured"
    with pytest.raises(ValueError):
        tack.cache.configure(directory=good, mode="bogus")
    with pytest.raises(ValueError):
        tack.cache.configure(mode="read", max_size="12Q")
    s = tack.cache.settings()
    assert s.directory == str(cache_dir) != str(good)
    assert s.mode == "write"
    assert s.sources == {"directory": "environment", "mode": "default", "max_size": "default"}


def test_cache_directory_expands_variables(home, monkeypatch, tmp_path):
    """TACK_CACHE_DIR=$SCRATCH/$USER/tack (as a site config writes it, and as Spack's modules export
    it unexpanded) names the expanded directory; an unset variable is a warning naming it, and
    the default directory is used."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("USER", "me")
    monkeypatch.setenv("TACK_CACHE_DIR", "$SCRATCH/${USER}/tack-cache")
    tack.cache._reset_for_tests()
    assert tack.cache.settings().directory == str(tmp_path / "scratch" / "me" / "tack-cache")
    monkeypatch.setenv("TACK_CACHE_DIR", "~/tack-cache")
    tack.cache._reset_for_tests()
    assert tack.cache.settings().directory == str(home / "tack-cache")
    monkeypatch.delenv("SCRATCH")
    monkeypatch.setenv("TACK_CACHE_DIR", "$SCRATCH/tack-cache")
    tack.cache._reset_for_tests()
    with pytest.warns(RuntimeWarning, match=r"TACK_CACHE_DIR: '\$SCRATCH/tack-cache' names \$SCRATCH, "
                                            r"which is not set; using the default"):
        assert tack.cache.settings().directory == os.path.join(str(home), ".cache", "tack")
    tack.cache._reset_for_tests()
    # An empty variable named the root's /tack-cache, silently (as root, a directory it trusts)
    monkeypatch.setenv("SCRATCH", "")
    with pytest.warns(RuntimeWarning, match=r"TACK_CACHE_DIR: '\$SCRATCH/tack-cache' names \$SCRATCH, "
                                            r"which is empty; using the default"):
        assert tack.cache.settings().directory == os.path.join(str(home), ".cache", "tack")
    tack.cache._reset_for_tests()


def test_bundle_directories_expand_variables(tmp_path):
    """TACK_CACHE_BUNDLES entries expand $VAR and ~ as TACK_CACHE_DIR does; an entry naming an
    unset variable is left out with a warning naming it."""
    from tack.cache.stores import site_dirs
    said = []
    env = {"TACK_CACHE_BUNDLES": f"$ROOT/bundles:${{NOPE}}/b:{tmp_path}/plain",
           "ROOT": str(tmp_path / "apps")}
    assert site_dirs(env, said.append) == [str(tmp_path / "apps" / "bundles"), f"{tmp_path}/plain"]
    assert said == ["TACK_CACHE_BUNDLES: '${NOPE}/b' names $NOPE, which is not set; ignored"]
    said.clear()
    env.update(TACK_CACHE_BUNDLES="$EMPTY/b", EMPTY="")
    assert site_dirs(env, said.append) == []
    assert said == ["TACK_CACHE_BUNDLES: '$EMPTY/b' names $EMPTY, which is empty; ignored"]
