"""What ``tack.launch`` asks of the cache: keys, the dependency check, then find or store.

The warm path is ``keys`` then ``find_variant``: code-object fingerprints,
one file read, a checksum, the dependency check, and loading object code
with Tack's own loader.  Nothing here runs the front end or imports llvmlite.
Any unexpected error is a miss and one warning: no crash from the cache
reaches a user's job.

* **Keys** are named steps hashed in turn (``KeyBuilder``), from code-object
  fingerprints and cheap facts about the host: no compiler, no LLVM.
* **The dependency record** of a lowered kernel lists, for the kernel and
  each device function it reaches, every global name it resolved and what
  that was bound to.  An entry is used only if each name still resolves to
  the same thing: the same device function code, the same constant (dtype,
  shape, bytes), the same module, the same template class.  Walking the
  record needs no source: device functions are reached through the names
  that bind them, from the kernel outward.

One module, because a warm kernel call needs all of it, and each module
imported costs a few hundred microseconds of a budget of a few milliseconds.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import os
import platform
import sys
import types

from . import store
from .._version import __version__
from ..api import (Constant, Func, class_fingerprint, closure_identity, func_id,
                   function_fingerprint, intrinsic_of, value_identity)
from ..types import spec
from .config import TRACE, log


# -- keys ------------------------------------------------------------------------

LOWERED_FORMAT = 1
VARIANT_FORMAT = 1


class KeyBuilder:
    """A sha256 over named steps; each step is logged at DEBUG with the running hash."""

    def __init__(self, what: str):
        self.what = what
        self.h = hashlib.sha256(what.encode())
        self.trace = log.isEnabledFor(TRACE)

    def add(self, name: str, value) -> "KeyBuilder":
        if isinstance(value, dict):
            value = sorted(value.items())
        text = value if isinstance(value, str) else repr(value)
        self.h.update(f"\0{name}={text}".encode())
        if self.trace:
            log.log(TRACE, "%s key: %s=%s -> %s", self.what, name, text[:80], self.h.hexdigest()[:16])
        return self

    def hexdigest(self) -> str:
        return self.h.hexdigest()


@functools.lru_cache(maxsize=None)
def tack_version_id() -> str:
    """This Tack's version; for a source checkout, the version plus a hash of Tack's sources.

    Each edit of a checkout then keeps its own entries, as each release does.
    The sources are identified by each file's path, size and modification
    time (an edit changes at least the time), which costs a stat per file
    rather than reading them all on every process start.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not _in_checkout(root):
        return __version__
    h = hashlib.sha256()

    def walk(path, rel):
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    walk(entry.path, f"{rel}{entry.name}/")
            elif entry.name.endswith(".py"):
                st = entry.stat()
                h.update(f"{rel}{entry.name}:{st.st_size}:{st.st_mtime_ns}\0".encode())

    walk(root, "")
    return f"{__version__}+src.{h.hexdigest()}"


def _in_checkout(package_dir: str) -> bool:
    parent = os.path.dirname(package_dir)
    return os.path.exists(os.path.join(parent, ".git")) or \
        os.path.exists(os.path.join(parent, "pyproject.toml"))


@functools.lru_cache(maxsize=None)
def host_cpu_identity() -> dict:
    """Facts that fix what LLVM's host detection sees, read without LLVM.

    The CPU's model and feature flags (from /proc/cpuinfo on Linux), the
    machine type, and llvmlite's library (which pins the LLVM version).
    """
    ident = {"machine": platform.machine(), "system": sys.platform, "llvmlite": _llvmlite_version()}
    try:
        ident.update(_first_cpu("/proc/cpuinfo"))
    except OSError:
        ident["processor"] = platform.processor()
    return ident


_CPU_FIELDS = ("vendor_id", "cpu family", "model", "model name", "flags", "Features",
               "CPU implementer", "CPU part")


