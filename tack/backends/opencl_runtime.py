"""The OpenCL runtime side: SPIR-V kernels run through OpenCL (docs/opencl.md).

On a machine without a GPU this is Intel's OpenCL CPU runtime, installed from
PyPI (``intel-opencl-rt`` with ``intel-cmplr-lib-rt``) and driven through
``pyopencl``.  The module is light to import: pyopencl is imported on the
first call that needs a device.

* **Setup without manual steps.**  The runtime wheel's ICD file names a path
  that does not exist, so OpenCL's ICD loader would find no platform.  Before
  pyopencl first initialises, ``configure_icd()`` finds ``libintelocl.so``
  itself (under ``sys.prefix``, the user base and every site-packages' prefix)
  and, unless ``OCL_ICD_VENDORS`` is already set, writes a one-line ICD file
  into ``icd_directory()`` and points ``OCL_ICD_VENDORS`` at that directory.
* **Devices.**  ``devices()`` lists the OpenCL devices that take SPIR-V, as
  ``(name, "opencl:<index>")``; ``"opencl"`` is the first of them.  Where
  there is none, ``available()`` is False and ``unavailable_reason()`` says
  why and which pip packages to install; every call that needs a device raises
  ``OpenCLUnavailable`` with that text.
* **Keys.**  SPIR-V is portable, so a variant's target key names the SPIR-V
  settings (``SPIRV``) and the LLVM that emits them, never the device:
  ``spirv_key()`` (``spirv:generic``; ``spirv:generic-fp32`` for a device whose
  ``CL_DEVICE_DOUBLE_FP_CONFIG`` is 0); ``candidate_keys()`` lists it.
* **load(spirv, meta)**: ``clCreateProgramWithIL`` then ``clBuildProgram`` ->
  an ``OpenCLKernel``.
* **launch(kernel, meta, args, dims, debug)**: builds the argument list of the
  kernel ABI from ``meta["argspec"]`` (``tack.types.spec`` strings), copies
  NumPy arrays to device buffers and the writable ones back, runs over the
  grid, and in debug mode returns the error record.  ``to_device(array)``
  keeps an array on the device across launches (``OpenCLArray.numpy()``).

The kernel ABI (fixed by the SPIR-V generator): one ``spir_kernel`` entry
whose parameters are, per value argument, for an array a global pointer to
its data, an i64 per extent (none when its shape is compiled in) and, for a
strided (layout ``A``) array, an i64 per stride in elements; for a scalar its
type (bool as i8); then three i64 grid extents n0, n1, n2 (1 for unused
dimensions); then, in debug mode, a global pointer to an i64[4] error record
(site id + 1, axis, index, size; zeroed before the launch).  Work-item
global id d is the grid index along d; work-items past the extents return,
so the global size is rounded up to a multiple of the work-group size.
"""

from __future__ import annotations

import os
import site
import sys
import tempfile
import threading
import warnings

import numpy as np

from .arch_names import PORTABLE_SPIRV, bundle_machine, portable_spirv
from .argument_layout import grid as layout_grid
from .device_args import (ContiguousArray, LaunchLock, Staging, argspecs, argument_values,
                          check_entry_params, check_launch, check_param_count, choose_block, device_index,
                          hardware_launch, host_copy, no_such_device)
from .device_variant import any_arrays as check_args  # noqa: F401 - the runtime interface
from .device_variant import device_variant, ordered_site_bundles
from .device_variant import no_host_views as host_views  # noqa: F401 - the runtime interface

KIND = "opencl"
BUNDLE_MACHINE = bundle_machine("spirv")   # its bundles' file names: its code's machine
PIP_PACKAGES = ("intel-opencl-rt", "intel-cmplr-lib-rt", "pyopencl")
INSTALL_HINT = (f"install Intel's OpenCL CPU runtime and pyopencl: "
                f"`pip install {' '.join(PIP_PACKAGES)}` (or run ci/install-opencl.sh)")
ICD_FILE = "tack-intel-cpu.icd"
RUNTIME_LIBRARY = "libintelocl.so"

