"""The arguments a kernel's entry point takes, in order, written once (docs/gpu.md, "The kernel
ABI"): code generation reads them in this order and every launch writes them in it.

1. per value argument (templates take none), in the kernel's order:
   - an array: its data pointer; then one extent per dimension unless its shape is static
     (compiled in); then one stride per dimension, in elements, if its layout is A;
   - a scalar: one value of its type (``bool`` as an ``i8`` 0 or 1);
2. the grid's three extents, ``n0 n1 n2`` (1 for a dimension the grid does not have);
3. in debug mode, a pointer to the error record (``int64[4]``).

Each is a slot with a code: ``ptr``, ``i64`` (an extent, a stride, a grid extent) or a
scalar's (``SCALAR_CODES``).  The CPU's entry reads them as the 8-byte slots of one buffer, a
GPU's as its parameters, Metal's as its buffers (the pointers) and the members of a params
struct (the rest).

Light to import (``tack.types`` only): the warm path packs its launches with it.
"""

from .. import types as T

# The code of each scalar type's slot.
SCALAR_CODES = {"bool": "i8", "int32": "i32", "uint32": "u32", "int64": "i64", "uint64": "u64",
                "float32": "f32", "float64": "f64"}
GRID = ("n0", "n1", "n2")
# The bytes of each slot code, a GPU's parameter of it: its size and alignment.
SLOT_BYTES = {"ptr": 8, "i8": 1, "i32": 4, "u32": 4, "i64": 8, "u64": 8, "f32": 4, "f64": 8}


def packed_bytes(codes) -> int:
    """The bytes slots of ``codes`` take as a GPU's parameters: each at its natural alignment,
    as CUDA's parameter space and the AMDGPU kernel arguments lay them out."""
    end = 0
    for c in codes:
        n = SLOT_BYTES[c]
        end = -(-end // n) * n + n
    return end


def array_parts(t: T.Array) -> tuple:
    """What an array of type ``t`` passes, in order: ``pointer``, then ``extents`` unless its
    shape is static, then ``strides`` if its layout is A (each part one slot per dimension
    but the pointer)."""
    return (("pointer",) + (("extents",) if t.shape is None else ())
            + (("strides",) if t.layout == "A" else ()))


def array_fields(t: T.Array) -> int:
    """How many ``i64`` slots follow an array's data pointer: its extents and strides."""
    return t.ndim * (len(array_parts(t)) - 1)


def field_names(t: T.Array) -> list:
    """The names of those slots: ``n<d>`` for an extent, ``s<d>`` for a stride."""
    prefix = {"extents": "n", "strides": "s"}
    return [f"{prefix[part]}{d}" for part in array_parts(t)[1:] for d in range(t.ndim)]


def slot_codes(t) -> list:
    """The slot codes of one value argument of type ``t``."""
    if isinstance(t, T.Array):
        return ["ptr"] + ["i64"] * array_fields(t)
    return [SCALAR_CODES[t.name]]


def entry_codes(types, debug: bool) -> list:
    """Every slot of the entry point, in order, for value arguments of ``types``."""
    codes = [c for t in types for c in slot_codes(t)] + ["i64"] * len(GRID)
    return codes + (["ptr"] if debug else [])


def array_values(t: T.Array, pointer, shape, estrides) -> list:
    """The slot values of an array of type ``t``: ``pointer`` (an address, or the runtime's
    buffer), then its ``shape`` and element strides ``estrides`` where ``t`` passes them."""
    parts = {"pointer": [pointer], "extents": shape, "strides": estrides}
    return [v for part in array_parts(t) for v in parts[part]]


def grid(dims) -> tuple:
    """The grid's slot values: ``dims`` (1 to 3 extents) with 1 for the missing ones."""
    return tuple(dims) + (1,) * (len(GRID) - len(dims))
