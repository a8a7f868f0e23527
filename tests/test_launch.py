"""tack.launch: variants per argument signature, scalar argument passing, and splitting grids over threads."""

import numpy as np
import pytest

import tack
from tack.backends import cpu_runtime


@tack.kernel
def k_fill(out, value):
    i, j = tack.tid()
    out[i, j] = value + i


@tack.kernel
def k_scalar(x, out):
    out[0] = x


def test_large_grid_split_over_threads(monkeypatch):
    """A grid whose estimated work gives each of 2 threads enough (here: every grid, the rule's
    minimum per thread set to nothing) runs on the 2 configured threads, and fills every point."""
    monkeypatch.setattr(cpu_runtime, "PER_THREAD_S", 1e-15)
    monkeypatch.setattr(cpu_runtime, "OVERHEAD_FACTOR", 0.0)
    tack.config.num_threads = 2
    out = np.full((128, 128), -1.0)
    before = cpu_runtime.pool_stats()["parallel_launches"]
    tack.launch(k_fill, dim=out.shape, args=(out, 0.5))
    np.testing.assert_array_equal(out, 0.5 + np.arange(128)[:, None] + np.zeros(128))
    stats = cpu_runtime.pool_stats()
    assert stats["last_threads"] == 2 and stats["parallel_launches"] == before + 1
    assert stats["workers"] >= 1


@pytest.mark.parametrize("shape, threads", [((127, 129), 2), ((1, 20000), 2), ((128, 128), 1)],
                         ids=["small", "first-extent-1", "one-thread"])
def test_small_or_unsplittable_grids_run_on_calling_thread(shape, threads, monkeypatch):
    """Grids too small to gain (a new variant is estimated at the cheapest cost a point has), with
    first extent 1, or with one thread configured run on the calling thread.  A new variant's
    first sixteenth is timed first: the clock counts 1 us a read here, as a cheap kernel's part
    takes on any machine (one preempted on a busy machine would send the rest to the pool)."""
    tack.config.num_threads = threads
    reads = [0.0]
    monkeypatch.setattr(cpu_runtime, "_clock", lambda: reads.append(reads[-1] + 1e-6) or reads[-1])
    for v in k_fill._variants.values():
        v.cost = None                       # as a new variant, whatever earlier tests measured
    out = np.zeros(shape)
    before = cpu_runtime.pool_stats()["parallel_launches"]
    tack.launch(k_fill, dim=shape, args=(out, 1.0))
    np.testing.assert_array_equal(out, 1.0 + np.arange(shape[0])[:, None] + np.zeros(shape[1]))
    stats = cpu_runtime.pool_stats()
    assert stats["last_threads"] == 1 and stats["parallel_launches"] == before


def test_argument_types_select_variants():
    """Each distinct combination of argument types compiles its own variant; repeating one reuses it."""
    before = len(k_scalar._variants)
    out = np.zeros(1)
    for x in (3, np.int32(3), 3, 2.5, np.float32(2.5), True):
        tack.launch(k_scalar, dim=1, args=(x, out))
        assert out[0] == float(x)
    assert len(k_scalar._variants) == before + 5


@pytest.mark.parametrize("x", [np.uint64(2**64 - 1), np.int64(-2**63), np.uint32(2**32 - 1),
                               np.int32(-2**31), np.float32(1e-30), True, False, 2**63 - 1, -1.5],
                         ids=lambda v: f"{type(v).__name__}")
def test_scalar_arguments_pass_exactly(x):
    """Scalar arguments of every type reach the kernel unchanged, extremes included."""
    dt = np.asarray(x).dtype if not isinstance(x, (bool, int, float)) else \
        {bool: np.bool_, int: np.int64, float: np.float64}[type(x)]
    out = np.zeros(1, dt)
    tack.launch(k_scalar, dim=1, args=(x, out))
    assert out[0] == x


