"""The CPU thread pool (``cpu_runtime._run_grid``): results on every grid size and thread count,
the thread rule, the workers really working, errors, concurrent launches, fork, exit, and the
first parallel launch of a fresh process importing neither concurrent.futures nor logging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import tack
from tack.backends import cpu_runtime

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def quiet_pool(monkeypatch):
    """Each test starts from the overhead a quiet machine's launches measure: the estimate the
    rule backs off from is the median of the last parallel launches' (module state), and an
    earlier test's real launches (4 threads on 2 cores) or made-up ones left theirs in it."""
    monkeypatch.setattr(cpu_runtime, "_overheads", [20e-6] * cpu_runtime.OVERHEAD_SAMPLES)
    monkeypatch.setattr(cpu_runtime, "_overhead", 20e-6)
    monkeypatch.setattr(cpu_runtime, "_held_back", 0)


@tack.kernel
def k_mark1(out):
    i = tack.tid()
    out[i] = out[i] + i + 1


@tack.kernel
def k_mark2(out):
    i, j = tack.tid()
    out[i, j] = out[i, j] + i * out.shape[1] + j + 1


@tack.kernel
def k_mark3(out):
    i, j, k = tack.tid()
    out[i, j, k] = out[i, j, k] + (i * out.shape[1] + j) * out.shape[2] + k + 1


@tack.kernel
def k_shift(a, s):
    i = tack.tid()
    a[i + s] = 1.0


MARK = {1: k_mark1, 2: k_mark2, 3: k_mark3}


@pytest.fixture
def every_grid_parallel(monkeypatch):
    """The rule's minimum work per thread set to nothing: every grid with a first extent of 2 or
    more runs on min(threads, first extent) threads."""
    monkeypatch.setattr(cpu_runtime, "PER_THREAD_S", 1e-15)
    monkeypatch.setattr(cpu_runtime, "OVERHEAD_FACTOR", 0.0)


def _launch_marked(shape):
    """Launch the marking kernel over ``shape``; every point must be written exactly once."""
    out = np.zeros(shape, np.int64)
    before = cpu_runtime.pool_stats()["parallel_launches"]
    tack.launch(MARK[len(shape)], dim=shape if len(shape) > 1 else shape[0], args=(out,))
    np.testing.assert_array_equal(out, np.arange(1, out.size + 1).reshape(shape))
    stats = cpu_runtime.pool_stats()
    return stats["last_threads"], stats["parallel_launches"] - before


SHAPES = [(1,), (2,), (3,), (5,), (8,), (9,), (100,), (16383,), (16384,), (16385,), (1_000_003,),
          (1, 30000), (2, 7), (3, 5000), (257, 129), (4, 1), (1, 1, 5), (2, 3, 4000), (3, 64, 64),
          (17, 5, 3)]


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_grid_right_on_every_thread_count(every_grid_parallel, shape, threads):
    """Every grid, 1-D to 3-D, one point to a million, first extent below the thread count
    included, writes every point exactly once on 1, 2 and 4 threads, on the thread count the
    rule gives (here min(threads, first extent); serial below 2)."""
    tack.config.num_threads = threads
    used, parallel = _launch_marked(shape)
    want = min(threads, shape[0])
    assert used == (want if want >= 2 else 1)
    assert parallel == (1 if want >= 2 else 0)


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("shape", [(1000,), (40, 50)], ids=["1d", "2d"])
def test_thread_rule_around_each_threshold(monkeypatch, shape, threads):
    """With a variant's cost per point known, the launch gets min(threads, first extent,
    estimate // PER_THREAD_S) threads: checked one point either side of every step, results
    right at each."""
    tack.config.num_threads = threads
    monkeypatch.setattr(cpu_runtime, "OVERHEAD_FACTOR", 0.0)
    kernel = MARK[len(shape)]
    points = int(np.prod(shape))
    _launch_marked(shape)                               # compiles the variant
    (variant,) = [v for v in kernel._variants.values() if getattr(v, "fn", None) is not None]
    for k in range(1, threads + 2):
        for per_thread in (points * 1.0 / k * 1.0001, points * 1.0 / k * 0.9999):
            monkeypatch.setattr(cpu_runtime, "PER_THREAD_S", per_thread * 1e-9)
            variant.cost = 1e-9                         # the estimate: points * 1 ns
            variant.serial_points = variant.quiet_points = 0    # and no fast path learnt from it
            want = min(threads, shape[0], int(points * 1e-9 / (per_thread * 1e-9)))
            used, _ = _launch_marked(shape)
            assert used == (want if want >= 2 else 1), (k, per_thread)


