"""A bundle whose index rows are malformed but whose checksums hold (a buggy or hostile writer):
the rows of that index block are refused (reported damaged, their kernels compile), never a
traceback, and at most one warning per run."""

import io
import os

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
    """``data`` with its index's first row replaced by ``line`` (padded or cut to a row's width),
    and the first block's checksum and the head's made to hold."""
    _, _, count, per, mlen, _ = bundle._HEAD.unpack_from(data)
    table = bundle._HEAD.size + mlen
    index = table + -(-count // per) * bundle._RECORD
    first = min(per, count) * bundle._STRIDE
    block = line.ljust(bundle._ROW)[:bundle._ROW].encode() + data[index + bundle._ROW:index + first]
    record = data[table:table + 66] + bundle.hasher(block).digest()
    body = data[bundle._HEAD.size:table] + record + data[table + bundle._RECORD:index]
    digest = bundle.hasher(data[:bundle._FIELDS] + body).digest()
    return data[:bundle._FIELDS] + digest + body + block + data[index + first:]


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    arts = [tack.aot.compile(k, "cpu", a, grid=g) for k, a, g in tack_warm((8, 8, 8))]
    return tack.aot.save_bundle(arts, str(site))


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_malformed_index_line_is_damage(good_bundle, tmp_path, case):
    data = rewrite_index(open(good_bundle, "rb").read(), BAD_LINES[case])
    b = bundle.Bundle(data, "b")
    block0 = min(b._per, len(b))
    with pytest.raises(bundle.DamagedEntry, match="index block 0 is malformed"):
        b._block(0)
    assert b.damaged_entries() == block0 and len(b.index) == len(b) - block0
    site = tmp_path / "site"
    site.mkdir()
    path = site / os.path.basename(good_bundle)
    path.write_bytes(data)
    status, rebuilt = io.StringIO(), io.StringIO()
    assert build.bundles_status(str(site), out=status) == 0
    assert path.name in status.getvalue() and "Traceback" not in status.getvalue()
    assert f"DAMAGED: {block0} of {len(b)} entries unusable" in status.getvalue()
    assert build.bundles_rebuild(str(site), out=rebuilt, err=rebuilt) == 1
    assert f"cannot rebuild: {block0} of {len(b)} entries are damaged" in rebuilt.getvalue()
    assert "Traceback" not in rebuilt.getvalue() and "current" not in rebuilt.getvalue()
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