def test_args_list_and_numpy_dim():
    """args may be any sequence, and dim may be NumPy integers."""
    out = np.zeros((2, 3))
    tack.launch(k_fill, dim=(np.int64(2), np.int32(3)), args=[out, 2.0])
    np.testing.assert_array_equal(out, [[2, 2, 2], [3, 3, 3]])


def test_same_kernel_different_grid_rank():
    """A kernel launched on a 1-D grid and on a 2-D grid compiles a variant for each."""
    out = np.zeros(4, np.int64)
    tack.launch(k_rank, dim=4, args=(out,))
    np.testing.assert_array_equal(out, [1, 1, 1, 1])
    out2 = np.zeros((2, 2), np.int64)
    tack.launch(k_rank2, dim=(2, 2), args=(out2,))
    np.testing.assert_array_equal(out2, [[0, 1], [1, 2]])


@tack.kernel
def k_rank(out):
    t = tack.tid()
    out[t] = 1


@tack.kernel
def k_rank2(out):
    i, j = tack.tid()
    out[i, j] = i + j


@pytest.mark.parametrize("device, error", [("cuda", "CUDAUnavailable"), ("hip", "HIPUnavailable"),
                                           ("cuda:1", "CUDAUnavailable")])
def test_a_gpu_device_without_its_driver_is_a_clear_error_in_process(device, error):
    """device='cuda' or 'hip' on a machine without the driver (or the bindings): the runtime's
    own error, saying what is missing, raised in this process (no crash, nothing compiled)."""
    import numpy as np

    from tack.backends import runtime_for
    if runtime_for(device)[1].available():
        pytest.skip(f"{device} is available on this machine: there is no missing driver to report")

    @tack.kernel
    def k_fill(a):
        i = tack.tid()
        a[i] = 1.0
    with pytest.raises(RuntimeError) as e:
        tack.launch(k_fill, 4, (np.zeros(4),), device=device)
    assert type(e.value).__name__ == error and "not available" in str(e.value)


def test_the_cpu_checks_block_as_a_device_would_and_uses_none():
    """``block=`` on the CPU: any int of at least 1 or one extent of at least 1 per grid
    dimension runs the whole grid (the CPU has no work-groups, so a device's limits do not
    apply); what no device takes (a shape of another rank, an extent or a total below 1, not
    ints) is refused as a device refuses it, before anything runs, so that a call the CPU runs
    is not refused on a GPU for what the CPU could have said (it ran, ignoring block, before)."""
    for block in (1, 3, 1 << 20, np.int64(7), (2, 3), (1 << 16, 1 << 16), [4, 1]):
        out = np.zeros((6, 5))
        tack.launch(k_fill, dim=out.shape, args=(out, 1.0), block=block)
        np.testing.assert_array_equal(out, 1.0 + np.arange(6)[:, None] + np.zeros(5))
    out = np.zeros((6, 5))
    for block, error, said in (((5,), ValueError, r"block \(5,\) does not match the grid \(6, 5\)"),
                               ((2, 0), ValueError, r"block \(2, 0\) does not match the grid"),
                               (0, ValueError, r"block 0 must be at least 1 work-item"),
                               (-1, ValueError, r"block -1 must be at least 1 work-item"),
                               (True, TypeError, r"block must be an int or a tuple of ints, not True"),
                               ("8", TypeError, r"block must be an int or a tuple of ints, not '8'"),
                               ((2.0, 1), TypeError, r"block must be an int or a tuple of ints"),
                               ((True, 1), TypeError, r"not \(True, 1\)"),
                               ((3, np.True_), TypeError, r"block must be an int or a tuple of ints"),
                               (np.array(4), TypeError, r"block must be an int or a tuple of ints")):
        with pytest.raises(error, match=said) as e:
            tack.launch(k_fill, dim=out.shape, args=(out, 1.0), block=block)
        import traceback
        last = traceback.extract_tb(e.value.__traceback__)[-1]
        assert last.filename == tack.launch.__code__.co_filename     # the launch's refusal: no
        assert last.name == "launch"                                  # frame of the checks
    assert not out.any()
    with pytest.raises(ValueError, match=r"block 0 must be at least 1 work-item"):
        tack.launch(k_fill, dim=(0, 5), args=(out, 1.0), block=0)    # whatever the grid


