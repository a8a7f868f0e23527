"""The Metal target: MSL source emitted from the typed kernel (tack/backends/metal.py).

No Metal compiler here (``xcrun metal`` is macOS-only): the emitted source is **not compiled by
Metal** in these tests.  It is checked three ways instead:

* golden files (tests/backends/golden/*.metal) for a few kernels; ``TACK_REGEN_GOLDEN=1``
  rewrites them;
* structure: balanced braces and brackets, every ``v_`` name a function uses declared in it,
  every params member the entry reads declared in its struct, the struct's size asserted;
* g++ compiles it against a host stand-in for <metal_stdlib> (tests/backends/metal_shim:
  address spaces and attributes erased, one-thread atomics), and the kernels run on the CPU
  over their grid, fed by ``metal_runtime.pack_params``; results are compared with Tack's CPU
  backend on the same inputs.  This checks syntax, types and Python's semantics in the
  emitted code, not Metal's compiler or its float rounding.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tack
from tack import types as T
from tack.backends import metal, metal_runtime
from tack.backends.device_args import hardware_order
from tack.compiler import lower
from tack.kernels import contour
from tack.argtypes import argtypes_of
from tack.specialize import specialize

from ..util import kernel_of_arrays
from .gpu_tools import lerp, lerp_literal

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")
SHIM = os.path.join(HERE, "metal_shim")
REGEN = bool(os.environ.get("TACK_REGEN_GOLDEN"))

TABLE = tack.constant(np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int32))
FLAGS = tack.constant(np.array([True, False, True]))


# -- kernels ----------------------------------------------------------------------------------

@tack.kernel
def saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


@tack.kernel
def stencil(src, dst):
    i, j = tack.tid()
    n, m = src.shape
    if 0 < i < n - 1 and 0 < j < m - 1:
        dst[i, j] = 0.25 * (src[i - 1, j] + src[i + 1, j] + src[i, j - 1] + src[i, j + 1]) - src[i, j]
    else:
        dst[i, j] = src[i, j]


@tack.kernel
def histogram(values, bins, top, total):
    i = tack.tid()
    b = values[i] % bins.shape[0]
    tack.atomic_add(bins, b, 1)
    tack.atomic_max(top, 0, tack.uint32(values[i]))
    tack.atomic_add(total, 0, tack.float32(0.5))


@tack.func
def divmod_py(a, b):
    return a // b, a % b


@tack.func
def clampf(x, lo, hi):
    return min(max(x, lo), hi)


@tack.kernel
def semantics(ints, floats, out_i, out_f, flags):
    i = tack.tid()
    a = ints[i]
    b = ints[-1 - i]
    q, r = divmod_py(a, b)
    out_i[i, 0] = q
    out_i[i, 1] = r
    out_i[i, 2] = (a << (i % 70)) ^ (a >> 3)
    out_i[i, 3] = tack.int64(2) ** (i % 7) - TABLE[i % 8]
    acc = 0
    for k in range(i, -3, -2):
        if k == 4:
            continue
        acc += k
    n = 0
    while True:
        n += 1
        if n * n > a * a or n > 50:
            break
    out_i[i, 4] = acc * 100 + n
    out_i[i, 5] = tack.int64(floats[i] * 1e10)          # saturates; NaN gives 0
    x = floats[i]
    out_f[i, 0] = x % 1.5 if x == x else 0.0
    out_f[i, 1] = x // 0.75 if x == x else 0.0
    out_f[i, 2] = clampf(x, tack.float32(-2.0), tack.float32(3.0))
    out_f[i, 3] = math.sqrt(abs(x)) + math.floor(x) if not math.isinf(x) else -1.0
    flags[i] = (a > 0) != FLAGS[i % 3]


@tack.kernel
def layouts(f_in, strided, out):
    i, j = tack.tid()
    out[i, j] = f_in[i, j] * 10 + strided[i, j]


@tack.kernel
def checked(x, out):
    i = tack.tid()
    out[i] = x[i + 2]


# -- helpers ------------------------------------------------------------------------------------

def typed(kernel, args, grid, debug=False):
    ats = argtypes_of(kernel, args)
    templates = {p: a for p, a, t in zip(kernel.params, args, ats) if isinstance(t, T.Template)}
    values = tuple(t for t in ats if not isinstance(t, T.Template))
    return specialize(lower(kernel, templates, debug), values, grid), values


def emit(kernel, args, grid, prefix, debug=False, target="metal:apple"):
    tk, values = typed(kernel, args, grid, debug)
    return metal.target(target).generate(tk, prefix), values


def check_structure(src: str, gen):
    assert src.count("{") == src.count("}") and src.count("(") == src.count(")")
    assert src.count("[") == src.count("]")
    # each function: the v_ names it uses are declared in its signature or its body
    for m in re.finditer(r"static inline \w+ (\w+)\(([^)]*)\)\n\{\n(.*?)\n\}\n", src, re.S):
        params, body = m.group(2), m.group(3)
        declared = set(re.findall(r"\b(v_\w+)\b", params))
        declared |= set(re.findall(r"^\s+[\w<>*, ]+ (v_\w+) = \{\};$", body, re.M))
        used = set(re.findall(r"\b(v_\w+)\b", body))
        assert used <= declared, (m.group(1), used - declared)
    struct = re.search(r"struct (\w+)_params \{\n(.*?)\n\};", src, re.S)
    members = set(re.findall(r"^\s+\w+ (\w+);$", struct.group(2), re.M))
    entry = src[src.index(f"kernel void {gen.entry}("):]
    assert set(re.findall(r"tack_p\.(\w+)", entry)) <= members
    assert f"static_assert(sizeof({gen.entry}_params) ==" in src
    assert "double" not in src


def golden(name: str, src: str):
    path = os.path.join(GOLDEN, name + ".metal")
    if REGEN or not os.path.exists(path):
        if not REGEN:
            pytest.fail(f"no golden file {path}: run with TACK_REGEN_GOLDEN=1 to write it")
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w") as f:
            f.write(src)
    with open(path) as f:
        assert src == f.read(), f"{name}: the emitted MSL differs from {path} " \
                                "(TACK_REGEN_GOLDEN=1 rewrites it after review)"


def cxx():
    found = shutil.which("g++") or shutil.which("clang++")
    if found is None:
        pytest.skip("needs g++ or clang++ to compile MSL against the host shim")
    return found


def shim_library(gen, values, grid, tmp_path):
    """Compile the MSL with the shim and a driver that runs the entry at every point of the grid."""
    casts, k = [], 0
    for t in values:
        if isinstance(t, T.Array):
            ty = metal.storage(t.dtype)
            casts.append(f"({'const ' if not t.writable else ''}{ty}*)bufs[{k}]")
            k += 1
    args = casts + [f"*(const {gen.entry}_params*)params"]
    debug = "tack_err" in gen.source.split(f"kernel void {gen.entry}(")[1]
    if debug:
        args.append("(atomic_uint*)err")
    driver = (f'\nextern "C" void tack_run(void** bufs, const void* params, void* err, long n0, '
              f'long n1, long n2) {{\n  for (long x = 0; x < n0; x++) for (long y = 0; y < n1; y++) '
              f'for (long z = 0; z < n2; z++)\n    {gen.entry}({", ".join(args)}, '
              f'uint3{{(uint)x, (uint)y, (uint)z}});\n}}\n')
    src = tmp_path / f"{gen.entry}.cpp"
    src.write_text(gen.source + driver)
    lib = tmp_path / f"{gen.entry}.so"
    r = subprocess.run([cxx(), "-std=c++17", "-O1", "-shared", "-fPIC", "-Wall", "-Wno-attributes",
                        "-Wno-unused-function", "-Wno-unused-variable", "-Werror=return-type",
                        "-fno-fast-math", f"-I{SHIM}", "-x", "c++", str(src), "-o", str(lib)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return ctypes.CDLL(str(lib))


def run_shim(kernel, args, dims, tmp_path, debug=False, prefix=None):
    """Emit, compile with the shim and run over ``dims``; array arguments are updated in place.
    Returns the error record (int64[4])."""
    grid = len(dims)
    gen, values = emit(kernel, args, grid, prefix or f"tack_{kernel.__name__}", debug)
    lib = shim_library(gen, values, grid, tmp_path)
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    bufs = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
    spec = [[T.spec(t)] for t in values]
    vals = [a for a, t in zip(args, argtypes_of(kernel, args)) if not isinstance(t, T.Template)]
    params = metal_runtime.pack_params(spec, vals, dims)
    err = np.zeros(4, np.int64)
    full = hardware_order(dims)             # the threads' grid: the last dimension on x
    lib.tack_run(bufs, params, err.ctypes.data_as(ctypes.c_void_p), *[ctypes.c_long(n) for n in full])
    return err, gen


# -- golden sources and structure ------------------------------------------------------------------

def _contour_args(counts_dtype):
    out = []
    for kernel, args, grid in contour.tack_warm():
        args = tuple(np.zeros(4, counts_dtype) if (isinstance(a, np.ndarray) and a.shape == (4,)
                                                   and a.dtype.kind == "i")
                     else a for a in args)
        out.append((kernel, args, grid))
    return out


def _case_id(x):
    return x if isinstance(x, str) else ""


def golden_cases():
    f = np.zeros(8, np.float32)
    g = np.zeros((4, 5), np.float32)
    cases = [("saxpy", saxpy, (np.float32(2), f, f, f), 1, False),
             ("stencil", stencil, (g, g.copy()), 2, False),
             ("stencil_debug", stencil, (g, g.copy()), 2, True),
             ("histogram", histogram, (np.zeros(8, np.int32), np.zeros(4, np.int32),
                                       np.zeros(1, np.uint32), np.zeros(1, np.float32)), 1, False)]
    (kernel, args, grid), (ekernel, eargs, egrid) = _contour_args(np.int32)   # as it ships
    cases.append(("contour_classify", kernel, args, grid, False))
    cases.append(("contour_emit", ekernel, eargs, egrid, False))
    return cases


@pytest.mark.parametrize("name,kernel,args,grid,debug", golden_cases(), ids=_case_id)
def test_golden_sources(name, kernel, args, grid, debug):
    gen, values = emit(kernel, args, grid, f"tack_{name}", debug)
    check_structure(gen.source, gen)
    golden(name, gen.source)
    if debug:
        assert gen.sites and all(s.function == kernel.__name__ for s in gen.sites)


@pytest.mark.parametrize("name,kernel,args,grid,debug", golden_cases(), ids=_case_id)
def test_sources_compile_as_cpp_against_the_shim(name, kernel, args, grid, debug, tmp_path):
    gen, values = emit(kernel, args, grid, f"tack_{name}", debug)
    shim_library(gen, values, grid, tmp_path)


def test_abi_of_saxpy():
    f = np.zeros(8, np.float32)
    ro = f.copy()
    ro.flags.writeable = False
    gen, _ = emit(saxpy, (np.float32(2), ro, f, f), 1, "tack_abi")
    src = gen.source
    assert gen.entry == "tack_abi_entry"
    assert re.search(r"kernel void tack_abi_entry\(\n    const device float\* a1 \[\[buffer\(0\)\]\],\n"
                     r"    device float\* a2 \[\[buffer\(1\)\]\],\n"
                     r"    device float\* a3 \[\[buffer\(2\)\]\],\n"
                     r"    constant tack_abi_entry_params& tack_p \[\[buffer\(3\)\]\],\n"
                     r"    uint3 tack_gid \[\[thread_position_in_grid\]\]\)", src), src
    # a 1-D grid on x; threads of the unused axes past 0 return
    assert "const long tack_i0 = (long)tack_gid.x;" in src
    assert "if (tack_i0 >= tack_p.n0 || tack_gid.y != 0 || tack_gid.z != 0) return;" in src
    members, size = metal.params_layout([T.float32, T.Array(T.float32, 1, "C", False),
                                         T.Array(T.float32, 1, "C"), T.Array(T.float32, 1, "C")])
    assert [(n, t, o) for n, t, o in members] == [
        ("a0", "float", 0), ("a1_n0", "long", 8), ("a2_n0", "long", 16), ("a3_n0", "long", 24),
        ("n0", "long", 32), ("n1", "long", 40), ("n2", "long", 48)]
    assert size == 56 and "static_assert(sizeof(tack_abi_entry_params) == 56" in src


def test_pack_params_follows_the_layout():
    spec = [["bool"], ["array:float32:2:A:w"], ["int32"], ["array:int32:3:C:r:2x3x4"], ["uint64"]]
    a = np.zeros((6, 8), np.float32)[::2, ::-2]
    data = metal_runtime.pack_params(spec, [True, a, -7, np.zeros((2, 3, 4), np.int32), 2**64 - 1],
                                     (5, 6))
    members, size = metal.params_layout([T.parse_spec(s[0]) for s in spec])
    assert len(data) == size == 80
    got = {name: np.frombuffer(data, {"bool": "?", "int": "<i4", "long": "<i8", "ulong": "<u8"}[ty],
                               1, off)[0] for name, ty, off in members}
    assert got == {"a0": True, "a1_n0": 3, "a1_n1": 4, "a1_s0": 16, "a1_s1": -2, "a2": -7,
                   "a4": 2**64 - 1, "n0": 5, "n1": 6, "n2": 1}


def test_target_keys_and_settings():
    t = metal.target("metal:apple")
    assert t.kind == "metal" and t.suffix == ".metal" and t.arch == "apple"
    assert t.settings["msl"] == "3.0" and t.settings["emitter"] == metal.EMITTER_VERSION
    assert t.key == metal.key_for("metal:apple") == metal_runtime.host_key()
    assert metal_runtime.lookup_keys() == [t.key]       # keys, as the cache looks them up
    assert t.key != metal.target("metal:apple8").key
    from tack.archs import ArchError
    with pytest.raises(ArchError, match="metal:apple"):
        metal.target("metal:nvidia")


def test_compile_typed_and_the_one_compile_path():
    f = np.zeros(8, np.float32)
    args = (np.float32(2), f, f, f)
    tk, values = typed(saxpy, args, 1)
    src = metal.target("metal:apple").compile_typed(tk)
    assert isinstance(src, bytes) and b"kernel void tack_entry(" in src
    from tack.compiler import compile_variant
    art = compile_variant(lower(saxpy, {}, False), "lk", values, 1, metal.target("metal:apple"))
    assert art.payload.decode().count("kernel void ") == 1
    assert art.meta["backend"] == "metal" and art.meta["suffix"] == ".metal"
    assert art.meta["entry"] == art.entry and art.entry in art.payload.decode()
    assert art.meta["argspec"] == [["float32"], ["array:float32:1:C:w"]] + [["array:float32:1:C:w"]] * 2


# -- the emitted code run on the CPU through the shim, against Tack's CPU backend ----------------------

def test_saxpy_and_stencil_run_like_the_cpu(tmp_path):
    x = np.arange(100, dtype=np.float32)
    y = np.linspace(-1, 1, 100).astype(np.float32)
    out = np.zeros(100, np.float32)
    run_shim(saxpy, (np.float32(1.5), x, y, out), (100,), tmp_path)
    np.testing.assert_array_equal(out, np.float32(1.5) * x + y)
    src = np.random.default_rng(0).random((9, 7)).astype(np.float32)
    dst, ref = np.zeros_like(src), np.zeros_like(src)
    run_shim(stencil, (src, dst), (9, 7), tmp_path)
    tack.launch(stencil, dim=(9, 7), args=(src, ref))
    np.testing.assert_allclose(dst, ref, rtol=1e-6)


def test_semantics_run_like_the_cpu(tmp_path):
    ints = np.array([7, -7, 13, -1, 0, 5, -128, 2**40, -3, 9, 1, -2**62], dtype=np.int64)
    floats = np.array([2.5, -2.5, 1e9, -1e30, np.nan, np.inf, -0.0, 0.74, 3.1, -7.6, 1e-3, 5.0],
                      dtype=np.float32)
    n = len(ints)
    outs = {}
    for where in ("shim", "cpu"):
        out_i, out_f, flags = np.zeros((n, 6), np.int64), np.zeros((n, 4), np.float32), np.zeros(n, bool)
        args = (ints, floats, out_i, out_f, flags)
        if where == "shim":
            run_shim(semantics, args, (n,), tmp_path)
        else:
            tack.launch(semantics, dim=n, args=args)
        outs[where] = (out_i, out_f, flags)
    np.testing.assert_array_equal(outs["shim"][0], outs["cpu"][0])
    np.testing.assert_allclose(outs["shim"][1], outs["cpu"][1], rtol=1e-6)
    np.testing.assert_array_equal(outs["shim"][2], outs["cpu"][2])


@tack.kernel
def float_divmod(a, b, q, r):
    i = tack.tid()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]


def test_float_floordiv_and_mod_are_numpys(tmp_path):
    """Float32 // and % in the emitted MSL are NumPy's (npy_divmodf), as the CPU's are: the
    floor of (a - a % b) / b, so 1.0 // 0.1 is 9.0 where floor(1.0 / 0.1) is 10.0, as the emitter
    gave; infinities, signed zeros and NaN as NumPy; by zero, a / b."""
    from tests.test_language import SPECIAL_FLOATS, _same_floats
    pairs = np.array([(x, y) for x in SPECIAL_FLOATS for y in SPECIAL_FLOATS])
    with np.errstate(over="ignore"):
        a, b = pairs[:, 0].astype(np.float32), pairs[:, 1].astype(np.float32)
    q, r = np.zeros_like(a), np.zeros_like(a)
    run_shim(float_divmod, (a, b, q, r), (a.size,), tmp_path)
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(a, b), np.remainder(a, b)
    bad = ~_same_floats(q, want_q)
    assert not bad.any(), [(x, y, g, w) for x, y, g, w in zip(a[bad], b[bad], q[bad], want_q[bad])][:8]
    assert _same_floats(r, want_r).all()


@tack.kernel
def np_fmod_of(a, b, out):
    i = tack.tid()
    out[i] = np.fmod(a[i], b[i])


@pytest.mark.parametrize("dt", [np.int32, np.uint32, np.float32])
def test_np_fmod_runs_like_the_cpu(dt, tmp_path):
    """np.fmod was refused on Metal as "math.np.fmod (no MSL function)", though math.fmod builds
    (metal::fmod); of integers it is the truncated remainder, 0 by 0 and by -1, as the CPU's."""
    info = np.iinfo(dt) if dt != np.float32 else None
    vals = [0, 1, 7, 2**31 - 1] + ([-1, -7, -2**31] if dt == np.int32 else [2**32 - 1] if dt == np.uint32 else [-7.5, 0.5])
    pairs = np.array([(x, y) for x in vals for y in vals], dtype=object)
    a, b = pairs[:, 0].astype(dt), pairs[:, 1].astype(dt)
    got, want = np.zeros_like(a), np.zeros_like(a)
    run_shim(np_fmod_of, (a, b, got), (a.size,), tmp_path, prefix=f"tack_np_fmod_{np.dtype(dt).name}")
    tack.launch(np_fmod_of, a.size, (a, b, want))
    np.testing.assert_array_equal(got, want)
    assert info is None or (got[b == 0] == 0).all()


