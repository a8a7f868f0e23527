"""Fixes from review: the size check deletes only the cache's own temporaries; a foreign entry never crashes a launch."""

import os
import time

import numpy as np

import tack
import tack.cache
from tack.cache import size, store


@tack.kernel
def plus_one(x, y):
    i = tack.tid()
    y[i] = x[i] + 1.0


def test_stale_temporaries_of_others_are_left_alone(tmp_path):
    """Only ``<entry>.tmp.<pid>.<hex>`` files in the cache's own directories go; a user's *.tmp.* file stays."""
    root = tmp_path / "c"
    fan = root / "0.1.0" / "variants" / "ab"
    fan.mkdir(parents=True)
    ours = fan / (("ab" + "0" * 62) + ".tvar.tmp.123.0a1b2c3d4e5f")
    theirs = root / "myproject" / "results.tmp.csv"
    theirs.parent.mkdir()
    for p in (ours, theirs):
        p.write_bytes(b"TACKE")             # a writer died five bytes into an entry
        old = time.time() - 10 * 3600
        os.utime(p, (old, old))
    assert size.remove_stale_temporaries(str(root)) == 1
    assert not ours.exists() and theirs.exists()


def test_entry_with_bad_site_rows_is_discarded_not_raised(tmp_path):
    """A variant entry whose checksum holds but whose metadata rows are malformed: the kernel compiles, no exception."""
    x = np.arange(4.0)
    y = np.zeros(4)
    tack.launch(plus_one, dim=4, args=(x, y))
    root = tack.cache.settings().directory
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".tvar")]
    key, meta, payload = store.decode(open(path, "rb").read(), store.KIND_VARIANT)
    meta["site"] = [["only", "two"]]
    with open(path, "wb") as f:
        f.write(store.encode(store.KIND_VARIANT, key, meta, payload))
    plus_one._variants.clear()
    y[:] = 0
    tack.launch(plus_one, dim=4, args=(x, y))
    assert y.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert tack.cache.stats()["damaged"] == 1
