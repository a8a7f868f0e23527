"""What the benchmark scripts share: running one measured child process, medians, counts
given on the command line, and printing the results."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_json(script, args, env, timeout=None):
    """Run ``python script args...`` from the project root; -> the JSON object on the last line
    of its stdout, plus ``process_wall_s`` (spawn to exit).  RuntimeError with its stderr if it
    fails."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, script, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(script)} {' '.join(map(str, args))} failed "
                           f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_wall_s"] = wall
    if proc.stderr.strip():
        res["stderr"] = proc.stderr.strip()[-2000:]
    return res


def median_of(runs, key):
    """Median of ``key`` over the runs that have it; None if none does."""
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def counts(ap, text, flag, example, minimum):
    """A comma-separated list of integers given as ``flag``, each at least ``minimum``;
    exits with a usage error naming the flag otherwise."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        ap.error(f"{flag} takes comma-separated integers, e.g. {example}")
    if not values or min(values) < minimum:
        ap.error(f"{flag} needs at least one value, each at least {minimum}")
    return values


def finish(res, report, as_json, **json_options):
    """Print the results, as JSON or as ``report`` writes them, and return them."""
    if as_json:
        print(json.dumps(res, indent=2, **json_options))
    else:
        report(res)
    return res
