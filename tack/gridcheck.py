"""What a launch can check for free: the arrays a kernel indexes on every point by its thread index,
or by a constant.

A kernel that reads or writes ``a[i]`` with ``i = tack.tid()`` unconditionally (not under an
``if`` or a loop, not after a ``return`` some points may take, not in the untaken side of
``x if c else y`` or of ``and``/``or``) touches ``a[i]`` at every point of the grid, so a grid
larger than ``a`` along that axis is certain to access ``a`` out of bounds.  Comparing the
two extents costs a launch a few integer comparisons, so it is done at every launch, before
anything runs; accesses this cannot vouch for (``a[i + 1]``, guarded ones, those in device
functions) are left to debug mode (``TACK_DEBUG=1``), which checks every access.  An
unconditional access at a literal index or an integer ``tack.constant`` (``a[0]``, ``p[i, 2]``,
``a[-1]``, ``p[i, COLUMN]``) is checked the same way: an array with no element there is
certain to be accessed out of bounds, whatever the grid.  A ``tack.constant`` array indexed by
the thread index at every point limits the grid as an argument does, its extent known at
compile time; one indexed at a literal or integer ``tack.constant`` out of its bounds is a
compile error wherever the access is (``constant_index_error``, which the typing calls), as
that access is wrong wherever it runs.

``tid_indexed`` finds such accesses in a lowered kernel, once per compiled variant; the
variant's metadata carries them (``tidx``, written and read by ``backends.variant``'s
``encode_tidx`` and ``decode_tidx``, which a cache hit imports without this module), so a
cache hit checks them too.
"""

from __future__ import annotations

import math
import operator

import numpy as np


# Literal indices checked: smaller than the tidx text's fields hold (``backends.variant``); a
# larger one is left to debug mode, as it was (a list with one field too long checks nothing).
MAX_INDEX = 10 ** 9


def tid_indexed(lowered, grid_ndim: int) -> list:
    """See ``_tid_indexed``; run with the recursion headroom a deep expression needs."""
    from .limits import deep
    with deep():
        return _tid_indexed(lowered, grid_ndim)


def _tid_indexed(lowered, grid_ndim: int) -> list:
    """``[(parameter index, axis, grid dimension, line offset)]``: the kernel's parameter (its
    index among the non-template parameters) is indexed on ``axis`` by the thread index of
    ``grid dimension`` at every point; ``line offset`` is that access's line, counted from the
    kernel's first line (where the first such access is).  An access at the constant index
    ``k`` on ``axis`` at every point is ``(parameter index, axis, -1, line offset, k)``.  A
    ``tack.constant`` array ``name`` of ``extent`` elements along ``axis``, indexed there by the
    thread index of ``grid dimension`` at every point, is ``(-1, axis, grid dimension, line
    offset, extent, name)``: the grid may not run past it either.  (A constant's literal
    indices are checked when the kernel compiles, ``constant_index_error``.)"""
    fn = lowered.kernel
    params = list(fn.params)
    from collections import Counter

    from .ir import assignments
    counts = Counter(assignments(fn.body))
    arrays = {p for p in params if counts[p] == 0}
    tid = {}                    # name -> grid dimension, or None for the whole index tuple
    found = {}
    first = fn.source.first_line

    def access(base, idx, loc):
        off = loc[0] - first if loc else -1
        if base[0] == "gconst":             # a tack.constant array: its extents are known now
            shape = getattr(lowered.constants[base[2]].value, "shape", ())
            if not shape:
                return
            name = lowered.constant_name(base[2], fn.fid)

            def check(axis, dim):           # literal indices: ``constant_index_error``'s
                if axis < len(shape) and shape[axis] < MAX_INDEX:
                    found.setdefault((-1, axis, dim, shape[axis], name), off)
        elif base[0] == "name" and base[2] in arrays:
            p = params.index(base[2])

            def check(axis, dim):
                found.setdefault((p, axis, dim), off)
            for axis, x in enumerate(idx):   # a[2], p[i, 0], a[-1], a[K]: an index of every point
                k = _literal_index(x, lowered.constants)
                if k is not None:
                    found.setdefault((p, axis, -1, k), off)
        else:
            return
        if len(idx) == 1 and idx[0][0] == "name" and tid.get(idx[0][2], 0) is None:
            axes = [(axis, axis) for axis in range(grid_ndim)]          # a[t], t = tack.tid()
        else:
            axes = [(axis, _dim_of(x, tid)) for axis, x in enumerate(idx)]
        for axis, dim in axes:
            if dim is not None:
                check(axis, dim)

    def expr(e):
        if not isinstance(e, list) or not e or not isinstance(e[0], str):
            return
        op = e[0]
        if op == "index":
            access(e[2], e[3], e[1])
            expr(e[2])
            for x in e[3]:
                expr(x)
        elif op == "ifexp":                 # only the condition runs on every point
            expr(e[2])
        elif op == "boolop":                # only the first operand does
            expr(e[3][0])
        elif op in ("call", "intrinsic", "cmp", "tuple"):
            args = e[3] if op != "tuple" else e[2]
            if op == "intrinsic" and e[2].startswith("atomic_") and len(args) == 3:
                index = args[1]
                access(args[0], index[2] if index[0] == "tuple" else [index], e[1])
            for x in args:
                expr(x)
        elif op in ("binop", "unop"):
            for x in e[3:]:
                expr(x)
        elif op in ("tget", "shape"):
            expr(e[2])

    def target(t):
        if t[0] == "index":
            access(t[2], t[3], t[1])
            expr(t[2])
            for x in t[3]:
                expr(x)
        elif t[0] == "tuple":
            for x in t[2]:
                target(x)

    for s in fn.body:                       # the kernel's top level: what every point runs
        kind = s[0]
        if kind == "assign":
            value = s[3]
            expr(value)
            for t in s[2]:
                target(t)
            if value[0] == "intrinsic" and value[2] == "tid":
                for t in s[2]:
                    _bind_tid(t, grid_ndim, counts, tid)
        elif kind == "augassign":
            expr(s[4])
            target(s[3])
        elif kind == "expr":
            expr(s[2])
        elif kind in ("if", "while"):
            expr(s[2])                      # the condition runs once on every point
        elif kind == "for":
            for x in s[3:6]:
                expr(x)
        if kind in ("if", "while", "for", "return") and _may_return(s):
            break                           # after it, not every point runs what follows
    return sorted((key[:3] + (off,) + key[3:]) for key, off in found.items())


