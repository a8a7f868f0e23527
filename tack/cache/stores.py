"""Where entries are looked up and stored: the user's directory, and the session that chains the stores.

* ``DiskCache``: the user's directory, per-kernel entries under
  ``<directory>/<tack version>/{lowered,variants}/<xx>/``.  Every failure of
  the file system is a miss and at most one warning per process.
* ``Session``: the stores of one process and device kind, tried in order: a
  bundle given to ``load_bundle``; the user's directory (its per-kernel
  files, or in mode ``bundle`` only its bundle); the site's bundle
  directories (TACK_CACHE_BUNDLES, then ``share/tack/bundles`` beside the
  install, ``site_dirs``): a bundle packed on a host
  like this one, then those built for this host's architecture (the bundle
  stores are in ``bundle.py``, imported only when a session has bundles).
  Only the user's directory is written (``stores_write``), and under MPI only
  by rank 0.  It is also what a launch asks of the cache: ``find_variant``,
  ``find_lowered``, then ``stores_write.store_lowered`` and ``store_variant``.

Every store, and the session itself, has the shape ``protocol.Store`` names:
``read`` (the ``entry.Found`` entry, or None and why not) and ``writable``; a
new kind of store needs no change here but a line in ``open_session``.

This module is the read side, all a warm process runs.  Storing an entry,
marking one used, removing one found unusable are ``stores_write``'s,
imported by a process's first such act: a warm hit defines none of it.

The caller hands a session what only the runtime knows: the target key of
code compiled here (``host_key``, which names this host's bundle), the target
keys a launch's device loads, best first (``targets``), and which of a site
directory's bundles it uses (``site_bundles``); the cache never asks a backend.  Any
unexpected error is a miss and one warning: no crash from the cache reaches
a user's job.
"""

import os
import stat
import sys
import time

from . import count, log
from .deps import check_deps
from .entry import (HIT_FIELDS, KIND_LOWERED, KIND_VARIANT, LEVEL_NAMES, MISSING, DamagedEntry, Found, decode,
                    entry_path, stated_length)
from .keys import tack_version_id
from .trust import (NotRegular, Untrusted, check_parents, check_stat, control_character, mark_fd, open_regular,
                    read_fd)

# -- the user's directory --------------------------------------------------------

#: A file past this size is read whole only if its header gives it that length: a file at an
#: entry's place, gigabytes long (one truncated up, a disk image copied there), cost a lookup
#: its reading, gigabytes of memory, and seconds.
_HEADER_FIRST = 16 << 20

