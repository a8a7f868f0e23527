"""The launch machinery the CUDA and HIP runtimes share (``cuda_runtime``, ``hip_runtime``):
HIP's module API is CUDA's with other names, so both are written against one small driver
interface, each runtime's ``_CudaApi`` / ``_HipApi`` (``call``, ``enter``, ``alloc``, ``free``,
``htod``, ``dtoh``, ``memset0``, ``launch``, ``sync``, ``sync_foreign``, ``dlpack_devices``,
``dlpack_stream``).

* ``GPUArray``: device memory passed by its pointer; made by ``to_device`` (``numpy_to_device``)
  or over another library's memory (``from_interface``: ``__cuda_array_interface__``;
  ``from_dlpack``), and exposing ``__cuda_array_interface__`` itself.
* ``GPUKernel``: a loaded kernel on one device.
* ``run``: a launch; its parameter values in the argument layout's order (``marshal``, through
  ``device_args.argument_values``), packed as the ``void **`` array the launch call takes
  (``pack_params``).

Light to import (NumPy and ctypes): no driver is imported here.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from .argument_layout import grid
from .device_args import (ArrayShape, Staging, argument_values, check_launch, check_param_count,
                          hardware_launch, host_copy, layout_strides, scalar_value)
from .device_args import choose_block as _choose_block

# Threads in a block when the caller does not choose (the kernel's limit caps it).
DEFAULT_BLOCK = 256


class DriverApi:
    """Calls into a driver's Python binding (cuda-python's ``driver``, hip-python's ``hip``),
    whose functions return ``(status, values...)``: ``call`` returns the values and raises the
    runtime's ``error`` naming the function and the driver's error (``error_text``)."""

    error = RuntimeError

    def __init__(self, drv):
        self.drv = drv

    def call(self, name, *args):
        result = getattr(self.drv, name)(*args)
        if not isinstance(result, tuple):
            result = (result,)
        status, values = result[0], result[1:]
        if int(status) != 0:
            e = self.error(f"{name} failed: {self.error_text(status)}")
            e.status = int(status)
            e.resource = e.status in self.no_room or e.status in self.sticky
            raise e
        return values[0] if len(values) == 1 else values

    def error_text(self, status) -> str:
        return getattr(status, "name", None) or f"status {int(status)}"

    # A kernel's faults that leave the context unusable: every later call of the process on it
    # fails with the same error (CUDA's codes; HIP numbers its four, 700, 702, 710, 719, the same
    # and has no 714-718: tests check both bindings' enums).  700 illegal
    # address, 702 launch timeout, 710 device-side assert, 714-718 stack, instruction,
    # alignment, address space, PC, 719 launch failure.
    sticky = frozenset((700, 702, 710, 714, 715, 716, 717, 718, 719))

    # Out of memory (CUDA_ERROR_OUT_OF_MEMORY, hipErrorOutOfMemory: 2 in both): like a sticky
    # error, a failure of the device, not of the code being loaded (``errors.no_room``).
    no_room = frozenset((2,))

    # The most work-items a launch takes along an axis (blocks times threads), None: no limit
    # below the device's blocks per axis.
    max_axis_items = None


# ---------------------------------------------------------------------------
# Parameter values (the argument layout, backends/argument_layout.py)


PARAM_CTYPES = {"ptr": ctypes.c_uint64, "i8": ctypes.c_int8, "i32": ctypes.c_int32,
                "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
                "f32": ctypes.c_float, "f64": ctypes.c_double}


def pack_params(codes, values):
    """The ``void **`` array ``cuLaunchKernel`` / ``hipModuleLaunchKernel`` take: one pointer per
    parameter, to memory holding its value as the entry's type.  Returns (address, holder): the
    holder keeps that memory alive and must outlive the launch call."""
    cells = [PARAM_CTYPES[c](v) for c, v in zip(codes, values)]
    array = (ctypes.c_void_p * max(1, len(cells)))(*[ctypes.addressof(c) for c in cells])
    return ctypes.addressof(array), (array, cells)


# ---------------------------------------------------------------------------
# Device arrays


def contiguity(shape, estrides) -> tuple:
    """(C-contiguous, F-contiguous) of memory with these element strides (extents of 1 and
    empty arrays ignore their strides, as NumPy does)."""
    if any(n == 0 for n in shape):
        return True, True
    keep = [(n, s) for n, s in zip(shape, estrides) if n != 1]
    sh = [n for n, _ in keep]
    st = [s for _, s in keep]
    return st == layout_strides(sh, "C"), st == layout_strides(sh, "F")


class GPUArray(ArrayShape):
    """An array in device memory, passed to launches by its pointer.

    Made by ``to_device`` (memory this runtime allocated and frees; contiguous, C order or F
    order when made from an F-ordered array) or wrapping an object with
    ``__cuda_array_interface__`` (its memory, any non-negative strides; the object is kept
    alive).  ``numpy()`` copies it into a new NumPy array.  It exposes
    ``__cuda_array_interface__`` itself, so CuPy, PyTorch and Numba take it without a copy.
    """

    def __init__(self, api, dev, ptr, shape, dtype, estrides, writable=True, owner=None):
        self.api, self.dev = api, dev
        self.ptr = int(ptr)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.estrides = [int(s) for s in estrides]
        self.writable = bool(writable)
        self.owner = owner                  # the foreign object whose memory this is; None: ours
        self._freed = False

    def contiguity(self) -> tuple:
        return contiguity(self.shape, self.estrides)

    @property
    def layout(self) -> str:
        c, f = self.contiguity()
        return "C" if c else "F" if f else "A"

    def span(self) -> int:
        """Bytes from the first element to one past the last."""
        if self.size == 0:
            return 0
        return (sum((n - 1) * s for n, s in zip(self.shape, self.estrides)) + 1) * self.dtype.itemsize

    def numpy(self) -> np.ndarray:
        """A new NumPy array with the device memory's contents (waits for the device's stream)."""
        if self.size == 0:
            return np.empty(self.shape, self.dtype)
        raw = np.empty(self.span(), np.uint8)
        self.api.enter(self.dev)            # this thread's current context: any thread may call
        self.api.dtoh(self.dev, raw, self.ptr, raw.nbytes)
        self.api.sync(self.dev)
        view = np.lib.stride_tricks.as_strided(
            raw.view(self.dtype), self.shape, [s * self.dtype.itemsize for s in self.estrides])
        return np.array(view, order="F" if self.layout == "F" else "C")

    @property
    def __cuda_array_interface__(self) -> dict:
        c, _ = contiguity(self.shape, self.estrides)
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, not self.writable),
                "strides": None if c else tuple(s * self.dtype.itemsize for s in self.estrides),
                "version": 3, "stream": None}

    def free(self):
        """Release the memory now (memory this runtime allocated; a foreign array's is its owner's)."""
        if not self._freed and self.owner is None and self.ptr:
            self._freed = True
            self.api.enter(self.dev)        # __del__ runs on whichever thread drops it last
            self.api.free(self.dev, self.ptr)

    def __del__(self):
        try:
            self.free()
        except Exception:                   # noqa: BLE001 - at exit the driver may be gone
            pass

    def __repr__(self):
        return (f"<{type(self).__name__} {self.dtype}{list(self.shape)} {self.layout} on "
                f"{self.dev.name}{' (foreign)' if self.owner is not None else ''}>")


def from_interface(api, dev, obj, cls):
    """A ``GPUArray`` over the memory of an object with ``__cuda_array_interface__`` (no copy).

    Waits for the producer's stream when the interface names one (CAI v3), and for the legacy
    default stream when it has no ``stream`` at all (v2, as PyTorch's); ``None`` (v3): no wait.  TypeError for what
    the ABI cannot pass: a dtype Tack has no type for, negative strides, strides that are not
    whole elements."""
    cai = obj.__cuda_array_interface__
    try:
        shape = tuple(int(n) for n in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        ptr, readonly = cai["data"]
    except (KeyError, TypeError, ValueError) as e:
        raise TypeError(f"{type(obj).__name__}'s __cuda_array_interface__ is not usable ({e})") from None
    if cai.get("mask") is not None:
        raise TypeError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    strides = cai.get("strides")
    if strides is None:
        estrides = layout_strides(shape, "C")
    else:
        if any(s < 0 or s % dtype.itemsize for s in strides):
            raise TypeError(f"{type(obj).__name__} has strides {tuple(strides)} (bytes): Tack takes "
                            f"non-negative strides in whole elements of {dtype}")
        estrides = [s // dtype.itemsize for s in strides]
    if "stream" not in cai:
        # CAI v2 (PyTorch's): no stream named, the producer's work is on the legacy default
        # stream, which this device's non-blocking stream does not wait for by itself.
        api.sync_foreign(dev, api.legacy_stream)
    elif cai["stream"]:                     # v3: the producer's work on its stream comes first
        api.sync_foreign(dev, int(cai["stream"]))
    return cls(api, dev, ptr or 0, shape, dtype, estrides, writable=not readonly, owner=obj)


def from_dlpack(api, dev, obj, cls):
    """A ``GPUArray`` over the memory of a DLPack object on ``dev`` (no copy): the producer
    orders its pending work before this device's stream (DLPack's ``stream``), and gets its
    capsule back when the array is collected.  ValueError for an array on another device,
    TypeError for what the ABI cannot pass (negative strides, a dtype without a Tack type)."""
    from .. import dlpack
    where = dlpack.device_of(obj)
    if where[0] not in api.dlpack_devices or where[1] != dev.index:
        raise ValueError(f"{type(obj).__name__} lives on {dlpack.device_name(where)} (DLPack), "
                         f"the kernel on {dev.name} (device {dev.index})")
    t = dlpack.view(obj, stream=api.dlpack_stream(dev))
    if any(s < 0 for s in t.estrides):
        t.close()
        raise TypeError(f"{type(obj).__name__} has strides {tuple(t.estrides)} (elements): Tack "
                        "takes non-negative strides")
    return cls(api, dev, t.ptr, t.shape, t.dtype, t.estrides, writable=t.writable, owner=t)


def from_foreign(api, dev, obj, cls):
    """Another library's device array, without a copy: through ``__cuda_array_interface__``
    where it has one, else DLPack; None when it has neither."""
    if hasattr(obj, "__cuda_array_interface__"):
        return from_interface(api, dev, obj, cls)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return from_dlpack(api, dev, obj, cls)
    return None


# ---------------------------------------------------------------------------
# Kernels and launches


class GPUKernel:
    """A loaded kernel on one device."""

    def __init__(self, api, dev, module, func, entry, specs, num_params, max_threads, log=""):
        self.api, self.dev, self.module, self.func = api, dev, module, func
        self.entry, self.specs = entry, specs
        self.num_params = num_params        # None where the driver cannot tell (HIP)
        self.max_threads = max_threads
        self.log = log
        # Re-entrant: a launch's parameters go with its own driver call (no state on the kernel
        # for a nested launch to overwrite), so a signal handler's or a finalizer's launch on a
        # thread inside one runs (a Lock waited for ever).
        self.lock = threading.RLock()

    def __repr__(self):
        return f"<{type(self).__name__} {self.entry!r} on {self.dev.name}>"


def choose_block(kernel, dims, block):
    """The block shape of a launch: ``DEFAULT_BLOCK`` threads (capped by the kernel's and the
    device's limits) unless ``block`` says otherwise (an int: a total; a tuple: the shape)."""
    dev = kernel.dev
    return _choose_block(dims, block, DEFAULT_BLOCK, min(kernel.max_threads, dev.max_threads),
                         dev.max_block, f"kernel '{kernel.entry}' on {dev.name}")


class _Transfers(Staging):
    """What one launch allocated and what it copies back, released when it ends."""

    def __init__(self):
        super().__init__()
        self.allocated = []                 # device pointers to free
        self.foreign = []                   # other libraries' arrays, held until the launch ends


def marshal(kernel, args, tr, cls):
    """The entry's parameter values for ``args`` (one per value argument of ``kernel.specs``) in
    the argument layout's order, without the grid and the error record: device pointers (NumPy
    arrays copied to the device into memory listed in ``tr``; other libraries' arrays wrapped
    as ``cls``, held in ``tr``), extents, strides and scalars.  TypeError naming the argument
    for a mismatch."""
    api, dev = kernel.api, kernel.dev

    def upload(host):                   # new device memory holding the host memory
        ptr = 0
        if host.nbytes:
            ptr = api.alloc(dev, host.nbytes)
            tr.allocated.append(ptr)
            api.htod(dev, ptr, host, host.nbytes)
        return ptr, host

    def adopt(a):                       # another library's device array, by its pointer
        wrapped = from_foreign(api, dev, a, cls)
        if wrapped is None:
            return a
        tr.foreign.append(wrapped)
        return wrapped

    return argument_values(kernel, args, GPUArray, lambda a: (a.ptr, a.estrides), upload, tr,
                           "a NumPy array, a device array or an object with "
                           "__cuda_array_interface__ or DLPack", convert=scalar_value, adopt=adopt)


def run(kernel, args, dims, debug, block, error, cls):
    """Launch ``kernel`` over ``dims`` with ``args`` (the body of ``launch`` of both runtimes:
    ``error`` is the runtime's, ``cls`` its device-array class)."""
    api, dev = kernel.api, kernel.dev
    if dev.lost is not None:
        raise error(dev.lost)
    dims = check_launch(kernel, args, dims)
    codes = check_param_count(kernel, kernel.num_params, debug, error)
    grid_ext = grid(dims)
    shape = choose_block(kernel, dims, block)
    # The last grid dimension on x; past the device's blocks along an axis (65535 along y and
    # z) or HIP's 2**32 - 1 work-items, the entry's grid-stride loop takes the rest.
    blocks, bshape = hardware_launch(dims, shape, dev.max_grid, api.max_axis_items)
    tr = _Transfers()
    err = None
    with kernel.lock:
        api.enter(dev)
        try:
            values = marshal(kernel, args, tr, cls) + list(grid_ext)
            if debug:
                err = np.zeros(4, np.int64)
                errptr = api.alloc(dev, err.nbytes)
                tr.allocated.append(errptr)
                api.memset0(dev, errptr, err.nbytes)
                values.append(errptr)
            if grid_ext[0] * grid_ext[1] * grid_ext[2] == 0:
                return err
            address, holder = pack_params(codes, values)
            try:
                api.launch(kernel, blocks, bshape, address)
            except error as e:
                raise error(f"launch of kernel '{kernel.entry}' over {dims} (blocks of {shape}) "
                            f"failed on {dev.name}: {e}") from None
            del holder
            try:
                for _, ptr, host in tr.back:
                    api.dtoh(dev, host, ptr, host.nbytes)
                if debug:
                    api.dtoh(dev, err, errptr, err.nbytes)
                api.sync(dev)
            except error as e:
                if getattr(e, "status", None) not in api.sticky:
                    raise
                # The kernel faulted: the driver says so at the next call that waits for it (a
                # copy back, the synchronize), and at every call after it.  Name the kernel, and
                # take the device out of this process's list (its context is lost).
                dev.lost = (f"kernel '{kernel.entry}' failed on {dev.name} ({e}); the error is "
                            f"sticky: its context cannot be used again in this process")
                raise error(f"{dev.lost}; restart the process to use the GPU again (TACK_DEBUG=1 "
                            f"checks every array access and names the index out of bounds)"
                            ) from None
        finally:
            for ptr in tr.allocated:
                try:
                    api.free(dev, ptr)
                except Exception:           # noqa: BLE001 - the launch's own error comes first
                    pass
    tr.finish()
    return err


def numpy_to_device(api, dev, array, cls):
    """``array`` copied into new device memory, in its own order (C unless it is F)."""
    a, host, layout = host_copy(array)
    api.enter(dev)
    ptr = 0
    if host.nbytes:
        ptr = api.alloc(dev, host.nbytes)
        api.htod(dev, ptr, host, host.nbytes)
        api.sync(dev)
    estrides = layout_strides(a.shape, layout)
    return cls(api, dev, ptr, a.shape, a.dtype, estrides, bool(a.flags.writeable))


def foreign_or_copy(dev, array, cls):
    """``to_device`` of both runtimes: a device array as it is, another library's wrapped, a
    NumPy array (or anything ``numpy.asarray`` takes) copied."""
    if isinstance(array, GPUArray):
        return array
    if not isinstance(array, np.ndarray):
        dev.api.enter(dev)
        wrapped = from_foreign(dev.api, dev, array, cls)
        if wrapped is not None:
            return wrapped
    return numpy_to_device(dev.api, dev, array, cls)
