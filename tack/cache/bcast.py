"""``load_bundle(comm)``: rank 0 reads the bundle, every rank gets its bytes.

Rank 0 reads the whole file in one go (``bundle.read(..., whole=True)``): the job pays one
open and one read of it, however many ranks use it; the other ranks look entries up in
the bytes they received, each entry checked by its own checksum when used.

The bytes go through mpi4py's buffer interface (``Bcast`` of a byte buffer,
in chunks well under MPI's 2**31-element count limit), never pickled.  A
status (entry count, byte length) is broadcast first, so every rank makes
the same collective calls whatever happened on rank 0.
"""

from __future__ import annotations

import os

CHUNK = 1 << 30


def load_and_broadcast(comm, settings, host_key):
    """-> the Bundle on every rank, or None on every rank (after rank 0 warns why).

    ``host_key()``: this host's CPU target key, which names its bundle (asked on rank 0 only)."""
    from . import bundle, warn_once_factory
    from .keys import tack_version_id

    rank = 0 if comm is None else comm.Get_rank()
    data, status, loaded = b"", [0, -1], None   # status: (byte length, entry count); -1: not usable
    if rank == 0:
        if settings.mode == "off":
            reason = "the cache is off (TACK_CACHE=off)"
        else:
            try:
                path = os.path.join(settings.directory, bundle.bundle_name(host_key()))
                loaded = bundle.read(path, tack_version=tack_version_id(), whole=True)
                data, status, reason = loaded.data, [len(loaded.data), len(loaded)], None
            except bundle.BundleError as e:
                reason = str(e)
            except Exception as e:              # noqa: BLE001 - rank 0 must still reach the Bcast
                loaded, reason = None, f"{type(e).__name__}: {e}"
        if reason is not None:
            warn_once_factory()(f"not using a bundle: {reason}; kernels compile as without a cache")
    if comm is None:
        return loaded

    import numpy as np
    head = np.array(status, dtype=np.int64)
    comm.Bcast(head, root=0)
    nbytes, count = int(head[0]), int(head[1])
    if count < 0:
        return None
    buf = bytearray(data) if rank == 0 else bytearray(nbytes)
    view = memoryview(buf)
    for start in range(0, nbytes, CHUNK):
        comm.Bcast(view[start:start + CHUNK], root=0)
    if rank == 0:
        return loaded
    try:
        return bundle.Bundle(bytes(buf), "<broadcast from rank 0>")
    except bundle.BundleError:                  # cannot differ from rank 0's; be safe anyway
        return None
