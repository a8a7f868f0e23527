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
import math
import re
import sys
import tokenize
import types

import numpy as np

from .. import ir
from ..ir import MATH_FOLDS, float_folded, math_folded
from ..api import Kernel
from ..limits import MAX_CALL_DEPTH, MAX_EXPR_DEPTH, MAX_TOTAL_DEPTH, deep
from ..fingerprints import (class_fingerprint, class_id, func_id, function_fingerprint, metaclass_attr_read,
                            source_snapshot, value_identity)
from ..language import Constant, Func, intrinsic_identity, intrinsic_of, python_number, wrapped_message
from ..errors import CompileError, SourceContext
from ..types import Template

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
           ast.LShift: "<<", ast.RShift: ">>"}
_UNOPS = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not", ast.Invert: "~"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_MISSING = object()
# What Tack code cannot hold, as Python names it (not ``ast``'s class names: 'JoinedStr'), and
# what to write instead.
_NO_TUPLE_HINT = "use a tuple, (a, b), or pass an array or a tack.constant"
_LOOP_HINT = "write a loop (for j in range(n)) that stores into an array argument"
_UNSUPPORTED_STATEMENTS = {
    "Raise": ("'raise'", "a kernel cannot raise: write an error flag into an array argument, or "
              "run with TACK_DEBUG=1 for bounds checks"),
    "Assert": ("'assert'", "check on the host before the launch, or run with TACK_DEBUG=1 for "
               "bounds checks"),
    "Try": ("'try'", "a kernel has no exceptions"),
    "TryStar": ("'try'", "a kernel has no exceptions"),
    "With": ("'with'", None), "AsyncWith": ("'async with'", None), "AsyncFor": ("'async for'", None),
    "Delete": ("'del'", "a name lives until the function returns"),
    "FunctionDef": ("a nested 'def'", "define it at module level, decorated with @tack.func"),
    "AsyncFunctionDef": ("a nested 'async def'", "define it at module level, decorated with @tack.func"),
    "ClassDef": ("a class definition", "define it at module level and pass it as a template"),
    "Import": ("'import'", "import at module level"), "ImportFrom": ("'import'", "import at module level"),
    "Match": ("'match'", "write if/elif"),
}
_UNSUPPORTED_EXPRESSIONS = {
    "List": ("a list display ([...])", _NO_TUPLE_HINT),
    "Dict": ("a dict display ({...})", "pass arrays, or use a tuple"),
    "Set": ("a set display ({...})", _NO_TUPLE_HINT),
    "ListComp": ("a list comprehension", _LOOP_HINT), "SetComp": ("a set comprehension", _LOOP_HINT),
    "DictComp": ("a dict comprehension", _LOOP_HINT), "GeneratorExp": ("a generator expression", _LOOP_HINT),
    "JoinedStr": ("an f-string", "kernels have no strings: write numbers into an array argument"),
    "FormattedValue": ("an f-string", "kernels have no strings: write numbers into an array argument"),
    "NamedExpr": ("an assignment expression (:=)", "assign on a line of its own"),
    "Lambda": ("a lambda", "define a device function with @tack.func"),
    "Yield": ("'yield'", None), "YieldFrom": ("'yield from'", None), "Await": ("'await'", None),
    "Starred": ("a starred expression (*x)", "pass each value"),
}
_UNSUPPORTED_OPERATORS = {ast.MatMult: "'@' (matrix multiplication)"}
_UNSUPPORTED_COMPARISONS = {
    ast.In: ("'in'", "compare with each value: i == 0 or i == 1"),
    ast.NotIn: ("'not in'", "compare with each value: i != 0 and i != 1"),
    ast.Is: ("'is'", "compare values with =="), ast.IsNot: ("'is not'", "compare values with !="),
}
_UNSUPPORTED_TARGETS = {
    "Starred": ("a starred target (a, *b = ...)", "unpack into as many names as there are values"),
    "Attribute": ("an attribute", "assign to a name or an array's element"),
}


def _not_supported(table, kind: str, what: str) -> str:
    """Why the ``ast`` node ``kind`` (a ``what``: statement, expression) is refused, and the fix."""
    name, hint = table.get(kind, (f"the {what} '{kind}'", None))
    return f"{name} is not supported in Tack code" + (f"; {hint}" if hint else "")
# Python builtins Tack does not take, which Numba does: what to write instead.
_REDUCTION_HINT = ("for a sum, a product or any reduction over an array, loop over its elements "
                   "(for j in range(x.shape[0])) or accumulate into an output with tack.atomic_add")
_BUILTIN_HINTS = {
    "pow": "write x ** y (or math.pow(x, y), a float)",
    "divmod": "write x // y and x % y",
    "print": "a kernel cannot print: write it into an array argument and print that after the launch",
    "reversed": "write range(n - 1, -1, -1) for reversed(range(n))",
    "sum": _REDUCTION_HINT,
    "any": "loop over the elements and test each (for j in range(x.shape[0]))",
    "all": "loop over the elements and test each (for j in range(x.shape[0]))",
    "sorted": "a kernel cannot sort: sort with NumPy before or after the launch",
}
# NumPy's function of an array or of numbers (a ufunc) that kernel code does not take
_NUMPY_HINT = ("; kernel code computes one point's numbers, and takes NumPy's functions of numbers "
               "only, as docs/language.md lists them: ")
_NUMPY_HINTS = {"ufunc": "write this one with operators and those (np.square(x) is x * x, "
                         "np.exp2(x) is 2.0 ** x)"}
# by the function's name: what it was likely meant for
_MAKES_ARRAYS = ("a kernel makes no arrays: make it before the launch and pass it as an argument "
                 "(a scratch array too), or use a tuple of numbers")
_NUMPY_HINTS_BY_NAME = dict(
    {f: _MAKES_ARRAYS for f in ("zeros", "ones", "empty", "full", "array", "asarray", "arange",
                                 "linspace", "zeros_like", "ones_like", "empty_like", "full_like",
                                 "copy", "eye", "identity")},
    **{f: ("of two numbers, the larger is max(a, b) or np.maximum(a, b); " + _REDUCTION_HINT)
       for f in ("max", "amax", "nanmax")},
    **{f: ("of two numbers, the smaller is min(a, b) or np.minimum(a, b); " + _REDUCTION_HINT)
       for f in ("min", "amin", "nanmin")})

# The calls of Python's and NumPy's functions that take keyword arguments or may leave some out,
# by intrinsic: (the name Python's messages show, the parameters in order, the keyword-only
# ones).  ``_FunctionLowerer.bound`` binds a call's arguments to them as Python does.
_SIGNATURES = {
    "np.clip": ("numpy.clip", ("a", "a_min", "a_max"), ("min", "max")),
    "np.round": ("numpy.round", ("a", "decimals"), ()),
    "round": ("round", ("number", "ndigits"), ()),
    "isclose": ("math.isclose", ("a", "b"), ("rel_tol", "abs_tol")),
    "np.isclose": ("numpy.isclose", ("a", "b", "rtol", "atol", "equal_nan"), ()),
}
# math.isclose's and np.isclose's defaults (Python's floats and bools: weak literals, as if
# written)
_ISCLOSE_DEFAULTS = {"isclose": {"rel_tol": 1e-09, "abs_tol": 0.0},
                     "np.isclose": {"rtol": 1e-05, "atol": 1e-08, "equal_nan": False}}


