"""Level Zero toolchain: LLVM's SPIR-V target -> SPIR-V, and native code for a named Intel GPU
from Intel's offline compiler ``ocloc`` (docs/gpu.md).

Kernels are OpenCL kernels (the ``spir_kernel`` calling convention); a work-item's index along
dimension d is ``get_global_id(d)`` (the GlobalInvocationId built-in).  Array data, constant
arrays and the error record are CrossWorkgroup (address space 1); locals are Function (0).  The
artifact (``gpu.pack_level_zero``) holds the SPIR-V module and, for a named device
(``level_zero:pvc``), ocloc's zebin for it; ``spirv:generic`` (``SPIRVTarget``) is SPIR-V
alone, which every Level Zero and OpenCL device takes.

Math: every function of the language, as OpenCL built-ins (``_Z3expf``...), which the SPIR-V
backend turns into the OpenCL.std extended instructions the driver implements.  Devices
without float64 (dg2 and the other Xe-LP/HPG GPUs) make any float64 value a CompileError.
"""

from __future__ import annotations

import os
import re

from .. import types as T
from .arch_names import INTEL_DEVICES
from .gpu import (FEWER_PARAMETERS, BackendError, GPUTarget, ToolError, container_parts, entry_parameters,
                  find_ocloc, named_target, pack_level_zero, run_tool)


# The most parameters a SPIR-V function may declare: the SPIR-V specification's universal limit
# (section 2.17, "Universal Limits": 255 function parameters per function declaration), which
# spirv-val enforces (SPIRV-Tools 2023.1: "OpTypeFunction may not take more than 255 arguments",
# its --max-function-args default): a kernel of 126 one-dimensional arrays (2 * 126 + 3 = 255
# parameters) validates, one of 127 (257) does not.  LLVM's SPIR-V backend emits the invalid
# module without a word, which a driver refuses only when it loads it.
SPIRV_MAX_PARAMETERS = 255


