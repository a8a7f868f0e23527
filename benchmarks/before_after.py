"""Cold first call before and after a change: two Tack checkouts side by side, in one run.

    git worktree add /tmp/tack-base <revision>
    python benchmarks/before_after.py --base /tmp/tack-base

Runs ``_cold_runner.py tack N`` of each checkout in fresh processes with the
cache off, alternating base and this checkout so that both see the same load,
and prints the median first-call time (wall) and the median CPU time of the
whole process (user + system, from ``getrusage``: much less sensitive than the
wall time to other jobs on a shared machine), with the ratios this/base.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(root: str, size: int) -> tuple[float, float]:
    """-> (first call wall ms, whole process CPU ms) of one cold process of checkout ``root``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE="off", TACK_NUM_THREADS="1", PYTHONPATH=root)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "_cold_runner.py"),
                           "tack", str(size)], env=env, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{root}: the cold runner failed:\n{proc.stderr[-2000:]}")
    first = json.loads(proc.stdout.strip().splitlines()[-1])["first_call_s"] * 1000
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return first, cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the other checkout (e.g. a git worktree)")
    ap.add_argument("--runs", type=int, default=9, help="processes per checkout (default 9)")
    ap.add_argument("--size", type=int, default=21, help="sphere(N) field size (default 21)")
    args = ap.parse_args(argv)
    roots = {"base": os.path.abspath(args.base), "this": HERE}
    runs = {name: [] for name in roots}
    run_once(HERE, args.size)                       # warm the OS file cache, not counted
    for _ in range(args.runs):
        for name, root in roots.items():
            runs[name].append(run_once(root, args.size))
    med = {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
           for name, rs in runs.items()}
    print(f"Cold first call of sphere({args.size}), cache off, 1 thread, {args.runs} alternating "
          "processes each (medians)")
    print(f"  {'':<8}{'first call (wall)':>20}{'process CPU':>16}")
    for name in roots:
        print(f"  {name:<8}{med[name][0]:>17.1f} ms{med[name][1]:>13.1f} ms   {roots[name]}")
    wall, cpu = (med["this"][i] / med["base"][i] for i in (0, 1))
    print(f"  this/base{wall:>17.2f}x{cpu:>15.2f}x   target: first call at most 1.10x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