class DiskCache:
    """Per-kernel entries under ``<directory>/<tack version>/{lowered,variants}/<xx>/``.

    ``rank``: this process's MPI rank; only rank 0 stores entries or marks them used (no
    storm of metadata writes from thousands of ranks)."""

    source = "cache directory"          # what ``stats()["variants_from"]`` counts its hits as

    def __init__(self, settings, stats: dict, warn_once, rank: int = 0):
        self.settings = settings
        self.root = settings.directory
        self.version_dir = os.path.join(self.root, tack_version_id())
        self.writable = settings.mode == "write" and rank == 0
        self.marks_used = settings.mode in ("write", "read") and rank == 0
        self.stats = stats
        self.warn_once = warn_once
        self._checked = set()        # directories checked (or created) and trusted
        self._usable = None
        self._unusable_why = "missing (no cache directory)"

    def usable(self) -> bool:
        """Check (once) that the directory may be trusted.  A lookup never creates it (a store
        does: ``stores_write``): a process whose kernels all come from elsewhere (a site bundle)
        leaves no directory behind, and spends no system call on making one."""
        if self._usable is None:
            self._usable = self._open()
        return self._usable

    _missing = False                            # the directory was not there at the last look
    named_by = "TACK_CACHE_DIR"                 # what names the directory (a link's fix sets it)

    def _open(self) -> bool:
        try:
            try:
                st = os.lstat(self.root)            # one system call when it exists, as it usually does
                self._missing = False
            except FileNotFoundError:
                log.debug("no cache directory at %s (mode %s)", self.root, self.settings.mode)
                self._missing = True
                self._unusable_why = f"missing (no cache directory at {self.root})"
                return False
            check_stat(st, self.root, setting=self.named_by)
            check_parents(self.root)            # a directory above it that anyone may rename in
            self._checked.add(self.root)
            return True
        except Untrusted as e:
            self.warn_once(f"not using the kernel cache: {e}")
            self._unusable_why = f"untrusted: {e}"
        except OSError as e:
            self.warn_once(f"not using the kernel cache at {self.root}: {e.strerror or e}")
            self._unusable_why = f"unreadable: {e.strerror or e}"
        return False

    def _dir_ok(self, path: str) -> bool:
        """Each level below the root there and trusted (checked once)."""
        if path in self._checked:
            return True
        parent = os.path.dirname(path)
        if parent != self.root and not self._dir_ok(parent):
            return False
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False                        # not made yet: a miss
        check_stat(st, path)
        self._checked.add(path)
        return True

    def read(self, kind: int, key, level: str, targets=()):
        """``protocol.Store.read``: a variant's key is tried for each of ``targets`` in turn (the CPU:
        this host's alone; CUDA: the device's sm, then PTX of lower ones), the first found used.
        A directory that is not there (a new user served by site bundles) or not trusted is
        answered before any key is made: a variant's key for each target costs a hash."""
        if not self.usable():
            return None, MISSING if self._missing and self.writable else self._unusable_why
        if not callable(key):
            return self._read(kind, key, level)
        why = MISSING
        for target_key in targets:
            found, why_here = self._read(kind, key(target_key), level)
            if found is not None:
                return found, ""
            if why_here != MISSING:
                why = why_here
        return None, why

    def _read(self, kind: int, key: str, level: str):
        path = entry_path(self.version_dir, kind, key)
        t0 = time.perf_counter()
        now = time.time()
        try:
            if not self.usable():
                return None, MISSING if self._missing and self.writable else self._unusable_why
            if not self._dir_ok(os.path.dirname(path)):
                return None, MISSING
            fd, st = open_regular(path)
            try:
                # An entry must be the user's own and writable by nobody else, as its directory:
                # checked on the descriptor read (its fstat, made anyway), so no swap gets past.
                check_stat(st, path, is_dir=False)
                data = read_fd(fd, st, _HEADER_FIRST) if st.st_size > _HEADER_FIRST else read_fd(fd, st)
                try:
                    if len(data) < st.st_size:      # a big file: read whole only if its header says so
                        stated = stated_length(data)
                        if stated != st.st_size:
                            raise DamagedEntry(f"{st.st_size} bytes, where its header gives "
                                               f"{stated}" if stated is not None else
                                               "not a Tack cache entry (bad magic)")
                        data += read_fd(fd, st)
                    _, meta, payload = decode(data, kind, key, only=HIT_FIELDS)
                    damaged = None
                except DamagedEntry as e:
                    damaged = e
                # LRU: a valid entry marked used through the descriptor read, never a link (see
                # size.py); its stat then taken again, as ``Found.st`` is what is there now.
                marked = (damaged is None and self.marks_used and abs(now - st.st_mtime) > 3600
                          and mark_fd(fd, path, now))
                if marked:
                    st = os.fstat(fd)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return None, MISSING
        except NotRegular as e:
            count(self.stats, "damaged")
            log.debug("%s %s: %s; ignored", level, key[:16], e)
            return None, f"not used: {e.strerror}; left alone"
        except Untrusted as e:
            self.warn_once(f"not using the kernel cache: {e}")
            self._usable = False
            self._unusable_why = f"untrusted: {e}"
            return None, self._unusable_why
        except OSError as e:
            self.warn_once(f"cannot read the kernel cache at {self.root}: {e.strerror or e}")
            return None, f"unreadable: {e.strerror or e} ({e.filename or path})"
        if damaged is not None:
            count(self.stats, "damaged")
            log.debug("%s %s: damaged (%s); ignored", level, key[:16], damaged)
            if self.writable:                   # (a read-only process never imports the write side)
                from .stores_write import remove_if_unchanged
                remove_if_unchanged(self, path, st)
            return None, f"damaged ({damaged}); ignored"
        count(self.stats, "bytes_read", len(data))
        count(self.stats, "load_seconds", time.perf_counter() - t0)
        return Found(meta, payload, path, marked, st), ""


# -- site bundle directories -----------------------------------------------------

