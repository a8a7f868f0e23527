"""A bundle whose index lines are malformed but whose checksum holds (a buggy or hostile writer):
one clear 'damaged' everywhere, never a traceback, and at most one warning per run."""

import hashlib
import io
import os
import struct

import pytest

import tack.aot
from tack.cache import bundle
from tack.kernels.contour import tack_warm
from tack.site import build

from .test_build import run_with_site_bundles

BAD_LINES = {
    "three fields": "2\t" + "a" * 64 + "\t0000000000000100",
    "letters for a number": "2\t" + "a" * 64 + "\txx\t0000000000000100",
    "unknown kind": "7\t" + "a" * 64 + "\t0000000000000100\t0000000000000010",
    "short key": "2\tabc\t0000000000000100\t0000000000000010",
    "huge number": "2\t" + "a" * 64 + "\t" + "9" * 300 + "\t1",
}


def rewrite_index(data: bytes, line: str) -> bytes:
    """``data`` with its index's first line replaced by ``line``, and the checksum made to hold."""
    head = struct.Struct("<8sIIII32s")
    magic, fmt, count, mlen, ilen, _ = head.unpack_from(data)
    meta = data[head.size:head.size + mlen]
    lines = data[head.size + mlen:head.size + mlen + ilen].decode().split("\n")
    index = "\n".join([line] + lines[1:]).encode()
    digest = hashlib.sha256(meta + index).digest()
    return head.pack(magic, fmt, count, mlen, len(index), digest) + meta + index + \
        data[head.size + mlen + ilen:]


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    arts = [tack.aot.compile(k, "cpu", a, grid=g) for k, a, g in tack_warm((8, 8, 8))]
    return tack.aot.save_bundle(arts, str(site))


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_malformed_index_line_is_damage(good_bundle, tmp_path, case):
    data = rewrite_index(open(good_bundle, "rb").read(), BAD_LINES[case])
    with pytest.raises(bundle.BundleError, match="damaged"):
        bundle.Bundle(data, "b")
    site = tmp_path / "site"
    site.mkdir()
    path = site / os.path.basename(good_bundle)
    path.write_bytes(data)
    status, rebuilt = io.StringIO(), io.StringIO()
    assert build.bundles_status(str(site), out=status) == 0
    assert f"{path.name}: UNUSABLE: " in status.getvalue() and "damaged" in status.getvalue()
    assert build.bundles_rebuild(str(site), out=rebuilt, err=rebuilt) == 1
    assert "cannot rebuild" in rebuilt.getvalue() and "Traceback" not in rebuilt.getvalue()
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    script = ("import json, warnings, numpy as np, tack.cache\n"
              "warnings.simplefilter('always')\n"
              "with warnings.catch_warnings(record=True) as w:\n"
              "    from tack.kernels.contour import contour\n"
              "    p = np.indices((8, 8, 8)).astype(np.float32)\n"
              "    v, f = contour(np.sqrt(((p - 3.5) ** 2).sum(axis=0)).astype(np.float32), 2.5)\n"
              "print(json.dumps({'ntri': len(f), 'warnings': [str(x.message) for x in w]}))\n")
    r = run_with_site_bundles(script, own, site)
    assert r["ntri"] > 0 and len(r["warnings"]) <= 1, r
