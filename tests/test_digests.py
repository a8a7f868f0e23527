"""tack.digests.sha256: sha256's digest whichever implementation serves it, and no OpenSSL on
a warm import."""

import hashlib
import os
import subprocess
import sys

import pytest

from tack import digests


@pytest.mark.parametrize("size", [0, 1, 1000, digests._LARGE - 1, digests._LARGE])
def test_same_digest_as_hashlib(size):
    data = os.urandom(size)
    assert digests.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    h = digests.sha256(more=size)
    h.update(data[:size // 2])
    h.update(data[size // 2:])
    assert h.digest() == hashlib.sha256(data).digest()


def test_builtin_used_for_small_data_when_openssl_is_not_loaded(monkeypatch):
    if digests._builtin is None:
        pytest.fail("this Python has no built-in sha256; tack.digests would load OpenSSL")
    monkeypatch.delitem(sys.modules, "_hashlib", raising=False)
    assert type(digests.sha256(b"x")) is type(digests._builtin(b""))
    assert type(digests.sha256(b"x", more=digests._LARGE)) is not type(digests._builtin(b""))


def test_import_tack_loads_no_openssl():
    code = "import sys, tack; print('_hashlib' in sys.modules, 'hashlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
