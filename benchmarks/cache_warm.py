"""Warm start from the kernel cache: Tack's contour in a new process, cache off vs warm, vs peers.

    python benchmarks/cache_warm.py [--processes 10] [--hit-processes 5]
                                    [--entries 10,1000,10000] [--size 21] [--warmup 1]
                                    [--keep] [--json]

Every measurement runs in a fresh Python process (``benchmarks/_cache_runner.py``)
with PYTHONDONTWRITEBYTECODE removed from its environment, so imports use
``.pyc`` files as an installed package's would, and with cache directories
made for this run in a temporary directory (deleted at the end unless
``--keep``).  Figures are medians.

1. **Tack, cache off vs warm.**  ``contour(sphere(size), SPHERE_LEVEL)``, the
   first call of the process, from call to return: with ``TACK_CACHE=off``
   (compiles) and with the cache warm (a fresh ``TACK_CACHE_DIR`` primed by
   one process), ``--processes`` of each, alternating.  Also ``import numpy``,
   ``import tack`` right after it, and the process wall (spawn to exit).
   Each warm process reports whether any kernel compiled after all.
   Tack runs as users have it: an installed copy of the package (``tack/``
   copied into a site directory of this run, as a wheel installs it), whose
   version id is its release version.  A third column runs the source
   checkout itself, warm from its own cache directory: a checkout's version
   id also hashes each source file's size and mtime (a stat per file and a
   scandir per directory in every process), which a release skips.
2. **Peers, warm from their own disk caches, in the same run.**  Numba with
   ``cache=True`` (``peers/numba_contour_cached.py``, primed once in a fresh
   ``NUMBA_CACHE_DIR``), Warp on the CPU (``peers/warp_contour.py``, its kernel
   cache in a fresh ``WARP_CACHE_PATH``) and Taichi on the CPU
   (``peers/taichi_contour.py``, its offline cache in a fresh directory), where
   installed (``pip install numba warp-lang taichi``); ``--processes`` processes
   each, interleaved with Tack's.  Warp's ``wp.init()`` and Taichi's
   ``ti.init()`` are their documented start-up calls and are counted with the
   library import, as Tack's own start-up is counted in its first call.
   This script never installs a peer: one that is missing is reported as such.
3. **Cost of a hit against the size of the cache.**  For each count in
   ``--entries``: a fresh cache directory primed by one Tack process (the
   contour's real entries), then that many synthetic but valid entries
   (``tack.cache.entry.encode`` + ``write_atomic``, random keys, half lowered
   kernels, half variants) in this Tack version's directory; then
   ``--hit-processes`` warm processes per count, round-robin over the counts.

Targets (printed next to the figures, never asserted):

* Tack cold first call / warm first call >= 50x
* Tack warm first call <= 5 ms
* ``import tack`` adds at most 30 ms to ``import numpy``
* Tack warm first call / best peer warm first call <= 0.2
* Tack warm process wall / best peer warm process wall <= 0.5
* warm first call flat in the number of entries: largest count's median /
  smallest count's median <= 1.25
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNNER = os.path.join(HERE, "_cache_runner.py")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from _common import counts, finish, median_of, run_json  # noqa: E402  (benchmarks/ is on sys.path)

TARGET_COLD_OVER_WARM = 50.0     # at least
TARGET_WARM_MS = 5.0             # Tack warm first call, at most
TARGET_IMPORT_MS = 30.0          # import tack on top of import numpy, at most
TARGET_VS_PEER_CALL = 0.2        # Tack warm first call / best peer's, at most
TARGET_VS_PEER_WALL = 0.5        # Tack warm process wall / best peer's, at most
TARGET_FLAT = 1.25               # hit cost, most entries / fewest entries, at most

# Environment that would change what a process measures; the runs set their own.
_SCRUB = ("PYTHONDONTWRITEBYTECODE", "TACK_TIMING", "TACK_CACHE", "TACK_CACHE_DIR",
          "TACK_CACHE_SIZE", "TACK_CACHE_LOG", "TACK_CACHE_BUNDLES", "TACK_BENCH_SITE",
          "NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT", "WARP_CACHE_PATH", "TACK_BENCH_TAICHI_CACHE")

# Peers: (runner name, label, module looked for, variable naming its cache directory, how it caches).
PEERS = (("numba", "Numba CPU", "numba", "NUMBA_CACHE_DIR", "cache=True"),
         ("warp", "Warp CPU", "warp", "WARP_CACHE_PATH", "kernel cache; wp.init() counted with import"),
         ("taichi", "Taichi CPU", "taichi", "TACK_BENCH_TAICHI_CACHE",
          "offline cache; ti.init() counted with import"))

SYNTH_PAYLOAD = 8192             # bytes of object code / lowered IR per synthetic entry


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def _run(which, size, env_over):
    """One fresh process; its JSON plus ``process_wall_s`` (spawn to exit)."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(env_over)
    return run_json(RUNNER, (which, size), env)


