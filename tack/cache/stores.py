"""Where a process looks for entries, in order, and where it stores them.

1. a bundle given to ``load_bundle`` (broadcast from rank 0);
2. the user's own directory: its per-kernel entry files (modes ``write``
   and ``read``), or only its bundle (mode ``bundle``, the default under MPI);
3. the site's bundle directories (TACK_CACHE_BUNDLES), read-only.

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

    def __init__(self, path=None, loaded=None, allow_root=False, label="bundle", quiet=False):
        self.path = path
        self.bundle = loaded
        self.allow_root = allow_root
        self.label = label
        self.quiet = quiet              # a missing bundle is normal here: say so only in the log
        self._failed = loaded is None and path is None

    def _open(self, chain):
        from . import bundle
        try:
            self.bundle = bundle.read(self.path, allow_root=self.allow_root)
            chain.stats.bytes_read += len(self.bundle.data)
            log.debug("%s %s: %d entries", self.label, self.path, len(self.bundle))
        except bundle.BundleError as e:
            self._failed = True
            missing = not os.path.lexists(self.path)
            if missing and self.quiet:
                log.debug("%s: none at %s", self.label, self.path)
            else:
                chain.warn_once(f"not using the {self.label}: {e}")

    def read(self, chain, kind, key, level):
        if self.bundle is None and not self._failed:
            self._open(chain)
        if self.bundle is None:
            return None
        got = self.bundle.get(kind, key)
        if got is None:
            return None
        meta, payload = got
        return meta, payload, self.bundle.path


class DiskStore:
    """Adapts a DiskCache (per-kernel files) to the chain."""

    def __init__(self, disk):
        self.disk = disk

    @property
    def writable(self):
        return self.disk.writable

    def read(self, chain, kind, key, level):
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
            self.stores.append(DiskStore(self.disk))
        for d in site_dirs:
            self.stores.append(BundleStore(os.path.join(d, name), allow_root=True,
                                           label="site bundle", quiet=True))

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

    def discard(self, kind, key):
        if self.disk is not None:
            self.disk.discard(kind, key)


BUNDLE_PREFIX = "bundle-"


def bundle_name(target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<target key prefix>``: the one bundle a host of that target reads."""
    return f"{BUNDLE_PREFIX}{machine or platform.machine()}-{target_key[:16]}"


def site_dirs(environ=None) -> list:
    """TACK_CACHE_BUNDLES: the site's bundle directories, searched after the user's own."""
    environ = os.environ if environ is None else environ
    raw = environ.get("TACK_CACHE_BUNDLES", "")
    return [d for d in raw.split(os.pathsep) if d.strip()]
