"""The CUDA and HIP runtime sides (tack/backends/cuda_runtime.py, hip_runtime.py) on a machine
without a GPU.

1. The real bindings' import and error paths, each in a subprocess with a timeout (a crash or
   a hang fails the test): cuda-python without NVIDIA's driver (its cuInit raises
   DynamicLibNotFoundError), hip-python without ROCm (every call raises "failed to dlopen"),
   hip-python with Debian's libamdhip64-5 and no GPU (hipGetDeviceCount: hipErrorNoDevice),
   and each binding missing: the documented error, in the same process, never a crash.
2. Keys, JIT-fallback order, argument marshalling and device-array bookkeeping, with the driver
   simulated at the boundary only: a fake module stands in for cuda-python's ``driver`` (and
   hip-python's ``hip``) module.  Its memory is host memory, its copies are memmoves, and its
   launch reads each parameter from the ``void **`` array the runtime passes, with the types
   the loaded PTX itself declares, then runs a NumPy model of the kernel over the grid.
3. PTX built by the toolchain: each entry's parameter list equals what the launch marshals for
   its argspec.
"""

from __future__ import annotations

import ctypes
import gc
import enum
import threading
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tack
import tack.aot
import tack.cache
from tack.backends import cuda_runtime as cr
from tack.backends import hip_runtime as hr
from tack.backends.cudalike import pack_params
from tack.backends.device_args import launch_codes
from tack.backends.gpu import key_for

from .gpu_tools import build, gpu_target

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEBIAN_HIP = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"


# ---------------------------------------------------------------------------
# 1. the real bindings, in subprocesses


def run_py(code, env=None, timeout=120):
    """Run ``code`` in a new Python with Tack importable; a crash or hang fails the test."""
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    try:
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                           text=True, env=e, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the runtime hung (no answer in {timeout} s)")
    assert r.returncode == 0, f"exit {r.returncode} (a crash is negative):\n{r.stdout}\n{r.stderr}"
    return r.stdout


ABSENT = """
    import sys
    from tack.backends import {mod} as rt
    assert rt.available() is False and rt.available() is False
    reason = rt.unavailable_reason()
    assert reason and reason == rt.unavailable_reason(), reason
    assert rt.devices() == []
    for call in (lambda: rt.get_device("{kind}"), lambda: rt.get_device("{kind}:1"),
                 lambda: rt.load(b"x", {{"entry": "k", "argspec": []}}, "{kind}"),
                 lambda: rt.to_device([1.0]), rt.host_key, rt.lookup_keys,
                 rt.toolchain_target, rt.site_candidates):
        try:
            call()
        except rt.{exc} as e:
            assert str(e) == reason, (str(e), reason)
            assert isinstance(e, RuntimeError)
        else:
            raise AssertionError("no {exc}")
    print(reason)
"""


def has_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def loads(lib):
    try:
        ctypes.CDLL(lib)
        return True
    except OSError:
        return False


needs_cuda_python = pytest.mark.skipif(not has_module("cuda.bindings") and not has_module("cuda.cuda"),
                                       reason="cuda-python is not installed (pip install cuda-python)")
needs_hip_python = pytest.mark.skipif(not has_module("hip"),
                                      reason="hip-python is not installed (pip install hip-python)")


@needs_cuda_python
@pytest.mark.skipif(loads("libcuda.so.1"), reason="NVIDIA's driver is installed here")
def test_cuda_python_without_the_driver_is_cuda_unavailable():
    """cuda-python's cuInit raises DynamicLibNotFoundError (a RuntimeError) when libcuda is absent:
    CUDAUnavailable naming the driver, from every entry point, twice, in one process."""
    out = run_py(ABSENT.format(mod="cuda_runtime", kind="cuda", exc="CUDAUnavailable"))
    assert "libcuda.so.1 was not found" in out and "install the NVIDIA driver" in out
    assert "DynamicLibNotFoundError" in out


def test_cuda_python_missing_is_cuda_unavailable():
    out = run_py("import sys; sys.modules['cuda'] = None\n"
                 + textwrap.dedent(ABSENT.format(mod="cuda_runtime", kind="cuda", exc="CUDAUnavailable")))
    assert "cuda-python does not import" in out and 'pip install "tack[cuda]"' in out


@needs_hip_python
@pytest.mark.skipif(loads("libamdhip64.so"), reason="ROCm's libamdhip64.so loads here")
def test_hip_python_without_rocm_is_hip_unavailable():
    """hip-python raises RuntimeError('failed to dlopen ... libamdhip64.so') on every call."""
    out = run_py(ABSENT.format(mod="hip_runtime", kind="hip", exc="HIPUnavailable"),
                 env={"ROCM_PATH": "/nonexistent-rocm", "ROCM_HOME": ""})
    assert "libamdhip64.so) was not found" in out and "failed to dlopen" in out
    assert "install ROCm" in out


@needs_hip_python
@pytest.mark.skipif(not os.path.exists(DEBIAN_HIP),
                    reason="Debian's HIP runtime is not installed (apt-get install libamdhip64-5)")
@pytest.mark.skipif(os.path.exists("/dev/kfd"), reason="an AMD GPU driver is here")
def test_hip_with_rocm_and_no_gpu_is_hip_unavailable(tmp_path):
    """With ROCm's runtime (Debian's libamdhip64-5, found through ROCM_PATH) and no GPU,
    hipGetDeviceCount returns hipErrorNoDevice: HIPUnavailable saying ROCm found no GPU."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libamdhip64.so").symlink_to(DEBIAN_HIP)
    out = run_py(ABSENT.format(mod="hip_runtime", kind="hip", exc="HIPUnavailable"),
                 env={"ROCM_PATH": str(tmp_path)})
    assert "found no AMD GPU" in out and "hipErrorNoDevice" in out and "HIP runtime 5." in out


def test_hip_python_missing_is_hip_unavailable():
    out = run_py("import sys; sys.modules['hip'] = None; sys.modules['rocm'] = None\n"
                 + textwrap.dedent(ABSENT.format(mod="hip_runtime", kind="hip", exc="HIPUnavailable")))
    assert "hip-python does not import" in out and "hip-python" in out and "ROCm" in out


def test_imports_are_light():
    out = run_py("""
        import sys
        import tack.backends.cuda_runtime, tack.backends.hip_runtime
        heavy = [m for m in ("cuda", "cuda.bindings", "hip", "rocm", "llvmlite.binding")
                 if m in sys.modules]
        print(heavy)
    """)
    assert out.strip() == "[]"


def test_module_main_says_why_and_exits_1():
    for mod in ("cuda_runtime", "hip_runtime"):
        e = dict(os.environ, PYTHONPATH=ROOT, ROCM_PATH="/nonexistent-rocm")
        r = subprocess.run([sys.executable, "-m", f"tack.backends.{mod}"], capture_output=True,
                           text=True, env=e, timeout=120)
        if r.returncode == 0:
            pytest.skip(f"a device is here: {r.stdout}")
        assert r.returncode == 1 and r.stdout.startswith("no device: ") and "not available" in r.stdout


# ---------------------------------------------------------------------------
# 2. the driver simulated at the boundary


class Handle(str):
    """A driver handle of the fakes: named for the tests, an integer to ``int()`` as the real
    bindings' handles are (cuda-python's CUstream, hip-python's hipStream_t)."""

    def __int__(self):
        return 0x5000 + sum(map(ord, self))


class Memory:
    """Device memory of a fake driver: host buffers, by address."""

    def __init__(self):
        self.blocks = {}
        self.freed = []

    def alloc(self, n):
        buf = ctypes.create_string_buffer(n)
        ptr = ctypes.addressof(buf)
        self.blocks[ptr] = buf
        return ptr

    def free(self, ptr):
        assert ptr in self.blocks, f"free of {ptr:#x}, which is not allocated"
        self.freed.append(ptr)
        del self.blocks[ptr]

    def check(self, ptr, n):
        for start, buf in self.blocks.items():
            if start <= ptr and ptr + n <= start + len(buf):
                return
        raise AssertionError(f"access of {n} bytes at {ptr:#x}: outside device memory")

    def view(self, ptr, dtype, shape, estrides):
        dtype = np.dtype(dtype)
        if not all(shape):
            return np.empty(shape, dtype)
        span = (sum((n - 1) * s for n, s in zip(shape, estrides)) + 1) * dtype.itemsize
        self.check(ptr, span)
        raw = np.frombuffer((ctypes.c_char * span).from_address(ptr), np.uint8)
        return np.lib.stride_tricks.as_strided(raw.view(dtype), shape,
                                               [s * dtype.itemsize for s in estrides])


# The fake reads each parameter with the type the PTX declares (its own reading of the text).
_PTX_CTYPES = {".u64": ctypes.c_uint64, ".u32": ctypes.c_uint32, ".u8": ctypes.c_uint8,
               ".f32": ctypes.c_float, ".f64": ctypes.c_double, ".s64": ctypes.c_int64,
               ".s32": ctypes.c_int32}


def fake_ptx_params(ptx):
    m = re.search(r"\.entry\s+\w+\s*\(([^)]*)\)", ptx)
    return [re.search(r"\.param\s+(\.\w+)", p).group(1) for p in m.group(1).split(",")]


def read_params(address, types):
    arr = (ctypes.c_void_p * len(types)).from_address(address)
    return [_PTX_CTYPES[t].from_address(arr[i]).value for i, t in enumerate(types)]


