"""A launch whose grid runs past an array the kernel indexes by tack.tid() at every point is refused
before anything runs (issue 14: without debug mode such a launch wrote out of bounds and could
crash the process)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tack
from tack.compiler import lower
from tack.backends.variant import decode_tidx as decode, encode_tidx as encode
from tack.gridcheck import tid_indexed

from .util import marked_line

FILE = __file__
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@tack.kernel
def k_copy(src, dst):
    i = tack.tid()
    dst[i] = src[i] * 2.0  # ACCESS


@tack.kernel
def k_guarded(src, dst):
    i = tack.tid()
    if i < src.shape[0]:
        dst[i] = src[i]


@tack.kernel
def k_early_return(src, dst):
    i = tack.tid()
    if i >= src.shape[0]:
        return
    dst[i] = src[i]


@tack.kernel
def k_transpose(a, b):
    i, j = tack.tid()
    b[i, j] = a[j, i]  # ACCESS


@tack.kernel
def k_whole_tid(a, b):
    t = tack.tid()
    b[t] = a[t[1], t[0]]


@tack.kernel
def k_conditional_parts(a, b, c, out, flag):
    i = tack.tid()
    x = a[0] if flag else b[i]
    y = flag and c[i] > 0.0
    out[i] = x + y


@tack.kernel
def k_rebound(a, out):
    i = tack.tid()
    i = i // 2
    out[0] = a[i]


@tack.kernel
def k_atomic(hist, counts):
    i = tack.tid()
    tack.atomic_add(counts, i, hist[0])


@tack.kernel
def k_constants(a, p, out):
    i = tack.tid()
    out[i] = a[2] + a[-1] + p[i, 1]  # CONST


@tack.kernel
def k_guarded_constant(a, out):
    i = tack.tid()
    if i == 0:
        out[0] = a[5]
    out[i] = out[i] + 1.0


COLUMN = tack.constant(2)
LAST = tack.constant(np.int64(-2))


@tack.kernel
def k_named_constants(p, out):
    i = tack.tid()
    out[i] = p[i, COLUMN] + p[LAST, 0]  # NAMED


@tack.kernel
def k_huge_constant(a, b, out):
    i = tack.tid()
    out[i] = a[i]
    if i == 0:
        b[0] = 1.0
    b[100000000000] = 1.0 if i < 0 else b[0]


@tack.kernel
def k_third_from_the_end(a, out):
    i = tack.tid()
    out[i] = a[-3]


@tack.kernel
def k_in_loop(a, out, n):
    i = tack.tid()
    for k in range(n):
        out[i] = a[i]



TABLE = tack.constant(np.array([10.0, 20.0, 30.0]))
GRID2 = tack.constant(np.arange(6.0).reshape(2, 3))


@tack.kernel
def k_reads_a_constant(out):
    i = tack.tid()
    out[i] = TABLE[i]  # TABLE


@tack.kernel
def k_reads_a_constant_guarded(out):
    i = tack.tid()
    if i < TABLE.shape[0]:
        out[i] = TABLE[i]


@tack.kernel
def k_transposes_a_constant(out):
    i, j = tack.tid()
    out[i, j] = GRID2[j, i] + TABLE[i]  # GRID2

class TestWhatIsChecked:
    """``tid_indexed``: which (parameter, axis, grid dimension) a kernel indexes at every point."""

    def found(self, kern, grid, templates=None):
        """(parameter, axis, grid dimension) of each check; (parameter, axis, -1, index) of one
        at a constant index."""
        return [c[:3] + c[4:] for c in tid_indexed(lower(kern, templates or {}), grid)]

    def test_direct_index(self):
        assert self.found(k_copy, 1) == [(0, 0, 0), (1, 0, 0)]
        off = tid_indexed(lower(k_copy), 1)[0][3]
        lineno = marked_line(k_copy, "# ACCESS")[0]
        assert lower(k_copy).kernel.source.first_line + off == lineno

    def test_guarded_or_after_a_return_is_not(self):
        assert self.found(k_guarded, 1) == []
        assert self.found(k_early_return, 1) == []
        assert self.found(k_in_loop, 1) == []

    def test_two_dimensional_axes_follow_the_indices(self):
        assert self.found(k_transpose, 2) == [(0, 0, 1), (0, 1, 0), (1, 0, 0), (1, 1, 1)]
        assert self.found(k_whole_tid, 2) == [(0, 0, 1), (0, 1, 0), (1, 0, 0), (1, 1, 1)]

    def test_untaken_sides_and_rebound_indices_are_not(self):
        """Only the condition of ``x if c else y`` and the first operand of ``and``/``or`` run at
        every point; an index variable assigned again is not the thread index."""
        assert self.found(k_conditional_parts, 1) == [(3, 0, 0)]
        assert self.found(k_rebound, 1) == [(1, 0, -1, 0)]          # out[0], at every point

    def test_atomic_index(self):
        assert self.found(k_atomic, 1) == [(0, 0, -1, 0), (1, 0, 0)]

    def test_a_literal_index_too_long_for_the_metadata_is_left_to_debug_mode(self):
        """``b[100000000000]`` is not a check (its text would not fit the entry's field, and a
        list with one such item checks nothing): the thread index's checks stay."""
        found = tid_indexed(lower(k_huge_constant), 1)
        assert [c[:3] + c[4:] for c in found] == [(0, 0, 0), (2, 0, 0)]
        assert decode(encode(found)) == found

    def test_constant_indices_of_every_point(self):
        """``a[2]``, ``a[-1]`` and ``p[i, 1]`` at every point: constant-index checks beside the
        thread index's; a constant index under an ``if`` is not one."""
        assert self.found(k_constants, 1) == [(0, 0, -1, -1), (0, 0, -1, 2), (1, 0, 0), (1, 1, -1, 1),
                                              (2, 0, 0)]
        assert self.found(k_guarded_constant, 1) == [(1, 0, 0)]

    def test_tack_constant_indices_of_every_point(self):
        """``p[i, COLUMN]`` and ``p[LAST, 0]`` with integer ``tack.constant``s are checked as
        literals are."""
        assert self.found(k_named_constants, 1) == [(0, 0, -1, -2), (0, 0, 0), (0, 1, -1, 0),
                                                    (0, 1, -1, 2), (1, 0, 0)]

    def test_tack_constant_arrays_indexed_by_the_thread_index(self):
        """``TABLE[i]`` at every point: the grid's limit is TABLE's extent, known now, with the
        name the kernel reads it by; ``GRID2[j, i]`` limits the second grid dimension by its
        first axis and the first by its second; under an ``if`` it limits nothing."""
        assert self.found(k_reads_a_constant, 1) == [(-1, 0, 0, 3, "TABLE"), (0, 0, 0)]
        assert self.found(k_reads_a_constant_guarded, 1) == []
        assert self.found(k_transposes_a_constant, 2) == [
            (-1, 0, 0, 3, "TABLE"), (-1, 0, 1, 2, "GRID2"), (-1, 1, 0, 3, "GRID2"),
            (0, 0, 0), (0, 1, 1)]

    def test_metadata_text_round_trips_and_rejects_damage(self):
        checks = [(-1, 0, 1, 2, 5, "tables.GRID"), (-1, 1, 0, -1, 3, "TABLE"), (0, 0, 0, 3),
                  (1, 0, -1, 2, -4), (2, 1, 1, 7), (2, 1, -1, 7, 9)]
        assert decode(encode(checks)) == checks
        assert decode("") == [] and decode(None) == []
        for bad in ("0.0.0", "x.0.0.1", "0.9.0.1", "0.0.5.1", "-1.0.0.1", "0.0.-1.1", "0.0.0.1.2",
                    "0.0.-1.1.x", "0.0.-1.1.2.3", "-1.0.0.1.3", "-1.0.0.1.3.", "-1.0.3.1.3.T",
                    "-1.9.0.1.3.T", "-1.0.0.1.-3.T", "-1.0.x.1.3.T", "0.0.0.1.T"):
            assert decode(bad) == [], bad