# What the SPIR-V toolchain emits (the one place these settings live: its target
# machine is to be built from them, and the target key hashes them).
SPIRV = {"version": "1.2", "triple": "spirv64v1.2-unknown-unknown", "opt": 3}

# Work-items in a work-group when the caller does not choose (the kernel's limit caps it).
DEFAULT_GROUP_SIZE = 128


# Why another library's device array is not taken.
FOREIGN = "OpenCL kernels take OpenCL buffers, not the pointers DLPack and CUDA's interface give"


class OpenCLUnavailable(RuntimeError):
    """No OpenCL device that takes SPIR-V here: pyopencl or the runtime is missing."""


class OpenCLError(RuntimeError):
    """A SPIR-V program that does not build, or a launch that OpenCL refuses.  ``resource``: the
    runtime said it ran out of memory or resources, not that the program is at fault
    (``errors.no_room``: a cache entry that fails to load so is kept)."""

    def __init__(self, message, cause=None):
        super().__init__(message)
        # CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY
        self.resource = getattr(cause, "code", None) in (-4, -5, -6)


# ---------------------------------------------------------------------------
# Finding the runtime and telling the ICD loader about it


def _library_dirs() -> list:
    """Directories where pip puts a wheel's data files (``<prefix>/lib``), most likely first."""
    dirs = []
    prefixes = [sys.prefix, sys.exec_prefix, sys.base_prefix, getattr(site, "USER_BASE", None) or ""]
    for p in prefixes:
        if p:
            dirs.append(os.path.join(p, "lib"))
    for entry in list(sys.path) + _site_packages():
        if entry and os.path.basename(entry.rstrip(os.sep)) in ("site-packages", "dist-packages"):
            dirs.append(entry)
            dirs.append(os.path.normpath(os.path.join(entry, "..", "..")))     # <prefix>/lib
    seen, out = set(), []
    for d in dirs:
        d = os.path.abspath(d)
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _site_packages() -> list:
    try:
        return list(site.getsitepackages()) + [site.getusersitepackages()]
    except Exception:                       # noqa: BLE001 - some embedded Pythons lack these
        return []


def find_runtime_library() -> str | None:
    """The absolute path of Intel's OpenCL CPU runtime (``libintelocl.so``), or None.

    ``TACK_OPENCL_LIBRARY`` names it explicitly; otherwise the places pip
    installs the ``intel-opencl-rt`` wheel's libraries are searched.
    """
    explicit = os.environ.get("TACK_OPENCL_LIBRARY")
    if explicit:
        return os.path.abspath(explicit) if os.path.isfile(explicit) else None
    for d in _library_dirs():
        path = os.path.join(d, RUNTIME_LIBRARY)
        if os.path.isfile(path):
            return path
    return None


def icd_directory() -> str:
    """Where Tack keeps its ICD file: ``TACK_OPENCL_ICD_DIR``, else ``~/.cache/tack-opencl/vendors``
    (``$XDG_CACHE_HOME`` honoured)."""
    explicit = os.environ.get("TACK_OPENCL_ICD_DIR")
    if explicit:
        return os.path.abspath(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "tack-opencl", "vendors")


def write_icd(library: str, directory: str | None = None) -> str:
    """Write the one-line ICD file naming ``library`` into ``directory``; its path.

    Unchanged when it already says that; written through a temporary file and
    a rename, so a concurrent reader never sees half a line.
    """
    directory = directory or icd_directory()
    path = os.path.join(directory, ICD_FILE)
    line = os.path.abspath(library) + "\n"
    try:
        with open(path) as f:
            if f.read() == line:
                return path
    except OSError:
        pass
    os.makedirs(directory, exist_ok=True)
    from ..cache.trust_write import write_atomic      # a temporary file, then a rename
    write_atomic(path, line.encode(), 0o644)
    return path


_configured = None          # what configure_icd did, once per process


