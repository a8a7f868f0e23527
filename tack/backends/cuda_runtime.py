"""The CUDA runtime side: PTX built by the toolchain (``tack.backends.cuda``) loaded and launched
through the CUDA driver API of NVIDIA's ``cuda-python`` (docs/gpu-runtime.md).

The module is light to import: cuda-python is imported on the first call that needs a device,
and every driver call goes through one object (``_driver()``), the boundary the tests replace.

* **Devices.**  ``devices()`` lists the CUDA devices as ``(name (cuda:sm_XY), "cuda:<index>")``;
  ``"cuda"`` is ``cuda:0``.  Where there is none (cuda-python not installed, no NVIDIA driver,
  no GPU), ``available()`` is False and ``unavailable_reason()`` says which and how to install;
  every call that needs a device raises ``CUDAUnavailable`` with that text (never a crash).
* **Keys.**  The artifact is PTX, which the driver JIT-compiles for its GPU: PTX built for an
  older sm runs on a newer GPU; code built ahead of time holds SASS for its sm beside the PTX,
  in the same entry under the same key (``gpu.pack_cuda``).  ``candidate_keys(device)`` lists, most specific first, the
  device's exact ``cuda:sm_XY`` (and its arch-specific ``sm_XYa``), then every older sm of
  ``arch_names.PTX_ISA`` whose PTX ISA the driver can JIT (``cuda_arch_candidates``).  So a device
  is served, in order: the cubin of its exact sm, the PTX of its sm (the same entry: a cubin the
  driver refuses falls back to it), the PTX of lower sm's.  Code compiled here is built for the
  first of them (``toolchain_target``, PTX only), so ``host_key()`` is its key.
* **load(artifact, meta)**: checks the PTX (its ``.target`` runs on this GPU, its ``.version`` is
  one the driver JITs, its entry's parameters are what ``meta["argspec"]`` makes), then
  ``cuModuleLoadDataEx`` (with JIT log buffers) of the cubin where it is for this exact sm, else
  (or when the driver refuses it: one log line per process) of the PTX, and ``cuModuleGetFunction``.
* **launch(kernel, meta, args, dims, debug, block)**: the kernel ABI of docs/gpu.md, on the
  device's stream; NumPy arrays are copied in and the writable ones back; device arrays
  (``to_device``) and objects with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba) are
  passed by their pointer without a copy.

The launch machinery (``GPUArray``, ``GPUKernel``, ``run``) is ``cudalike``'s, which the HIP
runtime shares; this module gives it CUDA's driver calls (``_CudaApi``).
"""

from __future__ import annotations

import re

from .arch_names import bundle_machine
from .cudalike import DriverApi, GPUArray, GPUKernel, foreign_or_copy, run
from .device_args import Devices, check_entry_params, launch_codes
from .device_args import argspecs as _argspecs
from .device_variant import any_arrays as check_args  # noqa: F401 - the runtime interface
from .device_variant import device_variant, ordered_site_bundles
from .device_variant import no_host_views as host_views  # noqa: F401 - the runtime interface

KIND = "cuda"
ARCH_KIND = "cuda"
BUNDLE_MACHINE = bundle_machine(ARCH_KIND)   # its bundles' file names: its code's machine
INSTALL_HINT = ('install cuda-python (`pip install "tack[cuda]"`, or `pip install cuda-python`) '
                "and NVIDIA's driver (libcuda.so.1, from the system's NVIDIA driver package)")

JIT_LOG_BYTES = 16384

# The newest PTX ISA each CUDA driver JIT-compiles, by driver version (cuDriverGetVersion:
# 1000 * major + 10 * minor).  A driver newer than the table takes everything Tack emits.
DRIVER_PTX_ISA = {
    10000: "6.3", 10010: "6.4", 10020: "6.5", 11000: "7.0", 11010: "7.1", 11020: "7.2",
    11030: "7.3", 11040: "7.4", 11050: "7.5", 11060: "7.6", 11070: "7.7", 11080: "7.8",
    12000: "8.0", 12010: "8.1", 12020: "8.2", 12030: "8.3", 12040: "8.4", 12050: "8.5",
    12060: "8.5", 12080: "8.7", 12090: "8.8", 13000: "9.0",
}


class CUDAUnavailable(RuntimeError):
    """No CUDA device here: cuda-python, the NVIDIA driver or a GPU is missing."""


