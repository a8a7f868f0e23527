"""The CPU thread pool: steady-state time on 1 thread against 2, and the first parallel launch.

    python benchmarks/thread_scaling.py [--sizes 1000,10000,100000,1000000,10000000]
                                        [--repeats 9] [--processes 9] [--json]

1. **Steady state, 1 against 2 threads** (one child process, so the caller's settings and
   compiled kernels are untouched): for each grid size and two kernels, ``saxpy`` (two loads,
   one store a point) and ``heavy`` (16 square roots a point), the time of one launch with
   ``tack.config.num_threads = 1``, with 2 threads forced at every size (the rule's minimum
   work per thread, ``cpu_runtime.PER_THREAD_S``, set to nothing) and with 2 threads allowed
   and the rule choosing (``auto``, what a user gets). Each repeat times a batch of launches
   lasting about 2 ms, modes interleaved in a rotating order, each batch after one untimed
   launch of its own mode (a 2-thread launch leaves half the arrays in the other core's cache,
   which the next mode's first launches would otherwise fetch); min and median over
   ``--repeats`` batches, per launch.
   The ratios are medians over medians; ``auto`` must never be more than 5% slower than 1
   thread. The ``dispatch`` row is a 64-point saxpy forced onto 2 threads minus the same on 1:
   what waking a worker and collecting it adds to a launch.
2. **First parallel launch, fresh processes** (``--processes`` each, alternating): a warm
   process (its cache primed by one process) launches the saxpy of 100k and of 4M points;
   the first launch's time with ``TACK_NUM_THREADS=2`` against ``TACK_NUM_THREADS=1``, the
   threads it used, and the process's first launch minus its steady launch (what starting
   the pool and the first call cost on top of the launch itself).

On a checkout without the pool's rule (before issue 21 part 3) the forced-2 column is plain
``num_threads = 2`` (the old rule: 2 threads from 16384 points). ``table(sizes, repeats)`` returns
part 1's table as lines, for ``benchmarks/deployed_warm.py``.

Targets (printed, never asserted): auto / 1 thread <= 1.05 at every size; dispatch <= 30 us;
first parallel launch at most 1 ms over the serial one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import counts, finish, run_json  # noqa: E402

import numpy as np  # noqa: E402
import tack  # noqa: E402

SIZES = (10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6, 10 ** 7)
TARGET_AUTO_RATIO = 1.05
TARGET_DISPATCH_US = 30.0
TARGET_FIRST_EXTRA_MS = 1.0
BATCH_S = 2e-3
FIRST_SIZES = (100_000, 4_000_000)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", "").strip(os.pathsep),
               **extra)
    return env


# ---------------------------------------------------------------------------
# The child: kernels, steady-state timing, first launch


@tack.kernel
def saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


@tack.kernel
def heavy(x, out):
    i = tack.tid()
    acc = x[i]
    for k in range(16):
        acc = math.sqrt(acc + k)
    out[i] = acc


def _kernels():
    def args(name, n):
        x = np.linspace(0.0, 1.0, n)
        out = np.full(n, -1.0)              # written: no page faults in the first launch
        if name == "saxpy":
            return saxpy, (2.0, x, np.ones(n), out)
        return heavy, (x, out)

    return tack, args


def _child_steady(sizes, repeats):
    tack, args = _kernels()
    from tack.backends import cpu_runtime
    has_rule = hasattr(cpu_runtime, "PER_THREAD_S")
    rule = getattr(cpu_runtime, "PER_THREAD_S", None)
    modes = {"1": (1, rule), "2": (2, 1e-15 if has_rule else None), "auto": (2, rule)}

    # The rule's measured overhead, kept per mode: forced-2 launches of tiny grids lag far more
    # than their work, and must not make the automatic column hold back.
    overhead = {m: getattr(cpu_runtime, "_overhead", 0.0) for m in modes}
    samples = {m: list(getattr(cpu_runtime, "_overheads", [])) for m in modes}   # its median's
    factor = getattr(cpu_runtime, "OVERHEAD_FACTOR", 0.0)
    learnt = {}

    def run_mode(mode, kernel, a, n, calls):
        threads, per_thread = modes[mode]
        tack.config.num_threads = threads
        if has_rule:
            cpu_runtime.PER_THREAD_S = per_thread
            cpu_runtime._overhead = overhead[mode]
            if hasattr(cpu_runtime, "_overheads"):
                cpu_runtime._overheads[:] = samples[mode]
            # forced: 2 threads whatever the overhead measured (else it backs off like auto)
            cpu_runtime.OVERHEAD_FACTOR = 0.0 if mode == "2" else factor
        variants = [v for v in kernel._variants.values() if hasattr(v, "serial_points")]
        for v in variants:          # what the rule learnt of small grids, per mode too
            v.serial_points, v.quiet_points = learnt.get((mode, id(v)), (0, 0))
        t0 = time.perf_counter()
        for _ in range(calls):
            tack.launch(kernel, dim=n, args=a)
        t = (time.perf_counter() - t0) / calls
        used = cpu_runtime.pool_stats()["last_threads"] if has_rule else None
        if has_rule:
            overhead[mode] = cpu_runtime._overhead
            samples[mode] = list(getattr(cpu_runtime, "_overheads", []))
            learnt.update(((mode, id(v)), (v.serial_points, getattr(v, "quiet_points", 0)))
                          for v in variants)
        return t, used

    rows = []
    cases = [("saxpy", n) for n in sizes] + [("heavy", n) for n in sizes] + [("dispatch", 64)]
    for name, n in cases:
        kernel, a = args("saxpy" if name == "dispatch" else name, n)
        for mode in modes:                          # compile, and the rule's first measurement
            for _ in range(3):
                run_mode(mode, kernel, a, n, 1)
        t1, _ = run_mode("1", kernel, a, n, 3)
        calls = max(1, min(2000, int(BATCH_S / max(t1, 1e-7))))
        times = {m: [] for m in modes}
        used = {}
        order = list(modes)
        for r in range(repeats):
            for mode in order[r % 3:] + order[:r % 3]:     # each mode after each other in turn
                run_mode(mode, kernel, a, n, 1)             # the arrays where this mode leaves them
                t, u = run_mode(mode, kernel, a, n, calls)
                times[mode].append(t)
                used[mode] = u
        rows.append({"kernel": name, "n": n, "calls": calls, "used": used,
                     **{m: {"min": min(v), "median": statistics.median(v)}
                        for m, v in times.items()}})
    print(json.dumps({"rows": rows, "has_rule": has_rule}))


def _child_first(n):
    tack, args = _kernels()
    kernel, a = args("saxpy", n)
    t0 = time.perf_counter()
    tack.launch(kernel, dim=n, args=a)
    first = time.perf_counter() - t0
    try:
        from tack.backends import cpu_runtime
        used = cpu_runtime.pool_stats()["last_threads"]
    except AttributeError:
        used = None
    steady = []
    for _ in range(5):
        t0 = time.perf_counter()
        tack.launch(kernel, dim=n, args=a)
        steady.append(time.perf_counter() - t0)
    print(json.dumps({"first_s": first, "steady_s": statistics.median(steady), "used": used,
                      "futures": "concurrent.futures" in sys.modules}))


# ---------------------------------------------------------------------------
# The parent: the tables


def steady_state(sizes=SIZES, repeats=9) -> dict:
    """Part 1's figures, from one child process."""
    return run_json(os.path.abspath(__file__),
                    ["--child-steady", ",".join(map(str, sizes)), repeats], _env())