def configure_icd() -> dict:
    """Point OpenCL's ICD loader at Intel's CPU runtime, unless the user already chose.

    Must run before pyopencl first lists platforms (the loader reads
    ``OCL_ICD_VENDORS`` once per process); every entry point here calls it
    first.  Returns what it found and did: ``library``, ``icd_file``,
    ``vendors`` (the value in force) and ``action``.
    """
    global _configured
    if _configured is not None:
        return _configured
    lib = find_runtime_library()
    done = {"library": lib, "icd_file": None, "vendors": os.environ.get("OCL_ICD_VENDORS")}
    if done["vendors"]:
        done["action"] = "OCL_ICD_VENDORS was already set; left as it is"
    elif lib is None:
        done["action"] = f"{RUNTIME_LIBRARY} not found; the system's ICD files are used"
    else:
        icd = None
        for directory in (icd_directory(), os.path.join(tempfile.gettempdir(),
                                                        f"tack-opencl-{os.getuid()}", "vendors")):
            try:
                icd = write_icd(lib, directory)
                break
            except OSError:
                continue
        if icd is None:
            done["action"] = "no writable directory for an ICD file; the system's ICD files are used"
        else:
            os.environ["OCL_ICD_VENDORS"] = os.path.dirname(icd)
            done.update(icd_file=icd, vendors=os.path.dirname(icd),
                        action="OCL_ICD_VENDORS set to Tack's ICD directory")
    _configured = done
    return done


# ---------------------------------------------------------------------------
# Devices


# Re-entrant: a signal handler's (or a finalizer's) launch on a thread inside discovery or a
# context's making finds the devices or makes the context itself; the outer call then keeps
# what the nested one stored (a Lock waited for ever).
_lock = threading.RLock()
_state = None               # (devices, reason) once found
_contexts = {}              # device index -> _Device


def _cl():
    """pyopencl, imported after the ICD loader was configured; OpenCLUnavailable if missing."""
    configure_icd()
    try:
        import pyopencl
    except ImportError as e:
        raise OpenCLUnavailable(f"OpenCL is not available: pyopencl does not import ({e}); "
                                f"{INSTALL_HINT}") from None
    return pyopencl


def _takes_spirv(dev) -> bool:
    try:
        il = dev.il_version or ""
    except Exception:                       # noqa: BLE001 - before OpenCL 2.1: no IL programs
        return False
    return "SPIR-V" in il


def _find_devices():
    """[(name, device)] of the devices that take SPIR-V, and why there is none (or None)."""
    global _state
    with _lock:
        if _state is not None:
            return _state
        try:
            cl = _cl()
        except OpenCLUnavailable as e:
            if _state is None:              # (a nested call may have stored it meanwhile)
                _state = ([], str(e))
            return _state
        found, others = [], []
        try:
            platforms = cl.get_platforms()
        except Exception as e:              # noqa: BLE001 - PLATFORM_NOT_FOUND_KHR and the like
            platforms = []
            listing = f"no OpenCL platform ({e})"
        else:
            listing = None
        for p in platforms:
            try:
                devs = p.get_devices()
            except Exception:               # noqa: BLE001 - a platform with no device
                continue
            for d in devs:
                name = f"{d.name.strip()} ({p.name.strip()})"
                (found if _takes_spirv(d) else others).append((name, d))
        reason = None
        if not found:
            cfg = configure_icd()
            where = (f"OCL_ICD_VENDORS={cfg['vendors']}" if cfg["vendors"]
                     else "the system's ICD files (/etc/OpenCL/vendors)")
            seen = (f"devices without SPIR-V: {', '.join(n for n, _ in others)}" if others
                    else listing or "no OpenCL platform")
            lib = cfg["library"] or f"{RUNTIME_LIBRARY} not found"
            hint = INSTALL_HINT
            if cfg["library"] and cfg["icd_file"] is None and cfg["vendors"]:
                hint = (f"Intel's runtime is installed: unset OCL_ICD_VENDORS to let Tack use it, "
                        f"or add an ICD file naming {cfg['library']} to {cfg['vendors']}")
            reason = (f"OpenCL has no device that takes SPIR-V ({seen}; ICD files from {where}; "
                      f"Intel's runtime: {lib}); {hint}")
        if _state is None:                  # what a nested call stored stays
            _state = (found, reason)
        return _state


