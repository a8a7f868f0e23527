"""The one hash of Tack's keys and checksums: BLAKE2b with a 32-byte digest, CPython's own.

Keys (a kernel's, a variant's, a dependency's fingerprint) and checksums (an entry's, a
bundle's head and index blocks) all come from ``hasher``.  BLAKE2b is a cryptographic hash, as
strong as SHA-256 at the same 256-bit size, and CPython builds it into ``_blake2``: a small
extension module, 0.17 ms to load, the one module a warm process imports that NumPy does not
(``tests/test_warm_imports.py``).  ``hashlib`` is never imported: it loads OpenSSL's libcrypto,
about 2.5 ms of a process start here.

For a while keys were SHA-512 cut to 32 bytes (format 3 entries), chosen because ``_sha512``
seemed loaded already; it was not NumPy but this machine's ``.pth`` files that loaded it (they
import tempfile, hence random, into every process).  Both modules cost the same load, and
BLAKE2b hashes the some 64 KB a warm contour hashes (the entries it reads, the constants a
kernel depends on) in half the time, with no Python wrapper to cut its digest.  Changing the
hash changes every key and checksum: entries and bundles made with another one are not found,
or are refused as an older format, never misread.
"""

try:                                    # every CPython builds it; hashlib's is the same module
    from _blake2 import blake2b as _blake2b
except ImportError:                     # pragma: no cover - a Python built without it
    from hashlib import blake2b as _blake2b

NAME = "blake2b-256"                    # what keys and checksums are, for messages and docs
SIZE = 32                               # bytes of a digest (64 hex digits)


def hasher(data=b""):
    """A hash object (``update``, ``digest``, ``hexdigest``, ``copy``) over ``data``: BLAKE2b,
    32 bytes."""
    return _blake2b(data, digest_size=SIZE)