def test_grid_past_a_read_array_is_refused_before_running():
    """Reading past ``src``: IndexError naming the kernel, the array, its extent, the grid and the
    access's line; nothing ran (``dst`` untouched)."""
    src, dst = np.ones(100), np.zeros(200)
    with pytest.raises(IndexError) as ei:
        tack.launch(k_copy, dim=200, args=(src, dst))
    msg = str(ei.value)
    lineno = marked_line(k_copy, "# ACCESS")[0]
    assert "k_copy" in msg and "'src'" in msg and "100" in msg and "(200,)" in msg, msg
    assert f"{FILE}:{lineno}" in msg and "TACK_DEBUG" in msg
    np.testing.assert_array_equal(dst, 0.0)


def test_grid_within_every_array_runs():
    src, dst = np.arange(100.0), np.zeros(100)
    tack.launch(k_copy, dim=100, args=(src, dst))
    np.testing.assert_array_equal(dst, 2 * src)
    tack.launch(k_copy, dim=50, args=(src, np.zeros(50)))      # smaller grids: fine


def test_guarded_kernels_take_larger_grids():
    """Accesses under an ``if``, or after a return some points take, do not limit the grid."""
    src = np.arange(10.0)
    for kern in (k_guarded, k_early_return):
        dst = np.zeros(20)
        tack.launch(kern, dim=20, args=(src, dst))
        np.testing.assert_array_equal(dst, np.r_[src, np.zeros(10)])


