"""Metadata operations of Tack's kernel cache under MPI: per-kernel files, bundle, load_bundle(comm),
and a site's bundle with and without load_bundle(comm).

    python benchmarks/mpi_metadata.py [--ranks 1,2,4,8] [--kernels 20] [--processes 7]
                                      [--mds-rate 50000] [--at-ranks 10000] [--at-kernels 50]
                                      [--size 21] [--keep] [--json]

Everything in one run, in a temporary directory (deleted at the end unless
``--keep``):

1. **Prime and pack.**  A module of K distinct small kernels (``k_000`` ...,
   ``y[i] = x[i] * a + b`` with different constants) is generated; one plain
   process (``TACK_CACHE=write``) launches all K in a fresh, private
   ``TACK_CACHE_DIR`` (K compiles), then ``python -m tack.cache pack`` packs
   the directory's bundle, and ``python -m tack.site bundles build`` builds the
   same kernels into a site bundle for this node's CPU (as a Spack or conda
   install builds its bundles).  The same is done for K/2 kernels, in another
   directory.
2. **MPI jobs.**  For each K (K and K/2), each N of ``--ranks`` and each
   strategy, a real ``mpiexec -n N`` job whose ranks
   (``benchmarks/_mpi_rank.py``) launch all the kernels and count, from
   before ``import tack``, the metadata operations made under the cache
   directory: opens (audit event ``open``), and stat-like operations
   (``os.stat``/``os.lstat`` wrapped, ``DirEntry.stat`` wrapped, audit events
   ``os.listdir``/``os.scandir``, plus mkdir/rename/remove/utime/chmod if
   any).  The strategies:

   * ``per-kernel files``: ``TACK_CACHE=read``, every rank looks up each
     kernel's entry file;
   * ``bundle``: the default mode under MPI (no ``TACK_CACHE``; a one-rank
     launch is not MPI, so N=1 sets ``TACK_CACHE=bundle``), every rank reads
     the bundle;
   * ``load_bundle(comm)``: ``tack.cache.load_bundle(MPI.COMM_WORLD)`` on every
     rank before the first launch (same mode as ``bundle``): rank 0 reads,
     every rank gets the bytes by ``Bcast``;
   * ``site bundle``: a new user of a site install (an empty cache of their
     own, ``TACK_CACHE_BUNDLES`` the site bundle's directory), bundle mode:
     every rank tries its own bundle, lists the site directory, and reads the
     site bundle;
   * ``site, load_bundle``: the same with ``load_bundle(comm)``: rank 0 does
     that, the other ranks get the site bundle by ``Bcast``.

   The counts cover the site directory as well as the cache directory.
   Each rank also reports ``tack.cache.stats()``: every kernel must be a
   variant hit and nothing a miss (loaded, not compiled), its results must
   be right, and LLVM must not have been loaded.
3. **Tables**: per strategy and N, opens and stat-like operations per rank
   (rank 0 and the largest of the other ranks), and for the whole job; then
   the whole job's opens at K and K/2 (independent of K for bundle and
   load_bundle?) and, for load_bundle, across N.
4. **Extrapolation** to ``--at-ranks`` x ``--at-kernels`` (10,000 x 50): per
   rank, operations = fixed + per-kernel x kernels, both fitted from the K and
   K/2 runs at the largest N; the job is rank 0 plus (ranks - 1) times the
   other ranks; divided by an *assumed* metadata-server rate (``--mds-rate``,
   50,000 operations/s: an assumption of the order of magnitude one Lustre
   MDS sustains for opens and stats from many clients, not a measurement).
5. **Single process, the contour**: the first call of
   ``contour(sphere(21), SPHERE_LEVEL)`` in a fresh process
   (``benchmarks/_cache_runner.py``, PYTHONDONTWRITEBYTECODE removed), with
   (i) per-kernel entries (``TACK_CACHE=write``, warm), (ii) the bundle
   packed from them (``TACK_CACHE=bundle``), (iii) cold (``TACK_CACHE=off``):
   ``--processes`` of each, interleaved, medians and ratios.

Targets (printed next to the figures, never asserted): the whole job's opens
independent of K with the bundle, the site bundle and load_bundle(comm) of
either; with load_bundle(comm) also independent of N.  Timings carry no target.
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RANK = os.path.join(HERE, "_mpi_rank.py")
RUNNER = os.path.join(HERE, "_cache_runner.py")

from _common import counts, finish, run_json  # noqa: E402  (benchmarks/ is on sys.path)

STRATEGIES = (("files", "per-kernel files"), ("bundle", "bundle"), ("comm", "load_bundle(comm)"),
              ("site", "site bundle"), ("sitecomm", "site, load_bundle"))
SITE = ("site", "sitecomm")      # a site bundle (TACK_CACHE_BUNDLES) and an empty user cache
COMM = ("comm", "sitecomm")      # tack.cache.load_bundle(MPI.COMM_WORLD) before the launches
LABEL = dict(STRATEGIES)
# (strategy, what its whole job's opens must not grow with: K kernels or N ranks)
TARGETS = (("bundle", "k"), ("comm", "k"), ("comm", "n"), ("site", "k"), ("sitecomm", "k"),
           ("sitecomm", "n"))
MDS_RATE = 50_000                # metadata operations per second: an ASSUMPTION (see above)

LAUNCHER_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "MV2_", "PALS_", "ALPS_", "SLURM_", "HYDRA_", "TACK_")
_SCRUB = ("PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")


CONTOUR_KERNELS = 2          # the contour's kernels (classify, emit): variant hits when warm

def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def _env(cache, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(LAUNCHER_PREFIXES) and k not in _SCRUB}
    env["TACK_CACHE_DIR"] = str(cache)
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    return env


def _private_dir(path):
    os.mkdir(path, 0o700)
    return path


# -- 1. kernels, priming, packing ------------------------------------------------------------------


def write_module(directory, k):
    """``kmod.py`` with K distinct kernels ``y[i] = x[i] * a + b`` (a, b differ per kernel)."""
    lines = ['"""Generated by benchmarks/mpi_metadata.py: %d distinct small kernels."""' % k,
             "import tack", ""]
    names, coeffs = [], {}
    for j in range(k):
        name = f"k_{j:03d}"
        a, b = float(j + 2), float(j) * 0.5 + 0.25
        names.append(name)
        coeffs[name] = (a, b)
        lines += ["", "@tack.kernel", f"def {name}(x, y):", "    i = tack.tid()",
                  f"    y[i] = x[i] * {a!r} + {b!r}", ""]
    lines += ["", f"KERNELS = {names!r}", f"COEFFS = {coeffs!r}", ""]
    with open(os.path.join(directory, "kmod.py"), "w") as f:
        f.write("\n".join(lines))


def _reports(out_dir):
    reports = []
    for name in os.listdir(out_dir):
        if name.startswith("rank-") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                reports.append(json.load(f))
    return sorted(reports, key=lambda r: r["rank"])


def current_version():
    """Tack's version id as of now (a source checkout's changes with every edit of its files)."""
    from tack.cache.keys import tack_version_id
    return tack_version_id.__wrapped__()


_serial = iter(range(1, 1 << 30))


def prime_and_pack(tmp, k, timeout):
    """A kernel module of K kernels and a fresh cache: compile all in one process, then pack."""
    tag = f"{k}-{next(_serial)}"
    kdir = _private_dir(os.path.join(tmp, f"kernels-{tag}"))
    cache = _private_dir(os.path.join(tmp, f"cache-{tag}"))
    write_module(kdir, k)
    out = _private_dir(os.path.join(tmp, f"prime-{tag}"))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, RANK, kdir, out, "files"], cwd=ROOT,
                          env=_env(cache, TACK_CACHE="write"), capture_output=True, text=True,
                          timeout=timeout)
    prime_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"priming {k} kernels failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    (report,) = _reports(out)
    st = report["stats"]
    if not report["ok"] or st["misses"]["variant"] != k:
        raise RuntimeError(f"priming did not compile {k} kernels: ok={report['ok']} stats={st}")
    proc = subprocess.run([sys.executable, "-m", "tack.cache", "pack"], cwd=ROOT, env=_env(cache),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"pack failed (exit {proc.returncode}): {proc.stderr.strip()}")
    bundles = sorted(n for n in os.listdir(cache) if n.startswith("bundle-"))
    if len(bundles) != 1:
        raise RuntimeError(f"expected one bundle in {cache}, found {bundles}")
    path = os.path.join(cache, bundles[0])
    from tack.cache import bundle
    entries = len(bundle.Bundle(open(path, "rb").read(), path))
    site, site_path = build_site_bundle(tmp, tag, kdir, k, timeout)
    return {"k": k, "kernel_dir": kdir, "cache": cache, "bundle": path, "site_dir": site,
            "site_bundle": site_path,
            "site_entries": len(bundle.Bundle(open(site_path, "rb").read(), site_path)),
            "version": report["tack_version"],
            "bundle_bytes": os.path.getsize(path), "bundle_entries": entries,
            "prime_s": prime_s, "pack_output": proc.stdout.strip()}


def build_site_bundle(tmp, tag, kdir, k, timeout):
    """The same K kernels in a site bundle for this node's CPU (``python -m tack.site bundles
    build``, as a Spack or conda install builds its bundles): -> (its directory, its file)."""
    from tack.archs import host_cpu
    config = os.path.join(tmp, f"site-{tag}.yaml")
    with open(config, "w") as f:
        f.write(f"version: 1\nbuild:\n  archs:\n    cpu: [{host_cpu()}]\n  kernels:\n")
        for j in range(k):
            f.write(f"    - module: kmod\n      kernel: k_{j:03d}\n"
                    "      args: ['float64[1000]', 'float64[1000]']\n")
    site = os.path.join(tmp, f"site-{tag}")
    env = _env(os.path.join(tmp, f"site-build-cache-{tag}"),
               PYTHONPATH=os.pathsep.join(filter(None, [kdir, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "build", config, "--output",
                           site], cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"bundles build failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
                           f"{proc.stderr[-2000:]}")
    (name,) = os.listdir(site)
    return site, os.path.join(site, name)


# -- 2. MPI jobs -----------------------------------------------------------------------------------


def _mode_env(strategy, n):
    if strategy == "files":
        return "read"
    return None if n > 1 else "bundle"          # the MPI default; one rank is not MPI


def _statlike(c):
    return c["stat"] + c["lstat"] + c["direntry_stat"] + c["listdir"] + c["scandir"] + c["other"]


def run_job(prep, n, strategy, tmp, timeout):
    """One ``mpiexec -n N`` job; -> its summary (per rank and whole job)."""
    exe = shutil.which("mpiexec")
    if exe is None:
        raise RuntimeError("mpiexec is not on PATH (pip install mpich mpi4py)")
    k, cache, sites = prep["k"], prep["cache"], None
    out = _private_dir(os.path.join(tmp, f"reports-{k}-{strategy}-{n}-{next(_serial)}"))
    if strategy in SITE:        # a new user: an empty cache of their own, the site's bundle
        cache = _private_dir(os.path.join(tmp, f"user-{k}-{strategy}-{n}-{next(_serial)}"))
        sites = prep["site_dir"]
    mode = _mode_env(strategy, n)
    cmd = [exe, "-n", str(n), sys.executable, RANK, prep["kernel_dir"], out, strategy]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=_env(cache, TACK_CACHE=mode, TACK_CACHE_BUNDLES=sites),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"HANG: {' '.join(cmd)} (TACK_CACHE={mode}) did not finish in "
                           f"{timeout} s") from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} (TACK_CACHE={mode}) failed with exit "
                           f"{proc.returncode}:\n{proc.stderr[-3000:]}")
    ranks = _reports(out)
    problems = []
    # the one bundle a rank that reads opens: the site's for a new user, else the user's own
    bundle_path, entries = ((prep["site_bundle"], prep["site_entries"]) if strategy in SITE
                            else (prep["bundle"], prep["bundle_entries"]))
    if sorted(r["rank"] for r in ranks) != list(range(n)):
        problems.append(f"reports from ranks {[r['rank'] for r in ranks]}, expected 0..{n - 1}")
    per_rank = []
    for r in ranks:
        c = r["counts"]["cache"]
        st = r["stats"]
        row = {"rank": r["rank"], "opens": c["open"], "statlike": _statlike(c), "counts": c,
               "variant_hits": st["hits"]["variant"], "variant_misses": st["misses"]["variant"],
               "lowered_misses": st["misses"]["lowered"], "ok": r["ok"], "mode": r["mode"],
               "loaded": r["loaded"], "llvm_loaded": r["llvm_loaded"], "warnings": r["warnings"],
               "opened": sorted({p for op, p in r["cache_paths"] if op == "open"}),
               "tack_pkg": r["counts"]["tack_pkg"]}
        per_rank.append(row)
        if not r["ok"]:
            problems.append(f"rank {r['rank']}: wrong results")
        if st["hits"]["variant"] != k or st["misses"]["variant"] or st["misses"]["lowered"]:
            problems.append(f"rank {r['rank']}: variant hits {st['hits']['variant']}/{k}, "
                            f"misses {st['misses']} (something compiled)")
        if r["llvm_loaded"]:
            problems.append(f"rank {r['rank']}: LLVM was loaded")
        if r["warnings"]:
            problems.append(f"rank {r['rank']}: warnings {r['warnings']}")
        if c["other"]:
            problems.append(f"rank {r['rank']}: {c['other']} mkdir/rename/remove/utime/chmod "
                            "under the cache directory")
        expected_mode = "read" if strategy == "files" else "bundle"
        if r["mode"] != expected_mode:
            problems.append(f"rank {r['rank']}: mode {r['mode']}, expected {expected_mode}")
        # What each strategy should open under the cache directories, and nothing else.
        if strategy == "files":
            want = k
            unexpected = [p for p in row["opened"] if not p.endswith(".tvar")]
        elif strategy in ("bundle", "site") or r["rank"] == 0:
            # a new user's own bundle too: an open that finds none (bundle mode reads it first);
            # and the site directory, opened to be listed and checked
            paths = {bundle_path} | ({os.path.join(cache, os.path.basename(prep["bundle"])),
                                      os.path.abspath(prep["site_dir"])} if strategy in SITE else set())
            want = len(paths)
            unexpected = [p for p in row["opened"] if p not in paths]
        else:
            want = 0
            unexpected = row["opened"]
        if c["open"] != want or unexpected:
            problems.append(f"rank {r['rank']}: {c['open']} opens under the cache directory "
                            f"(expected {want}); unexpected paths {unexpected[:5]}")
        if strategy in COMM and r["loaded"] != entries:
            problems.append(f"rank {r['rank']}: load_bundle returned {r['loaded']}, "
                            f"the bundle has {entries} entries")
    r0 = next((x for x in per_rank if x["rank"] == 0), None)
    others = [x for x in per_rank if x["rank"] != 0]
    return {
        "k": k, "n": n, "strategy": strategy, "tack_cache_env": mode, "wall_s": wall,
        "opens_max": max(x["opens"] for x in per_rank),
        "statlike_max": max(x["statlike"] for x in per_rank),
        "opens_rank0": r0["opens"] if r0 else None,
        "statlike_rank0": r0["statlike"] if r0 else None,
        "opens_others_max": max((x["opens"] for x in others), default=None),
        "statlike_others_max": max((x["statlike"] for x in others), default=None),
        "job_opens": sum(x["opens"] for x in per_rank),
        "job_statlike": sum(x["statlike"] for x in per_rank),
        "job_metadata": sum(x["opens"] + x["statlike"] for x in per_rank),
        "variant_hits_min": min(x["variant_hits"] for x in per_rank),
        "misses_max": max(x["variant_misses"] + x["lowered_misses"] for x in per_rank),
        "version_scan_per_rank": max(x["tack_pkg"]["scandir"] + x["tack_pkg"]["direntry_stat"]
                                     + x["tack_pkg"]["stat"] + x["tack_pkg"]["lstat"]
                                     for x in per_rank),
        "version_scan_detail": per_rank[0]["tack_pkg"],
        "problems": problems, "ranks": per_rank,
        "versions": sorted({r["tack_version"] for r in ranks}), "primed_version": prep["version"],
        # per-kernel files: distinct fan-out directories <2 hex>/ rank 0 read entries from
        "fan_dirs_rank0": len({os.path.dirname(x) for x in r0["opened"]}) if r0 else None,
    }


def _job_retrying(preps, k, n, strategy, tmp, timeout, reprimed, attempts=4):
    """run_job; when Tack's sources changed since priming (its version id with them, so every
    entry misses), prime and pack again and rerun: the job measures the cache it was given."""
    for attempt in range(attempts):
        prep = preps[k]
        try:
            job = run_job(prep, n, strategy, tmp, timeout)
            stale = job["versions"] != [prep["version"]]
        except RuntimeError:
            if attempt == attempts - 1 or current_version() == prep["version"]:
                raise
            stale = True
        if not stale or attempt == attempts - 1:
            if stale:
                job["problems"].append(f"Tack's sources kept changing: ranks saw versions "
                                       f"{job['versions']}, the cache was primed with {prep['version']}")
            return job
        _log(f"  Tack's sources changed since priming (version id differs): priming K={k} again")
        reprimed.append({"k": k, "n": n, "strategy": strategy})
        time.sleep(2)
        preps[k] = prime_and_pack(tmp, k, timeout)


# -- 4. extrapolation ------------------------------------------------------------------------------


def _fit(y_big, y_small, k_big, k_small):
    """ops(K) = fixed + per_kernel * K through two points."""
    per = (y_big - y_small) / (k_big - k_small)
    return y_big - per * k_big, per


def extrapolate(jobs, k_big, k_small, n_ref, at_ranks, at_kernels, rate):
    out = {}
    for strategy, _ in STRATEGIES:
        big, small = jobs[(k_big, strategy, n_ref)], jobs[(k_small, strategy, n_ref)]
        parts = {}
        for who in ("rank0", "others"):
            for what in ("opens", "statlike"):
                key = f"{what}_{who}"
                src = f"{what}_others_max" if who == "others" else key
                yb, ys = big[src], small[src]
                if yb is None:                      # N=1: no other ranks measured
                    yb, ys = big[f"{what}_rank0"], small[f"{what}_rank0"]
                fixed, per = _fit(yb, ys, k_big, k_small)
                parts[key] = {"fixed": fixed, "per_kernel": per, "at": fixed + per * at_kernels}
        r0 = parts["opens_rank0"]["at"] + parts["statlike_rank0"]["at"]
        oth = parts["opens_others"]["at"] + parts["statlike_others"]["at"]
        opens = parts["opens_rank0"]["at"] + (at_ranks - 1) * parts["opens_others"]["at"]
        total = r0 + (at_ranks - 1) * oth
        out[strategy] = {"parts": parts, "rank0_ops": r0, "other_rank_ops": oth,
                         "job_opens": opens, "job_ops": total, "mds_seconds": total / rate}
    return out


# -- 5. contour, single process --------------------------------------------------------------------


def _runner(size, env):
    return run_json(RUNNER, ("tack", size), env, timeout=600)


def _contour_prime(tmp, size):
    """A fresh cache primed by one contour process (write mode), and its bundle."""
    cache = _private_dir(os.path.join(tmp, f"contour-cache-{next(_serial)}"))
    _log("contour: priming per-kernel entries (one process), packing a bundle")
    prime = _runner(size, _env(cache, TACK_CACHE="write"))
    proc = subprocess.run([sys.executable, "-m", "tack.cache", "pack"], cwd=ROOT, env=_env(cache),
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"pack failed: {proc.stderr.strip()}")
    prime["pack_output"] = proc.stdout.strip()
    envs = {"files": _env(cache, TACK_CACHE="write"), "bundle": _env(cache, TACK_CACHE="bundle")}
    return prime, envs


def contour(tmp, size, processes, max_reprimes=5):
    off = _private_dir(os.path.join(tmp, "contour-off"))
    prime, envs = _contour_prime(tmp, size)
    envs["cold"] = _env(off, TACK_CACHE="off")
    raw = {k: [] for k in envs}
    reprimes = 0
    _runner(size, envs["cold"])                    # warms the OS file cache; discarded
    i = 0
    while i < processes:
        _log(f"contour: round {i + 1}/{processes} (per-kernel warm, bundle, cold)")
        got = {k: _runner(size, env) for k, env in envs.items()}
        if reprimes < max_reprimes and any(got[k]["tack_version"] != prime["tack_version"]
                                           for k in ("files", "bundle")):
            # Tack's sources changed since priming: every entry misses. Prime again, redo the round.
            _log("contour: Tack's sources changed since priming (version id differs): priming again")
            reprimes += 1
            time.sleep(2)
            prime, fresh = _contour_prime(tmp, size)
            envs.update(fresh)
            continue
        for k, r in got.items():
            raw[k].append(r)
        i += 1
    med = {}
    for k, runs in raw.items():
        med[k] = {f: statistics.median(r[f] for r in runs)
                  for f in ("first_call_s", "cache_stage_s", "process_wall_s", "import_s")}
        med[k]["compiled_runs"] = sum(1 for r in runs if r["compiled"])
        med[k]["variant_hits"] = sorted({r["cache_stats"]["hits"]["variant"] for r in runs})
        med[k]["ntris"] = sorted({r["ntris"] for r in runs})
        med[k]["load_seconds"] = statistics.median(r["cache_stats"]["load_seconds"] for r in runs)
    f, b, c = (med[k]["first_call_s"] for k in ("files", "bundle", "cold"))
    ratios = {"cold_over_files": c / f, "cold_over_bundle": c / b, "files_over_bundle": f / b}
    problems = []
    for k in ("files", "bundle"):
        if med[k]["compiled_runs"] or med[k]["variant_hits"] != [CONTOUR_KERNELS]:
            problems.append(f"{k}: {med[k]['compiled_runs']} processes compiled, variant hits "
                            f"{med[k]['variant_hits']} (expected {CONTOUR_KERNELS})")
    if len({t for m in med.values() for t in m["ntris"]}) != 1:
        problems.append(f"triangle counts differ: { {k: m['ntris'] for k, m in med.items()} }")
    return {"size": size, "processes": processes, "prime_first_call_s": prime["first_call_s"],
            "pack_output": prime["pack_output"], "medians": med, "ratios": ratios,
            "problems": problems, "reprimes": reprimes, "raw": raw}


# -- the whole run ---------------------------------------------------------------------------------


def measure(ranks=(1, 2, 4, 8), kernels=20, processes=7, size=21, mds_rate=MDS_RATE,
            at_ranks=10_000, at_kernels=50, keep=False, timeout=300):
    tmp = tempfile.mkdtemp(prefix="tack-mpi-metadata-")
    ks = (kernels, kernels // 2)
    res = {"benchmark": "mpi_metadata", "ranks": list(ranks), "kernels": list(ks),
           "python": sys.version.split()[0], "cpus": len(os.sched_getaffinity(0))
           if hasattr(os, "sched_getaffinity") else os.cpu_count(),
           "mds_rate": mds_rate, "at_ranks": at_ranks, "at_kernels": at_kernels,
           "temp_dir": tmp if keep else None}
    try:
        preps = {}
        for k in ks:
            _log(f"priming a fresh cache with {k} kernels (one process), packing")
            preps[k] = prime_and_pack(tmp, k, timeout)
        jobs, reprimed = {}, []
        for k in ks:
            for n in ranks:
                for strategy, label in STRATEGIES:
                    _log(f"K={k}: mpiexec -n {n}, {label}")
                    jobs[(k, strategy, n)] = _job_retrying(preps, k, n, strategy, tmp, timeout,
                                                           reprimed)
        res["reprimed"] = reprimed
        res["prepared"] = {k: {x: v for x, v in p.items() if x not in ("kernel_dir",)}
                           for k, p in preps.items()}
        res["versions_seen"] = sorted({v for j in jobs.values() for v in j["versions"]})
        res["jobs"] = [dict(j) for j in jobs.values()]

        # 3. independence of K (bundle, load_bundle) and of N (load_bundle)
        checks = {}
        for strategy, _ in STRATEGIES:
            checks[strategy] = {
                "opens_same_over_k": all(jobs[(ks[0], strategy, n)]["job_opens"] ==
                                         jobs[(ks[1], strategy, n)]["job_opens"] for n in ranks),
                "metadata_same_over_k": all(jobs[(ks[0], strategy, n)]["job_metadata"] ==
                                            jobs[(ks[1], strategy, n)]["job_metadata"] for n in ranks),
                "opens_same_over_n": len({jobs[(k, strategy, n)]["job_opens"]
                                          for k in ks for n in ranks}) == 1,
                "metadata_same_over_n": len({jobs[(k, strategy, n)]["job_metadata"]
                                             for k in ks for n in ranks}) == 1,
            }
        res["checks"] = checks
        res["targets"] = {f"{strategy}_opens_independent_of_{over}": checks[strategy][f"opens_same_over_{over}"]
                          for strategy, over in TARGETS}
        n_ref = max(ranks)
        res["extrapolation"] = extrapolate(jobs, ks[0], ks[1], n_ref, at_ranks, at_kernels, mds_rate)
        res["extrapolation_from_n"] = n_ref
        scan = max(j["version_scan_per_rank"] for j in jobs.values())
        res["version_scan"] = {"per_rank": scan, "job_ops": scan * at_ranks,
                               "mds_seconds": scan * at_ranks / mds_rate}
        res["problems"] = [f"K={j['k']} N={j['n']} {LABEL[j['strategy']]}: {p}"
                           for j in jobs.values() for p in j["problems"]]
        res["contour"] = contour(tmp, size, processes) if processes > 0 else None
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return res


# -- the report ------------------------------------------------------------------------------------


def _met(flag):
    return "met" if flag else "NOT met"


def _n(x):
    return "-" if x is None else f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}"


def _secs(x):
    return f"{x:,.1f} s" if x >= 1 else f"{x * 1e3:.3g} ms"


def report(res, file=None):
    out = file or sys.stdout

    def p(s=""):
        print(s, file=out)

    ks, ranks = res["kernels"], res["ranks"]
    jobs = {(j["k"], j["strategy"], j["n"]): j for j in res["jobs"]}
    p(f"Tack kernel cache under MPI: metadata operations under TACK_CACHE_DIR and the site bundle directory "
      f"(mpiexec -n N, MPICH; Python {res['python']}, {res['cpus']} CPUs, ranks oversubscribed)")
    for k in ks:
        pr = res["prepared"][k]
        p(f"  K={k}: primed in {pr['prime_s']:.1f} s (one process, {k} compiles); bundle "
          f"{os.path.basename(pr['bundle'])}: {pr['bundle_entries']} entries, "
          f"{pr['bundle_bytes'] / 1024:.0f} KiB")
    p("  opens: audit event 'open'; stat-like: os.stat + os.lstat + DirEntry.stat + os.listdir "
      "+ os.scandir (+ mkdir/rename/remove/utime/chmod: 0 expected)")
    p("  r0 = rank 0, oth = largest of the other ranks; job = summed over all ranks; "
      "metadata = opens + stat-like")
    for k in ks:
        p()
        p(f"K = {k} kernels launched per rank")
        p(f"  {'strategy':19}{'N':>3}{'opens/rank':>13}{'stat-like/rank':>16}{'job opens':>11}"
          f"{'job metadata':>14}   loaded (variant hits / misses per rank)")
        p(f"  {'':19}{'':>3}{'r0 / oth':>13}{'r0 / oth':>16}")
        for strategy, label in STRATEGIES:
            for n in ranks:
                j = jobs[(k, strategy, n)]
                o = f"{j['opens_rank0']} / {_n(j['opens_others_max'])}"
                s = f"{j['statlike_rank0']} / {_n(j['statlike_others_max'])}"
                ok = (f"{j['variant_hits_min']}/{k} hits, {j['misses_max']} misses"
                      + ("" if not j["problems"] else "  PROBLEMS below"))
                p(f"  {label if n == ranks[0] else '':19}{n:>3}{o:>13}{s:>16}{j['job_opens']:>11}"
                  f"{j['job_metadata']:>14}   {ok}")
    p()
    k0, k1 = ks
    p(f"Whole job's opens (and metadata ops) at K={k0} vs K={k1}")
    p(f"  {'strategy':19}" + "".join(f"{'N=' + str(n):>16}" for n in ranks))
    for strategy, label in STRATEGIES:
        cells = []
        for n in ranks:
            a, b = jobs[(k0, strategy, n)], jobs[(k1, strategy, n)]
            cells.append(f"{a['job_opens']}/{b['job_opens']} ({a['job_metadata']}/{b['job_metadata']})")
        p(f"  {label:19}" + "".join(f"{c:>16}" for c in cells))
    c, t = res["checks"], res["targets"]
    p()
    p("  Targets:")
    for strategy, over in TARGETS:
        ok, meta = t[f"{strategy}_opens_independent_of_{over}"], c[strategy][f"metadata_same_over_{over}"]
        extra = ""
        if over == "n":
            seen = sorted({jobs[(k, strategy, n)]["job_opens"] for k in ks for n in ranks})
            extra = f"job opens at every N and K: {seen}; "
        p(f"    {LABEL[strategy] + ': job opens independent of ' + over.upper():<48}"
          f"{'yes' if ok else 'no':>4}   {_met(ok)}   ({extra}metadata ops too: {'yes' if meta else 'no'})")
    p(f"    (reference, no target) per-kernel files: job opens independent of K: "
      f"{'yes' if c['files']['opens_same_over_k'] else 'no'}")

    ex, R, KK, rate = res["extrapolation"], res["at_ranks"], res["at_kernels"], res["mds_rate"]
    p()
    p(f"Extrapolation to {R:,} ranks x {KK} kernels, from the per-rank counts at N="
      f"{res['extrapolation_from_n']} (ops per rank = fixed + per-kernel x K, fitted through "
      f"K={k0} and K={k1})")
    p(f"  ASSUMPTION: one metadata server handles {rate:,} metadata ops/s (order of magnitude "
      "for a Lustre MDS under open/stat from many clients; not measured here)")
    for strategy, label in STRATEGIES:
        e = ex[strategy]
        pp = e["parts"]

        def term(key):
            x = pp[key]
            return f"({_n(x['fixed'])} + {_n(x['per_kernel'])}x{KK})"
        p(f"  {label}:")
        p(f"    rank 0:      opens {term('opens_rank0')} + stat-like {term('statlike_rank0')} "
          f"= {_n(e['rank0_ops'])} ops")
        p(f"    other ranks: opens {term('opens_others')} + stat-like {term('statlike_others')} "
          f"= {_n(e['other_rank_ops'])} ops each")
        p(f"    job: {_n(e['rank0_ops'])} + {R - 1:,} x {_n(e['other_rank_ops'])} = "
          f"{_n(e['job_ops'])} ops ({_n(e['job_opens'])} opens) / {rate:,} ops/s = "
          f"{_secs(e['mds_seconds'])} of MDS time")
    f_s, b_s, c_s = (ex[s]["mds_seconds"] for s in ("files", "bundle", "comm"))
    p(f"  per-kernel files / bundle: {f_s / b_s:,.0f}x the MDS time; "
      f"bundle / load_bundle(comm): {b_s / c_s:,.0f}x" if b_s and c_s else "")
    fj = jobs[(k0, "files", res["extrapolation_from_n"])]
    fixed = fj["statlike_rank0"] - 2 * fj["fan_dirs_rank0"]
    dirs = 256 * (1 - (255 / 256) ** KK)
    p(f"  (per-kernel files, a check of the fit: a rank's stat-like ops are {fixed} fixed + 2 "
      f"(stat + lstat) per distinct fan-out directory <2 hex>/ it reads from; at K={k0} that was "
      f"{fj['fan_dirs_rank0']} directories for {k0} keys. {KK} random keys fall in "
      f"{dirs:.1f} of the 256 on average: {fixed} + 2 x {dirs:.1f} = {fixed + 2 * dirs:.0f} "
      f"stat-like ops per rank, vs {_n(ex['files']['parts']['statlike_others']['at'])} from the fit)")
    scan = sorted({j["version_scan_per_rank"] for j in res["jobs"]})
    det = res["jobs"][0]["version_scan_detail"]
    vs = res["version_scan"]
    p(f"  Not counted above (outside the cache and site directories): every rank, in every strategy (load_bundle "
      f"too), scans Tack's own package directory to compute the version id of a source checkout "
      f"(tack.cache.keys.tack_version_id): {'/'.join(map(str, scan))} ops per rank "
      f"({det['scandir']} scandir + {det['direntry_stat']} DirEntry.stat + "
      f"{det['stat'] + det['lstat']} stat); at {R:,} ranks: {R:,} x {_n(vs['per_rank'])} = "
      f"{_n(vs['job_ops'])} ops / {rate:,} ops/s = {_secs(vs['mds_seconds'])}, if Tack's checkout "
      f"is on the shared file system (an installed, non-checkout Tack skips the scan)")
    p("  Nor counted: the trust checks' lstat of each directory above the cache and site "
      "directories (one per directory, each checked once per process; a client of a parallel "
      "file system usually answers those from its own cache), and the interpreter's imports.")

    probs = res["problems"]
    p()
    if res.get("reprimed"):
        p(f"NOTE: Tack's sources changed during the run (its version id with them): "
          f"{len(res['reprimed'])} job(s) found the primed cache stale, so the cache was primed "
          "and packed again and the job rerun.")
    if len(res.get("versions_seen", ())) > 1:
        p(f"WARNING: the jobs ran {len(res['versions_seen'])} different versions of Tack's sources "
          "(edited during the run); each job's own cache matched its version.")
    if probs:
        p("PROBLEMS (unexpected opens, compiles, wrong results, warnings):")
        for x in probs[:40]:
            p(f"  {x}")
        if len(probs) > 40:
            p(f"  ... and {len(probs) - 40} more")
    else:
        p("Every rank of every job: results right, every kernel a variant hit (0 misses, LLVM not "
          "loaded), opens exactly as expected (files: K entry files; bundle: its one bundle; "
          "load_bundle: rank 0 the bundle, others nothing; site bundle: the user's own bundle, "
          "which finds none, the site directory, listed, and the site's bundle; site with "
          "load_bundle: rank 0 those three, others nothing).")

    ct = res.get("contour")
    if not ct:
        return
    med, r = ct["medians"], ct["ratios"]
    p()
    p(f"Single process: first call of contour(sphere({ct['size']}), SPHERE_LEVEL) in a fresh "
      f"process; medians of {ct['processes']} processes each, interleaved, PYTHONDONTWRITEBYTECODE unset")
    p(f"  {'':30}{'per-kernel':>12}{'bundle':>12}{'cold (off)':>12}")

    def ms(x):
        return f"{x * 1e3:.2f} ms"
    rows = (("FIRST CALL", "first_call_s"), ("  of which cache stage", "cache_stage_s"),
            ("  read + verify (stats)", "load_seconds"), ("import tack", "import_s"),
            ("process wall", "process_wall_s"))
    for title, key in rows:
        cells = [ms(med[s][key]) if not (s == "cold" and key in ("cache_stage_s", "load_seconds"))
                 else "-" for s in ("files", "bundle", "cold")]
        p(f"  {title:30}" + "".join(f"{c:>12}" for c in cells))
    p(f"  {'processes that compiled':30}" + "".join(
        f"{str(med[s]['compiled_runs']) + '/' + str(ct['processes']):>12}" for s in ("files", "bundle", "cold")))
    p("  (read + verify is tack.cache.stats()['load_seconds']: it counts per-kernel entry reads "
      "only, not the bundle's read)")
    p(f"  ratios: cold / per-kernel {r['cold_over_files']:.1f}x, cold / bundle "
      f"{r['cold_over_bundle']:.1f}x, per-kernel / bundle {r['files_over_bundle']:.2f}x  (no target)")
    if ct.get("reprimes"):
        p(f"  NOTE: Tack's sources changed during the run: {ct['reprimes']} round(s) were redone "
          "after priming and packing again")
    for x in ct["problems"]:
        p(f"  PROBLEM: {x}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1,2,4,8", help="MPI job sizes, comma-separated (default 1,2,4,8)")
    ap.add_argument("--kernels", type=int, default=20,
                    help="K: kernels per rank (also run with K/2; default 20)")
    ap.add_argument("--processes", type=int, default=7,
                    help="fresh processes per contour case (0 skips part 5; default 7)")
    ap.add_argument("--size", type=int, default=21, help="contour field sphere(N) (default 21)")
    ap.add_argument("--mds-rate", type=int, default=MDS_RATE,
                    help="ASSUMED metadata-server ops/s for the extrapolation (default 50000)")
    ap.add_argument("--at-ranks", type=int, default=10_000, help="extrapolate to this many ranks")
    ap.add_argument("--at-kernels", type=int, default=50, help="... and this many kernels")
    ap.add_argument("--timeout", type=int, default=300, help="seconds before a job counts as hung")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead")
    args = ap.parse_args(argv)
    ranks = counts(ap, args.ranks, "--ranks", "1,2,4,8", 1)
    if args.kernels < 2:
        ap.error("--kernels must be at least 2 (the run also uses K/2)")
    if args.mds_rate <= 0 or args.at_ranks < 1 or args.at_kernels < 1:
        ap.error("--mds-rate, --at-ranks and --at-kernels must be positive")
    res = measure(ranks=ranks, kernels=args.kernels, processes=max(args.processes, 0),
                  size=args.size, mds_rate=args.mds_rate, at_ranks=args.at_ranks,
                  at_kernels=args.at_kernels, keep=args.keep, timeout=args.timeout)
    return finish(res, report, args.json, default=str)


if __name__ == "__main__":
    main()