class FakeCuda:
    """Stands in for cuda-python's ``cuda.bindings.driver``: same function names, argument
    orders and return tuples ``(CUresult, values...)``; records every call."""

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1
        CUDA_ERROR_OUT_OF_MEMORY = 2
        CUDA_ERROR_NO_DEVICE = 100
        CUDA_ERROR_INVALID_CONTEXT = 201
        CUDA_ERROR_NO_BINARY_FOR_GPU = 209
        CUDA_ERROR_INVALID_PTX = 218
        CUDA_ERROR_ILLEGAL_ADDRESS = 700
        CUDA_ERROR_LAUNCH_FAILED = 719

    class _Names:
        def __getattr__(self, name):
            return name

    CUdevice_attribute = CUjit_option = CUfunction_attribute = _Names()

    def __init__(self, cc=(9, 0), version=12040, count=1, name="NVIDIA H200"):
        self.cc, self.version, self.count, self.name = cc, version, count, name
        self.fault = self.sticky = None     # fault: what the next launch's kernel raises
        self.calls = []
        self.mem = Memory()
        self.modules = {}
        self.models = {}            # entry -> fn(params, grid, block, mem)
        self.fail = {}              # function name -> CUresult to return
        self.jit_error = None
        self.cubins = {}            # a cubin it takes -> the PTX it was assembled from (its model)
        self.refuse_cubins = False  # a driver older than the ptxas: every cubin refused
        self.current = threading.local()    # as the real driver: a current context per thread

    # What needs the calling thread's current context (cuCtxSetCurrent), as in the real driver.
    NEED_CONTEXT = {"cuStreamCreate", "cuStreamSynchronize", "cuModuleLoadDataEx", "cuMemAlloc",
                    "cuMemFree", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemsetD8Async",
                    "cuLaunchKernel"}

    def _rec(self, name, *args):
        self.calls.append((name,) + args)
        if name in self.NEED_CONTEXT and getattr(self.current, "ctx", None) is None:
            return self.CUresult.CUDA_ERROR_INVALID_CONTEXT
        if self.sticky is not None:         # a kernel faulted: every call fails, as the real one
            return self.sticky
        status = self.fail.get(name, self.CUresult.CUDA_SUCCESS)
        return status

    def names(self):
        return [c[0] for c in self.calls]

    def cuGetErrorString(self, status):
        return (self.CUresult.CUDA_SUCCESS, f"error {int(status)}".encode())

    def cuInit(self, flags):
        return (self._rec("cuInit", flags),)

    def cuDriverGetVersion(self):
        return (self._rec("cuDriverGetVersion"), self.version)

    def cuDeviceGetCount(self):
        return (self._rec("cuDeviceGetCount"), self.count)

    def cuDeviceGet(self, i):
        return (self._rec("cuDeviceGet", i), 1000 + i)

    def cuDeviceGetName(self, n, h):
        return (self._rec("cuDeviceGetName", n, h), self.name.encode() + b"\0" * 8)

    def cuDeviceGetAttribute(self, attr, h):
        values = {"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": self.cc[0],
                  "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": self.cc[1],
                  "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK": 1024,
                  "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X": 1024, "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y": 1024,
                  "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z": 64,
                  "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X": 2**31 - 1,
                  "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y": 65535, "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z": 65535}
        return (self._rec("cuDeviceGetAttribute", attr, h), values[attr])

    def cuDevicePrimaryCtxRetain(self, h):
        return (self._rec("cuDevicePrimaryCtxRetain", h), f"ctx{h}")

    def cuCtxSetCurrent(self, ctx):
        self.current.ctx = ctx
        return (self._rec("cuCtxSetCurrent", ctx),)

    def cuStreamCreate(self, flags):
        return (self._rec("cuStreamCreate", flags), Handle("stream0"))

    def cuStreamSynchronize(self, s):
        return (self._rec("cuStreamSynchronize", s),)

    def cuModuleLoadDataEx(self, image, n, options, values):
        status = self._rec("cuModuleLoadDataEx", image, n, list(options), list(values))
        assert image.endswith(b"\0") and n == len(options) == len(values)
        opts = dict(zip(options, values))
        assert isinstance(opts["CU_JIT_ERROR_LOG_BUFFER"], bytearray)
        assert opts["CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES"] == len(opts["CU_JIT_ERROR_LOG_BUFFER"])
        if image.startswith(b"\x7fELF"):          # a cubin: loaded as it is, no JIT
            if self.refuse_cubins or image[:-1] not in self.cubins:
                return (self.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, None)
            handle = f"module{len(self.modules)}"
            self.modules[handle] = self.cubins[image[:-1]]
            return (status, handle)
        if self.jit_error:
            msg = self.jit_error.encode() + b"\0"
            opts["CU_JIT_ERROR_LOG_BUFFER"][:len(msg)] = msg
            return (self.CUresult.CUDA_ERROR_INVALID_PTX, None)
        handle = f"module{len(self.modules)}"
        self.modules[handle] = image[:-1].decode()
        return (status, handle)

    def cuModuleGetFunction(self, module, name):
        status = self._rec("cuModuleGetFunction", module, name)
        if f".entry {name.decode()}(" not in self.modules[module]:
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE, None)
        return (status, (module, name.decode()))

    def cuFuncGetAttribute(self, attr, func):
        return (self._rec("cuFuncGetAttribute", attr, func), 768)

    def cuMemAlloc(self, n):
        assert n > 0
        return (self._rec("cuMemAlloc", n), self.mem.alloc(n))

    def cuMemFree(self, ptr):
        status = self._rec("cuMemFree", ptr)
        if status == self.CUresult.CUDA_SUCCESS:        # refused (no context): the memory leaks
            self.mem.free(ptr)
        return (status,)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        self.mem.check(dst, n)
        ctypes.memmove(dst, src, n)
        return (self._rec("cuMemcpyHtoDAsync", dst, src, n, stream),)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        status = self._rec("cuMemcpyDtoHAsync", dst, src, n, stream)
        if status == self.CUresult.CUDA_SUCCESS:
            self.mem.check(src, n)
            ctypes.memmove(dst, src, n)
        return (status,)

    def cuMemsetD8Async(self, ptr, value, n, stream):
        self.mem.check(ptr, n)
        ctypes.memset(ptr, value, n)
        return (self._rec("cuMemsetD8Async", ptr, value, n, stream),)

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        status = self._rec("cuLaunchKernel", func, (gx, gy, gz), (bx, by, bz), shared, stream)
        if status:
            return (status,)
        if self.fault is not None:          # the kernel faults: the launch itself succeeds
            self.sticky = self.fault
            return (status,)
        module, entry = func
        values = read_params(params, fake_ptx_params(self.modules[module]))
        self.models[entry](values, self.mem)
        return (status,)


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cr, "_driver", lambda: fake)
    cr.reset()
    yield fake
    cr.reset()


def artifact(kernel, args, grid, target="cuda:sm_80", debug=False, sass=False):
    """A CUDA variant built as ``compile_variant`` builds it: PTX alone (a miss's), or with
    ``sass`` PTX and a cubin from the packaged ptxas (what tack.aot and bundles store)."""
    options = {"sass": sass} if target.startswith("cuda:") else {}
    return build(kernel, args, grid, gpu_target(target, **options), debug)


@tack.kernel
def saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


def saxpy_model(values, mem):
    """saxpy's ABI: a, x (ptr, n), y (ptr, n), out (ptr, n), n0 n1 n2."""
    a, xp, xn, yp, yn, op, on, n0, n1, n2 = values
    assert (n1, n2) == (1, 1)
    x = mem.view(xp, np.float32, (xn,), (1,))
    y = mem.view(yp, np.float32, (yn,), (1,))
    out = mem.view(op, np.float32, (on,), (1,))
    out[:n0] = np.float32(a) * x[:n0] + y[:n0]


@tack.kernel
def k_abi(a, b, flag, x, n, c):
    i, j = tack.tid()
    if flag:
        a[i, j] = b[i, j] * x + n + c[0]


def k_abi_model(values, mem, debug=False):
    """k_abi's ABI: a (C: ptr, 2 extents), b (A: ptr, 2 extents, 2 strides), flag (u8),
    x (f32), n (i64), c (ptr, 1 extent), n0 n1 n2 [, error record]."""
    (ap, a0, a1, bp, b0, b1, bs0, bs1, flag, x, n, cp, c0, n0, n1, n2, *err) = values
    a = mem.view(ap, np.float32, (a0, a1), (a1, 1))
    b = mem.view(bp, np.float32, (b0, b1), (bs0, bs1))
    c = mem.view(cp, np.int32, (c0,), (1,))
    if debug:
        record = mem.view(err[0], np.int64, (4,), (1,))
        assert not record.any(), "the error record was not zeroed before the launch"
        if n0 > b0:
            record[:] = (1, 0, b0, b0)
            return
    if flag:
        a[:n0, :n1] = b[:n0, :n1] * np.float32(x) + np.int64(n) + c[0]


def test_arch_candidates_exact_then_older_ptx_the_driver_jits():
    # H200 (9.0) under CUDA 12.4: its exact sm, its arch-specific sm, then every older sm.
    assert cr.cuda_arch_candidates(9, 0, 12040) == [
        "sm_90", "sm_90a", "sm_89", "sm_87", "sm_86", "sm_80", "sm_75", "sm_72", "sm_70",
        "sm_62", "sm_61", "sm_60"]
    # A driver whose JIT stops at PTX ISA 7.0 (CUDA 11.0) on an sm_86 GPU: sm_86 needs ISA 7.1,
    # so the exact sm is left out and PTX for sm_80 is built and JIT-compiled.
    assert cr.cuda_arch_candidates(8, 6, 11000)[:2] == ["sm_80", "sm_75"]
    # A GPU Tack has no settings for (sm_121): the newest older sm, never another's 'a' PTX.
    got = cr.cuda_arch_candidates(12, 1, None)
    assert got[0] == "sm_120" and not any(a.endswith("a") for a in got)
    # Nothing newer than the GPU.
    assert all(cr._sm(a)[:2] <= (7, 5) for a in cr.cuda_arch_candidates(7, 5, 13000))
    assert cr.max_ptx_isa(12040) == "8.4" and cr.max_ptx_isa(99000) is None
    assert cr.max_ptx_isa(12070) == "8.5"       # between two table entries: the older's


def test_driver_can_run_names_why_not():
    assert cr.driver_can_run("sm_80", "7.0", 9, 0, 12040) is None
    assert "newer than this GPU" in cr.driver_can_run("sm_90", "7.8", 8, 0, 12040)
    assert "runs only on compute capability 9.0" in cr.driver_can_run("sm_90a", "8.0", 10, 0, 12080)
    assert "update the NVIDIA driver" in cr.driver_can_run("sm_90", "7.8", 9, 0, 11070)


def test_devices_keys_and_toolchain_target_with_a_fake_driver(fake_cuda):
    assert cr.available() and cr.unavailable_reason() is None
    assert cr.devices() == [("NVIDIA H200 (cuda:sm_90)", "cuda:0")]
    want = [f"cuda:{a}" for a in cr.cuda_arch_candidates(9, 0, 12040)]
    assert [a for a, _ in cr.candidate_keys("cuda:0")] == want
    assert cr.lookup_keys() == [key_for(a) for a in want] == [k for _, k in cr.site_candidates()]
    t = cr.toolchain_target("cuda")
    assert t.name == "cuda:sm_90" and t.key == cr.host_key() == cr.lookup_keys()[0]
    with pytest.raises(ValueError, match="no CUDA device cuda:1"):
        cr.get_device("cuda:1")
    with pytest.raises(ValueError, match="not a CUDA device name"):
        cr.get_device("hip:0")
    dev = cr.get_device("cuda")
    assert dev is cr.get_device("cuda:0") and fake_cuda.names().count("cuDevicePrimaryCtxRetain") == 1
    assert dev.stream == "stream0" and ("cuStreamCreate", 1) in fake_cuda.calls


def test_an_older_driver_moves_the_build_to_older_ptx(fake_cuda):
    fake_cuda.cc, fake_cuda.version = (8, 6), 11000
    assert cr.toolchain_target().name == "cuda:sm_80"
    assert cr.host_key() == key_for("cuda:sm_80") == cr.lookup_keys()[0]


def test_cuda_error_statuses_are_cuda_unavailable(fake_cuda):
    fake_cuda.fail["cuInit"] = FakeCuda.CUresult.CUDA_ERROR_NO_DEVICE
    assert not cr.available()
    assert "found no usable GPU" in cr.unavailable_reason()
    assert "CUDA_ERROR_NO_DEVICE" in cr.unavailable_reason()
    with pytest.raises(cr.CUDAUnavailable):
        cr.get_device()
    cr.reset()
    fake_cuda.fail.clear()
    fake_cuda.count = 0
    assert "lists no GPU" in cr.unavailable_reason()