def _is_none(node) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


class _TemplateAttr(tuple):
    """``(class, attribute, name)``: an attribute of a template parameter (not a user's tuple)."""


def lower_kernel(kernel: Kernel, templates: dict, debug: bool) -> ir.LoweredKernel:
    """Lower ``kernel`` with its template parameters bound to ``templates`` classes."""
    unknown = set(templates) - set(kernel.params)
    if unknown:
        raise TypeError(f"kernel '{kernel.__name__}' has no parameter {sorted(unknown)[0]!r}")
    state = _KernelState(debug)
    try:
        with deep():
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
        self.depth = 0           # expression levels open, summed over the functions being lowered

    def dep(self, scope, name, kind, identity):
        entry = (scope, name, kind, identity)
        if entry not in self._seen:
            self._seen.add(entry)
            self.deps.append(list(entry))


_DEF = re.compile(r"^\s*(@|def\s|async\s+def\s)")


_RELOAD = "import the module again (or restart) to compile what the file holds"


def _changed(name, code, why) -> CompileError:
    return CompileError(f"the source of '{name}' has changed since it was defined: "
                        f"{code.co_filename} {why}; {_RELOAD}")


def _snapshot_lines(fn):
    """The source lines of ``fn`` (ends kept) and its first line, from the file's bytes its
    fingerprint hashed (``fingerprints.source_snapshot``): what the cache's key says was
    compiled is what is compiled, even if the file changed since (a same-second edit a stale
    ``.pyc`` hides, an edit without a reload).  None where there is no such file (a notebook's
    cell: ``inspect`` finds it); a CompileError where the file no longer holds the function."""
    name, code = fn.__qualname__, fn.__code__
    snap = source_snapshot(code)
    if not snap:
        return None
    import io
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(snap[0]).readline)
        # lines end where Python's do (\n, \r\n, \r), as the fingerprint's: not at a form feed
        # or U+2028 in a comment or a string, as str.splitlines() would
        lines = io.TextIOWrapper(io.BytesIO(snap[0]), encoding, newline=None).readlines()
    except (SyntaxError, LookupError, UnicodeDecodeError) as e:
        raise _changed(name, code, f"cannot be read as Python source ({e})") from None
    first = code.co_firstlineno
    if code.co_name == "<lambda>":
        raise CompileError(f"'{name}' is not a plain 'def' function")
    if not 0 < first <= len(lines) or not _DEF.match(lines[first - 1]):
        raise _changed(name, code, f"no longer holds its 'def' at line {first}")
    try:
        return inspect.getblock(lines[first - 1:]), first
    except (SyntaxError, tokenize.TokenError) as e:
        raise _changed(name, code, f"no longer parses at its line {first} ({e.args[0]})") from None


def _source_of(fn):
    """(its ``def`` node, its SourceContext, line offset, column offset) of ``fn``'s source.

    A ``def`` nested in a block (a class, a function, an ``if``) is parsed inside a block of
    its own, as it is in its file: its lines keep their columns, and a line less indented than
    the ``def`` (a multi-line string's, a continued line's) parses as it does there."""
    name, code = fn.__qualname__, fn.__code__
    if getattr(fn, "__wrapped__", None) is not None:
        raise CompileError(wrapped_message(fn, "Tack"))
    got = _snapshot_lines(fn)
    if got is not None:
        lines, first = got
    else:
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            where = code.co_filename
            if where[:1] == "<" and where[-1:] == ">":    # exec(), python -c, a REPL
                raise CompileError(f"the source of '{name}' is not available ({e}): it was "
                                   f"compiled from {where}, not a file; kernels must be defined "
                                   "in a file") from None
            # (it said only "kernels must be defined in a file", of a kernel defined in one)
            raise CompileError(f"the source of '{name}' is not available ({e}): its code says "
                               f"{where}, line {code.co_firstlineno}, and that file cannot be "
                               "read now; Tack compiles (and keys its cache by) a kernel's "
                               "source, so the file must be there, not only its .pyc") from None
        except (SyntaxError, tokenize.TokenError) as e:     # the file no longer parses there
            raise _changed(name, code, f"no longer parses at its line {code.co_firstlineno} "
                           f"({e.args[0]})") from None
    filename = inspect.getsourcefile(fn) or code.co_filename
    src = SourceContext(name, filename, first, [ln.rstrip("\n") for ln in lines])
    text = "".join(lines)
    nested = lines[0][:1].isspace()
    try:
        tree = ast.parse("if 1:\n" + text if nested else text)
        node = tree.body[0].body[0] if nested else tree.body[0]
    except (SyntaxError, ValueError, IndexError):
        node = None
    except RecursionError:
        raise _too_deep_to_parse(src, text, first, nested) from None
    if not isinstance(node, ast.FunctionDef) and code.co_name != "<lambda>" and \
            not isinstance(node, ast.AsyncFunctionDef):
        raise src.error(f"the source of '{name}' has changed since it was defined: its line "
                        f"{first} no longer holds its 'def'; {_RELOAD}", (first, None))
    if not isinstance(node, ast.FunctionDef):
        raise src.error(f"'{name}' is not a plain 'def' function", (first, None))
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    if node.name != code.co_name or params != list(code.co_varnames[:code.co_argcount]):
        raise src.error(f"the source of '{name}' has changed since it was defined: its line "
                        f"{first} now holds 'def {node.name}({', '.join(params)})', not "
                        f"'def {code.co_name}({', '.join(code.co_varnames[:code.co_argcount])})'; "
                        f"{_RELOAD}", (first, None))
    return node, src, first - 2 if nested else first - 1, 0


def _too_deep_to_parse(src, text, first, nested) -> CompileError:
    """The CompileError for a function whose source Python's parser gives up on: at the line of
    the first statement it gives up on alone.  Python 3.12 parses about 3,000 levels of nesting
    whatever sys.setrecursionlimit says (so it compiles no module deeper either: here the code
    ran was compiled from other text, as from a stale .pyc); the others parse past the bounds,
    which the lowering checks."""
    prefix = "if 1:\n" if nested else ""
    where, start = first, None
    try:
        for tok in tokenize.generate_tokens(iter((prefix + text).splitlines(True)).__next__):
            if start is None and tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT,
                                                  tokenize.DEDENT, tokenize.NEWLINE):
                start = tok.start[0]
            if tok.type == tokenize.NEWLINE and start is not None:
                lines = (prefix + text).splitlines(True)[start - 1:tok.end[0]]
                try:
                    ast.parse("if 1:\n " + "".join(lines).lstrip())
                except RecursionError:
                    where = first + start - 1 - (1 if nested else 0)
                    break
                except (SyntaxError, ValueError):
                    pass
                start = None
    except (tokenize.TokenError, SyntaxError):
        pass
    v = sys.version_info
    return src.error(f"this expression is nested more deeply than Python {v[0]}.{v[1]} can parse; "
                     "split it into several statements", (where, None))


