"""What users write: ``@tack.kernel``, ``@tack.func``, ``tack.constant`` and the intrinsics.

The intrinsics (``tid``, ``atomic_add``, the casts) are placeholders the
front end recognizes by identity; calling them from plain Python is an error.
"""

from __future__ import annotations

import functools
import types

import numpy as np


class Func:
    """A device function: callable from kernels and from other device functions."""

    def __init__(self, fn):
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@tack.func takes a Python function, not {type(fn).__name__}")
        self.py_func = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        raise TypeError(f"tack.func '{self.__name__}' runs inside kernels; "
                        "call it from a @tack.kernel launched with tack.launch")

    def __repr__(self):
        return f"<tack.func {self.__qualname__}>"


class Constant:
    """A scalar or NumPy array that kernels read by its global name.

    The value is copied and frozen when wrapped, so what a kernel compiled
    against cannot change behind its back.
    """

    def __init__(self, value):
        if isinstance(value, (bool, int, float)):
            self.value = value
        elif isinstance(value, np.generic) and value.dtype.name in _TYPE_NAMES:
            self.value = value
        elif isinstance(value, np.ndarray):
            if value.dtype.name not in _TYPE_NAMES or not 1 <= value.ndim <= 4:
                raise TypeError("tack.constant takes arrays of bool, int32, int64, uint32, "
                                f"uint64, float32 or float64 with 1-4 dimensions, not "
                                f"{value.dtype} with {value.ndim}")
            arr = np.array(value, copy=True, order="C")
            arr.flags.writeable = False
            self.value = arr
        else:
            raise TypeError(f"tack.constant takes a number or a NumPy array, not {type(value).__name__}")
        self._fingerprint = None

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            from .frontend.fingerprint import value_fingerprint
            self._fingerprint = value_fingerprint(self.value)
        return self._fingerprint

    def __repr__(self):
        v = self.value
        desc = f"array({v.dtype}, {v.shape})" if isinstance(v, np.ndarray) else repr(v)
        return f"<tack.constant {desc}>"


class Kernel:
    """A ``@tack.kernel`` function: launched over a 1-, 2- or 3-D grid."""

    def __init__(self, fn):
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@tack.kernel takes a Python function, not {type(fn).__name__}")
        self.py_func = fn
        functools.update_wrapper(self, fn)
        code = fn.__code__
        self.params = code.co_varnames[:code.co_argcount]
        self._lowered = {}    # (template bindings, debug) -> LoweredKernel
        self._variants = {}   # launch signature -> compiled variant
        self.timings = {}     # stage -> seconds, of the most recent compile

    @staticmethod
    def _memo_key(templates, debug):
        return tuple(sorted((templates or {}).items(), key=lambda kv: kv[0])), bool(debug)

    def lower(self, templates=None, debug=False):
        """The lowered kernel for these template bindings ({param: class}): runs the front end once."""
        key = self._memo_key(templates, debug)
        lowered = self._lowered.get(key)
        if lowered is None:
            from .frontend.lower import lower_kernel
            lowered = lower_kernel(self, dict(templates or {}), bool(debug))
            self._lowered[key] = lowered
        return lowered

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernel '{self.__name__}' is launched with "
                        f"tack.launch({self.__name__}, dim=..., args=(...))")

    def __repr__(self):
        return f"<tack.kernel {self.__qualname__}>"


def kernel(fn):
    """Decorator: a function that runs once per point of a launch grid."""
    return Kernel(fn)


def func(fn):
    """Decorator: a device function, callable from kernels."""
    return Func(fn)


def constant(value):
    """Wrap a scalar or NumPy array so kernels may read it."""
    return Constant(value)


def _placeholder(name, doc):
    def intrinsic(*args):
        raise TypeError(f"tack.{name}() is only meaningful inside a @tack.kernel or @tack.func")
    intrinsic.__name__ = intrinsic.__qualname__ = name
    intrinsic.__doc__ = doc
    return intrinsic


tid = _placeholder("tid", "The index of this point of the launch grid: an int, or a tuple for 2-D/3-D.")
atomic_add = _placeholder("atomic_add", "atomic_add(array, index, value): add atomically; returns the old value.")
atomic_min = _placeholder("atomic_min", "atomic_min(array, index, value): minimum atomically; returns the old value.")
atomic_max = _placeholder("atomic_max", "atomic_max(array, index, value): maximum atomically; returns the old value.")

_TYPE_NAMES = ("bool", "int32", "int64", "uint32", "uint64", "float32", "float64")


def _cast(name):
    def cast(x):
        return np.dtype(name).type(x)
    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = f"Convert to {name} (inside kernels, and in plain Python too)."
    return cast


bool_, int32, int64, uint32, uint64, float32, float64 = (_cast(n) for n in _TYPE_NAMES)
CASTS = {"bool": bool_, "int32": int32, "int64": int64, "uint32": uint32,
         "uint64": uint64, "float32": float32, "float64": float64}
