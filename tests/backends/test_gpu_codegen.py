"""GPU code generation checked with the vendors' real tools (no GPU): every launch of the CPU
language suite and the contour's launches, built for CUDA (ptxas; the SASS stored beside the
PTX read by cuobjdump and nvdisasm), ROCm (ld.lld, llvm-readelf)
and Level Zero (spirv-val, ocloc); the kernel ABI; CompileErrors; target keys."""

from __future__ import annotations

import math  # noqa: F401  (k_erf's global)
import os
import re

import numpy as np
import pytest

import tack
from tack.backends import arch_names, gpu, toolchain
from tack.backends.cuda import ptx_of
from tack.backends.gpu import key_for, pack_cuda, pack_level_zero, unpack_cuda, unpack_level_zero
from tack.compiler import lower
from tack.kernels import contour

from . import gpu_tools
from .gpu_tools import (build, gpu_target, language_launches, lerp, lerp_literal, run,
                        spirv_has_float64, tool)
from ..util import check_points_at, kernel_of_arrays

# The language suite's kernels that use math a target has no library-free lowering for
# (float64 exp/pow/hypot...): each is a CompileError naming the function and the target.
NO_LIBM = {"k_augmented", "k_big_literals_in_fmod_and_choices", "k_log_of_a_base", "k_math",
           "k_module_values", "k_np_fmod", "k_np_power", "k_pow"}


def built(target_name, debug=False):
    """[(launch, artifact or CompileError)] for every language-suite launch on a target."""
    target = gpu_target(target_name)
    out = []
    for launch in language_launches():
        try:
            out.append((launch, launch.build(target, debug)))
        except tack.CompileError as e:
            out.append((launch, e))
    return out


def check_failures(results, target_name, expected_kernels=None, feature=None):
    """The CompileErrors are the expected ones, each naming the feature and the target."""
    failed = {launch.name for launch, a in results if isinstance(a, tack.CompileError)}
    if expected_kernels is not None:
        assert failed == expected_kernels, failed
    for launch, a in results:
        if isinstance(a, tack.CompileError):
            msg = str(a)
            assert f"is not supported on {target_name}" in msg, msg
            # (a kernel a function made is named by its own name: k, not make.<locals>.k)
            assert f"in kernel '{launch.name.rsplit('.', 1)[-1]}'" in msg and 'File "' in msg, msg
            if feature:
                assert feature in msg, msg
    return [(launch, a) for launch, a in results if not isinstance(a, tack.CompileError)]


def contour_artifacts(target_name, debug=False):
    target = gpu_target(target_name)
    return [(k, build(k, args, grid, target, debug)) for k, args, grid in contour.tack_warm()]


# -- CUDA ------------------------------------------------------------------------------------

def ptxas_check(ptx: bytes, sm: str, tmp_path, name="k"):
    src = tmp_path / f"{name}.ptx"
    src.write_bytes(ptx_of(ptx))
    run([tool("ptxas"), f"-arch={sm}", str(src), "-o", str(tmp_path / f"{name}.{sm}.cubin")])


def sass_check(art, sm: str, tmp_path, name="k", disassembler="cuobjdump") -> list:
    """The cubin stored beside an artifact's PTX is SASS for ``sm`` holding its kernel's entry,
    as NVIDIA's cuobjdump (``-sass``) or nvdisasm reads it. -> the lines that show it."""
    ptx, cubin, label = unpack_cuda(art.payload)
    assert ptx.startswith(b"//") and cubin[:4] == b"\x7fELF", label
    assert label.startswith(f"{sm} ptxas ") and label.split()[-1][0].isdigit(), label
    path = tmp_path / f"{name}.{sm}.cubin"
    path.write_bytes(cubin)
    if disassembler == "cuobjdump":
        out = run([tool("cuobjdump"), "-sass", str(path)]).stdout
        lines = [ln.strip() for ln in out.splitlines()
                 if ln.strip() in (f"code for {sm}", f"Function : {art.entry}")]
        assert len(lines) == 2, out[:600]
    else:
        out = run([tool("nvdisasm"), str(path)]).stdout
        lines = [ln.strip() for ln in out.splitlines()
                 if re.match(rf"\s*\.(global|type)\s+{art.entry}\b", ln)
                 or re.match(rf"\s*\.section\s+\.text\.{art.entry},", ln)
                 or ln.startswith(f".text.{art.entry}:")]
        assert lines, out[:600]
    return lines


@pytest.mark.parametrize("sm,isa,also", [("sm_80", "7.0", ["sm_90"]), ("sm_90", "7.8", [])])
def test_cuda_language_kernels_assemble_with_ptxas(sm, isa, also, tmp_path):
    """ptxas: every language-suite kernel's PTX for sm_80 assembles for sm_80 and sm_90, for sm_90 for
    sm_90; the PTX names the ISA version of the key and is a kernel entry; float64 exp/pow/hypot are
    CompileErrors naming the function and cuda:sm_XX.  The SASS stored beside each kernel's PTX
    (ptxas of the target, for exactly its sm) is read by cuobjdump, the kernel's entry in it."""
    tool("ptxas")
    tool("cuobjdump")
    ok = check_failures(built(f"cuda:{sm}"), f"cuda:{sm}", NO_LIBM, "math.")
    assert len(ok) > 60
    for n, (launch, art) in enumerate(ok):
        text = ptx_of(art.payload).decode("ascii")
        assert f".version {isa}\n" in text and f".target {sm}\n" in text
        assert re.search(rf"\.visible \.entry {art.entry}\(", text), launch
        assert "call" not in text.split(".entry", 1)[1] or "call.uni" not in text   # no libcalls
        sass_check(art, sm, tmp_path, f"{launch.name}{n}")
        for arch in also:
            ptxas_check(art.payload, arch, tmp_path, f"{launch.name}{n}")


