"""``tack.launch(..., device="metal")``: the Metal runtime (tack/backends/metal_runtime.py) driving
pyobjc's Metal, with Metal simulated at that boundary only (tests/backends/fake_metal.py).

Nothing here runs Metal itself (macOS only).  What is real: Tack's compile path to MSL, the
cache, the runtime's checks, staging, params packing and dispatch, and the emitted MSL, which
the simulated Metal compiles with g++ against the host shim and runs thread by thread on the
CPU.  Results are compared with Tack's CPU backend."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

import tack
from tack.backends import metal_runtime as mr

from . import fake_metal

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                                reason="needs g++ or clang++: the simulated Metal compiles MSL "
                                       "against the host shim")


@pytest.fixture
def metal(monkeypatch):
    """A simulated Metal with one device, seen by the runtime as pyobjc's ``Metal`` module."""
    fake = fake_metal.FakeMetal()
    mr.reset()
    monkeypatch.setattr(mr, "_metal", lambda: fake)
    _forget_variants()
    yield fake
    _forget_variants()                      # they hold this test's simulated device
    mr.reset()


def _forget_variants():
    for value in list(globals().values()):
        if isinstance(value, tack.api.Kernel):
            value._variants.clear()


@tack.kernel
def saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


@tack.kernel
def scale2d(src, dst, k):
    i, j = tack.tid()
    dst[i, j] = src[i, j] * k + tack.float32(i - j)


@tack.kernel
def count_positive(x, counts, flag):
    i = tack.tid()
    if x[i] > 0:
        tack.atomic_add(counts, 0, 1)
    flag[i] = x[i] != x[i]


@tack.kernel
def shifted(x, out):
    i = tack.tid()
    out[i] = x[i + 1]


@tack.kernel
def uses_erf(x, out):
    i = tack.tid()
    out[i] = math.erf(x[i])


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_the_language_suite_on_metal(metal):
    """Every test of tests/test_language.py (each parameter set) with its launches on
    device='metal': those Metal can compile pass (the suite compares each result with NumPy);
    the rest are refused at compile time, each with a CompileError naming what Metal lacks and
    metal:apple, never a wrong result or a crash."""
    from .gpu_tools import language_suite_on
    ran, failed, refused = language_suite_on("metal")
    assert failed == {}, failed
    reasons = ("float64 (Metal has no double precision)", "(Metal has 32-bit atomics)",
               "(Metal's float atomics add only)", "(no MSL function)")
    odd = {k: v for k, v in refused.items()
           if "is not supported on metal:apple" not in v or not any(r in v for r in reasons)}
    assert odd == {}, odd
    assert ran >= 70 and ran - len(refused) >= 20 and len(metal.devices[0].libraries) >= 20


def test_devices_and_targets(metal):
    assert mr.available() and mr.unavailable_reason() is None
    assert mr.devices() == [("Apple M2 (simulated)", "metal:0")]
    listed = [d for d in tack.devices() if d.device.startswith("metal")]
    assert [(d.name, d.device, d.target) for d in listed] == [
        ("Apple M2 (simulated)", "metal:0", "metal:apple")]
    with pytest.raises(ValueError, match=r"no Metal device metal:2; this machine has "
                                         r"metal:0 \(Apple M2 \(simulated\)\)"):
        mr.get_device("metal:2")


def test_a_launch_compiles_msl_and_runs_it_like_the_cpu(metal):
    x, y = f32(1000), f32(1000, seed=1)
    out, ref = np.zeros(1000, np.float32), np.zeros(1000, np.float32)
    tack.launch(saxpy, 1000, (np.float32(2.5), x, y, out), device="metal")
    tack.launch(saxpy, 1000, (np.float32(2.5), x, y, ref))
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    (library,) = metal.devices[0].libraries
    assert b"kernel void" in library.source.encode() and "double" not in library.source
    opts = library.options                  # fast math off (macOS 15: safe math), MSL 3.0
    assert opts.math_mode == mr.MATH_MODE_SAFE and opts.language_version == 3 << 16
    # whole threadgroups of 256 over the 1000 points; the kernel returns past n0
    assert metal.devices[0].dispatched[-1] == ((4, 1, 1), (256, 1, 1))


def test_older_macos_gets_fast_math_disabled(metal, monkeypatch):
    monkeypatch.setattr(fake_metal.FakeMetal, "MTLCompileOptions", fake_metal.CompileOptions)
    opts = mr.compile_options(metal)
    assert opts.fast_math is False and opts.language_version == 3 << 16