def _summary(runs):
    keys = ("numpy_import_s", "import_s", "module_import_s", "first_call_s", "process_wall_s",
            "in_process_s", "cache_stage_s")
    out = {k: median_of(runs, k) for k in keys if median_of(runs, k) is not None}
    out["ntris"], out["nverts"] = runs[0]["ntris"], runs[0]["nverts"]
    out["runs"] = len(runs)
    out["runs_that_compiled"] = sum(1 for r in runs if r.get("compiled"))
    if "cache_stats" in runs[0]:
        out["load_seconds"] = statistics.median(r["cache_stats"]["load_seconds"] for r in runs)
    return out


CONTOUR_KERNELS = 2          # classify and emit: each a variant hit in a clean warm process


def _tack_warm_problems(run):
    """Why a warm Tack process was not a clean hit ([] if it was)."""
    why = []
    if run.get("compiled"):
        why.append(f"compiled {', '.join(run['compiled'])}")
    st = run.get("cache_stats", {})
    if st.get("hits", {}).get("variant") != CONTOUR_KERNELS:
        why.append(f"variant hits {st.get('hits')}, misses {st.get('misses')}")
    if st.get("damaged") or st.get("rejected"):
        why.append(f"damaged {st.get('damaged')}, rejected {st.get('rejected')}")
    if run.get("llvm_loaded"):
        why.append("llvmlite.binding (LLVM) was loaded")
    if run.get("stderr"):
        why.append(f"stderr: {run['stderr'][:300]!r}")
    return why


# -- synthetic entries ------------------------------------------------------------------------


def _private_dir(path):
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def fill_entries(version_dir, count, seed=0):
    """Write ``count`` synthetic, valid entries (random keys) into a version directory."""
    from tack.cache import entry, trust_write
    rng = random.Random(seed)
    made = set()
    for i in range(count):
        kind = entry.KIND_VARIANT if i % 2 else entry.KIND_LOWERED
        key = rng.randbytes(32).hex()
        path = entry.entry_path(version_dir, kind, key)
        fan = os.path.dirname(path)
        if fan not in made:
            _private_dir(os.path.dirname(fan))
            _private_dir(fan)
            made.add(fan)
        name = f"synthetic_{i}"
        meta = {"kernel": name, "dep": [[name, "tack", "module", "tack"]]}
        if kind == entry.KIND_VARIANT:
            meta.update({"entry": f"tack_{key}_entry", "lowered": rng.randbytes(32).hex(),
                         "arg": [["array(float32, (21, 21, 21))"], ["float64"]],
                         "target": "backend=cpu;synthetic", "site": []})
        trust_write.write_atomic(path, entry.encode(kind, key, meta, rng.randbytes(SYNTH_PAYLOAD)))


def _count_entries(version_dir):
    n = 0
    for _dirpath, _dirs, files in os.walk(version_dir):
        n += sum(1 for f in files if f.endswith((".tlk", ".tvar")))
    return n


# -- the measurement --------------------------------------------------------------------------


def _peer_status():
    return {name: "not installed" for name, _, mod, _, _ in PEERS if importlib.util.find_spec(mod) is None}


