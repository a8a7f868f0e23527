"""The Level Zero runtime side (tack/backends/level_zero_runtime.py) without a GPU.

* The real loader, in subprocesses (a crash or a hang must fail the test, not the run):
  without it, the documented error; with Debian's ``libze1`` and no GPU, ``zeInit`` fails and
  the same process goes on to raise ``LevelZeroUnavailable`` (a ``zeDriverGet`` after the failed
  ``zeInit`` would crash it: shown by a control).
* The driver simulated at the boundary only: ``FakeZe`` stands in for the ctypes library (the
  object whose ``zeXxx`` functions the runtime calls, with the same arguments: ctypes
  structures passed by reference, handle arrays, raw parameter bytes).  It keeps memory as real
  host memory and runs a "launch" by calling a Python function on the parameters it was given,
  so marshalling is checked by its outcome.
* The ctypes structures' layouts against ze_api.h (Debian's libze-dev, headers v1.4), compiled
  with the C compiler, and against the x86-64 offsets written out here.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from tests.dlpack_producer import Producer

from tack.backends import level_zero_runtime as zrt
from tack.backends.gpu import key_for, pack_level_zero, unpack_level_zero

TIMEOUT = 120
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = "/usr/include/level_zero/ze_api.h"


def _run(code, env=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=TIMEOUT, env=e)


def _loader_present() -> bool:
    try:
        ctypes.CDLL(zrt.LOADER)
        return True
    except OSError:
        return False


def _need_loader():
    if not _loader_present():
        if os.environ.get("TACK_REQUIRE_LEVEL_ZERO_LOADER"):
            pytest.fail(f"{zrt.LOADER} is not installed (apt-get install libze1)")
        pytest.skip(f"{zrt.LOADER} is not installed (apt-get install libze1)")


PROBE = """
    from tack.backends import level_zero_runtime as z
    print(f"available={z.available()}")
    print("reason", z.unavailable_reason())
    for call in (z.get_device, z.toolchain_target, lambda: z.load(b"", {"entry": "k", "argspec": []})):
        try:
            call()
        except z.LevelZeroUnavailable as e:
            print("raised", type(e).__name__, isinstance(e, RuntimeError))
    print("keys", z.candidate_keys())
    print("done")
