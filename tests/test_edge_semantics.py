"""Edge cases found in review: literals that do not fit, mixed 64-bit comparisons, loop bounds, closures."""

import math

import numpy as np
import pytest

import tack


@tack.kernel
def big_literal(x, out):
    i = tack.tid()
    out[0] = 1 if x[i] < 3_000_000_000 else 0
    out[1] = x[i] + 3_000_000_000


@tack.kernel
def unsigned_ops(u, out):
    i = tack.tid()
    out[0] = 1 if u[i] > -1 else 0
    out[1] = u[i] % -3
    n = 0
    for k in range(u[i], 0, -1):
        n += 1
    out[2] = n


@tack.kernel
def mixed_64(a, b, out):
    out[0] = 1 if a[0] < b[0] else 0
    out[1] = 1 if b[0] > a[0] else 0
    out[2] = 1 if a[1] < b[1] else 0
    out[3] = 1 if a[1] == b[1] else 0


@tack.kernel
def overflowing_range(out):
    n = 0
    for k in range(2**62, 2**63 - 1, 2**62):
        n += 1
    out[0] = n


@tack.kernel
def float_mod_zero(f, out):
    out[0] = f[0] % 2.0


@tack.kernel
def float_loop_var(out):
    x = 0.5
    for x in range(3):
        out[0] += x


def make(value):
    scale = tack.constant(value)

    @tack.func
    def f(v):
        return v * scale
    return f


DOUBLE, TRIPLE = make(2.0), make(3.0)


@tack.kernel
def two_closures(out):
    out[0] = DOUBLE(1.0) + TRIPLE(10.0)


def test_literal_that_does_not_fit_the_operand_type_is_exact():
    """int32 x < 3_000_000_000 is True and x + 3_000_000_000 does not wrap."""
    out = np.zeros(2, np.int64)
    tack.launch(big_literal, 1, (np.array([7], np.int32), out))
    assert out.tolist() == [1, 3_000_000_007]


def test_negative_literals_with_unsigned_operands():
    """uint32 u > -1 holds, u % -3 follows Python, range(u, 0, -1) counts down."""
    out = np.zeros(3, np.int64)
    tack.launch(unsigned_ops, 1, (np.array([7], np.uint32), out))
    assert out.tolist() == [1, 7 % -3, 7]


def test_int64_against_uint64_compares_exactly():
    """2**62 < 2**62 + 1 across int64/uint64 (not through float64); negative int64 is below any uint64."""
    out = np.zeros(4, np.int64)
    tack.launch(mixed_64, 1, (np.array([2**62, -5], np.int64), np.array([2**62 + 1, 2**64 - 5], np.uint64), out))
    assert out.tolist() == [1, 1, 1, 0]


def test_range_whose_step_overflows_the_counter_stops():
    """range(2**62, 2**63 - 1, 2**62) runs once, as in Python, instead of wrapping forever."""
    out = np.zeros(1, np.int64)
    tack.launch(overflowing_range, 1, (out,))
    assert out[0] == len(range(2**62, 2**63 - 1, 2**62))


def test_float_modulo_zero_takes_the_divisors_sign():
    """-0.0 % 2.0 is +0.0, as in Python."""
    out = np.zeros(1)
    tack.launch(float_mod_zero, 1, (np.array([-0.0]), out))
    assert out[0] == 0.0 and not np.signbit(out[0])


def test_float_loop_variable_is_a_compile_error():
    """A range() loop variable that also holds a float is a CompileError, not an LLVM crash."""
    with pytest.raises(tack.CompileError, match="loop variable 'x'"):
        tack.launch(float_loop_var, 1, (np.zeros(1),))


def test_device_functions_from_one_factory_stay_distinct():
    """Two device functions made by one factory compile as two functions (2*1 + 3*10)."""
    out = np.zeros(1)
    tack.launch(two_closures, 1, (out,))
    assert out[0] == 32.0


@tack.kernel
def narrow_against_uint64(a, b, out):
    i = tack.tid()
    out[i, 0] = a[i] < b[i]
    out[i, 1] = a[i] >= b[i]
    out[i, 2] = b[i] == a[i]
    out[i, 3] = a[i] < 10000000000000000000


