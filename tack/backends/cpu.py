"""The CPU backend: LLVM IR -> optimized object code -> loaded in-process -> launched.

No external compiler or linker is needed: llvmlite's target machine emits an
object file, and an MCJIT engine links it into this process.  Object code
for another microarchitecture (``CPUTarget("skylake-avx512")``) can be
emitted on any host, for bundles built for other nodes.

The entry function takes a block of 8-byte argument slots (an array takes
its data pointer, then its extents unless its shape is static, then its
strides if its layout is A) and a range of the grid's first dimension,
``entry(slots, start, end)``; the launch splits that
dimension over threads, and ctypes releases the GIL during each call.
"""

from __future__ import annotations

import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir

from .. import types as T
from ..archs import ArchError, resolve
from ..codegen import I8, I64, declare_intrinsic, lltype
from .arch_names import llvm_cpu
from .argument_layout import array_fields
from .cpu_identity import CODEGEN, LIMITS, arch_key, host_key
from .cpu_loader import load_object

# Re-entrant: a signal handler's launch on a thread holding it (between two MCJIT calls) loads
# its own kernel through it (a Lock waited for ever).
_init_lock = threading.RLock()
_initialized = False
_engine = None

# fd 2 is the process's: one capture at a time (``llvm_unrecognized``).  Re-entrant: a signal
# handler's (or a finalizer's) compile for a named arch on a thread inside a capture captures its
# own within it (fd 2 saved and restored in turn, innermost first), where a Lock waited for ever.
_capture_lock = threading.RLock()


def _guard_fork():
    """Make ``os.fork()`` wait for the LLVM call under way in another thread, so that a child
    finds LLVM's locks free.  llvmlite takes one lock (an RLock) around every call into LLVM and
    releases the GIL inside it; a fork made meanwhile (multiprocessing's "fork" start method while
    a thread compiles) left it held in the child by a thread that does not exist there, and the
    child's first compile waited for it for ever.  The same for ``_init_lock``, held across LLVM
    calls (taken first, as ``load_mcjit`` takes them), and for ``_capture_lock``, held while
    ``llvm_unrecognized`` has fd 2 on a temporary file (a child forked meanwhile kept its stderr
    there for good); taken first of all, as the capture takes LLVM's lock inside it.  The forking
    thread holds them across the fork and releases them on both sides (it is the child's one
    thread, their owner there too)."""
    import os
    if not hasattr(os, "register_at_fork"):
        return
    locks = [_capture_lock, _init_lock]
    try:
        from llvmlite.binding import ffi
        llvm_lock = ffi.lib._lock._lock        # llvmlite's _LLVMLock: its RLock
        if callable(llvm_lock.acquire) and callable(llvm_lock.release):
            locks.append(llvm_lock)
    except Exception:                           # noqa: BLE001 - another llvmlite's layout
        pass

    held = []

    def before():
        for lock in locks:
            lock.acquire()
        held.append(True)

    def after():
        # Registered while a fork was under way (this module imported by the thread the fork
        # waited for: launch's first compile's imports), this after runs with no before: there
        # is nothing to release ("release unlocked lock" in the child, which then failed)
        if held:
            held.pop()
            for lock in reversed(locks):
                lock.release()
    os.register_at_fork(before=before, after_in_parent=after, after_in_child=after)
    global _fork_before, _fork_held
    _fork_before, _fork_held = before, held


# The guard's before and what it holds: a fork that waited for the imports that registered it
# (launch's first compile's) runs it from launch's own before (``launch._before_fork``).
_fork_before, _fork_held = None, None
_guard_fork()

# Math functions LLVM has intrinsics for; the rest are libm calls.
# (``pow`` is neither: see ``_pow``.)
_LLVM_MATH = {"sqrt", "exp", "log", "log2", "log10", "sin", "cos", "floor", "ceil",
              "fabs", "trunc", "copysign"}


def _initialize(all_targets=False):
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True
        if all_targets:                 # code for another ISA (bundles built for other nodes)
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()


