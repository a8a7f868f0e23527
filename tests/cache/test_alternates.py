"""Two copies of one kernel's text whose dependencies differ (two checkouts of a project), run in
turn with one cache: each is served its own entry (``tack.cache.alternates``)."""

import pytest

from .conftest import EXPECTED, KMOD, check_results, edit, entry_files, expect_main, run_child, run_cli, write_module
from .test_warm import NO_FRONT_END

LAUNCH = [{"kernel": "k_main", "n": 5}]

# (the edit in copy B, what its k_main gives)
COPIES = {
    "device function": (("return inner(x) + 1.0", "return inner(x) + 2.0"), lambda a: expect_main(a, plus=3.0)),
    "constant": (("SCALE = tack.constant(np.float64(3.0))", "SCALE = tack.constant(np.float64(4.0))"),
                 lambda a: expect_main(a, scale=4.0)),
}


@pytest.mark.parametrize("differs", sorted(COPIES))
def test_two_copies_whose_direct_dependency_differs_are_each_served(tmp_path, cache_dir, differs):
    """Copies A and B of one module: the same k_main, whose ``middle`` (or ``SCALE``) differs in B.
    Run in turn, each replaced the other's entry (one key: the kernel's text), and compiled at
    every run, always right and never served.  Now each compiles once, and is then served from
    the second run on, with nothing rejected; a new shape of B loads its lowered kernel."""
    (old, new), b_gives = COPIES[differs]
    a = write_module(tmp_path / "a", KMOD)
    b = write_module(tmp_path / "b", edit(KMOD, old, new))
    expected = {"a": {"k_main": expect_main}, "b": {"k_main": b_gives}}
    order = ["a", "b", "a", "b", "a", "b"]
    runs = [run_child(cache_dir, {"a": a, "b": b}[which], LAUNCH) for which in order]
    for which, run in zip(order, runs):
        assert run.rc == 0, run.stderr
        check_results(run, expected[which])
    assert [r.stats["compiled"] for r in runs] == [1, 1, 0, 0, 0, 0], [r.stats for r in runs]
    for run in runs[2:]:
        assert run.stats["hits"]["variant"] == 1 and run.stats["rejected"] == 0, run.stats
    # B's at the key, and each copy's kept aside under its alternate key once (B's by A's
    # third run: a later compile of A, A's helper edited, replaces the key's entry)
    assert len([p for p in entry_files(cache_dir) if p.parts[-3] == "variants"]) == 3
    # a new shape of B: its own lowered kernel, from its alternate key, and no front end
    shape = run_child(cache_dir, b, [{"kernel": "k_main", "n": 5, "dtype": "float32"}],
                      prelude=NO_FRONT_END)
    assert shape.rc == 0, shape.stderr
    check_results(shape, expected["b"])
    assert shape.stats["hits"]["lowered"] == 1 and shape.stats["compiled"] == 1, shape.stats
    # packed, the alternates go in the bundle too, and serve each copy in bundle mode
    assert run_cli(cache_dir, "pack").rc == 0
    for which in ("a", "b"):
        packed = run_child(cache_dir, {"a": a, "b": b}[which], LAUNCH, env={"TACK_CACHE": "bundle"})
        check_results(packed, expected[which])
        assert packed.stats["variants_from"] == {"cache bundle": 1}, packed.stats


def test_a_process_that_does_not_write_is_served_from_the_alternate_and_writes_nothing(tmp_path, cache_dir):
    """A and B stored (B owns the key, A's entry kept aside); then A in read mode: served from its
    alternate key, and nothing in the directory changed (no entry kept aside by a reader)."""
    (old, new), _ = COPIES["device function"]
    a = write_module(tmp_path / "a", KMOD)
    b = write_module(tmp_path / "b", edit(KMOD, old, new))
    for src in (a, b):
        assert run_child(cache_dir, src, LAUNCH).stats["compiled"] == 1
    before = {p: p.stat().st_mtime_ns for p in entry_files(cache_dir)}
    reader = run_child(cache_dir, a, LAUNCH, env={"TACK_CACHE": "read"})
    check_results(reader)
    assert reader.stats["compiled"] == 0 and reader.stats["hits"]["variant"] == 1, reader.stats
    after = {p: p.stat().st_mtime_ns for p in entry_files(cache_dir)}
    assert after == before


