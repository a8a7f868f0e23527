"""DLPack (tack.dlpack): NumPy's own capsules read right (versioned and not), the protocol's
ownership kept (the capsule renamed, the producer's deleter called once), producers' failures
turned into TypeErrors naming them, and other libraries' host arrays launched on the CPU
without a copy."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import tack
from tack import dlpack

from .dlpack_producer import Producer, host


class OldNumPyStyle:
    """A producer from before DLPack 1.0: ``__dlpack__(stream=None)`` only."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class Wrapped:
    """Another library's host array: DLPack, and a ``dtype`` NumPy cannot read (as PyTorch's)."""

    dtype = "torch.float64"

    def __init__(self, a):
        self.a = a
        self.shape = a.shape

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.parametrize("make", [
    lambda: np.arange(12.0).reshape(3, 4),
    lambda: np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    lambda: np.arange(40, dtype=np.uint64).reshape(5, 8)[1:, ::3],
    lambda: np.array([True, False, True]),
    lambda: np.arange(6, dtype=np.float32)[2:],
])
@pytest.mark.parametrize("old", [False, True])
def test_numpy_capsules_read_as_numpy_sees_them(make, old):
    a = make()
    before = sys.getrefcount(a)
    t = dlpack.view(OldNumPyStyle(a) if old else a)
    assert t._versioned is not old
    assert t.ptr == a.ctypes.data and t.shape == a.shape and t.dtype == a.dtype
    assert t.estrides == [s // a.itemsize for s in a.strides]
    assert t.device == (dlpack.CPU, 0) and t.writable
    t.close()
    t.close()                               # once only
    del t
    gc.collect()
    assert sys.getrefcount(a) == before     # NumPy's deleter ran: it holds the array no more


def test_read_only_flag_of_a_versioned_capsule():
    a = np.arange(4.0)
    a.flags.writeable = False
    assert dlpack.view(a).writable is False
    assert dlpack.view(host(a, readonly=True)).writable is False
    assert dlpack.view(host(np.arange(4.0))).writable is True


def test_a_hand_made_capsule_byte_offset_null_strides_and_deleter():
    a = np.arange(10, dtype=np.int64)
    p = Producer(a.ctypes.data, (2, 3), np.int64, None, byte_offset=16)
    t = dlpack.view(p)
    assert t.ptr == a.ctypes.data + 16 and t.estrides == [3, 1] and t.shape == (2, 3)
    assert p.deleted == 0
    del t
    gc.collect()
    assert p.deleted == 1


def test_producers_tack_cannot_take_are_type_errors_naming_them():
    class Fails:
        def __dlpack__(self, **kw):
            raise BufferError("exporting is not allowed")

        def __dlpack_device__(self):
            return (1, 0)

    class NotACapsule(Fails):
        def __dlpack__(self, **kw):
            return "capsule"

    with pytest.raises(dlpack.DLPackError, match=r"Fails.__dlpack__\(\) failed \(BufferError"):
        dlpack.view(Fails())
    with pytest.raises(dlpack.DLPackError, match="returned str, not an unused DLPack capsule"):
        dlpack.view(NotACapsule())
    cplx = Producer(np.zeros(4, np.complex64).ctypes.data, (4,), np.complex64)
    with pytest.raises(dlpack.DLPackError, match=r"Producer's DLPack tensor is not one Tack takes: "
                                                 r"its dtype \(code 5, 64 bits, 1 lanes\)"):
        dlpack.view(cplx)
    assert cplx.deleted == 1                    # the capsule went back to its producer
    assert issubclass(dlpack.DLPackError, TypeError)


@tack.kernel
def axpy(a, x, y):
    i = tack.tid()
    y[i] = a * x[i] + y[i]


def test_host_arrays_of_other_libraries_launch_on_the_cpu_without_a_copy():
    """A DLPack host array (a wrapper with a non-NumPy dtype, a hand-made capsule, an old-style
    producer) is launched as a NumPy view of its memory: the kernel's writes are in it."""
    x = np.arange(8.0)
    y = np.ones(8)
    tack.launch(axpy, 8, (2.0, Wrapped(x), Wrapped(y)))
    np.testing.assert_array_equal(y, 2 * x + 1)
    tack.launch(axpy, 8, (2.0, OldNumPyStyle(x), host(y)), block=4)     # block: ignored on a CPU
    np.testing.assert_array_equal(y, 4 * x + 1)
    z = np.ones(16)[::2]                                                # strided memory
    tack.launch(axpy, 8, (1.0, x, host(z)))
    np.testing.assert_array_equal(z, x + 1)


def test_an_old_producers_host_array_is_written_in_place():
    """DLPack before 1.0 has no read-only flag: Tack takes such an array as writable, as its GPU
    launches (and CuPy and PyTorch) do.  On the CPU it was read through NumPy's from_dlpack,
    which makes it read-only: a kernel writing it was refused, with advice (copy it) that would
    have lost the kernel's results."""
    x, y = np.arange(8.0), np.ones(8)
    before = sys.getrefcount(y)
    tack.launch(axpy, 8, (2.0, x, OldNumPyStyle(y)))
    np.testing.assert_array_equal(y, 2 * x + 1)
    gc.collect()
    assert sys.getrefcount(y) == before         # the capsule given back: its deleter ran once
    v = dlpack.host_array(OldNumPyStyle(y[::2]))
    assert v.flags.writeable and v.ctypes.data == y.ctypes.data and v.strides == (16,)


@tack.kernel
def copy2d(a, out):
    i, j = tack.tid()
    out[i, j] = a[i, j]


@pytest.mark.parametrize("first, then, strides", [
    ((1, 3), (2, 3), (5, 1)),       # C to NumPy (an axis of 1), strided to the strides
    ((3, 1), (3, 2), (1, 3)),       # C to NumPy, F to the strides
    ((0, 3), (2, 3), (5, 1)),       # empty: C to NumPy
])
def test_a_host_arrays_layout_is_numpys(first, then, strides):
    """A host DLPack array is compiled as NumPy's view of it, whose layout is NumPy's flags;
    the launch's key took it from the strides, which said strided (or F) where NumPy says C (an
    axis of extent 1, an empty array): the C variant compiled for the first was kept under the
    key of the second, which it then ran with its rows 3 apart, not 5."""
    base = np.arange(20.0)
    copy2d._variants.clear()
    for shape in (first, then):
        got = np.zeros(shape)
        tack.launch(copy2d, shape, (Producer(base.ctypes.data, shape, base.dtype, strides), got))
        want = np.lib.stride_tricks.as_strided(base, shape, [s * base.itemsize for s in strides])
        np.testing.assert_array_equal(got, want)


@tack.kernel(static_shape="w")
def static_total(w, out):
    i = tack.tid()
    acc = 0.0
    for k in range(w.shape[0]):
        acc += w[k]
    out[i] = acc


def test_a_static_shape_of_a_host_array_is_in_the_launchs_key():
    """A kernel compiling in the shape of a host DLPack array: the launch's key of it left the
    shape out (an array of another library's, unlike a NumPy one), so 6 elements ran the variant
    compiled for 3, and summed 3 of them."""
    for n in (3, 6):
        w, out = np.arange(float(n)), np.zeros(1)
        tack.launch(static_total, 1, (host(w), out))
        assert out[0] == w.sum()


def test_read_only_and_device_dlpack_arrays_are_refused_on_the_cpu():
    x = np.arange(4.0)
    with pytest.raises(tack.CompileError, match="read-only") as e:
        tack.launch(axpy, 4, (1.0, x, host(np.ones(4), readonly=True)))
    assert "exported read-only through DLPack" in str(e.value)
    assert not dlpack.host_array(host(np.ones(4), readonly=True)).flags.writeable
    gpu = Producer(x.ctypes.data, (4,), np.float64, device=(dlpack.CUDA, 0))
    with pytest.raises(TypeError, match="array on a device"):
        tack.launch(axpy, 4, (1.0, x, gpu))


def test_a_numpy_launch_does_not_import_dlpack(tmp_path):
    """tack.dlpack (ctypes structures, some 0.4 ms to import) stays out of a process whose
    launches take NumPy arrays only: the warm first call does not pay for it."""
    import os
    import subprocess
    import textwrap
    (tmp_path / "k.py").write_text(textwrap.dedent("""
        import sys, numpy as np, tack

        @tack.kernel
        def axpy(a, x, y):
            i = tack.tid()
            y[i] = a * x[i] + y[i]

        x = np.arange(4.0)
        y = np.ones(4)
        tack.launch(axpy, 4, (2.0, x, y))
        assert (y == 2 * x + 1).all()
        print("tack.dlpack" in sys.modules)
    """))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TACK_CACHE="off", PYTHONPATH=root)
    out = subprocess.run([sys.executable, str(tmp_path / "k.py")], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]