def test_2d_f_ordered_and_strided_arrays_and_scalars(metal):
    src = np.asfortranarray(f32(13, 9))
    dst = np.zeros((13, 9), np.float32)
    tack.launch(scale2d, (13, 9), (src, dst, np.float32(0.5)), device="metal")
    i, j = np.indices((13, 9))
    np.testing.assert_allclose(dst, src * 0.5 + i - j, rtol=1e-6)
    base = f32(26, 18, seed=3)
    wide = np.zeros((26, 27), np.float32)
    strided_src, strided_dst = base[::2, ::2], wide[::2, ::3]
    tack.launch(scale2d, (13, 9), (strided_src, strided_dst, np.float32(-1.0)), device="metal")
    np.testing.assert_allclose(strided_dst, -strided_src + i - j, rtol=1e-6)
    assert not wide[1::2].any()                     # only the strided view's elements written


def test_device_arrays_stay_on_the_device_across_launches(metal):
    x = f32(500)
    dx = tack.to_device(x, "metal")
    dout = tack.to_device(np.zeros(500, np.float32), "metal")
    assert isinstance(dx, mr.MetalArray) and dx.shape == (500,) and dx.layout == "C"
    made = metal.devices[0].buffers
    tack.launch(saxpy, 500, (np.float32(2.0), dx, dx, dout), device="metal")
    tack.launch(saxpy, 500, (np.float32(1.0), dout, dx, dout), device="metal")
    assert metal.devices[0].buffers == made         # no copies: no buffers made per launch
    np.testing.assert_allclose(dout.numpy(), 4 * x, rtol=1e-6)
    f = tack.to_device(np.asfortranarray(f32(4, 3)), "metal")
    assert f.layout == "F" and f.contiguity() == (False, True)


def test_an_array_passed_twice_is_one_buffer(metal):
    x = f32(64)
    made = metal.devices[0].buffers
    tack.launch(saxpy, 64, (np.float32(3.0), x, x, x), device="metal")
    np.testing.assert_allclose(x, 4 * f32(64), rtol=1e-6)
    assert metal.devices[0].buffers == made + 1


def test_atomics_bool_arrays_and_int32(metal):
    x = f32(300)
    x[7] = np.nan
    counts = np.zeros(1, np.int32)
    flag = np.zeros(300, bool)
    tack.launch(count_positive, 300, (x, counts, flag), device="metal")
    assert counts[0] == int((x > 0).sum()) and flag.tolist() == np.isnan(x).tolist()


def test_debug_mode_reads_the_error_record(metal):
    tack.config.debug = True
    x, out = f32(8), np.zeros(8, np.float32)
    with pytest.raises(IndexError, match=r"index 8 is out of bounds for axis 0 of 'x' with size 8"):
        tack.launch(shifted, 8, (x, out), device="metal")
    tack.launch(shifted, 7, (x, out), device="metal")
    np.testing.assert_array_equal(out[:7], x[1:])


def test_block_sets_the_threadgroup(metal):
    x, y, out = f32(100), f32(100, seed=2), np.zeros(100, np.float32)
    tack.launch(saxpy, 100, (np.float32(1.0), x, y, out), device="metal", block=32)
    assert metal.devices[0].dispatched[-1] == ((4, 1, 1), (32, 1, 1))
    dst = np.zeros((13, 9), np.float32)
    tack.launch(scale2d, (13, 9), (f32(13, 9), dst, np.float32(1.0)), device="metal", block=(4, 2))
    # the block in the grid's order, dispatched in the hardware's: the last dimension (9 in
    # blocks of 2) on x, where threads are consecutive; the first (13 in blocks of 4) on y
    assert metal.devices[0].dispatched[-1] == ((5, 4, 1), (2, 4, 1))
    with pytest.raises(ValueError, match=r"block \(2048,\) is larger than kernel 'saxpy' on "
                                         r"Apple M2 \(simulated\) allows \(1024 work-items"):
        tack.launch(saxpy, 100, (np.float32(1.0), x, y, out), device="metal", block=(2048,))
    np.testing.assert_allclose(out, x + y, rtol=1e-6)