class NegativeNaN:
    K = -math.nan


@tack.kernel
def nan_sign(p, out):
    i = tack.tid()
    out[i] = math.copysign(tack.float32(1.0), p.K)


def test_a_nan_literal_keeps_its_sign(tmp_path):
    """A template's -NaN is a literal in the emitted MSL: it was written NAN, whose sign is +, so
    copysign(1, P.K) gave 1 where the CPU gives -1; it is written as its bits."""
    for where in ("shim", "cpu"):
        out = np.zeros(2, np.float32)
        if where == "shim":
            run_shim(nan_sign, (NegativeNaN, out), (2,), tmp_path)
        else:
            tack.launch(nan_sign, dim=2, args=(NegativeNaN, out))
        assert out.tolist() == [-1.0, -1.0], where


def test_layouts_and_atomics_run_like_the_cpu(tmp_path):
    f_in = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    big = np.arange(48, dtype=np.float32).reshape(6, 8)
    strided = big[::2, ::-2]
    out, ref = np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32)
    run_shim(layouts, (f_in, strided, out), (3, 4), tmp_path)
    tack.launch(layouts, dim=(3, 4), args=(f_in, strided, ref))
    np.testing.assert_array_equal(out, ref)
    values = np.array([5, 3, 8, 1, 9, 2, 7, 7, 4], np.int32)
    res = [np.zeros(4, np.int32), np.zeros(1, np.uint32), np.zeros(1, np.float32)]
    run_shim(histogram, (values, *res), (9,), tmp_path)
    assert res[0].tolist() == np.bincount(values % 4, minlength=4).tolist()
    assert res[1][0] == 9 and res[2][0] == 4.5


