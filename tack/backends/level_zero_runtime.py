"""The Level Zero runtime side: Tack's Level Zero artifacts run on Intel GPUs (docs/level-zero-and-metal.md).

Driven through the Level Zero loader's C API (``libze_loader.so.1``, Debian's
``libze1``) bound with ctypes: there is no Python binding to depend on (the
PyPI package named ``level-zero`` is unrelated).  The structures follow the
Level Zero headers **v1.4** (``ze_api.h`` "v1.4-r1.4.8", as Debian 12's
``libze-dev`` 1.8.12 ships them); the drivers of later API versions take them
unchanged (every structure here has kept its layout since 1.0).  Importing
this module loads nothing; the loader is opened on the first call that needs
a device.

* **Devices.**  ``zeInit`` then ``zeDriverGet``/``zeDeviceGet``; GPU devices
  only, named ``level_zero:<index>`` (``"level_zero"`` is the first).  Where
  there is none, ``available()`` is False, ``unavailable_reason()`` says why
  and what to install, and every call that needs a device raises
  ``LevelZeroUnavailable`` with that text.  **Nothing is called after a
  failed ``zeInit``**: with Debian's loader and no GPU, ``zeInit`` returns
  ``ZE_RESULT_ERROR_UNINITIALIZED`` and a ``zeDriverGet`` after it crashes the
  process (SIGSEGV).  The outcome is kept for the life of the process.
* **Keys.**  A device's candidate keys, most specific first: native code for
  its exact device (``gpu.key_for("level_zero:pvc")``), for its family where
  ocloc has a family name (``xe-hpc``, ``dg2``), then SPIR-V
  (``key_for("spirv:generic")``), which every device takes, or, for a device
  whose module properties say it has no float64 (``fp64flags``),
  ``spirv:generic-fp32``.  The device's ocloc name comes from its PCI device id
  (``arch_names.INTEL_DEVICE_IDS``); an id not in the table gets SPIR-V only.
* **load(payload, meta)**: the artifact (``gpu.pack_level_zero``: SPIR-V plus
  native code, or SPIR-V alone, or bare SPIR-V) -> ``zeModuleCreate`` with
  ``ZE_MODULE_FORMAT_NATIVE`` for the native part; where the driver refuses
  it (another stepping, a driver update, a damaged part), ``zeModuleCreate``
  with ``ZE_MODULE_FORMAT_IL_SPIRV`` from the SPIR-V.  A module built from
  SPIR-V gives its native code back (``zeModuleGetNativeBinary``) as the
  kernel's ``native_from_driver``, for the caller to store.
* **launch(kernel, meta, args, dims, debug)**: the kernel ABI of docs/gpu.md
  from ``meta["argspec"]``, with NumPy arrays in shared USM allocations
  (``zeMemAllocShared``: copied in before, the writable ones back after),
  ``LevelZeroArray`` (``to_device``: ``zeMemAllocDevice``) staying on the
  device, one command list per device executed on its compute queue.

Simulation for tests happens at the boundary only: ``_open_library`` returns
the object whose ``zeXxx`` attributes are called (the ctypes library, or a
stand-in with the same functions).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

import numpy as np

from .arch_names import PORTABLE_SPIRV, bundle_machine, intel_device_archs, portable_spirv
from .argument_layout import grid as layout_grid
from .device_args import (ContiguousArray, LaunchLock, Staging, argspecs, argument_values,
                          check_entry_params, check_launch, check_param_count, choose_block,
                          device_index, hardware_launch, host_copy, no_such_device)
from .device_variant import any_arrays as check_args  # noqa: F401 - the runtime interface
from .device_variant import device_variant, ordered_site_bundles
from .device_variant import no_host_views as host_views  # noqa: F401 - the runtime interface

KIND = "level_zero"
BUNDLE_MACHINE = bundle_machine("level_zero")   # its bundles' file names: its code's machine
LOADER = "libze_loader.so.1"
HEADER_VERSION = "1.4"        # ze_api.h v1.4-r1.4.8: the structures below follow it
INSTALL_HINT = ("install the Level Zero loader and Intel's GPU driver: Debian `apt-get install "
                "libze1 intel-level-zero-gpu` (on Debian 12 the driver, libze_intel_gpu.so.1, "
                "comes with intel-opencl-icd); a supported Intel GPU must be present")
DEFAULT_GROUP_SIZE = 128
UINT64_MAX = 2**64 - 1


# Why another library's device array (DLPack kDLOneAPI: PyTorch XPU, dpnp) is not taken.
FOREIGN = ("Tack's Level Zero runtime does not take other libraries' arrays yet: their memory "
           "belongs to the producer's Level Zero context (a SYCL queue's), which DLPack does not "
           "name and Tack's own context cannot address")


class LevelZeroUnavailable(RuntimeError):
    """No Level Zero GPU here: the loader, the driver or a GPU is missing."""


class LevelZeroError(RuntimeError):
    """A module that does not build, a kernel the driver refuses, a failed launch.  ``resource``:
    the driver's status said the device or the host failed (lost, out of memory), not the code
    (``errors.no_room``: a cache entry that fails to load so is kept)."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.resource = result in _NO_ROOM


# The statuses of a device or host that failed, whatever was asked of it: lost, out of host or
# device memory, in need of a reset, in a low-power state.
_NO_ROOM = frozenset((0x70000001, 0x70000002, 0x70000003, 0x70000006, 0x70000007))


