"""Bundle reads that cost what a process uses (tack/cache/bundle.py): the header and index read
once, each entry read from the open file when looked up and checked then; damage refused entry
by entry; truncation, replacement, fork, close; bundles written by an older Tack."""

import gc
import os
import random

import pytest

from tack.cache import bundle, entry

from .conftest import mpiexec, prime_and_pack, run_one

V, L = entry.KIND_VARIANT, entry.KIND_LOWERED


def old_pack(entries, meta):
    """A bundle as Tack wrote them before rows were sorted: rows in the order given, no
    ``index`` header field (tack/cache/bundle.py ``pack`` at 72b89ef)."""
    meta_b = entry.encode_meta(meta)
    row = len(f"0\t{'0' * 64}\t{0:016d}\t{0:016d}")
    offset = bundle._HEAD.size + len(meta_b) + (row + 1) * len(entries) - (1 if entries else 0)
    lines = []
    for kind, key, data in entries:
        lines.append(f"{kind}\t{key}\t{offset:016d}\t{len(data):016d}")
        offset += len(data)
    index_b = "\n".join(lines).encode()
    digest = bundle.sha256(meta_b + index_b).digest()
    head = bundle._HEAD.pack(bundle.MAGIC, bundle.FORMAT, len(entries), len(meta_b), len(index_b), digest)
    return b"".join([head, meta_b, index_b] + [d for _, _, d in entries])


def synthetic(n, seed=0, size=200):
    """``n`` valid entries (alternately lowered and variant) under random keys."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind, key = (L, V)[i % 2], rng.randbytes(32).hex()
        out.append((kind, key, entry.encode(kind, key, {"kernel": f"synthetic_{i}"}, rng.randbytes(size))))
    return out


def header_bytes(data):
    _, _, _, mlen, ilen, _ = bundle._HEAD.unpack_from(data)
    return bundle._HEAD.size + mlen + ilen


def write_private(path, data):
    path.write_bytes(data)
    os.chmod(path, 0o600)


def rewrite_row(data, kind, key, new_row):
    """``data`` with the index row of (kind, key) replaced by ``new_row`` (same width), the
    header's checksum made to hold (a buggy writer, not a flipped bit)."""
    _, fmt, count, mlen, ilen, _ = bundle._HEAD.unpack_from(data)
    start = bundle._HEAD.size
    meta, rows = data[start:start + mlen], data[start + mlen:start + mlen + ilen]
    at = rows.index(f"{kind}\t{key}\t".encode())
    assert len(new_row) == bundle._ROW
    rows = rows[:at] + new_row.encode() + rows[at + bundle._ROW:]
    digest = bundle.sha256(meta + rows).digest()
    return bundle._HEAD.pack(bundle.MAGIC, fmt, count, mlen, ilen, digest) + meta + rows + \
        data[start + mlen + ilen:]


@pytest.fixture(params=["sorted", "old"])
def made(request, tmp_path):
    """A bundle of 41 entries on disk, as this Tack writes it and as an older one did."""
    entries = synthetic(41)
    meta = {"tack": "t", "target_key": "k" * 64, "arch": "cpu:x"}
    data = bundle.pack(entries, meta) if request.param == "sorted" else old_pack(entries, meta)
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    path = d / "b"
    write_private(path, data)
    return path, entries, data


# -- in one process -----------------------------------------------------------------------

def test_every_entry_found_reading_only_it(made):
    """Each lookup reads that entry's bytes alone; every entry is found, an absent key misses,
    from a file as from the same bytes in memory."""
    path, entries, data = made
    with bundle.read(str(path)) as b:
        assert b.bytes_read == header_bytes(data) and len(b) == len(entries)
        for kind, key, raw in entries:
            before = b.bytes_read
            meta, payload = b.get(kind, key)
            assert b.bytes_read - before == len(raw)
            assert entry.decode(raw, kind, key)[1:] == (meta, payload)
            assert bundle.Bundle(data).get(kind, key) == (meta, payload)
        before = b.bytes_read
        assert b.get(V, "0" * 64) is None and b.get(L, entries[1][1]) is None   # wrong kind
        assert b.get(V, "short") is None and b.bytes_read == before
    assert sorted(bundle.Bundle(data).index) == sorted((k, key) for k, key, _ in entries)


def test_header_reads_only_the_header(made, monkeypatch):
    """bundle.header(): its fields, entry count and size, from the header and index alone."""
    path, entries, data = made
    got = []
    real = bundle._pread1
    monkeypatch.setattr(bundle, "_pread1", lambda fd, n, off: got.append(real(fd, n, off)) or got[-1])
    head = bundle.header(str(path))
    assert head["entries"] == len(entries) and head["bytes"] == len(data) and head["arch"] == "cpu:x"
    assert sum(map(len, got)) == header_bytes(data)


