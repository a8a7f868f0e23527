"""The lowered kernel: Tack's type-generic IR, and its serialization.

A lowered kernel is what the front end makes of a ``@tack.kernel`` function
for one binding of its template parameters.  It is self-contained: the device
functions it calls (at any depth), the constants it reads and the source
lines needed to point errors at the user's code travel with it, so a variant
can be compiled from the lowered kernel alone, without the front end.  Each
function's file is recorded relative to its import root (``tack.sourcefiles``),
so that a lowered kernel names no path of the machine that made it.

Statements and expressions are nested lists whose first item names the node
and whose second is its location ``[line, column]`` in the user's file::

    stmt  := ["assign", loc, [target...], expr] | ["augassign", loc, op, target, expr]
           | ["if", loc, expr, [stmt...], [stmt...]] | ["while", loc, expr, [stmt...]]
           | ["for", loc, name, start, stop, step, [stmt...]]
           | ["break", loc] | ["continue", loc] | ["return", loc, expr|None] | ["expr", loc, expr]
    target:= ["name", loc, id] | ["index", loc, expr, [expr...]] | ["tuple", loc, [target...]]
    expr  := ["const", loc, value, "int"|"float"|"bool"] | ["name", loc, id] | ["gconst", loc, cid]
           | ["binop", loc, op, a, b] | ["unop", loc, op, a] | ["cmp", loc, [op...], [expr...]]
           | ["boolop", loc, "and"|"or", [expr...]] | ["ifexp", loc, cond, a, b]
           | ["call", loc, fid, [expr...]] | ["intrinsic", loc, name, [expr...]]
           | ["intrinsic", loc, name, [expr...], "math"]   (Python's math function, ir.MATH_FOLDS)
           | ["intrinsic", loc, name, [expr...], "py"]     (Python's abs, min, max: builtin_folded)
           | ["index", loc, expr, [expr...]] | ["tuple", loc, [expr...]]
           | ["tget", loc, expr, k] | ["shape", loc, expr]

Serialization is JSON for the structure plus raw little-endian bytes for
constant arrays: no pickle, nothing evaluated on load.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field

import numpy as np

from .errors import SourceContext
from .digests import hasher
from .limits import JSON_DEPTH, deep
from .sourcefiles import local, portable

FORMAT = 1
_MAGIC = b"TACKLOW1"


# The lowered kernel's JSON.  json's C codec recurses once per nesting level: through Python 3.11
# as deep as ``deep(json=True)`` lets it, but Python 3.12 caps C recursion at about 1,500 levels
# whatever sys.setrecursionlimit says (3.13 at 10,000), so a kernel with an expression some 750
# levels deep, which the bounds allow, raised RecursionError there.  Where the codec gives up,
# the same text is written and read by a loop instead (``_dumps_flat``, ``_loads_flat``), down
# to ``JSON_DEPTH`` levels (deeper is refused, as the codec refuses it under ``deep``).


def _dumps(doc) -> str:
    """``json.dumps(doc, separators=(",", ":"))``, at any depth."""
    try:
        return json.dumps(doc, separators=(",", ":"))
    except RecursionError:
        return _dumps_flat(doc)


def _loads(data: bytes, parse_constant=None):
    """``json.loads(data, parse_constant=parse_constant)``, down to ``JSON_DEPTH`` levels at least;
    RecursionError deeper."""
    try:
        return json.loads(data, parse_constant=parse_constant)
    except RecursionError as e:
        deeper = e
    try:
        return _loads_flat(data.decode("utf-8"), parse_constant)
    except RecursionError:
        raise deeper from None


# JSON's NaN is one NaN: a NaN of another sign or payload (``-math.nan``, a template's or a
# module's attribute, a tack.constant) came back from the cache as this one, and a kernel
# reading it (``math.copysign(1.0, P.K)``, the bits stored) computed otherwise than where it
# was just lowered.  A document holding such a NaN lists the bits of each of its NaNs, in the
# order its text holds them (``nans``), and is read again with each NaN given its bits.
_NAN_BITS = struct.pack("<d", json.loads("NaN"))


def _nan_bits(doc) -> list:
    """The bits (hex) of each NaN in ``doc``, in the order ``_dumps`` writes them."""
    out, todo = [], [doc]
    while todo:
        x = todo.pop()
        if isinstance(x, float):
            if x != x:
                out.append(struct.pack("<d", x).hex())
        elif isinstance(x, (list, tuple)):
            todo.extend(reversed(x))
        elif isinstance(x, dict):
            todo.extend(reversed(list(x.values())))
    return out


class _Raw(str):
    """Text ``_dumps_flat`` writes as it is: punctuation, a dict's key with its colon."""


