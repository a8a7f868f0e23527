"""Bundle reads that cost what a process uses (tack/cache/bundle.py, format 2): the head, meta and
block table read and checked once; each index block read and checked when a lookup first needs
it, each entry when looked up; damage refused block by block and entry by entry; truncation,
replacement, fork, close; a format 1 bundle (an older Tack's) refused, saying so."""

import gc
import os
import random

import pytest

from tack.cache import bundle, bundle_write, entry

from .conftest import mpiexec, prime_and_pack, run_one

V, L = entry.KIND_VARIANT, entry.KIND_LOWERED


def format1_pack(entries, meta):
    """A bundle as Tack wrote them before index blocks (format 1: one checksum over meta and the
    whole index, rows sorted; tack/cache/bundle.py ``pack`` at 438dead)."""
    entries = sorted(entries, key=lambda e: f"{e[0]}\t{e[1]}".encode())
    meta_b = entry.encode_meta(dict(meta, index="sorted"))
    offset = bundle._HEAD.size + len(meta_b) + bundle._STRIDE * len(entries) - (1 if entries else 0)
    lines = []
    for kind, key, data in entries:
        lines.append(f"{kind}\t{key}\t{offset:016d}\t{len(data):016d}")
        offset += len(data)
    index_b = "\n".join(lines).encode()
    digest = bundle.hasher(meta_b + index_b).digest()
    head = bundle._HEAD.pack(bundle.MAGIC, 1, len(entries), len(meta_b), len(index_b), digest)
    return b"".join([head, meta_b, index_b] + [d for _, _, d in entries])


def synthetic(n, seed=0, size=200):
    """``n`` valid entries (alternately lowered and variant) under random keys."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind, key = (L, V)[i % 2], rng.randbytes(32).hex()
        out.append((kind, key, entry.encode(kind, key, {"kernel": f"synthetic_{i}"}, rng.randbytes(size))))
    return out


def layout(data):
    """-> {"count", "per" (rows per block), "meta", "table", "index" (where it starts), "end"
    (where the index ends)} of format 5 bundle bytes."""
    _, fmt, count, per, mlen, _ = bundle._HEAD.unpack_from(data)
    assert fmt == bundle.FORMAT == 5
    nblocks = -(-count // per)
    meta = bundle._HEAD.size
    table = meta + mlen
    index = table + nblocks * bundle._RECORD
    return {"count": count, "per": per, "nblocks": nblocks, "meta": meta, "table": table,
            "index": index, "end": index + count * bundle._STRIDE}


def header_bytes(data):
    """What opening a bundle reads: its head, meta and table."""
    return layout(data)["index"]


def position(data, kind, key):
    """-> (row number, block number) of (kind, key)'s row."""
    lay = layout(data)
    rows = data[lay["index"]:lay["end"]]
    at = rows.index(f"{kind}\t{key}\t".encode())
    assert at % bundle._STRIDE == 0
    return at // bundle._STRIDE, at // bundle._STRIDE // lay["per"]


def block_bytes(data, block):
    lay = layout(data)
    return min(lay["per"], lay["count"] - block * lay["per"]) * bundle._STRIDE


def block_keys(data, block):
    """{(kind, key)} listed in index block ``block``."""
    lay = layout(data)
    start = lay["index"] + block * lay["per"] * bundle._STRIDE
    rows = data[start:start + block_bytes(data, block)]
    return {(int(rows[a:a + 1]), rows[a + 2:a + 66].decode()) for a in range(0, len(rows), bundle._STRIDE)}


def write_private(path, data):
    path.write_bytes(data)
    os.chmod(path, 0o600)