def test_contour_classify_with_int32_counters_runs_like_the_cpu(tmp_path):
    """The contour's first kernel (3-D grid, device functions, constant tables, atomics) with
    int32 counters, on a sphere: the same counts as the CPU backend's, the same set of crossing
    edges and of active cells (their order depends on the threads)."""
    ax = np.linspace(-1, 1, 9, dtype=np.float32)
    field = np.sqrt(ax[:, None, None] ** 2 + ax[None, :, None] ** 2 + ax[None, None, :] ** 2)
    field = np.ascontiguousarray(field, dtype=np.float32)
    results = {}
    for where in ("shim", "cpu"):
        edge_vid, vert_src, active, _ = contour._scratch(field.shape)
        counts = np.zeros(4, np.int32)
        cargs = (field, np.float32(0.6), edge_vid, vert_src, active, counts)
        if where == "shim":
            run_shim(contour.classify, cargs, field.shape, tmp_path, prefix="tack_classify")
        else:
            tack.launch(contour.classify, dim=field.shape, args=cargs)
        nverts, nactive = int(counts[0]), int(counts[1])
        results[where] = (counts[:3].tolist(), sorted(vert_src[:nverts]), sorted(active[:nactive]))
    assert results["shim"] == results["cpu"] and results["cpu"][0][2] > 50


