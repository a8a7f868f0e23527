"""The cache's settings: TACK_CACHE_DIR, TACK_CACHE, TACK_CACHE_SIZE, configure(), their precedence and bad values."""

import os
import pathlib
import subprocess
import sys
import warnings

import pytest
from hypothesis import given, settings as hypothesis_settings
from hypothesis import strategies as st

import tack.cache
import tack.cache as cfg

from .conftest import KMOD, check_results, compiled, import_file, loaded, run_child, snapshot, write_module

ROOT = str(pathlib.Path(__file__).resolve().parents[2])

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


def resolve_quietly():
    """tack.cache.settings(), failing on any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return tack.cache.settings()


def test_defaults(monkeypatch, tmp_path):
    """With nothing set, the directory is $XDG_CACHE_HOME/tack, the mode write and the limit 1 GiB, all from the defaults."""
    monkeypatch.delenv("TACK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    s = resolve_quietly()
    assert s.directory == str(tmp_path / "xdg" / "tack")
    assert (s.mode, s.max_size) == ("write", GiB)
    assert s.sources == {"directory": "default", "mode": "default", "max_size": "default"}


def test_default_directory_without_xdg(monkeypatch, tmp_path):
    """Without XDG_CACHE_HOME the default directory is ~/.cache/tack."""
    monkeypatch.delenv("TACK_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_quietly().directory == str(tmp_path / ".cache" / "tack")


@pytest.mark.parametrize("home", ["", " "])
def test_an_empty_home_is_the_accounts_home(monkeypatch, home):
    """HOME set but empty made the default directory /.cache/tack (expanduser's "/"), without a
    word; it is the account's home, as with HOME unset."""
    import pwd
    monkeypatch.delenv("TACK_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", home)
    want = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".cache", "tack")
    assert resolve_quietly().directory == want


@pytest.mark.parametrize("var, value, field, want", [
    ("TACK_CACHE_DIR", "/somewhere/else/tack", "directory", "/somewhere/else/tack"),
    ("TACK_CACHE", "read", "mode", "read"),
    ("TACK_CACHE", " OFF ", "mode", "off"),
    ("TACK_CACHE", "bundle", "mode", "bundle"),
    ("TACK_CACHE_SIZE", "500M", "max_size", 500 * MiB),
    ("TACK_CACHE_SIZE", "unlimited", "max_size", None),
])
def test_each_environment_variable(monkeypatch, var, value, field, want):
    """Each variable sets its setting, and settings().sources says it came from the environment."""
    monkeypatch.setenv(var, value)
    s = resolve_quietly()
    assert getattr(s, field) == want
    assert s.sources[field] == "environment"
    assert all(s.sources[k] == "default" for k in ("mode", "max_size") if k != field)


