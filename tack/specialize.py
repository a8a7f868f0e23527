"""Specialization: a lowered kernel + argument types -> a typed kernel.

Type inference is a fixed point: each function's statements are typed over
and over, each variable taking the unified type of everything assigned to it
(NumPy promotion), until no variable's type changes; a last strict pass then
records every expression's type and raises the first type error.  Device
functions are specialized per argument types (monomorphized), so a function
called with float32 and with float64 compiles twice.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from . import types as T
from .errors import CompileError
from .language import MATH1, MATH2, MATH_PREDICATES
from . import ir
from .ir import LoweredFunction, LoweredKernel, assignments, float_folded
from .limits import deep

_MAX_ROUNDS = 50


@dataclass
class TypedFunction:
    lowered: LoweredFunction
    argtypes: tuple
    symbol: str
    locals: dict = field(default_factory=dict)
    ret: object = None                     # None: returns nothing
    types: dict = field(default_factory=dict)    # id(node) -> type
    callees: dict = field(default_factory=dict)  # id(call node) -> TypedFunction
    is_kernel: bool = False
    passed: tuple = None                   # which of a call's arguments it takes (None: all)
    # (parameter position, axis, index, extent, source, location) of each literal index past the
    # static extent of an array parameter (never assigned), in code that may run, here or in a
    # device function the parameter is passed to: a compile error where a call passes a
    # tack.constant there (``_Inferer._call``)
    out_of_bounds: list = field(default_factory=list)

    def call_args(self, args: list) -> list:
        """The argument nodes of a call of this function that it takes as parameters: a literal
        one it was specialized for is in its body instead (``_with_literals``)."""
        return args if self.passed is None else [args[i] for i in self.passed]


@dataclass
class TypedKernel:
    lowered: LoweredKernel
    argtypes: tuple                        # of the non-template parameters, in order
    grid_ndim: int
    kernel: TypedFunction
    functions: list                        # every device function specialization, callees first

    @property
    def debug(self) -> bool:
        return self.lowered.debug

    @property
    def name(self) -> str:
        return self.lowered.name


def specialize(lowered: LoweredKernel, argtypes, grid_ndim: int) -> TypedKernel:
    """Type ``lowered`` for these argument types and a grid of ``grid_ndim`` dimensions."""
    if grid_ndim not in (1, 2, 3):
        raise ValueError(f"launch grids have 1, 2 or 3 dimensions, not {grid_ndim}")
    ctx = _Context(lowered, grid_ndim)
    with deep():
        try:
            kern = TypedFunction(lowered.kernel, tuple(argtypes), "tack_kernel", is_kernel=True)
            _Inferer(ctx, kern).run()
        except CompileError as e:
            raise e.with_kernel(lowered.kernel.source.name) from None
        return TypedKernel(lowered, tuple(argtypes), grid_ndim, kern, ctx.reachable(kern))


class _Context:
    def __init__(self, lowered, grid_ndim):
        self.lowered = lowered
        self.grid_ndim = grid_ndim
        self.cache = {}        # (fid, argtypes) -> TypedFunction
        self._count = 0

    def function(self, fid, argtypes, args=None):
        """The device function ``fid`` typed for ``argtypes``; its own errors propagate.

        ``args``: the call's argument nodes.  A literal argument (``0.5``, ``-1``, ``2**40``: a
        weak type, literals alone) of a parameter the function never assigns is put in the
        function's body in place of each use of that parameter, and the function is
        specialized for its value: it stays weak there, as if written in its place, as a Python
        literal passed to a Python function does under NumPy 2's rules (NEP 50), so that
        ``lerp(x, y, 0.5)`` of float32 values computes in float32 (not float64, which a GPU
        without double precision refuses, and most run far slower)."""
        lf = self.lowered.functions[fid]
        literal = {}
        if args is not None and len(args) == len(lf.params):
            rebound = None
            for i, (t, a) in enumerate(zip(argtypes, args)):
                # weak, or past int64 (a uint64 in place, but a float's type against a float)
                if (isinstance(t, T.Scalar) and (t.weak or t == T.uint64) and _literals_alone(a)
                        and (a := _bounded(a)) is not None):
                    if rebound is None:
                        rebound = set(assignments(lf.body))
                    if lf.params[i] not in rebound:
                        literal[i] = a
        kept = tuple(strong(t) for i, t in enumerate(argtypes) if i not in literal)
        key = (fid, kept, tuple((i, _literal_key(a)) for i, a in literal.items()))
        tf = self.cache.get(key)
        if tf is None:
            passed = None
            if literal:
                lf = _with_literals(lf, literal)
                passed = tuple(i for i in range(len(argtypes)) if i not in literal)
            tf = TypedFunction(lf, kept, f"tack_fn{self._count}_{lf.name}", passed=passed)
            self._count += 1
            _Inferer(self, tf).run()         # raises before anything is cached
            self.cache[key] = tf
        return tf

    def reachable(self, root: TypedFunction) -> list:
        """The device functions the final typing of ``root`` calls, callees first.

        Early inference rounds may specialize functions for argument types
        that the fixed point then abandons; those are not generated.
        """
        order, seen = [], set()

        def visit(tf):
            for callee in tf.callees.values():
                if id(callee) not in seen:
                    seen.add(id(callee))
                    visit(callee)
                    order.append(callee)
        visit(root)
        return order

    def constant_type(self, cid):
        v = self.lowered.constants[cid].value
        if isinstance(v, np.ndarray):
            # a C-ordered copy (tack.constant), its shape compiled in
            return T.Array(T.from_dtype(v.dtype), v.ndim, "C", False, v.shape)
        if isinstance(v, np.generic):
            return T.from_dtype(v.dtype)
        if type(v) is int and v >= 2**63:          # as a literal is: tack.constant(2**63) is a uint64
            return T.uint64
        return {bool: T.boolean, int: T.int64, float: T.float64}[type(v)]


def _literals_alone(node, names=()) -> bool:
    """Whether ``node`` is a number literal, or an expression of number literals alone (``names``:
    of parameters that stand for literals)."""
    kind = node[0]
    if kind == "const":
        return node[3] in ("int", "float")
    if kind == "unop":
        return _literals_alone(node[3], names)
    if kind == "binop":
        return _literals_alone(node[3], names) and _literals_alone(node[4], names)
    return kind == "name" and len(node) == 3 and node[2] in names


# A literal argument of more nodes than this (one the folds leave, such as ``n % 2.0``) is an
# ordinary parameter: each use gets a copy, and a function passing it on used twice
# (``f(x, n % 2.0 + n % 2.0)``) would double it at every level of calls.
_MAX_LITERAL_NODES = 16


def _bounded(node):
    """``node`` (literals alone) where it is small enough to be put in a function's body, else None
    (an ordinary parameter).  Integers alone never are large here: the front end folds those
    written in a call, ``_refolded`` those a body made."""
    count, stack = 0, [node]
    while stack:
        n = stack.pop()
        count += 1
        if count > _MAX_LITERAL_NODES:
            return None
        if n[0] == "unop":
            stack.append(n[3])
        elif n[0] == "binop":
            stack += (n[3], n[4])
    return node


def _int_value(node, depth=None):
    """The value of ``node`` where it is integers alone, by the front end's rules
    (``ir.int_literal_op``): a Python int, ``ir.TOO_BIG``, or None (also where it is deeper than
    ``depth`` levels, if given)."""
    kind = node[0]
    if kind == "const":
        return node[2] if type(node[2]) is int else None
    if kind not in ("unop", "binop") or depth == 0:
        return None
    depth = None if depth is None else depth - 1
    if kind == "unop":
        v = _operand_value(node[3], depth)
        return v if v is None or v is ir.TOO_BIG else ir.int_literal_unop(node[2], v)
    a = _operand_value(node[3], depth)
    if a is None:
        return None
    b = _operand_value(node[4], depth)
    if b is None:
        return None
    if a is ir.TOO_BIG or b is ir.TOO_BIG:
        return ir.TOO_BIG
    return ir.int_literal_op(node[2], a, b)


def _operand_value(node, depth):
    """``_int_value`` of an operator's operand: a bool literal too (``True + True`` is 2), as the
    front end's ``_operand_value``."""
    if node[0] == "const" and type(node[2]) is bool:
        return node[2]
    return _int_value(node, depth)