#: tack/__init__.py, whose directory's parent is the site-packages an install put Tack in.
_PACKAGE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__init__.py")

#: Where an install puts its bundles, under its prefix (``bundles install PREFIX``).
INSTALLED_BUNDLES = os.path.join("share", "tack", "bundles")


def installed_dirs(environ=None, package_file=None, prefix=None, warn=None) -> list:
    """The bundle directories installed beside this Tack, found with no setting: ``share/tack/
    bundles`` under the prefix Tack is installed in (``PREFIX/lib/pythonX.Y/site-packages/tack``:
    Spack, EasyBuild, ``pip --prefix``) and under ``sys.prefix`` (a venv, a conda env), each
    that is a real directory, once.  None when ``TACK_CACHE_INSTALLED_BUNDLES`` is ``0``, ``no``,
    ``off`` or ``false``; any other value but ``1``, ``yes``, ``on`` and ``true`` is told to
    ``warn`` (if given) and looked for as by default.  Two ``lstat`` calls; no import."""
    environ = os.environ if environ is None else environ
    from ..config import FALSE_WORDS, TRUE_WORDS
    setting = environ.get("TACK_CACHE_INSTALLED_BUNDLES", "").strip().lower()
    if setting in FALSE_WORDS:
        return []
    if setting and setting not in TRUE_WORDS and warn is not None:
        warn(f"TACK_CACHE_INSTALLED_BUNDLES={environ['TACK_CACHE_INSTALLED_BUNDLES']!r} is neither "
             f"on (1, yes, on, true) nor off (0, no, off, false); looking for installed bundles, "
             f"as by default")
    prefixes = []
    here = os.path.dirname(os.path.dirname(os.path.abspath(package_file or _PACKAGE_FILE)))
    if os.path.basename(here) in ("site-packages", "dist-packages"):
        prefixes.append(os.path.dirname(os.path.dirname(os.path.dirname(here))))
    prefixes.append(sys.prefix if prefix is None else prefix)
    out = []
    for p in prefixes:
        d = os.path.join(p, INSTALLED_BUNDLES)
        try:
            if stat.S_ISDIR(os.lstat(d).st_mode) and d not in out:
                out.append(d)
        except OSError:
            pass
    return out


def site_dirs(environ=None, warn=None, installed=None) -> list:
    """The site's bundle directories, searched after the user's own: TACK_CACHE_BUNDLES's, then
    those installed beside Tack (``installed_dirs``; ``installed`` given: those instead).

    Whitespace around an entry is not part of it, as around TACK_CACHE_DIR (``"/a : /b"`` is
    /a and /b: a directory whose name begins or ends with a space cannot be named here).  An
    entry that cannot name a bundle directory (a relative path, a file, a symbolic link) is
    left out, and ``warn`` (if given) is told why; one that does not exist yet is left in
    (a missing bundle is normal, and said only in the log)."""
    environ = os.environ if environ is None else environ
    out = []
    for d in environ.get("TACK_CACHE_BUNDLES", "").split(os.pathsep):
        d = d.strip()
        if not d:
            continue
        try:
            d = site_dir_entry(d, environ)
        except ValueError as e:
            if warn is not None:
                warn(f"{e}; ignored")
            continue
        why = _site_dir_problem(d)
        if why is None:
            if d not in out:                    # named twice: searched once
                out.append(d)
        elif warn is not None:
            warn(f"TACK_CACHE_BUNDLES names {why}; ignored")
    seen = {os.path.normpath(d) for d in out}
    for d in installed_dirs(environ, warn=warn) if installed is None else installed:
        if os.path.normpath(d) not in seen:
            seen.add(os.path.normpath(d))
            out.append(d)
    return out


def site_dir_entry(d: str, environ=None) -> str:
    """A TACK_CACHE_BUNDLES entry as a job takes it: ``$VAR``, ``${VAR}`` and a leading ``~``
    expanded (as TACK_CACHE_DIR's), normalized (as the trust checks name it: a trailing slash
    would have an lstat follow a link).  ValueError for an unset variable, or where what the
    expansion gives is relative; a relative entry with nothing to expand is returned as it is
    (``_site_dir_problem`` says why it is ignored).  The site tool's ``check`` asks it too."""
    if "$" in d or d.startswith("~"):
        from . import check_directory
        d = check_directory(d, "TACK_CACHE_BUNDLES", environ, what="a bundle directory")
    return os.path.normpath(d)


