"""Messages that name the right thing (issue 14): launch arguments, read-only arrays, and a
CompileError's traceback that shows the user's frames, not the compiler's."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tack

from .util import check_points_at

FILE = __file__
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@tack.kernel
def k_fill(out, value):
    i = tack.tid()
    out[i] = value


# -- launch arguments ---------------------------------------------------------------------

@pytest.mark.parametrize("dim, exc, words", [
    (1.5, TypeError, ["dim", "1.5", "float"]),
    ("3", TypeError, ["dim", "'3'", "str"]),
    (True, TypeError, ["dim", "True", "bool"]),
    ((2, 1.5), TypeError, ["dim", "1.5", "(2, 1.5)"]),
    (2**64, ValueError, ["dim", str(2**64), "too large"]),
    ((2**32, 2**32), ValueError, ["dim", "too large"]),
    # a NumPy float or array in dim said NumPy's "truth value of an array ... is ambiguous"
    ((np.float64(2.0), 3), TypeError, ["dim", "2.0", "float64"]),
    (np.array([2.0, 3.0]), TypeError, ["dim", "2.0", "float64"]),
    (np.array([True, False]), TypeError, ["dim", "True", "bool"]),
    ([np.array(2), 3], TypeError, ["dim", "ndarray"]),
], ids=["float", "str", "bool", "float-in-tuple", "over-int64", "product-over-int64",
        "numpy-float-in-tuple", "float-array", "bool-array", "0-d-array-in-list"])
def test_bad_dim_says_what_is_wrong_with_dim(dim, exc, words):
    """A grid that is not 1-3 ints, or that no int64 holds, is an error about ``dim``, not about
    an argument or a Python iteration."""
    out = np.zeros(3)
    with pytest.raises(exc) as ei:
        tack.launch(k_fill, dim=dim, args=(out, 1.0))
    msg = str(ei.value)
    assert all(w in msg for w in words), msg
    assert "not iterable" not in msg and "argument" not in msg
    np.testing.assert_array_equal(out, 0.0)


def test_dim_too_large_after_a_launch_compiled_the_variant():
    """The same holds on the warm path (the variant already compiled)."""
    out = np.zeros(3)
    tack.launch(k_fill, dim=3, args=(out, 1.0))
    with pytest.raises(ValueError) as ei:
        tack.launch(k_fill, dim=2**64, args=(out, 2.0))
    assert "dim" in str(ei.value) and "too large" in str(ei.value)
    np.testing.assert_array_equal(out, 1.0)


@pytest.mark.parametrize("args, words", [
    (None, ["args", "tuple", "None"]),
    (np.zeros(3), ["args", "tuple", "ndarray", "args=(x,)"]),
    (2.0, ["args", "tuple", "float", "args=(x,)"]),
], ids=["None", "array", "float"])
def test_args_not_a_tuple_is_said(args, words):
    """``args`` that is not a tuple (or list) of arguments is a TypeError about ``args``."""
    with pytest.raises(TypeError) as ei:
        tack.launch(k_fill, dim=3, args=args)
    msg = str(ei.value)
    assert all(w in msg for w in words), msg
    assert "not iterable" not in msg


def test_args_as_a_list_still_launch():
    out = np.zeros(3)
    tack.launch(k_fill, dim=[3], args=[out, 4.0])
    np.testing.assert_array_equal(out, 4.0)


# -- read-only arrays ---------------------------------------------------------------------

WEIGHTS = tack.constant(np.zeros(3))


@tack.kernel
def k_write_param(a):
    i = tack.tid()
    a[i] = 1.0  # ERR a[i]


@tack.kernel
def k_write_constant(a):
    i = tack.tid()
    WEIGHTS[i] = a[i]  # ERR WEIGHTS[i]


@tack.func
def store_one(buf, i):
    buf[i] = 1.0  # ERR buf[i]


@tack.kernel
def k_write_through_func(a):
    i = tack.tid()
    store_one(a, i)


@tack.kernel
def k_atomic_read_only(a):
    i = tack.tid()
    tack.atomic_add(a, i, 1.0)  # ERR tack


def read_only(n=3):
    a = np.zeros(n)
    a.flags.writeable = False
    return a


def test_writing_a_read_only_array_names_the_argument():
    """A kernel writing a read-only ndarray argument is told that argument is read-only (its
    flags.writeable), not that tack.constant arrays are read-only."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_write_param, dim=3, args=(read_only(),))
    msg = check_points_at(ei.value, "k_write_param", k_write_param, FILE)
    assert "argument 'a' is a read-only array" in msg and "writeable" in msg
    assert "tack.constant" not in msg