def available() -> bool:
    """Whether an OpenCL device that takes SPIR-V is here (never raises)."""
    return bool(_find_devices()[0])


def unavailable_reason() -> str | None:
    """Why ``available()`` is False, with what to install; None when it is True."""
    return _find_devices()[1]


def devices() -> list:
    """[(name, ``opencl:<index>``)] of the OpenCL devices that take SPIR-V; empty if none."""
    return [(name, f"{KIND}:{i}") for i, (name, _) in enumerate(_find_devices()[0])]


def _device_index(device) -> int:
    return device_index(device, KIND, "an OpenCL")


class _Device:
    """A device with its context and in-order queue."""

    def __init__(self, cl, name, device, index=0):
        self.cl = cl
        self.name, self.index = name, index
        self.device = device
        # What the device's program binaries depend on besides the device: its driver's and
        # its platform's versions.
        self.driver = f"{device.driver_version}; {device.platform.version}"
        # The portable SPIR-V it runs: spirv:generic, or spirv:generic-fp32 without float64.
        self.spirv = portable_spirv(_has_float64(device))
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context, device)
        self.max_item_sizes = tuple(device.max_work_item_sizes)


def _has_float64(device) -> bool:
    """Whether the device does float64 (``CL_DEVICE_DOUBLE_FP_CONFIG`` not 0); True where it
    cannot say (as Tack assumed before it asked)."""
    try:
        return bool(device.double_fp_config)
    except Exception:                       # noqa: BLE001 - a driver that does not answer
        return True


def get_device(device=None) -> _Device:
    """The device ``device`` names (``opencl``, ``opencl:<index>``); OpenCLUnavailable if none."""
    index = _device_index(device)
    found, reason = _find_devices()
    if not found:
        raise OpenCLUnavailable(reason)
    if index >= len(found):
        raise no_such_device("OpenCL", KIND, index, ((i, n) for i, (n, _) in enumerate(found)))
    with _lock:
        dev = _contexts.get(index)
        if dev is None:
            name, d = found[index]
            dev = _contexts.setdefault(index, _Device(_cl(), name, d, index))
    return dev


# ---------------------------------------------------------------------------
# Target keys


def spirv_key(dev=None) -> str:
    """Target key of SPIR-V with no device in it: the toolchain's ``spirv:generic`` target, or
    the ``spirv:generic-fp32`` of a device ``dev`` without float64 (``gpu.key_for``: one
    identity for the code and for the runtime that looks it up)."""
    from .gpu import key_for
    return key_for(PORTABLE_SPIRV if dev is None else dev.spirv)


def device_key(dev) -> str:
    """Target key of a device's own program binary, built by its driver from Tack's SPIR-V:
    the device, its driver and platform versions, and the SPIR-V's key (so a driver update or a
    new LLVM is another key)."""
    from ..cache.keys import digest
    return digest("target", ("backend", KIND), ("device", dev.name), ("driver", dev.driver),
                  ("spirv", spirv_key(dev)))


def candidate_keys(device=None) -> list:
    """[(architecture name, target key)] a launch on ``device`` can use, most specific first:
    the program binary its driver built from SPIR-V before (stored back by the dispatcher),
    then the portable SPIR-V it runs.  Without a device: SPIR-V."""
    if not available():
        return [(PORTABLE_SPIRV, spirv_key())]
    dev = get_device(device)
    return [(f"{KIND}:{dev.index}", device_key(dev)), (dev.spirv, spirv_key(dev))]


def toolchain_target(device=None):
    """The toolchain's target for an OpenCL device: portable SPIR-V (``spirv:generic``, or
    ``spirv:generic-fp32`` for a device without float64)."""
    from .level_zero import target
    return target(get_device(device).spirv if available() else PORTABLE_SPIRV)


def lookup_keys(device=None) -> tuple:
    """The keys the user's cache is looked up with: the device's binary's, then the SPIR-V's."""
    return tuple(k for _, k in candidate_keys(device))


def host_key() -> str:
    """The key of code compiled here for this runtime (the cache session's ``host_key``): the
    first device's SPIR-V's."""
    return candidate_keys()[-1][1]


