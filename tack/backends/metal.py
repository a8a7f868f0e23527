"""Metal toolchain: a typed kernel -> Metal Shading Language source (docs/level-zero-and-metal.md).

Metal has no LLVM path here, so this target does not take the LLVM module that
``codegen.generate`` builds: it has ``compile_typed(typed_kernel) -> bytes`` (MSL source,
UTF-8), written straight from the typed kernel (``tack.specialize``).  The structured IR
(if / while / for / break / continue / return) maps onto MSL's C++ statements; what differs
from C++ (Python's integer division, modulo, shifts and powers, wrapping signed arithmetic,
saturating float-to-int casts, ``min``/``max`` order, float ``%``) goes through small inline
helpers, emitted only where used.

The kernel ABI for Metal (``kernel void <entry>``):

* ``[[buffer(k)]]`` for the k-th array argument, in order: ``device T*`` (``const device T*``
  for a read-only array; bool arrays as ``uchar``);
* ``[[buffer(A)]]`` (A = the number of arrays): ``constant <entry>_params&``, a struct holding,
  per value argument in order, an array's ``long`` extents (unless its shape is static) and
  strides in elements (layout A only), a scalar as its MSL type (bool as ``bool``, 1 byte);
  then ``long n0, n1, n2``, the grid.  Natural C alignment (``params_layout`` gives offsets and
  size; the source ``static_assert``s the size);
* debug mode: ``[[buffer(A + 1)]]`` ``device atomic_uint*``: the i64[4] error record of
  docs/gpu.md (site + 1 set by a compare-and-swap on its low 32-bit word, little endian);
* ``uint3 [[thread_position_in_grid]]``: the point, grid dimension d on axis ndim-1-d (the
  last on x, where threads are consecutive, as on every GPU target: docs/gpu.md); threads past
  ``n0, n1, n2`` return.

No float64 (Metal has no double): any float64 value, argument or literal promoted to one is a
CompileError at the user's line, naming float64 and the target.  Integer atomics on int32 /
uint32 (add, min, max), float32 atomic add (MSL 3.0's ``atomic_float``); int64 atomics and
float min/max are CompileErrors.  Math through ``metal::``; ``expm1 log1p erf erfc cbrt hypot``
(no MSL function) are CompileErrors.  Compile the source with fast math off
(``MTLCompileOptions.fastMathEnabled = NO``, ``xcrun metal -fno-fast-math``): Tack's float
semantics (NaN comparisons, isnan) need it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import types as T
from ..archs import ArchError
from ..cache.keys import digest
from ..errors import UNSIGNED_INDEX, BoundsSite, CompileError
from ..ir import assignments
from ..limits import deep
from ..specialize import (clip_bound_dropped, clip_limit, isclose_type, math_type, np_isclose_types,
                          power_of_ten)
from .arch_names import KINDS, METAL_FAMILIES
from .argument_layout import GRID, array_fields, field_names

KIND = "metal"
MSL_VERSION = "3.0"
EMITTER_VERSION = 4            # bump when the emitted source changes for the same kernel
                               # (2: the grid's last dimension on x)

_CTYPE = {"bool": "bool", "int32": "int", "int64": "long", "uint32": "uint", "uint64": "ulong",
          "float32": "float"}
_UNSIGNED = {"int": "uint", "long": "ulong", "uint": "uint", "ulong": "ulong"}
_WIDTH = {"int": 32, "long": 64, "uint": 32, "ulong": 64}
_LIMITS = {"int": ("(-2147483647 - 1)", "2147483647", "2147483648.0f", "-2147483648.0f"),
           "long": ("(-9223372036854775807L - 1L)", "9223372036854775807L",
                    "9223372036854775808.0f", "-9223372036854775808.0f"),
           "uint": ("0u", "4294967295u", "4294967296.0f", "0.0f"),
           "ulong": ("0UL", "18446744073709551615UL", "18446744073709551616.0f", "0.0f")}
# Tack's math -> MSL (metal_stdlib); the rest have no MSL function.
_MATH = {"sqrt": "metal::sqrt", "exp": "metal::exp", "log": "metal::log", "log2": "metal::log2",
         "log10": "metal::log10", "sin": "metal::sin", "cos": "metal::cos", "tan": "metal::tan",
         "asin": "metal::asin", "acos": "metal::acos", "atan": "metal::atan",
         "sinh": "metal::sinh", "cosh": "metal::cosh", "tanh": "metal::tanh",
         "floor": "metal::floor", "ceil": "metal::ceil", "trunc": "metal::trunc",
         "fabs": "metal::fabs", "pow": "metal::pow", "atan2": "metal::atan2",
         "copysign": "metal::copysign", "fmod": "metal::fmod"}


# NumPy's and Python's functions that MSL has none of, as codegen.py computes them (its clip,
# sign, isclose): template helpers, so that each argument is evaluated once (np.where's both),
# by intrinsic: (the helper's name, its source).
_HELPERS = {
    "np.where": ("tack_where", "template <typename T> static inline T tack_where(bool c, T a, T b) "
                               "{ return c ? a : b; }"),
    "np.clip": ("tack_clip", "template <typename T> static inline T tack_clip(T x, T lo, T hi) "
                             "{ T m = x < lo ? lo : x; m = m > hi ? hi : m; "
                             "return lo != lo ? lo : hi != hi ? hi : m; }"),
    "np.sign": ("tack_sign", "template <typename T> static inline T tack_sign(T x) "
                             "{ return x > T(0) ? T(1) : x < T(0) ? T(-1) : x == T(0) ? T(0) : x; }"),
    "isclose": ("tack_isclose",
                "template <typename T> static inline bool tack_isclose(T a, T b, T rel, T tol) "
                "{ if (a == b) return true; if (metal::isinf(a) || metal::isinf(b)) return false; "
                "T d = metal::fabs(b - a); "
                "return d <= metal::fabs(rel * b) || d <= metal::fabs(rel * a) || d <= tol; }"),
    # each step in its type (specialize.np_isclose_types): b as the difference's, the
    # product's and its own; the comparison in the wider of its sides', as C++ converts them
    "np.isclose": ("tack_np_isclose",
                   "template <typename D, typename P, typename R, typename F> static inline bool "
                   "tack_np_isclose(D a, D b, P rtol, P bp, R atol, F bf, bool equal_nan) "
                   "{ return (metal::fabs(a - b) <= atol + R(rtol * metal::fabs(bp)) && "
                   "metal::isfinite(bf)) || a == b || "
                   "(equal_nan && metal::isnan(a) && metal::isnan(b)); }"),
}


class Unsupported(Exception):
    """A feature Metal (or this emitter) cannot compile; reported at the user's line."""


def settings(arch: str) -> dict:
    """What the emitted source depends on: the MSL version, the emitter's version, the family."""
    if arch not in METAL_FAMILIES:
        raise ArchError(f"metal:{arch}: Tack emits MSL {MSL_VERSION} for "
                        f"{', '.join('metal:' + f for f in METAL_FAMILIES)}")
    return {"msl": MSL_VERSION, "emitter": EMITTER_VERSION, "family": arch, "fast_math": "off"}


