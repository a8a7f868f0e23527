"""Arrays of other libraries through DLPack (https://dmlc.github.io/dlpack/latest/): the
consumer side of the ``__dlpack__`` protocol, read with ctypes (no compiled code, NumPy only).

``view(obj)`` asks the producer for a capsule (a versioned one, DLPack 1.x, where the producer
knows ``max_version``; the original one otherwise), takes ownership of it as the protocol says
(the capsule is renamed ``used_dltensor*``), and returns a ``Tensor``: the data pointer (with
the byte offset added), shape, element strides, NumPy dtype, writability and the DLPack device.
The producer's memory stays valid until ``Tensor.close()`` (or the tensor's collection) calls
the producer's deleter, once.

Tack uses it for device arrays (CUDA and ROCm memory passed to a launch by its pointer, without
a copy) and for host arrays of other libraries on the CPU backend (``host_array``: a NumPy array
over the same memory).

A capsule of DLPack before 1.0 has no read-only flag.  Tack takes such an array as writable,
on every backend, as CuPy and PyTorch take it: its producers exported no read-only memory
(NumPy before 2.1 refused to export a read-only array).  NumPy's own ``from_dlpack`` makes it
read-only instead, so a kernel writing to a PyTorch tensor of before DLPack 1.0 would be
refused, and a copy would lose its results: ``host_array`` makes the NumPy view itself.
"""

from __future__ import annotations

import ctypes

import numpy as np

# DLDeviceType values (dlpack.h)
CPU, CUDA, CUDA_HOST, OPENCL, VULKAN, METAL, VPI, ROCM, ROCM_HOST, EXT_DEV, CUDA_MANAGED, \
    ONEAPI, WEBGPU, HEXAGON = 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
DEVICE_NAMES = {CPU: "cpu", CUDA: "cuda", CUDA_HOST: "cuda_host", OPENCL: "opencl",
                VULKAN: "vulkan", METAL: "metal", VPI: "vpi", ROCM: "rocm", ROCM_HOST: "rocm_host",
                EXT_DEV: "ext_dev", CUDA_MANAGED: "cuda_managed", ONEAPI: "oneapi",
                WEBGPU: "webgpu", HEXAGON: "hexagon"}
# Host memory a CPU kernel can read: plain, and CUDA's/ROCm's pinned host memory.
HOST = (CPU, CUDA_HOST, ROCM_HOST)
READ_ONLY = 1                           # DLPACK_FLAG_BITMASK_READ_ONLY (DLPack 1.0)
_CODES = {0: "i", 1: "u", 2: "f", 6: "b"}     # kDLInt, kDLUInt, kDLFloat, kDLBool


