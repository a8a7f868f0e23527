"""The Metal runtime side (docs/level-zero-and-metal.md): ``device="metal"`` on macOS.

Metal is driven through pyobjc (``pip install pyobjc-framework-Metal``), imported on the first
call that needs a device; this module is light to import.  Off macOS, or without the binding,
``available()`` is False and every call that needs a device raises ``MetalUnavailable`` saying
``Metal needs macOS and pyobjc ...`` and why.

* **Devices**: ``MTLCopyAllDevices()`` (else the system default device), as ``metal:<index>``;
  ``"metal"`` is the first.
* **Keys**: the stored artifact is MSL source, which Metal compiles when it is loaded, so one
  key serves every Apple GPU: ``metal:apple``'s (``metal.key_for``: the MSL version and the
  emitter's).
* **load(source, meta)**: ``newLibraryWithSource:options:error:`` with fast math off (Tack's
  NaN semantics) and MSL 3.0, the entry ``meta["entry"]``, and a compute pipeline -> a
  ``MetalKernel``.  Source that does not decode or compile, or lacks the entry, is a
  ``MetalError`` naming it (a cache hit then recompiles).
* **launch(kernel, meta, args, dims, debug, block)**: NumPy arrays are copied into shared
  buffers (one per array however often it is passed) and the writable ones copied back after
  the command buffer completes; ``MetalArray`` arguments (``to_device``) stay in theirs.  The
  values go in one ``constant`` params struct (``pack_params``), set with ``setBytes``.  The
  grid is dispatched in whole threadgroups (the kernel returns past ``n0 n1 n2``); ``block``
  overrides the threadgroup shape.  Debug mode binds the i64[4] error record and returns it.

``pack_params(argspec, args, dims)`` is the one writer of the params struct the emitter
declares (``tack.backends.metal.params_layout``): per value argument an array's extents
(unless static) and element strides (layout A), or a scalar; then the grid.

Every pyobjc call is made on the module ``_metal()`` returns, or on objects it made: the
boundary the tests replace with a simulated Metal (tests/backends/test_metal_runtime.py).
"""

from __future__ import annotations

import struct
import sys

import numpy as np

from .arch_names import bundle_machine
from .argument_layout import array_values
from .argument_layout import grid as layout_grid
from .device_args import (ContiguousArray, Devices, Staging, argspecs, argument_values,
                          check_launch, choose_block, hardware_launch, host_copy, launch_codes,
                          scalar_value)
from .device_variant import any_arrays as check_args  # noqa: F401 - the runtime interface
from .device_variant import device_variant, ordered_site_bundles
from .device_variant import no_host_views as host_views  # noqa: F401 - the runtime interface

KIND = "metal"
BUNDLE_MACHINE = bundle_machine("metal")   # its bundles' file names: its code's machine
DEFAULT_FAMILY = "apple"
INSTALL_HINT = "Metal needs macOS and pyobjc (pip install pyobjc-framework-Metal)"
# Threads in a threadgroup when the caller does not choose (the pipeline's limit caps it).
DEFAULT_GROUP_SIZE = 256
# MTLLanguageVersion3_0 (major << 16 | minor): the version the emitter writes.
LANGUAGE_VERSION = 3 << 16
STORAGE_SHARED = 0                  # MTLResourceStorageModeShared
MATH_MODE_SAFE = 0                  # MTLMathModeSafe (macOS 15's fastMathEnabled = NO)
STATUS_ERROR = 5                    # MTLCommandBufferStatusError


# Why another library's device array is not taken.
FOREIGN = ("Tack's Metal runtime takes MTLBuffers it made, and does not take DLPack (kDLMetal) "
           "arrays yet")


class MetalUnavailable(RuntimeError):
    """Not on macOS, or pyobjc's Metal binding is missing: no Metal device."""


class MetalError(RuntimeError):
    """MSL that Metal does not compile, or a launch Metal refuses."""


def _import_metal():
    """pyobjc's ``Metal`` module; MetalUnavailable off macOS."""
    if sys.platform != "darwin":
        raise MetalUnavailable(f"{INSTALL_HINT}; this is {sys.platform}")
    import Metal  # noqa: F401  (pyobjc-framework-Metal)
    return Metal


_metal = _import_metal      # the boundary: tests replace it with a simulated Metal module


