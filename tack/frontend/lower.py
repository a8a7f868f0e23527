"""The front end: a kernel's Python source -> a lowered kernel (``tack.ir``).

One ``_FunctionLowerer`` per function walks its AST, dispatching on
``'_stmt_' / '_expr_' + node class name``; a node class with no method is
outside the language and raises ``CompileError`` at its line.  Every global
name resolved is recorded, with what it was bound to, in the dependency
record that the cache checks before reusing an entry.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types


from .. import ir
from ..api import (Constant, Func, Kernel, class_fingerprint, func_id, function_fingerprint,
                   intrinsic_of, value_identity)
from ..errors import CompileError, SourceContext
from ..types import Template

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
           ast.LShift: "<<", ast.RShift: ">>"}
_UNOPS = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not", ast.Invert: "~"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_MISSING = object()


class _TemplateAttr(tuple):
    """``(class, attribute, name)``: an attribute of a template parameter (not a user's tuple)."""


def lower_kernel(kernel: Kernel, templates: dict, debug: bool) -> ir.LoweredKernel:
    """Lower ``kernel`` with its template parameters bound to ``templates`` classes."""
    unknown = set(templates) - set(kernel.params)
    if unknown:
        raise TypeError(f"kernel '{kernel.__name__}' has no parameter {sorted(unknown)[0]!r}")
    state = _KernelState(debug)
    try:
        fn = _FunctionLowerer(state, kernel.py_func, kernel.__qualname__, templates, True).run()
    except CompileError as e:
        raise e.with_kernel(kernel.__qualname__) from None
    tmpl = {p: Template(c.__qualname__, class_fingerprint(c)) for p, c in templates.items()}
    return ir.LoweredKernel(fn, state.functions, state.constants, tmpl, state.deps, debug)


class _KernelState:
    """What lowering one kernel collects across its functions."""

    def __init__(self, debug):
        self.debug = debug
        self.functions = {}      # fid -> LoweredFunction
        self.constants = {}      # cid -> ir.Constant
        self.deps = []
        self._seen = set()
        self.stack = []          # fids being lowered, to find recursion

    def dep(self, scope, name, kind, identity):
        entry = (scope, name, kind, identity)
        if entry not in self._seen:
            self._seen.add(entry)
            self.deps.append(list(entry))


def _source_of(fn):
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise CompileError(f"the source of '{fn.__qualname__}' is not available ({e}); "
                           "kernels must be defined in a file") from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip()) if dedented != text else 0
    tree = ast.parse(dedented)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise CompileError(f"'{fn.__qualname__}' is not a plain 'def' function")
    src = SourceContext(fn.__qualname__, inspect.getsourcefile(fn) or fn.__code__.co_filename,
                        first, [ln.rstrip("\n") for ln in lines])
    return node, src, first - 1, indent