def test_a_narrow_signed_integer_compares_with_a_uint64_exactly():
    """int32 against uint64 (NumPy 2 promotes them to float64): the comparison widens each to
    64 bits of its kind (it emitted an i32 against i64 compare: an LLVM error, not a result)."""
    a = np.array([-1, 5, 7], dtype=np.int32)
    b = np.array([3, 2, 2**63 + 1], dtype=np.uint64)
    out = np.zeros((3, 4), dtype=np.int64)
    tack.launch(narrow_against_uint64, dim=3, args=(a, b, out))
    want = [[a[i] < int(b[i]), a[i] >= int(b[i]), int(b[i]) == a[i], a[i] < 10**19] for i in range(3)]
    assert out.tolist() == [[int(v) for v in row] for row in want]


@tack.kernel
def literals_beside_narrow(x, u, out):
    out[0] = max(x[0], 3_000_000_000)
    out[1] = max(u[0], -1)
    out[2] = u[0] if u[0] > 100 else -1
    out[3] = 1 if x[0] < 2**31 else 0
    out[4] = x[0] + 2**40
    out[5] = min(x[0], 0 - 3_000_000_000)
    out[6] = 1 if x[0] < 3 * 10**9 else 0


def test_literals_the_other_type_cannot_hold_are_exact_everywhere():
    """A literal (or literals alone: 2**40, 3 * 10**9) that an int32 or uint32 beside it cannot
    hold is an int64, in min/max and ``a if c else b`` as in arithmetic and comparisons (it was
    cut to the other operand's type there, and in every literal-only expression: silently wrong)."""
    x = np.array([5], dtype=np.int32)
    u = np.array([5], dtype=np.uint32)
    out = np.zeros(7, dtype=np.int64)
    tack.launch(literals_beside_narrow, dim=1, args=(x, u, out))
    assert out.tolist() == [3_000_000_000, 5, -1, 1, 5 + 2**40, -3_000_000_000, 1]


@tack.kernel
def literal_expressions(io, uo, fo):
    io[0] = 2**63 // 2
    io[1] = 2**62 * 2 // 4
    io[2] = -(2**63)
    uo[0] = 2**64 - 1
    uo[1] = 2**63 + 5
    fo[0] = 10**19
    fo[1] = 3 * 10**18 * 4


