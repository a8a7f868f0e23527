"""What the GPU targets share: their code generation settings and target keys (in one place),
the Level Zero artifact container, the vendors' tools, and the kernel entry (docs/gpu.md).

This module is light: importing it loads neither llvmlite's binding nor a vendor's runtime, so a
runtime can compute the key of code built ahead of time for its device without compiling:

    >>> key_for("cuda:sm_90")            # == tack.backends.cuda.target("cuda:sm_90").key

The names each GPU kind builds, and what each maps to (an sm's PTX ISA, an Intel device), are
the registry's (``arch_names``); a toolchain's target is ``tack.backends.toolchain(kind).target(
name)``.  ``settings(kind, arch)`` is the one place the code generation settings of each GPU
target are written: the toolchain's target builds its LLVM target machine from the same dict, and
``key_for`` hashes it (with the LLVM that compiles), so a change of sm, gfx, features, device,
PTX ISA, code object version, SPIR-V version or LLVM gives another key.

The kernel ABI (every GPU target): one entry function whose parameters are, in order, for each
value argument: an array's data pointer (a global pointer, LLVM address space 1), then one i64
per extent and stride (``argument_layout.array_fields``, as the CPU's slots), a scalar as its LLVM type
(bool as i8); then the grid's extents n0, n1, n2 as i64 (1 for unused dimensions); then, in
debug mode only, a global pointer to the i64[4] error record.  A work-item's grid index along
dimension d of an n-dimensional grid comes from the hardware's axis n-1-d: the last dimension
(the fastest-varying axis of a C-order array) on x, the fastest work-item index, so that the
work-items of a warp touch consecutive elements (``GRID_MAPPING``).  Each axis is a grid-stride
loop: a work-item runs its global id, then that plus the global size, while below the extent,
so a device that launches fewer work-groups than the grid needs along an axis (CUDA's 65535
along y and z) still covers it; a launch of exactly enough runs each point once and returns.
A work-item of an axis the grid does not use runs only at index 0.  The runtimes launch in
that order (``device_args.hardware_launch``).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import tempfile

from ..archs import resolve
from ..cache.keys import digest
from .arch_names import KINDS, PTX_ISA, SPIRV_TARGETS, SPIRV_VERSION, ArchError, rocm_target_id

OPT = 3
CUDA_TRIPLE = "nvptx64-nvidia-cuda"
ROCM_TRIPLE = "amdgcn-amd-amdhsa"
# Code object v5: what ROCm 5.x and 6.x load (LLVM 22's default is v6, which needs ROCm 6.2+).
CODE_OBJECT_VERSION = 5


# How the entry maps the grid onto the hardware's work-item indices (in every GPU target's key):
# 1: grid dimension d on hardware axis d; 2: on axis ndim-1-d (the last dimension on x, the
# fastest), each axis in a grid-stride loop (``emit_entry``; ``device_args.hardware_launch``).
GRID_MAPPING = 2


def settings(kind: str, arch: str) -> dict:
    """The code generation settings of ``kind:arch``, a name the registry resolved
    (``tack.archs.resolve``): what the target machine is built from and what the key hashes."""
    return {**_settings(kind, arch), "grid": GRID_MAPPING}


def _settings(kind: str, arch: str) -> dict:
    if kind == "cuda":
        isa = PTX_ISA[arch]
        return {"triple": CUDA_TRIPLE, "cpu": arch, "features": "+ptx" + isa.replace(".", ""),
                "ptx_isa": isa, "opt": OPT}
    if kind == "rocm":
        gfx, features = rocm_target_id(arch)
        return {"triple": ROCM_TRIPLE, "cpu": gfx, "features": features,
                "code_object": CODE_OBJECT_VERSION, "link": "ld.lld -shared", "opt": OPT}
    if kind in ("level_zero", "spirv"):
        native = kind == "level_zero"
        # spirv:generic-fp32 says so (spirv:generic's settings name no float64)
        fp32 = {"float64": False} if kind == "spirv" and not SPIRV_TARGETS[arch] else {}
        return {**fp32, "triple": f"spirv64v{SPIRV_VERSION}-unknown-unknown",
                "spirv": SPIRV_VERSION,
                "device": arch if native else "", "native": "ocloc zebin" if native else "",
                "opt": OPT, "inline": "all",    # see LevelZeroTarget.prepare
                # The IR is optimized at OPT; the SPIR-V backend's own passes run at 0, which
                # leaves out CodeGenPrepare, whose uadd.with.overflow (OpIAddCarry) Intel's
                # compiler of Debian 12 (IGC 1.0.12504) rejects.  The driver optimizes anyway.
                "codegen_opt": 0}
    raise ArchError(f"{kind}:{arch}: not a GPU kind (cuda, rocm, level_zero, spirv)")


def llvm_version() -> str:
    """The LLVM that compiles (llvmlite's version: the CPU backend's spelling, one for both)."""
    from .cpu_identity import llvm_version as v
    return v()


def key_for(name: str, llvm: str | None = None) -> str:
    """Target key of code built for the GPU ``kind:arch`` ``name`` with LLVM ``llvm`` (this
    process's llvmlite by default), computed without compiling."""
    kind, arch = resolve(name)
    return digest("target", ("backend", kind), ("arch", arch), ("llvm", llvm or llvm_version()),
                  ("codegen", settings(kind, arch)))


# -- Level Zero artifacts: SPIR-V and native code in one payload ------------------------------

L0_MAGIC = b"TACKL0\x00\x01"
_L0_HEADER = struct.Struct("<8sQQ")


def pack_level_zero(spirv: bytes, native: bytes = b"") -> bytes:
    """The artifact of a Level Zero target: ``magic, u64 len(spirv), u64 len(native)`` (little
    endian), the SPIR-V module, then the native binary (ocloc's zebin; empty for SPIR-V alone)."""
    return _L0_HEADER.pack(L0_MAGIC, len(spirv), len(native)) + spirv + native


def unpack_level_zero(payload: bytes) -> tuple[bytes, bytes]:
    """``(spirv, native)`` of a Level Zero artifact; ValueError if it is not one."""
    if len(payload) < _L0_HEADER.size:
        raise ValueError("not a Tack Level Zero artifact: too short")
    magic, n_spirv, n_native = _L0_HEADER.unpack_from(payload)
    if magic != L0_MAGIC or _L0_HEADER.size + n_spirv + n_native != len(payload):
        raise ValueError("not a Tack Level Zero artifact (bad magic or sizes)")
    start = _L0_HEADER.size
    return payload[start:start + n_spirv], payload[start + n_spirv:]


def container_parts(payload: bytes, native_suffix: str = ".zebin") -> list:
    """[(suffix, bytes)] of a Level Zero artifact, for ``python -m tack.cache export``: its SPIR-V
    (``.spv``), and its native code where it has some (ocloc's ``.zebin``; ``.clbin`` for the
    program binary an OpenCL driver built, stored back in the same container)."""
    spirv, native = unpack_level_zero(payload)
    return [(".spv", spirv)] + ([(native_suffix, native)] if native else [])


# -- the vendors' tools -----------------------------------------------------------------------

class ToolError(RuntimeError):
    """A vendor tool is missing, or failed (its output is in the message)."""


class BackendError(ToolError):
    """A code generator ran and refused one kernel's code (LLVM's SPIR-V backend aborting on
    it): ``tack.compiler`` reports it as a CompileError at the kernel's ``def`` that keeps this
    message.  A ToolError still, for code that catches those; a tool that is missing or cannot
    be run stays a plain ToolError."""


# What a kernel with too many parameters can do about it.
FEWER_PARAMETERS = ("pass fewer arrays (stack those of one dtype and shape into one), or compile "
                    "their shapes in (@tack.kernel(static_shape=...)) so that no extents are passed")


def entry_parameters(debug: bool) -> str:
    """How a kernel's arguments become its entry's parameters (``argument_layout``), for a
    refusal of too many of them."""
    return (f"each array passes its data pointer, then an i64 per extent unless its shape is "
            f"static and per stride if its layout is strided; a scalar one; then the grid's 3 "
            f"extents{' and the debug error record' if debug else ''}")


def _llvm_major() -> int:
    import llvmlite.binding as llvm
    return llvm.llvm_version_info[0]


def find_lld() -> list[str]:
    """The command that runs LLVM's ELF linker: ``$TACK_LD_LLD``, else Debian's lld of this LLVM's
    major version (/usr/lib/llvm-N/bin/ld.lld, /usr/bin/ld.lld-N), else PyPI's ziglang
    (``python -m ziglang ld.lld``).  Never an ld.lld that happens to be on PATH."""
    env = os.environ.get("TACK_LD_LLD")
    if env:
        return [env]
    major = _llvm_major()
    tried = []
    for path in (f"/usr/lib/llvm-{major}/bin/ld.lld", f"/usr/bin/ld.lld-{major}"):
        tried.append(path)
        if os.access(path, os.X_OK):
            return [path]
    import importlib.util
    import sys
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "ld.lld"]
    raise ToolError(f"ld.lld (LLVM's linker, for AMD code objects) not found: tried $TACK_LD_LLD, "
                    f"{', '.join(tried)} and PyPI's ziglang; install Debian's lld-{major} "
                    f"(apt-get install lld-{major}) or `pip install ziglang`")