class CUDAError(RuntimeError):
    """PTX the driver does not take, or a launch or copy the driver refuses."""


# ---------------------------------------------------------------------------
# Target keys: pure functions of the compute capability and the driver version


def _isa(text: str) -> tuple:
    major, minor = text.split(".")
    return int(major), int(minor)


def max_ptx_isa(driver_version: int | None) -> str | None:
    """The newest PTX ISA a driver of ``driver_version`` JITs (None: unknown, no limit)."""
    if not driver_version:
        return None
    known = [v for v in sorted(DRIVER_PTX_ISA) if v <= driver_version]
    if not known:
        return "6.0"                # older than CUDA 10: sm_60's ISA at most
    if driver_version > max(DRIVER_PTX_ISA):
        return None                 # newer than the table: newer than anything Tack emits
    return DRIVER_PTX_ISA[known[-1]]


def _sm(arch: str) -> tuple:
    """``'sm_90a'`` -> (9, 0, 'a'); ``'sm_120'`` -> (12, 0, '')."""
    m = re.fullmatch(r"sm_(\d+)(\d)([a-z]?)", arch)
    if not m:
        raise ValueError(f"not an sm name: {arch!r}")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def cuda_arch_candidates(major: int, minor: int, driver_version: int | None = None) -> list:
    """The ``sm_XY`` names whose PTX runs on a GPU of compute capability ``major.minor`` under a
    driver of ``driver_version``, most specific first.

    1. the exact sm, then its arch-specific ``sm_XYa`` (which runs on exactly that sm only);
    2. every older sm Tack builds for (``arch_names.PTX_ISA``), newest first: the driver JIT-compiles
       PTX for an older sm for this GPU (PTX for sm_80 runs on sm_90).  Arch-specific PTX of
       another sm never runs here.

    Each only where the driver JITs its PTX ISA (``max_ptx_isa``).
    """
    from .arch_names import PTX_ISA
    limit = max_ptx_isa(driver_version)
    ok = (lambda a: True) if limit is None else (lambda a: _isa(PTX_ISA[a]) <= _isa(limit))
    here = (major, minor)
    exact = [a for a in (f"sm_{major}{minor}", f"sm_{major}{minor}a") if a in PTX_ISA and ok(a)]
    lower = sorted((a for a in PTX_ISA if not _sm(a)[2] and _sm(a)[:2] < here and ok(a)),
                   key=lambda a: _sm(a)[:2], reverse=True)
    return exact + lower


def driver_can_run(ptx_target: str, ptx_version: str, major: int, minor: int,
                   driver_version: int | None) -> str | None:
    """Why PTX of ``.target ptx_target`` / ``.version ptx_version`` cannot run on a GPU of
    ``major.minor`` under that driver; None if it can."""
    try:
        t_major, t_minor, t_suffix = _sm(ptx_target)
    except ValueError:
        return f"its .target {ptx_target!r} is not an sm"
    if t_suffix and (t_major, t_minor) != (major, minor):
        return (f"it is arch-specific PTX for {ptx_target}, which runs only on compute "
                f"capability {t_major}.{t_minor}; this GPU is {major}.{minor}")
    if (t_major, t_minor) > (major, minor):
        return f"it targets {ptx_target}, newer than this GPU (sm_{major}{minor})"
    limit = max_ptx_isa(driver_version)
    if limit is not None and _isa(ptx_version) > _isa(limit):
        return (f"it is PTX ISA {ptx_version}; this driver ({_driver_text(driver_version)}) JITs "
                f"PTX ISA {limit} at most: update the NVIDIA driver")
    return None


def _driver_text(v) -> str:
    return f"CUDA {v // 1000}.{v % 1000 // 10}" if v else "version unknown"


# ---------------------------------------------------------------------------
# PTX: the entry's parameters, read from the text


_PTX_TYPES = {"ptr": (".u64", True), "i64": (".u64", False), "u64": (".u64", False),
              "i32": (".u32", False), "u32": (".u32", False), "i8": (".u8", False),
              "f32": (".f32", False), "f64": (".f64", False)}
# PTX's spellings of one width: LLVM writes .u/.b; hand-written PTX may use .s/.b.
_SAME = {".s64": ".u64", ".b64": ".u64", ".s32": ".u32", ".b32": ".u32", ".s8": ".u8", ".b8": ".u8"}