def _refolded(node, source):
    """An operation on literals alone that putting literal arguments in a function's body made,
    folded top-down as the front end folds one written so: integers alone to their value (an
    error at it where 64 bits do not hold it, as in place), else its operands so, then an
    operation whose value is a float to that float (``ir.float_folded``)."""
    if node[0] not in ("binop", "unop"):
        return node
    v = _int_value(node)
    unfit = ir.int_literal_unfit(v)
    if unfit:
        raise source.error(unfit, node[1])
    if v is not None:
        return ["const", node[1], v, "int"]
    folded = node[:3] + [_refolded(x, source) for x in node[3:]]
    return float_folded(folded)


def _literal_key(node):
    """``node`` (literals alone) without its locations: what a specialization for it is keyed by
    (a float by its bits: ``-0.0`` is not ``0.0``, nor one NaN another)."""
    if node[0] == "const":
        v = node[2]
        return ("const", struct.pack("<d", v).hex() if type(v) is float else repr(v), node[3])
    if node[0] == "unop":
        return ("unop", node[2], _literal_key(node[3]))
    return ("binop", node[2], _literal_key(node[3]), _literal_key(node[4]))


def _relocated(node, loc):
    """A new copy of ``node`` (literals alone) at ``loc``: each use its own nodes, typed where it
    is (a literal's type depends on the other operand), and an error in it pointing there."""
    if node[0] == "const":
        return ["const", loc, node[2], node[3]]
    if node[0] == "unop":
        return ["unop", loc, node[2], _relocated(node[3], loc)]
    return ["binop", loc, node[2], _relocated(node[3], loc), _relocated(node[4], loc)]


def _with_literals(lf: LoweredFunction, literal: dict) -> LoweredFunction:
    """``lf`` with each parameter of ``literal`` ({index: literal node}) taken out of its
    parameters and each use of it in its body replaced by a copy of the literal."""
    names = {lf.params[i]: node for i, node in literal.items()}

    def is_name(x):
        return len(x) == 3 and x[0] == "name" and isinstance(x[2], str) and x[2] in names

    def put(x):
        if not isinstance(x, list):
            return x
        return _relocated(names[x[2]], x[1]) if is_name(x) else [put(y) for y in x]

    def walk(x):
        if not isinstance(x, list):
            return x
        if is_name(x):
            return _relocated(names[x[2]], x[1])
        if x and x[0] in ("binop", "unop") and _literals_alone(x, names):   # once they are put in
            return _refolded(put(x), lf.source)     # the outermost such: as the front end folds
        if (len(x) == 5 and x[0] == "intrinsic" and x[4] == "math" and x[3]
                and all(_literals_alone(a, names) for a in x[3])):      # math.sqrt(k) of k = 2.0
            args = [_refolded(put(a), lf.source) for a in x[3]]
            folded = ir.math_folded(getattr(math, x[2]), ["intrinsic", x[1], x[2], args])
            return folded if folded[0] == "const" else folded + ["math"]
        if (len(x) == 5 and x[0] == "intrinsic" and x[4] == "py" and x[3]
                and all(_literals_alone(a, names) for a in x[3])):      # abs(s) of s = -2**63
            return ir.builtin_folded(["intrinsic", x[1], x[2], [_refolded(put(a), lf.source) for a in x[3]], "py"])
        out = [walk(y) for y in x]
        if out != x and out[0] in ("binop", "unop") and _literals_alone(out):
            return _refolded(out, lf.source)        # 1 / math.sqrt(k): folded on, as in place
        return out
    params = [p for i, p in enumerate(lf.params) if i not in literal]
    return LoweredFunction(lf.fid, lf.name, params, walk(lf.body), lf.source)