class LevelZeroTarget(GPUTarget):
    kind = "level_zero"
    kernel_cc = "spir_kernel"
    overflow_intrinsics = False     # LLVM 22's SPIR-V backend cannot select sadd.with.overflow
    # float -> int casts: NaN is selected to 0 explicitly.  SPIR-V's saturating OpConvertFToU
    # gives 0 for NaN, but Intel's OpenCL CPU runtime (2026.2) gives 4294967295 for float32 ->
    # uint32, where the language says 0.
    sat_nan_select = True
    # LLVM 22's SPIR-V backend aborts ("illegal aggregate intrinsic user") on a phi of a struct,
    # which several returns of a tuple become (a device function returning a tuple from a loop):
    # codegen gives such a function one return block instead (codegen._FunctionGen.emit_return).
    aggregate_phis = False

    def __init__(self, arch):
        super().__init__(arch)
        self.device = self.settings["device"]
        self.has_float64 = INTEL_DEVICES.get(self.device, True) and \
            self.settings.get("float64", True)

    @property
    def suffix(self) -> str:
        return ".spv" + (".zebin" if self.device else "")

    def entry_refusal(self, codes, debug):
        """More parameters than SPIR-V lets a function take (``SPIRV_MAX_PARAMETERS``)."""
        if len(codes) <= SPIRV_MAX_PARAMETERS:
            return None
        return (f"the kernel's entry point needs {len(codes)} parameters "
                f"({entry_parameters(debug)}); SPIR-V allows a function at most "
                f"{SPIRV_MAX_PARAMETERS}, so {self.name} cannot build it: {FEWER_PARAMETERS}")

    def compile(self, module) -> bytes:
        # LLVM 22's SPIR-V backend keeps per-module state in its target machine (the global
        # registry of types and functions it has emitted), which dangles once that module is
        # freed: emitting a second module with the same machine can crash.  One machine per
        # module (creating one takes well under a millisecond).
        self.machine = self.new_machine()
        return super().compile(module)

    def prepare(self, module):
        """Every function of the kernel is inlined into its entry.  LLVM 22's SPIR-V backend
        infers the pointee type of a pointer carried in an aggregate (an array's data pointer
        passed to a function that is not inlined, as debug mode leaves them) as ``i8``: the
        SPIR-V then fails spirv-val (OpCompositeInsert of mismatched pointer types) and an int64
        atomic through it becomes a byte atomic that Intel's compiler has no built-in for.  With
        no calls left, no pointer crosses a function boundary inside an aggregate."""
        for fn in module.functions:
            if not fn.is_declaration and fn.linkage == "internal":
                fn.attributes.add("alwaysinline")

    def optimize(self, module, passes=None):
        """LLVM's pipeline at ``opt``; where it leaves an integer of a width SPIR-V has no type
        for (LLVM's loop passes write a loop's final value in closed form: the sum of its
        counter, ``n * (n - 1) / 2``, computed on i65), the module is optimized again by
        ``_SPIRV_PASSES``, a pipeline without those loop passes."""
        optimized = super().optimize(module)
        if _odd_width(str(optimized)) is None:
            return optimized
        mod = super().optimize(module, _SPIRV_PASSES)
        odd = _odd_width(str(mod))
        if odd is not None:
            raise BackendError(f"LLVM's optimizer left an integer type SPIR-V cannot hold "
                               f"({odd.group()}) in the kernel's code, for {self.name}")
        return mod

    def emit(self, optimized) -> bytes:
        text = bitreverse_expanded(umul_overflow_expanded(signed_bool_to_float(str(optimized))))
        spirv = emit_spirv(text, self.triple, self.settings)
        return pack_level_zero(spirv, self.native(spirv) if self.device else b"")

    def native(self, spirv: bytes) -> bytes:
        """SPIR-V -> ocloc's zebin for this target's device."""
        with self._tempdir() as tmp:
            src = os.path.join(tmp, "kernel.spv")
            with open(src, "wb") as f:
                f.write(spirv)
            run_tool([find_ocloc(), "compile", "-spirv_input", "-file", src, "-device",
                      self.device, "--format", "zebin", "-output", "native", "-output_no_suffix",
                      "-out_dir", tmp], f"ocloc for {self.name}", tries=3)
            out = os.path.join(tmp, "native")      # -output_no_suffix: the name as given
            if not os.path.exists(out):
                raise ToolError(f"ocloc for {self.name} wrote no binary "
                                f"(found {sorted(os.listdir(tmp))})")
            with open(out, "rb") as f:
                return f.read()

    def atomic_rmw(self, builder, op, ptr, value):
        """Integer atomics as SPIR-V's; float ones as a compare-and-swap loop on the bits (SPIR-V
        has float add/min/max only through extensions that LLVM 22 does not enable by default)."""
        if op not in ("fadd", "fmin", "fmax"):
            return super().atomic_rmw(builder, op, ptr, value)
        import llvmlite.ir as ir
        from ..codegen import declare_intrinsic
        b = builder
        ity = ir.IntType(32 if isinstance(value.type, ir.FloatType) else 64)
        iptr = b.bitcast(ptr, ity.as_pointer(self.addrspace))
        start = b.block
        loop = b.append_basic_block("atomic.cas")
        done = b.append_basic_block("atomic.done")
        first = b.load_atomic(iptr, "monotonic", ity.width // 8)
        b.branch(loop)
        b.position_at_end(loop)
        old_i = b.phi(ity)
        old_i.add_incoming(first, start)
        old = b.bitcast(old_i, value.type)
        if op == "fadd":
            new = b.fadd(old, value)
        else:
            fn = declare_intrinsic(b.module, "minnum" if op == "fmin" else "maxnum",
                                   value.type, [value.type, value.type])
            new = b.call(fn, [old, value])
        res = b.cmpxchg(iptr, old_i, b.bitcast(new, ity), "monotonic", "monotonic")
        old_i.add_incoming(b.extract_value(res, 0), b.block)
        b.cbranch(b.extract_value(res, 1), done, loop)
        b.position_at_end(done)
        return old

    @staticmethod
    def _builtin(module, b, name, axis):
        import llvmlite.ir as ir
        from ..codegen import I32, I64
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(I64, [I32]), name)
        return b.call(fn, [ir.Constant(I32, axis)])

    def global_id(self, module, b, axis):
        return self._builtin(module, b, "_Z13get_global_idj", axis)        # OpenCL's get_global_id

    def global_size(self, module, b, axis):
        return self._builtin(module, b, "_Z15get_global_sizej", axis)      # get_global_size

    def math_call(self, module, builder, name, args, t):
        import llvmlite.ir as ir
        code = "f" if t == T.float32 else "d"
        mangled = f"_Z{len(name)}{name}{code * len(args)}"
        fn = module.globals.get(mangled) or ir.Function(
            module, ir.FunctionType(args[0].type, [a.type for a in args]), mangled)
        return builder.call(fn, args)