def rewrite_rows(data, new_rows):
    """``data`` with index rows replaced ({row number: new row, same width}), each block's
    checksum and the head's made to hold (a buggy writer, not a flipped bit; the fences are
    the ones written for the rows before)."""
    lay = layout(data)
    rows = bytearray(data[lay["index"]:lay["end"]])
    for n, new in new_rows.items():
        assert len(new) == bundle._ROW
        rows[n * bundle._STRIDE:n * bundle._STRIDE + bundle._ROW] = new.encode()
    table = bytearray(data[lay["table"]:lay["index"]])
    size = lay["per"] * bundle._STRIDE
    for b in range(lay["nblocks"]):
        at = b * bundle._RECORD + 66
        table[at:at + 32] = bundle.hasher(bytes(rows[b * size:(b + 1) * size])).digest()
    fields = data[:bundle._FIELDS]
    digest = bundle.hasher(fields + data[lay["meta"]:lay["table"]] + bytes(table)).digest()
    return fields + digest + data[lay["meta"]:lay["table"]] + bytes(table) + bytes(rows) + data[lay["end"]:]


def rewrite_row(data, kind, key, new_row):
    """``data`` with the index row of (kind, key) replaced by ``new_row`` (``rewrite_rows``)."""
    return rewrite_rows(data, {position(data, kind, key)[0]: new_row})


@pytest.fixture(params=["default blocks", "blocks of 4 rows"])
def made(request, tmp_path):
    """A bundle of 41 entries on disk, in blocks of the size ``pack`` chooses (32 rows: two
    blocks) and of 4 rows (eleven)."""
    entries = synthetic(41)
    meta = {"tack": "t", "target_key": "k" * 64, "arch": "cpu:x"}
    data = bundle_write.pack(entries, meta, block_rows=None if request.param == "default blocks" else 4)
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    path = d / "b"
    write_private(path, data)
    return path, entries, data


# -- in one process -----------------------------------------------------------------------

def test_every_entry_found_reading_only_it(made):
    """Each lookup reads that entry's bytes alone, and its index block the first time a lookup
    needs that block; every entry is found, an absent key misses, from a file as from the same
    bytes in memory."""
    path, entries, data = made
    with bundle.read(str(path)) as b:
        assert b.bytes_read == header_bytes(data) and len(b) == len(entries)
        assert b.blocks_checked == 0
        seen = set()
        for kind, key, raw in entries:
            before = b.bytes_read
            block = position(data, kind, key)[1]
            meta, payload = b.get(kind, key)
            assert b.bytes_read - before == len(raw) + (0 if block in seen else block_bytes(data, block))
            seen.add(block)
            assert b.blocks_checked == len(seen)
            assert entry.decode(raw, kind, key)[1:] == (meta, payload)
            assert bundle.Bundle(data).get(kind, key) == (meta, payload)
        before = b.bytes_read
        assert b.get(V, "0" * 64) is None and b.get(L, entries[1][1]) is None   # wrong kind
        assert b.get(V, "short") is None and b.bytes_read == before
        assert b.blocks_checked == layout(data)["nblocks"]       # each once
    assert sorted(bundle.Bundle(data).index) == sorted((k, key) for k, key, _ in entries)


def test_a_view_of_memory_serves_until_it_is_released(made):
    """A bundle over a view of memory another owner may release (``load_bundle``'s node-shared
    window): every entry found as from bytes, its bytes handed out as bytes (the index's order
    needs them), and once ``_live()`` says the memory is gone, a lookup that would read it
    fails as a closed bundle's does (a BundleError, never a read of released memory), and a
    store counts it damaged and misses, so the kernel compiles."""
    _, entries, data = made
    live = [True]
    b = bundle.Bundle(memoryview(bytearray(data)), "<shared>", _live=lambda: live[0])
    assert len(b) == len(entries)
    kind, key, raw = entries[0]
    meta, payload = b.get(kind, key)
    assert entry.decode(raw, kind, key)[1:] == (meta, payload) and type(payload) is bytes
    live[0] = False
    later = entries[-1]
    with pytest.raises(bundle.BundleError, match="released"):
        b.entry(later[0], later[1])
    import warnings

    from tack.cache import new_stats
    store = bundle.BundleStore(new_stats(), warnings.warn, loaded=b, target_key="k" * 64)
    found, why = store.read(later[0], later[1], "variant")
    assert found is None and "released" in why and store.stats["damaged"] == 1


