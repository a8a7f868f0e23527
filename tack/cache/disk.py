"""The per-kernel store on disk: find and store lowered kernels and compiled variants.

Every public method turns a failure of the file system (full disk,
read-only or vanished directory, permissions, a lost race) into a miss and
at most one warning per process: the kernel is then compiled and run as
without a cache.  A damaged entry is a miss too, and is removed when this
process may write there.
"""

from __future__ import annotations

import os
import time
import warnings

from . import store, trust
from ._log import log
from .keys import tack_version_id



class Stats:
    """Counters of this process's cache use (``tack.cache.stats()``)."""

    def __init__(self):
        self.hits = {"lowered": 0, "variant": 0}
        self.misses = {"lowered": 0, "variant": 0}
        self.bytes_read = 0
        self.bytes_written = 0
        self.load_seconds = 0.0
        self.store_seconds = 0.0
        self.damaged = 0
        self.rejected = 0          # entries whose dependency record no longer holds

    def as_dict(self) -> dict:
        return {"hits": dict(self.hits), "misses": dict(self.misses),
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "load_seconds": self.load_seconds, "store_seconds": self.store_seconds,
                "damaged": self.damaged, "rejected": self.rejected}


class DiskCache:
    """Per-kernel entries under ``<directory>/<tack version>/{lowered,variants}/<xx>/``."""

    def __init__(self, settings, stats: Stats, warn_once):
        self.settings = settings
        self.root = settings.directory
        self.version_dir = os.path.join(self.root, tack_version_id())
        self.writable = settings.mode == "write"
        self.marks_used = settings.mode in ("write", "read")    # loading marks an entry used
        self.stats = stats
        self.warn_once = warn_once
        self._checked = set()        # directories checked (or created) and trusted
        self._usable = None

    # -- trust and layout ---------------------------------------------------

    def usable(self) -> bool:
        """Check (once) that the directory may be trusted; create it in write mode."""
        if self._usable is None:
            self._usable = self._open()
        return self._usable

    def _open(self) -> bool:
        try:
            if self.writable and not os.path.lexists(self.root):
                os.makedirs(self.root, 0o700, exist_ok=True)
            if not os.path.lexists(self.root):
                log.debug("no cache directory at %s (mode %s)", self.root, self.settings.mode)
                return False
            trust.check(self.root)
            self._checked.add(self.root)
            return True
        except trust.Untrusted as e:
            self.warn_once(f"not using the kernel cache: {e}")
        except OSError as e:
            self.warn_once(f"not using the kernel cache at {self.root}: {e.strerror or e}")
        return False

    def _dir_ok(self, path: str, create: bool) -> bool:
        """Each level below the root: create it private (write mode), check it trusted."""
        if path in self._checked:
            return True
        parent = os.path.dirname(path)
        if parent != self.root and not self._dir_ok(parent, create):
            return False
        if create:
            trust.ensure_private_dir(path)
        elif not os.path.isdir(path):
            return False
        else:
            trust.check(path)
        self._checked.add(path)
        return True

    # -- reading ------------------------------------------------------------

    def read(self, kind: int, key: str, level: str):
        """-> (meta, payload, path) of a valid entry, or None (a miss)."""
        path = store.entry_path(self.version_dir, kind, key)
        t0 = time.perf_counter()
        try:
            if not self.usable() or not self._dir_ok(os.path.dirname(path), create=False):
                log.debug("%s %s: missing", level, key[:16])
                return None
            with open(path, "rb") as f:
                data = f.read()
                st = os.fstat(f.fileno())
        except FileNotFoundError:
            log.debug("%s %s: missing", level, key[:16])
            return None
        except trust.Untrusted as e:
            self.warn_once(f"not using the kernel cache: {e}")
            self._usable = False
            return None
        except OSError as e:
            self.warn_once(f"cannot read the kernel cache at {self.root}: {e.strerror or e}")
            return None
        try:
            _, meta, payload = store.decode(data, kind, key)
        except store.DamagedEntry as e:
            self.stats.damaged += 1
            log.debug("%s %s: damaged (%s); ignored", level, key[:16], e)
            self._remove_if_unchanged(path, st)
            return None
        self.stats.bytes_read += len(data)
        self.stats.load_seconds += time.perf_counter() - t0
        if self.marks_used:
            _mark_used(path, st.st_mtime)
        return meta, payload, path

    def _remove_if_unchanged(self, path, st):
        """Remove a damaged entry, unless another process has just replaced it."""
        if not self.writable:
            return
        try:
            now = os.stat(path)
            if (now.st_ino, now.st_mtime_ns, now.st_size) == (st.st_ino, st.st_mtime_ns, st.st_size):
                os.unlink(path)
        except OSError:
            pass

    def discard(self, path: str):
        """Remove an entry found unusable (e.g. it no longer loads), if it is one of ours."""
        if self.writable and os.path.dirname(os.path.dirname(os.path.dirname(path))) == self.version_dir:
            try:
                os.unlink(path)
            except OSError:
                pass

    # -- writing ------------------------------------------------------------

    def write(self, kind: int, key: str, meta: dict, payload: bytes) -> bool:
        if not self.writable or not self.usable():
            return False
        path = store.entry_path(self.version_dir, kind, key)
        t0 = time.perf_counter()
        try:
            self._dir_ok(os.path.dirname(path), create=True)
            data = store.encode(kind, key, meta, payload)
            store.write_atomic(path, data)
        except trust.Untrusted as e:
            self.warn_once(f"not storing in the kernel cache: {e}")
            self.writable = False
            return False
        except OSError as e:
            self.warn_once(f"cannot store in the kernel cache at {self.root}: {e.strerror or e}; "
                           "kernels still compile and run")
            return False
        self.stats.bytes_written += len(data)
        self.stats.store_seconds += time.perf_counter() - t0
        self._hourly_size_check()
        return True

    def _hourly_size_check(self):
        from . import size
        try:
            result = size.maybe_prune(self.root, self.settings.max_size)
        except OSError as e:
            self.warn_once(f"cannot check the kernel cache's size at {self.root}: {e.strerror or e}")
            return
        if result and result[2]:
            log.debug("size check: %d bytes, deleted %d entries (%d bytes)",
                      result[0], result[2], result[1])


def _mark_used(path: str, mtime: float):
    """LRU: bump an entry's mtime when loaded, at most once an hour (see size.py)."""
    now = time.time()
    if now - mtime > 3600:
        try:
            os.utime(path, (now, now))
        except OSError:
            pass


def warn_once_factory(quiet=False):
    """A function that warns the first time it is called in this process, and logs always.

    ``quiet``: log only (MPI ranks other than 0, so a job of thousands of
    ranks does not print one warning per rank).
    """
    said = set()

    def warn_once(message: str):
        if not said and not quiet:
            warnings.warn(f"tack: {message}", RuntimeWarning, stacklevel=2)
        said.add(message)
        log.debug("%s", message)
    return warn_once
