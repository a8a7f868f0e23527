"""The size limit: least-recently-used entries go first, checked at most once an hour.

An entry's last use is its mtime, set when it is stored and bumped when it
is loaded if more than an hour old (atime is not reliable: noatime,
relatime).  Every Tack version's entries count against one limit.  A process
that stores entries checks the total at most once an hour for all processes
together: it claims the check by creating a claim file exclusively, next to
a stamp file whose mtime is the last check.  Past the limit, entries are
deleted oldest first until 90% of the limit is left.  Bundles and any file
the cache did not make are neither counted nor deleted.  One exception: a file
at an entry's place in a version directory (``<version>/<level>/<fan>/<key><suffix>``)
whose bytes are all zero (or which has none) is what a crash leaves when an
entry's rename reached the disk and its data did not (``is_crash_leftover``):
no user's data, it is counted and goes first.
"""

from __future__ import annotations

import os
import re
import stat
import time

from . import bundle
from .entry import HEAD, LEVEL_DIR, MAGIC, SUFFIX, is_entry_magic
from .trust import (MARKER_TEXT, TMP_MARK, VERSION_MARKER, NotRegular, kind_of, mark_fd, open_regular,
                    read_regular, touch_regular)

_O_NOWAIT = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)

LEVELS = ("lowered", "variants")
_MAGICS = (MAGIC, bundle.MAGIC)        # an entry's, a bundle's

HOUR = 3600
STAMP = "size-check.stamp"
CLAIM = "size-check.claim"
_ENTRY_SUFFIXES = tuple(SUFFIX.values())
_STALE_TMP = 3600          # a temporary file this old was left by a writer that died
_STALE_CLAIM = 600
STALE_CLAIM_MINUTES = _STALE_CLAIM // 60     # (what info says of a claim)


def touch_if_stale(path: str, now: float | None = None) -> bool:
    """Mark an entry used: bump its mtime if it is more than an hour old, or dated more than an
    hour ahead (a clock ahead set it), so one write an hour.

    (The read path does the same inline, in stores.py, through the descriptor it read.)
    Never through a link: a link, a FIFO or another's file at ``path`` is left as it is.
    """
    now = time.time() if now is None else now
    return touch_regular(path, now, older_than=HOUR)


def is_version_dir(root: str, name: str) -> bool:
    """A version directory the cache made: a real directory holding the cache's marker
    (or, made before markers were written, named like a version and holding a level)."""
    path = os.path.join(root, name)
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    if is_marker(os.path.join(path, VERSION_MARKER)):
        return True
    return _version_name(name) and any(_is_real_dir(os.path.join(path, d)) for d in LEVELS)


def _version_name(name: str) -> bool:
    """Named as Tack names a version's directory: ``MAJOR.MINOR[.PATCH...]``, then, for a
    checkout, ``+src.<hex>``, or for an install, ``+rec.<hex>`` (not ``2024`` or ``3d-models``,
    a user's own directories)."""
    release, plus, local = name.partition("+")
    parts = release.split(".")
    return (len(parts) >= 2 and all(p.isascii() and p.isdigit() for p in parts)
            and (not plus or local.startswith(("src.", "rec."))))


def _is_real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_marker(path: str) -> bool:
    """Whether ``path`` is a marker file the cache wrote (a regular file with its text)."""
    try:
        data, _ = read_regular(path, limit=len(MARKER_TEXT))
    except OSError:
        return False
    return data == MARKER_TEXT


def is_own_file(path: str) -> bool:
    """Whether ``path`` is a file the cache wrote, checked by its content, not its name:
    an entry (of any Tack's format) whose header holds its kind and key, or a temporary file of one (or of a
    bundle) that holds the start of one; or what a crash left of an entry (``is_crash_leftover``).
    Never follows a link or opens a FIFO."""
    return _is_entry_or_temporary(path) or is_crash_leftover(path)


def _is_entry_or_temporary(path: str) -> bool:
    name = os.path.basename(path)
    try:
        head, _ = read_regular(path, limit=HEAD.size)
    except OSError:
        return False
    if TMP_MARK in name:
        return _TMP_RE.match(name) is not None and \
            any(head == magic[:len(head)] or head.startswith(magic) for magic in _MAGICS)
    for kind, suffix in SUFFIX.items():
        if name.endswith(suffix) and len(head) == HEAD.size:
            magic, k, *_, key = HEAD.unpack(head)
            return (is_entry_magic(magic) and k == kind
                    and key.decode("ascii", "replace") == name[:-len(suffix)])
    return False


_ENTRY_NAME = re.compile(r"^([0-9a-f]{64})(" + "|".join(re.escape(s) for s in SUFFIX.values()) + r")$")
_LEVEL_OF = {SUFFIX[kind]: level for kind, level in LEVEL_DIR.items()}
_ZERO_CHUNK = 1 << 20
_LEFTOVER_MAX = 64 << 20        # longer than any entry a crash could leave of the cache's