def test_writing_a_constant_still_names_tack_constant():
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_write_constant, dim=3, args=(np.zeros(3),))
    msg = check_points_at(ei.value, "k_write_constant", k_write_constant, FILE)
    assert "tack.constant arrays are read-only" in msg


def test_writing_a_read_only_array_in_a_device_function_and_by_atomic():
    """Through a device function's parameter, and by an atomic, the message names the parameter."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_write_through_func, dim=3, args=(read_only(),))
    msg = check_points_at(ei.value, "k_write_through_func", store_one, FILE)
    assert "parameter 'buf' is read-only" in msg and "writeable" in msg
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_atomic_read_only, dim=3, args=(read_only(),))
    msg = check_points_at(ei.value, "k_atomic_read_only", k_atomic_read_only, FILE)
    assert "argument 'a' is a read-only array" in msg


# -- a CompileError's traceback -----------------------------------------------------------

BAD_SCRIPT = textwrap.dedent("""\
    import numpy as np
    import tack


    @tack.kernel
    def blur(src, dst):
        i = tack.tid()
        dst[i] = smoth(src, i)


    def main():
        tack.launch(blur, dim=3, args=(np.zeros(3), np.zeros(3)))


    main()
""")

FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line \d+, in (?P<fn>\S+)$')


def run_bad_script(tmp_path, **env):
    script = tmp_path / "blur.py"
    script.write_text(BAD_SCRIPT)
    child = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    child.update(PYTHONPATH=ROOT, TACK_CACHE_DIR=str(tmp_path / "cache"), **env)
    p = subprocess.run([sys.executable, str(script)], env=child, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1
    frames = [m.groupdict() for m in map(FRAME.match, p.stderr.splitlines()) if m]
    return script, p.stderr, frames


def test_compile_error_shows_the_users_frames_not_the_compilers(tmp_path):
    """A CompileError at a launch shows the user's frames and the launch, then the message with
    its caret: no frame of Tack's compiler, no chained exception."""
    script, err, frames = run_bad_script(tmp_path)
    tack_dir = os.path.join(ROOT, "tack") + os.sep
    assert [f["fn"] for f in frames] == ["<module>", "main", "launch"], err
    assert [f["file"] for f in frames[:2]] == [str(script)] * 2
    assert frames[2]["file"] == os.path.join(tack_dir, "launch.py")
    assert "During handling" not in err and "direct cause" not in err
    lines = err.rstrip().splitlines()
    assert lines[-4] == "tack.errors.CompileError: in kernel 'blur': name 'smoth' is not defined"
    assert lines[-3] == f'  File "{script}", line 8'
    assert lines[-2:] == ["    dst[i] = smoth(src, i)", "             ^"]


def test_compile_error_full_traceback_under_tack_debug(tmp_path):
    """TACK_DEBUG=1 keeps the compiler's frames (for reports of a compiler bug)."""
    _, err, frames = run_bad_script(tmp_path, TACK_DEBUG="1")
    assert any(f["file"].endswith(os.path.join("frontend", "lower.py")) for f in frames), err
    assert err.rstrip().splitlines()[-1] == "             ^"


# -- warnings (issue 22): one clean line, still a warning the warnings module filters ----------

def _child(args, env=None, flags=()):
    child = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    child.update(PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, *flags, *args], env=child, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_a_tack_warning_prints_as_one_line_without_tacks_source():
    """A bad setting warns with one line, `tack: ...`: no RuntimeWarning label, no path into
    Tack's sources, no source line under it."""
    p = _child(["-m", "tack.cache", "info"], env={"TACK_CACHE_SIZE": "4Q", "TACK_CACHE_DIR": "/nonexistent-22"})
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tack: TACK_CACHE_SIZE"), p.stderr
    assert "RuntimeWarning" not in p.stderr and ".py:" not in p.stderr
    p = _child(["-c", "import tack; tack.config.num_threads"], env={"TACK_NUM_THREADS": "x"})
    assert p.stderr.splitlines() == [
        "tack: TACK_NUM_THREADS='x' is not an integer from 1 to 65536; "
        f"using {len(os.sched_getaffinity(0))}"], p.stderr


@pytest.mark.parametrize("flag, shown", [("ignore::RuntimeWarning", False),
                                         ("ignore:tack", False),      # by message start
                                         ("ignore::UserWarning", True)])