@pytest.mark.parametrize("debug", [False, True])
def test_cuda_contour_assembles(debug, tmp_path):
    """ptxas: the contour's two kernels (3-D and 1-D grids, atomics, constant tables, templates), with
    and without bounds checks, for sm_80 and sm_90: the SASS stored beside the PTX is read by
    cuobjdump and nvdisasm, with the kernel's entry."""
    tool("ptxas")
    tool("cuobjdump")
    tool("nvdisasm")
    for sm in ("sm_80", "sm_90"):
        for kernel, art in contour_artifacts(f"cuda:{sm}", debug):
            for dis in ("cuobjdump", "nvdisasm"):
                lines = sass_check(art, sm, tmp_path, kernel.__qualname__, dis)
                print(f"{sm} {kernel.__qualname__} {dis}: {' | '.join(lines)}")
            text = ptx_of(art.payload).decode()
            assert "atom.global" in text or "red.global" in text


def test_cuda_without_ptxas_builds_ptx_only(monkeypatch):
    """No packaged ptxas: the artifact is the PTX text alone, and the target says why (its
    identity's ``sass`` field, and the note bundles build prints); TACK_CUDA_SASS=0 the same."""
    from tack.backends import cuda, gpu
    def missing():
        raise gpu.ToolError("ptxas not found: tried nowhere")
    monkeypatch.setattr(gpu, "find_ptxas", missing)
    k, args, grid = contour.tack_warm((8, 8, 8))[1]
    for t in (cuda.target("cuda:sm_90"), cuda.target("cuda:sm_90", sass=False)):
        art = build(k, args, grid, t)
        assert art.payload.startswith(b"//") and unpack_cuda(art.payload)[1] == b""
        assert cuda.artifact_parts(art.payload) == [(".ptx", art.payload)]
    assert cuda.target("cuda:sm_90").identity()["sass"] == "none: ptxas not found"
    assert cuda.target("cuda:sm_90").code_note == "PTX only (ptxas not found)"
    assert cuda.target("cuda:sm_90", sass=False).code_note == "PTX only (SASS off)"
    monkeypatch.undo()
    monkeypatch.setenv("TACK_CUDA_SASS", "0")
    assert cuda.target("cuda:sm_90").sass == "off"


def test_a_tool_named_by_its_variable_that_cannot_be_used_is_an_error(tmp_path, monkeypatch):
    """``TACK_PTXAS`` naming no ptxas built PTX alone, silently (the target's identity said
    ``sass=none: ptxas --version``), where a bad ``TACK_OCLOC`` or ``TACK_LD_LLD`` is an error;
    and a tool that exits 0 but writes nothing (a wrapper) gave a FileNotFoundError on a
    temporary file.  Both are ToolErrors naming what was wrong."""
    from tack.backends import cuda, hip
    k, args, grid = contour.tack_warm((8, 8, 8))[1]
    monkeypatch.setenv("TACK_PTXAS", str(tmp_path / "no-ptxas"))
    with pytest.raises(gpu.ToolError, match=r"TACK_PTXAS='.*no-ptxas' cannot be used: ptxas "
                                            r"--version: cannot run"):
        cuda.target("cuda:sm_90")
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    monkeypatch.setenv("TACK_PTXAS", str(silent))
    with pytest.raises(gpu.ToolError, match=r"ptxas for sm_90 \(.*silent\) exited 0 but wrote no "
                                            r"k\.cubin"):
        cuda.assemble(str(silent), b"// ptx", "sm_90")
    monkeypatch.setenv("TACK_LD_LLD", str(silent))
    with pytest.raises(gpu.ToolError, match=r"ld\.lld \(.*silent\) exited 0 but wrote no "
                                            r"kernel\.hsaco"):
        build(k, args, grid, hip.target("rocm:gfx90a"))


def test_cuda_artifact_container():
    """PTX and SASS in one payload: the PTX, the cubin and its label come back; PTX alone (every
    entry before SASS was stored) reads as PTX with no cubin; a container whose sizes are off is
    refused, never misread."""
    packed = pack_cuda(b"// ptx", b"\x7fELFcubin", "sm_90 ptxas 13.0.88")
    assert unpack_cuda(packed) == (b"// ptx", b"\x7fELFcubin", "sm_90 ptxas 13.0.88")
    assert unpack_cuda(b"// ptx") == (b"// ptx", b"", "")
    for bad in (packed[:-1], packed + b"x", packed[:12]):
        with pytest.raises(ValueError, match="not a Tack CUDA artifact"):
            unpack_cuda(bad)


