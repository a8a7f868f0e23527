"""What ``load_bundle(comm)`` costs a node in memory: one copy of the bundle per node (MPI-3
shared memory, the default) against a copy per rank (``share=False``), side by side in one run.

For each bundle size (``--kernels``, default 300 and 3,000 kernels: about 1.6 and 16 MB) it primes
a private cache with the 21³ contour and packs a bundle of that many kernels (the contour's real
entries and synthetic ones sized like them: ``_bundles.make_bundle``), then runs ``mpiexec -n N``
jobs (``_bundle_memory_rank.py``) that call ``load_bundle`` and then the contour, ``--runs``
times each way, alternating.  Each rank reports how much its Rss and its Pss (proportional set
size: a page shared by k processes counts 1/k in each) grew across ``load_bundle``; the node's
memory is the ranks' Pss summed.  Every rank's contour is checked and must come from the bundle
(nothing compiled).

    python benchmarks/bundle_memory.py [--ranks 4] [--kernels 300,3000] [--runs 3]

Needs ``mpiexec`` and mpi4py (and Linux's ``/proc/self/smaps_rollup``).  What load_bundle
costs every rank whatever the bundle (the modules it imports, MPI's buffers) is the same both
ways; what grows with the bundle is the copies.  Target: the node holds one copy, whatever the
number of ranks: between the two sizes its memory grows by at most 1.25x what the bundle grew.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def _env(cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p),
               TACK_CACHE_DIR=cache, OPENBLAS_NUM_THREADS="1", TACK_NUM_THREADS="1")
    return env


def prepare(tmp, kernels, size):
    """A private cache with the contour compiled and a bundle of ``kernels`` kernels packed."""
    from _bundles import make_bundle
    cache = os.path.join(tmp, "cache")
    os.mkdir(cache, 0o700)
    prime = ("import numpy as np; from tack.kernels.contour import contour; "
             f"x = np.linspace(-1, 1, {size}); "
             "f = np.sqrt(x[:, None, None]**2 + x[None, :, None]**2 + x[None, None, :]**2); "
             "contour(f, 0.5)")
    subprocess.run([sys.executable, "-c", prime], env=dict(_env(cache), TACK_CACHE="write"),
                   check=True, cwd=tmp)
    code = (f"import json, sys; sys.path.insert(0, {HERE!r}); from _bundles import make_bundle; "
            f"print(json.dumps(make_bundle({cache!r}, {kernels})))")
    made = subprocess.run([sys.executable, "-c", code], env=_env(cache), check=True,
                          capture_output=True, text=True, cwd=tmp)
    return cache, json.loads(made.stdout)


def job(cache, ranks, how, size, timeout=300):
    exe = shutil.which("mpiexec")
    proc = subprocess.run([exe, "-n", str(ranks), sys.executable,
                           os.path.join(HERE, "_bundle_memory_rank.py"), how, str(size)],
                          env=_env(cache), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"mpiexec failed ({how}): {proc.stderr[-2000:]}")
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    for r in rows:
        if not r["ok"] or r["compiled"] or not r["entries"]:
            raise RuntimeError(f"rank {r['rank']} ({how}) did not run the contour from the bundle: {r}")
    return rows


def measure(ranks=4, kernels=(300, 3000), runs=3, size=21):
    if not shutil.which("mpiexec"):
        raise SystemExit("bundle_memory: mpiexec is not installed (pip install mpich mpi4py)")
    out = {"ranks": ranks, "sizes": []}
    with tempfile.TemporaryDirectory(prefix="tack-bundle-memory-") as tmp:
        for k in kernels:
            d = os.path.join(tmp, str(k))
            os.mkdir(d)
            cache, made = prepare(d, k, size)
            row = {"kernels": k, "bytes": made["bytes"], "share": [], "copies": []}
            for _ in range(runs):
                for how in ("share", "copies"):
                    row[how].append(job(cache, ranks, how, size))
            out["sizes"].append(row)
    return out


def summary(rows_per_run):
    node_pss = [sum(r["pss_kib"] for r in rows) * 1024 for rows in rows_per_run]
    rss = [statistics.median(r["rss_kib"] for r in rows if r["rank"]) * 1024 for rows in rows_per_run]
    secs = [max(r["seconds"] for r in rows) for rows in rows_per_run]
    return {"node_pss": statistics.median(node_pss), "rank_rss": statistics.median(rss),
            "seconds": statistics.median(secs)}


def report(res, file=None):
    def p(s=""):
        print(s, file=file or sys.stdout)
    mib = 1 << 20
    rows = [(r, summary(r["share"]), summary(r["copies"])) for r in res["sizes"]]
    p(f"load_bundle(comm) under mpiexec -n {res['ranks']} (one node); medians of "
      f"{len(res['sizes'][0]['share'])} jobs each way")
    p()
    p("| bundle | one copy per node: node (ranks' Pss) | a rank's Rss | load_bundle "
      "| a copy per rank: node | a rank's Rss | load_bundle | node, copies / one |")
    p("|---|---|---|---|---|---|---|---|")
    for r, sh, co in rows:
        p(f"| {r['kernels']} kernels, {r['bytes'] / mib:.1f} MiB | {sh['node_pss'] / mib:.1f} MiB | "
          f"{sh['rank_rss'] / mib:.1f} MiB | {sh['seconds'] * 1e3:.1f} ms | {co['node_pss'] / mib:.1f} MiB | "
          f"{co['rank_rss'] / mib:.1f} MiB | {co['seconds'] * 1e3:.1f} ms | "
          f"{co['node_pss'] / sh['node_pss']:.2f}x |")
    p()
    (small, sh0, co0), (big, sh1, co1) = rows[0], rows[-1]
    grew = big["bytes"] - small["bytes"]
    met = None
    if grew > 0:
        slope_share = (sh1["node_pss"] - sh0["node_pss"]) / grew
        slope_copies = (co1["node_pss"] - co0["node_pss"]) / grew
        met = slope_share <= 1.25
        p(f"node memory per byte the bundle grew ({small['kernels']} -> {big['kernels']} kernels): "
          f"one copy per node {slope_share:.2f}, a copy per rank {slope_copies:.2f} "
          f"({slope_copies / slope_share:.2f}x)")
        p(f"target: the node holds one copy (at most 1.25 bytes per byte of bundle): "
          f"{'met' if met else 'NOT met'} ({slope_share:.2f})")
    return met


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--kernels", default="300,3000", help="bundle sizes, in kernels (comma-separated)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    a = ap.parse_args(argv)
    try:
        kernels = [int(k) for k in a.kernels.split(",")]
    except ValueError:
        ap.error(f"--kernels {a.kernels!r}: give kernel counts separated by commas (300,3000)")
    if a.ranks < 2 or min(kernels) < 10 or a.runs < 1:
        ap.error("--ranks must be at least 2, each --kernels at least 10, --runs at least 1")
    res = measure(a.ranks, sorted(kernels), a.runs)
    report(res)
    if a.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
