"""tack.digests.hasher: BLAKE2b with a 32-byte digest (the one hash of keys and checksums), the
same digest as hashlib's, from CPython's own ``_blake2``: one small extension module, no OpenSSL."""

import hashlib
import os
import subprocess
import sys

import pytest

from tack import digests


@pytest.mark.parametrize("size", [0, 1, 1000, 1 << 20])
def test_same_digest_as_hashlibs_blake2b_256(size):
    data = os.urandom(size)
    want = hashlib.blake2b(data, digest_size=32).digest()
    assert digests.hasher(data).digest() == want
    assert digests.hasher(data).hexdigest() == want.hex()
    h = digests.hasher()
    h.update(data[:size // 2])
    copy = h.copy()
    h.update(data[size // 2:])
    assert h.digest() == want and len(h.digest()) == digests.SIZE
    copy.update(data[size // 2:])
    assert copy.hexdigest() == want.hex()


def test_import_tack_loads_one_hash_module_and_no_openssl():
    """A warm import loads ``_blake2`` and no other hash module; never hashlib, which loads
    OpenSSL's libcrypto (about 2.5 ms).  Without the site module: a .pth file that imports
    hash modules at start (tempfile -> random -> _sha512) would hide what Tack loads."""
    code = ("import sys; import numpy; after_numpy = set(sys.modules); "
            "import tack, tack.digests; tack.digests.hasher(b'x').digest(); "
            "print(sorted(m for m in set(sys.modules) - after_numpy "
            "if m.startswith(('_hashlib', 'hashlib', '_blake2', '_sha', '_md5'))))")
    import site
    path = os.pathsep.join([os.path.dirname(os.path.dirname(digests.__file__)),
                            *[d for d in site.getsitepackages() if os.path.isdir(d)]])
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=path))
    assert out.stdout.strip() == "['_blake2']"
    code = ("import sys, tack, tack.digests; tack.digests.hasher(b'x').digest(); "
            "print('_hashlib' in sys.modules, 'hashlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=path))
    assert out.stdout.split() == ["False", "False"]
