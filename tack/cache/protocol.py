"""``Store``: what every store of the cache offers, so that a session needs no change for a new one.

The stores (``stores.DiskCache``, ``bundle.BundleStore``,
``bundle.SiteBundleStore``) and ``stores.Session``, which chains them,
satisfy it by their shape; none inherits from it, so nothing a cache hit
runs imports this module (building a protocol class costs a share of a
warm call's budget).  A test checks every store against it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Store(Protocol):
    """One place entries are looked up in.

    ``read(kind, key, level, targets)``: ``key`` is an entry's key, or, for a
    variant, a function of a target key (``keys.for_target``); the user's
    directory then tries each of ``targets`` in turn, ``stores.PackedBundles``
    the bundle packed for each of them in turn, and a bundle its own target.
    -> ``(Found, "")``, or ``(None, why)``: ``MISSING``, or what was wrong
    (untrusted, damaged...), for the kernel's log line.
    """

    writable: bool

    def read(self, kind: int, key, level: str, targets=()) -> tuple: ...

    def write(self, kind: int, key: str, meta: dict, payload: bytes) -> bool: ...

    def touch(self, kind: int, key: str) -> None: ...

    def discard(self, path: str) -> None: ...