def strong(t):
    if isinstance(t, T.Scalar):
        return t.strong()
    if isinstance(t, T.Tuple):
        return T.Tuple(tuple(strong(x) for x in t.items))
    return t


def literal_value(node):
    """The value of an integer literal, or of an expression of integer literals alone (``2**40``,
    ``~5``, ``0 - 3``), as the front end computes it; None for anything else, one deeper than 32
    levels, or a value past 128 bits (what no type here holds: the usual rules then)."""
    v = _int_value(node, 32)
    return v if v is not None and v is not ir.TOO_BIG and v.bit_length() <= 128 else None


def literal_values(node, depth=32):
    """The values an integer literal expression may take: ``literal_value``'s one value, or, for
    a conditional expression whose branches are such expressions (``-1 if c else 1``, weak as a
    literal is), each branch's values, and the same with ``-``, ``+`` or ``~`` in front; None for
    anything else."""
    v = literal_value(node)
    if v is not None:
        return [v]
    if depth <= 0:
        return None
    if node[0] == "ifexp":
        a, b = literal_values(node[3], depth - 1), literal_values(node[4], depth - 1)
        return a + b if a and b else None
    if node[0] == "unop" and node[2] in ("neg", "pos", "~"):
        vs = literal_values(node[3], depth - 1)
        return [ir.int_literal_unop(node[2], x) for x in vs] if vs else None
    if node[0] == "binop":              # (1 if c else 2) * 2**31: each pair's value
        a, b = literal_values(node[3], depth - 1), literal_values(node[4], depth - 1)
        if not a or not b or len(a) * len(b) > _MAX_LITERAL_VALUES:
            return None
        out = [ir.int_literal_op(node[2], x, y) for x in a for y in b]
        return out if all(type(v) is int and v.bit_length() <= 128 for v in out) else None
    if node[0] == "intrinsic" and node[2] in ("abs", "min", "max") and node[3]:
        # abs(-3_000_000_000), max(0, 2**40): a literal's value through them, typed as the
        # literal would be (the weak result was cut to an int32 operand's type: 3 for 2**40+3)
        args = [literal_values(a, depth - 1) for a in node[3]]
        if not all(args) or (node[2] == "abs") != (len(args) == 1):
            return None
        if node[2] == "abs":
            return [abs(x) for x in args[0]]
        combos = [[]]
        for vs in args:
            combos = [c + [v] for c in combos for v in vs]
            if len(combos) > _MAX_LITERAL_VALUES:
                return None
        pick = min if node[2] == "min" else max
        return [pick(c) for c in combos]
    if (node[0] == "index" and node[2][0] == "tuple" and len(node[3]) == 1
            and node[3][0][0] == "const" and type(node[3][0][2]) is int):     # (2**40, 1)[0]
        items, k = node[2][2], node[3][0][2]
        if -len(items) <= k < len(items):
            return literal_values(items[k], depth - 1)
    return None


_MAX_LITERAL_VALUES = 64        # a choice of literals followed through operators: at most so many


def clip_bound_dropped(node, x, side):
    """Whether ``node``, the ``side`` ("lo" or "hi") bound of ``np.clip(x, lo, hi)`` with ``x`` of
    type ``x``, is one NumPy drops: a literal that can never bind, as ``x``'s integer type holds
    no value past it (``-1`` below a uint64, ``2**63`` above an int64).  NumPy then keeps ``x``'s
    type; typed with the bound, the result was an int64, or a float64 for a 64-bit ``x``, which
    lost the low bits of ``2**53 + 1``.  The type and the code (``x``'s type's own limit in its
    place) both ask this."""
    if not (isinstance(x, T.Scalar) and not x.weak and x.kind in "iu"):
        return False
    values = literal_values(node)
    if values is None:
        return False
    info = np.iinfo(x.dtype)
    return all(v < info.min for v in values) if side == "lo" else all(v > info.max for v in values)


def clip_limit(t, side):
    """What a dropped bound (``clip_bound_dropped``) of ``np.clip`` in the integer type ``t`` is in
    the code: ``t``'s least value for ``lo``, its greatest for ``hi`` (each a no-op bound)."""
    info = np.iinfo(t.dtype)
    return int(info.min if side == "lo" else info.max)


def arith_type(op, a, b):
    """(operand type, result type) of ``a op b`` on scalars, or None if not allowed."""
    if op in ("&", "|", "^", "<<", ">>"):
        # Integers and bools only, promoted as NumPy does; NumPy refuses a mix that
        # promotes to float (int64 with uint64), and so does Tack.
        if a.kind == "f" or b.kind == "f":
            return None
        t = T.promote(a, b)
        if t.kind == "f":
            return None
        if op in ("<<", ">>") and t.kind == "b":
            t = T.int64
        return t, t
    t = T.promote(a, b)
    if t.kind == "b":
        t = T.int64
    if op == "/" and t.kind in "iu":
        res = T.WEAK_FLOAT if t.weak else T.float64
        return res, res
    return t, t


def math_type(t):
    """Result type of a one-argument math function."""
    return t if t.kind == "f" else T.float64


def promote_all(ts):
    """The type of ``ts[0] op ts[1] op ...``: ``types.promote`` of each in turn."""
    t = ts[0]
    for x in ts[1:]:
        t = T.promote(t, x)
    return t


def isclose_type(ts):
    """The float type ``math.isclose(a, b, rel_tol=, abs_tol=)`` computes in, of its four
    arguments' types: their promoted type as a math function's (float32 of float32 values and
    literal tolerances; Python's converts to float64)."""
    return math_type(promote_all(ts).strong())


