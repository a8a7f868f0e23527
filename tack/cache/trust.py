"""Trust: what the cache reads, writes and creates, and whose it must be.

* **Reading**: a cache file is opened without following a link and without
  blocking (a FIFO would wait for a writer forever), and used only if the
  descriptor is a regular file (``open_regular``, ``read_regular``;
  ``NotRegular`` otherwise).
* **Owners and modes**: a directory is trusted when it is a real directory
  (not a symbolic link), owned by this user, and writable by nobody else
  (``check_trusted``, ``check_stat``).  Site bundle directories (read-only,
  installed by an admin) may also be owned by root.
* **Marking**: an entry is marked used (its mtime) through the descriptor it was
  read from, or one opened as for reading (``mark_fd``, ``touch_regular``):
  never through a link.
* **Writing** (``trust_write``, a module of its own: a process that only reads the cache, a warm
  one, never imports it): through a temporary file in the same directory, renamed into
  place, so a reader sees a whole file or none; never over what is not a
  regular file.  Each directory level the cache creates is private (0700)
  and checked as above; a version directory holds a marker saying the cache
  made it, so that ``clear`` and ``prune`` know it for one of theirs.
"""

import os
import stat

TMP_MARK = ".tmp."                      # in the name of a write's temporary file
VERSION_MARKER = ".tack-version"        # in each version directory the cache creates
MARKER_TEXT = b"Tack kernel cache: a directory made by Tack; its entries may be deleted by it\n"

_O_READ = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
           | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))


class NotRegular(OSError):
    """A path that should be one of the cache's files is something else (FIFO, device, socket,
    directory, link): it is never read, written through or deleted."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{path} is {what}, not a regular file")
        self.filename = path
        self.strerror = f"{what}, not a regular file"

    def __str__(self):          # (OSError's, with filename set, says "[Errno None] ...")
        return self.args[0]


def kind_of(st) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(st.st_mode):
            return what
    return "not a file"


def open_regular(path: str):
    """Open ``path`` for reading without ever blocking; NotRegular unless it is a regular file.

    Opened non-blocking (a FIFO would otherwise wait for a writer forever) and
    without following a link; the type is checked on the descriptor itself.
    -> (descriptor, its fstat), the caller closing the descriptor.
    """
    try:
        fd = os.open(path, _O_READ)
    except FileNotFoundError:           # (a lookup's usual miss: errno's import is for the rest)
        raise
    except OSError as e:
        import errno
        if e.errno == errno.ELOOP:
            raise NotRegular(path, "a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, kind_of(st))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def file_identity(st) -> tuple:
    """What tells a file from another, or from itself rewritten: the device and inode (a rename
    over it), its size and modification time (a write in place)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def read_regular(path: str, limit: int = -1):
    """-> (bytes, fstat result) of the regular file ``path``: all of it, or its first ``limit`` bytes."""
    fd, st = open_regular(path)
    try:
        return read_fd(fd, st, limit), st
    finally:
        os.close(fd)