def test_contour_for_a_float64_field_is_refused_naming_float64():
    """The contour computes in its field's precision: its float32 variants (what it ships and
    tack_warm lists) build for Metal, a float64 field's are refused naming float64."""
    for kernel, args, grid in contour.tack_warm(dtype=np.float64):
        with pytest.raises(tack.CompileError) as e:
            emit(kernel, args, grid, "tack_x")
        msg = str(e.value)
        assert "float64 (Metal has no double precision) is not supported on metal:apple" in msg
        # where: the kernel and its source line (a float64 argument: the kernel's own line)
        assert f"in kernel '{kernel.__qualname__}'" in msg and 'contour.py", line ' in msg, msg


def test_debug_mode_records_the_first_out_of_bounds_access(tmp_path):
    x = np.arange(10, dtype=np.float32)
    out = np.zeros(10, np.float32)
    err, gen = run_shim(checked, (x, out), (10,), tmp_path, debug=True)
    site = gen.sites[int(err[0]) - 1]
    assert site.array == "x" and site.function == "checked"
    assert err[1:].tolist() == [0, 10, 10]                     # axis 0, index 10, extent 10
    np.testing.assert_array_equal(out[:8], x[2:])


# -- refusals -----------------------------------------------------------------------------------

@tack.kernel
def uses_double(x, out):
    i = tack.tid()
    out[i] = float(x[i]) * 2


