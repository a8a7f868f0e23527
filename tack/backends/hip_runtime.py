"""The HIP runtime side: AMD code objects built by the toolchain (``tack.backends.hip``, targets
``rocm:gfxNNN[:sramecc±][:xnack±]``) loaded and launched through HIP's module API with AMD's
``hip-python`` (docs/gpu-runtime.md).

Light to import: hip-python is imported on the first call that needs a device, and every HIP
call goes through one object (``_driver()``), the boundary the tests replace.

* **Devices.**  ``devices()`` lists the AMD GPUs as ``(name (rocm:gfx90a:sramecc+:xnack-),
  "hip:<index>")``; ``"hip"`` is ``hip:0``.  Without hip-python, without ROCm's
  ``libamdhip64.so`` (hip-python raises ``RuntimeError: failed to dlopen``), or with ROCm and
  no GPU (``hipGetDeviceCount`` returns ``hipErrorNoDevice``), ``available()`` is False,
  ``unavailable_reason()`` says which and what to install, and every call that needs a device
  raises ``HIPUnavailable`` with that text.
* **Keys.**  A code object is native code for one GPU: ``candidate_keys(device)`` is the key of
  the device's exact target id, gfx with its features as ROCm reports them
  (``rocm:gfx90a:sramecc+:xnack-``), and code compiled here is built for it
  (``toolchain_target``).
* **load(code_object, meta)**: checks the ELF (an AMDGPU HSA code object whose machine and
  sramecc/xnack settings run on this GPU), ``hipModuleLoadData``, ``hipModuleGetFunction``.
* **launch / to_device**: the launch machinery CUDA and HIP share (``cudalike.run``: the same
  kernel ABI, copies, block choice and ``__cuda_array_interface__`` arrays, which CuPy and
  PyTorch on ROCm expose) over HIP's calls.
"""

from __future__ import annotations

import struct

from .arch_names import bundle_machine
# The explicit kernel-argument bytes a launch of slot codes passes: each slot at its natural
# alignment, as the AMDGPU ABI lays them out (and CUDA's parameter space).
from .argument_layout import packed_bytes as kernarg_bytes
from .cudalike import DriverApi, GPUArray, GPUKernel, foreign_or_copy, run
from .device_args import Devices, argspecs, launch_codes
from .device_variant import any_arrays as check_args  # noqa: F401 - the runtime interface
from .device_variant import device_variant, ordered_site_bundles
from .device_variant import no_host_views as host_views  # noqa: F401 - the runtime interface

KIND = "hip"
ARCH_KIND = "rocm"
BUNDLE_MACHINE = bundle_machine(ARCH_KIND)   # its bundles' file names: its code's machine
INSTALL_HINT = ("install AMD's hip-python of your ROCm's version (`pip install hip-python~=X.Y.0` "
                "for ROCm X.Y) and ROCm's HIP runtime "
                "(libamdhip64.so: ROCm's packages, found under $ROCM_PATH/lib or /opt/rocm/lib)")


class HIPUnavailable(RuntimeError):
    """No AMD GPU here: hip-python, ROCm's HIP runtime or a GPU is missing."""


class HIPError(RuntimeError):
    """A code object HIP does not take, or a launch or copy HIP refuses."""


# ---------------------------------------------------------------------------
# Code objects: what the ELF header says about the GPU it is for

# EF_AMDGPU_MACH (e_flags & 0xff) of the gfx names; checked against the toolchain's output.
GFX_MACH = {"gfx900": 0x2c, "gfx906": 0x2f, "gfx908": 0x30, "gfx90a": 0x3f, "gfx942": 0x4c,
            "gfx950": 0x4f, "gfx1030": 0x36, "gfx1100": 0x41, "gfx1201": 0x4e}
_EM_AMDGPU, _ELFOSABI_AMDGPU_HSA = 224, 64
# Code object v4+: e_flags bits 8-9 xnack, 10-11 sramecc: 0 unsupported, 1 any, 2 off, 3 on.
_SETTING = {0: None, 1: None, 2: "-", 3: "+"}