def site_candidates(host=None) -> list:
    """Site bundles for this runtime: the portable SPIR-V key of the first device (bundles
    hold no driver's code)."""
    return candidate_keys()[-1:]


site_bundles = ordered_site_bundles(site_candidates)


# ---------------------------------------------------------------------------
# Programs and launches

def _argspecs(meta) -> list:
    return argspecs(meta, OpenCLError)


_SPIRV_MAGIC = 0x07230203


def check_spirv(payload) -> None:
    """OpenCLError unless ``payload`` is a well-formed SPIR-V word stream: the magic number, a
    version the header can have, and instructions whose word counts tile the module exactly.

    and a module's outline: one memory model, an entry point, every ``OpFunction`` closed by
    an ``OpFunctionEnd`` before the next and at the end.  The runtime is not trusted with
    less: Intel's CPU runtime spins forever in ``clBuildProgram`` on an instruction whose word
    count is 0, and crashes the process on a module cut off after a whole instruction.  (It
    still trusts a well-formed module's meaning: Tack's own code generator made it, and the
    cache checks its bytes.)
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise OpenCLError(f"a SPIR-V binary is bytes, not {type(payload).__name__}")
    data = bytes(payload)
    if len(data) < 20 or len(data) % 4:
        raise OpenCLError(f"not a SPIR-V binary ({len(data)} bytes: not a whole number of words, "
                          "or shorter than its header)")
    order = "<" if int.from_bytes(data[:4], "little") == _SPIRV_MAGIC else \
        ">" if int.from_bytes(data[:4], "big") == _SPIRV_MAGIC else None
    if order is None:
        raise OpenCLError("not a SPIR-V binary (no SPIR-V magic number)")
    words = np.frombuffer(data, dtype=order + "u4")
    version = int(words[1])
    if version & 0xFF0000FF or not 0x00010000 <= version <= 0x0001FF00:
        raise OpenCLError(f"not a SPIR-V binary (version word {version:#010x})")
    counts = (words >> 16).tolist()
    counts_ops = (words & 0xFFFF).tolist()
    ops = []
    i, n = 5, len(counts)
    while i < n:
        wc = counts[i]
        if wc == 0 or i + wc > n:
            raise OpenCLError(f"damaged SPIR-V binary: the instruction at word {i} has word count "
                              f"{wc}, {'zero' if wc == 0 else f'past the end ({n} words)'}")
        ops.append(counts_ops[i])
        i += wc
    if ops.count(_OP_MEMORY_MODEL) != 1 or _OP_ENTRY_POINT not in ops:
        raise OpenCLError("damaged SPIR-V binary: no memory model or no entry point")
    inside = False
    for op in ops:
        if op == _OP_FUNCTION:
            if inside:
                raise OpenCLError("damaged SPIR-V binary: a function begins inside another")
            inside = True
        elif op == _OP_FUNCTION_END:
            if not inside:
                raise OpenCLError("damaged SPIR-V binary: a function ends that did not begin")
            inside = False
    if inside or not ops or ops[-1] != _OP_FUNCTION_END:
        raise OpenCLError("damaged SPIR-V binary: cut off (its last function has no end)")


_OP_MEMORY_MODEL, _OP_ENTRY_POINT, _OP_FUNCTION, _OP_FUNCTION_END = 14, 15, 54, 56


class OpenCLKernel:
    """A built SPIR-V kernel on one device."""

    def __init__(self, dev, program, kernel, entry, specs, build_log):
        self.dev = dev
        self.program = program
        self.kernel = kernel
        self.entry = entry
        self.specs = specs
        self.build_log = build_log
        self.num_args = kernel.get_info(dev.cl.kernel_info.NUM_ARGS)
        info = dev.cl.kernel_work_group_info
        self.max_group = kernel.get_work_group_info(info.WORK_GROUP_SIZE, dev.device)
        # set_args, then the enqueue, on this one kernel object: one launch at a time
        self.lock = LaunchLock(f"kernel '{entry}' on {dev.name}")

    def __repr__(self):
        return f"<OpenCLKernel {self.entry!r} on {self.dev.name}>"


from .gpu import L0_MAGIC  # noqa: E402 - light: no llvmlite


def _build(cl, dev, program):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        program.build(devices=[dev.device])
    return program


def load(payload: bytes, meta: dict, device=None) -> OpenCLKernel:
    """A SPIR-V binary -> its built kernel ``meta["entry"]`` on ``device`` (the first by default).

    OpenCLError (with the build log) when the program does not build or has no
    such kernel, or when the kernel's parameters do not match ``meta``.
    """
    dev = get_device(device)
    native = b""
    if payload[:len(L0_MAGIC)] == L0_MAGIC:         # a Level Zero artifact: native code + SPIR-V
        from .gpu import unpack_level_zero
        try:
            payload, native = unpack_level_zero(payload)
        except ValueError as e:
            raise OpenCLError(f"damaged Level Zero artifact ({e})") from None
    check_spirv(payload)
    entry = meta.get("entry")
    if not entry:
        raise OpenCLError("variant metadata names no entry point")
    specs = _argspecs(meta)
    cl = dev.cl
    program, fmt, refused = None, "spirv", None
    if native:
        # The device's own code first; a device or driver that refuses it (another GPU, another
        # stepping, a driver update, damage) gets the SPIR-V it was made from.
        try:
            program = _build(cl, dev, cl.Program(dev.context, [dev.device], [bytes(native)]))
            fmt = "native"
        except (cl.Error, OpenCLError) as e:
            refused = f"{type(e).__name__}: {e}"
            from ..cache import log
            log.debug("'%s': native code refused on %s (%s); building its SPIR-V", entry,
                      dev.name, refused)
    if program is None:
        try:
            program = cl.Program(dev.context, bytes(payload))
        except cl.Error as e:
            raise OpenCLError(f"OpenCL does not take this SPIR-V ({e})", e) from None
        try:
            program = _build(cl, dev, program)
        except cl.Error as e:
            raise OpenCLError(f"SPIR-V program for '{entry}' does not build on {dev.name}: {e}",
                              e) from None
    build_log = program.get_build_info(dev.device, cl.program_build_info.LOG)
    try:
        kernel = cl.Kernel(program, entry)
    except cl.Error as e:
        names = program.get_info(cl.program_info.KERNEL_NAMES)
        raise OpenCLError(f"SPIR-V program has no kernel '{entry}' (it has: {names or 'none'}; {e})",
                          e) from None
    k = OpenCLKernel(dev, program, kernel, entry, specs, build_log)
    k.format, k.native_refused, k.spirv = fmt, refused, bytes(payload)
    check_entry_params(entry, specs, k.num_args, OpenCLError)
    return k


def store_back(kernel):
    """(target key, artifact, what it is) of the program binary the driver built from SPIR-V, for
    the dispatcher to store under this device's key, so the next process skips the driver's
    compile; None when the kernel was loaded from such a binary already (or there is none)."""
    if kernel.format != "spirv":
        return None
    cl = kernel.dev.cl
    binaries = kernel.program.get_info(cl.program_info.BINARIES)
    if not binaries or not binaries[0]:
        return None
    from .gpu import pack_level_zero
    dev = kernel.dev
    return device_key(dev), pack_level_zero(kernel.spirv, bytes(binaries[0])), {
        "backend": KIND, "arch": f"{KIND}:{dev.index}", "suffix": ".spv.clbin",
        "device": dev.name, "driver": dev.driver, "made_by": "driver"}


class OpenCLArray(ContiguousArray):
    """An array kept in a device buffer, passed to launches without copying; ``numpy()`` copies
    it back (waiting for queued launches)."""

    def __init__(self, dev, buffer, shape, dtype, layout, writable=True):
        super().__init__(dev, shape, dtype, layout, writable)
        self.buffer = buffer

    def read(self, out):
        self.dev.cl.enqueue_copy(self.dev.queue, out, self.buffer, is_blocking=True)


def _buffer(dev, host):
    """A device buffer holding ``host`` (contiguous); a one-byte buffer for an empty one."""
    cl = dev.cl
    mf = cl.mem_flags
    if host.nbytes == 0:
        return cl.Buffer(dev.context, mf.READ_WRITE, 1)
    return cl.Buffer(dev.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)


def to_device(array, device=None) -> OpenCLArray:
    """``array`` copied into a buffer on ``device``, in its own memory order (C unless it is F)."""
    a, host, layout = host_copy(array)
    dev = get_device(device)
    return OpenCLArray(dev, _buffer(dev, host.ravel(order="K")), a.shape, a.dtype, layout,
                       bool(a.flags.writeable))


def launch(kernel: OpenCLKernel, meta: dict, args, dims, debug: bool = False, block=None):
    """Run ``kernel`` over the grid ``dims`` (1 to 3 extents) with ``args`` (one per value argument,
    as ``meta["argspec"]`` types them).

    NumPy arrays are copied to device buffers before the launch and, when
    their type is writable, back after it; ``OpenCLArray`` arguments stay on
    the device.  ``block`` (a tuple like ``dims``, or an int for the
    work-items of a group) overrides the work-group shape.  Returns the error
    record (``numpy.int64[4]``) in debug mode, None otherwise; the launch has
    finished and the copies are back when it returns.
    """
    dev = kernel.dev
    cl = dev.cl
    dims = check_launch(kernel, args, dims)
    codes = check_param_count(kernel, kernel.num_args, debug, OpenCLError)

    def upload(host):                   # a buffer of the host memory, flat in its own order
        flat = host.ravel(order="K")
        return _buffer(dev, flat if flat.flags.c_contiguous else flat.copy()), flat

    staging = Staging()
    values = argument_values(kernel, args, OpenCLArray, lambda a: (a.buffer, a.element_strides()),
                             upload, staging, "a NumPy array or an OpenCLArray", FOREIGN)
    grid = layout_grid(dims)
    values += grid
    err = errbuf = None
    if debug:
        err = np.zeros(4, np.int64)
        errbuf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=err)
        values.append(errbuf)
    # a buffer as it is, an extent or a stride as an int64, a scalar as scalar_numpy made it
    values = [np.int64(v) if c == "i64" else v for c, v in zip(codes, values)]

    if grid[0] * grid[1] * grid[2] == 0:
        return err
    local = choose_block(dims, block, DEFAULT_GROUP_SIZE, kernel.max_group, dev.max_item_sizes,
                         f"kernel '{kernel.entry}' on {dev.name}")
    # The last grid dimension on x (OpenCL's dimension 0), where work-items are consecutive.
    groups, size = hardware_launch(dims, local)
    global_size = tuple(n * l for n, l in zip(groups, size))[:len(dims)]

    with kernel.lock:
        try:
            kernel.kernel.set_args(*values)
            cl.enqueue_nd_range_kernel(dev.queue, kernel.kernel, global_size, size[:len(dims)])
            for _, buf, host in staging.back:
                cl.enqueue_copy(dev.queue, host, buf, is_blocking=False)
            if errbuf is not None:
                cl.enqueue_copy(dev.queue, err, errbuf, is_blocking=False)
            dev.queue.finish()
        except cl.Error as e:
            raise OpenCLError(f"launch of kernel '{kernel.entry}' over {dims} (work-groups of "
                              f"{local}) failed on {dev.name}: {e}") from None
    staging.finish()
    return err


make_variant = device_variant(launch)      # what the dispatcher launches (tack.launch)


def describe() -> str:
    """What the setup found, as lines of text (``python -m tack.backends.opencl_runtime``)."""
    cfg = configure_icd()
    lines = [f"runtime library: {cfg['library'] or RUNTIME_LIBRARY + ' not found'}",
             f"ICD file: {cfg['icd_file'] or '-'}",
             f"OCL_ICD_VENDORS: {cfg['vendors'] or '(unset)'} ({cfg['action']})"]
    found = devices()
    if found:
        lines += [f"device {key}: {name}" for name, key in found]
    else:
        lines.append(f"no device: {unavailable_reason()}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
    sys.exit(0 if available() else 1)