def test_damaged_entry_refused_alone(made):
    """One entry's bytes flipped: that entry is refused (and counted damaged), all others served."""
    path, entries, data = made
    b = bundle.Bundle(data)
    kind, key, _ = entries[7]
    off, n = b.index[(kind, key)]
    bad = bytearray(data)
    bad[off + n - 3] ^= 0xFF
    write_private(path, bytes(bad))
    with bundle.read(str(path)) as b:
        with pytest.raises(entry.DamagedEntry, match="checksum"):
            b.entry(kind, key)
        assert b.get(kind, key) is None
        assert all(b.get(k, ky) is not None for k, ky, _ in entries if ky != key)
        assert b.damaged_entries() == 1


@pytest.mark.parametrize("row", ["bad number", "listed twice", "tab in key"])
def test_bad_index_row_refuses_that_entry_only(made, row):
    """A row of the right width with a non-number, a key listed twice, or a tab inside its key
    (a buggy writer, the checksum holding): that entry is refused, the bundle still serves
    every other one. (Before, the whole bundle was refused.)"""
    path, entries, data = made
    kind, key, _ = entries[10]
    b = bundle.Bundle(data)
    off, n = b.index[(kind, key)]
    if row == "bad number":
        new = f"{kind}\t{key}\t{off:016d}\t{n:015d}x"
        gone = {key}
    elif row == "tab in key":
        new = f"{kind}\t{key[:30]}\t{key[31:]}\t{off:016d}\t{n:016d}"
        gone = {key}
    else:                                   # the row after entries[10]'s names its key too
        rows = data[header_bytes(data) - b._rows.__len__():header_bytes(data)]
        at = rows.index(f"{kind}\t{key}\t".encode()) + bundle._STRIDE
        k2, key2 = int(rows[at:at + 1]), rows[at + 2:at + 66].decode()
        off2, n2 = b.index[(k2, key2)]
        new = f"{kind}\t{key}\t{off2:016d}\t{n2:016d}"
        data = rewrite_row(data, k2, key2, new)
        new, gone = None, {key, key2}
    if new is not None:
        data = rewrite_row(data, kind, key, new)
    write_private(path, data)
    # A key altered in a sorted index may also hide its neighbours from the bisection (they
    # then miss and compile: never another entry's code); an older Tack's index has no order.
    others_served = row != "tab in key" or b.meta.get("index") != bundle.SORTED
    for b in (bundle.read(str(path)), bundle.Bundle(data)):
        for k, ky, _ in entries:
            got = b.get(k, ky)
            if ky in gone:
                assert got is None, ky
            elif others_served:
                assert got is not None, ky
        assert b.damaged_entries() == len(gone)
        assert set(b.index) == {(k, ky) for k, ky, _ in entries if ky not in gone}