def code_object_target(payload: bytes) -> tuple:
    """(EF_AMDGPU_MACH, {"xnack": "+"/"-"/None, "sramecc": ...}) of an AMDGPU code object;
    HIPError if it is not one."""
    data = bytes(payload[:64])
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise HIPError("not an AMD code object (no ELF header)")
    if data[4] != 2 or data[5] != 1:
        raise HIPError("not an AMD code object (not a 64-bit little-endian ELF)")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != _EM_AMDGPU or data[7] != _ELFOSABI_AMDGPU_HSA:
        raise HIPError(f"not an AMD code object (ELF machine {machine}, OS ABI {data[7]}; an HSA "
                       f"code object has {_EM_AMDGPU} and {_ELFOSABI_AMDGPU_HSA})")
    flags = struct.unpack_from("<I", data, 48)[0]
    return flags & 0xff, {"xnack": _SETTING[(flags >> 8) & 3], "sramecc": _SETTING[(flags >> 10) & 3]}


def kernarg_size(data: bytes, entry: str):
    """The bytes of explicit arguments kernel ``entry`` of a code object takes: the
    ``kernarg_size`` of its kernel descriptor (the symbol ``<entry>.kd``: 64 bytes, the size a
    u32 at offset 8), read from the ELF symbol table; None where it cannot be found (HIP then
    checks nothing, as before)."""
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        if shentsize < 64 or shoff + shnum * shentsize > len(data):
            return None
        sections = [struct.unpack_from("<IIQQQQII", data, shoff + i * shentsize)
                    for i in range(shnum)]     # name, type, flags, addr, offset, size, link, info
        want = (entry + ".kd").encode()
        for _, kind, _, _, off, size, link, _ in sections:
            if kind not in (2, 11) or link >= shnum:                # SHT_SYMTAB, SHT_DYNSYM
                continue
            str_off, str_size = sections[link][4], sections[link][5]
            for at in range(off, off + size - 23, 24):
                name, _, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, at)
                end = data.find(b"\0", str_off + name, str_off + str_size)
                if end < 0 or data[str_off + name:end] != want or shndx >= shnum:
                    continue
                _, _, _, addr, sec_off, _, _, _ = sections[shndx]
                at_kd = sec_off + value - addr
                if 0 <= at_kd and at_kd + 12 <= len(data):
                    return struct.unpack_from("<I", data, at_kd + 8)[0]
                return None
    except struct.error:
        return None
    return None


def target_features(arch: str) -> tuple:
    """``'gfx90a:sramecc+:xnack-'`` -> (``'gfx90a'``, {"sramecc": "+", "xnack": "-"})."""
    gfx, *feats = arch.split(":")
    return gfx, {f[:-1]: f[-1] for f in feats if len(f) > 1 and f[-1] in "+-"}


def code_object_runs_on(payload: bytes, arch: str) -> str | None:
    """Why the code object cannot run on a GPU whose target id is ``arch``; None if it can
    (or if the GPU's gfx is not in ``GFX_MACH``: then HIP decides)."""
    mach, settings = code_object_target(payload)
    gfx, feats = target_features(arch)
    want = GFX_MACH.get(gfx)
    if want is not None and mach != want:
        other = next((g for g, m in GFX_MACH.items() if m == mach), f"EF_AMDGPU_MACH {mach:#x}")
        return f"it is code for {other}; this GPU is {gfx}"
    for name, value in settings.items():
        have = feats.get(name)
        if value is not None and have is not None and value != have:
            return f"it is built with {name}{value}; this GPU runs with {name}{have}"
    return None


# ---------------------------------------------------------------------------
# HIP, through hip-python (the one place its functions are called)


def _import_driver():
    """hip-python's HIP module (``from hip import hip``; ``rocm.bindings.hip`` in its newest
    packaging)."""
    try:
        from hip import hip
    except ImportError:
        from rocm.bindings import hip
    return hip


