"""HIP (ROCm) toolchain: LLVM's AMDGPU target -> a code object for one GPU (docs/gpu.md).

Kernels are AMDGPU kernels (the ``amdgpu_kernel`` calling convention); a work-item's index along
x, y, z is ``workgroup id * workgroup size + workitem id``, the work-group size read from the
HSA dispatch packet.  Array data are global pointers (address space 1); locals live in private
memory (address space 5).  The object LLVM emits is linked into a loadable code object with
``ld.lld -shared`` (``gpu.find_lld``: Debian's lld of this LLVM's version or PyPI's ziglang), of
code object version ``gpu.CODE_OBJECT_VERSION`` (5: ROCm 5.x and 6.x load it), in the key.

Math: ``sqrt fabs floor ceil trunc copysign``, and for float32 ``exp log log2 log10`` too: LLVM
lowers these to AMDGPU instructions without a library.  The others need ROCm's device
libraries (OCML), which Tack does not link: a CompileError naming the function and the target.
"""

from __future__ import annotations

import os

from .. import types as T
from ..codegen import Unsupported
from .gpu import GPUTarget, find_lld, named_target, run_tool, tool_output

NATIVE_MATH = frozenset({"sqrt", "fabs", "floor", "ceil", "trunc", "copysign"})
NATIVE_MATH_F32 = frozenset({"exp", "log", "log2", "log10"})
# hsa_kernel_dispatch_packet_t: workgroup_size_x, _y, _z (uint16) at byte offsets 4, 6, 8;
# grid_size_x, _y, _z (uint32, in work-items) at 12, 16, 20.
_WG_SIZE_OFFSET = (4, 6, 8)
_GRID_SIZE_OFFSET = (12, 16, 20)
_XYZ = ("x", "y", "z")


class ROCmTarget(GPUTarget):
    kind = "rocm"
    kernel_cc = "amdgpu_kernel"
    suffix = ".hsaco"
    alloca_addrspace = 5

    @property
    def code_object_version(self) -> int:
        return self.settings["code_object"]

    def prepare(self, module):
        import llvmlite.ir as ir
        from ..codegen import I32
        if "llvm.module.flags" not in module.namedmetadata:
            module.add_named_metadata("llvm.module.flags", [
                ir.Constant(I32, 1), "amdhsa_code_object_version",
                ir.Constant(I32, self.code_object_version * 100)])

    def emit(self, optimized) -> bytes:
        obj = self.machine.emit_object(optimized)
        with self._tempdir() as tmp:
            src, out = os.path.join(tmp, "kernel.o"), os.path.join(tmp, "kernel.hsaco")
            with open(src, "wb") as f:
                f.write(obj)
            lld = find_lld()
            run_tool(lld + ["-shared", "--no-undefined", "-o", out, src],
                     f"linking the code object for rocm:{self.arch}")
            return tool_output(out, f"ld.lld ({' '.join(lld)})")

    @staticmethod
    def _intrinsic(module, b, name, ret):
        import llvmlite.ir as ir
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(ret, []), name)
        return b.call(fn, [])

    def _packet_field(self, module, b, offset, ty, align):
        """A field of the kernel's dispatch packet (``hsa_kernel_dispatch_packet_t``), as an i64."""
        import llvmlite.ir as ir
        from ..codegen import I64, I8
        packet = self._intrinsic(module, b, "llvm.amdgcn.dispatch.ptr", I8.as_pointer(4))
        field = b.bitcast(b.gep(packet, [ir.Constant(I64, offset)], inbounds=True), ty.as_pointer(4))
        value = b.load(field)
        value.align = align
        return b.zext(value, I64)

    def global_id(self, module, b, axis):
        from ..codegen import I16, I32, I64
        group = b.zext(self._intrinsic(module, b, f"llvm.amdgcn.workgroup.id.{_XYZ[axis]}", I32), I64)
        item = b.zext(self._intrinsic(module, b, f"llvm.amdgcn.workitem.id.{_XYZ[axis]}", I32), I64)
        return b.add(b.mul(group, self._packet_field(module, b, _WG_SIZE_OFFSET[axis], I16, 2)), item)

    def global_size(self, module, b, axis):
        from ..codegen import I32
        return self._packet_field(module, b, _GRID_SIZE_OFFSET[axis], I32, 4)

    def math_call(self, module, builder, name, args, t):
        if name not in NATIVE_MATH and not (name in NATIVE_MATH_F32 and t == T.float32):
            raise Unsupported(f"math.{name} on {t} (AMDGPU has no instruction sequence for it "
                              "and Tack links no ROCm device library)")
        return self.intrinsic_math(module, builder, name, args)


def target(name: str) -> ROCmTarget:
    """``rocm:gfx90a`` or ``rocm:gfx90a:sramecc+:xnack-`` -> the target that builds its code object."""
    return named_target(name, ROCmTarget)