def test_tack_warnings_are_filtered_by_the_warnings_module(flag, shown):
    p = _child(["-c", "import tack; tack.config.num_threads"], env={"TACK_NUM_THREADS": "x"},
               flags=("-W", flag))
    assert ("tack: TACK_NUM_THREADS" in p.stderr) is shown, p.stderr


def test_other_warnings_keep_pythons_format():
    """Only Tack's own category is shown short: a warning of another library after one of Tack's
    is formatted as Python formats it."""
    code = ("import warnings, tack; tack.config.num_threads\n"
            "warnings.warn('not tack', UserWarning)\n")
    p = _child(["-c", code], env={"TACK_NUM_THREADS": "x"})
    lines = p.stderr.splitlines()
    assert lines[0].startswith("tack: TACK_NUM_THREADS") and "<string>:2: UserWarning: not tack" in lines[1]


def test_tack_warning_is_a_runtime_warning():
    """A TackWarning is a RuntimeWarning, filtered by its own class too (in Python: -W takes only
    built-in categories at startup)."""
    assert issubclass(tack.TackWarning, RuntimeWarning)
    code = ("import warnings, tack; warnings.simplefilter('ignore', tack.TackWarning)\n"
            "tack.config.num_threads\n")
    assert _child(["-c", code], env={"TACK_NUM_THREADS": "x"}).stderr == ""
    with pytest.warns(tack.TackWarning, match="^tack: x$"):
        from tack.errors import warn
        warn("tack: x")


# -- launch errors (issue 22): the message, not the frames of the checks inside tack/ ----------

LAUNCH_CASES = {
    "count": ("tack.launch(fill, 4, (out,))", "TypeError: kernel 'fill' takes 2 arguments"),
    "list": ("tack.launch(fill, 4, ([1.0, 2.0], 1.0))", "argument 'out' is a list"),
    "complex": ("tack.launch(fill, 4, (np.zeros(4, np.complex128), 1.0))", "dtype complex128"),
    "dim4": ("tack.launch(fill, (1, 1, 1, 4), (out, 1.0))", "TypeError: dim must be"),
    "grid": ("tack.launch(fill, 8, (out, 1.0))", "IndexError: kernel 'fill': the grid (8,)"),
    "args": ("tack.launch(fill, 4, out)", "TypeError: args must be a tuple"),
    "device": ("tack.launch(fill, 4, (out, 1.0), device='gpu')", "ValueError: device 'gpu' is not available"),
    # no CUDA device (no driver, or no cuda-python): the runtime's refusal showed its 4 frames
    "unavailable": ("tack.launch(fill, 4, (out, 1.0), device='cuda')", "CUDAUnavailable: CUDA is not available"),
    # A Python int past int64, found where the CPU runtime packs the arguments: a refusal too.
    "bigint": ("tack.launch(fill, 4, (out, 2**64))", "argument 'v' = 18446744073709551616 does not fit int64"),
}


@pytest.mark.parametrize("case, debug", [(c, "") for c in sorted(LAUNCH_CASES)]
                         + [(c, "1") for c in ("complex", "count", "list")])
def test_launch_errors_end_at_the_launch(tmp_path, case, debug):
    """A launch refusing its arguments or grid shows the user's line and one frame of
    tack.launch (as a CompileError does), then the message; TACK_DEBUG=1 keeps every frame."""
    call, words = LAUNCH_CASES[case]
    script = tmp_path / "use.py"
    script.write_text(textwrap.dedent(f"""\
        import numpy as np, tack
        @tack.kernel
        def fill(out, v):
            i = tack.tid()
            out[i] = v
        out = np.zeros(4)
        tack.launch(fill, 4, (out, 1.0))     # warm: the errors below come on a compiled kernel
        {call}
        """))
    env = {"TACK_CACHE": "off"}
    if debug:
        env["TACK_DEBUG"] = debug
    p = _child([str(script)], env=env)
    assert p.returncode == 1 and words in p.stderr.splitlines()[-1], p.stderr
    tack_frames = [ln for ln in p.stderr.splitlines()
                   if ln.strip().startswith('File "') and os.path.join(ROOT, "tack") in ln]
    assert f'File "{script}", line 8' in p.stderr, p.stderr
    if debug:
        assert len(tack_frames) >= 2, p.stderr
    else:
        assert len(tack_frames) == 1 and "in launch" in tack_frames[0], p.stderr
        assert "During handling" not in p.stderr