@tack.kernel
def uses_erf(x, out):
    i = tack.tid()
    out[i] = math.erf(x[i])


def _refused(kernel, args, grid, *needles, filename=os.path.basename(__file__)):
    with pytest.raises(tack.CompileError) as e:
        emit(kernel, args, grid, "tack_x")
    msg = str(e.value)
    assert "is not supported on metal:apple" in msg and f"in kernel '{kernel.__name__}'" in msg, msg
    assert 'File "' in msg and filename in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_float64_is_a_compile_error_at_the_users_line():
    f = np.zeros(4, np.float32)
    msg = _refused(uses_double, (f, f), 1, "float64 (Metal has no double precision)")
    assert "out[i] = float(x[i]) * 2" in msg
    # A float64 parameter: named, and pointed at on the def line, with the fix (it said
    # "argument of type float64; pass float32" at the @tack.kernel line, naming no parameter)
    msg = _refused(saxpy, (2.0, f, f, f), 1, "parameter 'a' is float64; a Python float argument "
                   "is float64, pass np.float32")
    assert "def saxpy(a, x, y, out):" in msg and "argument of type" not in msg, msg
    d = np.zeros(4)
    _refused(saxpy, (np.float32(1), d, d, d), 1, "parameter 'x' is a float64 array; pass a "
             "float32 one (x.astype(np.float32))")