def test_configure_beats_environment(monkeypatch, tmp_path):
    """configure() values win over the environment for every setting, and sources says so."""
    monkeypatch.setenv("TACK_CACHE_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("TACK_CACHE", "read")
    monkeypatch.setenv("TACK_CACHE_SIZE", "2G")
    tack.cache.configure(directory=tmp_path / "from-configure", mode="off", max_size="4G")
    s = resolve_quietly()
    assert (s.directory, s.mode, s.max_size) == (str(tmp_path / "from-configure"), "off", 4 * GiB)
    assert s.sources == {"directory": "configure", "mode": "configure", "max_size": "configure"}


def test_configure_one_setting_leaves_the_others_to_environment_and_default(monkeypatch):
    """configure(max_size=...) alone leaves the directory and mode to the environment, and sources tells each apart."""
    monkeypatch.setenv("TACK_CACHE", "read")
    tack.cache.configure(max_size="10M")
    s = resolve_quietly()
    assert (s.mode, s.max_size) == ("read", 10 * MiB)
    assert s.sources == {"directory": "environment", "mode": "environment", "max_size": "configure"}


@pytest.mark.parametrize("var, value, field, default", [
    ("TACK_CACHE", "bogus", "mode", "write"),
    ("TACK_CACHE_SIZE", "12Q", "max_size", GiB),
    ("TACK_CACHE_SIZE", "-5M", "max_size", GiB),
    ("TACK_CACHE_SIZE", "0", "max_size", GiB),        # was taken: each store deleted every entry
    ("TACK_CACHE_SIZE", "0.0G", "max_size", GiB),
    ("TACK_CACHE_DIR", "$TACK_NOT_SET_22/dir", "directory", None),
])
def test_bad_environment_value_warns_and_uses_default(monkeypatch, tmp_path, var, value, field, default):
    """A bad environment value is one RuntimeWarning naming the variable, and the default is used."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(var, value)
    with pytest.warns(RuntimeWarning) as record:
        s = tack.cache.settings()
    assert len(record) == 1
    assert var in str(record[0].message)
    want = str(tmp_path / "xdg" / "tack") if field == "directory" else default
    assert getattr(s, field) == want
    assert s.sources[field] == "default"


def test_zero_size_says_it_keeps_no_entry(monkeypatch):
    """A size limit of 0 (ccache's "no limit") is refused where it is set, saying what it would do
    and what to set instead, as the site config refuses ``cache.size: 0``: taken, it made every
    store delete every entry of every Tack version."""
    with pytest.raises(ValueError, match=r"configure\(max_size=...\): 0 keeps no entry"):
        tack.cache.configure(max_size=0)
    monkeypatch.setenv("TACK_CACHE_SIZE", "0")
    with pytest.warns(RuntimeWarning, match=r"TACK_CACHE_SIZE: '0' keeps no entry: .*'unlimited' "
                      r"for no limit, or TACK_CACHE=read or off to store none\); using the default"):
        assert tack.cache.settings().max_size == GiB


@pytest.mark.parametrize("kwargs", [
    {"mode": "bogus"}, {"mode": 3}, {"max_size": "12Q"}, {"max_size": -1}, {"max_size": 1.5},
    {"max_size": 0}, {"max_size": "0M"},
    {"directory": "$TACK_NOT_SET_22/dir"}, {"directory": ""}, {"directory": 42},
])
def test_configure_bad_value_raises(kwargs):
    """configure() with a bad value raises ValueError and changes nothing."""
    with pytest.raises(ValueError):
        tack.cache.configure(**kwargs)
    assert set(resolve_quietly().sources.values()) <= {"environment", "default"}


def test_configure_after_first_compile_raises(tmp_path, cache_dir):
    """configure() after the first kernel's first call raises RuntimeError, saying so (it said
    "the first kernel compiled", of a warm process too, where nothing compiles); before it, it
    is accepted."""
    import numpy as np

    tack.cache.configure(max_size="100M")
    mod = import_file(write_module(tmp_path / "src", KMOD, "kmod_cfg") / "kmod_cfg.py", "kmod_cfg")
    out = np.zeros(4)
    tack.launch(mod.k_other, 4, (np.arange(4.0), out))
    np.testing.assert_array_equal(out, np.arange(4.0) ** 2 - 1)
    with pytest.raises(RuntimeError, match=r"since a kernel's first call looked it up \(the "
                                           r"cache's first use\)"):
        tack.cache.configure(max_size="200M")
    with pytest.raises(RuntimeError):
        tack.cache.configure(mode="off")
    assert tack.cache.settings().max_size == 100 * MiB
    assert cache_dir.is_dir()


def test_configure_after_settings_says_so(cache_dir):
    """configure() after tack.cache.settings() resolved the settings (no kernel compiled yet)
    raises an error saying that, not that a kernel compiled."""
    assert tack.cache.settings().directory == str(cache_dir)
    with pytest.raises(RuntimeError, match=r"since tack\.cache\.settings\(\) was called"):
        tack.cache.configure(mode="read")
    assert tack.cache.settings().mode == "write"


def test_configure_after_load_bundle_names_load_bundle(cache_dir):
    """configure() after load_bundle() (which reads the settings) blamed tack.cache.settings(),
    which the user never called."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # (no bundle here: a warning, 0 entries)
        assert tack.cache.load_bundle() == 0
    with pytest.raises(RuntimeError, match=r"since tack\.cache\.load_bundle\(\) was called"):
        tack.cache.configure(mode="read")


@pytest.mark.parametrize("text, want", [
    ("500M", 500 * MiB), ("2G", 2 * GiB), ("1.5GiB", 3 * GiB // 2), ("2g", 2 * GiB), ("10K", 10 * KiB),
    ("500MB", 500 * MiB), ("1T", 1 << 40), (" 3 M ", 3 * MiB), ("1048576", 1048576), ("0", 0),
    ("100B", 100), ("unlimited", None), ("UNLIMITED", None), (4096, 4096),
    ("2Gi", 2 * GiB), ("512mi", 512 * MiB),       # as Kubernetes writes them (2Gi was refused)
])
def test_parse_size(text, want):
    """parse_size takes binary units with optional i/B, plain byte counts and 'unlimited'."""
    assert cfg.parse_size(text) == want


# "5IB" and "1.5" were 5 and 1 bytes, with no word said
@pytest.mark.parametrize("text", ["12Q", "", "M", "-1", "1.5.2", "2 GG", "lots", "1e6", None, True, -3,
                                  "5IB", "5iB", "1.5", "2.5B", "5i", "2Gib B", "2GBi"])
def test_parse_size_rejects(text):
    """parse_size raises ValueError on anything that is not a size."""
    with pytest.raises(ValueError):
        cfg.parse_size(text)


# "the most is 8388608.0 TiB": format_size rounded 2^63 - 1 up, to a size it refuses itself
@pytest.mark.parametrize("text, shown", [
    ("8388608T", "8388608T"), ("9223372036854775808", "9223372036854775808"),
    (1 << 63, "9223372036854775808"), ("9" * 30, "9" * 30), ("9" * 40, "9" * 24 + "..."),
    (" 8388608T ", "8388608T")])
def test_too_large_size_names_the_bound_exactly(text, shown):
    """A size past the bound says the bound exactly, and the largest whole T the parser takes, in
    the words the site config's check uses too."""
    with pytest.raises(cfg.SizeTooLarge) as e:
        cfg.parse_size(text)
    assert str(e.value) == (f"'{shown}' is too large a size (at most 9223372036854775807 bytes, "
                            f"8388607T in whole T; use 'unlimited' for no limit)")
    assert cfg.parse_size("8388607T") <= cfg.parse_size("9223372036854775807") == cfg.MAX_SIZE


@pytest.mark.parametrize("text, size", [
    ("1.50000000000000000000000G", 3 << 29), ("1.5000000000000000000000G", 3 << 29),
    ("0.0000000000000000000000001T", 0), ("000000000000000000000000000001K", 1024),
    ("0.1K", 102), ("8388606.99999999999999999999999T", (8388607 << 40) - 1)])
def test_digits_past_a_bytes_worth_are_no_larger_size(text, size):
    """Many digits are not a large size: fraction digits and leading zeros counted as if they were
    (over 24 digits: 'too large', and the default used instead).  A fraction of a unit is whole
    bytes, rounded down, exactly (no float)."""
    assert cfg.parse_size(text) == size


@hypothesis_settings(deadline=None)    # (one example stalled 200 ms on a busy machine: not a failure)
@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["", "K", "M", "G", "KiB", "MiB", "GiB", "kb"]))
def test_parse_size_property(n, unit):
    """For any count and unit, parse_size is the count times the unit's power of 1024."""
    power = {"": 0, "K": 1, "M": 2, "G": 3}[unit[:1].upper()]
    assert cfg.parse_size(f"{n}{unit}") == n * 1024 ** power


