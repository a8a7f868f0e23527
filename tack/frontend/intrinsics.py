"""The Python objects a kernel may call, and the intrinsic each one lowers to.

Recognized by identity, so ``math.sqrt``, ``from math import sqrt`` and
``np.sqrt`` all lower to the same intrinsic.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

MATH1 = ("sqrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
         "atan", "sinh", "cosh", "tanh", "floor", "ceil", "fabs", "trunc", "expm1",
         "log1p", "erf", "erfc", "cbrt")
MATH2 = ("pow", "atan2", "hypot", "copysign", "fmod")
MATH_PREDICATES = ("isnan", "isinf", "isfinite")
_NUMPY_ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2",
                  "absolute": "fabs", "power": "pow", "minimum": "min", "maximum": "max"}

_table = None


def _build():
    from .. import api
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
    for name, fn in api.CASTS.items():
        table[id(fn)] = f"cast:{name}"
        table[id(getattr(np, name if name != "bool" else "bool_"))] = f"cast:{name}"
    for name in ("tid", "atomic_add", "atomic_min", "atomic_max"):
        table[id(getattr(api, name))] = name
    return table


def intrinsic_of(obj):
    """The intrinsic name a Python object lowers to, or None."""
    global _table
    if _table is None:
        _table = _build()
    return _table.get(id(obj))
