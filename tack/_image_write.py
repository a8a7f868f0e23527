"""Writing Tack's import image (``tack._image`` reads it): every module's code, compiled from the
source it records the hash of, in one file beside the ``.pyc`` files, written atomically.

Kept apart from the reader so that a warm process, which only reads the image, does not load
the writer's code: it is imported by ``python -m tack.site image``, ``bundles install`` and a
process that compiled a kernel (``refresh``).
"""

import marshal
import os
import sys
import tempfile
import time
import types
import zlib

from ._image import (BY_CONTENT, FORMAT, MAGIC_NUMBER, cache_dir, finder, image_path, open_image, same_source,
                     source_hash)


# The modules a warm process imports together, each group marshalled as one (``tack._image``):
# those ``import tack`` imports from the image, and those a first call served from the user's
# cache directory on the CPU adds (a site bundle's adds ``cache.bundle`` and
# ``backends.cpu_levels``, a device's its runtime: each alone).  tests/test_warm_imports.py holds
# them to what a warm process imports.  Each in an order in which every module comes after its
# package and the group's modules it imports at its top: ``ImageFinder.preload`` runs them in it
# (tests/test_import_image.py checks the order).
GROUPS = (
    ("tack._version", "tack.digests", "tack.language", "tack.api", "tack.fingerprints",
     "tack.records", "tack.types", "tack.argtypes", "tack.errors", "tack.config", "tack.devices",
     "tack.launch"),
    ("tack.backends", "tack.backends.argument_layout", "tack.cache", "tack.cache.keys",
     "tack.backends.cpu_identity", "tack.backends.cpu_loader", "tack.backends.variant",
     "tack.backends.cpu_runtime", "tack.cache.deps", "tack.cache.entry", "tack.cache.trust",
     "tack.cache.stores"),
)


def _modules(package: str, package_dir: str):
    """(module name, path relative to package_dir with '/', is package) of every .py file."""
    for here, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith(".")
                         and os.path.isfile(os.path.join(here, d, "__init__.py")))
        rel_dir = os.path.relpath(here, package_dir)
        parts = [] if rel_dir == "." else rel_dir.split(os.sep)
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            rel = "/".join(parts + [f])
            if f == "__init__.py":
                yield ".".join([package] + parts), rel, True
            else:
                yield ".".join([package] + parts + [f[:-3]]), rel, False


def _code(path: str, rel: str, st):
    """(the code object or None where the source does not compile, ``source_hash``) of the
    source at ``path`` (``rel`` in the package; its stat is ``st``), compiled from the very bytes
    hashed, as CPython's loader compiles a source (never its ``.pyc``, which may hold another
    source's code: an unchecked-hash one, or one written in the second of an edit of the same
    size), named ``rel`` (``_named``); None if the source changed meanwhile."""
    with open(path, "rb") as fh:
        source = fh.read()
    after = os.stat(path)
    if (after.st_mtime_ns, after.st_size) != (st.st_mtime_ns, st.st_size) or len(source) != st.st_size:
        return None
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None, source_hash(source)    # imported as usual, and its error raised then
    return _named(code, rel), source_hash(source)


