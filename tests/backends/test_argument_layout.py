"""The argument layout (``tack.backends.argument_layout``): the one statement of the slots an entry
point takes, and the readers that follow it (the CPU's packing, Metal's params struct, the
device runtimes' parameter codes)."""

import numpy as np
import pytest

from tack import types as T
from tack.backends import argument_layout as L
from tack.backends import cpu_runtime, metal
from tack.backends.device_args import ArgSpec, launch_codes

C2 = T.Array(T.float64, 2, "C", True)
A2 = T.Array(T.float32, 2, "A", False)
STATIC = T.Array(T.int32, 3, "C", False, (2, 3, 4))
STATIC_A = T.Array(T.int64, 2, "A", True, (5, 6))
TYPES = [T.boolean, C2, T.int32, A2, STATIC, STATIC_A, T.uint64, T.float32]


class TestArraySlots:
    @pytest.mark.parametrize("t, parts, names", [
        (C2, ("pointer", "extents"), ["n0", "n1"]),
        (A2, ("pointer", "extents", "strides"), ["n0", "n1", "s0", "s1"]),
        (STATIC, ("pointer",), []),
        (STATIC_A, ("pointer", "strides"), ["s0", "s1"]),
    ])
    def test_parts_and_field_names(self, t, parts, names):
        """An array passes its pointer, its extents unless static, its strides if its layout is A."""
        assert L.array_parts(t) == parts
        assert L.field_names(t) == names
        assert L.array_fields(t) == len(names)
        assert L.slot_codes(t) == ["ptr"] + ["i64"] * len(names)

    def test_values_follow_the_parts(self):
        """``array_values`` orders a pointer, extents and strides as the parts say."""
        assert L.array_values(A2, 7, (3, 4), (8, 1)) == [7, 3, 4, 8, 1]
        assert L.array_values(C2, 7, (3, 4), (4, 1)) == [7, 3, 4]
        assert L.array_values(STATIC_A, 7, (5, 6), (1, 5)) == [7, 1, 5]


def test_entry_codes_end_with_the_grid_and_the_error_record():
    """Scalars take their type's code; the grid's three extents follow; debug adds a pointer."""
    codes = L.entry_codes([T.boolean, T.int32, T.float64], False)
    assert codes == ["i8", "i32", "f64", "i64", "i64", "i64"]
    assert L.entry_codes([T.boolean], True) == ["i8", "i64", "i64", "i64", "ptr"]
    assert L.grid((5,)) == (5, 1, 1) and L.grid((2, 3, 4)) == (2, 3, 4)


@pytest.mark.parametrize("debug", [False, True])
def test_device_runtimes_read_the_layout(debug):
    """The device runtimes' codes of a launch (from ``meta["argspec"]``) are the layout's."""
    specs = [ArgSpec(T.spec(t)) for t in TYPES]
    assert launch_codes(specs, debug) == L.entry_codes(TYPES, debug)


@pytest.mark.parametrize("debug", [False, True])
def test_cpu_packing_reads_the_layout(debug):
    """The CPU variant packs one 8-byte slot per slot of the layout, in its order."""
    sites = [] if debug else None
    params = [f"p{i}" for i in range(len(TYPES))]
    v = cpu_runtime.CPUVariant("k", None, params, TYPES, list(range(len(TYPES))), sites)
    assert v.packer.size == 8 * len(L.entry_codes(TYPES, debug))
    a = np.zeros((3, 4))
    b = np.zeros((6, 8), np.float32)[::2, ::2]
    args = (True, a, -7, b, np.zeros((2, 3, 4), np.int32), np.zeros((5, 6), np.int64), 9, 1.5)
    values = v.values(args)
    slots = [c for t in TYPES for c in L.slot_codes(t)]
    assert len(values) == len(slots)
    assert values[1:4] == [a.ctypes.data, 3, 4]
    assert values[5:10] == [b.ctypes.data, 3, 4, 16, 2]
    assert values[10] == args[4].ctypes.data
    assert values[11:] == [args[5].ctypes.data, 6, 1, 9, 1.5]
    assert values[0] is True and values[4] == -7


def test_cpu_packing_without_strided_arrays():
    """Contiguous arrays (static or not) and scalars only: the same order, the pointer first."""
    types = [C2, T.int32, STATIC, T.float32]
    v = cpu_runtime.CPUVariant("k", None, list("abcd"), types, [0, 1, 2, 3], None)
    a, c = np.zeros((3, 4)), np.zeros((2, 3, 4), np.int32)
    assert v.values((a, 5, c, 2.5)) == [a.ctypes.data, 3, 4, 5, c.ctypes.data, 2.5]
    assert v.packer.size == 8 * len(L.entry_codes(types, False))


def test_metal_params_struct_reads_the_layout():
    """Metal's params struct holds the layout's slots but the pointers (those are its buffers),
    named by argument and field, then the grid."""
    members, _ = metal.params_layout(TYPES)
    want = []
    for k, t in enumerate(TYPES):
        want += [f"a{k}_{f}" for f in L.field_names(t)] if isinstance(t, T.Array) else [f"a{k}"]
    assert [m[0] for m in members] == want + list(L.GRID)
    codes = L.entry_codes(TYPES, False)
    assert len(members) == len([c for c in codes if c != "ptr"])