def read_fd(fd: int, st, limit: int = -1) -> bytes:
    """All of the open file ``fd`` (``st``: its fstat), or its first ``limit`` bytes."""
    chunks = []
    while limit:
        chunk = os.read(fd, limit if limit > 0 else max(st.st_size, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        if limit > 0:
            limit -= len(chunk)
    return b"".join(chunks)


# -- marking a file used -------------------------------------------------------------

_UTIME_FD = os.utime in getattr(os, "supports_fd", ())


def mark_fd(fd: int, path: str, now: float) -> bool:
    """Set the mtime (and atime) of the open file ``fd`` to ``now``: the file actually opened,
    never what a link at ``path`` points to. -> whether it was set."""
    try:
        if _UTIME_FD:
            os.utime(fd, (now, now))
        elif os.utime in os.supports_follow_symlinks:   # pragma: no cover - no futimens
            os.utime(path, (now, now), follow_symlinks=False)
        else:                                           # pragma: no cover - Windows: not marked
            return False
        return True
    except OSError:
        return False


def touch_regular(path: str, now: float, older_than: float = 0.0) -> bool:
    """Mark the cache's own file ``path`` used: its mtime set to ``now`` if it is older than
    ``older_than`` seconds, or dated as far ahead (a clock ahead of this one set it).  Opened as every cache file is (no link followed, never blocking),
    and only a regular file of this user's is marked: a link, a FIFO, another's file is left
    as it is.  -> whether it was marked."""
    try:
        fd, st = open_regular(path)
    except OSError:
        return False
    try:
        if abs(now - st.st_mtime) <= older_than or not _is_mine(st):
            return False
        return mark_fd(fd, path, now)
    finally:
        os.close(fd)


def _is_mine(st) -> bool:
    return not hasattr(os, "geteuid") or st.st_uid == os.geteuid()


# -- owners and modes --------------------------------------------------------------

class Untrusted(Exception):
    """Why a directory or file is not trusted, and how to fix it."""


def check_trusted(path: str, allow_root: bool = False, is_dir: bool = True,
                  setting: str | None = None) -> None:
    """Raise Untrusted, with the reason and the fix, unless ``path`` is safe to load from.
    ``setting``: the variable that names ``path`` (the fix for a link says to set it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Untrusted(f"{path} does not exist") from None
    check_stat(st, path, allow_root, is_dir, setting)


def _leads_to(path: str):
    """Where the links at ``path`` lead (its real path, which may not exist), or None where they
    go round in a loop (``realpath`` gave back the link itself)."""
    import errno                            # (a warm process imports no errno: links are rare)
    try:
        return os.path.realpath(path, strict=True)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None
    return os.path.realpath(path)


def check_stat(st, path: str, allow_root: bool = False, is_dir: bool = True,
               setting: str | None = None) -> None:
    """``check_trusted`` on a stat result (from lstat, or fstat of an open file)."""
    what = "directory" if is_dir else "file"
    fix = "use a directory of your own" if is_dir else f"remove it: rm {path}"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:                         # replaced since the lstat
            target = "?"
        real = _leads_to(path) if is_dir or setting is not None else None   # (a file's fix names none)
        if real is None and is_dir:             # the fix named the link itself
            fix = (f"its links go round in a loop to no directory: set {setting} to a real "
                   "directory" if setting is not None else
                   "its links go round in a loop to no directory: name a real directory")
        elif setting is not None:
            fix = f"set {setting} to the real directory, {real}"
        elif is_dir:
            fix = f"links are not followed here: name the real directory, {real}"
        else:
            fix = f"no file is read through a link: remove it (rm {path}) or put the file itself there"
        raise Untrusted(f"{path} is a symbolic link (to {target}); {fix}")
    if is_dir and not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"{path} is not a directory")
    if not is_dir and not stat.S_ISREG(st.st_mode):
        raise Untrusted(f"{path} is not a regular file")
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid is not None:
        owners = (uid, 0) if allow_root else (uid,)
        if st.st_uid not in owners:
            if allow_root:      # a site's: its admin's to fix, not a job's user's to remove
                raise Untrusted(f"the {what} {path} belongs to uid {st.st_uid}, neither to you "
                                f"(uid {uid}) nor to root; the site's admin can give it to root "
                                f"(chown root {path})")
            raise Untrusted(f"the {what} {path} belongs to uid {st.st_uid}, not to you (uid {uid}); "
                            f"{fix}")
    writers = [who for bit, who in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))
               if st.st_mode & bit]
    if writers:
        raise Untrusted(f"the {what} {path} is writable by {' and '.join(writers)} "
                        f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod go-w {path}")


def check_parents(path: str) -> None:
    """Raise Untrusted if a directory above ``path`` (the real directories its parent resolves
    to, up to /) is writable by others without the sticky bit: anyone could then rename
    ``path`` away and put a directory of their own in its place.

    One ``lstat`` per directory above, deepest first: where none of them is a symbolic link,
    they are the real directories already.  Where one is, the walk starts again from the
    parent's real path (``os.path.realpath``, which calls ``lstat`` on each of them again), so
    that the directories checked and named are the real ones; and then, where those are all
    private, the path as written is walked on up, past its links, since the directories that
    hold a link matter as much: anyone who may write one could point the link elsewhere."""
    parent = os.path.dirname(os.path.abspath(path))
    found = _open_to_others(parent, stop_at_link=True)
    if found is _A_LINK:
        found = (_open_to_others(os.path.realpath(parent), stop_at_link=False)
                 or _open_to_others(parent, stop_at_link=False))
    if found is not None:
        where, st = found
        raise Untrusted(f"the directory {where}, above {path}, is writable by others without "
                        f"the sticky bit (mode {stat.S_IMODE(st.st_mode):04o}): anyone could "
                        f"replace what is below it; run: chmod o-w {where} (or chmod +t "
                        f"{where}), or use a directory elsewhere")


_A_LINK = object()


def _open_to_others(parent: str, stop_at_link: bool):
    """The deepest of ``parent`` and the directories above it that others may write without the
    sticky bit, as (path, lstat result); None if none is (or from where one cannot be asked:
    it cannot be searched; a level not made yet is passed over, so that a directory is refused
    before it is made); ``_A_LINK`` if ``stop_at_link`` and one of them is a symbolic link
    (found before any such directory: what lies below a link is to be named by its real path:
    the walk goes on up to make sure there is none)."""
    found = None
    while True:
        try:
            st = os.lstat(parent)
        except FileNotFoundError:           # not made yet: the levels above it still matter
            st = None
        except OSError:
            return found
        if st is not None:
            if stop_at_link and stat.S_ISLNK(st.st_mode):
                return _A_LINK
            if (found is None and st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX
                    and stat.S_ISDIR(st.st_mode)):
                found = parent, st
                if not stop_at_link:
                    return found
        up = os.path.dirname(parent)
        if up == parent:
            return found
        parent = up


def control_character(text: str):
    """The first control character in ``text`` (NUL, newline, ...), or None: no path the cache
    uses or a site exports may hold one (a shell script setting it would not parse)."""
    for c in text:
        if ord(c) < 32 or ord(c) == 127:
            return c
    return None