class _HipApi(DriverApi):
    """The HIP calls the launch machinery makes; each raises HIPError naming the function and
    HIP's error."""

    error = HIPError
    # HIP's dispatch packet holds a launch's work-items per axis in 32 bits (grid_size_x...).
    max_axis_items = 2**32 - 1

    @staticmethod
    def error_text(status) -> str:
        return getattr(status, "name", None) or f"hipError_t {int(status)}"

    def enter(self, dev):
        self.call("hipSetDevice", dev.index)

    def alloc(self, dev, n):
        return int(self.call("hipMalloc", n))

    def free(self, dev, ptr):
        self.call("hipFree", ptr)

    def htod(self, dev, ptr, host, n):
        self.call("hipMemcpyHtoDAsync", ptr, host.ctypes.data, n, dev.stream)

    def dtoh(self, dev, host, ptr, n):
        self.call("hipMemcpyDtoHAsync", host.ctypes.data, ptr, n, dev.stream)

    def memset0(self, dev, ptr, n):
        self.call("hipMemsetD8Async", ptr, 0, n, dev.stream)

    def launch(self, kernel, grid, block, params):
        self.call("hipModuleLaunchKernel", kernel.func, *grid, *block, 0, kernel.dev.stream,
                  params, None)

    def sync(self, dev):
        self.call("hipStreamSynchronize", dev.stream)

    legacy_stream = 0                       # HIP's null stream: the legacy default stream

    def sync_foreign(self, dev, stream):
        self.call("hipStreamSynchronize", stream)

    dlpack_devices = (10,)                  # kDLROCM

    def dlpack_stream(self, dev):           # on ROCm, 0 is the default stream
        return int(dev.stream or 0)


class _Device:
    """An AMD GPU: selected with hipSetDevice, with a stream of its own."""

    def __init__(self, api, index, name, arch, runtime_version, max_threads, max_block, max_grid):
        self.api, self.index, self.name, self.arch = api, index, name, arch
        self.runtime_version = runtime_version
        self.max_threads, self.max_block, self.max_grid = max_threads, max_block, max_grid
        self.lost = None                    # why, once a kernel's sticky error lost its context
        self.stream = None

    def open(self):
        if self.stream is None:
            self.api.call("hipSetDevice", self.index)
            self.stream = self.api.call("hipStreamCreateWithFlags", 1)     # hipStreamNonBlocking
        return self

    @property
    def label(self) -> str:
        return f"{self.name} ({ARCH_KIND}:{self.arch})"

    def __repr__(self):
        return f"<HIP device {KIND}:{self.index} {self.name} ({ARCH_KIND}:{self.arch})>"


_driver = _import_driver    # the boundary: tests replace it with a fake HIP module


def _text(raw) -> str:
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
    return str(raw).split("\0", 1)[0].strip()


def _fills_props(drv) -> bool:
    """Whether this hip-python's ``hipGetDeviceProperties`` fills a ``hipDeviceProp_t`` it is
    given, ``(prop, deviceId) -> (err,)``: hip-python 6.x and 7.x (ROCm 6.2 to 7.2) do, as
    HIP's C function does; hip-python 10 makes one, ``(deviceId) -> (err, prop)``.  Read from
    the signature Cython writes on the first line of the function's docstring."""
    doc = getattr(drv.hipGetDeviceProperties, "__doc__", None) or ""
    head = doc.lstrip().split("\n", 1)[0].replace(" ", "")
    return head.startswith("hipGetDeviceProperties(prop,")


def device_properties(api, drv, index):
    """``hipDeviceProp_t`` of device ``index``, with the call form of this hip-python
    (``_fills_props``)."""
    if _fills_props(drv):
        props = drv.hipDeviceProp_t()
        api.call("hipGetDeviceProperties", props, index)
        return props
    return api.call("hipGetDeviceProperties", index)