def _first_cpu(path: str) -> dict:
    """The fields of the first CPU's block of a cpuinfo file that fix LLVM's host CPU.

    Read in small pieces until that block ends: the kernel writes the file as
    it is read, and a node of a few hundred cores has hundreds of kilobytes.
    """
    text = b""
    with open(path, "rb") as f:
        while b"\n\n" not in text:
            chunk = f.read(4096)
            if not chunk:
                break
            text += chunk
    fields = {}
    for line in text.split(b"\n\n", 1)[0].decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in _CPU_FIELDS:
            fields[key] = value.strip()
    return fields


def _llvmlite_version() -> str:
    """Which LLVM would compile here: llvmlite's library file, by path, size and time.

    Found without importing llvmlite (its version module parses JSON at
    import) and without the import system's directory scans: a stat per
    ``sys.path`` entry.  Any upgrade replaces the library and so changes this.
    """
    names = ("libllvmlite.so", "libllvmlite.dylib", "llvmlite.dll")
    for entry in sys.path:
        lib_dir = os.path.join(entry or ".", "llvmlite", "binding")
        if not os.path.isdir(lib_dir):
            continue
        for name in names:
            try:
                st = os.stat(os.path.join(lib_dir, name))
            except OSError:
                continue
            return f"{os.path.abspath(lib_dir)}/{name}:{st.st_size}:{st.st_mtime_ns}"
    return "none"


CODEGEN = {"opt": 3, "reloc": "static", "codemodel": "large"}


@functools.lru_cache(maxsize=None)
def host_target_key() -> str:
    """Target key of code compiled on this host for this host (the user's own cache)."""
    return KeyBuilder("target").add("backend", "cpu").add("host", host_cpu_identity()) \
        .add("codegen", CODEGEN).hexdigest()


def arch_target_key(arch: str, llvm_version: str) -> str:
    """Target key of code compiled ahead of time for a named microarchitecture (site bundles).

    ``arch`` is an archspec name (zen3, sapphirerapids); a node finds its own
    with archspec, and the LLVM version with llvmlite, without compiling.
    """
    return KeyBuilder("target").add("backend", "cpu").add("arch", arch) \
        .add("llvm", llvm_version).add("codegen", CODEGEN).hexdigest()


@functools.lru_cache(maxsize=None)
def host_arch() -> str:
    """This node's microarchitecture by archspec's name (zen3, ...)."""
    import archspec.cpu
    return archspec.cpu.host().name


def llvm_version() -> str:
    """The LLVM version llvmlite was built with, without loading LLVM."""
    import llvmlite
    ver = llvmlite.__version__
    return f"llvmlite-{ver}"


def lowered_key(kernel, template_ids, debug: bool) -> str:
    """Key of a lowered kernel: its source (as code), specialization, Tack version, debug flag."""
    fn = kernel.py_func
    return (KeyBuilder("lowered")
            .add("format", LOWERED_FORMAT)
            .add("tack", tack_version_id())
            .add("python", f"{sys.version_info[0]}.{sys.version_info[1]}")
            .add("kernel", f"{fn.__module__}.{fn.__qualname__}")
            .add("code", function_fingerprint(fn))
            .add("closure", _closure_ids(fn))
            .add("templates", template_ids)
            .add("debug", bool(debug))
            .hexdigest())


def _closure_ids(fn):
    """What a kernel made by a factory closes over, so each closure keeps its own entries."""
    if not fn.__closure__:
        return []
    return [(name, closure_identity(cell.cell_contents))
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__)]


def variant_key(lowered: str, argtypes, grid_ndim: int, target: str) -> str:
    """Key of a compiled variant: the lowered key plus argument types, shapes and target."""
    return (KeyBuilder("variant")
            .add("format", VARIANT_FORMAT)
            .add("lowered", lowered)
            .add("args", [repr(t) for t in argtypes])
            .add("grid", grid_ndim)
            .add("target", target)
            .hexdigest())


# -- the dependency record -------------------------------------------------------

_MISSING = object()


def _resolve(fn, name):
    """What ``name`` (or a dotted ``module.attr`` chain) means in ``fn`` now."""
    if "." in name:
        head, *attrs = name.split(".")
        obj = _resolve(fn, head)
        for attr in attrs:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                break
        return obj
    code = fn.__code__
    if fn.__closure__ and name in code.co_freevars:
        return fn.__closure__[code.co_freevars.index(name)].cell_contents
    g = fn.__globals__
    if name in g:
        return g[name]
    return vars(builtins).get(name, _MISSING)