class _Device:
    """A Metal device and a command queue of its own."""

    lost = None         # what Devices reads: Metal faults are not sticky (a new command buffer runs)

    def __init__(self, mtl, index, device):
        self.mtl, self.index, self.device = mtl, index, device
        self.name = str(device.name())
        size = device.maxThreadsPerThreadgroup()
        self.max_item_sizes = (int(size.width), int(size.height), int(size.depth))
        self.queue = None

    def open(self):
        if self.queue is None:
            self.queue = self.device.newCommandQueue()
        return self

    @property
    def label(self) -> str:
        return self.name

    def __repr__(self):
        return f"<Metal device {KIND}:{self.index} {self.name}>"


def _discover():
    """(Metal module, [_Device], reason): the devices found, or why there is none (never raises)."""
    try:
        mtl = _metal()
    except MetalUnavailable as e:
        return (None, [], str(e))
    except Exception as e:                  # noqa: BLE001 - any import failure is the same answer
        return (None, [], f"{INSTALL_HINT}; import Metal failed ({type(e).__name__}: {e})")
    try:
        found = list(mtl.MTLCopyAllDevices() or ()) if hasattr(mtl, "MTLCopyAllDevices") else []
        if not found:
            default = mtl.MTLCreateSystemDefaultDevice()
            found = [default] if default is not None else []
        devs = [_Device(mtl, i, d) for i, d in enumerate(found)]
    except Exception as e:                  # noqa: BLE001
        return (mtl, [], f"{INSTALL_HINT}; listing Metal devices failed ({type(e).__name__}: {e})")
    return (mtl, devs, None if devs else f"{INSTALL_HINT}; this Mac reports no Metal device")


_devices = Devices(_discover, KIND, "Metal", _Device, MetalUnavailable)
# The runtime interface (docs/architecture.md, "Adding a backend"), from the devices found.
reset, available, unavailable_reason = _devices.reset, _devices.available, _devices.reason
devices, get_device = _devices.listing, _devices.get


def toolchain_target(device=None):
    """The toolchain's target for a Metal device: MSL for any Apple GPU (``metal:apple``)."""
    from .metal import target
    return target(f"{KIND}:{DEFAULT_FAMILY}")


def candidate_keys(device=None) -> list:
    """MSL source is compiled by the driver, so one key serves every Apple GPU: ``metal:apple``."""
    from .metal import key_for
    return [(f"{KIND}:{DEFAULT_FAMILY}", key_for(f"{KIND}:{DEFAULT_FAMILY}"))]


def lookup_keys(device=None) -> list:
    """The target keys of ``candidate_keys``, in its order (what the cache looks up)."""
    return [k for _, k in candidate_keys(device)]


def host_key(device=None) -> str:
    return candidate_keys(device)[0][1]


def site_candidates(host=None) -> list:
    return candidate_keys()


site_bundles = ordered_site_bundles(site_candidates)


# ---------------------------------------------------------------------------
# Loading and launching


def _text(obj) -> str:
    """An NSError's description (or anything's str), never raising."""
    try:
        return str(obj.localizedDescription())
    except Exception:                       # noqa: BLE001
        return str(obj)


def compile_options(mtl):
    """MSL 3.0 with fast math off: Tack's float semantics (NaN comparisons, isnan) need it."""
    opts = mtl.MTLCompileOptions.alloc().init()
    if hasattr(opts, "setMathMode_"):       # macOS 15: fastMathEnabled is deprecated
        opts.setMathMode_(MATH_MODE_SAFE)
    else:
        opts.setFastMathEnabled_(False)
    opts.setLanguageVersion_(LANGUAGE_VERSION)
    return opts


class MetalKernel:
    """A compiled MSL kernel on one device: its pipeline and what a launch binds."""

    def __init__(self, dev, library, function, pipeline, entry, specs, debug, source):
        self.dev, self.library, self.function, self.pipeline = dev, library, function, pipeline
        self.entry, self.specs, self.debug, self.source = entry, specs, debug, source
        from .. import types as T
        self.types = [T.parse_spec(s.text) for s in specs]
        self.arrays = sum(1 for s in specs if s.is_array)
        self.max_group = int(pipeline.maxTotalThreadsPerThreadgroup())
        self.simd_width = int(pipeline.threadExecutionWidth())

    def __repr__(self):
        return f"<MetalKernel {self.entry!r} on {self.dev.name}>"


def _signature(source: str, entry: str) -> str | None:
    """The parameter list of ``kernel void <entry>(...)`` in ``source``, or None."""
    head = f"kernel void {entry}("
    at = source.find(head)
    if at < 0:
        return None
    end = source.find(")\n{", at)
    return source[at + len(head):end] if end > 0 else None


