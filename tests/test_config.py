"""tack.config: debug, timing and num_threads, from Python and from the environment."""

import io
import os

import numpy as np
import pytest

import tack


def cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@pytest.mark.parametrize("raw, want", [("1", True), ("true", True), ("ON", True), ("0", False),
                                       ("", False), ("off", False)])
def test_debug_from_environment(monkeypatch, raw, want):
    """TACK_DEBUG is read as a boolean the first time tack.config.debug is asked for."""
    monkeypatch.setenv("TACK_DEBUG", raw)
    tack.config.reset()
    assert tack.config.debug is want


def test_bad_boolean_environment_value_warns(monkeypatch):
    """A TACK_DEBUG or TACK_TIMING that is not a boolean warns and counts as off."""
    monkeypatch.setenv("TACK_DEBUG", "maybe")
    monkeypatch.setenv("TACK_TIMING", "2x")
    tack.config.reset()
    with pytest.warns(RuntimeWarning, match="TACK_DEBUG"):
        assert tack.config.debug is False
    with pytest.warns(RuntimeWarning, match="TACK_TIMING"):
        assert tack.config.timing is False


@tack.kernel
def k_env_debug(a):
    i = tack.tid()
    a[i + 1] = 1.0


def test_debug_environment_enables_bounds_checks(monkeypatch):
    """With TACK_DEBUG=1 an out-of-bounds store raises IndexError."""
    monkeypatch.setenv("TACK_DEBUG", "1")
    tack.config.reset()
    with pytest.raises(IndexError, match="k_env_debug"):
        tack.launch(k_env_debug, dim=4, args=(np.zeros(4),))


def test_python_setting_overrides_environment_until_reset(monkeypatch):
    """A value set from Python wins over the environment until tack.config.reset()."""
    monkeypatch.setenv("TACK_NUM_THREADS", "3")
    tack.config.reset()
    tack.config.num_threads = 5
    assert tack.config.num_threads == 5
    tack.config.reset()
    assert tack.config.num_threads == 3


def test_num_threads_from_environment(monkeypatch):
    """TACK_NUM_THREADS sets the thread count; unset, it is the number of usable cores."""
    monkeypatch.setenv("TACK_NUM_THREADS", "3")
    tack.config.reset()
    assert tack.config.num_threads == 3
    monkeypatch.delenv("TACK_NUM_THREADS")
    tack.config.reset()
    assert tack.config.num_threads == cores()


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5"])
def test_bad_num_threads_environment_warns(monkeypatch, raw):
    """A TACK_NUM_THREADS that is not a positive integer warns and falls back to the core count."""
    monkeypatch.setenv("TACK_NUM_THREADS", raw)
    tack.config.reset()
    with pytest.warns(RuntimeWarning, match="TACK_NUM_THREADS"):
        assert tack.config.num_threads == cores()


@pytest.mark.parametrize("bad", [0, -1, "2", 1.5])
def test_bad_num_threads_from_python(bad):
    """Setting num_threads to anything but a positive int raises ValueError."""
    with pytest.raises(ValueError):
        tack.config.num_threads = bad


def test_unknown_setting():
    """Reading or writing an unknown setting raises AttributeError."""
    with pytest.raises(AttributeError):
        tack.config.verbose = True
    with pytest.raises(AttributeError):
        tack.config.verbose


def test_debug_and_timing_coerced_to_bool():
    """debug and timing set from Python are stored as bools."""
    tack.config.debug = 1
    tack.config.timing = 0
    assert tack.config.debug is True and tack.config.timing is False


@pytest.mark.parametrize("name", ["debug", "timing"])
def test_on_off_settings_take_the_environments_words_and_refuse_the_rest(name):
    """``tack.config.debug = "0"`` turned debug mode on (``bool("0")``), as did "off", "false"
    and "no": the words TACK_DEBUG takes now mean what they mean there; other values (2, 1.0,
    "maybe", None, an array) are a ValueError naming the setting."""
    for value, want in (("0", False), ("off", False), (" False ", False), ("no", False),
                        ("1", True), ("ON", True), ("yes", True), (np.int64(1), True),
                        (np.bool_(False), False), (True, True), (0, False)):
        setattr(tack.config, name, value)
        assert getattr(tack.config, name) is want, (value, want)
    for value in (2, 1.0, "maybe", "", None, np.ones(2)):
        with pytest.raises(ValueError, match=f"tack.config.{name} must be True or False"):
            setattr(tack.config, name, value)
    tack.config.reset()


@tack.kernel
def k_timed_a(x, out):
    i = tack.tid()
    out[i] = x[i] * 2


@tack.kernel
def k_timed_b(x, out):
    i = tack.tid()
    out[i] = x[i] * 3


@tack.kernel
def k_timings(x, out):
    i = tack.tid()
    out[i] = x[i] + 1


STAGES = ("lower", "specialize", "codegen", "llvm", "load", "launch")


def test_timing_report_from_python(capsys):
    """tack.config.timing prints a stage report to stderr on a variant's first call only."""
    tack.config.timing = True
    x = np.arange(5.0)
    out = np.empty(5)
    tack.launch(k_timed_a, dim=5, args=(x, out))
    err = capsys.readouterr().err
    assert "k_timed_a" in err and all(s in err for s in STAGES), err
    tack.launch(k_timed_a, dim=5, args=(x, out))
    assert capsys.readouterr().err == ""
    np.testing.assert_array_equal(out, 2 * x)


def test_timing_report_from_environment(monkeypatch, capsys):
    """TACK_TIMING=1 prints the stage report."""
    monkeypatch.setenv("TACK_TIMING", "1")
    tack.config.reset()
    tack.launch(k_timed_b, dim=3, args=(np.ones(3), np.empty(3)))
    err = capsys.readouterr().err
    assert "k_timed_b" in err and "llvm" in err


def test_no_timing_report_by_default(capsys):
    """Without timing turned on nothing is printed."""
    tack.launch(k_timed_b, dim=4, args=(np.ones(4, np.float32), np.empty(4, np.float32)))
    assert capsys.readouterr().err == ""


def test_kernel_timings_after_first_call():
    """kernel.timings holds each stage's seconds after the first call, and report_timings prints them."""
    tack.launch(k_timings, dim=3, args=(np.ones(3), np.empty(3)))
    t = k_timings.timings
    assert set(STAGES) <= set(t), t
    assert all(isinstance(v, float) and v >= 0 for v in t.values())
    buf = io.StringIO()
    tack.report_timings(k_timings, file=buf)
    assert "k_timings" in buf.getvalue() and "total" in buf.getvalue()
