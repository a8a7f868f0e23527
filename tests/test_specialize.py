"""Type inference (tack.specialize): result types of every operator on every pair of types, against NumPy 2."""

import itertools
import operator
import warnings

import numpy as np
import pytest

import tack
from tack import types as T
from tack.compiler import lower
from tack.specialize import specialize

NAMES = ["bool", "int32", "int64", "uint32", "uint64", "float32", "float64"]


@tack.kernel
def k_add(x, y):
    r = x + y


@tack.kernel
def k_sub(x, y):
    r = x - y


@tack.kernel
def k_mul(x, y):
    r = x * y


@tack.kernel
def k_div(x, y):
    r = x / y


@tack.kernel
def k_floordiv(x, y):
    r = x // y


@tack.kernel
def k_mod(x, y):
    r = x % y


@tack.kernel
def k_pow(x, y):
    r = x ** y


@tack.kernel
def k_and(x, y):
    r = x & y


@tack.kernel
def k_or(x, y):
    r = x | y


@tack.kernel
def k_xor(x, y):
    r = x ^ y


@tack.kernel
def k_lshift(x, y):
    r = x << y


@tack.kernel
def k_rshift(x, y):
    r = x >> y


OPS = {"+": (k_add, operator.add), "-": (k_sub, operator.sub), "*": (k_mul, operator.mul),
       "/": (k_div, operator.truediv), "//": (k_floordiv, operator.floordiv),
       "%": (k_mod, operator.mod), "**": (k_pow, operator.pow), "&": (k_and, operator.and_),
       "|": (k_or, operator.or_), "^": (k_xor, operator.xor), "<<": (k_lshift, operator.lshift),
       ">>": (k_rshift, operator.rshift)}
ARITH = ("+", "-", "*", "//", "%", "**")


def numpy_result(op, a, b):
    """NumPy 2's result dtype name for scalars of dtypes a and b, or None where NumPy refuses."""
    x, y = np.dtype(a).type(1), np.dtype(b).type(1)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return OPS[op][1](x, y).dtype.name
        except TypeError:
            return None


def expected(op, a, b):
    if a == b == "bool" and op in ARITH:
        return "int64"                      # documented: bool arithmetic gives int64, as in Python
    return numpy_result(op, a, b)


def inferred(op, a, b):
    """Tack's type for r = x op y, or None when it raises CompileError."""
    low = lower(OPS[op][0], {}, False)
    try:
        tk = specialize(low, (T.SCALARS[a], T.SCALARS[b]), 1)
    except tack.CompileError:
        return None
    return tk.kernel.locals["r"].name