def load(payload: bytes, meta: dict, device=None) -> MetalKernel:
    """MSL source -> its compute pipeline for ``meta["entry"]`` on ``device`` (the first by default).

    MetalError when the source is not Tack's MSL for that entry and ``meta`` (its buffers, its
    params struct's size, debug or not), or Metal does not compile it."""
    dev = get_device(device)
    entry = meta.get("entry")
    if not entry:
        raise MetalError("variant metadata names no entry point")
    specs = argspecs(meta, MetalError)
    try:
        source = bytes(payload).decode("utf-8")
    except (UnicodeDecodeError, TypeError) as e:
        raise MetalError(f"MSL for '{entry}' is not UTF-8 text ({e})") from None
    params = _signature(source, entry)
    if params is None:
        raise MetalError(f"the MSL source has no kernel '{entry}'")
    from .. import types as T
    from .metal import params_layout
    _, size = params_layout([T.parse_spec(s.text) for s in specs])
    arrays = sum(1 for s in specs if s.is_array)
    expected = (f"{entry}_params& tack_p [[buffer({arrays})]]",
                f"static_assert(sizeof({entry}_params) == {size},")
    if not all(e in (params if i == 0 else source) for i, e in enumerate(expected)):
        raise MetalError(f"kernel '{entry}' does not take what its metadata "
                         f"({', '.join(s.text for s in specs)}) says: {arrays} buffers, then a "
                         f"{size}-byte params struct")
    debug = f"tack_err [[buffer({arrays + 1})]]" in params
    mtl = dev.mtl
    library, err = dev.device.newLibraryWithSource_options_error_(source, compile_options(mtl), None)
    if library is None:
        raise MetalError(f"MSL for '{entry}' does not compile on {dev.name}: {_text(err)}")
    function = library.newFunctionWithName_(entry)
    if function is None:
        names = ", ".join(str(n) for n in (library.functionNames() or ())) or "none"
        raise MetalError(f"the Metal library has no function '{entry}' (it has: {names})")
    pipeline, err = dev.device.newComputePipelineStateWithFunction_error_(function, None)
    if pipeline is None:
        raise MetalError(f"no compute pipeline for '{entry}' on {dev.name}: {_text(err)}")
    return MetalKernel(dev, library, function, pipeline, entry, specs, debug, source)


class MetalArray(ContiguousArray):
    """An array kept in a shared Metal buffer, passed to launches without copying
    (``tack.to_device(a, "metal")``); ``numpy()`` copies it back."""

    def __init__(self, dev, buffer, shape, dtype, layout, writable=True):
        super().__init__(dev, shape, dtype, layout, writable)
        self.buffer = buffer

    def read(self, out):
        _read(self.buffer, out)


def _buffer(dev, host):
    """A shared buffer holding the contiguous ``host`` (a 16-byte one when it is empty: Metal
    makes no empty buffer)."""
    n = host.nbytes
    if n == 0:
        buf = dev.device.newBufferWithLength_options_(16, STORAGE_SHARED)
    else:
        buf = dev.device.newBufferWithBytes_length_options_(memoryview(host).cast("B"), n,
                                                            STORAGE_SHARED)
    if buf is None:
        raise MetalError(f"{dev.name} has no room for a {n}-byte buffer")
    return buf


def _read(buffer, out):
    """Copy a shared buffer's first ``out.nbytes`` bytes into the contiguous ``out``."""
    raw = buffer.contents().as_buffer(buffer.length())
    out.view(np.uint8).reshape(-1)[:] = np.frombuffer(raw, np.uint8, count=out.nbytes)


def to_device(array, device=None) -> MetalArray:
    """``array`` copied into a shared buffer on ``device``, in its own memory order (C unless F)."""
    a, host, layout = host_copy(array)
    dev = get_device(device)
    return MetalArray(dev, _buffer(dev, host.ravel(order="K")), a.shape, a.dtype, layout,
                      bool(a.flags.writeable))


