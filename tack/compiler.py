"""One compile path for every caller: a kernel and its arguments -> a lowered kernel -> a variant.

Every compile runs the same preamble and core, whoever asks: a launch's
cache miss (``tack.launch``), ``tack.aot`` and so ``tack.site bundles build``,
and ``bundles rebuild`` (from the lowered kernels a bundle carries).  The
preamble is ``tack.argtypes.typed_args`` (the arguments typed, templates split
from values), then ``lower`` (the front end, memoized on the kernel, or the
cache's copy) and the lowered kernel's key; ``prepare`` runs it all.  The core
is ``compile_variant``.  ``lowered_meta`` and ``variant_meta`` are the one
writer of each kind of entry's metadata, so that an entry says the same
things whoever made it.  The boundary with a backend is the typed kernel: the
target turns it into its artifact's bytes, from LLVM IR (``target.compile``),
or, for a target that ``emits_source`` (Metal), from source it writes itself.
"""

from __future__ import annotations

import gc
import os
import threading
from typing import NamedTuple

from . import types as T
from .argtypes import TypedArgs, typed_args
from .digests import hasher
from .fingerprints import class_fingerprint


# What a compile imports inside its functions: the front end, code generation (with LLVM's
# binding, through the CPU backend), the metadata's helpers, and storing its entries.  A launch
# imports them all at the process's first compile (``import_all``), under the lock a fork waits
# for (``launch._imports``): a fork while another thread was inside one of them left the child
# that module's import lock, held by a thread it does not have, and its first compile hung.
COMPILE_MODULES = ("tack.frontend.lower", "tack.specialize", "tack.codegen", "tack.gridcheck",
                   "tack.sourcefiles", "tack.backends.cpu", "tack.backends.gpu", "tack.archs",
                   "tack.cache.stores_write", "tack.cache.size", "tack.cache.bundle",
                   "tack._image_write")


def import_all() -> None:
    """Import ``COMPILE_MODULES``."""
    import importlib
    for name in COMPILE_MODULES:
        importlib.import_module(name)


class Artifact(NamedTuple):
    """A compiled variant: its cache key, the bytes a backend's runtime loads (object code, PTX
    text, a code object, SPIR-V with native code, MSL source), the entry point's name, the
    bounds-check sites (debug mode), the entry's metadata, and the lowered kernel it came from
    with that kernel's key (None and "" for code a driver built from a variant)."""
    key: str
    payload: bytes
    entry: str
    sites: list
    meta: dict
    lowered: object
    lowered_key: str

    @property
    def kind(self) -> str:
        """The backend: cpu, cuda, rocm, level_zero, metal..."""
        return self.meta["backend"]

    @property
    def target(self) -> str:
        """``kind:name`` of the target it was compiled for (``kind:host``: this host's own)."""
        return self.meta["arch"] or f"{self.kind}:host"

    @property
    def suffix(self) -> str:
        return self.meta.get("suffix", ".bin")


class _GCPaused:
    """``with gc_paused():`` the cyclic garbage collector is off, and back as it was after,
    whatever is raised.

    A compile makes millions of objects (syntax tree, IR, LLVM IR text) and frees few: each
    full collection of the collector walks every one of them, and their number grows with the
    kernel, so for a 20,000-statement kernel the collector took about 2 s (0.4 s at 5,000).
    Nested and concurrent compiles share one pause: the first in turns the collector off
    (when it was on), the last out turns it back on; one that finds it off (the user's own
    ``gc.disable()``) leaves it off."""

    __slots__ = ("on",)
    _lock = threading.RLock()       # a signal handler's compile may come in on the same thread
    _depth = 0
    _was_enabled = False

    def __init__(self):
        self.on = False

    def __enter__(self):
        cls = _GCPaused
        with cls._lock:
            if cls._depth == 0:
                cls._was_enabled = gc.isenabled()
            # Counted before the collector goes off, with no call between (a call is where Ctrl-C
            # raises KeyboardInterrupt): a pause counted is ended by __exit__, or, where an
            # interrupt left the with statement without calling it, when this object goes
            # (__del__).  Ctrl-C there left the collector off for good.
            cls._depth += 1
            self.on = True
            if cls._depth == 1:
                gc.disable()
        return self

    def __exit__(self, *exc):
        self._end()
        return False

    def _end(self):
        cls = _GCPaused
        with cls._lock:
            if not self.on:
                return
            self.on = False
            # Never below 0: a child forked on this thread, inside this pause, starts at 0.
            depth = cls._depth
            cls._depth = depth - 1 if depth > 0 else 0
            if depth <= 1 and cls._was_enabled:
                gc.enable()

    def __del__(self):
        if self.on:
            self._end()

    @staticmethod
    def _after_fork_in_child():
        """A child forked while other threads were compiling has none of those threads, so none
        of their pauses ends there: its depth stayed above 0, its own compiles never turned the
        collector back on, and it ran with it off for good.  It starts with no pause under way
        (the collector as it was before the first), and the lock free (a thread may have held
        it at the fork)."""
        cls = _GCPaused
        cls._lock._at_fork_reinit()
        if cls._depth:
            cls._depth = 0
            if cls._was_enabled:
                gc.enable()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_GCPaused._after_fork_in_child)


