"""What ``tack.launch`` asks of the cache: keys, then find or store each level.

The warm path is ``keys`` then ``find_variant``: code-object fingerprints,
one file read, a checksum, the dependency check, and loading object code
with Tack's own loader.  Nothing here runs the front end or imports llvmlite.
Any unexpected error is a miss and one warning: no crash from the cache
reaches a user's job.
"""

from __future__ import annotations

import functools

from . import deps, store
from ._log import log
from ..types import spec
from .keys import host_target_key, lowered_key, variant_key



class Keys:
    """A kernel launch's cache keys: the lowered one, and a variant key per target."""

    __slots__ = ("lowered", "argtypes", "grid", "_variants")

    def __init__(self, lowered: str, argtypes, grid: int):
        self.lowered = lowered
        self.argtypes = argtypes
        self.grid = grid
        self._variants = {}

    def for_target(self, target_key: str) -> str:
        key = self._variants.get(target_key)
        if key is None:
            key = self._variants[target_key] = variant_key(self.lowered, self.argtypes,
                                                           self.grid, target_key)
        return key

    @property
    def variant(self) -> str:
        """The variant key for this host (the user's own cache)."""
        return self.for_target(host_target_key())


def _guarded(default=None):
    def wrap(fn):
        @functools.wraps(fn)
        def inner(cache, *args, **kwargs):
            try:
                return fn(cache, *args, **kwargs)
            except Exception as e:          # noqa: BLE001 - the cache must never break a job
                cache.warn_once(f"kernel cache error ({type(e).__name__}: {e}); compiling without it")
                return default
        return inner
    return wrap


def template_ids(templates: dict):
    from ..frontend.fingerprint import class_fingerprint
    return sorted((p, f"{c.__module__}.{c.__qualname__}", class_fingerprint(c))
                  for p, c in templates.items())


def keys(kernel, templates, value_types, grid_ndim, debug) -> Keys:
    return Keys(lowered_key(kernel, template_ids(templates), debug), tuple(value_types), grid_ndim)


def _read_current(cache, kernel, templates, kind, key, level):
    """-> (meta, payload) of an entry whose dependency record still holds; None on a miss."""
    name = kernel.__qualname__
    got = cache.read(kind, key, level)
    if got is None:
        cache.stats.misses[level] += 1
        log.debug("kernel '%s': %s missing", name, LEVEL_NAMES[level])
        return None
    meta, payload, path = got
    reason = deps.check(meta["dep"], kernel, templates)
    if reason is not None:
        cache.stats.rejected += 1
        cache.stats.misses[level] += 1
        log.debug("kernel '%s': %s not used: dependency changed: %s", name, LEVEL_NAMES[level], reason)
        return None
    return meta, payload, path


LEVEL_NAMES = {"variant": "compiled variant", "lowered": "lowered kernel"}


def _unusable(cache, kernel, level, path, why):
    cache.stats.damaged += 1
    cache.stats.misses[level] += 1
    log.debug("kernel '%s': %s not used: %s", kernel.__qualname__, LEVEL_NAMES[level], why)
    cache.discard(path)


@_guarded()
def find_variant(cache, kernel, templates, keys: Keys):
    """-> (entry function, bounds-check sites, dependency record) of a valid, current variant; None on a miss."""
    got = _read_current(cache, kernel, templates, store.KIND_VARIANT, keys.for_target, "variant")
    if got is None:
        return None
    meta, payload, path = got
    from ..backends.elf import load_object
    from ..errors import BoundsSite
    try:
        sites = [BoundsSite(f, a, p, int(n), fid, int(off)) for f, a, p, n, fid, off in meta["site"]]
        fn = load_object(payload, meta["entry"])
    except Exception as e:                  # noqa: BLE001 - a foreign or damaged entry, never a crash
        _unusable(cache, kernel, "variant", path, f"does not load ({type(e).__name__}: {e})")
        return None
    cache.stats.hits["variant"] += 1
    log.debug("kernel '%s': loaded from the cache", kernel.__qualname__)
    return fn, sites, meta["dep"]


@_guarded()
def find_lowered(cache, kernel, templates, key: str):
    """-> the cached lowered kernel if valid and current (the front end is then skipped); None on a miss."""
    from ..ir import LoweredKernel
    got = _read_current(cache, kernel, templates, store.KIND_LOWERED, key, "lowered")
    if got is None:
        return None
    try:
        lowered = LoweredKernel.from_bytes(got[1])
    except ValueError as e:
        _unusable(cache, kernel, "lowered", got[2], f"damaged ({e})")
        return None
    cache.stats.hits["lowered"] += 1
    log.debug("kernel '%s': lowered kernel loaded from the cache (front end skipped)",
              kernel.__qualname__)
    return lowered


@_guarded(False)
def store_lowered(cache, key: str, lowered) -> bool:
    meta = {"kernel": lowered.kernel.source.name, "dep": lowered.deps}
    return cache.write(store.KIND_LOWERED, key, meta, lowered.to_bytes())


@_guarded(False)
def store_variant(cache, keys: Keys, lowered, argtypes, entry: str, sites, obj: bytes, identity) -> bool:
    import platform
    meta = {"kernel": lowered.kernel.source.name, "dep": lowered.deps, "entry": entry,
            "lowered": keys.lowered, "arg": [[str(t)] for t in argtypes],
            "argspec": [[spec(t)] for t in argtypes], "grid": str(keys.grid),
            "target_key": host_target_key(), "machine": platform.machine(),
            "arch": identity.get("cpu", ""),
            "target": ";".join(f"{k}={v}" for k, v in sorted(identity.items())),
            "site": [list(s) for s in sites or ()]}
    stored = cache.write(store.KIND_VARIANT, keys.variant, meta, obj)
    log.debug("kernel '%s': compiled%s", meta["kernel"], " and stored" if stored else "")
    return stored
