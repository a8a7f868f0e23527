"""Steady state: Tack's contour once compiled, vs Numba and scikit-image, in one process.

    python benchmarks/steady_state.py [--small 21] [--calls 2000] [--big 256] [--runs 5]
                                      [--warmup 1] [--threads T] [--json]

1. Small field, ``sphere(small)``: after the first (compiling) call, the second
   call alone, then the median of ``--calls`` further calls, for Tack's
   ``contour`` and the Numba peer ``contour_numba``.
2. Big field, ``sphere(big)``: Tack on all cores (``tack.config.num_threads``,
   default every CPU this process may use; ``--threads`` to override) vs
   ``skimage.measure.marching_cubes(field, level, method="lorensen")`` vs the
   Numba peer (both single-threaded by construction): ``--warmup`` calls each
   (Tack compiles a variant for the new shape here), then the median of
   ``--runs`` calls.

For each field the triangle (and vertex) counts of Tack are checked against
scikit-image's and printed as OK / MISMATCH.

Targets (printed next to the figures, never asserted):

* Tack small-field steady-state call <= 0.2 ms
* skimage / Tack on the big field >= 2x
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (ROOT, os.path.join(ROOT, "tests", "kernels"), os.path.join(HERE, "peers")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _common import finish  # noqa: E402  (benchmarks/ is on sys.path)

TARGET_SMALL_MS = 0.2        # Tack steady-state small call, at most
TARGET_BIG_SPEEDUP = 2.0     # skimage / Tack on the big field, at least


def _time_call(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def _samples(fn, args, n):
    gc.collect()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return ts


def _skimage(field, level):
    from skimage.measure import marching_cubes
    verts, faces, _normals, _values = marching_cubes(field, level, method="lorensen")
    return verts, faces


def _counts(out):
    verts, faces = out
    return int(len(verts)), int(len(faces))


def _check(tack_out, ski_out):
    (tv, tf), (sv, sf) = _counts(tack_out), _counts(ski_out)
    return {"tack_tris": tf, "skimage_tris": sf, "tack_verts": tv, "skimage_verts": sv,
            "triangles_ok": tf == sf, "vertices_ok": tv == sv}


def measure(small=21, calls=2000, big=256, runs=5, warmup=1, threads=None, log=None):
    import fields
    import numba
    import skimage

    import tack
    from numba_contour import contour_numba
    from tack.kernels.contour import contour

    if threads is not None:
        tack.config.num_threads = threads
    level = fields.SPHERE_LEVEL
    res = {"benchmark": "steady_state", "python": sys.version.split()[0],
           "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
           "tack_threads": tack.config.num_threads, "numba_version": numba.__version__,
           "skimage_version": skimage.__version__, "level": level}

    def say(msg):
        if log:
            print(msg, file=log, flush=True)

    # --- small field ---------------------------------------------------------------
    say(f"[small] sphere({small}): {calls} calls each ...")
    f_small = fields.sphere(small)
    small_res = {"field": f"sphere({small})", "calls": calls}
    for name, fn in (("tack", contour), ("numba", contour_numba)):
        first, _ = _time_call(fn, f_small, level)
        second, out = _time_call(fn, f_small, level)
        ts = _samples(fn, (f_small, level), calls)
        small_res[name] = {"first_s": first, "second_s": second,
                           "median_s": statistics.median(ts), "min_s": min(ts),
                           "p90_s": statistics.quantiles(ts, n=10)[-1] if len(ts) >= 2 else ts[0],
                           "tris": _counts(out)[1]}
    small_res["check"] = _check(contour(f_small, level), _skimage(f_small, level))
    small_res["numba_over_tack"] = small_res["numba"]["median_s"] / small_res["tack"]["median_s"]
    small_res["tack_ms_met"] = small_res["tack"]["median_s"] * 1e3 <= TARGET_SMALL_MS
    res["small"] = small_res

    # --- big field -----------------------------------------------------------------
    say(f"[big] building sphere({big}) ...")
    f_big = fields.sphere(big)
    big_res = {"field": f"sphere({big})", "runs": runs, "warmup": warmup}
    outs = {}
    for name, fn in (("tack", contour), ("skimage", _skimage), ("numba", contour_numba)):
        say(f"[big] {name}: {warmup} warm-up + {runs} runs ...")
        warm = []
        for _ in range(warmup):
            t, outs[name] = _time_call(fn, f_big, level)
            warm.append(t)
        gc.collect()
        ts = []
        for _ in range(runs):
            t, outs[name] = _time_call(fn, f_big, level)
            ts.append(t)
        big_res[name] = {"median_s": statistics.median(ts), "min_s": min(ts), "runs_s": ts,
                         "warmup_s": warm, "tris": _counts(outs[name])[1]}
    big_res["check"] = _check(outs["tack"], outs["skimage"])
    big_res["skimage_over_tack"] = big_res["skimage"]["median_s"] / big_res["tack"]["median_s"]
    big_res["numba_over_tack"] = big_res["numba"]["median_s"] / big_res["tack"]["median_s"]
    big_res["speedup_met"] = big_res["skimage_over_tack"] >= TARGET_BIG_SPEEDUP
    res["big"] = big_res
    return res


def _ok(check):
    tri = "OK" if check["triangles_ok"] else "MISMATCH"
    vert = "OK" if check["vertices_ok"] else "MISMATCH"
    return (f"triangles Tack {check['tack_tris']} vs skimage {check['skimage_tris']}: {tri}; "
            f"vertices {check['tack_verts']} vs {check['skimage_verts']}: {vert}")


def report(res, file=None):
    out = file or sys.stdout

    def p(s=""):
        print(s, file=out)

    s, b = res["small"], res["big"]
    p(f"Steady state, one process; Python {res['python']}, {res['cpus']} CPUs, "
      f"Tack threads {res['tack_threads']}, numba {res['numba_version']}, "
      f"scikit-image {res['skimage_version']}")
    p()
    p(f"Small field {s['field']}, level {res['level']}: median of {s['calls']} calls after the "
      "first two")
    p(f"  {'':10}{'first call':>14}{'second call':>14}{'median':>12}{'min':>12}{'p90':>12}")
    for name in ("tack", "numba"):
        r = s[name]
        p(f"  {name:10}{r['first_s'] * 1e3:11.1f} ms{r['second_s'] * 1e3:11.3f} ms"
          f"{r['median_s'] * 1e3:9.3f} ms{r['min_s'] * 1e3:9.3f} ms{r['p90_s'] * 1e3:9.3f} ms")
    p(f"  check: {_ok(s['check'])}")
    p()
    p(f"Big field {b['field']}: median of {b['runs']} runs after {b['warmup']} warm-up; "
      f"Tack on {res['tack_threads']} threads, skimage and Numba single-threaded")
    p(f"  {'':10}{'median':>12}{'min':>12}{'triangles':>12}")
    for name in ("tack", "skimage", "numba"):
        r = b[name]
        p(f"  {name:10}{r['median_s'] * 1e3:9.1f} ms{r['min_s'] * 1e3:9.1f} ms{r['tris']:>12}")
    p(f"  check: {_ok(b['check'])}")
    p()
    p("Ratios (same run):")
    rows = [
        ("Tack small steady-state call", f"{s['tack']['median_s'] * 1e3:7.3f} ms",
         f"target <= {TARGET_SMALL_MS} ms  {'met' if s['tack_ms_met'] else 'NOT met'}"),
        (f"Numba / Tack, {s['field']}", f"{s['numba_over_tack']:7.2f}x", "(for reference; no target)"),
        (f"skimage / Tack, {b['field']}", f"{b['skimage_over_tack']:7.2f}x",
         f"target >= {TARGET_BIG_SPEEDUP:.0f}x  {'met' if b['speedup_met'] else 'NOT met'}"),
        (f"Numba / Tack, {b['field']}", f"{b['numba_over_tack']:7.2f}x", "(for reference; no target)"),
    ]
    for label, value, note in rows:
        p(f"  {label:32}{value:>11}   {note}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=21, help="small field size (default 21)")
    ap.add_argument("--calls", type=int, default=2000, help="timed small-field calls (default 2000)")
    ap.add_argument("--big", type=int, default=256, help="big field size (default 256)")
    ap.add_argument("--runs", type=int, default=5, help="timed big-field runs each (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed big-field runs each (default 1)")
    ap.add_argument("--threads", type=int, default=None,
                    help="Tack threads (default: tack.config.num_threads, i.e. all cores)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.runs < 1 or args.small < 2 or args.big < 2:
        ap.error("--calls and --runs must be >= 1, --small and --big >= 2")
    res = measure(small=args.small, calls=args.calls, big=args.big, runs=args.runs,
                  warmup=max(args.warmup, 0), threads=args.threads,
                  log=None if args.json else sys.stderr)
    return finish(res, report, args.json)


if __name__ == "__main__":
    main()