def gc_paused() -> _GCPaused:
    return _GCPaused()


class Prepared(NamedTuple):
    """What the preamble gives the compile: the typed arguments, the lowered kernel and its key."""
    typed: TypedArgs
    lowered: object
    lowered_key: str


def prepare(kernel, args, debug: bool = False) -> Prepared:
    """Type ``args``, lower ``kernel`` for their templates (memoized) and key the lowered kernel:
    everything a compile needs but the target.  (A launch runs the same steps, with a cache
    lookup between them: ``typed_args``, the key, ``lower``.)"""
    from .cache.keys import lowered_key, template_ids
    typed = typed_args(kernel, args)
    key = lowered_key(kernel, template_ids(typed.templates), debug)
    return Prepared(typed, lower(kernel, typed.templates, debug), key)


def lower(kernel, templates: dict | None = None, debug: bool = False, session=None,
          key: str | None = None, stage=lambda label: None):
    """The lowered kernel of ``kernel`` (a ``tack.api.Kernel``) for these template bindings
    ({param: class}): the one it already lowered in this process while every name it resolved
    still means the same and its template classes are as they were (a rebinding or a changed
    class since is lowered again), else, with a cache
    ``session``, the one stored under ``key``, else the front end's (then stored there).  ``stage(label)`` is
    called after each step (cache, lower)."""
    templates = dict(templates or {})
    memo = tuple(sorted(templates.items(), key=lambda kv: kv[0])), bool(debug)
    lowered = kernel._lowered.get(memo)
    if lowered is not None:
        from .cache.deps import check_deps
        # A name it resolved may have been rebound since (``mod.C = tack.constant(...)``), or a
        # template class changed (``Policy.K = 5.0``, which the key of the variant names): a new
        # variant is then lowered from what the names mean now, as a process that found the
        # variant in the cache (and so never lowered it) does; both compile the same code.
        if check_deps(lowered.deps, kernel, templates) is None and \
                all(lowered.templates[p].fingerprint == class_fingerprint(c) for p, c in templates.items()):
            return lowered
    if session is not None:
        lowered = session.find_lowered(kernel, templates, key)
        stage("cache")
        if lowered is not None:
            _placed_now(lowered, kernel, templates)
            kernel._lowered[memo] = lowered
            return lowered
    from .frontend.lower import lower_kernel
    with gc_paused():
        lowered = kernel._lowered[memo] = lower_kernel(kernel, templates, bool(debug))
    stage("lower")
    if session is not None:
        from .cache.stores_write import store_lowered
        store_lowered(session, key, lowered_meta(lowered), lowered.to_bytes())
        stage("cache")
    return lowered


def _placed_now(lowered, kernel, templates) -> None:
    """Point the sources of a lowered kernel read from the cache at where its functions are now:
    it was lowered where the same text stood then (lines above it since added, or another
    script holding the same kernel), and a compile error names the file and line."""
    import inspect

    from .cache.deps import functions_now
    now = functions_now(lowered.deps, kernel, templates)
    for f in (lowered.kernel, *lowered.functions.values()):
        fn = now(f.fid)
        if fn is not None:
            code = fn.__code__
            f.source.moved_to(inspect.getsourcefile(fn) or code.co_filename, code.co_firstlineno)


def compile_variant(lowered, lowered_key, argtypes, grid: int, target, debug: bool = False,
                    stage=lambda label: None) -> Artifact:
    """Specialize ``lowered`` for ``argtypes`` and a ``grid``-dimensional launch, generate
    code for ``target`` and compile it.  ``stage(label)`` is called after each step (the
    launch's timings: specialize, codegen, llvm).  The garbage collector is paused throughout
    (``gc_paused``)."""
    with gc_paused():
        art = _compile_variant(lowered, lowered_key, argtypes, grid, target, debug, stage)
    from . import cache                 # counted in its stats() (other threads may be compiling)
    cache.count(cache._get_stats(), "compiled")
    return art