# ---------------------------------------------------------------------------
# The C API: result codes, enums and structures of ze_api.h v1.4

ZE_RESULT_SUCCESS = 0
RESULTS = {
    0x0: "ZE_RESULT_SUCCESS",
    0x1: "ZE_RESULT_NOT_READY",
    0x70000001: "ZE_RESULT_ERROR_DEVICE_LOST",
    0x70000002: "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY",
    0x70000003: "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
    0x70000004: "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE",
    0x70000005: "ZE_RESULT_ERROR_MODULE_LINK_FAILURE",
    0x70000006: "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET",
    0x70000007: "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE",
    0x7ff00001: "ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX",
    0x7ff00002: "ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE",
    0x7ff00003: "ZE_RESULT_EXP_ERROR_REMOTE_DEVICE",
    0x70010000: "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS",
    0x70010001: "ZE_RESULT_ERROR_NOT_AVAILABLE",
    0x70020000: "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE",
    0x70020001: "ZE_RESULT_WARNING_DROPPED_DATA",
    0x78000001: "ZE_RESULT_ERROR_UNINITIALIZED",
    0x78000002: "ZE_RESULT_ERROR_UNSUPPORTED_VERSION",
    0x78000003: "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE",
    0x78000004: "ZE_RESULT_ERROR_INVALID_ARGUMENT",
    0x78000005: "ZE_RESULT_ERROR_INVALID_NULL_HANDLE",
    0x78000006: "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE",
    0x78000007: "ZE_RESULT_ERROR_INVALID_NULL_POINTER",
    0x78000008: "ZE_RESULT_ERROR_INVALID_SIZE",
    0x78000009: "ZE_RESULT_ERROR_UNSUPPORTED_SIZE",
    0x7800000a: "ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT",
    0x7800000b: "ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT",
    0x7800000c: "ZE_RESULT_ERROR_INVALID_ENUMERATION",
    0x7800000d: "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION",
    0x7800000e: "ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT",
    0x7800000f: "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY",
    0x78000010: "ZE_RESULT_ERROR_INVALID_GLOBAL_NAME",
    0x78000011: "ZE_RESULT_ERROR_INVALID_KERNEL_NAME",
    0x78000012: "ZE_RESULT_ERROR_INVALID_FUNCTION_NAME",
    0x78000013: "ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION",
    0x78000014: "ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION",
    0x78000015: "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX",
    0x78000016: "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE",
    0x78000017: "ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE",
    0x78000018: "ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED",
    0x78000019: "ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE",
    0x7800001a: "ZE_RESULT_ERROR_OVERLAPPING_REGIONS",
    0x7800001b: "ZE_RESULT_WARNING_ACTION_REQUIRED",
    0x7ffffffe: "ZE_RESULT_ERROR_UNKNOWN",
}
ZE_RESULT_ERROR_UNINITIALIZED = 0x78000001
ZE_RESULT_ERROR_MODULE_BUILD_FAILURE = 0x70000004
ZE_RESULT_ERROR_INVALID_NATIVE_BINARY = 0x7800000f
ZE_RESULT_ERROR_INVALID_KERNEL_NAME = 0x78000011

ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x3
ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES = 0x4
ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES = 0x5
ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES = 0x6
ZE_STRUCTURE_TYPE_CONTEXT_DESC = 0xd
ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC = 0xe
ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC = 0xf
ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC = 0x15
ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC = 0x16
ZE_STRUCTURE_TYPE_MODULE_DESC = 0x1b
ZE_STRUCTURE_TYPE_KERNEL_DESC = 0x1d
ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES = 0x1e

ZE_MODULE_FORMAT_IL_SPIRV = 0
ZE_MODULE_FORMAT_NATIVE = 1
ZE_DEVICE_TYPE_GPU = 1
ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS = 2
ZE_COMMAND_QUEUE_PRIORITY_NORMAL = 0
ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE = 1

ZE_MAX_DEVICE_NAME = 256
ZE_MAX_EXTENSION_NAME = 256
# The kernel's own work-group limit (extension ZE_extension_kernel_max_group_size_properties,
# in headers newer than Debian's v1.4, so named apart from the constants the tests check against
# it): ZE_STRUCTURE_TYPE_KERNEL_MAX_GROUP_SIZE_EXT_PROPERTIES.
KERNEL_MAX_GROUP_SIZE_EXTENSION = b"ZE_extension_kernel_max_group_size_properties"
KERNEL_MAX_GROUP_SIZE_STYPE = 0x00010013
ZE_SUBGROUPSIZE_COUNT = 8

_u32, _u64, _size, _ptr, _cstr = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p, \
    ctypes.c_char_p


class ze_device_properties_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("type", _u32), ("vendorId", _u32),
                ("deviceId", _u32), ("flags", _u32), ("subdeviceId", _u32),
                ("coreClockRate", _u32), ("maxMemAllocSize", _u64),
                ("maxHardwareContexts", _u32), ("maxCommandQueuePriority", _u32),
                ("numThreadsPerEU", _u32), ("physicalEUSimdWidth", _u32),
                ("numEUsPerSubslice", _u32), ("numSubslicesPerSlice", _u32), ("numSlices", _u32),
                ("timerResolution", _u64), ("timestampValidBits", _u32),
                ("kernelTimestampValidBits", _u32), ("uuid", ctypes.c_uint8 * 16),
                ("name", ctypes.c_char * ZE_MAX_DEVICE_NAME)]