def is_crash_leftover(path: str) -> bool:
    """Whether ``path`` is what a crash left of an entry: a regular file whose bytes are all zero
    (or which has none), at an entry's own place in the cache's layout, ``<root>/<version
    directory>/<level>/<key[:2]>/<key><suffix>``: a version directory the cache made
    (``is_version_dir``), the level of that suffix, the fan of that key.  A writer renames a
    whole entry into place, so a process never sees one so; a power loss after the rename
    reached the disk and before the data did leaves one (on many file systems its length, the
    data's blocks unwritten).  No user's file is one: zeros hold no data, and a file named like
    an entry anywhere else, or holding anything else, is still never counted nor deleted
    (``is_own_file``).  Never follows a link or opens a FIFO."""
    fdir = os.path.dirname(path)
    ldir = os.path.dirname(fdir)
    vdir = os.path.dirname(ldir)
    m = _ENTRY_NAME.match(os.path.basename(path))
    if (m is None or os.path.basename(fdir) != m.group(1)[:2]
            or os.path.basename(ldir) != _LEVEL_OF[m.group(2)]
            or not is_version_dir(os.path.dirname(vdir), os.path.basename(vdir))):
        return False
    try:
        fd, st = open_regular(path)
    except OSError:
        return False
    try:
        if st.st_size > _LEFTOVER_MAX:      # none is so long: not read through (the hourly check
            return False                    # read 4 GiB of a file truncated up at an entry's place)
        while True:
            chunk = os.read(fd, _ZERO_CHUNK)
            if not chunk:
                return True
            if chunk.count(0) != len(chunk):
                return False
    except OSError:
        return False
    finally:
        os.close(fd)


def delete_own(path: str) -> bool:
    """Delete ``path`` if ``is_own_file`` says the cache wrote it; -> deleted.  Other OSErrors
    (a file that cannot be deleted) are raised: the caller reports them."""
    if not is_own_file(path):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def listed(directory: str) -> list:
    """``os.listdir``, empty for a directory that is gone: another ``clear`` or ``prune`` (or a
    job's hourly check) removed it since it was seen, which is theirs to do, not an error."""
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def fan_dirs(root: str, version: str):
    """The directories of one version directory that hold entries (never through a link)."""
    for level in LEVELS:
        ldir = os.path.join(root, version, level)
        if not _is_real_dir(ldir):
            continue
        for fan in sorted(listed(ldir)):
            fdir = os.path.join(ldir, fan)
            if _is_real_dir(fdir):
                yield level, fdir


