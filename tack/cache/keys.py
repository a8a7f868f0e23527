"""Cache keys: named steps hashed in turn, from code-object fingerprints and cheap facts.

``digest`` hashes ``(name, value)`` steps in order and logs each at TRACE
with the running hash (TACK_CACHE_LOG=2), so a key that differs between two
processes shows the first step where they part.  A lowered kernel's key is
its code, closure, templates, the Tack version and the debug flag; a
variant's is the lowered key, the argument types, the grid's rank and the
target key, which the caller's runtime names (the cache never computes one).
"""

import os
import sys
import types

from .._version import __version__
from ..digests import hasher
from ..fingerprints import class_fingerprint, closure_identity, function_fingerprint
from . import TRACE, log


LOWERED_FORMAT = 5      # 5: math functions of literals alone folded (math.sqrt(2.0));
                        # 4: NaNs of their own sign and payload; 3: each function's qualified name;
                        # 2: float literals alone folded (1 / 3),
                        # literal device-function arguments
VARIANT_FORMAT = 2      # 2: arrays by dtype, rank, layout and writability (shapes only where static)


def digest(what: str, *steps) -> str:
    """The digest (``tack.digests``) over named steps ``(name, value)`` in turn; each is logged at TRACE with the running hash."""
    h = hasher(what.encode())
    trace = log.isEnabledFor(TRACE)
    for name, value in steps:
        if isinstance(value, dict):
            value = sorted(value.items())
        text = value if isinstance(value, str) else repr(value)
        h.update(f"\0{name}={text}".encode())
        if trace:
            log.log(TRACE, "%s key: %s=%s -> %s", what, name, text[:80], h.hexdigest()[:16])
    return h.hexdigest()


_version_id = None      # per process, found once


def tack_version_id() -> str:
    """This Tack's version (found once per process); see ``source_version_id``."""
    global _version_id
    if _version_id is None:
        _version_id = source_version_id()
    return _version_id


def shown_version(version) -> str:
    """``version`` as messages print it: a checkout's source hash cut to 12 hex digits
    (``0.1.0+src.1a2b3c4d5e6f``), which tells edits apart on a screen; keys and directory names keep
    the whole id (``--json`` prints it)."""
    if not isinstance(version, str):
        return str(version)
    for tag in ("+src.", "+rec."):
        head, sep, digest_hex = version.partition(tag)
        if sep:
            return f"{head}{sep}{digest_hex[:12]}" if len(digest_hex) > 12 else version
    return version


def source_version_id() -> str:
    """This Tack's version; for a source checkout, the version plus a hash of Tack's sources.

    Each edit of a checkout then keeps its own entries, as each release does.
    The sources are identified by each file's path, size and modification
    time (an edit changes at least the time), which costs a stat per file
    rather than reading them all on every process start.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not _in_checkout(root):
        return installed_version_id(root)
    h = hasher()

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


def installed_version_id(package_dir: str) -> str:
    """An installed Tack's version: ``0.1.0+rec.<hash>``, the hash of the lines of its wheel's
    RECORD (``tack-0.1.0.dist-info/RECORD`` beside the package) that name its ``.py`` files with
    their SHA-256, so that a reinstall of another commit under the same version number keeps
    entries of its own, and any install of the same wheel (a Spack, conda or EasyBuild package,
    relocated or not) shares them.  One small file read; without a RECORD (a copy of the package
    made another way), the version alone."""
    record = os.path.join(os.path.dirname(package_dir), f"tack-{__version__}.dist-info", "RECORD")
    try:
        with open(record, "rb") as f:
            text = f.read(1 << 20)
    except OSError:
        return __version__
    lines = sorted(line for line in text.splitlines() if line.startswith(b"tack/") and b".py," in line
                   and b",sha256=" in line)
    if not lines:
        return __version__
    digest_hex = hasher(b"\n".join(lines)).hexdigest()
    return f"{__version__}+rec.{digest_hex}"


def _in_checkout(package_dir: str) -> bool:
    parent = os.path.dirname(package_dir)
    return os.path.exists(os.path.join(parent, ".git")) or \
        os.path.exists(os.path.join(parent, "pyproject.toml"))


def lowered_key(kernel, template_ids, debug: bool) -> str:
    """Key of a lowered kernel: its source (as code), specialization, Tack version, debug flag."""
    fn = kernel.py_func
    return digest("lowered",
                  ("format", LOWERED_FORMAT),
                  ("tack", tack_version_id()),
                  ("python", f"{sys.version_info[0]}.{sys.version_info[1]}"),
                  ("kernel", f"{fn.__module__}.{fn.__qualname__}"),
                  ("code", function_fingerprint(fn)),
                  ("closure", _closure_ids(fn)),
                  ("templates", template_ids),
                  ("debug", bool(debug)))


def _closure_ids(fn):
    """What a kernel made by a factory closes over, so each closure keeps its own entries."""
    if not fn.__closure__:
        return []
    out, memo = [], {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
        try:
            out.append((name, closure_identity(cell.cell_contents, _memo=memo)))
        except ValueError:          # an empty cell: the front end says which name (func_id too)
            out.append((name, "<empty>"))
    return out


def variant_key(lowered: str, argtypes, grid_ndim: int, target: str) -> str:
    """Key of a compiled variant: the lowered key plus argument types (an array's dtype, rank,
    layout, writability, and its shape where compiled in), grid rank and target."""
    return digest("variant",
                  ("format", VARIANT_FORMAT),
                  ("lowered", lowered),
                  ("args", [repr(t) for t in argtypes]),
                  ("grid", grid_ndim),
                  ("target", target))


def template_ids(templates: dict):
    return sorted((p, f"{c.__module__}.{c.__qualname__}", class_fingerprint(c))
                  for p, c in templates.items())


def keys(kernel, templates, value_types, grid_ndim, debug):
    """A launch's cache keys: ``.lowered``, and ``.for_target(target key)``, its variant's key
    for a target (this host's: the runtime's ``host_key()``), each made once."""
    lowered = lowered_key(kernel, template_ids(templates), debug)
    argtypes = tuple(value_types)
    variants = {}

    def for_target(target_key: str) -> str:
        key = variants.get(target_key)
        if key is None:
            key = variants[target_key] = variant_key(lowered, argtypes, grid_ndim, target_key)
        return key
    return types.SimpleNamespace(lowered=lowered, argtypes=argtypes, grid=grid_ndim, for_target=for_target)