class ze_device_compute_properties_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("maxTotalGroupSize", _u32),
                ("maxGroupSizeX", _u32), ("maxGroupSizeY", _u32), ("maxGroupSizeZ", _u32),
                ("maxGroupCountX", _u32), ("maxGroupCountY", _u32), ("maxGroupCountZ", _u32),
                ("maxSharedLocalMemory", _u32), ("numSubGroupSizes", _u32),
                ("subGroupSizes", _u32 * ZE_SUBGROUPSIZE_COUNT)]


class ze_command_queue_group_properties_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("flags", _u32),
                ("maxMemoryFillPatternSize", _size), ("numQueues", _u32)]


class ze_context_desc_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("flags", _u32)]


class ze_command_queue_desc_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("ordinal", _u32), ("index", _u32),
                ("flags", _u32), ("mode", _u32), ("priority", _u32)]


class ze_command_list_desc_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("commandQueueGroupOrdinal", _u32),
                ("flags", _u32)]


class ze_module_constants_t(ctypes.Structure):
    _fields_ = [("numConstants", _u32), ("pConstantIds", ctypes.POINTER(_u32)),
                ("pConstantValues", ctypes.POINTER(_ptr))]


class ze_module_desc_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("format", _u32), ("inputSize", _size),
                ("pInputModule", ctypes.POINTER(ctypes.c_uint8)), ("pBuildFlags", _cstr),
                ("pConstants", ctypes.POINTER(ze_module_constants_t))]


class ze_kernel_desc_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("flags", _u32), ("pKernelName", _cstr)]


class ze_kernel_properties_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("numKernelArgs", _u32),
                ("requiredGroupSizeX", _u32), ("requiredGroupSizeY", _u32),
                ("requiredGroupSizeZ", _u32), ("requiredNumSubGroups", _u32),
                ("requiredSubgroupSize", _u32), ("maxSubgroupSize", _u32),
                ("maxNumSubgroups", _u32), ("localMemSize", _u32), ("privateMemSize", _u32),
                ("spillMemSize", _u32), ("kid", ctypes.c_uint8 * 16), ("mid", ctypes.c_uint8 * 16)]


class ze_device_mem_alloc_desc_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("flags", _u32), ("ordinal", _u32)]


class ze_host_mem_alloc_desc_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("flags", _u32)]


class ze_group_count_t(ctypes.Structure):
    _fields_ = [("groupCountX", _u32), ("groupCountY", _u32), ("groupCountZ", _u32)]


class ze_device_module_properties_t(ctypes.Structure):
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("spirvVersionSupported", _u32),
                ("flags", _u32), ("fp16flags", _u32), ("fp32flags", _u32), ("fp64flags", _u32),
                ("maxArgumentsSize", _u32), ("printfBufferSize", _u32),
                ("nativeKernelSupported", ctypes.c_uint8 * 16)]


class ze_driver_extension_properties_t(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * ZE_MAX_EXTENSION_NAME), ("version", _u32)]


class ze_kernel_max_group_size_properties_ext_t(ctypes.Structure):
    """Chained to ``ze_kernel_properties_t`` where the driver has the extension (not in
    STRUCTURES: the headers the tests compile against predate it)."""
    _fields_ = [("stype", _u32), ("pNext", _ptr), ("maxGroupSize", _u32)]


STRUCTURES = (ze_device_properties_t, ze_device_compute_properties_t,
              ze_command_queue_group_properties_t, ze_context_desc_t, ze_command_queue_desc_t,
              ze_command_list_desc_t, ze_module_constants_t, ze_module_desc_t, ze_kernel_desc_t,
              ze_kernel_properties_t, ze_device_mem_alloc_desc_t, ze_host_mem_alloc_desc_t,
              ze_group_count_t, ze_driver_extension_properties_t, ze_device_module_properties_t)

_P = ctypes.POINTER
_H = _ptr                     # every handle is an opaque pointer
SIGNATURES = {
    "zeInit": [_u32],
    "zeDriverGet": [_P(_u32), _P(_H)],
    "zeDriverGetExtensionProperties": [_H, _P(_u32), _P(ze_driver_extension_properties_t)],
    "zeDeviceGet": [_H, _P(_u32), _P(_H)],
    "zeDeviceGetProperties": [_H, _P(ze_device_properties_t)],
    "zeDeviceGetComputeProperties": [_H, _P(ze_device_compute_properties_t)],
    "zeDeviceGetModuleProperties": [_H, _P(ze_device_module_properties_t)],
    "zeDeviceGetCommandQueueGroupProperties": [_H, _P(_u32), _P(ze_command_queue_group_properties_t)],
    "zeContextCreate": [_H, _P(ze_context_desc_t), _P(_H)],
    "zeCommandQueueCreate": [_H, _H, _P(ze_command_queue_desc_t), _P(_H)],
    "zeCommandListCreate": [_H, _H, _P(ze_command_list_desc_t), _P(_H)],
    "zeModuleCreate": [_H, _H, _P(ze_module_desc_t), _P(_H), _P(_H)],
    "zeModuleBuildLogGetString": [_H, _P(_size), ctypes.c_char_p],
    "zeModuleBuildLogDestroy": [_H],
    "zeModuleGetNativeBinary": [_H, _P(_size), _P(ctypes.c_uint8)],
    "zeModuleDestroy": [_H],
    "zeKernelCreate": [_H, _P(ze_kernel_desc_t), _P(_H)],
    "zeKernelDestroy": [_H],
    "zeKernelGetProperties": [_H, _P(ze_kernel_properties_t)],
    "zeKernelSetGroupSize": [_H, _u32, _u32, _u32],
    "zeKernelSetArgumentValue": [_H, _u32, _size, _ptr],
    "zeCommandListAppendLaunchKernel": [_H, _H, _P(ze_group_count_t), _H, _u32, _P(_H)],
    "zeCommandListAppendMemoryCopy": [_H, _ptr, _ptr, _size, _H, _u32, _P(_H)],
    "zeCommandListClose": [_H],
    "zeCommandListReset": [_H],
    "zeCommandQueueExecuteCommandLists": [_H, _u32, _P(_H), _H],
    "zeCommandQueueSynchronize": [_H, _u64],
    "zeMemAllocShared": [_H, _P(ze_device_mem_alloc_desc_t), _P(ze_host_mem_alloc_desc_t), _size,
                         _size, _H, _P(_ptr)],
    "zeMemAllocDevice": [_H, _P(ze_device_mem_alloc_desc_t), _size, _size, _H, _P(_ptr)],
    "zeMemAllocHost": [_H, _P(ze_host_mem_alloc_desc_t), _size, _size, _P(_ptr)],
    "zeMemFree": [_H, _ptr],
}