def np_isclose_types(ts):
    """The types ``np.isclose(a, b, rtol, atol, equal_nan)`` computes in, each step's as NumPy's:
    it takes ``b`` as a float first (an integer array's element a float64, a Python number a
    Python float), then ``|a - b|`` (and ``a == b``) in ``a``'s and that ``b``'s type,
    ``rtol * |b|`` in ``rtol``'s and ``b``'s, ``atol +`` that in ``atol``'s and the product's,
    and the comparison in the common type of its two sides; ``b`` is finite in its own float
    type.  -> (difference, product, threshold, comparison, ``b``'s), strong float types: a
    float64 ``a`` and a float32 ``b`` compare a float64 difference with a float32 threshold
    (literal tolerances), a float32 ``b`` with float64 tolerances a float32 difference with a
    float64 threshold."""
    a, b, rtol, atol = ts[:4]
    b = (T.WEAK_FLOAT if b.weak else T.float64) if b.kind != "f" else b
    diff, product = T.promote(a, b), T.promote(rtol, b)
    threshold = T.promote(atol, product)
    return tuple(math_type(t.strong()) for t in (diff, product, threshold,
                                                 T.promote(diff, threshold), b))


def power_of_ten(n: int) -> float:
    """10.0 ** n as NumPy's ``np.round`` computes it (calculation.c ``power_of_ten``): exact to
    1e8, then 1e9 multiplied by 10.0 one step at a time, each product rounded (an infinity
    from 1e309 on)."""
    if n < 9:
        return (1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8)[n]
    r = 1e9
    for _ in range(n - 9):
        if r == math.inf:
            break
        r *= 10.0
    return r