def test_a_variant_served_from_its_alternate_marks_its_own_lowered_kernel_used(tmp_path, cache_dir):
    """A and B stored, every entry last used two days ago; A's next run is served its variant from
    the alternate key, and marks used its own lowered kernel (kept aside under the lowered key's
    alternate), not only the key's, B's: the size limit would otherwise delete A's lowered
    kernel first, and A's next new shape would run the front end again."""
    import os
    import time
    (old, new), b_gives = COPIES["device function"]
    a = write_module(tmp_path / "a", KMOD)
    b = write_module(tmp_path / "b", edit(KMOD, old, new))
    for src in (a, b, a, b):
        run = run_child(cache_dir, src, LAUNCH)
        check_results(run, {"k_main": b_gives} if src == b else EXPECTED)
    lowered = [p for p in entry_files(cache_dir) if p.parts[-3] == "lowered"]
    assert len(lowered) == 2, lowered                    # B's at the key, A's kept aside
    then = time.time() - 2 * 86400
    for p in entry_files(cache_dir):
        os.utime(p, (then, then))
    served = run_child(cache_dir, a, LAUNCH)
    check_results(served)
    assert served.stats["hits"]["variant"] == 1 and served.stats["compiled"] == 0, served.stats
    assert all(p.stat().st_mtime > then + 86400 for p in lowered), \
        [(p.name, p.stat().st_mtime - then) for p in lowered]


def test_an_edited_helper_still_replaces_the_entry_and_a_deeper_change_has_no_alternate(tmp_path, cache_dir):
    """The edit loop: a helper edited in place compiles once and is then served from the key
    (the entry it replaced is kept aside, one read away if the edit is undone).  A change below a
    device function (``inner``, which ``middle`` calls: k_main's text names ``middle`` only) gives no
    alternate: rejected, compiled and stored at the key, as before."""
    (old, new), b_gives = COPIES["device function"]
    src = write_module(tmp_path / "p", KMOD)
    assert run_child(cache_dir, src, LAUNCH).stats["compiled"] == 1
    write_module(tmp_path / "p", edit(KMOD, old, new))
    edited = run_child(cache_dir, src, LAUNCH)
    check_results(edited, {"k_main": b_gives})
    assert edited.stats["compiled"] == 1
    again = run_child(cache_dir, src, LAUNCH)
    assert again.stats["compiled"] == 0 and again.stats["rejected"] == 0
    write_module(tmp_path / "p", KMOD)                          # undone: one read away
    undone = run_child(cache_dir, src, LAUNCH)
    check_results(undone)
    assert undone.stats["compiled"] == 0 and undone.stats["hits"]["variant"] == 1, undone.stats

    deeper = write_module(tmp_path / "q", edit(KMOD, "return x * 2.0 + OFFSET", "return x * 7.0 + OFFSET"))
    run = run_child(cache_dir, deeper, LAUNCH)
    check_results(run, {"k_main": lambda a: expect_main(a, mul=7.0)})
    assert run.stats["compiled"] == 1 and run.stats["rejected"] >= 1, run.stats


def test_an_alternate_made_before_a_deeper_edit_is_replaced(tmp_path, cache_dir):
    """A and B in turn; then A's ``inner`` (below ``middle``) is edited: A compiles again and owns
    the key, and B's next run keeps A's new entry aside, replacing the one of A's old ``inner``
    kept there (same direct dependencies, another record).  B then compiles (its ``middle`` edited
    again) and takes the key: A is still served, from its alternate, not compiled again."""
    (old, new), _ = COPIES["device function"]
    deeper = ("return x * 2.0 + OFFSET", "return x * 7.0 + OFFSET")
    a = write_module(tmp_path / "a", KMOD)
    b = write_module(tmp_path / "b", edit(KMOD, old, new))
    assert [run_child(cache_dir, src, LAUNCH).stats["compiled"] for src in (a, b)] == [1, 1]
    write_module(tmp_path / "a", edit(KMOD, *deeper))
    assert run_child(cache_dir, a, LAUNCH).stats["compiled"] == 1
    assert run_child(cache_dir, b, LAUNCH).stats["compiled"] == 0
    write_module(tmp_path / "b", edit(KMOD, old, "return inner(x) + 5.0"))
    assert run_child(cache_dir, b, LAUNCH).stats["compiled"] == 1
    run = run_child(cache_dir, a, LAUNCH)
    check_results(run, {"k_main": lambda x: expect_main(x, mul=7.0)})
    assert run.stats["compiled"] == 0 and run.stats["hits"]["variant"] == 1, run.stats