def result_name(code) -> str:
    code = int(code) & 0xFFFFFFFF
    return RESULTS.get(code, f"ze_result_t {code:#010x}")


# ---------------------------------------------------------------------------
# The loader


def _open_library():
    """The Level Zero loader as a ctypes library (``TACK_LEVEL_ZERO_LOADER`` names another file).

    OSError when it is not installed.  Tests replace this function (the driver's boundary).
    """
    path = os.environ.get("TACK_LEVEL_ZERO_LOADER") or LOADER
    lib = ctypes.CDLL(path)
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_uint32
    return lib


class _Api:
    """Calls into the loader (or its stand-in), each result checked."""

    def __init__(self, lib):
        self.lib = lib

    def raw(self, name, *args) -> int:
        return int(getattr(self.lib, name)(*args)) & 0xFFFFFFFF

    def __call__(self, name, *args, what=""):
        r = self.raw(name, *args)
        if r != ZE_RESULT_SUCCESS:
            raise LevelZeroError(f"{name} failed: {result_name(r)}" + (f" ({what})" if what else ""),
                                 r)


# ---------------------------------------------------------------------------
# Devices

# Re-entrant: a signal handler's (or a finalizer's) launch on a thread inside discovery or a
# device's opening finds the devices or opens the device itself; the outer call then keeps what
# the nested one stored (a Lock waited for ever).
_lock = threading.RLock()
_state = None                 # (api or None, [_Found], reason or None), once per process
_devices = {}                 # index -> _Device


class _Found:
    __slots__ = ("name", "driver", "handle", "vendor_id", "device_id", "archs", "spirv")

    def __init__(self, name, driver, handle, vendor_id, device_id, has_float64=True):
        self.name, self.driver, self.handle = name, driver, handle
        self.vendor_id, self.device_id = vendor_id, device_id
        self.archs = intel_device_archs(vendor_id, device_id)
        self.spirv = portable_spirv(has_float64)    # the SPIR-V it runs after its native code


def _has_float64(api, dev) -> bool:
    """Whether the device does float64 (its module properties' ``fp64flags``); True where the
    driver cannot say (as Tack assumed before it asked)."""
    props = ze_device_module_properties_t(stype=ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES)
    try:
        api("zeDeviceGetModuleProperties", dev, ctypes.byref(props))
    except (LevelZeroError, AttributeError):
        return True
    return props.fp64flags != 0


def _discover():
    """(api, found, reason): the loader, its GPU devices, or why there are none.  Never raises."""
    try:
        lib = _open_library()
    except OSError as e:
        return None, [], (f"Level Zero is not available: the loader {LOADER} does not load ({e}); "
                          f"{INSTALL_HINT}")
    api = _Api(lib)
    try:
        r = api.raw("zeInit", 0)
    except Exception as e:                  # noqa: BLE001 - a loader without zeInit
        return None, [], f"Level Zero is not available: zeInit cannot be called ({e}); {INSTALL_HINT}"
    if r != ZE_RESULT_SUCCESS:
        # Nothing more may be called: Debian's loader crashes in zeDriverGet after this.
        return None, [], (f"Level Zero is not available: zeInit failed with {result_name(r)}, so "
                          f"no driver found a GPU (the loader is installed; Intel's GPU driver "
                          f"libze_intel_gpu.so.1 or a GPU it supports is missing); {INSTALL_HINT}")
    try:
        found = []
        n = _u32(0)
        api("zeDriverGet", ctypes.byref(n), None)
        drivers = (_H * n.value)()
        if n.value:
            api("zeDriverGet", ctypes.byref(n), drivers)
        for drv in list(drivers)[:n.value]:
            m = _u32(0)
            api("zeDeviceGet", _H(drv), ctypes.byref(m), None)
            if not m.value:
                continue
            devs = (_H * m.value)()
            api("zeDeviceGet", _H(drv), ctypes.byref(m), devs)
            for dev in list(devs)[:m.value]:
                props = ze_device_properties_t(stype=ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES)
                api("zeDeviceGetProperties", _H(dev), ctypes.byref(props))
                if props.type != ZE_DEVICE_TYPE_GPU:
                    continue
                found.append(_Found(props.name.decode(errors="replace").strip(), drv, dev,
                                    props.vendorId, props.deviceId, _has_float64(api, _H(dev))))
    except LevelZeroError as e:
        return None, [], f"Level Zero is not available: {e}; {INSTALL_HINT}"
    if not found:
        return api, [], (f"Level Zero is not available: zeInit succeeded but no driver has a GPU "
                         f"device; {INSTALL_HINT}")
    return api, found, None