def _ptx_text(params) -> str:
    return "(" + ", ".join(t + (" .ptr" if p else "") for t, p in params) + ")"


def ptx_header(ptx: str) -> tuple:
    """``(.version, .target)`` of a PTX text; CUDAError if it has none."""
    v = re.search(r"^\s*\.version\s+(\d+\.\d+)", ptx, re.M)
    t = re.search(r"^\s*\.target\s+([A-Za-z0-9_]+)", ptx, re.M)
    if not v or not t:
        raise CUDAError("not PTX text (no .version or .target directive)")
    return v.group(1), t.group(1)


def ptx_entry_params(ptx: str, entry: str) -> list:
    """The parameters of ``.entry entry(...)`` as ``(type, is_pointer)``: ``('.u64', True)`` for
    ``.param .u64 .ptr .global .align 1 p0``; CUDAError if the PTX has no such entry."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(([^)]*)\)", ptx)
    if m is None:
        m2 = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*(\{|$)", ptx, re.M)
        if m2 is None:
            names = re.findall(r"\.entry\s+([A-Za-z0-9_$]+)", ptx)
            raise CUDAError(f"the PTX has no kernel '{entry}' (it has: {', '.join(names) or 'none'})")
        return []
    out = []
    for p in m.group(1).split(","):
        words = p.split()
        if not words:
            continue
        if words[0] != ".param":
            raise CUDAError(f"cannot read the PTX parameter {p.strip()!r} of '{entry}'")
        ty = words[1]
        out.append((_SAME.get(ty, ty), ".ptr" in words))
    return out


# ---------------------------------------------------------------------------
# The CUDA driver, through cuda-python (the one place its functions are called)


def _import_driver():
    """cuda-python's driver module (``cuda.bindings.driver``; ``cuda.cuda`` before 12.6)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver     # noqa: F401 - cuda-python < 12.6
    return driver


class _CudaApi(DriverApi):
    """The driver calls the launch machinery makes, on cuda-python's ``driver`` module.  Each
    returns the call's values and raises CUDAError naming the function and the driver's error."""

    error = CUDAError

    def error_text(self, status) -> str:
        name = getattr(status, "name", None) or f"CUresult {int(status)}"
        try:
            res = self.drv.cuGetErrorString(status)
            text = res[1] if isinstance(res, tuple) and len(res) > 1 else None
            if isinstance(text, bytes):
                text = text.decode(errors="replace")
        except Exception:                   # noqa: BLE001 - the name alone then
            text = None
        return f"{name} ({text})" if text else name

    def enter(self, dev):
        self.call("cuCtxSetCurrent", dev.context)

    def alloc(self, dev, n):
        return int(self.call("cuMemAlloc", n))

    def free(self, dev, ptr):
        self.call("cuMemFree", ptr)

    def htod(self, dev, ptr, host, n):
        self.call("cuMemcpyHtoDAsync", ptr, host.ctypes.data, n, dev.stream)

    def dtoh(self, dev, host, ptr, n):
        self.call("cuMemcpyDtoHAsync", host.ctypes.data, ptr, n, dev.stream)

    def memset0(self, dev, ptr, n):
        self.call("cuMemsetD8Async", ptr, 0, n, dev.stream)

    def launch(self, kernel, grid, block, params):
        self.call("cuLaunchKernel", kernel.func, *grid, *block, 0, kernel.dev.stream, params, 0)

    def sync(self, dev):
        self.call("cuStreamSynchronize", dev.stream)

    legacy_stream = 1                       # CU_STREAM_LEGACY

    def sync_foreign(self, dev, stream):
        self.call("cuStreamSynchronize", stream)

    # DLPack: CUDA memory (and managed memory) is taken; the consumer stream is this device's
    # (1, the legacy default stream, where it has none: DLPack reserves 0 on CUDA).
    dlpack_devices = (2, 13)                # kDLCUDA, kDLCUDAManaged

    def dlpack_stream(self, dev):
        return int(dev.stream or 0) or 1