# -- ROCm ------------------------------------------------------------------------------------

def readelf(hsaco: bytes, tmp_path, name="k") -> tuple[str, str]:
    path = tmp_path / f"{name}.hsaco"
    path.write_bytes(hsaco)
    notes = run([tool("llvm-readelf"), "--notes", str(path)]).stdout
    symbols = run([tool("llvm-readelf"), "--symbols", str(path)]).stdout
    return notes, symbols


def check_code_object(art, gfx, tmp_path, name):
    assert art.payload[:4] == b"\x7fELF"
    notes, symbols = readelf(art.payload, tmp_path, name)
    assert re.search(rf"\s{re.escape(art.entry)}\.kd\n", symbols), symbols
    assert re.search(rf"\.symbol:\s+{re.escape(art.entry)}\.kd\n", notes), notes
    assert re.search(rf"amdhsa\.target:\s+'?amdgcn-amd-amdhsa--{re.escape(gfx)}'?\n", notes), notes
    assert re.search(r"amdhsa.version:\s*\n\s*- 1\n\s*- 2\n", notes), notes     # code object v5


@pytest.mark.parametrize("gfx", ["gfx90a", "gfx942"])
def test_rocm_language_kernels_link_into_code_objects(gfx, tmp_path):
    """ld.lld + llvm-readelf: every language-suite kernel links into a code object (v5) whose notes
    hold the AMDGPU metadata of its kernel and whose symbols its .kd descriptor."""
    tool("ld.lld")
    tool("llvm-readelf")
    ok = check_failures(built(f"rocm:{gfx}"), f"rocm:{gfx}", NO_LIBM, "math.")
    assert len(ok) > 60
    for n, (launch, art) in enumerate(ok):
        check_code_object(art, gfx, tmp_path, f"{launch.name}{n}")


@pytest.mark.parametrize("debug", [False, True])
def test_rocm_contour_code_objects(debug, tmp_path):
    """ld.lld + llvm-readelf: the contour for gfx90a, gfx942 and gfx90a:sramecc+:xnack- (the target
    id's features in the metadata)."""
    tool("ld.lld")
    for name, gfx in (("gfx90a", "gfx90a"), ("gfx942", "gfx942"),
                      ("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-")):
        for kernel, art in contour_artifacts(f"rocm:{name}", debug):
            check_code_object(art, gfx, tmp_path, kernel.__qualname__)


# -- Level Zero ------------------------------------------------------------------------------


def spirv_check(spirv: bytes, entry: str, tmp_path, name="k"):
    path = tmp_path / f"{name}.spv"
    path.write_bytes(spirv)
    run([tool("spirv-val"), str(path)])
    text = run([tool("spirv-dis"), str(path)]).stdout
    assert "; Version: 1.2" in text
    assert re.search(rf'OpEntryPoint Kernel %\S+ "{entry}"', text), text[:2000]


def check_l0(art, tmp_path, name, native=True):
    spirv, zebin = unpack_level_zero(art.payload)
    spirv_check(spirv, art.entry, tmp_path, name)
    if native:
        assert zebin[:4] == b"\x7fELF" and art.entry.encode() in zebin
    else:
        assert zebin == b""


def test_level_zero_language_kernels_spirv_validate(tmp_path):
    """spirv-val: every language-suite kernel (all math included) gives valid SPIR-V 1.2 with its
    kernel entry point."""
    tool("spirv-val")
    ok = check_failures(built("spirv:generic"), "spirv:generic", set())
    for n, (launch, art) in enumerate(ok):
        check_l0(art, tmp_path, f"{launch.name}{n}", native=False)


def test_level_zero_language_kernels_pvc(tmp_path):
    """spirv-val + ocloc: every language-suite kernel (all math included) gives valid SPIR-V 1.2 and
    pvc native code (zebin) from ocloc."""
    tool("ocloc")
    tool("spirv-val")
    ok = check_failures(built("level_zero:pvc"), "level_zero:pvc", set())
    for n, (launch, art) in enumerate(ok):
        check_l0(art, tmp_path, f"{launch.name}{n}")


def test_level_zero_language_kernels_dg2_without_float64(tmp_path):
    """ocloc for dg2 (no float64): kernels without float64 build; each one with a float64 value is a
    CompileError at its line naming float64 and level_zero:dg2 (not a driver failure)."""
    tool("ocloc")
    results = built("level_zero:dg2")
    ok = check_failures(results, "level_zero:dg2", feature="float64")
    assert 10 < len(ok) < len(results)
    for n, (launch, art) in enumerate(ok):
        check_l0(art, tmp_path, f"{launch.name}{n}")


@pytest.mark.parametrize("debug", [False, True])
def test_level_zero_contour(debug, tmp_path):
    """spirv-val + ocloc: the contour for pvc (SPIR-V and zebin) and as SPIR-V alone, in debug mode
    too, where its helper functions are not inlined by the optimizer: before every function was
    inlined on Level Zero, their array arguments came out as byte pointers (spirv-val refused the
    SPIR-V; ocloc had no built-in for the int64 atomic add through such a pointer)."""
    tool("ocloc")
    for kernel, art in contour_artifacts("level_zero:pvc", debug):
        check_l0(art, tmp_path, kernel.__qualname__)
    for kernel, art in contour_artifacts("spirv:generic", debug):
        check_l0(art, tmp_path, kernel.__qualname__, native=False)


