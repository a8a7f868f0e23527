"""Shape-generic variants: one variant per array dtype, rank, layout and writability, serving
every shape; shapes compiled in only where a kernel asks (``static_shape``)."""

import numpy as np
import pytest

import tack
import tack.cache
from tack import types as T
from tack.cache import keys as cache_keys
from tack.argtypes import argtypes_of


@tack.kernel
def k_scale2(a, out):
    i, j = tack.tid()
    out[i, j] = a[i, j] * 2.0 + a.shape[1] * 100.0 + a.size * 10000.0


@tack.kernel(static_shape=True)
def k_scale2_static(a, out):
    i, j = tack.tid()
    out[i, j] = a[i, j] * 2.0 + a.shape[1] * 100.0 + a.size * 10000.0


@tack.kernel(static_shape="a")
def k_static_a(a, out):
    i = tack.tid()
    out[i] = a[i] + len(a)


def want_scale2(a):
    return a * 2.0 + a.shape[1] * 100.0 + a.size * 10000.0


def variant_misses():
    return tack.cache.stats()["misses"]["variant"]


def run_scale2(kernel, a):
    out = np.full(a.shape, -1.0)
    tack.launch(kernel, a.shape, (a, out))
    np.testing.assert_array_equal(out, want_scale2(a))
    return out


def test_one_generic_variant_serves_several_shapes():
    """The second and third shapes of a C-ordered array compile nothing: no variant miss, no new
    variant, the first launch's timings untouched; each result uses its own extents."""
    run_scale2(k_scale2, np.arange(12.0).reshape(3, 4))
    n, timings = len(k_scale2._variants), dict(k_scale2.timings)
    misses = variant_misses()
    for shape in ((7, 5), (1, 9), (0, 3)):
        run_scale2(k_scale2, np.arange(float(np.prod(shape))).reshape(shape))
    assert variant_misses() == misses
    assert len(k_scale2._variants) == n and k_scale2.timings == timings


@tack.kernel
def k_copy2(a, out):
    i, j = tack.tid()
    out[i, j] = a[i, j] + 1000.0 * i + j


@pytest.mark.parametrize("make", [
    lambda b: b,                                    # C
    lambda b: np.asfortranarray(b),                 # F
    lambda b: b[::2, 1::3],                         # strided
    lambda b: b[::-1],                              # negative stride on axis 0
    lambda b: b[::-2, ::-3],                        # negative strides on both axes
    lambda b: b.T,                                  # F view
    lambda b: b.T[::-1, 2:],                        # strided view of a transpose
], ids=["C", "F", "strided", "neg0", "neg-both", "transpose", "transpose-slice"])
@pytest.mark.parametrize("rows", [6, 11])
def test_layouts_give_right_results(make, rows):
    """F-ordered, strided and negatively strided inputs (and outputs) give the right results."""
    a = make(np.arange(rows * 10.0).reshape(rows, 10))
    want = a + 1000.0 * np.arange(a.shape[0])[:, None] + np.arange(a.shape[1])[None, :]
    out = np.full(a.shape, -1.0)
    tack.launch(k_copy2, a.shape, (a, out))
    np.testing.assert_array_equal(out, want)
    strided_out = np.full((a.shape[0], 2 * a.shape[1]), -1.0)[:, ::2]       # a strided output too
    tack.launch(k_copy2, a.shape, (a, strided_out))
    np.testing.assert_array_equal(strided_out, want)


@tack.kernel
def k_layout_key(a, out):
    i, j = tack.tid()
    out[i, j] = a[i, j]