def key_for(name: str) -> str:
    """Target key of MSL source emitted for ``metal:<family>`` (no LLVM in it: none is used)."""
    kind, _, arch = name.partition(":")
    if kind != KIND:
        raise ArchError(f"{name}: not a metal: architecture")
    return digest("target", ("backend", KIND), ("arch", arch), ("codegen", settings(arch)))


def ctype(t: T.Scalar) -> str:
    t = t.strong()
    if t.name == "float64":
        raise Unsupported("float64 (Metal has no double precision)")
    return _CTYPE[t.name]


def storage(t: T.Scalar) -> str:
    return "uchar" if t.kind == "b" else ctype(t)


_ALIGN = {"bool": 1, "int": 4, "uint": 4, "float": 4, "long": 8, "ulong": 8}


def params_layout(argtypes) -> tuple[list, int]:
    """([(member, MSL type, offset)], size) of the params struct for these value argument types:
    per argument an array's fields (``a<k>_n<d>``, ``a<k>_s<d>``) or a scalar (``a<k>``), then
    ``n0 n1 n2``; natural C alignment.  The runtime packs launches with it."""
    members = []
    for k, t in enumerate(argtypes):
        if isinstance(t, T.Array):
            members += [(f"a{k}_{f}", "long") for f in field_names(t)]
        else:
            members.append((f"a{k}", ctype(t)))
    members += [(n, "long") for n in GRID]
    out, off, align = [], 0, 1
    for name, ty in members:
        a = _ALIGN[ty]
        off = -(-off // a) * a
        out.append((name, ty, off))
        off += a if ty != "bool" else 1
        align = max(align, a)
    return out, -(-off // align) * align


@dataclass
class MSLGenerated:
    source: str
    entry: str
    sites: list = field(default_factory=list)


class MetalTarget:
    """``metal:<family>``: MSL source from a typed kernel (``compile_typed``)."""

    kind = KIND
    suffix = ".metal"
    machine_name = KINDS["metal"].machine     # the registry's: its bundles' file names
    emits_source = True             # tack.compiler: MSL from the typed kernel (``generate``), no LLVM
    has_float64 = False

    def __init__(self, arch: str):
        self.arch = arch
        self.settings = settings(arch)
        self.key = key_for(f"{KIND}:{arch}")

    @property
    def name(self) -> str:
        return f"{KIND}:{self.arch}"

    def __repr__(self):
        return f"<MetalTarget {self.name}>"

    def identity(self) -> dict:
        ident = {"backend": KIND}
        ident.update({k: str(v) for k, v in self.settings.items()})
        return ident

    def generate(self, tk, symbol_prefix: str = "tack") -> MSLGenerated:
        with deep():
            return generate_msl(tk, self, symbol_prefix)

    def compile_typed(self, tk, symbol_prefix: str = "tack") -> bytes:
        """The typed kernel -> MSL source (UTF-8) with entry ``<symbol_prefix>_entry``."""
        return self.generate(tk, symbol_prefix).source.encode("utf-8")

    def compile(self, module):
        raise CompileError("the metal target emits MSL from the typed kernel "
                           "(target.compile_typed), not from an LLVM module")


def target(name: str) -> MetalTarget:
    """``metal:apple`` (any Apple GPU), ``metal:apple7``..., ``metal:mac2``."""
    kind, _, arch = name.partition(":")
    if kind != KIND or not arch:
        raise ArchError(f"{name}: the Metal toolchain builds metal:<family> archs "
                        f"({', '.join('metal:' + f for f in METAL_FAMILIES)})")
    return MetalTarget(arch)


# ---------------------------------------------------------------------------
# The emitter

def _tuple_name(t) -> str:
    parts = []
    for x in t.items:
        if isinstance(x, T.Tuple):
            parts.append(_tuple_name(x)[len("tack_tuple_"):] + "_")
        elif isinstance(x, T.Scalar):
            parts.append(ctype(x))
        else:
            raise Unsupported("a tuple holding an array")
    return "tack_tuple_" + "_".join(parts) if parts else "tack_tuple_empty"


class _WeakFloat(str):
    """A weak float literal's MSL text (float32: cast where it is used), with its exact value
    (``value``): converted to an integer or a bool at compile time, as the CPU converts the
    double, not from the float32 text (``16777217.0`` is not ``16777216``, ``1e-50`` not 0)."""

    value: float

    def __new__(cls, text, value):
        s = super().__new__(cls, text)
        s.value = value
        return s


def _float_literal(v) -> str:
    with np.errstate(over="ignore"):            # past float32: its infinity
        v = float(np.float32(v))
    if v != v:      # a NaN of another sign or payload (-NaN) as its bits: NAN is one NaN
        bits = int(np.float32(v).view(np.uint32))
        return "NAN" if bits == 0x7FC00000 else f"as_type<float>({bits:#010x}u)"
    if v in (float("inf"), float("-inf")):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f" if math.copysign(1.0, v) > 0 else f"({text}f)"     # -0.0 in parentheses too


def _int_literal(v: int, ct: str) -> str:
    lo, hi = _LIMITS[ct][:2]
    if ct == "long" and v == -2**63:
        return lo
    if ct == "int" and v == -2**31:
        return lo
    suffix = {"int": "", "long": "L", "uint": "u", "ulong": "UL"}[ct]
    return f"{v}{suffix}" if v >= 0 else f"({v}{suffix})"


def _simple(s: str) -> bool:
    return s.replace("_", "").replace(".", "").isalnum() or s.lstrip("-").replace(".", "").isdigit()


class _Module:
    def __init__(self, tk, target, prefix):
        self.tk, self.target, self.prefix = tk, target, prefix
        self.helpers = {}          # name -> source, in first-use order
        self.tuples = {}           # name -> source
        self.consts = {}           # cid -> (name, source)
        self.functions = {}        # id(TypedFunction) -> name
        self.sites = []
        self.debug = tk.debug

    def where(self) -> str:
        return self.target.name

    # -- helpers, emitted where used
    def helper(self, name, source):
        if name not in self.helpers:
            self.helpers[name] = source
        return name

    def tuple_type(self, t) -> str:
        name = _tuple_name(t)
        if name not in self.tuples:
            members = []
            for i, x in enumerate(t.items):
                members.append(f"{self.tuple_type(x) if isinstance(x, T.Tuple) else ctype(x)} v{i};")
            self.tuples[name] = f"struct {name} {{ {' '.join(members)} }};"
        return name

    def const_array(self, cid):
        if cid not in self.consts:
            arr = self.tk.lowered.constants[cid].value
            st = T.from_dtype(arr.dtype)
            name = f"tack_const_{len(self.consts)}"
            flat = arr.ravel(order="C")
            if st.kind == "b":
                items = ["1" if x else "0" for x in flat]
            elif st.kind == "f":
                items = [_float_literal(x) for x in flat]
            else:
                items = [_int_literal(int(x), ctype(st)) for x in flat]
            lines, row = [], []
            for i, x in enumerate(items):
                row.append(x)
                if len(row) == 16 or i == len(items) - 1:
                    lines.append("    " + ", ".join(row) + ",")
                    row = []
            src = f"constant {storage(st)} {name}[{max(1, len(items))}] = {{\n" + \
                "\n".join(lines) + "\n};"
            self.consts[cid] = (name, src)
        return self.consts[cid][0]

    def array_type(self, t: T.Array, space: str) -> str:
        return f"tack_array<{space} {storage(t.dtype)}*, {array_fields(t)}>"


_PRELUDE = """\
#include <metal_stdlib>
#include <metal_atomic>
using namespace metal;

template <typename P, int K> struct tack_array { P p; long f[K]; };
template <typename P> struct tack_array<P, 0> { P p; };
"""


# The buffer argument table of a Metal kernel: indices 0 to 30 on every Apple GPU family.
METAL_BUFFERS = 31


def generate_msl(tk, target, symbol_prefix="tack") -> MSLGenerated:
    """The MSL source of a typed kernel for ``target``, entry ``<symbol_prefix>_entry``."""
    mod = _Module(tk, target, symbol_prefix)
    src = tk.lowered.kernel.source
    for name, t in zip(tk.lowered.kernel.params, tk.argtypes):
        dt = t.dtype if isinstance(t, T.Array) else t
        if isinstance(dt, T.Scalar) and dt.strong().name == "float64":
            what = (f"parameter '{name}' is a float64 array; pass a float32 one "
                    f"({name}.astype(np.float32))" if isinstance(t, T.Array) else
                    f"parameter '{name}' is float64; a Python float argument is float64, pass "
                    "np.float32")
            err = src.error(f"float64 (Metal has no double precision) is not supported on "
                            f"{target.name}: {what}", src.parameter_loc(name) or (src.first_line, 0))
            raise err.with_kernel(tk.name)
    arrays = sum(isinstance(t, T.Array) for t in tk.argtypes)
    most = METAL_BUFFERS - 1 - bool(tk.debug)   # one buffer holds the other arguments, one the error record
    if arrays > most:
        err = src.error(f"{arrays} array arguments: Metal binds at most {METAL_BUFFERS} buffers to a "
                        f"kernel, so at most {most} arrays on {target.name}"
                        + (" in debug mode" if tk.debug else "")
                        + " (one buffer holds the other arguments"
                        + (", one the debug error record" if tk.debug else "")
                        + "); pass fewer arrays (stack those of one dtype and shape into one)",
                        (src.first_line, 0))
        raise err.with_kernel(tk.name)
    bodies = []
    try:
        for i, tf in enumerate(tk.functions):
            mod.functions[id(tf)] = f"{symbol_prefix}_fn{i}_{tf.lowered.name}"
        mod.functions[id(tk.kernel)] = f"{symbol_prefix}_kernel"
        for tf in tk.functions + [tk.kernel]:
            try:
                bodies.append(_Function(mod, tf).emit())
            except Unsupported as u:        # in a signature: the function's first line
                fsrc = tf.lowered.source
                raise fsrc.error(f"{u} is not supported on {target.name} (in '{tf.lowered.name}')",
                                 (fsrc.first_line, 0)) from None
    except CompileError as e:
        raise e.with_kernel(tk.name) from None
    entry = f"{symbol_prefix}_entry"
    entry_src = _entry(mod, entry)
    out = [f"// Tack {KIND}:{target.arch}: MSL {MSL_VERSION}, emitter {EMITTER_VERSION}; kernel "
           f"'{tk.name}', entry {entry}.", "// Compile with fast math off (-fno-fast-math).",
           _PRELUDE]
    for part in (list(mod.tuples.values()), [s for _, s in mod.consts.values()],
                 list(mod.helpers.values())):
        if part:
            out.append("\n".join(part) + "\n")
    out += bodies
    out.append(entry_src)
    return MSLGenerated("\n".join(out), entry, mod.sites)


def _entry(mod, entry) -> str:
    tk = mod.tk
    members, size = params_layout(tk.argtypes)
    ptype = f"{entry}_params"
    lines = [f"struct {ptype} {{"]
    lines += [f"    {ty} {name};" for name, ty, _ in members]
    lines += ["};", f"static_assert(sizeof({ptype}) == {size}, \"Tack's params layout\");", ""]
    params, args, nbuf = [], [], 0
    for k, t in enumerate(tk.argtypes):
        if isinstance(t, T.Array):
            space = "device" if t.writable else "const device"
            params.append(f"{space} {storage(t.dtype)}* a{k} [[buffer({nbuf})]]")
            nbuf += 1
            fields = [f"tack_p.a{k}_{f}" for f in field_names(t)]
            init = f"a{k}" + (", {" + ", ".join(fields) + "}" if fields else "")
            args.append(f"{mod.array_type(t, space)}{{{init}}}")
        else:
            args.append(f"tack_p.a{k}")
    params.append(f"constant {ptype}& tack_p [[buffer({nbuf})]]")
    if tk.debug:
        params.append(f"device atomic_uint* tack_err [[buffer({nbuf + 1})]]")
    params.append("uint3 tack_gid [[thread_position_in_grid]]")
    lines.append(f"kernel void {entry}(")
    lines.append(",\n".join("    " + p for p in params) + ")")
    lines.append("{")
    # Grid dimension d from axis ndim-1-d: the last on x, where threads are consecutive
    # (device_args.hardware_launch, which the runtime dispatches by); the unused axes are 0.
    from .device_args import hardware_axis
    g = tk.grid_ndim
    axes = "xyz"
    ids = (f"tack_i{d} = (long)tack_gid.{axes[hardware_axis(d, g)]}" for d in range(g))
    lines.append("    const long " + ", ".join(ids) + ";")
    past = [f"tack_i{d} >= tack_p.n{d}" for d in range(g)] + [f"tack_gid.{a} != 0" for a in axes[g:]]
    lines.append(f"    if ({' || '.join(past)}) return;")
    call = args + [f"tack_i{d}" for d in range(tk.grid_ndim)] + (["tack_err"] if tk.debug else [])
    lines.append(f"    {mod.functions[id(tk.kernel)]}({', '.join(call)});")
    lines.append("}")
    return "\n".join(lines) + "\n"


class _Function:
    def __init__(self, mod: _Module, tf):
        self.mod, self.tf = mod, tf
        self.types = tf.types
        self.src = tf.lowered.source
        self.lines = []
        self.pre = None            # statements an expression needs first (a list), or None
        self.tmp = 0
        self.depth = 1

    def error(self, u, node):
        return self.src.error(f"{u} is not supported on {self.mod.where()}", node[1] if node else None)

    def fresh(self, what="t"):
        self.tmp += 1
        return f"tack_{what}{self.tmp}"

    def out(self, line):
        self.lines.append("    " * self.depth + line)

    # -- the function
    def emit(self) -> str:
        tf, mod = self.tf, self.mod
        name = mod.functions[id(tf)]
        params, templates = [], []
        self.arrays = {}          # parameter name -> its Tack array type
        for pname, t in zip(tf.lowered.params, tf.argtypes):
            if isinstance(t, T.Array):
                if tf.is_kernel:
                    ty = mod.array_type(t, "device" if t.writable else "const device")
                else:
                    ty = f"A{len(templates)}"
                    templates.append(f"typename {ty}")
                params.append(f"{ty} v_{pname}")
                self.arrays[pname] = t
            elif isinstance(t, T.Tuple):
                params.append(f"{self.type_of(t)} v_{pname}")
            else:
                params.append(f"{self.type_of(t)} v_{pname}")
        if tf.is_kernel:
            params += [f"long tack_tid{d}" for d in range(mod.tk.grid_ndim)]
        if mod.debug:
            params.append("device atomic_uint* tack_err")
        if tf.is_kernel or tf.ret is None:
            ret = "void"
        else:
            try:
                ret = self.type_of(tf.ret)
            except Unsupported as u:
                raise self.error(u, ["def", [self.src.first_line, 0]]) from None
        rebound = set(assignments(tf.lowered.body))
        for pname in self.arrays:
            if pname in rebound:
                raise self.error("assigning to an array parameter", ["def", [self.src.first_line, 0]])
        for lname, t in tf.locals.items():
            if lname in tf.lowered.params:
                continue
            if isinstance(t, T.Array):
                raise self.error(f"an array held in a local variable ('{lname}')",
                                 ["def", [self.src.first_line, 0]])
            try:
                self.out(f"{self.type_of(t)} v_{lname} = {{}};")
            except Unsupported as u:
                raise self.error(f"{u}: variable '{lname}'", ["def", [self.src.first_line, 0]]) from None
        # parameters that the body rebinds are copies already (C++ passes by value)
        self.block(tf.lowered.body)
        if ret != "void":
            self.out(f"return {ret}{{}};")
        head = (f"template <{', '.join(templates)}>\n" if templates else "") + \
            f"static inline {ret} {name}({', '.join(params)})"
        return head + "\n{\n" + "\n".join(self.lines) + "\n}\n"

    def type_of(self, t) -> str:
        if isinstance(t, T.Tuple):
            return self.mod.tuple_type(T.Tuple(tuple(x.strong() if isinstance(x, T.Scalar) else x
                                                     for x in t.items)))
        if isinstance(t, T.Array):
            raise Unsupported("an array value here")
        return ctype(t)

    # -- statements
    def block(self, stmts):
        for s in stmts:
            try:
                getattr(self, "_s_" + s[0])(s)
            except Unsupported as u:
                raise self.error(u, s) from None

    def expr_stmt(self, e):
        """An expression evaluated at statement level: any statements it needs come first."""
        return self.in_stmt(lambda: self.expr(e))

    def in_stmt(self, make):
        """``make()`` (MSL text) with the statements it needs written out first."""
        saved, self.pre = self.pre, []
        try:
            v = make()
        finally:
            pre, self.pre = self.pre, saved
        for line in pre:
            self.out(line)
        return v

    def _s_expr(self, s):
        v = self.expr_stmt(s[2])
        if v:
            self.out(f"(void)({v});")

    def _s_assign(self, s):
        vt = self.types[id(s[3])]
        value = self.expr_stmt(s[3])
        targets = s[2]
        if len(targets) > 1 or isinstance(vt, T.Tuple) and not _simple(value):
            tmp = self.fresh()
            self.out(f"{self.type_of(vt) if not isinstance(vt, T.Array) else 'auto'} {tmp} = {value};")
            value = tmp
        for tgt in targets:
            self.assign(tgt, value, vt)

    def assign(self, tgt, value, vt):
        kind = tgt[0]
        if kind == "name":
            lt = self.tf.locals[tgt[2]]
            if isinstance(lt, T.Array):
                raise Unsupported(f"an array held in a local variable ('{tgt[2]}')")
            self.out(f"v_{tgt[2]} = {self.cast(value, vt, lt)};")
        elif kind == "index":
            et = self.types[id(tgt)]
            ref = self.in_stmt(lambda: self.element(tgt[2], tgt[3], tgt))
            self.store(ref, self.cast(value, vt, et), et)
        else:
            for i, (sub, x) in enumerate(zip(tgt[2], vt.items)):
                self.assign(sub, f"{value}.v{i}", x)

    def store(self, ref, value, et):
        self.out(f"{ref} = {'(uchar)(' + value + ')' if et.kind == 'b' else value};")

    def _s_augassign(self, s):
        op, tgt, rhs = s[2], s[3], s[4]
        rt = self.types[id(rhs)]
        if tgt[0] == "name":
            cur_t = self.tf.locals[tgt[2]]
            value = self.expr_stmt(rhs)
            res, res_t = self.arith(op, f"v_{tgt[2]}", cur_t, value, rt)
            self.out(f"v_{tgt[2]} = {self.cast(res, res_t, cur_t)};")
        else:
            et = self.types[id(tgt)]
            saved, self.pre = self.pre, []
            ref = self.element(tgt[2], tgt[3], tgt)
            value = self.expr(rhs)
            pre, self.pre = self.pre, saved
            for line in pre:
                self.out(line)
            ptr = self.fresh("p")
            self.out(f"device auto& {ptr} = {ref};")
            cur = f"({ptr} != 0)" if et.kind == "b" else ptr
            res, res_t = self.arith(op, cur, et, value, rt)
            self.store(ptr, self.cast(res, res_t, et), et)

    def _s_if(self, s):
        cond = self.truth_stmt(s[2])
        self.out(f"if ({cond}) {{")
        self.nested(s[3])
        if s[4]:
            self.out("} else {")
            self.nested(s[4])
        self.out("}")

    def nested(self, stmts):
        self.depth += 1
        self.block(stmts)
        self.depth -= 1

    def truth_stmt(self, e):
        saved, self.pre = self.pre, []
        v = self.truth(e)
        pre, self.pre = self.pre, saved
        for line in pre:
            self.out(line)
        return v

    def _s_while(self, s):
        saved, self.pre = self.pre, []
        cond = self.truth(s[2])
        pre, self.pre = self.pre, saved
        if not pre:
            self.out(f"while ({cond}) {{")
        else:
            self.out("while (true) {")
            for line in pre:
                self.out("    " + line)
            self.out(f"    if (!({cond})) break;")
        self.nested(s[3])
        self.out("}")

    def _s_for(self, s):
        vt = self.tf.locals[s[2]]
        ct = ctype(vt)
        start, stop, step = (self.cast(self.expr_stmt(x), self.types[id(x)], vt) for x in s[3:6])
        c, n, st, ov = self.fresh("i"), self.fresh("stop"), self.fresh("step"), self.fresh("ov")
        signed = vt.kind == "i"
        step_fn = self.step_helper(ct, signed)
        go = (f"({st} > 0 ? {c} < {n} : {c} > {n})" if signed else f"{c} < {n}")
        self.out(f"{{ const {ct} {n} = {stop}; const {ct} {st} = {step}; bool {ov} = false;")
        self.out(f"for ({ct} {c} = {start}; !{ov} && {go}; {ov} = {step_fn}({c}, {st})) {{")
        self.depth += 1
        self.out(f"v_{s[2]} = {c};")
        self.block(s[6])
        self.depth -= 1
        self.out("} }")

    def _s_break(self, s):
        self.out("break;")

    def _s_continue(self, s):
        self.out("continue;")

    def _s_return(self, s):
        if s[2] is None or self.tf.is_kernel:
            if self.tf.ret is None or self.tf.is_kernel:
                self.out("return;")
            else:
                self.out(f"return {self.type_of(self.tf.ret)}{{}};")
            return
        v = self.expr_stmt(s[2])
        self.out(f"return {self.cast(v, self.types[id(s[2])], self.tf.ret)};")

    # -- expressions: each returns MSL text of the expression's (strong) type
    def expr(self, e):
        t = self.types.get(id(e))
        try:
            if t == T.float64:          # a weak float literal takes the other operand's type
                raise Unsupported("float64 (Metal has no double precision)")
            return getattr(self, "_e_" + e[0])(e)
        except Unsupported as u:
            raise self.error(u, e) from None

    def hoist(self, value, t):
        """``value`` in a temporary (a statement before the current one) unless it is simple."""
        if _simple(value) or self.pre is None:
            return value
        tmp = self.fresh()
        self.pre.append(f"const {self.type_of(t) if not isinstance(t, T.Array) else 'auto'} "
                        f"{tmp} = {value};")
        return tmp

    def _e_const(self, e):
        t = self.types[id(e)]
        if t.kind == "f":               # float32 text; a weak literal is cast where it is used
            return _WeakFloat(_float_literal(e[2]), float(e[2])) if t.weak else _float_literal(e[2])
        t = t.strong()
        ct = ctype(t)
        if t.kind == "b":
            return "true" if e[2] else "false"
        if t.kind == "f":
            return _float_literal(e[2])
        return _int_literal(int(e[2]), ct)

    def _e_name(self, e):
        return f"v_{e[2]}"

    def _e_gconst(self, e):
        t = self.types[id(e)]
        value = self.mod.tk.lowered.constants[e[2]].value
        if isinstance(t, T.Array):
            return f"{self.mod.array_type(t, 'constant')}{{{self.mod.const_array(e[2])}}}"
        v = value.item() if hasattr(value, "item") else value
        if t.kind == "b":
            return "true" if v else "false"
        if t.kind == "f":
            return _float_literal(v)
        return _int_literal(int(v), ctype(t))

    def _e_tuple(self, e):
        t = self.types[id(e)]
        items = [self.cast(self.expr(x), self.types[id(x)], it.strong() if isinstance(it, T.Scalar) else it)
                 for x, it in zip(e[2], t.items)]
        return f"{self.type_of(t)}{{{', '.join(items)}}}"

    def _e_shape(self, e):
        arr = self.types[id(e[2])]
        ext = self.geometry(e[2], arr)[1]
        return f"{self.type_of(T.Tuple((T.int64,) * arr.ndim))}{{{', '.join(ext)}}}"

    def _e_tget(self, e):
        return f"{self.tuple_value(e[2])}.v{e[3] % len(self.types[id(e[2])].items)}"

    def tuple_value(self, node):
        return self.hoist(self.expr(node), self.types[id(node)])

    def _e_binop(self, e):
        a, b = self.expr(e[3]), self.expr(e[4])
        return self.arith(e[2], a, self.types[id(e[3])], b, self.types[id(e[4])])[0]

    def _e_unop(self, e):
        op, t = e[2], self.types[id(e[3])]
        v = self.expr(e[3])
        if op == "not":
            return f"(!{self.to_bool(v, t)})"
        if op in ("neg", "pos") and t.kind == "f" and t.weak:
            if op == "pos":
                return v                                # a weak float: cast where it is used
            return _WeakFloat(f"(-{v})", -v.value) if isinstance(v, _WeakFloat) else f"(-{v})"
        rt = self.types[id(e)].strong()
        v = self.cast(v, t, rt)
        if op == "pos":
            return v
        ct = ctype(rt)
        if op == "~":
            return f"(!{v})" if rt.kind == "b" else f"(({ct})~{v})"
        if rt.kind == "f":
            return f"(-{v})"
        if rt.kind == "i":
            return f"(({ct})(({_UNSIGNED[ct]})0 - ({_UNSIGNED[ct]}){v}))"
        return f"(({ct})0 - {v})"

    def _e_cmp(self, e):
        ops, operands = e[2], e[3]
        values = [self.expr(x) for x in operands]
        ts = [self.types[id(x)] for x in operands]
        if len(ops) > 1:                 # every operand evaluated once
            values = [values[0]] + [self.hoist(v, t.strong()) for v, t in zip(values[1:-1], ts[1:-1])] \
                + [values[-1]]
        parts = [self.compare(op, a, ta, b, tb)
                 for op, a, ta, b, tb in zip(ops, values, ts, values[1:], ts[1:])]
        return parts[0] if len(parts) == 1 else "(" + " & ".join(parts) + ")"

    def compare(self, op, a, ta, b, tb):
        sa, sb = ta.strong(), tb.strong()
        if {sa.kind, sb.kind} == {"i", "u"} and T.promote(ta, tb).kind == "f":
            if sa.kind == "u":
                op = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}[op]
                a, b, sa, sb = b, a, sb, sa
            name = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}[op]
            below = "true" if op in ("<", "<=", "!=") else "false"
            h = self.mod.helper(f"tack_cmpmix_{name}",
                                f"static inline bool tack_cmpmix_{name}(long a, ulong b) "
                                f"{{ return a < 0 ? {below} : (ulong)a {op} b; }}")
            return f"{h}({self.cast(a, ta, T.int64)}, {self.cast(b, tb, T.uint64)})"
        t = T.promote(ta, tb).strong()
        return f"({self.cast(a, ta, t)} {op} {self.cast(b, tb, t)})"

    def _e_boolop(self, e):
        if self.types[id(e)].strong().kind != "b":
            return self.boolop_value(e)
        op = " && " if e[2] == "and" else " || "
        saved, self.pre = self.pre, []
        parts, pres = [], []
        for x in e[3]:
            self.pre = []
            parts.append(self.truth(x))
            pres.append(self.pre)
        self.pre = saved
        if not any(pres[1:]):
            for line in pres[0]:
                self._pre(line)
            return "(" + op.join(parts) + ")"
        # an operand needs statements: short-circuit with statements
        res = self.fresh("b")
        for line in pres[0]:
            self._pre(line)
        self._pre(f"bool {res} = {parts[0]};")
        for p, pre in zip(parts[1:], pres[1:]):
            inner = " ".join(pre + [f"{res} = {p};"])
            self._pre(f"if ({'' if e[2] == 'and' else '!'}{res}) {{ {inner} }}")
        return res

    def boolop_value(self, e):
        """``a or b`` of numbers (``codegen.boolop_value``): the first operand that is true
        (``and``: false), else the last, in the common type; later operands are not evaluated."""
        st = self.types[id(e)].strong()
        res = self.fresh()
        self._pre(f"{self.type_of(st)} {res};")
        saved, tail = self.pre, None
        for x in reversed(e[3]):                # innermost (the last operand) first
            self.pre = []
            t = self.types[id(x)]
            v = self.expr(x)
            if tail is None:
                self.pre.append(f"{res} = {self.cast(v, t, st)};")
            else:
                v = self.hoist(v, t.strong()) if not isinstance(v, _WeakFloat) else v
                test = self.to_bool(v, t)
                self.pre.append(f"{res} = {self.cast(v, t, st)};")
                self.pre.append(f"if ({'' if e[2] == 'and' else '!'}{test}) {{ {' '.join(tail)} }}")
            tail = self.pre
        self.pre = saved
        for line in tail:
            self._pre(line)
        return res

    def _pre(self, line):
        if self.pre is None:
            raise Unsupported("this expression here")
        self.pre.append(line)

    def _e_ifexp(self, e):
        rt = self.types[id(e)]
        st = rt.strong() if isinstance(rt, T.Scalar) else rt
        cond = self.truth(e[2])
        saved, self.pre = self.pre, []
        a = self.cast(self.expr(e[3]), self.types[id(e[3])], st)
        pa, self.pre = self.pre, []
        b = self.cast(self.expr(e[4]), self.types[id(e[4])], st)
        pb, self.pre = self.pre, saved
        if not pa and not pb:
            return f"({cond} ? {a} : {b})"
        res = self.fresh()
        self._pre(f"{self.type_of(st)} {res};")
        self._pre(f"if ({cond}) {{ {' '.join(pa + [f'{res} = {a};'])} }} else "
                  f"{{ {' '.join(pb + [f'{res} = {b};'])} }}")
        return res

    def _e_call(self, e):
        callee = self.tf.callees[id(e)]
        args = []
        for x, pt in zip(callee.call_args(e[3]), callee.argtypes):
            args.append(self.cast(self.expr(x), self.types[id(x)], pt))
        if self.mod.debug:
            args.append("tack_err")
        return f"{self.mod.functions[id(callee)]}({', '.join(args)})"

    def _e_index(self, e):
        bt = self.types[id(e[2])]
        if isinstance(bt, T.Tuple):
            return f"{self.tuple_value(e[2])}.v{e[3][0][2] % len(bt.items)}"
        et = self.types[id(e)]
        ref = self.element(e[2], e[3], e)
        return f"({ref} != 0)" if et.kind == "b" else ref

    def _e_intrinsic(self, e):
        name, args = e[2], e[3]
        rt = self.types[id(e)]
        if name == "tid":
            n = self.mod.tk.grid_ndim
            if n == 1:
                return "tack_tid0"
            return f"{self.type_of(rt)}{{{', '.join(f'tack_tid{d}' for d in range(n))}}}"
        if name in ("ndim", "size"):
            arr = self.types[id(args[0])]
            if name == "ndim":
                return f"{arr.ndim}L"
            ext = self.geometry(args[0], arr)[1]
            return "(" + " * ".join(ext) + ")"
        if name.startswith("atomic_"):
            return self.atomic(name[7:], args, e)
        values = [self.expr(a) for a in args]
        ts = [self.types[id(a)] for a in args]
        if name.startswith("cast:"):
            return self.cast(values[0], ts[0], rt)
        st = rt.strong()
        if name in ("min", "max"):
            h = self.mod.helper(f"tack_{name}", f"template <typename T> static inline T tack_{name}"
                                f"(T a, T b) {{ return b {'<' if name == 'min' else '>'} a ? b : a; }}")
            acc = self.cast(values[0], ts[0], st)
            for v, t in zip(values[1:], ts[1:]):
                acc = f"{h}({acc}, {self.cast(v, t, st)})"
            return acc
        if name in ("minimum", "maximum"):      # NumPy's rule: codegen.py's, a NaN propagates
            h = self.mod.helper(f"tack_{name}", f"template <typename T> static inline T tack_{name}"
                                f"(T a, T b) {{ return a != a ? a : b != b ? b : "
                                f"a {'<' if name == 'minimum' else '>'} b ? a : b; }}")
            return f"{h}({self.cast(values[0], ts[0], st)}, {self.cast(values[1], ts[1], st)})"
        if name == "abs":
            v = self.cast(values[0], ts[0], st)
            if st.kind == "f":
                return f"metal::fabs({v})"
            if st.kind == "u":
                return v
            ct = ctype(st)
            u = _UNSIGNED[ct]
            h = self.mod.helper(f"tack_abs_{ct}", f"static inline {ct} tack_abs_{ct}({ct} a) "
                                f"{{ return a < 0 ? ({ct})(({u})0 - ({u})a) : a; }}")
            return f"{h}({v})"
        if name in ("isnan", "isinf", "isfinite"):
            t = ts[0].strong()
            if t.kind != "f":
                return "true" if name == "isfinite" else "false"
            return f"metal::{name}({values[0]})"
        if name in _HELPERS:    # as codegen.py computes them (its clip, sign, rounded, isclose)
            h = self.mod.helper(*_HELPERS[name])
            if name == "np.where":      # a function, not ?: : both sides evaluated, as codegen's
                return f"{h}({self.cast(values[0], ts[0], T.boolean)}, " \
                       f"{self.cast(values[1], ts[1], st)}, {self.cast(values[2], ts[2], st)})"
            if name == "isclose":
                ft = isclose_type(ts)
                return f"{h}({', '.join(self.cast(v, t, ft) for v, t in zip(values, ts))})"
            if name == "np.isclose":
                dt, pt, rt, _, bt = np_isclose_types(ts)
                b = values[1] if isinstance(values[1], _WeakFloat) else self.hoist(values[1], ts[1].strong())
                nums = [self.cast(values[0], ts[0], dt), self.cast(b, ts[1], dt),
                        self.cast(values[2], ts[2], pt), self.cast(b, ts[1], pt),
                        self.cast(values[3], ts[3], rt), self.cast(b, ts[1], bt)]
                return f"{h}({', '.join(nums)}, {self.cast(values[4], ts[4], T.boolean)})"
            if name == "np.clip" and len(values) == 1:     # no bound: x itself
                return self.cast(values[0], ts[0], st)
            vals = [self.cast(v, t, st) for v, t in zip(values, ts)]
            for k, side in ((1, "lo"), (2, "hi")) if name == "np.clip" else ():
                if clip_bound_dropped(args[k], ts[0], side):     # never binds: x's own limit
                    vals[k] = _int_literal(clip_limit(st, side), ctype(st))
            return f"{h}({', '.join(vals)})"
        if name in ("np.rint", "np.round", "round"):
            return self.rounded(name, values[0], ts[0], st, args[1][2] if len(args) == 2 else 0)
        if name == "np.fmod":
            if st.kind == "f":
                name = "fmod"
            else:                       # truncated, as C's %; by 0 (or -1) it is 0: codegen's
                ct = ctype(st)
                zero = " || b == -1" if st.kind == "i" else ""
                h = self.mod.helper(f"tack_fmod_{ct}", f"static inline {ct} tack_fmod_{ct}({ct} a, "
                                    f"{ct} b) {{ return (b == 0{zero}) ? 0 : a % b; }}")
                a, b = (self.cast(v, t, st) for v, t in zip(values, ts))
                return f"{h}({a}, {b})"
        fn = _MATH.get(name)
        if fn is None:
            raise Unsupported(f"{name if '.' in name else 'math.' + name} (no MSL function)")
        vals = [self.cast(v, t, st) for v, t in zip(values, ts)]
        return f"{fn}({', '.join(vals)})"

    def rounded(self, name, v, t, st, decimals):
        """``np.rint``, ``np.round`` and ``round`` as codegen's ``rounded``: ``metal::rint``
        (half to even), ``np.round`` of literal decimals by NumPy's power of ten in float32."""
        if t.strong().kind in "iu" and decimals >= 0:         # an integer rounds to itself
            return self.cast(v, t, st)
        ft = st if st.kind == "f" else math_type(t.strong())
        x = self.cast(v, t, ft)
        ctype(ft)                       # float64: Unsupported (an integer's np.round(x, -d) too)
        if decimals:
            f = _float_literal(power_of_ten(abs(decimals)))
            x = f"({x} * {f})" if decimals > 0 else f"({x} / {f})"
            r = f"metal::rint({x})"
            return self.cast(f"({r} / {f})" if decimals > 0 else f"({r} * {f})", ft, st)
        return self.cast(f"metal::rint({x})", ft, st)

    def atomic(self, op, args, e):
        arr_t = self.types[id(args[0])]
        idx_node = args[1]
        idx_nodes = idx_node[2] if idx_node[0] == "tuple" else [idx_node]
        et = arr_t.dtype
        ct = ctype(et)
        if et.bits == 64:
            raise Unsupported(f"atomic_{op} on {et} (Metal has 32-bit atomics)")
        if et.kind == "f" and op != "add":
            raise Unsupported(f"atomic_{op} on {et} (Metal's float atomics add only)")
        ref = self.element(args[0], idx_nodes, e)
        v = self.cast(self.expr(args[2]), self.types[id(args[2])], et)
        atype = {"int": "atomic_int", "uint": "atomic_uint", "float": "atomic_float"}[ct]
        return (f"atomic_fetch_{op}_explicit((device {atype}*)&{ref}, {v}, memory_order_relaxed)")

    # -- arrays
    def geometry(self, node, t: T.Array):
        """(MSL value of the array, extents, strides) as text."""
        if node[0] == "name" and node[2] in self.arrays:
            base = f"v_{node[2]}"
        elif node[0] == "gconst":
            base = self.mod.const_array(node[2])
            base = f"{self.mod.array_type(t, 'constant')}{{{base}}}"
        else:
            raise Unsupported("an array expression other than a parameter or a tack.constant")
        k = 0
        if t.shape is not None:
            extents = [f"{n}L" for n in t.shape]
        else:
            extents = [f"{base}.f[{a}]" for a in range(t.ndim)]
            k = t.ndim
        if t.layout == "A":
            return base, extents, [f"{base}.f[{k + a}]" for a in range(t.ndim)]
        order = list(range(t.ndim - 1, -1, -1)) if t.layout == "C" else list(range(t.ndim))
        strides, acc = [None] * t.ndim, []
        for a in order:
            if t.shape is not None:
                strides[a] = f"{int(np.prod([t.shape[x] for x in acc], dtype=np.int64))}L" \
                    if acc else "1L"
            else:
                strides[a] = " * ".join(extents[x] for x in acc) if acc else "1L"
                if len(acc) > 1:
                    strides[a] = f"({strides[a]})"
            acc.append(a)
        return base, extents, strides

    def element(self, arr_node, idx_nodes, node) -> str:
        """An lvalue for ``arr[idx...]`` (negative indices wrap; debug mode checks bounds)."""
        at = self.types[id(arr_node)]
        base, extents, strides = self.geometry(arr_node, at)
        if len(idx_nodes) == 1 and isinstance(self.types[id(idx_nodes[0])], T.Tuple):
            tt = self.types[id(idx_nodes[0])]
            tv = self.tuple_value(idx_nodes[0])
            pairs = [(f"{tv}.v{i}", x) for i, x in enumerate(tt.items)]
        else:
            pairs = [(self.expr(x), self.types[id(x)]) for x in idx_nodes]
        terms = []
        for axis, ((v, t), n, stride) in enumerate(zip(pairs, extents, strides)):
            t = t.strong()
            i = self.cast(v, t, T.int64 if t.kind == "i" else T.uint64)
            if t.kind == "i":
                h = self.mod.helper("tack_wrap", "static inline long tack_wrap(long i, long n) "
                                    "{ return i < 0 ? i + n : i; }")
                i = f"{h}({i}, {n})"
            else:
                i = f"(long){i}"
            if self.mod.debug:
                i = self.bounds_check(i, n, axis | (UNSIGNED_INDEX if t.kind == "u" else 0),
                                      arr_node, node)
            terms.append(i if stride == "1L" else f"{i} * {stride}")
        return f"{base}.p[{' + '.join(terms) or '0'}]"

    def bounds_check(self, i, n, axis, arr_node, node) -> str:
        h = self.mod.helper("tack_check", _CHECK)
        src = self.src
        name = arr_node[2] if arr_node[0] == "name" else "constant array"
        line = node[1][0]
        site = len(self.mod.sites)
        self.mod.sites.append(BoundsSite(self.tf.lowered.name, name, src.filename, line,
                                         self.tf.lowered.fid, line - src.first_line))
        return f"{h}({i}, {n}, {site + 1}u, {axis}L, tack_err)"

    # -- arithmetic
    def truth(self, e):
        return self.to_bool(self.expr(e), self.types[id(e)])

    def to_bool(self, v, t):
        if isinstance(v, _WeakFloat):
            return "true" if v.value != 0 else "false"      # NaN is true, as in C and Python
        t = t.strong()
        if t.kind == "b":
            return v
        return f"({v} != 0)"

    def cast(self, v, src, dst):
        if isinstance(dst, T.Tuple):
            if isinstance(src, T.Tuple) and T.Tuple(tuple(x.strong() if isinstance(x, T.Scalar) else x
                                                          for x in src.items)) == \
                    T.Tuple(tuple(x.strong() if isinstance(x, T.Scalar) else x for x in dst.items)):
                return v
            v = self.hoist(v, src)
            items = [self.cast(f"{v}.v{i}", s, d) for i, (s, d) in enumerate(zip(src.items, dst.items))]
            return f"{self.type_of(dst)}{{{', '.join(items)}}}"
        if not isinstance(dst, T.Scalar):
            return v
        if src.weak and src.kind == "f" and dst.kind == "f":
            return v                    # a float literal, written as float32 text
        if isinstance(v, _WeakFloat) and dst.kind in "iu":
            dc = ctype(dst.strong())    # as the CPU converts it: saturated, NaN 0, else truncated
            lo, hi = int(np.iinfo(dst.strong().dtype).min), int(np.iinfo(dst.strong().dtype).max)
            x = v.value
            n = 0 if x != x else lo if x <= lo else hi if x >= hi else int(x)
            return _int_literal(n, dc)
        src, dst = src.strong(), dst.strong()
        if src == dst:
            return v
        dc = ctype(dst)
        if dst.kind == "b":
            return self.to_bool(v, src)
        if src.kind == "f" and dst.kind != "f":
            lo, hi, fhi, flo = _LIMITS[dc]
            h = self.mod.helper(f"tack_f2{dc}", f"static inline {dc} tack_f2{dc}(float x) {{ "
                                f"if (metal::isnan(x)) return 0; if (x <= {flo}) return {lo}; "
                                f"if (x >= {fhi}) return {hi}; return ({dc})x; }}")
            return f"{h}({v})"
        return f"(({dc}){v})"

    def arith(self, op, a, ta, b, tb):
        from ..specialize import arith_type
        opt, rt = arith_type(op, ta, tb)
        ot = opt.strong()
        ct = ctype(ot)
        a, b = self.cast(a, ta, ot), self.cast(b, tb, ot)
        if op in ("<<", ">>"):
            return self.shift(op, a, b, ot, ct), rt
        if ot.kind == "f":
            if op in "+-*/":
                return f"({a} {op} {b})", rt
            if op == "**":                 # the exact rewrites, as codegen's ``fpow``
                h = self.mod.helper(f"tack_fpow_{ct}", _fpow(ct))
                return f"{h}({a}, {b})", rt
            if op == "//":
                h = self.mod.helper("tack_floordiv_py", _FLOORDIV)
                return f"{h}({a}, {b})", rt
            if op == "%":
                h = self.mod.helper("tack_fmod_py", _FMOD)
                return f"{h}({a}, {b})", rt
        if ot.kind == "b":
            if op in "&|^":
                return f"((bool)({a} {op} {b}))", rt
        u = _UNSIGNED.get(ct)
        if op in "+-*":
            if ot.kind == "i":
                return f"(({ct})(({u}){a} {op} ({u}){b}))", rt
            return f"(({ct})({a} {op} {b}))", rt
        if op in "&|^":
            return f"({a} {op} {b})", rt
        if op in ("//", "%"):
            name = "floordiv" if op == "//" else "mod"
            h = self.mod.helper(f"tack_{name}_{ct}", _divmod(name, ct, ot.kind == "i"))
            return f"{h}({a}, {b})", rt
        if op == "**":
            h = self.mod.helper(f"tack_ipow_{ct}", _ipow(ct, ot.kind == "i"))
            return f"{h}({a}, {b})", rt
        raise AssertionError(op)

    def shift(self, op, a, b, t, ct):
        u, w = _UNSIGNED[ct], _WIDTH[ct]
        if op == "<<":
            h = self.mod.helper(f"tack_shl_{ct}", f"static inline {ct} tack_shl_{ct}({ct} a, {ct} b) "
                                f"{{ return ({u})b >= {w}u ? ({ct})0 : ({ct})(({u})a << ({u})b); }}")
        elif t.kind == "i":
            h = self.mod.helper(f"tack_shr_{ct}", f"static inline {ct} tack_shr_{ct}({ct} a, {ct} b) "
                                f"{{ return ({u})b >= {w}u ? (a < 0 ? ({ct})-1 : ({ct})0) : "
                                f"({ct})(a >> b); }}")
        else:
            h = self.mod.helper(f"tack_shr_{ct}", f"static inline {ct} tack_shr_{ct}({ct} a, {ct} b) "
                                f"{{ return b >= {w}u ? ({ct})0 : ({ct})(a >> b); }}")
        return f"{h}({a}, {b})"

    def step_helper(self, ct, signed):
        u = _UNSIGNED[ct]
        test = "((c ^ n) & (s ^ n)) < 0" if signed else "n < c"
        return self.mod.helper(f"tack_step_{ct}",
                               f"static inline bool tack_step_{ct}(thread {ct}& c, {ct} s) {{ "
                               f"{ct} n = ({ct})(({u})c + ({u})s); bool ov = {test}; c = n; "
                               f"return ov; }}")