def _find():
    global _state
    with _lock:
        if _state is None:
            found = _discover()
            if _state is None:              # what a nested call stored meanwhile stays
                _state = found
        return _state


def _reset():
    """Forget what was found (tests that replace ``_open_library``)."""
    global _state
    with _lock:
        _state = None
        _devices.clear()


def available() -> bool:
    """Whether a Level Zero GPU is here (never raises)."""
    return bool(_find()[1])


def unavailable_reason() -> str | None:
    """Why ``available()`` is False, with what to install; None when it is True."""
    return _find()[2]


def devices() -> list:
    """[(name, ``level_zero:<index>``)] of the Level Zero GPUs; empty if none."""
    return [(f.name, f"{KIND}:{i}") for i, f in enumerate(_find()[1])]


def _device_index(device) -> int:
    return device_index(device, KIND, "a Level Zero")


def _extensions(api, driver) -> set:
    """The names of the driver's extensions; empty if it cannot say."""
    try:
        n = _u32(0)
        api("zeDriverGetExtensionProperties", driver, ctypes.byref(n), None)
        props = (ze_driver_extension_properties_t * max(1, n.value))()
        api("zeDriverGetExtensionProperties", driver, ctypes.byref(n), props)
        return {props[i].name for i in range(min(n.value, len(props)))}
    except (LevelZeroError, AttributeError, OSError):      # an old loader: none known
        return set()