def test_a_literal_given_to_a_device_function_builds_without_double():
    """A float32 kernel passing a literal to a device function builds for Metal, in float: the
    literal is weak in the function, as if written there (it was a float64 parameter, refused
    naming float64)."""
    f = np.zeros(4, np.float32)
    gen, _ = emit(lerp_literal, (f, f, f), 1, "tack_x")
    text = gen.source if hasattr(gen, "source") else str(gen)
    assert "double" not in text and "0.25f" in text, text


@tack.func
def negated(x, s):
    return x * -s


@tack.func
def thirds(x, n):
    return x * (n / 3)


@tack.kernel
def literal_arithmetic(x, out):
    i = tack.tid()
    out[i] = (x[i] * (1 / 3) + (2 ** 0.5) * -(1 / 7) + lerp(x[i], 1.0, 1 / 4) + thirds(x[i], 1)
              + negated(x[i], 0.5) + negated(x[i], -0.0) + x[i] * (1e308 * 10))


def test_arithmetic_of_literals_alone_builds_without_double():
    """``x * (1 / 3)`` of a float32: ``1 / 3`` is one float literal of Python's value, weak, so
    no double is needed (it was computed in double and refused)."""
    f = np.zeros(4, np.float32)
    gen, _ = emit(literal_arithmetic, (f, f), 1, "tack_x")
    assert "double" not in gen.source and "--" not in gen.source, gen.source
    assert "(v_x * (-0.5f))" in gen.source and "(v_x * 0.0f)" in gen.source     # -(-0.0) is 0.0
    check_structure(gen.source, gen)