class Fickle:
    """A host DLPack object whose exports differ: ``first`` for the first ``n`` reads, then
    ``later`` (no real producer does this; a launch read it twice, typing from one export and
    running over the next)."""

    def __init__(self, first, later, n):
        self.exports = [host(first)] * n + [host(later)]

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kw):
        p = self.exports.pop(0) if len(self.exports) > 1 else self.exports[0]
        return p.__dlpack__(**kw)


@tack.kernel
def fill_first(out):
    out[0] = 1.5


@pytest.mark.parametrize("kernel", [fill_first, static_total], ids=["dtype", "static shape"])
@pytest.mark.parametrize("made", [False, True], ids=["found", "compiled"])
def test_an_array_whose_exports_differ_is_refused_not_run_over_the_other(kernel, made):
    """A launch typed a host DLPack array from one export and ran over the next: an export of
    float64 then of a single int32 wrote 8 bytes into 4 (heap corruption), and a kernel with a
    static shape of 4 read 4 elements of an array of 1.  The run's views are checked against
    those the variant was made for, whether the launch found it (the first export keys it) or
    made it (the second is compiled for)."""
    kernel._variants.clear()
    good = np.arange(1.0, 5.0)                                      # 1, 2, 3, 4
    out = np.full(1, -1.0)
    if kernel is fill_first:
        small = np.full(1, 7, np.int32)
        args = lambda a: (a,)                                       # noqa: E731
        param = "out"
    else:
        small = np.arange(1.0)                                      # static: 4 elements, then 1
        args = lambda a: (a, out)                                   # noqa: E731
        param = "w"
    if not made:
        tack.launch(kernel, 1, args(Fickle(good, good, 1)))         # the variant, for 4 float64
        assert out[0] == (-1.0 if kernel is fill_first else 10.0)
        out[0] = -1.0
    with pytest.raises(TypeError, match="read again to run") as e:
        tack.launch(kernel, 1, args(Fickle(good, small, 2 if made else 1)))
    assert f"argument '{param}' (Fickle)" in str(e.value) and "nothing ran" in str(e.value)
    assert small.tolist() == ([7] if kernel is fill_first else [0.0]) and out[0] == -1.0
    good[0] = 0.0
    tack.launch(kernel, 1, args(Fickle(good, good, 1)))             # the variant still serves
    assert (good[0], out[0]) == ((1.5, -1.0) if kernel is fill_first else (0.0, 9.0))
