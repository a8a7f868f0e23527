"""A bundle in the user's own cache directory serves in write and read mode too (issue 22: after
``pack`` and ``clear`` a plain run compiled again), after the directory's per-kernel files."""

import pytest

from tack.cache import bundle, bundle_write

from .conftest import KMOD_LAUNCHES, check_results, compiled, entry_files, loaded, run_child, run_cli


def _pack_and_clear(cache):
    packed = run_cli(cache, "pack")
    assert packed.rc == 0, packed.stderr
    cleared = run_cli(cache, "clear")
    assert cleared.rc == 0, cleared.stderr
    assert not entry_files(cache)
    (path,) = cache.glob("bundle-*")
    return path


@pytest.mark.parametrize("mode", ["write", "read"])
def test_after_pack_and_clear_a_plain_run_loads_from_the_bundle(warm, mode):
    """pack, clear, run: every kernel loads from the bundle, with no warning; nothing is compiled."""
    cache, src = warm
    _pack_and_clear(cache)
    run = run_child(cache, src, KMOD_LAUNCHES, env={"TACK_CACHE": mode})
    assert run.rc == 0, run.stderr
    check_results(run)
    results = run.data["results"]
    assert all(loaded(r) and not compiled(r) for r in results), results
    assert run.warnings == []
    assert run.data["stats"]["hits"]["variant"] == len(KMOD_LAUNCHES)
    # and pack again: nothing new, the bundle kept as it is, and no failure (a `set -e` script
    # of the documented cycle stopped at "error: no compiled variants to pack", status 1)
    (path,) = cache.glob("bundle-*")
    before = path.read_bytes()
    again = run_cli(cache, "pack")
    assert again.rc == 0 and "nothing new to pack" in again.stdout, again.stdout + again.stderr
    assert f"keeps its {len(bundle.Bundle(before))} entries" in again.stdout, again.stdout
    assert path.read_bytes() == before
    # with no bundle either, there is nothing to pack: an error, as before
    path.unlink()
    nothing = run_cli(cache, "pack")
    assert nothing.rc == 1 and "no compiled variants to pack" in nothing.stderr, nothing.stderr
    assert "run the kernels once with this Tack (TACK_CACHE=write) first" in nothing.stderr


def test_packing_again_what_the_bundle_holds_leaves_it_as_it_is(warm):
    """pack, then pack again with the directory's entries all in the bundle already: nothing new,
    the same file left in place (it was written again, a new file, and said "packed"); a new
    entry in the directory then makes the next pack write it."""
    cache, src = warm
    packed = run_cli(cache, "pack")
    assert packed.rc == 0 and "packed " in packed.stdout, packed.stdout + packed.stderr
    (path,) = cache.glob("bundle-*")
    before = (path.read_bytes(), path.stat().st_ino, path.stat().st_mtime_ns)
    again = run_cli(cache, "pack")
    assert again.rc == 0, again.stderr
    assert again.stdout.strip() == (f"nothing new to pack: {path} keeps its "
                                    f"{len(bundle.Bundle(before[0]))} entries"), again.stdout
    assert (path.read_bytes(), path.stat().st_ino, path.stat().st_mtime_ns) == before
    # an entry the bundle lacks: packed again.  (The bundle made without one of them, then the
    # directory's files all there once more.)
    path.unlink()
    entry = entry_files(cache)[-1]
    aside = entry.read_bytes()
    entry.unlink()
    assert run_cli(cache, "pack").rc == 0
    entry.write_bytes(aside)
    fewer = path.stat().st_ino
    third = run_cli(cache, "pack")
    assert third.rc == 0 and third.stdout.startswith(f"packed {len(bundle.Bundle(before[0]))} "
                                                     "entries"), third.stdout + third.stderr
    assert path.stat().st_ino != fewer


def test_a_bundle_of_another_version_is_passed_over_quietly_in_write_mode(warm):
    """In write mode, a bundle of another Tack version (a checkout edited since it was packed) is
    not used and not warned about: the kernels compile and are stored as usual."""
    cache, src = warm
    path = _pack_and_clear(cache)
    b = bundle.Bundle(path.read_bytes())
    entries = [(kind, key, b.data[off:off + n]) for (kind, key), (off, n) in b.index.items()]
    path.write_bytes(bundle_write.pack(entries, dict(b.meta, tack="0.0.1")))
    run = run_child(cache, src, KMOD_LAUNCHES)
    assert run.rc == 0, run.stderr
    check_results(run)
    assert all(compiled(r) for r in run.data["results"])
    assert run.warnings == [] and entry_files(cache)


def test_the_directorys_own_files_come_first(warm):
    """With both, the per-kernel files serve (the bundle is not even opened)."""
    cache, src = warm
    packed = run_cli(cache, "pack")
    assert packed.rc == 0, packed.stderr
    run = run_child(cache, src, KMOD_LAUNCHES, env={"TACK_CACHE_LOG": "2"})
    assert run.rc == 0 and all(loaded(r) for r in run.data["results"]), run.stderr
    assert "cache bundle" not in run.stderr


def test_pack_over_a_bundle_it_cannot_read_says_it_kept_none_of_it(warm):
    """pack over a bundle whose head is damaged replaced it and said only "packed N entries",
    though the old file held entries: it says the bundle it replaced could not be read, and why."""
    cache, _ = warm
    assert run_cli(cache, "pack").rc == 0
    (path,) = cache.glob("bundle-*")
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF                        # a byte of the head its checksum covers
    path.write_bytes(bytes(data))
    again = run_cli(cache, "pack")
    assert again.rc == 0, again.stderr
    assert "note: the bundle it replaced could not be read (" in again.stdout, again.stdout
    assert "none of its entries were kept" in again.stdout
    plain = run_cli(cache, "pack")          # over a good bundle: no such note
    assert plain.rc == 0 and "could not be read" not in plain.stdout, plain.stdout