def test_to_device_on_a_device_there_is_none_of_ends_at_to_device(tmp_path):
    """``tack.to_device(a, "cuda")`` with no CUDA device: the runtime's refusal, after the user's
    line and one frame of to_device (it showed the 4 frames that looked for the device)."""
    script = tmp_path / "use.py"
    script.write_text("import numpy as np, tack\ntack.to_device(np.zeros(3), 'cuda')\n")
    p = _child([str(script)], env={"TACK_CACHE": "off"})
    assert p.returncode == 1 and "CUDAUnavailable: CUDA is not available" in p.stderr.splitlines()[-1], p.stderr
    tack_frames = [ln for ln in p.stderr.splitlines()
                   if ln.strip().startswith('File "') and os.path.join(ROOT, "tack") in ln]
    assert f'File "{script}", line 2' in p.stderr, p.stderr
    assert len(tack_frames) == 1 and "in to_device" in tack_frames[0], p.stderr


@tack.kernel
def k_uint_and_negative(a, out):
    i = tack.tid()
    out[i] = a[i] & -2


def test_a_bitwise_op_of_uint64_and_int64_says_why_and_what_to_do():
    """``u & -2`` with a uint64 ``u``: the literal is an int64, the pair promotes to float64 as
    in NumPy, and there is no float ``&``.  The error said only "unsupported operand types"."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_uint_and_negative, dim=2, args=(np.array([3, 5], np.uint64), np.zeros(2, np.uint64)))
    message = str(ei.value)
    assert "uint64 and int64" in message and "promotes to float64" in message
    assert "tack.uint64(" in message


@tack.kernel
def k_uint64_shift_by_int32(a, s, out):
    i = tack.tid()
    out[i] = a[i] << s[i]


def test_a_bitwise_op_of_uint64_and_a_narrower_signed_int_says_why_too():
    """``u << s`` with a uint64 ``u`` and an int32 ``s`` promotes to float64 as int64 with
    uint64 does; the error explained only the int64 pair and said "unsupported operand types"
    alone here."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_uint64_shift_by_int32, dim=2, args=(
            np.array([3, 5], np.uint64), np.array([1, 2], np.int32), np.zeros(2, np.uint64)))
    message = str(ei.value)
    assert "uint64 and int32" in message, message
    assert "int32 with uint64 promotes to float64" in message and "tack.uint64(" in message


@tack.kernel
def k_np_power_one_argument(a, out):
    i = tack.tid()
    out[i] = np.power(a[i])


def test_numpy_power_with_one_argument_is_a_compile_error_naming_it():
    """``np.power`` is lowered to ``**``, so its argument count is checked there: one argument is
    a CompileError naming numpy.power and the count, at the call's line."""
    a = np.ones(2)
    with pytest.raises(tack.CompileError, match=r"numpy\.power\(\) takes two arguments, got 1") as e:
        tack.launch(k_np_power_one_argument, dim=2, args=(a, a))
    assert "out[i] = np.power(a[i])" in str(e.value)


@tack.func
def element(a, k):
    return a[k]


@tack.kernel
def k_literal_index(a, out):
    out[0] = element(a, 1.5)


def test_a_literal_argument_the_function_cannot_take_points_at_its_use():
    """An error in a literal argument's use is shown at that use, in the device function."""
    with pytest.raises(tack.CompileError) as e:
        tack.launch(k_literal_index, dim=1, args=(np.zeros(3), np.zeros(1)))
    msg = str(e.value)
    assert "array indices must be integers" in msg and "return a[k]" in msg, msg


@tack.func
def plus_one(x, n):
    return x + (n + 1)


@tack.kernel
def k_literal_past_64_bits(a, out):
    out[0] = plus_one(a[0], 2**64 - 1)


def test_a_literal_arguments_arithmetic_past_64_bits_is_the_error_it_is_in_place():
    """``n + 1`` of the literal 2**64 - 1 in a device function is refused as
    ``x + (2**64 - 1 + 1)`` written there is, at that line (it wrapped to 0)."""
    with pytest.raises(tack.CompileError) as e:
        tack.launch(k_literal_past_64_bits, dim=1, args=(np.zeros(1, np.uint64), np.zeros(1, np.uint64)))
    msg = str(e.value)
    assert "this expression of integer literals is 18446744073709551616, which does not fit in 64 bits" in msg
    assert "return x + (n + 1)" in msg, msg