#: What a slice in Tack code is told (an index's, or a slice's attribute's).
_NO_SLICES = "slices are not supported; index one element at a time"


class _FunctionLowerer:
    def __init__(self, state, pyfn, fid, templates, is_kernel):
        self.state = state
        self.pyfn = pyfn
        self.fid = fid
        self.templates = templates          # param name -> class
        self.is_kernel = is_kernel
        self.depth = 0                      # this function's expression levels open
        self.literals = {}                  # id(ast node) -> _int_literal_value of it
        self.made = []                      # nodes made here (``distributed``): kept, as their
        #                                     ids key ``literals``
        self.globals = pyfn.__globals__
        self.closure = {}
        self.unbound = set()                # free variables whose cell is empty
        for n, c in zip(pyfn.__code__.co_freevars, pyfn.__closure__ or ()):
            try:
                self.closure[n] = c.cell_contents
            except ValueError:
                self.unbound.add(n)

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
        _check_assigned_before_use(lowered, set(params) - set(self.templates), self.src,
                                   self.state.constants)
        return ir.LoweredFunction(self.fid, self.pyfn.__name__,
                                  [p for p in params if p not in self.templates], lowered, self.src)

    def _check_signature(self, node):
        a = node.args
        what = ("a default value for parameter "
                f"'{a.args[len(a.args) - len(a.defaults)].arg}'" if a.defaults else
                f"'*{a.vararg.arg}'" if a.vararg else f"'**{a.kwarg.arg}'" if a.kwarg else
                f"keyword-only parameter '{a.kwonlyargs[0].arg}'" if a.kwonlyargs else
                f"positional-only parameter '{a.posonlyargs[0].arg}'" if a.posonlyargs else None)
        if what is not None:
            kind = "kernel" if self.is_kernel else "device function"
            raise self.error(f"{kind} '{self.pyfn.__name__}' has {what}: Tack functions take "
                             "plain parameters only (no defaults, *args, **kwargs, keyword-only "
                             "or positional-only, '/'); pass every argument at each call", node)

    def check_signature(self):
        """The signature check alone (before a call's arguments are counted against it)."""
        node, self.src, self.line_offset, self.indent = _source_of(self.pyfn)
        self._check_signature(node)

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
                raise self.error(_not_supported(_UNSUPPORTED_STATEMENTS, type(s).__name__, "statement"), s)
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
        if self.is_kernel and isinstance(s.value, ast.Constant) and s.value.value is None:
            return ["return", self.loc(s), None]        # ``return None``: a bare return, as in Python
        if self.is_kernel and s.value is not None:
            raise self.error("kernels return nothing; write results into an array argument", s)
        return ["return", self.loc(s), None if s.value is None else self.expr(s.value)]

    def _stmt_Expr(self, s):
        # a docstring, or a bare ``...`` (a body's placeholder): nothing, as in Python (``...``
        # was refused as an ellipsis literal)
        if isinstance(s.value, ast.Constant) and (isinstance(s.value.value, str)
                                                  or s.value.value is Ellipsis):
            return None
        return ["expr", self.loc(s), self.expr(s.value)]

    def target(self, t):
        if isinstance(t, ast.Name):
            return ["name", self.loc(t), t.id]
        if isinstance(t, ast.Subscript):
            return ["index", self.loc(t), self.expr(t.value), self.indices(t)]
        if isinstance(t, (ast.Tuple, ast.List)):
            return ["tuple", self.loc(t), [self.target(e) for e in t.elts]]
        name, hint = _UNSUPPORTED_TARGETS.get(type(t).__name__, (type(t).__name__, None))
        raise self.error(f"cannot assign to {name}" + (f"; {hint}" if hint else ""), t)

    # -- expressions --------------------------------------------------------

    def expr(self, e):
        method = getattr(self, "_expr_" + type(e).__name__, None)
        if method is None:
            raise self.error(_not_supported(_UNSUPPORTED_EXPRESSIONS, type(e).__name__, "expression"), e)
        if isinstance(e, ast.BinOp) or (isinstance(e, ast.UnaryOp) and
                                        not isinstance(e.operand, ast.Constant)):
            value = _int_literal_value(e, self.literals)
            unfit = ir.int_literal_unfit(value)
            if unfit:
                raise self.error(unfit, e)
            if value is not None:       # one literal, as Python computes it (2**63 // 2, 10**19)
                return ["const", self.loc(e), value, "int"]
        self.depth += 1
        self.state.depth += 1
        try:
            if self.depth > MAX_EXPR_DEPTH:
                raise self.error(f"this expression is nested more than {MAX_EXPR_DEPTH} levels "
                                 "deep; split it into several statements", e)
            if self.state.depth > MAX_TOTAL_DEPTH:
                raise self.error(f"expressions here are nested more than {MAX_TOTAL_DEPTH} levels "
                                 "deep, counting those of the device functions that call this "
                                 f"one ({_chain(self.state.stack)}); split them into several "
                                 "statements", e)
            return method(e)
        finally:
            self.depth -= 1
            self.state.depth -= 1

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
            raise self.error(f"'{base.id}.{e.attr}': of a variable only an array's shape, ndim and "
                             f"size can be read in Tack code ('{base.id}' is a variable here)", e)
        if e.attr in ("shape", "ndim", "size") and (
                isinstance(base, ast.Name) and base.id not in self.templates
                or isinstance(base, ast.Attribute)):
            # W.shape of W = tack.constant(array), or of a module's: mod.W.shape
            obj, name = ((self.lookup(base.id, base), base.id) if isinstance(base, ast.Name)
                         else self.resolve_attr(base))
            if isinstance(obj, Constant):
                const = self.value_of(name, obj, base)
                if e.attr == "shape":
                    return ["shape", self.loc(e), const]
                return ["intrinsic", self.loc(e), e.attr, [const]]
        obj, name = self.resolve_attr(e)
        return self.value_of(name, obj, e)

    def distributed(self, e, op, operands):
        """``e``, an operator on a choice of integer literals (``-(2**63 if p else 1)``,
        ``(1 if c else 2) * 2**31``: ``operands`` the operator's, one of them the choice, the
        other, if any, integer literals alone), as the choice of the operator on each branch
        (``-2**63 if p else -1``), so that each branch folds to one literal, typed by its own
        value as a literal is; None for anything else.  Typed whole, such a choice took the type
        of its widest branch (a literal past int64 is a uint64), and the operator wrapped every
        branch in it: ``m + -(2**63 if p else 1)`` with an int64 ``m`` gave 1.8e19 where p is
        false, for Python's 4.  The same operator, the same values, each test evaluated once and
        in the same order."""
        k = next((i for i, x in enumerate(operands) if _choice_leaves(x, self.literals)), None)
        if k is None or any(_int_literal_value(x, self.literals) in (None, ir.TOO_BIG)
                            for i, x in enumerate(operands) if i != k):
            return None
        choice = operands[k]

        def branch(x):
            return op(*(x if i == k else y for i, y in enumerate(operands)))
        new = ast.IfExp(test=choice.test, body=branch(choice.body), orelse=branch(choice.orelse))
        ast.fix_missing_locations(ast.copy_location(new, e))
        self.made.append(new)
        return new

    def _expr_BinOp(self, e):
        if type(e.op) in _BINOPS:
            d = self.distributed(e, lambda a, b: ast.BinOp(a, e.op, b), (e.left, e.right))
            if d is not None:
                return self.expr(d)
        node = ["binop", self.loc(e), self.binop(e.op, e), self.expr(e.left), self.expr(e.right)]
        return float_folded(node)

    def binop(self, op, node):
        if type(op) not in _BINOPS:
            shown = _UNSUPPORTED_OPERATORS.get(type(op), f"'{type(op).__name__}'")
            raise self.error(f"operator {shown} is not supported in Tack code", node)
        return _BINOPS[type(op)]

    def _expr_UnaryOp(self, e):
        operand = e.operand
        if isinstance(e.op, ast.USub) and isinstance(operand, ast.Constant) and \
                type(operand.value) in (int, float):
            return self._expr_Constant(ast.Constant(-operand.value, lineno=e.lineno,
                                                    col_offset=e.col_offset))
        if not isinstance(e.op, ast.Not):
            d = self.distributed(e, lambda a: ast.UnaryOp(e.op, a), (operand,))
            if d is not None:
                return self.expr(d)
        return float_folded(["unop", self.loc(e), _UNOPS[type(e.op)], self.expr(operand)])

    def _expr_Compare(self, e):
        for op in e.ops:
            if type(op) not in _CMPOPS:
                name, hint = _UNSUPPORTED_COMPARISONS.get(type(op), (f"'{type(op).__name__}'", None))
                raise self.error(f"comparison {name} is not supported in Tack code"
                                 + (f"; {hint}" if hint else ""), e)
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
        sl = self.slice_in(e)
        if sl is not None:
            raise self.error(_NO_SLICES, sl)
        return [self.expr(it) for it in (e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice])]

    def _expr_Call(self, e):
        if any(isinstance(a, ast.Starred) for a in e.args):
            raise self.error("*args in calls is not supported", e)
        kind, what = self.resolve_callee(e.func)
        if e.keywords and not (kind == "intrinsic" and what in _SIGNATURES):
            raise self.error("keyword arguments are not supported in Tack calls", e)
        if kind == "intrinsic" and self.callee_object is float and len(e.args) == 1 \
                and isinstance(e.args[0], ast.Constant) and isinstance(e.args[0].value, str):
            return self.float_of_text(e)
        if kind == "intrinsic":
            fn = self.callee_object         # before the arguments resolve callees of their own
            node = self.intrinsic_call(what, e)
            if node[0] == "intrinsic" and what in MATH_FOLDS and fn is getattr(math, what, None):
                # math.sqrt(2.0): a Python float, weak; else marked as math's, for a literal
                # argument a device function's body is given (specialize._with_literals)
                node = math_folded(fn, node)
                if node[0] != "const" and what == "log" and len(node[3]) == 2:
                    return self.log_of_base(fn, node)
                return node if node[0] == "const" else node + ["math"]
            if what in ("abs", "min", "max") and fn is getattr(builtins, what):
                # abs(-2**63), max(0, 2**40): Python's value, one literal; else marked as
                # Python's, for a literal argument a device function's body is given
                node = ir.builtin_folded(node + ["py"])
            return node
        return self.device_call(what, e)

    @staticmethod
    def log_of_base(fn, node):
        """``math.log(x, base)``: ``log(x) / log(base)``, as Python's math computes it (each
        ``log`` of literals alone folded, as ``math.log(2.0)`` is)."""
        loc = node[1]
        logs = [math_folded(fn, ["intrinsic", loc, "log", [a]]) for a in node[3]]
        return ["binop", loc, "/"] + [n if n[0] == "const" else n + ["math"] for n in logs]

    def float_of_text(self, e):
        """``float('inf')``, ``float('-inf')``, ``float('nan')``: the float Python makes of the
        text, a literal as ``math.inf`` is (weak)."""
        text = e.args[0].value
        try:
            v = float(text)
        except ValueError:
            raise self.error(f"float({text!r}) is not a number Python reads; write a float "
                             "literal, math.inf or math.nan", e) from None
        return ["const", self.loc(e), v, "float"]

    # -- names --------------------------------------------------------------

    def lookup(self, name, node):
        if name in self.unbound:
            raise self.error(f"'{name}' is a variable of the enclosing function that has no value "
                             "(it is assigned after this function is made, or on another path)", node)
        for scope in (self.closure, self.globals, vars(builtins)):
            if name in scope:
                return scope[name]
        raise self.error(f"name '{name}' is not defined", node)

    @staticmethod
    def slice_in(e):
        """The first slice of a subscript ``e`` (``x[0:2]``), or None."""
        if not isinstance(e, ast.Subscript):
            return None
        sl = e.slice
        return next((it for it in (sl.elts if isinstance(sl, ast.Tuple) else [sl])
                     if isinstance(it, ast.Slice)), None)

    def attribute_refusal(self, e) -> str:
        """What is wrong with ``<expression>.attr``, an attribute of neither a name nor a
        dotted name (``a[i].astype(...)``, ``x[0:2].sum()``, ``f(x).real``)."""
        if self.slice_in(e.value) is not None:
            return f"'.{e.attr}' of a slice: {_NO_SLICES}"
        if isinstance(e.value, ast.Subscript):
            return (f"'.{e.attr}' of an array element cannot be used in Tack code: an element is "
                    "a number, which has no attributes or methods here; to convert it, cast it "
                    "(tack.float32(x), np.float32(x), float(x), int(x))")
        return (f"'.{e.attr}' of this expression cannot be used in Tack code: attributes are "
                "read of modules (np.float32, math.pi), template parameters, and arrays (their "
                "shape, ndim and size only)")

    def resolve_attr(self, e):
        """``a.b.c`` where ``a`` is a global module or a template parameter -> (object, dotted name)."""
        if isinstance(e.value, ast.Attribute):
            base, base_name = self.resolve_attr(e.value)
        elif isinstance(e.value, ast.Name) and e.value.id in self.templates:
            cls = self.templates[e.value.id]
            attr = inspect.getattr_static(cls, e.attr, _MISSING)
            if attr is _MISSING:
                raise self.error(f"template class {cls.__qualname__} has no attribute '{e.attr}'", e)
            if not any(e.attr in vars(k) for k in cls.__mro__) and not metaclass_attr_read(e.attr, attr):
                raise self.error(f"template class {cls.__qualname__}'s '{e.attr}' comes from its "
                                 f"metaclass {type(cls).__qualname__}, of which Tack code reads "
                                 "public static methods, device functions and numbers only (a "
                                 "plain function there is a method Python binds to the class); "
                                 f"define '{e.attr}' in the class", e)
            return _TemplateAttr((cls, attr, e.attr)), f"{e.value.id}.{e.attr}"
        elif isinstance(e.value, ast.Name) and e.value.id in self.locals:
            raise self.error(f"'{e.value.id}.{e.attr}' cannot be used in Tack code: "
                             f"'{e.value.id}' is a variable here (a parameter given a value, or "
                             "a local), and of a variable only an array's shape, ndim and size "
                             "can be read", e)
        elif isinstance(e.value, ast.Name):
            base, base_name = self.lookup(e.value.id, e.value), e.value.id
            self.record(base_name, base)
        else:
            raise self.error(self.attribute_refusal(e), self.slice_in(e.value) or e)
        if isinstance(base, type) and intrinsic_of(base) is None:
            raise self.error(f"'{base_name}.{e.attr}': a class is used in Tack code as a template, "
                             f"through a parameter: pass {base_name} as an argument (of "
                             "tack.launch, or of a device function) and use that parameter's "
                             f"'{e.attr}'", e)
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
            self.state.dep(self.fid, name, "intrinsic", intrinsic_identity(obj))
        elif "." in name and value_identity(obj) is not None:
            # helpers.SCALE, a number compiled in as a literal: its value is a dependency
            self.state.dep(self.fid, name, "value", value_identity(obj))

    def value_of(self, name, obj, node):
        """A global (or module attribute) used as a value in an expression."""
        if isinstance(obj, _TemplateAttr):              # template class attribute
            cls, attr, attr_name = obj
            # (a NumPy float64 is a float too: it was taken as a weak Python float, and
            # x32 * T.B computed in float32, where NumPy's float64 makes a float64)
            if isinstance(attr, (bool, int, float)) and not isinstance(attr, np.generic):
                return self._expr_Constant(ast.Constant(python_number(attr), lineno=node.lineno,
                                                        col_offset=node.col_offset))
            if isinstance(attr, (np.generic, Constant)):     # a number, but not Python's
                what, do = (("a tack.constant", "read it by a module-level name")
                            if isinstance(attr, Constant) else
                            (f"a NumPy {attr.dtype}", "write a Python number, or a module-level "
                             "tack.constant of it"))
                raise self.error(f"{cls.__qualname__}.{attr_name} is {what}; of a template class "
                                 "only static methods and Python numbers (bool, int, float) can "
                                 f"be used: {do}", node)
            raise self.error(f"{cls.__qualname__}.{attr_name} is not a number; only static "
                             "methods and numbers of a template class can be used", node)
        self.record(name, obj)
        if isinstance(obj, Constant):
            cid = "c" + obj.fingerprint
            self.state.constants[cid] = ir.Constant(obj.value)
            return ["gconst", self.loc(node), cid]
        if ("." in name and isinstance(obj, (int, float)) and not isinstance(obj, bool)
                and not isinstance(obj, np.generic)):       # (an np.float64 too: as above)
            return self._expr_Constant(ast.Constant(python_number(obj), lineno=node.lineno,
                                                    col_offset=node.col_offset))
        what = type(obj).__name__
        if isinstance(obj, (Func, types.FunctionType)) or intrinsic_of(obj) is not None:
            raise self.error(f"'{name}' is a function; it can only be called in Tack code", node)
        scope = "variable" if name in self.closure else "global"
        if isinstance(obj, types.ModuleType):       # no tack.constant holds one
            raise self.error(f"{scope} '{name}' is a module, which is not a value in Tack code: "
                             f"use its functions and numbers by name ({name}.sqrt(x), {name}.pi)",
                             node)
        if isinstance(obj, type):
            raise self.error(f"{scope} '{name}' is a class, which is not a value in Tack code: "
                             "a class is a template, passed as an argument (of tack.launch, or "
                             "of a device function) whose static methods and numbers are used",
                             node)
        if "." not in name and getattr(math, name, None) is obj and isinstance(obj, float):
            # ``from math import pi``: the module's number, read by its attribute
            raise self.error(f"{scope} '{name}' is math.{name}, a number imported by name; write "
                             f"math.{name} (a module's number is read as its attribute)", node)
        if "." not in name and name not in self.globals and name not in self.closure:
            # a builtin (__debug__): defined nowhere a tack.constant could wrap it
            raise self.error(f"'{name}' is Python's own {what}, which kernels cannot read; bind "
                             f"a tack.constant to it in the module (say {name.strip('_').upper()} "
                             f"= tack.constant({name})) and read that", node)
        raise self.error(f"{scope} '{name}' is a Python {what}, which kernels cannot read; "
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
            if isinstance(f.value, ast.Name) and f.value.id in self.locals and \
                    f.attr in ("shape", "ndim", "size"):        # (it said "only ... shape ... can be read")
                raise self.error(f"'{f.value.id}.{f.attr}' is read, not called: write "
                                 f"{f.value.id}.{f.attr}{'[0]' if f.attr == 'shape' else ''}", f)
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
            fid = class_id(cls, attr_name)
            return "func", (fn, fid)
        intrinsic = intrinsic_of(obj)
        if intrinsic is not None:
            self.callee_object = obj        # math.sqrt or np.sqrt: _expr_Call folds math's alone
            return "intrinsic", intrinsic
        if isinstance(obj, Func):
            return "func", (obj.py_func, func_id(obj.py_func))
        if isinstance(obj, Kernel):
            raise self.error(f"'{name}' is a kernel; kernels cannot call kernels "
                             "(make it a @tack.func)", f)
        if isinstance(obj, types.FunctionType):
            if (getattr(obj, "__module__", None) or "").partition(".")[0] == "tack":
                # tack.constant, tack.launch...: Tack's own Python API, not for kernels (it
                # said to decorate it with @tack.func)
                raise self.error(f"'{name}' is Tack's Python API, called from Python, not from "
                                 "Tack code (in a kernel: tack.tid, the atomics, the casts)", f)
            raise self.error(f"'{name}' is a plain Python function; decorate it with "
                             "@tack.func to call it from Tack code", f)
        hint = _BUILTIN_HINTS.get(name)
        hint = f"; {hint}" if hint is not None and obj is getattr(builtins, name) else ""
        if not hint and (getattr(obj, "__module__", None) or "").partition(".")[0] == "numpy":
            hint = _NUMPY_HINT + (_NUMPY_HINTS.get(type(obj).__name__) or
                                  _NUMPY_HINTS_BY_NAME.get(getattr(obj, "__name__", ""), _REDUCTION_HINT))
        raise self.error(f"'{name}' ({type(obj).__name__}) cannot be called in Tack code{hint}", f)

    # -- calls --------------------------------------------------------------

    def intrinsic_call(self, name, e):
        if name in _SIGNATURES:
            return self.keyword_call(name, e)
        args = [self.expr(a) for a in e.args]
        if name == "range":
            raise self.error("range() can only be used as a for loop's iterable", e)
        if name == "len":
            if len(args) != 1:
                raise self.error("len() takes one argument", e)
            return ["tget", self.loc(e), ["shape", self.loc(e), args[0]], 0]
        if name == "power":                 # np.power(a, b) is a ** b (integers stay integers)
            if len(args) != 2:
                raise self.error(f"numpy.power() takes two arguments, got {len(args)}", e)
            return ["binop", self.loc(e), "**", args[0], args[1]]
        return ["intrinsic", self.loc(e), name, args]

    def bound(self, e, name):
        """The arguments of the call ``e`` of the intrinsic ``name`` (one of ``_SIGNATURES``) by
        parameter, as Python binds them: {parameter: AST node}, one left out absent; what
        Python refuses is a CompileError at the call (or at the keyword)."""
        shown, params, kwonly = _SIGNATURES[name]
        if len(e.args) > len(params):
            raise self.error(f"{shown}() takes at most {len(params)} positional arguments "
                             f"({len(e.args)} given)", e)
        got = dict(zip(params, e.args))
        for kw in e.keywords:
            if kw.arg is None:
                raise self.error("**kwargs in calls is not supported", kw.value)
            if kw.arg not in params + kwonly:
                raise self.error(f"{shown}() got an unexpected keyword argument '{kw.arg}' (in "
                                 f"Tack code its arguments are {', '.join(params + kwonly)})", kw)
            if kw.arg in got:
                raise self.error(f"{shown}() got multiple values for argument '{kw.arg}'", kw)
            got[kw.arg] = kw.value
        return got

    def _missing(self, e, name, param):
        return self.error(f"{_SIGNATURES[name][0]}() missing required argument '{param}'", e)

    def keyword_call(self, name, e):
        """A call of an intrinsic that takes keywords or may leave arguments out (``np.clip``,
        ``np.round``, ``round``, ``math.isclose``, ``np.isclose``): its node, with what Python or
        NumPy fills in."""
        got, loc = self.bound(e, name), self.loc(e)
        if name == "np.clip":
            return self.clip_call(e, got)
        first = _SIGNATURES[name][1][0]
        if first not in got:
            raise self._missing(e, name, first)
        x = self.expr(got[first])
        if name == "round":
            ndigits = got.get("ndigits")
            if ndigits is not None and not _is_none(ndigits):
                raise self.error("round(x, ndigits) is not supported in Tack code: Python rounds "
                                 "to ndigits decimal digits exactly (correctly rounded), which "
                                 "Tack does not; write np.round(x, ndigits), NumPy's rounding "
                                 "(x * 10**ndigits rounded half to even, divided back), which "
                                 "can differ from Python's in the last digit", e)
            return ["intrinsic", loc, "round", [x]]
        if name == "np.round":
            d = got.get("decimals")
            if d is None:
                return ["intrinsic", loc, name, [x]]
            node = self.expr(d)
            if node[0] != "const" or node[3] != "int":
                raise self.error("numpy.round()'s decimals must be an integer literal in Tack "
                                 "code (np.round(x, 2)): its power of ten is computed when the "
                                 "kernel is compiled, as NumPy computes it", d)
            if not -2**31 <= node[2] < 2**31:       # NumPy's is a C int
                raise self.error(f"numpy.round()'s decimals {node[2]} does not fit in a C int, "
                                 "as NumPy's must", d)
            return ["intrinsic", loc, name, [x] if node[2] == 0 else [x, node]]
        # math.isclose(a, b, *, rel_tol=1e-09, abs_tol=0.0);
        # np.isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False)
        if "b" not in got:
            raise self._missing(e, name, "b")
        args = [x, self.expr(got["b"])]
        for param, default in _ISCLOSE_DEFAULTS[name].items():
            if param not in got:
                args.append(["const", loc, default, "bool" if type(default) is bool else "float"])
                continue
            node = self.expr(got[param])
            if name == "isclose" and node[0] == "const" and node[2] < 0:
                raise self.error(f"math.isclose()'s {param} is negative ({node[2]}): tolerances "
                                 "must be non-negative (Python raises ValueError)", got[param])
            args.append(node)
        return ["intrinsic", loc, name, args]

    def clip_call(self, e, got):
        """``np.clip(a, a_min, a_max)`` (or ``min=``, ``max=``), bound as NumPy 2 binds it: both
        of a_min and a_max, or neither and min and max as keywords; a bound left out or None is
        none, as NumPy's ``_clip`` makes it: ``np.minimum(a, a_max)`` or ``np.maximum(a,
        a_min)``, and ``a`` itself where there is neither."""
        if "a" not in got:
            raise self._missing(e, "np.clip", "a")
        has_min, has_max = "a_min" in got, "a_max" in got
        if has_min != has_max:
            raise self._missing(e, "np.clip", "a_max" if has_min else "a_min")
        if has_min and ("min" in got or "max" in got):
            raise self.error("numpy.clip(): passing min or max when a_min and a_max are given is "
                             "refused (as NumPy refuses it)", e)
        lo, hi = (got.get("a_min"), got.get("a_max")) if has_min else \
            (got.get("min"), got.get("max"))
        loc, x = self.loc(e), self.expr(got["a"])
        lo = None if lo is None or _is_none(lo) else self.expr(lo)
        hi = None if hi is None or _is_none(hi) else self.expr(hi)
        if lo is not None and hi is not None:
            return ["intrinsic", loc, "np.clip", [x, lo, hi]]
        if lo is not None:
            return ["intrinsic", loc, "maximum", [x, lo]]
        if hi is not None:
            return ["intrinsic", loc, "minimum", [x, hi]]
        return ["intrinsic", loc, "np.clip", [x]]

    def template_arg(self, a):
        """The class an argument binds a template parameter to, or None."""
        if isinstance(a, ast.Name) and a.id in self.templates:
            return self.templates[a.id]
        if isinstance(a, ast.Name) and a.id not in self.locals and a.id not in self.unbound:
            obj = self.closure.get(a.id, self.globals.get(a.id))
            if isinstance(obj, type) and intrinsic_of(obj) is None:
                self.record(a.id, obj)
                return obj
        return None

    def device_call(self, target, e):
        fn, fid = target
        code = fn.__code__
        if getattr(fn, "__wrapped__", None) is not None:      # its signature is the wrapper's
            raise self.error(wrapped_message(fn, "Tack"), e)
        if fn.__defaults__ or fn.__kwdefaults__ or code.co_kwonlyargcount or \
                code.co_posonlyargcount or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
            try:                                # the error at the def, not a count at the call
                _FunctionLowerer(self.state, fn, fid, {}, False).check_signature()
            except CompileError as err:
                where = f"{err.filename}, line {err.lineno}" if err.lineno is not None else "?"
                raise self.error(f"'{fn.__name__}' cannot be called from Tack code: "
                                 f"{err.message} (defined at {where})", e) from None
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
            # the class's module too: two modules' classes of one name and text are two classes
            # (their static methods read each module's globals)
            fid += "[" + ",".join(f"{p}={class_id(c)}" for p, c in sorted(bound.items())) + "]"
        if fid == self.state.stack[0]:      # the kernel, first: never a callee, but named alike
            raise self.error(f"device function '{fn.__name__}' has the id '{fid}', which is also "
                             "this kernel's qualified name: Tack records both under it and cannot "
                             "tell them apart; rename the kernel or the function", e)
        if fid in self.state.stack:
            chain = " -> ".join(self.state.stack[self.state.stack.index(fid):] + [fid])
            raise self.error(f"recursion is not supported in Tack code ({chain})", e)
        if fid not in self.state.functions and len(self.state.stack) > MAX_CALL_DEPTH:
            raise self.error(f"device functions call each other more than {MAX_CALL_DEPTH} deep "
                             f"({_chain(self.state.stack + [fid])}); Tack allows at most "
                             f"{MAX_CALL_DEPTH}", e)
        if fid not in self.state.functions:
            self.state.functions[fid] = None        # reserve: keeps insertion order callee-first
            lowered = _FunctionLowerer(self.state, fn, fid, bound, False).run()
            self.state.functions[fid] = lowered
        return ["call", self.loc(e), fid, args]


def _int_literal_value(e, memo):
    """The value of an expression of integer literals alone (``2**63 // 2``, ``3 * 10**9``), as
    Python computes it; None where it is not one, or where Tack's meaning differs from Python's
    (a division by zero, a negative exponent or shift: those are left to run); ``ir.TOO_BIG`` for
    a value (or a step towards it) past ``ir.MAX_LITERAL_BITS`` bits.  ``memo`` ({id(node):
    value}) keeps each node's answer, so that a long chain (``i + 1 + 1 + ...``) is walked once,
    not once per level."""
    v = memo.get(id(e), _MISSING)
    if v is _MISSING:
        v = memo[id(e)] = _literal_step(e, memo)
    return v


_MAX_CHOICE = 8         # a choice of integer literals an operator is distributed over: so many at most


def _choice_leaves(e, memo) -> int:
    """How many integer literal expressions the conditional expression ``e`` chooses among
    (``a if p else (b if q else c)``: 3), where it chooses among such alone and among at most
    ``_MAX_CHOICE``; else 0."""
    if not isinstance(e, ast.IfExp):
        return 0

    n, stack = 0, [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ast.IfExp):
            stack += (x.body, x.orelse)
        elif _int_literal_value(x, memo) in (None, ir.TOO_BIG) or n == _MAX_CHOICE:
            return 0
        else:
            n += 1
    return n


def _operand_value(e, memo):
    """``_int_literal_value`` of an operator's operand: a bool literal too, the integer Python
    makes of it there (``True + True`` is 2; alone, ``True`` stays a bool)."""
    if isinstance(e, ast.Constant) and type(e.value) is bool:
        return e.value
    return _int_literal_value(e, memo)


def _literal_step(e, memo):
    if isinstance(e, ast.Constant):
        return e.value if type(e.value) is int else None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd, ast.Invert)):
        v = _operand_value(e.operand, memo)
        if v is None or v is ir.TOO_BIG:
            return v
        return ir.int_literal_unop(_UNOPS[type(e.op)], v)
    if not isinstance(e, ast.BinOp):
        return None
    a = _operand_value(e.left, memo)
    if a is None:
        return None
    b = _operand_value(e.right, memo)
    if b is None:
        return None
    if a is ir.TOO_BIG or b is ir.TOO_BIG:
        return ir.TOO_BIG
    op = _BINOPS.get(type(e.op))
    return None if op is None else ir.int_literal_op(op, a, b)    # '/' gives a float: None


