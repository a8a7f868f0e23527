"""The size limit: least recently used entries go first, the hourly claim and stamp, marking loaded entries used, bundles and foreign files."""

import os
import random
import time
from pathlib import Path

import numpy as np
import pytest

import tack.cache
from tack.cache import size, trust

from .conftest import clone, entry_files, import_file, one_entry, run_child, write_module

HOUR = 3600


def entry_paths(root):
    """The entry files (not temporaries) under ``root``."""
    return [p for p in entry_files(root) if trust.TMP_MARK not in p.name and p.suffix in (".tlk", ".tvar")]


def age_entries(root, seed=0, base=None):
    """Give every entry a distinct mtime, hours ago, in a shuffled order; -> {path: mtime}."""
    base = time.time() - 10 * HOUR if base is None else base
    paths = entry_paths(root)
    random.Random(seed).shuffle(paths)
    mtimes = {}
    for k, p in enumerate(paths):
        mtimes[p] = base + 60 * k
        os.utime(p, (mtimes[p], mtimes[p]))
    return mtimes


def total_bytes(root):
    return sum(s for _, s, *_ in size.entries(str(root)))


@pytest.fixture
def many(stored_many, tmp_path):
    """A private copy of the twenty-kernel cache, its stamp removed (no size check yet)."""
    cache = clone(stored_many.cache, tmp_path / "many")
    (cache / size.STAMP).unlink(missing_ok=True)
    return cache


def test_prune_deletes_least_recently_used_first(many):
    """Over the limit, prune deletes the oldest entries first, just until at most 90% of the limit is left."""
    mtimes = age_entries(many)
    sizes = {p: p.stat().st_size for p in mtimes}
    total = total_bytes(many)
    assert total == sum(sizes.values())
    limit = total // 2
    before, freed, count = size.prune(str(many), limit)
    assert before == total
    deleted = [p for p in mtimes if not p.exists()]
    kept = [p for p in mtimes if p.exists()]
    assert len(deleted) == count > 0 and kept
    assert max(mtimes[p] for p in deleted) < min(mtimes[p] for p in kept)
    assert freed == sum(sizes[p] for p in deleted)
    after = total_bytes(many)
    assert after == total - freed <= 0.9 * limit
    # ...and no further: keeping the newest deleted entry would have left more than 90%.
    assert after + sizes[max(deleted, key=mtimes.get)] > 0.9 * limit


def test_prune_under_limit_deletes_nothing(many):
    """Under the limit (or unlimited), prune deletes nothing and reports the total."""
    total = total_bytes(many)
    assert size.prune(str(many), total) == (total, 0, 0)
    assert size.prune(str(many), None) == (total, 0, 0)
    assert total_bytes(many) == total


def test_storing_process_prunes_to_configured_limit(many, tmp_path):
    """A process that stores an entry runs the hourly check with the configured max_size: old entries go, the newest stay, and the stamp is set."""
    mtimes = age_entries(many)
    total = total_bytes(many)
    limit = total // 2
    tack.cache.configure(directory=many, max_size=limit)
    src = write_module(tmp_path / "src", "import tack\n\n\n@tack.kernel\ndef fresh(a, out):\n"
                       "    i = tack.tid()\n    out[i] = a[i] + 0.25\n", "size_fresh_mod")
    mod = import_file(src / "size_fresh_mod.py", "size_fresh_mod")
    out = np.zeros(3)
    t0 = time.time()
    tack.launch(mod.fresh, 3, (np.arange(3.0), out))
    np.testing.assert_array_equal(out, np.arange(3.0) + 0.25)
    assert tack.cache.stats()["bytes_written"] > 0
    stamp = many / size.STAMP
    assert stamp.exists() and stamp.stat().st_mtime >= t0 - 1
    kept_old = [p for p in mtimes if p.exists()]
    deleted = [p for p in mtimes if not p.exists()]
    assert deleted and kept_old
    assert max(mtimes[p] for p in deleted) < min(mtimes[p] for p in kept_old)
    new = [p for p in entry_paths(many) if p not in mtimes]
    assert sorted(p.suffix for p in new) == [".tlk", ".tvar"]
    new_variant = [p for p in new if p.suffix == ".tvar"][0]
    # The check ran when the lowered entry was stored, before the variant was written.
    assert total_bytes(many) - new_variant.stat().st_size <= 0.9 * limit


