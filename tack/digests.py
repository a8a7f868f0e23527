"""The one hash of Tack's keys and checksums: SHA-512 cut to 32 bytes, from CPython's own module.

Keys (a kernel's, a variant's, a dependency's fingerprint) and checksums (an entry's, a
bundle's head and index blocks) all come from ``hasher``.  SHA-512 truncated to 256 bits (as
NIST SP 800-107 allows; SHA-512/256 is the same construction with other initial values) is as
strong as SHA-256.  It comes from CPython's ``_sha512`` (``_sha2`` from Python 3.12): a small
extension module, about 0.2 ms to load, the one module a warm process imports that NumPy does
not (``tests/test_warm_imports.py``).  Every secure hash costs such a load: BLAKE2b's ``_blake2``
as much, and ``hashlib`` loads OpenSSL's libcrypto, about 2.5 ms of a process start here.
SHA-512 was chosen over BLAKE2b when it seemed loaded already (a .pth file of the development
machine's imported ``tempfile``, hence ``random``, into every process; NumPy does not), and is
0.04 ms slower over the some 57 KB a warm contour hashes (the entries it reads, the constants a
kernel depends on).  Changing the hash changes every key and checksum: entries and
bundles made with another one are not found, or are refused as another format, never misread.
"""

import sys

# The module by this Python's name for it: a failed import searches every directory on sys.path
# (0.05 ms of a warm process that asked for _sha2 first on Python 3.11).
try:
    if sys.version_info >= (3, 12):     # one module for the SHA-2 family
        from _sha2 import sha512 as _sha512
    else:
        from _sha512 import sha512 as _sha512
except ImportError:                     # pragma: no cover - a Python built without it
    from hashlib import sha512 as _sha512

NAME = "sha512-256t"                    # what keys and checksums are, for messages and docs
SIZE = 32                               # bytes of a digest (64 hex digits)


class _Hash:
    """SHA-512's state, giving the first ``SIZE`` bytes of its digest."""

    __slots__ = ("_h",)

    def __init__(self, h):
        self._h = h

    def update(self, data) -> None:
        self._h.update(data)

    def digest(self) -> bytes:
        return self._h.digest()[:SIZE]

    def hexdigest(self) -> str:
        return self._h.hexdigest()[:2 * SIZE]

    def copy(self) -> "_Hash":
        return _Hash(self._h.copy())


def hasher(data=b"") -> _Hash:
    """A hash object (``update``, ``digest``, ``hexdigest``, ``copy``) over ``data``: SHA-512's
    first 32 bytes."""
    return _Hash(_sha512(data))