_FMOD = """\
static inline float tack_fmod_py(float a, float b) {
    float r = metal::fmod(a, b);
    if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) r += b;
    if (r == 0.0f) r = metal::copysign(0.0f, b);
    return r;
}"""

# Python's float floor division, as codegen's ``floordiv_float`` (NumPy's npy_divmod).
_FLOORDIV = """\
static inline float tack_floordiv_py(float a, float b) {
    if (b == 0.0f) return a / b;
    float r = metal::fmod(a, b);
    float d = (a - r) / b;
    if (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) d -= 1.0f;
    if (d == 0.0f) return metal::copysign(0.0f, a / b);   // a zero quotient: the sign of a / b
    float q = metal::floor(d);
    return (d - q > 0.5f) ? q + 1.0f : q;
}"""

_CHECK = """\
static inline long tack_check(long i, long n, uint site, long axis, device atomic_uint* err) {
    if ((ulong)i < (ulong)n) return i;
    uint expected = 0u;
    while (!atomic_compare_exchange_weak_explicit(err, &expected, site, memory_order_relaxed,
                                                  memory_order_relaxed) && expected == 0u) {}
    if (expected == 0u) {
        device long* record = (device long*)err;
        record[1] = axis; record[2] = i; record[3] = n;
    }
    return 0;    // the access goes to the first element; the launch raises IndexError
}"""