def test_storing_process_prunes_to_environment_limit(many, tmp_path):
    """TACK_CACHE_SIZE sets the limit the storing process prunes to: the oldest entries go, down to 90% of it before the last store."""
    mtimes = age_entries(many)
    limit = total_bytes(many) // 3
    src = write_module(tmp_path / "src", "import tack\n\n\n@tack.kernel\ndef fresh(a, out):\n"
                       "    i = tack.tid()\n    out[i] = a[i] + 0.5\n", "kfresh")
    run = run_child(many, src, [{"kernel": "fresh", "n": 3}], module="kfresh",
                    env={"TACK_CACHE_SIZE": str(limit)})
    np.testing.assert_array_equal(run.result("fresh")["out"], np.arange(3.0) + 0.5)
    assert run.data["settings"]["max_size"] == limit
    deleted = [p for p in mtimes if not p.exists()]
    kept = [p for p in mtimes if p.exists()]
    assert deleted and max(mtimes[p] for p in deleted) < min((mtimes[p] for p in kept), default=float("inf"))
    (new_variant,) = [p for p in entry_paths(many) if p not in mtimes and p.suffix == ".tvar"]
    assert total_bytes(many) - new_variant.stat().st_size <= 0.9 * limit
    assert (many / size.STAMP).exists()


def test_fresh_stamp_skips_the_check(many):
    """Within an hour of the last check, maybe_prune returns None and deletes nothing, even far over the limit."""
    (many / size.STAMP).touch()
    total = total_bytes(many)
    assert size.maybe_prune(str(many), 1) is None
    assert total_bytes(many) == total
    os.utime(many / size.STAMP, (time.time() - 2 * HOUR,) * 2)
    result = size.maybe_prune(str(many), total // 2)
    assert result is not None and result[2] > 0
    assert total_bytes(many) <= 0.9 * (total // 2)
    assert time.time() - (many / size.STAMP).stat().st_mtime < 60


def test_held_claim_skips_the_check(many):
    """While another process holds the claim, maybe_prune returns None, deletes nothing and leaves the claim."""
    claim = many / size.CLAIM
    claim.touch()
    total = total_bytes(many)
    assert size.maybe_prune(str(many), 1) is None
    assert total_bytes(many) == total
    assert claim.exists()
    assert not (many / size.STAMP).exists()


def test_stale_claim_is_removed(many):
    """A claim older than ten minutes (its holder died) is removed, so the next check runs and prunes."""
    claim = many / size.CLAIM
    claim.touch()
    os.utime(claim, (time.time() - 11 * 60,) * 2)
    total = total_bytes(many)
    assert size.maybe_prune(str(many), total // 2) is None
    assert not claim.exists()
    result = size.maybe_prune(str(many), total // 2)
    assert result is not None and result[0] == total and result[2] > 0
    assert not claim.exists()


def test_check_removes_stale_temporaries_only(many):
    """The hourly check removes temporary files older than an hour and keeps younger ones (a writer may be using them)."""
    entry = entry_paths(many)[0]
    old_tmp = entry.with_name(entry.name + trust.TMP_MARK + "1.aaaa")
    young_tmp = entry.with_name(entry.name + trust.TMP_MARK + "2.bbbb")
    old_tmp.write_bytes(entry.read_bytes()[:100])       # writers that died part-way
    young_tmp.write_bytes(entry.read_bytes()[:100])
    os.utime(old_tmp, (time.time() - 2 * HOUR,) * 2)
    assert size.maybe_prune(str(many), None) is not None
    assert not old_tmp.exists() and young_tmp.exists()


@pytest.mark.parametrize("mode", ["write", "read"])
def test_loading_marks_old_entries_used(warm, mode):
    """Loading an entry last used over an hour ago bumps its mtime, in write and in read mode;
    one used half an hour ago is left alone."""
    cache, src = warm
    old = one_entry(cache, "variants", "k_main")
    recent = one_entry(cache, "variants", "k_other")
    now = time.time()
    os.utime(old, (now - 2 * HOUR,) * 2)
    os.utime(recent, (now - HOUR / 2,) * 2)
    recent_mtime = recent.stat().st_mtime_ns
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}, {"kernel": "k_other", "n": 5}],
                    env={"TACK_CACHE": mode})
    assert run.data["settings"]["mode"] == mode
    assert run.stats["hits"]["variant"] == 2 and run.stats["bytes_written"] == 0
    assert old.stat().st_mtime >= now - 60
    assert recent.stat().st_mtime_ns == recent_mtime


def test_warm_hit_marks_its_lowered_kernel_used_too(warm):
    """A warm process reads only variants; when it marks one used (hourly), it marks that kernel's
    lowered entry too, so pruning does not take the lowered kernels of the kernels in use first."""
    cache, src = warm
    now = time.time()
    for p in entry_paths(cache):
        os.utime(p, (now - 2 * HOUR,) * 2)
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}])
    assert run.stats["hits"] == {"lowered": 0, "variant": 1}
    assert one_entry(cache, "variants", "k_main").stat().st_mtime >= now - 60
    assert one_entry(cache, "lowered", "k_main").stat().st_mtime >= now - 60
    assert one_entry(cache, "lowered", "k_other").stat().st_mtime < now - HOUR    # not loaded: not marked