def find_ocloc() -> str:
    """Intel's offline compiler: ``$TACK_OCLOC``, else Debian's /usr/bin/ocloc (intel-opencl-icd)."""
    env = os.environ.get("TACK_OCLOC")
    if env:
        return env
    if os.access("/usr/bin/ocloc", os.X_OK):
        return "/usr/bin/ocloc"
    raise ToolError("ocloc (Intel's offline compiler, for native Level Zero code) not found: "
                    "tried $TACK_OCLOC and /usr/bin/ocloc; install Debian's intel-opencl-icd "
                    "(apt-get install intel-opencl-icd), or build for spirv:generic")


def find_ptxas() -> str:
    """NVIDIA's PTX assembler, from a package, never one that happens to be on PATH:
    ``$TACK_PTXAS``; else the one in PyPI's nvidia-cuda-nvcc (site-packages/nvidia/cu*/bin or
    nvidia/cuda_nvcc/bin); else conda-forge's cuda-nvcc in this environment (sys.prefix/bin, a
    conda environment: it has conda-meta); else ``$CUDA_HOME/bin`` (what Spack's ``cuda`` and
    NVIDIA's installers set).  ToolError naming each place tried if none."""
    env = os.environ.get("TACK_PTXAS")
    if env:
        return env
    import glob
    import importlib.util
    import sys
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(glob.glob(os.path.join(root, "cu*", "bin", "ptxas"))
                       + glob.glob(os.path.join(root, "cuda_nvcc", "bin", "ptxas")), reverse=True)
        for path in found:
            if os.access(path, os.X_OK):
                return path
    places = []
    if os.path.isdir(os.path.join(sys.prefix, "conda-meta")):
        places.append(os.path.join(sys.prefix, "bin", "ptxas"))
    if os.environ.get("CUDA_HOME"):
        places.append(os.path.join(os.environ["CUDA_HOME"], "bin", "ptxas"))
    for path in places:
        if os.access(path, os.X_OK):
            return path
    raise ToolError("ptxas not found: tried $TACK_PTXAS, PyPI's nvidia-cuda-nvcc (pip install "
                    "nvidia-cuda-nvcc), conda-forge's cuda-nvcc in this environment and "
                    "$CUDA_HOME/bin (Spack's cuda)")