def _us(t):
    return f"{t * 1e6:9.1f}" if t < 1e-2 else f"{t * 1e3:7.2f}ms"


def steady_lines(res) -> list:
    lines = ["steady state per launch, min/median (us unless ms); ratios of medians to 1 thread",
             f"{'kernel':8} {'points':>9} | {'1 thread':>21} | {'2 threads':>21} | "
             f"{'auto (threads)':>25} | {'2/1':>5} {'auto/1':>6}"]
    worst = 0.0
    dispatch = None
    for r in res["rows"]:
        one, two, auto = r["1"]["median"], r["2"]["median"], r["auto"]["median"]
        if r["kernel"] == "dispatch":
            dispatch = (r["2"]["min"] - r["1"]["min"], two - one)
            continue
        worst = max(worst, auto / one)
        used = r["used"].get("auto")
        lines.append(f"{r['kernel']:8} {r['n']:>9} | {_us(r['1']['min'])} {_us(one)} | "
                     f"{_us(r['2']['min'])} {_us(two)} | {_us(r['auto']['min'])} {_us(auto)} "
                     f"({used if used is not None else '?'}) | {two / one:5.2f} "
                     f"{auto / one:6.2f}")
    lines.append(f"worst auto / 1 thread: {worst:.2f} (target <= {TARGET_AUTO_RATIO}: "
                 f"{'met' if worst <= TARGET_AUTO_RATIO else 'NOT met'})")
    if dispatch is not None:
        ok = dispatch[1] * 1e6 <= TARGET_DISPATCH_US
        note = "" if res.get("has_rule") else " (no forced 2 threads here: 64 points ran serially)"
        lines.append(f"dispatch (64 points, 2 threads forced minus 1): min {dispatch[0] * 1e6:.1f} "
                     f"us, median {dispatch[1] * 1e6:.1f} us (target <= {TARGET_DISPATCH_US:.0f} "
                     f"us: {'met' if ok else 'NOT met'}){note}")
    return lines