@tack.kernel
def _copy(x, y):
    i = tack.tid()
    y[i] = x[i]


@tack.kernel
def _fill(y, v):
    i = tack.tid()
    y[i] = v


def test_strides_not_whole_elements_are_refused_after_a_strided_variant_ran():
    """A field of a structured array (float64 every 12 bytes) is refused cold, but once the same
    kernel had run on an ordinary strided view its launch key (dtype, rank, layout) matched, and
    the strides were divided down: the copy read the wrong bytes and the fill wrote into the
    record's other field.  Refused either way now, and an unaligned array whose strides are
    whole elements still runs."""
    rec = np.zeros(6, dtype=[("a", "<f8"), ("b", "<i4")])
    rec["a"] = np.arange(6) + 0.5
    rec["b"] = -1
    y = np.zeros(6)
    tack.launch(_copy, dim=3, args=(np.arange(6.0)[::2], np.zeros(3)))
    tack.launch(_fill, dim=3, args=(np.zeros(6)[::2], 1.0))
    with pytest.raises(TypeError, match=r"strides are not multiples of its itemsize \(8\)"):
        tack.launch(_copy, dim=6, args=(rec["a"], y))
    with pytest.raises(TypeError, match=r"strides are not multiples of its itemsize \(8\)"):
        tack.launch(_fill, dim=6, args=(rec["a"], 9.0))
    assert (y == 0).all() and (rec["b"] == -1).all()
    # Not aligned, strides whole elements: runs, and so does the refused one's copy.
    raw = np.zeros(8 * 12 + 1, np.uint8)
    odd = np.ndarray((6,), np.float64, raw.data, 1, (16,))
    odd[:] = np.arange(6) * 2.0
    assert not odd.flags.aligned
    tack.launch(_copy, dim=6, args=(odd, y))
    np.testing.assert_array_equal(y, odd)
    tack.launch(_copy, dim=6, args=(np.ascontiguousarray(rec["a"])[::1][::-1], y))
    np.testing.assert_array_equal(y, rec["a"][::-1])


class _Scale(float):
    K = 5.0


@tack.kernel
def _read_k(s, out):
    i = tack.tid()
    out[i] = s.K


@tack.kernel
def _store_value(s, out):
    i = tack.tid()
    out[i] = s


def test_a_class_and_an_instance_of_it_are_two_launches_not_one():
    """A class passed as a template and an instance of it passed as a number had one launch key
    (the class, and the instance's type): the instance ran the class's variant (out = 5, where a
    fresh process refuses ``s.K`` of a number), and the class, after the instance, was refused
    as a float.  Each is now what it is, in either order."""
    out = np.zeros(3)
    tack.launch(_read_k, 3, (_Scale, out))
    np.testing.assert_array_equal(out, 5.0)
    with pytest.raises(tack.CompileError, match="of a variable only an array's shape"):
        tack.launch(_read_k, 3, (_Scale(3.0), out))
    tack.launch(_store_value, 3, (1.5, out))
    np.testing.assert_array_equal(out, 1.5)
    with pytest.raises(tack.CompileError, match="template class 's'"):
        tack.launch(_store_value, 3, (float, out))


def test_report_timings_before_a_launch_and_of_no_kernel():
    """report_timings of a kernel not launched yet printed an empty first call "(total 0.0 ms)",
    and of anything else raised AttributeError ('timings'): it says the kernel has not been
    launched, and takes a kernel only."""
    import io

    @tack.kernel
    def not_yet(out):
        i = tack.tid()
        out[i] = 1.0
    out = io.StringIO()
    tack.report_timings(not_yet, file=out)
    assert out.getvalue() == ("tack: 'test_report_timings_before_a_launch_and_of_no_kernel.<locals>.not_yet' "
                              "has not been launched in this process: no first call to report\n")
    with pytest.raises(TypeError, match=r"report_timings takes a kernel .* not function"):
        tack.report_timings(tack.launch)
    tack.launch(not_yet, 2, (np.zeros(2),))
    out = io.StringIO()
    tack.report_timings(not_yet, file=out)
    assert "first call of" in out.getvalue() and "launch" in out.getvalue()