_ptxas_info = {}


def ptxas_info(path: str) -> tuple:
    """``(version, sm names it assembles for)`` of the ptxas at ``path`` (``--version``'s
    ``V13.0.88`` and ``--help``'s allowed ``--gpu-name`` values), asked once per process."""
    got = _ptxas_info.get(path)
    if got is None:
        text = run_tool([path, "--version"], "ptxas --version")
        m = re.search(r"\bV(\d+(?:\.\d+)+)", text) or re.search(r"release (\d+\.\d+)", text)
        version = m.group(1) if m else "unknown"
        help_text = run_tool([path, "--help"], "ptxas --help")
        sms = frozenset(re.findall(r"'(sm_\d+[a-z]?)'", help_text))
        got = _ptxas_info[path] = (version, sms)
    return got


def sass_tool(arch: str) -> tuple:
    """``(ptxas path, what it is)`` that assembles PTX for ``arch`` into SASS (a cubin), or
    ``(None, why not)``: the second is what a CUDA target's identity records (``ptxas 13.0.88``;
    ``none: ...`` where no packaged ptxas is found or it does not build ``arch``)."""
    try:
        path = find_ptxas()
        version, sms = ptxas_info(path)
    except ToolError as e:
        if os.environ.get("TACK_PTXAS"):        # the one named is to be used: say why it is not
            raise ToolError(f"TACK_PTXAS={os.environ['TACK_PTXAS']!r} cannot be used: {e}") \
                from None
        return None, "none: " + str(e).split(":", 1)[0].replace(";", ",")
    if sms and arch not in sms:
        return None, f"none: ptxas {version} does not build {arch}"
    return path, f"ptxas {version}"


