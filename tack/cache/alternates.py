"""Alternate entries: one key, several copies of a kernel whose dependencies differ.

A key is made of the kernel's own text (``keys.lowered_key``), not of what the names it
uses are bound to: those are its entry's dependency record, checked at each hit
(``deps.check_deps``).  Two copies of one kernel's text whose ``helper`` differs (two
checkouts of a project, a kernel file copied between projects) therefore share one key,
and each run of one replaced the other's entry: both always right, neither ever served.

So, as ccache keeps several results under one manifest, an entry rejected because one of
the kernel's direct dependencies (a name its own code uses: a device function, a constant, a
module...) is bound to something else now is kept aside, in the user's directory, under its
*alternate key*: the key and the identities of those dependencies as its record wrote them
(``alternate_key``).  The process then looks under the alternate key of the identities those
names have for it now, where its own copy's entry was kept aside, and is served; where none is
there it compiles, and stores at the key itself, as always.  A process reads at most two
entries; the one that compiled last owns the key, and the other copies are each one read
away.  Copies that differ only deeper (the same ``helper``, whose own ``helper2`` differs)
share one alternate: two of them are served, a third replaces one.

Imported only where an entry is rejected for its dependencies: a warm hit never runs this.
"""

import os

from . import log
from .deps import _MISSING, _resolve, check_deps, identity
from .entry import LEVEL_NAMES, SUFFIX, DamagedEntry, decode, entry_path
from .keys import digest
from .trust import file_identity, read_regular


def direct_identities(deps, kernel, recorded: bool = False) -> list:
    """The kernel's direct dependencies in a record ``deps`` (those its own code names, not its
    device functions'): ``[(name, kind, identity)]``, as the record wrote them (``recorded``),
    or as each resolves in the kernel now (None: not defined).  One text names the same names,
    so a process reads them off another copy's record."""
    own = kernel.__qualname__
    fn = kernel.py_func
    out = []
    for scope, name, kind, then in deps:
        if scope.split("[", 1)[0] != own:
            continue
        if recorded:
            out.append((name, kind, then))
            continue
        obj = _resolve(fn, name)
        out.append((name, kind, None if obj is _MISSING else identity(kind, obj)))
    return out


def alternate_key(key: str, direct: list) -> str:
    """The alternate key of an entry of ``key`` whose kernel's direct dependencies are ``direct``
    (``direct_identities``)."""
    return digest("alternate", ("key", key), ("direct", direct))


def find(session, kernel, templates, kind, key, level, targets, rejected, stage, lowered=None):
    """After ``rejected`` (the ``Found`` entry of ``key``: a str, or a variant's function of the
    target key) failed its dependency check: keep it aside (``keep_aside``) and -> the entry under
    the alternate key of this process's direct dependencies, if there and current; else None.
    A variant found so and marked used marks its copy's lowered kernel too, under the alternate
    key of ``lowered`` (the variant's lowered key), as a hit at the key marks the key's."""
    deps = rejected.meta["dep"]
    now = direct_identities(deps, kernel)
    then = direct_identities(deps, kernel, recorded=True)
    if now == then:             # only a device function's own dependency differs: no alternate
        return None
    if session.disk is not None and session.disk.writable and rejected.st is not None:
        keep_aside(session.disk, kind, level, rejected, then)
    alt = (lambda target_key: alternate_key(key(target_key), now)) if callable(key) \
        else alternate_key(key, now)
    found, why = session.read(kind, alt, level, targets)
    stage("read")
    if found is None:
        return None
    reason = check_deps(found.meta["dep"], kernel, templates)
    stage("deps")
    if reason is not None:
        log.debug("kernel '%s': alternate %s not used: dependency changed: %s", kernel.__qualname__,
                  LEVEL_NAMES[level], reason)
        return None
    log.debug("kernel '%s': %s of another copy of its text under its key; its own found under "
              "the alternate key", kernel.__qualname__, LEVEL_NAMES[level])
    if found.marked and lowered is not None:
        from .entry import KIND_LOWERED
        from .stores_write import mark_used
        mark_used(session.disk, KIND_LOWERED, alternate_key(lowered, now))
    return found


def keep_aside(disk, kind, level, rejected, then) -> None:
    """Write the user's entry ``rejected`` again under its alternate key (``then``: its direct
    dependencies as recorded), unless an entry of the same dependency record is there already
    (one of another, made before a device function's own dependency changed, is replaced): the
    compile that follows replaces it at its key.  Read again whole from its file (a lookup
    decodes only what a hit uses), and only if that is still the file read: never another
    process's newer entry."""
    name = os.path.basename(rejected.path)
    key = name[:-len(SUFFIX[kind])] if name.endswith(SUFFIX[kind]) else name
    alt = alternate_key(key, then)
    if _holds(entry_path(disk.version_dir, kind, alt), kind, alt, rejected.meta["dep"]):
        return
    try:
        data, st = read_regular(rejected.path)
        if file_identity(st) != file_identity(rejected.st):
            return
        _, meta, payload = decode(data, kind, key)
    except (OSError, DamagedEntry):
        return
    from .stores_write import store     # (a process that does not write never imports it)
    if store(disk, kind, alt, meta, payload):
        log.debug("%s %s: kept aside as %s (another copy of the kernel's text compiles)",
                  LEVEL_NAMES[level], key[:16], alt[:16])


def _holds(path, kind, key, deps) -> bool:
    """Whether the entry at ``path`` (of ``key``) is whole and its dependency record is ``deps``."""
    try:
        return decode(read_regular(path)[0], kind, key, only=("dep",))[1]["dep"] == deps
    except (OSError, DamagedEntry):
        return False
