"""The user-facing objects: decorators, tack.constant, casts, intrinsics outside kernels, and a light import."""

import subprocess
import sys

import numpy as np
import pytest

import tack


@tack.func
def helper(x):
    return x + 1


@tack.kernel
def noop(out):
    i = tack.tid()
    out[i] = helper(i)


def test_import_does_not_load_llvmlite():
    """`import tack` alone does not import llvmlite (the compiler loads on the first compile)."""
    code = "import tack, sys; assert 'llvmlite' not in sys.modules, sorted(m for m in sys.modules if 'llvm' in m)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_decorated_functions_refuse_plain_calls():
    """Calling a kernel or a device function from Python raises TypeError saying how to use it."""
    with pytest.raises(TypeError, match="tack.launch"):
        noop(np.zeros(1))
    with pytest.raises(TypeError, match="inside kernels"):
        helper(1)


def test_decorators_take_functions_only():
    """@tack.kernel and @tack.func reject what is not a Python function."""
    with pytest.raises(TypeError):
        tack.kernel(len)
    with pytest.raises(TypeError):
        tack.func(3)


def test_kernel_keeps_name_and_parameters():
    """A kernel keeps its function's name, docstring-free qualname and parameter list."""
    assert noop.__name__ == "noop" and noop.params == ("out",)
    assert "noop" in repr(noop) and "helper" in repr(helper)


@pytest.mark.parametrize("name", ["tid", "atomic_add", "atomic_min", "atomic_max"])
def test_intrinsics_outside_kernels(name):
    """Intrinsics called from plain Python raise TypeError."""
    with pytest.raises(TypeError):
        getattr(tack, name)()


def test_casts_work_in_plain_python():
    """tack.float32 and the other casts are NumPy conversions in plain Python too."""
    assert isinstance(tack.float32(1.5), np.float32) and tack.float32(1.5) == 1.5
    assert isinstance(tack.int32(7), np.int32)
    assert isinstance(tack.uint64(7), np.uint64)
    assert tack.bool_(2) == np.True_


def test_constant_copies_and_freezes_arrays():
    """tack.constant copies an array and makes its copy read-only."""
    a = np.arange(4.0)
    c = tack.constant(a)
    a[0] = 99
    assert c.value[0] == 0.0
    assert not c.value.flags.writeable
    with pytest.raises(ValueError):
        c.value[1] = 5


def test_a_constant_cannot_change_after_it_is_made():
    """A constant's value cannot be replaced (``C.value = 100.0``) nor its array made writable
    again (``C.value.flags.writeable = True``): a kernel compiled after such a change was stored
    under the fingerprint of the value before it (kept from an earlier kernel's compile), and a
    later process whose C had the first value loaded that kernel: a wrong result, in every such
    process, until the entry was cleared.  A new value is a new constant."""
    c = tack.constant(np.arange(3.0))
    s = tack.constant(1.0)
    before = (c.fingerprint, s.fingerprint)
    with pytest.raises(AttributeError, match="cannot change"):
        s.value = 100.0
    with pytest.raises(AttributeError, match="cannot change"):
        c.value = np.ones(3)
    with pytest.raises(ValueError):
        c.value.flags.writeable = True
    with pytest.raises(ValueError):
        c.value[0] = 5.0
    assert (c.fingerprint, s.fingerprint) == before and c.value.tolist() == [0.0, 1.0, 2.0]
    assert s.value == 1.0 and tack.constant(100.0).fingerprint != s.fingerprint


_ANY_DTYPES = [np.float64, np.float32, np.int32, np.int64, np.uint32, np.uint64, np.bool_]


@pytest.mark.parametrize("dt", _ANY_DTYPES)
def test_a_constant_keeps_its_values_dtype_and_shape(dt):
    """Frozen for good, a constant's array is the array it was given: values, dtype (byte order
    too), shape; a non-contiguous or Fortran-ordered array is a C-ordered copy."""
    for a in (np.arange(12).reshape(3, 4).astype(dt), np.arange(12).reshape(3, 4).astype(dt).T,
              np.arange(10).astype(dt)[::3], np.arange(4).astype(np.dtype(dt).newbyteorder(">"))):
        v = tack.constant(a).value
        assert v.dtype == a.dtype and v.shape == a.shape and v.flags.c_contiguous
        np.testing.assert_array_equal(v, a)