def test_wrong_arguments_are_clear_errors(metal):
    x, out = f32(10), np.zeros(10, np.float32)
    meta, source = _source_of(saxpy, (np.float32(1), x, x, out))
    k = mr.load(source, meta)
    e = k.entry
    with pytest.raises(TypeError, match=rf"kernel '{e}': argument 0 is a float32 scalar, not an array"):
        mr.launch(k, meta, (x, x, x, out), (10,))
    with pytest.raises(TypeError, match=rf"kernel '{e}': argument 1 is float64\[1-d\]; the kernel "
                                        r"takes array:float32:1:C:w"):
        mr.launch(k, meta, (np.float32(1), np.zeros(10), x, out), (10,))
    ro = tack.to_device(np.zeros(10, np.float32), "metal")
    ro.writable = False
    with pytest.raises(TypeError, match=r"argument 3: the kernel writes it but the device array "
                                        "is read-only"):
        mr.launch(k, meta, (np.float32(1), x, x, ro), (10,))
    with pytest.raises(TypeError, match=r"takes 4 value arguments, got 3"):
        mr.launch(k, meta, (np.float32(1), x, x), (10,))
    from tests.dlpack_producer import Producer
    with pytest.raises(TypeError, match=r"argument 1 is another library's array \(Producer\): "
                                        r"Tack's Metal runtime .* DLPack \(kDLMetal\)"):
        mr.launch(k, meta, (np.float32(1), Producer(x.ctypes.data, (10,), np.float32, device=(8, 0)),
                            x, out), (10,))
    with pytest.raises(TypeError, match="launch takes a MetalKernel"):
        mr.launch(None, meta, (), (1,))
    other = fake_metal.Device("Apple M3 (simulated)")
    metal.devices.append(other)
    mr.reset()
    elsewhere = tack.to_device(np.zeros(10, np.float32), "metal:1")
    with pytest.raises(ValueError, match=r"argument 3 lives on device 1 \(Apple M3 \(simulated\)\), the "
                                         r"kernel on device 0 \(Apple M2 \(simulated\)\)"):
        mr.launch(k, meta, (np.float32(1), x, x, elsewhere), (10,))


def test_a_stored_variant_is_loaded_not_recompiled(metal):
    import tack.cache
    x, y = f32(50), f32(50, seed=4)
    out = np.zeros(50, np.float32)
    tack.launch(saxpy, 50, (np.float32(1.5), x, y, out), device="metal")
    saxpy._variants.clear()
    saxpy._lowered.clear()
    before = tack.cache.stats()["hits"]["variant"]
    out2 = np.zeros(50, np.float32)
    tack.launch(saxpy, 50, (np.float32(1.5), x, y, out2), device="metal")
    assert tack.cache.stats()["hits"]["variant"] == before + 1
    assert "codegen" not in saxpy.timings and len(metal.devices[0].libraries) == 2
    np.testing.assert_array_equal(out, out2)


def test_msl_that_metal_refuses_is_a_metal_error(metal):
    meta = {"entry": "tack_k", "argspec": [["array:float32:1:C:w"]]}
    with pytest.raises(mr.MetalError, match="has no kernel 'tack_k'"):
        mr.load(b"kernel void other() {}", meta)
    with pytest.raises(mr.MetalError, match="not UTF-8"):
        mr.load(b"\xff\xfe kernel", meta)
    good = _source_of(saxpy, (np.float32(1), f32(4), f32(4), np.zeros(4, np.float32)))
    meta, source = good
    with pytest.raises(mr.MetalError, match=r"does not take what its metadata .* says"):
        mr.load(source, dict(meta, argspec=[["float32"], ["array:float32:1:C:w"]]))
    broken = source.replace(b"tack_p.n0", b"tack_p.no_such_member", 1)
    with pytest.raises(mr.MetalError, match=r"does not compile on Apple M2 \(simulated\): "
                                            r"Compilation failed"):
        mr.load(broken, meta)
    k = mr.load(source, meta)
    assert k.debug is False and k.max_group == 1024
    with pytest.raises(mr.MetalError, match="compiled without debug mode but a debug launch"):
        mr.launch(k, meta, (np.float32(1), f32(4), f32(4), np.zeros(4, np.float32)), (4,), debug=True)


def _source_of(kernel, args):
    """(meta, MSL source) of ``kernel``'s variant for ``args``, through a launch."""
    kernel._variants.clear()
    tack.launch(kernel, len(args[-1]), args, device="metal")
    (variant,) = kernel._variants.values()
    return variant.meta, variant.kernel.source.encode()


def test_a_failed_command_buffer_is_a_metal_error(metal, monkeypatch):
    x = f32(16)
    tack.launch(saxpy, 16, (np.float32(1), x, x, np.zeros(16, np.float32)), device="metal")
    metal.devices[0].pipeline_max = 8       # Metal's limit for the pipeline shrinks ...
    (variant,) = [v for v in saxpy._variants.values()]
    variant.kernel.max_group = 64           # ... but the runtime read 64
    with pytest.raises(mr.MetalError, match=r"launch of kernel 'saxpy' over \(16,\) failed on "
                                            r"Apple M2 \(simulated\): threadsPerThreadgroup 16 > 8"):
        tack.launch(saxpy, 16, (np.float32(1), x, x, np.zeros(16, np.float32)), device="metal")