class DLPackError(TypeError):
    """An object's ``__dlpack__`` capsule that Tack cannot take (says what and why)."""


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                     ("deleter", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_USED = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"


def is_dlpack(obj) -> bool:
    """Whether ``obj`` offers DLPack (and is not a NumPy array, which Tack takes as it is)."""
    return (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
            and not isinstance(obj, np.ndarray))


def device_of(obj) -> tuple:
    """``(device_type, device_id)`` of a DLPack object, from ``__dlpack_device__`` (no capsule)."""
    try:
        kind, index = obj.__dlpack_device__()
        return int(kind), int(index)
    except Exception as e:                  # noqa: BLE001 - any producer failure says what it was
        raise DLPackError(f"{type(obj).__name__}.__dlpack_device__() failed ({type(e).__name__}: "
                          f"{e})") from None


def device_name(device: tuple) -> str:
    kind, index = device
    return f"{DEVICE_NAMES.get(kind, f'device type {kind}')}:{index}"


class Tensor:
    """A DLPack tensor whose capsule Tack owns: ``ptr`` (data plus byte offset), ``shape``,
    ``estrides`` (in elements), ``dtype``, ``writable``, ``device`` (type, id); ``close()``
    gives the memory back to its producer."""

    def __init__(self, obj, capsule, managed, versioned):
        t = managed.dl_tensor
        self.obj, self._capsule, self._managed, self._versioned = obj, capsule, managed, versioned
        self._closed = False
        self.device = (int(t.device.device_type), int(t.device.device_id))
        self.writable = not (versioned and managed.flags & READ_ONLY)
        try:
            self.dtype = _dtype(t.dtype)
            ndim = int(t.ndim)
            if not 0 <= ndim <= 32:
                raise DLPackError(f"{ndim} dimensions")
            self.shape = tuple(int(t.shape[k]) for k in range(ndim)) if ndim else ()
            if any(n < 0 for n in self.shape):
                raise DLPackError(f"negative extent in {self.shape}")
            if ndim and t.strides:
                self.estrides = [int(t.strides[k]) for k in range(ndim)]
            else:                           # NULL strides: compact C order
                self.estrides, n = [0] * ndim, 1
                for k in range(ndim - 1, -1, -1):
                    self.estrides[k] = n
                    n *= self.shape[k]
            self.ptr = (t.data or 0) + int(t.byte_offset)
        except DLPackError as e:
            self.close()
            raise DLPackError(f"{type(obj).__name__}'s DLPack tensor is not one Tack takes: {e}") \
                from None

    def close(self):
        """Call the producer's deleter (once)."""
        if self._closed:
            return
        self._closed = True
        if self._managed.deleter:
            _Deleter(self._managed.deleter)(ctypes.addressof(self._managed))

    def __del__(self):
        try:
            self.close()
        except Exception:                   # noqa: BLE001 - at exit the producer may be gone
            pass

    def __repr__(self):
        return f"<dlpack.Tensor {self.dtype}{list(self.shape)} on {device_name(self.device)}>"


def _dtype(dt) -> np.dtype:
    code = _CODES.get(int(dt.code))
    if code is None or int(dt.lanes) != 1 or dt.bits % 8 or (code == "b" and dt.bits != 8):
        raise DLPackError(f"its dtype (code {dt.code}, {dt.bits} bits, {dt.lanes} lanes) is none "
                          "of those Tack takes (signed and unsigned ints, floats, bool)")
    return np.dtype(f"{code}{dt.bits // 8}" if code != "b" else "?")


def view(obj, stream=None) -> Tensor:
    """Take ``obj``'s DLPack capsule (``stream``: the consumer stream the producer orders its
    work before, for CUDA and ROCm; None for host memory).  DLPackError if it cannot be taken."""
    kwargs = {} if stream is None else {"stream": stream}
    try:
        try:
            capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
        except TypeError:                   # a producer from before DLPack 1.0's max_version
            capsule = obj.__dlpack__(**kwargs)
    except DLPackError:
        raise
    except Exception as e:                  # noqa: BLE001 - the producer's refusal, said as such
        raise DLPackError(f"{type(obj).__name__}.__dlpack__() failed ({type(e).__name__}: {e})") \
            from None
    if _api.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        managed = _ManagedVersioned.from_address(
            _api.PyCapsule_GetPointer(capsule, b"dltensor_versioned"))
        if managed.version.major != 1:
            raise DLPackError(f"{type(obj).__name__} gave a DLPack {managed.version.major}.x "
                              "capsule; Tack reads 1.x")
        _api.PyCapsule_SetName(capsule, _USED_VERSIONED)
        return Tensor(obj, capsule, managed, True)
    if _api.PyCapsule_IsValid(capsule, b"dltensor"):
        managed = _Managed.from_address(_api.PyCapsule_GetPointer(capsule, b"dltensor"))
        _api.PyCapsule_SetName(capsule, _USED)
        return Tensor(obj, capsule, managed, False)
    raise DLPackError(f"{type(obj).__name__}.__dlpack__() returned {type(capsule).__name__}, not "
                      "an unused DLPack capsule")


class _HostMemory:
    """What a NumPy array made by ``host_array`` has as its base: it holds the tensor (so the
    producer's memory stays valid while the array lives) and describes its memory."""

    __slots__ = ("tensor", "__array_interface__")

    def __init__(self, t: Tensor):
        self.tensor = t
        size = t.dtype.itemsize
        self.__array_interface__ = {
            "version": 3, "shape": t.shape, "typestr": t.dtype.str,
            "data": (t.ptr, not t.writable),
            "strides": tuple(s * size for s in t.estrides) if t.shape else None}


def host_array(obj) -> np.ndarray:
    """A host DLPack object as a NumPy array over the same memory, writable unless its producer
    marked it read-only (DLPack 1.0's flag)."""
    t = view(obj)
    if t.device[0] not in HOST:
        t.close()
        raise DLPackError(f"{type(obj).__name__}'s DLPack memory is on {device_name(t.device)}, "
                          "not in host memory")
    return np.asarray(_HostMemory(t))