def _discover():
    """(api, [_Device], reason): the AMD GPUs found, or why there is none (never raises)."""
    try:
        drv = _driver()
    except ImportError as e:
        return (None, [], f"HIP is not available: hip-python does not import ({e}); {INSTALL_HINT}")
    except Exception as e:              # noqa: BLE001 - a broken install: say so, never crash
        return (None, [], f"HIP is not available: hip-python fails to import "
                          f"({type(e).__name__}: {e}); {INSTALL_HINT}")
    api = _HipApi(drv)
    try:
        count = int(api.call("hipGetDeviceCount"))
    except HIPError as e:               # hipErrorNoDevice: ROCm is here, no GPU
        version = ""
        try:
            v = int(api.call("hipRuntimeGetVersion"))
            version = f" (HIP runtime {v // 10000000}.{v // 100000 % 100}.{v % 100000})"
        except Exception:               # noqa: BLE001 - the version is only for the message
            pass
        return (api, [], f"HIP is not available: ROCm's HIP runtime{version} found no AMD GPU "
                         f"({e}); check rocminfo, /dev/kfd permissions and HIP_VISIBLE_DEVICES")
    except Exception as e:              # noqa: BLE001 - hip-python raises when libamdhip64 is absent
        return (api, [], f"HIP is not available: ROCm's HIP runtime (libamdhip64.so) was not "
                         f"found ({type(e).__name__}: {e}); install ROCm, or set ROCM_PATH "
                         "to its directory (hip-python is installed)")
    devs, problems = [], []
    attrs = drv.hipDeviceAttribute_t
    for i in range(count):
        try:
            props = device_properties(api, drv, i)
            arch = _text(props.gcnArchName)
            name = _text(props.name) or arch

            def attr(n, i=i):
                return int(api.call("hipDeviceGetAttribute", getattr(attrs, n), i))
            mt = attr("hipDeviceAttributeMaxThreadsPerBlock")
            mb = [attr(f"hipDeviceAttributeMaxBlockDim{x}") for x in "XYZ"]
            mg = [attr(f"hipDeviceAttributeMaxGridDim{x}") for x in "XYZ"]
            devs.append(_Device(api, i, name, arch, None, mt, mb, mg))
        except Exception as e:          # noqa: BLE001 - one device's problem, named
            problems.append(f"{KIND}:{i}: {type(e).__name__}: {e}")
    reason = None
    if not devs:
        reason = (f"HIP is not available: HIP lists no usable GPU"
                  f"{' (' + '; '.join(problems) + ')' if problems else ''}; check rocminfo")
    return (api, devs, reason)


_devices = Devices(_discover, KIND, "HIP", _Device, HIPUnavailable)
# The runtime interface (docs/architecture.md, "Adding a backend"), from the devices found.
_lock, reset, available, unavailable_reason = (_devices.lock, _devices.reset, _devices.available,
                                               _devices.reason)
devices, get_device, _describe = _devices.listing, _devices.get, _devices.describe



# ---------------------------------------------------------------------------
# Keys of a device


def build_arch(device=None) -> str:
    """``rocm:<target id>`` of the device: gfx and its features as ROCm reports them."""
    return f"{ARCH_KIND}:{_describe(device).arch}"


def target_id_candidates(arch: str) -> list:
    """The target ids whose code objects run on a GPU of target id ``arch``, in ROCm's
    compatibility order (the loader's: a code object's feature is either the GPU's setting or
    "any"): the exact target id first, then each with fewer features pinned, down to the bare
    gfx, the "any" build (xnack and sramecc any), which is what ``rocm:gfxNNN`` builds.
    ``'gfx942:sramecc+:xnack-'`` -> [that, ``'gfx942:sramecc+'``, ``'gfx942:xnack-'``,
    ``'gfx942'``]."""
    from itertools import combinations
    gfx, *feats = arch.split(":")
    feats = [f for f in feats if f]
    out = []
    for n in range(len(feats), -1, -1):
        for keep in combinations(feats, n):
            name = ":".join((gfx,) + keep)
            if name not in out:
                out.append(name)
    return out


def candidate_keys(device=None) -> list:
    """[(``rocm:<target id>``, target key)] of the code objects that run on the device, most
    specific first (``target_id_candidates``): its exact target id, then the "any" build."""
    from .gpu import key_for
    return [(f"{ARCH_KIND}:{a}", key_for(f"{ARCH_KIND}:{a}"))
            for a in target_id_candidates(_describe(device).arch)]


def lookup_keys(device=None) -> list:
    return [k for _, k in candidate_keys(device)]


def site_candidates(host=None) -> list:
    return candidate_keys()


site_bundles = ordered_site_bundles(site_candidates)


def host_key(device=None) -> str:
    """The key of code compiled here for the device: its exact target id's."""
    return candidate_keys(device)[0][1]


def toolchain_target(device=None):
    """``tack.backends.hip.target("rocm:<target id>")`` of the device."""
    from .hip import target
    return target(build_arch(device))


