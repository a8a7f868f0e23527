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


def value_identity(obj) -> str | None:
    """What a number read from a module is, for the dependency record (None: not a number)."""
    if isinstance(obj, (bool, int, float)):
        return f"{type(obj).__name__}:{obj!r}"
    return None


def closure_identity(obj) -> str:
    """A stable text for a value a function closes over."""
    from ..api import Constant, Func
    if isinstance(obj, Func):
        return "func:" + function_fingerprint(obj.py_func)
    if isinstance(obj, Constant):
        return "const:" + obj.fingerprint
    if isinstance(obj, types.ModuleType):
        return "module:" + obj.__name__
    if isinstance(obj, type):
        return "class:" + class_fingerprint(obj)
    ident = value_identity(obj)
    if ident is not None or isinstance(obj, str) or obj is None:
        return ident or f"{type(obj).__name__}:{obj!r}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def func_id(fn) -> str:
    """A device function's id within a lowered kernel: module, qualified name, and for a
    function made by a factory, what it closes over (two closures are two functions)."""
    fid = f"{fn.__module__}.{fn.__qualname__}"
    if fn.__closure__:
        h = hashlib.sha256()
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                h.update(f"{name}={closure_identity(cell.cell_contents)};".encode())
            except ValueError:                      # an empty cell
                h.update(f"{name}=<empty>;".encode())
        fid += "@" + h.hexdigest()[:16]
    return fid