def test_debug_mode_language_kernels_all_targets(tmp_path):
    """Bounds-checked builds (debug mode) of the language suite are accepted by each target's tool."""
    tool("ptxas")
    tool("ld.lld")
    tool("spirv-val")
    picks = {"k_negative_index", "k_hist", "k_hist2d", "k_func_writes", "k_grid3", "k_constants",
             "k_transpose"}
    launches = [launch for launch in language_launches() if launch.name in picks]
    assert {launch.name for launch in launches} == picks
    for n, launch in enumerate(launches):
        ptx = launch.build(gpu_target("cuda:sm_80"), debug=True)
        assert ptx.sites
        ptxas_check(ptx.payload, "sm_80", tmp_path, f"d{n}")
        check_code_object(launch.build(gpu_target("rocm:gfx90a"), debug=True), "gfx90a", tmp_path, f"d{n}")
        check_l0(launch.build(gpu_target("spirv:generic"), debug=True), tmp_path, f"d{n}", native=False)


# -- the ABI, at the LLVM IR level -----------------------------------------------------------

@tack.kernel
def k_abi(a, b, flag, x, n, c):
    i, j = tack.tid()
    if flag:
        a[i, j] = b[i, j] * x + n + c[0]


@tack.kernel(static_shape="c")
def k_abi_static(a, b, flag, x, n, c):
    i, j = tack.tid()
    if flag:
        a[i, j] = b[i, j] * x + n + c[0]


@pytest.mark.parametrize("name,cc", [("cuda:sm_80", "ptx_kernel"), ("rocm:gfx90a", "amdgpu_kernel"),
                                     ("spirv:generic", "spir_kernel")])
@pytest.mark.parametrize("debug", [False, True])
def test_entry_follows_the_kernel_abi(name, cc, debug):
    """The entry's parameters: each array's global pointer then its extents (unless static) and
    strides (strided layout only), scalars (bool as i8), n0 n1 n2, then the error record (debug)."""
    from tack.codegen import generate
    from tack.argtypes import argtypes_of
    from tack.specialize import specialize
    target = gpu_target(name)
    a = np.zeros((4, 5), np.float32)
    b = np.zeros((8, 5), np.float32)[::2]                 # strided
    c = np.ones(3, np.int32)
    for kernel, c_fields in ((k_abi, ["i64"]), (k_abi_static, [])):
        args = (a, b, True, np.float32(2), 3, c)
        typed = specialize(lower(kernel, {}, debug), argtypes_of(kernel, args), 2)
        gen = generate(typed, target, "tack_abi")
        fn = gen.module.get_global(gen.entry)
        assert fn.calling_convention == cc
        got = [str(t) for t in fn.function_type.args]
        want = (["float addrspace(1)*", "i64", "i64"]                       # a: C, extents
                + ["float addrspace(1)*", "i64", "i64", "i64", "i64"]        # b: extents, strides
                + ["i8", "float", "i64"]                                     # flag, x, n
                + ["i32 addrspace(1)*"] + c_fields                           # c
                + ["i64", "i64", "i64"]                                      # n0 n1 n2
                + (["i64 addrspace(1)*"] if debug else []))
        assert got == want


@pytest.mark.parametrize("grid", [1, 2, 3])
def test_the_entry_runs_grid_dimension_d_on_axis_ndim_minus_1_minus_d(grid):
    """``emit_entry`` (every LLVM GPU target's): each grid dimension's loop starts at the global
    id of its hardware axis (the last dimension on x), steps by that axis's global size and
    stops at its own extent; an axis the grid does not use runs its index 0 only.  The target's
    ids and sizes are marked constants here, so the mapping is read off the IR."""
    import llvmlite.ir as ir
    from tack.argtypes import argtypes_of
    from tack.codegen import generate
    from tack.specialize import specialize

    class Marked(type(gpu_target("spirv:generic"))):
        def global_id(self, module, b, axis):
            return ir.Constant(ir.IntType(64), 1000 + axis)

        def global_size(self, module, b, axis):
            return ir.Constant(ir.IntType(64), 2000 + axis)

    out = np.zeros((2,) * grid, np.float32)
    typed = specialize(lower(k_fill, {}, False), argtypes_of(k_fill, (out,)), grid)
    gen = generate(typed, Marked("generic"), "tack_map")
    fn = gen.module.get_global(gen.entry)
    text = str(fn)
    extents = [a.get_reference() for a in fn.args[-3:]]                    # n0 n1 n2
    for d in range(grid):
        axis = grid - 1 - d
        assert re.search(rf'%"i{d}" = phi\s+i64 \[{1000 + axis}, ', text), text
        assert f'add i64 %"i{d}", {2000 + axis}' in text, text
        assert f'icmp ult i64 %"i{d}", {extents[d]}' in text, text
    for axis in range(grid, 3):
        assert f"icmp ne i64 {1000 + axis}, 0" in text, text
        assert str(2000 + axis) not in text


