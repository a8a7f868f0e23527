"""CUDA toolchain: LLVM's NVPTX target -> PTX text for one compute capability (docs/gpu.md).

Kernels are PTX kernel entries (the ``ptx_kernel`` calling convention); a work-item's index along
x, y, z is ``ctaid * ntid + tid`` from the NVVM special registers; array data are global
pointers (``.param .u64 .ptr .global``).  The artifact is the PTX text (ASCII bytes), of the
PTX ISA version ``arch_names.PTX_ISA`` gives for the sm (part of the key), which the CUDA driver
JIT-compiles for that GPU and newer ones.

Math: the functions NVPTX turns into instructions without a library (``sqrt`` (``sqrt.rn``),
``fabs``, ``floor``, ``ceil``, ``trunc``, ``copysign``); the others need libdevice, which
Tack does not link, and are a CompileError naming the function and the target.
"""

from __future__ import annotations

from ..codegen import Unsupported
from .gpu import GPUTarget, named_target

NATIVE_MATH = frozenset({"sqrt", "fabs", "floor", "ceil", "trunc", "copysign"})
_SREG = ("x", "y", "z")


class CUDATarget(GPUTarget):
    kind = "cuda"
    kernel_cc = "ptx_kernel"
    machine_name = "nvptx64"
    suffix = ".ptx"

    @property
    def ptx_isa(self) -> str:
        return self.settings["ptx_isa"]

    def emit(self, optimized) -> bytes:
        return self.machine.emit_assembly(optimized).encode("ascii")

    def global_id(self, module, b, d):
        import llvmlite.ir as ir
        from ..codegen import I32, I64

        def sreg(reg):
            name = f"llvm.nvvm.read.ptx.sreg.{reg}.{_SREG[d]}"
            fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(I32, []), name)
            return b.zext(b.call(fn, []), I64)
        return b.add(b.mul(sreg("ctaid"), sreg("ntid")), sreg("tid"))

    def math_call(self, module, builder, name, args, t):
        if name not in NATIVE_MATH:
            raise Unsupported(f"math.{name} on {t} (NVPTX has no instruction for it and Tack "
                              "links no libdevice)")
        return self.intrinsic_math(module, builder, name, args)


def target(name: str) -> CUDATarget:
    """``cuda:sm_80`` -> the target that builds PTX for it."""
    return named_target(name, CUDATarget)
