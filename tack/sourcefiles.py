"""Source file names as what Tack stores records them: relative to the import root.

A lowered kernel carries the file of each of its functions, and a debug variant the file of
each bounds check, to point errors at the user's code.  Stored as the absolute path, that is a
path of the machine that compiled it: a bundle built in a Spack or conda build prefix would
name that prefix, and stop pointing anywhere once the install is relocated (a Spack build cache
installs into another root and relocates binaries and text files, not bundles).  So a file is
recorded relative to the ``sys.path`` entry it lies under (``tack/kernels/contour.py``), which
is the same in every install, and ``local`` finds it again under this process's ``sys.path``.
A file under no ``sys.path`` entry keeps its absolute path.
"""

from __future__ import annotations

import os
import sys


def _roots():
    """Each ``sys.path`` entry, absolute.  A relative one (``''`` under ``python -c``, ``-m``
    or a REPL; an editable install's path hook name) is taken from the working directory, as
    the import system takes it; where that directory was deleted, there is none, and the
    entry names nothing (``os.path.abspath`` raised FileNotFoundError from a first compile)."""
    cwd = None
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        if os.path.isabs(entry):
            yield os.path.normpath(entry)
            continue
        if cwd is None:
            try:
                cwd = os.getcwd()
            except OSError:
                cwd = ""
        if cwd:
            yield os.path.normpath(os.path.join(cwd, entry))


def portable(filename):
    """``filename`` relative to the deepest ``sys.path`` entry it lies under, with ``/``
    separators; as given when it is relative already, or under none (a ``<string>``, a file
    outside every import root)."""
    if not filename or not os.path.isabs(filename):
        return filename
    best = ""
    for root in _roots():
        if len(root) > len(best) and filename.startswith(root.rstrip(os.sep) + os.sep):
            best = root
    if not best:
        return filename
    return os.path.relpath(filename, best).replace(os.sep, "/")


def local(name):
    """A name ``portable`` recorded -> that file under the first ``sys.path`` entry that holds
    it; ``name`` as recorded if none does (or if it is absolute, or not a file's: ``<string>``)."""
    if not name or os.path.isabs(name) or name.startswith("<"):
        return name
    parts = name.split("/")
    for root in _roots():
        path = os.path.join(root, *parts)
        if os.path.isfile(path):
            return path
    return name