@tack.kernel
def k_fill(out):
    t = tack.tid()                  # an int on a 1-D grid, a tuple on 2-D and 3-D ones
    out[t] = 1.0


@pytest.mark.parametrize("name,axis,id_reads,size_reads", [
    ("cuda:sm_80", 0, ["ctaid.x", "ntid.x", "tid.x"], ["nctaid.x", "ntid.x"]),
    ("cuda:sm_80", 2, ["ctaid.z", "ntid.z", "tid.z"], ["nctaid.z", "ntid.z"]),
    # AMDGPU: the work-group size from the dispatch packet (uint16 at 4, 6, 8), the grid size
    # in work-items (uint32 at 12, 16, 20)
    ("rocm:gfx90a", 1, ["workgroup.id.y", "workitem.id.y", "i64 6", "load i16"],
     ["i64 16", "load i32"]),
    ("spirv:generic", 1, ["_Z13get_global_idj\"(i32 1)"], ["_Z15get_global_sizej\"(i32 1)"]),
])
def test_each_target_reads_its_hardware_ids_and_sizes(name, axis, id_reads, size_reads):
    """What each target's ``global_id`` and ``global_size`` read along a hardware axis."""
    import llvmlite.ir as ir
    target = gpu_target(name)
    for method, reads in ((target.global_id, id_reads), (target.global_size, size_reads)):
        module = ir.Module()
        fn = ir.Function(module, ir.FunctionType(ir.IntType(64), []), "f")
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(method(module, b, axis))
        text = str(module)
        assert all(r in text for r in reads), (method.__name__, text)


@tack.kernel
def k_erf(a, out):
    i = tack.tid()
    out[i] = math.erf(a[i])  # ERR math.erf


def test_unsupported_math_is_a_compile_error_at_the_users_line():
    """float64 erf on CUDA: a CompileError naming the kernel, file, line (caret), function and
    target; the same kernel builds for SPIR-V, which has erf."""
    with pytest.raises(tack.CompileError) as e:
        build(k_erf, (np.zeros(3), np.zeros(3)), 1, gpu_target("cuda:sm_90"))
    msg = check_points_at(e.value, "k_erf", k_erf, __file__)
    assert "math.erf on float64" in msg and "cuda:sm_90" in msg
    art = build(k_erf, (np.zeros(3), np.zeros(3)), 1, gpu_target("spirv:generic"))
    assert unpack_level_zero(art.payload)[0][:4] == b"\x03\x02\x23\x07"



@tack.kernel
def k_float64_unread(factor, out):  # ERR factor
    i = tack.tid()
    out[i] = tack.float32(i)


@pytest.mark.parametrize("name", ["spirv:generic-fp32", "level_zero:dg2"])
def test_an_unused_float64_parameter_is_refused_without_float64(name):
    """A float64 scalar parameter the body never reads is still a double in the entry's
    signature (SPIR-V's Float64 capability, which a device without float64 may refuse to build):
    a CompileError naming the parameter at its ``def``, as a float64 value in the body is.  With
    a float32 argument the kernel builds, and its SPIR-V declares no float64."""
    with pytest.raises(tack.CompileError) as e:
        build(k_float64_unread, (1.5, np.zeros(3, np.float32)), 1, gpu_target(name))
    msg = check_points_at(e.value, "k_float64_unread", k_float64_unread, __file__)
    assert "parameter 'factor' is float64" in msg and name in msg
    if name.startswith("spirv"):
        art = build(k_float64_unread, (np.float32(1.5), np.zeros(3, np.float32)), 1, gpu_target(name))
        assert not spirv_has_float64(unpack_level_zero(art.payload)[0])


@pytest.mark.parametrize("name", ["spirv:generic-fp32", "level_zero:dg2", "cuda:sm_90"])
def test_a_float32_kernel_passing_a_literal_to_a_device_function_has_no_float64(name):
    """``lerp(x[i], y[i], 0.5)`` of float32 arrays builds where there is no float64 (a literal
    given to a device function stays weak there: float32), its SPIR-V declares no Float64, and
    its PTX holds no double-precision instruction.  It was refused as float64 without float64,
    and computed in double precision on CUDA."""
    f = np.zeros(3, np.float32)
    art = build(lerp_literal, (f, f, f), 1, gpu_target(name))
    if name.startswith("cuda"):
        ptx = ptx_of(unpack_cuda(art.payload)[0]).decode()
        assert ".f32" in ptx and not re.search(r"\.f64\b", ptx), ptx
    else:
        assert not spirv_has_float64(unpack_level_zero(art.payload)[0])


@tack.kernel
def k_literal_arithmetic(x, out):
    i = tack.tid()
    out[i] = x[i] * (1 / 3) + x[i] * (0.5 * 2) - (2 ** 0.5) * -(1 / 7) + lerp(x[i], 1.0, 1 / 4)


