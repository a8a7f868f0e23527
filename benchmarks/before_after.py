"""Before and after a change: two Tack checkouts side by side, in one run.

    git worktree add /tmp/tack-base <revision>
    python benchmarks/before_after.py --base /tmp/tack-base

For each checkout, in fresh processes that alternate base and this checkout
so that both see the same load:

* **cold**: ``_cold_runner.py tack N`` with the cache off: the first call
  compiles (front end, specializer, codegen, LLVM);
* **warm**: ``_cache_runner.py tack N`` from a cache directory of that
  checkout's own, filled by one process first: ``import tack`` and the first
  call, which loads both contour kernels from the cache.  Tack runs as
  installed (its package copied out of the checkout, as a wheel lays it out,
  and found first through ``TACK_BENCH_SITE``): a checkout's Tack also hashes
  its own sources on a first call, which an installed Tack never does and
  which grows with the number of files.

Each checkout runs its own runner scripts, so a change that renames modules
is timed as it stands.  Prints the medians (first call wall time, ``import
tack``, and the CPU time of the whole process, user + system, from
``getrusage``: much less sensitive than the wall time to other jobs on a
shared machine) and the ratios this/base.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(root: str, size: int, runner: str, env_extra: dict) -> dict:
    """One process of ``root``'s ``runner`` -> its JSON report plus ``cpu_ms`` (whole process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_NUM_THREADS="1", PYTHONPATH=root, **env_extra)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, os.path.join(root, "benchmarks", runner), "tack",
                           str(size)], env=env, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{root}: {runner} failed:\n{proc.stderr[-2000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["cpu_ms"] = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return report


def cases(root: str, scratch: str) -> dict:
    """case name -> (runner, environment) for one checkout; its package installed under ``scratch``."""
    site = os.path.join(scratch, "site")
    shutil.copytree(os.path.join(root, "tack"), os.path.join(site, "tack"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(site, quiet=1)   # as pip does at install, whatever PYTHONDONTWRITEBYTECODE says
    return {"cold": ("_cold_runner.py", {"TACK_CACHE": "off"}),
            "warm": ("_cache_runner.py", {"TACK_CACHE_DIR": os.path.join(scratch, "cache"),
                                          "TACK_BENCH_SITE": site})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the other checkout (e.g. a git worktree)")
    ap.add_argument("--runs", type=int, default=9, help="processes per checkout and case (default 9)")
    ap.add_argument("--size", type=int, default=21, help="sphere(N) field size (default 21)")
    args = ap.parse_args(argv)
    roots = {"base": os.path.abspath(args.base), "this": HERE}
    scratch = tempfile.mkdtemp(prefix="tack-before-after-")
    try:
        plan = {name: cases(root, os.path.join(scratch, name)) for name, root in roots.items()}
        for name, root in roots.items():            # fill each warm cache; warm the OS file cache
            runner, env = plan[name]["warm"]
            for _ in range(2):                      # the second writes the installed copy's .pyc
                run_once(root, args.size, runner, env)
        runs = {(name, case): [] for name in roots for case in ("cold", "warm")}
        for _ in range(args.runs):
            for case in ("cold", "warm"):
                for name, root in roots.items():
                    runner, env = plan[name][case]
                    r = run_once(root, args.size, runner, env)
                    if case == "warm" and r["compiled"]:
                        raise SystemExit(f"{root}: the warm process compiled {r['compiled']}")
                    runs[(name, case)].append(r)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def med(name, case, field, scale=1000.0):
        return statistics.median(r[field] * scale for r in runs[(name, case)])

    print(f"sphere({args.size}), 1 thread, {args.runs} alternating processes per checkout and case "
          "(medians)")
    print(f"  {'':<12}{'first call':>12}{'import tack':>13}{'process CPU':>13}")
    rows = {}
    for case in ("cold", "warm"):
        for name in roots:
            row = (med(name, case, "first_call_s"), med(name, case, "import_s"),
                   med(name, case, "cpu_ms", 1.0))
            rows[(name, case)] = row
            print(f"  {case + ' ' + name:<12}{row[0]:>9.2f} ms{row[1]:>10.2f} ms{row[2]:>10.1f} ms"
                  f"   {roots[name]}")
        ratio = [t / b for t, b in zip(rows[("this", case)], rows[("base", case)])]
        print(f"  {case + ' this/base':<12}{ratio[0]:>11.2f}x{ratio[1]:>12.2f}x{ratio[2]:>12.2f}x"
              "   target: equal within noise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