def test_lookup_hashes_only_its_block(made, monkeypatch):
    """Opening hashes the head's fields, meta and table, nothing of the index; a lookup hashes its
    one index block (once: a second lookup in it hashes no index) and its entry."""
    path, entries, data = made
    hashed = []
    real = bundle.hasher
    monkeypatch.setattr(bundle, "hasher", lambda d=b"": hashed.append(len(d)) or real(d))
    lay = layout(data)
    with bundle.read(str(path)) as b:
        assert hashed == [bundle._FIELDS + lay["index"] - lay["meta"]]
        kind, key, raw = entries[5]
        block = position(data, kind, key)[1]
        assert b.get(kind, key) is not None
        assert hashed[1:] == [block_bytes(data, block)] and b.blocks_checked == 1
        same = [e for e in entries if position(data, *e[:2])[1] == block and e[1] != key]
        other = next(e for e in entries if position(data, *e[:2])[1] != block)
        del hashed[:]
        if same:
            assert b.get(*same[0][:2]) is not None and hashed == [] and b.blocks_checked == 1
        assert b.get(*other[:2]) is not None and b.blocks_checked == 2
        assert hashed == [block_bytes(data, position(data, *other[:2])[1])]


def test_header_reads_only_the_header(made, monkeypatch):
    """bundle.header(): its fields, entry count and size, from the head, meta and table alone."""
    path, entries, data = made
    got = []
    real = bundle._pread1
    monkeypatch.setattr(bundle, "_pread1", lambda fd, n, off: got.append(real(fd, n, off)) or got[-1])
    head = bundle.header(str(path))
    assert head["entries"] == len(entries) and head["bytes"] == len(data) and head["arch"] == "cpu:x"
    assert sum(map(len, got)) == header_bytes(data) < layout(data)["end"]


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


def test_damaged_index_block_refuses_its_rows_only(made):
    """A byte flipped in one index block (any byte of it: a key, a number, a tab): the entries
    that block lists are refused (DamagedEntry naming the block), counted damaged; every entry of
    every other block is served, from the file and from memory."""
    path, entries, data = made
    lay = layout(data)
    block = position(data, *entries[9][:2])[1]
    gone = block_keys(data, block)
    start = lay["index"] + block * lay["per"] * bundle._STRIDE
    for at in (start, start + 70, start + block_bytes(data, block) - 1):
        bad = bytearray(data)
        bad[at] ^= 0x01
        write_private(path, bytes(bad))
        for b in (bundle.read(str(path)), bundle.Bundle(bytes(bad))):
            with pytest.raises(entry.DamagedEntry, match=f"index block {block} does not match"):
                b.entry(*entries[9][:2])
            for k, ky, raw in entries:
                got = b.get(k, ky)
                if (k, ky) in gone:
                    assert got is None
                else:
                    assert got == entry.decode(raw, k, ky)[1:]
            assert b.blocks_checked == lay["nblocks"]           # the damaged one checked once
            assert b.damaged_entries() == len(gone)
            assert set(b.index) == {(k, ky) for k, ky, _ in entries} - gone
            b.close()


def test_damaged_header_refuses_the_bundle(made):
    """A byte flipped anywhere in the head, meta or table (the block checksums and fences
    included): the bundle is refused with a BundleError saying it is damaged (or not a bundle,
    for the magic), from the file and from memory; never anything else raised."""
    path, entries, data = made
    for at in range(header_bytes(data)):
        bad = bytearray(data)
        bad[at] ^= 0x01
        with pytest.raises(bundle.BundleError, match="damaged|not a Tack bundle|format|short"):
            bundle.Bundle(bytes(bad))
    for at in (12, 20, bundle._HEAD.size + 3, layout(data)["table"] + 5, header_bytes(data) - 1):
        bad = bytearray(data)
        bad[at] ^= 0x01
        write_private(path, bytes(bad))
        with pytest.raises(bundle.BundleError, match="damaged"):
            bundle.read(str(path))