"""


def test_without_the_loader_the_error_names_what_to_install(tmp_path):
    r = _run(PROBE, {"TACK_LEVEL_ZERO_LOADER": str(tmp_path / "libze_loader.so.1")})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "available=False" in out and out.count("raised LevelZeroUnavailable True") == 3, out
    assert "the loader libze_loader.so.1 does not load" in out
    assert "libze1" in out and "intel-level-zero-gpu" in out
    assert f"keys [('spirv:generic', '{key_for('spirv:generic')}')]" in out
    assert out.rstrip().endswith("done")


def test_loader_without_a_gpu_fails_in_zeinit_without_crashing():
    """Debian's libze1 (and the driver, where installed) on a machine with no Intel GPU: zeInit
    returns ZE_RESULT_ERROR_UNINITIALIZED; the runtime stops there, raises, and the process
    lives on to print 'done' and exit 0."""
    _need_loader()
    r = _run(PROBE)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    if "available=True" in r.stdout:
        pytest.skip("this machine has a Level Zero GPU")
    assert "zeInit failed with ZE_RESULT_ERROR_UNINITIALIZED" in r.stdout, r.stdout
    assert r.stdout.count("raised LevelZeroUnavailable True") == 3
    assert r.stdout.rstrip().endswith("done")
    main = subprocess.run([sys.executable, "-m", "tack.backends.level_zero_runtime"],
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert main.returncode == 1 and "no device: Level Zero is not available" in main.stdout


def test_control_zedriverget_after_a_failed_zeinit_crashes_the_process():
    """Why the runtime calls nothing after a failed zeInit: this loader segfaults (SIGSEGV)."""
    _need_loader()
    r = _run("""
        import ctypes
        lib = ctypes.CDLL("libze_loader.so.1")
        r = lib.zeInit(0) & 0xffffffff
        print(hex(r), flush=True)
        if r == 0:
            raise SystemExit(3)
        n = ctypes.c_uint32(0)
        lib.zeDriverGet(ctypes.byref(n), None)
        print("survived", flush=True)
    """)
    if r.returncode == 3:
        pytest.skip("zeInit succeeds here (a Level Zero GPU)")
    assert "0x78000001" in r.stdout
    if r.returncode == 0:
        pytest.xfail("this loader survives zeDriverGet after a failed zeInit (Debian 12's does not)")
    assert r.returncode < 0 and "survived" not in r.stdout, (r.returncode, r.stdout)


def test_import_loads_nothing():
    r = _run("""
        import sys
        from tack.backends import level_zero_runtime
        print(sorted(m for m in sys.modules if m.startswith(("llvmlite", "pyopencl", "tack.codegen"))))
    """)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


# ---------------------------------------------------------------------------
# The driver simulated at the boundary


def _obj(ref):
    """What a ctypes.byref(...) argument points at (or the argument itself)."""
    return getattr(ref, "_obj", ref)


def _handle(h):
    return h.value if isinstance(h, ctypes.c_void_p) else h


class FakeZe:
    """Stands in for libze_loader: one driver with one GPU (PCI id ``device_id``).

    ``native_result``/``spirv_result``: what zeModuleCreate returns for each format.
    ``kernel_fn(params, group_size, group_count, max_group_count)``: run at execution of a
    launch, with the raw bytes of each parameter as set by zeKernelSetArgumentValue, and the
    device's work-groups per axis.
    """

    def __init__(self, device_id=0x0BD5, init_result=0, native_result=0, spirv_result=0,
                 num_args=None, kernel_fn=None, build_log=b"", driver_native=b"ZEBIN-FROM-DRIVER",
                 extensions=(), kernel_max_group=None, fp64flags=0x3F, max_group_count=2**31 - 1):
        self.device_id = device_id
        self.max_group_count = max_group_count      # the device's work-groups per axis
        self.fp64flags = fp64flags      # the device's module properties (0: no float64)
        self.extensions = extensions    # the driver's extension names
        self.kernel_max_group = kernel_max_group    # what the kernel's extension struct says
        self.chained = []               # stype of each struct chained to zeKernelGetProperties
        self.init_result = init_result
        self.native_result, self.spirv_result = native_result, spirv_result
        self.num_args, self.kernel_fn = num_args, kernel_fn
        self.build_log, self.driver_native = build_log, driver_native
        self.calls = []                 # (function name, ...) in order
        self.module_descs = []          # (format, input bytes, build flags) of each zeModuleCreate
        self.memory = {}                # address -> ctypes buffer (live allocations)
        self.params = {}
        self.group = None
        self.recorded = []              # commands appended since the last reset
        self.launches = []              # (group size, group count, params) of executed launches
        self.recording = None           # the thread between a list's reset and its execution
        self.overlaps = []              # a reset while another thread was recording into the list
        self.copy_delay = 0.0           # seconds each appended copy takes (to widen a race)
        self._next = 0x1000

    def _new(self):
        self._next += 0x10
        return self._next

    def __getattr__(self, name):
        if name.startswith("ze"):
            raise AttributeError(f"FakeZe has no {name}")
        raise AttributeError(name)

    def _record(self, name, *rest):
        self.calls.append((name,) + rest)

    # -- init and devices
    def zeInit(self, flags):
        self._record("zeInit")
        return self.init_result

    def zeDriverGet(self, count, drivers):
        self._record("zeDriverGet")
        assert self.init_result == 0, "zeDriverGet after a failed zeInit (crashes the real loader)"
        _obj(count).value = 1
        if drivers is not None:
            drivers[0] = 0xD0
        return 0

    def zeDeviceGet(self, driver, count, devices):
        self._record("zeDeviceGet")
        assert _handle(driver) == 0xD0
        _obj(count).value = 2
        if devices is not None:
            devices[0], devices[1] = 0xC0, 0xC1
        return 0

    def zeDeviceGetProperties(self, dev, props):
        p = _obj(props)
        assert p.stype == zrt.ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES
        if _handle(dev) == 0xC0:          # a CPU device first: not listed
            p.type, p.vendorId, p.deviceId, p.name = 2, 0x8086, 0, b"Some CPU"
        else:
            p.type, p.vendorId, p.deviceId = zrt.ZE_DEVICE_TYPE_GPU, 0x8086, self.device_id
            p.name = b"Intel(R) Data Center GPU Max 1550"
        return 0

    def zeDeviceGetModuleProperties(self, dev, props):
        p = _obj(props)
        assert p.stype == zrt.ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES
        p.spirvVersionSupported, p.fp32flags, p.fp64flags = 0x10004, 0x3F, self.fp64flags
        return 0

    def zeDeviceGetComputeProperties(self, dev, props):
        p = _obj(props)
        p.maxTotalGroupSize = 1024
        p.maxGroupSizeX = p.maxGroupSizeY = p.maxGroupSizeZ = 1024
        p.maxGroupCountX = p.maxGroupCountY = p.maxGroupCountZ = self.max_group_count
        return 0

    def zeDeviceGetCommandQueueGroupProperties(self, dev, count, props):
        _obj(count).value = 2
        if props is not None:
            props[0].flags = 2                                   # copy only
            props[1].flags = zrt.ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE | 2
        return 0

    def zeContextCreate(self, driver, desc, ctx):
        _obj(ctx).value = 0xCC
        return 0

    def zeCommandQueueCreate(self, ctx, dev, desc, queue):
        self._record("zeCommandQueueCreate", _obj(desc).ordinal)
        _obj(queue).value = 0xCD
        return 0

    def zeCommandListCreate(self, ctx, dev, desc, clist):
        self._record("zeCommandListCreate", _obj(desc).commandQueueGroupOrdinal)
        _obj(clist).value = 0xCE
        return 0

    # -- modules
    def zeModuleCreate(self, ctx, dev, desc, module, log):
        d = _obj(desc)
        assert d.stype == zrt.ZE_STRUCTURE_TYPE_MODULE_DESC and not d.pConstants
        data = ctypes.string_at(d.pInputModule, d.inputSize)
        self.module_descs.append((d.format, data, d.pBuildFlags))
        self._record("zeModuleCreate", d.format)
        _obj(log).value = 0xB0 + len(self.module_descs)
        r = self.native_result if d.format == zrt.ZE_MODULE_FORMAT_NATIVE else self.spirv_result
        if r == 0:
            _obj(module).value = self._new()
        return r

    def zeModuleBuildLogGetString(self, log, size, buf):
        _obj(size).value = len(self.build_log) + 1
        if buf is not None:
            buf.value = self.build_log
        return 0

    def zeModuleBuildLogDestroy(self, log):
        self._record("zeModuleBuildLogDestroy")
        return 0

    def zeModuleGetNativeBinary(self, module, size, buf):
        self._record("zeModuleGetNativeBinary")
        _obj(size).value = len(self.driver_native)
        if buf is not None:
            ctypes.memmove(buf, self.driver_native, len(self.driver_native))
        return 0

    def zeModuleDestroy(self, module):
        return 0

    def zeKernelCreate(self, module, desc, kernel):
        name = _obj(desc).pKernelName
        self._record("zeKernelCreate", name)
        if name == b"missing":
            return zrt.ZE_RESULT_ERROR_INVALID_KERNEL_NAME
        _obj(kernel).value = 0xE0
        return 0

    def zeKernelGetProperties(self, kernel, props):
        p = _obj(props)
        p.numKernelArgs = self.num_args
        if p.pNext:         # as a driver with the extension fills it (one without never sees it)
            ext = zrt.ze_kernel_max_group_size_properties_ext_t.from_address(p.pNext)
            self.chained.append(ext.stype)
            assert zrt.KERNEL_MAX_GROUP_SIZE_EXTENSION in self.extensions
            if ext.stype == zrt.KERNEL_MAX_GROUP_SIZE_STYPE:
                ext.maxGroupSize = self.kernel_max_group
        return 0

    def zeDriverGetExtensionProperties(self, driver, count, props):
        n = _obj(count)
        if props is not None:
            for i, name in enumerate(self.extensions[:n.value]):
                props[i].name, props[i].version = name, 0x10000
        n.value = len(self.extensions)
        return 0

    # -- launches
    def zeKernelSetGroupSize(self, kernel, x, y, z):
        self.group = (x, y, z)
        return 0

    def zeKernelSetArgumentValue(self, kernel, index, size, value):
        size = size.value if isinstance(size, ctypes.c_size_t) else size
        self.params[index] = ctypes.string_at(value, size)
        return 0

    def zeCommandListReset(self, clist):
        me = threading.get_ident()
        if self.recording not in (None, me):
            self.overlaps.append(("reset while recording", self.recording, me))
        self.recording = me
        self.recorded = []
        return 0

    def zeCommandListAppendLaunchKernel(self, clist, kernel, count, event, nwait, waits):
        c = _obj(count)
        self.recorded.append(("launch", self.group, (c.groupCountX, c.groupCountY, c.groupCountZ),
                              dict(self.params)))
        return 0

    def zeCommandListAppendMemoryCopy(self, clist, dst, src, size, event, nwait, waits):
        if self.copy_delay:
            time.sleep(self.copy_delay)
        self.recorded.append(("copy", _handle(dst), _handle(src), size.value))
        return 0

    def zeCommandListClose(self, clist):
        return 0

    def zeCommandQueueExecuteCommandLists(self, queue, n, lists, fence):
        assert n == 1 and lists[0] == 0xCE
        for cmd in self.recorded:
            if cmd[0] == "copy":
                ctypes.memmove(cmd[1], cmd[2], cmd[3])
            else:
                self.launches.append(cmd[1:])
                params = [cmd[3][i] for i in range(len(cmd[3]))]
                if self.kernel_fn:
                    self.kernel_fn(params, cmd[1], cmd[2], self.max_group_count)
        return 0

    def zeCommandQueueSynchronize(self, queue, timeout):
        assert timeout.value == 2**64 - 1
        self.recording = None
        return 0

    def _alloc(self, size):
        buf = ctypes.create_string_buffer(max(1, size.value))
        self.memory[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def zeMemAllocShared(self, ctx, ddesc, hdesc, size, align, dev, pptr):
        _obj(pptr).value = self._alloc(size)
        self._record("zeMemAllocShared", size.value)
        return 0

    def zeMemAllocDevice(self, ctx, ddesc, size, align, dev, pptr):
        _obj(pptr).value = self._alloc(size)
        self._record("zeMemAllocDevice", size.value)
        return 0

    def zeMemFree(self, ctx, ptr):
        del self.memory[_handle(ptr)]
        return 0


@pytest.fixture
def fake(monkeypatch):
    """Install a FakeZe as the loader; ``fake(**options)`` makes and installs one."""
    made = []

    def install(**options):
        f = FakeZe(**options)
        monkeypatch.setattr(zrt, "_open_library", lambda: f)
        zrt._reset()
        made.append(f)
        return f
    yield install
    zrt._reset()


SPIRV = bytes.fromhex("03022307" "00020100" "00000000" "05000000" "00000000") + \
    b"".join(int(w).to_bytes(4, "little") for w in (
        (3 << 16) | 14, 2, 2,                       # OpMemoryModel Physical64 OpenCL
        (4 << 16) | 15, 6, 1, 0x6B,                 # OpEntryPoint Kernel %1 "k"
        (5 << 16) | 54, 1, 2, 0, 3,                 # OpFunction
        (1 << 16) | 56))                            # OpFunctionEnd
NATIVE = b"\x7fELF-native-zebin-for-pvc"
SAXPY_META = {"entry": "tack_saxpy_entry",
              "argspec": [["float32"], ["array:float32:1:C:r"], ["array:float32:1:C:r"],
                          ["array:float32:1:C:w"]]}


def _f32(p):
    return np.frombuffer(p, "<f4")[0]


def _i64(p):
    return int(np.frombuffer(p, "<i8")[0])


def _u64(p):
    return int(np.frombuffer(p, "<u8")[0])


def saxpy_fn(params, group, count, max_count):
    """What the saxpy kernel does with the parameters of the ABI: a, x, n, y, n, out, n, n0..n2."""
    a, x, nx, y, ny, out, nout, n0, n1, n2 = params
    n = _i64(n0)
    assert (_i64(n1), _i64(n2)) == (1, 1) and _i64(nx) == _i64(ny) == _i64(nout) == n
    # every point has a work-item, unless the count is the device's limit: then the entry's
    # grid-stride loop covers the rest
    assert group[0] * count[0] >= n or count[0] == max_count
    xs = np.ctypeslib.as_array((ctypes.c_float * n).from_address(_u64(x)))
    ys = np.ctypeslib.as_array((ctypes.c_float * n).from_address(_u64(y)))
    os_ = np.ctypeslib.as_array((ctypes.c_float * n).from_address(_u64(out)))
    os_[:] = _f32(a) * xs + ys


def test_zeinit_failure_stops_before_zedriverget(fake):
    f = fake(init_result=zrt.ZE_RESULT_ERROR_UNINITIALIZED)
    assert not zrt.available() and zrt.devices() == []
    with pytest.raises(zrt.LevelZeroUnavailable, match="zeInit failed with ZE_RESULT_ERROR_UNINITIALIZED"):
        zrt.get_device()
    assert [c[0] for c in f.calls] == ["zeInit"]          # once per process, nothing after it


def test_devices_keys_and_toolchain_target(fake):
    f = fake(device_id=0x0BD5)
    assert zrt.devices() == [("Intel(R) Data Center GPU Max 1550", "level_zero:0")]  # the CPU is not
    assert zrt.toolchain_target() == zrt.toolchain_target("level_zero:0") == "level_zero:pvc"
    keys = zrt.candidate_keys()
    assert keys == [("level_zero:pvc", key_for("level_zero:pvc")),
                    ("level_zero:xe-hpc", key_for("level_zero:xe-hpc")),
                    ("spirv:generic", key_for("spirv:generic"))]
    assert zrt.lookup_keys() == [k for _, k in keys] and zrt.site_candidates() == keys
    assert zrt.host_key() == key_for("level_zero:pvc")
    # the compute queue group (ordinal 1 here, not the copy-only 0) for the queue and the list
    assert ("zeCommandQueueCreate", 1) in f.calls and ("zeCommandListCreate", 1) in f.calls
    with pytest.raises(ValueError, match="no Level Zero device level_zero:3"):
        zrt.get_device("level_zero:3")
    with pytest.raises(ValueError, match="not a Level Zero device name"):
        zrt.get_device("cuda:0")


def test_unknown_device_gets_spirv_only(fake):
    fake(device_id=0x1234)
    assert zrt.toolchain_target() == "spirv:generic"
    assert zrt.candidate_keys() == [("spirv:generic", key_for("spirv:generic"))]


@pytest.mark.parametrize("device_id, keys", [
    (0x1234, ["spirv:generic-fp32"]),                                   # unknown to Tack
    (0x56A0, ["level_zero:acm-g10", "level_zero:dg2", "level_zero:xe-hpg", "spirv:generic-fp32"])])
def test_a_device_without_float64_gets_spirv_without_it(fake, device_id, keys):
    """An Intel GPU whose module properties say it has no float64 (fp64flags 0) is compiled for
    spirv:generic-fp32 where Tack has no native name for it, and looks that SPIR-V up after
    its native code: a float64 kernel is refused at compile time naming float64, instead of
    SPIR-V with the Float64 capability that its driver would refuse."""
    fake(device_id=device_id, fp64flags=0)
    assert [a for a, _ in zrt.candidate_keys()] == keys
    assert zrt.candidate_keys()[-1][1] == key_for("spirv:generic-fp32") != key_for("spirv:generic")
    if device_id == 0x1234:
        assert zrt.toolchain_target() == "spirv:generic-fp32"
        from tack.backends.level_zero import target
        assert target(zrt.toolchain_target()).has_float64 is False


def test_native_refused_falls_back_to_spirv_and_returns_the_drivers_native_code(fake):
    f = fake(native_result=zrt.ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, num_args=10,
             build_log=b"stepping mismatch")
    k = zrt.load(pack_level_zero(SPIRV, NATIVE), SAXPY_META)
    assert [(fmt, data) for fmt, data, _ in f.module_descs] == [
        (zrt.ZE_MODULE_FORMAT_NATIVE, NATIVE), (zrt.ZE_MODULE_FORMAT_IL_SPIRV, SPIRV)]
    assert k.format == "spirv" and k.native_from_driver == b"ZEBIN-FROM-DRIVER"
    assert "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY" in k.native_refused
    assert "stepping mismatch" in k.native_refused
    assert ("zeKernelCreate", b"tack_saxpy_entry") in f.calls
    assert [c[0] for c in f.calls].count("zeModuleBuildLogDestroy") == 2


@pytest.mark.parametrize("device_id,native_result,stored", [
    (0x0BD5, zrt.ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, "pvc"),   # refused: the driver's is stored
    (0x56A0, zrt.ZE_RESULT_SUCCESS, None),                         # loaded natively: nothing
    (0x1234, zrt.ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, None)])    # no native key for the device
def test_store_back_of_the_drivers_native_code(fake, device_id, native_result, stored):
    """What the dispatcher stores back after a load: the driver's native code with the SPIR-V it
    was built from, under the device's native key (which a later process looks up first)."""
    fake(device_id=device_id, native_result=native_result, num_args=10)
    k = zrt.load(pack_level_zero(SPIRV, NATIVE), SAXPY_META)
    got = zrt.store_back(k)
    if stored is None:
        assert got is None
        return
    key, payload, made = got
    assert key == key_for(f"level_zero:{stored}") == zrt.lookup_keys()[0]
    assert unpack_level_zero(payload) == (SPIRV, b"ZEBIN-FROM-DRIVER")
    assert made["arch"] == f"level_zero:{stored}" and made["made_by"] == "driver"


