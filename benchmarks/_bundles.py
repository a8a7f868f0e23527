"""Bundles of a chosen size, for the benchmarks that time bundle mode against the bundle's size.

``make_bundle(cache_dir, kernels)`` packs the real entries a run left in ``cache_dir`` (prime it
first: one process with ``TACK_CACHE=write``) together with synthetic kernels, one lowered and
one variant entry each, sized like the real ones, until the bundle holds ``kernels`` kernels.
It writes the bundle where a bundle-mode process of this host looks (``bundle-<machine>-<target>``
in ``cache_dir``) and returns what it wrote.  The synthetic entries are valid entries under
random keys: no lookup ever asks for them, they only make the bundle big, as a job's many
kernels would.  3,000 kernels take about a second to make.

``measure_first_call(tmp, site, counts, runs=9, size=21)`` is the case ``deployed_warm.py``
runs: bundle mode's first call for each count, in fresh processes of an installed copy.

Run as a script, it measures bundle mode's first call of the 21^3 contour against the bundle's
size, in fresh processes, for the Tack checkouts named (default: this one)::

    python benchmarks/_bundles.py [--kernels 10,1000,3000] [--runs 9] [--tack DIR ...]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_bundle(cache_dir: str, kernels: int, version: str | None = None, seed: int = 0,
                lowered_bytes: int = 1800, variant_bytes: int = 3000) -> dict:
    """Write this host's bundle in ``cache_dir``: its real entries plus synthetic kernels, up to
    ``kernels`` kernels (variants) in all. ``version``: the Tack version directory to pack (the
    one the processes that read it run; default: the only one in ``cache_dir``).
    ``lowered_bytes``, ``variant_bytes``: each synthetic entry's payload (the defaults make
    3,000 kernels about 15 MB, as the 3,000 small kernels of issue 21 took).
    -> {"path", "kernels", "entries", "bytes", "version"}."""
    from tack.cache import bundle, bundle_write, entry

    if version is None:
        found = [d for d in os.listdir(cache_dir) if os.path.isdir(os.path.join(cache_dir, d))]
        if len(found) != 1:
            raise ValueError(f"{cache_dir} holds {len(found)} version directories; name one")
        version = found[0]
    lowered, variants = bundle_write.collect(os.path.join(cache_dir, version))
    if len(variants) != 1:
        raise ValueError(f"{cache_dir} holds variants of {len(variants)} targets; prime one")
    (target_key, real), = variants.items()
    if kernels < len(real):
        raise ValueError(f"{kernels} kernels asked, the primed cache has {len(real)} already")
    rng = random.Random(seed)
    out = list(lowered) + [(k, key, d) for k, key, d, _ in real]
    for i in range(kernels - len(real)):
        lkey, vkey = rng.randbytes(32).hex(), rng.randbytes(32).hex()
        name = f"synthetic_{i}"
        out.append((entry.KIND_LOWERED, lkey, entry.encode(
            entry.KIND_LOWERED, lkey, {"kernel": name, "dep": [[name, "tack", "module", "tack"]]},
            rng.randbytes(lowered_bytes))))
        out.append((entry.KIND_VARIANT, vkey, entry.encode(
            entry.KIND_VARIANT, vkey, {"kernel": name, "lowered": lkey, "entry": f"tack_{vkey}_entry",
                                       "target_key": target_key, "site": []},
            rng.randbytes(variant_bytes))))
    first = dict(real[0][3], target_key=target_key)
    header = dict(bundle_write.header_for(first, arch=first.get("arch", "")), tack=version)
    path = os.path.join(cache_dir, bundle.bundle_name(target_key, header["machine"]))
    size = bundle_write.write(path, out, header)
    return {"path": path, "kernels": kernels, "entries": len(out), "bytes": size, "version": version}


# -- the measurement (python benchmarks/_bundles.py) ---------------------------------------

def _child_env(checkout, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["PYTHONPATH"] = checkout
    env.update(extra)
    return env


def _runner(checkout, site, cache_dir, mode):
    sys.path.insert(0, HERE)
    from _common import run_json
    script = os.path.join(checkout, "benchmarks", "_cache_runner.py")
    return run_json(script, ["tack", 21], _child_env(checkout, TACK_CACHE=mode, TACK_CACHE_DIR=cache_dir,
                                                     TACK_BENCH_SITE=site))


def _installed(checkout, site):
    """``checkout``'s package copied to ``site`` and byte-compiled, as an install lays it out
    (a checkout's own modules may lack their .pyc: PYTHONDONTWRITEBYTECODE, stale files)."""
    import compileall
    import shutil
    shutil.copytree(os.path.join(checkout, "tack"), os.path.join(site, "tack"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(site, quiet=1)
    return site


def _make_in(checkout, cache_dir, kernels):
    """make_bundle run by ``checkout``'s own Tack (its version id names the entries)."""
    import json
    import subprocess
    code = (f"import json, sys; sys.path.insert(0, {HERE!r}); from _bundles import make_bundle; "
            f"print(json.dumps(make_bundle({cache_dir!r}, {kernels})))")
    # cwd: ``python -c`` puts its working directory first on sys.path, ahead of PYTHONPATH, so
    # run from another checkout it would pack with that one's Tack (and its bundle format).
    proc = subprocess.run([sys.executable, "-c", code], env=_child_env(checkout), check=True,
                          capture_output=True, text=True, cwd=checkout)
    return json.loads(proc.stdout)


def measure_first_call(tmp, site, counts=(10, 3000), runs=9, size=21):
    """Bundle mode's first contour call against the bundle's size, for ``deployed_warm.py``:
    ``site``, a directory holding an installed copy of Tack (``site/tack``, byte-compiled);
    ``tmp``, where to make a cache directory per count. For each count: one priming process
    (``TACK_CACHE=write``), ``make_bundle``, one process to warm the page cache, then ``runs``
    fresh processes with ``TACK_CACHE=bundle``. -> {"rows": [{"kernels", "bytes",
    "bytes_read", "first_call": (min, median, max) seconds}]}; RuntimeError if a process did
    not load both kernels from the bundle."""
    sys.path.insert(0, HERE)
    from _common import run_json
    script = os.path.join(ROOT, "benchmarks", "_cache_runner.py")
    rows = []
    for n in counts:
        d = os.path.join(tmp, f"bundle-growth-{n}")
        os.mkdir(d, 0o700)
        env = _child_env(ROOT, TACK_CACHE_DIR=d, TACK_BENCH_SITE=site)
        run_json(script, ["tack", size], dict(env, TACK_CACHE="write"))
        made = _make_in(site, d, n)
        run_json(script, ["tack", size], dict(env, TACK_CACHE="bundle"))
        times, got = [], None
        for _ in range(runs):
            got = run_json(script, ["tack", size], dict(env, TACK_CACHE="bundle"))
            if got["cache_stats"]["hits"]["variant"] != 2:
                raise RuntimeError(f"the bundle of {n} kernels did not serve both: {got['cache_stats']}")
            times.append(got["first_call_s"])
        rows.append({"kernels": n, "bytes": made["bytes"], "bytes_read": got["cache_stats"]["bytes_read"],
                     "first_call": (min(times), statistics.median(times), max(times))})
    return {"rows": rows}


def measure(checkouts, counts=(10, 1000, 3000), runs=9):
    """-> {checkout: {kernels: {"min", "median", "max" (ms), "bytes", "bytes_read"}}}."""
    res = {}
    with tempfile.TemporaryDirectory(prefix="tack-bundle-size-") as tmp:
        for c, checkout in enumerate(checkouts):
            res[checkout] = {}
            site = _installed(checkout, os.path.join(tmp, f"site-{c}"))
            for n in counts:
                d = os.path.join(tmp, f"{c}-{n}")
                os.mkdir(d, 0o700)
                _runner(checkout, site, d, "write")                    # prime: classify and emit
                made = _make_in(checkout, d, n)
                _runner(checkout, site, d, "bundle")             # warm the page cache; not counted
                times, got = [], None
                for _ in range(runs):
                    got = _runner(checkout, site, d, "bundle")
                    if not got["tack_file"].startswith(site):
                        raise RuntimeError(f"not the installed copy: {got['tack_file']}")
                    if got["cache_stats"]["hits"]["variant"] != 2:
                        raise RuntimeError(f"bundle of {n} did not serve both kernels: {got['cache_stats']}")
                    times.append(got["first_call_s"] * 1e3)
                res[checkout][n] = {"min": min(times), "median": statistics.median(times),
                                    "max": max(times), "bytes": made["bytes"],
                                    "bytes_read": got["cache_stats"]["bytes_read"]}
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default="10,1000,3000")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--tack", action="append", help="a Tack checkout to measure (repeatable)")
    a = ap.parse_args(argv)
    counts = tuple(int(x) for x in a.kernels.split(","))
    res = measure(a.tack or [ROOT], counts, a.runs)
    for checkout, rows in res.items():
        print(f"{checkout}: bundle mode, first call of the 21^3 contour (ms, {a.runs} processes)")
        print(f"{'kernels':>8}{'bundle MB':>11}{'read KB':>10}{'min':>8}{'median':>8}{'max':>8}")
        for n, r in rows.items():
            print(f"{n:>8}{r['bytes'] / 1e6:>11.1f}{r['bytes_read'] / 1e3:>10.1f}"
                  f"{r['min']:>8.2f}{r['median']:>8.2f}{r['max']:>8.2f}")
        lo, hi = rows[min(rows)], rows[max(rows)]
        print(f"  {max(rows)} over {min(rows)} kernels: {hi['median'] / lo['median']:.2f}x (target 1.5x)")


if __name__ == "__main__":
    main()