@pytest.mark.parametrize("fmt", [1, 2, 3, 4])
def test_older_format_bundle_refused_with_a_clear_message(tmp_path, fmt):
    """A bundle an older Tack wrote (format 1: one index checksum; 2: SHA-256 checksums; 3:
    BLAKE2b checksums; 4: SHA-512 checksums) is refused, saying so and to pack it again: by read, header and Bundle(bytes), and by the
    store, with one warning; never a crash."""
    from tack.cache.bundle import BundleStore
    entries = synthetic(6)
    if fmt == 1:
        data = format1_pack(entries, {"tack": "t", "target_key": "k" * 64})
    else:       # today's layout with that format in its head (its checksums would not hold anyway)
        data = bytearray(bundle_write.pack(entries, {"tack": "t", "target_key": "k" * 64}))
        data[8:12] = fmt.to_bytes(4, "little")
        data = bytes(data)
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    path = d / "b"
    write_private(path, data)
    for make in (lambda: bundle.read(str(path)), lambda: bundle.header(str(path)),
                 lambda: bundle.Bundle(data)):
        with pytest.raises(bundle.BundleError, match=f"bundle format {fmt} .*pack it again"):
            make()
    warned, stats = [], {"bytes_read": 0, "load_seconds": 0.0, "damaged": 0}
    store = BundleStore(stats, warned.append, str(path))
    for k, key, _ in entries:
        assert store.read(k, key, "variant") == (None, entry.MISSING)
    assert len(warned) == 1 and f"format {fmt}" in warned[0] and stats["damaged"] == 0


def _middle_row(data):
    """A row number p with p and p + 1 in one block, neither its first nor its last."""
    lay = layout(data)
    p = lay["per"] + 1 if lay["per"] + 3 <= lay["count"] else 1
    assert p // lay["per"] == (p + 2) // lay["per"]
    return p