class _Device:
    """A GPU with its context, compute queue and command list."""

    def __init__(self, api, index, found):
        self.api = api
        self.index = index
        self.name = found.name
        self.archs, self.spirv = found.archs, found.spirv
        self.driver, self.handle = _H(found.driver), _H(found.handle)
        # One command list, reset and executed by each launch and copy: one at a time.
        self.lock = LaunchLock(f"the command list of {self.name}")
        compute = ze_device_compute_properties_t(stype=ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES)
        api("zeDeviceGetComputeProperties", self.handle, ctypes.byref(compute))
        self.max_group = max(1, compute.maxTotalGroupSize)
        self.max_item_sizes = (compute.maxGroupSizeX, compute.maxGroupSizeY, compute.maxGroupSizeZ)
        self.max_group_counts = (compute.maxGroupCountX, compute.maxGroupCountY,
                                 compute.maxGroupCountZ)
        self.kernel_max_group = KERNEL_MAX_GROUP_SIZE_EXTENSION in _extensions(api, self.driver)
        self.ordinal = self._compute_ordinal()
        ctx = _H()
        api("zeContextCreate", self.driver,
            ctypes.byref(ze_context_desc_t(stype=ZE_STRUCTURE_TYPE_CONTEXT_DESC)), ctypes.byref(ctx))
        self.context = ctx
        queue = _H()
        api("zeCommandQueueCreate", ctx, self.handle, ctypes.byref(ze_command_queue_desc_t(
            stype=ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, ordinal=self.ordinal, index=0,
            mode=ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, priority=ZE_COMMAND_QUEUE_PRIORITY_NORMAL)),
            ctypes.byref(queue))
        self.queue = queue
        clist = _H()
        api("zeCommandListCreate", ctx, self.handle, ctypes.byref(ze_command_list_desc_t(
            stype=ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC, commandQueueGroupOrdinal=self.ordinal)),
            ctypes.byref(clist))
        self.list = clist

    def _compute_ordinal(self) -> int:
        n = _u32(0)
        self.api("zeDeviceGetCommandQueueGroupProperties", self.handle, ctypes.byref(n), None)
        props = (ze_command_queue_group_properties_t * max(1, n.value))()
        for p in props:
            p.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES
        self.api("zeDeviceGetCommandQueueGroupProperties", self.handle, ctypes.byref(n), props)
        for i in range(n.value):
            if props[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE:
                return i
        raise LevelZeroError(f"{self.name} has no compute command queue group")

    @property
    def arch(self) -> str:
        """The toolchain's target for this device: its native code's, or its portable SPIR-V
        (``spirv:generic``, or ``spirv:generic-fp32`` where it has no float64)."""
        return f"{KIND}:{self.archs[0]}" if self.archs else self.spirv

    def run(self, append):
        """Record commands with ``append(list)``, execute them and wait for them to finish, under
        the device's lock: its one command list is reset and executed by launches, ``to_device``
        and reads alike, from any thread."""
        api = self.api
        with self.lock:
            api("zeCommandListReset", self.list)
            append(self.list)
            api("zeCommandListClose", self.list)
            lists = (_H * 1)(self.list.value)
            api("zeCommandQueueExecuteCommandLists", self.queue, 1, lists, None)
            api("zeCommandQueueSynchronize", self.queue, _u64(UINT64_MAX))

    def alloc_shared(self, nbytes):
        ptr = _ptr()
        self.api("zeMemAllocShared", self.context,
                 ctypes.byref(ze_device_mem_alloc_desc_t(stype=ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC)),
                 ctypes.byref(ze_host_mem_alloc_desc_t(stype=ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC)),
                 _size(max(1, nbytes)), _size(64), self.handle, ctypes.byref(ptr),
                 what=f"{nbytes} bytes of shared memory")
        return ptr.value

    def alloc_device(self, nbytes):
        ptr = _ptr()
        self.api("zeMemAllocDevice", self.context,
                 ctypes.byref(ze_device_mem_alloc_desc_t(stype=ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC)),
                 _size(max(1, nbytes)), _size(64), self.handle, ctypes.byref(ptr),
                 what=f"{nbytes} bytes of device memory")
        return ptr.value

    def free(self, ptr):
        if ptr:
            self.api.raw("zeMemFree", self.context, _ptr(ptr))

    def copy(self, dst, src, nbytes):
        """Copy between USM allocations (device <-> shared) and wait."""
        if nbytes:
            self.run(lambda cl: self.api("zeCommandListAppendMemoryCopy", cl, _ptr(dst), _ptr(src),
                                         _size(nbytes), None, 0, None))

    def __repr__(self):
        return f"<Level Zero device {self.index}: {self.name} ({self.arch})>"


def get_device(device=None) -> _Device:
    """The GPU ``device`` names (``level_zero``, ``level_zero:<index>``); LevelZeroUnavailable if none."""
    index = _device_index(device)
    api, found, reason = _find()
    if not found:
        raise LevelZeroUnavailable(reason)
    if index >= len(found):
        raise no_such_device("Level Zero", KIND, index, ((i, f.name) for i, f in enumerate(found)))
    with _lock:
        dev = _devices.get(index)
        if dev is None:
            dev = _devices.setdefault(index, _Device(api, index, found[index]))
    return dev


# ---------------------------------------------------------------------------
# Target keys


def toolchain_target(device=None) -> str:
    """The toolchain target that builds native code for ``device`` (``level_zero:pvc``), or
    its portable SPIR-V for a device Tack has no ocloc name for (``spirv:generic``;
    ``spirv:generic-fp32`` where the device has no float64)."""
    return get_device(device).arch


def candidate_keys(device=None) -> list:
    """[(architecture name, target key)] a launch on ``device`` can use, most specific first:
    native code for the exact device, for its family, then its SPIR-V.  Without a device:
    SPIR-V."""
    from .gpu import key_for
    dev = get_device(device) if available() else None
    archs, spirv = (dev.archs, dev.spirv) if dev is not None else ((), PORTABLE_SPIRV)
    return [(f"{KIND}:{a}", key_for(f"{KIND}:{a}")) for a in archs] + [(spirv, key_for(spirv))]


def lookup_keys(device=None) -> list:
    """The target keys of ``candidate_keys``, in its order (what the cache looks up)."""
    return [k for _, k in candidate_keys(device)]


def host_key(device=None) -> str:
    """The key of code compiled here for this runtime: native for this device where Tack knows
    its name, else SPIR-V."""
    return candidate_keys(device)[0][1]


def site_candidates(host=None) -> list:
    """Site bundles for this runtime: the candidate keys of the first device."""
    return candidate_keys()


site_bundles = ordered_site_bundles(site_candidates)


# ---------------------------------------------------------------------------
# Modules and kernels


def _argspecs(meta) -> list:
    return argspecs(meta, LevelZeroError)


def split_payload(payload) -> tuple[bytes, bytes]:
    """(spirv, native) of a stored artifact: Tack's Level Zero container, or bare SPIR-V."""
    from .gpu import L0_MAGIC, unpack_level_zero
    from .opencl_runtime import OpenCLError, check_spirv
    payload = bytes(payload)
    if payload[:len(L0_MAGIC)] == L0_MAGIC:
        try:
            spirv, native = unpack_level_zero(payload)
        except ValueError as e:
            raise LevelZeroError(f"damaged Level Zero artifact ({e})") from None
    else:
        spirv, native = payload, b""
    try:
        check_spirv(spirv)          # the driver's compiler is not trusted with malformed SPIR-V
    except OpenCLError as e:
        raise LevelZeroError(str(e)) from None
    return spirv, native


class LevelZeroKernel:
    """A kernel of a built module on one device.

    ``format``: ``"native"`` or ``"spirv"``, what the module was built from;
    ``native_refused``: why the native part was not used (None if it was, or
    there was none); ``native_from_driver``: the driver's native code for a
    module built from SPIR-V (bytes to store under the device's key), else None.
    """

    def __init__(self, dev, module, kernel, entry, specs, fmt, native_refused, native_from_driver,
                 build_log, num_args):
        self.dev, self.module, self.kernel, self.entry, self.specs = dev, module, kernel, entry, specs
        self.format = fmt
        self.native_refused = native_refused
        self.native_from_driver = native_from_driver
        self.build_log = build_log
        self.num_args = num_args
        self.max_group = dev.max_group  # work-items of a group: the device's, or the kernel's less
        # its group size and arguments set, then the launch appended: one launch at a time
        self.lock = LaunchLock(f"kernel '{entry}' on {dev.name}")

    def __repr__(self):
        return f"<LevelZeroKernel {self.entry!r} ({self.format}) on {self.dev.name}>"


def _build_log(api, log) -> str:
    if not log.value:
        return ""
    try:
        n = _size(0)
        if api.raw("zeModuleBuildLogGetString", log, ctypes.byref(n), None) != ZE_RESULT_SUCCESS:
            return ""
        buf = ctypes.create_string_buffer(max(1, n.value))
        api.raw("zeModuleBuildLogGetString", log, ctypes.byref(n), buf)
        return buf.value.decode(errors="replace")
    finally:
        api.raw("zeModuleBuildLogDestroy", log)


def _create_module(dev, data: bytes, fmt: int):
    """(module handle or None, ze_result, build log) of ``zeModuleCreate`` for one format."""
    api = dev.api
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    desc = ze_module_desc_t(stype=ZE_STRUCTURE_TYPE_MODULE_DESC, format=fmt, inputSize=len(data),
                            pInputModule=ctypes.cast(buf, ctypes.POINTER(ctypes.c_uint8)),
                            pBuildFlags=b"")
    module, log = _H(), _H()
    r = api.raw("zeModuleCreate", dev.context, dev.handle, ctypes.byref(desc), ctypes.byref(module),
                ctypes.byref(log))
    text = _build_log(api, log)
    if r != ZE_RESULT_SUCCESS:
        if module.value:
            api.raw("zeModuleDestroy", module)
        return None, r, text
    return module, r, text


def _native_binary(dev, module) -> bytes | None:
    api = dev.api
    n = _size(0)
    if api.raw("zeModuleGetNativeBinary", module, ctypes.byref(n), None) != ZE_RESULT_SUCCESS \
            or not n.value:
        return None
    buf = (ctypes.c_uint8 * n.value)()
    if api.raw("zeModuleGetNativeBinary", module, ctypes.byref(n), buf) != ZE_RESULT_SUCCESS:
        return None
    return bytes(buf[:n.value])


def load(payload: bytes, meta: dict, device=None) -> LevelZeroKernel:
    """A Level Zero artifact -> its kernel ``meta["entry"]`` on ``device`` (the first by default).

    The native part first (``ZE_MODULE_FORMAT_NATIVE``); where the driver refuses it, or there
    is none, the SPIR-V (``ZE_MODULE_FORMAT_IL_SPIRV``).  LevelZeroError, with the driver's
    results and build log, when neither builds, the kernel is missing, or its parameters do
    not match ``meta``.
    """
    dev = get_device(device)
    spirv, native = split_payload(payload)
    entry = meta.get("entry")
    if not entry:
        raise LevelZeroError("variant metadata names no entry point")
    specs = _argspecs(meta)
    api = dev.api
    module, fmt, refused, from_driver, log = None, None, None, None, ""
    if native:
        module, r, log = _create_module(dev, native, ZE_MODULE_FORMAT_NATIVE)
        if module is not None:
            fmt = "native"
        else:
            refused = f"{result_name(r)}" + (f": {log.strip()}" if log.strip() else "")
    if module is None:
        module, r, log = _create_module(dev, spirv, ZE_MODULE_FORMAT_IL_SPIRV)
        if module is None:
            tried = f"the native code was refused ({refused}); " if refused else ""
            raise LevelZeroError(f"module for '{entry}' does not build on {dev.name}: {tried}"
                                 f"zeModuleCreate from SPIR-V: {result_name(r)}\n{log}".rstrip(), r)
        fmt = "spirv"
        from_driver = _native_binary(dev, module)
    kernel = _H()
    name = entry.encode()
    r = api.raw("zeKernelCreate", module, ctypes.byref(ze_kernel_desc_t(
        stype=ZE_STRUCTURE_TYPE_KERNEL_DESC, pKernelName=name)), ctypes.byref(kernel))
    if r != ZE_RESULT_SUCCESS:
        api.raw("zeModuleDestroy", module)
        raise LevelZeroError(f"module has no kernel '{entry}' ({result_name(r)})", r)
    props = ze_kernel_properties_t(stype=ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES)
    limit = None
    if dev.kernel_max_group:            # the kernel's own limit (its registers, its barriers)
        limit = ze_kernel_max_group_size_properties_ext_t(stype=KERNEL_MAX_GROUP_SIZE_STYPE)
        props.pNext = ctypes.addressof(limit)
    api("zeKernelGetProperties", kernel, ctypes.byref(props))
    k = LevelZeroKernel(dev, module, kernel, entry, specs, fmt, refused, from_driver, log,
                        props.numKernelArgs)
    if limit is not None and limit.maxGroupSize:
        k.max_group = max(1, min(dev.max_group, limit.maxGroupSize))
    k.spirv = spirv
    check_entry_params(entry, specs, k.num_args, LevelZeroError)
    return k


def store_back(kernel):
    """(target key, artifact, what it is) of the native code the driver built from SPIR-V
    (``zeModuleGetNativeBinary``), with that SPIR-V, for the dispatcher to store under the
    device's native key: the next process loads it natively, and falls back to the SPIR-V if a
    driver update refuses it.  None for a module loaded natively, or a device Tack has no
    native key for."""
    if not kernel.native_from_driver or not kernel.dev.archs:
        return None
    from .gpu import key_for, pack_level_zero
    arch = f"{KIND}:{kernel.dev.archs[0]}"
    return key_for(arch), pack_level_zero(kernel.spirv, kernel.native_from_driver), {
        "backend": KIND, "arch": arch, "suffix": ".spv.zebin", "device": kernel.dev.name,
        "made_by": "driver"}


# ---------------------------------------------------------------------------
# Device arrays and launches


class LevelZeroArray(ContiguousArray):
    """An array kept in device memory (``zeMemAllocDevice``), passed to launches without copying;
    ``numpy()`` copies it back through shared staging."""

    def __init__(self, dev, ptr, shape, dtype, layout, writable=True):
        super().__init__(dev, shape, dtype, layout, writable)
        self.ptr = ptr

    def read(self, out):
        stage = self.dev.alloc_shared(out.nbytes)
        try:
            self.dev.copy(stage, self.ptr, out.nbytes)
            ctypes.memmove(out.ctypes.data, stage, out.nbytes)
        finally:
            self.dev.free(stage)

    def __del__(self):
        try:
            self.dev.free(self.ptr)
        except Exception:                   # noqa: BLE001 - at interpreter exit
            pass


def to_device(array, device=None) -> LevelZeroArray:
    """``array`` copied into device memory on ``device``, in its own memory order."""
    a, host, layout = host_copy(array)
    dev = get_device(device)
    ptr = dev.alloc_device(host.nbytes)
    out = LevelZeroArray(dev, ptr, a.shape, a.dtype, layout, bool(a.flags.writeable))
    if host.nbytes:
        stage = dev.alloc_shared(host.nbytes)
        try:
            ctypes.memmove(stage, host.ctypes.data, host.nbytes)
            dev.copy(ptr, stage, host.nbytes)
        finally:
            dev.free(stage)
    return out


_PARAM_DTYPES = {"ptr": "<u8", "i64": "<i8"}


def _raw(code, value) -> bytes:
    """A parameter's bytes: a pointer or an ``i64`` slot (``argument_layout``) as 8 bytes, a
    scalar (``scalar_numpy``'s) as its own."""
    if isinstance(value, np.generic):
        return value.tobytes()
    return np.asarray(value, dtype=_PARAM_DTYPES[code]).tobytes()


def launch(kernel: LevelZeroKernel, meta: dict, args, dims, debug: bool = False, block=None):
    """Run ``kernel`` over ``dims`` (1 to 3 extents) with ``args`` (one per value argument, as
    ``meta["argspec"]`` types them); returns the error record (int64[4]) in debug mode, else None.

    NumPy arrays go in shared allocations, copied in before the launch and, when their type is
    writable, back after it; ``LevelZeroArray`` arguments stay on the device.  ``block`` (a
    tuple like ``dims``, or an int: work-items per group) overrides the work-group shape.
    """
    dev = kernel.dev
    api = dev.api
    dims = check_launch(kernel, args, dims)
    codes = check_param_count(kernel, kernel.num_args, debug, LevelZeroError)
    temps, staging = [], Staging()

    def upload(host):           # a shared allocation holding the host memory
        ptr = dev.alloc_shared(host.nbytes)
        temps.append(ptr)
        if host.nbytes:
            ctypes.memmove(ptr, host.ctypes.data, host.nbytes)
        return ptr, host

    try:
        values = argument_values(kernel, args, LevelZeroArray, lambda a: (a.ptr, a.element_strides()),
                                 upload, staging, "a NumPy array or a LevelZeroArray", FOREIGN)
        grid = layout_grid(dims)
        values += grid
        err = errptr = None
        if debug:
            err = np.zeros(4, np.int64)
            errptr = dev.alloc_shared(err.nbytes)
            temps.append(errptr)
            ctypes.memmove(errptr, err.ctypes.data, err.nbytes)
            values.append(errptr)
        if grid[0] * grid[1] * grid[2] == 0:
            return err
        local = choose_block(dims, block, DEFAULT_GROUP_SIZE, kernel.max_group,
                             dev.max_item_sizes, f"kernel '{kernel.entry}' on {dev.name}")
        # The last grid dimension on x; past the device's group count along an axis, the
        # entry's grid-stride loop takes the rest.
        counts, local3 = hardware_launch(dims, local, dev.max_group_counts)
        with kernel.lock:
            api("zeKernelSetGroupSize", kernel.kernel, *local3)
            keep = []
            for index, raw in enumerate(map(_raw, codes, values)):
                buf = ctypes.create_string_buffer(raw, len(raw))
                keep.append(buf)
                api("zeKernelSetArgumentValue", kernel.kernel, index, _size(len(raw)), buf,
                    what=f"parameter {index} of '{kernel.entry}'")
            count = ze_group_count_t(*counts)
            try:                        # dev.run holds the device's lock
                dev.run(lambda cl: api("zeCommandListAppendLaunchKernel", cl, kernel.kernel,
                                       ctypes.byref(count), None, 0, None))
            except LevelZeroError as e:
                raise LevelZeroError(f"launch of kernel '{kernel.entry}' over {dims} "
                                     f"(work-groups of {local}) failed on {dev.name}: {e}") \
                    from None
        for _, ptr, host in staging.back:
            ctypes.memmove(host.ctypes.data, ptr, host.nbytes)
        staging.finish()
        if err is not None:
            ctypes.memmove(err.ctypes.data, errptr, err.nbytes)
        return err
    finally:
        for p in temps:
            dev.free(p)


make_variant = device_variant(launch)      # what the dispatcher launches (tack.launch)


def describe() -> str:
    """What was found (``python -m tack.backends.level_zero_runtime``)."""
    found = devices()
    if not found:
        return f"no device: {unavailable_reason()}"
    lines = []
    for name, key in found:
        dev = get_device(key)
        lines.append(f"device {key}: {name} (target: {dev.arch})")
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
    sys.exit(0 if available() else 1)
