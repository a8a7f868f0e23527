"""tack.digests.hasher: BLAKE2b with a 32-byte digest (the one hash of keys and checksums), the
same digest as hashlib's, and no OpenSSL on a warm import."""

import hashlib
import os
import subprocess
import sys

import pytest

from tack import digests


@pytest.mark.parametrize("size", [0, 1, 1000, 1 << 20])
def test_same_digest_as_hashlib_blake2b(size):
    data = os.urandom(size)
    want = hashlib.blake2b(data, digest_size=32)
    assert digests.hasher(data).hexdigest() == want.hexdigest()
    h = digests.hasher()
    h.update(data[:size // 2])
    h.update(data[size // 2:])
    assert h.digest() == want.digest() and len(h.digest()) == digests.SIZE


def test_import_tack_loads_no_openssl():
    code = "import sys, tack; print('_hashlib' in sys.modules, 'hashlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