def test_two_dimensional_grid_names_the_axis():
    a = np.arange(12.0).reshape(4, 3)
    b = np.zeros((3, 4))
    tack.launch(k_transpose, dim=(3, 4), args=(a, b))
    np.testing.assert_array_equal(b, a.T)
    with pytest.raises(IndexError) as ei:
        tack.launch(k_transpose, dim=(3, 5), args=(a, np.zeros((3, 5))))
    msg = str(ei.value)
    assert "'a'" in msg and "axis 0" in msg and "tack.tid()[1]" in msg and "(3, 5)" in msg, msg


def test_an_array_too_short_for_a_constant_index_is_refused_before_running():
    """``p[i, 1]`` of every point with a one-column ``p``, or ``a[2]`` and ``a[-1]`` of a two-element
    ``a``, is refused: an IndexError naming the kernel, the array, the index, the axis, the extent
    and the access's line; nothing ran.  With arrays that have those elements it runs right."""
    a, p, out = np.array([10.0, 20.0, 30.0]), np.arange(8.0).reshape(4, 2), np.zeros(4)
    tack.launch(k_constants, dim=4, args=(a, p, out))
    np.testing.assert_array_equal(out, 30.0 + 30.0 + p[:, 1])
    lineno = marked_line(k_constants, "# CONST")[0]
    for bad_a, bad_p, name, index, axis, extent in ((a, p[:, :1], "p", 1, 1, 1),
                                                     (a[:2], p, "a", 2, 0, 2)):
        out = np.zeros(4)
        with pytest.raises(IndexError) as ei:
            tack.launch(k_constants, dim=4, args=(bad_a, bad_p, out))
        msg = str(ei.value)
        assert f"index {index} is out of bounds for '{name}'" in msg, msg
        assert f"axis {axis}" in msg and f"{extent} elements" in msg and "k_constants" in msg, msg
        assert f"{FILE}:{lineno}" in msg and "nothing was run" in msg, msg
        np.testing.assert_array_equal(out, 0.0)
    with pytest.raises(IndexError, match="index -1 is out of bounds for 'a'"):
        tack.launch(k_constants, dim=4, args=(a[:0], p, np.zeros(4)))
    # a[-3] needs 3 elements exactly: 3 run, 2 are refused.
    out = np.zeros(2)
    tack.launch(k_third_from_the_end, dim=2, args=(np.array([7.0, 8.0, 9.0]), out))
    np.testing.assert_array_equal(out, [7.0, 7.0])
    with pytest.raises(IndexError, match="index -3 is out of bounds for 'a'.* 2 elements"):
        tack.launch(k_third_from_the_end, dim=2, args=(np.array([8.0, 9.0]), out))
    # Under an if, a constant index limits nothing: the point that would reach it does not run.
    out = np.zeros(4)
    tack.launch(k_guarded_constant, dim=4, args=(np.arange(6.0), out))
    np.testing.assert_array_equal(out, [6.0, 1.0, 1.0, 1.0])


def test_an_array_too_short_for_a_tack_constant_index_is_refused():
    """``p[i, COLUMN]`` (COLUMN = tack.constant(2)) with a two-column ``p`` is refused, naming the
    index and the line; with three columns, and two rows for ``p[LAST, 0]``, it runs."""
    p = np.arange(12.0).reshape(4, 3)
    out = np.zeros(4)
    tack.launch(k_named_constants, dim=4, args=(p, out))
    np.testing.assert_array_equal(out, p[:, 2] + p[-2, 0])
    lineno = marked_line(k_named_constants, "# NAMED")[0]
    with pytest.raises(IndexError) as ei:
        tack.launch(k_named_constants, dim=4, args=(p[:, :2], np.zeros(4)))
    msg = str(ei.value)
    assert "index 2 is out of bounds for 'p'" in msg and "axis 1" in msg and f"{FILE}:{lineno}" in msg, msg