def test_busy_machine_backs_off_and_probes(monkeypatch):
    """Parallel launches that measured a large overhead (a busy machine: the last three lagged
    1 s) raise each thread's minimum work, so mid-size grids run serially; every
    PROBE_EVERY-th launch held back so goes parallel again, and its quick overhead is one of
    three: the median, the estimate, stays (two quick probes bring it down: the test below)."""
    tack.config.num_threads = 2
    monkeypatch.setattr(cpu_runtime, "PER_THREAD_S", 1e-9)
    monkeypatch.setattr(cpu_runtime, "_overheads", [1.0] * cpu_runtime.OVERHEAD_SAMPLES)
    monkeypatch.setattr(cpu_runtime, "_overhead", 1.0)          # as if launches lagged 1 s
    _launch_marked((1000,))
    (variant,) = [v for v in k_mark1._variants.values() if getattr(v, "fn", None) is not None]
    monkeypatch.setattr(cpu_runtime, "_held_back", 0)
    used = []
    for _ in range(cpu_runtime.PROBE_EVERY):
        variant.cost, variant.serial_points, variant.quiet_points = 1e-9, 0, 0
        used.append(_launch_marked((1000,))[0])
    assert used.count(2) == 1 and used[-1] == 2 and used.count(1) == cpu_runtime.PROBE_EVERY - 1
    assert cpu_runtime._overhead == 1.0         # one quick probe of three: still a busy machine


def test_one_slow_parallel_launch_does_not_hold_the_next_ones_back(monkeypatch):
    """The overhead the rule backs off from is the median of the last three parallel launches'
    (``_note_overhead``): one launch whose worker was preempted (a 10 s lag here) leaves the next
    launches parallel, two in three hold mid-size grids back, and two quick probes bring them
    back.  (With the moving average before, one such lag held them back for thousands of
    launches, every probe taking off only a quarter of it.)"""
    tack.config.num_threads = 2
    monkeypatch.setattr(cpu_runtime, "PER_THREAD_S", 1e-9)
    monkeypatch.setattr(cpu_runtime, "_overheads", [20e-6] * cpu_runtime.OVERHEAD_SAMPLES)
    monkeypatch.setattr(cpu_runtime, "_overhead", 20e-6)
    monkeypatch.setattr(cpu_runtime, "_held_back", 0)
    _launch_marked((1000,))
    (variant,) = [v for v in k_mark1._variants.values() if getattr(v, "fn", None) is not None]

    def threads_used():
        # 1,000 points taken at 2 ms each: 2 s of work, which a 10 s overhead holds back and
        # any real launch's overhead (under 0.5 s) does not
        variant.cost, variant.serial_points, variant.quiet_points = 2e-3, 0, 0
        return _launch_marked((1000,))[0]

    cpu_runtime._overhead = cpu_runtime._note_overhead(10.0)       # one preempted launch
    assert cpu_runtime._overhead < 0.5
    assert threads_used() == 2
    cpu_runtime._note_overhead(10.0)
    cpu_runtime._overhead = cpu_runtime._note_overhead(10.0)       # a busy machine
    assert cpu_runtime._overhead == 10.0
    cpu_runtime._held_back = 0
    noted = []                          # the overheads parallel launches measure from now on
    note = cpu_runtime._note_overhead
    monkeypatch.setattr(cpu_runtime, "_note_overhead", lambda t: noted.append(t) or note(t))
    used = [threads_used() for _ in range(2 * cpu_runtime.PROBE_EVERY)]
    every = cpu_runtime.PROBE_EVERY                                 # held back but two probes
    assert [k for k, u in enumerate(used) if u == 2] == [every - 1, 2 * every - 1], used
    # A probe measures its overhead where the calling thread ran a chunk itself (nearly always;
    # a worker woken at once may take them all): two quick ones bring the threads back.
    while len(noted) < 2 and len(used) < 6 * every:
        used.append(threads_used())
    assert len(noted) == 2 and max(noted) < 0.5, noted
    assert cpu_runtime._overhead < 0.5                              # quick again: parallel
    assert threads_used() == 2


def _index_kernel():
    """A kernel of its own (``out[i] = i``), so that its variants are new to this process."""
    @tack.kernel
    def k_index(out):
        i = tack.tid()
        out[i] = i
    return k_index


def test_new_variant_runs_serially_then_measured(monkeypatch):
    """A variant not measured yet is estimated at FLOOR_S a point: a small grid runs serially,
    and its timed launch gives the variant a cost per point.  Its first sixteenth is timed
    first, and would send the rest to the pool if it showed them costly; the clock here counts
    1 us a read, a cheap kernel's part whatever the machine's load (on a busy CI machine the
    part's first touch of fresh pages once timed it costly, and the rest went to two threads)."""
    tack.config.num_threads = 2

    k_fresh = _index_kernel()
    out = np.zeros(50_000)
    tack.launch(k_fresh, dim=1, args=(out,))                 # compiles the variant (1 row)
    (variant,) = k_fresh._variants.values()
    variant.cost, variant.serial_points = None, 0            # as if never launched
    monkeypatch.setattr(cpu_runtime, "MEASURE_MIN_S", 0.0)
    reads = [0.0]
    monkeypatch.setattr(cpu_runtime, "_clock", lambda: reads.append(reads[-1] + 1e-6) or reads[-1])
    tack.launch(k_fresh, dim=out.size, args=(out,))
    assert len(reads) - 1 == 3                               # the part, timed; then the launch
    assert cpu_runtime.pool_stats()["last_threads"] == 1
    assert variant.cost is not None and variant.cost > 0
    np.testing.assert_array_equal(out, np.arange(out.size))


