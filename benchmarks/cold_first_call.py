"""Cold first call: Tack's contour vs the Numba peer, each in a fresh process.

    python benchmarks/cold_first_call.py [--repeat 3] [--warmup 1] [--size 21] [--json]

For each repetition one new Python process per contestant runs
``benchmarks/_cold_runner.py``: it imports NumPy and builds ``sphere(size)``
(not timed), imports the library (timed, reported separately), then times the
first ``contour`` call on the field, which includes compiling.  Tack's process
runs with ``TACK_CACHE=off``; its stage times (lower, specialize, init,
codegen, llvm, load, launch) are summed over the contour's kernels.  Repetitions alternate Tack and Numba; figures are medians.

Targets (printed next to the figures, never asserted):

* Tack cold first call / Numba cold first call <= 0.5
* Tack lowering (``lower`` stage, summed over both kernels) < 100 ms
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNNER = os.path.join(HERE, "_cold_runner.py")

from _common import finish, median_of, run_json  # noqa: E402  (benchmarks/ is on sys.path)
STAGES = ("lower", "specialize", "init", "codegen", "llvm", "load", "launch")
KERNELS = ("classify", "emit")

TARGET_COLD_RATIO = 0.5      # Tack cold / Numba cold, at most
TARGET_LOWER_MS = 100.0      # Tack lower stage sum, below


def _run_one(which, size):
    env = dict(os.environ)
    if which == "tack":
        env["TACK_CACHE"] = "off"
    env.pop("TACK_TIMING", None)
    # Imports from compiled bytecode, as from an installed package (pip writes .pyc files).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return run_json(RUNNER, (which, size), env)


def measure(repeat=3, warmup=1, size=21):
    """Run the cold processes; return a dict of medians and raw runs."""
    for _ in range(warmup):                       # warm the OS page cache; discarded
        _run_one("tack", size)
        _run_one("numba", size)
    raw = {"tack": [], "numba": []}
    for _ in range(repeat):
        raw["tack"].append(_run_one("tack", size))
        raw["numba"].append(_run_one("numba", size))

    med = {}
    for which, runs in raw.items():
        med[which] = {k: median_of(runs, k)
                      for k in ("numpy_import_s", "import_s", "peer_import_s", "first_call_s",
                                "second_call_s", "in_process_s", "process_wall_s")
                      if median_of(runs, k) is not None}
        med[which]["ntris"] = runs[0]["ntris"]
        med[which]["nverts"] = runs[0]["nverts"]

    # Tack stages: median over repetitions of each (kernel, stage), and of the sums.
    stages = {}
    for kname in KERNELS:
        stages[kname] = {s: statistics.median(r["stages"][kname].get(s, 0.0) for r in raw["tack"])
                         for s in STAGES}
    stage_sum = {s: statistics.median(sum(r["stages"][k].get(s, 0.0) for k in KERNELS)
                                      for r in raw["tack"]) for s in STAGES}
    all_stages = [sum(r["stages"][k].get(s, 0.0) for k in KERNELS for s in STAGES)
                  for r in raw["tack"]]
    outside = [r["first_call_s"] - a for r, a in zip(raw["tack"], all_stages)]
    med["tack"]["stages"] = stages
    med["tack"]["stage_sum"] = stage_sum
    med["tack"]["stages_total_s"] = statistics.median(all_stages)
    med["tack"]["outside_stages_s"] = statistics.median(outside)

    cold_ratio = statistics.median(t["first_call_s"] / n["first_call_s"]
                                   for t, n in zip(raw["tack"], raw["numba"]))
    with_import = statistics.median(
        (t["import_s"] + t["first_call_s"])
        / (n["import_s"] + n.get("peer_import_s", 0.0) + n["first_call_s"])
        for t, n in zip(raw["tack"], raw["numba"]))
    lower_ms = stage_sum["lower"] * 1e3
    return {
        "benchmark": "cold_first_call",
        "field": f"sphere({size})",
        "repeat": repeat,
        "warmup": warmup,
        "python": sys.version.split()[0],
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "medians": med,
        "ratios": {
            "tack_cold_over_numba_cold": cold_ratio,
            "tack_cold_over_numba_cold_target_max": TARGET_COLD_RATIO,
            "tack_cold_over_numba_cold_met": cold_ratio <= TARGET_COLD_RATIO,
            "tack_lower_ms": lower_ms,
            "tack_lower_ms_target_below": TARGET_LOWER_MS,
            "tack_lower_met": lower_ms < TARGET_LOWER_MS,
            "import_plus_cold_tack_over_numba": with_import,
        },
        "triangles_equal": med["tack"]["ntris"] == med["numba"]["ntris"],
        "raw": raw,
    }


def _ms(x):
    return "-" if x is None else f"{x * 1e3:9.1f} ms"


def report(res, file=None):
    out = file or sys.stdout
    t, n = res["medians"]["tack"], res["medians"]["numba"]
    r = res["ratios"]

    def p(s=""):
        print(s, file=out)

    p(f"Cold first call, contour({res['field']}, level), fresh process per run; "
      f"median of {res['repeat']} (+{res['warmup']} discarded warm-up), "
      f"Python {res['python']}, {res['cpus']} CPUs")
    p()
    p(f"{'':34}{'Tack':>12}{'Numba':>14}")
    p(f"{'numpy import (not counted)':34}{_ms(t.get('numpy_import_s')):>12}"
      f"{_ms(n.get('numpy_import_s')):>14}")
    p(f"{'library import':34}{_ms(t.get('import_s')):>12}{_ms(n.get('import_s')):>14}")
    p(f"{'peer module import':34}{'-':>12}{_ms(n.get('peer_import_s')):>14}")
    p(f"{'FIRST CALL (cold, compiles)':34}{_ms(t['first_call_s']):>12}"
      f"{_ms(n['first_call_s']):>14}")
    p(f"{'second call (warm)':34}{_ms(t['second_call_s']):>12}{_ms(n['second_call_s']):>14}")
    p(f"{'process wall (spawn to exit)':34}{_ms(t['process_wall_s']):>12}"
      f"{_ms(n['process_wall_s']):>14}")
    tv, nv = f"{t['ntris']} / {t['nverts']}", f"{n['ntris']} / {n['nverts']}"
    p(f"{'triangles / vertices':34}{tv:>12}{nv:>14}   "
      f"{'OK' if res['triangles_equal'] else 'MISMATCH'}")
    p()
    p("Tack first-call stages (median per stage):")
    p(f"  {'stage':12}" + "".join(f"{k[:14]:>16}" for k in KERNELS) + f"{'sum':>12}")
    st = t["stages"]
    pad = " " * (16 * len(KERNELS))
    for s in STAGES:
        p(f"  {s:12}" + "".join(f"{_ms(st[k][s]):>16}" for k in KERNELS)
          + f"{_ms(t['stage_sum'][s]):>12}")
    p(f"  {'all stages':12}{pad}{_ms(t['stages_total_s']):>12}")
    p(f"  {'outside':12}{pad}{_ms(t['outside_stages_s']):>12}"
      "   (first call minus stages: typing args, allocation, ...)")
    p()
    p("Ratios (same run):")
    p(f"  Tack cold / Numba cold          {r['tack_cold_over_numba_cold']:7.2f}     "
      f"target <= {TARGET_COLD_RATIO}     "
      f"{'met' if r['tack_cold_over_numba_cold_met'] else 'NOT met'}")
    p(f"  Tack lowering (lower, summed) {r['tack_lower_ms']:7.1f} ms  "
      f"target < {TARGET_LOWER_MS:.0f} ms  {'met' if r['tack_lower_met'] else 'NOT met'}")
    p(f"  (import + cold) Tack / Numba    {r['import_plus_cold_tack_over_numba']:7.2f}     "
      "(for reference; no target)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="fresh-process runs per contestant (median)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="discarded runs first, to warm the OS file cache (default 1)")
    ap.add_argument("--size", type=int, default=21, help="sphere(N) field size (default 21)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    res = measure(repeat=args.repeat, warmup=max(args.warmup, 0), size=args.size)
    return finish(res, report, args.json)


if __name__ == "__main__":
    main()
