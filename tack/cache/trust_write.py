"""Writing the cache's files and directories, as ``trust`` says: through a temporary file in
the same directory, renamed into place, never over what is not a regular file; each directory
made private (0700) or, for a site's bundles, 0755 whatever the umask.  Apart from ``trust``'s
reading side so that a process that only reads the cache (a warm one) never imports it."""

import os
import stat

from .trust import MARKER_TEXT, TMP_MARK, NotRegular, _is_mine, check_stat, kind_of


def write_atomic(path: str, data: bytes, mode: int = 0o600, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, given ``mode``
    whatever the umask (by ``fchmod``).  ``durable`` (a bundle: written once, read by every job
    for months): the file's data is on disk before the rename (``fsync``), and the rename is
    after it (the directory's ``fsync``), so that a crash leaves the old bundle or the new one,
    never a new name over data that never reached the disk."""
    _refuse_non_regular(path)
    tmp = f"{path}{TMP_MARK}{os.getpid()}.{os.urandom(6).hex()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        if e.filename in (None, tmp):
            e.filename = path               # the file it was for, not its temporary name
        raise
    try:
        # No fsync for an entry: after a crash the rename may survive with incomplete data,
        # but every entry carries its checksum, so such a file is ignored, and
        # a compile does not wait for the disk (milliseconds per entry).
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), mode)     # the file written, by its descriptor
            else:                               # pragma: no cover - Windows
                os.chmod(tmp, mode)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            _fsync_dir(os.path.dirname(os.path.abspath(path)))
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and e.filename in (None, tmp):
            e.filename = path               # a failed write (a full disk) names the file it was for
        raise


def _fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable, where the system can (not on Windows, nor on a file
    system that refuses a directory's fsync: the rename is done, only not yet on disk)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _refuse_non_regular(path: str) -> None:
    """A write never replaces what is not a regular file (a FIFO, a directory, a link someone
    put there): that is not the cache's to delete.  NotRegular (an OSError) instead."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, kind_of(st))


def _make_above(path: str, shared: bool = False) -> None:
    """Make each missing directory above ``path`` 0755 at most: none writable by others, whatever
    the umask (``os.makedirs`` gives them the umask's mode: 0777 under ``umask 000``, 0775 under
    ``002``, which the checks of the cache and of a site's bundles then refuse).  A stricter
    umask (077) is kept for a user's own directories; ``shared`` (a site's bundles, which every
    user's job enters) makes them 0755 whatever the umask."""
    missing, up = [], os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(up):
        missing.append(up)
        if os.path.dirname(up) == up:
            break
        up = os.path.dirname(up)
    for d in reversed(missing):
        if shared:
            _mkdir_755(d)
        else:
            try:
                os.mkdir(d, 0o755)
            except FileExistsError:
                pass                        # another process's, in between


def _mkdir_755(d: str) -> None:
    """Make directory ``d`` 0755.  ``mkdir``'s mode is masked by the umask: under ``umask 077``
    it was 0700, which no other user may enter (a site's bundles: every job compiled), so the
    mode is set again once it is made.  One made by another process in between is left as it is."""
    try:
        os.mkdir(d, 0o755)
    except FileExistsError:
        return                              # another process's, in between
    os.chmod(d, 0o755)


def make_root(path: str) -> None:
    """Make a cache directory ``path`` (0700) and each missing directory above it (0755).
    FileExistsError if ``path`` is there already (another process's: not this one's to tag)."""
    _make_above(path)
    os.mkdir(path, 0o700)


def make_shared_dirs(path: str) -> None:
    """Make ``path`` and each missing directory above it 0755, whatever the umask: a site's
    directory of bundles, read by every user and trusted only if no one else may write in it."""
    _make_above(path, shared=True)
    _mkdir_755(path)


def ensure_private_dir(path: str, marker: str | None = None) -> None:
    """Create ``path`` (0700) if missing, then check it as ``check_trusted`` does.

    ``marker``: the name of a file written in it (when missing) to say the cache
    made it, so that ``clear`` and ``prune`` know it for one of theirs.
    """
    for _ in range(8):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            # removed between the two (a prune or clear removing the directories it emptied):
            # made again, not taken for an untrusted directory (which turned storing off)
            continue
        check_stat(st, path)
        break
    else:
        raise FileNotFoundError(2, "removed each time it was made", path)     # 2: ENOENT
    if marker is not None:
        write_new(os.path.join(path, marker), MARKER_TEXT)


CACHEDIR_TAG = ("CACHEDIR.TAG", b"Signature: 8a477f597d28d172789f06886806bc55\n"
                b"# This file is a cache directory tag created by Tack (its kernel cache).\n"
                b"# For information about cache directory tags, see https://bford.info/cachedir/\n")


def tag_new_root(root: str) -> None:
    """Tag a cache directory that Tack itself created (backup tools then skip it).
    Never a directory the user already had: it may hold their own files."""
    write_new(os.path.join(root, CACHEDIR_TAG[0]), CACHEDIR_TAG[1])


def write_new(path: str, data: bytes) -> None:
    """Create ``path`` holding ``data`` unless something is there already (whatever it is but an
    empty file of this user's: what a full disk left of an earlier write, written again).

    Written whole beside it, then linked into place (which fails, as ``O_EXCL`` does, where one
    is there): a full disk leaves nothing at ``path``.  It left an empty file, written in place,
    that was never repaired: an empty version marker made ``clear`` and ``prune`` take the
    cache's own version directory for another's, an empty ``CACHEDIR.TAG`` no longer tagged it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not (stat.S_ISREG(st.st_mode) and st.st_size == 0 and _is_mine(st)):
        return
    tmp = f"{path}{TMP_MARK}{os.getpid()}.{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if st is not None:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:             # another process's, meanwhile
                pass
            except OSError:                     # a file system without links: written in place
                _write_excl(path, data)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _write_excl(path: str, data: bytes) -> None:
    """``data`` written at ``path`` in place, unless something is there (``write_new`` on a file
    system that makes no links: a full disk there may still leave it short)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(data)
