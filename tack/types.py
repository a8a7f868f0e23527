"""Tack's value types: scalars, arrays, tuples and template classes.

Types are small immutable value objects (named tuples: cheap to define at
import), hashable and comparable, so that a tuple of argument types can key
the in-memory and on-disk caches.  Promotion
follows NumPy 2 for its scalars (NEP 50): two typed values promote with
``numpy.result_type``; a Python literal written in a kernel (``2``, ``0.5``)
is *weak* and takes the type of the other operand where that type can hold
its kind, as ``np.float32(x) * 2.0`` stays float32.
"""

import numpy as np

from .records import fields


@fields(("name", "weak"), defaults=(False,))
class Scalar(tuple):
    """A scalar type: ``name`` is NumPy's (bool, int32, int64, uint32, uint64, float32,
    float64); ``weak``: a Python literal, not yet committed to a width."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        """'b' bool, 'i' signed, 'u' unsigned, 'f' float."""
        return np.dtype(self.name).kind

    @property
    def bits(self) -> int:
        return 1 if self.name == "bool" else np.dtype(self.name).itemsize * 8

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.name)

    def strong(self) -> "Scalar":
        return SCALARS[self.name] if self.weak else self

    def __str__(self) -> str:
        return self.name


SCALAR_NAMES = ("bool", "int32", "int64", "uint32", "uint64", "float32", "float64")
SCALARS = {n: Scalar(n) for n in SCALAR_NAMES}
boolean, int32, int64 = SCALARS["bool"], SCALARS["int32"], SCALARS["int64"]
uint32, uint64 = SCALARS["uint32"], SCALARS["uint64"]
float32, float64 = SCALARS["float32"], SCALARS["float64"]
WEAK_INT = Scalar("int64", weak=True)
WEAK_FLOAT = Scalar("float64", weak=True)


@fields(("dtype", "ndim", "layout", "writable", "shape"), defaults=("A", True, None))
class Array(tuple):
    """A NumPy array argument: its dtype, rank, layout and writability.

    ``layout`` is ``"C"`` (row-major contiguous: the innermost stride is 1
    and the strides follow from the extents), ``"F"`` (column-major
    contiguous) or ``"A"`` (any strides, passed at launch).  Extents are
    passed at launch too, unless ``shape`` is given: a static shape, compiled
    in (a kernel asks for it with ``@tack.kernel(static_shape=...)``).
    """

    __slots__ = ()
    # dtype: Scalar, ndim: int, layout, writable, shape: static extents, or None (passed at launch)

    @property
    def static(self) -> bool:
        return self.shape is not None

    def __str__(self) -> str:
        dims = ", ".join(map(str, self.shape)) if self.shape is not None else ", ".join("?" * self.ndim)
        ro = "" if self.writable else ", readonly"
        return f"array({self.dtype}, ({dims}{',' if self.ndim == 1 else ''}), {self.layout}{ro})"


LAYOUTS = ("C", "F", "A")
_C, _F = 0x1, 0x2            # NumPy's NPY_ARRAY_C_CONTIGUOUS and NPY_ARRAY_F_CONTIGUOUS flag bits


def layout_of(flags_num: int) -> str:
    """The layout of an array from its ``flags.num``: C if C-contiguous, else F if F-contiguous, else A."""
    return "C" if flags_num & _C else "F" if flags_num & _F else "A"


@fields(("items",))
class Tuple(tuple):
    __slots__ = ()

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.items)) + ")"


@fields(("qualname", "fingerprint"))
class Template(tuple):
    """A class passed as a kernel argument: a compile-time parameter."""

    __slots__ = ()

    def __str__(self) -> str:
        return f"class {self.qualname}"


def promote(a: Scalar, b: Scalar) -> Scalar:
    """The type of ``a op b`` for arithmetic, NumPy-style with weak literals."""
    if a.weak and not b.weak:
        a, b = b, a
    if b.weak and not a.weak:
        if a.kind == "b":
            return b.strong()
        if b.kind == "f" and a.kind in "iu":
            return float64
        return a
    if a.weak and b.weak:
        return WEAK_FLOAT if "f" in (a.kind, b.kind) else WEAK_INT
    if a.kind == "b" and b.kind == "b":
        return boolean
    return SCALARS[np.result_type(a.dtype, b.dtype).name]


def unify(a, b):
    """The type a variable takes when assigned values of types ``a`` and ``b``."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        return promote(a.strong(), b.strong())
    if isinstance(a, Tuple) and isinstance(b, Tuple) and len(a.items) == len(b.items):
        return Tuple(tuple(unify(x, y) for x, y in zip(a.items, b.items)))
    return None


_BY_DTYPE = {np.dtype(n): SCALARS[n] for n in SCALAR_NAMES}


def from_dtype(dtype) -> Scalar | None:
    """The Tack scalar type of a NumPy dtype (or anything np.dtype takes), or None."""
    st = _BY_DTYPE.get(dtype) if isinstance(dtype, np.dtype) else None
    if st is None:
        st = SCALARS.get(np.dtype(dtype).name)
    return st


def typeof_array(a: np.ndarray, static: bool = False) -> Array | None:
    """The Tack type of a NumPy array, or None when Tack cannot take it.

    ``static``: with its shape compiled in.
    """
    st = from_dtype(a.dtype)
    if st is None or not 1 <= a.ndim <= 4 or not a.dtype.isnative:
        return None
    size = a.dtype.itemsize
    if any(s % size for s in a.strides):
        return None
    return Array(st, a.ndim, layout_of(a.flags.num), a.flags.writeable, a.shape if static else None)


def spec(t) -> str:
    """A value type as text that ``parse_spec`` reads back (stored with cached variants).

    Arrays: ``array:<dtype>:<ndim>:<layout>:<w|r>``, and ``:<n>x<n>...`` for a static shape.
    """
    if isinstance(t, Scalar):
        return t.strong().name
    if isinstance(t, Array):
        text = f"array:{t.dtype.name}:{t.ndim}:{t.layout}:{'w' if t.writable else 'r'}"
        return text if t.shape is None else text + ":" + "x".join(map(str, t.shape))
    raise ValueError(f"no spec for {t}")


def parse_spec(text: str):
    """The inverse of ``spec``; ValueError on anything else (the specs of older Tacks too)."""
    if text in SCALARS:
        return SCALARS[text]
    parts = text.split(":")
    if len(parts) not in (5, 6) or parts[0] != "array" or parts[1] not in SCALARS \
            or parts[2] not in ("1", "2", "3", "4") or parts[3] not in LAYOUTS or parts[4] not in ("w", "r"):
        raise ValueError(f"not a Tack type spec: {text!r}")
    ndim = int(parts[2])
    shape = None
    if len(parts) == 6:
        try:
            shape = tuple(int(x) for x in parts[5].split("x"))
        except ValueError:
            raise ValueError(f"not a Tack type spec: {text!r}") from None
        if len(shape) != ndim or any(n < 0 for n in shape):
            raise ValueError(f"not a Tack type spec: {text!r}")
    return Array(SCALARS[parts[1]], ndim, parts[3], parts[4] == "w", shape)