def _compile_variant(lowered, lowered_key, argtypes, grid, target, debug, stage) -> Artifact:
    from .cache.keys import variant_key
    from .specialize import specialize
    typed = specialize(lowered, argtypes, grid)
    stage("specialize")
    if lowered_key is not None:
        key = variant_key(lowered_key, argtypes, grid, target.key)
    else:                                       # no cache: a name unique to this variant
        key = hasher(repr((lowered.fingerprint(), argtypes, grid, debug)).encode()).hexdigest()
    if target.emits_source:                     # source from the typed kernel (MSL): no LLVM
        gen = target.generate(typed, "tack_" + key)
        payload = gen.source.encode("utf-8")
        stage("codegen")
    else:
        from .backends.gpu import BackendError
        from .codegen import generate
        gen = generate(typed, target, "tack_" + key)
        stage("codegen")
        try:
            payload = target.compile(gen.module)
        except BackendError as e:
            # LLVM refused this kernel's code: the user reads their kernel's name and line, and
            # what the backend said (not the compiler's frames: a ToolError said nothing of it).
            src = typed.lowered.kernel.source
            err = src.error(f"{target.name} cannot build this kernel: {str(e).rstrip()}",
                            (src.first_line, 0))
            raise err.with_kernel(typed.name) from None
    stage("llvm")
    meta = variant_meta(lowered, lowered_key, argtypes, grid, gen.entry,
                        gen.sites if debug else (), target)
    return Artifact(key, payload, gen.entry, gen.sites, meta, lowered, lowered_key or "")


def lowered_meta(lowered) -> dict:
    """The metadata of a lowered kernel's entry, and the start of each of its variants': the
    kernel's name and the dependency record a hit checks."""
    return {"kernel": lowered.kernel.source.name, "dep": lowered.deps}


def variant_meta(lowered, lowered_key, argtypes, grid, entry, sites, target) -> dict:
    """The metadata of a variant entry: what it was compiled from, for which target, and what a
    hit needs (dependency record, entry point, bounds-check sites, the arrays indexed by the
    thread index on every point: ``tack.gridcheck``)."""
    from .backends.variant import applies, encode_tidx
    from .gridcheck import tid_indexed
    tidx = [c for c in tid_indexed(lowered, int(grid)) if applies(c, argtypes)]
    return dict(lowered_meta(lowered), entry=entry, lowered=lowered_key or "",
                arg=[[str(t)] for t in argtypes], argspec=[[T.spec(t)] for t in argtypes],
                grid=str(grid), target_key=target.key, machine=target.machine_name,
                backend=target.kind, suffix=target.suffix,
                arch=f"{target.kind}:{target.arch}" if target.arch else "",
                target=identity_text(target.identity()),
                site=[site_record(s) for s in sites or ()], tidx=encode_tidx(tidx))


def site_record(site) -> list:
    """A bounds site as a variant's metadata keeps it: its file relative to its import root
    (``tack.sourcefiles``), so that no entry, and no bundle, names the path it was built in."""
    from .sourcefiles import portable
    return [site.function, site.array, portable(site.filename), site.line, site.fid, site.offset]


def identity_text(identity: dict) -> str:
    """A target's identity (what its code depends on) as one metadata field: ``k=v;k=v``."""
    return ";".join(f"{k}={v}" for k, v in sorted(identity.items()))


def driver_meta(meta, kernel_name, lowered_key, argtypes, grid: int, target_key, made) -> dict:
    """Metadata of code a device's driver built from a variant (``meta``: the variant's, or the
    fields a cache hit read of it) for the dispatcher to store back under the device's key:
    what a hit uses, copied; what the variant was compiled from, as ``variant_meta`` writes it;
    the device's target and what made the code (``made``: a runtime's ``store_back`` says, with
    the dispatcher's ``machine``, its runtime's ``BUNDLE_MACHINE``: ``pack`` names the bundle of
    this code with it, as the runtime looks it up)."""
    out = {f: meta[f] for f in ("dep", "entry", "site", "tidx", "argspec") if f in meta}
    out.update(kernel=kernel_name, lowered=lowered_key or "",
               arg=[[str(t)] for t in argtypes], argspec=[[T.spec(t)] for t in argtypes],
               grid=str(grid), target_key=target_key, machine=made.get("machine", ""),
               backend=made["backend"],
               suffix=made["suffix"], arch=made["arch"], target=identity_text(made))
    return out