def _site_dir_problem(d: str):
    bad = control_character(d)
    if bad is not None:
        return f"{d!r}, which holds the control character {bad!r}"
    if not os.path.isabs(d):
        return f"{d!r}, which is not an absolute path (name bundle directories from /)"
    try:
        st = os.lstat(d)
    except OSError:
        return None                             # none there (yet): the lookups say so in the log
    if stat.S_ISLNK(st.st_mode):
        return (f"{d}, a symbolic link (to {os.readlink(d)}): set TACK_CACHE_BUNDLES to the real "
                f"directory, {os.path.realpath(d)}")
    if not stat.S_ISDIR(st.st_mode):
        return f"{d}, which is not a directory"
    return None


# -- the session -------------------------------------------------------------------

def _no_stage(label):
    """A first-call clock that keeps nothing (``Session.find_variant`` outside a launch)."""


class Hit:
    """A valid, current variant entry: what the backend's runtime loads (payload, meta), the
    bounds-check sites, and the entry it was read from (``found``: its path, source and stat)."""
    __slots__ = ("meta", "payload", "sites", "found")

    def __init__(self, meta, payload, sites, found):
        self.meta, self.payload, self.sites, self.found = meta, payload, sites, found


class Session:
    """The stores of this process for one device kind, tried in order (see the module's
    docstring), and what a launch asks of them.  ``disk``: the user's directory, when it is
    one of them (the only store written)."""

    def __init__(self, settings, stats, warn_once, host_key: str, stores=(), disk=None):
        self.settings = settings
        self.stats = stats
        self.warn_once = warn_once
        self.host_key = host_key
        self.stores = list(stores)
        self.disk = disk

    def add_loaded(self, loaded, label="broadcast bundle"):
        """Look in a bundle given to ``load_bundle`` first; ``label``: what its hits count as
        (``stats()["variants_from"]``)."""
        from .bundle import BundleStore
        # a new list: a thread's lookup going through the old one (a list changed under a
        # ``for`` shifts its items) finishes as it began
        self.stores = [BundleStore(self.stats, self.warn_once, loaded=loaded, label=label,
                                   target_key=self.host_key)] + self.stores

    # -- as a store (protocol.Store) ---------------------------------------

    @property
    def writable(self):
        return self.disk is not None and self.disk.writable

    def read(self, kind, key, level, targets=()):
        why = MISSING
        for store in self.stores:
            found, why_here = store.read(kind, key, level, targets)
            if found is not None:
                found.source = getattr(store, "source", "cache")
                return found, ""
            if why_here != MISSING:             # the user's directory says why it missed
                why = why_here
        return None, why

    # -- what a launch asks -------------------------------------------------

    def find_variant(self, kernel, templates, keys, targets, stage=_no_stage):
        """-> the ``Hit`` of a valid, current variant for one of ``targets`` (target keys, best
        first); None on a miss.  Loading its code is the runtime's (``runtime.load``).
        ``stage(label)``: the dispatcher's first-call clock, told when the entry has been read
        ("read": found, its bytes read and its checksum checked) and its dependency record
        checked ("deps")."""
        try:
            return self._find_variant(kernel, templates, keys, targets, stage)
        except Warning:                         # one of Tack's, raised as an error (-W error):
            raise                               # as it is, not as a cache error of its own
        except Exception as e:                  # noqa: BLE001 - the cache must never break a job
            self.warn_once(f"kernel cache error ({type(e).__name__}: {e}); compiling without it")
            return None

    def _find_variant(self, kernel, templates, keys, targets, stage):
        found = self._read_current(kernel, templates, KIND_VARIANT, keys.for_target, "variant", targets,
                                   stage, keys.lowered)
        if found is None:
            return None
        from ..errors import BoundsSite
        try:
            sites = [BoundsSite(f, a, p, int(n), fid, int(off))
                     for f, a, p, n, fid, off in found.meta["site"]]
        except (ValueError, TypeError) as e:
            from .stores_write import unusable
            unusable(self, kernel, "variant", found, f"damaged ({type(e).__name__}: {e})")
            return None
        count(self.stats, "hits", key="variant")
        count(self.stats, "variants_from", key=found.source)
        if found.marked:
            # A warm process never reads the lowered kernel: mark it used with its variant (the same
            # hourly write), or the size limit would delete the lowered kernels of the kernels in use
            # first, and their next new shape would run the front end again.
            from .stores_write import mark_used
            mark_used(self.disk, KIND_LOWERED, keys.lowered)
        log.debug("kernel '%s': loaded from the cache", kernel.__qualname__)
        return Hit(found.meta, found.payload, sites, found)

    def _read_current(self, kernel, templates, kind, key, level, targets=(), stage=_no_stage,
                      lowered=None):
        """-> the ``Found`` entry whose dependency record still holds; None on a miss.
        ``lowered``: a variant's lowered key (an alternate variant marks its own lowered kernel)."""
        name = kernel.__qualname__
        found, why = self.read(kind, key, level, targets)
        stage("read")
        if found is None:
            count(self.stats, "misses", key=level)
            if why == MISSING:
                log.debug("kernel '%s': %s missing", name, LEVEL_NAMES[level])
            else:
                log.debug("kernel '%s': %s not used: %s", name, LEVEL_NAMES[level], why)
            return None
        reason = check_deps(found.meta["dep"], kernel, templates)
        stage("deps")
        if reason is not None:
            # Another copy of the kernel's text (its helper differs): its own entry may be under
            # an alternate key, and this one is kept under its own (``alternates``).
            from .alternates import find
            alternate = find(self, kernel, templates, kind, key, level, targets, found, stage,
                             lowered)
            if alternate is not None:
                return alternate
            count(self.stats, "rejected")
            count(self.stats, "misses", key=level)
            log.debug("kernel '%s': %s not used: dependency changed: %s", name, LEVEL_NAMES[level], reason)
            return None
        return found

    def find_lowered(self, kernel, templates, key: str):
        """-> the cached lowered kernel if valid and current (the front end is then skipped); None
        on a miss (any unexpected error: one warning)."""
        try:
            from ..ir import LoweredKernel
            found = self._read_current(kernel, templates, KIND_LOWERED, key, "lowered")
            if found is None:
                return None
            try:
                lowered = LoweredKernel.from_bytes(found.payload)
            except ValueError as e:
                from .stores_write import unusable
                unusable(self, kernel, "lowered", found, f"damaged ({e})")
                return None
        except Warning:                         # one of Tack's, raised as an error (-W error):
            raise                               # as it is, not as a cache error of its own
        except Exception as e:                  # noqa: BLE001 - the cache must never break a job
            self.warn_once(f"kernel cache error ({type(e).__name__}: {e}); compiling without it")
            return None
        count(self.stats, "hits", key="lowered")
        log.debug("kernel '%s': lowered kernel loaded from the cache (front end skipped)",
                  kernel.__qualname__)
        return lowered


