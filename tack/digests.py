"""The one hash of Tack's keys and checksums: BLAKE2b with a 32-byte digest, CPython's own.

Keys (a kernel's, a variant's, a dependency's fingerprint) and checksums (an entry's, a
bundle's head and index blocks) all come from ``hasher``.  BLAKE2b is a cryptographic hash,
as strong as SHA-256 at the same 256-bit size, and CPython builds it into ``_blake2``: no
OpenSSL to load (``hashlib`` loads libcrypto when imported, about 2.5 ms of a process start
here) and about 13 instructions a byte against 47 for CPython's own SHA-256, measured with
callgrind.  A warm first call hashes some 50 KB (the entries it reads, the constants a kernel
depends on), so the hash was a tenth of its instructions with SHA-256.  Changing the hash
changes every key and checksum: entries and bundles made with another one are not found,
or are refused as another format, never misread.
"""

from __future__ import annotations

try:                                    # every CPython builds it; hashlib's is the same module
    from _blake2 import blake2b as _blake2b
except ImportError:                     # pragma: no cover - a Python built without it
    from hashlib import blake2b as _blake2b

NAME = "blake2b-256"                    # what keys and checksums are, for messages and docs
SIZE = 32                               # bytes of a digest (64 hex digits)


def hasher(data=b""):
    """A hash object (``update``, ``digest``, ``hexdigest``) over ``data``: BLAKE2b, 32 bytes."""
    return _blake2b(data, digest_size=SIZE)