class _FunctionLowerer:
    def __init__(self, state, pyfn, fid, templates, is_kernel):
        self.state = state
        self.pyfn = pyfn
        self.fid = fid
        self.templates = templates          # param name -> class
        self.is_kernel = is_kernel
        self.globals = pyfn.__globals__
        self.closure = {}
        if pyfn.__closure__:
            self.closure = {n: c.cell_contents for n, c in
                            zip(pyfn.__code__.co_freevars, pyfn.__closure__)}

    # -- driver -------------------------------------------------------------

    def run(self) -> ir.LoweredFunction:
        node, self.src, self.line_offset, self.indent = _source_of(self.pyfn)
        self._check_signature(node)
        params = [a.arg for a in node.args.args]
        self.locals = set(params) - set(self.templates)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                self.locals.add(sub.id)
            elif isinstance(sub, (ast.Global, ast.Nonlocal)):
                raise self.error("'global' and 'nonlocal' are not supported in Tack code", sub)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        self.state.stack.append(self.fid)
        try:
            lowered = self.block(body)
        finally:
            self.state.stack.pop()
        _check_assigned_before_use(lowered, set(params) - set(self.templates), self.src)
        return ir.LoweredFunction(self.fid, self.pyfn.__name__,
                                  [p for p in params if p not in self.templates], lowered, self.src)

    def _check_signature(self, node):
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise self.error("Tack functions take plain positional parameters only "
                             "(no defaults, *args, **kwargs or keyword-only)", node)

    def loc(self, node):
        return [node.lineno + self.line_offset, node.col_offset + self.indent]

    def error(self, message, node) -> CompileError:
        return self.src.error(message, self.loc(node) if hasattr(node, "lineno") else None)

    # -- statements ---------------------------------------------------------

    def block(self, stmts):
        out = []
        for s in stmts:
            method = getattr(self, "_stmt_" + type(s).__name__, None)
            if method is None:
                raise self.error(f"'{type(s).__name__}' statements are not supported in Tack code", s)
            lowered = method(s)
            if lowered is not None:
                out.append(lowered)
        return out

    def _stmt_Assign(self, s):
        return ["assign", self.loc(s), [self.target(t) for t in s.targets], self.expr(s.value)]

    def _stmt_AnnAssign(self, s):
        if s.value is None:
            return None
        return ["assign", self.loc(s), [self.target(s.target)], self.expr(s.value)]

    def _stmt_AugAssign(self, s):
        if isinstance(s.target, ast.Tuple):
            raise self.error("augmented assignment to a tuple is not supported", s)
        return ["augassign", self.loc(s), self.binop(s.op, s), self.target(s.target), self.expr(s.value)]

    def _stmt_If(self, s):
        return ["if", self.loc(s), self.expr(s.test), self.block(s.body), self.block(s.orelse)]

    def _stmt_While(self, s):
        if s.orelse:
            raise self.error("'while ... else' is not supported", s)
        return ["while", self.loc(s), self.expr(s.test), self.block(s.body)]

    def _stmt_For(self, s):
        if s.orelse:
            raise self.error("'for ... else' is not supported", s)
        if not isinstance(s.target, ast.Name):
            raise self.error("a for loop's target must be one name", s.target)
        it = s.iter
        if not (isinstance(it, ast.Call) and self.resolve_callee(it.func) == ("intrinsic", "range")):
            raise self.error("for loops must iterate over range(...)", it)
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.error("range() takes 1 to 3 positional arguments", it)
        args = [self.expr(a) for a in it.args]
        one = ["const", self.loc(it), 1, "int"]
        zero = ["const", self.loc(it), 0, "int"]
        start, stop, step = (zero, args[0], one) if len(args) == 1 else \
            (args[0], args[1], one) if len(args) == 2 else args
        if step[0] == "const" and step[2] == 0:
            raise self.error("range() step must not be zero", it)
        return ["for", self.loc(s), s.target.id, start, stop, step, self.block(s.body)]

    def _stmt_Break(self, s):
        return ["break", self.loc(s)]

    def _stmt_Continue(self, s):
        return ["continue", self.loc(s)]

    def _stmt_Pass(self, s):
        return None

    def _stmt_Return(self, s):
        if self.is_kernel and s.value is not None:
            raise self.error("kernels return nothing; write results into an array argument", s)
        return ["return", self.loc(s), None if s.value is None else self.expr(s.value)]

    def _stmt_Expr(self, s):
        if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            return None
        return ["expr", self.loc(s), self.expr(s.value)]

    def target(self, t):
        if isinstance(t, ast.Name):
            return ["name", self.loc(t), t.id]
        if isinstance(t, ast.Subscript):
            return ["index", self.loc(t), self.expr(t.value), self.indices(t)]
        if isinstance(t, (ast.Tuple, ast.List)):
            return ["tuple", self.loc(t), [self.target(e) for e in t.elts]]
        raise self.error(f"cannot assign to {type(t).__name__}", t)

    # -- expressions --------------------------------------------------------

    def expr(self, e):
        method = getattr(self, "_expr_" + type(e).__name__, None)
        if method is None:
            raise self.error(f"'{type(e).__name__}' expressions are not supported in Tack code", e)
        return method(e)

    def _expr_Constant(self, e):
        v = e.value
        if isinstance(v, bool):
            return ["const", self.loc(e), v, "bool"]
        if isinstance(v, int):
            if not -2**63 <= v < 2**64:
                raise self.error(f"integer literal {v} does not fit in 64 bits", e)
            return ["const", self.loc(e), v, "int"]
        if isinstance(v, float):
            return ["const", self.loc(e), v, "float"]
        raise self.error(f"{type(v).__name__} literals are not supported in Tack code", e)

    def _expr_Name(self, e):
        if e.id in self.locals:
            return ["name", self.loc(e), e.id]
        if e.id in self.templates:
            raise self.error(f"template class '{e.id}' can only be passed to a device function "
                             "or have its attributes used", e)
        return self.value_of(e.id, self.lookup(e.id, e), e)

    def _expr_Attribute(self, e):
        base = e.value
        if isinstance(base, ast.Name) and base.id in self.locals:
            if e.attr == "shape":
                return ["shape", self.loc(e), ["name", self.loc(base), base.id]]
            if e.attr in ("ndim", "size"):
                return ["intrinsic", self.loc(e), e.attr, [["name", self.loc(base), base.id]]]
            raise self.error(f"arrays have no attribute '{e.attr}' in Tack code (use shape, ndim, size)", e)
        obj, name = self.resolve_attr(e)
        return self.value_of(name, obj, e)

    def _expr_BinOp(self, e):
        return ["binop", self.loc(e), self.binop(e.op, e), self.expr(e.left), self.expr(e.right)]

    def binop(self, op, node):
        if type(op) not in _BINOPS:
            raise self.error(f"operator '{type(op).__name__}' is not supported", node)
        return _BINOPS[type(op)]

    def _expr_UnaryOp(self, e):
        operand = e.operand
        if isinstance(e.op, ast.USub) and isinstance(operand, ast.Constant) and \
                type(operand.value) in (int, float):
            return self._expr_Constant(ast.Constant(-operand.value, lineno=e.lineno,
                                                    col_offset=e.col_offset))
        return ["unop", self.loc(e), _UNOPS[type(e.op)], self.expr(operand)]

    def _expr_Compare(self, e):
        for op in e.ops:
            if type(op) not in _CMPOPS:
                raise self.error(f"comparison '{type(op).__name__}' is not supported", e)
        return ["cmp", self.loc(e), [_CMPOPS[type(op)] for op in e.ops],
                [self.expr(x) for x in [e.left, *e.comparators]]]

    def _expr_BoolOp(self, e):
        return ["boolop", self.loc(e), "and" if isinstance(e.op, ast.And) else "or",
                [self.expr(v) for v in e.values]]

    def _expr_IfExp(self, e):
        return ["ifexp", self.loc(e), self.expr(e.test), self.expr(e.body), self.expr(e.orelse)]

    def _expr_Tuple(self, e):
        return ["tuple", self.loc(e), [self.expr(x) for x in e.elts]]

    def _expr_Subscript(self, e):
        return ["index", self.loc(e), self.expr(e.value), self.indices(e)]

    def indices(self, e):
        sl = e.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        for it in items:
            if isinstance(it, ast.Slice):
                raise self.error("slices are not supported; index one element at a time", it)
        return [self.expr(it) for it in items]

    def _expr_Call(self, e):
        if e.keywords:
            raise self.error("keyword arguments are not supported in Tack calls", e)
        if any(isinstance(a, ast.Starred) for a in e.args):
            raise self.error("*args in calls is not supported", e)
        kind, what = self.resolve_callee(e.func)
        if kind == "intrinsic":
            return self.intrinsic_call(what, e)
        return self.device_call(what, e)

    # -- names --------------------------------------------------------------

    def lookup(self, name, node):
        for scope in (self.closure, self.globals, vars(builtins)):
            if name in scope:
                return scope[name]
        raise self.error(f"name '{name}' is not defined", node)

    def resolve_attr(self, e):
        """``a.b.c`` where ``a`` is a global module or a template parameter -> (object, dotted name)."""
        if isinstance(e.value, ast.Attribute):
            base, base_name = self.resolve_attr(e.value)
        elif isinstance(e.value, ast.Name) and e.value.id in self.templates:
            cls = self.templates[e.value.id]
            attr = inspect.getattr_static(cls, e.attr, _MISSING)
            if attr is _MISSING:
                raise self.error(f"template class {cls.__qualname__} has no attribute '{e.attr}'", e)
            return _TemplateAttr((cls, attr, e.attr)), f"{e.value.id}.{e.attr}"
        elif isinstance(e.value, ast.Name):
            base, base_name = self.lookup(e.value.id, e.value), e.value.id
            self.record(base_name, base)
        else:
            raise self.error("attribute access on this expression is not supported", e)
        if not isinstance(base, types.ModuleType):
            raise self.error(f"'{base_name}' is not a module; attribute '{e.attr}' "
                             "cannot be used in Tack code", e)
        try:
            return getattr(base, e.attr), f"{base_name}.{e.attr}"
        except AttributeError:
            raise self.error(f"module '{base.__name__}' has no attribute '{e.attr}'", e) from None

    def record(self, name, obj):
        """Add a global name and what it is bound to, to the dependency record."""
        if isinstance(obj, types.ModuleType):
            self.state.dep(self.fid, name, "module", obj.__name__)
        elif isinstance(obj, Func):
            self.state.dep(self.fid, name, "func", function_fingerprint(obj.py_func))
        elif isinstance(obj, Constant):
            self.state.dep(self.fid, name, "const", obj.fingerprint)
        elif isinstance(obj, type) and intrinsic_of(obj) is None:
            self.state.dep(self.fid, name, "template", class_fingerprint(obj))
        elif intrinsic_of(obj) is not None:
            self.state.dep(self.fid, name, "intrinsic", intrinsic_of(obj))
        elif "." in name and value_identity(obj) is not None:
            # helpers.SCALE, a number compiled in as a literal: its value is a dependency
            self.state.dep(self.fid, name, "value", value_identity(obj))

    def value_of(self, name, obj, node):
        """A global (or module attribute) used as a value in an expression."""
        if isinstance(obj, _TemplateAttr):              # template class attribute
            cls, attr, attr_name = obj
            if isinstance(attr, (bool, int, float)):
                return self._expr_Constant(ast.Constant(attr, lineno=node.lineno,
                                                        col_offset=node.col_offset))
            raise self.error(f"{cls.__qualname__}.{attr_name} is not a number; only static "
                             "methods and numbers of a template class can be used", node)
        self.record(name, obj)
        if isinstance(obj, Constant):
            cid = "c" + obj.fingerprint
            self.state.constants[cid] = ir.Constant(obj.value)
            return ["gconst", self.loc(node), cid]
        if "." in name and isinstance(obj, (int, float)) and not isinstance(obj, bool):
            return self._expr_Constant(ast.Constant(obj, lineno=node.lineno, col_offset=node.col_offset))
        what = type(obj).__name__
        if isinstance(obj, (Func, types.FunctionType)) or intrinsic_of(obj) is not None:
            raise self.error(f"'{name}' is a function; it can only be called in Tack code", node)
        raise self.error(f"global '{name}' is a Python {what}, which kernels cannot read; "
                         f"wrap it in tack.constant(...) where it is defined", node)

    def resolve_callee(self, f):
        """('intrinsic', name) or ('func', (python function, fid, template bindings))."""
        if isinstance(f, ast.Name):
            if f.id in self.locals:
                raise self.error(f"'{f.id}' is a local variable, not a function", f)
            if f.id in self.templates:
                raise self.error(f"template class '{f.id}' cannot be called", f)
            obj, name = self.lookup(f.id, f), f.id
            self.record(name, obj)
        elif isinstance(f, ast.Attribute):
            obj, name = self.resolve_attr(f)
            if not isinstance(obj, _TemplateAttr):
                self.record(name, obj)          # "helpers.f": an edit of f must invalidate
        else:
            raise self.error("only named functions can be called in Tack code", f)
        if isinstance(obj, _TemplateAttr):              # template class static method
            cls, attr, attr_name = obj
            if isinstance(attr, staticmethod):
                attr = attr.__func__
            fn = attr.py_func if isinstance(attr, Func) else attr
            if not isinstance(fn, types.FunctionType):
                raise self.error(f"{cls.__qualname__}.{attr_name} is not a static method", f)
            fid = f"{cls.__module__}.{cls.__qualname__}.{attr_name}#{class_fingerprint(cls)[:16]}"
            return "func", (fn, fid)
        intrinsic = intrinsic_of(obj)
        if intrinsic is not None:
            return "intrinsic", intrinsic
        if isinstance(obj, Func):
            return "func", (obj.py_func, func_id(obj.py_func))
        if isinstance(obj, Kernel):
            raise self.error(f"'{name}' is a kernel; kernels cannot call kernels "
                             "(make it a @tack.func)", f)
        if isinstance(obj, types.FunctionType):
            raise self.error(f"'{name}' is a plain Python function; decorate it with "
                             "@tack.func to call it from Tack code", f)
        raise self.error(f"'{name}' ({type(obj).__name__}) cannot be called in Tack code", f)

    # -- calls --------------------------------------------------------------

    def intrinsic_call(self, name, e):
        args = [self.expr(a) for a in e.args]
        if name == "range":
            raise self.error("range() can only be used as a for loop's iterable", e)
        if name == "len":
            if len(args) != 1:
                raise self.error("len() takes one argument", e)
            return ["tget", self.loc(e), ["shape", self.loc(e), args[0]], 0]
        return ["intrinsic", self.loc(e), name, args]

    def template_arg(self, a):
        """The class an argument binds a template parameter to, or None."""
        if isinstance(a, ast.Name) and a.id in self.templates:
            return self.templates[a.id]
        if isinstance(a, ast.Name) and a.id not in self.locals:
            obj = self.closure.get(a.id, self.globals.get(a.id))
            if isinstance(obj, type) and intrinsic_of(obj) is None:
                self.record(a.id, obj)
                return obj
        return None

    def device_call(self, target, e):
        fn, fid = target
        code = fn.__code__
        params = code.co_varnames[:code.co_argcount]
        if len(e.args) != len(params):
            raise self.error(f"'{fn.__name__}' takes {len(params)} arguments "
                             f"({', '.join(params)}), got {len(e.args)}", e)
        bound, args = {}, []
        for p, a in zip(params, e.args):
            cls = self.template_arg(a)
            if cls is not None:
                bound[p] = cls
            else:
                args.append(self.expr(a))
        if bound:
            fid += "[" + ",".join(f"{p}={c.__qualname__}#{class_fingerprint(c)[:16]}"
                                  for p, c in sorted(bound.items())) + "]"
        if fid in self.state.stack:
            chain = " -> ".join(self.state.stack[self.state.stack.index(fid):] + [fid])
            raise self.error(f"recursion is not supported in Tack code ({chain})", e)
        if fid not in self.state.functions:
            self.state.functions[fid] = None        # reserve: keeps insertion order callee-first
            lowered = _FunctionLowerer(self.state, fn, fid, bound, False).run()
            self.state.functions[fid] = lowered
        return ["call", self.loc(e), fid, args]


