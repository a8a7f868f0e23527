"""The OpenCL runtime side (tack/backends/opencl_runtime.py) on a real OpenCL device.

Tack's SPIR-V generator is not here yet, so the kernels are LLVM IR written by
hand to the kernel ABI (docs/opencl.md), compiled to SPIR-V with llvmlite's
SPIR-V target and validated with spirv-val before they run; results are
compared with NumPy.  The device is Intel's OpenCL CPU runtime, installed by
ci/install-opencl.sh.  Where it (or spirv-val) is missing these tests skip,
saying what to install; with TACK_REQUIRE_OPENCL=1 (CI, after the install
script) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tack.backends import opencl_runtime as ocl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIRED = os.environ.get("TACK_REQUIRE_OPENCL") == "1"
SUBPROCESS_TIMEOUT = 120


def _missing(reason):
    if REQUIRED:
        pytest.fail(f"TACK_REQUIRE_OPENCL=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def device():
    if not ocl.available():
        _missing(f"no OpenCL device that takes SPIR-V: {ocl.unavailable_reason()}")
    return ocl.get_device()


# ---------------------------------------------------------------------------
# Hand-written kernels, one per ABI feature.  Parameters: per array its pointer,
# extents (unless static), strides in elements (layout A only); scalars; n0 n1 n2;
# the error record in debug mode.

HEADER = """\
target triple = "spirv64v1.2-unknown-unknown"
declare spir_func i64 @_Z13get_global_idj(i32)
"""

KERNELS = {
    # y[i] = a * x[i] + y[i]
    "saxpy": (["array:float32:1:C:r", "array:float32:1:C:w", "float32"], """
define spir_kernel void @saxpy(ptr addrspace(1) %x, i64 %xe0, ptr addrspace(1) %y, i64 %ye0,
                               float %a, i64 %n0, i64 %n1, i64 %n2) {
entry:
  %i = call spir_func i64 @_Z13get_global_idj(i32 0)
  %in = icmp slt i64 %i, %n0
  br i1 %in, label %body, label %exit
body:
  %px = getelementptr float, ptr addrspace(1) %x, i64 %i
  %py = getelementptr float, ptr addrspace(1) %y, i64 %i
  %vx = load float, ptr addrspace(1) %px
  %vy = load float, ptr addrspace(1) %py
  %m = fmul float %a, %vx
  %s = fadd float %m, %vy
  store float %s, ptr addrspace(1) %py
  br label %exit
exit:
  ret void
}
"""),
    # y[i, j] = a * x[i, j] + y[i, j]: x F-contiguous (read), y strided (written), a float64
    "axpy2d": (["array:float64:2:F:r", "array:float64:2:A:w", "float64"], """
define spir_kernel void @axpy2d(ptr addrspace(1) %x, i64 %xe0, i64 %xe1,
                                ptr addrspace(1) %y, i64 %ye0, i64 %ye1, i64 %ys0, i64 %ys1,
                                double %a, i64 %n0, i64 %n1, i64 %n2) {
entry:
  %i = call spir_func i64 @_Z13get_global_idj(i32 1)
  %j = call spir_func i64 @_Z13get_global_idj(i32 0)
  %in0 = icmp slt i64 %i, %n0
  %in1 = icmp slt i64 %j, %n1
  %in = and i1 %in0, %in1
  br i1 %in, label %body, label %exit
body:
  %xc = mul i64 %j, %xe0
  %xo = add i64 %xc, %i
  %yr = mul i64 %i, %ys0
  %yc = mul i64 %j, %ys1
  %yo = add i64 %yr, %yc
  %px = getelementptr double, ptr addrspace(1) %x, i64 %xo
  %py = getelementptr double, ptr addrspace(1) %y, i64 %yo
  %vx = load double, ptr addrspace(1) %px
  %vy = load double, ptr addrspace(1) %py
  %m = fmul double %a, %vx
  %s = fadd double %m, %vy
  store double %s, ptr addrspace(1) %py
  br label %exit
exit:
  ret void
}
"""),
    # out[i] = (flag ? i * k : -i) + off + m: bool (i8), uint32, int32 and uint64 scalars
    "scalars": (["array:int64:1:C:w", "bool", "uint32", "int32", "uint64"], """
