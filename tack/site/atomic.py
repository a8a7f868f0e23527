"""Write a set of files all or nothing: each to a temporary file beside its final name, then renamed.

A file whose rendered bytes equal what is already there is left untouched
(its modification time too), so rendering again with the same config
changes nothing.  If any file cannot be written, the temporary files and
any directory made for them are removed and nothing is renamed into place;
if a rename fails after others have been done, those are undone: a file
this run created is removed, a file it replaced gets its old bytes back.
"""

from __future__ import annotations

import os
import stat
import tempfile

from .errors import SiteError


def write_files(files, mode=0o644, ours=None, force=False):
    """Write ``{path: bytes}``; return ``[(path, changed)]`` in the order given.

    ``mode`` is the permission of the files written (module files and
    activation scripts are read by every user).  ``ours``: the bytes every file this command
    writes holds (its header); a file there without them is someone else's (a module file an
    admin wrote by hand) and is replaced only with ``force``.  Raises SiteError naming the
    path that could not be written; then nothing has changed on disk.
    """
    plan = _plan(files)
    if ours is not None and not force:
        for path, _, changed, old in plan:
            if changed and old is not None and ours not in old:
                raise SiteError(f"not replacing {path}: this command did not write it (it has no "
                                f"{ours.decode()!r}); use --force to replace it; nothing was "
                                "written")
    made_dirs, temps, done = [], [], []
    try:
        for path, data, changed, _ in plan:
            if not changed:
                continue
            made_dirs += _makedirs(os.path.dirname(path))
            # A short temporary name: a final name the file system refuses fails at the
            # rename, which is undone like any other failure.
            fd, tmp = tempfile.mkstemp(prefix=".tack-", suffix=".tmp", dir=os.path.dirname(path))
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
        olds = {path: old for path, _, _, old in plan}
        for tmp, path in temps:
            old_mode = _mode(path)
            try:
                os.replace(tmp, path)
            except OSError as e:
                e.filename = path               # name the file, not its temporary
                raise
            done.append((path, olds[path], old_mode))
    except OSError as e:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        undone = _undo(done)
        for d in reversed(made_dirs):
            try:
                os.rmdir(d)
            except OSError:
                pass
        where = e.filename or (plan[0][0] if plan else "")
        tail = "nothing was written" if not undone else \
            f"could not restore {', '.join(undone)}"
        raise SiteError(f"cannot write {where}: {e.strerror or e}; {tail}") from None
    return [(path, changed) for path, _, changed, _ in plan]


def check_files(files) -> None:
    """What ``write_files(files)`` refuses before it writes anything (a path that is there and is
    not a regular file, or cannot be read), found now: SiteError naming it.  For a command that
    writes them after a long step (``bundles install``, after the build), so that it fails first."""
    _plan(files)


def _plan(files):
    """[(path, data, changed, old bytes)] of ``files``; SiteError for one that cannot be written."""
    plan = []
    for path, data in files.items():
        path = os.path.abspath(os.fspath(path))
        if os.path.lexists(path) and not os.path.isfile(path):
            raise SiteError(f"cannot write {path}: it exists and is not a regular file; "
                            "nothing was written")
        old = _read(path)
        if old is None and os.path.lexists(path):
            raise SiteError(f"cannot write {path}: it exists and cannot be read, so it could not "
                            "be restored if another file failed; nothing was written")
        if old != data and os.path.islink(path):
            target = os.readlink(path)
            raise SiteError(f"cannot write {path}: it is a symbolic link (to {target}), which "
                            f"writing would replace with a file, leaving {target} as it was; "
                            "remove the link, or write where it points; nothing was written")
        plan.append((path, data, old != data, old))
    return plan


def _undo(done):
    """Put back what the renames in ``done`` replaced; -> the paths that could not be restored."""
    failed = []
    for path, old, old_mode in reversed(done):
        try:
            if old is None:
                os.unlink(path)
                continue
            fd, tmp = tempfile.mkstemp(prefix=".tack-", suffix=".tmp", dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(old)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, old_mode if old_mode is not None else 0o644)
                os.replace(tmp, path)
            except OSError:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError:
            failed.append(path)
    return failed


def _mode(path):
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _makedirs(directory):
    """Create ``directory`` and missing parents, each open to every user to enter and list
    (``0755`` at least, whatever the umask); return those created, outermost first."""
    missing = []
    d = directory
    while not os.path.isdir(d):
        if os.path.lexists(d) and not os.path.isdir(d):
            raise NotADirectoryError(20, f"{d} exists and is not a directory", directory)
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    made = []
    try:
        for d in reversed(missing):
            os.mkdir(d)
            made.append(d)
            # What is written here is for every user (module files, activation scripts): a
            # directory others cannot enter (umask 077: mkdir gave 0700) hid it from them all.
            # Entering and listing are added; what the umask allows besides (a group's writes,
            # umask 002) is kept.
            os.chmod(d, stat.S_IMODE(os.stat(d).st_mode) | 0o755)
    except OSError as e:
        if e.filename is None:
            e.filename = d
        for m in reversed(made):
            try:
                os.rmdir(m)
            except OSError:
                pass
        raise
    return made
