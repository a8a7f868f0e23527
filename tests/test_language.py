"""The language end to end on the CPU: statements, expressions and semantics against NumPy or plain Python."""

import contextlib
import math
import os
import sys
import warnings

import numpy as np
import pytest

import tack
from tack.backends import cpu_runtime

RNG_SEED = 1234


def rng():
    return np.random.default_rng(RNG_SEED)


def numpy_quiet():
    """A context in which NumPy scalar overflow and divide warnings are silenced."""
    ctx = warnings.catch_warnings()

    class _Both:
        def __enter__(self):
            ctx.__enter__()
            warnings.simplefilter("ignore")
            self.err = np.errstate(all="ignore")
            self.err.__enter__()

        def __exit__(self, *exc):
            self.err.__exit__(*exc)
            return ctx.__exit__(*exc)

    return _Both()


# =====================================================================================
# Integer floor division and modulo: Python's semantics, division by zero gives 0
# =====================================================================================

@tack.kernel
def k_divmod(a, b, q, r):
    i = tack.tid()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]


def _int_operands(dtype, n=400):
    info = np.iinfo(dtype)
    g = rng()
    special = [info.min, info.min + 1, -7, -3, -1, 0, 1, 2, 3, 7, info.max - 1, info.max]
    special = [v for v in special if info.min <= v <= info.max]
    special = np.array(special, dtype=dtype)
    pa, pb = np.meshgrid(special, special)
    big_a = g.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
    big_b = g.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
    lo = max(info.min, -50)
    small_a = g.integers(lo, 50, n, endpoint=True).astype(dtype)
    small_b = g.integers(lo, 50, n, endpoint=True).astype(dtype)
    a = np.concatenate([pa.ravel(), big_a, small_a, big_a[: n // 2]])
    b = np.concatenate([pb.ravel(), big_b, small_b, small_b[: n // 2]])
    return a, b


def _wrap(v, dtype):
    info = np.iinfo(dtype)
    bits = info.bits
    v %= 1 << bits
    if info.min < 0 and v > info.max:
        v -= 1 << bits
    return v


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_integer_floordiv_mod_python_semantics(dtype):
    """Integer // and % floor like Python for negative operands, wrap to the type, and give 0 when dividing by zero."""
    a, b = _int_operands(dtype)
    q, r = np.empty_like(a), np.empty_like(a)
    tack.launch(k_divmod, dim=a.size, args=(a, b, q, r))
    want_q = [_wrap(int(x) // int(y), dtype) if y else 0 for x, y in zip(a, b)]
    want_r = [_wrap(int(x) % int(y), dtype) if y else 0 for x, y in zip(a, b)]
    np.testing.assert_array_equal(q, np.array(want_q, dtype=dtype))
    np.testing.assert_array_equal(r, np.array(want_r, dtype=dtype))


@pytest.mark.parametrize("ta, tb", [(np.int32, np.int64), (np.uint32, np.int32),
                                    (np.int64, np.uint64), (np.int32, np.float32)])
def test_mixed_floordiv_mod_match_numpy(ta, tb):
    """// and % on mixed types give NumPy's result type and values (int64 with uint64 is float64)."""
    g = rng()
    a = g.integers(-1000, 1000, 500).astype(ta) if np.dtype(ta).kind != "u" \
        else g.integers(0, 2000, 500).astype(ta)
    b = g.integers(1, 50, 500).astype(tb)
    if np.dtype(tb).kind != "u":
        b[::2] *= -1
    rt = np.result_type(ta, tb)
    q, r = np.empty(500, rt), np.empty(500, rt)
    tack.launch(k_divmod, dim=500, args=(a, b, q, r))
    np.testing.assert_array_equal(q, np.floor_divide(a, b))
    np.testing.assert_array_equal(r, np.remainder(a, b))


# Operands where floor(a / b) and Python's a // b part: a rounded quotient (1.0 / 0.1 is 10.0,
# 1.0 // 0.1 is 9.0), infinities, zeros of both signs, NaN, the smallest and largest floats.
SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.1, -0.1, 0.3, 7.5, -7.5, 2.0, -0.5, 0.7, 5.0, 1 / 3, 3.3,
                  1e10, 1e-300, 5e-324, 1.7e308, 2.0 ** 53, 2.0 ** 53 + 2, np.inf, -np.inf, np.nan]


def _same_floats(got, want):
    """Equal as NumPy's results are: the same value and sign (of a zero too), or both NaN."""
    return ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_float_floordiv_mod_are_pythons(dtype):
    """Float // and % are Python's and NumPy's (npy_divmod): the quotient is the floor of
    (a - a % b) / b, so that 1.0 // 0.1 is 9.0 (1.0 % 0.1 is 0.0999...), not floor(1.0 / 0.1),
    10.0, as Tack gave; inf // 2 is nan and 3.0 // -inf is -1.0; by zero, a / b (NumPy's)."""
    pairs = np.array([(x, y) for x in SPECIAL_FLOATS for y in SPECIAL_FLOATS])
    with np.errstate(over="ignore"):
        a, b = pairs[:, 0].astype(dtype), pairs[:, 1].astype(dtype)
    q, r = np.empty_like(a), np.empty_like(a)
    tack.launch(k_divmod, dim=a.size, args=(a, b, q, r))
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(a, b), np.remainder(a, b)
    bad = ~_same_floats(q, want_q)
    assert not bad.any(), [(x, y, g, w) for x, y, g, w in zip(a[bad], b[bad], q[bad], want_q[bad])][:8]
    assert _same_floats(r, want_r).all()
    if dtype == np.float64:                 # and Python's own, where Python does not raise
        for x, y, got in zip(a.tolist(), b.tolist(), q.tolist()):
            if y != 0:
                assert _same_floats(np.float64(got), np.float64(x // y)), (x, y, got, x // y)


def test_float_floordiv_mod_random():
    """Float // and % of random operands of both signs are NumPy's, and agree with each other:
    a % b is a - (a // b) * b, up to rounding."""
    g = rng()
    a = g.uniform(-100, 100, 2000)
    b = g.uniform(0.01, 10, 2000) * g.choice([-1.0, 1.0], 2000)
    q, r = np.empty_like(a), np.empty_like(a)
    tack.launch(k_divmod, dim=a.size, args=(a, b, q, r))
    np.testing.assert_array_equal(q, np.floor_divide(a, b))
    np.testing.assert_array_equal(q, [x // y for x, y in zip(a.tolist(), b.tolist())])
    np.testing.assert_allclose(r, [x % y for x, y in zip(a.tolist(), b.tolist())], rtol=0, atol=1e-12)
    np.testing.assert_allclose(q * b + r, a, rtol=0, atol=1e-12)
    assert np.all((r == 0) | (np.sign(r) == np.sign(b)))


@tack.kernel
def k_truediv(a, b, out):
    i = tack.tid()
    out[i, 0] = a[i] / b[i]
    out[i, 1] = a[i] / 2
    out[i, 2] = 7 / 2


def test_true_division_gives_float():
    """/ on integers gives float64, like Python and NumPy."""
    a = np.array([7, -7, 1, 0], np.int32)
    b = np.array([2, 2, 3, 5], np.int32)
    out = np.empty((4, 3))
    tack.launch(k_truediv, dim=4, args=(a, b, out))
    np.testing.assert_array_equal(out[:, 0], a / b)
    np.testing.assert_array_equal(out[:, 1], a / 2)
    np.testing.assert_array_equal(out[:, 2], 3.5)


# =====================================================================================
# Promotion of mixed types (NumPy 2 / NEP 50)
# =====================================================================================

@tack.kernel
def k_mixed(x, y, out):
    out[0] = x + y
    out[1] = x - y
    out[2] = x * y


MIXED_CASES = [
    (np.int32(2**31 - 1), np.int64(1)),          # int32 + int64 -> int64: no wrap
    (np.int64(-3), np.uint64(1)),                # int64 + uint64 -> float64
    (np.uint32(2**32 - 1), np.int32(1)),         # -> int64
    (np.int32(7), np.uint32(5)),                 # -> int64
    (np.uint64(2**64 - 1), np.uint64(2)),        # uint64 wraps
    (np.int32(2**31 - 1), np.int32(2)),          # int32 wraps
    (np.float32(0.1), np.float64(3.0)),          # -> float64
    (np.float32(0.1), np.float32(3.0)),          # stays float32
    (np.float32(0.1), np.int32(1)),              # -> float64
    (np.float32(0.1), np.int64(3)),              # -> float64
    (3, 0.5),                                    # Python int + float -> float64
    (np.bool_(True), np.int32(5)),               # -> int32
]


@pytest.mark.parametrize("x, y", MIXED_CASES, ids=[f"{type(x).__name__}-{type(y).__name__}-{i}"
                                                  for i, (x, y) in enumerate(MIXED_CASES)])
def test_mixed_arithmetic_promotes_like_numpy(x, y):
    """+ - * on two typed scalars compute in NumPy's result type (overflow and rounding show which)."""
    out = np.empty(3)
    tack.launch(k_mixed, dim=1, args=(x, y, out))
    with numpy_quiet():
        want = [x + y, x - y, x * y]
    np.testing.assert_array_equal(out, np.array([float(w) for w in want]))


@tack.kernel
def k_weak(a, out):
    x = a[0]
    out[0] = x * 3.0
    out[1] = x + 1
    out[2] = x * 2
    out[3] = x / 2
    out[4] = x - 0.5
    out[5] = 1 - x
    out[6] = 2.5 * x


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64])
def test_python_literals_are_weak(dtype):
    """A Python literal takes the other operand's type where it can (float32 * 2.0 stays float32, int32 + 1 wraps as int32)."""
    v = np.iinfo(dtype).max if np.dtype(dtype).kind in "iu" else dtype(0.1)
    a = np.array([v], dtype)
    out = np.empty(7)
    tack.launch(k_weak, dim=1, args=(a, out))
    x = a[0]
    with numpy_quiet():
        want = [x * 3.0, x + 1, x * 2, x / 2, x - 0.5, 1 - x, 2.5 * x]
    np.testing.assert_array_equal(out, np.array([float(w) for w in want]))


@tack.kernel
def k_shift(x, y, out):
    out[0] = x << y
    out[1] = x >> y


@pytest.mark.parametrize("x, y", [(np.int64(-8), np.int64(1)), (np.uint32(1), np.uint32(31)),
                                  (np.int32(1), np.int64(40)), (np.int32(-(2**31)), np.int64(33))],
                         ids=["int64", "uint32", "int32-int64", "int32-int64-right"])
def test_shifts_promote_like_numpy(x, y):
    """<< and >> of mixed integer types compute in NumPy's result type (int32 << int64 is int64)."""
    out = np.empty(2, np.int64)
    tack.launch(k_shift, dim=1, args=(x, y, out))
    with numpy_quiet():
        want = [int(x << y), int(x >> y)]
    np.testing.assert_array_equal(out, want)


@tack.kernel
def k_bitwise(a, b, s, out):
    i = tack.tid()
    out[i, 0] = a[i] & b[i]
    out[i, 1] = a[i] | b[i]
    out[i, 2] = a[i] ^ b[i]
    out[i, 3] = ~a[i]
    out[i, 4] = a[i] << s[i]
    out[i, 5] = a[i] >> s[i]
    out[i, 6] = -a[i]


@pytest.mark.parametrize("dtype", [np.int32, np.uint64])
def test_bitwise_and_shifts(dtype):
    """& | ^ ~ << >> and unary minus on random integers agree with NumPy."""
    a, b = _int_operands(dtype, 300)
    bits = np.iinfo(dtype).bits
    s = rng().integers(0, bits, a.size).astype(dtype)
    out = np.empty((a.size, 7), dtype)
    tack.launch(k_bitwise, dim=a.size, args=(a, b, s, out))
    with numpy_quiet():
        want = np.stack([a & b, a | b, a ^ b, ~a, a << s, a >> s, -a], axis=1)
    np.testing.assert_array_equal(out, want)


@tack.kernel
def k_pow(a, b, out):
    i = tack.tid()
    out[i] = a[i] ** b[i]


def test_power_int_and_float():
    """** on integers (non-negative exponents) and on floats agrees with NumPy."""
    g = rng()
    a = g.integers(-5, 6, 300)
    b = g.integers(0, 20, 300)
    out = np.empty(300, np.int64)
    tack.launch(k_pow, dim=300, args=(a, b, out))
    np.testing.assert_array_equal(out, a ** b)
    fa, fb = g.uniform(0.1, 4, 300), g.uniform(-3, 3, 300)
    fo = np.empty(300)
    tack.launch(k_pow, dim=300, args=(fa, fb, fo))
    np.testing.assert_allclose(fo, fa ** fb, rtol=1e-14)


@tack.kernel
def k_np_power(a, b, out):
    i = tack.tid()
    out[i] = np.power(a[i], b[i])


@tack.kernel
def k_np_abs(a, out):
    i = tack.tid()
    out[i, 0] = np.abs(a[i])
    out[i, 1] = np.absolute(a[i])


@tack.kernel
def k_np_fmod(a, b, out):
    i = tack.tid()
    out[i] = np.fmod(a[i], b[i])


def test_numpy_fmod_of_integers_is_the_integer_remainder():
    """``np.fmod`` of integers is NumPy's: the remainder truncated toward zero (the dividend's
    sign), in the integer type, 0 when dividing by 0; it went through float64 ``math.fmod``, so
    past 2**53 it was wrong.  On floats it is C's fmod, as ``math.fmod``."""
    a = np.array([7, -7, 7, -7, 2**62 + 1, -2**63, -2**63, 5, 0], np.int64)
    b = np.array([3, 3, -3, -3, 3, -1, 7, 0, 0], np.int64)
    out = np.empty(9, np.int64)
    tack.launch(k_np_fmod, dim=9, args=(a, b, out))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, np.fmod(a, b))
    u = np.array([2**64 - 1, 10, 9], np.uint64)
    v = np.array([10, 0, 2**63], np.uint64)
    ou = np.empty(3, np.uint64)
    tack.launch(k_np_fmod, dim=3, args=(u, v, ou))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ou, np.fmod(u, v))
    a32 = np.array([-2**31, -2**31, 100, -9], np.int32)
    b32 = np.array([-1, 3, 7, 4], np.int32)
    o32 = np.empty(4, np.int32)
    tack.launch(k_np_fmod, dim=4, args=(a32, b32, o32))
    np.testing.assert_array_equal(o32, np.fmod(a32, b32))
    fa, fb = np.array([5.5, -5.5, 1e300, -0.0]), np.array([2.0, 2.0, 3.0, 1.0])
    fo = np.empty(4)
    tack.launch(k_np_fmod, dim=4, args=(fa, fb, fo))
    np.testing.assert_array_equal(fo, np.fmod(fa, fb))
    assert np.signbit(fo[3])

def test_numpy_power_and_abs_of_integers_stay_integers():
    """``np.power`` and ``np.abs`` of integers are NumPy's integer operations: they went through
    float64 (``math.pow``, ``math.fabs``), so ``np.power(3, 39)`` lost its low bits, ``np.power(0,
    -1)`` was inf cast to an int, ``np.abs(-(2**53 + 1))`` was 2**53 and ``np.abs(-2**63)``
    2**63 - 1.  On floats they are ``**`` and ``fabs``."""
    a = np.array([3, -7, 2, 0, 5, -1, 0], np.int64)
    b = np.array([39, 21, 62, 0, 1, 7, -1], np.int64)
    out = np.empty(7, np.int64)
    tack.launch(k_np_power, dim=7, args=(a, b, out))
    np.testing.assert_array_equal(out[:6], np.power(a[:6], b[:6]))
    assert out[6] == 0                          # a negative exponent gives 0, as ** does
    a32 = np.array([3, -7, 2, 46340], np.int32)
    out32 = np.empty(4, np.int32)
    tack.launch(k_np_power, dim=4, args=(a32, np.array([19, 11, 31, 2], np.int32), out32))
    np.testing.assert_array_equal(out32, np.power(a32, np.array([19, 11, 31, 2], np.int32)))
    fa, fb = np.array([0.5, 2.0, 9.0, 1.5]), np.array([3.0, -0.5, 0.5, 7.25])
    fo = np.empty(4)
    tack.launch(k_np_power, dim=4, args=(fa, fb, fo))
    np.testing.assert_allclose(fo, np.power(fa, fb), rtol=1e-14)
    x = np.array([-(2**53 + 1), -2**63, 2**63 - 1, -5, 0], np.int64)
    ox = np.empty((5, 2), np.int64)
    tack.launch(k_np_abs, dim=5, args=(x, ox))
    np.testing.assert_array_equal(ox, np.stack([np.abs(x)] * 2, axis=1))
    x32 = np.array([-2**31, -3, 7], np.int32)
    o32 = np.empty((3, 2), np.int32)
    tack.launch(k_np_abs, dim=3, args=(x32, o32))
    np.testing.assert_array_equal(o32, np.stack([np.abs(x32)] * 2, axis=1))
    f = np.array([-0.0, -2.5, np.inf])
    of = np.empty((3, 2))
    tack.launch(k_np_abs, dim=3, args=(f, of))
    np.testing.assert_array_equal(of, np.stack([np.abs(f)] * 2, axis=1))
    assert not np.signbit(of).any()


# =====================================================================================
# Same source in Python and in Tack: statements, comparisons, literals, tuples
# =====================================================================================

def loops(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        total += i
    for i in range(2, n, 3):
        total += 2 * i
    for i in range(n, -n, -4):
        total -= i
    j = 0
    while True:
        j += 1
        if j * j > n:
            break
    total += 100 * j
    k = n
    for i in range(k):
        k = k - 1
    total += 1000 * k
    last = -1
    for i in range(n):
        last = i
        i = i + 100
    total += 10000 * last
    for i in range(4):
        for m in range(10):
            if m > i:
                break
            total += m
    w = n
    while w > 0:
        w -= 3
        if w == 4:
            continue
        total += 1
    pass
    return total


def branches(x, y):
    if x < -5:
        code = 1
    elif x < 0:
        code = 2
    elif x == 0:
        code = 3
    else:
        if y > x:
            code = 4
        else:
            code = 5
    code = code * 10 + (1 if x % 2 == 0 else 2)
    t = -3 < x <= y < 8
    u = x != y and not (y > 5 or x < -5)
    v = 0 <= x < 5 == 5
    return code, t, u, v, (x if x > y else y) == max(x, y)


def augmented(x, y):
    v = x
    v += y
    v -= 3
    v *= 2
    v //= 3
    v %= 7
    v **= 2
    v &= 0xFF
    v |= 0b1000
    v ^= 0o17
    v <<= 2
    v >>= 1
    f = 0.5
    f += v
    f *= 1.5
    f /= 4
    f -= 1e-3
    f **= 2
    f //= 0.5
    return v, f


def literals(x):
    a = 0xFF + 0b1010 + 0o17 + 1_000 + 0x_FF_FF
    b = 1e3 + 2.5e-3 + 1_000.5 + .5 + 3.
    c = -7 // 2 + -7 % 2 * 10
    return a + x, b, c, 7 / 2, True, 2**10


def casts(x, n):
    a = int(x)
    b = float(n) / 4
    c = tack.float32(x) * 3.0
    d = tack.int32(n) * 2
    e = bool(x)
    g = tack.float64(tack.float32(x))
    return a, b, c, d, e, g


def sum_diff(a, b):
    return a + b, a - b


def mixed_tuple(x):
    if x > 2:
        return x, 0.5 * x, True
    return -x, 2.0, False


def nested_tuple(x):
    return x, (x + 1, x * 2.5)


def counter_sums(n):
    """Sums of a loop's counter, which LLVM writes in closed form after the loop (on i65, which
    SPIR-V has no type for: OpenCL and Level Zero refused to build them)."""
    s = 0
    for j in range(n):
        s += j
    q = 0
    for j in range(n):
        q += j * j
    a = 0
    j = 0
    while j < n:
        a += j * 3 + 1
        j += 1
    u = tack.uint64(0)
    for j in range(n):
        u += tack.uint64(j)
    return s, q, a, u


def found_at(xs, v):
    """A tuple returned from inside a loop (several returns of a struct: LLVM's SPIR-V backend
    aborted on the phi it joins them with)."""
    for j in range(xs.shape[0]):
        if xs[j] == v:
            return j, j + 1
    return -1, -1


loops_d, branches_d, augmented_d, literals_d, casts_d = (
    tack.func(loops), tack.func(branches), tack.func(augmented), tack.func(literals), tack.func(casts))
sum_diff_d, mixed_tuple_d, nested_tuple_d = (
    tack.func(sum_diff), tack.func(mixed_tuple), tack.func(nested_tuple))
counter_sums_d, found_at_d = tack.func(counter_sums), tack.func(found_at)


@tack.kernel
def k_counter_sums(ns, out, uout):
    i = tack.tid()
    s, q, a, u = counter_sums_d(ns[i])
    out[i, 0] = s
    out[i, 1] = q
    out[i, 2] = a
    uout[i] = u


@tack.kernel
def k_found_at(xs, vs, out):
    i = tack.tid()
    p, q = found_at_d(xs, vs[i])
    out[i, 0] = p
    out[i, 1] = q


@tack.kernel
def k_loops(ns, out):
    i = tack.tid()
    out[i] = loops_d(ns[i])


@tack.kernel
def k_branches(xs, ys, out):
    i = tack.tid()
    code, t, u, v, w = branches_d(xs[i], ys[i])
    out[i, 0] = code
    out[i, 1] = t
    out[i, 2] = u
    out[i, 3] = v
    out[i, 4] = w


@tack.kernel
def k_augmented(xs, ys, vi, vf):
    i = tack.tid()
    vi[i], vf[i] = augmented_d(xs[i], ys[i])


@tack.kernel
def k_literals(out):
    i = tack.tid()
    a, b, c, d, e, f = literals_d(i)
    out[i, 0] = a
    out[i, 1] = b
    out[i, 2] = c
    out[i, 3] = d
    out[i, 4] = e
    out[i, 5] = f


@tack.kernel
def k_casts(xs, ns, out):
    i = tack.tid()
    a, b, c, d, e, g = casts_d(xs[i], ns[i])
    out[i, 0] = a
    out[i, 1] = b
    out[i, 2] = c
    out[i, 3] = d
    out[i, 4] = e
    out[i, 5] = g


@tack.kernel
def k_tuples(xs, out):
    i = tack.tid()
    x = xs[i]
    s, d = sum_diff_d(x, 3)
    p = sum_diff_d(x, 0.5)
    m0, m1, m2 = mixed_tuple_d(x)
    n0, (n1, n2) = nested_tuple_d(x)
    a, b = s, d
    a, b = b, a
    e = g = 7
    out[i, 0] = s
    out[i, 1] = d
    out[i, 2] = p[0]
    out[i, 3] = p[1]
    out[i, 4] = m0
    out[i, 5] = m1
    out[i, 6] = m2
    out[i, 7] = n0
    out[i, 8] = n1
    out[i, 9] = n2
    out[i, 10] = a
    out[i, 11] = b
    out[i, 12] = e + g


def test_loops_match_python():
    """for over range with 1-3 arguments (negative steps), while, break, continue, nested loops and pass match Python."""
    ns = np.arange(0, 40, dtype=np.int64)
    out = np.empty(40, np.int64)
    tack.launch(k_loops, dim=40, args=(ns, out))
    np.testing.assert_array_equal(out, [loops(int(n)) for n in ns])


def test_sums_of_a_loop_counter_and_tuples_returned_from_loops_match_python():
    """Loops summing their counter (int64, uint64, while) and a device function returning a
    tuple from inside a loop match Python, on every device the language suite runs on
    (tests/backends: OpenCL, which failed to build both)."""
    ns = np.array([0, 1, 2, 10, 1000, 99999], np.int64)
    out = np.empty((ns.size, 3), np.int64)
    uout = np.empty(ns.size, np.uint64)
    tack.launch(k_counter_sums, dim=ns.size, args=(ns, out, uout))
    want = [counter_sums(int(n)) for n in ns]
    assert want[3] == (45, 285, 145, 45)
    np.testing.assert_array_equal(out, [w[:3] for w in want])
    np.testing.assert_array_equal(uout, [w[3] for w in want])
    xs = np.array([5, 7, 7, 9], np.int64)
    vs = np.array([7, 9, 5, 4], np.int64)
    found = np.empty((4, 2), np.int64)
    tack.launch(k_found_at, dim=4, args=(xs, vs, found))
    np.testing.assert_array_equal(found, [found_at(xs, v) for v in vs])


def test_branches_and_comparisons_match_python():
    """if/elif/else, conditional expressions, comparison chains and and/or/not match Python."""
    g = rng()
    xs = g.integers(-10, 10, 500)
    ys = g.integers(-10, 10, 500)
    out = np.empty((500, 5), np.int64)
    tack.launch(k_branches, dim=500, args=(xs, ys, out))
    want = [[int(v) for v in branches(int(x), int(y))] for x, y in zip(xs, ys)]
    np.testing.assert_array_equal(out, want)


def test_augmented_assignment_matches_python():
    """Every augmented assignment operator, on int and float variables, matches Python."""
    g = rng()
    xs = g.integers(-100, 100, 300)
    ys = g.integers(-100, 100, 300)
    vi, vf = np.empty(300, np.int64), np.empty(300)
    tack.launch(k_augmented, dim=300, args=(xs, ys, vi, vf))
    want = [augmented(int(x), int(y)) for x, y in zip(xs, ys)]
    np.testing.assert_array_equal(vi, [w[0] for w in want])
    np.testing.assert_array_equal(vf, [w[1] for w in want])


def test_number_literals_match_python():
    """Hex, binary, octal, underscored and exponent literals mean what they mean in Python."""
    out = np.empty((3, 6))
    tack.launch(k_literals, dim=3, args=(out,))
    np.testing.assert_array_equal(out, [[float(v) for v in literals(i)] for i in range(3)])


def test_casts_match_python():
    """int(), float(), bool() and tack.float32/int32/float64 convert like Python and NumPy."""
    g = rng()
    xs = np.concatenate([g.uniform(-50, 50, 200), [0.0, -0.0, 2.7, -2.7, 0.5, -0.5]])
    ns = g.integers(-1000, 1000, xs.size)
    out = np.empty((xs.size, 6))
    tack.launch(k_casts, dim=xs.size, args=(xs, ns, out))
    want = [[float(v) for v in casts(float(x), int(n))] for x, n in zip(xs, ns)]
    np.testing.assert_array_equal(out, want)


@tack.kernel
def k_store_convert(x, as_int, as_f32, as_u8bool):
    i = tack.tid()
    as_int[i] = x[i]
    as_f32[i] = x[i]
    as_u8bool[i] = x[i]


def test_store_converts_to_array_dtype():
    """Storing a float64 into int32, float32 and bool arrays converts like NumPy's element assignment."""
    x = np.array([1.7, -2.5, 0.0, 3.999, -0.2, 1e-40])
    as_int, as_f32, as_bool = np.empty(6, np.int32), np.empty(6, np.float32), np.empty(6, bool)
    tack.launch(k_store_convert, dim=6, args=(x, as_int, as_f32, as_bool))
    np.testing.assert_array_equal(as_int, x.astype(np.int32))
    np.testing.assert_array_equal(as_f32, x.astype(np.float32))
    np.testing.assert_array_equal(as_bool, x.astype(bool))


def test_tuples_match_python():
    """Device functions return tuples (mixed types, nested); assignment unpacks them, swaps and chains."""
    xs = np.array([-3, 0, 1, 2, 3, 10], np.int64)
    out = np.empty((xs.size, 13))
    tack.launch(k_tuples, dim=xs.size, args=(xs, out))
    for row, x in zip(out, xs.tolist()):
        s, d = sum_diff(x, 3)
        p = sum_diff(x, 0.5)
        m = mixed_tuple(x)
        n0, (n1, n2) = nested_tuple(x)
        want = [s, d, p[0], p[1], *m, n0, n1, n2, d, s, 14]
        np.testing.assert_array_equal(row, [float(v) for v in want])


# =====================================================================================
# Math functions, min/max/abs
# =====================================================================================

@tack.kernel
def k_math(xs, ys, out):
    i = tack.tid()
    a = xs[i]
    b = ys[i]
    out[i, 0] = math.sqrt(a)
    out[i, 1] = math.exp(a)
    out[i, 2] = math.log(a)
    out[i, 3] = math.sin(a)
    out[i, 4] = math.cos(a)
    out[i, 5] = math.tan(a)
    out[i, 6] = math.floor(a - 1.5)
    out[i, 7] = math.ceil(a - 1.5)
    out[i, 8] = math.fabs(a - 1.5)
    out[i, 9] = math.pow(a, b)
    out[i, 10] = math.atan2(a - 1.5, b - 1.0)
    out[i, 11] = math.hypot(a, b)
    out[i, 12] = np.sqrt(a)
    out[i, 13] = math.log10(a)
    out[i, 14] = math.tanh(a - 1.5)
    out[i, 15] = math.fmod(a * 3, b)
    out[i, 16] = math.asin(a / 3.5 - 0.5)
    out[i, 17] = math.erf(a - 1.5)
    out[i, 18] = math.log2(a)
    out[i, 19] = math.expm1(a - 1.5)
    out[i, 20] = math.log1p(a)
    out[i, 21] = math.sinh(a - 1.5)
    out[i, 22] = math.trunc(a - 1.5)
    out[i, 23] = np.arctan2(a, -b)
    out[i, 24] = math.atan(a)
    out[i, 25] = math.acos(a / 3.5 - 0.5)


MATH_REF = [
    lambda a, b: math.sqrt(a), lambda a, b: math.exp(a), lambda a, b: math.log(a),
    lambda a, b: math.sin(a), lambda a, b: math.cos(a), lambda a, b: math.tan(a),
    lambda a, b: math.floor(a - 1.5), lambda a, b: math.ceil(a - 1.5), lambda a, b: math.fabs(a - 1.5),
    lambda a, b: math.pow(a, b), lambda a, b: math.atan2(a - 1.5, b - 1.0), lambda a, b: math.hypot(a, b),
    lambda a, b: math.sqrt(a), lambda a, b: math.log10(a), lambda a, b: math.tanh(a - 1.5),
    lambda a, b: math.fmod(a * 3, b), lambda a, b: math.asin(a / 3.5 - 0.5), lambda a, b: math.erf(a - 1.5),
    lambda a, b: math.log2(a), lambda a, b: math.expm1(a - 1.5), lambda a, b: math.log1p(a),
    lambda a, b: math.sinh(a - 1.5), lambda a, b: math.trunc(a - 1.5),
    lambda a, b: math.atan2(a, -b), lambda a, b: math.atan(a), lambda a, b: math.acos(a / 3.5 - 0.5),
]


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-13), (np.float32, 2e-6)])
def test_math_functions(dtype, rtol):
    """math (and numpy) functions on float64 and float32 agree with Python's math module."""
    g = rng()
    xs = g.uniform(0.1, 3.0, 200).astype(dtype)
    ys = g.uniform(0.5, 2.0, 200).astype(dtype)
    out = np.empty((200, len(MATH_REF)), dtype)
    tack.launch(k_math, dim=200, args=(xs, ys, out))
    want = np.array([[f(float(x), float(y)) for f in MATH_REF] for x, y in zip(xs, ys)])
    np.testing.assert_allclose(out, want.astype(dtype), rtol=rtol, atol=rtol)


@tack.kernel
def k_copysign(xs, ys, out):
    i = tack.tid()
    out[i] = math.copysign(xs[i], ys[i])


def run_copysign():
    """Launch k_copysign and return its output (run in a subprocess by the test below)."""
    xs = np.array([1.5, -2.0, 3.0, -0.0])
    ys = np.array([-1.0, 2.0, 0.0, 1.0])
    out = np.empty(4)
    tack.launch(k_copysign, dim=4, args=(xs, ys, out))
    return out.tolist()


def test_copysign():
    """math.copysign compiles and agrees with Python (checked in a subprocess, so a crash fails only this test)."""
    import subprocess
    import sys
    from pathlib import Path
    code = "from tests.test_language import run_copysign; print(run_copysign())"
    res = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"exit status {res.returncode}: {res.stderr[-2000:]}"
    assert res.stdout.strip() == str([math.copysign(x, y) for x, y in
                                      [(1.5, -1.0), (-2.0, 2.0), (3.0, 0.0), (-0.0, 1.0)]])


@tack.kernel
def k_minmax_abs(ia, ib, fa, out):
    i = tack.tid()
    out[i, 0] = min(ia[i], ib[i])
    out[i, 1] = max(ia[i], ib[i], 0)
    out[i, 2] = abs(ia[i])
    out[i, 3] = abs(fa[i])
    out[i, 4] = max(ia[i], fa[i])
    out[i, 5] = min(fa[i], 0.25, ib[i])
    out[i, 6] = math.sqrt(abs(ia[i]))


def test_min_max_abs():
    """min/max of two or more (mixed) numbers and abs of ints and floats agree with Python."""
    g = rng()
    ia, ib = g.integers(-50, 50, 300), g.integers(-50, 50, 300).astype(np.int32)
    fa = g.uniform(-50, 50, 300)
    out = np.empty((300, 7))
    tack.launch(k_minmax_abs, dim=300, args=(ia, ib, fa, out))
    want = [[min(a, b), max(a, b, 0), abs(a), abs(f), max(a, f), min(f, 0.25, b), math.sqrt(abs(a))]
            for a, b, f in zip(ia.tolist(), ib.tolist(), fa.tolist())]
    np.testing.assert_array_equal(out, want)


@tack.kernel
def k_np_minimum_maximum(a, b, ia, ib, out, iout):
    i = tack.tid()
    out[i, 0] = np.minimum(a[i], b[i])
    out[i, 1] = np.maximum(a[i], b[i])
    out[i, 2] = np.minimum(a[i], 0.5)
    iout[i, 0] = np.minimum(ia[i], ib[i])
    iout[i, 1] = np.maximum(ia[i], ib[i])


@pytest.mark.parametrize("ftype", [np.float32, np.float64])
def test_numpy_minimum_maximum_follow_numpy(ftype):
    """``np.minimum`` / ``np.maximum`` follow NumPy's rule, not Python's ``min``/``max``: a NaN on
    either side gives NaN (``np.minimum(1.0, nan)`` gave 1.0), and on a tie the second is
    returned (``np.minimum(0.0, -0.0)`` is -0.0)."""
    vals = np.array([np.nan, -np.inf, -1.5, -0.0, 0.0, 0.5, 2.0, np.inf], dtype=ftype)
    a, b = (x.ravel().copy() for x in np.meshgrid(vals, vals))
    n = len(a)
    ia = np.tile(np.array([-3, 0, 7, 2**31 - 1], dtype=np.int32), 16)[:n]
    ib = np.tile(np.array([5, 0, 2**32 - 1, 1], dtype=np.uint32), 16)[:n]
    out, iout = np.empty((n, 3), dtype=ftype), np.empty((n, 2), dtype=np.int64)
    tack.launch(k_np_minimum_maximum, dim=n, args=(a, b, ia, ib, out, iout))
    with numpy_quiet():
        want = np.stack([np.minimum(a, b), np.maximum(a, b), np.minimum(a, ftype(0.5))], axis=1)
    np.testing.assert_array_equal(out, want)
    assert (np.signbit(out) == np.signbit(want)).all(), (a, b, out, want)
    np.testing.assert_array_equal(iout, np.stack([np.minimum(ia, ib), np.maximum(ia, ib)], axis=1))


# NumPy's np.clip, np.sign, np.where, np.rint, np.round (np.around), Python's round and
# math.isclose on scalars, over the values where they part: NaNs (of both signs), infinities,
# zeros of both signs, ties and halves.
EDGE_FLOATS = [np.nan, -np.nan, -np.inf, -2.5, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 2.5,
               0.49999999999999994, 3.3, 1e300, 2.0 ** 52 + 1, np.inf]


def _bits(a):
    """Each float's bits: equal results bit for bit, a NaN's sign and payload too."""
    a = np.asarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


@tack.kernel
def k_np_clip(x, lo, hi, out):
    i = tack.tid()
    out[i, 0] = np.clip(x[i], lo[i], hi[i])
    out[i, 1] = np.clip(x[i], lo[i], None)
    out[i, 2] = np.clip(x[i], None, hi[i])
    out[i, 3] = np.clip(x[i], a_min=lo[i], a_max=hi[i])
    out[i, 4] = np.clip(x[i], max=hi[i])
    out[i, 5] = np.clip(x[i], -1.25, 1.25)


@pytest.mark.parametrize("ftype", [np.float64, np.float32])
def test_numpy_clip_follows_numpy(ftype):
    """``np.clip(x, lo, hi)`` is NumPy's bit for bit: ``x`` on a tie (``np.clip(-0.0, 0.0, 1.0)``
    is -0.0), a NaN ``x`` passes through, a NaN bound is the result (``lo``'s before ``hi``'s);
    one bound None (or ``min=``/``max=`` alone) is NumPy's ``np.maximum`` / ``np.minimum``."""
    vals = np.array([np.nan, -np.nan, -np.inf, -2.0, -0.0, 0.0, 0.5, 3.0, np.inf], dtype=ftype)
    x, lo, hi = (v.ravel().copy() for v in np.meshgrid(vals, vals, vals, indexing="ij"))
    out = np.empty((x.size, 6), dtype=ftype)
    tack.launch(k_np_clip, dim=x.size, args=(x, lo, hi, out))
    with numpy_quiet():         # of scalars (NumPy's loop over arrays picks another NaN)
        want = np.array([[np.clip(a, b, c), np.clip(a, b, None), np.clip(a, None, c),
                          np.clip(a, a_min=b, a_max=c), np.clip(a, max=c), np.clip(a, -1.25, 1.25)]
                         for a, b, c in zip(x, lo, hi)], dtype=ftype)
    bad = np.nonzero((_bits(out) != _bits(want)).any(1))[0]
    assert not bad.size, [(x[k], lo[k], hi[k], out[k], want[k]) for k in bad[:5]]


@tack.kernel
def k_np_clip_mixed(x, lo, hi, n, out, iout):
    i = tack.tid()
    out[i, 0] = np.clip(n[i], lo[i], hi[i])        # int32 with float bounds: float64
    out[i, 1] = np.clip(n[i], 0.5, 7)               # with a float literal: float64
    out[i, 2] = np.clip(x[i], n[i], 3)
    iout[i, 0] = np.clip(n[i], -3, 5)               # int32 stays int32
    iout[i, 1] = np.clip(n[i], 5, -3)               # lo above hi: hi, as NumPy
    iout[i, 2] = np.clip(n[i] + (2**31 - 8), 0, 2**31 - 1)   # wraps as int32 first


def test_numpy_clip_of_mixed_types_and_integers():
    """``np.clip`` promotes as NumPy's result_type (an int32 between float bounds is a float64),
    keeps integers integers, and of bounds in the wrong order gives ``hi``."""
    n = np.array([-10, -3, 0, 2, 5, 9, 2**31 - 1, -2**31], np.int32)
    x = np.linspace(-4.0, 4.0, n.size)
    lo, hi = np.full(n.size, -2.5), np.full(n.size, 4.5)
    out, iout = np.empty((n.size, 3)), np.empty((n.size, 3), np.int64)
    tack.launch(k_np_clip_mixed, dim=n.size, args=(x, lo, hi, n, out, iout))
    with numpy_quiet():
        want = np.stack([np.clip(n, lo, hi), np.clip(n, 0.5, 7), np.clip(x, n, 3)], axis=1)
        iwant = np.stack([np.clip(n, -3, 5), np.clip(n, 5, -3),
                          np.clip(n + np.int32(2**31 - 8), 0, 2**31 - 1)], axis=1)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(iout, iwant)


@tack.kernel
def k_np_clip_bound_past_the_type(n, m, u, iout, mout, uout):
    i = tack.tid()
    iout[i, 0] = np.clip(n[i], 0, 2**40) * 2            # int32, as NumPy keeps it: wraps
    iout[i, 1] = np.clip(n[i], -2**40, 3)
    mout[i, 0] = np.clip(m[i], 0, 2**63)                 # int64, exact (it was a float64)
    mout[i, 1] = np.clip(m[i], -2**63, 2**64 - 1)
    uout[i, 0] = np.clip(u[i], -1, 2**64 - 1)            # uint64, exact
    uout[i, 1] = np.clip(u[i], -(1 if n[i] > 0 else 2), 5)


def test_numpy_clip_drops_a_literal_bound_that_never_binds():
    """A literal bound that ``x``'s integer type holds no value past (``-1`` below a uint64,
    ``2**63`` above an int64) never binds, and NumPy drops it, keeping ``x``'s type.  Tack typed
    the result with it: an int64 for an int32 ``x``, and a float64 for a 64-bit one, which gave
    9007199254740992 for ``2**53 + 1``."""
    n = np.array([2**30, -5, 7], np.int32)
    m = np.array([2**53 + 1, -7, 2**63 - 1], np.int64)
    u = np.array([2**53 + 1, 2, 2**64 - 1], np.uint64)
    iout, mout, uout = (np.zeros((3, 2), t) for t in (np.int32, np.int64, np.uint64))
    tack.launch(k_np_clip_bound_past_the_type, dim=3, args=(n, m, u, iout, mout, uout))
    with numpy_quiet():
        assert iout.tolist() == np.stack([np.clip(n, 0, 2**40) * np.int32(2),
                                          np.clip(n, -2**40, 3)], axis=1).tolist()
    assert mout.tolist() == [[int(np.clip(x, 0, 2**63)), int(np.clip(x, -2**63, 2**64 - 1))]
                             for x in m]
    assert uout.tolist() == [[int(np.clip(x, -1, 2**64 - 1)), int(np.clip(x, -1, 5))] for x in u]
    assert mout[0].tolist() == [2**53 + 1, 2**53 + 1] and iout[0, 0] == -2**31


@tack.kernel
def k_np_sign(x, n, u, out, iout, uout):
    i = tack.tid()
    out[i] = np.sign(x[i])
    iout[i] = np.sign(n[i])
    uout[i] = np.sign(u[i])


@pytest.mark.parametrize("ftype", [np.float64, np.float32])
def test_numpy_sign_follows_numpy(ftype):
    """``np.sign`` is NumPy's bit for bit: -1, 0 or 1 in the argument's type, +0.0 of either
    zero, a NaN itself (its sign kept); of integers an integer (0 or 1 unsigned)."""
    with numpy_quiet():
        x = np.array(EDGE_FLOATS, dtype=ftype)
    k = x.size
    n = np.resize(np.array([-2**63, -7, -1, 0, 1, 2**63 - 1], np.int64), k)
    u = np.resize(np.array([0, 1, 2**32 - 1], np.uint32), k)
    out, iout, uout = np.empty(k, ftype), np.empty(k, np.int64), np.empty(k, np.uint32)
    tack.launch(k_np_sign, dim=k, args=(x, n, u, out, iout, uout))
    assert (_bits(out) == _bits(np.sign(x))).all(), (x, out, np.sign(x))
    np.testing.assert_array_equal(iout, np.sign(n))
    np.testing.assert_array_equal(uout, np.sign(u))


@tack.func
def mark(seen, i, v):
    seen[i] = seen[i] + 1
    return v


@tack.kernel
def k_np_where(c, a, n, out, seen):
    i = tack.tid()
    out[i, 0] = np.where(c[i], a[i], n[i])           # a float condition: true unless 0 (NaN too)
    out[i, 1] = np.where(n[i] > 0, 1, 2.5)
    out[i, 2] = np.where(c[i], mark(seen, i, a[i]), mark(seen, i, 0.0))    # both evaluated
    out[i, 3] = mark(seen, i, 1.0) if c[i] else 0.0


def test_numpy_where_of_scalars_selects_after_evaluating_both():
    """``np.where(c, a, b)`` of scalars is ``a`` where ``c`` is true, NumPy's result type of the
    two; unlike ``a if c else b``, both ``a`` and ``b`` are evaluated (a device function called
    in each runs for every point)."""
    c = np.array([0.0, -0.0, 1.0, np.nan, -3.0, 0.0])
    a = np.array([1.5, 2.5, 3.5, 4.5, 5.5, 6.5])
    n = np.array([-1, 0, 1, 2, 3, -4], np.int32)
    out, seen = np.empty((6, 4)), np.zeros(6, np.int64)
    tack.launch(k_np_where, dim=6, args=(c, a, n, out, seen))
    with numpy_quiet():
        np.testing.assert_array_equal(out[:, 0], np.where(c, a, n))
        np.testing.assert_array_equal(out[:, 1], np.where(n > 0, 1, 2.5))
        np.testing.assert_array_equal(out[:, 2], np.where(c, a, 0.0))
    np.testing.assert_array_equal(seen, 2 + (c != 0))       # np.where: both; a if c else b: one


@tack.kernel
def k_round(x, out, iout):
    i = tack.tid()
    out[i, 0] = np.rint(x[i])
    out[i, 1] = np.round(x[i])
    out[i, 2] = np.around(x[i], decimals=0)
    out[i, 3] = np.round(x[i], 1)
    out[i, 4] = np.round(x[i], 2)
    out[i, 5] = np.around(x[i], -1)
    out[i, 6] = np.round(x[i], -2)
    out[i, 7] = np.round(x[i], 12)
    out[i, 8] = np.round(x[i], 320)
    iout[i] = round(x[i])


@pytest.mark.parametrize("ftype", [np.float64, np.float32])
def test_rounding_is_half_to_even_as_numpy_and_python(ftype):
    """``np.rint``, ``np.round`` and ``np.around`` are NumPy's bit for bit: half to even, the sign
    of a zero kept (``np.rint(-0.4)`` is -0.0), a literal ``decimals`` as NumPy computes it
    (``x * 10**d`` rounded and divided back, 10**d rounded as NumPy's); Python's ``round(x)`` is
    an integer, half to even, as Python's, and a NaN or an infinity converts as ``int(x)``
    does in Tack (0, or saturated) where Python raises."""
    with numpy_quiet():                         # 1e300 is a float32 infinity
        x = np.array(EDGE_FLOATS + [2.675, 0.125, 0.375, -0.285, 1234.5678, 25.0, 35.0, -45.0,
                                    1e-7], dtype=ftype)
    out, iout = np.empty((x.size, 9), ftype), np.empty(x.size, np.int64)
    tack.launch(k_round, dim=x.size, args=(x, out, iout))
    with numpy_quiet():
        want = np.stack([np.rint(x), np.round(x), np.around(x, decimals=0), np.round(x, 1),
                         np.round(x, 2), np.around(x, -1), np.round(x, -2), np.round(x, 12),
                         np.round(x, 320)], axis=1)
    bad = _bits(out) != _bits(want)
    assert not bad.any(), [(x[k], out[k], want[k]) for k in np.nonzero(bad.any(1))[0][:5]]
    info = np.iinfo(np.int64)
    iwant = [0 if v != v else info.max if v > info.max else info.min if v < info.min else round(v)
             for v in x.tolist()]
    np.testing.assert_array_equal(iout, iwant)


@tack.kernel
def k_round_integers(n, u, iout, uout):
    i = tack.tid()
    iout[i, 0] = np.round(n[i])
    iout[i, 1] = np.round(n[i], 2)
    iout[i, 2] = np.round(n[i], -1)
    iout[i, 3] = np.around(n[i], -2)
    iout[i, 4] = round(n[i])
    uout[i, 0] = np.round(u[i], -1)
    uout[i, 1] = round(u[i])


def test_rounding_integers_keeps_them_integers():
    """Of an integer, ``np.round`` is the integer itself (for ``decimals >= 0``), in its own type,
    and to a negative ``decimals`` NumPy's: through float64, half to even, converted back;
    ``round(n)`` is ``n``."""
    n = np.array([-75, -25, -15, 0, 5, 15, 25, 75, 149, 150, 2**31 - 1, -2**31], np.int32)
    u = np.resize(np.array([5, 15, 25, 35, 2**32 - 1], np.uint32), n.size)
    iout, uout = np.empty((n.size, 5), np.int32), np.empty((n.size, 2), np.uint32)
    tack.launch(k_round_integers, dim=n.size, args=(n, u, iout, uout))
    with numpy_quiet():
        want = np.stack([np.round(n), np.round(n, 2), np.round(n, -1), np.around(n, -2), n], axis=1)
        uwant = np.stack([np.round(u, -1), u], axis=1)
    inside = (n < 2**31 - 5) & (u < 2**32 - 5)      # rounded past the type's range: NumPy's C cast
    np.testing.assert_array_equal(iout[inside], want[inside])
    np.testing.assert_array_equal(uout[inside], uwant[inside])


@tack.kernel
def k_isclose(a, b, n, out):
    i = tack.tid()
    out[i, 0] = math.isclose(a[i], b[i])
    out[i, 1] = math.isclose(a[i], b[i], rel_tol=0.25)
    out[i, 2] = math.isclose(a[i], b[i], abs_tol=1.0)
    out[i, 3] = math.isclose(a[i], b[i], rel_tol=1e-15, abs_tol=1e-300)
    out[i, 4] = math.isclose(n[i], b[i])
    out[i, 5] = math.isclose(a=a[i], b=b[i], abs_tol=0.5)


def test_math_isclose_is_pythons():
    """``math.isclose`` is Python's formula with its keyword defaults (rel_tol=1e-09,
    abs_tol=0.0): equal values are close (``isclose(inf, inf)``), an infinity is close to
    nothing else, a NaN to nothing."""
    vals = [np.nan, -np.inf, -1.0, -0.0, 0.0, 1e-300, 0.75, 1.0, 1.0 + 1e-10, 1.0 + 1e-8, 1.5,
            2.0, 1e300, np.inf]
    a, b = (v.ravel().copy() for v in np.meshgrid(np.array(vals), np.array(vals)))
    n = np.resize(np.array([-1, 0, 1, 2, 2**53 + 1], np.int64), a.size)
    out = np.empty((a.size, 6), bool)
    tack.launch(k_isclose, dim=a.size, args=(a, b, n, out))
    want = [[math.isclose(x, y), math.isclose(x, y, rel_tol=0.25), math.isclose(x, y, abs_tol=1.0),
             math.isclose(x, y, rel_tol=1e-15, abs_tol=1e-300), math.isclose(m, y),
             math.isclose(a=x, b=y, abs_tol=0.5)]
            for x, y, m in zip(a.tolist(), b.tolist(), n.tolist())]
    bad = out != np.array(want)
    assert not bad.any(), [(a[k], b[k], n[k], out[k]) for k in np.nonzero(bad.any(1))[0][:5]]


@tack.kernel
def k_np_isclose(a, b, n, out):
    i = tack.tid()
    out[i, 0] = np.isclose(a[i], b[i])
    out[i, 1] = np.isclose(a[i], b[i], equal_nan=True)
    out[i, 2] = np.isclose(a[i], b[i], 0.25, 1e-3)
    out[i, 3] = np.isclose(a[i], 1.0)
    out[i, 4] = np.isclose(b=a[i], a=b[i], rtol=0.0, atol=0.5, equal_nan=n[i] > 0)


@tack.kernel
def k_np_isclose_int(a, n, out):
    i = tack.tid()
    out[i] = np.isclose(a[i], n[i])


@pytest.mark.parametrize("ftype", [np.float64, np.float32])
def test_numpy_isclose_follows_numpy(ftype):
    """``np.isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False)`` is NumPy's: ``|a - b| <=
    atol + rtol * |b|`` (not symmetric: ``b``'s magnitude) where ``b`` is finite, equal infinities
    close, NaNs close only with ``equal_nan``; in float32 of float32 arguments and literal
    tolerances, as NumPy computes it, and an integer ``b`` taken as a float64."""
    vals = np.array([np.nan, -np.inf, -1.0, -0.0, 0.0, 1e-9, 1e-7, 0.75, 1.0, 1.0 + 1e-6,
                     1.0 + 1e-5, 1.5, 2.0, 1e30, np.inf], ftype)
    a, b = (v.ravel().copy() for v in np.meshgrid(vals, vals))
    n = np.resize(np.array([-1, 0, 1, 2, 2**53 + 1], np.int64), a.size)
    out = np.empty((a.size, 5), bool)
    tack.launch(k_np_isclose, dim=a.size, args=(a, b, n, out))
    with numpy_quiet():
        want = np.stack([np.isclose(a, b), np.isclose(a, b, equal_nan=True),
                         np.isclose(a, b, 0.25, 1e-3), np.isclose(a, 1.0),
                         [np.isclose(y, x, 0.0, 0.5, equal_nan=bool(m > 0))
                          for x, y, m in zip(a, b, n)]], axis=1)
    bad = out != want
    assert not bad.any(), [(a[k], b[k], n[k], out[k], want[k]) for k in np.nonzero(bad.any(1))[0][:5]]
    # an integer b is a float64 (a float64 computation: a device without float64 refuses it)
    close = np.empty(a.size, bool)
    tack.launch(k_np_isclose_int, dim=a.size, args=(a, n, close))
    np.testing.assert_array_equal(close, np.isclose(a, n))


@tack.kernel
def k_np_isclose_mixed(a, b, rt, at, out):
    i = tack.tid()
    out[i, 0] = np.isclose(a[i], b[i])
    out[i, 1] = np.isclose(a[i], b[i], rt[i], at[i])
    out[i, 2] = np.isclose(a[i], b[i], rt[i])
    out[i, 3] = np.isclose(a[i], b[i], atol=at[i])


@pytest.mark.parametrize("ta, tb, tt", [(np.float64, np.float32, np.float64),
                                        (np.float64, np.float32, np.float32),
                                        (np.float32, np.float64, np.float32),
                                        (np.float32, np.float32, np.float64),
                                        (np.float32, np.int64, np.float32)])
def test_numpy_isclose_of_mixed_types_computes_each_step_as_numpy(ta, tb, tt):
    """``np.isclose`` of arguments of different float types is NumPy's at its edge: NumPy
    computes ``|a - b|`` in ``a``'s and ``b``'s type, ``rtol * |b|`` in ``rtol``'s and ``b``'s,
    ``atol +`` that in ``atol``'s, and compares in the wider of the two sides (before, Tack
    computed all four in one type: a float64 ``a`` 7.0 + 7.0009995e-05 and a float32 ``b`` 7.0
    were close, where NumPy's float32 threshold, 7.000999e-05, is below their difference; and
    float32 1.0 and 1e-8 were within a float64 ``atol`` of 1 - 1e-8, where NumPy's float32
    difference is 1.0)."""
    r = rng()
    n = 4000
    b = r.uniform(0.5, 10.0, n).astype(tb) if tb != np.int64 else r.integers(1, 10**6, n)
    rt = r.uniform(1e-7, 1e-3, n).astype(tt)
    at = r.choice([0.0, 1e-8, 1e-6, 1e-3], n).astype(tt)
    # a at the threshold each way, within a few float32 steps of it, in a's type
    edge = np.float64(at) + np.float64(rt) * np.abs(np.float64(b))
    a = (np.float64(b) + edge * (1 + r.integers(-4, 5, n) * 2.0 ** -23)).astype(ta)
    a[0], b[0] = ta(7.0 + 7.0009995e-05), tb(7)
    if tb != np.int64:      # float32: |1 - 1e-8| is 1.0, not within a float64 0.99999999
        a[1], b[1], rt[1], at[1] = 1.0, 1e-8, 0.0, 1 - float(tb(1e-8))
    out = np.empty((n, 4), bool)
    tack.launch(k_np_isclose_mixed, dim=n, args=(a, b, rt, at, out))
    want = np.stack([np.isclose(a, b), np.isclose(a, b, rt, at), np.isclose(a, b, rt),
                     np.isclose(a, b, atol=at)], axis=1)
    bad = out != want
    assert not bad.any(), [(a[k], b[k], rt[k], at[k], out[k], want[k])
                           for k in np.nonzero(bad.any(1))[0][:5]]
    assert want[:, 1].any() and not want[:, 1].all()      # both sides of the edge were tried


# =====================================================================================
# Device functions
# =====================================================================================

@tack.func
def f3(x):
    return x * 2 + 1


@tack.func
def f2(x):
    return f3(x) * f3(x + 1)


@tack.func
def f1(x, y):
    s, d = sum_diff_d(x, y)
    return f2(s) - f2(d), s


@tack.kernel
def k_depth3(a, out):
    i = tack.tid()
    r, s = f1(a[i], i)
    out[i, 0] = r
    out[i, 1] = s


def test_nested_device_functions_depth_3():
    """Device functions calling device functions three deep compute what the same Python computes."""
    a = np.arange(-5, 5, dtype=np.int64)
    out = np.empty((10, 2), np.int64)
    tack.launch(k_depth3, dim=10, args=(a, out))

    def p3(x):
        return x * 2 + 1

    def p2(x):
        return p3(x) * p3(x + 1)

    want = [[p2(x + i) - p2(x - i), x + i] for i, x in enumerate(a.tolist())]
    np.testing.assert_array_equal(out, want)


@tack.func
def add_tiny(x):
    return x + 1e-10


@tack.kernel
def k_mono(a32, a64, out):
    i = tack.tid()
    out[i, 0] = add_tiny(a32[i])
    out[i, 1] = add_tiny(a64[i])


def test_device_function_specialized_per_argument_type():
    """A device function called with float32 and float64 computes in each type (x + 1e-10 stays 1.0 in float32)."""
    out = np.empty((2, 2))
    tack.launch(k_mono, dim=2, args=(np.ones(2, np.float32), np.ones(2), out))
    np.testing.assert_array_equal(out[:, 0], 1.0)
    np.testing.assert_array_equal(out[:, 1], 1.0 + 1e-10)


@tack.func
def fill_row(buf, row, value):
    for j in range(buf.shape[1]):
        buf[row, j] = value + j


@tack.kernel
def k_func_writes(out):
    i = tack.tid()
    fill_row(out, i, 10 * i)


def test_device_function_writes_array_argument():
    """A device function given an array writes into it, and a function returning nothing is a statement."""
    out = np.zeros((4, 3), np.int32)
    tack.launch(k_func_writes, dim=4, args=(out,))
    np.testing.assert_array_equal(out, 10 * np.arange(4)[:, None] + np.arange(3))


# =====================================================================================
# Template classes
# =====================================================================================

class Double:
    offset = 10

    @staticmethod
    def apply(x):
        return x * 2


class Square:
    offset = 0.5

    @staticmethod
    @tack.func
    def apply(x):
        return x * x


@tack.func
def twice(policy, x):
    return policy.apply(policy.apply(x))


@tack.kernel
def k_template(policy, a, out):
    i = tack.tid()
    out[i, 0] = policy.apply(a[i])
    out[i, 1] = twice(policy, a[i])
    out[i, 2] = policy.offset
    out[i, 3] = twice(Double, a[i])


def test_template_classes():
    """A class argument is a compile-time parameter: plain and @tack.func static methods, attributes, and passing it to a device function."""
    a = np.arange(-3, 4, dtype=np.float64)
    out_d = np.empty((7, 4))
    out_s = np.empty((7, 4))
    # Variants are per device: when the suite is replayed on another device after the CPU
    # run, the CPU's are there already (the lowered kernels are shared).
    before = len(k_template._variants)
    tack.launch(k_template, dim=7, args=(Double, a, out_d))
    tack.launch(k_template, dim=7, args=(Square, a, out_s))
    np.testing.assert_array_equal(out_d, np.stack([2 * a, 4 * a, np.full(7, 10.0), 4 * a], axis=1))
    np.testing.assert_array_equal(out_s, np.stack([a**2, a**4, np.full(7, 0.5), 4 * a], axis=1))
    assert len(k_template._lowered) == 2
    tack.launch(k_template, dim=7, args=(Double, a, out_d))
    assert len(k_template._variants) - before == 2


@tack.func
def place(policy, x):
    return policy.weight(x)


@tack.kernel
def k_two_policies(a, out, p, q):
    i = tack.tid()
    out[i, 0] = place(p, a[i]) + 10.0 * place(q, a[i])
    out[i, 1] = p.weight(a[i]) + 10.0 * q.weight(a[i])


@contextlib.contextmanager
def _files_on_path(files: dict):
    """A temporary directory holding ``files`` ({relative path: text}), first on sys.path for the
    block, whose modules are forgotten after it -> its path.  No pytest fixture: the suite is
    replayed on each device (gpu_tools.replay_language_suite), which calls its tests without."""
    import tempfile
    with tempfile.TemporaryDirectory() as where:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(where, rel)), exist_ok=True)
            with open(os.path.join(where, rel), "w") as f:
                f.write(text)
        sys.path.insert(0, where)
        try:
            yield where
        finally:
            sys.path.remove(where)
            sys.path_importer_cache.pop(where, None)
            for rel in files:
                sys.modules.pop(os.path.splitext(rel)[0].replace(os.sep, "."), None)


def _policy_module(n):
    return (f"import tack\nS = tack.constant({n}.0)\n\n\nclass Policy:\n    @staticmethod\n"
            "    def weight(x):\n        return x * S\n")


def test_two_modules_classes_of_one_name_and_text_are_two_templates():
    """Two modules' ``Policy``, of the same text, whose static method reads its own module's S:
    a device function given each was one function (its id named the class without its module),
    lowered for the first, so the second's S was never read."""
    import importlib
    with _files_on_path({f"policy_mod{n}.py": _policy_module(n) for n in (1, 2)}):
        p, q = (importlib.import_module(f"policy_mod{n}").Policy for n in (1, 2))
        a, out = np.arange(3.0), np.zeros((3, 2))
        tack.launch(k_two_policies, dim=3, args=(a, out, p, q))
        np.testing.assert_array_equal(out, np.stack([21.0 * a] * 2, axis=1))


def test_two_files_loaded_as_one_module_name_are_two_functions():
    """Two plugin files loaded under one module name (``spec_from_file_location("ops", ...)``,
    neither put in sys.modules), each with ``f`` of one text reading its own S: their ids were
    one (module, name and code), so a kernel calling both ran the first's twice."""
    import importlib.util
    mods = []
    with _files_on_path({os.path.join(f"plugin{n}", "ops.py"):
                         f"import tack\nS = tack.constant({n}.0)\n\n\n@tack.func\n"
                         "def f(x):\n    return x * S\n" for n in (1, 2)}) as where:
        for n in (1, 2):
            spec = importlib.util.spec_from_file_location("ops", os.path.join(where, f"plugin{n}", "ops.py"))
            mods.append(importlib.util.module_from_spec(spec))
            spec.loader.exec_module(mods[-1])
        k = tack.kernel(_two_placed(mods[0].f, mods[1].f))
        a, out = np.arange(3.0), np.zeros(3)
        tack.launch(k, dim=3, args=(a, out))
    np.testing.assert_array_equal(out, 21.0 * a)


def make_policy(v):
    s = tack.constant(v)

    class Policy:
        @staticmethod
        def weight(x):
            return x * s
    return Policy


def test_a_factorys_classes_are_two_templates():
    """Two classes a factory made, of one module, name and text, each closing over its own
    constant: their fingerprint left the closure out, so they were one template, and a kernel
    given both read the first's constant twice, through a device function and directly."""
    a, out = np.arange(3.0), np.zeros((3, 2))
    tack.launch(k_two_policies, dim=3, args=(a, out, make_policy(1.0), make_policy(2.0)))
    np.testing.assert_array_equal(out, np.stack([21.0 * a] * 2, axis=1))


def make_metaclassed(v):
    class Meta(type):
        weight = staticmethod(make_policy(v).weight)
        K = v

    class Policy(metaclass=Meta):
        pass
    return Policy


def test_classes_given_attributes_by_their_metaclasses_are_two_templates():
    """``P.K`` and ``P.weight`` of a class whose metaclass has them (the class has none of its
    own) are read as Python reads them, but the class's fingerprint left its metaclass out: two
    classes of one name differing only there were one template, and a kernel given both read
    the first's twice."""
    a, out = np.arange(3.0), np.zeros((3, 2))
    tack.launch(k_two_policies, dim=3, args=(a, out, make_metaclassed(1.0), make_metaclassed(2.0)))
    np.testing.assert_array_equal(out, np.stack([21.0 * a] * 2, axis=1))
    tack.launch(k_metaclass_k, dim=3, args=(a, out, make_metaclassed(1.0), make_metaclassed(2.0)))
    np.testing.assert_array_equal(out[:, 0], 21.0 * a)


@tack.kernel
def k_metaclass_k(a, out, p, q):
    i = tack.tid()
    out[i, 0] = a[i] * p.K + 10.0 * a[i] * q.K


def make_scale(v):
    s = tack.constant(v)

    @tack.func
    def scale(x):
        return x * s
    return scale


def make_apply(f):
    @tack.func
    def apply(x):
        return f(x)
    return apply


def make_placed(p):
    @tack.func
    def placed(x):
        return place(p, x)
    return placed


APPLY_1, APPLY_2 = make_apply(make_scale(1.0)), make_apply(make_scale(2.0))


@tack.kernel
def k_two_applies(a, out):
    i = tack.tid()
    out[i] = APPLY_1(a[i]) + 10.0 * APPLY_2(a[i])


def test_a_factorys_functions_closing_over_a_factorys_functions_are_two_functions():
    """``make_apply(make_scale(1.0))`` and ``make_apply(make_scale(2.0))``: the id of each
    ``apply`` named what it closes over by that function's code alone, which is one code, so
    they were one device function and a kernel calling both ran the first twice."""
    a, out = np.arange(3.0), np.zeros(3)
    tack.launch(k_two_applies, dim=3, args=(a, out))
    np.testing.assert_array_equal(out, 21.0 * a)


def test_functions_closing_over_two_modules_classes_of_one_name_are_two_functions():
    """A factory's device functions, each closing over a ``Policy`` of its own module (one
    name, one text, each reading its module's S): the id named the class by its fingerprint,
    which leaves the module out, so a kernel calling both ran the first twice."""
    import importlib
    with _files_on_path({f"closed_policy_mod{n}.py": _policy_module(n) for n in (1, 2)}):
        first, second = (make_placed(importlib.import_module(f"closed_policy_mod{n}").Policy)
                         for n in (1, 2))
        k = tack.kernel(_two_placed(first, second))
        a, out = np.arange(3.0), np.zeros(3)
        tack.launch(k, dim=3, args=(a, out))
        np.testing.assert_array_equal(out, 21.0 * a)


def _two_placed(first, second):
    def k_two_placed(a, out):
        i = tack.tid()
        out[i] = first(a[i]) + 10.0 * second(a[i])
    return k_two_placed


# =====================================================================================
# Grids, arrays, variants
# =====================================================================================

@tack.kernel
def k_grid1(out):
    i = tack.tid()
    out[i] = i


@tack.kernel
def k_grid2(out):
    i, j = tack.tid()
    out[i, j] = i * 100 + j


@tack.kernel
def k_grid3(out):
    t = tack.tid()
    out[t] = t[0] * 10000 + t[1] * 100 + t[2]


def test_grids_1d_2d_3d():
    """tack.tid() is an int on 1-D grids and a tuple on 2-D and 3-D grids, covering every point once."""
    o1 = np.full(37, -1, np.int64)
    tack.launch(k_grid1, dim=37, args=(o1,))
    np.testing.assert_array_equal(o1, np.arange(37))
    o2 = np.full((5, 7), -1, np.int64)
    tack.launch(k_grid2, dim=(5, 7), args=(o2,))
    np.testing.assert_array_equal(o2, np.arange(5)[:, None] * 100 + np.arange(7))
    o3 = np.full((3, 4, 5), -1, np.int64)
    tack.launch(k_grid3, dim=(3, 4, 5), args=(o3,))
    i, j, k = np.indices((3, 4, 5))
    np.testing.assert_array_equal(o3, i * 10000 + j * 100 + k)


def test_empty_grid_runs_nothing():
    """A grid with a zero extent runs no points."""
    o = np.full((3, 4), -1, np.int64)
    tack.launch(k_grid2, dim=(0, 4), args=(o,))
    np.testing.assert_array_equal(o, -1)


@tack.kernel
def k_sum_last(a, out):
    i, j, k = tack.tid()
    s = 0.0
    for m in range(a.shape[3]):
        s += a[i, j, k, m]
    out[i, j, k] = s


@tack.kernel
def k_twice(a, out):
    i = tack.tid()
    out[i] = 2 * a[i]


@tack.kernel
def k_transpose(a, out):
    i, j = tack.tid()
    out[j, i] = a[i, j]


@tack.kernel
def k_info(a, out):
    out[0] = a.ndim
    out[1] = a.size
    out[2] = len(a)
    out[3] = a.shape[0]


def test_arrays_1d_to_4d_and_views():
    """Arrays of 1-4 dimensions are indexed correctly, including strided, reversed and transposed views."""
    base = np.arange(2 * 6 * 3 * 8, dtype=np.float64).reshape(2, 6, 3, 8)
    for a in (base, base[:, ::2, :, 1:], base[::-1, :, ::-1, ::3]):
        out = np.empty(a.shape[:3])
        tack.launch(k_sum_last, dim=a.shape[:3], args=(a, out))
        np.testing.assert_array_equal(out, a.sum(axis=3))
    v = np.arange(20, dtype=np.int32)
    for a in (v, v[::-1], v[1::3]):
        out = np.empty(a.shape, np.int32)
        tack.launch(k_twice, dim=a.size, args=(a, out))
        np.testing.assert_array_equal(out, 2 * a)
    m = np.arange(12.0).reshape(3, 4)
    for a in (m, m.T, np.asfortranarray(m)):
        out = np.empty(a.shape[::-1])
        tack.launch(k_transpose, dim=a.shape, args=(a, out))
        np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (2, 1, 3, 5)])
def test_shape_len_ndim_size(shape):
    """a.shape[k], len(a), a.ndim and a.size are the array's."""
    out = np.empty(4, np.int64)
    tack.launch(k_info, dim=1, args=(np.zeros(shape), out))
    np.testing.assert_array_equal(out, [len(shape), int(np.prod(shape)), shape[0], shape[0]])


@tack.kernel
def k_last_extent(a, out):
    out[0] = a.shape[-1]


def test_shape_negative_index():
    """a.shape[-1] is the last extent, as in Python."""
    out = np.empty(1, np.int64)
    tack.launch(k_last_extent, dim=1, args=(np.zeros((3, 5)), out))
    assert out[0] == 5


@tack.kernel
def k_bools(flags, flag, out):
    i = tack.tid()
    out[i] = (not flags[i]) if flag else flags[i]


def test_bool_arrays_and_arguments():
    """bool arrays load and store as bools, and a bool scalar argument steers a branch."""
    flags = np.array([True, False, True, True, False])
    out = np.empty(5, bool)
    tack.launch(k_bools, dim=5, args=(flags, True, out))
    np.testing.assert_array_equal(out, ~flags)
    tack.launch(k_bools, dim=5, args=(flags, False, out))
    np.testing.assert_array_equal(out, flags)


@tack.kernel
def k_negative_index(a, m, out, out2):
    i = tack.tid()
    n = a.shape[0]
    out[i] = a[i - n]
    out2[i] = m[-1, -1 - i] + m[tack.int32(-2), 0]


def test_negative_indices_wrap():
    """Negative indices (int64 and int32) count from the end, like Python."""
    a = np.arange(6, dtype=np.float64) * 3
    m = np.arange(12, dtype=np.float64).reshape(3, 4)
    out, out2 = np.empty(4), np.empty(4)
    tack.launch(k_negative_index, dim=4, args=(a, m, out, out2))
    np.testing.assert_array_equal(out, a[:4])
    np.testing.assert_array_equal(out2, [m[-1, -1 - i] + m[-2, 0] for i in range(4)])


@tack.kernel
def k_shifted(a, out):
    i = tack.tid()
    out[i] = a[i - 1] * 2.0 + a[i]


@pytest.mark.parametrize("n", [1, 7, 1000, 4099])
def test_a_negative_index_wraps_in_a_vectorized_loop(n):
    """The grid loop is vectorized (its index is known non-negative), and an index computed
    from it still wraps where it is negative: ``a[i - 1]`` at ``i == 0`` is ``a[-1]``."""
    a = np.arange(n, dtype=np.float32) + 1
    out = np.empty(n, np.float32)
    tack.launch(k_shifted, dim=n, args=(a, out))
    np.testing.assert_array_equal(out, np.roll(a, 1) * 2 + a)


@tack.kernel
def k_variant(a, out):
    i = tack.tid()
    out[i] = a[i] + a.shape[0]


def test_new_shape_reuses_the_variant_new_dtype_compiles_one_from_same_lowered_kernel():
    """A new array shape reuses the variant (extents are passed at launch); a new dtype compiles a
    new variant from the one lowered kernel."""
    before = len(k_variant._variants)
    for n in (8, 16, 8):
        a = np.arange(n, dtype=np.float64)
        out = np.empty(n)
        tack.launch(k_variant, dim=n, args=(a, out))
        np.testing.assert_array_equal(out, a + n)
    assert len(k_variant._variants) == before + 1
    a32, out32 = np.arange(5, dtype=np.float32), np.empty(5, np.float32)
    tack.launch(k_variant, dim=5, args=(a32, out32))
    np.testing.assert_array_equal(out32, a32 + 5)
    assert len(k_variant._variants) == before + 2
    assert len(k_variant._lowered) == 1


@tack.kernel
def k_early_return(out):
    i = tack.tid()
    if i % 2 == 1:
        return
    out[i] = 1


def test_early_return_from_kernel():
    """return in a kernel ends only that point."""
    out = np.zeros(9, np.int64)
    tack.launch(k_early_return, dim=9, args=(out,))
    np.testing.assert_array_equal(out, (np.arange(9) % 2 == 0).astype(np.int64))


# =====================================================================================
# Constants and scalar arguments
# =====================================================================================

TABLE = tack.constant(np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5)
FLAGS = tack.constant(np.array([True, False, True]))
SCALE = tack.constant(3)
F32 = tack.constant(np.float32(0.1))
_mutable = np.arange(3.0)
FROZEN = tack.constant(_mutable)
_mutable[:] = -1


@tack.kernel
def k_constants(out):
    i = tack.tid()
    out[i, 0] = TABLE[i, 3] * SCALE
    out[i, 1] = FLAGS[i]
    out[i, 2] = F32 * 3.0
    out[i, 3] = FROZEN[i]


def test_constants():
    """tack.constant arrays (float and bool) and scalars are readable; NumPy scalar constants keep their dtype; values are frozen when wrapped."""
    out = np.empty((3, 4))
    tack.launch(k_constants, dim=3, args=(out,))
    tab = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5
    np.testing.assert_array_equal(out[:, 0], tab[:, 3] * 3)
    np.testing.assert_array_equal(out[:, 1], [1, 0, 1])
    np.testing.assert_array_equal(out[:, 2], float(np.float32(0.1) * 3.0))
    np.testing.assert_array_equal(out[:, 3], [0.0, 1.0, 2.0])



HALF = tack.constant(np.float32(0.5))
HALF_ONE = tack.constant(np.array([0.5], dtype=np.float32))     # HALF's dtype and bytes, as an array


@tack.kernel
def k_scalar_and_array_of_one(out):
    i = tack.tid()
    out[i] = HALF * 2.0 + HALF_ONE[0] + HALF_ONE.size


def test_a_numpy_scalar_and_an_array_of_one_are_two_constants():
    """A NumPy scalar constant and a 1-element array of the same dtype and bytes had one
    fingerprint (the scalar's shape was taken as (1,)): a kernel reading both was given one of
    them twice (a CompileError: "float32 cannot be indexed"), and an edit of a constant from one
    to the other kept the cached kernel of the other."""
    assert HALF.fingerprint != HALF_ONE.fingerprint
    out = np.empty(2)
    tack.launch(k_scalar_and_array_of_one, dim=2, args=(out,))
    np.testing.assert_array_equal(out, [2.5, 2.5])

POS_NAN = tack.constant(float(np.uint64(0x7FF8000000000000).view(np.float64)))
NEG_NAN = tack.constant(float(np.uint64(0xFFF8000000000000).view(np.float64)))


@tack.kernel
def k_nan_signs(out):
    out[0] = math.copysign(1.0, POS_NAN)
    out[1] = math.copysign(1.0, NEG_NAN)


def test_nans_of_two_signs_are_two_constants_and_two_templates():
    """A NaN and a -NaN (or NaNs of two payloads) had one fingerprint, their repr: a kernel
    reading both constants was given one of them twice (copysign 1.0 of the -NaN), and a
    template class or a module's attribute edited from one to the other kept the cached
    lowered kernel and variant of the other."""
    from tack.fingerprints import class_fingerprint, value_identity
    assert POS_NAN.fingerprint != NEG_NAN.fingerprint
    out = np.zeros(2)
    tack.launch(k_nan_signs, dim=1, args=(out,))
    np.testing.assert_array_equal(out, [1.0, -1.0])
    nans = [NEG_NAN.value, POS_NAN.value, float(np.uint64(0x7FF8000000000001).view(np.float64))]
    assert len({value_identity(v) for v in nans}) == 3
    assert len({class_fingerprint(type("P", (), {"K": v})) for v in nans}) == 3
    assert value_identity(1.5) == "float:1.5"       # other numbers keep their text (and keys)


BIG_U = tack.constant(2**64 - 1)
BIG_I = tack.constant(-2**63)


@tack.kernel
def k_big_int_constants(out):
    out[0] = BIG_U
    out[1] = BIG_I


def test_integer_constants_past_int64():
    """An int constant from 2**63 to 2**64 - 1 is a uint64, as a literal is (it wrapped to a
    negative int64); one that fits in no 64-bit type is refused when wrapped (2**70 read as 0)."""
    out = np.zeros(2)
    tack.launch(k_big_int_constants, dim=1, args=(out,))
    np.testing.assert_array_equal(out, [float(2**64 - 1), float(-2**63)])
    for v in (2**64, 2**70, -2**63 - 1):
        with pytest.raises(ValueError, match="must fit in 64 bits"):
            tack.constant(v)


# =====================================================================================
# Atomics, threads, short-circuit evaluation
# =====================================================================================

@tack.kernel
def k_hist(vals, hist, tickets, counter):
    i = tack.tid()
    tack.atomic_add(hist, vals[i], 1)
    tickets[i] = tack.atomic_add(counter, 0, 1)


@tack.kernel
def k_hist2d(vals, hist, total):
    i, j = tack.tid()
    v = vals[i, j]
    tack.atomic_add(hist, (v % 4, v // 4), 1)
    tack.atomic_add(total, 0, 0.5)


@tack.kernel
def k_minmax(vals, mn, mx, old):
    i = tack.tid()
    old[i] = tack.atomic_min(mn, 0, vals[i])
    tack.atomic_max(mx, 0, vals[i])


@pytest.fixture
def every_grid_parallel(monkeypatch):
    """Every grid runs on the configured threads, whatever its estimated work (the thread rule's
    minimum per thread set to nothing): the atomics below are tested under real concurrency."""
    monkeypatch.setattr(cpu_runtime, "PER_THREAD_S", 1e-15)
    monkeypatch.setattr(cpu_runtime, "OVERHEAD_FACTOR", 0.0)


@pytest.mark.usefixtures("every_grid_parallel")
def test_atomic_add_histogram_under_threads():
    """atomic_add over 200,000 points on 2 threads builds an exact histogram and hands out unique tickets (the old values)."""
    tack.config.num_threads = 2
    n = 200_000
    vals = rng().integers(0, 17, n)
    hist = np.zeros(17, np.int64)
    tickets = np.empty(n, np.int64)
    counter = np.zeros(1, np.int64)
    tack.launch(k_hist, dim=n, args=(vals, hist, tickets, counter))
    np.testing.assert_array_equal(hist, np.bincount(vals, minlength=17))
    assert counter[0] == n
    np.testing.assert_array_equal(np.sort(tickets), np.arange(n))


@pytest.mark.usefixtures("every_grid_parallel")
def test_atomic_add_2d_index_and_float_under_threads():
    """atomic_add with a tuple index into a 2-D int32 array and into a float64 array is exact on a threaded 2-D grid."""
    tack.config.num_threads = 2
    vals = rng().integers(0, 16, (400, 300)).astype(np.int32)
    hist = np.zeros((4, 4), np.int32)
    total = np.zeros(1)
    tack.launch(k_hist2d, dim=vals.shape, args=(vals, hist, total))
    want = np.zeros((4, 4), np.int32)
    np.add.at(want, (vals % 4, vals // 4), 1)
    np.testing.assert_array_equal(hist, want)
    assert total[0] == 0.5 * vals.size


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32, np.float64])
@pytest.mark.usefixtures("every_grid_parallel")
def test_atomic_min_max_under_threads(dtype):
    """atomic_min/atomic_max over 150,000 points on 2 threads find the extremes and return old values."""
    tack.config.num_threads = 2
    n = 150_000
    g = rng()
    if np.dtype(dtype).kind == "f":
        vals = g.standard_normal(n).astype(dtype) * 100
        lo, hi = dtype(np.inf), dtype(-np.inf)
    else:
        info = np.iinfo(dtype)
        vals = g.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
        lo, hi = info.max, info.min
    mn, mx = np.array([lo], dtype), np.array([hi], dtype)
    old = np.empty(n, dtype)
    tack.launch(k_minmax, dim=n, args=(vals, mn, mx, old))
    assert mn[0] == vals.min() and mx[0] == vals.max()
    assert np.all(old >= mn[0])
    assert np.isin(old, np.concatenate([vals, [lo]])).all()
    assert (old == lo).sum() >= 1


@tack.kernel
def k_or_and_values(a, b, n, c, out, outi):
    i = tack.tid()
    out[i, 0] = a[i] or b[i]
    out[i, 1] = a[i] and b[i]
    out[i, 2] = a[i] or b[i] or 9.5
    out[i, 3] = a[i] and b[i] and 9.5
    out[i, 4] = tack.float32(n[i]) or a[i]
    out[i, 5] = a[i] or tack.float32(tack.atomic_add(c, 0, 1))
    out[i, 6] = (a[i] > 0) or b[i]              # a bool or a float
    outi[i, 0] = n[i] or 7
    outi[i, 1] = n[i] and 7
    outi[i, 2] = (n[i] > 1) and n[i]
    if n[i] or a[i]:
        outi[i, 3] = 1
    else:
        outi[i, 3] = 0


@pytest.mark.parametrize("ft, it, ct", [(np.float64, np.int64, np.int64),
                                        (np.float32, np.int32, np.int32)])
def test_or_and_give_an_operand_as_python_does(ft, it, ct):
    """``a or b`` is ``a`` where ``a`` is true, else ``b``, and ``a and b`` the first false operand,
    in the operands' common type, with the later operands not evaluated: a kernel's value is
    Python's (before, every ``or`` and ``and`` gave a bool: ``7.0 or 2.0`` was 1.0)."""
    a = np.array([0.0, 3.0, 0.0, -5.5, np.nan, 0.0], ft)
    b = np.array([7.0, 0.0, 0.0, 2.0, 1.0, -0.0], ft)
    n = np.array([0, 2, 0, 1, 0, 5], it)
    c = np.zeros(1, ct)
    out, outi = np.full((6, 7), -1.0, ft), np.full((6, 4), -1, np.int32)
    tack.launch(k_or_and_values, dim=6, args=(a, b, n, c, out, outi))
    for k in range(6):
        x, y, m = a[k], b[k], n[k]
        want = [x or y, x and y, x or y or 9.5, x and y and 9.5, np.float32(m) or x, None,
                (x > 0) or y]
        for j in (0, 1, 2, 3, 4, 6):
            np.testing.assert_array_equal(out[k, j], ft(want[j]), err_msg=f"{k}, {j}")
        assert list(outi[k]) == [m or 7, m and 7, int((m > 1) and m), 1 if (m or x) else 0], k
    # the atomic ran only where a[i] was false (three zeros; NaN is true), each giving its count
    assert c[0] == int(sum(1 for x in a if not x))
    assert sorted(out[[k for k in range(6) if not a[k]], 5].tolist()) == [0.0, 1.0, 2.0]
    np.testing.assert_array_equal(out[[k for k in range(6) if a[k]], 5], a[a != 0])


@tack.func
def cond_or_else(a, b, c):
    return a and b or c


@tack.kernel
def k_nested_or_and(a, b, c, out):
    i = tack.tid()
    out[i, 0] = a[i] and b[i] or c[i]
    out[i, 1] = a[i] or (b[i] and c[i])
    out[i, 2] = (a[i] and b[i]) or (b[i] and c[i])
    out[i, 3] = (a[i] or 0) or (b[i] or c[i])
    out[i, 4] = a[i] or b[i] or (c[i] and 7.0)
    out[i, 5] = (a[i] or b[i]) and c[i]
    out[i, 6] = cond_or_else(a[i], b[i], c[i])
    out[i, 7] = not (a[i] and b[i] or c[i])
    if (a[i] or b[i]) and c[i]:
        out[i, 8] = 1.0
    else:
        out[i, 8] = 0.0


@pytest.mark.parametrize("dt", [np.float64, np.float32, np.int64])
def test_an_or_and_inside_another_gives_its_operand_too(dt):
    """An ``and``/``or`` that is an operand of another gives its operand's value there too, as
    Python's does: ``a and b or c`` (the ternary of Python before ``if``/``else``) is ``b`` or
    ``c``, not a bool (before, the inner one gave 1: ``2 and 5 or 0`` was 1), and a false inner
    value keeps its sign (``(0.0 or -0.0) and c`` is -0.0)."""
    vals = [0, 2, -3, 0.5, -0.0, np.nan] if dt != np.int64 else [0, 2, -3, 5]
    combos = [(x, y, z) for x in vals for y in vals for z in vals]
    a, b, c = (np.array([t[k] for t in combos], dt) for k in range(3))
    out = np.full((len(combos), 9), -99.0, dt if dt != np.int64 else np.float64)
    tack.launch(k_nested_or_and, dim=len(combos), args=(a, b, c, out))
    for k in range(len(combos)):
        x, y, z = a[k], b[k], c[k]
        want = [x and y or z, x or (y and z), (x and y) or (y and z), (x or 0) or (y or z),
                x or y or (z and 7.0), (x or y) and z, x and y or z, not (x and y or z),
                1.0 if (x or y) and z else 0.0]
        for j, w in enumerate(want):
            np.testing.assert_array_equal(out[k, j], out.dtype.type(w), err_msg=f"{(x, y, z)}, {j}")
            assert np.signbit(out[k, j]) == np.signbit(out.dtype.type(w)), (x, y, z, j)


@tack.kernel
def k_big_literals_in_fmod_and_choices(u, n, a, p, outi, outf):
    i = tack.tid()
    outi[i, 0] = np.fmod(-1, u[i])
    outi[i, 1] = np.fmod(3000000000, n[i])
    outi[i, 2] = np.fmod(u[i], -2**63)
    outf[i, 0] = math.fmod(10**19, a[i])
    outf[i, 1] = np.fmod(a[i], 10**19)
    outf[i, 2] = (a[i] + (1.0 if p[i] else 10**19)) - a[i]
    outf[i, 3] = (a[i] + (1e30 % 10**19)) - (1e30 % 10**19)


def test_a_literal_a_type_cannot_hold_keeps_its_value_in_fmod_and_its_weakness_in_choices():
    """``np.fmod`` and ``math.fmod`` take a literal the other operand's type cannot hold as the
    operators do (an int64, a uint64 from 2**63), where they wrapped it (``np.fmod(-1, u)`` of a
    uint32 ``u`` divided 4294967295, and gave 1); and a literal past int64 beside a float, a
    float literal too, is a Python number taking the float's type (float32 here), where it made
    a float64: ``a + (1.0 if c else 10**19)`` and ``1e30 % 10**19`` are float32 with a float32
    ``a``, as NumPy computes them."""
    u = np.array([4294967294, 7], np.uint32)
    n = np.array([16777217, -5], np.int32)
    a = np.array([16777216.0, 1.5], np.float32)
    p = np.array([True, False])
    outi, outf = np.zeros((2, 3), np.int64), np.zeros((2, 4), np.float32)
    tack.launch(k_big_literals_in_fmod_and_choices, dim=2, args=(u, n, a, p, outi, outf))
    i64, f32 = np.int64, np.float32
    for k in range(2):
        assert outi[k].tolist() == [np.fmod(i64(-1), i64(u[k])), np.fmod(i64(3000000000), i64(n[k])),
                                    np.fmod(i64(u[k]), i64(-2**63))], k
        big = f32(1e30 % 10**19)
        want = [np.fmod(f32(10**19), a[k]), np.fmod(a[k], f32(10**19)),
                (a[k] + (f32(1.0) if p[k] else f32(10**19))) - a[k], (a[k] + big) - big]
        np.testing.assert_array_equal(outf[k], np.array(want, np.float32), err_msg=str(k))
    assert outi[0].tolist() == [-1, 13655374, 4294967294] and outf[0, 2] == 0.0


@tack.kernel
def k_int_or_float(n, a, out):
    i = tack.tid()
    out[i] = n[i] or a[i]


def test_an_int_or_a_float_is_the_float_of_either():
    n, a = np.array([0, 3, 0, -2]), np.array([1.5, 2.5, 0.0, np.inf])
    out = np.full(4, -1.0)
    tack.launch(k_int_or_float, dim=4, args=(n, a, out))
    np.testing.assert_array_equal(out, [m or x for m, x in zip(n.tolist(), a.tolist())])


@tack.kernel
def k_short_circuit(a, c):
    i = tack.tid()
    if a[i] > 0 and tack.atomic_add(c, 0, 1) >= 0:
        tack.atomic_add(c, 1, 1)
    if a[i] > 0 or tack.atomic_add(c, 2, 1) >= 0:
        pass
    x = tack.atomic_add(c, 3, 1) if a[i] > 0 else tack.atomic_add(c, 4, 1)


def test_and_or_ifexp_short_circuit():
    """and/or evaluate their right operand only when needed, and a conditional expression only its chosen branch."""
    a = rng().integers(-5, 5, 1000)
    c = np.zeros(5, np.int64)
    tack.launch(k_short_circuit, dim=a.size, args=(a, c))
    pos, nonpos = int((a > 0).sum()), int((a <= 0).sum())
    np.testing.assert_array_equal(c, [pos, pos, nonpos, pos, nonpos])


@tack.kernel
def k_threads_fill(out):
    i, j = tack.tid()
    out[i, j] = i * out.shape[1] + j


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.usefixtures("every_grid_parallel")
def test_results_independent_of_thread_count(threads):
    """A large 2-D grid computes the same result on 1, 2 and 3 threads."""
    tack.config.num_threads = threads
    out = np.full((257, 129), -1, np.int64)
    tack.launch(k_threads_fill, dim=out.shape, args=(out,))
    np.testing.assert_array_equal(out, np.arange(out.size).reshape(out.shape))


# =====================================================================================
# Documented edge cases
# =====================================================================================

@tack.kernel
def k_edges(ia, fa, out):
    i = tack.tid()
    out[i, 0] = ia[i] ** (ia[i] - 5)           # negative at run time: 0
    out[i, 1] = ia[i] << 64
    out[i, 2] = ia[i] >> 64
    out[i, 3] = ia[i] * 4611686018427387904
    out[i, 4] = max(fa[i], 1.0)
    out[i, 5] = max(1.0, fa[i])
    out[i, 6] = min(fa[i], 1.0)
    out[i, 7] = min(1.0, fa[i])


def test_documented_integer_and_min_max_edge_cases():
    """Negative integer exponents at run time give 0, shifts by the width give 0 or -1, integers wrap, and min/max treat NaN like Python."""
    ia = np.array([3, -3, 1, 0], np.int64)
    fa = np.array([np.nan, 2.0, 0.5, np.nan])
    out = np.empty((4, 8))
    tack.launch(k_edges, dim=4, args=(ia, fa, out))
    np.testing.assert_array_equal(out[:, 0], [0, 0, 0, 0])
    np.testing.assert_array_equal(out[:, 1], [0, 0, 0, 0])
    np.testing.assert_array_equal(out[:, 2], [0, -1, 0, 0])
    with numpy_quiet():
        np.testing.assert_array_equal(out[:, 3], (ia * np.int64(2**62)).astype(float))
    for col, fn in ((4, lambda x: max(x, 1.0)), (5, lambda x: max(1.0, x)),
                    (6, lambda x: min(x, 1.0)), (7, lambda x: min(1.0, x))):
        np.testing.assert_array_equal(out[:, col], [fn(x) for x in fa.tolist()])


@tack.kernel
def k_negative_powers_of_literals(x, out):
    i = tack.tid()
    out[i, 0] = 10 ** -6
    out[i, 1] = x[i] * 2 ** -1
    out[i, 2] = (-2) ** -3 + x[i]
    out[i, 3] = x[i] * 10 ** -(1 + 2)


def test_a_negative_power_of_integer_literals_is_pythons_float():
    """``10 ** -6`` written in a kernel is Python's 1e-06, a weak float like ``1 / 3``: it was
    computed as integers at run time, 0, so ``tol = 10 ** -6`` was silently 0.  Weak, it keeps
    a float32 operand float32."""
    x = np.array([1.0, -3.0, 0.25], np.float32)
    out = np.empty((3, 4), np.float32)
    tack.launch(k_negative_powers_of_literals, dim=3, args=(x, out))
    want = np.stack([np.full(3, 10 ** -6, np.float32), x * np.float32(2 ** -1),
                     np.float32((-2) ** -3) + x, x * np.float32(10 ** -3)], axis=1)
    np.testing.assert_array_equal(out, want)


@tack.kernel
def k_saturate(fa, i32, u32, i64):
    i = tack.tid()
    i32[i] = tack.int32(fa[i])
    u32[i] = tack.uint32(fa[i])
    i64[i] = int(fa[i])


def test_float_to_int_truncates_and_saturates():
    """Float to integer truncates toward zero, saturates at the type's range and gives 0 for NaN, as documented."""
    fa = np.array([2.9, -2.9, 1e20, -1e20, np.nan, np.inf, -np.inf, 4294967295.5])
    i32, u32, i64 = np.empty(8, np.int32), np.empty(8, np.uint32), np.empty(8, np.int64)
    tack.launch(k_saturate, dim=8, args=(fa, i32, u32, i64))
    i32_max, i64_max = 2**31 - 1, 2**63 - 1
    np.testing.assert_array_equal(i32, [2, -2, i32_max, -i32_max - 1, 0, i32_max, -i32_max - 1, i32_max])
    np.testing.assert_array_equal(u32, [2, 0, 2**32 - 1, 0, 0, 2**32 - 1, 0, 2**32 - 1])
    np.testing.assert_array_equal(i64, [2, -2, i64_max, -i64_max - 1, 0, i64_max, -i64_max - 1, 4294967295])


from math import sqrt as imported_sqrt  # noqa: E402


@tack.kernel
def k_module_values(out):
    i = tack.tid()
    out[i, 0] = imported_sqrt(2.0 * i)
    out[i, 1] = math.pi * i
    out[i, 2] = 1.0 if math.inf > i else 0.0
    out[i, 3] = np.hypot(3.0, 4.0 * i)


def test_module_functions_and_constants():
    """math.pi, math.inf, 'from math import sqrt' and numpy functions are usable in kernels."""
    out = np.empty((3, 4))
    tack.launch(k_module_values, dim=3, args=(out,))
    i = np.arange(3.0)
    np.testing.assert_allclose(out, np.stack([np.sqrt(2 * i), math.pi * i, np.ones(3), np.hypot(3, 4 * i)],
                                             axis=1), rtol=1e-15)


@tack.kernel
def k_float_of_text(x, out):
    i = tack.tid()
    best = float('inf')
    if x[i] < best:
        best = x[i]
    out[i, 0] = best
    out[i, 1] = max(float("-inf"), x[i])
    out[i, 2] = 1.0 if math.isnan(float('nan')) else 0.0


def test_float_of_inf_and_nan_text_is_a_literal():
    """``float('inf')``, ``float('-inf')`` and ``float('nan')`` (the idiom for a running minimum)
    are the floats Python makes of them, weak as ``math.inf`` is: with a float32 argument the
    kernel stays float32.  They were refused as 'str literals are not supported'."""
    x = np.array([1.5, -2.0], np.float32)
    out = np.zeros((2, 3), np.float32)
    tack.launch(k_float_of_text, dim=2, args=(x, out))
    np.testing.assert_array_equal(out, [[1.5, 1.5, 1.0], [-2.0, -2.0, 1.0]])


@tack.func
def log_base(x, base):
    return math.log(x, base)


@tack.kernel
def k_log_of_a_base(x, out, out32):
    i = tack.tid()
    out[i, 0] = math.log(x[i], 2)
    out[i, 1] = math.log(x[i], x[i] + 1.0)
    out[i, 2] = log_base(x[i], 10)
    out[i, 3] = math.log(100, x[i])
    out32[i] = math.log(tack.float32(x[i]), 2)


def test_math_log_of_a_base_is_pythons():
    """``math.log(x, base)`` is ``log(x) / log(base)``, as Python's math computes it (it was
    'log() takes 1 argument, got 2' unless both were literals); of a float32 ``x`` and a
    literal base it stays float32, as ``math.log(x)`` does."""
    x = np.array([8.0, 1000.0, 0.5, 3.0])
    out, out32 = np.zeros((4, 4)), np.zeros(4, np.float32)
    tack.launch(k_log_of_a_base, dim=4, args=(x, out, out32))
    want = [[math.log(v, 2), math.log(v, v + 1.0), math.log(v, 10), math.log(100, v)] for v in x]
    np.testing.assert_array_equal(out, want)
    np.testing.assert_allclose(out32, np.log2(x), rtol=1e-6)


@tack.kernel
def k_atomic_min_max_nan(lo, hi, v):
    i = tack.tid()
    tack.atomic_min(lo, i, v[i])
    tack.atomic_max(hi, i, v[i])


def test_float_atomic_min_and_max_follow_fmin_and_fmax_with_nan():
    """The documented NaN rule of float atomic_min/atomic_max (C's fmin/fmax): a NaN value
    leaves the element, a NaN element takes the value."""
    lo = np.array([np.nan, 1.0, 3.0, np.nan])
    hi = lo.copy()
    v = np.array([2.0, np.nan, 0.5, np.nan])
    tack.launch(k_atomic_min_max_nan, dim=4, args=(lo, hi, v))
    np.testing.assert_array_equal(lo, np.fmin(np.array([np.nan, 1.0, 3.0, np.nan]), v))
    np.testing.assert_array_equal(hi, np.fmax(np.array([np.nan, 1.0, 3.0, np.nan]), v))


# -- a literal passed to a device function -------------------------------------------------------

def lerp_py(a, b, t):
    return a + (b - a) * t


def scale_py(x, k):
    return x * k


def through_py(x, t):
    return lerp_py(x, x + 1, t)


lerp_f = tack.func(lerp_py)
scale_f = tack.func(scale_py)


@tack.func
def through_f(x, t):
    return lerp_f(x, x + 1, t)


@tack.func
def sign_of(x, z):
    return math.copysign(x, z)


@tack.func
def rebinds(x, k):
    k = k + x
    return k


@tack.kernel
def k_literal_args(f, n, out):
    out[0] = lerp_f(f[0], f[1], 0.1)
    out[1] = lerp_f(f[0], f[1], 0.9)                # another value: a specialization of its own
    out[2] = scale_f(f[0], -3)
    out[3] = through_f(f[1], 0.25)                  # passed on to another device function
    out[4] = scale_f(n[0], 3)
    out[5] = scale_f(n[0], 2**40)                   # what int32 cannot hold is an int64
    out[6] = sign_of(f[0], -0.0)                    # -0.0 is not 0.0
    out[7] = sign_of(f[0], 0.0)
    out[8] = rebinds(f[0], 0.1)                     # assigned there: a float64 parameter
    out[9] = scale_f(f[0], 10**19)                  # past int64: a float's type, as in place
    out[10] = scale_f(f[0], f[1])                   # a value for the same parameter


def test_a_literal_passed_to_a_device_function_is_weak_there():
    """A literal argument of a device function (``lerp(x, y, 0.1)``) keeps its weak type inside
    the function, as a Python literal passed to the same function run as Python on NumPy
    scalars does (NEP 50): with float32 values it computes in float32, with an int32 it wraps as
    int32, each literal value its own specialization.  The Python functions themselves, run on
    NumPy scalars, give the expected values.  Where the function assigns that parameter it is an
    ordinary (float64) parameter.  Before, every such parameter was float64 or int64: float32
    kernels computed in double precision (and did not build where there is none)."""
    f = np.array([0.3, 2.7], np.float32)
    n = np.array([np.iinfo(np.int32).max - 5], np.int32)
    out = np.zeros(11)
    tack.launch(k_literal_args, dim=1, args=(f, n, out))
    x, y, i = f[0], f[1], n[0]
    with numpy_quiet():
        want = [lerp_py(x, y, 0.1), lerp_py(x, y, 0.9), scale_py(x, -3), through_py(y, 0.25),
                scale_py(i, 3), np.int64(i) * 2**40, math.copysign(x, -0.0), math.copysign(x, 0.0),
                float(x) + 0.1, scale_py(x, 10**19), scale_py(x, y)]
    assert [type(w) for w in want[:5]] == [np.float32] * 4 + [np.int32]
    assert type(want[9]) is type(want[10]) is np.float32
    np.testing.assert_array_equal(out, np.array([float(w) for w in want]))
    assert out[0] != float(x) + (float(y) - float(x)) * 0.1       # float32's rounding, not double's
    assert out[4] != float(i) * 3                                 # int32's wrap


@tack.func
def bounded_read(a, k):
    return a[k]


@tack.kernel
def k_literal_index_debug(a, out):
    i = tack.tid()
    out[i] = bounded_read(a, 3)


def test_a_literal_argument_used_as_an_index_is_checked_in_debug_mode():
    """Debug mode checks an access at a literal given to a device function where the function
    makes it (the error names the function's line), and the points that are in bounds run."""
    tack.config.debug = True
    out = np.zeros(2)
    tack.launch(k_literal_index_debug, dim=2, args=(np.arange(4.0), out))
    np.testing.assert_array_equal(out, [3.0, 3.0])
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for axis 0 of 'a' with size 3 "
                                         r"in 'bounded_read' \(.*test_language.py:\d+\)"):
        tack.launch(k_literal_index_debug, dim=2, args=(np.arange(3.0), out))


@tack.kernel
def k_literal_arithmetic(x, out):
    out[0] = x[0] * (1 / 3)
    out[1] = x[0] * (0.5 * 2)
    out[2] = x[0] * (2 ** 0.5)
    out[3] = x[0] + -(1 / 3)
    out[4] = x[0] * (2 ** 3)                        # integers alone: their own rule, unfolded
    out[5] = x[0] * (7 // 2)
    out[6] = x[0] * (1.5 % 1)
    out[7] = x[0] * (1 / 0)                         # a division by zero: at run time, inf


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_arithmetic_of_literals_alone_is_pythons_value_and_weak(dtype):
    """An operation on literals alone that gives a float is that float, as Python computes it,
    and weak, as a Python float is (NEP 50): ``x * (1 / 3)`` of a float32 is NumPy's float32."""
    x = np.array([7], dtype)
    out = np.zeros(8)
    tack.launch(k_literal_arithmetic, dim=1, args=(x, out))
    v = x[0]
    with numpy_quiet():
        want = [v * (1 / 3), v * (0.5 * 2), v * (2 ** 0.5), v + -(1 / 3), v * 2 ** 3, v * 3,
                v * (1.5 % 1), v * np.inf]
    np.testing.assert_array_equal(out, np.array([float(w) for w in want]))


@tack.func
def thirds(x, n):
    return x * (n / 3)


@tack.func
def times(x, n):
    return x * n


@tack.func
def doubled_on(x, n):
    return times(x, n + n)


@tack.func
def doubled(x, n):
    return x * (n + n)


@tack.func
def plus_nan(x, s):
    return x * 0.0 + s


@tack.kernel
def k_literal_arguments_fold(x, out):
    out[0] = thirds(x[0], 1)
    out[1] = doubled_on(x[0], 0.1)
    out[2] = doubled(x[0], 2**62)                  # 2**63: past int64, as in place
    out[3] = doubled(x[0], 2**63 - 1)
    out[4] = plus_nan(x[0], math.nan)
    out[5] = plus_nan(x[0], -math.nan)             # a specialization of its own: the sign kept


def test_a_literal_arguments_arithmetic_in_the_function_is_folded_as_in_place():
    """What a device function computes of a literal argument alone (``n / 3``, ``n + n``, passed
    on) is the value Python computes, as the same written in place (``x * (1 / 3)``): not
    float64 arithmetic, nor int64 that wraps.  Before, ``n + n`` of 2**62 wrapped to -2**63,
    and NaN and -NaN shared one specialization."""
    x = np.array([1.5], np.float32)
    out = np.zeros(6)
    tack.launch(k_literal_arguments_fold, dim=1, args=(x, out))
    v = x[0]
    want = [v * (1 / 3), v * (0.1 + 0.1), v * (2**62 + 2**62), v * ((2**63 - 1) * 2)]
    assert [type(w) for w in want] == [np.float32] * 4
    np.testing.assert_array_equal(out[:4], np.array([float(w) for w in want]))
    assert np.isnan(out[4:]).all() and np.signbit(out[4:]).tolist() == [False, True]


@tack.func
def cubed_shifted(n):
    return (n * n * n) >> 170


@tack.func
def shifted_back(x, n):
    return x + ((n << 3) >> 10)


@tack.kernel
def k_literal_argument_wide_steps(x, out):
    out[0] = cubed_shifted(2**60)                  # 2**180 on the way: past 128 bits
    out[1] = shifted_back(x[0], 2**63 - 1)         # past 64 bits on the way, back in range


def test_a_literal_arguments_integer_arithmetic_is_folded_whole_as_in_place():
    """Integers alone made of a literal argument fold as the front end folds the same written in
    place: the whole expression, whatever its steps (up to 4096 bits), not each step in int64
    (which gave 0 and a wrapped value)."""
    x = np.zeros(1, np.uint64)
    out = np.zeros(2, np.uint64)
    tack.launch(k_literal_argument_wide_steps, dim=1, args=(x, out))
    assert out.tolist() == [(2**60) ** 3 >> 170, ((2**63 - 1) << 3) >> 10]



class _Color(__import__("enum").IntEnum):
    RED = 3


_RED = tack.constant(_Color.RED)


class _EnumPolicy:
    R = _Color.RED


@tack.kernel
def k_int_subclasses(x, y, policy):
    i = tack.tid()
    y[i, 0] = x[i] + _RED
    y[i, 1] = x[i] + policy.R


def test_numbers_of_a_subclass_of_pythons_are_those_numbers():
    """``tack.constant(Color.RED)`` of an IntEnum crashed inside the compiler (KeyError: <enum
    'Color'>: no type for it); it, and a template's IntEnum attribute, are the int they are."""
    x = np.ones(2, np.float32)
    y = np.zeros((2, 2))
    tack.launch(k_int_subclasses, dim=2, args=(x, y, _EnumPolicy))
    assert y.tolist() == [[4.0, 4.0], [4.0, 4.0]]
    assert type(_RED.value) is int


@tack.kernel
def k_ellipsis_placeholder(x, out):
    i = tack.tid()
    if x[i] > 0.0:
        ...
    else:
        out[i] = -1.0
    ...


def test_a_bare_ellipsis_statement_is_nothing_as_in_python():
    """``...`` as a statement (a body's placeholder, as ``pass``) was refused as an ellipsis
    literal; Python runs it as nothing."""
    x = np.array([1.0, -1.0])
    out = np.zeros(2)
    tack.launch(k_ellipsis_placeholder, dim=2, args=(x, out))
    assert out.tolist() == [0.0, -1.0]