def test_native_accepted_builds_once(fake):
    f = fake(num_args=10)
    k = zrt.load(pack_level_zero(SPIRV, NATIVE), SAXPY_META)
    assert [fmt for fmt, _, _ in f.module_descs] == [zrt.ZE_MODULE_FORMAT_NATIVE]
    assert k.format == "native" and k.native_refused is None and k.native_from_driver is None
    assert not any(c[0] == "zeModuleGetNativeBinary" for c in f.calls)


@pytest.mark.parametrize("payload", [pack_level_zero(SPIRV), SPIRV], ids=["container", "bare"])
def test_spirv_only_artifacts_build_from_spirv(fake, payload):
    f = fake(num_args=10)
    k = zrt.load(payload, SAXPY_META)
    assert [(fmt, data) for fmt, data, _ in f.module_descs] == [(zrt.ZE_MODULE_FORMAT_IL_SPIRV, SPIRV)]
    assert k.format == "spirv" and k.native_refused is None and k.native_from_driver


def test_neither_part_builds_is_one_error_naming_both(fake):
    fake(native_result=zrt.ZE_RESULT_ERROR_INVALID_NATIVE_BINARY,
         spirv_result=zrt.ZE_RESULT_ERROR_MODULE_BUILD_FAILURE, num_args=10,
         build_log=b"error: undefined symbol")
    with pytest.raises(zrt.LevelZeroError) as e:
        zrt.load(pack_level_zero(SPIRV, NATIVE), SAXPY_META)
    msg = str(e.value)
    assert "native code was refused (ZE_RESULT_ERROR_INVALID_NATIVE_BINARY" in msg
    assert "from SPIR-V: ZE_RESULT_ERROR_MODULE_BUILD_FAILURE" in msg
    assert "undefined symbol" in msg