def test_unwritable_directory_warns_once_and_runs(tmp_path):
    """A TACK_CACHE_DIR that cannot be created (below a regular file) is one warning, and every kernel still runs right."""
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    src = write_module(tmp_path / "src", KMOD)
    run = run_child(afile / "sub", src, [{"kernel": "k_main", "n": 5}, {"kernel": "k_other", "n": 6}])
    check_results(run)
    assert len(run.warnings) == 1, run.warnings
    assert run.warnings[0]["category"] == "TackWarning"
    assert str(afile) in run.warnings[0]["message"]
    assert afile.read_text() == "not a directory"
    assert run.stats["bytes_written"] == 0 and run.stats["hits"] == {"lowered": 0, "variant": 0}


def test_mode_off_touches_nothing(tmp_path, cache_dir):
    """TACK_CACHE=off: nothing is created, looked up or stored, and kernels run."""
    src = write_module(tmp_path / "src", KMOD)
    run = run_child(cache_dir, src, [{"kernel": "k_main", "n": 5}], env={"TACK_CACHE": "off"})
    check_results(run)
    assert not os.path.lexists(cache_dir)
    assert run.stats["misses"] == {"lowered": 0, "variant": 0}
    assert run.data["settings"]["mode"] == "off"
    assert not {"find", "read", "deps", "cache"} & set(run.result("k_main")["timings"])