def test_literal_expressions_are_one_literal_as_python_computes_it():
    """An expression of integer literals alone is the literal Python computes (2**63 // 2 was
    computed in int64 and came out negative, 10**19 as -8.4e18 where 10000000000000000000 is
    1e19)."""
    io, uo, fo = np.zeros(3, np.int64), np.zeros(2, np.uint64), np.zeros(2)
    tack.launch(literal_expressions, dim=1, args=(io, uo, fo))
    assert io.tolist() == [2**63 // 2, 2**62 * 2 // 4, -(2**63)]
    assert uo.tolist() == [2**64 - 1, 2**63 + 5]
    assert fo.tolist() == [float(10**19), float(3 * 10**18 * 4)]


@tack.kernel
def literal_past_64_bits(out):
    out[0] = 2**70


@tack.kernel
def literal_far_past_64_bits(out):
    out[0] = 1 + 2**10**10


@pytest.mark.parametrize("kern, shown", [(literal_past_64_bits, "is 1180591620717411303424, "),
                                         (literal_far_past_64_bits, "")])
def test_literal_expression_past_64_bits_is_a_compile_error(kern, shown):
    """2**70 is a CompileError at its line, as the literal 1180591620717411303424 is (it compiled
    to 0); one too large to compute (2**10**10) is refused without computing it."""
    with pytest.raises(tack.CompileError, match="does not fit in 64 bits") as ei:
        tack.launch(kern, dim=1, args=(np.zeros(1),))
    assert shown in str(ei.value) and "line" in str(ei.value)


STEP_ZERO = """
import sys
import numpy as np
import tack


@tack.kernel
def k(s, u, out):
    c = 0
    for q in range(5, 0, s):
        c += 1
    for q in range(u, 9, u):
        c += 10
    out[0] = c


out = np.full(1, -1, np.int64)
tack.launch(k, dim=1, args=(0, np.uint32(0), out))
print(int(out[0]))
"""


def test_a_step_of_zero_at_run_time_runs_no_iteration(tmp_path):
    """``range(5, 0, s)`` with ``s`` 0 when launched (a literal 0 is refused when compiled): no
    iteration, signed or unsigned (it looped for ever: the launch never returned)."""
    import os
    import subprocess
    import sys
    script = tmp_path / "step_zero.py"
    script.write_text(STEP_ZERO)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE="off", PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == ["0"], p.stderr[-2000:]


@tack.func
def named_twice(x):
    return x * 10


first_named_twice = named_twice


@tack.func
def named_twice(x):  # noqa: F811 - the same name again: another function
    return x + 1


def _make_named(op):
    if op == "add":
        @tack.func
        def f(x):
            return x + 100
    else:
        @tack.func
        def f(x):
            return x * 1000
    return f


f_added, f_multiplied = _make_named("add"), _make_named("mul")


@tack.kernel
def k_functions_of_one_name(a, out):
    i = tack.tid()
    out[i, 0] = first_named_twice(a[i]) + named_twice(a[i])
    out[i, 1] = f_added(a[i]) + f_multiplied(a[i])


def test_two_device_functions_of_one_name_are_two_functions():
    """Two ``@tack.func``s with the same module and qualified name (one defined again; a factory's
    two ``def f`` without closures) called from one kernel: both calls compiled to the first
    function met (10a + 10a, not 10a + a + 1)."""
    a = np.arange(5, dtype=np.float64)
    out = np.empty((5, 2))
    tack.launch(k_functions_of_one_name, dim=5, args=(a, out))
    np.testing.assert_array_equal(out[:, 0], a * 10 + a + 1)
    np.testing.assert_array_equal(out[:, 1], a + 100 + a * 1000)


@tack.kernel
def k_negative_shift_and_bool_not(a, s, b, out, bo):
    out[0] = a[0] << s[0]
    out[1] = a[1] >> s[0]
    out[2] = a[0] >> s[1]
    bo[0] = ~b[0]
    bo[1] = ~b[1]


def test_negative_shift_counts_and_not_of_a_bool_are_numpys():
    """As docs/language.md says: a shift by a negative count gives what NumPy's scalars give (0,
    or -1 for a negative number shifted right; Python raises), and ``~`` on a bool is NumPy's
    logical not (Python's ``~True`` is -2)."""
    a, s = np.array([1, -8], np.int64), np.array([-1, -70], np.int64)
    b = np.array([True, False])
    out, bo = np.zeros(3, np.int64), np.zeros(2, np.bool_)
    tack.launch(k_negative_shift_and_bool_not, dim=1, args=(a, s, b, out, bo))
    with np.errstate(all="ignore"):
        want = [a[0] << s[0], a[1] >> s[0], a[0] >> s[1]]
    assert out.tolist() == [int(w) for w in want] == [0, -1, 0]
    assert bo.tolist() == (~b).tolist() == [False, True]


def test_a_module_whose_getattr_raises_does_not_break_a_device_functions_id(tmp_path):
    """Whether a module holds a device function at its name is asked with ``getattr``; a module
    ``__getattr__`` that raises something else than AttributeError (a lazy loader's failure) made
    that question raise into the user's launch: the function is then taken as not held."""
    import os
    import subprocess
    import sys
    (tmp_path / "lazymod.py").write_text(
        "import numpy as np\nimport tack\n\n\nclass Box:\n    @staticmethod\n    def __getattr__(n):\n"
        "        raise RuntimeError('lazy loader failed')\n\n\n"
        "def __getattr__(name):\n    raise RuntimeError('lazy loader failed: ' + name)\n\n\n"
        "def _make():\n    @tack.func\n    def twice(x):\n        return x * 2.0\n    return twice\n\n\n"
        "twice = _make()\ntwice.py_func.__qualname__ = 'Nowhere.twice'\n\n\n"
        "@tack.kernel\ndef k(a, out):\n    i = tack.tid()\n    out[i] = twice(a[i])\n")
    script = ("import sys, numpy as np, tack; sys.path.insert(0, sys.argv[1]); import lazymod\n"
              "a = np.arange(3.0); out = np.zeros(3); tack.launch(lazymod.k, 3, (a, out)); print(out.tolist())")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE="off", PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[0] == "[0.0, 2.0, 4.0]"


FMOD_NAN = """
import math
import sys
import numpy as np
import tack


@tack.kernel
def k(a, b, f32, out, out32, after):
    i = tack.tid()
    out[i, 0] = math.fmod(a[i], math.nan)
    out[i, 1] = math.fmod(float(b[i]), math.nan)
    out[i, 2] = math.fmod(a[i], 0.0)
    out[i, 3] = math.fmod(math.inf, a[i] + 1)
    out[i, 4] = math.fmod(-0.0, a[i] + 1)
    out[i, 5] = math.fmod(a[i] - 5, 3)
    out32[i, 0] = math.fmod(f32[i], np.float32(math.nan))
    out32[i, 1] = math.fmod(f32[i] - np.float32(5), np.float32(3))
    n = 0
    while n < 3:
        n += 1
    after[i] = n


a = np.arange(4, dtype=np.int64)
b = np.array([True, False, True, False])
out, out32, after = np.zeros((4, 6)), np.zeros((4, 2), np.float32), np.zeros(4, np.int64)
tack.launch(k, dim=4, args=(a, b, a.astype(np.float32), out, out32, after))
np.save(sys.argv[1], out)
np.save(sys.argv[2], out32)
print(after.tolist())
"""


def test_fmod_by_nan_of_an_integer_is_nan_and_the_kernel_runs_on(tmp_path):
    """``math.fmod(x, nan)`` with ``x`` converted from an int or bool: LLVM 22 turned the libm
    call into an ``frem`` it marked NaN-free, so the result was poison (0.0 here) and what came
    after it could be deleted.  Every fmod below gives what C's fmod (and NumPy's) gives; run in
    its own process because poison can also leave a loop without an end."""
    import os
    import subprocess
    import sys
    script = tmp_path / "fmod_nan.py"
    script.write_text(FMOD_NAN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE="off", PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    o64, o32 = tmp_path / "o64.npy", tmp_path / "o32.npy"
    p = subprocess.run([sys.executable, str(script), str(o64), str(o32)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[0] == "[3, 3, 3, 3]"
    a = np.arange(4, dtype=np.int64).astype(np.float64)
    with np.errstate(all="ignore"):
        want = np.stack([np.fmod(a, np.nan), np.fmod(np.array([1.0, 0, 1, 0]), np.nan), np.fmod(a, 0.0),
                         np.fmod(np.inf, a + 1), np.fmod(-0.0, a + 1), np.fmod(a - 5, 3)], axis=1)
        want32 = np.stack([np.fmod(a.astype(np.float32), np.float32(np.nan)),
                           np.fmod(a.astype(np.float32) - 5, np.float32(3))], axis=1)
    np.testing.assert_array_equal(np.load(o64), want)
    np.testing.assert_array_equal(np.load(o32), want32)
    assert np.signbit(np.load(o64)[:, 4]).all()


@tack.kernel
def k_pow_bases(x, x32, out, out32):
    i = tack.tid()
    out[i, 0] = 8.0 ** x[i]
    out[i, 1] = math.pow(32, x[i])
    out[i, 2] = 4.0 ** x[i]
    out[i, 3] = x[i] ** 2.0
    out[i, 4] = x[i] ** 0.5
    out[i, 5] = math.pow(x[i], 0.5)
    out[i, 6] = 2.0 ** x[i]
    out32[i, 0] = np.float32(8.0) ** x32[i]
    out32[i, 1] = x32[i] ** np.float32(0.5)


def test_pow_of_a_constant_power_of_two_base_is_cs_pow():
    """``8.0 ** x`` and ``math.pow(32, x)``: LLVM 22 rewrote pow of a constant power-of-two base
    into ``exp2(3 * x)``, whose product rounds first (14 ULP off at x = sqrt(63)).  Every power
    is C's ``pow`` (``powf``) as Python and NumPy compute it, and the exact rewrites kept
    (``x ** 2``, ``x ** 0.5``) give pow's answer at -0.0 and -inf too."""
    x = np.array([math.sqrt(63), math.sqrt(2) * 7.1, 0.1, -3.3, 1e-3, 12.25, -0.0, -math.inf,
                  math.inf, math.nan, 3.0, -2.0])
    x32 = x.astype(np.float32)
    out, out32 = np.zeros((x.size, 7)), np.zeros((x.size, 2), np.float32)
    tack.launch(k_pow_bases, dim=x.size, args=(x, x32, out, out32))
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m"))  # NumPy's ** 0.5 is sqrt, Python's raises
    cpow, powf = libm.pow, libm.powf
    cpow.restype, cpow.argtypes = ctypes.c_double, (ctypes.c_double, ctypes.c_double)
    powf.restype, powf.argtypes = ctypes.c_float, (ctypes.c_float, ctypes.c_float)
    want = np.array([[cpow(8.0, v), cpow(32, v), cpow(4.0, v), cpow(v, 2.0), cpow(v, 0.5),
                      cpow(v, 0.5), cpow(2.0, v)] for v in x])
    assert want[0, 0] == 8.0 ** x[0] and want[0, 1] == math.pow(32, x[0])     # Python's too
    want32 = np.array([[powf(8.0, v), powf(v, 0.5)] for v in x32], np.float32)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out32, want32)
    assert not np.signbit(out[6, 4]) and out[7, 4] == math.inf


@tack.kernel
def k_big_literal_with_float32(x, out, eq):
    i = tack.tid()
    out[i, 0] = x[i] * 10**19
    out[i, 1] = x[i] + 18446744073709551615
    eq[i, 0] = x[i] == 10**19
    eq[i, 1] = x[i] == 9999999999999999999 + 1
    eq[i, 2] = x[i] < 10000000000000000000


def test_an_integer_literal_past_int64_takes_a_float32s_type():
    """A literal of 2**63 or more was a uint64, so against a float32 it promoted to float64:
    ``x * 10**19`` rounded otherwise than NumPy's float32 product, and ``x == 10**19`` was False
    for the float32 nearest 1e19.  As a Python int with a float32 (NEP 50) it is a float32."""
    x = np.array([1e19, 3.5, -2.0, 1.8446744e19], np.float32)
    out = np.zeros((4, 2), np.float32)
    eq = np.zeros((4, 3), bool)
    tack.launch(k_big_literal_with_float32, dim=4, args=(x, out, eq))
    want = np.array([[v * 10**19, v + 18446744073709551615] for v in x])
    assert want.dtype == np.float32
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(eq, [[v == 10**19, v == 10**19, v < 10**19] for v in x])
    assert eq[0, 0] and eq[0, 1]


@tack.kernel
def k_read_bools(b, out):
    i = tack.tid()
    out[i, 0] = 1 if b[i] else 0
    out[i, 1] = 0 if not b[i] else 1
    out[i, 2] = b[i] + 0


def test_a_bool_byte_that_is_not_0_or_1_is_true():
    """A bool array whose bytes are not all 0 or 1 (a uint8 mask viewed as bool): NumPy takes any
    byte but 0 as True; Tack read the byte's lowest bit, so 2 and 4 were False."""
    b = np.array([0, 1, 2, 255, 4, 128], np.uint8).view(np.bool_)
    out = np.zeros((6, 3), np.int64)
    tack.launch(k_read_bools, dim=6, args=(b, out))
    want = [1 if v else 0 for v in b]
    np.testing.assert_array_equal(out, np.stack([want] * 3, axis=1))
    assert want == [0, 1, 1, 1, 1, 1]


@tack.kernel
def k_literal_choice(c, i32, u32, out):
    i = tack.tid()
    out[i, 0] = (2**31 if c[i] else 1) + i32[i]         # 2**31 is no int32: int64, as 2**31 + x is
    out[i, 1] = (-1 if c[i] else 1) * u32[i]            # -1 is no uint32: int64, as -1 * u is
    out[i, 2] = max(u32[i], -(5 if c[i] else 1))
    out[i, 3] = 1 if (3_000_000_000 if c[i] else 0) > i32[i] else 0
    out[i, 4] = (7 if c[i] else 1) + i32[i]             # both fit: int32, which wraps
    out[i, 5] = (1 if c[i] else 2) * 2**31 + i32[i]      # through an operator: 2**31 or 2**32
    out[i, 6] = -(1 if c[i] else 3) * 2 + u32[i]         # -2 or -6: no uint32


def test_a_choice_of_literals_the_other_type_cannot_hold_is_exact():
    """``a if c else b`` of literals alone is weak like a literal, and, like one, is an int64 where
    the other operand's integer type cannot hold one of its values (``(-1 if c else 1) * u`` of a
    uint32 ``u`` is -7, not 4294967289; ``(2**31 if c else 1) + x`` of an int32 ``x`` does not
    wrap); where each value fits, it takes that type (and wraps with it)."""
    c = np.array([True, True, False])
    i32 = np.array([2**31 - 1, -5, 2**31 - 1], np.int32)
    u32 = np.array([2**32 - 1, 7, 7], np.uint32)
    out = np.zeros((3, 7), np.int64)
    tack.launch(k_literal_choice, dim=3, args=(c, i32, u32, out))
    want = [[2**32 - 1, -(2**32 - 1), 2**32 - 1, 1, -2**31 + 6, 2**32 - 1, 2**32 - 3],
            [2**31 - 5, -7, 7, 1, 2, 2**31 - 5, 5],
            [2**31, 7, 7, 0, -2**31, 3 * 2**31 - 1, 1]]
    assert out.tolist() == want


@tack.kernel
def k_operator_on_a_choice_past_int64(p, m, u, out):
    i = tack.tid()
    out[i, 0] = m[i] + (-(2**63 if p[i] else 1))        # -2**63 or -1: each an int64
    out[i, 1] = m[i] - (2**63 if p[i] else 2) // 2      # 2**62 or 1
    out[i, 2] = m[i] + (2**63 if p[i] else 6) // -2     # -2**62 or -3, floored as Python does
    out[i, 3] = u[i] + (-(-2**63 if p[i] else -1))      # 2**63 or 1: uint64, exact


def test_an_operator_on_a_choice_of_literals_takes_each_branchs_value():
    """``-(2**63 if p else 1)`` is -2**63 or -1, each an int64, as Python computes it (a choice
    of literals is weak by its values).  Typed whole, the choice was a uint64 (its widest
    branch's type: 2**63 is no int64), and the minus wrapped both branches in it: ``m +
    -(2**63 if p else 1)`` of an int64 ``m`` of 5 gave +9.2e18 where p is true, and 1.8e19 (for
    4) where it is false.  The operator is now taken to each branch, and each folds to one
    literal.  NumPy's result_type of each branch's value agrees."""
    p = np.array([True, False])
    m = np.array([5, 5], np.int64)
    u = np.array([5, 5], np.uint64)
    out = np.zeros((2, 4), np.float64)
    tack.launch(k_operator_on_a_choice_past_int64, dim=2, args=(p, m, u, out))
    for i, c in enumerate(p):
        assert out[i, 0] == float(np.int64(5) + np.int64(-(2**63 if c else 1)))
        assert out[i, 1] == float(np.int64(5) - np.int64((2**63 if c else 2) // 2))
        assert out[i, 3] == float(np.uint64(5) + np.uint64(-(-2**63 if c else -1)))
    assert out[0, 0] == float(-2**63 + 5) and out[1, 0] == 4.0
    assert out[:, 2].tolist() == [float(5 - 2**62), 2.0]
    assert out[:, 3].tolist() == [float(2**63 + 5), 6.0]


@tack.kernel
def k_literal_through_abs_min_max(a, u, p, out, c):
    i = tack.tid()
    out[i, 0] = a[i] + max(0, 2**40)
    out[i, 1] = 1 if a[i] < abs(-3_000_000_000) else 0
    out[i, 2] = 1 if a[i] == min(2**32 + 3, 2**33) else 0
    out[i, 3] = a[i] + (2**40, 1)[0]
    out[i, 4] = a[i] * abs(-3_000_000_000)
    out[i, 5] = a[i] + abs(2**40 if p[i] else 3)
    out[i, 6] = a[i] + np.abs(-2**40)
    out[i, 7] = u[i] + max(-1, -2)                      # -1: no uint32
    out[i, 8] = a[i] + max(1, 2)                        # fits: int32, as a literal would
    tack.atomic_add(c, 0, min(1, 2))


@tack.kernel
def k_atomic_of_max_past_int32(c):
    tack.atomic_add(c, 0, max(0, 2**40))


def test_a_literal_through_abs_min_max_or_a_tuple_is_typed_by_its_value():
    """``max(0, 2**40)``, ``abs(-3_000_000_000)`` and ``(2**40, 1)[0]`` are literals' values as
    Python computes them, and, as a literal the other operand's type cannot hold, an int64:
    they stayed weak and were cut to an int32 operand's type (``a + max(0, 2**40)`` gave a,
    ``a < abs(-3e9)`` False), and ``tack.atomic_add`` of such a value into an int32 array added
    0 where the literal itself is refused.  Where the value fits, the literal's type is the
    operand's, as before."""
    a = np.array([3, -4], np.int32)
    u = np.array([7, 7], np.uint32)
    p = np.array([True, False])
    out = np.zeros((2, 9), np.int64)
    c = np.zeros(1, np.int32)
    tack.launch(k_literal_through_abs_min_max, dim=2, args=(a, u, p, out, c))
    for i, x in enumerate(a.tolist()):
        assert out[i].tolist() == [x + 2**40, 1, 0, x + 2**40, x * 3_000_000_000,
                                   x + (2**40 if p[i] else 3), x + 2**40, 6, x + 2], i
    assert c[0] == 2
    with pytest.raises(tack.CompileError, match="int32 cannot hold it"):
        tack.launch(k_atomic_of_max_past_int32, dim=1, args=(np.zeros(1, np.int32),))


@tack.func
def times_sqrt(v, k):
    return v * math.sqrt(k)


@tack.kernel
def k_math_of_literals(x, out):
    i = tack.tid()
    out[i, 0] = x[i] * math.sqrt(2.0)
    out[i, 1] = x[i] / math.sqrt(2)                 # an int literal: Python's math gives a float
    out[i, 2] = x[i] * math.exp(1.0) + math.log(10.0)
    out[i, 3] = x[i] * (1 / math.sqrt(3.0))         # folded on through the operator
    out[i, 4] = x[i] * math.atan2(1.0, 3.0)
    out[i, 5] = x[i] * math.pow(2.0, 0.3)
    out[i, 6] = x[i] * math.copysign(0.7, -1)
    out[i, 7] = x[i] * np.sqrt(2.0)                 # NumPy's function: an np.float64, strong
    out[i, 8] = x[i] * math.sqrt(-1.0)              # Python raises: left to run time, NaN
    out[i, 9] = times_sqrt(x[i], 2.0)               # a literal given: as if written in place


def test_a_math_function_of_literals_alone_is_pythons_float_and_weak():
    """``math.sqrt(2.0)`` is a Python float, weak under NEP 50 as a literal is: ``x *
    math.sqrt(2.0)`` of a float32 ``x`` is NumPy's float32 product (it was computed in float64
    and rounded once more, 1 ULP off at about a fifth of the points, and refused where the device
    has no float64), as ``x * 2 ** 0.5`` already was, and so is the same literal given to a
    device function (``v * math.sqrt(k)`` of ``k = 2.0``).  ``np.sqrt(2.0)`` is an np.float64,
    strong, as in NumPy; a domain error (``math.sqrt(-1.0)``) is left to run time, libm's NaN."""
    x = (np.arange(1, 2001, dtype=np.float32) * np.float32(0.37))
    out = np.zeros((x.size, 10), np.float32)
    tack.launch(k_math_of_literals, dim=x.size, args=(x, out))
    with np.errstate(invalid="ignore"):
        want = [x * math.sqrt(2.0), x / math.sqrt(2), x * math.exp(1.0) + math.log(10.0),
                x * (1 / math.sqrt(3.0)), x * math.atan2(1.0, 3.0), x * math.pow(2.0, 0.3),
                x * math.copysign(0.7, -1), (x * np.sqrt(2.0)).astype(np.float32),
                x * np.float32(np.nan), x * math.sqrt(2.0)]
    assert [w.dtype for w in want[:7]] == [np.float32] * 7
    np.testing.assert_array_equal(out, np.stack(want, axis=1))


@tack.kernel
def k_loop_variable_types(n32, u32, x, out):
    i = tack.tid()
    for a in range(u32):                    # (each loop a variable of its own: one name's
        out[i, 0] = a - 5                   # types are promoted together)
    for b in range(n32):                    # uint32 bound: -3 (it wrapped to 4294967293)
        out[i, 1] = b * 1000000             # int32 bound: 2999000000 (it wrapped in int32)
    acc = 0.0
    for c in range(u32):
        acc += x[c - 1]                     # x[-1] first (it read 4 G elements past x)
    out[i, 2] = acc
    s = n32 - n32                           # an int32 accumulator plus the loop's Python ints
    for d in range(3):
        s += d
    out[i, 3] = s


def test_a_range_loops_variable_is_a_python_int_whatever_its_bounds_types():
    """Python's range() gives Python ints: Tack's loop variable took its bounds' type, so with
    an int32 or uint32 ``n`` it wrapped where Python's does not, and ``x[k - 1]`` at k = 0 read
    past the array (an IndexError in debug mode, a wild read without it).  It is an int64 now,
    or a uint64 where a bound is one."""
    out = np.zeros((1, 4), np.int64)
    x = np.arange(4.0)
    xo = np.zeros((1, 4), np.float64)
    tack.launch(k_loop_variable_types, 1, (np.int32(3000), np.uint32(3), x, xo))
    assert xo[0].tolist() == [-3.0, 2999000000.0, x[-1] + x[0] + x[1], 3.0]


@tack.func
def _plus_abs(v, s):
    return v + abs(s)


@tack.kernel
def abs_of_literals(out, f64, f32):
    out[0] = f64[0] + abs(-2**63)
    out[1] = f32[0] + abs(-2**63)
    out[2] = f64[0] + max(-2**63, -2**62) * -1
    out[3] = f64[0] + min(2**63, 2**64 - 1)
    out[4] = _plus_abs(f64[0], -2**63)
    out[5] = f64[0] + abs(-2.5)


def test_abs_min_max_of_literals_alone_are_pythons_values_beside_a_float():
    """``abs(-2**63)`` beside a float was computed at run time in the literal's int64, where it
    wraps: 1.0 + abs(-2**63) gave -9.2e18.  Python's ``abs``, ``min`` and ``max`` of literals
    alone are one literal of Python's value (language.md), written in the kernel or through a
    device function's literal argument."""
    out = np.zeros(6)
    tack.launch(abs_of_literals, dim=1, args=(out, np.array([1.0]), np.array([1.0], np.float32)))
    want = [1.0 + 2**63, float(np.float32(1.0) + 2**63), 1.0 + 2**62, 1.0 + 2**63, 1.0 + 2**63, 3.5]
    assert out.tolist() == want


@tack.kernel
def bool_literal_arithmetic(out, x):
    out[0] = x[0] + (True + True)
    out[1] = x[0] + (True & True)
    out[2] = x[0] + (True * 3 - False)
    flag = True if x[0] > 0 else False
    out[3] = flag


def test_bool_literals_in_literal_arithmetic_fold_as_python_computes_them():
    """``True + True`` (2 in Python, a weak literal to NumPy) was a strong int64: an int32 ``x``
    plus it became int64 where NumPy's stays int32 (and wraps).  Arithmetic on literals alone
    folds a bool as the integer Python makes of it; ``True & True`` stays a bool, as Python's,
    and a bool literal alone is a bool."""
    x = np.array([2**31 - 1], np.int32)
    out = np.zeros(4, np.int64)
    tack.launch(bool_literal_arithmetic, dim=1, args=(out, x))
    with np.errstate(over="ignore"):
        want = [int(x[0] + (True + True)), int(x[0] + (True & True)), int(x[0] + (True * 3 - False)), 1]
    assert out.tolist() == want == [-2**31 + 1, -2**31, -2**31 + 2, 1]