def test_grid_past_a_tack_constant_array_is_refused_before_running():
    """``out[i] = TABLE[i]`` on a grid larger than the 3-element constant read past its data,
    silently: refused as an array argument's is, naming the kernel, the constant, its extent,
    the grid and the line; nothing ran.  A grid within it runs, and a guarded read takes any
    grid."""
    out = np.zeros(3)
    tack.launch(k_reads_a_constant, dim=3, args=(out,))
    np.testing.assert_array_equal(out, [10.0, 20.0, 30.0])
    out = np.zeros(5)
    with pytest.raises(IndexError) as ei:
        tack.launch(k_reads_a_constant, dim=5, args=(out,))
    msg = str(ei.value)
    lineno = marked_line(k_reads_a_constant, "# TABLE")[0]
    assert "kernel 'k_reads_a_constant': the grid (5,) runs past the constant 'TABLE'" in msg, msg
    assert "3 elements along that axis, the grid 5" in msg and f"{FILE}:{lineno}" in msg, msg
    assert "nothing was run" in msg, msg
    np.testing.assert_array_equal(out, 0.0)
    tack.launch(k_reads_a_constant_guarded, dim=5, args=(out,))
    np.testing.assert_array_equal(out, [10.0, 20.0, 30.0, 0.0, 0.0])
    # GRID2[j, i] of a 2 x 3 constant: the grid's second dimension is limited to 2.
    out = np.zeros((3, 2))
    tack.launch(k_transposes_a_constant, dim=(3, 2), args=(out,))
    np.testing.assert_array_equal(out, GRID2.value.T + TABLE.value[:, None])
    with pytest.raises(IndexError) as ei:
        tack.launch(k_transposes_a_constant, dim=(3, 3), args=(np.zeros((3, 3)),))
    msg = str(ei.value)
    lineno = marked_line(k_transposes_a_constant, "# GRID2")[0]
    assert "runs past the constant 'GRID2'" in msg and "axis 0 by tack.tid()[1]" in msg, msg
    assert f"{FILE}:{lineno}" in msg, msg

@tack.kernel
def k_constant_then_a_scalar(out, s):
    i = tack.tid()
    out[i] = TABLE[i] * s  # SCALED


@tack.kernel
def k_constant_row(out):
    i = tack.tid()
    out[i] = GRID2[0, i]  # ROW


@tack.kernel
def k_no_parameters():
    i = tack.tid()
    x = TABLE[i]


@pytest.mark.parametrize("kernel, args, extent, grid", [
    (k_constant_then_a_scalar, lambda n: (np.zeros(n), 2.0), 3, 5),
    (k_constant_row, lambda n: (np.zeros(n),), 3, 8),
    (k_no_parameters, lambda n: (), 3, 4)])
def test_the_constant_check_holds_whatever_the_kernel_s_last_parameter_is(kernel, args, extent, grid):
    """A constant's grid check does not depend on the kernel's parameters: it was dropped where
    the last one was a scalar, or an array with fewer axes than the constant's axis (a grid of
    10**8 past a 3-element constant then crashed the process), and a kernel without parameters
    did not compile (a bare IndexError), because the variant's check list asked the type of the
    parameter at the constant's index, -1.  A grid within the constant runs."""
    tack.launch(kernel, dim=extent, args=args(extent))
    with pytest.raises(IndexError) as ei:
        tack.launch(kernel, dim=grid, args=args(grid))
    msg = str(ei.value)
    assert f"the grid ({grid},) runs past the constant" in msg and "nothing was run" in msg, msg


def test_a_constant_s_check_with_a_scalar_last_gives_the_right_values():
    """The variant with the check still computes each point (the check runs before it)."""
    out = np.zeros(3)
    tack.launch(k_constant_then_a_scalar, dim=3, args=(out, 2.0))
    np.testing.assert_array_equal(out, [20.0, 40.0, 60.0])
    out = np.zeros(3)
    tack.launch(k_constant_row, dim=3, args=(out,))
    np.testing.assert_array_equal(out, GRID2.value[0])


def test_a_huge_literal_index_keeps_the_grid_check():
    """A kernel that also indexes at a literal too long for the entry's field still has its grid
    refused past an array it indexes by the thread index (it lost every check, and crashed)."""
    with pytest.raises(IndexError, match="runs past 'a'"):
        tack.launch(k_huge_constant, dim=10, args=(np.ones(5), np.zeros(1), np.zeros(10)))


def test_empty_grid_checks_nothing():
    """A grid of no points runs nothing and is not checked, a literal index's check neither (as
    a Python loop of no iterations evaluates none of its indices)."""
    tack.launch(k_copy, dim=0, args=(np.ones(0), np.zeros(0)))
    narrow = np.arange(12.0).reshape(4, 3)[:, :2]         # no column 2: refused on any points
    tack.launch(k_named_constants, dim=0, args=(narrow, np.zeros(0)))
    with pytest.raises(IndexError, match="index 2 is out of bounds for 'p'"):
        tack.launch(k_named_constants, dim=1, args=(narrow, np.zeros(1)))


