"""Damaged, partial and foreign entries are ignored, removed or replaced, and the kernel compiled."""

import os
import struct

import numpy as np
import pytest

import tack
import tack.cache
from tack.cache import entry, size, trust

from .conftest import (check_results, clone, compiled, decode_entry, entry_files, loaded, one_entry, run_child,
                       stored_many_in)

HEAD = entry.HEAD.size
LAUNCHES = [{"kernel": "k_main", "n": 5}, {"kernel": "k_other", "n": 5}]


def truncate_at(offset):
    def damage(path, other):
        data = path.read_bytes()
        path.write_bytes(data[:offset(len(data))])
    return damage


def flip_at(where):
    def damage(path, other):
        data = bytearray(path.read_bytes())
        meta_len, payload_len = entry.HEAD.unpack_from(data)[2:4]
        offset = where(len(data), meta_len, payload_len)
        data[offset] ^= 0x5A
        path.write_bytes(bytes(data))
    return damage


def another_entrys_bytes(path, other):
    path.write_bytes(other.read_bytes())


DAMAGE = {
    "truncated to 0": truncate_at(lambda n: 0),
    "truncated to 10": truncate_at(lambda n: 10),
    "truncated to the header": truncate_at(lambda n: HEAD),
    "truncated in the middle": truncate_at(lambda n: n // 2),
    "truncated by one byte": truncate_at(lambda n: n - 1),
    "extended by one byte": lambda path, other: path.write_bytes(path.read_bytes() + b"\0"),
    "byte flipped in the header magic": flip_at(lambda n, m, p: 3),
    "byte flipped in the header checksum": flip_at(lambda n, m, p: 40),
    "byte flipped in the header key": flip_at(lambda n, m, p: 100),
    "byte flipped in the metadata": flip_at(lambda n, m, p: HEAD + m // 2),
    "byte flipped in the payload": flip_at(lambda n, m, p: HEAD + m + p // 2),
    "another entry's bytes": another_entrys_bytes,
}


CASES = list(DAMAGE)
INTACT = "k19"          # launched too, undamaged: it must still load


def many_expected(run):
    return {r["kernel"]: (lambda j: lambda a: a * j + j)(int(r["kernel"][1:])) for r in run.results}


@pytest.fixture(scope="module")
def damaged(_stored_pool, tmp_path_factory):
    """One copy of the twenty-kernel cache with kernel k<j>'s variant damaged the j-th way, then one process launching them all.

    -> (run, {case: damaged path})
    """
    stored_many = stored_many_in(_stored_pool, tmp_path_factory)
    cache = clone(stored_many.cache, tmp_path_factory.mktemp("damaged") / "cache")
    other = one_entry(cache, "variants", INTACT)
    victims = {case: one_entry(cache, "variants", f"k{j:02d}") for j, case in enumerate(CASES)}
    for case in CASES:
        DAMAGE[case](victims[case], other)
        with pytest.raises(entry.DamagedEntry):
            decode_entry(victims[case])
    launches = [{"kernel": f"k{j:02d}", "n": 4} for j in range(len(CASES))] + [{"kernel": INTACT, "n": 4}]
    run = run_child(cache, stored_many.src, launches, module="kmany")
    return run, victims


def test_damaged_run_as_a_whole(damaged):
    """The process that met every damaged entry ran every kernel right, counted each damaged entry once, and warned about nothing."""
    run, victims = damaged
    check_results(run, many_expected(run))
    assert run.stats["damaged"] == len(CASES)
    assert run.stats["hits"] == {"lowered": len(CASES), "variant": 1}
    assert loaded(run.result(INTACT))
    assert run.warnings == []


@pytest.mark.parametrize("case", CASES)
def test_damaged_variant_is_ignored_and_replaced(case, damaged):
    """A damaged variant entry is ignored, the kernel compiled from its lowered entry with the right result, and a valid entry is in its place afterwards."""
    run, victims = damaged
    j = CASES.index(case)
    result = run.result(f"k{j:02d}")
    np.testing.assert_array_equal(result["out"], np.arange(4.0) * j + j)
    assert compiled(result) and "lower" not in result["timings"], result
    key, meta, _ = decode_entry(victims[case])
    assert key == victims[case].name.split(".")[0]
    assert meta["kernel"].endswith(f"k{j:02d}")


def test_damaged_lowered_entry_is_ignored_and_replaced(warm):
    """A damaged lowered entry under new argument types is ignored, the front end runs, and a valid entry replaces it."""
    cache, src = warm
    victim = one_entry(cache, "lowered", "k_main")
    truncate_at(lambda n: n // 2)(victim, None)
    run = run_child(cache, src, [{"kernel": "k_main", "n": 8, "dtype": "float32"}])
    check_results(run)
    assert "lower" in run.result("k_main")["timings"]
    assert run.stats["damaged"] == 1
    decode_entry(victim)


def test_leftover_temporary_file_is_ignored(warm):
    """A temporary file a dead writer left beside a missing entry is neither loaded nor counted; the kernel compiles and is stored."""
    cache, src = warm
    victim = one_entry(cache, "variants", "k_main")
    data = victim.read_bytes()
    victim.unlink()
    tmp = victim.with_name(victim.name + trust.TMP_MARK + "4242.abcdef")
    tmp.write_bytes(data[: len(data) // 2])
    whole_tmp = victim.with_name(victim.name + trust.TMP_MARK + "4343.fedcba")
    whole_tmp.write_bytes(data)
    run = run_child(cache, src, LAUNCHES)
    check_results(run)
    assert compiled(run.result("k_main"))
    assert run.stats["misses"]["variant"] == 1 and run.stats["damaged"] == 0
    decode_entry(victim)
    assert tmp.read_bytes() == data[: len(data) // 2]
    assert all(trust.TMP_MARK not in p for p, *_ in size.entries(str(cache)))
    assert victim in entry_files(cache) and os.path.exists(tmp)


def _sections(obj):
    """(header offset, sh_type, sh_offset) of each section of an ELF64 little-endian object."""
    shoff, = struct.unpack_from("<Q", obj, 40)
    shentsize, shnum = struct.unpack_from("<HH", obj, 58)
    out = []
    for i in range(shnum):
        _, sh_type, _, _, sh_offset = struct.unpack_from("<IIQQQ", obj, shoff + i * shentsize)
        out.append((shoff + i * shentsize, sh_type, sh_offset))
    return out


def _text_size_past_the_end(obj):
    header = next(h for h, t, _ in _sections(obj) if t == 1)          # SHT_PROGBITS
    struct.pack_into("<Q", obj, header + 32, 1 << 30)                  # sh_size


def _unknown_relocation_type(obj):
    offset = next(o for _, t, o in _sections(obj) if t == 4)          # SHT_RELA: first relocation
    info, = struct.unpack_from("<Q", obj, offset + 8)
    struct.pack_into("<Q", obj, offset + 8, (info & ~0xFFFFFFFF) | 0x7F)


def _foreign_machine_and_unknown_relocation(obj):
    struct.pack_into("<H", obj, 18, 63)                                # e_machine: not this host's
    _unknown_relocation_type(obj)


def _not_an_object(obj):
    obj[:] = b"not an object file" * 8


MALFORMED = {"not an object file": _not_an_object,
             "section size past the end": _text_size_past_the_end,
             "unknown relocation type": _unknown_relocation_type,
             "another machine's object with an unknown relocation type": _foreign_machine_and_unknown_relocation}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_entry_with_valid_checksum_but_malformed_code(case, warm):
    """A variant entry whose checksum holds but whose object code is malformed is discarded and the kernel compiled, in a process that exits normally."""
    cache, src = warm
    victim = one_entry(cache, "variants", "k_main")
    key, meta, payload = decode_entry(victim)
    obj = bytearray(payload)
    MALFORMED[case](obj)
    victim.write_bytes(entry.encode(entry.KIND_VARIANT, key, meta, bytes(obj)))
    run = run_child(cache, src, LAUNCHES)
    assert run.rc == 0, f"rc {run.rc}: {run.stderr[-2000:]}"
    check_results(run)
    assert compiled(run.result("k_main"))
    assert run.stats["damaged"] == 1
    # the hit taken back is taken back from where it was counted as served, too
    assert sum(run.stats["variants_from"].values()) == run.stats["hits"]["variant"]
    assert decode_entry(victim)[2] != bytes(obj)


@tack.kernel
def plus_one(x, y):
    i = tack.tid()
    y[i] = x[i] + 1.0


def test_entry_with_bad_site_rows_is_discarded_not_raised(tmp_path):
    """A variant entry whose checksum holds but whose metadata rows are malformed: the kernel compiles, no exception."""
    x = np.arange(4.0)
    y = np.zeros(4)
    tack.launch(plus_one, dim=4, args=(x, y))
    root = tack.cache.settings().directory
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".tvar")]
    key, meta, payload = entry.decode(open(path, "rb").read(), entry.KIND_VARIANT)
    meta["site"] = [["only", "two"]]
    with open(path, "wb") as f:
        f.write(entry.encode(entry.KIND_VARIANT, key, meta, payload))
    plus_one._variants.clear()
    y[:] = 0
    tack.launch(plus_one, dim=4, args=(x, y))
    assert y.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert tack.cache.stats()["damaged"] == 1


@pytest.mark.parametrize("what", ["truncated up", "zeros"])
def test_a_gigabyte_file_at_an_entrys_place_is_not_read_whole(warm, what):
    """A sparse 2 GiB file at a variant's place (an entry truncated up; zeros, as a disk image
    copied there) was read whole at the lookup: 2 GiB of memory and seconds, and on a node short
    of memory the job killed.  Its header is read first now: it is damaged (its header gives
    another length, or it has none), not read through, and the kernel compiles; the process
    never held the file (its peak memory stays far below it)."""
    cache, src = warm
    victim = one_entry(cache, "variants", "k_main")
    if what == "zeros":
        victim.write_bytes(b"")
    with open(victim, "r+b") as f:
        f.truncate(2 << 30)
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}], env={"TACK_CACHE_LOG": "1"},
                    after="import resource; extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss")
    check_results(run)
    assert run.stats["damaged"] == 1 and run.stats["compiled"] == 1, run.stats
    said = "where its header gives" if what == "truncated up" else "not a Tack cache entry (bad magic)"
    assert said in run.stderr, run.stderr
    assert run.data["extra"] < (1 << 20), run.data["extra"]           # peak KiB: < 1 GiB
    decode_entry(victim)                                                # replaced by the compile


def test_a_long_file_of_zeros_at_an_entrys_place_is_not_read_through_as_a_crash_leftover(warm):
    """The hourly size check asks of each file named like an entry whether a crash left it (all
    zeros): it read a 4 GiB sparse file of zeros through (24 s, 108 s for 20 GiB, in a user's
    job).  No entry is so long: such a file is not the cache's, and is neither read nor counted."""
    cache, _ = warm
    victim = one_entry(cache, "variants", "k_main")
    fan = victim.parent
    zeros = fan / (fan.name + "0" * 62 + ".tvar")
    with open(zeros, "wb") as f:
        f.truncate(4 << 30)
    small = fan / (fan.name + "1" * 62 + ".tvar")
    small.write_bytes(b"\0" * 1000)
    assert not size.is_crash_leftover(str(zeros)) and not size.is_own_file(str(zeros))
    assert size.is_crash_leftover(str(small))          # a crash's, of an entry's length: still one