def test_layout_is_part_of_the_variant():
    """C, F and strided inputs are three variants, with three keys; a new shape of each layout
    reuses its variant."""
    base = np.arange(20.0).reshape(4, 5)
    arrays = {"C": base, "F": np.asfortranarray(base), "A": base[:, ::2]}
    keys = set()
    for layout, a in arrays.items():
        out = np.empty(a.shape)
        types = tuple(argtypes_of(k_layout_key, (a, out)))
        assert types[0].layout == layout and types[0].shape is None
        keys.add(cache_keys.keys(k_layout_key, {}, types, 2, False).for_target("t"))
        before = variant_misses()
        tack.launch(k_layout_key, a.shape, (a, out))
        assert variant_misses() == before + 1
        np.testing.assert_array_equal(out, a)
    assert len(keys) == 3
    before = variant_misses()
    big = np.arange(63.0).reshape(7, 9)
    for a in (big, np.asfortranarray(big), big[::2, ::-3]):
        out = np.empty(a.shape)
        tack.launch(k_layout_key, a.shape, (a, out))
        np.testing.assert_array_equal(out, a)
    assert variant_misses() == before


def test_read_only_input_is_its_own_variant():
    """A read-only input array gives the right result, as a variant of its own (writability is in the type)."""
    a = np.arange(12.0).reshape(3, 4)
    a.flags.writeable = False
    ta = argtypes_of(k_copy2, (a, np.empty((3, 4))))[0]
    assert ta.writable is False and ta.layout == "C"
    out = np.empty((3, 4))
    tack.launch(k_copy2, a.shape, (a, out))
    np.testing.assert_array_equal(out, a + 1000.0 * np.arange(3)[:, None] + np.arange(4)[None, :])


@tack.kernel
def k_write_ro(out):
    i = tack.tid()
    out[i] = 1.0


def test_writing_a_read_only_array_is_a_compile_error():
    """Writing an array passed read-only is refused when compiled, not done."""
    a = np.zeros(3)
    a.flags.writeable = False
    with pytest.raises(tack.CompileError):
        tack.launch(k_write_ro, 3, (a,))
    assert not a.any()


def test_static_shape_is_a_different_variant_per_shape():
    """static_shape=True: the shape is in the type and the key (one variant per shape), unlike the
    generic kernel's, and the results are right for each shape."""
    a1, a2 = np.arange(12.0).reshape(3, 4), np.arange(35.0).reshape(7, 5)
    t1 = argtypes_of(k_scale2_static, (a1, a1))
    t2 = argtypes_of(k_scale2_static, (a2, a2))
    g1 = argtypes_of(k_scale2, (a1, a1))
    assert t1[0].shape == (3, 4) and t2[0].shape == (7, 5) and g1[0].shape is None
    key = lambda kern, ts: cache_keys.keys(kern, {}, ts, 2, False).for_target("t")   # noqa: E731
    assert key(k_scale2_static, t1) != key(k_scale2_static, t2)
    assert key(k_scale2_static, t1) != key(k_scale2_static, tuple(g1))
    for a in (a1, a2):
        before = variant_misses()
        run_scale2(k_scale2_static, a)
        assert variant_misses() == before + 1
    before = variant_misses()
    run_scale2(k_scale2_static, a1 + 1.0)                  # the first shape again: its variant
    assert variant_misses() == before
    assert len(k_scale2_static._variants) == 2


def test_static_shape_per_parameter():
    """static_shape='a' compiles a's shape in and leaves out's generic."""
    a, out = np.arange(4.0), np.zeros(4)
    ta, tout = argtypes_of(k_static_a, (a, out))
    assert ta.shape == (4,) and tout.shape is None
    assert k_static_a.static_shape == frozenset({"a"})
    tack.launch(k_static_a, 4, (a, out))
    np.testing.assert_array_equal(out, a + 4)
    a6, out6 = np.arange(6.0), np.zeros(6)
    tack.launch(k_static_a, 6, (a6, out6))
    np.testing.assert_array_equal(out6, a6 + 6)
    assert len(k_static_a._variants) == 2


def test_static_shape_names_must_be_parameters():
    """static_shape naming no parameter of the kernel is a TypeError at decoration."""
    with pytest.raises(TypeError, match="static_shape names 'b'"):
        @tack.kernel(static_shape=("a", "b"))
        def k_bad(a, out):
            out[0] = a[0]


@tack.kernel
def k_reach(a, out, k):
    i = tack.tid()
    out[i] = a[i + k]


