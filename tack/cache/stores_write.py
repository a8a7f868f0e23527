"""The write side of the user's cache directory: storing entries, marking them used, removing
the unusable ones (``stores`` is the read side).

A warm process reads and never imports this module: it is imported by a process's first store
(a kernel compiled), its hourly mark of a lowered kernel used with its variant, or its first
entry found damaged or not loading.  Only the user's directory is ever written (``stores.
DiskCache``, a session's ``disk``), only in mode ``write`` and, under MPI, only by rank 0
(``DiskCache.writable``).  Every failure is at most one warning and never reaches the job.
"""

import os
import time

from . import _lock, count, log
from .entry import KIND_LOWERED, KIND_VARIANT, LEVEL_NAMES, encode, entry_path
from .trust import (MARKER_TEXT, NotRegular, VERSION_MARKER, Untrusted, check_parents, file_identity,
                    touch_regular)
from .trust_write import CACHEDIR_TAG, ensure_private_dir, make_root, tag_new_root, write_atomic, write_new


def store(disk, kind: int, key: str, meta: dict, payload: bytes) -> bool:
    """Store one entry in the user's directory ``disk`` (a ``stores.DiskCache``), making the
    directory (private, tagged) and its levels as needed; False if it was not stored (said
    once, as a warning)."""
    if not disk.writable or not _root_ready(disk):
        return False
    path = entry_path(disk.version_dir, kind, key)
    t0 = time.perf_counter()
    try:
        data = encode(kind, key, meta, payload)
        try:
            _make_dirs(disk, os.path.dirname(path))
            _marked(disk)
            write_atomic(path, data)
        except FileNotFoundError:
            # A directory removed since this process checked it (``python -m tack.cache clear``
            # beside a long session): looked at and made again, once, not given up for good.
            disk._checked.clear()
            disk._usable = None
            if not _root_ready(disk):
                return False
            _make_dirs(disk, os.path.dirname(path))
            write_atomic(path, data)
    except Untrusted as e:
        disk.warn_once(f"not storing in the kernel cache: {e}")
        disk.writable = False
        return False
    except OSError as e:
        disk.warn_once(f"cannot store in the kernel cache at {disk.root}: {_os_error(e)}; "
                       "kernels still compile and run")
        return False
    count(disk.stats, "bytes_written", len(data))
    count(disk.stats, "store_seconds", time.perf_counter() - t0)
    _hourly_size_check(disk)
    return True


def _root_ready(disk) -> bool:
    """The directory there and trusted (``DiskCache.usable``, the read side's one check), made
    private and tagged first if it was missing."""
    if disk.usable() or not disk._missing:
        return disk._usable
    try:
        check_parents(disk.root)            # refused before anything is made below such a parent
        make_root(disk.root)
        made = True
    except Untrusted as e:
        disk.warn_once(f"not using the kernel cache: {e}")
        disk._usable = False
        return False
    except FileExistsError:
        made = False                        # another process's since the look: not ours to tag
    except OSError as e:
        disk.warn_once(f"not using the kernel cache at {disk.root}: {e.strerror or e}")
        return False
    disk._usable = None                     # look again, now that it is there
    if not disk.usable():
        return False
    if made:
        try:
            tag_new_root(disk.root)
        except OSError as e:
            disk.warn_once(f"not using the kernel cache at {disk.root}: {e.strerror or e}")
            disk._usable = False
    return disk._usable


def _make_dirs(disk, path: str) -> None:
    """Each level below the root made private (the version directory with its marker) and
    checked trusted, once."""
    if path in disk._checked:
        return
    parent = os.path.dirname(path)
    if parent != disk.root:
        _make_dirs(disk, parent)
    ensure_private_dir(path, VERSION_MARKER if path == disk.version_dir else None)
    disk._checked.add(path)


def _marked(disk) -> None:
    """The version directory's marker there, once a process: the directories a lookup checked
    (which reads no marker) are not made again, and one a full disk left empty is written again
    by the process's first store (``write_new``); so is an empty CACHEDIR.TAG."""
    if not getattr(disk, "marked", False):
        write_new(os.path.join(disk.version_dir, VERSION_MARKER), MARKER_TEXT)
        tag = os.path.join(disk.root, CACHEDIR_TAG[0])
        try:
            if os.lstat(tag).st_size == 0:      # left so: written again (never made where none is:
                write_new(tag, CACHEDIR_TAG[1])  # a directory the user had is not tagged)
        except OSError:
            pass
        disk.marked = True


