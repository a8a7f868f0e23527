"""The size limit: least-recently-used entries go first, checked at most once an hour.

An entry's last use is its mtime, set when it is stored and bumped when it
is loaded if more than an hour old (atime is not reliable: noatime,
relatime).  Every Tack version's entries count against one limit.  A process
that stores entries checks the total at most once an hour for all processes
together: it claims the check by creating a claim file exclusively, next to
a stamp file whose mtime is the last check.  Past the limit, entries are
deleted oldest first until 90% of the limit is left.  Bundles and any file
the cache did not make are neither counted nor deleted.
"""

from __future__ import annotations

import os
import re
import time

from .warm import SUFFIX, TMP_MARK

HOUR = 3600
STAMP = "size-check.stamp"
CLAIM = "size-check.claim"
_ENTRY_SUFFIXES = tuple(SUFFIX.values())
_STALE_TMP = 3600          # a temporary file this old was left by a writer that died
_STALE_CLAIM = 600


def touch_if_stale(path: str, now: float | None = None) -> bool:
    """Mark an entry used: bump its mtime if it is more than an hour old (one write an hour).

    (The read path does the same inline, in warm.py, from the mtime it already has.)
    """
    now = time.time() if now is None else now
    try:
        if now - os.stat(path).st_mtime > HOUR:
            os.utime(path, (now, now))
            return True
    except OSError:
        pass
    return False


def is_version_dir(root: str, name: str) -> bool:
    path = os.path.join(root, name)
    return name[:1].isdigit() and os.path.isdir(path) and not os.path.islink(path) and \
        any(os.path.isdir(os.path.join(path, d)) for d in ("lowered", "variants"))


def entries(root: str):
    """(path, size, mtime, version, level) of every entry in every version directory."""
    out = []
    for version in sorted(os.listdir(root)):
        if not is_version_dir(root, version):
            continue
        vdir = os.path.join(root, version)
        for level in ("lowered", "variants"):
            ldir = os.path.join(vdir, level)
            if not os.path.isdir(ldir) or os.path.islink(ldir):
                continue
            for fan in os.listdir(ldir):
                fdir = os.path.join(ldir, fan)
                if not os.path.isdir(fdir) or os.path.islink(fdir):
                    continue
                for name in os.listdir(fdir):
                    path = os.path.join(fdir, name)
                    if TMP_MARK in name or not name.endswith(_ENTRY_SUFFIXES):
                        continue
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue
                    out.append((path, st.st_size, st.st_mtime, version, level))
    return out


_TMP_RE = re.compile(r"^(?:[0-9a-f]{64}\.(?:tlk|tvar)|bundle-[^/]+)\.tmp\.\d+\.[0-9a-f]+$")


def _own_dirs(root):
    """The directories the cache writes entries in (never through a link), and the root."""
    yield root
    for version in os.listdir(root):
        if not is_version_dir(root, version):
            continue
        for level in ("lowered", "variants"):
            ldir = os.path.join(root, version, level)
            if os.path.isdir(ldir) and not os.path.islink(ldir):
                for fan in os.listdir(ldir):
                    fdir = os.path.join(ldir, fan)
                    if os.path.isdir(fdir) and not os.path.islink(fdir):
                        yield fdir


def remove_stale_temporaries(root: str, now: float | None = None) -> int:
    """Delete temporary files that writers which died left behind; -> how many.

    Only names the cache's own writes produce (``<entry>.tmp.<pid>.<hex>``),
    only where it writes them: never any other file.
    """
    now = time.time() if now is None else now
    removed = 0
    for d in _own_dirs(root):
        for name in os.listdir(d):
            if not _TMP_RE.match(name):
                continue
            path = os.path.join(d, name)
            try:
                if now - os.lstat(path).st_mtime > _STALE_TMP:
                    os.unlink(path)
                    removed += 1
            except OSError:
                pass
    return removed


def prune(root: str, max_size: int | None) -> tuple[int, int, int]:
    """Delete least recently used entries until 90% of ``max_size`` is left (when over it).

    -> (total bytes before, bytes deleted, entries deleted)
    """
    items = entries(root)
    total = sum(size for _, size, *_ in items)
    if max_size is None or total <= max_size:
        return total, 0, 0
    target = int(max_size * 0.9)
    freed = count = 0
    for path, size, *_ in sorted(items, key=lambda e: e[2]):
        if total - freed <= target:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        freed += size
        count += 1
    return total, freed, count


def last_check(root: str) -> float | None:
    try:
        return os.stat(os.path.join(root, STAMP)).st_mtime
    except OSError:
        return None


def _stamp(stamp: str, now: float):
    with open(stamp, "a"):
        pass
    os.utime(stamp, (now, now))


def maybe_prune(root: str, max_size: int | None, now: float | None = None):
    """The hourly check: at most one process an hour scans and prunes. -> prune's result or None."""
    now = time.time() if now is None else now
    stamp = os.path.join(root, STAMP)
    last = last_check(root)
    if last is not None and now - last < HOUR:
        return None
    claim = os.path.join(root, CLAIM)
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if now - os.stat(claim).st_mtime > _STALE_CLAIM:
                os.unlink(claim)            # its holder died; the next process may claim
        except OSError:
            pass
        return None
    try:
        os.close(fd)
        last = last_check(root)                 # another process may have just finished
        if last is not None and now - last < HOUR:
            return None
        try:
            result = prune(root, max_size)
            remove_stale_temporaries(root, now)
        except OSError:
            # A scan that fails (an unreadable directory, one removed meanwhile) is tried
            # again in an hour, like one that succeeds: never at every store of every process.
            try:
                _stamp(stamp, now)
            except OSError:
                pass
            raise
        _stamp(stamp, now)
        return result
    finally:
        try:
            os.unlink(claim)
        except OSError:
            pass