def test_truncated_anywhere_serves_what_survives_whole(made):
    """Cut at many offsets: inside the header or index the bundle is refused (BundleError);
    past it, every entry that ends before the cut is served and the others refused; nothing
    else is ever raised."""
    path, entries, data = made
    places = bundle.Bundle(data).index
    head = header_bytes(data)
    cuts = sorted({0, 1, 10, bundle._HEAD.size - 1, bundle._HEAD.size, head // 2, head - 1, head,
                   head + 1, len(data) - 1} | {off + n for off, n in places.values()}
                  | {off + n // 2 for off, n in places.values()})
    for cut in cuts:
        write_private(path, data[:cut])
        for make in (lambda: bundle.read(str(path)), lambda: bundle.Bundle(data[:cut])):
            try:
                b = make()
            except bundle.BundleError as e:
                assert cut < head, (cut, e)
                continue
            assert cut >= head
            for kind, key, raw in entries:
                off, n = places[(kind, key)]
                assert (b.get(kind, key) is not None) == (off + n <= cut), (cut, key)
            assert b.damaged_entries() == sum(off + n > cut for off, n in places.values())


def test_replaced_bundle_keeps_serving_the_file_opened(made, tmp_path):
    """The bundle replaced atomically (pack again) while open: lookups keep reading the old file,
    whole and consistent, and the new one is what a new read sees."""
    path, entries, data = made
    b = bundle.read(str(path))
    assert b.get(*entries[0][:2]) is not None
    others = synthetic(5, seed=99)
    new = tmp_path / "new"
    write_private(new, bundle.pack(others, {"tack": "t", "target_key": "k" * 64}))
    os.replace(new, path)
    assert all(b.get(k, key) is not None for k, key, _ in entries)
    assert all(b.get(k, key) is None for k, key, _ in others)
    with bundle.read(str(path)) as fresh:
        assert len(fresh) == 5 and fresh.get(*others[0][:2]) is not None
    b.close()


def test_lookups_after_fork_and_close(made):
    """A forked child reads entries through the inherited descriptor; close() closes it, and a
    closed bundle (or one collected) only misses."""
    path, entries, data = made
    b = bundle.read(str(path))
    fd = b._fd
    pid = os.fork()
    if pid == 0:                            # the child: every entry, then exit with the count
        n = sum(b.get(k, key) is not None for k, key, _ in entries)
        os._exit(0 if n == len(entries) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert b.get(*entries[3][:2]) is not None         # the parent's reads are unaffected
    b.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    assert b.get(*entries[3][:2]) is None
    b2 = bundle.read(str(path))
    fd2 = b2._fd
    del b2
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd2)


def test_index_of_another_width_is_parsed_whole():
    """An index whose rows are not the fixed width ``pack`` writes (10-digit numbers) is parsed
    whole, as before: lookups work; a line missing a field makes the bundle damaged."""
    entries = synthetic(6)
    meta_b = entry.encode_meta({"tack": "t"})
    width = len(f"1\t{'0' * 64}\t{0:010d}\t{0:010d}") + 1
    offset = bundle._HEAD.size + len(meta_b) + width * len(entries) - 1

    def make(rows):
        index_b = "\n".join(rows).encode()
        head = bundle._HEAD.pack(bundle.MAGIC, 1, len(entries), len(meta_b), len(index_b),
                                 bundle.sha256(meta_b + index_b).digest())
        return head + meta_b + index_b + b"".join(d for _, _, d in entries)

    rows = []
    for k, key, d in entries:
        rows.append(f"{k}\t{key}\t{offset:010d}\t{len(d):010d}")
        offset += len(d)
    b = bundle.Bundle(make(rows))
    assert all(b.get(k, key) is not None for k, key, _ in entries) and b.damaged_entries() == 0
    with pytest.raises(bundle.BundleError, match="damaged"):
        bundle.Bundle(make([rows[0].rsplit("\t", 1)[0]] + rows[1:]))


# -- through the store, in fresh processes -------------------------------------------------

def grow(path, n):
    """Repack the bundle at ``path`` with ``n`` synthetic entries added. -> (bytes, header bytes,
    {kernel name: variant entry length})."""
    b = bundle.Bundle(path.read_bytes())
    real = [(k, key, b.data[off:off + ln]) for (k, key), (off, ln) in b.index.items()]
    data = bundle.pack(real + synthetic(n, seed=5, size=4000), b.meta)
    path.write_bytes(data)
    lengths = {}
    for k, key, raw in real:
        if k == V:
            lengths[entry.decode(raw, k, key)[1]["kernel"]] = len(raw)
    return data, header_bytes(data), lengths


def test_bundle_mode_reads_the_index_and_the_entries_used(kernel_dir, cache):
    """TACK_CACHE=bundle with 400 other entries in the bundle: the process reads the header,
    the index and its two variants, no more (stats say so), and both kernels hit.
    (Before, it read the whole file.)"""
    path = prime_and_pack(kernel_dir, cache)
    data, head, lengths = grow(path, 400)
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["stats"]["hits"]["variant"] == 2 and r["stats"]["hits"]["lowered"] == 0
    assert r["stats"]["bytes_read"] == head + lengths["k_a"] + lengths["k_b"] < len(data) // 10


def test_bundle_mode_bad_row_serves_the_other_kernel(kernel_dir, cache):
    """One index row unreadable (the checksum holding): its kernel compiles, counted damaged;
    the other kernel still loads from the bundle. (Before, the whole bundle was refused.)"""
    path = prime_and_pack(kernel_dir, cache)
    data = path.read_bytes()
    b = bundle.Bundle(data)
    kind, key = next((k, key) for (k, key), (off, n) in sorted(b.index.items()) if k == V)
    off, n = b.index[(kind, key)]
    path.write_bytes(rewrite_row(data, kind, key, f"{kind}\t{key}\t{off:016d}\t{'x' * 16}"))
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["warnings"] == []
    assert r["stats"]["hits"]["variant"] == 1 and r["stats"]["misses"]["variant"] == 1
    assert r["stats"]["damaged"] == 1


def test_broadcast_under_mpiexec_2(kernel_dir, cache):
    """load_bundle(comm) under mpiexec -n 2: rank 0 reads the file once, whole (its stats count
    it), rank 1 reads nothing from disk; both ranks' kernels load."""
    path = prime_and_pack(kernel_dir, cache)
    data, _, _ = grow(path, 50)
    ranks = mpiexec(kernel_dir, cache, 2, flags=["--comm"])
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["ok"] and r["loaded"] == len(bundle.Bundle(data))
        assert r["stats"]["hits"]["variant"] == 2
    assert ranks[0]["stats"]["bytes_read"] == len(data)
    assert ranks[1]["stats"]["bytes_read"] == 0