# -- CUDA artifacts: PTX, and SASS for its sm, in one payload ------------------------------------

CUDA_MAGIC = b"TACKCU\x00\x01"
_CUDA_HEADER = struct.Struct("<8sQQH")


def pack_cuda(ptx: bytes, cubin: bytes, label: str) -> bytes:
    """The artifact of a CUDA target with SASS: ``magic, u64 len(ptx), u64 len(cubin), u16
    len(label)`` (little endian), the label (ASCII: the cubin's sm and toolchain, ``sm_90
    ptxas 13.0.88``), the PTX text, then the cubin.  An artifact of PTX alone is the PTX text
    itself (what every entry held before SASS was stored)."""
    lab = label.encode("ascii")
    return _CUDA_HEADER.pack(CUDA_MAGIC, len(ptx), len(cubin), len(lab)) + lab + ptx + cubin


def unpack_cuda(payload: bytes) -> tuple:
    """``(ptx, cubin, label)`` of a CUDA artifact (``b"", ""`` for PTX alone); ValueError for a
    container whose sizes are off."""
    payload = bytes(payload)
    if not payload.startswith(CUDA_MAGIC):
        return payload, b"", ""
    if len(payload) < _CUDA_HEADER.size:
        raise ValueError("not a Tack CUDA artifact: too short")
    _, n_ptx, n_cubin, n_label = _CUDA_HEADER.unpack_from(payload)
    start = _CUDA_HEADER.size
    if start + n_label + n_ptx + n_cubin != len(payload):
        raise ValueError("not a Tack CUDA artifact (bad sizes)")
    label = payload[start:start + n_label].decode("ascii", "replace")
    start += n_label
    return payload[start:start + n_ptx], payload[start + n_ptx:], label


def run_tool(cmd, what: str, cwd=None, tries: int = 1) -> str:
    """Run a vendor tool; ToolError with its output if it fails.  ``tries``: runs allowed when
    the tool dies by a signal (kept for ocloc, which aborted on the invalid SPIR-V that LLVM's
    backend made before each module was emitted in a process of its own)."""
    for attempt in range(tries):
        try:
            res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
        except OSError as e:
            raise ToolError(f"{what}: cannot run {cmd[0]}: {e}") from None
        if res.returncode >= 0:
            break
    if res.returncode != 0:
        raise ToolError(f"{what} failed ({' '.join(map(str, cmd))}, exit {res.returncode}):\n"
                        f"{res.stdout}{res.stderr}")
    return res.stdout + res.stderr


