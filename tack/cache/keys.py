"""Cache keys: named steps hashed in turn, as a readable prefix plus a sha256 digest.

Nothing here imports the compiler or llvmlite: keys are computed on the warm
path from code-object fingerprints and cheap facts about the host.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys

from .._version import __version__
from ._log import TRACE, log


LOWERED_FORMAT = 1
VARIANT_FORMAT = 1


class KeyBuilder:
    """A sha256 over named steps; each step is logged at DEBUG with the running hash."""

    def __init__(self, what: str):
        self.what = what
        self.h = hashlib.sha256(what.encode())

    def add(self, name: str, value) -> "KeyBuilder":
        if isinstance(value, dict):
            value = sorted(value.items())
        text = value if isinstance(value, str) else repr(value)
        self.h.update(f"\0{name}={text}".encode())
        if log.isEnabledFor(TRACE):
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
        with open("/proc/cpuinfo", "rb") as f:
            text = f.read(65536).decode(errors="replace")     # the first CPU's block is enough
        first = text.split("\n\n", 1)[0]
        fields = {}
        for line in first.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        for key in ("vendor_id", "cpu family", "model", "model name", "flags", "Features",
                    "CPU implementer", "CPU part"):
            if key in fields:
                ident[key] = fields[key]
    except OSError:
        ident["processor"] = platform.processor()
    return ident


def _llvmlite_version() -> str:
    """Which LLVM would compile here: llvmlite's library file, by path, size and time.

    Found without importing llvmlite (its version module parses JSON at
    import) and without the import system's directory scans: a stat per
    ``sys.path`` entry.  Any upgrade replaces the library and so changes this.
    """
    names = ("libllvmlite.so", "libllvmlite.dylib", "llvmlite.dll")
    for entry in sys.path:
        lib_dir = os.path.join(entry or ".", "llvmlite", "binding")
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
    from ..frontend.fingerprint import function_fingerprint
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
    from ..frontend.fingerprint import closure_identity
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