define spir_kernel void @scalars(ptr addrspace(1) %out, i64 %oe0, i8 %flag, i32 %k, i32 %off,
                                 i64 %m, i64 %n0, i64 %n1, i64 %n2) {
entry:
  %i = call spir_func i64 @_Z13get_global_idj(i32 0)
  %in = icmp slt i64 %i, %n0
  br i1 %in, label %body, label %exit
body:
  %f = icmp ne i8 %flag, 0
  %k64 = zext i32 %k to i64
  %off64 = sext i32 %off to i64
  %t = mul i64 %i, %k64
  %u = sub i64 0, %i
  %v = select i1 %f, i64 %t, i64 %u
  %w = add i64 %v, %off64
  %r = add i64 %w, %m
  %p = getelementptr i64, ptr addrspace(1) %out, i64 %i
  store i64 %r, ptr addrspace(1) %p
  br label %exit
exit:
  ret void
}
"""),
    # bins[vals[i]] += 1 atomically; total[0] += vals[i] atomically (64-bit)
    "hist": (["array:int32:1:C:r", "array:int32:1:C:w", "array:int64:1:C:w"], """
define spir_kernel void @hist(ptr addrspace(1) %vals, i64 %ve0, ptr addrspace(1) %bins, i64 %be0,
                              ptr addrspace(1) %total, i64 %te0, i64 %n0, i64 %n1, i64 %n2) {
entry:
  %i = call spir_func i64 @_Z13get_global_idj(i32 0)
  %in = icmp slt i64 %i, %n0
  br i1 %in, label %body, label %exit
body:
  %pv = getelementptr i32, ptr addrspace(1) %vals, i64 %i
  %v = load i32, ptr addrspace(1) %pv
  %b = sext i32 %v to i64
  %pb = getelementptr i32, ptr addrspace(1) %bins, i64 %b
  %old = atomicrmw add ptr addrspace(1) %pb, i32 1 monotonic
  %old64 = atomicrmw add ptr addrspace(1) %total, i64 %b monotonic
  br label %exit
exit:
  ret void
}
"""),
    # t32[0] += x[i], t64[0] += y[i] atomically (OpAtomicFAddEXT: SPV_EXT_shader_atomic_float_add)
    "fsum": (["array:float32:1:C:r", "array:float32:1:C:w", "array:float64:1:C:r",
              "array:float64:1:C:w"], """
define spir_kernel void @fsum(ptr addrspace(1) %x, i64 %xe0, ptr addrspace(1) %t32, i64 %t32e0,
                              ptr addrspace(1) %y, i64 %ye0, ptr addrspace(1) %t64, i64 %t64e0,
                              i64 %n0, i64 %n1, i64 %n2) {
entry:
  %i = call spir_func i64 @_Z13get_global_idj(i32 0)
  %in = icmp slt i64 %i, %n0
  br i1 %in, label %body, label %exit
body:
  %px = getelementptr float, ptr addrspace(1) %x, i64 %i
  %vx = load float, ptr addrspace(1) %px
  %o32 = atomicrmw fadd ptr addrspace(1) %t32, float %vx monotonic
  %py = getelementptr double, ptr addrspace(1) %y, i64 %i
  %vy = load double, ptr addrspace(1) %py
  %o64 = atomicrmw fadd ptr addrspace(1) %t64, double %vy monotonic
  br label %exit
exit:
  ret void
}
"""),
    # out[i, j, k] = i * 10000 + j * 100 + k over a 3-D grid; shape 4x5x6 compiled in (no extents)
    "iota3": (["array:int64:3:C:w:4x5x6"], """
define spir_kernel void @iota3(ptr addrspace(1) %out, i64 %n0, i64 %n1, i64 %n2) {
entry:
  %i = call spir_func i64 @_Z13get_global_idj(i32 2)
  %j = call spir_func i64 @_Z13get_global_idj(i32 1)
  %k = call spir_func i64 @_Z13get_global_idj(i32 0)
  %in0 = icmp slt i64 %i, %n0
  %in1 = icmp slt i64 %j, %n1
  %in2 = icmp slt i64 %k, %n2
  %in01 = and i1 %in0, %in1
  %in = and i1 %in01, %in2
  br i1 %in, label %body, label %exit
body:
  %r = mul i64 %i, 5
  %rj = add i64 %r, %j
  %rk = mul i64 %rj, 6
  %o = add i64 %rk, %k
  %a = mul i64 %i, 10000
  %b = mul i64 %j, 100
  %ab = add i64 %a, %b
  %v = add i64 %ab, %k
  %p = getelementptr i64, ptr addrspace(1) %out, i64 %o
  store i64 %v, ptr addrspace(1) %p
  br label %exit
exit:
  ret void
}
"""),
    # debug mode: a[i + k] = 1, bounds-checked; an out-of-bounds index fills the error record
    # (site id + 1 = 1, axis 0, the index, the extent), first writer wins
    "checked": (["array:float32:1:C:w", "int64"], """
