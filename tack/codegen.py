"""Code generation: a typed kernel -> an LLVM IR module (llvmlite.ir), for any backend.

What differs between targets sits behind a small interface the backend
passes in (``target``): how the grid loop or thread index reaches the kernel
body (``emit_entry``), how a math function is called (``math_call``), and
the atomic ordering (``atomic_rmw``).  A target may also set
``addrspace`` (the LLVM address space of array data, constant arrays and the
debug error record: 1, global memory, on the GPU targets; 0 by default) and
``alloca_addrspace`` (AMDGPU's private memory is 5).  A hook that cannot
do what is asked raises ``Unsupported("what")``; codegen turns it into a
``CompileError`` at the user's line naming the feature and the target.
Everything else -- arithmetic with Python's semantics, array addressing,
bounds checks, device-function calls -- is shared.

Values in the generator mirror Tack types: a scalar is one LLVM value, an
array a struct of a pointer to its first element and the extents and strides
not compiled in (``argument_layout.array_fields``: the order every launch passes them in), a
tuple a Python list of values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.ir as ir
import numpy as np

from . import types as T
from .errors import UNSIGNED_INDEX, BoundsSite, CompileError
from .ir import assignments
from .limits import deep
from .language import MATH1, MATH2
from .backends.argument_layout import array_fields
from .specialize import (TypedFunction, TypedKernel, arith_type, clip_bound_dropped, clip_limit,
                         isclose_type, math_type,
                         np_isclose_types, power_of_ten)

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
_LL = {"bool": I1, "int32": I32, "int64": I64, "uint32": I32, "uint64": I64,
       "float32": F32, "float64": F64}
_ICMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!="}
_FCMP = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}


def lltype(t, addrspace=0):
    """The LLVM type of a value of Tack type ``t`` in registers; an array's data pointer is in
    address space ``addrspace`` (the target's: 0 on CPUs, 1, global memory, on GPUs)."""
    if isinstance(t, T.Scalar):
        return _LL[t.name]
    if isinstance(t, T.Array):
        return ir.LiteralStructType([storage_type(t.dtype).as_pointer(addrspace)] + [I64] * array_fields(t))
    if isinstance(t, T.Tuple):
        return ir.LiteralStructType([lltype(x, addrspace) for x in t.items])
    raise TypeError(f"no LLVM type for {t}")


class Unsupported(Exception):
    """Raised by a target hook for a feature the target cannot compile (``str``: the feature,
    e.g. ``"math.erf on float64"``); codegen reports it at the user's line."""


class _AllocaIn(ir.instructions.AllocaInstr):
    """``alloca T, addrspace(N)``: llvmlite's alloca is always in address space 0."""

    def __init__(self, parent, typ, name, addrspace):
        super().__init__(parent, typ, None, name)
        self.type = typ.as_pointer(addrspace)
        self.addrspace = addrspace

    def descr(self, buf):
        buf.append(f"alloca {self.allocated_type}, addrspace({self.addrspace})")


def declare_intrinsic(module, name, ret, args):
    """Declare ``llvm.<name>`` overloaded on its types (``llvm.copysign.f64``, ``llvm.fptosi.sat.i64.f64``)."""
    suffix = {I1: "i1", I8: "i8", I32: "i32", I64: "i64", F32: "f32", F64: "f64"}
    overload = [ret, args[0]] if name.endswith(".sat") else [ret]
    full = f"llvm.{name}." + ".".join(suffix[t] for t in overload)
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), full)
    return fn


def storage_type(t: T.Scalar):
    """The LLVM type of an array element in memory (bool is a byte)."""
    return I8 if t.kind == "b" else _LL[t.name]


@dataclass
class Generated:
    module: ir.Module
    entry: str
    sites: list = field(default_factory=list)    # debug mode: site id -> BoundsSite


def generate(tk: TypedKernel, target, symbol_prefix="tack") -> Generated:
    with deep():
        return _generate(tk, target, symbol_prefix)


def _generate(tk, target, symbol_prefix):
    check_entry = getattr(target, "check_entry", None)     # a GPU's limits on its parameters
    if check_entry is not None:
        check_entry(tk)
    module = ir.Module(name=tk.name)
    gen = _ModuleGen(module, tk, target, symbol_prefix)
    for tf in tk.functions:
        gen.declare(tf)
    gen.declare(tk.kernel)
    try:
        for tf in tk.functions + [tk.kernel]:
            _FunctionGen(gen, tf).emit()
    except CompileError as e:
        raise e.with_kernel(tk.name) from None
    entry = f"{symbol_prefix}_entry"
    target.emit_entry(module, gen.functions[id(tk.kernel)], tk, entry)
    return Generated(module, entry, gen.sites)


class _ModuleGen:
    def __init__(self, module, tk, target, prefix):
        self.module = module
        self.tk = tk
        self.target = target
        self.prefix = prefix
        self.functions = {}      # id(TypedFunction) -> ir.Function
        self.globals = {}        # cid -> ir.GlobalVariable
        self.sites = []
        self._helpers = {}
        self.addrspace = getattr(target, "addrspace", 0)
        self.alloca_addrspace = getattr(target, "alloca_addrspace", 0)
        self.no_float64 = getattr(target, "has_float64", True) is False
        self.overflow_intrinsics = getattr(target, "overflow_intrinsics", True)
        self.sat_nan_select = getattr(target, "sat_nan_select", False)
        self.aggregate_phis = getattr(target, "aggregate_phis", True)

    def lltype(self, t):
        """``lltype`` with this target's address space for array data."""
        return lltype(t, self.addrspace)

    def declare(self, tf: TypedFunction):
        args = []
        for t in tf.argtypes:
            args.append(self.lltype(t))
        if tf.is_kernel:
            args += [I64] * self.tk.grid_ndim
        if self.tk.debug:
            args.append(I64.as_pointer(self.addrspace))
        ret = ir.VoidType() if tf.ret is None or tf.is_kernel else self.lltype(tf.ret)
        fn = ir.Function(self.module, ir.FunctionType(ret, args), f"{self.prefix}_{tf.symbol}")
        fn.linkage = "internal"
        self.functions[id(tf)] = fn

    def constant_array(self, cid):
        g = self.globals.get(cid)
        if g is None:
            arr = self.tk.lowered.constants[cid].value
            data = bytearray(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
            if arr.dtype.kind == "b":
                data = bytearray(arr.astype("u1").tobytes())
            g = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(data)), f"{self.prefix}_const_{len(self.globals)}",
                                  addrspace=self.addrspace)
            g.initializer = ir.Constant(ir.ArrayType(I8, len(data)), data)
            g.global_constant = True
            g.linkage = "internal"
            g.align = 64
            self.globals[cid] = g
        return g

    def helper(self, name, build):
        fn = self._helpers.get(name)
        if fn is None:
            fn = build(self.module, f"{self.prefix}_{name}")
            self._helpers[name] = fn
        return fn