def _divmod(name, ct, signed) -> str:
    u = _UNSIGNED[ct]
    if not signed:
        body = "a / b" if name == "floordiv" else "a % b"
        return f"static inline {ct} tack_{name}_{ct}({ct} a, {ct} b) {{ return b == 0 ? 0 : {body}; }}"
    if name == "floordiv":
        return (f"static inline {ct} tack_floordiv_{ct}({ct} a, {ct} b) {{\n"
                f"    if (b == 0) return 0;\n"
                f"    if (b == -1) return ({ct})(({u})0 - ({u})a);\n"
                f"    {ct} q = a / b, r = a % b;\n"
                f"    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;\n}}")
    return (f"static inline {ct} tack_mod_{ct}({ct} a, {ct} b) {{\n"
            f"    if (b == 0 || b == -1) return 0;\n"
            f"    {ct} r = a % b;\n"
            f"    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}")


def _fpow(ct) -> str:
    """``x ** y`` of floats: ``x * x`` where ``y == 2``, ``|sqrt(x)|`` (infinity at -infinity,
    as ``pow``) where ``y == 0.5``, else ``metal::pow``: the two exact rewrites every target makes
    (``codegen._FunctionGen.fpow``)."""
    return (f"static inline {ct} tack_fpow_{ct}({ct} x, {ct} y) {{\n"
            f"    if (y == 2) return x * x;\n"
            f"    if (y == ({ct})0.5) return x == -INFINITY ? INFINITY : metal::fabs(metal::sqrt(x));\n"
            f"    return metal::pow(x, y);\n}}")


def _ipow(ct, signed) -> str:
    u = _UNSIGNED[ct]
    neg = "    if (e < 0) return 0;\n" if signed else ""
    return (f"static inline {ct} tack_ipow_{ct}({ct} base, {ct} e) {{\n{neg}"
            f"    {u} acc = 1, b = ({u})base, x = ({u})e;\n"
            f"    while (x != 0) {{ if (x & 1) acc *= b; b *= b; x >>= 1; }}\n"
            f"    return ({ct})acc;\n}}")