def constant_index_error(lowered, fid, cid, idx):
    """The error of indexing the ``tack.constant`` array ``cid`` (read in the function ``fid``)
    by ``idx`` (its index nodes, one per axis), or None: a literal or integer ``tack.constant``
    index outside the constant's extent on its axis (counted from the end if negative, as
    Python counts) is out of bounds wherever it runs, whatever the grid, so it is a compile
    error, where an array argument's extent is known only at launch."""
    found = literal_out_of_bounds(lowered.constants[cid].value.shape, idx, lowered.constants)
    return None if found is None else index_message(*found, lowered.constant_name(cid, fid))


def index_message(axis, k, n, name, passed=""):
    """The compile error of index ``k`` on ``axis`` (of extent ``n``) of the constant ``name``;
    ``passed``: how it reached the function that indexes it (a device function's parameter)."""
    return (f"index {k} is out of bounds for axis {axis} of the constant '{name}' with size {n}"
            f"{passed} (Python raises IndexError for it)")


def literal_out_of_bounds(shape, idx, constants):
    """``(axis, index, extent)`` of the first of the index nodes ``idx`` (one per axis of an
    array of static ``shape``) that is a literal or integer ``tack.constant`` outside its axis's
    extent (counted from the end if negative, as Python counts), else None."""
    if len(idx) == 1 and idx[0][0] == "tuple":
        idx = idx[0][2]
    if len(idx) != len(shape):
        return None                     # the typing's error
    for axis, (x, n) in enumerate(zip(idx, shape)):
        k = _index_value(x, constants)
        if k is not None and not -n <= k < n:
            return axis, k, n
    return None


def static_int(node, constants):
    """The integer ``node`` is when the kernel compiles (a literal, a ``tack.constant`` integer,
    a constant array's ``shape[k]``, ``len``, ``size`` or ``ndim``), else None: what
    ``static_truth`` compares, for a ``range``'s bounds."""
    v = _static_value(node, constants, _constants_shape(constants))
    return v if type(v) is int else None


def _constants_shape(constants):
    def shape_of(x):
        value = getattr(constants.get(x[2]), "value", None) if x[0] == "gconst" else None
        return value.shape if isinstance(value, np.ndarray) else None
    return shape_of