def test_debug_bounds_check_uses_the_launch_extents():
    """In debug mode one generic variant checks each launch against that launch's extents."""
    tack.config.debug = True
    for n in (5, 9):
        a, out = np.arange(float(n)), np.zeros(n)
        tack.launch(k_reach, n - 1, (a, out, 1))                   # in bounds
        np.testing.assert_array_equal(out[:n - 1], a[1:])
        with pytest.raises(IndexError, match=f"index {n} is out of bounds for axis 0 of 'a' with size {n}"):
            tack.launch(k_reach, n, (a, out, 1))
    assert len(k_reach._variants) == 1


def test_static_debug_bounds_check():
    """A static-shape kernel's bounds checks use its compiled-in extents."""
    tack.config.debug = True
    a, out = np.arange(4.0), np.zeros(5)
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 0 of 'a' with size 4"):
        tack.launch(k_static_a, 5, (a, out))


@tack.kernel
def k_sizes(a, out):
    out[0] = a.size
    out[1] = a.ndim
    out[2] = len(a)
    out[3] = a.shape[-1]


@pytest.mark.parametrize("shape", [(3,), (2, 5), (4, 1, 3), (2, 3, 1, 2)])
def test_shape_size_ndim_len_at_runtime(shape):
    """a.size, a.ndim, len(a) and a.shape[-1] of a generic array are this launch's."""
    a = np.zeros(shape, np.float32)[..., ::-1]
    out = np.zeros(4, np.int64)
    tack.launch(k_sizes, 1, (a, out))
    assert out.tolist() == [a.size, a.ndim, len(a), a.shape[-1]]


@tack.kernel
def k_flags(a, out):
    i, j = tack.tid()
    out[i, j] = a[i, j] * 3.0


def test_argument_keys_normalize_layout_flags():
    """An array whose flags say C and F at once (a column) takes the C-ordered arrays' variant:
    one launch key, one variant."""
    col, square = np.arange(3.0).reshape(3, 1), np.arange(12.0).reshape(3, 4)
    assert col.flags.c_contiguous and col.flags.f_contiguous and not square.flags.f_contiguous
    assert T.typeof_array(col) == T.typeof_array(square)
    before = variant_misses()
    for x in (col, square, np.arange(5.0).reshape(1, 5)):
        out = np.zeros(x.shape)
        tack.launch(k_flags, x.shape, (x, out))
        np.testing.assert_array_equal(out, x * 3.0)
    assert len(k_flags._variants) == 1 and variant_misses() == before + 1


@tack.kernel
def k_rebind(a, b, out, pick_b):
    i = tack.tid()
    x = a
    if pick_b:
        a = b                  # a parameter rebound to another array of its type
    out[i] = a[i] + 10.0 * x[i]


def test_rebound_array_parameter_reads_its_new_array():
    """An array parameter reassigned in the body indexes the array it holds now, with that array's
    extents and strides."""
    a, b = np.arange(6.0), np.arange(100.0, 112.0)[::2]
    b = np.ascontiguousarray(b)
    out = np.zeros(6)
    tack.launch(k_rebind, 6, (a, b, out, True))
    np.testing.assert_array_equal(out, b + 10.0 * a)
    tack.launch(k_rebind, 6, (a, b, out, False))
    np.testing.assert_array_equal(out, a + 10.0 * a)


@tack.kernel
def k_unsigned_index(a, out, j):
    out[0] = a[1, j]


def test_debug_bounds_report_an_unsigned_index_as_unsigned():
    """A uint64 index of 2**64 - 1 out of bounds was reported as index -1 (which would have
    wrapped to the last element, and is not what the kernel was given)."""
    tack.config.debug = True
    a, out = np.zeros((2, 3)), np.zeros(1)
    with pytest.raises(IndexError, match=f"index {2**64 - 1} is out of bounds for axis 1 of 'a' "
                       "with size 3"):
        tack.launch(k_unsigned_index, 1, (a, out, np.uint64(2**64 - 1)))
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 1 of 'a' with size 3"):
        tack.launch(k_unsigned_index, 1, (a, out, np.int64(-4)))