def test_mode_read_loads_but_never_stores(warm):
    """TACK_CACHE=read: a stored variant loads, a new one compiles but is not stored, and the directory is unchanged."""
    cache, src = warm
    before = snapshot(cache)
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}, {"kernel": "k_main", "n": 7, "dtype": "float32"}],
                    env={"TACK_CACHE": "read"})
    check_results(run)
    assert loaded(run.result("k_main", 0))
    assert compiled(run.result("k_main", 1))
    assert run.stats["hits"] == {"lowered": 1, "variant": 1}
    assert run.stats["bytes_written"] == 0
    assert snapshot(cache) == before
    assert run.warnings == []


def test_mode_read_with_no_directory_creates_none(tmp_path, cache_dir):
    """TACK_CACHE=read with no cache directory: kernels compile, nothing is created, no warning."""
    src = write_module(tmp_path / "src", KMOD)
    run = run_child(cache_dir, src, [{"kernel": "k_other", "n": 3}], env={"TACK_CACHE": "read"})
    check_results(run)
    assert not os.path.lexists(cache_dir)
    assert run.warnings == []


def test_relative_cache_directory_is_taken_from_the_working_directory(tmp_path, monkeypatch):
    """A relative TACK_CACHE_DIR, or configure(directory=...), names a directory below the
    working directory when the settings are read (issue 22: it fell back to the default with a
    warning), with no warning; info shows the absolute path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TACK_CACHE_DIR", "rel/cache")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = tack.cache.settings()
    assert (s.directory, s.sources["directory"]) == (str(tmp_path / "rel" / "cache"), "environment")


def test_cache_directory_spaces_and_a_relative_home(tmp_path, monkeypatch):
    """TACK_CACHE_DIR with a leading space (" /scratch/tack", a quoting slip) became a directory
    named " /scratch/tack" below the working directory, each working directory its own cache;
    it is stripped, as TACK_CACHE and TACK_CACHE_SIZE are.  With a relative HOME and no
    XDG_CACHE_HOME the default stayed relative, so a process that changed directory used two
    caches: it is taken from the working directory when the settings are read."""
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = cfg.resolve({}, {"TACK_CACHE_DIR": f"  {tmp_path}/c \t"})
        assert (s.directory, s.sources["directory"]) == (str(tmp_path / "c"), "environment")
    monkeypatch.setenv("HOME", "relhome")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    s = cfg.resolve({}, {})
    assert s.directory == str(tmp_path / "relhome" / ".cache" / "tack"), s.directory
    assert s.sources["directory"] == "default"


def test_relative_cache_directory_from_configure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tack.cache.configure(directory="./mine")
    assert resolve_quietly().directory == str(tmp_path / "mine")


def test_relative_cache_directory_stores_there(tmp_path):
    """A child process with a relative TACK_CACHE_DIR stores its entries below its working
    directory, and python -m tack.cache info run from there lists them."""
    (tmp_path / "src").mkdir()
    write_module(tmp_path / "src", KMOD, "kmod_rel")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR="c", PYTHONPATH=os.pathsep.join([str(tmp_path / "src"), ROOT]))
    code = ("import numpy as np, tack, kmod_rel; out = np.zeros(4); "
            "tack.launch(kmod_rel.k_other, 4, (np.arange(4.0), out))")
    p = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert any((tmp_path / "c").rglob("*.tvar"))
    info = subprocess.run([sys.executable, "-m", "tack.cache", "info"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert f"directory:    {tmp_path / 'c'}  (environment)" in info.stdout, info.stdout


def test_load_bundle_after_a_bad_setting_adds_no_second_warning(tmp_path, monkeypatch):
    """A bad TACK_CACHE_DIR warned, then load_bundle() warned again ("not using a bundle: there is
    no bundle at" the default directory): the process has one cache warning, the first."""
    monkeypatch.setenv("TACK_CACHE_DIR", "$TACK_TEST_NOT_SET/x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    tack.cache._reset_for_tests()
    with pytest.warns(RuntimeWarning) as said:
        assert tack.cache.load_bundle() == 0
    assert [str(w.message) for w in said] == [
        "tack: TACK_CACHE_DIR: '$TACK_TEST_NOT_SET/x' names $TACK_TEST_NOT_SET, which is not set; "
        "using the default"]
    tack.cache._reset_for_tests()
