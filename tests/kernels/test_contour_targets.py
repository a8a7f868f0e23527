"""The shipped contour builds for every backend (tack.aot, no device), in its field's precision:
float32 variants (what tack_warm lists and bundles carry) have no float64 and no 64-bit atomics,
so Metal and Intel GPUs without float64 (dg2) take them; float64 fields build where the target
has float64, and are refused, naming float64, where it has not."""

import struct

import numpy as np
import pytest

import tack
import tack.aot
from tack.kernels.contour import tack_warm

# (arch, the vendor tool its compile needs beyond LLVM, or None)
TARGETS = [("cpu", None), ("spirv:generic", None), ("spirv:generic-fp32", None),
           ("cuda:sm_80", None), ("cuda:sm_90", None),
           ("rocm:gfx90a", "ld.lld"), ("rocm:gfx942", "ld.lld"), ("level_zero:pvc", "ocloc"),
           ("level_zero:dg2", "ocloc"), ("metal:apple", None)]
NO_FLOAT64 = ("level_zero:dg2", "spirv:generic-fp32", "metal:apple")


def spirv_capabilities(words: bytes) -> set:
    """The OpCapability operands of a SPIR-V module (little-endian words)."""
    n = len(words) // 4
    w = struct.unpack(f"<{n}I", words[:4 * n])
    assert w[0] == 0x07230203
    caps, i = set(), 5
    while i < n:
        count, op = w[i] >> 16, w[i] & 0xFFFF
        if op == 17:                    # OpCapability
            caps.add(w[i + 1])
        i += max(count, 1)
    return caps


FLOAT64, INT64_ATOMICS = 10, 12         # SPIR-V capability numbers


def _spirv_of(art) -> bytes:
    from tack.backends.gpu import unpack_level_zero
    return unpack_level_zero(art.payload)[0]


@pytest.mark.parametrize("arch, needs", TARGETS, ids=[t[0] for t in TARGETS])
def test_both_kernels_compile_for_every_target(arch, needs):
    """tack.aot.compile of classify and emit, as tack_warm lists them (float32 field), succeeds;
    the SPIR-V declares neither Float64 nor Int64Atomics, the MSL no double."""
    if needs:
        from tests.backends.gpu_tools import tool
        tool(needs)
    arts = [tack.aot.compile(k, arch, args, grid=grid) for k, args, grid in tack_warm((21, 21, 21))]
    assert [a.entry for a in arts] and all(a.payload for a in arts)
    for a in arts:
        if a.kind == "level_zero":
            caps = spirv_capabilities(_spirv_of(a))
            assert FLOAT64 not in caps and INT64_ATOMICS not in caps, (a.entry, caps)
        elif a.kind == "metal":
            assert "double" not in a.payload.decode()


@pytest.mark.parametrize("arch", ["cpu", "cuda:sm_90", "spirv:generic"])
def test_float64_fields_build_where_the_target_has_float64(arch):
    for k, args, grid in tack_warm((8, 8, 8), dtype=np.float64):
        assert tack.aot.compile(k, arch, args, grid=grid).payload


@pytest.mark.parametrize("arch", NO_FLOAT64)
def test_float64_fields_are_refused_naming_float64(arch):
    for k, args, grid in tack_warm((8, 8, 8), dtype=np.float64):
        with pytest.raises(tack.CompileError, match=f"float64 .* not supported on {arch}"):
            tack.aot.compile(k, arch, args, grid=grid)