_COMMA, _CLOSE_LIST, _CLOSE_DICT = _Raw(","), _Raw("]"), _Raw("}")


def _dumps_flat(doc) -> str:
    """``json.dumps(doc, separators=(",", ":"))`` of lists, tuples, dicts and scalars, with a
    stack of what is left to write instead of recursion: the same text."""
    out, todo = [], [doc]
    while todo:
        x = todo.pop()
        if type(x) is _Raw:
            out.append(x)
        elif isinstance(x, (list, tuple)):
            if not x:
                out.append("[]")
                continue
            out.append("[")
            todo.append(_CLOSE_LIST)
            for k in range(len(x) - 1, -1, -1):
                todo.append(x[k])
                if k:
                    todo.append(_COMMA)
        elif isinstance(x, dict):
            if not x:
                out.append("{}")
                continue
            out.append("{")
            todo.append(_CLOSE_DICT)
            items = list(x.items())
            for k in range(len(items) - 1, -1, -1):
                key, value = items[k]
                if not isinstance(key, str):        # json's own text of an int, float... key
                    key = next(iter(json.loads(json.dumps({key: 0}))))
                todo.append(value)
                todo.append(_Raw(json.dumps(key) + ":"))
                if k:
                    todo.append(_COMMA)
        else:
            out.append(json.dumps(x))
    return "".join(out)


# A JSON token after optional white space: punctuation (group 1), or a string, number or
# literal (group 2), which json.loads reads.
_TOKEN = re.compile(r'[ \t\n\r]*(?:([\[\]{},:])|("(?:[^"\\]|\\.)*"'
                    r'|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?'
                    r'|true|false|null|NaN|-?Infinity))')
_SPACE = re.compile(r'[ \t\n\r]*')


def _loads_flat(text: str, parse_constant=None):
    """``json.loads(text, parse_constant=parse_constant)`` with a stack of the open lists and dicts instead of recursion;
    ValueError for text that is not JSON, RecursionError past ``JSON_DEPTH`` levels."""
    stack = []                  # the open containers: [list or dict, the dict's pending key]
    pos, expect = 0, "value"    # value, value or ], key, key or }, colon, comma or close
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"not JSON at character {pos}")
        pos = m.end()
        punct, scalar = m.group(1), m.group(2)
        if expect == "colon":
            if punct != ":":
                raise ValueError(f"expected ':' at character {m.start()}")
            expect = "value"
            continue
        if expect in ("key", "key or }"):
            if scalar is not None and scalar[0] == '"':
                stack[-1][1] = json.loads(scalar)
                expect = "colon"
                continue
            if not (expect == "key or }" and punct == "}"):
                raise ValueError(f"expected a key at character {m.start()}")
            value = stack.pop()[0]
        elif expect == "comma or close":
            top = stack[-1][0]
            if punct == ",":
                expect = "key" if isinstance(top, dict) else "value"
                continue
            if punct != ("}" if isinstance(top, dict) else "]"):
                raise ValueError(f"expected ',' or a close at character {m.start()}")
            value = stack.pop()[0]
        elif punct == "]" and expect == "value or ]":
            value = stack.pop()[0]
        elif punct in ("[", "{"):
            if len(stack) >= JSON_DEPTH:
                raise RecursionError(f"JSON nested more than {JSON_DEPTH} levels")
            stack.append([[] if punct == "[" else {}, None])
            expect = "value or ]" if punct == "[" else "key or }"
            continue
        elif scalar is not None:
            value = json.loads(scalar, parse_constant=parse_constant)
        else:
            raise ValueError(f"expected a value at character {m.start()}")
        if not stack:                               # the document's value is whole
            if _SPACE.match(text, pos).end() != len(text):
                raise ValueError(f"extra data at character {pos}")
            return value
        top = stack[-1]
        if isinstance(top[0], list):
            top[0].append(value)
        else:
            top[0][top[1]] = value
        expect = "comma or close"