def test_load_passes_nul_terminated_ptx_with_jit_log_buffers(fake_cuda):
    x = np.ones(8, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    k = cr.load(art.payload, art.meta, "cuda")
    (_, image, n, options, values), = [c for c in fake_cuda.calls if c[0] == "cuModuleLoadDataEx"]
    assert image == art.payload.rstrip(b"\0") + b"\0"
    assert "CU_JIT_ERROR_LOG_BUFFER" in options and "CU_JIT_INFO_LOG_BUFFER" in options
    assert ("cuModuleGetFunction", "module0", art.meta["entry"].encode()) in fake_cuda.calls
    assert k.num_params == 10 and k.max_threads == 768
    fake_cuda.jit_error = "ptxas fatal   : Unresolved extern function 'foo'"
    with pytest.raises(cr.CUDAError, match="Unresolved extern function 'foo'") as e:
        cr.load(art.payload, art.meta, "cuda")
    assert "CUDA_ERROR_INVALID_PTX" in str(e.value)


def loaded_images(fake):
    """The images ``cuModuleLoadDataEx`` was given, without their NUL."""
    return [c[1][:-1] for c in fake.calls if c[0] == "cuModuleLoadDataEx"]


def sass_artifacts(fake, kernel, args, archs, sass=True):
    """{sm: artifact} built ahead of time (tack.aot) for each ``cuda:sm``, with SASS from the
    packaged ptxas (or, ``sass=False``, PTX alone); the fake driver takes their cubins."""
    from tack.backends.gpu import unpack_cuda
    from .gpu_tools import tool
    tool("ptxas")
    arts = {}
    for sm in archs:
        with pytest.MonkeyPatch.context() as mp:
            if not sass:
                mp.setenv("TACK_CUDA_SASS", "0")
            art = tack.aot.compile(kernel, f"cuda:{sm}", args)
        ptx, cubin, label = unpack_cuda(art.payload)
        assert bool(cubin) == sass and (not sass or label.startswith(f"{sm} ptxas "))
        if cubin:
            fake.cubins[cubin] = ptx.decode()
        fake.models[art.meta["entry"]] = saxpy_model
        arts[sm] = art
    return arts


def launch_from(arts, tmp_path, monkeypatch, name):
    """saxpy launched on the fake H200 with a fresh cache directory holding ``arts`` (as
    tack.aot.save stores them): the launch finds one by the runtime's candidate keys."""
    cache = tmp_path / name
    tack.aot.save(list(arts), str(cache))
    monkeypatch.setenv("TACK_CACHE_DIR", str(cache))
    tack.cache._reset_for_tests()
    saxpy._variants.clear()
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    tack.launch(saxpy, 64, (np.float32(2), x, x, out), device="cuda")
    np.testing.assert_array_equal(out, 3 * x)


def test_a_kernel_fault_names_the_kernel_and_loses_the_device(fake_cuda):
    """A kernel that faults (an illegal address): the launch call succeeds and the driver says
    so at the copy back, then at every call (CUDA's sticky errors).  The error names the kernel
    and says the context is lost; tack.devices() and available() no longer offer the device,
    and a later launch or to_device says why instead of a driver error on a copy."""
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, out), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    cr.launch(k, art.meta, (np.float32(2), x, x, out), (64,))
    assert cr.available() and cr.devices() == [("NVIDIA H200 (cuda:sm_90)", "cuda:0")]
    fake_cuda.fault = FakeCuda.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(cr.CUDAError) as e:
        cr.launch(k, art.meta, (np.float32(2), x, x, out), (64,))
    msg = str(e.value)
    assert f"kernel '{art.meta['entry']}' failed on NVIDIA H200" in msg
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in msg and "sticky" in msg and "restart" in msg
    assert not cr.available() and cr.devices() == []
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in cr.unavailable_reason()
    with pytest.raises(cr.CUDAError, match="sticky"):        # no copy attempted: said at once
        cr.launch(k, art.meta, (np.float32(2), x, x, out), (64,))
    with pytest.raises(cr.CUDAUnavailable, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        cr.to_device(x)


def test_a_failed_copy_that_is_not_a_fault_keeps_the_device(fake_cuda):
    """A copy back that fails with an error that is not sticky stays that error, and the device
    stays listed."""
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, out), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    fake_cuda.fail["cuMemcpyDtoHAsync"] = FakeCuda.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(cr.CUDAError, match="cuMemcpyDtoHAsync failed: CUDA_ERROR_INVALID_VALUE"):
        cr.launch(k, art.meta, (np.float32(2), x, x, out), (64,))
    assert cr.available() and len(cr.devices()) == 1


def test_candidate_order_sass_then_ptx_then_lower_ptx(fake_cuda, tmp_path, monkeypatch):
    """What an H200 (sm_90) loads of the entries stored for it, through a launch's cache lookup:
    1. the cubin of its exact sm, stored beside that sm's PTX; 2. that PTX where the entry has no
    SASS; 3. the PTX of a lower sm, never that sm's cubin."""
    from tack.backends.gpu import unpack_cuda
    monkeypatch.setattr(cr, "_refused_by", {})
    x = np.zeros(64, np.float32)
    args = (np.float32(2), x, x, x)
    sass = sass_artifacts(fake_cuda, saxpy, args, ("sm_90", "sm_80"))
    ptx_only = sass_artifacts(fake_cuda, saxpy, args, ("sm_90",), sass=False)
    assert sass["sm_90"].key == ptx_only["sm_90"].key      # one key: the PTX's (LLVM, sm, ISA)

    launch_from(sass.values(), tmp_path, monkeypatch, "both")
    assert loaded_images(fake_cuda) == [unpack_cuda(sass["sm_90"].payload)[1]]     # 1. SASS

    fake_cuda.calls.clear()
    launch_from([ptx_only["sm_90"], sass["sm_80"]], tmp_path, monkeypatch, "ptx90")
    assert loaded_images(fake_cuda) == [ptx_only["sm_90"].payload]                # 2. its PTX

    fake_cuda.calls.clear()
    launch_from([sass["sm_80"]], tmp_path, monkeypatch, "only80")
    assert loaded_images(fake_cuda) == [unpack_cuda(sass["sm_80"].payload)[0]]    # 3. lower PTX


def test_a_refused_cubin_falls_back_to_the_ptx_of_its_entry_said_once(fake_cuda, caplog,
                                                                     monkeypatch):
    """A cubin the driver refuses (a ptxas newer than the driver: CUDA_ERROR_NO_BINARY_FOR_GPU)
    loads the PTX of the same entry instead; the process says so in one warning line, and
    later loads of that toolchain's SASS on the device go straight to the PTX."""
    import logging
    from tack.backends.gpu import unpack_cuda
    monkeypatch.setattr(cr, "_refused_by", {})
    x = np.zeros(64, np.float32)
    arts = sass_artifacts(fake_cuda, saxpy, (np.float32(2), x, x, x), ("sm_90",))
    art = arts["sm_90"]
    ptx, cubin, _ = unpack_cuda(art.payload)
    assert cr.load(art.payload, art.meta).code == "sass"
    fake_cuda.refuse_cubins = True
    fake_cuda.calls.clear()
    with caplog.at_level(logging.WARNING, logger="tack.cuda"):
        kernels = [cr.load(art.payload, art.meta) for _ in range(5)]
    assert [k.code for k in kernels] == ["ptx"] * 5
    assert loaded_images(fake_cuda) == [cubin] + [ptx] * 5       # the cubin tried once
    said = [r for r in caplog.records if r.name == "tack.cuda"]
    assert len(said) == 1 and "refuses the SASS" in said[0].getMessage()
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in said[0].getMessage()
    out = np.zeros(64, np.float32)
    cr.launch(kernels[-1], art.meta, (np.float32(2), np.arange(64, dtype=np.float32),
                                      np.arange(64, dtype=np.float32), out), (64,))
    np.testing.assert_array_equal(out, 3 * np.arange(64, dtype=np.float32))


def test_sass_of_another_sm_is_never_loaded(fake_cuda, monkeypatch):
    """An sm_80 entry's cubin is not loaded on an sm_86 GPU (its PTX is), nor an sm_90 one's on
    sm_90a's sibling check: the label's sm must be the device's compute capability."""
    monkeypatch.setattr(cr, "_refused_by", {})
    assert cr.sass_runs_on("sm_90 ptxas 13.0.88", (9, 0)) and cr.sass_runs_on("sm_90a ptxas 13.0", (9, 0))
    assert not cr.sass_runs_on("sm_80 ptxas 13.0.88", (8, 6)) and not cr.sass_runs_on("", (9, 0))
    fake_cuda.cc = (8, 6)
    x = np.zeros(64, np.float32)
    art = sass_artifacts(fake_cuda, saxpy, (np.float32(2), x, x, x), ("sm_80",))["sm_80"]
    assert cr.load(art.payload, art.meta).code == "ptx"
    assert not any(i.startswith(b"\x7fELF") for i in loaded_images(fake_cuda))