class _Inferer:
    def __init__(self, ctx, tf: TypedFunction):
        self.ctx = ctx
        self.tf = tf
        self.src = tf.lowered.source
        self.strict = False
        self.dead = 0           # > 0 inside a branch the compile knows never runs (``ruled_out``)
        lf = tf.lowered         # the parameters an index or a call may stand for (never assigned)
        self.kept_params = () if tf.is_kernel else set(lf.params) - set(assignments(lf.body))
        self.widened = {}       # local name -> (its type, the assignment that made it so)

    def error(self, msg, node):
        return self.src.error(msg, node[1] if node is not None else None)

    def run(self):
        tf = self.tf
        lf = tf.lowered
        if len(tf.argtypes) != len(lf.params):
            raise CompileError(f"'{lf.name}' takes {len(lf.params)} arguments, got {len(tf.argtypes)}")
        for name, t in zip(lf.params, tf.argtypes):
            tf.locals[name] = strong(t)
        for _ in range(_MAX_ROUNDS):
            before = dict(tf.locals), tf.ret
            self.block(lf.body)
            if (dict(tf.locals), tf.ret) == before:
                break
        self.strict = True
        tf.types.clear()
        tf.callees.clear()
        tf.out_of_bounds.clear()
        self.block(lf.body)

    # -- statements ---------------------------------------------------------

    def block(self, stmts):
        for s in stmts:
            if self.strict:
                self.stmt(s)
            else:
                try:
                    self.stmt(s)
                except CompileError:
                    pass

    def stmt(self, s):
        op = s[0]
        if op == "assign":
            v = self.expr(s[3])
            for t in s[2]:
                self.assign(t, v, s)
        elif op == "augassign":
            cur = self.expr(s[3]) if s[3][0] == "index" else self.name_type(s[3])
            rhs = self.fit(s[4], self.expr(s[4]), cur)
            v = self.binop_type(s[2], cur, rhs, s)
            self.assign(s[3], v, s)
        elif op == "if":
            self.truth(s[2])
            known = self.known(s[2])
            self.ruled_out(known is False, self.block, s[3])
            self.ruled_out(known is True, self.block, s[4])
        elif op == "while":
            self.truth(s[2])
            self.ruled_out(self.known(s[2]) is False, self.block, s[3])
        elif op == "for":
            ts = [self.expr(x) for x in s[3:6]]
            if any(t is None for t in ts):
                return
            if not all(isinstance(t, T.Scalar) and t.kind in "iu" for t in ts):
                raise self.error("range() takes integers", s)
            t = None
            for x in ts:
                if not x.weak:
                    t = x if t is None else T.promote(t, x)
            t = t or T.int64
            for node, x in zip(s[3:6], ts):                # range(n, 0, -1) with an unsigned n
                t = T.promote(t, self.fit(node, x, t))
            if t.kind not in "iu":          # uint64 beside a signed value: NumPy's float64
                raise self.error("range() of a uint64 and a signed or negative value: no integer "
                                 "type holds both (NumPy would make them float64); cast the uint64 "
                                 "one to int64 (range(tack.int64(n), 0, -1)) or the other to "
                                 "uint64", s)
            if t.strong() != T.uint64:
                # Python's range() gives Python ints whatever its bounds' types: an int64 here
                # (as a Python int argument is), or a uint64 where a bound is one (a value past
                # int64).  Typed as its bounds were, ``k - 5`` of a uint32 bound wrapped to
                # 4294967293, and ``x[k - 1]`` read 4 G elements past x.
                t = T.int64
            self.set_local(s[2], t.strong(), s)
            var_t = self.tf.locals.get(s[2])
            if self.strict and not (isinstance(var_t, T.Scalar) and var_t.kind in "iu"):
                raise self.error(f"loop variable '{s[2]}' also holds {var_t} elsewhere; a range() "
                                 "loop's variable must be an integer: use another name", s)
            self.block(s[6])
        elif op == "return":
            if s[2] is None:
                if self.tf.ret is not None and self.strict:
                    raise self.error(f"'{self.tf.lowered.name}' returns a value elsewhere; "
                                     "every return must give one", s)
                return
            v = strong(self.expr(s[2]))
            if v is None:
                return
            if isinstance(v, T.Array):
                raise self.error("device functions cannot return arrays", s)
            r = T.unify(self.tf.ret, v)
            if r is None:
                raise self.error(f"'{self.tf.lowered.name}' returns {self.tf.ret} on one "
                                 f"path and {v} on another", s)
            self.tf.ret = r
        elif op == "expr":
            self.statement_call = id(s[2])          # a call whose value, if any, is dropped
            self.expr(s[2])

    def assign(self, target, v, stmt):
        kind = target[0]
        if v is None:
            return
        if kind == "name":
            self.set_local(target[2], strong(v), target)
        elif kind == "index":
            base = self.expr(target[2])
            if not isinstance(base, T.Array):
                raise self.error(f"only arrays can be assigned by index, not {base}", target)
            if not base.writable:
                raise self.error(self.read_only(target[2]), target)
            self.index_type(base, target[3], target)
            if not isinstance(v, T.Scalar):
                raise self.error(f"cannot store {v} in an element of {base}", target)
            self.tf.types[id(target)] = base.dtype
        elif kind == "tuple":
            items = target[2]
            if not isinstance(v, T.Tuple) or len(v.items) != len(items):
                what = f"{len(v.items)} values" if isinstance(v, T.Tuple) else f"{v} (not a tuple)"
                msg = f"cannot unpack {what} into {len(items)} targets"
                value = stmt[3] if stmt[0] == "assign" else None
                if value is not None and value[0] == "intrinsic" and value[2] == "tid":
                    n = self.ctx.grid_ndim
                    if n == 1 and len(items) == 1:  # (it said "1 names need a 1-D grid")
                        msg += ": tack.tid() is an int in a 1-D launch, not a tuple; write i = tack.tid()"
                    else:
                        msg += (f": tack.tid() is {'an int' if n == 1 else f'a tuple of {n}'} in "
                                f"this {n}-D launch; {len(items)} names need a {len(items)}-D grid "
                                f"(dim={tuple(['...'] * len(items))!r})").replace("'...'", "...")
                raise self.error(msg, target)
            for t, x in zip(items, v.items):
                self.assign(t, x, stmt)

    def read_only(self, node) -> str:
        """Why the array ``node`` cannot be written: a tack.constant, or a read-only argument."""
        if node[0] == "gconst":
            return "tack.constant arrays are read-only"
        if node[0] == "name" and node[2] in self.tf.lowered.params:
            if self.tf.is_kernel:
                return (f"argument '{node[2]}' is a read-only array (a NumPy array whose "
                        "flags.writeable is False, or another library's its producer exported "
                        "read-only through DLPack) and cannot be written; pass a writable array "
                        "(np.array(...) copies one, and the kernel's results are then in the copy)")
            return (f"parameter '{node[2]}' is read-only (it is passed a tack.constant or an "
                    "array whose flags.writeable is False) and cannot be written")
        return "this array is read-only (a tack.constant, or an array whose flags.writeable is False)"

    def set_local(self, name, t, node):
        cur = self.tf.locals.get(name)
        u = T.unify(cur, t)
        if u is None:
            raise self.error(f"variable '{name}' holds {cur} and cannot also hold {t}", node)
        if isinstance(u, T.Array) and cur is not None and name in self.tf.lowered.params \
                and u != cur:
            raise self.error(f"parameter '{name}' cannot be rebound", node)
        if cur is not None and u != cur and node is not None and node[1]:
            self.widened[name] = (u, node[1])
        self.tf.locals[name] = u

    def why_type(self, node) -> str:
        """Where a variable's type came from, for an error about it: a name whose assignments
        widened its type (``x = i`` then, later, ``x = 0.5``: float64 everywhere, this read's
        line too) is said to be so, naming the line that widened it; '' for anything else."""
        if node is None or node[0] != "name" or node[2] not in self.widened:
            return ""
        t, loc = self.widened[node[2]]
        return (f" ('{node[2]}' is {t} wherever it is read: a variable has one type, and line "
                f"{loc[0]} assigns it a value that makes it {t})")

    def name_type(self, node):
        t = self.tf.locals.get(node[2])
        if t is None and self.strict:
            raise self.error(f"variable '{node[2]}' is used before it is assigned", node)
        return t

    def truth(self, e):
        """Type ``e``, whose truth alone is used (a condition, ``not``)."""
        if e[0] == "boolop":                # a bool whatever its operands, which only test too
            self.operands(e, self.truth)
            self.tf.types[id(e)] = T.boolean
            return
        self.tested(e)

    def operands(self, e, walk) -> list:
        """``walk`` of each operand of the ``and``/``or`` ``e``: those after one whose truth the
        compile knows and that decides it (a false one of ``and``, a true one of ``or``) never
        run (``ruled_out``), as Python short-circuits them: ``C.shape[0] > 3 and C[3]``."""
        decides = e[2] == "or"
        decided, out = False, []
        for x in e[3]:
            out.append(self.ruled_out(decided, walk, x))
            decided = decided or self.known(x) is decides
        return out

    def tested(self, e):
        """Type ``e``, whose truth is tested and whose value may be used too (an operand of
        ``and``/``or`` giving its value): its type, a scalar's."""
        t = self.expr(e)
        if t is not None and not isinstance(t, T.Scalar):
            raise self.error(f"{t} has no truth value in Tack code", e)
        return t

    # -- expressions --------------------------------------------------------

    def expr(self, e):
        t = getattr(self, "_" + e[0])(e)
        self.tf.types[id(e)] = t
        return t

    def _const(self, e):
        v, kind = e[2], e[3]
        if kind == "bool":
            return T.boolean
        if kind == "float":
            return T.WEAK_FLOAT
        return T.uint64 if v >= 2**63 else T.WEAK_INT

    def _name(self, e):
        return self.name_type(e)

    def _gconst(self, e):
        return self.ctx.constant_type(e[2])

    def _binop(self, e):
        a, b = self.expr(e[3]), self.expr(e[4])
        a, b = self.fit(e[3], a, b), self.fit(e[4], b, a)
        r = self.binop_type(e[2], a, b, e)
        if e[2] == "**" and isinstance(r, T.Scalar) and r.kind in "iu":
            values = literal_values(e[4])
            if values is not None and min(values) < 0:
                # 0 at run time (as a negative exponent computed there gives): NumPy refuses
                # an integer to a negative integer power, and Python gives a float
                raise self.error(f"an integer to a negative integer power ({a} ** {min(values)}) "
                                 "is refused, as NumPy refuses it (Python gives a float, and of 0 "
                                 "raises ZeroDivisionError): write "
                                 "float(x) ** -n, or 1.0 / x ** n", e)
        return r

    def common_type(self, args, ts):
        """The promoted type of the operands ``args`` of types ``ts`` (``min``, ``np.clip``...):
        a literal the others' type cannot hold taken as an int64 (``fit``) first."""
        ts = list(ts)
        for k in range(len(ts)):
            for j in range(len(ts)):
                if j != k:
                    ts[k] = self.fit(args[k], ts[k], ts[j])
        return promote_all(ts)

    def fit(self, node, t, other):
        """A literal that the other operand's integer type cannot hold is an int64 (or uint64).

        NumPy 2 keeps ``x + 1`` in x's type, but ``x < 3_000_000_000`` with an
        int32 ``x`` must compare exactly, and ``u % -3`` with an unsigned ``u``
        must not wrap the -3: so such a literal stops being weak.
        """
        if (node[0] == "const" and type(node[2]) is int and node[2] >= 2**63 and t == T.uint64
                and isinstance(other, T.Scalar) and other.kind == "f"):
            # past int64 a literal is a uint64, but against a float it is a Python int, which
            # takes the float's type (NEP 50): ``x32 * 10**19`` stays float32, as NumPy's does;
            # against a float literal it is one of Python's numbers still, weak
            # (``1.0 if c else 10**19``, ``1e30 % 10**19``: Python's float, or its int)
            self.tf.types[id(node)] = other
            return other
        if not (isinstance(t, T.Scalar) and t.weak and t.kind == "i"
                and isinstance(other, T.Scalar) and not other.weak and other.kind in "iu"):
            return t
        # a literal, or literals alone (2**40, 3 * 10**9), or a choice of those (-1 if c else 1)
        values = literal_values(node)
        if values is None:
            return t
        info = np.iinfo(other.dtype)
        if all(info.min <= value <= info.max for value in values):
            return t
        strong = T.uint64 if max(values) >= 2**63 else T.int64
        self.tf.types[id(node)] = strong
        return strong

    def binop_type(self, op, a, b, node):
        if a is None or b is None:
            return None
        if not (isinstance(a, T.Scalar) and isinstance(b, T.Scalar)):
            raise self.error(f"unsupported operand types for {op}: {a} and {b}", node)
        r = arith_type(op, a, b)
        if r is None:
            why = ""
            sa, sb = a.strong(), b.strong()
            if {sa.kind, sb.kind} == {"i", "u"} and T.promote(sa, sb).kind == "f":
                signed = sa if sa.kind == "i" else sb
                unsigned = sb if signed is sa else sa
                why = (f"; {signed.name} with {unsigned.name} promotes to float64, as NumPy's "
                       "result_type does (a negative literal is an int64), and a float has no "
                       f"bitwise operations: cast one side (tack.{unsigned.name}(...) or "
                       "tack.int64(...))")
            raise self.error(f"unsupported operand types for {op}: {a} and {b}{why}", node)
        return r[1]

    def _unop(self, e):
        if e[2] == "not":
            self.truth(e[3])
            return T.boolean
        t = self.expr(e[3])
        if t is None:
            return None
        if not isinstance(t, T.Scalar):
            raise self.error(f"bad operand type for unary {e[2]}: {t}", e)
        if e[2] == "~":
            if t.kind == "f":
                raise self.error(f"bad operand type for unary ~: {t}", e)
            return t
        return T.int64 if t.kind == "b" else t

    def _cmp(self, e):
        ts = [self.expr(x) for x in e[3]]
        if any(t is None for t in ts):
            return T.boolean
        for k in range(len(ts)):
            for j in (k - 1, k + 1):
                if 0 <= j < len(ts):
                    ts[k] = self.fit(e[3][k], ts[k], ts[j])
        for t in ts:
            if not isinstance(t, T.Scalar):
                raise self.error(f"cannot compare {t}", e)
        return T.boolean

    def _boolop(self, e):
        """``a or b`` is ``a`` where ``a`` is true, else ``b`` (``and``: ``a`` where it is false),
        as in Python: a bool of bools, else the operands' common type (``x or 1.0`` is x's
        value, not True).  Where only its truth is used (``if a or b``), it is a bool
        (``truth``), and so are the ``and``/``or`` among its operands then; here each operand
        gives its value, one that is an ``and``/``or`` too (``a and b or c``)."""
        ts = self.operands(e, self.tested)
        if any(t is None for t in ts):
            return None
        if all(t.kind == "b" for t in ts):
            return T.boolean
        return self.common_type(e[3], ts)

    def known(self, cond):
        """The condition's truth where the compile knows it (``gridcheck.static_truth``), else
        None."""
        from .gridcheck import static_truth
        return static_truth(cond, self.ctx.lowered.constants, self.static_shape)

    def static_shape(self, node):
        """The shape ``node`` (an expression typed already) has when the kernel compiles: a
        ``tack.constant``'s, a ``static_shape`` argument's, or a parameter's given one; else None."""
        t = self.tf.types.get(id(node))
        return t.shape if isinstance(t, T.Array) else None

    def ruled_out(self, dead, walk, node):
        """``walk(node)``, counted as code that never runs where ``dead``: a literal index past a
        constant's extent there is no error."""
        self.dead += dead
        try:
            return walk(node)
        finally:
            self.dead -= dead

    def _ifexp(self, e):
        self.truth(e[2])
        known = self.known(e[2])
        a = self.ruled_out(known is False, self.expr, e[3])
        b = self.ruled_out(known is True, self.expr, e[4])
        if a is None or b is None:
            return None
        if isinstance(a, T.Scalar) and isinstance(b, T.Scalar):
            a, b = self.fit(e[3], a, b), self.fit(e[4], b, a)      # (-1 beside a uint32: int64)
            return T.promote(a, b)
        u = T.unify(a, b)
        if u is None:
            raise self.error(f"the two branches give {a} and {b}", e)
        return u

    def _tuple(self, e):
        ts = [self.expr(x) for x in e[2]]
        return None if any(t is None for t in ts) else T.Tuple(tuple(ts))

    def _shape(self, e):
        t = self.expr(e[2])
        if t is None:
            return None
        if not isinstance(t, T.Array):
            raise self.error(f"{t} has no shape", e)
        return T.Tuple((T.int64,) * t.ndim)

    def _tget(self, e):
        t = self.expr(e[2])
        if t is None:
            return None
        k = e[3]
        if not -len(t.items) <= k < len(t.items):
            raise self.error(f"index {k} out of range for a tuple of {len(t.items)}", e)
        return t.items[k]

    def _index(self, e):
        base = self.expr(e[2])
        if base is None:
            return None
        if isinstance(base, T.Tuple):
            idx = e[3]
            if len(idx) != 1 or idx[0][0] != "const" or idx[0][3] != "int":
                raise self.error("tuples can only be indexed by an integer literal", e)
            k = idx[0][2]
            if not -len(base.items) <= k < len(base.items):
                raise self.error(f"index {k} out of range for a tuple of {len(base.items)}", e)
            self.expr(idx[0])
            return base.items[k]
        if not isinstance(base, T.Array):
            raise self.error(f"{base} cannot be indexed", e)
        self.index_type(base, e[3], e)
        if e[2][0] == "gconst":             # a tack.constant's extents are known: so is C[3]'s fault
            from .gridcheck import constant_index_error
            msg = constant_index_error(self.ctx.lowered, self.tf.lowered.fid, e[2][2], e[3])
            if msg is not None and not self.dead:
                raise self.error(msg, e)
        elif (self.strict and not self.dead and base.shape is not None and e[2][0] == "name"
              and e[2][2] in self.kept_params):
            from .gridcheck import literal_out_of_bounds
            found = literal_out_of_bounds(base.shape, e[3], self.ctx.lowered.constants)
            if found is not None:           # an error where a call passes a constant here
                self.tf.out_of_bounds.append(
                    (self.tf.lowered.params.index(e[2][2]), *found, self.src, e[1]))
        return base.dtype

    def index_type(self, arr, indices, node):
        ts = [self.expr(i) for i in indices]
        if any(t is None for t in ts):
            return
        whole = len(ts) == 1 and isinstance(ts[0], T.Tuple)
        if whole:
            ts = list(ts[0].items)
        if len(ts) != arr.ndim:
            msg = f"a {arr.ndim}-D array takes {arr.ndim} indices, got {len(ts)}"
            n = self.ctx.grid_ndim
            if whole and len(ts) == n:      # a[i] of i = tack.tid() launched on a grid of n axes
                msg += (f" (a tuple of {n}, as tack.tid() is in this {n}-D launch: a "
                        f"{arr.ndim}-D array indexed by tack.tid() needs a {arr.ndim}-D dim)")
            elif len(ts) < arr.ndim:        # a[i][j], or a row a[i]: NumPy's views, not Tack's
                msg += (f" (a[i] of a {arr.ndim}-D array would be a view of it, which Tack does "
                        f"not make: write an element's {arr.ndim} indices in one [], as "
                        f"a[{', '.join('ijkl'[:arr.ndim])}])")
            raise self.error(msg, node)
        for x, t in zip(indices if not whole else [None] * len(ts), ts):
            if not (isinstance(t, T.Scalar) and t.kind in "iu"):
                raise self.error(f"array indices must be integers, not {t}{self.why_type(x)}",
                                 node)

    def atomic_value(self, name, at, node, vt, e):
        """Refuse a value ``name`` (an atomic) cannot store in an array of ``at`` elements as it
        is: as NumPy's in-place ``a += v`` (``np.add(a, v, out=a)``), the result type of ``at``
        and the value must cast to ``at`` by the rule 'same_kind', so a float is not truncated
        into an integer array, nor a signed integer wrapped into an unsigned one; and a literal
        the array's integer type cannot hold is refused, as NumPy's OverflowError refuses it."""
        fix = "int(...)" if at.kind == "i" else f"tack.{at}(...)"
        # a literal: weak, or, from 2**63 up, a uint64 (the type NumPy gives no Python int)
        if vt.kind in "iu" and at.kind in "iu":
            values = literal_values(node)
            info = np.iinfo(at.dtype)
            if values is not None and not all(info.min <= v <= info.max for v in values):
                bad = next(v for v in values if not info.min <= v <= info.max)
                raise self.error(f"tack.{name}() of the integer {bad} into an array of {at}: {at} "
                                 f"cannot hold it (NumPy raises OverflowError); convert it "
                                 f"explicitly if its wrapped value is meant: {fix}", e)
        result = T.promote(at, vt)
        if not np.can_cast(result.dtype, at.dtype, "same_kind"):
            what = "truncate it" if vt.kind == "f" else f"cast the {result} result unsafely"
            raise self.error(f"tack.{name}() of a value of type {vt.strong()} into an array of {at} would "
                             f"{what} (NumPy refuses the same, casting rule 'same_kind'): "
                             f"convert the value explicitly, {fix}", e)

    def _call(self, e):
        ts = [self.expr(a) for a in e[3]]
        if any(t is None for t in ts):
            return None
        callee = self.ctx.function(e[2], tuple(ts), e[3])
        self.tf.callees[id(e)] = callee
        if self.strict and not self.dead and callee.out_of_bounds:
            self.passed_out_of_bounds(callee, callee.call_args(e[3]), e)
        if callee.ret is None:
            if self.strict and id(e) != getattr(self, "statement_call", None):
                raise self.error(f"'{callee.lowered.name}' returns no value: a call of it can only "
                                 "be a statement of its own, not part of an expression", e)
            return T.Tuple(())
        return callee.ret

    def passed_out_of_bounds(self, callee, args, call):
        """A ``tack.constant`` array passed (as ``args``) to a device function that indexes the
        parameter at a literal past the constant's extent, in code that may run: the compile
        error of that index (at its line), as if the function read the constant itself.  A
        parameter of this function passed on carries the callee's indices to this one's callers."""
        from .gridcheck import index_message
        for pos, axis, k, n, src, loc in callee.out_of_bounds:
            a = args[pos]
            if a[0] == "gconst":
                line = "" if call[1] is None else f" at line {call[1][0] + self.src.shift}"
                passed = (f", passed to '{callee.lowered.name}' as "
                          f"'{callee.lowered.params[pos]}'{line}")
                name = self.ctx.lowered.constant_name(a[2], self.tf.lowered.fid)
                raise src.error(index_message(axis, k, n, name, passed), loc)
            if a[0] == "name" and a[2] in self.kept_params:
                self.tf.out_of_bounds.append(
                    (self.tf.lowered.params.index(a[2]), axis, k, n, src, loc))

    def _intrinsic(self, e):
        name, args = e[2], e[3]
        ts = [self.expr(a) for a in args]
        if any(t is None for t in ts):
            return None

        shown = name[5:] if name.startswith("cast:") else name     # cast:float64 -> float64()

        def need(n):
            if len(ts) != n:
                # (math.log(x, base) is log(x) / log(base) before it comes here)
                takes = "1 or 2 arguments (x, base)" if name == "log" else f"{n} argument{'s' if n != 1 else ''}"
                raise self.error(f"{shown}() takes {takes}, got {len(ts)}", e)

        def scalars():
            for t in ts:
                if not isinstance(t, T.Scalar):
                    raise self.error(f"{shown}() takes numbers, not {t}", e)

        if name == "tid":
            need(0)
            if not self.tf.is_kernel:
                raise self.error("tack.tid() can only be used in a kernel; pass the index to "
                                 "device functions", e)
            n = self.ctx.grid_ndim
            return T.int64 if n == 1 else T.Tuple((T.int64,) * n)
        if name.startswith("cast:"):
            need(1)
            scalars()
            return T.SCALARS[name[5:]]
        if name in MATH1:
            need(1)
            scalars()
            return math_type(ts[0].strong())
        if name in MATH_PREDICATES:
            need(1)
            scalars()
            return T.boolean
        if name in MATH2:
            need(2)
            scalars()
            return math_type(self.common_type(args, ts).strong())
        if name == "np.fmod":                   # NumPy's: integers give an integer
            need(2)
            scalars()
            t = self.common_type(args, ts).strong()
            return T.int64 if t.kind == "b" else t
        if name in ("min", "max", "minimum", "maximum"):
            if name in ("minimum", "maximum"):    # NumPy's: two numbers (a NaN propagates)
                need(2)
            elif len(ts) < 2:
                raise self.error(f"{name}() takes two or more numbers", e)
            scalars()
            return self.common_type(args, ts)
        if name == "abs":
            need(1)
            scalars()
            return T.int64 if ts[0].kind == "b" else ts[0]
        if name in ("np.clip", "np.where"):
            if name == "np.where" and len(ts) != 3:
                raise self.error("np.where() takes 3 arguments (condition, x, y) in Tack code, "
                                 f"got {len(ts)}: np.where(condition) alone (the indices where it "
                                 "holds) is an array, which Tack code does not make", e)
            scalars()
            first = 1 if name == "np.where" else 0      # np.where's condition takes no part
            keep = range(first, len(args))
            if name == "np.clip" and len(args) == 3:    # a bound that never binds: dropped
                keep = [0] + [k for k, side in ((1, "lo"), (2, "hi"))
                              if not clip_bound_dropped(args[k], ts[0], side)]
            # NumPy's: a NumPy scalar, never weak
            return self.common_type([args[k] for k in keep], [ts[k] for k in keep]).strong()
        if name == "np.sign":
            need(1)
            scalars()
            if ts[0].kind == "b":
                raise self.error("np.sign() takes numbers, not bool (NumPy has no sign of a "
                                 "bool)", e)
            return ts[0].strong()
        if name in ("np.rint", "np.round", "round"):
            if name == "np.rint":
                need(1)
            scalars()           # (np.round's decimals, a literal, is its second argument)
            t = ts[0].strong()
            if name == "np.rint" or t.kind in "fb":     # NumPy's float16 of a bool is a float64
                return T.int64 if name == "round" else math_type(t)
            return t            # an integer rounds to itself, in its own type
        if name in ("isclose", "np.isclose"):
            scalars()
            return T.boolean
        if name in ("ndim", "size"):
            if not isinstance(ts[0], T.Array):
                raise self.error(f"{ts[0]} has no attribute '{name}' (only arrays have one)", e)
            return T.int64
        if name.startswith("atomic_"):
            need(3)
            arr = ts[0]
            if not isinstance(arr, T.Array):
                raise self.error(f"{name}() needs a writable array as its first argument", e)
            if not arr.writable:
                raise self.error(f"{name}() needs a writable array as its first argument: "
                                 + self.read_only(e[3][0]), e)
            if arr.dtype.kind == "b":
                raise self.error(f"{name}() does not work on bool arrays", e)
            idx = list(ts[1].items) if isinstance(ts[1], T.Tuple) else [ts[1]]
            if len(idx) != arr.ndim:
                raise self.error(f"a {arr.ndim}-D array takes {arr.ndim} indices, got {len(idx)}", e)
            if not all(isinstance(t, T.Scalar) and t.kind in "iu" for t in idx):
                raise self.error("array indices must be integers", e)
            if not isinstance(ts[2], T.Scalar):
                raise self.error(f"{name}() stores a number, not {ts[2]}", e)
            self.atomic_value(name, arr.dtype, args[2], ts[2], e)
            return arr.dtype
        raise self.error(f"{name}() is not supported", e)