def test_a_0d_array_dim_and_a_numpy_int_thread_count_are_taken():
    """``dim=np.array(6)`` was refused ("array(6) is a ndarray") where ``np.array([6])`` and
    ``np.int64(6)`` are taken; ``tack.config.num_threads = np.int64(2)`` was refused as not an
    int.  Both are their integers now (a 0-d float array, or a bool, still refused)."""
    out = np.zeros(6)
    tack.launch(_store_value, np.array(6), (2.5, out))
    np.testing.assert_array_equal(out, 2.5)
    with pytest.raises(TypeError, match="dim must be an int"):
        tack.launch(_store_value, np.array(6.0), (2.5, out))
    try:
        tack.config.num_threads = np.int64(2)
        assert tack.config.num_threads == 2 and type(tack.config.num_threads) is int
        for bad in (np.bool_(True), True, 2.0, 0):
            with pytest.raises(ValueError, match="num_threads must be an int from 1 to"):
                tack.config.num_threads = bad
    finally:
        tack.config.reset()


class _HostDataset:
    """What h5py's Dataset or zarr's Array shows: a shape, a dtype and __array__, in host memory."""

    def __init__(self, a):
        self._a = a
        self.shape, self.dtype = a.shape, a.dtype

    def __array__(self, dtype=None, copy=None):
        return self._a


def test_host_array_likes_are_told_to_pass_a_numpy_array():
    """An object with a shape and dtype in host memory (h5py's Dataset) was told it is "an array
    on a device ... pass its .numpy() copy", which it has not; array.array and memoryview were
    "a array" with no hint.  Each is now told to pass np.asarray of it."""
    import array
    with pytest.raises(TypeError) as e:
        tack.launch(k_fill, 3, (_HostDataset(np.zeros(3)), 1.0))
    assert "argument 'out' is a _HostDataset, not a NumPy array: pass np.asarray(out)" \
        in str(e.value) and "on a device" not in str(e.value), str(e.value)
    for obj, said in ((array.array("d", [0.0] * 3), "is an array;"),
                      (memoryview(np.zeros(3)), "is a memoryview;")):
        with pytest.raises(TypeError) as e:
            tack.launch(k_fill, 3, (obj, 1.0))
        assert said in str(e.value) and "pass np.asarray(out)" in str(e.value), str(e.value)


def test_numpy_strings_get_no_hint_that_would_be_refused_too():
    """``np.str_`` and ``np.bytes_`` have ``__array__``, and were told to pass ``np.asarray`` of
    themselves: a string array, which a kernel refuses as well."""
    for obj, what in ((np.str_("x"), "str_"), (np.bytes_(b"x"), "bytes_")):
        with pytest.raises(TypeError) as e:
            tack.launch(k_fill, 3, (np.zeros(3), obj))
        assert f"argument 'value' is a {what};" in str(e.value), str(e.value)
        assert "asarray" not in str(e.value), str(e.value)


@tack.kernel
def k_fill_refused(out, value):
    i = tack.tid()
    out[i] = value


def test_timing_reports_a_first_call_whose_run_refuses(monkeypatch, capsys):
    """TACK_TIMING=1 printed nothing for a first call whose grid check refused it after the
    compile (and the next call, warm, prints nothing either): that compile went unreported."""
    monkeypatch.setattr(tack.config, "timing", True)
    with pytest.raises(IndexError):
        tack.launch(k_fill_refused, 5, (np.zeros(4), 1.0))
    err = capsys.readouterr().err
    assert "tack: first call of 'k_fill_refused':" in err and "launch" in err, err