def _chain(fids) -> str:
    """A call chain as ``a -> b -> c``, its middle left out when it is long."""
    names = [f.split("#", 1)[0].rsplit(".", 1)[-1] for f in fids]
    if len(names) > 6:
        names = names[:3] + [f"... {len(names) - 6} more ..."] + names[-3:]
    return " -> ".join(names)


def _check_assigned_before_use(body, params, src, constants=None):
    """A variable read where some path from the function's start has not assigned it is an error.

    Definite assignment over the control-flow graph of the lowered IR: an ``if``
    joins its branches, a loop's body may run zero times (unless its condition
    is the constant true or its range is a non-empty constant one), ``break``,
    ``continue`` and ``return`` end their paths.  The error names one path on
    which the variable is unassigned; a variable no path assigns before the
    read keeps the plainer message.
    """
    _DefiniteAssignment(src, constants or {}).run(body, params)


class _LoopFrame:
    __slots__ = ("breaks", "continues")

    def __init__(self):
        self.breaks = []        # (state, loc of the break)
        self.continues = []     # state at each continue


class _DefiniteAssignment:
    """State: None where a path cannot reach, else ``{name: why}`` with ``why`` None for a
    variable every path to here assigned, or the conditions (a tuple of texts, outermost
    first) of one path on which it is unassigned; a name absent is assigned on no path."""

    def __init__(self, src, constants):
        self.src = src
        self.constants = constants  # cid -> ir.Constant: a condition or range they decide is known
        self.quiet = 0          # > 0 while a loop's state is still being iterated to its fixed point
        self.loops = []
        self.memo = {}          # (id(loop), quiet, entry state) -> the state after the loop
        # Names whose state may have changed, appended as statements run: an ``if`` joins its
        # branches only over the names they changed (the others are as before it), so a kernel
        # of many variables and many ``if``s is checked in linear work, not variables * ifs.
        self.log = []

    def run(self, body, params):
        self.block(body, {p: None for p in params})

    # -- joining paths --------------------------------------------------------

    @staticmethod
    def join(paths, base=None, changed=None):
        """Join ``[(state, condition, prefix)]``: ``condition`` (or None) is what a path is
        taken on, named where a variable is unassigned on it; it is put before the reasons
        inherited along the path where ``prefix`` is true (an ``if``'s branches, a ``break``).
        With ``base`` (the state every path started from) and ``changed`` (the only names any
        path may have changed), the other names keep their state in ``base``: a variable
        unassigned before an ``if`` that neither branch assigns is unassigned on the path it
        was, whichever branch is taken."""
        live = [p for p in paths if p[0] is not None]
        if not live:
            return None
        if base is not None:
            out = dict(base)
            names = changed
        else:
            out = {}
            names = {n for s, _, _ in live for n in s}
        for name in names:
            if base is not None and not any(name in s for s, _, _ in live):
                continue                # assigned only on paths that end (a return): on none here
            if all(name in s and s[name] is None for s, _, _ in live):
                out[name] = None
                continue
            why = next(((c,) for s, c, _ in live if name not in s and c), None)
            if why is None:
                why = next((((c,) if c and prefix else ()) + s[name]
                            for s, c, prefix in live if name in s and s[name] is not None), ())
            out[name] = why
        return out

    @staticmethod
    def _shape(state):
        return None if state is None else {n: w is None for n, w in state.items()}

    # -- reads and writes -----------------------------------------------------

    def reads(self, e, state):
        if not isinstance(e, list) or not e:
            return
        if e[0] == "name":
            self.read(e, state)
            return
        for part in e[2:]:
            if isinstance(part, list):
                if part and isinstance(part[0], str):
                    self.reads(part, state)
                else:
                    for x in part:
                        self.reads(x, state)

    def read(self, e, state):
        name = e[2]
        if self.quiet or state.get(name, ()) is None:
            return
        if name not in state:
            raise self.src.error(f"variable '{name}' is used before it is assigned", e[1])
        why = " and ".join(c for c in state[name] if c)
        raise self.src.error(f"variable '{name}' may be used before it is assigned: it is "
                             f"unassigned {'when ' + why if why else 'on some path here'}", e[1])

    def targets(self, t, state):
        if t[0] == "name":
            state[t[2]] = None
            self.log.append(t[2])
        elif t[0] == "index":
            self.reads(t[2], state)
            for x in t[3]:
                self.reads(x, state)
        else:
            for x in t[2]:
                self.targets(x, state)

    # -- statements -----------------------------------------------------------

    def block(self, stmts, state):
        """The state after ``stmts`` (None if no path falls through); ``state`` is consumed."""
        for s in stmts:
            if state is None:           # unreachable: after a return, break or continue
                return None
            state = self.stmt(s, state)
        return state

    def truth(self, e):
        """True or False for a condition the compile knows (literals, ``tack.constant`` scalars,
        a constant array's shape, compared and combined: ``gridcheck.static_truth``, the rule
        that rules a branch out when the kernel is typed), None for any other."""
        from ..gridcheck import static_truth
        if not (isinstance(e, list) and e):
            return None
        if e[0] == "const":                 # a literal of any kind (``while 1.0:``)
            return bool(e[2])
        return static_truth(e, self.constants)

    def range_runs(self, args) -> bool:
        """Whether ``range(start, stop, step)`` of bounds the compile knows (literals,
        ``tack.constant`` integers, a constant array's shape: ``range(N)``, ``range(C.shape[0])``)
        has at least one item."""
        from ..gridcheck import static_int
        values = [static_int(a, self.constants) for a in args]
        if any(v is None for v in values):
            return False
        start, stop, step = values
        return step != 0 and len(range(start, stop, step)) > 0

    def _line(self, loc):
        return loc[0] if loc else "?"

    def _keyword(self, loc, default):
        """'elif' where the source line of an 'if' node starts with it."""
        src = self.src
        if loc and 0 <= loc[0] - src.first_line < len(src.lines) and \
                src.lines[loc[0] - src.first_line].lstrip().startswith("elif"):
            return "elif"
        return default

    def stmt(self, s, state):
        kind = s[0]
        if kind == "assign":
            self.reads(s[3], state)
            for t in s[2]:
                self.targets(t, state)
        elif kind == "augassign":
            self.reads(s[3], state)
            self.reads(s[4], state)
            self.targets(s[3], state)
        elif kind == "if":
            self.reads(s[2], state)
            what = f"the '{self._keyword(s[1], 'if')}' at line {self._line(s[1])}"
            test = self.truth(s[2])
            # a branch a constant condition never takes is no path (`if False:` code never runs)
            mark = len(self.log)
            yes = self.block(s[3], dict(state)) if test is not False else None
            no = self.block(s[4], dict(state)) if test is not True else None
            changed = set(self.log[mark:])
            del self.log[mark:]
            self.log.extend(changed)
            return self.join([(yes, f"{what} is true", True), (no, f"{what} is false", True)],
                             base=state, changed=changed)
        elif kind == "while":
            return self.loop(s, state, "while", s[2], s[3], self.truth(s[2]) is True)
        elif kind == "for":
            for x in s[3:6]:
                self.reads(x, state)
            return self.loop(s, state, "for", None, s[6], self.range_runs(s[3:6]), target=s[2])
        elif kind == "return":
            if s[2] is not None:
                self.reads(s[2], state)
            return None
        elif kind == "break":
            self.loops[-1].breaks.append((state, s[1]))
            return None
        elif kind == "continue":
            self.loops[-1].continues.append(state)
            return None
        elif kind == "expr":
            self.reads(s[2], state)
        return state

    def loop(self, s, entry, keyword, cond, body, runs, target=None):
        """The state after a loop; its head's state is iterated to a fixed point first (quietly),
        then the body is read once more with errors raised.

        The result depends only on the loop and the state it is entered with (its breaks and
        continues are its own), so it is remembered for that state: an outer loop iterating
        to its own fixed point enters an inner one with the same state again and again, and
        without the memo each level of nesting would multiply the work (2**depth walks)."""
        key = (id(s), self.quiet > 0, frozenset(entry.items()))
        mark = len(self.log)
        hit = self.memo.get(key, _MISSING)
        if hit is _MISSING:
            hit = self.memo[key] = self._loop(s, entry, keyword, cond, body, runs, target)
        del self.log[mark:]
        if hit is None:
            return None
        self.log.extend(n for n, w in hit.items() if entry.get(n, _MISSING) != w)
        return dict(hit)

    def _loop(self, s, entry, keyword, cond, body, runs, target):
        what = f"the '{keyword}' loop at line {self._line(s[1])}"
        first = f"{what} runs its first iteration"
        head = dict(entry)
        self.quiet += 1
        try:
            for _ in range(len(entry) + 64):
                frame, end = self._body(head, cond, body, target)
                new = self.join([(entry, first, False), (end, None, False)]
                                + [(c, None, False) for c in frame.continues])
                if self._shape(new) == self._shape(head):
                    break
                head = new
        finally:
            self.quiet -= 1
        frame, end = self._body(head, cond, body, target)
        exits = [(state, f"{what} ends at the 'break' at line {self._line(loc)}", True)
                 for state, loc in frame.breaks]
        if not (keyword == "while" and runs):           # a while True loop ends only by a break
            finished = f"{what} ends without a 'break'" if frame.breaks else None
            done = [(end, finished, False)] + [(c, finished, False) for c in frame.continues]
            if runs:
                exits = done + exits
            else:
                exits = [(entry, f"{what} runs zero times", False)] + done + exits
        return self.join(exits)

    def _body(self, head, cond, body, target):
        state = dict(head)
        if cond is not None:
            self.reads(cond, state)
        if target is not None:
            state[target] = None
        frame = _LoopFrame()
        self.loops.append(frame)
        try:
            end = self.block(body, state)
        finally:
            self.loops.pop()
        return frame, end



