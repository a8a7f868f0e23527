"""CUDA toolchain: LLVM's NVPTX target -> PTX text for one compute capability, and, ahead of
time, SASS for it (a cubin) made by a packaged ptxas (docs/gpu.md).

Kernels are PTX kernel entries (the ``ptx_kernel`` calling convention); a work-item's index along
x, y, z is ``ctaid * ntid + tid`` from the NVVM special registers; array data are global
pointers (``.param .u64 .ptr .global``).  The artifact is the PTX text (ASCII bytes), of the
PTX ISA version ``arch_names.PTX_ISA`` gives for the sm (part of the key), which the CUDA driver
JIT-compiles for that GPU and newer ones.

SASS: a target made with ``sass=True`` (``tack.aot``, ``bundles build`` and ``rebuild``: the
default of ``target``) also assembles the PTX with ptxas from a package (``gpu.find_ptxas``:
NVIDIA's PyPI wheel, conda-forge's cuda-nvcc, ``$CUDA_HOME`` of Spack's cuda; never PATH), for
exactly its sm, and the artifact is ``gpu.pack_cuda``'s container: the PTX and the cubin, with
the cubin's sm and ptxas version.  The ptxas version is the target identity's ``sass`` field
(``ptxas 13.0.88``; ``none: ...`` without one, ``off`` with ``TACK_CUDA_SASS=0`` or for code a
launch compiles on a miss): what ``bundles status`` compares, as it compares LLVM.  The target
key stays the PTX's (LLVM, sm, PTX ISA), so a node finds the entry whatever ptxas it has, and
its runtime loads the cubin when the device is that sm and the driver takes it, else the PTX.

Math: the functions NVPTX turns into instructions without a library (``sqrt`` (``sqrt.rn``),
``fabs``, ``floor``, ``ceil``, ``trunc``, ``copysign``); the others need libdevice, which
Tack does not link, and are a CompileError naming the function and the target.
"""

from __future__ import annotations

import os
import time

from ..archs import resolve
from ..codegen import Unsupported
from .argument_layout import packed_bytes
from .gpu import (FEWER_PARAMETERS, GPUTarget, entry_parameters, named_target, pack_cuda, run_tool,
                  sass_tool, tool_output, unpack_cuda)

NATIVE_MATH = frozenset({"sqrt", "fabs", "floor", "ceil", "trunc", "copysign"})

# The bytes of a kernel's parameters (its .param space): NVIDIA documents 4096 bytes, and from
# CUDA 12.1 (PTX ISA 8.1) 32764 bytes on Volta (sm_70) and newer (the CUDA C++ Programming
# Guide; NVIDIA's "CUDA 12.1 Supports Large Kernel Parameters").  ptxas 13 agrees on the large
# one ("uses too much parameter space (0x8010 bytes, 0x7ffc max)" for PTX ISA 8.6, sm_100); for an
# older ISA it stops at 4352 bytes ("Kernel parameter size larger than 4352 bytes requires PTX
# ISA .version 8.1"), but the documented 4096 is what Tack holds a kernel to: PTX of that ISA
# is JIT-compiled by drivers older than CUDA 12.1.  The ISA is the sm's (``arch_names.PTX_ISA``:
# 8.1 and later only for sm_100 and newer), so the large limit never meets a pre-Volta GPU.
PARAM_BYTES = 4096
PARAM_BYTES_LARGE = 32764
LARGE_PARAMS_ISA = (8, 1)
_SREG = ("x", "y", "z")