@tack.func
def truth_of(s):
    return 1 if s else 0


@tack.func
def to_int32(s):
    return tack.int32(s)


@tack.func
def to_uint32(s):
    return tack.uint32(s)


@tack.kernel
def literal_conversions(i, out):
    out[0] = truth_of(1e-50)
    out[1] = to_int32(16777217.0)
    out[2] = to_int32(1e300)
    out[3] = to_uint32(-5.5)
    out[4] = truth_of(0.0)
    out[5] = to_int32(-2.9)


def test_a_float_literal_converted_to_an_int_or_a_bool_is_its_exact_value():
    """A float literal given to a device function that makes an int or a bool of it is converted
    at compile time from its value, as the CPU converts the double (saturated, truncated), not
    from its float32 text: 16777217.0 is 16777217 and 1e-50 is true (they were 16777216 and
    false)."""
    i, out = np.zeros(1, np.int32), np.zeros(6, np.int64)
    tack.launch(literal_conversions, 1, (i, out))
    assert out.tolist() == [1, 16777217, 2**31 - 1, 0, 0, -2]
    gen, _ = emit(literal_conversions, (i, out), 1, "tack_x")
    returns = [line.strip() for line in gen.source.splitlines()
               if line.strip().startswith("return") and "{}" not in line and "tack_wrap" not in line]
    assert returns == ["return (true ? 1L : 0L);", "return 16777217;", "return 2147483647;",
                       "return 0u;", "return (false ? 1L : 0L);", "return (-2);"], returns


@tack.func
def over_sqrt(v, k):
    return v * (1 / math.sqrt(k))


@tack.kernel
def math_of_literals(x, out):
    i = tack.tid()
    out[i] = x[i] * math.sqrt(2.0) + x[i] / math.exp(1) + math.atan2(1.0, 3.0) + over_sqrt(x[i], 3.0)


def test_a_math_function_of_literals_alone_builds_without_double():
    """``math.sqrt(2.0)`` of literals alone is one float literal of Python's value, weak as a
    Python float is, so ``x * math.sqrt(2.0)`` of a float32 needs no double (it was computed in
    double and refused), nor ``v * (1 / math.sqrt(k))`` in a device function given ``k = 3.0``."""
    f = np.zeros(4, np.float32)
    gen, _ = emit(math_of_literals, (f, f), 1, "tack_m")
    assert "double" not in gen.source, gen.source


def test_what_metal_lacks_is_a_compile_error_naming_it():
    f = np.zeros(4, np.float32)
    assert "out[i] = math.erf(x[i])" in _refused(uses_erf, (f, f), 1, "math.erf (no MSL function)")
    kernel, args, grid = _contour_args(np.int64)[0]          # the contour as it ships: int64 counts
    msg = _refused(kernel, args, grid, "atomic_add on int64 (Metal has 32-bit atomics)",
                   filename="contour.py")
    assert "tack.atomic_add(counts, 0, 1)" in msg


def test_metal_runtime_off_macos_is_a_clear_error():
    if sys.platform == "darwin":
        pytest.skip("on macOS the runtime's availability depends on pyobjc")
    assert not metal_runtime.available() and metal_runtime.devices() == []
    assert "Metal needs macOS and pyobjc" in metal_runtime.unavailable_reason()
    for call in (lambda: metal_runtime.load(b"kernel void k() {}", {"entry": "k"}),
                 lambda: metal_runtime.launch(None, {}, (), (1,)),
                 lambda: metal_runtime.to_device(np.zeros(3))):
        with pytest.raises(metal_runtime.MetalUnavailable, match="Metal needs macOS and pyobjc"):
            call()
    assert issubclass(metal_runtime.MetalUnavailable, RuntimeError)


def test_xcrun_metal_is_not_here():
    """Recorded, not hidden: the MSL is compiled by Metal only on macOS (not in this test run)."""
    if shutil.which("xcrun"):
        pytest.skip("xcrun is here: compile the golden files with `xcrun metal -fno-fast-math -c`")
    assert shutil.which("xcrun") is None




