"""The CPU's target identity, below both halves of the CPU backend: the code generation
settings (``CODEGEN``, which ``CPUTarget`` builds its target machine from: no hand copy) and
the keys made from them, read without llvmlite.

``host_key()`` names code compiled on this host for this host (the user's own cache);
``arch_key(arch)`` names code compiled ahead of time for an archspec microarchitecture (site
bundles), found on a node from archspec and llvmlite's version without compiling.
``CPUTarget(...).key`` (``backends.cpu``) equals the one of these it compiles for, and the
runtime (``backends.cpu_runtime``) looks code up with them: both import this module, and it
imports neither.
"""

import functools
import os
import platform
import sys

from ..cache.keys import digest

KIND = "cpu"
_host_identity = _host_key = None           # per process, found once


def host_cpu_identity() -> dict:
    """Facts that fix what LLVM's host detection sees, read without LLVM (once per process).

    The CPU's model and feature flags (from /proc/cpuinfo on Linux), the
    machine type, and llvmlite's library (which pins the LLVM version).
    Where cpuinfo is missing or lists no feature flags (macOS, Windows, some
    containers and architectures), LLVM's own host CPU name and features:
    slower to get (it loads LLVM), but never a key that two CPUs share.
    """
    global _host_identity
    if _host_identity is not None:
        return _host_identity
    ident = {"machine": platform.machine(), "system": sys.platform, "llvmlite": _llvmlite_version()}
    try:
        cpu = _first_cpu("/proc/cpuinfo")
    except OSError:
        cpu = {}
    if not (cpu.get("flags") or cpu.get("Features")):
        cpu.update(_llvm_host_cpu())
    ident.update(cpu)
    _host_identity = ident
    return ident


def _llvm_host_cpu() -> dict:
    """LLVM's name and features of this host's CPU (what code is compiled for here)."""
    try:
        import llvmlite.binding as llvm
        return {"llvm cpu": llvm.get_host_cpu_name(), "llvm features": llvm.get_host_cpu_features().flatten()}
    except Exception as e:                      # noqa: BLE001 - no LLVM: nothing compiles here either
        return {"processor": platform.processor(), "llvm": f"unavailable ({type(e).__name__})"}


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
    for entry in sys.path:
        lib_dir = os.path.join(entry or ".", "llvmlite", "binding")
        found = _library_in(lib_dir) if os.path.isdir(lib_dir) else None
        if found:
            return found
    # Not on a sys.path entry: an import hook (an editable install of llvmlite) finds it.
    # Without this every LLVM found that way would share one key, "none", and serve stale code.
    try:
        import importlib.util
        spec = importlib.util.find_spec("llvmlite")
    except (ImportError, ValueError):
        spec = None
    for place in (spec.submodule_search_locations or ()) if spec is not None else ():
        found = _library_in(os.path.join(place, "binding"))
        if found:
            return found
    return "none"


def _library_in(lib_dir: str) -> str | None:
    """``<path>:<size>:<mtime>`` of llvmlite's library in ``lib_dir``, or None."""
    for name in ("libllvmlite.so", "libllvmlite.dylib", "llvmlite.dll"):
        try:
            st = os.stat(os.path.join(lib_dir, name))
        except OSError:
            continue
        return f"{os.path.abspath(lib_dir)}/{name}:{st.st_size}:{st.st_mtime_ns}"
    return None


CODEGEN = {"opt": 3, "reloc": "static", "codemodel": "large"}


def _block_limit() -> int:
    raw = os.environ.get("TACK_TEST_BLOCK_LIMIT", "").strip()
    return max(1, int(raw)) if raw.isdigit() else 2000


# The longest basic block instruction selection is given: longer ones are cut
# (``backends.long_blocks``, ``CPUTarget.optimize``); it enters the target keys with
# CODEGEN, as the code may differ.  TACK_TEST_BLOCK_LIMIT (read once per process) sets
# another, for tests to cut small kernels' blocks.
LIMITS = {"block": _block_limit()}


def host_key() -> str:
    """Target key of code compiled on this host for this host (the user's own cache)."""
    global _host_key
    if _host_key is None:
        _host_key = digest("target", ("backend", KIND), ("host", host_cpu_identity()),
                           ("codegen", CODEGEN), ("limits", LIMITS))
    return _host_key


def arch_key(arch: str, llvm: str | None = None) -> str:
    """Target key of code compiled ahead of time for the archspec microarchitecture ``arch``
    (a bare name: ``zen3``) with LLVM ``llvm`` (this node's by default)."""
    return digest("target", ("backend", KIND), ("arch", arch),
                  ("llvm", llvm or llvm_version()), ("codegen", CODEGEN), ("limits", LIMITS))


_llvm_version = None


def llvm_version() -> str:
    """The LLVM that compiles here, as llvmlite's version, without loading LLVM (once per
    process).  Read from the text of ``llvmlite/_version.py`` where llvmlite's package is first
    found on ``sys.path``, as ``import llvmlite`` would find it: importing it costs a site
    bundle's first call about 1 M instructions (two modules), for one string.  Where that file
    does not say it plainly (another llvmlite's layout), ``llvmlite.__version__`` itself."""
    global _llvm_version
    if _llvm_version is None:
        _llvm_version = f"llvmlite-{_llvmlite_version_text() or _imported_llvmlite_version()}"
    return _llvm_version


def _llvmlite_version_text() -> str | None:
    """``version_version = '0.44.0'`` in llvmlite/_version.py (versioneer's file), else None."""
    for entry in sys.path:
        pkg = os.path.join(entry or ".", "llvmlite")
        if not os.path.isfile(os.path.join(pkg, "__init__.py")):
            continue
        try:
            with open(os.path.join(pkg, "_version.py"), "rb") as f:
                text = f.read(65536).decode("utf-8", "replace")
        except OSError:
            return None
        for line in text.splitlines():
            name, eq, value = line.partition("=")
            value = value.strip()
            if (eq and name.strip() == "version_version" and len(value) > 2
                    and value[0] == value[-1] and value[0] in "'\""):
                version = value[1:-1]
                if version and all(c.isalnum() or c in ".+-_" for c in version):
                    return version
        return None
    return None


def _imported_llvmlite_version() -> str:
    import llvmlite
    return llvmlite.__version__


@functools.lru_cache(maxsize=None)
def host_arch() -> str:
    """This node's microarchitecture by archspec's name (zen3, ...)."""
    from ..archs import host_cpu
    return host_cpu()
