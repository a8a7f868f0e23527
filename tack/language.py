"""The names a kernel may use besides its parameters: device functions (``Func``), constants
(``Constant``), the intrinsics (``tid``, the atomics) and the casts, and the map from every
Python object a kernel may call (``math.sqrt``, ``np.sqrt``, ``min``, the casts...) to the
intrinsic it lowers to (``intrinsic_of``).

The front end resolves a kernel's globals against these, the dependency check of the cache
compares them again, and ``tack.api`` hands them to users: here they are defined once, with
nothing above them to import.  The intrinsics are placeholders the front end recognizes by
identity; calling them from plain Python is an error.
"""

import builtins
import functools
import math
import sys
import types

import numpy as np
from .digests import hasher


def is_masked(a) -> bool:
    """Is ``a`` a ``numpy.ma`` masked array (netCDF4's variables read as one)?  Asked without
    importing ``numpy.ma``: where it is not imported, no masked array exists."""
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(a, ma.MaskedArray)


def wrapped_message(fn, decorator: str) -> str:
    """Why ``fn``, a wrapper another decorator made (``functools.wraps`` sets its
    ``__wrapped__``), cannot be compiled: Tack compiles a function's own source, so the
    wrapper's code would not run, and its signature is not the function's."""
    return (f"{decorator} cannot compile '{fn.__qualname__}': it is a wrapper made by another "
            "decorator (it has __wrapped__), and Tack compiles a function's own source, not "
            "what a decorator wraps around it; put the Tack decorator nearest the 'def', "
            "with no other decorator under it")


class Func:
    """A device function: callable from kernels and from other device functions."""

    def __init__(self, fn):
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@tack.func takes a Python function, not {type(fn).__name__}")
        if getattr(fn, "__wrapped__", None) is not None:
            raise TypeError(wrapped_message(fn, "@tack.func"))
        self.py_func = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        raise TypeError(f"tack.func '{self.__name__}' runs inside kernels; "
                        "call it from a @tack.kernel launched with tack.launch")

    def __repr__(self):
        return f"<tack.func {self.__qualname__}>"

    def __reduce__(self):
        return self.__qualname__        # by name, as a kernel is (tack.api.Kernel.__reduce__)


def number_text(v) -> str:
    """A bool's, int's or float's text in a fingerprint: ``type:repr``, and a NaN's bits, which
    its repr does not say (every NaN is ``nan``: a -NaN and a NaN were one constant, one
    template class, one value of a module's attribute)."""
    text = f"{type(v).__name__}:{v!r}"
    return text if v == v else f"{text}:{int(np.float64(v).view(np.uint64)):x}"


def python_number(x):
    """A number of a subclass of Python's (an IntEnum member, a float subclass) as the Python
    number it is: what ``tack.constant`` keeps and the front end compiles in."""
    return bool(x) if isinstance(x, bool) else int(x) if isinstance(x, int) else float(x)


class Constant:
    """A scalar or NumPy array that kernels read by its global name.

    The value is copied and frozen for good when wrapped (an array's copy is a view of bytes,
    which cannot be made writable again, and ``value`` cannot be rebound), so what a kernel
    compiled against cannot change behind its back, nor the fingerprint the cache keeps it
    under: a new value is a new constant.
    """

    __slots__ = ("value", "_fingerprint")

    def __init__(self, value):
        if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
            # a subclass (an IntEnum member, a float subclass) as the Python number it is: kept
            # as given, the compiler found no type for it (KeyError: <enum 'Color'>)
            value = python_number(value)
            if type(value) is not bool and isinstance(value, int) and not -2**63 <= value < 2**64:
                raise ValueError(f"tack.constant({value}): an integer constant must fit in 64 "
                                 "bits (int64, or uint64 from 2**63 to 2**64 - 1)")
        elif isinstance(value, np.generic) and value.dtype.name in _TYPE_NAMES:
            pass
        elif isinstance(value, np.ndarray):
            if type(value) is not np.ndarray and is_masked(value):
                # as a launch refuses one: its mask would be dropped, the values under it read
                raise TypeError("tack.constant takes no NumPy masked array, whose mask a kernel "
                                "cannot see (it would read the values under it as any others): "
                                "pass a.data for the values as they are, or a.filled(value), "
                                "whose masked elements hold value")
            if value.dtype.name not in _TYPE_NAMES or not 1 <= value.ndim <= 4:
                dims = f"{value.ndim} dimension{'' if value.ndim == 1 else 's'}"
                hint = "; for a 0-d array, pass its number (a[()])" if value.ndim == 0 else ""
                raise TypeError("tack.constant takes arrays of bool, int32, int64, uint32, "
                                f"uint64, float32 or float64 with 1-4 dimensions, not "
                                f"{value.dtype} with {dims}{hint}")
            arr = np.ascontiguousarray(value)
            value = np.frombuffer(arr.tobytes(), arr.dtype).reshape(arr.shape)
        else:
            raise TypeError(f"tack.constant takes a number or a NumPy array, not {type(value).__name__}")
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "_fingerprint", None)

    def __setattr__(self, name, value):
        raise AttributeError(f"a tack.constant's value cannot change ({self!r}): kernels were "
                             "compiled against it; bind the name to a new tack.constant instead")

    def __reduce__(self):
        # wrapped again when unpickled: copied and frozen, as here (a pickled array comes back
        # writable, and then what a kernel compiled against could change behind its back)
        return type(self), (self.value,)

    @property
    def fingerprint(self) -> str:
        """Hex digest (``tack.digests``) of the value: its dtype, shape and bytes (or Python type and value).

        The shape is the value's own: a NumPy scalar's is ``()``, where ``ascontiguousarray`` makes
        it a 1-element array, whose bytes are the same (a kernel reading ``np.float32(2)`` and
        one reading ``np.array([2], np.float32)`` were given one another's constant)."""
        if self._fingerprint is None:
            v = self.value
            h = hasher()
            if isinstance(v, (np.ndarray, np.generic)):
                arr = np.ascontiguousarray(v)
                h.update(f"{arr.dtype.str}{v.shape}".encode())
                h.update(arr.tobytes())
            else:
                h.update(number_text(v).encode())
            object.__setattr__(self, "_fingerprint", h.hexdigest())
        return self._fingerprint

    def __repr__(self):
        v = self.value
        desc = f"array({v.dtype}, {v.shape})" if isinstance(v, np.ndarray) else repr(v)
        return f"<tack.constant {desc}>"


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
    dtype = np.dtype(name)
    make = dtype.type
    if dtype.kind in "iu":
        span = 1 << (8 * dtype.itemsize)
        lo, hi = (-(span >> 1), (span >> 1) - 1) if dtype.kind == "i" else (0, span - 1)

        def cast(x):
            # as in a kernel: a float truncates toward zero and saturates at the range (NaN
            # gives 0); an integer wraps, as C's conversion (NumPy's type raised for both)
            if isinstance(x, (float, np.floating)):
                if x != x:
                    return make(0)
                return make(min(max(math.trunc(x), lo), hi) if math.isfinite(x) else (hi if x > 0 else lo))
            if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
                v = int(x) % span
                return make(v - span if v > hi else v)
            return make(x)
    else:
        def cast(x):
            return make(x)
    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = (f"Convert to {name} (inside kernels, and in plain Python too, alike: a float "
                    "to an integer truncates toward zero and saturates, NaN gives 0; an integer "
                    "wraps)" if dtype.kind in "iu" else f"Convert to {name} (inside kernels, and "
                    "in plain Python too).")
    return cast


