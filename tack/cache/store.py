"""Writing entries, and what only a miss needs: the cold half of the cache.

``warm.py`` has what a cache hit runs, including the entry format's reader;
here is its writer.  Writes go to a temporary file in the same directory,
renamed into place, so a reader sees a whole entry or none; entries are
created private (0600).  The metadata is written as tab-separated text with
tabs, newlines and backslashes escaped.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import time

from . import log
from .warm import (TMP_MARK, NotRegular, Untrusted, _HEAD, _kind_of, _read_current,
                   _unusable, check_deps, check_trusted, entry_path, read_regular)
# The entry format in one namespace, reader (warm.py) and writer (here):
from .warm import (KIND_LOWERED, KIND_VARIANT, LEVEL_DIR, MAGIC, SUFFIX,  # noqa: F401
                   DamagedEntry, check_stat, decode, decode_meta)

# -- the entry format's writer ---------------------------------------------------

_ESCAPE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n"})


def encode_meta(meta: dict) -> bytes:
    """``{field: str | [row of str, ...]}`` -> text lines (rows for list fields)."""
    lines = []
    for field, value in sorted(meta.items()):
        rows = value if isinstance(value, list) else [[value]]
        for row in rows:
            lines.append("\t".join([field] + [str(v).translate(_ESCAPE) for v in row]))
    return "\n".join(lines).encode()


def encode(kind: int, key: str, meta: dict, payload: bytes) -> bytes:
    meta_b = encode_meta(meta)
    digest = hashlib.sha256(key.encode() + meta_b + payload).digest()
    return _HEAD.pack(MAGIC, kind, len(meta_b), len(payload), digest, key.encode()) + meta_b + payload


def read_file(path: str) -> bytes:
    """A regular file's bytes (NotRegular, an OSError, for a FIFO, device or link: never a hang)."""
    return read_regular(path)[0]


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory."""
    _refuse_non_regular(path)
    tmp = f"{path}{TMP_MARK}{os.getpid()}.{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # No fsync: after a crash the rename may survive with incomplete data,
        # but every entry carries its checksum, so such a file is ignored, and
        # a compile does not wait for the disk (milliseconds per entry).
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _refuse_non_regular(path: str) -> None:
    """A write never replaces what is not a regular file (a FIFO, a directory, a link someone
    put there): that is not the cache's to delete.  NotRegular (an OSError) instead."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, _kind_of(st))


def ensure_private_dir(path: str, marker: str | None = None) -> None:
    """Create ``path`` (0700) if missing, then check it as ``check_trusted`` does.

    ``marker``: the name of a file written in it (when missing) to say the cache
    made it, so that ``clear`` and ``prune`` know it for one of theirs.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_trusted(path)
    if marker is not None:
        from .size import MARKER_TEXT
        write_new(os.path.join(path, marker), MARKER_TEXT)


CACHEDIR_TAG = ("CACHEDIR.TAG", b"Signature: 8a477f597d28d172789f06886806bc55\n"
                b"# This file is a cache directory tag created by Tack (its kernel cache).\n"
                b"# For information about cache directory tags, see https://bford.info/cachedir/\n")


def tag_new_root(root: str) -> None:
    """Tag a cache directory that Tack itself created (backup tools then skip it).
    Never a directory the user already had: it may hold their own files."""
    write_new(os.path.join(root, CACHEDIR_TAG[0]), CACHEDIR_TAG[1])


def write_new(path: str, data: bytes) -> None:
    """Create ``path`` holding ``data`` unless something is there already (whatever it is)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# -- writing to the user's directory --------------------------------------------

def write_entry(disk, kind: int, key: str, meta: dict, payload: bytes) -> bool:
    """``DiskCache.write``: store one entry in the user's directory; False if it was not stored."""
    if not disk.writable or not disk.usable():
        return False
    path = entry_path(disk.version_dir, kind, key)
    t0 = time.perf_counter()
    try:
        disk._dir_ok(os.path.dirname(path), create=True)
        data = encode(kind, key, meta, payload)
        write_atomic(path, data)
    except Untrusted as e:
        disk.warn_once(f"not storing in the kernel cache: {e}")
        disk.writable = False
        return False
    except OSError as e:
        disk.warn_once(f"cannot store in the kernel cache at {disk.root}: {_os_error(e)}; "
                       "kernels still compile and run")
        return False
    disk.stats["bytes_written"] += len(data)
    disk.stats["store_seconds"] += time.perf_counter() - t0
    _hourly_size_check(disk)
    return True


def _os_error(e: OSError) -> str:
    """An OSError as 'reason (path)', the path being the file or directory at fault."""
    reason = e.strerror or str(e)
    return f"{reason} ({e.filename})" if e.filename else reason


def _hourly_size_check(disk):
    from . import size
    try:
        result = size.maybe_prune(disk.root, disk.settings.max_size)
    except OSError as e:
        disk.warn_once(f"cannot check the kernel cache's size at {disk.root}: {_os_error(e)}; "
                       "trying again in an hour")
        return
    if result and result[2]:
        log.debug("size check: %d bytes, deleted %d entries (%d bytes)",
                  result[0], result[2], result[1])



# -- what a miss runs ------------------------------------------------------------

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


@_guarded()
def find_lowered(cache, kernel, templates, key: str):
    """-> the cached lowered kernel if valid and current (the front end is then skipped); None on a miss."""
    from ..ir import LoweredKernel
    got = _read_current(cache, kernel, templates, KIND_LOWERED, key, "lowered")
    if got is None:
        return None
    try:
        lowered = LoweredKernel.from_bytes(got[1])
    except ValueError as e:
        _unusable(cache, kernel, "lowered", got[2], f"damaged ({e})")
        return None
    cache.stats["hits"]["lowered"] += 1
    log.debug("kernel '%s': lowered kernel loaded from the cache (front end skipped)",
              kernel.__qualname__)
    return lowered


@_guarded(False)
def store_lowered(cache, key: str, meta: dict, payload: bytes) -> bool:
    """Store a lowered kernel's entry (``tack.compiler.lowered_meta`` and its bytes) under its key."""
    return cache.write(KIND_LOWERED, key, meta, payload)


@_guarded(False)
def store_variant(cache, artifact) -> bool:
    """Store a compiled variant (``tack.compiler.Artifact``) under its key."""
    stored = cache.write(KIND_VARIANT, artifact.key, artifact.meta, artifact.payload)
    log.debug("kernel '%s': compiled%s", artifact.meta["kernel"], " and stored" if stored else "")
    return stored


def locate(deps, kernel, templates: dict, fid: str):
    """(file, first line) of the function ``fid`` as it is now, or None."""
    scopes = {}
    check_deps(deps, kernel, templates, scopes)
    fn = scopes.get(fid.split("[", 1)[0])
    return (fn.__code__.co_filename, fn.__code__.co_firstlineno) if fn is not None else None