def launch(kernel: MetalKernel, meta: dict, args, dims, debug: bool = False, block=None):
    """Run ``kernel`` over the grid ``dims`` (1 to 3 extents) with ``args`` (one per value
    argument, as ``meta["argspec"]`` types them); the error record (int64[4]) in debug mode,
    None otherwise.  The command buffer has completed and the copies are back when it returns."""
    if not isinstance(kernel, MetalKernel):
        get_device()                        # MetalUnavailable where there is no Metal
        raise TypeError(f"launch takes a MetalKernel (from load), not {type(kernel).__name__}")
    dev = kernel.dev
    dims = check_launch(kernel, args, dims)
    if debug != kernel.debug:
        raise MetalError(f"kernel '{kernel.entry}' was compiled {'with' if kernel.debug else 'without'}"
                         f" debug mode but a {'debug' if debug else 'non-debug'} launch runs it")

    def upload(host):                       # a buffer of the host memory, flat in its own order
        flat = host.ravel(order="K")
        return _buffer(dev, flat), flat

    staging = Staging()
    values = argument_values(kernel, args, MetalArray, lambda a: (a.buffer, a.element_strides()),
                             upload, staging, "a NumPy array or a MetalArray", FOREIGN,
                             convert=scalar_value)
    codes = launch_codes(kernel.specs, False)
    buffers = [v for c, v in zip(codes, values) if c == "ptr"]
    params = _pack(kernel.types, [v for c, v in zip(codes, values) if c != "ptr"], dims)
    err = errbuf = None
    if debug:
        err = np.zeros(4, np.int64)
        errbuf = _buffer(dev, err)
    grid = layout_grid(dims)
    if grid[0] * grid[1] * grid[2] == 0:
        return err
    local = choose_block(dims, block, DEFAULT_GROUP_SIZE, kernel.max_group, dev.max_item_sizes,
                         f"kernel '{kernel.entry}' on {dev.name}")
    groups, hw_local = hardware_launch(dims, local)          # the last grid dimension on x
    mtl = dev.mtl
    try:
        cb = dev.queue.commandBuffer()
        enc = cb.computeCommandEncoder()
        enc.setComputePipelineState_(kernel.pipeline)
        for k, buf in enumerate(buffers):
            enc.setBuffer_offset_atIndex_(buf, 0, k)
        enc.setBytes_length_atIndex_(params, len(params), kernel.arrays)
        if errbuf is not None:
            enc.setBuffer_offset_atIndex_(errbuf, 0, kernel.arrays + 1)
        enc.dispatchThreadgroups_threadsPerThreadgroup_(mtl.MTLSizeMake(*groups),
                                                        mtl.MTLSizeMake(*hw_local))
        enc.endEncoding()
        cb.commit()
        cb.waitUntilCompleted()
        status = int(cb.status())
    except Exception as e:                  # noqa: BLE001 - pyobjc's errors: say which launch
        raise MetalError(f"launch of kernel '{kernel.entry}' over {dims} (threadgroups of "
                         f"{local}) failed on {dev.name}: {type(e).__name__}: {e}") from None
    if status == STATUS_ERROR:
        raise MetalError(f"launch of kernel '{kernel.entry}' over {dims} failed on {dev.name}: "
                         f"{_text(cb.error())}")
    for _, buf, host in staging.back:
        _read(buf, host)
    staging.finish()
    if errbuf is not None:
        _read(errbuf, err)
    return err


make_variant = device_variant(launch)      # what the dispatcher launches (tack.launch)


_FORMAT = {"bool": "?", "int": "i", "uint": "I", "long": "q", "ulong": "Q", "float": "f"}


def pack_params(argspec, args, dims) -> bytes:
    """The params struct's bytes for ``args`` (one per value argument: arrays as NumPy arrays
    whose memory the kernel's buffer holds, strides in elements of that memory) over ``dims``."""
    from .. import types as T
    types = [T.parse_spec(s[0] if isinstance(s, (list, tuple)) else s) for s in argspec]
    if len(args) != len(types):
        raise TypeError(f"the kernel takes {len(types)} value arguments, got {len(args)}")
    fields = []
    for k, (t, a) in enumerate(zip(types, args)):
        if isinstance(t, T.Array):
            a = np.asarray(a)
            if a.dtype != t.dtype.dtype or a.ndim != t.ndim:
                raise TypeError(f"argument {k} is {a.dtype}[{a.ndim}-d]; the kernel takes {T.spec(t)}")
            fields += array_values(t, None, a.shape, [s // a.itemsize for s in a.strides])[1:]
        else:
            fields.append(a)
    return _pack(types, fields, dims)


def _pack(types, fields, dims) -> bytes:
    """The params struct of ``types`` (``tack.types``) holding ``fields``: the slot values of the
    argument layout but the pointers (an array's extents and strides where its type passes them,
    a scalar's value), in order; then the grid ``dims``."""
    from .metal import params_layout
    members, size = params_layout(types)
    values = list(fields) + [int(n) for n in layout_grid(dims)]
    out = bytearray(size)
    for (_, ty, off), v in zip(members, values):
        struct.pack_into("<" + _FORMAT[ty], out, off, _CONVERT[ty](v))
    return bytes(out)


_CONVERT = {"bool": bool, "int": int, "uint": int, "long": int, "ulong": int, "float": float}
