"""tack.digests.hasher: SHA-512 cut to 32 bytes (the one hash of keys and checksums), the same
digest as hashlib's, from the module NumPy has loaded already: no OpenSSL and no library of
Tack's own on a warm import."""

import hashlib
import os
import subprocess
import sys

import pytest

from tack import digests


@pytest.mark.parametrize("size", [0, 1, 1000, 1 << 20])
def test_same_digest_as_hashlib_sha512_cut_to_32_bytes(size):
    data = os.urandom(size)
    want = hashlib.sha512(data).digest()[:32]
    assert digests.hasher(data).digest() == want
    assert digests.hasher(data).hexdigest() == want.hex()
    h = digests.hasher()
    h.update(data[:size // 2])
    copy = h.copy()
    h.update(data[size // 2:])
    assert h.digest() == want and len(h.digest()) == digests.SIZE
    copy.update(data[size // 2:])
    assert copy.hexdigest() == want.hex()


def test_import_tack_loads_no_hash_library_numpy_has_not():
    code = ("import sys; before = set(sys.modules); import numpy; after_numpy = set(sys.modules); "
            "import tack, tack.digests; tack.digests.hasher(b'x').digest(); "
            "print(sorted(m for m in set(sys.modules) - after_numpy "
            "if m.startswith(('_hashlib', 'hashlib', '_blake2', '_sha', '_md5'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # and no OpenSSL at all, whoever would load it: hashlib loads libcrypto (about 2.5 ms)
    code = ("import sys, tack, tack.digests; tack.digests.hasher(b'x').digest(); "
            "print('_hashlib' in sys.modules, 'hashlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