class SPIRVTarget(LevelZeroTarget):
    """``spirv:generic``: the SPIR-V module alone, no device's native code (the driver of each
    Level Zero or OpenCL device compiles it when the kernel is first loaded)."""
    kind = "spirv"


# An integer type SPIR-V has none of without an extension: i<N> for N not 1, 8, 16, 32 or 64 (a
# value's name is %i05 or @i65: not a type).
_ODD_WIDTH = re.compile(r"(?<![%@.\w])i(?!(?:1|8|16|32|64)\b)\d+\b")
# What is not code in the IR's text: quoted strings (a constant array's bytes, c"...<i0...":
# 0x20306920 read as a type refused the kernel) and comments.
_NOT_CODE = re.compile(r'"[^"]*"|;[^\n]*')


def _odd_width(ir_text: str):
    """The first integer type of an odd width in ``ir_text``'s code (``_ODD_WIDTH``), or None."""
    return _ODD_WIDTH.search(_NOT_CODE.sub("", ir_text))
# ``LevelZeroTarget.optimize``'s pipeline where LLVM's leaves such a type: its function passes
# at O2, less IndVarSimplify (the closed forms) and loop strength reduction.
_SPIRV_PASSES = ("sroa", "instruction_combine", "simplify_cfg", "sccp", "reassociate", "loop_rotate",
                 "new_gvn", "instruction_combine", "aggressive_dce", "simplify_cfg", "loop_unroll",
                 "instruction_combine", "sroa", "dead_store_elimination", "simplify_cfg")

_SITOFP_I1 = re.compile(r"= sitofp (i1|<(\d+) x i1>) (\S+) to (float|double|<\d+ x (?:float|double)>)")


def signed_bool_to_float(ir_text: str) -> str:
    """``sitofp i1 %b to float`` (true is -1.0: what LLVM's optimizer makes of
    ``float(-int(b))``) rewritten as ``select i1 %b, float -1.0, float 0.0``.  LLVM 22's SPIR-V
    backend converts an i1 as unsigned either way (true -> 1.0), which Intel's OpenCL runtime
    showed (tests/backends/test_opencl_launch.py)."""
    def select(m):
        n, value, ty = m.group(2), m.group(3), m.group(4)
        if n is None:
            return f"= select i1 {value}, {ty} -1.0, {ty} 0.0"
        elem = ty.split(" x ")[1].rstrip(">")
        ones = "<" + ", ".join([f"{elem} -1.0"] * int(n)) + ">"
        return f"= select <{n} x i1> {value}, {ty} {ones}, {ty} zeroinitializer"
    return _SITOFP_I1.sub(select, ir_text)


_UMUL_OVERFLOW = re.compile(r"^( *)(%[-\w.$]+) = (?:tail )?call \{ (i\d+), i1 \} "
                            r"@llvm\.umul\.with\.overflow\.i\d+\(\3(?: noundef)? ([^,\s]+), "
                            r"\3(?: noundef)? ([^,\s)]+)\)[^\n]*$", re.M)


def umul_overflow_expanded(ir_text: str) -> str:
    """``llvm.umul.with.overflow`` (what LLVM's optimizer makes of ``b != 0 and a * b // b !=
    a``) rewritten as the product and ``b != 0 and product / b != a``.  The SPIR-V backend
    emits it as OpUMulExtended, valid SPIR-V, which Intel's OpenCL CPU runtime (2026.2) cannot
    build ("Symbols not found: _Z20__spirv_UMulExtendedii"): the launch failed."""
    count = [0]

    def expand(m):
        pad, r, ty, a, b = m.groups()
        count[0] += 1
        t = f"%tack.umul{count[0]}"
        return "\n".join(pad + line for line in (
            f"{t}.lo = mul {ty} {a}, {b}",
            f"{t}.bz = icmp eq {ty} {b}, 0",
            f"{t}.bs = select i1 {t}.bz, {ty} 1, {ty} {b}",
            f"{t}.q = udiv {ty} {t}.lo, {t}.bs",
            f"{t}.ne = icmp ne {ty} {t}.q, {a}",
            f"{t}.ov = select i1 {t}.bz, i1 false, i1 {t}.ne",
            f"{t}.s0 = insertvalue {{ {ty}, i1 }} undef, {ty} {t}.lo, 0",
            f"{r} = insertvalue {{ {ty}, i1 }} {t}.s0, i1 {t}.ov, 1"))
    return _UMUL_OVERFLOW.sub(expand, ir_text)