class PackedBundles:
    """Bundles ``pack`` made, in one directory: one per target it found, named by the target key
    and this kind's machine (``bundle.bundle_name``), opened for each target key a lookup asks,
    best first: the session's (this host's code, or a GPU kind's portable code), and a GPU
    device's own code (what its driver built from the portable code, stored under the device's
    key).  Nothing is imported or opened until a lookup reaches them, and then (``lazy``) only a
    file that exists; with ``loaded`` (the bundles ``load_bundle`` broadcast), no file at all.

    Three uses (``open_session``): the user's own in ``write`` and ``read`` mode, read after the
    per-kernel files (after ``pack`` then ``clear`` a run loads from them instead of compiling,
    as a ccache or Numba user expects of a file in their own cache; a warm process never gets
    here; one of another Tack version, a checkout edited since it was packed, is passed over in
    the log only, since the directory serves and stores as usual); the user's own in mode
    ``bundle``, where they are all there is and a stale one is said; and in each site bundle
    directory, bundles packed on a host like this one (``allow_root``: an admin's), opened only
    where that directory's listing (``holds``: its ``SiteBundleStore``'s, listed once) holds
    the name: no failed open per process, a lookup Lustre's metadata server may answer per rank."""

    writable = False

    def __init__(self, stats, warn_once, directory, target_key, machine=None, label="cache bundle",
                 source="cache bundle", allow_root=False, quiet_stale=True, lazy=True, loaded=None,
                 holds=None):
        self.stats, self.warn_once = stats, warn_once
        self.directory, self.target_key, self.machine = directory, target_key, machine
        self.label, self.allow_root, self.quiet_stale, self.lazy = label, allow_root, quiet_stale, lazy
        self.source = source            # what the statistics say served (its BundleStores say so too)
        self.stores = {}                # target key -> its BundleStore, or False: no such file
        self.loaded = loaded            # {target key: Bundle} load_bundle broadcast: no file opened
        self.holds = holds              # (name) -> whether the directory holds it (None: ask lazily)

    def _store(self, target_key):
        got = self.stores.get(target_key)
        if got is None and self.loaded is not None:
            from .bundle import BundleStore
            b = self.loaded.get(target_key)
            got = self.stores[target_key] = b is not None and BundleStore(
                self.stats, self.warn_once, loaded=b, label=self.label, target_key=target_key)
        if got is None:
            from .bundle import BundleStore, bundle_name
            name = bundle_name(target_key, self.machine)
            path = os.path.join(self.directory, name)
            there = self.holds(name) if self.holds is not None else (not self.lazy or os.path.lexists(path))
            got = there and BundleStore(
                self.stats, self.warn_once, path, allow_root=self.allow_root, label=self.label,
                quiet=True, quiet_stale=self.quiet_stale, target_key=target_key)
            self.stores[target_key] = got
        return got

    def read(self, kind, key, level, targets=()):
        why = MISSING
        for tk in (targets if kind == KIND_VARIANT and targets else (self.target_key,)):
            store = self._store(tk)
            if store is False:
                continue
            found, why_here = store.read(kind, key, level)
            if found is not None:
                return found, ""
            if why_here != MISSING:
                why = why_here
        return None, why