class CUDATarget(GPUTarget):
    kind = "cuda"
    kernel_cc = "ptx_kernel"
    suffix = ".ptx"

    def __init__(self, arch: str, sass: bool = True):
        super().__init__(arch)
        self.ptxas, self.sass = None, "off"
        if sass and os.environ.get("TACK_CUDA_SASS", "1") != "0":
            self.ptxas, self.sass = sass_tool(arch)
        self.sass_seconds = 0.0         # the last emit's ptxas time (benchmarks/gpu_codegen.py)

    @property
    def ptx_isa(self) -> str:
        return self.settings["ptx_isa"]

    @property
    def param_limit(self) -> int:
        """The most bytes of parameters a kernel of this target may take (``PARAM_BYTES``)."""
        isa = tuple(int(x) for x in self.ptx_isa.split("."))
        return PARAM_BYTES_LARGE if isa >= LARGE_PARAMS_ISA else PARAM_BYTES

    def entry_refusal(self, codes, debug):
        """Parameters of more bytes than the PTX ISA of this sm allows (``param_limit``)."""
        size, limit = packed_bytes(codes), self.param_limit
        if size <= limit:
            return None
        return (f"the kernel's parameters take {size} bytes ({len(codes)} parameters: "
                f"{entry_parameters(debug)}); CUDA takes at most {limit} bytes of kernel "
                f"parameters in PTX ISA {self.ptx_isa}, which {self.name} is built with"
                + ("" if limit == PARAM_BYTES_LARGE else
                   f" ({PARAM_BYTES_LARGE} from PTX ISA 8.1: cuda:sm_100 and newer)")
                + f": {FEWER_PARAMETERS}")

    def identity(self) -> dict:
        """The GPU identity, and what made the SASS (``sass``: ptxas's version, or why none)."""
        return dict(super().identity(), sass=self.sass)

    @property
    def code_note(self) -> str:
        """What its artifacts hold, as ``bundles build``'s table says."""
        if self.ptxas:
            return f"PTX + SASS ({self.sass})"
        return "PTX only (" + ("SASS off" if self.sass == "off" else self.sass[len("none: "):]) + ")"

    def emit(self, optimized) -> bytes:
        ptx = self.machine.emit_assembly(optimized).encode("ascii")
        if self.ptxas is None:
            self.sass_seconds = 0.0
            return ptx
        t0 = time.perf_counter()
        cubin = assemble(self.ptxas, ptx, self.arch)
        self.sass_seconds = time.perf_counter() - t0
        return pack_cuda(ptx, cubin, f"{self.arch} {self.sass}")

    def _sreg(self, module, b, reg, axis):
        import llvmlite.ir as ir
        from ..codegen import I32, I64
        name = f"llvm.nvvm.read.ptx.sreg.{reg}.{_SREG[axis]}"
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(I32, []), name)
        return b.zext(b.call(fn, []), I64)

    def global_id(self, module, b, axis):
        sreg = self._sreg
        return b.add(b.mul(sreg(module, b, "ctaid", axis), sreg(module, b, "ntid", axis)),
                     sreg(module, b, "tid", axis))

    def global_size(self, module, b, axis):
        return b.mul(self._sreg(module, b, "nctaid", axis), self._sreg(module, b, "ntid", axis))

    def math_call(self, module, builder, name, args, t):
        if name not in NATIVE_MATH:
            raise Unsupported(f"math.{name} on {t} (NVPTX has no instruction for it and Tack "
                              "links no libdevice)")
        return self.intrinsic_math(module, builder, name, args)


def assemble(ptxas: str, ptx: bytes, arch: str) -> bytes:
    """PTX text -> a cubin for exactly ``arch`` (ptxas ``-arch=sm_XY``)."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="tack-cuda-") as tmp:
        src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "wb") as f:
            f.write(ptx)
        run_tool([ptxas, f"-arch={arch}", src, "-o", out], f"ptxas for {arch}")
        return tool_output(out, f"ptxas for {arch} ({ptxas})")


def target(name: str, sass: bool = True) -> CUDATarget:
    """``cuda:sm_80`` -> the target that builds PTX for it, and SASS with a packaged ptxas where
    ``sass`` and one is found (``CUDATarget``)."""
    kind, arch = resolve(name)
    if kind != CUDATarget.kind:
        return named_target(name, CUDATarget)       # its error for a name of another kind
    return CUDATarget(arch, sass=sass)


def artifact_parts(payload: bytes) -> list:
    """[(suffix, bytes)] of a CUDA artifact, for ``python -m tack.cache export``: its PTX, and
    its cubin when it has one."""
    ptx, cubin, _ = unpack_cuda(payload)
    return [(".ptx", ptx)] + ([(".cubin", cubin)] if cubin else [])


def ptx_of(payload: bytes) -> bytes:
    """The PTX text of a CUDA artifact (with or without SASS)."""
    return unpack_cuda(payload)[0]