def _named(code, filename: str):
    """``code`` with ``filename`` as its and its nested code objects' ``co_filename``.

    The image records the path relative to the package, never the directory it was written
    in: a package manager that relocates an install rewrites the old prefix wherever a file
    holds it (conda's binary replacement, Spack's), which would corrupt marshalled strings;
    the loader sets the real path (``_imp._fix_co_filename``, as importing a ``.pyc`` does)."""
    consts = tuple(_named(c, filename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def current(package: str, package_dir: str, read_code: bool = True) -> bool:
    """Whether the image holds every module of the package as its source is now, each one's
    code readable (``read_code``: unmarshalled here, a few milliseconds)."""
    return check(package, package_dir, read_code)[0]


def check(package: str, package_dir: str, read_code: bool = True) -> tuple[bool, int]:
    """(whether the image is current, as ``current`` says; how many of its modules only by
    their content: their sources' times moved since it was written, so every process that
    imports them reads and hashes their sources, where a rewritten image would check a time).
    What ``image --check`` says; ``image`` and a process that compiled rewrite it unless it is
    current with no module moved."""
    f = open_image(package, package_dir)
    if f is None:
        return False, 0
    try:
        want = {}
        for name, rel, _ in _modules(package, package_dir):
            want[name] = rel
        if set(want) != set(f.index):
            return False, 0
        moved = 0
        for name, rel in want.items():
            e = f.index[name]
            how = e[0] == rel and same_source(os.path.join(package_dir, rel), *e[2:5])
            if not how:
                return False, 0
            moved += how is BY_CONTENT
            if read_code and e[7] is not None:
                f.code(*e[5:9], rel)        # ValueError where damaged (a relocation that rewrote it...)
        return True, moved
    except (OSError, LookupError, TypeError, ValueError, EOFError):
        return False, 0
    finally:
        f.close()


def write(package: str, package_dir: str, wait: bool = True) -> tuple[str, int, int]:
    """Write the package's image; (its path, modules, bytes).  Raises OSError if it cannot.

    A source stamped in the present second could still be edited within it at the same size,
    its time unchanged (CPython's ``.pyc`` check has that hole): with ``wait`` (``image``, an
    install that writes it just after copying the sources) the writer waits for the second to
    pass, at most about a second; without (a compiling process) such a source is recorded with
    no time, and checked by its content until an image written later records its time."""
    path = image_path(package_dir)
    if path is None:
        raise OSError("this Python keeps no bytecode files (sys.implementation.cache_tag is None)")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    modules = list(_modules(package, package_dir))
    now = _now(os.path.dirname(path))
    for _ in range(3 if wait else 0):
        if not any(int(os.stat(os.path.join(package_dir, rel)).st_mtime) == now for _, rel, _ in modules):
            break
        time.sleep(max(0.0, now + 1 - time.time()) + 0.01)
        now = _now(os.path.dirname(path))
    group_of = {m: g for g, members in enumerate(GROUPS) for m in members}
    index, blobs, offset, grouped = {}, [], 0, [[] for _ in GROUPS]
    for name, rel, is_package in modules:
        source = os.path.join(package_dir, rel)
        st = os.stat(source)
        got = _code(source, rel, st)
        if got is None:
            continue                        # changed while we read it: imported as usual
        code, digest = got
        # A source whose time is this second or later may yet be edited within its second, at the
        # same size: its time would still match.  It gets no time (None: checked by content, a
        # moved time, until an image written later records it); git's "racy" entries likewise.
        mtime = int(st.st_mtime) if int(st.st_mtime) < now else None
        if code is None:                    # held, as not served: the image is still current
            index[name] = (rel, is_package, mtime, st.st_size, digest, 0, 0, None, None)
            continue
        head = (rel, is_package, mtime, st.st_size, digest)
        if name in group_of:
            grouped[group_of[name]].append((name, head, code))
            continue
        data = marshal.dumps(code)
        index[name] = head + (offset, len(data), zlib.crc32(data), None)
        blobs.append(data)
        offset += len(data)
    for g, members in enumerate(grouped):
        if not members:
            continue
        members.sort(key=lambda m: GROUPS[g].index(m[0]))      # each in its group's order: preload's
        data = marshal.dumps(tuple(code for _, _, code in members))
        for slot, (name, head, _) in enumerate(members):
            index[name] = head + (offset, len(data), zlib.crc32(data), slot)
        blobs.append(data)
        offset += len(data)
    head = marshal.dumps(index)
    payload = b"".join([FORMAT, MAGIC_NUMBER, len(head).to_bytes(4, "little"),
                        zlib.crc32(head).to_bytes(4, "little"), head] + blobs)
    from .cache.trust_write import write_atomic   # a temporary file renamed into place, as entries
    write_atomic(path, payload, mode=0o644)
    return path, len(index), len(payload)


def _now(directory: str) -> int:
    """The present second, before any source is read, by the earlier of this host's clock and
    the file system's (a new file's time in ``directory``): on a network file system the
    server's clock stamps an edit, and it may be behind this host's."""
    now = time.time()
    try:
        fd, probe = tempfile.mkstemp(prefix=".import-image-clock.", dir=directory)
        try:
            now = min(now, os.fstat(fd).st_mtime)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError:
        pass
    return int(now)


_refreshed = False


def refresh(package: str = "tack") -> None:
    """Write the package's image if it is missing or stale, where CPython would write a .pyc:
    called once by a process that compiled a kernel.  Never raises."""
    global _refreshed
    if _refreshed or sys.dont_write_bytecode:
        return
    _refreshed = True
    try:
        package_dir = os.path.dirname(sys.modules[package].__file__)
        where = cache_dir(package_dir)      # (under -X pycache_prefix, a tree of its own)
        while not os.path.isdir(where) and os.path.dirname(where) != where:
            where = os.path.dirname(where)
        if not os.access(where, os.W_OK):
            return
        mine = finder(package)              # closed here: a module's code did not read
        damaged = mine is not None and mine.fd is None
        ok, moved = check(package, package_dir, read_code=False)
        if damaged or not ok or moved:
            write(package, package_dir, wait=False)
    except Exception:                       # noqa: BLE001 - an optimisation, never an error
        pass