def test_debug_mode_reports_the_index_instead():
    """Debug mode keeps its own checks: the in-bounds points run and the error names the index
    (one thread: points 4 and 5 are both out, and a worker might meet 5 first)."""
    tack.config.debug = True
    tack.config.num_threads = 1
    src, dst = np.ones(4), np.zeros(6)
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 0 of 'src'"):
        tack.launch(k_copy, dim=6, args=(src, dst))
    np.testing.assert_array_equal(dst, [2, 2, 2, 2, 0, 0])


SCRIPT = textwrap.dedent("""
    import json, numpy as np, tack, tack.cache

    @tack.kernel
    def scale(x, y, a):
        i = tack.tid()
        y[i] = a * x[i]

    x = np.ones(10_000_000)
    y = np.zeros(10)
    try:
        tack.launch(scale, dim=x.size, args=(x, y, 2.0))
        outcome = "ran"
    except IndexError as e:
        outcome = str(e)
    print(json.dumps({"outcome": outcome, "y": y.tolist(), "stats": tack.cache.stats()}))
""")


def _cold_then_warm(tmp_path, name, source):
    """Run ``source`` (which prints one JSON line) in two fresh processes sharing a new cache
    directory: the first compiles, the second can load from the cache. -> their two reports."""
    script = tmp_path / name
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(PYTHONPATH=ROOT, TACK_CACHE_DIR=str(tmp_path / "cache"))
    for _ in range(2):
        p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        yield json.loads(p.stdout.strip().splitlines()[-1])


def test_grid_past_a_written_array_is_refused_cold_and_warm(tmp_path):
    """Writing 10 million points into a 10-element array (a crash without the check) is refused in
    a fresh process that compiles the kernel and in one that loads it from the cache."""
    for hits, r in enumerate(_cold_then_warm(tmp_path, "scale.py", SCRIPT)):
        assert r["stats"]["hits"]["variant"] == hits
        assert "'y'" in r["outcome"] and "10 elements" in r["outcome"], r["outcome"]
        assert r["y"] == [0.0] * 10


CONSTANT_SCRIPT = textwrap.dedent("""
    import json, numpy as np, tack, tack.cache

    @tack.kernel
    def weigh(x, w, y):
        i = tack.tid()
        y[i] = x[i] * w[3]

    x, w, y = np.ones(1000), np.ones(2), np.zeros(1000)
    try:
        tack.launch(weigh, dim=x.size, args=(x, w, y))
        outcome = "ran"
    except IndexError as e:
        outcome = str(e)
    print(json.dumps({"outcome": outcome, "stats": tack.cache.stats()}))
""")


def test_a_constant_index_past_an_array_is_refused_cold_and_warm(tmp_path):
    """``w[3]`` at every point with a two-element ``w`` (a read past it without the check) is
    refused in a fresh process that compiles the kernel and in one that loads it from the cache:
    the check travels in the variant's entry."""
    for hits, r in enumerate(_cold_then_warm(tmp_path, "weigh.py", CONSTANT_SCRIPT)):
        assert r["stats"]["hits"]["variant"] == hits
        assert "index 3 is out of bounds for 'w'" in r["outcome"] and "2 elements" in r["outcome"], r


TABLE_SCRIPT = textwrap.dedent("""
    import json, numpy as np, tack, tack.cache

    TABLE = tack.constant(np.array([1.0, 2.0, 3.0]))

    @tack.kernel
    def lookup(out):
        i = tack.tid()
        out[i] = TABLE[i]

    out = np.zeros(1000)
    try:
        tack.launch(lookup, dim=out.size, args=(out,))
        outcome = "ran"
    except IndexError as e:
        outcome = str(e)
    print(json.dumps({"outcome": outcome, "out": float(out.sum()), "stats": tack.cache.stats()}))
""")


def test_grid_past_a_tack_constant_is_refused_cold_and_warm(tmp_path):
    """``TABLE[i]`` of a 3-element constant on a grid of 1000 is refused in a fresh process that
    compiles the kernel and in one that loads it from the cache: the constant's extent travels
    in the variant's entry."""
    for hits, r in enumerate(_cold_then_warm(tmp_path, "lookup.py", TABLE_SCRIPT)):
        assert r["stats"]["hits"]["variant"] == hits
        assert "runs past the constant 'TABLE'" in r["outcome"], r
        assert "3 elements along that axis, the grid 1000" in r["outcome"], r
        assert r["out"] == 0.0