def measure(processes=10, hit_processes=5, entries=(10, 1000, 10000), size=21, warmup=1,
            keep=False):
    tmp = tempfile.mkdtemp(prefix="tack-cache-warm-")
    res = {"benchmark": "cache_warm", "field": f"sphere({size})", "processes": processes,
           "hit_processes": hit_processes, "warmup": warmup,
           "python": sys.version.split()[0],
           "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
           "temp_dir": tmp if keep else None}
    try:
        site = os.path.join(tmp, "site")          # Tack installed: the package, as a wheel lays it out
        shutil.copytree(os.path.join(ROOT, "tack"), os.path.join(site, "tack"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        compileall.compile_dir(site, quiet=1)     # as pip does at install, whatever PYTHONDONTWRITEBYTECODE says
        env_cold = {"TACK_CACHE": "off", "TACK_CACHE_DIR": os.path.join(tmp, "tack-off"),
                    "TACK_BENCH_SITE": site}
        env_warm = {"TACK_CACHE_DIR": os.path.join(tmp, "tack"), "TACK_BENCH_SITE": site}
        env_checkout = {"TACK_CACHE_DIR": os.path.join(tmp, "tack-checkout")}
        env_peer = {name: {var: os.path.join(tmp, name)} for name, _, _, var, _ in PEERS}

        # --- 1 and 2: prime, then alternate Tack cold, Tack warm, Numba warm ---------------
        peers = _peer_status()
        res["peers"] = peers
        _log("priming Tack's cache (one process: compile and store)")
        prime = _run("tack", size, env_warm)
        res["tack_version"] = prime["tack_version"]
        if not prime["tack_file"].startswith(site):
            raise RuntimeError(f"the installed copy was not the Tack imported: {prime['tack_file']}")
        _log("priming the checkout's own cache (one process)")
        prime_checkout = _run("tack", size, env_checkout)
        peer_prime, ran = {}, []
        for name, label, _, _, how in PEERS:
            if name in peers:
                continue
            _log(f"priming {label}'s cache (one process: cold compile and store)")
            try:
                peer_prime[name] = pr = _run(name, size, env_peer[name])
                peers[name] = f"{name} {pr.get(name + '_version')}, {how}"
                ran.append(name)
            except RuntimeError as e:
                peers[name] = f"failed: {str(e).strip().splitlines()[-1]}"
        for _ in range(warmup):                       # warms the OS file cache; discarded
            _run("tack", size, env_cold)
        raw = {"tack_cold": [], "tack_warm": [], "tack_warm_checkout": []}
        raw.update({f"{name}_warm": [] for name in ran})
        for i in range(processes):
            _log(f"run {i + 1}/{processes}: Tack cold, Tack warm, Tack warm (checkout)"
                 + "".join(f", {name} warm" for name in ran))
            raw["tack_cold"].append(_run("tack", size, env_cold))
            raw["tack_warm"].append(_run("tack", size, env_warm))
            raw["tack_warm_checkout"].append(_run("tack", size, env_checkout))
            for name in ran:
                raw[f"{name}_warm"].append(_run(name, size, env_peer[name]))

        # A checkout's warm process that saw another version id than the one before it (someone
        # edited Tack's sources meanwhile) missed because of that: it is set aside, not counted.
        # (The installed copy cannot change during the run; the check costs nothing there.)
        version, stale = prime["tack_version"], []
        for i, r in enumerate(raw["tack_warm"]):
            if r["tack_version"] != version:
                stale.append(i)
                version = r["tack_version"]
        version, stale_checkout = prime_checkout["tack_version"], []
        for i, r in enumerate(raw["tack_warm_checkout"]):
            if r["tack_version"] != version:
                stale_checkout.append(i)
                version = r["tack_version"]
        counted = dict(raw, tack_warm=[r for i, r in enumerate(raw["tack_warm"]) if i not in stale]
                       or raw["tack_warm"],
                       tack_warm_checkout=[r for i, r in enumerate(raw["tack_warm_checkout"])
                                           if i not in stale_checkout] or raw["tack_warm_checkout"])
        med = {k: _summary(v) for k, v in counted.items()}
        cold, warm = med["tack_cold"], med["tack_warm"]
        tack_all = raw["tack_cold"] + raw["tack_warm"]          # the installed copy's processes
        import_tack = median_of(tack_all, "import_s")
        numpy_import = median_of(tack_all, "numpy_import_s")
        ratios = {
            "cold_over_warm": cold["first_call_s"] / warm["first_call_s"],
            "warm_first_call_ms": warm["first_call_s"] * 1e3,
            "import_tack_ms": import_tack * 1e3,
            "import_numpy_ms": numpy_import * 1e3,
        }
        ratios["cold_over_warm_met"] = ratios["cold_over_warm"] >= TARGET_COLD_OVER_WARM
        ratios["warm_first_call_met"] = ratios["warm_first_call_ms"] <= TARGET_WARM_MS
        ratios["import_tack_met"] = ratios["import_tack_ms"] <= TARGET_IMPORT_MS
        problems = {i: p for i, p in ((i, _tack_warm_problems(r))
                                      for i, r in enumerate(raw["tack_warm"])) if p and i not in stale}
        problems.update({f"checkout {i}": p for i, p in ((i, _tack_warm_problems(r))
                                                         for i, r in enumerate(raw["tack_warm_checkout"]))
                         if p and i not in stale_checkout})
        peer_meds = {name: med[f"{name}_warm"] for name in ran}
        if peer_meds:
            best_call = min(peer_meds, key=lambda k: peer_meds[k]["first_call_s"])
            best_wall = min(peer_meds, key=lambda k: peer_meds[k]["process_wall_s"])
            ratios["vs_peer_call"] = warm["first_call_s"] / peer_meds[best_call]["first_call_s"]
            ratios["vs_peer_call_peer"] = best_call
            ratios["vs_peer_call_met"] = ratios["vs_peer_call"] <= TARGET_VS_PEER_CALL
            ratios["vs_peer_wall"] = warm["process_wall_s"] / peer_meds[best_wall]["process_wall_s"]
            ratios["vs_peer_wall_peer"] = best_wall
            ratios["vs_peer_wall_met"] = ratios["vs_peer_wall"] <= TARGET_VS_PEER_WALL

        res.update({
            "prime": {"tack": prime, "tack_checkout": prime_checkout, **peer_prime}, "peers_ran": ran,
            "medians": med, "ratios": ratios,
            "warm_problems": problems, "warm_stale": stale,
            "triangles_equal": len({m["ntris"] for m in med.values()}) == 1,
        })

        # --- 3: hit cost against the number of entries --------------------------------------
        fills = {}
        for count in entries:
            d = os.path.join(tmp, f"fill-{count}")
            env = {"TACK_CACHE_DIR": d, "TACK_BENCH_SITE": site}
            _log(f"cache with {count} synthetic entries: prime, fill")
            p = _run("tack", size, env)
            vdir = os.path.join(d, p["tack_version"])
            if not os.path.isdir(vdir):
                raise RuntimeError(f"priming did not make {vdir}; found {os.listdir(d)}")
            real = _count_entries(vdir)
            t0 = time.perf_counter()
            fill_entries(vdir, count, seed=count)
            fills[count] = {"env": env, "real": real, "fill_s": time.perf_counter() - t0,
                            "total": _count_entries(vdir), "prime": p, "runs": []}
        for i in range(hit_processes):
            _log(f"hit runs {i + 1}/{hit_processes} over {len(entries)} cache sizes")
            for count in entries:
                fills[count]["runs"].append(_run("tack", size, fills[count]["env"]))
        table = []
        for count in entries:
            f = fills[count]
            s = _summary(f["runs"])
            probs = [p for p in (_tack_warm_problems(r) for r in f["runs"]) if p]
            table.append({"synthetic": count, "real": f["real"], "total": f["total"],
                          "fill_s": f["fill_s"], "first_call_s": s["first_call_s"],
                          "cache_stage_s": s.get("cache_stage_s"),
                          "load_seconds": s.get("load_seconds"),
                          "process_wall_s": s["process_wall_s"], "problems": probs,
                          "raw": f["runs"]})
        flat = table[-1]["first_call_s"] / table[0]["first_call_s"] if len(table) > 1 else None
        res["entries_table"] = table
        res["ratios"]["flat"] = flat
        res["ratios"]["flat_met"] = None if flat is None else flat <= TARGET_FLAT
        res["raw"] = raw
        # Tack's version id hashes its sources' mtimes: an edit during the run changes it.
        versions = {r["tack_version"] for r in
                    [prime] + raw["tack_cold"] + raw["tack_warm"]
                    + [r for f in fills.values() for r in [f["prime"]] + f["runs"]]}
        res["tack_versions_seen"] = sorted(versions)       # the installed copy: one, unless copied twice
        res["checkout_versions_seen"] = sorted({r["tack_version"] for r in
                                                [prime_checkout] + raw["tack_warm_checkout"]})
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return res


# -- the report -------------------------------------------------------------------------------


def _ms(x, width=0):
    s = "-" if x is None else f"{x * 1e3:.1f} ms"
    return f"{s:>{width}}" if width else s


def _met(flag):
    return "-" if flag is None else ("met" if flag else "NOT met")


def report(res, file=None):
    out = file or sys.stdout

    def p(s=""):
        print(s, file=out)

    med, r = res["medians"], res["ratios"]
    cold, warm, chk = med["tack_cold"], med["tack_warm"], med["tack_warm_checkout"]
    n = res["processes"]
    p(f"Kernel cache, warm start: contour({res['field']}, level), first call of a fresh process; "
      f"medians of {n} processes each, Python {res['python']}, {res['cpus']} CPUs")
    p("Fresh TACK_CACHE_DIR / NUMBA_CACHE_DIR in a temp dir; PYTHONDONTWRITEBYTECODE unset "
      "(imports from .pyc)")
    if res.get("temp_dir"):
        p(f"Cache directories kept in {res['temp_dir']}")
    p()
    p("1. Tack: cache off vs cache warm (primed by one process); installed copy, and the checkout")
    p(f"  {'':34}{'cache off':>12}{'cache warm':>12}{'warm, checkout':>16}")

    def row(label, key):
        p(f"  {label:34}{_ms(cold.get(key), 12)}{_ms(warm.get(key), 12)}{_ms(chk.get(key), 16)}")
    row("import numpy", "numpy_import_s")
    row("import tack (after numpy)", "import_s")
    row("import tack.kernels.contour", "module_import_s")
    row("FIRST CALL", "first_call_s")
    p(f"  {'  of which cache lookup (all kernels)':34}{'-':>12}{_ms(warm.get('cache_stage_s'), 12)}"
      f"{_ms(chk.get('cache_stage_s'), 16)}")
    row("process wall (spawn to exit)", "process_wall_s")
    p(f"  {'processes that compiled':34}{cold['runs_that_compiled']:>9}/{cold['runs']:<2}"
      f"{warm['runs_that_compiled']:>9}/{warm['runs']:<2}{chk['runs_that_compiled']:>13}/{chk['runs']:<2}")
    tv = f"{warm['ntris']} / {warm['nverts']}"
    tc = f"{chk['ntris']} / {chk['nverts']}"
    p(f"  {'triangles / vertices':34}{cold['ntris']:>5} / {cold['nverts']:<4}{tv:>12}{tc:>16}")
    p(f"  version ids: installed {res['tack_version']}, checkout "
      f"{res['prime']['tack_checkout']['tack_version'][:24]}...")
    pr = res["prime"]["tack"]
    p(f"  priming process: first call {_ms(pr['first_call_s'])} (compile + store), "
      f"wall {_ms(pr['process_wall_s'])}")
    if len(res.get("checkout_versions_seen", ())) > 1:
        p(f"  WARNING: the checkout's sources changed during the run ({len(res['checkout_versions_seen'])} "
          "version ids seen): its warm processes after the change miss the cache")
    if res.get("warm_stale"):
        p(f"  warm processes set aside (first after a change of Tack's sources, so a miss): "
          f"{', '.join(map(str, res['warm_stale']))}; medians over the other "
          f"{warm['runs']}")
    if res["warm_problems"]:
        p("  WARNING: warm processes that were not clean cache hits:")
        for i, why in res["warm_problems"].items():
            p(f"    process {i}: {'; '.join(why)}")
    p()
    p("  Targets:")
    p(f"    cold / warm first call            {r['cold_over_warm']:8.1f}x    target >= "
      f"{TARGET_COLD_OVER_WARM:.0f}x    {_met(r['cold_over_warm_met'])}")
    p(f"    warm first call                   {r['warm_first_call_ms']:8.1f} ms  target <= "
      f"{TARGET_WARM_MS:.0f} ms    {_met(r['warm_first_call_met'])}")
    p(f"    import tack, on top of numpy      {r['import_tack_ms']:8.1f} ms  target <= "
      f"{TARGET_IMPORT_MS:.0f} ms   {_met(r['import_tack_met'])}   "
      f"(import numpy {r['import_numpy_ms']:.1f} ms; median of all {2 * n} Tack processes)")
    p()
    p("2. Peers, warm from their own on-disk caches (same run, interleaved with Tack's processes)")
    for name, label, _, _, _ in PEERS:
        p(f"  {label:22} {res['peers'].get(name)}")
    ran = res.get("peers_ran", [])
    if ran:
        cols = [("Tack warm", warm)] + [(f"{name} warm", med[f"{name}_warm"]) for name in ran]
        p()
        p(f"  {'':34}" + "".join(f"{c:>14}" for c, _ in cols))

        def prow(label, key):
            p(f"  {label:34}" + "".join(_ms(m.get(key), 14) for _, m in cols))
        prow("import numpy", "numpy_import_s")
        prow("library import (and its init)", "import_s")
        prow("contour module import", "module_import_s")
        prow("FIRST CALL (warm)", "first_call_s")
        prow("process wall (spawn to exit)", "process_wall_s")
        p(f"  {'processes that compiled':34}"
          + "".join(f"{m['runs_that_compiled']:>11}/{m['runs']:<2}" for _, m in cols))
        p(f"  {'triangles':34}" + "".join(f"{m['ntris']:>14}" for _, m in cols)
          + f"   {'OK' if res['triangles_equal'] else 'MISMATCH'}")
        for name in ran:
            pr = res["prime"][name]
            p(f"  {name} priming process: first call {_ms(pr['first_call_s'])} (cold compile + store), "
              f"wall {_ms(pr['process_wall_s'])}")
        p()
        p("  Targets (best peer = the installed peer with the lowest figure):")
        p(f"    Tack warm first call / {r['vs_peer_call_peer']:6} warm   {r['vs_peer_call']:8.3f}     "
          f"target <= {TARGET_VS_PEER_CALL}    {_met(r['vs_peer_call_met'])}")
        p(f"    Tack warm process wall / {r['vs_peer_wall_peer']:6} warm {r['vs_peer_wall']:8.3f}     "
          f"target <= {TARGET_VS_PEER_WALL}    {_met(r['vs_peer_wall_met'])}")
    else:
        p("  no peer ran: peer ratios not computed")
    p()
    t = res["entries_table"]
    p(f"3. Cost of a hit vs entries in the cache (median of {res['hit_processes']} fresh processes "
      "per row, round-robin)")
    p(f"  {'synthetic':>10}{'+ real':>8}{'fill':>10}{'FIRST CALL':>13}{'cache lookup':>14}"
      f"{'read+verify':>13}{'process wall':>14}")
    for row in t:
        p(f"  {row['synthetic']:>10}{row['real']:>8}{row['fill_s']:>8.1f} s{_ms(row['first_call_s'], 13)}"
          f"{_ms(row['cache_stage_s'], 14)}{_ms(row['load_seconds'], 13)}{_ms(row['process_wall_s'], 14)}")
        for why in row["problems"]:
            p(f"    WARNING: not a clean hit: {'; '.join(why)}")
    if r.get("flat") is not None:
        p(f"  first call, {t[-1]['synthetic']} / {t[0]['synthetic']} entries   {r['flat']:6.2f}     "
          f"target: flat (<= {TARGET_FLAT})    {_met(r['flat_met'])}")
    p("  (cache lookup: the 'cache' stage of contour's kernels: keys, read, checks, load; "
      "read+verify: tack.cache.stats()['load_seconds'])")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=10,
                    help="fresh processes per contestant for parts 1 and 2 (default 10)")
    ap.add_argument("--hit-processes", type=int, default=5,
                    help="fresh processes per cache size for part 3 (default 5)")
    ap.add_argument("--entries", default="10,1000,10000",
                    help="synthetic entry counts for part 3, comma-separated (default 10,1000,10000)")
    ap.add_argument("--size", type=int, default=21, help="sphere(N) field size (default 21)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="discarded cold Tack runs first, to warm the OS file cache (default 1)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary cache directories")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead")
    args = ap.parse_args(argv)
    if args.processes < 1 or args.hit_processes < 1:
        ap.error("--processes and --hit-processes must be at least 1")
    entries = counts(ap, args.entries, "--entries", "10,1000,10000", 0)
    res = measure(processes=args.processes, hit_processes=args.hit_processes, entries=entries,
                  size=args.size, warmup=max(args.warmup, 0), keep=args.keep)
    return finish(res, report, args.json)


if __name__ == "__main__":
    main()