define spir_kernel void @checked(ptr addrspace(1) %a, i64 %ae0, i64 %k,
                                 i64 %n0, i64 %n1, i64 %n2, ptr addrspace(1) %err) {
entry:
  %i = call spir_func i64 @_Z13get_global_idj(i32 0)
  %in = icmp slt i64 %i, %n0
  br i1 %in, label %check, label %exit
check:
  %j = add i64 %i, %k
  %ok = icmp ult i64 %j, %ae0
  br i1 %ok, label %body, label %bad
body:
  %p = getelementptr float, ptr addrspace(1) %a, i64 %j
  store float 1.0, ptr addrspace(1) %p
  br label %exit
bad:
  %cx = cmpxchg ptr addrspace(1) %err, i64 0, i64 1 monotonic monotonic
  %first = extractvalue { i64, i1 } %cx, 1
  br i1 %first, label %record, label %exit
record:
  %e1 = getelementptr i64, ptr addrspace(1) %err, i64 1
  store i64 0, ptr addrspace(1) %e1
  %e2 = getelementptr i64, ptr addrspace(1) %err, i64 2
  store i64 %j, ptr addrspace(1) %e2
  %e3 = getelementptr i64, ptr addrspace(1) %err, i64 3
  store i64 %ae0, ptr addrspace(1) %e3
  br label %exit
exit:
  ret void
}
"""),
}


# Kernels with 64-bit atomics (the error record's compare-and-swap is one): their SPIR-V
# declares Int64Atomics, an OpenCL extension's capability (cl_khr_int64_base_atomics) that
# spirv-val's OpenCL 2.2 rules do not allow, so they are checked by the SPIR-V 1.2 rules and
# the device must list the extension.
# Float atomics need LLVM's SPIR-V extension switch (process-wide; without it LLVM aborts the
# process) and the device's cl_ext_float_atomics.
INT64_ATOMICS = {"hist", "checked", "fsum"}
SPIRV_EXTENSIONS = "--spirv-ext=+SPV_EXT_shader_atomic_float_add"


# One SPIR-V module per process: LLVM's SPIR-V backend keeps module state in a static
# (SPIRVModuleAnalysis::MAI, llvm/llvm-project#160613), so a second module emitted in the same
# process can come out with duplicate ids (seen here with LLVM 22: "Id 2 is defined more than
# once" in about one process in five).  spirv-val catches it; a subprocess per kernel avoids it.
_EMIT = """
import sys
import llvmlite.binding as llvm
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
llvm.set_option("", sys.argv[3])
with open(sys.argv[1]) as f:
    module = llvm.parse_assembly(f.read())
module.verify()
tm = llvm.Target.from_triple(sys.argv[4]).create_target_machine(opt=2)
with open(sys.argv[2], "wb") as f:
    f.write(tm.emit_object(module))