# ---------------------------------------------------------------------------
# Load and launch


class HIPKernel(GPUKernel):
    """A code object loaded as a HIP module on one device, with its kernel."""

    kernarg_size = None     # the bytes of arguments its kernel descriptor says (None: unknown)
    # per debug mode (False, True): the bytes that launch lays out (from specs, once, at load)
    kernarg_passed = (None, None)


class HIPArray(GPUArray):
    """An array in AMD GPU memory (``to_device``, or another library's through
    ``__cuda_array_interface__``)."""


def load(payload, meta: dict, device=None) -> HIPKernel:
    """A code object -> its kernel ``meta["entry"]`` on ``device`` (the first by default).

    HIPError when it is not a code object for this GPU, HIP does not load it, or it has no such
    kernel."""
    dev = get_device(device)
    api = dev.api
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise HIPError(f"a code object is bytes, not {type(payload).__name__}")
    data = bytes(payload)
    why = code_object_runs_on(data, dev.arch)
    if why:
        raise HIPError(f"this code object cannot run on {dev.name} ({ARCH_KIND}:{dev.arch}): {why}")
    entry = meta.get("entry")
    if not entry:
        raise HIPError("variant metadata names no entry point")
    specs = argspecs(meta, HIPError)
    if (entry + ".kd").encode() not in data:
        raise HIPError(f"the code object has no kernel '{entry}' (no {entry}.kd descriptor)")
    drv = api.drv
    with _lock:
        api.enter(dev)
        try:
            module = api.call("hipModuleLoadData", data)
        except HIPError as e:
            raise HIPError(f"HIP does not load the code object of '{entry}' on {dev.name}: {e}") from None
        try:
            func = api.call("hipModuleGetFunction", module, entry.encode())
        except HIPError as e:
            raise HIPError(f"the code object has no kernel '{entry}' ({e})") from None
        try:
            max_threads = int(api.call(
                "hipFuncGetAttribute",
                drv.hipFunction_attribute.HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func))
        except (HIPError, AttributeError):
            max_threads = dev.max_threads
    kernel = HIPKernel(api, dev, module, func, entry, specs, None, max_threads or dev.max_threads)
    # HIP cannot tell a kernel's parameters (CUDA's cuFuncGetParamInfo has no HIP twin): the
    # code object's kernel descriptor gives their size, which each launch is checked against.
    kernel.kernarg_size = kernarg_size(data, entry)
    kernel.kernarg_passed = tuple(kernarg_bytes(launch_codes(specs, d)) for d in (False, True))
    return kernel


def launch(kernel: HIPKernel, meta: dict, args, dims, debug: bool = False, block=None):
    """As ``cuda_runtime.launch``, on an AMD GPU: the kernel ABI of docs/gpu.md; NumPy arrays
    copied in and the writable ones back; device arrays passed by pointer; ``block`` overrides
    the block (work-group) shape.  Returns the error record in debug mode, else None."""
    if kernel.kernarg_size is not None:
        passes = kernel.kernarg_passed[bool(debug)]
        if passes != kernel.kernarg_size:
            raise HIPError(f"kernel '{kernel.entry}' takes {kernel.kernarg_size} bytes of "
                           f"arguments but a {'debug' if debug else 'non-debug'} launch passes "
                           f"{passes}: was it compiled with debug mode as this launch says?")
    return run(kernel, args, dims, debug, block, HIPError, HIPArray)


make_variant = device_variant(launch)      # what the dispatcher launches (tack.launch)


def to_device(array, device=None) -> HIPArray:
    """A NumPy array copied to ``device``; an object with ``__cuda_array_interface__`` or DLPack
    (CuPy or PyTorch on ROCm) wrapped without a copy."""
    return foreign_or_copy(get_device(device), array, HIPArray)


def describe() -> str:
    found = _devices.found()
    if not found:
        return f"no device: {unavailable_reason()}"
    return "\n".join(f"device {KIND}:{d.index}: {d.name}, builds for {build_arch(d)}" for d in found)


if __name__ == "__main__":
    import sys
    print(describe())
    sys.exit(0 if available() else 1)
