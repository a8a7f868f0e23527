"""Cheap, stable fingerprints of what a kernel depends on.

A function's fingerprint hashes its code object (bytecode, constants, names),
never its source text, so it is computed without tokenizing or parsing and
in microseconds: the warm path of a cached kernel can afford it.  Line
numbers are left out, so an edit elsewhere in the module does not change it.
"""

from __future__ import annotations

import hashlib
import sys
import types

import numpy as np

_PY = f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}".encode()


def _feed_code(h, code: types.CodeType):
    h.update(code.co_name.encode())
    h.update(code.co_code)
    for part in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        h.update(repr(part).encode())
    h.update(repr((code.co_argcount, code.co_kwonlyargcount, code.co_flags)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(h, const)
        else:
            h.update(f"{type(const).__name__}:{const!r};".encode())


_memo = {}      # id(code) -> (code, defaults, fingerprint): the code is kept alive, so ids stay unique


def function_fingerprint(fn) -> str:
    """Hex sha256 of a Python function's code (and defaults and Python version)."""
    code = fn.__code__
    hit = _memo.get(id(code))
    if hit is not None and hit[0] is code and hit[1] == fn.__defaults__ and hit[2] == fn.__qualname__:
        return hit[3]
    fp = _function_fingerprint(fn)
    _memo[id(code)] = (code, fn.__defaults__, fn.__qualname__, fp)
    return fp


def _function_fingerprint(fn) -> str:
    h = hashlib.sha256(_PY)
    h.update(fn.__qualname__.encode())
    _feed_code(h, fn.__code__)
    h.update(repr(fn.__defaults__).encode())
    return h.hexdigest()


def value_fingerprint(value) -> str:
    """Hex sha256 of a constant: its dtype, shape and bytes (or Python type and value)."""
    h = hashlib.sha256()
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.ascontiguousarray(value)
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.tobytes())
    else:
        h.update(f"{type(value).__name__}:{value!r}".encode())
    return h.hexdigest()


def class_fingerprint(cls) -> str:
    """Hex sha256 of a template class: its name, static methods and scalar attributes."""
    from ..api import Func
    h = hashlib.sha256(cls.__qualname__.encode())
    for klass in reversed(cls.__mro__[:-1]):
        for name, attr in sorted(vars(klass).items()):
            if isinstance(attr, staticmethod):
                attr = attr.__func__
            if isinstance(attr, Func):
                attr = attr.py_func
            if isinstance(attr, types.FunctionType):
                h.update(f"{name}=fn:{function_fingerprint(attr)};".encode())
            elif isinstance(attr, (bool, int, float)):
                h.update(f"{name}={type(attr).__name__}:{attr!r};".encode())
    return h.hexdigest()
