"""A literal given to a device function, in float32 kernels: weak there (single precision) against
the float64 parameter it was before, side by side in one process.

    python benchmarks/literal_args.py [--n 4000000] [--runs 15] [--threads 1]

Two kernels over float32 arrays, each ``out[i] = (x[i] * (1 - t) + y[i] * t) * 2.0 + x[i] * (1 / 3)``
computed in a device function given ``t``:

* **weak**: ``t`` is the literal ``0.25``, which takes ``x``'s type inside the function (as the same
  function run as Python on NumPy scalars does), and ``1 / 3`` is one float literal: float32
  arithmetic throughout, which also builds for Metal and GPUs without float64;
* **float64**: ``t`` is ``tack.float64(0.25)``, a float64 parameter, as every literal argument
  of a device function was before: the function computes in double precision and the result
  is rounded back to float32.

Prints the median time of ``--runs`` launches of each (after one compiling launch), their
ratio, and whether each result equals NumPy's computation of the same expression.  No target:
on a CPU the gain is SIMD width (twice the float32 lanes); on most GPUs it is the double rate
(1/2 to 1/64 of the single rate), which this machine cannot show.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import tack  # noqa: E402


@tack.func
def mixed(a, b, t):
    """``lerp`` by its other formula, then the rest of the kernel's expression."""
    return (a * (1 - t) + b * t) * 2.0 + a * (1 / 3)


@tack.kernel
def weak(x, y, out):
    out[tack.tid()] = mixed(x[tack.tid()], y[tack.tid()], 0.25)


@tack.kernel
def double(x, y, out):
    out[tack.tid()] = mixed(x[tack.tid()], y[tack.tid()], tack.float64(0.25))


def _median_launch(kernel, args, n, runs):
    tack.launch(kernel, n, args)                    # compiles (or loads from the cache)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        tack.launch(kernel, n, args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    tack.config.num_threads = args.threads
    rng = np.random.default_rng(0)
    x = rng.random(args.n, dtype=np.float32)
    y = rng.random(args.n, dtype=np.float32)
    outs = {name: np.empty(args.n, np.float32) for name in ("weak", "float64")}
    got = {}
    for name, kernel in (("weak", weak), ("float64", double)):
        got[name] = _median_launch(kernel, (x, y, outs[name]), args.n, args.runs)
    with np.errstate(all="ignore"):
        want = (x * (1 - np.float32(0.25)) + y * np.float32(0.25)) * 2.0 + x * np.float32(1 / 3)
    print(f"literal argument of a device function, {args.n:,} float32 elements, "
          f"{args.threads} thread(s), median of {args.runs} launches")
    print(f"  {'t':<24} {'ms':>8}  result")
    for name in ("weak", "float64"):
        same = ("= NumPy's float32 result" if np.array_equal(outs[name], want)
                else f"differs from NumPy's float32 result in {np.count_nonzero(outs[name] != want):,}")
        label = "0.25 (weak: float32)" if name == "weak" else "tack.float64(0.25)"
        print(f"  {label:<24} {got[name] * 1e3:8.3f}  {same}")
    print(f"  float64 / weak: {got['float64'] / got['weak']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