def tool_output(path: str, what: str) -> bytes:
    """The file a vendor tool that exited 0 was to write; ToolError where it wrote none (a
    wrapper script, a tool that is not the one its variable names)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ToolError(f"{what} exited 0 but wrote no {os.path.basename(path)}") from None


# -- the toolchain's target: what the three GPU targets share -----------------------------------

# (LLVM 22's SPIR-V backend keeps state across the modules of a process, so that a later
# module can come out invalid: level_zero.emit_spirv emits each in a process of its own.)


_KNOWN = {}     # (triple, processor, features) -> what of them this LLVM does not know


class GPUTarget:
    """A GPU target of the toolchain side (subclassed per kind in cuda.py, hip.py, level_zero.py;
    ``arch`` is a name the registry resolved).

    Holds ``settings(kind, arch)`` and builds its LLVM target machine from it; ``key`` is
    ``key_for`` of the same name; ``machine_name`` is the registry's for its kind
    (``arch_names.Kind.machine``: what its bundles' file names say).  Subclasses give
    ``kernel_cc``, ``suffix``, ``global_id`` and ``global_size`` (along a hardware axis, i64),
    ``math_call`` and ``emit`` (optimized module -> artifact bytes).
    """

    kind = ""
    addrspace = 1              # array data, constant arrays and the error record: global memory
    alloca_addrspace = 0
    has_float64 = True
    kernel_cc = ""
    suffix = ""
    emits_source = False            # tack.compiler: code from LLVM IR (``compile``)
    atomic_ordering = "monotonic"   # the language asks for atomicity, not ordering

    def __init__(self, arch: str):
        self.arch = arch
        self.settings = settings(self.kind, arch)
        self.triple = self.settings["triple"]
        self.key = key_for(f"{self.kind}:{arch}")
        from .cpu import _initialize
        import llvmlite.binding as llvm
        _initialize(all_targets=True)
        self._llvm = llvm
        self.check_processor()
        self.machine = self.new_machine()

    def check_processor(self):
        """ArchError unless this LLVM knows the processor the settings name for the triple: LLVM
        builds generic code for one it does not know (a warning on stderr, nothing more), which
        is wrong for the GPU (PTX of a too-old ISA, a code object for no gfx).  Once per
        processor and process, when a target is made to compile: never on a cache hit."""
        cpu = self.settings.get("cpu", "")
        if not cpu:
            return
        features = self.settings.get("features", "")
        from .cpu import describe_unrecognized, llvm_unrecognized
        unknown = _KNOWN.get((self.triple, cpu, features))
        if unknown is None:
            unknown = _KNOWN[(self.triple, cpu, features)] = llvm_unrecognized(self.triple, cpu, features)
        if unknown:
            raise ArchError(f"{self.kind}:{self.arch}: the LLVM of this llvmlite "
                            f"({'.'.join(map(str, self._llvm.llvm_version_info))}) does not know "
                            f"{describe_unrecognized(unknown)} for {self.triple}; it would build "
                            f"generic code, wrong for that GPU: install a newer llvmlite")

    def new_machine(self):
        """An LLVM target machine built from ``settings`` (the key's, so no hand copy)."""
        return self._llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.settings.get("cpu", ""), features=self.settings.get("features", ""),
            opt=self.settings.get("codegen_opt", self.settings["opt"]))

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.arch}"

    @property
    def machine_name(self) -> str:
        return KINDS[self.kind].machine

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"

    def identity(self) -> dict:
        """What the code depends on: the backend, LLVM's version and the code generation settings."""
        ident = {"backend": self.kind, "llvm": ".".join(map(str, self._llvm.llvm_version_info))}
        ident.update({k: str(v) for k, v in self.settings.items()})
        return ident

    # -- compile -------------------------------------------------------------------------------

    def prepare(self, module):
        """Target-specific additions to the llvmlite.ir module before it is parsed."""

    def optimize(self, module, passes=None):
        """llvmlite.ir module -> optimized llvm.ModuleRef for this target: LLVM's pipeline at
        ``opt``, or (``passes``: names of llvmlite's ``add_<name>_pass``) those passes after the
        always-inliner."""
        llvm = self._llvm
        self.prepare(module)
        mod = llvm.parse_assembly(str(module))
        mod.triple = self.triple
        mod.data_layout = str(self.machine.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=self.settings["opt"])
        pb = llvm.create_pass_builder(self.machine, pto)
        if passes is None:
            pb.getModulePassManager().run(mod, pb)
        else:
            mpm = llvm.create_new_module_pass_manager()
            mpm.add_always_inliner_pass()
            for name in passes:
                getattr(mpm, f"add_{name}_pass")()
            mpm.run(mod, pb)
        mod.verify()
        return mod

    def compile(self, module) -> bytes:
        """An llvmlite.ir module -> the artifact's bytes."""
        return self.emit(self.optimize(module))

    def check_entry(self, tk):
        """A CompileError at the kernel's ``def`` when the entry point of the typed kernel ``tk``
        takes more than this target allows (``entry_refusal``): called by code generation before
        it generates anything, so that the user reads their kernel's name and line, not a vendor
        tool's failure (or nothing at all until a driver refuses to load the code)."""
        from .argument_layout import entry_codes
        why = self.entry_refusal(entry_codes(tk.argtypes, tk.debug), tk.debug)
        if why:
            src = tk.lowered.kernel.source
            raise src.error(why, (src.first_line, 0)).with_kernel(tk.name)

    def entry_refusal(self, codes, debug: bool):
        """Why an entry of parameters ``codes`` (``argument_layout.entry_codes``) cannot be built
        for this target, or None: no limit by default."""
        return None

    def emit(self, optimized) -> bytes:
        raise NotImplementedError

    def _tempdir(self):
        return tempfile.TemporaryDirectory(prefix=f"tack-{self.kind}-")

    # -- the codegen interface -------------------------------------------------------------------

    def atomic_rmw(self, builder, op, ptr, value):
        return builder.atomic_rmw(op, ptr, value, self.atomic_ordering)

    def intrinsic_math(self, module, builder, name, args):
        from ..codegen import declare_intrinsic
        fn = declare_intrinsic(module, name, args[0].type, [a.type for a in args])
        return builder.call(fn, args)

    def global_id(self, module, builder, axis: int):
        """The work-item's global index along hardware axis ``axis`` (0: x), as an i64."""
        raise NotImplementedError

    def global_size(self, module, builder, axis: int):
        """The launch's work-items along hardware axis ``axis`` (0: x), as an i64."""
        raise NotImplementedError

    def emit_entry(self, module, body, tk, name):
        """The kernel entry of the ABI above: unpack the arguments, then call the body at each
        point of this work-item's grid-stride loops (grid dimension d on hardware axis n-1-d)."""
        import llvmlite.ir as ir
        from .. import types as T
        from ..codegen import I8, I64, lltype
        from .argument_layout import array_fields
        params = []
        for t in tk.argtypes:
            if isinstance(t, T.Array):
                params.append(lltype(t, self.addrspace).elements[0])
                params += [I64] * array_fields(t)
            else:
                params.append(I8 if t.kind == "b" else lltype(t))
        n_values = len(params)
        params += [I64] * 3
        if tk.debug:
            params.append(I64.as_pointer(self.addrspace))
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), params), name)
        fn.calling_convention = self.kernel_cc
        argv = list(fn.args)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args, k = [], 0
        for t in tk.argtypes:
            if isinstance(t, T.Array):
                ty = lltype(t, self.addrspace)
                value = ir.Constant(ty, None)
                for f in range(1 + array_fields(t)):
                    value = b.insert_value(value, argv[k + f], f)
                args.append(value)
                k += 1 + array_fields(t)
            else:
                args.append(b.trunc(argv[k], lltype(t)) if t.kind == "b" else argv[k])
                k += 1
        extents = argv[n_values:n_values + 3]
        err = argv[n_values + 3:]
        g = tk.grid_ndim
        done = fn.append_basic_block("done")
        for axis in range(g, 3):                # an axis the grid does not use: index 0 only
            on = fn.append_basic_block(f"axis{axis}")
            b.cbranch(b.icmp_unsigned("!=", self.global_id(module, b, axis), ir.Constant(I64, 0)),
                      done, on)
            b.position_at_end(on)
        # Grid-stride loops, grid dimension d on its hardware axis, dimension 0 (the slowest
        # axis) outermost.
        from .device_args import hardware_axis
        levels = [(axis, d, fn.append_basic_block(f"test{axis}"),
                   fn.append_basic_block(f"point{axis}"), fn.append_basic_block(f"next{axis}"))
                  for d, axis in ((d, hardware_axis(d, g)) for d in range(g))]
        ids, loops = [None] * g, []
        for k, (axis, d, test, point, _) in enumerate(levels):
            start, step = self.global_id(module, b, axis), self.global_size(module, b, axis)
            before = b.block
            b.branch(test)
            b.position_at_end(test)
            i = b.phi(I64, name=f"i{d}")
            i.add_incoming(start, before)
            b.cbranch(b.icmp_unsigned("<", i, extents[d]), point, levels[k - 1][4] if k else done)
            b.position_at_end(point)
            # Under its extent (at most 2**63 - 1), an index is never negative: said to LLVM,
            # an index's Python wrap-around (``x[i]`` with ``i < 0``) folds away.
            b.assume(b.icmp_signed(">=", i, ir.Constant(I64, 0)))
            ids[d] = i
            loops.append((i, step))
        b.call(body, args + ids + err)
        b.branch(levels[-1][4])
        for (axis, d, test, _, nxt), (i, step) in zip(levels, loops):
            b.position_at_end(nxt)
            i.add_incoming(b.add(i, step), nxt)
            b.branch(test)
        b.position_at_end(done)
        b.ret_void()
        body.attributes.add("alwaysinline")
        return fn


def named_target(name: str, *classes):
    """The target of the ``kind:arch`` ``name`` (the registry's name for an alias), of the one
    of ``classes`` (a GPUTarget per kind a toolchain builds) whose kind it names."""
    kind, arch = resolve(name)
    for cls in classes:
        if cls.kind == kind:
            return cls(arch)
    raise ArchError(f"{name}: this toolchain builds {' and '.join(c.kind + ':' for c in classes)} "
                    "archs only")