@pytest.mark.parametrize("row", ["bad number", "listed twice", "tab in key"])
def test_bad_index_row_refused(made, row):
    """A row of the right width with a non-number, or a tab inside its key (a buggy writer, the
    checksums holding): that entry alone is refused, every other one served. A key listed twice
    (rows out of order): the rows of that block are refused, every other block's served."""
    path, entries, data = made
    b = bundle.Bundle(data)
    lay = layout(data)
    p = _middle_row(data)
    rows = data[lay["index"]:lay["end"]]
    (kind, key), (k2, key2) = [(int(rows[a:a + 1]), rows[a + 2:a + 66].decode())
                               for a in (p * bundle._STRIDE, (p + 1) * bundle._STRIDE)]
    off, n = b.index[(kind, key)]
    if row == "bad number":
        data = rewrite_rows(data, {p: f"{kind}\t{key}\t{off:016d}\t{n:015d}x"})
        gone = {(kind, key)}
    elif row == "tab in key":
        data = rewrite_rows(data, {p: f"{kind}\t{key[:30]}\t{key[31:]}\t{off:016d}\t{n:016d}"})
        gone = {(kind, key)}
    else:                                   # the next row names entries[p]'s key too
        off2, n2 = b.index[(k2, key2)]
        data = rewrite_rows(data, {p + 1: f"{kind}\t{key}\t{off2:016d}\t{n2:016d}"})
        gone = block_keys(b.data, p // lay["per"])         # as written, before the rewrite
    write_private(path, data)
    for b in (bundle.read(str(path)), bundle.Bundle(data)):
        for k, ky, raw in entries:
            got = b.get(k, ky)
            if (k, ky) in gone:
                assert got is None, ky
            else:
                assert got == entry.decode(raw, k, ky)[1:], ky
        assert b.damaged_entries() == len(gone)
        assert set(b.index) == {(k, ky) for k, ky, _ in entries} - gone
        b.close()


def test_truncated_anywhere_serves_what_survives_whole(made):
    """Cut at many offsets: before the index's end the bundle is refused (BundleError: no entry
    survives such a cut); past it, every entry that ends before the cut is served and the others
    refused; nothing else is ever raised."""
    path, entries, data = made
    places = bundle.Bundle(data).index
    lay = layout(data)
    end = lay["end"]
    cuts = sorted({0, 1, 10, bundle._HEAD.size - 1, bundle._HEAD.size, lay["table"], lay["index"] - 1,
                   lay["index"], lay["index"] + 1, end - 1, end, end + 1, len(data) - 1}
                  | {off + n for off, n in places.values()}
                  | {off + n // 2 for off, n in places.values()})
    for cut in cuts:
        write_private(path, data[:cut])
        for make in (lambda: bundle.read(str(path)), lambda: bundle.Bundle(data[:cut])):
            try:
                b = make()
            except bundle.BundleError as e:
                assert cut < end, (cut, e)
                continue
            assert cut >= end
            for kind, key, raw in entries:
                off, n = places[(kind, key)]
                assert (b.get(kind, key) is not None) == (off + n <= cut), (cut, key)
            assert b.damaged_entries() == sum(off + n > cut for off, n in places.values())


def test_cut_after_open_refuses_the_blocks_cut(made):
    """The file truncated while open (inside its index): a block not yet read comes back short
    and its rows are refused; the blocks read before still serve (entries that survive)."""
    path, entries, data = made
    lay = layout(data)
    assert lay["nblocks"] >= 2, "the fixture's bundles have two blocks or more"
    b = bundle.read(str(path))
    first = next(e for e in entries if position(data, *e[:2])[1] == 0)
    last = next(e for e in entries if position(data, *e[:2])[1] == lay["nblocks"] - 1)
    assert b.get(*first[:2]) is not None
    os.truncate(path, lay["end"] - 5)
    with pytest.raises(entry.DamagedEntry, match="cut short"):
        b.entry(*last[:2])
    assert b.get(*last[:2]) is None
    b.close()


def test_replaced_bundle_keeps_serving_the_file_opened(made, tmp_path):
    """The bundle replaced atomically (pack again) while open: lookups keep reading the old file,
    whole and consistent, and the new one is what a new read sees."""
    path, entries, data = made
    b = bundle.read(str(path))
    assert b.get(*entries[0][:2]) is not None
    others = synthetic(5, seed=99)
    new = tmp_path / "new"
    write_private(new, bundle_write.pack(others, {"tack": "t", "target_key": "k" * 64}))
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


# -- through the store, in fresh processes -------------------------------------------------

def grow(path, n):
    """Repack the bundle at ``path`` with ``n`` synthetic entries added. -> (bytes, header bytes,
    {kernel name: (variant entry length, its index block's number)})."""
    b = bundle.Bundle(path.read_bytes())
    real = [(k, key, b.data[off:off + ln]) for (k, key), (off, ln) in b.index.items()]
    data = bundle_write.pack(real + synthetic(n, seed=5, size=4000), b.meta)
    path.write_bytes(data)
    lengths = {}
    for k, key, raw in real:
        if k == V:
            lengths[entry.decode(raw, k, key)[1]["kernel"]] = \
                (len(raw), position(data, k, key)[1])
    return data, header_bytes(data), lengths


def test_bundle_mode_reads_the_index_and_the_entries_used(kernel_dir, cache):
    """TACK_CACHE=bundle with 400 other entries in the bundle: the process reads the header
    and table, the index blocks listing its two variants and those variants, no more (stats say
    so), and both kernels hit. (Before format 2, it read the whole index.)"""
    path = prime_and_pack(kernel_dir, cache)
    data, head, lengths = grow(path, 400)
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["stats"]["hits"]["variant"] == 2 and r["stats"]["hits"]["lowered"] == 0
    (a, block_a), (b, block_b) = lengths["k_a"], lengths["k_b"]
    blocks = sum(block_bytes(data, n) for n in {block_a, block_b})
    assert r["stats"]["bytes_read"] == head + blocks + a + b
    assert r["stats"]["bytes_read"] < head + layout(data)["end"] - layout(data)["index"]


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


def test_lookups_bisect_as_the_standard_library_does():
    """A lookup's two searches (the block by its fence, the row in its block) are ``bisect``'s
    without importing it (its C extension's load is 0.27 ms of a bundle-served process): the same
    answers on sorted keys with repeats, misses before, between and after."""
    import bisect
    rng = random.Random(7)
    for n in range(40):
        keys = sorted(rng.choice([b"1\ta", b"1\tb", b"2\tc", b"2\td", b"3\te"]) for _ in range(n))
        for needle in (b"", b"1\ta", b"1\taa", b"1\tb", b"2\tc", b"3\te", b"4"):
            assert bundle._bisect(keys, needle, right=True) == bisect.bisect_right(keys, needle)
            assert bundle._bisect(keys, needle, right=False) == bisect.bisect_left(keys, needle)