def test_touch_if_stale():
    """touch_if_stale bumps an mtime over an hour old to now and leaves a recent one."""
    import tempfile
    with tempfile.NamedTemporaryFile() as f:
        now = time.time()
        os.utime(f.name, (now - HOUR - 5,) * 2)
        assert size.touch_if_stale(f.name, now) is True
        assert abs(os.stat(f.name).st_mtime - now) < 1
        assert size.touch_if_stale(f.name, now + 10) is False
    assert size.touch_if_stale("/nonexistent/entry.tvar") is False


def test_bundles_and_foreign_files_are_neither_counted_nor_deleted(many):
    """prune counts and deletes only entries: bundles, foreign files and non-version directories stay, however old and big."""
    old = time.time() - 100 * HOUR
    version = next(d for d in many.iterdir() if d.is_dir())
    fan = next((version / "variants").iterdir())
    foreign = [many / "bundle-x86_64", many / "bundle-x86_64.tmp.1.ab", many / "notes.txt",
               fan / "README", version / "notes.txt", many / "backup" / "lowered" / "00" / ("0" * 64 + ".tlk")]
    for p in foreign:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"z" * 200_000)
        os.utime(p, (old, old))
    total = total_bytes(many)
    assert total < 200_000
    before, freed, count = size.prune(str(many), total // 2)
    assert before == total and count > 0
    assert all(p.exists() and p.stat().st_size == 200_000 for p in foreign)
    assert size.prune(str(many), 1)[0] < 200_000
    assert all(p.exists() for p in foreign)
    assert size.entries(str(many)) == []


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


def test_prune_leaves_no_empty_directories_and_no_emptied_old_version(many):
    """Pruning an old Tack's entries left its version directory, level and fan directories
    behind, empty, for good.  The directories prune empties go; an old version's emptied
    directory goes with its marker; this Tack's own version directory and marker stay, and a
    directory still holding a user's file stays with the file."""
    from tack.cache.keys import tack_version_id
    current = many / tack_version_id()
    old = many / "0.0.1"
    clone(current, old)
    assert size.is_version_dir(str(many), "0.0.1")
    for k, p in enumerate(p for p in entry_paths(many) if p.parts[-4] == "0.0.1"):    # the oldest
        os.utime(p, (time.time() - 100 * HOUR - k, time.time() - 100 * HOUR - k))
    stray = next(p.parent for p in entry_paths(many) if p.parts[-4] == current.name) / "notes.txt"
    stray.write_text("mine")
    size.prune(str(many), 1)
    assert not old.exists()
    assert size.is_marker(str(current / trust.VERSION_MARKER))
    assert stray.read_text() == "mine"
    left = sorted(str(d.relative_to(many)) for d in many.rglob("*") if d.is_dir())
    assert left == sorted({str(p.relative_to(many)) for p in (current, stray.parent.parent, stray.parent)})


def test_a_stamp_or_claim_dated_ahead_does_not_stop_the_checks(many):
    """A stamp dated a year ahead (a node whose clock ran ahead, on a shared cache) stopped every
    size check until that date, and a claim dated ahead blocked them as long: neither is
    believed; the check runs and stamps this clock's time."""
    total = total_bytes(many)
    ahead = time.time() + 365 * 24 * HOUR
    (many / size.CLAIM).touch()
    os.utime(many / size.CLAIM, (ahead, ahead))
    assert size.maybe_prune(str(many), total // 2) is None       # the claim is let go
    assert not (many / size.CLAIM).exists()
    (many / size.STAMP).touch()
    os.utime(many / size.STAMP, (ahead, ahead))
    result = size.maybe_prune(str(many), total // 2)
    assert result is not None and result[2] > 0
    assert total_bytes(many) <= 0.9 * (total // 2)
    assert abs(time.time() - (many / size.STAMP).stat().st_mtime) < 60
    assert size.maybe_prune(str(many), 1) is None                # then an hour's rest, as before


def test_entries_dated_ahead_go_first_and_are_marked_when_used(many):
    """An entry dated more than an hour ahead sorted as the newest and outlived every entry in use;
    it now counts as the oldest, and a use marks it with this clock's time."""
    mtimes = age_entries(many)
    ahead = time.time() + 365 * 24 * HOUR
    future = max(mtimes, key=mtimes.get)        # the newest of them, now dated a year ahead
    os.utime(future, (ahead, ahead))
    oldest = min(mtimes, key=mtimes.get)
    limit = total_bytes(many) - 1
    second = sorted(mtimes, key=mtimes.get)[-2]  # the newest after it: kept
    assert size.prune(str(many), limit)[2] >= 1
    assert not future.exists() and not oldest.exists() and second.exists()
    other = next(p for p in entry_paths(many))
    os.utime(other, (ahead, ahead))
    assert size.touch_if_stale(str(other)) is True
    assert abs(other.stat().st_mtime - time.time()) < 60


def test_older_formats_entries_are_pruned_and_foreign_look_alikes_do_not_count(many):
    """Entries an older Tack wrote (magic TACKENT1-3, the same header) were counted against the
    limit but never deleted (only this format's magic was the cache's own), so the hourly check
    deleted the entries in use instead, every hour, and ``clear --all`` left them.  Now they go
    first when oldest; a user's file named like an entry is neither counted nor deleted."""
    from tack.cache.keys import tack_version_id
    current = many / tack_version_id()
    mtimes = age_entries(many)
    old = many / "0.0.1"
    clone(current, old)
    month_ago = time.time() - 30 * 24 * HOUR
    olds = [p for p in entry_paths(many) if old in p.parents]
    assert len(olds) == len(mtimes)
    for p in olds:
        data = bytearray(p.read_bytes())
        data[:8] = b"TACKENT3"
        p.write_bytes(bytes(data))
        os.utime(p, (month_ago, month_ago))
    assert size.is_own_file(str(olds[0]))
    ours = sum(p.stat().st_size for p in mtimes)
    result = size.prune(str(many), int(ours / 0.9) + 100)
    assert result[2] == len(mtimes)                              # the old ones, all of them
    assert all(p.exists() for p in mtimes) and not old.exists()
    fan = next((current / "variants").iterdir())
    lookalike = fan / (fan.name + "1" * 62 + ".tvar")            # a user's copy, named like one
    lookalike.write_bytes(b"a user's data " * 20_000 + b"\0" * 20_000)    # (all zeros: a crash's, below)
    os.utime(lookalike, (month_ago, month_ago))
    result = size.prune(str(many), int(ours / 0.9) + 100)
    assert result[:3] == (ours, 0, 0)
    assert all(p.exists() for p in mtimes) and lookalike.stat().st_size == 300_000


def test_a_zero_filled_entry_a_crash_left_is_counted_and_goes_first(many):
    """A power loss after an entry's rename reached the disk and before its data did leaves a file
    of the entry's name whose bytes are all zero.  It was neither counted nor deleted (not an
    entry by its header) until its kernel ran again.  At an entry's own place in a version
    directory (its level, its key's fan) it is no user's data: it counts and goes first, however
    recent.  A file named like an entry that holds anything else, or zeros anywhere else, stays."""
    from tack.cache.keys import tack_version_id
    mtimes = age_entries(many)
    ours = total_bytes(many)
    current = many / tack_version_id()
    fan = next((current / "variants").iterdir())
    crashed = fan / (fan.name + "2" * 62 + ".tvar")
    crashed.write_bytes(b"\0" * 300_000)               # the newest file of all: LRU would keep it
    empty = next((current / "lowered").iterdir())
    emptied = empty / (empty.name + "3" * 62 + ".tlk")   # the length not even reached the disk
    emptied.write_bytes(b"")
    # the first leftover older than the second (still newer than every entry): taking it alone
    # brings the total under the limit, and the second was left (one run in a loaded CI, where
    # the two writes' times differed; mostly they were equal, and the walk took the empty first)
    os.utime(crashed, (time.time() - 10,) * 2)
    other = "cd" if fan.name != "cd" else "ef"
    kept = {
        fan / (other + "4" * 62 + ".tvar"): b"\0" * 1000,          # another key's fan
        fan / (fan.name + "5" * 62 + ".tlk"): b"\0" * 1000,        # a lowered kernel's suffix in variants
        fan / (fan.name + "6" * 62 + ".tvar"): b"\0" * 999 + b"x",  # not all zeros: a user's
        fan / ("not-a-key" + ".tvar"): b"\0" * 1000,
        many / "backup" / "variants" / "00" / ("00" + "7" * 62 + ".tvar"): b"\0" * 1000,  # no version dir
    }
    for p, data in kept.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (time.time() - 100 * HOUR,) * 2)
    assert size.is_own_file(str(crashed)) and size.is_own_file(str(emptied))
    assert not any(size.is_own_file(str(p)) for p in kept)

    limit = int(ours / 0.9) + 100                       # the real entries fit; the zeros do not
    result = size.prune(str(many), limit)
    assert result[:3] == (ours + 300_000, 300_000, 2) and not result.failed
    assert not crashed.exists() and not emptied.exists() and all(p.exists() for p in mtimes)
    assert all(p.read_bytes() == data for p, data in kept.items())

    # The least recently used then go, as before; the files that are not the cache's stay.
    result = size.prune(str(many), 1)
    assert result[:3] == (ours, ours, len(mtimes))
    assert {Path(e[0]) for e in size.entries(str(many))} <= set(kept)
    assert all(p.read_bytes() == data for p, data in kept.items())