def _pow(module, ty, single):
    """C's ``pow`` (``powf``), declared ``nobuiltin``: a plain function LLVM may not rewrite.

    LLVM 22 rewrites ``pow`` (and ``llvm.pow``) of a constant power-of-two base into
    ``exp2(n * y)``, even without fast-math: ``8.0 ** y`` is then ``exp2(3 * y)``, whose
    product rounds first, up to 14 ULP from ``pow`` (y = sqrt(63)).  The two rewrites that
    are exact (``y == 2``, ``y == 0.5``) are made for every target by ``codegen``'s ``fpow``."""
    cname = "powf" if single else "pow"
    libm = module.globals.get(cname)
    if libm is None:
        libm = ir.Function(module, ir.FunctionType(ty, [ty, ty]), cname)
        for a in ("nobuiltin", "nounwind", "readnone"):
            libm.attributes.add(a)
    return libm


class CPUTarget:
    """A CPU to compile for: the host's by default, or a named microarchitecture.

    ``arch``: the archspec name this target stands for (``zen3``), when it is
    one (``target("cpu:zen3")``); its ``key`` is then the runtime's
    ``arch_key``, and the host's ``host_key`` otherwise: the same functions
    a node looks code up with, fed the settings the code is generated with.
    """

    name = kind = "cpu"
    suffix = ".o"                       # what `python -m tack.cache export` names its artifacts
    emits_source = False                # tack.compiler: code from LLVM IR (``compile``)

    def __init__(self, cpu: str | None = None, features: str | None = None,
                 triple: str | None = None, arch: str | None = None):
        _initialize(all_targets=triple is not None)
        host = cpu is None and triple is None
        self.cpu = llvm.get_host_cpu_name() if cpu is None else cpu
        if features is None:
            features = llvm.get_host_cpu_features().flatten() if host else ""
        self.features = features
        self.opt = CODEGEN["opt"]
        self.block_limit = LIMITS["block"]
        self.triple = triple or llvm.get_process_triple()
        self.arch = arch
        target = llvm.Target.from_triple(self.triple)
        # CODEGEN, the settings the runtime's keys are made from.  Static relocations and the
        # large code model leave only absolute addresses to patch (backends/cpu_loader.py).
        self.machine = target.create_target_machine(cpu=self.cpu, features=self.features,
                                                    **CODEGEN)
        self.is_host = host

    @property
    def key(self) -> str:
        """The target key of the code this target makes (the runtime's, for the same device)."""
        return arch_key(self.arch) if self.arch else host_key()

    @property
    def machine_name(self) -> str:
        """The machine the code runs on, as ``platform.machine()`` names it (x86_64, ...)."""
        family = self.triple.split("-", 1)[0]
        return {"powerpc64le": "ppc64le", "arm64": "aarch64"}.get(family, family)

    def compile(self, module) -> bytes:
        """An llvmlite.ir module -> optimized object code: the artifact's bytes."""
        return self.emit_object(self.optimize(module))

    def identity(self) -> dict:
        """What compiled code depends on: LLVM version, triple, CPU name and features."""
        return {"backend": "cpu", "llvm": ".".join(map(str, llvm.llvm_version_info)),
                "triple": self.triple, "cpu": self.cpu, "features": self.features}

    # -- the codegen interface ------------------------------------------------

    def math_call(self, module, builder, name, args, t):
        if name == "fmod":
            # ``frem`` is C's fmod (and lowers to a call of it), with LLVM's own NaN rule.  LLVM
            # 22 rewrote a call of libm's fmod into an ``frem`` marked NaN-free when the dividend
            # cannot be NaN (an int converted), so ``fmod(x, nan)`` was poison: 0.0, or the code
            # after it deleted.
            return builder.frem(args[0], args[1])
        if name == "pow":
            return builder.call(_pow(module, args[0].type, t == T.float32), args)
        if name in _LLVM_MATH:
            fn = declare_intrinsic(module, name, args[0].type, [a.type for a in args])
            return builder.call(fn, args)
        cname = name + ("f" if t == T.float32 else "")
        fn = module.globals.get(cname)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(args[0].type, [a.type for a in args]), cname)
        return builder.call(fn, args)

    def atomic_rmw(self, builder, op, ptr, value):
        return builder.atomic_rmw(op, ptr, value, "seq_cst")

    def emit_entry(self, module, body, tk, name):
        """``void name(i8* slots, i64 start, i64 end)``: loop over the grid, call the body."""
        slots_t = I8.as_pointer()
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [slots_t, I64, I64]), name)
        slots, start, end = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))

        def slot(k, ty):
            return b.bitcast(b.gep(slots, [ir.Constant(I64, 8 * k)]), ty.as_pointer())

        args = []
        k = 0
        for t in tk.argtypes:
            if isinstance(t, T.Array):        # the data pointer, then its extents and strides (array_fields)
                ty = lltype(t)
                value = b.insert_value(ir.Constant(ty, None), b.inttoptr(b.load(slot(k, I64)), ty.elements[0]), 0)
                for f in range(array_fields(t)):
                    value = b.insert_value(value, b.load(slot(k + 1 + f, I64)), 1 + f)
                args.append(value)
                k += 1 + array_fields(t)
                continue
            if t.kind == "b":
                args.append(b.trunc(b.load(slot(k, I8)), lltype(t)))
            else:
                args.append(b.load(slot(k, lltype(t))))
            k += 1
        n = k
        dims = [b.load(slot(n + d, I64)) for d in range(3)]
        err = [b.inttoptr(b.load(slot(n + 3, I64)), I64.as_pointer())] if tk.debug else []
        ndim = tk.grid_ndim

        def loop(depth, lo, hi, tids):
            head = fn.append_basic_block(f"d{depth}")
            body_bb = fn.append_basic_block(f"d{depth}.body")
            done = fn.append_basic_block(f"d{depth}.done")
            pre = b.block
            b.branch(head)
            b.position_at_end(head)
            i = b.phi(I64)
            i.add_incoming(lo, pre)
            b.cbranch(b.icmp_signed("<", i, hi), body_bb, done)
            b.position_at_end(body_bb)
            if depth + 1 < ndim:
                loop(depth + 1, ir.Constant(I64, 0), dims[depth + 1], tids + [i])
            else:
                b.call(body, args + tids + [i] + err)
            i.add_incoming(b.add(i, ir.Constant(I64, 1)), b.block)
            b.branch(head)
            b.position_at_end(done)

        # A grid's indices are never negative: said to LLVM, an index's Python wrap-around
        # (``x[i]`` with ``i < 0``) folds away and the loop is vectorized like a C loop.
        b.assume(b.icmp_signed(">=", start, ir.Constant(I64, 0)))
        loop(0, start, end, [])
        b.ret_void()
        body.attributes.add("alwaysinline")
        return fn

    # -- compile and load -----------------------------------------------------

    def optimize(self, module: ir.Module):
        """Parse and optimize an llvmlite.ir module: -> llvm.ModuleRef."""
        mod = llvm.parse_assembly(str(module))
        mod.triple = self.triple
        mod.data_layout = str(self.machine.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=self.opt)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(self.machine, pto)
        pb.getModulePassManager().run(mod, pb)
        return self.cut_long_blocks(mod, module)

    def cut_long_blocks(self, mod, module: ir.Module):
        """``mod`` (optimized) with its basic blocks of more than ``block_limit`` instructions
        cut (``backends.long_blocks``: instruction selection and scheduling are superlinear in
        a block's length).  Only a module that had that many instructions before optimizing
        is looked at (the middle end's unrolling stays far below the limit): a small kernel
        pays nothing."""
        limit = self.block_limit
        size = 0
        for fn in module.functions:
            for block in fn.blocks:
                size += len(block.instructions)
        if size <= limit:
            return mod
        from .long_blocks import cut
        text, cuts = cut(str(mod), limit)
        if not cuts:
            return mod
        return llvm.parse_assembly(text)

    def emit_object(self, optimized) -> bytes:
        return self.machine.emit_object(optimized)

    def emit_assembly(self, optimized) -> str:
        return self.machine.emit_assembly(optimized)

    def load(self, obj: bytes, entry: str):
        """Link object code into this process; -> a ctypes function for ``entry``."""
        if not self.is_host:
            raise RuntimeError(f"code for CPU '{self.cpu}' cannot be run on this host")
        return load_object(obj, entry, load_mcjit)