def _func_fid(func: Func) -> str:
    return func_id(func.py_func)


def template_scopes(cls) -> dict:
    """fid -> function for each static method of a template class, as lowering names them."""
    out = {}
    fp = class_fingerprint(cls)[:16]
    attrs = {}
    for klass in reversed(cls.__mro__[:-1]):
        attrs.update(vars(klass))
    for name, attr in attrs.items():
        if isinstance(attr, staticmethod):
            attr = attr.__func__
        if isinstance(attr, Func):
            attr = attr.py_func
        if isinstance(attr, types.FunctionType):
            out[f"{cls.__module__}.{cls.__qualname__}.{name}#{fp}"] = attr
    return out


def identity(kind: str, obj):
    """What a dependency of ``kind`` is bound to now, as the record writes it (None: not that kind)."""
    if kind == "func":
        return function_fingerprint(obj.py_func) if isinstance(obj, Func) else None
    if kind == "const":
        return obj.fingerprint if isinstance(obj, Constant) else None
    if kind == "module":
        return obj.__name__ if isinstance(obj, types.ModuleType) else None
    if kind == "template":
        return class_fingerprint(obj) if isinstance(obj, type) else None
    if kind == "intrinsic":
        return intrinsic_of(obj)
    if kind == "value":
        return value_identity(obj)
    return None


def check_deps(deps, kernel, templates: dict, scopes: dict | None = None):
    """None if every recorded name still resolves as recorded; else the reason it does not.

    ``scopes``, if given, is filled with fid -> Python function for every
    function the record reaches (to locate source lines later).
    """
    scopes = {} if scopes is None else scopes
    scopes[kernel.__qualname__] = kernel.py_func
    for cls in templates.values():
        scopes.update(template_scopes(cls))
    for scope, name, kind, recorded in deps:
        fn = scopes.get(scope.split("[", 1)[0])
        if fn is None:
            return f"device function {scope} can no longer be reached"
        obj = _resolve(fn, name)
        if obj is _MISSING:
            return f"name '{name}' (in {fn.__qualname__}) is no longer defined"
        if identity(kind, obj) != recorded:
            return f"'{name}' (in {fn.__qualname__}) changed"
        if kind == "func":
            scopes[_func_fid(obj)] = obj.py_func
        elif kind == "template":
            scopes.update(template_scopes(obj))
    return None


def locate(deps, kernel, templates: dict, fid: str):
    """(file, first line) of the function ``fid`` as it is now, or None."""
    scopes = {}
    check_deps(deps, kernel, templates, scopes)
    fn = scopes.get(fid.split("[", 1)[0])
    return (fn.__code__.co_filename, fn.__code__.co_firstlineno) if fn is not None else None


# -- finding and storing entries -------------------------------------------------

class Keys:
    """A kernel launch's cache keys: the lowered one, and a variant key per target."""

    __slots__ = ("lowered", "argtypes", "grid", "_variants")

    def __init__(self, lowered: str, argtypes, grid: int):
        self.lowered = lowered
        self.argtypes = argtypes
        self.grid = grid
        self._variants = {}

    def for_target(self, target_key: str) -> str:
        key = self._variants.get(target_key)
        if key is None:
            key = self._variants[target_key] = variant_key(self.lowered, self.argtypes,
                                                           self.grid, target_key)
        return key

    @property
    def variant(self) -> str:
        """The variant key for this host (the user's own cache)."""
        return self.for_target(host_target_key())


def _guarded(default=None):
    def wrap(fn):
        @functools.wraps(fn)
        def inner(cache, *args, **kwargs):
            try:
                return fn(cache, *args, **kwargs)
            except Exception as e:          # noqa: BLE001 - the cache must never break a job
                cache.warn_once(f"kernel cache error ({type(e).__name__}: {e}); compiling without it")
                return default
        return inner
    return wrap


def template_ids(templates: dict):
    return sorted((p, f"{c.__module__}.{c.__qualname__}", class_fingerprint(c))
                  for p, c in templates.items())