"""


def compile_spirv(ir_text: str, workdir, env="opencl2.2") -> bytes:
    """LLVM IR -> SPIR-V 1.2 with llvmlite's SPIR-V target (in a process of its own), checked by
    spirv-val (``env``'s rules)."""
    ll, spv = os.path.join(workdir, "kernel.ll"), os.path.join(workdir, "kernel.spv")
    with open(ll, "w") as f:
        f.write(ir_text)
    emit = subprocess.run([sys.executable, "-c", _EMIT, ll, spv, SPIRV_EXTENSIONS, ocl.SPIRV["triple"]],
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert emit.returncode == 0, f"llvmlite does not compile the kernel to SPIR-V: {emit.stderr}"
    val = subprocess.run(["spirv-val", "--target-env", env, spv], capture_output=True,
                         text=True, timeout=SUBPROCESS_TIMEOUT)
    assert val.returncode == 0, f"spirv-val rejects the SPIR-V: {val.stdout}{val.stderr}"
    with open(spv, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def spirv(tmp_path_factory):
    """{name: (SPIR-V bytes, meta)} for every kernel above, each validated."""
    if shutil.which("spirv-val") is None:
        _missing("spirv-val not found: run ci/install-opencl.sh (apt-get install spirv-tools)")
    out = {}
    for name, (specs, body) in KERNELS.items():
        meta = {"entry": name, "argspec": [[s] for s in specs]}
        env = "spv1.2" if name in INT64_ATOMICS else "opencl2.2"
        out[name] = (compile_spirv(HEADER + body, str(tmp_path_factory.mktemp(name)), env), meta)
    return out


@pytest.fixture(scope="module")
def kernels(device, spirv):
    assert "cl_khr_int64_base_atomics" in device.device.extensions.split(), \
        "the device has no 64-bit atomics, which the debug error record needs"
    assert "cl_ext_float_atomics" in device.device.extensions.split(), "the device has no float atomics"
    return {name: (ocl.load(binary, meta), meta) for name, (binary, meta) in spirv.items()}


# ---------------------------------------------------------------------------
# Devices and setup


def test_devices_list_the_intel_cpu_runtime(device):
    found = ocl.devices()
    assert found and found[0][1] == "opencl:0"
    assert all(key == f"opencl:{i}" for i, (_, key) in enumerate(found))
    assert any("Intel(R) OpenCL" in name for name, _ in found), found
    assert ocl.unavailable_reason() is None
    assert ocl.get_device("opencl") is ocl.get_device("opencl:0") is device


def test_device_names_that_do_not_exist_are_refused(device):
    with pytest.raises(ValueError, match="no OpenCL device opencl:99"):
        ocl.get_device("opencl:99")
    with pytest.raises(ValueError, match="not an OpenCL device name"):
        ocl.get_device("cuda:0")


def test_candidate_keys_the_devices_binary_then_spirv():
    """A device's keys: its driver's program binary (stored back after a SPIR-V build), then
    SPIR-V, whose key names no device; compiling makes SPIR-V (host_key); site bundles are
    looked up by the SPIR-V key alone."""
    dev = ocl.get_device()
    keys = ocl.candidate_keys()
    assert keys == [("opencl:0", ocl.device_key(dev)), ("spirv:generic", ocl.spirv_key())]
    assert ocl.lookup_keys() == tuple(k for _, k in keys)
    from tack.backends import level_zero
    assert level_zero.target("spirv:generic").key == ocl.spirv_key()   # one identity
    assert ocl.candidate_keys("opencl:0") == keys
    assert ocl.host_key() == ocl.spirv_key()
    assert ocl.site_candidates() == [("spirv:generic", ocl.spirv_key())]
    assert len(ocl.spirv_key()) == 64 and ocl.device_key(dev) != ocl.spirv_key()
    import types
    updated = types.SimpleNamespace(name=dev.name, driver=dev.driver + " (updated)", spirv=dev.spirv)
    assert ocl.device_key(updated) != ocl.device_key(dev)     # a driver update: another key
    assert dev.spirv == "spirv:generic"         # Intel's OpenCL CPU runtime does float64


def test_a_device_without_float64_runs_spirv_without_it(monkeypatch):
    """A device whose CL_DEVICE_DOUBLE_FP_CONFIG is 0 compiles for, and looks up,
    spirv:generic-fp32: a float64 kernel is refused at compile time naming float64, instead of
    SPIR-V with the Float64 capability that its driver would refuse."""
    real = ocl.get_device()

    class NoDouble:                 # the real device, saying what a device without float64 says
        def __getattr__(self, name):
            return 0 if name == "double_fp_config" else getattr(real.device, name)
    assert ocl._has_float64(real.device) and not ocl._has_float64(NoDouble())
    monkeypatch.setattr(ocl, "_has_float64", lambda device: False)
    monkeypatch.setattr(ocl, "_contexts", {})
    dev = ocl.get_device()
    assert dev.spirv == "spirv:generic-fp32"
    assert ocl.candidate_keys() == [("opencl:0", ocl.device_key(dev)),
                                    ("spirv:generic-fp32", ocl.spirv_key(dev))]
    assert ocl.spirv_key(dev) != ocl.spirv_key() and ocl.device_key(dev) != ocl.device_key(real)
    assert ocl.toolchain_target().has_float64 is False
    assert ocl.site_candidates() == [("spirv:generic-fp32", ocl.spirv_key(dev))]


def _run_python(code, env_changes, timeout=SUBPROCESS_TIMEOUT):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCL_ICD", "TACK_OPENCL"))}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def test_import_is_light():
    r = _run_python("""
        import sys
        import tack.backends.opencl_runtime as ocl
        assert "pyopencl" not in sys.modules, "pyopencl imported at module import"
        print("ok")
    """, {})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_setup_writes_its_own_icd_file_and_finds_the_device(device, tmp_path):
    """With OCL_ICD_VENDORS unset, the module finds libintelocl.so, writes the ICD file and uses it."""
    icd_dir = tmp_path / "vendors"
    r = _run_python("""
        import os
        import tack.backends.opencl_runtime as ocl
        print(ocl.devices())
        print(os.environ["OCL_ICD_VENDORS"])
    """, {"TACK_OPENCL_ICD_DIR": str(icd_dir)})
    assert r.returncode == 0, r.stderr
    devices_line, vendors = r.stdout.strip().splitlines()
    assert "opencl:0" in devices_line and "Intel(R) OpenCL" in devices_line
    assert vendors == str(icd_dir)
    lib = (icd_dir / ocl.ICD_FILE).read_text().strip()
    assert os.path.isabs(lib) and lib.endswith("libintelocl.so") and os.path.isfile(lib)


def test_missing_runtime_is_a_clear_error(tmp_path):
    """ICD files from an empty directory and no runtime library: no platform.  A clear error
    naming the packages, no crash, no hang."""
    empty = tmp_path / "no-vendors"
    empty.mkdir()
    r = _run_python("""
        import tack.backends.opencl_runtime as ocl
        assert not ocl.available()
        assert ocl.devices() == []
        print(ocl.unavailable_reason())
        try:
            ocl.load(b"\\x03\\x02\\x23\\x07" + bytes(20), {"entry": "k", "argspec": []})
        except ocl.OpenCLUnavailable as e:
            print("raised:", e)
        try:
            import numpy
            ocl.to_device(numpy.zeros(3))
        except ocl.OpenCLUnavailable as e:
            print("raised:", type(e).__name__)
    """, {"OCL_ICD_VENDORS": str(empty), "TACK_OPENCL_LIBRARY": str(tmp_path / "absent.so")})
    assert r.returncode == 0, r.stderr
    reason, raised, raised2 = r.stdout.strip().splitlines()
    assert "no device that takes SPIR-V" in reason and f"OCL_ICD_VENDORS={empty}" in reason
    assert "pip install intel-opencl-rt intel-cmplr-lib-rt pyopencl" in reason
    assert raised == "raised: " + reason
    assert raised2 == "raised: OpenCLUnavailable"


def test_runtime_hidden_by_the_users_icd_directory_is_named(device, tmp_path):
    """Runtime installed but OCL_ICD_VENDORS set (by the user) to a directory without it: the
    error says how to let Tack use it."""
    empty = tmp_path / "other-vendors"
    empty.mkdir()
    r = _run_python("""
        import tack.backends.opencl_runtime as ocl
        print(ocl.unavailable_reason())
    """, {"OCL_ICD_VENDORS": str(empty)})
    assert r.returncode == 0, r.stderr
    assert "Intel's runtime is installed: unset OCL_ICD_VENDORS" in r.stdout
    assert ocl.find_runtime_library() in r.stdout


def test_missing_pyopencl_is_a_clear_error():
    r = _run_python("""
        import sys
        sys.modules["pyopencl"] = None          # as if it were not installed
        import tack.backends.opencl_runtime as ocl
        assert not ocl.available()
        try:
            ocl.get_device()
        except ocl.OpenCLUnavailable as e:
            print(e)
    """, {})
    assert r.returncode == 0, r.stderr
    assert "pyopencl does not import" in r.stdout
    assert "pip install intel-opencl-rt intel-cmplr-lib-rt pyopencl" in r.stdout


def test_module_main_describes_the_setup(device):
    r = subprocess.run([sys.executable, "-m", "tack.backends.opencl_runtime"], capture_output=True,
                       text=True, timeout=SUBPROCESS_TIMEOUT,
                       env={**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stderr
    assert "device opencl:0:" in r.stdout and "runtime library:" in r.stdout


# ---------------------------------------------------------------------------
# Launches, compared with NumPy


def test_saxpy_float32(kernels):
    k, meta = kernels["saxpy"]
    rng = np.random.default_rng(1)
    for n in (1, 7, 128, 1000, 4099):
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        expect = np.float32(2.5) * x + y
        x_before = x.copy()
        assert ocl.launch(k, meta, (x, y, 2.5), (n,)) is None
        np.testing.assert_allclose(y, expect, rtol=1e-6)
        np.testing.assert_array_equal(x, x_before)


def test_read_only_input_arrays_are_taken(kernels):
    k, meta = kernels["saxpy"]
    x = np.arange(10, dtype=np.float32)
    x.flags.writeable = False
    y = np.ones(10, np.float32)
    ocl.launch(k, meta, (x, y, 3.0), (10,))
    np.testing.assert_array_equal(y, 3 * np.arange(10, dtype=np.float32) + 1)


def test_grid_smaller_than_arrays_touches_only_the_grid(kernels):
    k, meta = kernels["saxpy"]
    x = np.ones(100, np.float32)
    y = np.zeros(100, np.float32)
    ocl.launch(k, meta, (x, y, 1.0), (37,))
    assert (y[:37] == 1).all() and (y[37:] == 0).all()


@pytest.mark.parametrize("local_size", [None, 1, 8, (64,), (3,)])
def test_work_group_sizes_and_rounding(kernels, local_size):
    k, meta = kernels["saxpy"]
    n = 1001
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    ocl.launch(k, meta, (x, y, 1.0), (n,), block=local_size)
    np.testing.assert_array_equal(y, x)


def test_local_size_that_does_not_fit_is_refused(kernels):
    k, meta = kernels["saxpy"]
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="does not match the grid"):
        ocl.launch(k, meta, (x, x.copy(), 1.0), (4,), block=(2, 2))
    with pytest.raises(ValueError, match="larger than kernel 'saxpy' on .* allows"):
        ocl.launch(k, meta, (x, x.copy(), 1.0), (4,), block=(1 << 30,))


def test_2d_fortran_input_strided_output_float64_scalar(kernels):
    k, meta = kernels["axpy2d"]
    rng = np.random.default_rng(2)
    x = np.asfortranarray(rng.standard_normal((37, 23)))
    views = (lambda b: b[:74:2, 1:93:4], lambda b: b[::-1, ::-3][:37, :23], lambda b: b[3:40, 5:28])
    for view in views:
        big = rng.standard_normal((80, 100))
        before = big.copy()
        y = view(big)
        assert y.shape == (37, 23) and not (y.flags.c_contiguous or y.flags.f_contiguous)
        expect = -1.5 * x + y
        ocl.launch(k, meta, (x, y, -1.5), (37, 23))
        np.testing.assert_allclose(y, expect, rtol=1e-15)
        inside = np.zeros(big.shape, bool)
        view(inside)[...] = True
        np.testing.assert_array_equal(big[~inside], before[~inside])   # nothing else written


def test_c_contiguous_array_is_passed_with_strides_where_the_kernel_takes_any(kernels):
    k, meta = kernels["axpy2d"]
    x = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    y = np.ones((3, 4))                 # C: layout A takes it, with its own strides
    ocl.launch(k, meta, (x, y, 2.0), (3, 4))
    np.testing.assert_array_equal(y, 2 * np.arange(12.0).reshape(3, 4) + 1)


def test_scalar_types(kernels):
    k, meta = kernels["scalars"]
    n = 50
    i = np.arange(n, dtype=np.int64)
    out = np.zeros(n, np.int64)
    ocl.launch(k, meta, (out, True, 3, -7, 2**40), (n,))
    np.testing.assert_array_equal(out, i * 3 - 7 + 2**40)
    ocl.launch(k, meta, (out, False, 3, 5, 0), (n,))
    np.testing.assert_array_equal(out, -i + 5)
    ocl.launch(k, meta, (out, np.bool_(True), np.uint32(2**32 - 1), np.int32(-2**31), np.uint64(1)),
               (n,))
    np.testing.assert_array_equal(out, i * (2**32 - 1) - 2**31 + 1)


def test_scalar_that_does_not_fit_is_a_type_error(kernels):
    k, meta = kernels["scalars"]
    out = np.zeros(4, np.int64)
    with pytest.raises(TypeError, match=r"argument 2 = -1 does not fit uint32"):
        ocl.launch(k, meta, (out, True, -1, 0, 0), (4,))
    with pytest.raises(TypeError, match=r"argument 3 = 4294967296 does not fit int32"):
        ocl.launch(k, meta, (out, True, 1, 2**32, 0), (4,))
    with pytest.raises(TypeError, match=r"argument 2 = 2.5 does not fit uint32"):
        ocl.launch(k, meta, (out, True, 2.5, 0, 0), (4,))
    ocl.launch(k, meta, (out, 7, 2, 0, 0), (4,))        # a true value of any kind is 1
    np.testing.assert_array_equal(out, [0, 2, 4, 6])


def test_atomic_add_32_and_64_bit(kernels):
    k, meta = kernels["hist"]
    rng = np.random.default_rng(3)
    vals = rng.integers(0, 16, 100_000).astype(np.int32)
    bins = np.zeros(16, np.int32)
    total = np.zeros(1, np.int64)
    ocl.launch(k, meta, (vals, bins, total), (vals.size,))
    np.testing.assert_array_equal(bins, np.bincount(vals, minlength=16))
    assert total[0] == vals.astype(np.int64).sum()


def test_atomic_add_float32_and_float64(kernels):
    k, meta = kernels["fsum"]
    n = 50_000
    x = np.full(n, 0.5, np.float32)         # sums exact in any order
    y = np.arange(n, dtype=np.float64)
    t32 = np.zeros(1, np.float32)
    t64 = np.full(1, 10.0)
    ocl.launch(k, meta, (x, t32, y, t64), (n,))
    assert t32[0] == n * 0.5
    assert t64[0] == 10.0 + n * (n - 1) / 2


def test_3d_grid_with_static_shape(kernels):
    k, meta = kernels["iota3"]
    out = np.zeros((4, 5, 6), np.int64)
    ocl.launch(k, meta, (out,), (4, 5, 6))
    i, j, kk = np.indices((4, 5, 6))
    np.testing.assert_array_equal(out, i * 10000 + j * 100 + kk)
    with pytest.raises(TypeError, match=r"has shape \(4, 5, 7\); the kernel compiled in \(4, 5, 6\)"):
        ocl.launch(k, meta, (np.zeros((4, 5, 7), np.int64),), (4, 5, 6))


def test_debug_error_record(kernels):
    k, meta = kernels["checked"]
    n = 64
    a = np.zeros(n, np.float32)
    err = ocl.launch(k, meta, (a, 0), (n,), debug=True)
    assert err.dtype == np.int64 and err.tolist() == [0, 0, 0, 0]
    assert (a == 1).all()

    a = np.zeros(n, np.float32)
    err = ocl.launch(k, meta, (a, 3), (n,), debug=True)
    assert err[0] == 1 and err[1] == 0 and err[3] == n
    assert n <= err[2] < n + 3
    assert (a[3:] == 1).all() and (a[:3] == 0).all()

    a = np.zeros(n, np.float32)
    err = ocl.launch(k, meta, (a, -1), (n,), debug=True)     # index -1 wraps to 2**64 - 1
    assert err.tolist() == [1, 0, -1, n]


def test_debug_flag_must_match_the_kernel(kernels):
    k, meta = kernels["checked"]
    with pytest.raises(ocl.OpenCLError, match="compiled with debug mode"):
        ocl.launch(k, meta, (np.zeros(4, np.float32), 0), (4,), debug=False)
    k2, meta2 = kernels["saxpy"]
    with pytest.raises(ocl.OpenCLError, match="compiled with debug mode"):
        ocl.launch(k2, meta2, (np.zeros(4, np.float32), np.zeros(4, np.float32), 1.0), (4,), debug=True)


def test_empty_grid_and_empty_arrays(kernels):
    k, meta = kernels["saxpy"]
    x = np.zeros(0, np.float32)
    y = np.zeros(0, np.float32)
    assert ocl.launch(k, meta, (x, y, 1.0), (0,)) is None
    k, meta = kernels["checked"]
    err = ocl.launch(k, meta, (np.zeros(0, np.float32), 0), (0,), debug=True)
    assert err.tolist() == [0, 0, 0, 0]


def test_same_array_passed_twice_is_one_buffer(kernels):
    k, meta = kernels["saxpy"]
    y = np.arange(8, dtype=np.float32)
    ocl.launch(k, meta, (y, y, 1.0), (8,))      # y = y + y
    np.testing.assert_array_equal(y, 2 * np.arange(8, dtype=np.float32))


# ---------------------------------------------------------------------------
# Device arrays


def test_device_arrays_chain_launches_without_copies(kernels):
    k, meta = kernels["saxpy"]
    x = np.arange(1000, dtype=np.float32)
    dx = ocl.to_device(x)
    dy = ocl.to_device(np.zeros(1000, np.float32))
    for _ in range(3):
        ocl.launch(k, meta, (dx, dy, 2.0), (1000,))
    x[:] = -1                               # the device copy is its own
    np.testing.assert_array_equal(dy.numpy(), 6 * np.arange(1000, dtype=np.float32))
    np.testing.assert_array_equal(dx.numpy(), np.arange(1000, dtype=np.float32))
    assert dy.shape == (1000,) and dy.dtype == np.float32 and dy.layout == "C"


def test_device_arrays_keep_fortran_order(kernels):
    k, meta = kernels["axpy2d"]
    xf = np.asfortranarray(np.arange(20.0).reshape(4, 5))
    dx = ocl.to_device(xf)
    assert dx.layout == "F"
    dy = ocl.to_device(np.zeros((4, 5)))    # C, passed to a strided parameter with its strides
    ocl.launch(k, meta, (dx, dy, 1.0), (4, 5))
    ocl.launch(k, meta, (xf, dy, 1.0), (4, 5))        # host and device arguments mixed
    np.testing.assert_array_equal(dy.numpy(), 2 * np.arange(20.0).reshape(4, 5))
    np.testing.assert_array_equal(dx.numpy(), xf)
    assert dx.numpy().flags.f_contiguous


def test_device_array_layout_is_checked(kernels):
    k, meta = kernels["axpy2d"]
    dx = ocl.to_device(np.zeros((4, 5)))    # C, but the kernel takes x F-contiguous
    with pytest.raises(TypeError, match="not F-contiguous"):
        ocl.launch(k, meta, (dx, np.zeros((4, 5)), 1.0), (4, 5))


# ---------------------------------------------------------------------------
# Refusals: each a clear error


def test_argument_mismatches_are_type_errors(kernels):
    k, meta = kernels["saxpy"]
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"argument 0 is float64\[1-d\]; the kernel takes array:float32:1:C:r"):
        ocl.launch(k, meta, (np.zeros(4), x, 1.0), (4,))
    with pytest.raises(TypeError, match="takes 3 value arguments, got 2"):
        ocl.launch(k, meta, (x, x), (4,))
    with pytest.raises(TypeError, match="must be a NumPy array or an OpenCLArray"):
        ocl.launch(k, meta, ([0.0] * 4, x, 1.0), (4,))
    with pytest.raises(TypeError, match="not C-contiguous"):
        ocl.launch(k, meta, (np.zeros(8, np.float32)[::2], x, 1.0), (4,))
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="compiled for a writable array; this one is read-only"):
        ocl.launch(k, meta, (x, ro, 1.0), (4,))
    with pytest.raises(TypeError, match="is a float32 scalar, not an array"):
        ocl.launch(k, meta, (x, x, x), (4,))
    with pytest.raises(ValueError, match="dims must be 1 to 3 extents"):
        ocl.launch(k, meta, (x, x, 1.0), (1, 1, 1, 1))


def test_bad_programs_are_clear_errors(device, spirv):
    binary, meta = spirv["saxpy"]
    with pytest.raises(ocl.OpenCLError, match="not a SPIR-V binary"):
        ocl.load(b"\x7fELF" + bytes(60), meta)
    with pytest.raises(ocl.OpenCLError, match="not a whole number of words"):
        ocl.load(binary[:-2], meta)
    # A zero word count would make Intel's runtime spin forever in clBuildProgram.
    with pytest.raises(ocl.OpenCLError, match="word 5 has word count 0, zero"):
        ocl.load(binary[:20] + bytes(40), meta)
    with pytest.raises(ocl.OpenCLError, match=r"past the end"):
        ocl.load(binary[:20] + ((9 << 16) | 17).to_bytes(4, "little"), meta)
    with pytest.raises(ocl.OpenCLError, match="version word"):
        ocl.load(binary[:4] + b"\x00\x00\x09\x00" + binary[8:], meta)
    # Cut off after a whole instruction: Intel's runtime would crash the process on it.
    with pytest.raises(ocl.OpenCLError, match=r"cut off \(its last function has no end\)"):
        ocl.load(binary[:-8], meta)
    with pytest.raises(ocl.OpenCLError, match="no memory model or no entry point"):
        ocl.load(binary[:20] + ((2 << 16) | 17).to_bytes(4, "little") + bytes(4), meta)
    # Well-formed words that make no program: the runtime's own error, with its log.
    capability = ((2 << 16) | 17).to_bytes(4, "little") + b"\xff\xff\x00\x00"   # OpCapability 65535
    with pytest.raises(ocl.OpenCLError, match="does not build|does not take this SPIR-V"):
        ocl.load(binary[:20] + capability + binary[20:], meta)
    with pytest.raises(ocl.OpenCLError, match="has no kernel 'nope'"):
        ocl.load(binary, {**meta, "entry": "nope"})
    with pytest.raises(ocl.OpenCLError, match="takes 8 parameters; its metadata"):
        ocl.load(binary, {**meta, "argspec": [["array:float32:1:C:r"], ["float32"]]})
    with pytest.raises(ocl.OpenCLError, match="no usable argspec"):
        ocl.load(binary, {**meta, "argspec": [["array:complex:1:C:r"]]})
    with pytest.raises(ocl.OpenCLError, match="names no entry point"):
        ocl.load(binary, {"argspec": meta["argspec"]})


def test_out_of_memory_is_no_fault_of_the_program(device, spirv):
    """An OpenCL error saying memory or resources ran out (pyopencl's own MemoryError, its code
    CL_OUT_OF_HOST_MEMORY) marks the load's OpenCLError ``resource`` (errors.no_room: a launch
    keeps the cache entry it was loading); a program the runtime refuses is the program's fault."""
    from tack.errors import no_room
    cl = device.cl
    binary, meta = next(iter(spirv.values()))
    oom = cl.MemoryError(cl._cl._ErrorRecord("clBuildProgram", -6, "out of host memory"))
    assert no_room(ocl.OpenCLError("does not build", oom))
    with pytest.raises(ocl.OpenCLError) as e:
        ocl.load(binary, dict(meta, entry="missing"))
    assert "no kernel 'missing'" in str(e.value) and not no_room(e.value)