def _made_by_a_factory():
    @tack.kernel
    def local(out):
        out[tack.tid()] = 1
    return local


def _launch_in_worker(kernel, n):
    """Run in a spawned worker: ``kernel`` came pickled through multiprocessing."""
    out = np.zeros(n, np.int64)
    tack.launch(kernel, dim=n, args=(out,))
    return out.tolist()


def test_kernels_and_device_functions_pickle_by_name():
    """A kernel or device function pickles as a function does, by module and name, and comes back
    as the same object: pickle refused one ("Can't pickle <function noop>: it's not the same
    object as tests.test_api.noop": its __dict__ held the function it wraps), so none could be
    handed to multiprocessing, concurrent.futures, mpi4py's bcast or Dask.  One its module does
    not hold by name (a factory's) is refused, as such a function is."""
    import pickle
    for proto in (2, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL):
        assert pickle.loads(pickle.dumps(noop, proto)) is noop
        assert pickle.loads(pickle.dumps(helper, proto)) is helper
    with pytest.raises((pickle.PicklingError, AttributeError), match="local"):  # as a function's
        pickle.dumps(_made_by_a_factory())


def test_a_kernel_handed_to_spawned_workers_runs_there():
    """multiprocessing's spawn start method (the default on macOS and Windows, and where threads
    are running) pickles a task's arguments: a kernel among them runs in each worker."""
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        got = pool.starmap(_launch_in_worker, [(noop, 3), (noop, 5)], chunksize=1)
    assert got == [[1, 2, 3], [1, 2, 3, 4, 5]]


def test_a_constant_unpickled_is_copied_and_frozen_again():
    """A pickled array comes back writable: an unpickled constant is wrapped again, frozen, with
    the same fingerprint."""
    import pickle
    c = tack.constant(np.arange(3.0))
    back = pickle.loads(pickle.dumps(c))
    assert isinstance(back, type(c)) and back.fingerprint == c.fingerprint
    assert not back.value.flags.writeable and back.value.tolist() == [0.0, 1.0, 2.0]
    assert pickle.loads(pickle.dumps(tack.constant(7))).value == 7


@pytest.mark.parametrize("bad", [[1, 2], "x", None, np.ones(3, np.complex64),
                                 np.ones((1, 1, 1, 1, 1)), np.float16(1)],
                         ids=["list", "str", "None", "complex", "5d", "float16"])
def test_constant_rejects_other_values(bad):
    """tack.constant takes only numbers and arrays of the supported dtypes with 1-4 dimensions."""
    with pytest.raises(TypeError):
        tack.constant(bad)


def test_constant_of_a_0d_array_says_what_to_pass():
    """A 0-d array is refused with its dimensions named (the message ended "not float64 with 0")
    and the number to pass instead."""
    with pytest.raises(TypeError, match=r"not float64 with 0 dimensions; for a 0-d array, pass its "
                                        r"number \(a\[\(\)\]\)$"):
        tack.constant(np.array(3.0))
    with pytest.raises(TypeError, match=r"not int8 with 1 dimension$"):
        tack.constant(np.ones(3, np.int8))


def test_constant_scalars():
    """tack.constant keeps Python and NumPy scalars as given."""
    assert tack.constant(3).value == 3
    assert tack.constant(np.float32(0.5)).value.dtype == np.float32
    assert tack.constant(True).value is True


def test_lowers_to_agrees_with_the_intrinsic_table(monkeypatch):
    """The dependency check's cheap test (``lowers_to``, without the table) says exactly what
    ``intrinsic_of`` says, for every public object of math, numpy and builtins."""
    import builtins
    import math

    import numpy as np

    from tack import language
    table = language._build()
    names = set(table.values()) | {"erf2", "cast:int8"}
    objs = ([getattr(math, n) for n in dir(math)] + [getattr(np, n) for n in dir(np) if not n.startswith("_")]
            + [getattr(builtins, n) for n in dir(builtins)] + list(language.CASTS.values())
            + [language.tid, language.atomic_add, language.atomic_min, language.atomic_max, None])
    monkeypatch.setattr(language, "_table", None)
    cheap = {(id(o), n): language.lowers_to(o, n) for o in objs for n in names}
    monkeypatch.setattr(language, "_table", table)
    wrong = [(o, n) for o in objs for n in names if cheap[(id(o), n)] != (language.intrinsic_of(o) == n)]
    assert not wrong
    assert sum(cheap.values()) >= 60          # the check is not vacuous: most intrinsics were seen