def keys(kernel, templates, value_types, grid_ndim, debug) -> Keys:
    return Keys(lowered_key(kernel, template_ids(templates), debug), tuple(value_types), grid_ndim)


def _read_current(cache, kernel, templates, kind, key, level):
    """-> (meta, payload) of an entry whose dependency record still holds; None on a miss."""
    name = kernel.__qualname__
    got = cache.read(kind, key, level)
    if got is None:
        cache.stats.misses[level] += 1
        log.debug("kernel '%s': %s missing", name, LEVEL_NAMES[level])
        return None
    meta, payload, path = got
    reason = check_deps(meta["dep"], kernel, templates)
    if reason is not None:
        cache.stats.rejected += 1
        cache.stats.misses[level] += 1
        log.debug("kernel '%s': %s not used: dependency changed: %s", name, LEVEL_NAMES[level], reason)
        return None
    return meta, payload, path


LEVEL_NAMES = {"variant": "compiled variant", "lowered": "lowered kernel"}


def _unusable(cache, kernel, level, path, why):
    cache.stats.damaged += 1
    cache.stats.misses[level] += 1
    log.debug("kernel '%s': %s not used: %s", kernel.__qualname__, LEVEL_NAMES[level], why)
    cache.discard(path)


@_guarded()
def find_variant(cache, kernel, templates, keys: Keys):
    """-> (entry function, bounds-check sites, dependency record) of a valid, current variant; None on a miss."""
    got = _read_current(cache, kernel, templates, store.KIND_VARIANT, keys.for_target, "variant")
    if got is None:
        return None
    meta, payload, path = got
    from ..backends.elf import load_object
    from ..errors import BoundsSite
    try:
        sites = [BoundsSite(f, a, p, int(n), fid, int(off)) for f, a, p, n, fid, off in meta["site"]]
        fn = load_object(payload, meta["entry"])
    except Exception as e:                  # noqa: BLE001 - a foreign or damaged entry, never a crash
        _unusable(cache, kernel, "variant", path, f"does not load ({type(e).__name__}: {e})")
        return None
    cache.stats.hits["variant"] += 1
    log.debug("kernel '%s': loaded from the cache", kernel.__qualname__)
    return fn, sites, meta["dep"]


@_guarded()
def find_lowered(cache, kernel, templates, key: str):
    """-> the cached lowered kernel if valid and current (the front end is then skipped); None on a miss."""
    from ..ir import LoweredKernel
    got = _read_current(cache, kernel, templates, store.KIND_LOWERED, key, "lowered")
    if got is None:
        return None
    try:
        lowered = LoweredKernel.from_bytes(got[1])
    except ValueError as e:
        _unusable(cache, kernel, "lowered", got[2], f"damaged ({e})")
        return None
    cache.stats.hits["lowered"] += 1
    log.debug("kernel '%s': lowered kernel loaded from the cache (front end skipped)",
              kernel.__qualname__)
    return lowered


@_guarded(False)
def store_lowered(cache, key: str, lowered) -> bool:
    meta = {"kernel": lowered.kernel.source.name, "dep": lowered.deps}
    return cache.write(store.KIND_LOWERED, key, meta, lowered.to_bytes())


@_guarded(False)
def store_variant(cache, keys: Keys, lowered, argtypes, entry: str, sites, obj: bytes, identity) -> bool:
    import platform
    meta = {"kernel": lowered.kernel.source.name, "dep": lowered.deps, "entry": entry,
            "lowered": keys.lowered, "arg": [[str(t)] for t in argtypes],
            "argspec": [[spec(t)] for t in argtypes], "grid": str(keys.grid),
            "target_key": host_target_key(), "machine": platform.machine(),
            "arch": identity.get("cpu", ""),
            "target": ";".join(f"{k}={v}" for k, v in sorted(identity.items())),
            "site": [list(s) for s in sites or ()]}
    stored = cache.write(store.KIND_VARIANT, keys.variant, meta, obj)
    log.debug("kernel '%s': compiled%s", meta["kernel"], " and stored" if stored else "")
    return stored