@pytest.mark.parametrize("op", [o for o in OPS if o not in ("<<", ">>")])
def test_operator_result_types_match_numpy(op):
    """x op y on every pair of the seven types has NumPy 2's result type, and is a CompileError where NumPy refuses."""
    wrong = []
    for a, b in itertools.product(NAMES, NAMES):
        want, got = expected(op, a, b), inferred(op, a, b)
        if want != got:
            wrong.append(f"{a} {op} {b}: tack {got or 'CompileError'}, numpy {want or 'TypeError'}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("op", ["<<", ">>"])
def test_shift_result_types_match_numpy(op):
    """Shifts on every pair of integer types have NumPy 2's result type; shifting floats is a CompileError."""
    wrong = []
    for a, b in itertools.product(NAMES[1:], NAMES[1:]):
        want, got = numpy_result(op, a, b), inferred(op, a, b)
        if want != got:
            wrong.append(f"{a} {op} {b}: tack {got or 'CompileError'}, numpy {want or 'TypeError'}")
    assert not wrong, "\n".join(wrong)


@tack.kernel
def k_clip(x, y, z):
    r = np.clip(x, y, z)
    lit = np.clip(x, 0, 1)
    flit = np.clip(x, 0.0, 1.5)


@tack.kernel
def k_where(c, x, y):
    r = np.where(c, x, y)
    lit = np.where(c, x, 7)


@tack.kernel
def k_sign(x):
    sign = np.sign(x)


@tack.kernel
def k_round1(x):
    rint = np.rint(x)
    rnd = np.round(x)
    rnd2 = np.around(x, 2)
    py = round(x)


def _numpy_type(fn, *args):
    """The dtype name of ``fn(*args)`` in NumPy 2, or None where NumPy refuses it."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return np.asarray(fn(*args)).dtype.name
        except TypeError:
            return None


def _tack_types(kernel, names, *argtypes):
    """{local: Tack's type name} of ``kernel`` specialized for scalars of ``argtypes``, or None
    where it raises CompileError."""
    try:
        tk = specialize(lower(kernel, {}, False), tuple(T.SCALARS[a] for a in argtypes), 1)
    except tack.CompileError:
        return None
    return {n: tk.kernel.locals[n].name for n in names}


def test_clip_and_where_result_types_match_numpy():
    """``np.clip(x, y, z)`` on every triple of the seven types, and of literal bounds, and
    ``np.where(c, x, y)`` on every pair, have NumPy 2's result type."""
    wrong = []
    one = {n: np.dtype(n).type(1) for n in NAMES}
    for a, b, c in itertools.product(NAMES, NAMES, NAMES):
        want = {"r": _numpy_type(np.clip, one[a], one[b], one[c])}
        if b == c == "bool":
            want.update(lit=_numpy_type(np.clip, one[a], 0, 1),
                        flit=_numpy_type(np.clip, one[a], 0.0, 1.5))
        got = _tack_types(k_clip, want, a, b, c)
        if got != want:
            wrong.append(f"np.clip({a}, {b}, {c}): tack {got}, numpy {want}")
    for a, b in itertools.product(NAMES, NAMES):
        want = {"r": _numpy_type(np.where, True, one[a], one[b]),
                "lit": _numpy_type(np.where, True, one[a], 7)}
        got = _tack_types(k_where, want, "bool", a, b)
        if got != want:
            wrong.append(f"np.where(bool, {a}, {b}): tack {got}, numpy {want}")
    assert not wrong, "\n".join(wrong)


def test_sign_and_rounding_result_types():
    """``np.sign``, ``np.rint``, ``np.round`` / ``np.around`` have NumPy 2's result types, but
    for a bool, whose float16 NumPy gives is a float64 here (as ``np.floor``'s is), and
    ``np.sign`` of a bool is refused, as NumPy refuses it; Python's ``round`` is an int64 of a
    float or a bool (Python's int), and an integer keeps its type."""
    for a in NAMES:
        x = np.dtype(a).type(1)
        sign = _numpy_type(np.sign, x)
        assert _tack_types(k_sign, ("sign",), a) == (sign and {"sign": sign}), a
        want = {"rint": _numpy_type(np.rint, x), "rnd": _numpy_type(np.round, x),
                "rnd2": _numpy_type(np.around, x, 2),
                "py": a if np.dtype(a).kind in "iu" else "int64"}
        if a == "bool":
            assert want["rint"] == want["rnd"] == "float16", want
            want.update(rint="float64", rnd="float64", rnd2="float64")
        assert _tack_types(k_round1, want, a) == want, a


@tack.kernel
def k_grid(out):
    t = tack.tid()


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_tid_type_follows_grid_rank(ndim):
    """tack.tid() is int64 on a 1-D grid and a tuple of int64 on 2-D and 3-D grids."""
    arr = T.Array(T.float64, 1, "C")
    tk = specialize(lower(k_grid), (arr,), ndim)
    want = T.int64 if ndim == 1 else T.Tuple((T.int64,) * ndim)
    assert tk.kernel.locals["t"] == want


def test_grid_rank_out_of_range():
    """specialize refuses grids of other than 1-3 dimensions."""
    arr = T.Array(T.float64, 1, "C")
    for bad in (0, 4):
        with pytest.raises(ValueError):
            specialize(lower(k_grid), (arr,), bad)


@tack.func
def halve(x):
    return x * 0.5


@tack.func
def pick(c, x):
    if c:
        return x
    return 0.5


@tack.kernel
def k_infer(a32, a64, out):
    i = tack.tid()
    h32 = halve(a32[i])
    h64 = halve(a64[i])
    acc = 0
    for j in range(3):
        acc = acc + 0.5
    p = pick(i > 1, i)
    w = 1
    w += tack.int32(2)
    out[i] = h32 + h64 + acc + p + w


def test_inference_fixed_point_and_monomorphization():
    """Variables take the promoted type of all their assignments and device functions specialize per argument types."""
    f32 = T.Array(T.float32, 1, "C")
    f64 = T.Array(T.float64, 1, "C")
    tk = specialize(lower(k_infer), (f32, f64, f64), 1)
    loc = tk.kernel.locals
    assert loc["h32"] == T.float32 and loc["h64"] == T.float64
    assert loc["acc"] == T.float64 and loc["p"] == T.float64 and loc["w"] == T.int64
    halves = [f for f in tk.functions if f.lowered.name == "halve"]
    assert sorted(str(f.argtypes[0]) for f in halves) == ["float32", "float64"]


def _chain(depth, passed="n + n", first="1"):
    """Device functions f0 ... f{depth}: each passes its literal on, used twice (n + n)."""
    import textwrap
    src = ["import tack", ""]
    for k in range(depth):
        src += ["@tack.func", f"def f{k}(x, n):", f"    return f{k + 1}(x, {passed})", ""]
    src += ["@tack.func", f"def f{depth}(x, n):", "    return x + n", "",
            "@tack.kernel", "def chain(out):", f"    out[0] = f0(out[0], {first})", ""]
    return textwrap.dedent("\n".join(src))


@pytest.mark.parametrize("passed, first, want", [("n + n", "1", 2**12),
                                                  ("n % 5.0 + n % 5.0", "3.0", None)])
def test_a_literal_passed_on_used_twice_stays_small(tmp_path, passed, first, want):
    """``f(x, n + n)`` passing a literal on: each function's body holds the literal's value,
    not a copy of the whole expression at every use (the expression doubled at each level:
    2**12 nodes in the last of 12 functions, and a compile time growing 4x a level), and the
    value is Python's.  One the folds leave (``n % 5.0``) is put in while it is small, then passed
    as an ordinary parameter."""
    import importlib.util
    import sys
    path = tmp_path / "chain_mod.py"
    path.write_text(_chain(12, passed, first))
    spec = importlib.util.spec_from_file_location("chain_mod", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["chain_mod"] = mod
    try:
        spec.loader.exec_module(mod)
        from tack.compiler import lower
        dtype = np.int64 if want else np.float64
        tk = specialize(lower(mod.chain, {}), (T.Array(T.from_dtype(np.dtype(dtype)), 1, "C"),), 1)

        def nodes(x):
            return 1 + sum(nodes(y) for y in x) if isinstance(x, list) else 0
        sizes = [nodes(tf.lowered.body) for tf in tk.functions]
        assert len(sizes) == 13 and max(sizes) < 200, sizes      # was 2**14 and more
        out = np.zeros(1, dtype)
        tack.launch(mod.chain, 1, (out,))
        if want is None:                        # Python's value of the same chain of calls
            n = 3.0
            for _ in range(12):
                n = n % 5.0 + n % 5.0
            want = n
        assert out[0] == want
    finally:
        sys.modules.pop("chain_mod", None)