def _hourly_size_check(disk):
    from . import size                      # a store only: the size limit's scan
    try:
        result = size.maybe_prune(disk.root, disk.settings.max_size)
    except NotRegular as e:
        if os.path.basename(e.filename or "") in (size.STAMP, size.CLAIM):
            # the stamp or claim: no check runs, nor can one be recorded, until it is removed
            import shlex
            disk.warn_once(f"cannot check the kernel cache's size at {disk.root}: {e}, where the "
                           f"size check keeps its own file; no size check runs until it is "
                           f"removed (rm -r {shlex.quote(e.filename)})")
        else:
            disk.warn_once(f"cannot check the kernel cache's size at {disk.root}: {e}; trying "
                           "again in an hour")
        return
    except OSError as e:
        disk.warn_once(f"cannot check the kernel cache's size at {disk.root}: {_os_error(e)}; "
                       "trying again in an hour")
        return
    if result and result[2]:
        log.debug("size check: %d bytes, deleted %d entries (%d bytes)", result[0], result[2], result[1])


def _os_error(e: OSError) -> str:
    """An OSError as 'reason (path)', the path being the file or directory at fault."""
    reason = e.strerror or str(e)
    return f"{reason} ({e.filename})" if e.filename else reason


def mark_used(disk, kind: int, key: str) -> None:
    """Mark an entry of ``disk`` (None: no user's directory) used now: the lowered kernel of a
    variant whose read just marked it (``Session.find_variant``), so that the size limit does
    not delete the lowered kernels of the kernels in use first."""
    if disk is not None and disk.marks_used:
        touch_regular(entry_path(disk.version_dir, kind, key), time.time())


def remove_if_unchanged(disk, path: str, st) -> None:
    """Remove an entry of ``disk`` read at ``path`` (``st``: its stat then, None: not one of the
    user's files, kept), where the process writes there, unless another process has replaced it
    since (a link put there since is another file: kept)."""
    if disk is None or not disk.writable or st is None:
        return
    try:
        if file_identity(os.lstat(path)) == file_identity(st):
            os.unlink(path)
    except OSError:
        pass


def unusable(session, kernel, level: str, found, why: str, counted_hit: bool = False,
             keep: bool = False) -> None:
    """An entry read whole but unusable (``found``: damaged fields, code that does not load):
    counted as damaged and a miss (``counted_hit``: it had been counted a hit, and served from its
    store: no longer), said in the log, and removed when it is one of the user's per-kernel files,
    unchanged since it was read.  ``keep``: not the entry's fault (the process had no memory to
    load its code): a miss, neither counted damaged nor removed."""
    stats = session.stats
    with _lock:                 # as ``count``: other threads' lookups count beside this one
        if counted_hit:
            stats["hits"][level] -= 1
            served = stats["variants_from"]
            if served.get(found.source, 0) > 1:
                served[found.source] -= 1
            else:
                served.pop(found.source, None)
        if not keep:
            stats["damaged"] += 1
        stats["misses"][level] += 1
    log.debug("kernel '%s': %s not used: %s%s", kernel.__qualname__, LEVEL_NAMES[level], why,
              "; kept" if keep else "")
    if not keep:
        remove_if_unchanged(session.disk, found.path, found.st)     # a bundle's entry has no st: kept


def store_lowered(session, key: str, meta: dict, payload: bytes) -> bool:
    """Store a lowered kernel's entry (``tack.compiler.lowered_meta`` and its bytes) under its key."""
    try:
        return session.disk is not None and store(session.disk, KIND_LOWERED, key, meta, payload)
    except Warning:                         # one of Tack's, raised as an error (-W error):
        raise                               # as it is, not as a cache error of its own
    except Exception as e:                  # noqa: BLE001 - the cache must never break a job
        session.warn_once(f"kernel cache error ({type(e).__name__}: {e}); compiling without it")
        return False


def store_variant(session, artifact) -> bool:
    """Store a compiled variant (``tack.compiler.Artifact``) under its key."""
    try:
        stored = session.disk is not None and store(session.disk, KIND_VARIANT, artifact.key, artifact.meta,
                                                    artifact.payload)
        log.debug("kernel '%s': compiled%s", artifact.meta["kernel"], " and stored" if stored else "")
        return stored
    except Warning:                         # one of Tack's, raised as an error (-W error):
        raise                               # as it is, not as a cache error of its own
    except Exception as e:                  # noqa: BLE001 - the cache must never break a job
        session.warn_once(f"kernel cache error ({type(e).__name__}: {e}); compiling without it")
        return False