def table(sizes=SIZES, repeats=9) -> list:
    """The 1 against 2 threads table as printable lines (one child process)."""
    return steady_lines(steady_state(sizes, repeats))


def first_launch(processes=9, sizes=FIRST_SIZES) -> dict:
    """Part 2: each size's first launch in fresh warm processes, 2 threads against 1."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="tack-threads-") as tmp:
        env = {t: _env(TACK_CACHE_DIR=tmp, TACK_NUM_THREADS=t) for t in ("1", "2")}
        me = os.path.abspath(__file__)
        for n in sizes:
            run_json(me, ["--child-first", n], env["2"])          # primes the cache
            runs = {"1": [], "2": []}
            for _ in range(processes):
                for t in ("1", "2"):
                    runs[t].append(run_json(me, ["--child-first", n], env[t]))
            out[n] = runs
    return out


def first_lines(res) -> list:
    lines = ["first launch of a warm process, min/median/max ms (threads used; first - steady)"]
    worst = -math.inf
    for n, runs in res.items():
        med = {}
        for t in ("1", "2"):
            firsts = [r["first_s"] * 1e3 for r in runs[t]]
            extra = [(r["first_s"] - r["steady_s"]) * 1e3 for r in runs[t]]
            med[t] = statistics.median(firsts)
            used = sorted({r["used"] for r in runs[t]}, key=str)
            fut = any(r["futures"] for r in runs[t])
            lines.append(f"  saxpy {n:>8} TACK_NUM_THREADS={t}: {min(firsts):6.2f} {med[t]:6.2f} "
                         f"{max(firsts):6.2f} (threads {','.join(map(str, used))}; first - "
                         f"steady {statistics.median(extra):.2f}; concurrent.futures "
                         f"{'imported' if fut else 'not imported'})")
        worst = max(worst, med["2"] - med["1"])
    lines.append(f"worst first launch on 2 threads minus on 1: {worst:.2f} ms (target <= "
                 f"{TARGET_FIRST_EXTRA_MS} ms: {'met' if worst <= TARGET_FIRST_EXTRA_MS else 'NOT met'})")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--processes", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child-steady", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--child-first", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child_steady:
        _child_steady(tuple(int(x) for x in a.child_steady[0].split(",")), int(a.child_steady[1]))
        return None
    if a.child_first:
        _child_first(a.child_first)
        return None
    sizes = counts(ap, a.sizes, "--sizes", "1000,100000", 1)
    res = {"steady": steady_state(sizes, a.repeats),
           "first": first_launch(a.processes)}

    def report(r):
        print("\n".join(steady_lines(r["steady"])))
        print()
        print("\n".join(first_lines(r["first"])))

    return finish(res, report, a.json)


if __name__ == "__main__":
    main()