@pytest.mark.parametrize("name", ["spirv:generic-fp32", "level_zero:dg2"])
def test_arithmetic_of_literals_alone_builds_without_float64(name):
    """``x * (1 / 3)``, ``0.5 * 2``, ``2 ** 0.5``, ``-(1 / 7)`` and such a literal given to a
    device function, with float32 values: each is one float literal of Python's value (weak, as
    a Python float is), so no float64 is left where the device has none.  Each was computed in
    float64 and refused."""
    f = np.zeros(3, np.float32)
    art = build(k_literal_arithmetic, (f, f), 1, gpu_target(name))
    assert not spirv_has_float64(unpack_level_zero(art.payload)[0])


# -- keys, names, the artifact container -------------------------------------------------------

def test_target_keys_are_the_light_modules_and_change_with_every_setting(monkeypatch):
    """target(name).key == gpu.key_for(name) (no compiling); sm, gfx, features, device, PTX ISA,
    code object version, SPIR-V version and LLVM each change the key."""
    names = ["cuda:sm_80", "cuda:sm_90", "rocm:gfx90a", "rocm:gfx942", "rocm:gfx90a:sramecc+:xnack-",
             "level_zero:pvc", "level_zero:dg2", "spirv:generic"]
    keys = {n: key_for(n) for n in names}
    assert len(set(keys.values())) == len(names)
    for n in names:
        t = toolchain(n.split(":")[0]).target(n)
        assert t.key == keys[n] and t.kind == n.split(":")[0]
        assert key_for(n, llvm="llvmlite-0.0.1") != keys[n]
    monkeypatch.setitem(arch_names.PTX_ISA, "sm_90", "8.0")
    assert key_for("cuda:sm_90") != keys["cuda:sm_90"]
    assert gpu_target("cuda:sm_90").settings["features"] == "+ptx80"
    monkeypatch.setattr(gpu, "CODE_OBJECT_VERSION", 6)
    assert key_for("rocm:gfx90a") != keys["rocm:gfx90a"]
    monkeypatch.setattr(gpu, "SPIRV_VERSION", "1.4")
    assert key_for("level_zero:pvc") != keys["level_zero:pvc"]


def test_an_amd_target_id_has_one_spelling_and_only_features_its_gpu_has():
    """ROCm reports a device's target id with its features in alphabetical order; any other
    order names the same code and so the same key (a bundle built for ``gfx90a:xnack-:sramecc+``
    was found by no node).  A feature set twice, or one the GPU does not have, is refused."""
    from tack.archs import ArchError, resolve
    canonical = "rocm:gfx90a:sramecc+:xnack-"
    assert resolve("rocm:gfx90a:xnack-:sramecc+") == ("rocm", canonical[5:])
    assert key_for("rocm:gfx90a:xnack-:sramecc+") == key_for(canonical)
    assert toolchain("rocm").target("rocm:gfx90a:xnack-:sramecc+").arch == canonical[5:]
    assert resolve("rocm:gfx942:xnack+") == ("rocm", "gfx942:xnack+")
    for bad, says in (("rocm:gfx90a:xnack-:xnack+", "xnack is set twice"),
                      ("rocm:gfx90a:sramecc+:sramecc+", "sramecc is set twice"),
                      ("rocm:gfx1030:xnack+", "gfx1030 has no xnack setting"),
                      ("rocm:gfx900:sramecc-", "gfx900 has no sramecc setting"),
                      ("rocm:gfx1100:sramecc+:xnack-", "gfx1100 has no sramecc setting")):
        with pytest.raises(ArchError, match=says):
            resolve(bad)


def test_the_amd_feature_table_is_what_llvm_records_in_code_objects():
    """``AMD_FEATURE_GPUS`` against this LLVM: a code object built asking for both features
    records each as unsupported (0 in its e_flags bits) on exactly the GPUs without it."""
    import struct

    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple("amdgcn-amd-amdhsa")
    module = llvm.parse_assembly('target triple = "amdgcn-amd-amdhsa"\n'
                                 "define amdgpu_kernel void @k() {\n  ret void\n}\n")
    has = {"xnack": set(), "sramecc": set()}
    for gfx in arch_names.AMD_GPUS:
        tm = target.create_target_machine(cpu=gfx, features="+xnack,+sramecc")
        flags = struct.unpack_from("<I", tm.emit_object(module), 48)[0]
        if (flags >> 8) & 3:
            has["xnack"].add(gfx)
        if (flags >> 10) & 3:
            has["sramecc"].add(gfx)
    assert has == {k: set(v) for k, v in arch_names.AMD_FEATURE_GPUS.items()}


def test_target_objects():
    """Each toolchain's target: kind, arch, machine, suffix, identity; bad names are ArchErrors."""
    from tack.archs import ArchError
    t = toolchain("rocm").target("rocm:gfx90a:sramecc+:xnack-")
    assert (t.kind, t.arch, t.machine_name, t.suffix) == ("rocm", "gfx90a:sramecc+:xnack-", "amdgcn", ".hsaco")
    assert t.settings["cpu"] == "gfx90a" and t.settings["features"] == "+sramecc,-xnack"
    assert t.identity()["code_object"] == "5"
    c = toolchain("cuda").target("cuda:sm_90")
    assert (c.machine_name, c.suffix, c.ptx_isa) == ("nvptx64", ".ptx", "7.8")
    z = toolchain("level_zero").target("level_zero:pvc")
    assert (z.machine_name, z.suffix, z.identity()["device"]) == ("spirv64", ".spv.zebin", "pvc")
    assert toolchain("cpu").target("cpu:x86_64_v3").key
    for bad in ("cuda:sm_1", "rocm:gfx90a:xnack", "rocm:nv90", "level_zero:nope", "cuda:sm_90:x"):
        with pytest.raises(ArchError):
            gpu_target(bad)
    with pytest.raises(ValueError, match="no backend for architectures of kind 'tpu'"):
        toolchain("tpu")