_BITREVERSE = re.compile(r"^( *)(%[-\w.$]+) = (?:tail )?call (i(8|16|32|64)) "
                         r"@llvm\.bitreverse\.i\d+\(\3(?: noundef)? ([^,\s)]+)\)[^\n]*$", re.M)


def bitreverse_expanded(ir_text: str) -> str:
    """``llvm.bitreverse`` (what LLVM's optimizer makes of a loop or a mask-and-shift sequence
    that reverses bits) rewritten as that sequence: the SPIR-V backend has no instruction for it
    in an OpenCL module (OpBitReverse is a Shader one), and aborted ("Unable to meet SPIR-V
    requirements for this target")."""
    count = [0]

    def expand(m):
        pad, r, ty, width, v = m.groups()
        width = int(width)
        count[0] += 1
        t = f"%tack.brev{count[0]}"
        lines, s, k = [], 1, 0
        while s < width:
            block = (1 << s) - 1
            mask = sum(block << (2 * s * j) for j in range(width // (2 * s)))
            if mask >= 1 << (width - 1):            # written as the signed value it is
                mask -= 1 << width
            k += 1
            out = r if 2 * s >= width else f"{t}.v{k}"
            lines += [f"{t}.a{k} = lshr {ty} {v}, {s}", f"{t}.b{k} = and {ty} {t}.a{k}, {mask}",
                      f"{t}.c{k} = and {ty} {v}, {mask}", f"{t}.d{k} = shl {ty} {t}.c{k}, {s}",
                      f"{out} = or {ty} {t}.b{k}, {t}.d{k}"]
            v, s = out, 2 * s
        return "\n".join(pad + line for line in lines)
    return _BITREVERSE.sub(expand, ir_text)


_EMIT = """
import sys
import llvmlite.binding as llvm
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
triple, cpu, features, opt = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
module = llvm.parse_assembly(sys.stdin.buffer.read().decode())
machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=opt)
sys.stdout.buffer.write(machine.emit_object(module))
"""


def emit_spirv(ir_text: str, triple: str, settings: dict) -> bytes:
    """Optimized LLVM IR -> SPIR-V, emitted in a process of its own.

    LLVM 22's SPIR-V backend keeps state across the modules of a process: after the first,
    a module can come out with ids defined twice (spirv-val rejects it; Intel's compiler
    aborts on it), whichever kernel it is.  The first module of a process has always been
    valid, so each is emitted by a new process that emits only it (about a tenth of a second:
    SPIR-V is compiled ahead of time, or once per kernel on a cache miss).  A failure is a
    BackendError (the compiler reports it at the user's kernel), with what LLVM printed.
    """
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-c", _EMIT, triple, settings.get("cpu", ""),
                          settings.get("features", ""),
                          str(settings.get("codegen_opt", settings["opt"]))],
                         input=ir_text.encode(), capture_output=True, timeout=300)
    if res.returncode != 0 or not res.stdout.startswith(b"\x03\x02\x23\x07"):
        raise BackendError(f"LLVM's SPIR-V backend failed for {triple} (exit {res.returncode}):\n"
                           f"{res.stderr.decode(errors='replace')[-2000:]}")
    return res.stdout


def artifact_parts(payload: bytes) -> list:
    """[(suffix, bytes)] of a Level Zero artifact, for ``python -m tack.cache export``."""
    return container_parts(payload)


def target(name: str) -> LevelZeroTarget:
    """``level_zero:pvc`` (SPIR-V and pvc's native code) or ``spirv:generic`` (SPIR-V alone)."""
    return named_target(name, LevelZeroTarget, SPIRVTarget)