def load_mcjit(obj: bytes, entry: str) -> int:
    """Link object code with llvmlite's MCJIT; -> the address of ``entry``."""
    global _engine
    target = host_target()
    with _init_lock:
        if _engine is None:
            _engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target.machine)
        _engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        _engine.finalize_object()
        return _engine.get_function_address(entry)


_host = None


def target(name: str | None = None) -> CPUTarget:
    """The toolchain side's target for a device: this host (``None``), or ``cpu:<arch>`` (a bare
    name too) for code built ahead of time for an archspec microarchitecture.  ArchError if
    this LLVM cannot build code for it."""
    if name is None:
        return host_target()
    kind, arch = resolve(name)
    if kind != "cpu":
        raise ArchError(f"{kind}:{arch}: the CPU backend builds cpu: archs only")
    triple, cpu, features = llvm_target(arch)
    return CPUTarget(cpu=cpu, features=features, triple=triple, arch=arch)


def llvm_target(arch: str):
    """(triple, LLVM CPU name, LLVM features) for an archspec microarchitecture (zen3 ->
    x86_64, znver3, no features; armv8.2a -> aarch64, generic, +v8.2a).

    From the registry's one table of archspec's names to LLVM's, else archspec's flags for
    the clang of this LLVM's version (``arch_names.llvm_cpu``); ArchError if this LLVM does
    not know the CPU or a feature (it would build generic code for the family, not code for
    ``arch``).
    """
    major = llvm.llvm_version_info[0]
    triple, cpu, features, flag = llvm_cpu(arch, major)
    unknown = llvm_unrecognized(triple, cpu, features)
    if unknown:
        raise ArchError(f"LLVM {major} does not recognise {describe_unrecognized(unknown)} that "
                        f"archspec gives for cpu:{arch} ({flag}); it would build generic "
                        f"{triple.split('-')[0]} code, so cpu:{arch} is not built")
    return triple, cpu, features