class _FunctionGen:
    def __init__(self, mod: _ModuleGen, tf: TypedFunction):
        self.mod = mod
        self.tf = tf
        self.fn = mod.functions[id(tf)]
        self.types = tf.types
        self.loops = []
        self.ret_slot = self.ret_block = None

    # -- setup --------------------------------------------------------------

    def emit(self):
        tf = self.tf
        entry = self.fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        body = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        args = list(self.fn.args)
        self.err = args.pop() if self.mod.tk.debug else None
        n = len(tf.argtypes)
        self.tids = args[n:]
        if tf.is_kernel and self.mod.no_float64:
            self.refuse_float64_parameters()
        if isinstance(tf.ret, T.Tuple) and not tf.is_kernel and not self.mod.aggregate_phis:
            # Every return stores the tuple's items and goes to one return block: LLVM then
            # joins scalars, where several returns of a tuple are joined as one phi of the
            # struct (a tuple returned from a loop), which LLVM 22's SPIR-V backend aborts on.
            self.ret_slot = self.alloc(tf.ret)
        self.slots = {name: self.alloc(t) for name, t in tf.locals.items()}
        for name, t, arg in zip(tf.lowered.params, tf.argtypes, args[:n]):
            self.store_slot(self.slots[name], self.cast(self.unpack(arg, t), t, tf.locals[name]), tf.locals[name])
        # An array parameter the body never rebinds: its geometry (strides computed from the
        # extents) is found once, here, rather than at every access (less IR for LLVM to clean up).
        rebound = set(assignments(tf.lowered.body))
        self.param_geometry = {name: self.geometry(arg, t)
                               for name, t, arg in zip(tf.lowered.params, tf.argtypes, args[:n])
                               if isinstance(t, T.Array) and name not in rebound}
        self.block(tf.lowered.body)
        if not self.b.block.is_terminated:
            self.emit_default_return()
        if self.ret_block is not None:
            self.b.position_at_end(self.ret_block)
            self.b.ret(self.pack(self.load_slot(self.ret_slot, tf.ret), tf.ret))
        self.alloca_builder.branch(body)

    def refuse_float64_parameters(self):
        """A float64 scalar parameter is a float64 value in the entry's signature even when the
        body never reads it (which the checks on expressions would catch): refused, naming it."""
        src = self.tf.lowered.source
        for name, t in zip(self.tf.lowered.params, self.tf.argtypes):
            if isinstance(t, T.Scalar) and t.strong() == T.float64:
                loc = src.parameter_loc(name)
                raise self.unsupported(Unsupported(
                    f"float64 (this device has no double precision: parameter '{name}' is "
                    "float64; a Python float argument is float64, pass np.float32)"), (None, loc))

    def emit_default_return(self):
        if self.tf.ret is None or self.tf.is_kernel:
            self.b.ret_void()
        elif self.ret_slot is not None:
            self.emit_return(self.zeros(self.tf.ret))
        else:
            self.b.ret(ir.Constant(self.mod.lltype(self.tf.ret), None))

    def emit_return(self, value):
        """Return ``value`` (a generator value of the function's type): ``ret``, or where the
        target joins no struct phis (``ret_slot``), a store of its items and a branch to the one
        return block."""
        if self.ret_slot is None:
            self.b.ret(self.pack(value, self.tf.ret))
            return
        if self.ret_block is None:
            self.ret_block = self.new_block("return")
        self.store_slot(self.ret_slot, value, self.tf.ret)
        self.b.branch(self.ret_block)

    def zeros(self, t):
        """The zero generator value of type ``t`` (tuples: a list of their items' zeros)."""
        if isinstance(t, T.Tuple):
            return [self.zeros(x) for x in t.items]
        return ir.Constant(self.mod.lltype(t), None)

    def unpack(self, llvalue, t):
        """A function argument (flat LLVM value) -> generator value."""
        if isinstance(t, T.Tuple):
            return [self.unpack(self.b.extract_value(llvalue, i), x) for i, x in enumerate(t.items)]
        return llvalue

    def pack(self, value, t):
        """A generator value -> one LLVM value (tuples become structs)."""
        if isinstance(t, T.Tuple):
            agg = ir.Constant(self.mod.lltype(t), None)
            for i, (v, x) in enumerate(zip(value, t.items)):
                agg = self.b.insert_value(agg, self.pack(v, x), i)
            return agg
        return value

    def alloc(self, t):
        if isinstance(t, T.Tuple):
            return [self.alloc(x) for x in t.items]
        return self.alloca(self.mod.lltype(t))

    def alloca(self, ty):
        space = self.mod.alloca_addrspace
        if not space:
            return self.alloca_builder.alloca(ty)
        instr = _AllocaIn(self.alloca_builder.block, ty, "", space)
        self.alloca_builder._insert(instr)
        return instr

    def store_slot(self, slot, value, t):
        if isinstance(t, T.Tuple):
            for s, v, x in zip(slot, value, t.items):
                self.store_slot(s, v, x)
        else:
            self.b.store(value, slot)

    def load_slot(self, slot, t):
        if isinstance(t, T.Tuple):
            return [self.load_slot(s, x) for s, x in zip(slot, t.items)]
        return self.b.load(slot)

    def new_block(self, name):
        return self.fn.append_basic_block(name)

    # -- statements ---------------------------------------------------------

    def block(self, stmts):
        for s in stmts:
            if self.b.block.is_terminated:
                self.b.position_at_end(self.new_block("dead"))
            try:
                getattr(self, "_s_" + s[0])(s)
            except Unsupported as u:
                raise self.unsupported(u, s) from None

    def unsupported(self, u, node) -> CompileError:
        """A target hook's ``Unsupported`` -> a CompileError at ``node``'s line, naming the target."""
        target = self.mod.target
        kind = getattr(target, "kind", getattr(target, "name", "cpu"))
        arch = getattr(target, "arch", None)
        where = f"{kind}:{arch}" if arch else kind
        return self.tf.lowered.source.error(f"{u} is not supported on {where}", node[1])

    def _s_assign(self, s):
        value = self.expr(s[3])
        vt = self.types[id(s[3])]
        for target in s[2]:
            self.assign(target, value, vt)

    def assign(self, target, value, vt):
        kind = target[0]
        if kind == "name":
            lt = self.tf.locals[target[2]]
            self.store_slot(self.slots[target[2]], self.cast(value, vt, lt), lt)
        elif kind == "index":
            et = self.types[id(target)]
            ptr = self.element_ptr(target[2], target[3], target)
            self.store_element(ptr, self.cast(value, vt, et), et)
        else:
            for t, v, x in zip(target[2], value, vt.items):
                self.assign(t, v, x)

    def _s_augassign(self, s):
        op, target, rhs = s[2], s[3], s[4]
        rt = self.types[id(rhs)]
        if target[0] == "name":
            cur_t = self.tf.locals[target[2]]
            cur = self.b.load(self.slots[target[2]])
            value = self.expr(rhs)
            res, res_t = self.arith(op, cur, cur_t, value, rt)
            self.b.store(self.cast(res, res_t, cur_t), self.slots[target[2]])
        else:
            et = self.types[id(target)]
            ptr = self.element_ptr(target[2], target[3], target)
            cur = self.load_element(ptr, et)
            value = self.expr(rhs)
            res, res_t = self.arith(op, cur, et, value, rt)
            self.store_element(ptr, self.cast(res, res_t, et), et)

    def _s_if(self, s):
        cond = self.truth(s[2])
        then, other, done = self.new_block("then"), self.new_block("else"), self.new_block("endif")
        self.b.cbranch(cond, then, other)
        for blk, body in ((then, s[3]), (other, s[4])):
            self.b.position_at_end(blk)
            self.block(body)
            if not self.b.block.is_terminated:
                self.b.branch(done)
        self.b.position_at_end(done)

    def _s_while(self, s):
        head, body, done = self.new_block("while"), self.new_block("loop"), self.new_block("endwhile")
        self.b.branch(head)
        self.b.position_at_end(head)
        self.b.cbranch(self.truth(s[2]), body, done)
        self.b.position_at_end(body)
        self.loops.append((head, done))
        self.block(s[3])
        self.loops.pop()
        if not self.b.block.is_terminated:
            self.b.branch(head)
        self.b.position_at_end(done)

    def _s_for(self, s):
        vt = self.tf.locals[s[2]]
        start, stop, step = (self.cast(self.expr(x), self.types[id(x)], vt) for x in s[3:6])
        counter = self.alloca(lltype(vt))
        self.b.store(start, counter)
        head, body, inc, done = (self.new_block(n) for n in ("for", "body", "next", "endfor"))
        self.b.branch(head)
        self.b.position_at_end(head)
        i = self.b.load(counter)
        signed = vt.kind == "i"
        up = self.b.icmp_signed("<", i, stop) if signed else self.b.icmp_unsigned("<", i, stop)
        # A step of 0 (known at run time only: a literal 0 is refused) runs no iteration, where
        # Python raises ValueError: never a loop without end.
        zero = ir.Constant(step.type, 0)
        if signed:
            down = self.b.icmp_signed(">", i, stop)
            positive = self.b.icmp_signed(">", step, zero)
            go = self.b.select(positive, up, self.b.and_(self.b.icmp_signed("<", step, zero), down))
        else:
            go = self.b.and_(up, self.b.icmp_unsigned("!=", step, zero))
        self.b.cbranch(go, body, done)
        self.b.position_at_end(body)
        self.b.store(i, self.slots[s[2]])
        self.loops.append((inc, done))
        self.block(s[6])
        self.loops.pop()
        if not self.b.block.is_terminated:
            self.b.branch(inc)
        self.b.position_at_end(inc)
        # An increment that overflows the counter's type ends the loop (it has passed stop).
        if self.mod.overflow_intrinsics:
            name = f"llvm.{'s' if signed else 'u'}add.with.overflow.i{step.type.width}"
            fn = self.mod.module.globals.get(name) or ir.Function(
                self.mod.module, ir.FunctionType(ir.LiteralStructType([step.type, I1]),
                                                 [step.type, step.type]), name)
            res = self.b.call(fn, [self.b.load(counter), step])
            nxt, overflow = self.b.extract_value(res, 0), self.b.extract_value(res, 1)
        else:                               # the same test in plain arithmetic (SPIR-V)
            cur = self.b.load(counter)
            nxt = self.b.add(cur, step)
            if signed:                      # the sum's sign differs from both operands'
                both = self.b.and_(self.b.xor(cur, nxt), self.b.xor(step, nxt))
                overflow = self.b.icmp_signed("<", both, ir.Constant(step.type, 0))
            else:
                overflow = self.b.icmp_unsigned("<", nxt, cur)
        self.b.store(nxt, counter)
        self.b.cbranch(overflow, done, head)
        self.b.position_at_end(done)

    def _s_break(self, s):
        self.b.branch(self.loops[-1][1])

    def _s_continue(self, s):
        self.b.branch(self.loops[-1][0])

    def _s_return(self, s):
        if s[2] is None or self.tf.is_kernel:
            self.emit_default_return()
            return
        v = self.expr(s[2])
        self.emit_return(self.cast(v, self.types[id(s[2])], self.tf.ret))

    def _s_expr(self, s):
        self.expr(s[2])

    # -- expressions --------------------------------------------------------

    def expr(self, e):
        try:
            if self.mod.no_float64 and self.types.get(id(e)) == T.float64:
                raise Unsupported("float64 (this device has no double precision)")
            return getattr(self, "_e_" + e[0])(e)
        except Unsupported as u:
            raise self.unsupported(u, e) from None

    def _e_const(self, e):
        t = self.types[id(e)].strong()
        return ir.Constant(lltype(t), e[2])

    def _e_name(self, e):
        return self.load_slot(self.slots[e[2]], self.tf.locals[e[2]])

    def _e_gconst(self, e):
        t = self.types[id(e)]
        value = self.mod.tk.lowered.constants[e[2]].value
        if isinstance(t, T.Array):
            ty = self.mod.lltype(t)
            ptr = self.b.bitcast(self.mod.constant_array(e[2]), ty.elements[0])
            return self.b.insert_value(ir.Constant(ty, None), ptr, 0)
        return ir.Constant(lltype(t), value.item() if hasattr(value, "item") else value)

    def _e_tuple(self, e):
        return [self.expr(x) for x in e[2]]

    def _e_shape(self, e):
        arr = self.types[id(e[2])]
        return self.geometry(self.expr(e[2]), arr)[1]

    def _e_tget(self, e):
        return self.expr(e[2])[e[3]]

    def _e_binop(self, e):
        a, b = self.expr(e[3]), self.expr(e[4])
        return self.arith(e[2], a, self.types[id(e[3])], b, self.types[id(e[4])])[0]

    def _e_unop(self, e):
        op = e[2]
        t = self.types[id(e[3])]
        v = self.expr(e[3])
        if op == "not":
            return self.b.not_(self.to_bool(v, t))
        rt = self.types[id(e)]
        v = self.cast(v, t, rt)
        if op == "pos":
            return v
        if op == "~":
            return self.b.not_(v)
        return self.b.fneg(v) if rt.kind == "f" else self.b.neg(v)

    def _e_cmp(self, e):
        ops, operands = e[2], e[3]
        values = [self.expr(x) for x in operands]
        ts = [self.types[id(x)] for x in operands]
        result = None
        for op, a, ta, b, tb in zip(ops, values, ts, values[1:], ts[1:]):
            c = self.compare(op, a, ta, b, tb)
            result = c if result is None else self.b.and_(result, c)
        return result

    def compare(self, op, a, ta, b, tb):
        if {ta.strong().kind, tb.strong().kind} == {"i", "u"} and T.promote(ta, tb).kind == "f":
            return self.compare_mixed(op, a, ta, b, tb)
        t = T.promote(ta, tb).strong()
        a, b = self.cast(a, ta, t), self.cast(b, tb, t)
        if t.kind == "f":
            return self.b.fcmp_unordered(op, a, b) if op == "!=" else self.b.fcmp_ordered(op, a, b)
        if t.kind == "i":
            return self.b.icmp_signed(op, a, b)
        return self.b.icmp_unsigned(op, a, b)

    def compare_mixed(self, op, a, ta, b, tb):
        """Signed against unsigned 64-bit integers, exactly (NumPy would go through float64)."""
        B = self.b
        # Each widened to 64 bits of its own kind (int32 against uint64 reaches here too)
        wide = {"i": T.int64, "u": T.uint64}
        a, b = self.cast(a, ta, wide[ta.strong().kind]), self.cast(b, tb, wide[tb.strong().kind])
        if ta.strong().kind == "u":             # make ``a`` the signed one
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}[op]
            a, b = b, a
        neg = B.icmp_signed("<", a, ir.Constant(a.type, 0))
        as_unsigned = B.icmp_unsigned(op, a, b)
        below = ir.Constant(I1, op in ("<", "<=", "!="))   # a negative a is below any unsigned b
        return B.select(neg, below, as_unsigned)

    def _e_boolop(self, e):
        is_and = e[2] == "and"
        if strong_of(self.types[id(e)]).kind != "b":
            return self.boolop_value(e, is_and)
        done = self.new_block("boolop.end")
        incoming = []
        for x in e[3][:-1]:
            v = self.truth(x)
            nxt = self.new_block("boolop.next")
            incoming.append((ir.Constant(I1, 0 if is_and else 1), self.b.block))
            if is_and:
                self.b.cbranch(v, nxt, done)
            else:
                self.b.cbranch(v, done, nxt)
            self.b.position_at_end(nxt)
        last = self.truth(e[3][-1])
        incoming.append((last, self.b.block))
        self.b.branch(done)
        self.b.position_at_end(done)
        phi = self.b.phi(I1)
        for v, blk in incoming:
            phi.add_incoming(v, blk)
        return phi

    def boolop_value(self, e, is_and):
        """``a or b`` of numbers: the first operand that is true (``and``: false), else the last,
        in the operands' common type; the operands after it are not evaluated."""
        st = strong_of(self.types[id(e)])
        done = self.new_block("boolop.end")
        incoming = []
        for k, x in enumerate(e[3]):
            t = self.types[id(x)]
            v = self.expr(x)
            value = self.pack(self.cast(v, t, st), st)
            incoming.append((value, self.b.block))
            if k == len(e[3]) - 1:
                self.b.branch(done)
                break
            nxt = self.new_block("boolop.next")
            truth = self.to_bool(v, strong_of(t))
            self.b.cbranch(truth, nxt if is_and else done, done if is_and else nxt)
            self.b.position_at_end(nxt)
        return self.joined(done, incoming, st)

    def joined(self, done, incoming, st):
        """The value of type ``st`` that reaches block ``done`` from each (value, block) of
        ``incoming`` (packed values): a phi there, unpacked."""
        self.b.position_at_end(done)
        phi = self.b.phi(self.mod.lltype(st))
        for v, blk in incoming:
            phi.add_incoming(v, blk)
        return self.unpack(phi, st)

    def _e_ifexp(self, e):
        rt = self.types[id(e)]
        st = strong_of(rt)
        cond = self.truth(e[2])
        then, other, done = self.new_block("ifexp.then"), self.new_block("ifexp.else"), self.new_block("ifexp.end")
        self.b.cbranch(cond, then, other)
        out = []
        for blk, x in ((then, e[3]), (other, e[4])):
            self.b.position_at_end(blk)
            v = self.pack(self.cast(self.expr(x), self.types[id(x)], st), st)
            out.append((v, self.b.block))
            self.b.branch(done)
        return self.joined(done, out, st)

    def _e_call(self, e):
        callee = self.tf.callees[id(e)]
        args = []
        for x, pt in zip(callee.call_args(e[3]), callee.argtypes):
            args.append(self.pack(self.cast(self.expr(x), self.types[id(x)], pt), pt))
        if self.err is not None:
            args.append(self.err)
        result = self.b.call(self.mod.functions[id(callee)], args)
        if callee.ret is None:
            return []
        return self.unpack(result, callee.ret)

    def _e_index(self, e):
        bt = self.types[id(e[2])]
        if isinstance(bt, T.Tuple):
            return self.expr(e[2])[e[3][0][2]]
        et = self.types[id(e)]
        return self.load_element(self.element_ptr(e[2], e[3], e), et)

    def _e_intrinsic(self, e):
        name, args = e[2], e[3]
        rt = self.types[id(e)]
        if name == "tid":
            return self.tids[0] if len(self.tids) == 1 else list(self.tids)
        if name in ("ndim", "size"):
            arr = self.types[id(args[0])]
            if name == "ndim":
                return ir.Constant(I64, arr.ndim)
            if arr.shape is not None:
                return ir.Constant(I64, _prod(arr.shape))
            n = ir.Constant(I64, 1)
            for x in self.geometry(self.expr(args[0]), arr)[1]:
                n = self.b.mul(n, x)
            return n
        if name.startswith("atomic_"):
            return self.atomic(name[7:], args, e, rt)
        values = [self.expr(a) for a in args]
        ts = [self.types[id(a)] for a in args]
        if name.startswith("cast:"):
            return self.cast(values[0], ts[0], rt)
        if name in ("min", "max"):
            acc = self.cast(values[0], ts[0], rt.strong())
            for v, t in zip(values[1:], ts[1:]):
                v = self.cast(v, t, rt.strong())
                better = self.compare("<" if name == "min" else ">", v, rt.strong(), acc, rt.strong())
                acc = self.b.select(better, v, acc)
            return acc
        if name in ("minimum", "maximum"):
            # NumPy's rule: ``a < b ? a : b`` (so ``b`` on a tie, -0.0 against 0.0 too), and a NaN
            # if either is one (Python's ``min``/``max`` above keep the first on a tie and skip a
            # later NaN)
            st = rt.strong()
            a, b = (self.cast(v, t, st) for v, t in zip(values, ts))
            r = self.b.select(self.compare("<" if name == "minimum" else ">", a, st, b, st), a, b)
            if st.kind == "f":
                r = self.b.select(self.b.fcmp_unordered("uno", a, b), self.b.fadd(a, b), r)
            return r
        if name == "abs":
            v = self.cast(values[0], ts[0], rt.strong())
            if rt.kind == "f":
                return self.call_intrinsic("fabs", [v])
            if rt.kind == "u":
                return v
            neg = self.b.icmp_signed("<", v, ir.Constant(v.type, 0))
            return self.b.select(neg, self.b.neg(v), v)
        if name in ("isnan", "isinf", "isfinite"):
            t = ts[0].strong()
            if t.kind != "f":
                return ir.Constant(I1, name == "isfinite")
            v = values[0]
            if name == "isnan":
                return self.b.fcmp_unordered("uno", v, v)
            mag = self.call_intrinsic("fabs", [v])
            inf = ir.Constant(v.type, float("inf"))
            return self.b.fcmp_ordered("oeq" if name == "isinf" else "olt", mag, inf)
        if name == "np.fmod":
            if rt.kind == "f":
                name = "fmod"
            else:                               # truncated, as C's %; by 0 (or -1) it is 0
                a, b = (self.cast(v, t, rt) for v, t in zip(values, ts))
                safe, _, _ = self.safe_divisor(b, rt)
                return self.b.srem(a, safe) if rt.kind == "i" else self.b.urem(a, safe)
        if name in MATH1 or name in MATH2:
            ft = rt.strong()
            vals = [self.cast(v, t, ft) for v, t in zip(values, ts)]
            return self.mod.target.math_call(self.mod.module, self.b, name, vals, ft)
        if name == "isclose":
            return self.isclose(values, ts)
        if name == "np.isclose":
            return self.np_isclose(values, ts)
        if name in ("np.rint", "np.round", "round"):
            return self.rounded(name, values[0], ts[0], rt, args[1][2] if len(args) == 2 else 0)
        st = rt.strong()
        if name == "np.where":              # both sides evaluated (above), one selected
            a, b = (self.cast(v, t, st) for v, t in zip(values[1:], ts[1:]))
            return self.b.select(self.to_bool(values[0], ts[0]), a, b)
        if name == "np.clip":
            vals = [self.cast(v, t, st) for v, t in zip(values, ts)]
            for k, side in ((1, "lo"), (2, "hi")) if len(args) == 3 else ():
                if clip_bound_dropped(args[k], ts[0], side):     # never binds: x's own limit
                    limit = clip_limit(st, side)         # (as its bits: 2**64 - 1 is -1)
                    bits = vals[0].type.width
                    vals[k] = ir.Constant(vals[0].type, limit - (1 << bits) if limit >> (bits - 1)
                                          else limit)
            return self.clip(vals, st)
        if name == "np.sign":
            return self.sign(self.cast(values[0], ts[0], st), st)
        raise AssertionError(f"unhandled intrinsic {name}")

    def clip(self, vals, t):
        """NumPy's ``np.clip(x, lo, hi)`` in type ``t``: ``x < lo ? lo : x``, then ``> hi ? hi``
        (so ``x`` on a tie: ``np.clip(-0.0, 0.0, 1.0)`` is -0.0); of floats a NaN bound is the
        result, ``lo``'s before ``hi``'s, and a NaN ``x`` passes through the comparisons."""
        if len(vals) == 1:                  # no bound: x itself
            return vals[0]
        x, lo, hi = vals
        B = self.b
        m = B.select(self.compare("<", x, t, lo, t), lo, x)
        m = B.select(self.compare(">", m, t, hi, t), hi, m)
        if t.kind == "f":
            m = B.select(B.fcmp_unordered("uno", hi, hi), hi, m)
            m = B.select(B.fcmp_unordered("uno", lo, lo), lo, m)
        return m

    def sign(self, v, t):
        """NumPy's ``np.sign``: 1, -1 or 0 in ``v``'s type; of a float, +0.0 for either zero
        and ``v`` itself for a NaN (``x > 0 ? 1 : x < 0 ? -1 : x == 0 ? 0 : x``)."""
        B = self.b
        one, zero = ir.Constant(v.type, 1), ir.Constant(v.type, 0)
        if t.kind == "u":
            return B.select(B.icmp_unsigned("!=", v, zero), one, zero)
        minus = ir.Constant(v.type, -1)
        if t.kind == "i":
            return B.select(B.icmp_signed(">", v, zero), one,
                            B.select(B.icmp_signed("<", v, zero), minus, zero))
        rest = B.select(B.fcmp_ordered("==", v, zero), zero, v)
        return B.select(B.fcmp_ordered(">", v, zero), one,
                        B.select(B.fcmp_ordered("<", v, zero), minus, rest))

    def rounded(self, name, v, t, rt, decimals):
        """``np.rint(x)``, ``np.round(x, decimals)`` and Python's ``round(x)``, half to even
        (``llvm.rint``, every target's own instruction).  ``np.round`` of a nonzero literal
        ``decimals`` is NumPy's: ``x * 10**d``, rounded, divided by ``10**d`` (for a negative
        ``d``: divided, rounded, multiplied), ``10**d`` as NumPy computes it, in ``x``'s float
        type (float64 for an integer, converted back); of an integer, and ``d >= 0``, ``x``
        itself.  ``round(x)`` of a float is that float converted to an int64 as ``int(x)``
        converts (saturated, NaN 0), where Python raises."""
        st = rt.strong()
        if t.strong().kind in "iu" and decimals >= 0:     # an integer rounds to itself
            return self.cast(v, t, st)
        ft = st if st.kind == "f" else math_type(t.strong())
        B, x = self.b, self.cast(v, t, ft)
        if decimals == 0:
            return self.cast(self.call_intrinsic("rint", [x]), ft, st)
        f = power_of_ten(abs(decimals))
        if ft == T.float32:
            with np.errstate(over="ignore"):          # past float32: its infinity, as NumPy's
                f = float(np.float32(f))
        f = ir.Constant(x.type, f)
        scaled = B.fmul(x, f) if decimals > 0 else B.fdiv(x, f)
        r = self.call_intrinsic("rint", [scaled])
        return self.cast(B.fdiv(r, f) if decimals > 0 else B.fmul(r, f), ft, st)

    def isclose(self, values, ts):
        """Python's ``math.isclose(a, b, rel_tol, abs_tol)``: ``a == b``, else false for an
        infinity, else ``|b - a| <= |rel_tol * b|`` or ``<= |rel_tol * a|`` or ``<= abs_tol``
        (false for a NaN), in ``isclose_type`` of the four."""
        ft = isclose_type(ts)
        B = self.b
        a, b, rel, tol = (self.cast(v, t, ft) for v, t in zip(values, ts))
        inf = ir.Constant(a.type, float("inf"))
        infinite = B.or_(B.fcmp_ordered("==", self.call_intrinsic("fabs", [a]), inf),
                         B.fcmp_ordered("==", self.call_intrinsic("fabs", [b]), inf))
        diff = self.call_intrinsic("fabs", [B.fsub(b, a)])
        within = [self.call_intrinsic("fabs", [B.fmul(rel, b)]),
                  self.call_intrinsic("fabs", [B.fmul(rel, a)]), tol]
        close = B.or_(B.or_(B.fcmp_ordered("<=", diff, within[0]),
                            B.fcmp_ordered("<=", diff, within[1])),
                      B.fcmp_ordered("<=", diff, within[2]))
        return B.or_(B.fcmp_ordered("==", a, b), B.and_(B.not_(infinite), close))

    def np_isclose(self, values, ts):
        """NumPy's ``np.isclose(a, b, rtol, atol, equal_nan)`` of scalars: ``|a - b| <= atol +
        rtol * |b|`` where ``b`` is finite, or ``a == b`` (equal infinities), or, with
        ``equal_nan``, both NaN; each step in its type, ``np_isclose_types``."""
        dt, pt, rt, ct, bt = np_isclose_types(ts)
        B = self.b
        fabs = lambda v: self.call_intrinsic("fabs", [v])           # noqa: E731
        a, b = (self.cast(v, t, dt) for v, t in zip(values[:2], ts[:2]))
        product = B.fmul(self.cast(values[2], ts[2], pt), fabs(self.cast(values[1], ts[1], pt)))
        threshold = B.fadd(self.cast(values[3], ts[3], rt), self.cast(product, pt, rt))
        within = B.fcmp_ordered("<=", self.cast(fabs(B.fsub(a, b)), dt, ct),
                                self.cast(threshold, rt, ct))
        b_own = self.cast(values[1], ts[1], bt)
        finite = B.fcmp_ordered("<", fabs(b_own), ir.Constant(b_own.type, float("inf")))
        close = B.or_(B.and_(within, finite), B.fcmp_ordered("==", a, b))
        both_nan = B.and_(B.fcmp_unordered("uno", a, a), B.fcmp_unordered("uno", b, b))
        return B.or_(close, B.and_(self.to_bool(values[4], ts[4]), both_nan))

    def atomic(self, op, args, e, rt):
        arr_t = self.types[id(args[0])]
        idx_node = args[1]
        idx_t = self.types[id(idx_node)]
        idx_nodes = idx_node[2] if (idx_node[0] == "tuple") else None
        ptr = self.element_ptr(args[0], idx_nodes if idx_nodes is not None else [idx_node], e,
                               pre_typed=None if idx_nodes is not None or not isinstance(idx_t, T.Tuple) else idx_t)
        et = arr_t.dtype
        v = self.cast(self.expr(args[2]), self.types[id(args[2])], et)
        kind = et.kind
        llop = {"add": {"f": "fadd"}, "min": {"f": "fmin", "i": "min", "u": "umin"},
                "max": {"f": "fmax", "i": "max", "u": "umax"}}[op].get(kind, "add" if op == "add" else None)
        return self.mod.target.atomic_rmw(self.b, llop, ptr, v)

    # -- arrays -------------------------------------------------------------

    def element_ptr(self, arr_node, idx_nodes, node, pre_typed=None):
        """Pointer to ``arr[idx...]``: negative indices wrap, debug mode checks bounds."""
        at = self.types[id(arr_node)]
        known = self.param_geometry.get(arr_node[2]) if arr_node[0] == "name" else None
        base, extents, strides = known or self.geometry(self.expr(arr_node), at)
        if len(idx_nodes) == 1 and isinstance(self.types[id(idx_nodes[0])], T.Tuple):
            tup_t = self.types[id(idx_nodes[0])]
            pairs = list(zip(self.expr(idx_nodes[0]), tup_t.items))
        else:
            pairs = [(self.expr(x), self.types[id(x)]) for x in idx_nodes]
        offset = ir.Constant(I64, 0)
        for axis, ((v, t), n, stride) in enumerate(zip(pairs, extents, strides)):
            raw = i = self.cast(v, t, T.int64 if t.kind == "i" else T.uint64)
            if t.kind == "i":
                neg = self.b.icmp_signed("<", i, ir.Constant(I64, 0))
                i = self.b.select(neg, self.b.add(i, n), i)
            if self.err is not None:
                self.bounds_check(i, raw, n, axis | (UNSIGNED_INDEX if t.kind == "u" else 0),
                                  arr_node, node)
            offset = self.b.add(offset, self.b.mul(i, stride))
        return self.b.gep(base, [offset], inbounds=True)

    def geometry(self, value, t: T.Array):
        """(data pointer, extents, strides in elements) of an array value: LLVM i64 values,
        constants where the shape is static, strides computed from the extents for C and F."""
        b = self.b
        ptr = b.extract_value(value, 0)
        k = 1
        if t.shape is not None:
            extents = [ir.Constant(I64, n) for n in t.shape]
        else:
            extents = [b.extract_value(value, k + a) for a in range(t.ndim)]
            k += t.ndim
        if t.layout == "A":
            return ptr, extents, [b.extract_value(value, k + a) for a in range(t.ndim)]
        order = range(t.ndim - 1, -1, -1) if t.layout == "C" else range(t.ndim)
        strides = [None] * t.ndim
        if t.shape is not None:             # all constants
            acc = 1
            for a in order:
                strides[a] = ir.Constant(I64, acc)
                acc *= t.shape[a]
            return ptr, extents, strides
        acc = None
        for a in order:
            strides[a] = ir.Constant(I64, 1) if acc is None else acc
            acc = extents[a] if acc is None else b.mul(acc, extents[a])
        return ptr, extents, strides

    def bounds_check(self, i, raw, n, axis, arr_node, node):
        """Branch out unless 0 <= i < n; record the first failure (with the index as written, and
        ``axis`` with ``UNSIGNED_INDEX`` set for an unsigned one)."""
        ok = self.b.icmp_unsigned("<", i, n)
        bad, good = self.new_block("oob"), self.new_block("inbounds")
        self.b.cbranch(ok, good, bad)
        self.b.position_at_end(bad)
        src = self.tf.lowered.source
        name = arr_node[2] if arr_node[0] in ("name", "gconst") else "array"
        if arr_node[0] == "gconst":
            name = self.mod.tk.lowered.constant_name(arr_node[2], self.tf.lowered.fid)
        site = len(self.mod.sites)
        line = node[1][0]
        self.mod.sites.append(BoundsSite(self.tf.lowered.name, name, src.filename, line,
                                         self.tf.lowered.fid, line - src.first_line))
        old = self.b.cmpxchg(self.err, ir.Constant(I64, 0), ir.Constant(I64, site + 1),
                             "seq_cst", "seq_cst")
        first = self.b.extract_value(old, 1)
        record, skip = self.new_block("oob.record"), self.new_block("oob.return")
        self.b.cbranch(first, record, skip)
        self.b.position_at_end(record)
        for k, v in ((1, ir.Constant(I64, axis)), (2, raw), (3, n)):
            self.b.store(v, self.b.gep(self.err, [ir.Constant(I64, k)]))
        self.b.branch(skip)
        self.b.position_at_end(skip)
        self.emit_default_return()
        self.b.position_at_end(good)

    def load_element(self, ptr, et):
        v = self.b.load(ptr)
        # a bool byte is True when it is not 0, as NumPy reads it (a uint8 mask viewed as bool
        # holds 2 or 255): not its lowest bit
        return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if et.kind == "b" else v

    def store_element(self, ptr, v, et):
        self.b.store(self.b.zext(v, I8) if et.kind == "b" else v, ptr)

    # -- arithmetic ---------------------------------------------------------

    def truth(self, e):
        return self.to_bool(self.expr(e), self.types[id(e)])

    def to_bool(self, v, t):
        if t.kind == "b":
            return v
        if t.kind == "f":
            return self.b.fcmp_unordered("une", v, ir.Constant(v.type, 0.0))
        return self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))

    def cast(self, v, src, dst):
        """Convert generator value ``v`` from Tack type ``src`` to ``dst``."""
        if isinstance(dst, T.Tuple):
            return [self.cast(x, s, d) for x, s, d in zip(v, src.items, dst.items)]
        if not isinstance(dst, T.Scalar):
            return v
        src, dst = src.strong(), dst.strong()
        if src == dst:
            return v
        if dst.name == "float64" and self.mod.no_float64:
            raise Unsupported("float64 (this device has no double precision)")
        b = self.b
        if dst.kind == "b":
            return self.to_bool(v, src)
        if src.kind == "b":
            return b.uitofp(v, lltype(dst)) if dst.kind == "f" else b.zext(v, lltype(dst))
        if src.kind == "f" and dst.kind == "f":
            return b.fpext(v, F64) if dst.bits > src.bits else b.fptrunc(v, F32)
        if src.kind == "f":
            sat = "fptosi.sat" if dst.kind == "i" else "fptoui.sat"
            fn = declare_intrinsic(self.mod.module, sat, lltype(dst), [v.type])
            out = b.call(fn, [v])
            if self.mod.sat_nan_select:     # NaN gives 0 whatever the driver's conversion does
                out = b.select(b.fcmp_unordered("uno", v, v), ir.Constant(out.type, 0), out)
            return out
        if dst.kind == "f":
            return b.sitofp(v, lltype(dst)) if src.kind == "i" else b.uitofp(v, lltype(dst))
        if dst.bits > src.bits:
            return b.sext(v, lltype(dst)) if src.kind == "i" else b.zext(v, lltype(dst))
        if dst.bits < src.bits:
            return b.trunc(v, lltype(dst))
        return v

    def call_intrinsic(self, name, args):
        """``llvm.<name>`` on operands of one float type (fabs, floor, pow, copysign)."""
        fn = declare_intrinsic(self.mod.module, name, args[0].type, [a.type for a in args])
        return self.b.call(fn, args)

    def arith(self, op, a, ta, b, tb):
        """``a op b`` with Python's semantics -> (value, Tack type)."""
        opt, rt = arith_type(op, ta, tb)
        ot = opt.strong()
        a, b = self.cast(a, ta, ot), self.cast(b, tb, ot)
        B = self.b
        if op in ("<<", ">>"):
            return self.shift(op, a, b, ot), rt
        if ot.kind == "f":
            if op == "+":
                return B.fadd(a, b), rt
            if op == "-":
                return B.fsub(a, b), rt
            if op == "*":
                return B.fmul(a, b), rt
            if op == "/":
                return B.fdiv(a, b), rt
            if op == "**":
                return B.call(self.fpow(ot), [a, b]), rt
            if op == "//":
                return self.floordiv_float(a, b), rt
            if op == "%":
                r = B.frem(a, b)
                zero = ir.Constant(r.type, 0.0)
                fix = B.and_(B.fcmp_ordered("!=", r, zero),
                             B.xor(B.fcmp_ordered("<", r, zero), B.fcmp_ordered("<", b, zero)))
                r = B.select(fix, B.fadd(r, b), r)
                # a zero remainder takes the divisor's sign, as in Python (-0.0 % 2.0 == 0.0)
                signed_zero = self.call_intrinsic("copysign", [zero, b])
                return B.select(B.fcmp_ordered("==", r, zero), signed_zero, r), rt
        simple = {"+": B.add, "-": B.sub, "*": B.mul, "&": B.and_, "|": B.or_, "^": B.xor}
        if op in simple:
            return simple[op](a, b), rt
        if op in ("//", "%"):
            q, r = self.divmod_int(a, b, ot)
            return (q if op == "//" else r), rt
        if op == "**":
            return B.call(self.ipow(ot), [a, b]), rt
        raise AssertionError(op)

    def shift(self, op, a, b, t):
        B = self.b
        width = ir.Constant(a.type, t.bits)
        big = B.icmp_unsigned(">=", b, width)
        if op == "<<":
            return B.select(big, ir.Constant(a.type, 0), B.shl(a, b))
        if t.kind == "i":
            return B.ashr(a, B.select(big, ir.Constant(a.type, t.bits - 1), b))
        return B.select(big, ir.Constant(a.type, 0), B.lshr(a, b))

    def safe_divisor(self, b, t):
        """``b`` with 0, and for a signed ``t`` -1, made 1, the divisors an integer division
        traps on (-1: INT_MIN / -1) -> (safe, is_zero, is_minus_one or None)."""
        B = self.b
        is_zero = B.icmp_unsigned("==", b, ir.Constant(b.type, 0))
        if t.kind == "u":
            return B.select(is_zero, ir.Constant(b.type, 1), b), is_zero, None
        is_m1 = B.icmp_signed("==", b, ir.Constant(b.type, -1))
        return B.select(B.or_(is_zero, is_m1), ir.Constant(b.type, 1), b), is_zero, is_m1

    def floordiv_float(self, a, b):
        """Python's float floor division, as NumPy's ``floor_divide`` computes it (npy_divmod):
        the floor of ``(a - fmod(a, b)) / b``, a quotient the remainder ``%`` agrees with
        (``a == (a // b) * b + a % b`` up to rounding), so ``1.0 // 0.1`` is 9.0, as ``1.0 %
        0.1`` is 0.0999..., where ``floor(1.0 / 0.1)`` is 10.0; ``inf // 2`` is nan and ``3.0
        // -inf`` is -1.0, as in Python.  Dividing by zero gives ``a / b`` (an infinity, or nan
        for 0.0 // 0.0), as NumPy's does (Python raises)."""
        B = self.b
        zero, one, half = (ir.Constant(a.type, v) for v in (0.0, 1.0, 0.5))
        mod = B.frem(a, b)
        div = B.fdiv(B.fsub(a, mod), b)
        fix = B.and_(B.fcmp_ordered("!=", mod, zero),
                     B.xor(B.fcmp_ordered("<", mod, zero), B.fcmp_ordered("<", b, zero)))
        div = B.select(fix, B.fsub(div, one), div)
        floor = self.call_intrinsic("floor", [div])
        floor = B.select(B.fcmp_ordered(">", B.fsub(div, floor), half), B.fadd(floor, one), floor)
        # a zero quotient takes the sign of a / b (NaN too goes to floor: unordered is "not 0")
        q = B.select(B.fcmp_unordered("!=", div, zero), floor,
                     self.call_intrinsic("copysign", [zero, B.fdiv(a, b)]))
        return B.select(B.fcmp_ordered("==", b, zero), B.fdiv(a, b), q)

    def divmod_int(self, a, b, t):
        """Python's floor division and modulo; dividing by zero gives 0 (no trap)."""
        B = self.b
        zero, one = ir.Constant(a.type, 0), ir.Constant(a.type, 1)
        safe, is_zero, is_m1 = self.safe_divisor(b, t)
        if t.kind == "u":
            return (B.select(is_zero, zero, B.udiv(a, safe)),
                    B.select(is_zero, zero, B.urem(a, safe)))
        q, r = B.sdiv(a, safe), B.srem(a, safe)
        fix = B.and_(B.icmp_signed("!=", r, zero),
                     B.xor(B.icmp_signed("<", r, zero), B.icmp_signed("<", b, zero)))
        q = B.select(fix, B.sub(q, one), q)
        r = B.select(fix, B.add(r, b), r)
        q = B.select(is_m1, B.neg(a), q)
        r = B.select(is_m1, zero, r)
        return B.select(is_zero, zero, q), B.select(is_zero, zero, r)

    def fpow(self, t):
        """``x ** y`` of floats on every target: the two rewrites of ``pow`` that are exact, made
        here, where a constant exponent folds them once the helper is inlined: ``y == 2`` is
        ``x * x``, and ``y == 0.5`` is ``fabs(sqrt(x))``, with ``pow(-inf, 0.5) == inf``; any
        other ``y`` the target's ``pow``.  (They were made in the CPU's ``pow`` alone: on
        OpenCL, ``0.1 ** 2`` was the device's ``pow``, 0.01, where Python gives
        0.010000000000000002.)"""
        target = self.mod.target

        def build(module, name):
            ty = lltype(t)
            fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), name)
            fn.linkage = "internal"
            fn.attributes.add("alwaysinline")
            x, y = fn.args
            entry, square, not_square, half, other = (
                fn.append_basic_block(n) for n in ("entry", "square", "not_square", "half", "other"))
            b = ir.IRBuilder(entry)
            b.cbranch(b.fcmp_ordered("==", y, ir.Constant(ty, 2.0)), square, not_square)
            b.position_at_end(square)
            b.ret(b.fmul(x, x))
            b.position_at_end(not_square)
            b.cbranch(b.fcmp_ordered("==", y, ir.Constant(ty, 0.5)), half, other)
            b.position_at_end(half)
            root = target.math_call(module, b, "sqrt", [x], t)
            r = b.call(declare_intrinsic(module, "fabs", ty, [ty]), [root])
            b.ret(b.select(b.fcmp_ordered("==", x, ir.Constant(ty, float("-inf"))),
                           ir.Constant(ty, float("inf")), r))
            b.position_at_end(other)
            b.ret(target.math_call(module, b, "pow", [x, y], t))
            return fn
        return self.mod.helper(f"fpow_{t.name}", build)

    def ipow(self, t):
        def build(module, name):
            ty = lltype(t)
            fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), name)
            fn.linkage = "internal"
            base, exp = fn.args
            entry, head, body, done = (fn.append_basic_block(n) for n in ("entry", "head", "body", "done"))
            b = ir.IRBuilder(entry)
            neg = b.icmp_signed("<", exp, ir.Constant(ty, 0)) if t.kind == "i" else ir.Constant(I1, 0)
            b.cbranch(neg, done, head)
            b.position_at_end(head)
            acc = b.phi(ty)
            bb = b.phi(ty)
            ee = b.phi(ty)
            acc.add_incoming(ir.Constant(ty, 1), entry)
            bb.add_incoming(base, entry)
            ee.add_incoming(exp, entry)
            b.cbranch(b.icmp_unsigned("!=", ee, ir.Constant(ty, 0)), body, done)
            b.position_at_end(body)
            odd = b.trunc(ee, I1)
            acc2 = b.select(odd, b.mul(acc, bb), acc)
            acc.add_incoming(acc2, body)
            bb.add_incoming(b.mul(bb, bb), body)
            ee.add_incoming(b.lshr(ee, ir.Constant(ty, 1)), body)
            b.branch(head)
            b.position_at_end(done)
            res = b.phi(ty)
            res.add_incoming(ir.Constant(ty, 0), entry)
            res.add_incoming(acc, head)
            b.ret(res)
            return fn
        return self.mod.helper(f"ipow_{t.name}", build)


def strong_of(t):
    if isinstance(t, T.Scalar):
        return t.strong()
    if isinstance(t, T.Tuple):
        return T.Tuple(tuple(strong_of(x) for x in t.items))
    return t


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


__all__ = ["generate", "Generated", "lltype", "storage_type", "math_type", "MATH1", "MATH2"]