def test_a_costly_first_launch_measures_a_part_then_runs_the_rest_on_the_pool(monkeypatch):
    """A variant not measured yet is estimated at FLOOR_S a point: a small grid of a costly
    kernel (a long loop at each point) ran whole on one thread, seconds where two threads take
    half.  Its first launch now runs a sixteenth of its rows first, timed (a clock that counts 1
    ms a point here), and the rest on the pool."""
    tack.config.num_threads = 2
    now = [0.0]
    monkeypatch.setattr(cpu_runtime, "_clock", lambda: now[0])
    runs = []
    caller = threading.get_ident()

    def fn(buf, lo, hi):
        if threading.get_ident() == caller:     # the calling thread's clock (a worker's rows,
            now[0] += (hi - lo) * 1e-3          # run meanwhile, would count in its chunk's time)
        runs.append((lo, hi))
    variant = SimpleNamespace(fn=fn, cost=None, serial_points=0, quiet_points=0, quiet_runs=0)
    cpu_runtime._run_grid(variant, b"", (64, 1, 1))
    assert runs[0] == (0, 64 // cpu_runtime.PROBE_PARTS)
    rest = sorted(runs[1:])
    assert len(rest) > 1 and rest[0][0] == runs[0][1] and rest[-1][1] == 64
    assert all(a[1] == b[0] for a, b in zip(rest, rest[1:]))
    assert cpu_runtime.pool_stats()["last_threads"] == 2
    assert variant.cost == pytest.approx(1e-3)


def test_a_long_serial_launch_runs_in_parts_an_interrupt_stops(monkeypatch):
    """A launch the pool cannot take (here one on the thread of a parallel launch: the pool is
    its own) ran in one call, so Ctrl-C was raised only once the whole grid had run.  Where its
    measured cost makes it long, it runs in parts of about INTERRUPT_S, and an interrupt raised
    as one returns stops it there."""
    tack.config.num_threads = 2
    runs = []

    def fn(buf, lo, hi):
        runs.append((lo, hi))
        if len(runs) == 2:
            raise KeyboardInterrupt         # the signal's handler, run as the part returned
    variant = SimpleNamespace(fn=fn, cost=1e-3, serial_points=0, quiet_points=0, quiet_runs=0)
    with cpu_runtime._busy:
        with pytest.raises(KeyboardInterrupt):
            cpu_runtime._run_grid(variant, b"", (1000, 1, 1))
    step = int(cpu_runtime.INTERRUPT_S / 1e-3)
    assert runs == [(0, step), (step, 2 * step)]
    assert cpu_runtime.pool_stats()["last_threads"] == 1


def _recording_variant(gate=None, fail_on=None):
    """A stand-in variant whose entry point records which thread ran each chunk. With ``gate``,
    the calling thread's first chunk waits until some other thread has run one (so the test
    shows a worker really ran, without any timing). ``fail_on`` ("worker" or "caller"): the
    first chunk that thread runs raises ValueError (its rows are not recorded)."""
    main = threading.get_ident()
    runs, failed = [], []

    def fn(buf, lo, hi):
        me = threading.get_ident()
        if gate is not None:
            if me == main:
                assert gate.wait(60), "no worker ran a chunk"
            else:
                gate.set()
        if not failed and fail_on == ("caller" if me == main else "worker"):
            failed.append(hi - lo)
            raise ValueError(f"chunk {lo}:{hi} failed")
        runs.append((lo, hi, me))

    return SimpleNamespace(fn=fn, cost=1.0, serial_points=0, quiet_points=0, quiet_runs=0), runs, failed


@pytest.mark.parametrize("threads", [2, 4])
def test_workers_run_chunks(threads):
    """A parallel launch's chunks are run by parked workers as well as the calling thread, and
    cover the first dimension exactly once."""
    tack.config.num_threads = threads
    variant, runs, _ = _recording_variant(gate=threading.Event())
    cpu_runtime._run_grid(variant, b"", (100, 1, 1))
    ranges = sorted((lo, hi) for lo, hi, _ in runs)
    assert ranges[0][0] == 0 and ranges[-1][1] == 100
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert len({t for _, _, t in runs}) >= 2
    assert cpu_runtime.pool_stats()["workers"] >= threads - 1


@pytest.mark.parametrize("where", ["worker", "caller"])
def test_error_in_a_chunk_is_raised_by_the_launch(where):
    """An exception in any chunk (a worker's, or the calling thread's) is raised by the launch,
    once every other chunk has run; the pool serves the next launch."""
    tack.config.num_threads = 2
    variant, runs, failed = _recording_variant(gate=threading.Event(), fail_on=where)
    with pytest.raises(ValueError, match="failed"):
        cpu_runtime._run_grid(variant, b"", (100, 1, 1))
    assert len(failed) == 1 and sum(hi - lo for lo, hi, _ in runs) == 100 - failed[0]
    variant, runs, _ = _recording_variant()
    cpu_runtime._run_grid(variant, b"", (100, 1, 1))
    assert sum(hi - lo for lo, hi, _ in runs) == 100
    assert cpu_runtime.pool_stats()["last_threads"] == 2


def test_out_of_bounds_in_parallel_debug_launch(every_grid_parallel):
    """Debug mode's bounds error, recorded by whichever thread ran the faulty point, is raised
    after a parallel launch with the kernel, the array and the index; every other point ran."""
    tack.config.debug = True
    tack.config.num_threads = 2
    a = np.zeros(1000)
    with pytest.raises(IndexError) as ei:
        tack.launch(k_shift, dim=a.size, args=(a, 1))
    assert cpu_runtime.pool_stats()["last_threads"] == 2
    msg = str(ei.value)
    assert "k_shift" in msg and "'a'" in msg and "index 1000" in msg
    np.testing.assert_array_equal(a[1:], 1.0)


def test_second_launch_while_pool_busy_runs_serially(every_grid_parallel):
    """A launch made while another holds the pool runs on its own thread, and is right."""
    tack.config.num_threads = 2
    held, done = threading.Event(), threading.Event()

    def other_launch():                 # another thread's launch, holding the pool meanwhile
        with cpu_runtime._busy:
            held.set()
            done.wait(60)
    t = threading.Thread(target=other_launch)
    t.start()
    try:
        assert held.wait(60)
        used, parallel = _launch_marked((300, 20))
    finally:
        done.set()
        t.join()
    assert (used, parallel) == (1, 0)
    assert _launch_marked((300, 20)) == (2, 1)


def test_concurrent_launches_from_two_threads(every_grid_parallel):
    """Two Python threads launching kernels at once (each grid parallel or serial, whichever
    finds the pool free) both get every point right, every time."""
    tack.config.num_threads = 2
    errors = []

    def launches(shape):
        try:
            for _ in range(40):
                out = np.zeros(shape, np.int64)
                tack.launch(MARK[len(shape)], dim=shape if len(shape) > 1 else shape[0],
                            args=(out,))
                np.testing.assert_array_equal(out, np.arange(1, out.size + 1).reshape(shape))
        except BaseException as e:      # noqa: BLE001 - reported by the main thread
            errors.append(e)

    _launch_marked((3000,))
    _launch_marked((60, 50))            # both variants compiled before the race
    ts = [threading.Thread(target=launches, args=(s,)) for s in ((3000,), (60, 50))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    assert not any(t.is_alive() for t in ts)


class _NestingWake:
    """A worker's wake lock whose ``locked()`` answer is followed by ``nested()`` on the calling
    thread: a signal handler, or a finalizer run by the garbage collector, that launches a kernel
    and lands just after the caller looked at the lock (deterministic here)."""

    def __init__(self, lock, nested):
        self.lock, self.nested = lock, nested

    def locked(self):
        got = self.lock.locked()
        nested, self.nested = self.nested, None
        if nested is not None:
            nested()
        return got

    def release(self):
        self.lock.release()


def test_a_launch_nested_in_a_parallel_launch_on_its_thread(every_grid_parallel, monkeypatch):
    """A launch made on the thread of a parallel launch while it runs (a signal handler's, a
    ``__del__``'s) is right and leaves the outer launch right. It re-entered the pool (its lock
    is the caller's own): it woke the worker the outer launch had just seen parked, and the outer
    launch then released the lock again: "RuntimeError: release unlocked lock", raised by the
    outer launch (seen with a SIGALRM handler launching a kernel every millisecond)."""
    import _thread
    tack.config.num_threads = 2
    _launch_marked((200,))                      # compiled, and the pool started
    inner = []

    def nested():
        out = np.zeros(300, np.int64)
        tack.launch(k_mark1, dim=out.size, args=(out,))
        inner.append(out)
    parked = _thread.allocate_lock()            # a worker's lock, parked on by no worker here:
    parked.acquire()                            # once released it stays so, as before a late worker
    monkeypatch.setattr(cpu_runtime, "_wakes", [_NestingWake(parked, nested)])
    monkeypatch.setattr(cpu_runtime, "_slots", [None])
    monkeypatch.setattr(cpu_runtime, "_inside", [None])
    out = np.zeros(500, np.int64)
    tack.launch(k_mark1, dim=out.size, args=(out,))
    np.testing.assert_array_equal(out, np.arange(1, out.size + 1))
    assert len(inner) == 1
    np.testing.assert_array_equal(inner[0], np.arange(1, 301))
    assert not cpu_runtime._busy._is_owned()


def test_an_interrupt_as_a_chunk_returns_stops_the_launch(monkeypatch):
    """Ctrl-C during a long parallel launch lands, almost always, as the calling thread's chunk
    returns: it was kept as the chunk's error and the caller went on claiming chunks, so the
    interrupt was raised only once the whole grid had run (a real SIGINT an eighth of the way
    into a 1.7 s launch was raised after 1.77 s). Now no chunk is claimed after it, and the
    launch raises it once no worker is in the launch. (No worker here: the caller runs alone.)"""
    import _thread
    tack.config.num_threads = 2
    main = threading.get_ident()
    runs = []

    def fn(buf, lo, hi):
        assert threading.get_ident() == main
        if not runs:
            runs.append(None)
            raise KeyboardInterrupt         # the signal's handler, run as the chunk returned
        runs.append((lo, hi))
    variant = SimpleNamespace(fn=fn, cost=1.0, serial_points=0, quiet_points=0, quiet_runs=0)
    parked = _thread.allocate_lock()            # a worker's lock, parked on by no worker here
    parked.acquire()
    monkeypatch.setattr(cpu_runtime, "_wakes", [parked])
    monkeypatch.setattr(cpu_runtime, "_slots", [None])
    monkeypatch.setattr(cpu_runtime, "_inside", [None])
    with pytest.raises(KeyboardInterrupt):
        cpu_runtime._run_grid(variant, b"", (100, 1, 1))
    assert cpu_runtime.pool_stats()["last_threads"] == 2
    assert runs == [None]                       # no chunk was run after the interrupted one
    assert not cpu_runtime._busy._is_owned()


def test_thread_count_change_between_launches(every_grid_parallel):
    """num_threads changed between launches applies to the next launch: more workers are started
    when it grows, fewer threads are used when it shrinks."""
    tack.config.num_threads = 4
    assert _launch_marked((400,)) == (4, 1)
    assert cpu_runtime.pool_stats()["workers"] >= 3
    tack.config.num_threads = 2
    assert _launch_marked((400,)) == (2, 1)
    tack.config.num_threads = 1
    assert _launch_marked((400,)) == (1, 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_forked_child_gets_a_fresh_pool(every_grid_parallel):
    """After the parent used the pool, a forked child (multiprocessing, MPI launchers) starts
    with no workers, starts its own at its first parallel launch, and gets every point right."""
    tack.config.num_threads = 2
    assert _launch_marked((500,)) == (2, 1)
    assert cpu_runtime.pool_stats()["workers"] >= 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                        # the child: report, never return
        code = 1
        try:
            before = cpu_runtime.pool_stats()["workers"]
            gate_ok = _launch_marked((500,)) == (2, 1)
            variant, runs, _ = _recording_variant(gate=threading.Event())
            cpu_runtime._run_grid(variant, b"", (100, 1, 1))
            helped = len({t for _, _, t in runs}) >= 2
            os.write(w, json.dumps([before, gate_ok, helped,
                                    cpu_runtime.pool_stats()["workers"]]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        report = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, report
    assert json.loads(report) == [0, True, True, 1]


def _child(code: str, tmp_path: Path, **env_extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), **env_extra)
    script = tmp_path / "child.py"             # a kernel's source must be in a file
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


FIRST_PARALLEL = """
import json, sys
import numpy as np
import tack
from tack.backends import cpu_runtime

@tack.kernel
def saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]

n = 4_000_000       # a new variant's estimate (FLOOR_S a point) gives it 2 threads at once
x = np.arange(n, dtype=np.float32); y = np.ones(n, np.float32); out = np.zeros(n, np.float32)
tack.launch(saxpy, dim=n, args=(np.float32(2.0), x, y, out))
print(json.dumps({"ok": bool((out == 2 * x + 1).all()), "stats": cpu_runtime.pool_stats(),
                  "modules": [m for m in ("concurrent.futures", "logging") if m in sys.modules],
                  "compiled": "tack.compiler" in sys.modules}))
"""


def test_first_parallel_launch_imports_no_concurrent_futures(tmp_path):
    """A warm process's first launch, parallel (its stats say 2 threads and a worker started),
    imports neither concurrent.futures nor logging."""
    _child(FIRST_PARALLEL, tmp_path, TACK_NUM_THREADS="2")          # compiles, fills the cache
    warm = _child(FIRST_PARALLEL, tmp_path, TACK_NUM_THREADS="2")
    assert warm["ok"] and not warm["compiled"]
    assert warm["stats"].pop("start_seconds") > 0
    assert warm["stats"] == {"workers": 1, "parallel_launches": 1, "last_threads": 2}
    assert warm["modules"] == []


def test_interpreter_exits_with_parked_workers(tmp_path):
    """A process whose workers are parked (4 of them) exits at once, with its output."""
    code = FIRST_PARALLEL.replace("n = 4_000_000", "n = 16_000_000")
    report = _child(code, tmp_path, TACK_NUM_THREADS="5")
    assert report["ok"] and report["stats"]["workers"] == 4


def test_first_parallel_call_reports_its_thread_start(tmp_path):
    """Issue 21 part 5: a first call that starts the pool's workers says so in its own stage
    ("threads"), taken out of "launch"; one that starts none has no such stage."""
    import os
    import subprocess
    import sys
    code = """
import json, numpy as np, tack
from tack.backends import cpu_runtime
cpu_runtime.FLOOR_S = 1.0          # any grid is worth threads before the first measurement
@tack.kernel
def k(out):
    i = tack.tid()
    out[i] = 1.0
@tack.kernel
def k2(out):
    i = tack.tid()
    out[i] = 2.0
tack.config.num_threads = 2
out = np.zeros(1 << 12)
tack.launch(k, len(out), (out,))
first = dict(k.timings)
tack.launch(k2, len(out), (out,))
print(json.dumps({"first": first, "second": dict(k2.timings), "stats": cpu_runtime.pool_stats()}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE="off", PYTHONPATH=os.pathsep.join(sys.path))
    script = tmp_path / "first_parallel.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    import json
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["stats"]["workers"] == 1 and got["stats"]["parallel_launches"] == 2, got
    assert got["first"]["threads"] > 0 and "launch" in got["first"], got
    assert "threads" not in got["second"], got          # workers were started already


def test_grids_below_the_learnt_size_skip_the_rule_and_the_clock(monkeypatch):
    """Issue 21: once a variant's cost is measured, grids so small that neither a second thread
    nor a timing could pay take the fast path (as TACK_NUM_THREADS=1 does): serially, and not
    measured again; larger grids still follow the rule. A launch too quick to time marks its
    size as such."""
    tack.config.num_threads = 2

    k_small = _index_kernel()
    out = np.zeros(64)
    with monkeypatch.context() as m:                         # too quick on any machine's load
        m.setattr(cpu_runtime, "_clock", lambda: 0.0)
        tack.launch(k_small, dim=out.size, args=(out,))      # compiles; 64 points: too quick
    (variant,) = k_small._variants.values()
    assert variant.serial_points == 65 and variant.cost is None
    monkeypatch.setattr(cpu_runtime, "MEASURE_MIN_S", 0.0)   # time everything that is timed
    tack.launch(k_small, dim=32, args=(out,))
    assert variant.cost is None                              # the fast path: no clock
    assert (out == np.arange(64)).all()
    tack.launch(k_small, dim=64, args=(out,))
    assert variant.cost is None
    big = np.zeros(100_000)
    reads = [0.0]                   # 1 us a read: its timed first part, cheap on any load
    monkeypatch.setattr(cpu_runtime, "_clock", lambda: reads.append(reads[-1] + 1e-6) or reads[-1])
    tack.launch(k_small, dim=big.size, args=(big,))          # above it: timed, a cost learnt
    assert cpu_runtime.pool_stats()["last_threads"] == 1
    assert variant.cost is not None and (big == np.arange(big.size)).all()
    # the size below which launches skip the rule now follows the cost learnt (it only ever rose)
    assert variant.serial_points == int(min(2 * cpu_runtime.PER_THREAD_S, cpu_runtime.MEASURE_MIN_S)
                                        / (2 * variant.cost))


def test_grids_that_cannot_gain_a_thread_are_timed_one_launch_in_eight(monkeypatch):
    """Issue 21: a grid too small for a second thread even at twice the cost measured runs
    serially and is timed one launch in SAMPLE_EVERY (the clock and the rule were about 2 us of
    an 80 us launch, auto 3-6% behind one thread); the sampled launches still follow a cost that
    rises, so the grid comes back under the rule and goes parallel."""
    tack.config.num_threads = 2

    k_quiet = _index_kernel()
    monkeypatch.setattr(cpu_runtime, "MEASURE_MIN_S", 0.0)
    out = np.zeros(20_000)
    tack.launch(k_quiet, dim=out.size, args=(out,))             # compiles, learns a cost
    (variant,) = k_quiet._variants.values()
    assert variant.cost is not None
    variant.cost, variant.serial_points = 1e-9, 0               # 20k points: 20 us of work
    monkeypatch.setattr(cpu_runtime, "PER_THREAD_S", 1e-3)
    cpu_runtime._learn(variant, 1e-9)
    assert variant.quiet_points == int(1e-3 / 1e-9) > out.size
    ticks = []
    clock = cpu_runtime._clock
    # 5 us a read: 2.5e-10 s a point, below the cost set, which a sampled launch so lowers (a
    # launch preempted on a busy machine, timed by the real clock, raised it: two threads)
    monkeypatch.setattr(cpu_runtime, "_clock", lambda: ticks.append(1) or len(ticks) * 5e-6)
    variant.quiet_runs = 0
    for _ in range(2 * cpu_runtime.SAMPLE_EVERY):
        out[:] = 0
        tack.launch(k_quiet, dim=out.size, args=(out,))
        assert (out == np.arange(out.size)).all() and cpu_runtime.pool_stats()["last_threads"] == 1
    assert len(ticks) == 2 * 2                                   # two timed launches, two reads each
    # The kernel's cost rises (as a data-dependent loop's would): the sampled launches learn it,
    # the quiet band shrinks below the grid, and the rule gives it two threads again.
    monkeypatch.setattr(cpu_runtime, "_clock", clock)
    monkeypatch.setattr(cpu_runtime, "MEASURE_MIN_S", 20e-6)
    cpu_runtime._learn(variant, 1.0)                             # as if measured at 1 s a point
    assert variant.quiet_points < out.size
    tack.launch(k_quiet, dim=out.size, args=(out,))
    assert cpu_runtime.pool_stats()["last_threads"] == 2 and (out == np.arange(out.size)).all()


# The interrupt scripts' kernel and pool set-up: a slow kernel on two threads, every grid parallel.
SPIN = r"""

@tack.kernel
def spin(out, m):
    i = tack.tid()
    s = 0.0
    for k in range(m):
        s = s + 1.0
    out[i] = out[i] + s + 1.0


tack.config.num_threads = 2
cpu_runtime.PER_THREAD_S, cpu_runtime.OVERHEAD_FACTOR = 1e-15, 0.0     # every grid parallel
out = np.zeros(2000)
"""


INTERRUPTED = r"""
import sys, time
import numpy as np
import tack
from tack.backends import cpu_runtime
""" + SPIN + r"""tack.launch(spin, dim=out.size, args=(out, 20000))
assert cpu_runtime.pool_stats()["last_threads"] == 2
Real = cpu_runtime._Job


class LateInterrupt:
    # What Ctrl-C's handler does when its signal lands as a call returns: the call did its work,
    # then KeyboardInterrupt is raised (deterministic here, at the first such moment).
    def __init__(self, call):
        self.call, self.fired = call, False

    def __call__(self, *args):
        got = self.call(*args)
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return got


class Job(Real):
    __slots__ = ()

    def __init__(self, *args):
        Real.__init__(self, *args)
        if sys.argv[1] == "claim":          # the caller's first claim: its chunk is claimed, then lost
            self.claim = LateInterrupt(self.claim)

    def work(self, timed=False):
        if timed and sys.argv[1] == "wait":
            return                          # the caller leaves every chunk to the worker: it waits
        return Real.work(self, timed)

    def wait(self):
        if sys.argv[1] == "wait":           # the caller's wait: the lock taken, then interrupted
            lock = self.done
            self.done = type("Lock", (), {"acquire": staticmethod(LateInterrupt(lock.acquire)),
                                          "release": staticmethod(lock.release)})()
        return Real.wait(self)


class LateBusy:                      # the pool's lock, taken, then interrupted
    def __init__(self, lock):
        self.lock, self.acquire = lock, LateInterrupt(lock.acquire)

    def release(self):
        self.lock.release()

    def _is_owned(self):
        return self.lock._is_owned()


real_busy = cpu_runtime._busy
if sys.argv[1] == "busy":
    cpu_runtime._busy = LateBusy(real_busy)
cpu_runtime._Job = Job
out[:] = 0
try:
    tack.launch(spin, dim=out.size, args=(out, 20000))
    print("no interrupt")
except KeyboardInterrupt:
    snap = out.copy()
    time.sleep(0.3)
    print("written after", int((out != snap).sum()))
cpu_runtime._Job, cpu_runtime._busy = Real, real_busy
out[:] = 0
tack.launch(spin, dim=out.size, args=(out, 20000))
print("after", bool((out == 20001.0).all()), cpu_runtime.pool_stats()["last_threads"])
"""


@pytest.mark.parametrize("where", ["wait", "claim", "busy"])
def test_an_interrupt_as_a_call_returns_neither_hangs_nor_leaves_workers_writing(tmp_path, where):
    """Ctrl-C's KeyboardInterrupt is raised as a call returns: just after ``wait`` took the
    done lock (it then waited for it again, for ever: 3 of 4 real Ctrl-C runs hung), just
    after the caller claimed a chunk (the launch raised while a worker still wrote into the
    array), or just after the launch took the pool (left held: every later launch ran on one
    thread). Now the launch raises it once no worker is in it, and the pool serves on after."""
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(script), where], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[:2] == ["written after 0", "after True 2"], p.stdout


TWICE_INTERRUPTED = r"""
import time
import numpy as np
import tack
from tack.backends import cpu_runtime
""" + SPIN + r"""tack.launch(spin, dim=out.size, args=(out, 10))
assert cpu_runtime.pool_stats()["last_threads"] == 2
Real = cpu_runtime._Job


class Job(Real):
    __slots__ = ()

    def work(self, timed=False):
        if not timed:
            return Real.work(self, timed)
        # The caller: Ctrl-C lands as it is about to claim its first chunk, once the worker is
        # in one of its own (a long one: the worker is still in it when the launch is abandoned).
        while not any(job is self for job in cpu_runtime._inside):
            time.sleep(0.001)
        time.sleep(0.01)                    # the worker has claimed its chunk by now, or soon
        raise KeyboardInterrupt


class SecondCtrlC:                   # and a second Ctrl-C while the launch waits for the worker
    def __init__(self):
        self.fired = False

    def sleep(self, s):
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        time.sleep(s)


cpu_runtime._Job, cpu_runtime.time = Job, SecondCtrlC()
out[:] = 0
try:
    tack.launch(spin, dim=out.size, args=(out, 400000))
    print("no interrupt")
except KeyboardInterrupt:
    print("worker inside", any(job is not None for job in cpu_runtime._inside))
cpu_runtime._Job, cpu_runtime.time = Real, time
out[:] = 0
tack.launch(spin, dim=out.size, args=(out, 100))
print("after", bool((out == 101.0).all()), cpu_runtime.pool_stats()["last_threads"])
"""


def test_a_second_interrupt_while_the_launch_waits_for_its_workers(tmp_path):
    """Ctrl-C pressed twice: the first lands where the launch must give up its job (its caller
    about to claim a chunk), the second while it waits for the worker still in one. The wait
    gave up at the second one, and the launch raised while the worker still wrote into the
    array (its documented promise: raised once no thread writes into the launch's arrays)."""
    script = tmp_path / "twice.py"
    script.write_text(TWICE_INTERRUPTED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[:2] == ["worker inside False", "after True 2"], p.stdout


NO_MORE_THREADS = r"""
import _thread, json
import numpy as np
import tack
from tack.backends import cpu_runtime

real = _thread.start_new_thread
started = []


def limited(*args):                 # a system that starts one more thread and no more
    if started:
        raise RuntimeError("can't start new thread")
    started.append(1)
    return real(*args)


_thread.start_new_thread = limited


@tack.kernel
def mark(out):
    i = tack.tid()
    out[i] = out[i] + i + 1


tack.config.num_threads = 4
cpu_runtime.PER_THREAD_S, cpu_runtime.OVERHEAD_FACTOR = 1e-15, 0.0
got = []
for _ in range(2):
    out = np.zeros(4000)
    tack.launch(mark, dim=out.size, args=(out,))
    got.append([bool((out == np.arange(1, out.size + 1)).all()), cpu_runtime.pool_stats()["last_threads"]])
print(json.dumps([got, cpu_runtime.pool_stats()["workers"], len(started)]))
"""


def test_a_system_that_starts_no_more_threads_runs_the_launch_on_those_there_are(tmp_path):
    """Four threads asked for where the system starts one worker and no more (a container's
    limit, TACK_NUM_THREADS far above the cores): the launch runs, right, on two threads; it
    raised "can't start new thread" and left a worker's lock without a worker."""
    script = tmp_path / "limited.py"
    script.write_text(NO_MORE_THREADS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [[[True, 2], [True, 2]], 1, 1]


@tack.kernel
def k_loop(out, m):
    i = tack.tid()
    s = 0.0
    for k in range(m):
        s = s + 1.0
    out[i] = s


def test_a_kernel_whose_cost_grows_with_an_argument_gets_threads_again(monkeypatch):
    """A kernel looping over an argument, first launched cheaply (too quick to time: its size was
    marked serial for good), then with a costly argument: one launch in FAST_SAMPLE_EVERY below
    that size is timed, and the costly launches get two threads again (they never did)."""
    tack.config.num_threads = 2
    small = np.zeros(3000)
    with monkeypatch.context() as m:
        # The cheap launch as a quick machine runs it (under 20 us), whatever this one's load:
        # on a busy CI machine it once took longer, was timed, and the premise below failed.
        m.setattr(cpu_runtime, "_clock", lambda: 0.0)
        tack.launch(k_loop, dim=small.size, args=(small, 0))
    (variant,) = k_loop._variants.values()
    assert variant.serial_points > small.size and variant.cost is None
    threads = []
    # (its own launches' overheads, measured on a busy machine, would hold it back: not this rule)
    monkeypatch.setattr(cpu_runtime, "OVERHEAD_FACTOR", 0.0)
    for _ in range(cpu_runtime.FAST_SAMPLE_EVERY + 3):
        tack.launch(k_loop, dim=small.size, args=(small, 20_000))
        threads.append(cpu_runtime.pool_stats()["last_threads"])
    assert (small == 20_000.0).all()
    assert threads[-1] == 2 and variant.serial_points < small.size


def test_a_parallel_launch_whose_workers_ran_every_chunk(monkeypatch):
    """A parallel launch where a worker claimed every chunk before the calling thread claimed
    one timed no rows: with MEASURE_MIN_S at 0 (its 0.0 s passed ``>= 0``) it divided by those
    0 rows, a ZeroDivisionError out of the launch.  Nothing is learnt from it now."""
    tack.config.num_threads = 2
    monkeypatch.setattr(cpu_runtime, "MEASURE_MIN_S", 0.0)
    work = cpu_runtime._Job.work

    def late_caller(job, timed=False):
        if timed:                       # the calling thread: only once the worker ran them all
            while not job.all_done:
                threading.Event().wait(1e-4)
        return work(job, timed)
    monkeypatch.setattr(cpu_runtime._Job, "work", late_caller)
    ran = []
    variant = SimpleNamespace(fn=lambda buf, lo, hi: ran.append((lo, hi)), cost=1.0,
                              serial_points=0, quiet_points=0, quiet_runs=0)
    cpu_runtime._run_grid(variant, b"", (8, 1, 1))
    assert cpu_runtime.pool_stats()["last_threads"] == 2
    assert sorted(ran)[0][0] == 0 and sorted(ran)[-1][1] == 8 and variant.cost == 1.0