def test_a_device_out_of_memory_is_no_fault_of_the_module(fake):
    """zeModuleCreate out of device memory: the load's error says so and is marked ``resource``
    (errors.no_room), so a launch keeps the cache entry it was loading; a build failure is the
    module's fault, and is not."""
    from tack.errors import no_room
    fake(native_result=zrt.ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, spirv_result=0x70000003,
         num_args=10)
    with pytest.raises(zrt.LevelZeroError, match="ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY") as e:
        zrt.load(pack_level_zero(SPIRV, NATIVE), SAXPY_META)
    assert no_room(e.value)
    fake(native_result=zrt.ZE_RESULT_ERROR_INVALID_NATIVE_BINARY,
         spirv_result=zrt.ZE_RESULT_ERROR_MODULE_BUILD_FAILURE, num_args=10)
    with pytest.raises(zrt.LevelZeroError) as e:
        zrt.load(pack_level_zero(SPIRV, NATIVE), SAXPY_META)
    assert not no_room(e.value)


def test_load_refusals(fake):
    f = fake(num_args=10)
    with pytest.raises(zrt.LevelZeroError, match="no kernel 'missing'"):
        zrt.load(SPIRV, dict(SAXPY_META, entry="missing"))
    with pytest.raises(zrt.LevelZeroError, match="damaged SPIR-V|not a SPIR-V"):
        zrt.load(pack_level_zero(SPIRV[:-4], NATIVE), SAXPY_META)
    with pytest.raises(zrt.LevelZeroError, match="damaged Level Zero artifact"):
        zrt.load(pack_level_zero(SPIRV, NATIVE)[:-1], SAXPY_META)
    with pytest.raises(zrt.LevelZeroError, match="argspec"):
        zrt.load(SPIRV, {"entry": "k"})
    f.num_args = 7
    with pytest.raises(zrt.LevelZeroError, match="takes 7 parameters"):
        zrt.load(SPIRV, SAXPY_META)