def llvm_unrecognized(triple: str, cpu: str, features: str = "") -> list:
    """What of ``cpu`` and ``features`` this LLVM does not know for ``triple``, as LLVM names
    them: ``[("processor", "sm_999"), ("feature", "+ptx999")]``; empty when it knows all.

    llvmlite has no list of CPU names; for one it does not know, LLVM prints
    "'X' is not a recognized processor for this target (ignoring processor)"
    (or "... feature ...") to file descriptor 2 and goes on with generic code.
    That warning is captured (fd 2 redirected around the call, under a lock: two
    threads redirecting at once each took the other's file for the real stderr,
    which one of them then restored for good) and read as the answer.
    """
    import os
    import re
    import sys
    import tempfile
    _initialize(all_targets=True)
    machine = llvm.Target.from_triple(triple)
    with _capture_lock:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with tempfile.TemporaryFile() as captured:
                os.dup2(captured.fileno(), 2)
                try:
                    machine.create_target_machine(cpu=cpu, features=features)
                finally:
                    os.dup2(saved, 2)
                captured.seek(0)
                warning = captured.read().decode("utf-8", "replace")
        finally:
            os.close(saved)
    found = []
    for name, what in re.findall(r"'([^'\n]*)' is not a recognized (processor|feature)", warning):
        if (what, name) not in found:
            found.append((what, name))
    if not found and "not a recognized" in warning:     # worded otherwise: the whole request
        found.append(("processor", cpu))
    return found


def llvm_knows_cpu(triple: str, cpu: str, features: str = "") -> bool:
    """Does this LLVM know ``cpu`` and each of ``features`` for ``triple``? (``llvm_unrecognized``)"""
    return not llvm_unrecognized(triple, cpu, features)


def describe_unrecognized(found: list) -> str:
    """``[("feature", "+ptx999")]`` -> "the feature '+ptx999'" (for an error message)."""
    parts = []
    for what in ("processor", "feature"):
        names = [n for w, n in found if w == what]
        if names:
            parts.append(f"the {what}{'s' if len(names) > 1 else ''} " + ", ".join(map(repr, names)))
    return " and ".join(parts)


def host_target() -> CPUTarget:
    global _host
    if _host is None:
        _host = CPUTarget()
    return _host