class _Device:
    """A CUDA device: its primary context and a stream of its own."""

    def __init__(self, api, index, handle, name, cc, driver_version, max_threads, max_block, max_grid):
        self.api, self.index, self.handle, self.name = api, index, handle, name
        self.cc, self.driver_version = cc, driver_version
        self.max_threads, self.max_block, self.max_grid = max_threads, max_block, max_grid
        self.lost = None                    # why, once a kernel's sticky error lost its context
        self.context = self.stream = None

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def open(self):
        """Retain the primary context and create the stream (once)."""
        if self.context is None:
            ctx = self.api.call("cuDevicePrimaryCtxRetain", self.handle)
            self.api.call("cuCtxSetCurrent", ctx)
            self.stream = self.api.call("cuStreamCreate", 1)     # CU_STREAM_NON_BLOCKING
            self.context = ctx
        return self

    @property
    def label(self) -> str:
        return f"{self.name} ({ARCH_KIND}:{self.arch})"

    def __repr__(self):
        return f"<CUDA device {KIND}:{self.index} {self.name} ({ARCH_KIND}:{self.arch})>"


_driver = _import_driver    # the boundary: tests replace it with a fake driver module


def _attr(api, drv, name, handle):
    return int(api.call("cuDeviceGetAttribute", getattr(drv.CUdevice_attribute, name), handle))