def open_session(settings, stats, warn_once, host_key, site_bundles, rank=0, sites=(),
                 own_bundle=True, machine=None, loaded=None, loaded_sites=None) -> Session:
    """The session of a process (``rank``: its MPI rank): in mode ``bundle``, the user's packed
    bundles (``PackedBundles``: this host's, named by ``host_key``, and a GPU device's own)
    unless ``own_bundle`` is False (``load_bundle`` read this host's); else the user's
    directory, then those bundles after a miss there; then for each site bundle directory in
    ``sites``, bundles packed on a host like this one and those built for its architecture
    (which, the caller's ``site_bundles`` says).  ``machine``: the one in the file
    names of this kind's bundles (a GPU kind's code machine; None: this host's); ``loaded``:
    {target key: Bundle} that ``load_bundle`` broadcast for a GPU kind, which then serve in place
    of the user's files; ``loaded_sites``: {site directory: (the bundle packed for this host there
    or None, [(``cpu:arch``, target key, Bundle)])} that it broadcast for the CPU, which serve in
    place of those directories' files (none of which is then opened; a directory it leaves out
    is read as usual)."""
    stores, disk = [], None
    if settings.mode != "bundle":
        disk = DiskCache(settings, stats, warn_once, rank)
        stores.append(disk)
        if own_bundle:
            stores.append(PackedBundles(stats, warn_once, settings.directory, host_key, machine,
                                        loaded=loaded))
    if settings.mode == "bundle" and own_bundle:
        stores.append(PackedBundles(stats, warn_once, settings.directory, host_key, machine,
                                    quiet_stale=False, lazy=False, loaded=loaded))
    if sites:
        from .bundle import SiteBundleStore
        for d in sites:
            packed, chosen = (None, None) if loaded_sites is None else loaded_sites.get(d, (None, None))
            site = SiteBundleStore(stats, warn_once, d, site_bundles, chosen=chosen)
            # a bundle packed on a host like this one first; opened only if the listing names it
            stores.append(PackedBundles(stats, warn_once, d, host_key, machine, label="site bundle",
                                        source="site bundles", allow_root=True, quiet_stale=False,
                                        lazy=False, loaded=None if chosen is None else
                                        ({host_key: packed} if packed is not None else {}),
                                        holds=site.holds))
            stores.append(site)
    return Session(settings, stats, warn_once, host_key, stores, disk)
