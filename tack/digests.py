"""sha256 without loading OpenSSL: the one hash function of Tack's keys and checksums.

``hashlib`` loads OpenSSL's libcrypto (``_hashlib``) when it is imported: about 2.5 ms of a
process start here, more than the rest of ``import tack``.  CPython's own sha256
(``_sha256``, HACL*-derived in newer versions) loads in a fraction of that and gives the same
digest; it is slower per byte (about 3 µs per KB against OpenSSL's 0.6 with SHA
instructions), which matters only for megabytes.  So ``sha256`` is CPython's own unless
OpenSSL is loaded already (someone imported ``hashlib``) or the data is large, where
OpenSSL's speed pays for its load.  The digest is sha256's either way: no key is weakened,
and entries written by either read the same.
"""

from __future__ import annotations

import sys

try:                                    # CPython 3.12+ names it _sha2, 3.11 _sha256
    if sys.version_info >= (3, 12):
        from _sha2 import sha256 as _builtin
    else:
        from _sha256 import sha256 as _builtin
except ImportError:                     # a Python built without it: OpenSSL's
    _builtin = None

_LARGE = 1 << 20                        # bytes from which OpenSSL's load pays for itself


def sha256(data=b"", more: int = 0):
    """A sha256 hash object (``update``, ``digest``, ``hexdigest``) over ``data``; ``more``: how
    many bytes the caller will add with ``update`` (so a large input gets OpenSSL's)."""
    if _builtin is None or "_hashlib" in sys.modules or len(data) + more >= _LARGE:
        import hashlib
        return hashlib.sha256(data)
    return _builtin(data)