def _check_assigned_before_use(body, params, src):
    """A variable read where no path from the function's start has assigned it is an error.

    "Possibly assigned" flow analysis over the lowered IR: branches join by
    union, loops iterate to a fixed point (a read early in a loop body may see
    an assignment later in it, from the previous iteration).
    """

    def reads(e, assigned):
        if not isinstance(e, list) or not e:
            return
        if e[0] == "name":
            if e[2] not in assigned:
                raise src.error(f"variable '{e[2]}' is used before it is assigned", e[1])
            return
        for part in e[2:]:
            if isinstance(part, list):
                if part and isinstance(part[0], str):
                    reads(part, assigned)
                else:
                    for x in part:
                        reads(x, assigned)

    def targets(t, assigned):
        if t[0] == "name":
            assigned.add(t[2])
        elif t[0] == "index":
            reads(t[2], assigned)
            for x in t[3]:
                reads(x, assigned)
        else:
            for x in t[2]:
                targets(x, assigned)

    def loop(stmts, assigned, cond=None):
        while True:
            if cond is not None:
                reads(cond, assigned)
            after = block(stmts, set(assigned))
            if after <= assigned:
                return assigned
            assigned = assigned | after

    def block(stmts, assigned):
        for s in stmts:
            kind = s[0]
            if kind == "assign":
                reads(s[3], assigned)
                for t in s[2]:
                    targets(t, assigned)
            elif kind == "augassign":
                reads(s[3], assigned)
                reads(s[4], assigned)
                targets(s[3], assigned)
            elif kind == "if":
                reads(s[2], assigned)
                assigned = block(s[3], set(assigned)) | block(s[4], set(assigned))
            elif kind == "while":
                assigned = loop(s[3], assigned, s[2])
            elif kind == "for":
                for x in s[3:6]:
                    reads(x, assigned)
                assigned = loop(s[6], assigned | {s[2]})
            elif kind in ("return", "expr") and s[2] is not None:
                reads(s[2], assigned)
        return assigned

    block(body, set(params))