def test_a_masked_array_is_no_constant():
    """tack.constant took a masked array and dropped its mask: the kernel read the values under
    it (1.0 where the mask said none).  It is refused, as a launch refuses one, saying what to pass."""
    m = np.ma.array([1.0, 2.0], mask=[True, False])
    with pytest.raises(TypeError, match=r"no NumPy masked array.*a\.data.*a\.filled\(value\)"):
        tack.constant(m)
    np.testing.assert_array_equal(tack.constant(m.filled(0.0)).value, [0.0, 2.0])


@tack.func()
def _twice(x):
    return 2.0 * x


@tack.kernel
def _returns_none_early(x, out):
    i = tack.tid()
    if i == 0:
        return None
    out[i] = _twice(x[i])


def test_func_with_parentheses_and_a_kernels_return_none():
    """``@tack.func()`` raised "func() missing 1 required positional argument: 'fn'" where
    ``@tack.kernel()`` is taken; and ``return None`` in a kernel, Python's bare ``return``, was
    refused as "kernels return nothing", which it is."""
    out = np.full(3, -1.0)
    tack.launch(_returns_none_early, 3, (np.arange(3.0), out))
    np.testing.assert_array_equal(out, [-1.0, 2.0, 4.0])


@tack.kernel
def _casts(x, o32, u32, o64, u64):
    i = tack.tid()
    o32[i] = tack.int32(x[i])
    u32[i] = tack.uint32(x[i])
    o64[i] = tack.int64(x[i])
    u64[i] = tack.uint64(x[i])


@pytest.mark.parametrize("values", [
    [1e20, -1e20, float("nan"), float("inf"), -float("inf"), -1.5, 2.9, -0.0, 4294967295.9, -2147483648.7],
    [-1, 2**40, -(2**40), 2**31, 2**32 - 1, 2**63 - 1, -(2**63)],
], ids=["floats", "integers"])
def test_the_integer_casts_give_in_python_what_they_give_in_a_kernel(values):
    """tack.int32 and the others say they convert "inside kernels, and in plain Python too": in
    Python they were NumPy's types, which raise (OverflowError, ValueError) where a kernel
    saturates a float (NaN gives 0) and wraps an integer (tack.uint32(-1))."""
    x = np.array(values, dtype=np.float64 if isinstance(values[0], float) else np.int64)
    outs = [np.zeros(len(x), d) for d in (np.int32, np.uint32, np.int64, np.uint64)]
    tack.launch(_casts, len(x), (x, *outs))
    for j, v in enumerate(values):
        in_python = [tack.int32(v), tack.uint32(v), tack.int64(v), tack.uint64(v)]
        assert [type(a) for a in in_python] == [np.int32, np.uint32, np.int64, np.uint64]
        assert [int(a) for a in in_python] == [int(o[j]) for o in outs], v


from tack.kernels import contour as _contour_module   # noqa: E402 - a module holding constants


@tack.kernel
def module_constants_shape(out):
    i = tack.tid()
    out[i] = _contour_module.TRI_COUNT.shape[0] + _contour_module.EDGE_AXIS.ndim * 1000 + \
        _contour_module.TRI_TABLE.size * 100000


def test_a_module_attributes_constant_gives_its_shape_ndim_and_size():
    """A tack.constant array read as a module's attribute is indexed and len()-ed, but its
    ``.shape``, ``.ndim`` and ``.size`` were refused, "'mod.W' is not a module"; they are the
    constant's, as of a constant named directly."""
    out = np.zeros(2)
    tack.launch(module_constants_shape, dim=2, args=(out,))
    c = _contour_module
    want = (c._TRI_COUNT.shape[0] + c._EDGE_AXIS.ndim * 1000 + c._TRI_TABLE.size * 100000)
    np.testing.assert_array_equal(out, want)