bool_, int32, int64, uint32, uint64, float32, float64 = (_cast(n) for n in _TYPE_NAMES)
CASTS = {"bool": bool_, "int32": int32, "int64": int64, "uint32": uint32,
         "uint64": uint64, "float32": float32, "float64": float64}


MATH1 = ("sqrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
         "atan", "sinh", "cosh", "tanh", "floor", "ceil", "fabs", "trunc", "expm1",
         "log1p", "erf", "erfc", "cbrt")
MATH2 = ("pow", "atan2", "hypot", "copysign", "fmod")
MATH_PREDICATES = ("isnan", "isinf", "isfinite")
_MATH_ONLY = ("isclose",)       # math's: np.isclose is another function ("np.isclose", below)
_BUILTINS = ("min", "max", "abs", "round", "range", "len")
# NumPy's names for intrinsics.  ``np.absolute`` (``np.abs``) is ``abs``, ``np.power``
# (``np.pow``) is ``**`` (the frontend makes it the operator) and ``np.fmod`` is ``np.fmod``
# (C's fmod of floats, the truncated remainder of integers), so that on integers they keep the
# integer, as NumPy's do, where ``math.fabs``, ``math.pow`` and ``math.fmod`` give a float.
# ``np.round`` (``np.around``) is not Python's ``round``, which gives an int.
_NUMPY_ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2",
                  "absolute": "abs", "power": "power", "fmod": "np.fmod",
                  "minimum": "minimum", "maximum": "maximum", "clip": "np.clip", "sign": "np.sign",
                  "where": "np.where", "rint": "np.rint", "round": "np.round", "around": "np.round",
                  "isclose": "np.isclose"}

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
    for name in _MATH_ONLY:
        table[id(getattr(math, name))] = name
    for name in _BUILTINS:
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


def _origin(obj) -> str:
    return (getattr(obj, "__module__", None) or "").partition(".")[0]


def intrinsic_identity(obj):
    """What a dependency record keeps of a name bound to an intrinsic: its name and where the
    object comes from (``sqrt@math``, ``sqrt@numpy``), or None.  ``math.sqrt`` and ``np.sqrt``
    are one intrinsic but not one lowering (Python's math of literals is folded as Python
    computes it, a weak float; ``float('inf')`` is taken, ``np.float64('inf')`` refused): by its
    name alone, a kernel whose ``from math import sqrt`` became ``from numpy import sqrt`` was
    served the code of the other."""
    name = intrinsic_of(obj)
    return None if name is None else f"{name}@{_origin(obj)}"


def lowers_to(obj, intrinsic: str) -> bool:
    """Whether ``obj`` lowers to ``intrinsic`` (``intrinsic_of(obj) == intrinsic``; given as
    ``intrinsic_identity`` writes it, from the same module too), found among that intrinsic's
    few candidates rather than by building the whole table (the dependency check of a cached
    kernel runs this on its warm path)."""
    if "@" in intrinsic:
        intrinsic, _, origin = intrinsic.partition("@")
        if _origin(obj) != origin:
            return False
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
    if intrinsic in _BUILTINS and obj is getattr(builtins, intrinsic):
        return True
    if intrinsic in _MATH_ONLY:
        return obj is getattr(math, intrinsic)
    if intrinsic in MATH1 + MATH2 + MATH_PREDICATES:
        if obj is getattr(math, intrinsic, None):
            return True
        if obj is np.__dict__.get(intrinsic):     # unless another's alias (np.pow is np.power)
            return not any(obj is np.__dict__.get(alias) for alias, name in _NUMPY_ALIASES.items()
                           if name != intrinsic)
    return any(obj is np.__dict__.get(alias) for alias, name in _NUMPY_ALIASES.items() if name == intrinsic)
