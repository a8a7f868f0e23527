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

    ``writable``: whether the store is written to (only the user's directory, in mode
    ``write``, on rank 0, and a session through it): its writing is ``stores_write``'s, which a
    warm process never imports, not a method every store carries.
    """

    writable: bool

    def read(self, kind: int, key, level: str, targets=()) -> tuple: ...
