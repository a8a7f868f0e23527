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

__all__ = ["configure", "settings", "stats", "reset_stats"]

_lock = threading.Lock()
_configured = {}
_resolved = None          # Settings, once the first kernel compiled
_session = None           # the Session for this process
_stats = None


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
            _resolved = _settings.resolve(_configured)
        return _resolved


def stats() -> dict:
    """This process's hits and misses per level, bytes read and written, seconds loading and storing."""
    return _get_stats().as_dict()


def reset_stats() -> None:
    global _stats
    _stats = None


def _get_stats():
    global _stats
    if _stats is None:
        from .disk import Stats
        _stats = Stats()
    return _stats


def session():
    """The disk store for this process, or None when the cache is off."""
    global _session
    if _session is None:
        s = settings()
        if s.mode in ("off", "bundle"):
            _session = False
        else:
            from .disk import DiskCache, warn_once_factory
            _session = DiskCache(s, _get_stats(), warn_once_factory())
    return _session or None


def _setup_logging():
    """TACK_CACHE_LOG=1: say per kernel what the cache did; 2: also each key step."""
    level = os.environ.get("TACK_CACHE_LOG", "").strip().lower()
    if level in ("", "0", "false", "no", "off"):
        return
    import logging
    from ._log import NAME, TRACE
    logger = logging.getLogger(NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tack.cache: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(TRACE if level == "2" else logging.DEBUG)


def _reset_for_tests():
    """Forget settings, session and stats, as in a new process."""
    global _resolved, _session
    _configured.clear()
    _resolved = None
    _session = None
    reset_stats()
