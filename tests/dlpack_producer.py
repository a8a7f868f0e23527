"""A DLPack producer for tests: a capsule made by hand (``PyCapsule_New`` over a
``DLManagedTensor``/``DLManagedTensorVersioned`` built with ctypes), for memory NumPy cannot
export, such as a fake driver's device memory, on any DLPack device.  Its layout is checked
against NumPy's own capsules in tests/test_dlpack.py."""

from __future__ import annotations

import ctypes

import numpy as np

from tack.dlpack import _Deleter, _Managed, _ManagedVersioned

_new = ctypes.pythonapi.PyCapsule_New
_new.restype = ctypes.py_object
_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


class Producer:
    """``__dlpack__``/``__dlpack_device__`` over ``ptr`` (bytes at a device address), with
    ``shape``, ``dtype`` and element ``strides`` (None: compact C order).  ``deleted`` counts
    the deleter's calls; ``streams`` lists the streams consumers passed."""

    def __init__(self, ptr, shape, dtype, strides=None, device=(1, 0), readonly=False,
                 versioned=True, byte_offset=0):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), np.dtype(dtype)
        self.strides, self.device, self.readonly = strides, device, readonly
        self.versioned, self.byte_offset = versioned, byte_offset
        self.deleted, self.streams, self._keep = 0, [], []
        self.deleter = _Deleter(self._delete)

    def _delete(self, address):
        self.deleted += 1

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, **kw):
        self.streams.append(stream)
        versioned = self.versioned and max_version is not None
        m = _ManagedVersioned() if versioned else _Managed()
        if versioned:
            m.version.major, m.version.minor = 1, 0
            m.flags = 1 if self.readonly else 0
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = None if self.strides is None else (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        t = m.dl_tensor
        t.data, t.byte_offset = self.ptr, self.byte_offset
        t.device.device_type, t.device.device_id = self.device
        t.ndim = ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = _CODES[self.dtype.kind], self.dtype.itemsize * 8, 1
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)) if strides is not None else None
        m.deleter = ctypes.cast(self.deleter, ctypes.c_void_p)
        self._keep.append((m, shape, strides))
        name = b"dltensor_versioned" if versioned else b"dltensor"
        return _new(ctypes.addressof(m), name, None)


def host(array, **kw) -> Producer:
    """A producer over a NumPy array's memory, as another library's host array would be."""
    p = Producer(array.ctypes.data, array.shape, array.dtype,
                 [s // array.itemsize for s in array.strides], **kw)
    p.owner = array
    return p