@pytest.mark.parametrize("extensions, kernel_limit, group", [
    ((), None, 128),                                        # no extension: the device's limit
    ((zrt.KERNEL_MAX_GROUP_SIZE_EXTENSION,), 64, 64),       # the kernel's, below the default
    ((zrt.KERNEL_MAX_GROUP_SIZE_EXTENSION,), 1024, 128),    # above it: the default
    ((b"ZE_extension_other", zrt.KERNEL_MAX_GROUP_SIZE_EXTENSION), 0, 128)])   # 0: none said
def test_a_kernels_own_group_limit_caps_its_launches(fake, extensions, kernel_limit, group):
    """Where the driver has ZE_extension_kernel_max_group_size_properties, a kernel's own limit
    (its registers and barriers may allow fewer work-items than the device) caps the group its
    launches use, and a block the kernel cannot take is refused naming it; a driver without the
    extension never gets the struct chained."""
    f = fake(num_args=10, kernel_fn=saxpy_fn, extensions=extensions, kernel_max_group=kernel_limit)
    k = zrt.load(SPIRV, SAXPY_META)
    assert f.chained == ([zrt.KERNEL_MAX_GROUP_SIZE_STYPE] if extensions else [])
    x, y, out = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32), np.zeros(1000, np.float32)
    zrt.launch(k, SAXPY_META, (2.5, x, y, out), (1000,))
    np.testing.assert_array_equal(out, 2.5 * x + 1)
    (got, count, _), = f.launches
    assert got == (group, 1, 1) and count == (-(-1000 // group), 1, 1)
    if kernel_limit == 64:
        assert k.max_group == 64
        with pytest.raises(ValueError, match=r"block \(256,\) is larger than kernel 'tack_saxpy_entry'"
                           r".* allows \(64 work-items"):
            zrt.launch(k, SAXPY_META, (2.5, x, y, out), (1000,), block=(256,))


def test_a_grid_past_the_devices_group_count_launches_its_limit(fake):
    """More work-groups than the device launches along an axis: its limit is launched and the
    entry's grid-stride loop (docs/gpu.md) covers the rest (it was a refusal)."""
    f = fake(num_args=10, kernel_fn=saxpy_fn, max_group_count=100)
    k = zrt.load(SPIRV, SAXPY_META)
    x, y, out = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32), np.zeros(1000, np.float32)
    zrt.launch(k, SAXPY_META, (2.5, x, y, out), (1000,), block=8)
    (group, count, _), = f.launches
    assert group == (8, 1, 1) and count == (100, 1, 1)         # 125 groups wanted
    np.testing.assert_array_equal(out, 2.5 * x + 1)


def test_saxpy_marshalling_by_its_outcome(fake):
    f = fake(num_args=10, kernel_fn=saxpy_fn)
    k = zrt.load(SPIRV, SAXPY_META)
    x = np.arange(1000, dtype=np.float32)
    y = np.ones(1000, np.float32)
    y.flags.writeable = False
    out = np.zeros(1000, np.float32)
    assert zrt.launch(k, SAXPY_META, (2.5, x, y, out), (1000,)) is None
    np.testing.assert_array_equal(out, 2.5 * x + 1)
    (group, count, params), = f.launches
    assert group == (128, 1, 1) and count == (8, 1, 1)              # 1000 rounded up to 1024
    assert [len(params[i]) for i in range(10)] == [4] + [8] * 9
    assert f.memory == {}                                           # every allocation freed


def test_strided_fortran_scalars_and_debug_record(fake):
    """2-D: an F-ordered input (extents only), a strided output view (extents and strides in
    elements of the C copy), bool/int32/uint64/float64 scalars, the grid, the debug record."""
    meta = {"entry": "k", "argspec": [["array:float64:2:F:r"], ["array:float64:2:A:w"], ["bool"],
                                       ["int32"], ["uint64"], ["float64"]]}
    seen = {}

    def kernel(params, group, count, max_count):
        src, s0, s1, dst, d0, d1, dst0, dst1, flag, i32, u64, f64, n0, n1, n2, err = params
        seen.update(flag=params[8], i32=np.frombuffer(i32, "<i4")[0], u64=_u64(u64),
                    f64=np.frombuffer(f64, "<f8")[0], grid=(_i64(n0), _i64(n1), _i64(n2)),
                    group=group, count=count)
        m, n = _i64(s0), _i64(s1)
        a = np.ctypeslib.as_array((ctypes.c_double * (m * n)).from_address(_u64(src)))
        a = a.reshape((m, n), order="F")
        b = np.ctypeslib.as_array((ctypes.c_double * (_i64(d0) * _i64(d1))).from_address(_u64(dst)))
        for i in range(m):
            for j in range(n):
                b[i * _i64(dst0) + j * _i64(dst1)] = a[i, j] * 10
        e = np.ctypeslib.as_array((ctypes.c_int64 * 4).from_address(_u64(err)))
        e[:] = [3, 1, 7, 5]

    f = fake(num_args=16, kernel_fn=kernel)
    k = zrt.load(SPIRV, meta)
    src = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    big = np.zeros((6, 4))
    dst = big[::2]                                   # strided: layout A
    err = zrt.launch(k, meta, (src, dst, True, -5, 2**63, 0.25), (3, 4), debug=True)
    np.testing.assert_array_equal(dst, src * 10)
    assert not big[1::2].any()
    assert err.tolist() == [3, 1, 7, 5]
    assert seen["flag"] == b"\x01" and seen["i32"] == -5 and seen["u64"] == 2**63
    assert seen["f64"] == 0.25 and seen["grid"] == (3, 4, 1)
    assert seen["group"] == (4, 4, 1) and seen["count"] == (1, 1, 1)
    assert f.memory == {}


def test_device_arrays_and_one_buffer_for_an_array_passed_twice(fake):
    f = fake(num_args=10, kernel_fn=saxpy_fn)
    k = zrt.load(SPIRV, SAXPY_META)
    x = np.arange(16, dtype=np.float32)
    dx = zrt.to_device(x)
    assert isinstance(dx, zrt.LevelZeroArray) and dx.shape == (16,)
    assert ("zeMemAllocDevice", 64) in f.calls
    out = np.ones(16, np.float32)
    zrt.launch(k, SAXPY_META, (1.0, dx, out, out), (16,))         # out = x + out, in place
    np.testing.assert_array_equal(out, x + 1)
    (_, _, params), = f.launches
    assert params[3] == params[5]                                  # y and out: one allocation
    np.testing.assert_array_equal(dx.numpy(), x)
    del dx
    assert f.memory == {}


def test_launch_refusals(fake):
    fake(num_args=10, kernel_fn=saxpy_fn)
    k = zrt.load(SPIRV, SAXPY_META)
    x = np.zeros(4, np.float32)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    cases = [((1.0, x, x), TypeError, "takes 4 value arguments"),
             ((x, x, x, x), TypeError, "scalar, not an array"),
             ((1.0, x.astype(np.float64), x, x), TypeError, "float64"),
             ((1.0, x, x, ro), TypeError, "read-only"),
             ((1.0, x, x, [0.0] * 4), TypeError, "must be a NumPy array"),
             ((1.0, x, x, np.zeros(8, np.float32)[::2]), TypeError, "C-contiguous"),
             ((1.0, x, x, Producer(x.ctypes.data, (4,), np.float32, device=(14, 0))), TypeError,
              r"argument 3 is another library's array \(Producer\): .*producer's Level Zero "
              r"context.*; pass a NumPy copy of it, or a NumPy array or a LevelZeroArray")]
    for args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            zrt.launch(k, SAXPY_META, args, (4,))
    with pytest.raises(zrt.LevelZeroError, match="debug"):
        zrt.launch(k, SAXPY_META, (1.0, x, x, x), (4,), debug=True)
    with pytest.raises(ValueError, match="does not match the grid"):
        zrt.launch(k, SAXPY_META, (1.0, x, x, x), (4,), block=(2, 2))
    assert zrt.launch(k, SAXPY_META, (1.0, x[:0], x[:0], x[:0]), (0,)) is None


# ---------------------------------------------------------------------------
# Structure layouts

# x86-64 (LP64) offsets and sizes of ze_api.h v1.4, written out.
LAYOUTS = {
    "ze_module_desc_t": (56, {"stype": 0, "pNext": 8, "format": 16, "inputSize": 24,
                              "pInputModule": 32, "pBuildFlags": 40, "pConstants": 48}),
    "ze_module_constants_t": (24, {"numConstants": 0, "pConstantIds": 8, "pConstantValues": 16}),
    "ze_kernel_desc_t": (32, {"stype": 0, "pNext": 8, "flags": 16, "pKernelName": 24}),
    "ze_group_count_t": (12, {"groupCountX": 0, "groupCountY": 4, "groupCountZ": 8}),
    "ze_command_queue_desc_t": (40, {"ordinal": 16, "index": 20, "flags": 24, "mode": 28,
                                     "priority": 32}),
    "ze_command_list_desc_t": (24, {"commandQueueGroupOrdinal": 16, "flags": 20}),
    "ze_device_mem_alloc_desc_t": (24, {"flags": 16, "ordinal": 20}),
    "ze_host_mem_alloc_desc_t": (24, {"flags": 16}),
    "ze_context_desc_t": (24, {"flags": 16}),
    "ze_device_properties_t": (368, {"type": 16, "deviceId": 24, "maxMemAllocSize": 40,
                                     "timerResolution": 80, "uuid": 96, "name": 112}),
    "ze_device_compute_properties_t": (88, {"maxTotalGroupSize": 16, "maxGroupCountX": 32,
                                            "subGroupSizes": 52}),
    "ze_kernel_properties_t": (96, {"numKernelArgs": 16, "spillMemSize": 56, "kid": 60, "mid": 76}),
    "ze_driver_extension_properties_t": (260, {"name": 0, "version": 256}),
    "ze_device_module_properties_t": (64, {"spirvVersionSupported": 16, "fp64flags": 32,
                                           "nativeKernelSupported": 44}),
    "ze_command_queue_group_properties_t": (40, {"flags": 16, "maxMemoryFillPatternSize": 24,
                                                 "numQueues": 32}),
}


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the offsets written are LP64's")
def test_structure_layouts_as_written():
    for name, (size, offsets) in LAYOUTS.items():
        cls = getattr(zrt, name)
        assert ctypes.sizeof(cls) == size, name
        for field, off in offsets.items():
            assert getattr(cls, field).offset == off, (name, field)
    assert {c.__name__ for c in zrt.STRUCTURES} == set(LAYOUTS)


def test_the_kernel_max_group_size_extension_struct():
    """Not in the v1.4 header the test below compiles: its layout as ze_api.h 1.9+ declares it
    (stype, pNext, maxGroupSize), chained from ze_kernel_properties_t."""
    cls = zrt.ze_kernel_max_group_size_properties_ext_t
    assert ctypes.sizeof(cls) == 24 and (cls.stype.offset, cls.pNext.offset, cls.maxGroupSize.offset) == (0, 8, 16)
    assert zrt.KERNEL_MAX_GROUP_SIZE_STYPE == 0x00010013


def test_structure_layouts_and_constants_match_the_header(tmp_path):
    """Every field of every structure, and the enum values used, against ze_api.h compiled by
    the C compiler (Debian's libze-dev: headers v1.4)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.exists(HEADER):
        pytest.skip("needs a C compiler and ze_api.h (apt-get install libze-dev)")
    with open(HEADER) as fh:
        text = fh.read()
    assert "@version v1.4" in text.split("*/", 1)[0] or "v1.4" in text[:2000]
    lines, expect = [], []
    for cls in zrt.STRUCTURES:
        name = cls.__name__
        lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
        expect.append(f"{name} {ctypes.sizeof(cls)}")
        for field, _ in cls._fields_:
            cfield = "uuid.kid" if field == "kid" else "uuid.mid" if field == "mid" else field
            lines.append(f'printf("{name}.{field} %zu\\n", offsetof({name}, {cfield}));')
            expect.append(f"{name}.{field} {getattr(cls, field).offset}")
    consts = [c for c in dir(zrt) if c.startswith(("ZE_STRUCTURE_TYPE_", "ZE_MODULE_FORMAT_",
                                                    "ZE_RESULT_", "ZE_COMMAND_QUEUE_",
                                                    "ZE_DEVICE_TYPE_", "ZE_MAX_", "ZE_SUBGROUP"))]
    for c in consts:
        lines.append(f'printf("{c} %lld\\n", (long long){c});')
        expect.append(f"{c} {getattr(zrt, c)}")
    for code, cname in zrt.RESULTS.items():
        lines.append(f'printf("{cname} %lld\\n", (long long){cname});')
        expect.append(f"{cname} {code}")
    src = tmp_path / "layout.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <level_zero/ze_api.h>\n"
                   "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, str(src), "-o", str(exe)], check=True, capture_output=True, timeout=TIMEOUT)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    assert [g for g in got if g] == expect


def test_copies_and_launches_on_threads_never_share_the_command_list(fake):
    """to_device and a device array's read reset and execute the device's one command list, as a
    launch does: from several threads at once they take the device's lock, so no thread resets
    the list while another is recording into it (the fake notes any such overlap)."""
    f = fake(num_args=10, kernel_fn=saxpy_fn)
    f.copy_delay = 0.01
    zrt.get_device()
    x = np.arange(64, dtype=np.float32)
    errors, results = [], []

    def work():
        try:
            d = zrt.to_device(x)
            results.append(d.numpy())
        except Exception as e:          # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert f.overlaps == []
    assert len(results) == 4 and all(np.array_equal(r, x) for r in results)


def test_a_launch_nested_on_the_thread_inside_one_is_refused_naming_what_is_in_use(fake):
    """A signal handler's (or a finalizer's) launch of the same kernel, or copy to the device,
    on the thread whose launch is under way (here: while the device runs it) gets a
    RuntimeError naming the kernel, or the device's command list: the kernel's arguments and
    the one command list are the outer launch's, so re-entering would overwrite them.  Both
    locks were plain Locks: the nested call waited for its own thread for ever (run on a
    thread here, so that a hang fails the test instead of stopping the run)."""
    x, y, out = np.arange(16, dtype=np.float32), np.ones(16, np.float32), np.zeros(16, np.float32)
    nested = []

    def kernel_fn(params, group, count, max_count):
        if not nested:                      # the outer launch: as a signal handler would
            for again in (lambda: zrt.launch(k, SAXPY_META, (1.0, x, y, np.zeros(16, np.float32)),
                                             (16,)),
                          lambda: zrt.to_device(x)):
                try:
                    again()
                    nested.append("ran")
                except RuntimeError as e:
                    nested.append(str(e))
        saxpy_fn(params, group, count, max_count)
    fake(num_args=10, kernel_fn=kernel_fn)
    k = zrt.load(SPIRV, SAXPY_META)
    outer = threading.Thread(target=zrt.launch, args=(k, SAXPY_META, (2.5, x, y, out), (16,)),
                             daemon=True)
    outer.start()
    outer.join(60)
    assert not outer.is_alive(), "the nested launch waited for its own thread"
    kernel_in_use, list_in_use = nested
    assert kernel_in_use.startswith("kernel 'tack_saxpy_entry' on ") and \
        "already under way on this thread" in kernel_in_use, kernel_in_use
    assert list_in_use.startswith("the command list of ") and \
        "already under way on this thread" in list_in_use, list_in_use
    np.testing.assert_array_equal(out, 2.5 * x + 1)     # the outer launch's own result
    zrt.launch(k, SAXPY_META, (1.0, x, y, out), (16,))  # and both locks are free after it
    np.testing.assert_array_equal(out, x + 1)