def test_load_refuses_ptx_that_cannot_run_or_does_not_match(fake_cuda):
    x = np.ones(8, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    fake_cuda.cc = (7, 5)
    with pytest.raises(cr.CUDAError, match="targets sm_80, newer than this GPU"):
        cr.load(art.payload, art.meta)
    cr.reset()
    fake_cuda.cc = (9, 0)
    meta = dict(art.meta, argspec=[["float64"]] + art.meta["argspec"][1:])
    with pytest.raises(cr.CUDAError, match="makes"):
        cr.load(art.payload, meta)
    with pytest.raises(cr.CUDAError, match="has no kernel 'nope'"):
        cr.load(art.payload, dict(art.meta, entry="nope"))
    with pytest.raises(cr.CUDAError, match="not PTX"):
        cr.load(b"\x7fELF\x02", art.meta)
    assert "cuModuleLoadDataEx" not in fake_cuda.names()


def test_launch_copies_in_and_back_and_frees(fake_cuda):
    x = np.arange(1000, dtype=np.float32)
    y = np.full(1000, 0.5, np.float32)
    x.flags.writeable = y.flags.writeable = False       # read-only inputs: specs without 'w'
    out = np.zeros(1000, np.float32)
    art = artifact(saxpy, (np.float32(2), x, y, out), 1)
    assert [s[0][-1] for s in art.meta["argspec"][1:]] == ["r", "r", "w"]
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    fake_cuda.calls.clear()
    x_before = x.copy()
    assert cr.launch(k, art.meta, (np.float32(2), x, y, out), (1000,)) is None
    np.testing.assert_array_equal(out, 2 * x + y)
    np.testing.assert_array_equal(x, x_before)
    names = fake_cuda.names()
    assert names.count("cuMemAlloc") == 3 and names.count("cuMemcpyHtoDAsync") == 3
    assert names.count("cuMemcpyDtoHAsync") == 1        # only the writable spec comes back
    assert names.index("cuLaunchKernel") < names.index("cuMemcpyDtoHAsync") < names.index("cuStreamSynchronize")
    (launch,) = [c for c in fake_cuda.calls if c[0] == "cuLaunchKernel"]
    assert launch[2:4] == ((4, 1, 1), (256, 1, 1)) and launch[5] == "stream0"
    assert fake_cuda.mem.blocks == {} and len(fake_cuda.mem.freed) == 3


@pytest.mark.parametrize("block,want_block,want_grid", [(100, (64, 1, 1), (16, 1, 1)),
                                                        ((128,), (128, 1, 1), (8, 1, 1)),
                                                        (1, (1, 1, 1), (1000, 1, 1))])
def test_block_overrides_and_grid_rounding(fake_cuda, block, want_block, want_grid):
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(1000, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, out), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    cr.launch(k, art.meta, (np.float32(1), x, x, out), (1000,), block=block)
    (launch,) = [c for c in fake_cuda.calls if c[0] == "cuLaunchKernel"]
    assert launch[2:4] == (want_grid, want_block)
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(ValueError, match="larger than kernel"):
        cr.launch(k, art.meta, (np.float32(1), x, x, out), (1000,), block=(1024,))


def test_a_grid_past_the_devices_blocks_launches_its_limit(fake_cuda):
    """A 2-D grid whose first dimension (on y) needs more blocks than the device's 65535: the
    launch takes 65535 and the entry's grid-stride loop the rest (it was a refusal when
    dimension 0 went on x)."""
    a = np.zeros((4, 5), np.float32)
    b = np.arange(80, dtype=np.float32).reshape(16, 5)[::4]
    c = np.array([7, 0, 0], np.int32)
    args = (a, b, True, np.float32(2), 3, c)
    art = artifact(k_abi, args, 2)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = lambda v, m: k_abi_model(v, m, False)
    cr.launch(k, art.meta, args, (70_000, 5), block=(1, 1))
    (launch,) = [c for c in fake_cuda.calls if c[0] == "cuLaunchKernel"]
    assert launch[2:4] == ((5, 65535, 1), (1, 1, 1))


@pytest.mark.parametrize("debug", [False, True])
def test_2d_strided_and_scalar_marshalling(fake_cuda, debug):
    a = np.zeros((4, 5), np.float32)
    b = np.arange(80, dtype=np.float32).reshape(16, 5)[::4]      # layout A: strides (20, 1)
    c = np.array([7, 0, 0], np.int32)
    args = (a, b, True, np.float32(2), 3, c)
    art = artifact(k_abi, args, 2, debug=debug)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = lambda v, m: k_abi_model(v, m, debug)
    err = cr.launch(k, art.meta, args, (4, 5), debug=debug)
    np.testing.assert_array_equal(a, b * 2 + 3 + 7)
    (launch,) = [c for c in fake_cuda.calls if c[0] == "cuLaunchKernel"]
    # the last dimension (5, in a block of 8) on x, where threads are consecutive, filled first;
    # then the first (4) on y: powers of two
    assert launch[2:4] == ((1, 1, 1), (8, 4, 1))
    if debug:
        assert err.dtype == np.int64 and not err.any()
        assert "cuMemsetD8Async" in fake_cuda.names()
    else:
        assert err is None
    with pytest.raises(cr.CUDAError, match="was it compiled with debug mode"):
        cr.launch(k, art.meta, args, (4, 5), debug=not debug)


def test_debug_error_record_is_returned(fake_cuda):
    """The model finds b (4 rows, strided F memory) indexed past its end on a 6-row grid and
    writes the record on the device; launch reads it back and returns it."""
    a = np.zeros((6, 5), np.float32)
    b = np.asfortranarray(np.zeros((8, 5), np.float32))[::2]        # layout A, 4 rows
    c = np.zeros(1, np.int32)
    args = (a, b, True, np.float32(1), 0, c)
    art = artifact(k_abi, args, 2, debug=True)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = lambda v, m: k_abi_model(v, m, True)
    err = cr.launch(k, art.meta, args, (6, 5), debug=True)
    assert err.tolist() == [1, 0, 4, 4]
    assert fake_cuda.mem.blocks == {}


def test_argument_mismatches_are_type_errors_and_nothing_runs(fake_cuda):
    x = np.ones(8, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.calls.clear()
    ro = np.ones(8, np.float32)
    ro.flags.writeable = False
    for args, match in [((2.0, x, x, np.ones(8)), "float64"),
                        ((2.0, x, x, ro), "read-only"),
                        ((2.0, x, x, x[::2]), "not C-contiguous"),
                        ((x, x, x, x), "scalar, not an array"),
                        (("a", x, x, x), "does not fit"),
                        ((2.0, x, x, [1.0]), "must be a NumPy array")]:
        with pytest.raises(TypeError, match=match):
            cr.launch(k, art.meta, args, (8,))
    with pytest.raises(TypeError, match="takes 4 value arguments"):
        cr.launch(k, art.meta, (2.0, x), (8,))
    assert "cuLaunchKernel" not in fake_cuda.names() and fake_cuda.mem.blocks == {}


def test_int_scalar_range_is_checked(fake_cuda):
    c = np.zeros(1, np.int32)
    a = np.zeros((2, 2), np.float32)
    art = artifact(k_abi, (a, a[:, ::1], True, np.float32(1), 0, c), 2)
    k = cr.load(art.payload, art.meta)
    with pytest.raises(TypeError, match="does not fit int64"):
        cr.launch(k, art.meta, (a, a, True, np.float32(1), 2**63, c), (2, 2))


def test_a_launch_of_the_kernel_nested_on_the_thread_inside_its_launch_runs(fake_cuda):
    """A signal handler's (or a finalizer's) launch of a kernel on the thread inside a launch of
    it (here: from the launch's own driver call) runs, with its own result, and the outer
    launch's result is right too: the parameters go with each cuLaunchKernel call, so the
    kernel's lock (re-entrant) guards no state a nested launch could overwrite.  It was a plain
    Lock: the nested launch waited for its own thread for ever (run on a thread here, so that
    a hang fails the test instead of stopping the run)."""
    x = np.arange(16, dtype=np.float32)
    y = np.full(16, 0.5, np.float32)
    out, inner = np.zeros(16, np.float32), np.zeros(16, np.float32)
    art = artifact(saxpy, (np.float32(2), x, y, out), 1)
    k = cr.load(art.payload, art.meta)
    nested = []

    def model(values, mem):
        if not nested:
            nested.append(True)
            cr.launch(k, art.meta, (np.float32(3), x, y, inner), (16,))
        saxpy_model(values, mem)
    fake_cuda.models[art.meta["entry"]] = model
    outer = threading.Thread(target=cr.launch, args=(k, art.meta, (np.float32(2), x, y, out), (16,)),
                             daemon=True)
    outer.start()
    outer.join(60)
    assert not outer.is_alive(), "the nested launch waited for its own thread"
    np.testing.assert_array_equal(inner, 3 * x + y)
    np.testing.assert_array_equal(out, 2 * x + y)


def test_same_array_twice_is_one_copy_and_empty_grid_launches_nothing(fake_cuda):
    x = np.arange(16, dtype=np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    fake_cuda.calls.clear()
    cr.launch(k, art.meta, (np.float32(3), x, x, x), (16,))
    np.testing.assert_array_equal(x, 4 * np.arange(16, dtype=np.float32))
    assert fake_cuda.names().count("cuMemAlloc") == 1
    assert fake_cuda.names().count("cuMemcpyDtoHAsync") == 1
    fake_cuda.calls.clear()
    cr.launch(k, art.meta, (np.float32(3), x, x, x), (0,))
    assert "cuLaunchKernel" not in fake_cuda.names() and fake_cuda.mem.blocks == {}


def test_launch_failure_names_the_kernel_and_frees(fake_cuda):
    x = np.ones(8, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.fail["cuLaunchKernel"] = FakeCuda.CUresult.CUDA_ERROR_LAUNCH_FAILED
    with pytest.raises(cr.CUDAError, match=r"launch of kernel .* over \(8,\) .*CUDA_ERROR_LAUNCH_FAILED"):
        cr.launch(k, art.meta, (2.0, x, x, x), (8,))
    assert fake_cuda.mem.blocks == {}


def test_device_arrays_stay_on_the_device(fake_cuda):
    x = np.arange(512, dtype=np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    dx, dout = cr.to_device(x), cr.to_device(np.zeros(512, np.float32))
    assert isinstance(dx, cr.CUDAArray) and dx.layout == "C" and dx.shape == (512,)
    fake_cuda.calls.clear()
    cr.launch(k, art.meta, (np.float32(2), dx, dx, dout), (512,))
    cr.launch(k, art.meta, (np.float32(1), dout, dx, dout), (512,))     # chained, no copies
    names = fake_cuda.names()
    assert "cuMemcpyHtoDAsync" not in names and "cuMemcpyDtoHAsync" not in names
    np.testing.assert_array_equal(dout.numpy(), 4 * x)
    f = cr.to_device(np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    assert f.layout == "F"
    np.testing.assert_array_equal(f.numpy(), np.arange(6.0).reshape(2, 3))
    assert f.numpy().flags.f_contiguous
    ptr = dx.ptr
    del dx
    assert ptr in fake_cuda.mem.freed
    cai = dout.__cuda_array_interface__
    assert cai["data"] == (dout.ptr, False) and cai["shape"] == (512,) and cai["strides"] is None


class ForeignArray:
    """Another library's device array (as CuPy's): only ``__cuda_array_interface__``."""

    def __init__(self, ptr, shape, typestr, strides=None, readonly=False, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, readonly),
                                         "strides": strides, "version": 3, "stream": stream}


def saxpy_over_foreign_memory(fake_cuda):
    """(x, the saxpy artifact, its loaded kernel, device memory holding x) on the fake driver:
    what a test of another library's array needs."""
    x = np.arange(64, dtype=np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    cr.get_device()
    ptr = fake_cuda.mem.alloc(x.nbytes)
    ctypes.memmove(ptr, x.ctypes.data, x.nbytes)
    return x, art, k, ptr


def test_cuda_array_interface_objects_are_passed_by_pointer(fake_cuda):
    x, art, k, ptr = saxpy_over_foreign_memory(fake_cuda)
    foreign = ForeignArray(ptr, (64,), "<f4", stream=77)
    out = np.zeros(64, np.float32)
    fake_cuda.calls.clear()
    cr.launch(k, art.meta, (np.float32(3), foreign, foreign, out), (64,))
    np.testing.assert_array_equal(out, 4 * x)
    assert ("cuStreamSynchronize", 77) in fake_cuda.calls       # the producer's stream first
    copies = [c for c in fake_cuda.calls if c[0] == "cuMemcpyHtoDAsync"]
    assert len(copies) == 1 and copies[0][2] == out.ctypes.data  # out only: none of the foreign
    cr.launch(k, art.meta, (np.float32(1), foreign, foreign, foreign), (64,))
    np.testing.assert_array_equal(fake_cuda.mem.view(ptr, np.float32, (64,), (1,)), 2 * x)
    wrapped = cr.to_device(foreign)
    assert wrapped.ptr == ptr and wrapped.owner is foreign
    np.testing.assert_array_equal(wrapped.numpy(), 2 * x)
    del wrapped
    assert ptr in fake_cuda.mem.blocks                           # not ours to free
    for bad, match in [(ForeignArray(ptr, (64,), "<f8"), "float64"),
                       (ForeignArray(ptr, (64,), "<f4", readonly=True), "read-only"),
                       (ForeignArray(ptr, (32,), "<f4", strides=(8,)), "not C-contiguous"),
                       (ForeignArray(ptr, (32,), "<f4", strides=(-4,)), "non-negative strides")]:
        with pytest.raises(TypeError, match=match):
            cr.launch(k, art.meta, (np.float32(1), x, x, bad), (32,))


def test_dlpack_device_arrays_are_passed_by_pointer(fake_cuda):
    """A DLPack array in CUDA memory (a capsule made as CuPy's or PyTorch's are) is launched by
    its pointer: no copy, the device's stream handed to the producer, its capsule given back
    once the launch is over; another device's or a read-only one is refused, naming it."""
    from tack import dlpack
    from tests.dlpack_producer import Producer
    x = np.arange(64, dtype=np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    k = cr.load(art.payload, art.meta)
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    dev = cr.get_device()
    ptr = fake_cuda.mem.alloc(x.nbytes)
    ctypes.memmove(ptr, x.ctypes.data, x.nbytes)
    foreign = Producer(ptr, (64,), np.float32, device=(dlpack.CUDA, 0))
    fake_cuda.calls.clear()
    cr.launch(k, art.meta, (np.float32(3), foreign, foreign, foreign), (64,))
    assert not [c for c in fake_cuda.calls if c[0].startswith("cuMemcpy")]
    np.testing.assert_array_equal(fake_cuda.mem.view(ptr, np.float32, (64,), (1,)), 4 * x)
    assert foreign.streams == [int(dev.stream)] * 3 and int(dev.stream) > 2
    gc.collect()
    assert foreign.deleted == 3
    wrapped = cr.to_device(foreign)
    assert isinstance(wrapped, cr.CUDAArray) and wrapped.ptr == ptr
    np.testing.assert_array_equal(wrapped.numpy(), 4 * x)
    del wrapped
    gc.collect()
    assert ptr in fake_cuda.mem.blocks and foreign.deleted == 4     # not ours to free
    strided = Producer(ptr, (32,), np.float32, strides=(2,), device=(dlpack.CUDA_MANAGED, 0))
    fake_cuda.models[art.meta["entry"]] = saxpy_model
    for bad, exc, match in [
            (Producer(ptr, (64,), np.float32, device=(dlpack.CUDA, 1)), ValueError,
             r"lives on cuda:1 \(DLPack\)"),
            (Producer(ptr, (64,), np.float32, device=(dlpack.ROCM, 0)), ValueError, "lives on rocm:0"),
            (Producer(ptr, (64,), np.float32, device=(dlpack.CUDA, 0), readonly=True), TypeError,
             "read-only"),
            (strided, TypeError, "not C-contiguous"),
            (Producer(ptr + 4 * 63, (64,), np.float32, strides=(-1,), device=(dlpack.CUDA, 0)),
             TypeError, "non-negative strides")]:
        with pytest.raises(exc, match=match):
            cr.launch(k, art.meta, (np.float32(1), x, x, bad), (64,))


# -- HIP, simulated at hip-python's boundary --------------------------------------------------


class FakeHip:
    """Stands in for hip-python's ``hip`` module: same names, ``(hipError_t, values...)``."""

    class hipError_t(enum.IntEnum):
        hipSuccess = 0
        hipErrorNoDevice = 100
        hipErrorNoBinaryForGpu = 209
        hipErrorIllegalAddress = 700

    class _Names:
        def __getattr__(self, name):
            return name

    hipDeviceAttribute_t = hipFunction_attribute = _Names()

    class Props:
        def __init__(self, arch):
            self.gcnArchName = arch.encode() + b"\0" * 4
            self.name = b"AMD Instinct MI250X\0"

    def __init__(self, arch="gfx90a:sramecc+:xnack-"):
        self.arch = arch
        self.calls = []
        self.mem = Memory()
        self.models = {}
        self.types = {}
        self.count_status = self.hipError_t.hipSuccess
        self.fault = self.sticky = None     # fault: what the next launch's kernel raises
        self.props_form("return")

    def _ok(self, name, *args):
        self.calls.append((name,) + args)
        if self.sticky is not None:         # a kernel faulted: every call fails, as the real one
            return self.sticky
        return self.hipError_t.hipSuccess

    def hipGetDeviceCount(self):
        self.calls.append(("hipGetDeviceCount",))
        return (self.count_status, 0 if self.count_status else 1)

    def hipRuntimeGetVersion(self):
        return (self._ok("hipRuntimeGetVersion"), 60443482)

    class hipDeviceProp_t:
        """What hip-python 6.x-7.x's ``hipGetDeviceProperties(prop, deviceId)`` fills."""
        gcnArchName = name = b""

    def _device_properties(self, *args):
        """hip-python 10's form, ``(deviceId) -> (err, prop)``, or 6.x-7.x's, ``(prop, deviceId)
        -> (err,)``, filling the prop it is given (see ``props_form``)."""
        if len(args) == 1:
            return (self._ok("hipGetDeviceProperties", args[0]), self.Props(self.arch))
        props, i = args
        made = self.Props(self.arch)
        if hasattr(props, "as_c_void_p"):       # hip-python's own struct: copy the memory
            size = props.c_sizeof()
            ctypes.memmove(props.as_c_void_p().value, made.as_c_void_p().value, size)
        else:
            props.gcnArchName, props.name = made.gcnArchName, made.name
        return (self._ok("hipGetDeviceProperties", i),)

    # The first line of each form's docstring, as Cython writes the binding's signature there.
    PROPS_FORMS = {"return": "hipGetDeviceProperties(int deviceId)\n\nReturns device properties.",
                   "fill": "hipGetDeviceProperties(prop, int deviceId)\n(No short description)"}

    def props_form(self, form):
        """Make this fake's ``hipGetDeviceProperties`` read as hip-python 10's (``"return"``)
        or 6.x-7.x's (``"fill"``): Tack tells them apart by the docstring's signature."""
        def hipGetDeviceProperties(*args):
            if len(args) != (1 if form == "return" else 2):    # as the binding: a TypeError
                raise TypeError(f"hipGetDeviceProperties() takes exactly "
                                f"{1 if form == 'return' else 2} positional arguments "
                                f"({len(args)} given)")
            return self._device_properties(*args)
        hipGetDeviceProperties.__doc__ = self.PROPS_FORMS[form]
        self.hipGetDeviceProperties = hipGetDeviceProperties

    def hipDeviceGetAttribute(self, attr, i):
        values = {"hipDeviceAttributeMaxThreadsPerBlock": 1024, "hipDeviceAttributeMaxBlockDimX": 1024,
                  "hipDeviceAttributeMaxBlockDimY": 1024, "hipDeviceAttributeMaxBlockDimZ": 1024,
                  "hipDeviceAttributeMaxGridDimX": 2**31 - 1, "hipDeviceAttributeMaxGridDimY": 65535,
                  "hipDeviceAttributeMaxGridDimZ": 65535}
        return (self._ok("hipDeviceGetAttribute", attr, i), values[attr])

    def hipSetDevice(self, i):
        return (self._ok("hipSetDevice", i),)

    def hipStreamCreateWithFlags(self, flags):
        return (self._ok("hipStreamCreateWithFlags", flags), Handle("hstream"))

    def hipStreamSynchronize(self, s):
        return (self._ok("hipStreamSynchronize", s),)

    def hipModuleLoadData(self, image):
        return (self._ok("hipModuleLoadData", image), "hmodule")

    def hipModuleGetFunction(self, module, name):
        return (self._ok("hipModuleGetFunction", module, name), name.decode())

    def hipFuncGetAttribute(self, attr, func):
        return (self._ok("hipFuncGetAttribute", attr, func), 1024)

    def hipMalloc(self, n):
        return (self._ok("hipMalloc", n), self.mem.alloc(n))

    def hipFree(self, ptr):
        self.mem.free(ptr)
        return (self._ok("hipFree", ptr),)

    def hipMemcpyHtoDAsync(self, dst, src, n, s):
        self.mem.check(dst, n)
        ctypes.memmove(dst, src, n)
        return (self._ok("hipMemcpyHtoDAsync", dst, src, n, s),)

    def hipMemcpyDtoHAsync(self, dst, src, n, s):
        self.mem.check(src, n)
        ctypes.memmove(dst, src, n)
        return (self._ok("hipMemcpyDtoHAsync", dst, src, n, s),)

    def hipMemsetD8Async(self, ptr, v, n, s):
        ctypes.memset(ptr, v, n)
        return (self._ok("hipMemsetD8Async", ptr, v, n, s),)

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        status = self._ok("hipModuleLaunchKernel", f, (gx, gy, gz), (bx, by, bz), stream, extra)
        if self.fault is not None:          # the kernel faults: the launch itself succeeds
            self.sticky = self.fault
            return (status,)
        self.models[f](read_params(params, self.types[f]), self.mem)
        return (status,)


@pytest.fixture
def fake_hip(monkeypatch):
    fake = FakeHip()
    monkeypatch.setattr(hr, "_driver", lambda: fake)
    hr.reset()
    yield fake
    hr.reset()


@pytest.mark.parametrize("form", ["return", "fill"])
def test_hip_device_properties_in_each_hip_python_form(fake_hip, form):
    """hip-python 10 returns the properties, ``hipGetDeviceProperties(i) -> (err, prop)``;
    hip-python 6.x and 7.x (ROCm 6.2-7.2) fill one given, ``(prop, i) -> (err,)``.  Each form is
    read as its docstring's signature says (the one-argument call on 6.x raised a TypeError,
    which discovery caught: no GPU was found)."""
    fake_hip.props_form(form)
    assert hr.devices() == [("AMD Instinct MI250X (rocm:gfx90a:sramecc+:xnack-)", "hip:0")]
    call = next(c for c in fake_hip.calls if c[0] == "hipGetDeviceProperties")
    assert call == ("hipGetDeviceProperties", 0)


# hip-python releases installed apart (pip install --target DIR/<version> hip-python==<version>),
# by ci/run-tests.sh; each is put first on the path of a pytest run of the real-binding test.
HIP_PYTHONS = os.environ.get("TACK_TEST_HIP_PYTHONS", "")


def _hip_python_dirs():
    if not HIP_PYTHONS or not os.path.isdir(HIP_PYTHONS):
        return []
    return sorted(os.path.join(HIP_PYTHONS, d) for d in os.listdir(HIP_PYTHONS))


@pytest.mark.skipif(not _hip_python_dirs(), reason="TACK_TEST_HIP_PYTHONS names no directory of "
                    "hip-python releases (ci/run-tests.sh installs them)")
@pytest.mark.parametrize("where", _hip_python_dirs() or ["-"], ids=os.path.basename)
def test_each_hip_python_release_takes_what_tack_passes(where):
    """The real-binding test below, run with an older hip-python first on the path (6.2's
    ``hipGetDeviceProperties(prop, deviceId)`` among them): discovery, load, copies and launches
    accepted by that release's own argument conversion."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([where, root]))
    probe = subprocess.run([sys.executable, "-c", "import hip, os; print(os.path.dirname(hip.__file__))"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == os.path.join(where, "hip"), probe.stderr
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"{os.path.abspath(__file__)}::test_hip_python_takes_every_argument_tack_passes"],
                         env=env, capture_output=True, text=True, timeout=600, cwd=root)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


# The sticky codes (``cudalike.DriverApi.sticky``) by the real bindings' own names: each a
# kernel's fault that leaves the context unusable.  HIP numbers its four as CUDA does and has no
# 714-718 (CUDA's stack, instruction, alignment, address-space and PC faults).
CUDA_FAULTS = {700: "CUDA_ERROR_ILLEGAL_ADDRESS", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
               710: "CUDA_ERROR_ASSERT", 714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
               715: "CUDA_ERROR_ILLEGAL_INSTRUCTION", 716: "CUDA_ERROR_MISALIGNED_ADDRESS",
               717: "CUDA_ERROR_INVALID_ADDRESS_SPACE", 718: "CUDA_ERROR_INVALID_PC",
               719: "CUDA_ERROR_LAUNCH_FAILED"}
HIP_FAULTS = {700: "hipErrorIllegalAddress", 702: "hipErrorLaunchTimeOut", 710: "hipErrorAssert",
              719: "hipErrorLaunchFailure"}
_NAMES = """
import json, sys
from tack.backends.cudalike import DriverApi
if sys.argv[1] == "cuda":
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver
    enum = driver.CUresult
else:
    from hip import hip
    enum = hip.hipError_t
names = {int(getattr(enum, n)): n for n in dir(enum) if n.startswith(("CUDA_ERROR", "hipError"))}
print(json.dumps({c: names.get(c) for c in sorted(DriverApi.sticky)}))
print(json.dumps({c: names.get(c) for c in sorted(DriverApi.no_room)}))
"""


@pytest.mark.parametrize("binding", ["cuda"] + ["hip:" + d for d in _hip_python_dirs() or [""]],
                         ids=lambda b: os.path.basename(b) or b)
def test_the_sticky_codes_are_the_bindings_kernel_faults(binding):
    """Every code the runtimes treat as sticky is, in the installed cuda-python and in each
    hip-python release (ci/run-tests.sh installs them), a kernel fault, named as above; HIP
    defines none of CUDA's 714-718, so none of its other errors is taken for sticky.  The one
    out-of-memory code (``DriverApi.no_room``) is each binding's own."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    kind, _, where = binding.partition(":")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (where, root) if p))
    run = subprocess.run([sys.executable, "-c", _NAMES, kind], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    sticky, no_room = ({int(k): v for k, v in json.loads(line).items()}
                       for line in run.stdout.strip().splitlines()[-2:])
    if kind == "cuda":
        assert sticky == CUDA_FAULTS
        assert no_room == {2: "CUDA_ERROR_OUT_OF_MEMORY"}
    else:
        assert {c: n for c, n in sticky.items() if n is not None} == HIP_FAULTS
        assert no_room == {2: "hipErrorOutOfMemory"}


def _hip_saxpy(fake_hip):
    """saxpy built for an MI250X and loaded on the fake HIP: (kernel, artifact, arguments)."""
    from .gpu_tools import tool
    tool("ld.lld")
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    args = (np.float32(2), x, x, out)
    art = artifact(saxpy, args, 1, "rocm:gfx90a:sramecc+:xnack-")
    k = hr.load(art.payload, art.meta, "hip")
    fake_hip.types[art.meta["entry"]] = [".f32"] + [".u64"] * 9
    return k, art, args


def test_a_hip_grid_past_32_bit_work_items_launches_what_hip_takes(fake_hip):
    """HIP's dispatch packet counts a launch's work-items per axis in 32 bits: a grid of more
    launches (2**32 - 1) // block blocks along that axis, and the entry's grid-stride loop covers
    the rest (it was a refusal)."""
    k, art, args = _hip_saxpy(fake_hip)
    fake_hip.models[art.meta["entry"]] = lambda values, mem: None
    hr.launch(k, art.meta, args, (2**32 + 5,), block=256)
    (call,) = [c for c in fake_hip.calls if c[0] == "hipModuleLaunchKernel"]
    assert call[2:4] == ((2**24 - 1, 1, 1), (256, 1, 1))


def test_a_hip_kernel_fault_names_the_kernel_and_loses_the_device(fake_hip):
    """HIP's sticky errors (hipErrorIllegalAddress) as CUDA's: the kernel named, the device no
    longer offered."""
    k, art, args = _hip_saxpy(fake_hip)
    fake_hip.fault = FakeHip.hipError_t.hipErrorIllegalAddress
    with pytest.raises(hr.HIPError) as e:
        hr.launch(k, art.meta, args, (64,))
    assert f"kernel '{art.meta['entry']}' failed on AMD Instinct MI250X" in str(e.value)
    assert "hipErrorIllegalAddress" in str(e.value) and "sticky" in str(e.value)
    assert not hr.available() and hr.devices() == []
    with pytest.raises(hr.HIPUnavailable, match="hipErrorIllegalAddress"):
        hr.get_device("hip:0")


@pytest.mark.parametrize("debug", [False, True])
def test_hip_kernel_descriptor_gives_the_argument_bytes_a_launch_passes(debug):
    """The kernarg size read from a real code object's kernel descriptor (``<entry>.kd``) equals
    LLVM's own metadata (llvm-readelf's ``.kernarg_segment_size``) and what a launch of the same
    debug mode lays out, for saxpy (f32 and pointers) and k_abi (i8, f32 and i64 between
    pointers and extents)."""
    from tack.backends.device_args import argspecs, launch_codes
    from .gpu_tools import tool
    tool("ld.lld")
    readelf = tool("llvm-readelf")
    x = np.zeros(4, np.float32)
    a = np.zeros((4, 5), np.float32)
    cases = ((saxpy, (np.float32(2), x, x, x), 1),
             (k_abi, (a, a, True, np.float32(2), 3, np.zeros(3, np.int32)), 2))
    for kernel, args, grid in cases:
        art = artifact(kernel, args, grid, "rocm:gfx90a", debug=debug)
        got = hr.kernarg_size(art.payload, art.meta["entry"])
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tack-kd-{os.getpid()}.co")
        with open(path, "wb") as f:
            f.write(art.payload)
        try:
            notes = subprocess.run([readelf, "--notes", path], capture_output=True, text=True,
                                   check=True).stdout
        finally:
            os.unlink(path)
        (llvm,) = re.findall(r"\.kernarg_segment_size:\s*(\d+)", notes)
        codes = launch_codes(argspecs(art.meta, RuntimeError), debug)
        assert got == int(llvm) == hr.kernarg_bytes(codes), (kernel, got, llvm)
    assert hr.kernarg_size(art.payload, "no_such_kernel") is None
    assert hr.kernarg_size(b"\x7fELF" + b"\0" * 60, "x") is None
    assert hr.kernarg_size(art.payload[:200], art.meta["entry"]) is None


def test_hip_launch_in_the_other_debug_mode_is_refused(fake_hip):
    """A code object compiled without debug mode launched as a debug launch (one more parameter,
    the error record): refused before anything is copied, naming both sizes (HIP's driver
    cannot tell a kernel's parameters; the descriptor can)."""
    from .gpu_tools import tool
    tool("ld.lld")
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, out), 1, "rocm:gfx90a:sramecc+:xnack-")
    k = hr.load(art.payload, art.meta, "hip")
    assert k.kernarg_size == 80
    fake_hip.calls.clear()
    with pytest.raises(hr.HIPError, match="takes 80 bytes of arguments but a debug launch passes 88"):
        hr.launch(k, art.meta, (np.float32(2), x, x, out), (64,), debug=True)
    assert not [c for c in fake_hip.calls if c[0] in ("hipMalloc", "hipModuleLaunchKernel")]


def test_hip_devices_and_target_id_keys_in_rocm_order(fake_hip):
    """An MI-series GPU reports features (gfx90a:sramecc+:xnack-); its lookup follows ROCm's
    target-id compatibility order: the exact features, then fewer, then the "any" build that
    ``rocm:gfx90a`` (tack.aot, bundles build) makes, so such a bundle matches."""
    assert hr.devices() == [("AMD Instinct MI250X (rocm:gfx90a:sramecc+:xnack-)", "hip:0")]
    names = ["rocm:gfx90a:sramecc+:xnack-", "rocm:gfx90a:sramecc+", "rocm:gfx90a:xnack-",
             "rocm:gfx90a"]
    assert [a for a, _ in hr.candidate_keys()] == names
    assert hr.lookup_keys() == [key_for(a) for a in names] == [k for _, k in hr.site_candidates()]
    assert key_for("rocm:gfx90a") in hr.lookup_keys()
    assert hr.target_id_candidates("gfx1100") == ["gfx1100"]
    t = hr.toolchain_target("hip:0")
    assert t.name == "rocm:gfx90a:sramecc+:xnack-" and t.key == hr.host_key()
    assert hr.get_device("hip").stream == "hstream"


def test_feature_qualified_rocm_names_are_accepted_where_a_user_types_one():
    from tack import archs
    from tack.backends.arch_names import ArchError
    from tack.cache.bundle import site_bundle_arch, site_bundle_name
    assert archs.parse("rocm:gfx942:sramecc+:xnack-") == ("rocm", "gfx942:sramecc+:xnack-")
    assert archs.qualify("rocm:gfx942:sramecc+:xnack-") == "rocm:gfx942:sramecc+:xnack-"
    assert archs.resolve("rocm:gfx942:xnack-") == ("rocm", "gfx942:xnack-")
    with pytest.raises(ArchError):
        archs.resolve("rocm:gfx942:xnack")
    with pytest.raises(ArchError):
        archs.parse("rocm:gfx942::")
    name = site_bundle_name("rocm:gfx942:sramecc+:xnack-", "ab" * 32, "x86_64")
    assert site_bundle_arch(name, "rocm", "x86_64") == ("gfx942:sramecc+:xnack-", "ab" * 6)
    assert gpu_target("rocm:gfx942:sramecc+:xnack-").name == "rocm:gfx942:sramecc+:xnack-"


def test_hip_no_device_status_is_hip_unavailable(fake_hip):
    fake_hip.count_status = FakeHip.hipError_t.hipErrorNoDevice
    assert not hr.available()
    assert "found no AMD GPU" in hr.unavailable_reason() and "6.4.43482" in hr.unavailable_reason()
    with pytest.raises(hr.HIPUnavailable):
        hr.to_device(np.ones(3))


def test_code_object_checks_against_real_toolchain_output():
    from .gpu_tools import tool
    tool("ld.lld")
    x = np.ones(8, np.float32)
    objs = {g: artifact(saxpy, (np.float32(2), x, x, x), 1, f"rocm:{g}").payload
            for g in ("gfx90a", "gfx90a:sramecc+:xnack-", "gfx942", "gfx1100")}
    for g in ("gfx90a", "gfx942", "gfx1100"):
        assert hr.code_object_target(objs[g])[0] == hr.GFX_MACH[g]
        assert hr.code_object_target(objs[g])[1] == {"xnack": None, "sramecc": None} or g == "gfx1100"
    assert hr.code_object_target(objs["gfx90a:sramecc+:xnack-"])[1] == {"xnack": "-", "sramecc": "+"}
    assert hr.code_object_runs_on(objs["gfx90a"], "gfx90a:sramecc-:xnack+") is None     # any
    assert "runs with xnack+" in hr.code_object_runs_on(objs["gfx90a:sramecc+:xnack-"],
                                                        "gfx90a:sramecc+:xnack+")
    assert "code for gfx942; this GPU is gfx90a" in hr.code_object_runs_on(objs["gfx942"], "gfx90a")
    with pytest.raises(hr.HIPError, match="no ELF header"):
        hr.code_object_target(b"// PTX" + bytes(64))


def test_hip_launch_through_the_shared_machinery(fake_hip):
    from .gpu_tools import tool
    tool("ld.lld")
    x = np.arange(300, dtype=np.float32)
    out = np.zeros(300, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, out), 1, "rocm:gfx90a:sramecc+:xnack-")
    with pytest.raises(hr.HIPError, match="code for gfx942"):
        hr.load(artifact(saxpy, (np.float32(2), x, x, out), 1, "rocm:gfx942").payload, art.meta)
    k = hr.load(art.payload, art.meta, "hip")
    assert ("hipModuleLoadData", art.payload) in fake_hip.calls
    entry = art.meta["entry"]
    fake_hip.types[entry] = [".f32", ".u64", ".u64", ".u64", ".u64", ".u64", ".u64", ".u64", ".u64", ".u64"]
    fake_hip.models[entry] = saxpy_model
    hr.launch(k, art.meta, (np.float32(2), x, x, out), (300,))
    np.testing.assert_array_equal(out, 3 * x)
    (launch,) = [c for c in fake_hip.calls if c[0] == "hipModuleLaunchKernel"]
    assert launch[2:5] == ((2, 1, 1), (256, 1, 1), "hstream") and launch[5] is None
    assert fake_hip.mem.blocks == {}
    d = hr.to_device(x)
    assert isinstance(d, hr.HIPArray)
    np.testing.assert_array_equal(d.numpy(), x)
    from tack import dlpack
    from tests.dlpack_producer import Producer
    rocm = Producer(d.ptr, (300,), np.float32, device=(dlpack.ROCM, 0))
    fake_hip.calls.clear()
    hr.launch(k, art.meta, (np.float32(1), rocm, rocm, rocm), (300,))    # by pointer, no copy
    assert not [c for c in fake_hip.calls if c[0].startswith("hipMemcpy")]
    assert rocm.streams == [int(hr.get_device("hip").stream)] * 3
    np.testing.assert_array_equal(d.numpy(), 2 * x)
    with pytest.raises(ValueError, match="lives on cuda:0"):
        hr.to_device(Producer(d.ptr, (300,), np.float32, device=(dlpack.CUDA, 0)))


# ---------------------------------------------------------------------------
# 3. the toolchain's PTX takes what the launch marshals


def entry_params(ptx, entry):
    """The test's own reading of an .entry's parameters: (type, pointer?) each."""
    body = re.search(r"\.entry\s+" + re.escape(entry) + r"\(\s*(.*?)\)", ptx, re.S).group(1)
    return [(re.search(r"\.param\s+(\.\w+)", p).group(1), ".ptr" in p) for p in body.split(",")]


_ABI_PTX = {"ptr": (".u64", True), "i64": (".u64", False), "u64": (".u64", False),
            "i32": (".u32", False), "u32": (".u32", False), "i8": (".u8", False),
            "f32": (".f32", False), "f64": (".f64", False)}


@tack.kernel
def k_scalars(out, b, i32, u32, i64, u64, f32, f64):
    i = tack.tid()
    if b:
        out[i] = f64 + f32 + i32 + u32 + i64 + u64


@pytest.mark.parametrize("debug", [False, True])
def test_toolchain_ptx_entries_take_what_launch_marshals(debug):
    from tack.kernels import contour
    cases = [(k_abi, (np.zeros((4, 5), np.float32), np.zeros((8, 5), np.float32)[::2], True,
                      np.float32(2), 3, np.ones(3, np.int32)), 2),
             (k_scalars, (np.zeros(4), True, np.int32(1), np.uint32(2), 3, np.uint64(4),
                          np.float32(5), 6.0), 1),
             (saxpy, (np.float32(2),) + (np.zeros(4, np.float32),) * 3, 1)]
    cases += list(contour.tack_warm())
    for kernel, args, grid in cases:
        art = artifact(kernel, args, grid, "cuda:sm_80", debug)
        ptx = art.payload.decode()
        specs = cr.argspecs(art.meta)
        marshalled = [_ABI_PTX[c] for c in launch_codes(specs, debug)]
        assert entry_params(ptx, art.entry) == marshalled, kernel.__qualname__
        assert cr.ptx_entry_params(ptx, art.entry) == marshalled
        # and the values a launch packs are exactly that many, of those widths
        address, holder = pack_params(launch_codes(specs, debug), [0] * len(marshalled))
        sizes = [ctypes.sizeof(c) for c in holder[1]]
        assert sizes == [{".u64": 8, ".u32": 4, ".u8": 1, ".f32": 4, ".f64": 8}[t] for t, _ in marshalled]


# ---------------------------------------------------------------------------
# 4. the real bindings take what Tack passes them
#
# cuda-python and hip-python convert every argument before they load the driver library, so
# with the library absent a call Tack makes ends in the missing library (DynamicLibNotFoundError,
# "failed to dlopen") when the binding takes its arguments, and in a TypeError when it does not.
# Below, every driver call of a launch goes first to the real binding, with the driver's handles
# as the binding's own types (CUstream, CUmodule, hipStream_t...), then to the fake driver,
# which runs it.  Only possible while the driver library is missing: on a GPU machine these
# tests have nothing to check and skip.


class RealBindingCheck:
    """The fake driver ``fake`` seen through the real binding module ``real``: each call Tack
    makes is made on ``real`` first and must end in the missing library (``missing(e)``); the
    handles ``wrap`` names come back as ``real``'s own types; ``enums`` are ``real``'s."""

    def __init__(self, fake, real, missing, wrap, enums, prefix, types=()):
        self.fake, self.real, self.missing = fake, real, missing
        self.types = set(types)             # the binding's own classes Tack makes (hipDeviceProp_t)
        self.wrap, self.enums, self.prefix = wrap, enums, prefix
        self.handles = {}                   # (type, int) of a real handle -> the fake's handle
        self.checked = set()
        self.next = 0x7000

    def _to_fake(self, a):
        if isinstance(a, enum.Enum) or type(a) in {getattr(self.real, e) for e in self.enums}:
            return a.name
        if isinstance(a, list):
            return [self._to_fake(x) for x in a]
        key = (type(a), self._int(a))
        return self.handles.get(key, a)

    @staticmethod
    def _int(a):
        try:
            return int(a) if not isinstance(a, (bool, bytes, bytearray, str, float, list)) else None
        except (TypeError, ValueError):
            return None

    def _to_real(self, name, value):
        make = self.wrap.get(name)
        if make is None:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            handle = make(value)                # a pointer: its own value
        else:
            self.next += 16
            handle = make(self.next)
        self.handles[(type(handle), int(handle))] = value
        return handle

    def __getattr__(self, name):
        if name in self.enums or name in self.types:
            return getattr(self.real, name)
        value = getattr(self.fake, name)
        if not (name.startswith(self.prefix) and callable(value)):
            return value

        def call(*args):
            try:
                getattr(self.real, name)(*args)
            except Exception as e:          # noqa: BLE001 - sorted below
                if not self.missing(e):
                    raise AssertionError(f"the real binding refuses Tack's arguments to {name}"
                                         f"{args!r}: {type(e).__name__}: {e}") from None
            else:
                raise AssertionError(f"{name} answered: a driver library is loaded here")
            self.checked.add(name)
            result = value(*[a if type(a) in real_types else self._to_fake(a) for a in args])
            if len(result) == 2:
                return (result[0], self._to_real(name, result[1]))
            return result
        real_types = {getattr(self.real, t) for t in self.types}
        call.__doc__ = getattr(self.real, name).__doc__     # the binding's signature, as Tack reads it
        return call


def tack_calls(module, prefix):
    """The driver functions a runtime module calls (``call("<prefix>...")`` in its source)."""
    src = open(module.__file__).read()
    return set(re.findall(r'call\(\s*"(' + prefix + r'\w+)"', src))


def _cuda_missing(e):
    return type(e).__name__ == "DynamicLibNotFoundError"


@pytest.fixture
def real_cuda(monkeypatch):
    if not has_module("cuda"):
        pytest.skip("cuda-python is not installed (pip install cuda-python)")
    drv = cr._import_driver()
    try:
        drv.cuInit(0)
    except Exception as e:                  # noqa: BLE001
        if not _cuda_missing(e):
            raise
    else:
        pytest.skip("NVIDIA's driver is installed here: the binding would call it")
    wrap = {"cuDeviceGet": drv.CUdevice, "cuDevicePrimaryCtxRetain": drv.CUcontext,
            "cuStreamCreate": drv.CUstream, "cuModuleLoadDataEx": drv.CUmodule,
            "cuModuleGetFunction": drv.CUfunction, "cuMemAlloc": drv.CUdeviceptr}
    checked = RealBindingCheck(FakeCuda(), drv, _cuda_missing, wrap,
                               {"CUjit_option", "CUdevice_attribute", "CUfunction_attribute"}, "cu")
    monkeypatch.setattr(cr, "_driver", lambda: checked)
    cr.reset()
    yield checked
    cr.reset()


def test_cuda_python_takes_every_argument_tack_passes(real_cuda):
    """Device discovery, PTX load with JIT log bytearrays, copies, a debug launch (memset, params
    by address), device arrays, a __cuda_array_interface__ stream and a DLPack stream (int() of
    the binding's CUstream): each call accepted by cuda-python's own argument conversion."""
    from tack import dlpack
    from tests.dlpack_producer import Producer
    fake = real_cuda.fake
    dev = cr.get_device()
    assert isinstance(dev.stream, cr._import_driver().CUstream) and dev.name == "NVIDIA H200"
    a = np.zeros((4, 5), np.float32)
    b = np.arange(80, dtype=np.float32).reshape(16, 5)[::4]
    c = np.array([7, 0, 0], np.int32)
    args = (a, b, True, np.float32(2), 3, c)
    art = artifact(k_abi, args, 2, debug=True)
    k = cr.load(art.payload, art.meta)
    fake.models[art.meta["entry"]] = lambda v, m: k_abi_model(v, m, True)
    err = cr.launch(k, art.meta, args, (4, 5), debug=True)
    assert not err.any()
    np.testing.assert_array_equal(a, b * 2 + 3 + 7)
    x = np.arange(64, dtype=np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, x), 1)
    k = cr.load(art.payload, art.meta)
    fake.models[art.meta["entry"]] = saxpy_model
    d = cr.to_device(x)
    cr.launch(k, art.meta, (np.float32(2), d, d, d), (64,))
    np.testing.assert_array_equal(d.numpy(), 3 * x)
    ptr = fake.mem.alloc(x.nbytes)
    ctypes.memmove(ptr, x.ctypes.data, x.nbytes)
    cr.launch(k, art.meta, (np.float32(1), ForeignArray(ptr, (64,), "<f4", stream=77), x,
                            Producer(ptr, (64,), np.float32, device=(dlpack.CUDA, 0))), (64,))
    np.testing.assert_array_equal(fake.mem.view(ptr, np.float32, (64,), (1,)), 2 * x)
    del d
    gc.collect()
    assert tack_calls(cr, "cu") <= real_cuda.checked, tack_calls(cr, "cu") - real_cuda.checked


def _hip_missing(e):
    return isinstance(e, RuntimeError) and "failed to dlopen" in str(e)


class RealProps:
    """hip-python's own ``hipDeviceProp_t`` over memory of ours, its fields found through the
    binding's own accessors (a byte set at each offset until the field reads it)."""

    def __init__(self, hip, **fields):
        size = hip.hipDeviceProp_t().c_sizeof()
        self.mem = ctypes.create_string_buffer(size)
        self.props = hip.hipDeviceProp_t.fromObj(ctypes.addressof(self.mem))
        for field, text in fields.items():
            at = next(o for o in range(size) if self._reads(field, o))
            raw = text.encode()
            ctypes.memmove(ctypes.addressof(self.mem) + at, raw, len(raw))

    def _reads(self, field, o):
        self.mem[o] = b"x"
        seen = getattr(self.props, field)
        self.mem[o] = b"\0"
        return seen in ("x", b"x")


@pytest.fixture
def real_hip(monkeypatch):
    if not has_module("hip"):
        pytest.skip("hip-python is not installed (pip install hip-python)")
    drv = hr._import_driver()
    try:
        drv.hipGetDeviceCount()
    except Exception as e:                  # noqa: BLE001
        if not _hip_missing(e):
            raise
    else:
        pytest.skip("a HIP runtime library loads here: the binding would call it")
    fake = FakeHip()
    held = RealProps(drv, gcnArchName=fake.arch, name="AMD Instinct MI250X")
    fake.Props = lambda arch: held.props
    fake.hipGetDeviceProperties = fake._device_properties   # either form: the real binding checks
    wrap = {"hipStreamCreateWithFlags": drv.hipStream_t.fromObj,
            "hipModuleLoadData": drv.ihipModule_t.fromObj,
            "hipModuleGetFunction": drv.ihipModuleSymbol_t.fromObj}
    checked = RealBindingCheck(fake, drv, _hip_missing, wrap,
                               {"hipDeviceAttribute_t", "hipFunction_attribute"}, "hip",
                               types=("hipDeviceProp_t",))
    monkeypatch.setattr(hr, "_driver", lambda: checked)
    hr.reset()
    yield checked
    hr.reset()


def test_hip_python_takes_every_argument_tack_passes(real_hip):
    """Discovery reads hip-python's real hipDeviceProp_t (its gcnArchName and name are str);
    load, copies, a launch with params by address, device arrays and a DLPack stream (int() of
    hipStream_t): each call accepted by hip-python's own argument conversion."""
    from tack import dlpack
    from tests.dlpack_producer import Producer
    from .gpu_tools import tool
    tool("ld.lld")
    fake = real_hip.fake
    assert hr.devices() == [("AMD Instinct MI250X (rocm:gfx90a:sramecc+:xnack-)", "hip:0")]
    x = np.arange(300, dtype=np.float32)
    out = np.zeros(300, np.float32)
    art = artifact(saxpy, (np.float32(2), x, x, out), 1, "rocm:gfx90a:sramecc+:xnack-")
    k = hr.load(art.payload, art.meta, "hip")
    entry = art.meta["entry"]
    fake.types[entry] = [".f32"] + [".u64"] * 9
    fake.models[entry] = saxpy_model
    hr.launch(k, art.meta, (np.float32(2), x, x, out), (300,))
    np.testing.assert_array_equal(out, 3 * x)
    d = hr.to_device(x)
    rocm = Producer(d.ptr, (300,), np.float32, device=(dlpack.ROCM, 0))
    hr.launch(k, art.meta, (np.float32(1), rocm, rocm, rocm), (300,))
    np.testing.assert_array_equal(d.numpy(), 2 * x)
    assert rocm.streams == [int(hr.get_device("hip").stream)] * 3
    del d
    gc.collect()
    a = np.zeros((4, 5), np.float32)                        # a debug launch: the record zeroed
    b = np.arange(80, dtype=np.float32).reshape(16, 5)[::4]
    args = (a, b, True, np.float32(2), 3, np.array([7, 0, 0], np.int32))
    art = artifact(k_abi, args, 2, "rocm:gfx90a:sramecc+:xnack-", debug=True)
    k = hr.load(art.payload, art.meta, "hip")
    fake.types[art.meta["entry"]] = [".u64"] * 8 + [".u8", ".f32"] + [".u64"] * 7
    fake.models[art.meta["entry"]] = lambda v, m: k_abi_model(v, m, True)
    assert not hr.launch(k, art.meta, args, (4, 5), debug=True).any()
    np.testing.assert_array_equal(a, b * 2 + 3 + 7)
    fake.count_status = FakeHip.hipError_t.hipErrorNoDevice    # no GPU: the runtime's version said
    hr.reset()
    assert "6.4.43482" in hr.unavailable_reason()
    assert tack_calls(hr, "hip") <= real_hip.checked, tack_calls(hr, "hip") - real_hip.checked


def test_device_array_on_a_fresh_thread_makes_its_context_current(fake_cuda):
    """numpy(), free() and a del of a CUDA array on a thread that never made a context current:
    the driver (the fake as the real one: a current context per thread) would refuse the copy
    and the free (a free failing silently in __del__ leaks device memory)."""
    x = np.arange(300, dtype=np.float32)
    d = cr.to_device(x)
    e = cr.to_device(x + 1)
    ptr_e = e.ptr
    got, errors = {}, []

    def on_thread():
        try:
            got["numpy"] = d.numpy()
            d.free()
            got["del"] = e
        except Exception as exc:    # noqa: BLE001 - reported below
            errors.append(exc)
    t = threading.Thread(target=on_thread)
    t.start()
    t.join()
    assert not errors, errors
    np.testing.assert_array_equal(got["numpy"], x)
    assert d.ptr in fake_cuda.mem.freed and d.ptr not in fake_cuda.mem.blocks
    fake_cuda.calls.clear()
    holder = [got.pop("del")]
    del e
    t = threading.Thread(target=holder.clear)           # the last reference dies on the thread
    t.start()
    t.join()
    frees = [c for c in fake_cuda.calls if c[0] == "cuMemFree"]
    assert frees == [("cuMemFree", ptr_e)] and ptr_e in fake_cuda.mem.freed
    i = fake_cuda.calls.index(frees[0])
    assert any(c[0] == "cuCtxSetCurrent" for c in fake_cuda.calls[:i]), fake_cuda.calls


def test_an_interface_naming_no_stream_is_ordered_after_the_legacy_stream(fake_cuda):
    """PyTorch's __cuda_array_interface__ is version 2, with no 'stream': its producer's work is
    on the legacy default stream, which Tack's non-blocking stream does not wait for.  Tack waits
    for the legacy stream (CU_STREAM_LEGACY, 1) before using it; a v3 interface's stream None
    means the producer needs no wait, and none is made."""
    x, art, k, ptr = saxpy_over_foreign_memory(fake_cuda)
    torch_like = ForeignArray(ptr, (64,), "<f4")
    cai = torch_like.__cuda_array_interface__
    del cai["stream"]
    cai["version"] = 2
    out = np.zeros(64, np.float32)
    fake_cuda.calls.clear()
    cr.launch(k, art.meta, (np.float32(3), torch_like, torch_like, out), (64,))
    np.testing.assert_array_equal(out, 4 * x)
    names = fake_cuda.names()
    assert ("cuStreamSynchronize", 1) in fake_cuda.calls
    assert names.index("cuStreamSynchronize") < names.index("cuLaunchKernel")
    fake_cuda.calls.clear()
    cr.launch(k, art.meta, (np.float32(3), ForeignArray(ptr, (64,), "<f4"), torch_like, out), (64,))
    assert sum(1 for c in fake_cuda.calls if c == ("cuStreamSynchronize", 1)) == 1


def test_an_entry_the_driver_has_no_memory_to_load_is_kept(fake_cuda, tmp_path, monkeypatch):
    """A stored entry that the driver refuses for want of memory (CUDA_ERROR_OUT_OF_MEMORY at
    cuModuleLoadDataEx, SASS and PTX alike) is not at fault: the launch says the driver's error,
    no file of the cache directory is removed, and once memory is back the next process loads
    the stored cubin.  (Such an entry was counted damaged and deleted.)"""
    from tack.backends.gpu import unpack_cuda
    monkeypatch.setattr(cr, "_refused_by", {})
    x = np.zeros(64, np.float32)
    sass = sass_artifacts(fake_cuda, saxpy, (np.float32(2), x, x, x), ("sm_90",))
    cache = tmp_path / "oom"
    tack.aot.save(list(sass.values()), str(cache))
    before = sorted(p for p in cache.rglob("*") if p.is_file())
    monkeypatch.setenv("TACK_CACHE_DIR", str(cache))
    tack.cache._reset_for_tests()
    saxpy._variants.clear()
    fake_cuda.fail["cuModuleLoadDataEx"] = FakeCuda.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    xs = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    with pytest.raises(cr.CUDAError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        tack.launch(saxpy, 64, (np.float32(2), xs, xs, out), device="cuda")
    assert sorted(p for p in cache.rglob("*") if p.is_file()) == before
    assert tack.cache.stats()["damaged"] == 0
    assert cr._refused_by == {}                      # nor is the SASS taken for refused
    fake_cuda.fail.clear()
    fake_cuda.calls.clear()
    launch_from([], tmp_path, monkeypatch, "oom")   # the next process, memory back
    assert loaded_images(fake_cuda) == [unpack_cuda(sass["sm_90"].payload)[1]]