def static_truth(node, constants, shape_of=None):
    """Whether the condition ``node`` holds, where the kernel's compile knows it (True or
    False): integer and bool literals, ``tack.constant`` scalars and the ``shape[k]``, ``len``,
    ``size`` and ``ndim`` of an array whose shape is compiled in (a ``tack.constant``, a
    parameter given one, a ``static_shape`` argument: ``shape_of(node)``, the static shape of an
    array expression or None; without it, the constants'), compared, combined with ``and``,
    ``or`` and ``not``; else None.  A branch it rules out never runs, so a literal index there
    past a constant's extent (``if C.shape[0] > 3: C[3]``, code written for constants of any
    size) is no compile error (``constant_index_error``)."""
    if shape_of is None:
        shape_of = _constants_shape(constants)
    op = node[0]
    if op == "boolop":
        truths = [static_truth(x, constants, shape_of) for x in node[3]]
        if node[2] == "and":
            return False if False in truths else True if all(t is True for t in truths) else None
        return True if True in truths else False if all(t is False for t in truths) else None
    if op == "unop" and node[2] == "not":
        t = static_truth(node[3], constants, shape_of)
        return None if t is None else not t
    if op == "cmp":
        values = [_static_value(x, constants, shape_of) for x in node[3]]
        if any(v is None for v in values):
            return None
        return all(getattr(operator, _COMPARE[o])(a, b)
                   for o, a, b in zip(node[2], values, values[1:]))
    v = _static_value(node, constants, shape_of)
    return None if v is None else bool(v)


_COMPARE = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def _static_value(x, constants, shape_of):
    """The integer (or bool) ``x`` is when the kernel compiles, else None (``static_truth``)."""
    op = x[0]
    if op == "const" and x[3] == "bool":
        return x[2]
    if op in ("const", "gconst"):           # an integer literal or tack.constant, as an index is
        return _index_value(x, constants)
    if op in ("index", "tget") and x[2][0] == "shape":
        shape = shape_of(x[2][2])
        k = x[3] if op == "tget" else (_static_value(x[3][0], constants, shape_of)
                                       if len(x[3]) == 1 else None)
        if shape is not None and type(k) is int and -len(shape) <= k < len(shape):
            return shape[k]
        return None
    if op == "intrinsic" and x[2] in ("len", "size", "ndim") and len(x[3]) == 1:
        shape = shape_of(x[3][0])
        if shape is not None and (shape or x[2] != "len"):
            return {"len": lambda: shape[0], "size": lambda: math.prod(shape),
                    "ndim": lambda: len(shape)}[x[2]]()
    return None


def _literal_index(x, constants):
    """The integer ``x`` is, if it is a literal or a ``tack.constant`` integer (and smaller than
    ``MAX_INDEX``), else None."""
    k = _index_value(x, constants)
    return k if k is not None and abs(k) < MAX_INDEX else None


def _index_value(x, constants):
    """The integer ``x`` is, if it is a literal or a ``tack.constant`` integer, else None."""
    if x[0] == "const":
        k = x[2] if x[3] == "int" and type(x[2]) is int else None
    elif x[0] == "gconst":
        value = getattr(constants.get(x[2]), "value", None)
        try:                            # a bool, NumPy's too, is no index (NumPy before 2.3,
            # the newest for Python 3.10, takes np.True_ as 1 with a warning; later a TypeError)
            k = None if isinstance(value, (bool, np.bool_)) else operator.index(value)
        except TypeError:
            k = None
    else:
        return None
    return k


def _dim_of(x, tid):
    """The grid dimension index ``x`` is the thread index of, or None."""
    if x[0] == "name" and isinstance(tid.get(x[2]), int):
        return tid[x[2]]
    if x[0] == "tget" and x[2][0] == "name" and x[2][2] in tid and tid[x[2][2]] is None:
        return x[3]
    if x[0] == "index" and x[2][0] == "name" and x[2][2] in tid and tid[x[2][2]] is None \
            and len(x[3]) == 1 and x[3][0][0] == "const" and x[3][0][3] == "int":
        k = x[3][0][2]                       # t[k] of t = tack.tid()
        return k if 0 <= k < 3 else None
    return None


def _bind_tid(t, grid_ndim, counts, tid):
    """Record the names ``t = tack.tid()`` binds for good (assigned nowhere else)."""
    if t[0] == "name" and counts.get(t[2]) == 1:
        tid[t[2]] = 0 if grid_ndim == 1 else None
    elif t[0] == "tuple" and len(t[2]) == grid_ndim:
        for k, x in enumerate(t[2]):
            if x[0] == "name" and counts.get(x[2]) == 1:
                tid[x[2]] = k


def _may_return(s) -> bool:
    if s[0] == "return":
        return True
    if s[0] == "if":
        return any(_may_return(x) for x in s[3] + s[4])
    if s[0] == "while":
        return any(_may_return(x) for x in s[3])
    if s[0] == "for":
        return any(_may_return(x) for x in s[6])
    return False