def test_a_damaged_cache_entry_is_compiled_again(metal, tmp_path, monkeypatch):
    """A stored MSL variant that does not load (damaged, foreign) is left unused, and the kernel
    is compiled; the result is right."""
    import tack.cache
    from tack.cache.entry import KIND_VARIANT, decode, encode
    monkeypatch.setenv("TACK_CACHE_DIR", str(tmp_path / "cache"))
    tack.cache._reset_for_tests()
    x, y = f32(20), f32(20, seed=5)
    out = np.zeros(20, np.float32)
    tack.launch(saxpy, 20, (np.float32(2), x, y, out), device="metal")
    (path,) = [p for p in (tmp_path / "cache").rglob("*.tvar")
               if decode(p.read_bytes(), KIND_VARIANT)[1]["backend"] == "metal"]
    key, meta, payload = decode(path.read_bytes(), KIND_VARIANT)
    path.write_bytes(encode(KIND_VARIANT, key, meta, payload.replace(b"kernel void", b"kernel int")))
    saxpy._variants.clear()
    saxpy._lowered.clear()
    out2 = np.zeros(20, np.float32)
    tack.launch(saxpy, 20, (np.float32(2), x, y, out2), device="metal")
    np.testing.assert_array_equal(out, out2)
    assert "codegen" in saxpy.timings               # compiled again
    tack.cache._reset_for_tests()


def test_what_metal_lacks_is_a_compile_error_at_the_users_line(metal):
    with pytest.raises(tack.CompileError, match=r"erf.*metal:apple"):
        tack.launch(uses_erf, 4, (f32(4), np.zeros(4, np.float32)), device="metal")
    with pytest.raises(tack.CompileError, match="float64"):
        tack.launch(saxpy, 4, (2.0, np.zeros(4), np.zeros(4), np.zeros(4)), device="metal")


def test_no_device_on_this_mac_is_the_documented_error(monkeypatch):
    mr.reset()
    monkeypatch.setattr(mr, "_metal", lambda: fake_metal.FakeMetal(devices=[]))
    try:
        assert not mr.available() and "this Mac reports no Metal device" in mr.unavailable_reason()
        with pytest.raises(mr.MetalUnavailable, match="Metal needs macOS and pyobjc"):
            tack.launch(saxpy, 4, (np.float32(1), f32(4), f32(4), f32(4)), device="metal")
    finally:
        mr.reset()


def test_a_broken_binding_is_the_documented_error(monkeypatch):
    def broken():
        raise ImportError("No module named 'Metal'")
    mr.reset()
    monkeypatch.setattr(mr, "_metal", broken)
    try:
        assert mr.unavailable_reason() == ("Metal needs macOS and pyobjc (pip install "
                                           "pyobjc-framework-Metal); import Metal failed "
                                           "(ImportError: No module named 'Metal')")
        with pytest.raises(mr.MetalUnavailable, match="import Metal failed"):
            tack.to_device(np.zeros(3), "metal")
    finally:
        mr.reset()


def test_the_contour_runs_on_metal_with_the_cpus_triangles(metal):
    """The shipped contour end to end on the simulated Metal (float32 arithmetic, int32 counters):
    the CPU backend's triangle and vertex counts and the same surface, for the demo's fields,
    one of them not cubic."""
    from tack.demo import make_field
    from tack.kernels import contour as mc
    from .test_opencl_launch import triangles
    for k in (mc.classify, mc.emit):
        k._variants.clear()
    try:
        for kind, shape in (("sphere", 21), ("waves", 21), ("torus", (17, 23, 30))):
            field = make_field(kind, shape) if isinstance(shape, int) else \
                np.ascontiguousarray(make_field(kind, 30)[:17, :23, :30])
            v_cpu, f_cpu = mc.contour(field, 0.5)
            v_mt, f_mt = mc.contour(field, 0.5, device="metal")
            assert (len(v_mt), len(f_mt)) == (len(v_cpu), len(f_cpu)) and len(f_cpu) > 0, kind
            np.testing.assert_allclose(triangles(v_mt, f_mt), triangles(v_cpu, f_cpu), atol=1e-5)
        sources = [lib.source for lib in metal.devices[0].libraries]
        assert len(sources) == 2 and not any("double" in s for s in sources)
    finally:
        for k in (mc.classify, mc.emit):
            k._variants.clear()