def entries(root: str):
    """(path, size, mtime, version, level) of every entry in every version directory."""
    out = []
    for version in sorted(os.listdir(root)):
        if not is_version_dir(root, version):
            continue
        for level, fdir in fan_dirs(root, version):
            for name in listed(fdir):
                if TMP_MARK in name or not name.endswith(_ENTRY_SUFFIXES):
                    continue
                path = os.path.join(fdir, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append((path, st.st_size, st.st_mtime, version, level))
    return out


_TMP_RE = re.compile(r"^(?:[0-9a-f]{64}\.(?:tlk|tvar)|bundle-[^/]+)\.tmp\.\d+\.[0-9a-f]+$")


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` is one the cache's writers give a file while they write it."""
    return _TMP_RE.match(name) is not None


def _own_dirs(root):
    """The directories the cache writes entries in (never through a link), and the root."""
    yield root
    for version in os.listdir(root):
        if is_version_dir(root, version):
            for _, fdir in fan_dirs(root, version):
                yield fdir


def remove_stale_temporaries(root: str, now: float | None = None) -> int:
    """Delete temporary files that writers which died left behind; -> how many.

    Only names the cache's own writes produce (``<entry>.tmp.<pid>.<hex>``),
    only where it writes them, and only what holds the start of an entry or
    a bundle (``is_own_file``): never any other file.
    """
    now = time.time() if now is None else now
    removed = 0
    for d in _own_dirs(root):
        for name in listed(d):
            if not is_temporary_name(name):
                continue
            path = os.path.join(d, name)
            try:
                if now - os.lstat(path).st_mtime > _STALE_TMP and delete_own(path):
                    removed += 1
            except OSError:
                pass
    return removed


class PruneResult(tuple):
    """(total bytes before, bytes deleted, entries deleted), and ``failed``: [(path, OSError)]."""

    failed: list


def prune(root: str, max_size: int | None) -> PruneResult:
    """Delete least recently used entries until 90% of ``max_size`` is left (when over it).

    Each file is checked to be an entry the cache wrote before it is deleted.
    -> (total bytes before, bytes deleted, entries deleted), with ``.failed``.
    """
    items = entries(root)
    total = sum(size for _, size, *_ in items)
    freed = count = 0
    failed = []
    emptied = set()
    leftovers = set()                   # what crashes left of entries (all zeros): deleted first
    if max_size is not None and total > max_size:
        # Only what may be deleted counts: a file named like an entry that the cache did not
        # write (a user's copy) would otherwise keep the total over the limit, and every entry
        # in use would go for it.  What a crash left of an entry (all zeros) counts, and goes
        # first: it serves nothing.
        own = []
        for e in items:                 # each file read once
            if not _is_entry_or_temporary(e[0]):
                if not is_crash_leftover(e[0]):
                    continue
                leftovers.add(e[0])
            own.append(e)
        items = own
        total = sum(size for _, size, *_ in items)
    if max_size is not None and total > max_size:
        target = int(max_size * 0.9)
        by_use = _last_use(time.time())
        for path, size, *_ in sorted(items, key=lambda e: (e[0] not in leftovers, by_use(e))):
            if total - freed <= target and path not in leftovers:
                break                   # (every leftover goes: it serves nothing, whatever its size)
            try:
                if not delete_own(path):
                    continue
            except OSError as e:
                failed.append((path, e))
                continue
            freed += size
            count += 1
            emptied.add(os.path.dirname(path))
    _remove_emptied(root, emptied)
    result = PruneResult((total, freed, count))
    result.failed = failed
    return result


def _last_use(now: float):
    """The sort key of an entry's last use (``entries``' tuple): its mtime, where one dated more
    than an hour ahead of this clock counts as the oldest (a clock ahead set it, and it would
    otherwise outlive every entry in use; a read marks it used again: ``touch_if_stale``)."""
    return lambda e: e[2] if e[2] <= now + HOUR else float("-inf")


def _remove_emptied(root: str, fans: set) -> None:
    """The fan and level directories prune left empty, removed with ``rmdir`` (which leaves one
    that holds anything); and a version directory of another Tack left with only its marker,
    removed with it, so that an old version's entries going leaves nothing behind.  This
    Tack's own keeps its directory and marker.  A writer that finds a directory gone makes it
    again (``stores_write.store``)."""
    from .keys import tack_version_id
    versions = set()
    for fdir in sorted(fans):
        ldir = os.path.dirname(fdir)
        for d in (fdir, ldir):
            try:
                os.rmdir(d)
            except OSError:
                break
        versions.add(os.path.dirname(ldir))
    for vdir in sorted(versions):
        if os.path.basename(vdir) == tack_version_id() or os.path.dirname(vdir) != root:
            continue
        marker = os.path.join(vdir, VERSION_MARKER)
        try:
            if os.listdir(vdir) != [VERSION_MARKER] or not is_marker(marker):
                continue
            os.unlink(marker)
            os.rmdir(vdir)
        except OSError:
            continue


def last_check(root: str) -> float | None:
    """The time of the last size check (the stamp's mtime); None if never.
    NotRegular if the stamp is not a regular file (then no check runs, and the caller warns)."""
    path = os.path.join(root, STAMP)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, kind_of(st))
    return st.st_mtime


def _stamp(stamp: str, now: float):
    fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | _O_NOWAIT, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(stamp, kind_of(st))
        mark_fd(fd, stamp, now)                 # the file opened (no link followed), not a path
    finally:
        os.close(fd)


def _checked_within_the_hour(last: float | None, now: float) -> bool:
    """Whether the last check (the stamp's time) was less than an hour ago.  A stamp dated
    ahead of this clock (a node whose clock ran ahead, on a shared cache) is not believed: it
    would stop every check until that date; the check runs and stamps this clock's time."""
    return last is not None and 0 <= now - last < HOUR


def _claim_is_stale(claim: str, now: float) -> bool:
    """Whether a claim was left by a holder that died: older than ``_STALE_CLAIM``, or dated as
    far ahead (a clock ahead of this one; it would otherwise block every check until then)."""
    st = os.lstat(claim)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(claim, kind_of(st))     # never deleted: not ours
    return abs(now - st.st_mtime) > _STALE_CLAIM


def maybe_prune(root: str, max_size: int | None, now: float | None = None):
    """The hourly check: at most one process an hour scans and prunes. -> prune's result or None."""
    now = time.time() if now is None else now
    stamp = os.path.join(root, STAMP)
    last = last_check(root)
    if _checked_within_the_hour(last, now):
        return None
    claim = os.path.join(root, CLAIM)
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if _claim_is_stale(claim, now):
                os.unlink(claim)            # its holder died; the next process may claim
        except NotRegular:
            raise
        except OSError:
            pass
        return None
    try:
        os.close(fd)
        last = last_check(root)                 # another process may have just finished
        if _checked_within_the_hour(last, now):
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
