"""Where a process looks for entries, in order, and where it stores them.

1. a bundle given to ``load_bundle`` (broadcast from rank 0);
2. the user's own directory: its per-kernel entry files (modes ``write``
   and ``read``), or only its bundle (mode ``bundle``, the default under MPI);
3. the site's bundle directories (TACK_CACHE_BUNDLES), read-only: in each,
   a bundle packed on a host like this one, then the bundle built ahead of
   time (``python -m tack.site bundles build``) for this host's
   microarchitecture.

Stores are opened lazily: a bundle is read (one open, one read) at the
first lookup that reaches it.  Only the user's directory is ever written,
and under MPI only by rank 0.
"""

from __future__ import annotations

import os
import platform

from ._log import log


class BundleStore:
    """Lookups served from one bundle, opened at the first lookup (or given in memory)."""

    writable = False

    def __init__(self, path=None, loaded=None, allow_root=False, label="bundle", quiet=False,
                 target_key=None):
        self.path = path
        self._target_key = target_key
        self.bundle = loaded
        self.allow_root = allow_root
        self.label = label
        self.quiet = quiet              # a missing bundle is normal here: say so only in the log
        self._failed = loaded is None and path is None

    def _open(self, chain):
        import time
        from . import bundle
        t0 = time.perf_counter()
        try:
            from .keys import tack_version_id
            self.bundle = bundle.read(self.path, allow_root=self.allow_root,
                                      tack_version=tack_version_id())
            chain.stats.bytes_read += len(self.bundle.data)
            chain.stats.load_seconds += time.perf_counter() - t0
            log.debug("%s %s: %d entries", self.label, self.path, len(self.bundle))
        except bundle.BundleError as e:
            self._failed = True
            missing = not os.path.lexists(self.path)
            if missing and self.quiet:
                log.debug("%s: none at %s", self.label, self.path)
            else:
                chain.warn_once(f"not using the {self.label}: {e}")

    def target_key(self):
        from .keys import host_target_key
        return self._target_key or host_target_key()

    def read(self, chain, kind, key, level):
        if self.bundle is None and not self._failed:
            self._open(chain)
        if self.bundle is None:
            return None
        if callable(key):
            key = key(self.target_key())
        got = self.bundle.get(kind, key)
        if got is None:
            return None
        meta, payload = got
        return meta, payload, self.bundle.path


class SiteBundleStore(BundleStore):
    """A site's bundle directory: the bundle built ahead of time for this node's architecture.

    The node's architecture (archspec) and LLVM version (llvmlite) are found
    only when a lookup first reaches this store, after a miss in the user's
    own cache.
    """

    def __init__(self, directory):
        super().__init__(None, allow_root=True, label="site bundle", quiet=True)
        self.directory = directory
        self._failed = False

    def _open(self, chain):
        from .keys import arch_target_key, host_arch, llvm_version
        try:
            arch = host_arch()
            self._target_key = arch_target_key(arch, llvm_version())
        except Exception as e:                  # noqa: BLE001 - no archspec or llvmlite: no site bundle
            self._failed = True
            log.debug("site bundles in %s: cannot name this node's architecture (%s)", self.directory, e)
            return
        self.path = os.path.join(self.directory, site_bundle_name(arch, self._target_key))
        super()._open(chain)


class DiskStore:
    """Adapts a DiskCache (per-kernel files) to the chain."""

    def __init__(self, disk):
        self.disk = disk

    @property
    def writable(self):
        return self.disk.writable

    def read(self, chain, kind, key, level):
        if callable(key):
            from .keys import host_target_key
            key = key(host_target_key())
        return self.disk.read(kind, key, level)


class Chain:
    """The stores of this process, tried in order; what ``lookup`` talks to."""

    def __init__(self, settings, stats, warn_once, launch=None, site_dirs=(), own_bundle=True):
        from .disk import DiskCache
        from .keys import host_target_key
        self.settings = settings
        self.stats = stats
        self.warn_once = warn_once
        self.disk = None
        self.stores = []
        name = bundle_name(host_target_key())
        if settings.mode == "bundle":
            if own_bundle:                      # else load_bundle() already read (or tried) it
                self.stores.append(BundleStore(os.path.join(settings.directory, name),
                                               label="cache bundle", quiet=True))
        else:
            self.disk = DiskCache(settings, stats, warn_once)
            if launch is not None and launch.rank != 0:
                self.disk.writable = False          # under MPI only rank 0 stores
                self.disk.marks_used = False        # nor marks entries used: no storm of utimes
            self.stores.append(DiskStore(self.disk))
        for d in site_dirs:
            # a bundle packed on a node like this one, then one built for its architecture
            self.stores.append(BundleStore(os.path.join(d, name), allow_root=True,
                                           label="site bundle", quiet=True))
            self.stores.append(SiteBundleStore(d))

    def add_loaded(self, loaded):
        self.stores.insert(0, BundleStore(loaded=loaded, label="broadcast bundle"))

    @property
    def writable(self):
        return self.disk is not None and self.disk.writable

    def read(self, kind, key, level):
        for s in self.stores:
            got = s.read(self, kind, key, level)
            if got is not None:
                return got
        return None

    def write(self, kind, key, meta, payload):
        return self.disk.write(kind, key, meta, payload) if self.writable else False

    def discard(self, path):
        """Remove an unusable entry found at ``path`` (only ever a per-kernel file of ours)."""
        if self.disk is not None:
            self.disk.discard(path)


BUNDLE_PREFIX = "bundle-"


def bundle_name(target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<target key prefix>``: the one bundle a host of that target reads."""
    return f"{BUNDLE_PREFIX}{machine or platform.machine()}-{target_key[:16]}"


def site_bundle_name(arch: str, target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<arch>-<target key prefix>``: a site bundle built for ``arch``."""
    return f"{BUNDLE_PREFIX}{machine or platform.machine()}-{arch}-{target_key[:12]}"


def site_dirs(environ=None) -> list:
    """TACK_CACHE_BUNDLES: the site's bundle directories, searched after the user's own."""
    environ = os.environ if environ is None else environ
    raw = environ.get("TACK_CACHE_BUNDLES", "")
    return [d for d in raw.split(os.pathsep) if d.strip()]