@dataclass
class LoweredFunction:
    fid: str                 # unique within the kernel: qualified name plus template bindings
    name: str
    params: list             # parameter names
    body: list               # statements
    source: SourceContext

    def to_json(self):
        s = self.source
        return {"fid": self.fid, "name": self.name, "params": self.params, "body": self.body,
                "qualname": s.name, "file": portable(s.filename), "first": s.first_line,
                "lines": s.lines}

    @classmethod
    def from_json(cls, d):
        # the source's name is the function's qualified name (``Holder.k``, ``make.<locals>.f``),
        # which a specialization error names the kernel by: not the bare ``name``
        src = SourceContext(d.get("qualname", d["name"]), local(d["file"]), d["first"], d["lines"])
        return cls(d["fid"], d["name"], d["params"], d["body"], src)


@dataclass
class Constant:
    """A constant's value as it travels inside a lowered kernel."""

    value: object            # python bool/int/float, or a read-only numpy array

    def to_json(self):
        v = self.value
        if isinstance(v, np.ndarray):
            return {"array": v.dtype.name, "shape": list(v.shape)}
        if isinstance(v, np.generic):
            return {"scalar": v.dtype.name, "value": v.item()}
        return {"py": type(v).__name__, "value": v}


@dataclass
class LoweredKernel:
    kernel: LoweredFunction
    functions: dict                     # fid -> LoweredFunction (device functions)
    constants: dict                     # cid -> Constant
    templates: dict                     # kernel param name -> Template type (types.Template)
    deps: list = field(default_factory=list)  # [scope fid, name, kind, identity]
    debug: bool = False

    @property
    def name(self) -> str:
        return self.kernel.name

    def constant_name(self, cid, fid=None) -> str:
        """The name the constant ``cid`` is read by (from the deps): in function ``fid`` if it
        reads it, else wherever it is read; "constant array" if none is recorded."""
        reads = [d for d in self.deps if d[2] == "const" and "c" + d[3] == cid]
        here = [d for d in reads if d[0] == fid] or reads
        return here[0][1] if here else "constant array"

    def to_bytes(self) -> bytes:
        arrays = [(cid, c.value) for cid, c in sorted(self.constants.items())
                  if isinstance(c.value, np.ndarray)]
        doc = {"format": FORMAT, "kernel": self.kernel.to_json(),
               "functions": [f.to_json() for f in self.functions.values()],
               "constants": {cid: c.to_json() for cid, c in self.constants.items()},
               "templates": {k: [t.qualname, t.fingerprint] for k, t in self.templates.items()},
               "deps": self.deps, "debug": self.debug,
               "arrays": [cid for cid, _ in arrays]}
        with deep(json=True):
            head = _dumps(doc)
            bits = _nan_bits(doc) if "NaN" in head else ()
            if any(bytes.fromhex(b) != _NAN_BITS for b in bits):
                doc["nans"] = bits
                head = _dumps(doc)
        head = head.encode()
        blobs = [np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
                 for _, a in arrays]
        out = [_MAGIC, struct.pack("<QI", len(head), len(blobs)), head]
        for b in blobs:
            out += [struct.pack("<Q", len(b)), b]
        return b"".join(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> "LoweredKernel":
        """Rebuild a lowered kernel; ValueError if ``data`` is not a whole, valid one."""
        try:
            return cls._from_bytes(data)
        except ValueError:
            raise
        except Exception as e:              # noqa: BLE001 - any damage is one kind of error
            raise ValueError(f"damaged lowered kernel ({type(e).__name__}: {e})") from None

    @classmethod
    def _from_bytes(cls, data: bytes) -> "LoweredKernel":
        from .types import Template
        if data[:8] != _MAGIC:
            raise ValueError("not a Tack lowered kernel")
        hlen, nblobs = struct.unpack_from("<QI", data, 8)
        pos = 20
        with deep(json=True):
            doc = _loads(data[pos:pos + hlen])
            if "nans" in doc:                   # NaNs of their own bits (``_nan_bits``)
                bits = iter(doc["nans"])

                def constant(name):
                    if name != "NaN":
                        return float(name)
                    return struct.unpack("<d", bytes.fromhex(next(bits)))[0]
                doc = _loads(data[pos:pos + hlen], constant)
        pos += hlen
        if doc.get("format") != FORMAT:
            raise ValueError(f"lowered kernel format {doc.get('format')} is not {FORMAT}")
        blobs = {}
        for cid in doc["arrays"]:
            (n,) = struct.unpack_from("<Q", data, pos)
            blobs[cid] = data[pos + 8:pos + 8 + n]
            pos += 8 + n
        if len(blobs) != nblobs or pos != len(data):
            raise ValueError("lowered kernel is truncated or has trailing bytes")
        consts = {}
        for cid, c in doc["constants"].items():
            if "array" in c:
                dt = np.dtype(c["array"]).newbyteorder("<")
                arr = np.frombuffer(blobs[cid], dtype=dt).reshape(c["shape"]).astype(dt.newbyteorder("="))
                arr.flags.writeable = False
                consts[cid] = Constant(arr)
            elif "scalar" in c:
                consts[cid] = Constant(np.dtype(c["scalar"]).type(c["value"]))
            else:
                consts[cid] = Constant({"bool": bool, "int": int, "float": float}[c["py"]](c["value"]))
        funcs = [LoweredFunction.from_json(f) for f in doc["functions"]]
        return cls(LoweredFunction.from_json(doc["kernel"]), {f.fid: f for f in funcs}, consts,
                   {k: Template(*v) for k, v in doc["templates"].items()},
                   doc["deps"], doc["debug"])

    def fingerprint(self) -> str:
        return hasher(self.to_bytes()).hexdigest()


TOO_BIG = object()              # an integer literal expression past MAX_LITERAL_BITS: not computed
MAX_LITERAL_BITS = 4096


def builtin_folded(node):
    """A call of Python's ``abs``, ``min`` or ``max`` on number literals alone (``node`` its
    intrinsic node, marked ``"py"``): one literal of the value Python gives (``abs(-2**63)`` is
    2**63, which the same call computed at run time in the literal's int64 wrapped to -2**63
    beside a float); left as it is otherwise (another argument, a NaN, a bool)."""
    args = node[3]
    if node[2] not in ("abs", "min", "max") or not args or (node[2] == "abs") != (len(args) == 1) \
            or not all(a[0] == "const" and a[3] in ("int", "float") and a[2] == a[2] for a in args):
        return node
    v = abs(args[0][2]) if node[2] == "abs" else (min if node[2] == "min" else max)(a[2] for a in args)
    return ["const", node[1], v, "int" if type(v) is int else "float"]


def int_literal_op(op: str, a: int, b: int):
    """``a op b`` (``op`` as the lowered IR names it) of two integer literals as the front end
    folds an expression of integer literals alone: Python's value; None where that is no integer
    or Tack's meaning differs from Python's (a division by zero or a negative shift: left to run
    time; ``/`` and a negative exponent: a float, ``float_folded``'s); ``TOO_BIG`` for a value
    past ``MAX_LITERAL_BITS`` bits.  A bool is the integer Python makes it in arithmetic
    (``True + True`` is 2), but of two bools ``&``, ``|`` and ``^`` give a bool: None then."""
    if type(a) is bool or type(b) is bool:
        if type(a) is bool and type(b) is bool and op in ("&", "|", "^"):
            return None
        a, b = int(a), int(b)
    if op in ("+", "-", "*", "&", "|", "^"):
        v = (a + b if op == "+" else a - b if op == "-" else a * b if op == "*"
             else a & b if op == "&" else a | b if op == "|" else a ^ b)
    elif op in ("//", "%"):
        if b == 0:
            return None
        v = a // b if op == "//" else a % b
    elif op == "**":
        if b < 0:
            return None
        if abs(a) > 1 and (abs(a).bit_length() - 1) * b > MAX_LITERAL_BITS:
            return TOO_BIG
        v = a ** b
    elif op in ("<<", ">>"):
        if b < 0:
            return None
        if op == ">>":
            v = a >> b
        elif a != 0 and a.bit_length() + b > MAX_LITERAL_BITS:
            return TOO_BIG
        else:
            v = a << b
    else:
        return None
    return TOO_BIG if v.bit_length() > MAX_LITERAL_BITS else v


def int_literal_unop(op: str, v: int):
    """``op v`` (``neg``, ``pos`` or ``~``) of an integer literal, as ``int_literal_op``."""
    v = int(v)                          # (a bool's: Python's -True is -1, +True 1)
    return -v if op == "neg" else v if op == "pos" else ~v if op == "~" else None


def int_literal_unfit(value) -> str | None:
    """Why an expression of integer literals alone of ``value`` (``int_literal_op``'s answer) is
    refused, or None where it is one (None) or fits in 64 bits."""
    if value is None or (value is not TOO_BIG and -2**63 <= value < 2**64):
        return None
    shown = "" if value is TOO_BIG or value.bit_length() > 128 else f" is {value}, which"
    return f"this expression of integer literals{shown} does not fit in 64 bits"


def float_folded(node):
    """An operation on number literals alone whose value is a float (``1 / 3``, ``0.5 * 2``,
    ``2 ** 0.5``, ``10 ** -6``, ``-(1 / 3)``): one float literal of the value Python computes (so, as a
    Python float does under NEP 50, weak: ``x * (1 / 3)`` of a float32 ``x`` is a float32, and
    builds where there is no float64).  Left as it is otherwise: integers alone (their own rule,
    ``specialize.literal_value``), what Python refuses or Tack computes its own way (a division
    by zero, ``//`` and ``%``), and a NaN (whose sign ``repr`` does not keep).  The
    front end folds what it lowers, the specializer what putting a literal argument in a device
    function's body makes (``specialize._with_literals``)."""
    if node[0] == "unop":
        a = node[3]
        if (node[2] in ("neg", "pos") and a[0] == "const" and a[3] == "float"
                and not math.isnan(a[2])):
            return ["const", node[1], -a[2] if node[2] == "neg" else a[2], "float"]
        return node
    op, a, b = node[2], node[3], node[4]
    if not (a[0] == b[0] == "const" and a[3] in ("int", "float") and b[3] in ("int", "float")
            and op in ("+", "-", "*", "/", "**")):
        return node
    x, y = a[2], b[2]
    if op != "/" and type(x) is int and type(y) is int and not (op == "**" and y < 0):
        return node                             # integers alone (to a negative power: a float)
    try:
        if op == "/":
            v = x / y if y != 0 else None
        else:
            v = x + y if op == "+" else x - y if op == "-" else x * y if op == "*" else x ** y
    except (OverflowError, ZeroDivisionError, ValueError):
        return node
    if type(v) is not float or math.isnan(v):
        return node
    return ["const", node[1], v, "float"]


# The ``math`` functions whose Python value of number literals is a float: floor, ceil and trunc
# give Python ints (Tack's give floats), the predicates bools.
MATH_FOLDS = frozenset(("sqrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
                        "atan", "sinh", "cosh", "tanh", "fabs", "expm1", "log1p", "erf", "erfc",
                        "cbrt", "pow", "atan2", "hypot", "copysign", "fmod"))


def math_folded(fn, node):
    """A call of Python's ``math`` function ``fn`` (``math.sqrt``) on number literals alone,
    ``node`` its intrinsic node: one float literal of the value ``fn`` gives in Python
    (``math.sqrt(2.0)``), which is a Python float, weak under NEP 50 as ``2 ** 0.5`` is
    (``float_folded``): ``x * math.sqrt(2.0)`` of a float32 ``x`` is a float32.  Left as it is
    where Python raises (``math.sqrt(-1.0)``, ``math.exp(1000.0)``: computed at run time, libm's
    answer), where the value is a NaN or not a float, and for NumPy's functions (``np.sqrt(2.0)``
    is an np.float64, strong), which the caller does not pass."""
    args = node[3]
    if node[2] not in MATH_FOLDS or not args or not all(
            a[0] == "const" and a[3] in ("int", "float") and a[2] == a[2] for a in args):
        return node
    try:
        v = fn(*[a[2] for a in args])
    except (ArithmeticError, ValueError, TypeError):
        return node
    if type(v) is not float or math.isnan(v):
        return node
    return ["const", node[1], v, "float"]


def assignments(stmts):
    """Each local name a lowered function body assigns, once per assignment: targets of
    assignments (tuples unpacked), augmented assignments and for loops, in nested blocks too."""
    def targets(t):
        if t[0] == "name":
            yield t[2]
        elif t[0] == "tuple":
            for x in t[2]:
                yield from targets(x)
    for st in stmts:
        op = st[0]
        if op == "assign":
            for t in st[2]:
                yield from targets(t)
        elif op == "augassign":
            yield from targets(st[3])
        elif op == "for":
            yield st[2]
            yield from assignments(st[6])
        elif op == "if":
            yield from assignments(st[3])
            yield from assignments(st[4])
        elif op == "while":
            yield from assignments(st[3])