def test_level_zero_container_round_trips():
    payload = pack_level_zero(b"\x03\x02\x23\x07spirv", b"\x7fELFnative")
    assert unpack_level_zero(payload) == (b"\x03\x02\x23\x07spirv", b"\x7fELFnative")
    assert unpack_level_zero(pack_level_zero(b"s")) == (b"s", b"")
    for bad in (b"", payload[:-1], b"X" + payload[1:]):
        with pytest.raises(ValueError):
            unpack_level_zero(bad)


def test_cpu_code_is_unchanged_by_gpu_targets():
    """Building for GPUs in the same process leaves the CPU's launches working (no shared state)."""
    gpu_target("spirv:generic")
    out = np.zeros(5)
    tack.launch(k_abi, dim=(1, 5), args=(out.reshape(1, 5), out.reshape(1, 5) + 1, True, 2.0, 1,
                                        np.ones(1, np.int32)))
    assert (out == 4.0).all()


def test_find_ptxas_takes_packages_never_path(tmp_path, monkeypatch):
    """ptxas for SASS comes from a package: $TACK_PTXAS, PyPI's wheel, conda-forge's cuda-nvcc in
    a conda environment (sys.prefix/bin), $CUDA_HOME/bin (Spack's cuda); one that is only on
    PATH is never taken."""
    import importlib.util
    import sys
    from tack.backends import gpu
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "nvidia" else real(name, *a))
    monkeypatch.delenv("TACK_PTXAS", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)

    def fake_ptxas(where):
        (where / "bin").mkdir(parents=True)
        exe = where / "bin" / "ptxas"
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
        return str(exe)
    on_path = fake_ptxas(tmp_path / "path")
    monkeypatch.setenv("PATH", os.path.dirname(on_path) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    with pytest.raises(gpu.ToolError, match=r"\$CUDA_HOME/bin \(Spack's cuda\)"):
        gpu.find_ptxas()
    assert gpu.sass_tool("sm_90") == (None, "none: ptxas not found")
    spack = fake_ptxas(tmp_path / "spack-cuda")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "spack-cuda"))
    assert gpu.find_ptxas() == spack
    conda = fake_ptxas(tmp_path / "conda")
    (tmp_path / "conda" / "conda-meta").mkdir()
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "conda"))
    assert gpu.find_ptxas() == conda
    monkeypatch.setenv("TACK_PTXAS", spack)
    assert gpu.find_ptxas() == spack


def test_spirv_signed_bool_to_float_becomes_a_select():
    """``sitofp i1`` (true is -1.0) is rewritten as a select before LLVM's SPIR-V backend, which
    converts an i1 as unsigned; other conversions are left as they are."""
    import llvmlite.binding as llvm
    from tack.backends.level_zero import signed_bool_to_float
    text = ("define float @f(i1 %b, i32 %n) {\n  %x = sitofp i1 %b to float\n"
            "  %y = sitofp i32 %n to float\n  %z = uitofp i1 %b to float\n"
            "  %s = fadd float %x, %y\n  %t = fadd float %s, %z\n  ret float %t\n}\n"
            "define <2 x double> @g(<2 x i1> %b) {\n  %x = sitofp <2 x i1> %b to <2 x double>\n"
            "  ret <2 x double> %x\n}\n")
    out = signed_bool_to_float(text)
    assert "sitofp i1" not in out and "sitofp <2 x i1>" not in out
    assert "sitofp i32 %n" in out and "uitofp i1 %b" in out
    assert "select i1 %b, float -1.0, float 0.0" in out
    llvm.parse_assembly(out).verify()


# -- parameter limits ----------------------------------------------------------------------------




def test_a_spirv_kernel_past_255_parameters_is_refused_at_its_def(tmp_path):
    """SPIR-V lets a function declare at most 255 parameters, and a 1-D array is two of them (its
    pointer and extent), the grid three more, debug mode's error record one: 126 arrays (255)
    build, and spirv-val takes the module; 127 (257), or 126 in debug mode (256), are a
    CompileError at the kernel's def saying how many it needs and the limit, for spirv: and
    level_zero: alike, where LLVM emitted a module spirv-val rejects."""
    import shutil
    for n, debug in ((126, False), (125, True)):
        kernel, _ = kernel_of_arrays(n, tmp_path)
        art = build(kernel, tuple(np.zeros(4, np.float32) for _ in range(n)), 1,
                    gpu_target("spirv:generic"), debug=debug)
        spirv = unpack_level_zero(art.payload)[0]
        assert spirv[:4] == b"\x03\x02\x23\x07"
        if shutil.which("spirv-val"):
            spirv_check(spirv, art.entry, tmp_path, f"many{n}")
    for n, debug, need, name in ((127, False, 257, "spirv:generic"), (126, True, 256, "spirv:generic"),
                                 (127, False, 257, "level_zero:pvc")):
        kernel, path = kernel_of_arrays(n, tmp_path)
        with pytest.raises(tack.CompileError) as e:
            build(kernel, tuple(np.zeros(4, np.float32) for _ in range(n)), 1, gpu_target(name),
                  debug=debug)
        msg = str(e.value)
        assert f"in kernel 'k{n}': the kernel's entry point needs {need} parameters" in msg, msg
        assert f"SPIR-V allows a function at most 255, so {name} cannot build it" in msg, msg
        assert f'File "{path}", line 3' in msg, msg


