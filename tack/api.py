"""What users write (``@tack.kernel``, ``@tack.func``, ``tack.constant``, the intrinsics),
and what each of those things is, for the cache.

The intrinsics (``tid``, ``atomic_add``, the casts) are placeholders the
front end recognizes by identity; calling them from plain Python is an error.
``intrinsic_of`` maps every Python object a kernel may call (``math.sqrt``,
``np.sqrt``, ``min``, the casts...) to the intrinsic it lowers to.

The fingerprints hash a function's code object (bytecode, constants, names),
never its source text, so they are computed without tokenizing or parsing,
in microseconds: a cached kernel's warm path can afford them, and they live
here so that path imports nothing more for them.  Line numbers are left out,
so an edit elsewhere in a module does not change a fingerprint.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import math
import sys
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
            self._fingerprint = value_fingerprint(self.value)
        return self._fingerprint

    def __repr__(self):
        v = self.value
        desc = f"array({v.dtype}, {v.shape})" if isinstance(v, np.ndarray) else repr(v)
        return f"<tack.constant {desc}>"


class Kernel:
    """A ``@tack.kernel`` function: launched over a 1-, 2- or 3-D grid.

    ``static_shape``: the array parameters whose shape is compiled in (a
    parameter name, a list of them, or True for every array parameter); the
    others' extents and strides are passed at launch.
    """

    def __init__(self, fn, static_shape=None):
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@tack.kernel takes a Python function, not {type(fn).__name__}")
        self.py_func = fn
        functools.update_wrapper(self, fn)
        code = fn.__code__
        self.params = code.co_varnames[:code.co_argcount]
        self.static_shape = _static_params(fn.__qualname__, self.params, static_shape)
        # indices of those parameters, for the launch key (None: none, the common case)
        self._static = frozenset(i for i, p in enumerate(self.params) if p in self.static_shape) or None
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


def _static_params(name, params, static_shape) -> frozenset:
    if static_shape is None or static_shape is False:
        return frozenset()
    if static_shape is True:
        return frozenset(params)
    names = (static_shape,) if isinstance(static_shape, str) else tuple(static_shape)
    for p in names:
        if not isinstance(p, str) or p not in params:
            raise TypeError(f"kernel '{name}': static_shape names {p!r}, which is not one of its "
                            f"parameters ({', '.join(params)})")
    return frozenset(names)


def kernel(fn=None, *, static_shape=None):
    """Decorator: a function that runs once per point of a launch grid.

    ``@tack.kernel`` alone compiles one variant per array dtype, rank, layout
    and writability, for any shape.  ``@tack.kernel(static_shape=...)``
    compiles the shapes of the named array parameters (or of all, with
    ``True``) into the kernel: one variant per shape.
    """
    if fn is None:
        return lambda f: Kernel(f, static_shape)
    return Kernel(fn, static_shape)


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


# -- fingerprints: what a kernel depends on, hashed -----------------------------

_PY = f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}".encode()


def _feed_code(h, code: types.CodeType):
    """Bytecode, names and constants (nested code objects in turn); no line numbers."""
    h.update(code.co_code)
    consts = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(h, const)
            consts.append("<code>")
        else:
            consts.append(_const_text(const))
    h.update(repr((code.co_name, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                   code.co_argcount, code.co_kwonlyargcount, code.co_flags, consts)).encode())


def _const_text(const):
    """A code constant as text that is the same in every process.

    ``x in {"a", "b"}`` compiles to a frozenset constant, whose repr lists its
    items in an order that depends on the process's string hash seed: its
    items are sorted here (by their own text, which is seed-free in turn).
    """
    if isinstance(const, frozenset):
        return ("frozenset", sorted(repr(_const_text(c)) for c in const))
    if isinstance(const, tuple):
        return ("tuple", tuple(_const_text(c) for c in const))
    return (type(const).__name__, const)


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


# -- intrinsics: the Python objects a kernel may call -----------------------------

MATH1 = ("sqrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
         "atan", "sinh", "cosh", "tanh", "floor", "ceil", "fabs", "trunc", "expm1",
         "log1p", "erf", "erfc", "cbrt")
MATH2 = ("pow", "atan2", "hypot", "copysign", "fmod")
MATH_PREDICATES = ("isnan", "isinf", "isfinite")
_NUMPY_ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2",
                  "absolute": "fabs", "power": "pow", "minimum": "min", "maximum": "max"}

_table = None


def _build():
    table = {}
    for name in MATH1 + MATH2 + MATH_PREDICATES:
        if hasattr(math, name):
            table[id(getattr(math, name))] = name
        if hasattr(np, name):
            table[id(getattr(np, name))] = name
    for np_name, name in _NUMPY_ALIASES.items():
        table[id(getattr(np, np_name))] = name
    for name in ("min", "max", "abs", "range", "len"):
        table[id(getattr(builtins, name))] = name
    table[id(int)] = "cast:int64"
    table[id(float)] = "cast:float64"
    table[id(bool)] = "cast:bool"
    for name, fn in CASTS.items():
        table[id(fn)] = f"cast:{name}"
        table[id(getattr(np, name if name != "bool" else "bool_"))] = f"cast:{name}"
    for name in ("tid", "atomic_add", "atomic_min", "atomic_max"):
        table[id(globals()[name])] = name
    return table


def intrinsic_of(obj):
    """The intrinsic name a Python object lowers to, or None."""
    global _table
    if _table is None:
        _table = _build()
    return _table.get(id(obj))


def lowers_to(obj, intrinsic: str) -> bool:
    """Whether ``obj`` lowers to ``intrinsic``: ``intrinsic_of(obj) == intrinsic``, found
    among that intrinsic's few candidates rather than by building the whole table (the
    dependency check of a cached kernel runs this on its warm path)."""
    if _table is not None:
        return _table.get(id(obj)) == intrinsic
    if obj is None:
        return False
    if intrinsic.startswith("cast:"):
        name = intrinsic[5:]
        if name not in CASTS:
            return False
        plain = {"int64": int, "float64": float, "bool": bool}.get(name)
        return obj is CASTS[name] or obj is getattr(np, "bool_" if name == "bool" else name) or obj is plain
    if intrinsic in ("tid", "atomic_add", "atomic_min", "atomic_max"):
        return obj is globals()[intrinsic]
    if intrinsic in ("min", "max", "abs", "range", "len") and obj is getattr(builtins, intrinsic):
        return True
    if intrinsic in MATH1 + MATH2 + MATH_PREDICATES and \
            (obj is getattr(math, intrinsic, None) or obj is np.__dict__.get(intrinsic)):
        return True
    return any(obj is np.__dict__.get(alias) for alias, name in _NUMPY_ALIASES.items() if name == intrinsic)