def test_a_kernel_past_metals_31_buffers_is_refused_at_its_def(tmp_path):
    """Each array takes a buffer of its own, then the params struct one (and the debug record
    one): 31 arrays emitted [[buffer(31)]] and up, which only a Mac's Metal compiler would
    reject.  30 arrays (29 in debug mode) build; one more is a CompileError at the def line."""
    import tack.aot
    for n, debug in ((30, False), (29, True)):
        kernel, _ = kernel_of_arrays(n, tmp_path, use_all=True)
        args = tuple(np.zeros(4, np.float32) for _ in range(n))
        art = tack.aot.compile(kernel, "metal:apple", args, debug=debug)
        used = [int(b) for b in re.findall(r"\[\[buffer\((\d+)\)\]\]", art.payload.decode())]
        assert max(used) == 30, max(used)
    for n, debug, most in ((31, False, 30), (30, True, 29)):
        kernel, path = kernel_of_arrays(n, tmp_path, use_all=True)
        args = tuple(np.zeros(4, np.float32) for _ in range(n))
        with pytest.raises(tack.CompileError) as e:
            tack.aot.compile(kernel, "metal:apple", args, debug=debug)
        msg = str(e.value)
        assert f"{n} array arguments: Metal binds at most 31 buffers" in msg, msg
        assert f"at most {most} arrays" in msg and f'File "{path}", line 3' in msg, msg


@tack.func
def bumped(seen, i, v):
    seen[i] = seen[i] + 1
    return v


@tack.kernel
def numpy_scalars(x, lo, hi, n, out, iout, flags, seen):
    i = tack.tid()
    out[i, 0] = np.clip(x[i], lo[i], hi[i])
    out[i, 1] = np.clip(x[i], lo[i], None)
    out[i, 2] = np.sign(x[i])
    out[i, 3] = np.where(x[i] > lo[i], x[i], hi[i])
    out[i, 4] = np.rint(x[i])
    out[i, 5] = np.round(x[i], 2)
    out[i, 6] = np.around(x[i], -1)
    iout[i, 0] = round(x[i])
    iout[i, 1] = np.clip(n[i], -3, 5)
    iout[i, 2] = np.sign(n[i])
    iout[i, 3] = np.where(n[i] > 0, bumped(seen, i, n[i]), bumped(seen, i, -n[i]))
    iout[i, 4] = np.round(n[i], 1) + round(n[i])
    iout[i, 5] = np.clip(n[i], 0, 2**40) * 2            # a bound that never binds: int32, wraps
    iout[i, 6] = np.clip(n[i], -2**40, 3)
    flags[i, 0] = math.isclose(x[i], lo[i])
    flags[i, 1] = math.isclose(x[i], lo[i], rel_tol=0.25, abs_tol=0.5)


def test_numpy_clip_sign_where_rounding_and_isclose_run_like_the_cpu(tmp_path):
    """``np.clip``, ``np.sign``, ``np.where``, ``np.rint``, ``np.round``, ``round`` and
    ``math.isclose`` in the emitted MSL (helpers, ``metal::rint``) give the CPU's results bit for
    bit on float32 edge values (NaNs, infinities, signed zeros, halves), and ``np.where``
    evaluates both sides there too."""
    x = np.array([np.nan, -np.inf, -2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 2.675, 1e30, np.inf,
                  3.0, 1.0000001], np.float32)
    lo = np.resize(np.array([0.0, np.nan, -1.0, -0.0, 2.5, 1.0], np.float32), x.size)
    hi = np.resize(np.array([1.0, 2.0, np.nan, 0.0, 0.25], np.float32), x.size)
    n = np.resize(np.array([-7, -1, 0, 3, 15, 2**31 - 1], np.int32), x.size)
    outs = {}
    for where in ("shim", "cpu"):
        out, iout = np.zeros((x.size, 7), np.float32), np.zeros((x.size, 7), np.int64)
        flags, seen = np.zeros((x.size, 2), bool), np.zeros(x.size, np.int32)
        args = (x, lo, hi, n, out, iout, flags, seen)
        if where == "shim":
            run_shim(numpy_scalars, args, (x.size,), tmp_path)
        else:
            tack.launch(numpy_scalars, dim=x.size, args=args)
        outs[where] = (out.view(np.uint32), iout, flags, seen)
    for got, want in zip(outs["shim"], outs["cpu"]):
        np.testing.assert_array_equal(got, want)
    assert (outs["shim"][3] == 2).all()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(outs["shim"][1][:, 5:], np.stack(
            [np.clip(n, 0, 2**40) * np.int32(2), np.clip(n, -2**40, 3)], axis=1))
