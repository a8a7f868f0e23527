"""Tack's kernel cache: what the compiler makes, kept on disk so later processes start warm.

On by default, needing no code.  Settings come from ``configure()``, then
TACK_CACHE_DIR / TACK_CACHE / TACK_CACHE_SIZE, then defaults, and are read
when the first kernel compiles.  See docs/cache.md.
"""

from __future__ import annotations

import os
import sys
import threading

from . import config as _settings
from .config import TRACE, log  # noqa: F401  (the cache's logger, for its modules)

__all__ = ["configure", "load_bundle", "settings", "stats", "reset_stats"]

_lock = threading.Lock()
_configured = {}
_resolved = None          # Settings, once the first kernel compiled
_session = None           # the Session for this process
_stats = None
_launch = None            # the MPI launch, if any (detected once)
_loaded_bundle = None     # a Bundle given by load_bundle()
_bundle_called = False    # load_bundle() ran: no rank opens the directory's bundle itself


def configure(directory=None, mode=None, max_size=None):
    """Set the cache directory, mode (write, read, bundle, off) or size limit (e.g. "4G").

    Call before the first kernel compiles; a bad value raises ValueError.
    """
    if _resolved is not None:
        raise RuntimeError("tack.cache.configure() must be called before the first kernel "
                           "compiles; the cache's settings are already in use")
    given = {}
    if directory is not None:
        given["directory"] = _settings.check_directory(directory, "configure(directory=...)")
    if mode is not None:
        given["mode"] = _settings.check_mode(mode, "configure(mode=...)")
    if max_size is not None:
        given["max_size"] = _settings.check_size(max_size, "configure(max_size=...)")
    _configured.update(given)


def settings() -> _settings.Settings:
    """The settings in force (resolving them now if no kernel has compiled yet)."""
    global _resolved
    with _lock:
        if _resolved is None:
            _setup_logging()
            _resolved = _settings.resolve(_configured, mpi=mpi_launch() is not None)
        return _resolved


def mpi_launch():
    """The MPI launch this process belongs to (from the launcher's variables), or None."""
    global _launch
    if _launch is None:
        _launch = _settings.detect() or False
    return _launch or None


def stats() -> dict:
    """This process's hits and misses per level, bytes read and written, seconds loading and storing."""
    return _get_stats().as_dict()


def reset_stats() -> None:
    """Start this process's counters again from zero."""
    if _stats is not None:
        _stats.__init__()


def _get_stats():
    global _stats
    if _stats is None:
        from .warm import Stats
        _stats = Stats()
    return _stats


def session():
    """The stores this process looks entries up in (a ``store.Chain``), or None when off."""
    global _session
    if _session is None:
        s = settings()
        if s.mode == "off":
            _session = False
        else:
            from .warm import Chain, site_dirs, warn_once_factory
            launch = mpi_launch()
            warn = warn_once_factory(quiet=launch is not None and launch.rank != 0)
            _session = Chain(s, _get_stats(), warn, launch, site_dirs(),
                             own_bundle=not _bundle_called)
            if _loaded_bundle is not None:
                _session.add_loaded(_loaded_bundle)
    return _session or None


def load_bundle(comm=None) -> int:
    """Read this host's bundle on rank 0 and broadcast it to every rank of ``comm``.

    Call on every rank before the first kernel. Returns the number of entries
    read; 0 on every rank if rank 0 cannot use the bundle (there is none, it
    is damaged, or it is not the user's own), after rank 0 warns why. Every
    rank takes part in the same collective calls whatever happens on rank 0.
    Without ``comm``, this process reads the bundle itself.
    """
    from .bcast import load_and_broadcast
    global _loaded_bundle, _bundle_called
    _bundle_called = True
    loaded = load_and_broadcast(comm, settings())
    if loaded is None:
        return 0
    _loaded_bundle = loaded
    if _session:
        _session.add_loaded(loaded)
    return len(loaded)


def _setup_logging():
    """TACK_CACHE_LOG=1: say per kernel what the cache did; 2: also each key step."""
    level = os.environ.get("TACK_CACHE_LOG", "").strip().lower()
    if level in ("", "0", "false", "no", "off"):
        return
    import logging
    from .config import NAME
    logger = logging.getLogger(NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tack.cache: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(TRACE if level == "2" else logging.DEBUG)


def _reset_for_tests():
    """Forget settings, session, stats, MPI detection and bundles, as in a new process."""
    global _resolved, _session, _launch, _loaded_bundle, _bundle_called, _stats
    _bundle_called = False
    _configured.clear()
    _resolved = None
    _session = None
    _launch = None
    _loaded_bundle = None
    reset_stats()
    _stats = None