def _discover():
    """(api, [_Device], reason): the devices found, or why there is none (never raises)."""
    try:
        drv = _driver()
    except ImportError as e:
        return (None, [], f"CUDA is not available: cuda-python does not import ({e}); {INSTALL_HINT}")
    except Exception as e:              # noqa: BLE001 - a broken install: say so, never crash
        return (None, [], f"CUDA is not available: cuda-python fails to import "
                          f"({type(e).__name__}: {e}); {INSTALL_HINT}")
    api = _CudaApi(drv)
    try:
        api.call("cuInit", 0)
    except CUDAError as e:              # a status: CUDA_ERROR_NO_DEVICE, ..._INSUFFICIENT_DRIVER
        return (api, [], f"CUDA is not available: the NVIDIA driver found no usable GPU ({e}); "
                         "check nvidia-smi")
    except Exception as e:              # noqa: BLE001 - cuda-python raises when libcuda is absent
        return (api, [], f"CUDA is not available: NVIDIA's driver library libcuda.so.1 was "
                         f"not found ({type(e).__name__}: {e}); install the NVIDIA driver "
                         "(cuda-python is installed)")
    devs, problems = [], []
    try:
        version = int(api.call("cuDriverGetVersion"))
        count = int(api.call("cuDeviceGetCount"))
        for i in range(count):
            try:
                h = api.call("cuDeviceGet", i)
                raw = api.call("cuDeviceGetName", 256, h)
                name = (raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw))
                name = name.split("\0", 1)[0].strip()
                cc = (_attr(api, drv, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", h),
                      _attr(api, drv, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", h))
                mt = _attr(api, drv, "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK", h)
                mb = [_attr(api, drv, f"CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{x}", h) for x in "XYZ"]
                mg = [_attr(api, drv, f"CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{x}", h) for x in "XYZ"]
                devs.append(_Device(api, i, h, name, cc, version, mt, mb, mg))
            except CUDAError as e:
                problems.append(f"{KIND}:{i}: {e}")
    except CUDAError as e:
        problems.append(str(e))
    reason = None
    if not devs:
        reason = (f"CUDA is not available: the NVIDIA driver lists no GPU"
                  f"{' (' + '; '.join(problems) + ')' if problems else ''}; check nvidia-smi "
                  "and CUDA_VISIBLE_DEVICES")
    return (api, devs, reason)


_devices = Devices(_discover, KIND, "CUDA", _Device, CUDAUnavailable)
# The runtime interface (docs/architecture.md, "Adding a backend"), from the devices found.
_lock, reset, available, unavailable_reason = (_devices.lock, _devices.reset, _devices.available,
                                               _devices.reason)
devices, get_device, _describe = _devices.listing, _devices.get, _devices.describe



_describe = _devices.describe


# ---------------------------------------------------------------------------
# Keys of a device


def arch_candidates(device=None) -> list:
    """``cuda:sm_XY`` names whose PTX the device runs, most specific first."""
    d = _describe(device)
    found = cuda_arch_candidates(d.cc[0], d.cc[1], d.driver_version)
    if not found:
        raise CUDAUnavailable(f"{d.name} (compute capability {d.cc[0]}.{d.cc[1]}, driver "
                              f"{_driver_text(d.driver_version)}) runs none of the PTX Tack builds")
    return [f"{ARCH_KIND}:{a}" for a in found]


def candidate_keys(device=None) -> list:
    """[(``cuda:sm_XY``, target key)] a launch on ``device`` can use, most specific first."""
    from .gpu import key_for
    return [(a, key_for(a)) for a in arch_candidates(device)]


def lookup_keys(device=None) -> list:
    """The target keys of ``candidate_keys``, in its order."""
    return [k for _, k in candidate_keys(device)]


def site_candidates(host=None) -> list:
    """Site bundles for this runtime: ``candidate_keys`` of the default device."""
    return candidate_keys()


site_bundles = ordered_site_bundles(site_candidates)


def build_arch(device=None) -> str:
    """The ``cuda:sm_XY`` code compiled here is built for: the first candidate (the exact sm when
    Tack builds for it, else the newest older one, which the driver JITs)."""
    return arch_candidates(device)[0]


def host_key(device=None) -> str:
    """The key of code compiled here for the device (its ``build_arch``): what the cache stores
    a variant compiled in this process under."""
    from .gpu import key_for
    return key_for(build_arch(device))


def toolchain_target(device=None):
    """The toolchain's target for the device: ``tack.backends.cuda.target(build_arch(device))``,
    PTX only (a miss: the driver compiles it for the device as it loads it; SASS is stored ahead
    of time, by ``tack.aot`` and bundles)."""
    from .cuda import target
    return target(build_arch(device), sass=False)


# ---------------------------------------------------------------------------
# Load and launch


class CUDAKernel(GPUKernel):
    """PTX loaded as a module on one device, with its entry function."""


class CUDAArray(GPUArray):
    """An array in CUDA device memory (``to_device``, or another library's through
    ``__cuda_array_interface__``)."""


def argspecs(meta) -> list:
    """The ``ArgSpec`` of each value argument of ``meta["argspec"]``; CUDAError if unreadable."""
    return _argspecs(meta, CUDAError)


def load(payload, meta: dict, device=None) -> CUDAKernel:
    """A CUDA artifact -> its kernel ``meta["entry"]`` on ``device`` (the first by default).

    The artifact is PTX text, or PTX with SASS for one sm (``gpu.pack_cuda``).  The cubin is
    loaded where the device is exactly its sm; a cubin the driver refuses (made by a ptxas newer
    than the driver, say) falls back to the PTX of the same entry, said once per process
    (``_refused``).  ``kernel.code``: ``"sass"`` or ``"ptx"``, what was loaded.

    CUDAError (with the JIT's log) when the PTX cannot run here, does not JIT, has no such
    kernel, or its entry's parameters are not what ``meta["argspec"]`` makes."""
    from .gpu import unpack_cuda
    dev = get_device(device)
    api = dev.api
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise CUDAError(f"a PTX module is bytes, not {type(payload).__name__}")
    try:
        ptx, cubin, label = unpack_cuda(payload)
    except ValueError as e:
        raise CUDAError(str(e)) from None
    data = ptx.rstrip(b"\0")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CUDAError("not PTX text (not ASCII)") from None
    version, target = ptx_header(text)
    why = driver_can_run(target, version, dev.cc[0], dev.cc[1], dev.driver_version)
    if why:
        raise CUDAError(f"this PTX cannot run on {dev.name}: {why}")
    entry = meta.get("entry")
    if not entry:
        raise CUDAError("variant metadata names no entry point")
    specs = argspecs(meta)
    params = ptx_entry_params(text, entry)
    check_entry_params(entry, specs, len(params), CUDAError)    # with or without the error record
    debug = len(params) == len(launch_codes(specs, True))
    want = [_PTX_TYPES[c] for c in launch_codes(specs, debug)]
    if params != want:
        raise CUDAError(f"kernel '{entry}' takes parameters {_ptx_text(params)}; its metadata "
                        f"({', '.join(s.text for s in specs)}) makes {_ptx_text(want)}")
    if cubin and sass_runs_on(label, dev.cc) and _sass_of(dev, label) not in _refused_by:
        try:
            kernel = _load_module(api, dev, cubin, entry, specs, len(params), "SASS")
        except CUDAError as e:
            from ..errors import no_room
            if no_room(e):                  # the device out of memory: not the cubin's fault
                raise
            _refused(dev, label, e)
        else:
            kernel.code = "sass"
            return kernel
    kernel = _load_module(api, dev, data, entry, specs, len(params), "PTX")
    kernel.code = "ptx"
    return kernel


def sass_runs_on(label: str, cc) -> bool:
    """Whether the cubin of a CUDA artifact's ``label`` (``sm_90 ptxas 13.0.88``) is for exactly
    compute capability ``cc`` (its ``sm_90a`` too): SASS of another sm is not loaded."""
    try:
        major, minor, _ = _sm(label.split(" ", 1)[0])
    except ValueError:
        return False
    return (major, minor) == tuple(cc)


_refused_by = {}            # (device, toolchain) -> the driver's error: cubins not tried again
_refused_count = [0]        # cubins refused in this process (tests, gpu_check.sh)


def _sass_of(dev, label: str) -> tuple:
    return dev.index, label.split(" ", 1)[-1]


def _refused(dev, label, error):
    """A cubin the driver refused: its device and toolchain are not tried again in this process,
    and the first refusal is one warning line (the PTX loads instead)."""
    import logging
    _refused_count[0] += 1
    first = not _refused_by
    _refused_by[_sass_of(dev, label)] = str(error)
    if first:
        logging.getLogger("tack.cuda").warning(
            "%s refuses the SASS Tack stored (%s): loading the PTX of the same entries instead "
            "(the driver compiles it; said once per process): %s", dev.name, label, error)


def _load_module(api, dev, image, entry, specs, num_params, what) -> CUDAKernel:
    """``cuModuleLoadDataEx`` of PTX text or a cubin, with JIT log buffers, and its entry."""
    drv = api.drv
    opt = drv.CUjit_option
    err_log, info_log = bytearray(JIT_LOG_BYTES), bytearray(JIT_LOG_BYTES)
    options = [opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
               opt.CU_JIT_INFO_LOG_BUFFER, opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES]
    values = [err_log, JIT_LOG_BYTES, info_log, JIT_LOG_BYTES]
    with _lock:
        api.enter(dev)
        try:
            module = api.call("cuModuleLoadDataEx", image + b"\0", len(options), options, values)
        except CUDAError as e:
            log = bytes(err_log).split(b"\0", 1)[0].decode(errors="replace").strip()
            raise CUDAError(f"the driver does not take the {what} of '{entry}' on {dev.name}: {e}"
                            f"{chr(10) + log if log else ''}") from None
        try:
            func = api.call("cuModuleGetFunction", module, entry.encode())
        except CUDAError as e:
            raise CUDAError(f"the {what} module has no kernel '{entry}' ({e})") from None
        max_threads = int(api.call("cuFuncGetAttribute",
                                   drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                   func))
    log = bytes(info_log).split(b"\0", 1)[0].decode(errors="replace").strip()
    return CUDAKernel(api, dev, module, func, entry, specs, num_params, max_threads, log)


def launch(kernel: CUDAKernel, meta: dict, args, dims, debug: bool = False, block=None):
    """Run ``kernel`` over the grid ``dims`` (1 to 3 extents) with ``args`` (one per value argument,
    as ``meta["argspec"]`` types them).

    NumPy arrays are copied to device memory before the launch and, when their type is
    writable, back after it; device arrays and ``__cuda_array_interface__`` objects are passed
    by pointer.  ``block`` (a tuple like ``dims``, or an int for the threads of a block)
    overrides the block shape; the grid is ``ceil(dims / block)``.  Returns the error record
    (``numpy.int64[4]``) in debug mode, None otherwise; the launch has finished and the copies
    are back when it returns."""
    return run(kernel, args, dims, debug, block, CUDAError, CUDAArray)


make_variant = device_variant(launch)      # what the dispatcher launches (tack.launch)


def to_device(array, device=None) -> CUDAArray:
    """A NumPy array copied to ``device``; an object with ``__cuda_array_interface__`` or DLPack
    (CuPy, PyTorch, JAX, Numba) wrapped without a copy."""
    return foreign_or_copy(get_device(device), array, CUDAArray)


def describe() -> str:
    """What was found, as lines of text (``python -m tack.backends.cuda_runtime``)."""
    found = _devices.found()
    if not found:
        return f"no device: {unavailable_reason()}"
    return "\n".join(f"device {KIND}:{d.index}: {d.name}, compute capability {d.cc[0]}.{d.cc[1]}, "
                     f"driver {_driver_text(d.driver_version)}; builds for {build_arch(d)}; "
                     f"takes {', '.join(arch_candidates(d))}" for d in found)


if __name__ == "__main__":
    import sys
    print(describe())
    sys.exit(0 if available() else 1)