@pytest.mark.parametrize("sm,ndim,fits,limit,over", [
    ("sm_80", 1, 254, 4096, 4104),          # PTX ISA 7.0: 16 bytes an array (pointer, extent)
    ("sm_100", 3, 584, 32764, 32784)])      # PTX ISA 8.6: 56 bytes (pointer, 3 extents, 3 strides)
def test_a_cuda_kernel_past_its_parameter_space_is_refused_at_its_def(sm, ndim, fits, limit, over,
                                                                      tmp_path):
    """CUDA's kernel parameters may take 4096 bytes in a PTX ISA before 8.1, 32764 from 8.1
    (sm_100 and newer here): the most arrays that fit build (ptxas assembles them, where it is
    installed), one more is a CompileError at the kernel's def saying the bytes it needs and the
    limit for its PTX ISA.  ptxas refuses PTX ISA 8.6 past 32764 bytes itself; PTX ISA 7.0 it
    took up to 4352, and the driver was left to refuse it."""
    ptxas = gpu_tools.TOOLS["ptxas"][0]()
    base = np.zeros((4, 4, 8), np.float32)
    arrays = (lambda n: tuple(base[:, :, ::2] for _ in range(n))) if ndim == 3 else \
        (lambda n: tuple(np.zeros(4, np.float32) for _ in range(n)))
    target = gpu_target(f"cuda:{sm}", sass=False)
    kernel, _ = kernel_of_arrays(fits, tmp_path, ndim)
    art = build(kernel, arrays(fits), 1, target)
    if ptxas:
        ptxas_check(art.payload, sm, tmp_path, f"many{fits}")
    kernel, path = kernel_of_arrays(fits + 1, tmp_path, ndim)
    with pytest.raises(tack.CompileError) as e:
        build(kernel, arrays(fits + 1), 1, target)
    msg = str(e.value)
    assert f"in kernel 'k{fits + 1}': the kernel's parameters take {over} bytes" in msg, msg
    assert (f"CUDA takes at most {limit} bytes of kernel parameters in PTX ISA "
            f"{arch_names.PTX_ISA[sm]}, which cuda:{sm} is built with") in msg, msg
    assert f'File "{path}", line 3' in msg, msg


@tack.func
def first_positive(x, n):
    for j in range(n):
        if x[j] > 0.0:
            return x[j], j
    return 0.0, -1


@tack.kernel  # ERR @tack
def k_first_positive(x, out, n):
    i = tack.tid()
    v, j = first_positive(x, n)
    out[i] = v + j


def test_a_spirv_backend_failure_is_a_compile_error_at_the_kernel(monkeypatch):
    """LLVM's SPIR-V backend aborting on a kernel's code is a CompileError naming the kernel at
    its def, with what LLVM said, not a ToolError from the compiler's frames.  The failure is a
    real one: a phi of a struct, which codegen avoids for SPIR-V (``aggregate_phis = False``),
    here let through."""
    from tack.backends.level_zero import LevelZeroTarget
    args = (np.zeros(4, np.float32), np.zeros(4, np.float32), 3)
    art = build(k_first_positive, args, 1, gpu_target("spirv:generic"))
    assert unpack_level_zero(art.payload)[0][:4] == b"\x03\x02\x23\x07"
    monkeypatch.setattr(LevelZeroTarget, "aggregate_phis", True)
    with pytest.raises(tack.CompileError) as e:
        build(k_first_positive, args, 1, gpu_target("spirv:generic"))
    msg = check_points_at(e.value, "k_first_positive", k_first_positive, __file__)
    assert "spirv:generic cannot build this kernel: LLVM's SPIR-V backend failed" in msg, msg
    assert "illegal aggregate intrinsic user" in msg, msg


@tack.kernel
def k_saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


def test_a_grid_index_is_known_non_negative_so_its_wrap_around_folds_away():
    """Each grid-stride loop's index is under its extent, so never negative; the entry says so
    to LLVM, and ``x[i]`` with the thread's index is a plain address: no sign test per access
    (before, each of the saxpy's three accesses shifted the index right by 63 and masked its
    extent in, 24 instructions in the loop instead of 13)."""
    n = 64
    args = (np.float32(2), np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32))
    ptx = ptx_of(build(k_saxpy, args, 1, gpu_target("cuda:sm_80", sass=False)).payload).decode()
    assert "ld.global" in ptx and "st.global" in ptx, ptx
    assert not re.search(r"shr\.s64\s+%rd\d+, %rd\d+, 63;", ptx), ptx
