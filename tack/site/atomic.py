"""Write a set of files all or nothing: each to a temporary file beside its final name, then renamed.

A file whose rendered bytes equal what is already there is left untouched
(its modification time too), so rendering again with the same config
changes nothing.  If any file cannot be written, the temporary files and
any directory made for them are removed and nothing is renamed into place.
"""

from __future__ import annotations

import os
import tempfile

from .cli import SiteError


def write_files(files, mode=0o644):
    """Write ``{path: bytes}``; return ``[(path, changed)]`` in the order given.

    ``mode`` is the permission of the files written (module files and
    activation scripts are read by every user).  Raises SiteError naming the
    path that could not be written; then nothing has changed on disk.
    """
    plan = []
    for path, data in files.items():
        path = os.path.abspath(os.fspath(path))
        if os.path.lexists(path) and not os.path.isfile(path):
            raise SiteError(f"cannot write {path}: it exists and is not a regular file; "
                            "nothing was written")
        plan.append((path, data, _read(path) != data))
    made_dirs, temps = [], []
    try:
        for path, data, changed in plan:
            if not changed:
                continue
            made_dirs += _makedirs(os.path.dirname(path))
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                       dir=os.path.dirname(path))
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
        for tmp, path in temps:
            os.replace(tmp, path)
    except OSError as e:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        for d in reversed(made_dirs):
            try:
                os.rmdir(d)
            except OSError:
                pass
        where = e.filename or (plan[0][0] if plan else "")
        raise SiteError(f"cannot write {where}: {e.strerror or e}; nothing was written") from None
    return [(path, changed) for path, _, changed in plan]


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _makedirs(directory):
    """Create ``directory`` and missing parents; return those created, outermost first."""
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
