"""Warm where a deployed site runs: every path a process finds its kernels on, side by side.

    python benchmarks/deployed_warm.py [--runs 9] [--size 21] [--saxpy 100000] [--ranks 4]
                                       [--bundle-kernels 10,3000] [--no-threads] [--with-site] [--json]

Two kernels, the 21³ contour (``tack.kernels.contour``) and a 100k-element float32 saxpy
(``benchmarks/_deployed_kernels.py``), each first called in a fresh process
(``_deployed_runner.py``) by an installed, byte-compiled copy of Tack (``tack/`` copied into a
site directory of this run, as a wheel installs it), on every path a deployed Tack serves
from:

* **user**: the user's own cache directory, primed by one process;
* **bundle**: the user's own packed bundle (``python -m tack.cache pack``,
  ``TACK_CACHE=bundle``);
* **site**: a site bundle (``python -m tack.site bundles build``) built for an ancestor
  architecture of this host (``cpu:x86_64_v3`` on x86-64, ``cpu:aarch64`` on Arm), with an
  empty user cache: what a Spack or conda install serves;
* **levels**: site bundles for every x86-64 level (``x86_64_v2``, ``_v3``, ``_v4``) in one
  directory, as the conda package ships them, with an empty user cache: where this host is an
  ``x86_64_v4`` or a descendant of it (the most specific level serves);
* **moved**: the user's directory, with an installed copy whose sources' times moved after its
  import image was written (every time set to 0, as a Spack build cache sets them, on an
  install that did not set them first): the image then checks each module by its content,
  reading and hashing its source in every process (``python -m tack.site image --check`` says
  so); the Spack package sets the times to 0 before writing the image, so its installs, from a
  build cache too, are the **user** case;
* **mpi**: ``tack.cache.load_bundle(comm)`` under ``mpiexec -n RANKS`` (rank 0 reads the
  bundle and broadcasts it), where ``mpiexec`` and mpi4py are installed;
* **mpisite**: the same job with the site bundle and an empty user cache (a site install and a
  new user): rank 0 reads the site bundle and broadcasts it;
* **Numba** (``cache=True``) and **Warp** (CPU, its kernel cache) warm, where installed
  (``TACK_BENCH_PEERS``: a directory they were installed to with ``pip install --target``;
  this script never installs them).

Every measured process runs as ``python -S`` (no ``.pth`` file runs; see ``CLEAN``), and reports
the modules its warm path imported besides Tack's own and the collector's runs from ``import
tack`` to the result.
A NumPy-only process (import NumPy, build the input, exit) is the baseline for the whole
warm process, compared by CPU time (user + system, ``getrusage`` of the child: the wall time
of a 100 ms process moves by tens of milliseconds on a shared machine), as the median of each
run's difference with a NumPy-only process run just before it (the two are measured one after
the other, so a slow spell moves both; each case has its own: against the run's first NumPy
process only, the later cases of a run came out 0.1 to 1.4 ms higher).
The warm process's figure leaves out what the runner itself does after the result (checking
it, gathering the stages and stats it reports: ``report_cpu_s``, its CPU time measured in the
process), which a user's process does not do; the table's "process CPU" column is the raw one.
The "exit" column is the interpreter's exit (from the runner's last line, printed flushed, to the
process's end: the collections and teardown of every module's objects) over the NumPy-only
process's, the same pairing; import-to-result plus it is the warm process's cost from clocks
that move by tenths of a millisecond, not milliseconds, printed beside the CPU figure.
Then: bundle mode's first call with ``--bundle-kernels`` kernels in the bundle
(``_bundles.py`` fills one), and the steady-state table of 1 against 2 threads
(``thread_scaling.py``).  At least 9 runs per case (``--runs``), interleaved case by case;
figures are min / median / max.  Targets (printed beside the figures, never asserted):

* every Tack path's first call within 1.3x, or 1 ms, of the user-directory path's;
* import-to-result at most 15 ms for both kernels on every path;
* the whole warm process at most 5 ms over the NumPy-only process;
* bundle mode's first call with the most kernels within 1.5x of that with the fewest.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNNER = os.path.join(HERE, "_deployed_runner.py")
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _common import counts, finish  # noqa: E402  (benchmarks/ is on sys.path)

TARGET_PATH_RATIO, TARGET_PATH_SLACK_S = 1.3, 1e-3
TARGET_IMPORT_TO_RESULT_S = 15e-3
TARGET_OVER_NUMPY_S = 5e-3
TARGET_BUNDLE_GROWTH = 1.5
KERNELS = ("contour", "saxpy")
MPI_CASES = ("mpi", "mpisite")
# Environment that would change what a process measures; each case sets its own.
_SCRUB = ("PYTHONDONTWRITEBYTECODE", "TACK_IMPORT_IMAGE", "TACK_TIMING", "TACK_CACHE",
          "TACK_CACHE_DIR", "TACK_CACHE_SIZE", "TACK_CACHE_LOG", "TACK_CACHE_BUNDLES", "TACK_BENCH_SITE",
          "TACK_NUM_THREADS", "NUMBA_CACHE_DIR", "WARP_CACHE_PATH", "TACK_CONFIG")


# The measured processes run without the ``site`` module (``python -S``), NumPy and the rest found
# through PYTHONPATH (this Python's site-packages): ``.pth`` files run code in every process at
# start, and what they import is then free to whatever runs after.  Here a sandbox's certifi hook
# and the checkout's editable install imported pathlib, tempfile, importlib.util, zlib and
# threading into every process, the NumPy-only one included, and so hid 1.6 ms of what a warm
# Tack process imports of its own (a Spack or conda environment runs no such hooks).
# ``--with-site`` measures with them.
CLEAN = True


def _site_dirs() -> list:
    import site
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if os.path.isdir(d)]


def _python(env):
    """(the interpreter's argv, env) of a measured process: ``-S``, site-packages on PYTHONPATH."""
    if not CLEAN:
        return [sys.executable], env
    path = os.pathsep.join(p for p in [env.get("PYTHONPATH", ""), *_site_dirs()] if p)
    return [sys.executable, "-S"], dict(env, PYTHONPATH=path)


def _log(msg):
    print(f"[deployed_warm] {msg}", file=sys.stderr, flush=True)


def _env(**over):
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    # OpenBLAS starts a thread per core at NumPy's import, which spins for a while: CPU time
    # that is NumPy's, different in every process. One thread, in every case alike.
    env.update(OPENBLAS_NUM_THREADS="1")
    env.update({k: str(v) for k, v in over.items()})
    return env


def _cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(argv, env, timeout=600):
    """Run a command; -> (its JSON last line or None, spawn-to-exit seconds, CPU seconds, seconds
    from that line to the process's end: the interpreter's exit, as the runner prints its line
    last, flushed)."""
    with tempfile.TemporaryFile("w+") as err:
        c0, t0 = _cpu(), time.perf_counter()
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        lines, t_line = [], None
        try:
            for line in p.stdout:
                lines.append(line)
                t_line = time.perf_counter()
            p.wait(timeout=timeout)
        except BaseException:
            p.kill()
            p.wait()
            raise
        t_end = time.perf_counter()
        wall, cpu = t_end - t0, _cpu() - c0
        if p.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(map(str, argv))} failed ({p.returncode}):\n{err.read()[-3000:]}")
    last = lines[-1].strip() if lines else ""
    return (json.loads(last) if last.startswith("{") else None), wall, cpu, t_end - (t_line or t_end)


def runner(lib, kernel, size, env, mpi_ranks=0):
    python, env = _python(env)
    argv = python + [RUNNER, lib, kernel, str(size)]
    if mpi_ranks:
        argv = [shutil.which("mpiexec"), "-n", str(mpi_ranks)] + argv + ["--mpi"]
    res, wall, cpu, exit_s = _run(argv, env)
    res["process_wall_s"], res["process_cpu_s"], res["exit_s"] = wall, cpu, exit_s
    # What a user's process costs: the process's CPU less the runner's own after the result
    # (checking it, gathering the figures: ``report_cpu_s``, measured in the process).
    res["job_cpu_s"] = cpu - res.get("report_cpu_s", 0.0)
    if not res.get("ok"):
        raise RuntimeError(f"{lib} {kernel}: wrong result")
    return res


def _install(tmp):
    site = os.path.join(tmp, "site")
    shutil.copytree(os.path.join(ROOT, "tack"), os.path.join(site, "tack"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(site, quiet=1)           # as pip does, whatever PYTHONDONTWRITEBYTECODE says
    # The import image, as `bundles install` writes it into a Spack, conda or EasyBuild prefix
    # (and a user's own install gets from its first compiling process).
    _tool(["tack.site", "image"], _env(PYTHONPATH=site), tmp)
    return site


def _site_arch():
    return "cpu:aarch64" if platform.machine() in ("aarch64", "arm64") else "cpu:x86_64_v3"


# The conda package's CPU bundles (recipes/conda/build_tack.sh): every x86-64 level, in one directory.
CONDA_LEVELS = ("x86_64_v2", "x86_64_v3", "x86_64_v4")


def _site_config(tmp, size, n, archs=None):
    path = os.path.join(tmp, "site.yaml")
    archs = archs or (_site_arch().split(":")[1],)
    with open(path, "w") as f:
        f.write(f"version: 1\nbuild:\n  archs:\n    cpu: [{', '.join(archs)}]\n"
                f"  kernels:\n    - module: tack.kernels.contour\n      shapes: [[{size}, {size}, {size}]]\n"
                f"    - module: _deployed_kernels\n      kernel: saxpy\n"
                f"      args: [float32, 'float32[{n}]', 'float32[{n}]', 'float32[{n}]']\n")
    return path


def _host_levels(base) -> str:
    """This host's microarchitecture and its ancestors, as archspec names them (the installed
    Tack's ``tack.archs``), one line."""
    return subprocess.run([sys.executable, "-c", "from tack.archs import cpu_candidates, host_cpu; "
                           "print(' '.join(cpu_candidates(host_cpu())))"], env=_env(**base),
                          capture_output=True, text=True, timeout=120).stdout


def _tool(args, env, cwd):
    # Run outside the checkout: ``python -m`` puts the working directory first on sys.path.
    p = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"python -m {' '.join(args)} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def _moved_copy(tmp, site):
    """A copy of the installed ``site`` (its image too) with every source's time then set to 0."""
    moved = os.path.join(tmp, "site-moved")
    shutil.copytree(site, moved)                    # times kept: the image current by time
    for here, _, files in os.walk(os.path.join(moved, "tack")):
        for f in files:
            if f.endswith(".py"):
                os.utime(os.path.join(here, f), (0, 0))
    return moved


def prepare(tmp, size, n, ranks):
    """The installed copy and each path's cache, primed: -> {case: (lib, env, mpi ranks)}."""
    site = _install(tmp)
    pypath = os.pathsep.join([site, HERE])
    base = {"TACK_BENCH_SITE": site, "PYTHONPATH": pypath}
    user, own = os.path.join(tmp, "user"), os.path.join(tmp, "own")
    _log("priming the user's cache (one process per kernel)")
    for k in KERNELS:
        runner("tack", k, _size(k, size, n), _env(TACK_CACHE_DIR=user, **base))
        runner("tack", k, _size(k, size, n), _env(TACK_CACHE_DIR=own, **base))
    moved = _moved_copy(tmp, site)  # after priming: a compiling process would write its image again
    _log("packing the user's own bundle (python -m tack.cache pack)")
    _tool(["tack.cache", "pack"], _env(TACK_CACHE_DIR=own, **base), tmp)
    sites = os.path.join(tmp, "bundles")
    _log(f"building a site bundle for {_site_arch()} (python -m tack.site bundles build)")
    _tool(["tack.site", "bundles", "build", _site_config(tmp, size, n), "--output", sites],
          _env(**base), tmp)
    levels = None
    if platform.machine() == "x86_64" and "x86_64_v4" in _host_levels(base):
        levels = os.path.join(tmp, "bundles-levels")
        _log(f"building site bundles for {', '.join(CONDA_LEVELS)} in one directory, as conda ships them")
        _tool(["tack.site", "bundles", "build", _site_config(tmp, size, n, CONDA_LEVELS), "--output",
               levels], _env(**base), tmp)
    cases = {"numpy": ("numpy", _env(**base), 0),
             "user": ("tack", _env(TACK_CACHE_DIR=user, **base), 0),
             # the same, with the import image switched off: what the image saves
             "noimage": ("tack", _env(TACK_CACHE_DIR=user, TACK_IMPORT_IMAGE=0, **base), 0),
             # the same, from an install whose sources' times moved after its image was written
             "moved": ("tack", _env(TACK_CACHE_DIR=user, TACK_BENCH_SITE=moved,
                                    PYTHONPATH=os.pathsep.join([moved, HERE])), 0),
             "bundle": ("tack", _env(TACK_CACHE_DIR=own, TACK_CACHE="bundle", **base), 0),
             "site": ("tack", _env(TACK_CACHE_DIR=os.path.join(tmp, "empty-{run}"),
                                   TACK_CACHE_BUNDLES=sites, **base), 0)}
    if levels:
        cases["levels"] = ("tack", _env(TACK_CACHE_DIR=os.path.join(tmp, "empty-{run}"),
                                        TACK_CACHE_BUNDLES=levels, **base), 0)
    if ranks and shutil.which("mpiexec"):
        try:
            import mpi4py  # noqa: F401
            cases["mpi"] = ("tack", _env(TACK_CACHE_DIR=own, **base), ranks)
            # a site install and a new user: the site bundle, read by rank 0 and broadcast
            cases["mpisite"] = ("tack", _env(TACK_CACHE_DIR=os.path.join(tmp, "empty-{run}"),
                                             TACK_CACHE_BUNDLES=sites, **base), ranks)
        except ImportError:
            _log("mpi4py is not installed: no MPI case")
    peers = os.environ.get("TACK_BENCH_PEERS", "")
    for lib, var in (("numba", "NUMBA_CACHE_DIR"), ("warp", "WARP_CACHE_PATH")):
        env = _env(**{var: os.path.join(tmp, lib)}, **base, TACK_BENCH_PEERS=peers)
        try:
            for k in KERNELS:
                _log(f"priming {lib} for the {k}")
                runner(lib, k, _size(k, size, n), env)
            cases[lib] = (lib, env, 0)
        except RuntimeError as e:
            _log(f"{lib}: not measured ({str(e).strip().splitlines()[-1]})")
    return cases


def page_fault_seconds(pages=256, repeats=20):
    """What touching a fresh page costs this machine now (a minor page fault on anonymous memory,
    the best of ``repeats``): with the pages a warm process touches first, how much of its cost
    is its memory's first touch (about 1 us a page on this VM; a busy host makes it dearer)."""
    import mmap
    size, best = pages * mmap.PAGESIZE, float("inf")
    for _ in range(repeats):
        m = mmap.mmap(-1, size)
        t0 = time.perf_counter()
        for off in range(0, size, mmap.PAGESIZE):
            m[off] = 1
        t = time.perf_counter() - t0
        m.close()
        best = min(best, t / pages)
    return best


def _size(kernel, size, n):
    return size if kernel == "contour" else n


def measure(runs=9, size=21, n=100_000, ranks=4, bundle_kernels=(10, 3000), threads=True):
    tmp = tempfile.mkdtemp(prefix="tack-deployed-")
    res = {"benchmark": "deployed_warm", "runs": runs, "size": size, "saxpy": n, "ranks": ranks,
           "python": sys.version.split()[0], "machine": platform.machine(),
           "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
           "site": not CLEAN}
    try:
        cases = prepare(tmp, size, n, ranks)
        res["cases"] = list(cases)
        raw = {(c, k): [] for c in cases for k in KERNELS}
        for i in range(runs):
            _log(f"run {i + 1}/{runs}: " + ", ".join(cases))
            for k in KERNELS:
                for case, (lib, env, nranks) in cases.items():
                    e = dict(env)
                    if "{run}" in e.get("TACK_CACHE_DIR", ""):
                        e["TACK_CACHE_DIR"] = e["TACK_CACHE_DIR"].format(run=f"{k}-{i}")
                    # Each single-process case's own NumPy-only process, just before it (the
                    # run's first one drifts from the cases measured later in the run).
                    base = None
                    if case != "numpy" and not nranks:
                        base = runner("numpy", k, _size(k, size, n), cases["numpy"][1])
                    got = runner(lib, k, _size(k, size, n), e, nranks)
                    if base is not None:
                        got["baseline_cpu_s"] = base["job_cpu_s"]
                        got["baseline_wall_s"] = base["process_wall_s"]
                        got["baseline_exit_s"] = base["exit_s"]
                    raw[(case, k)].append(got)
        res["raw"] = {f"{c}/{k}": v for (c, k), v in raw.items()}
        res["page_fault_s"] = page_fault_seconds()
        res["problems"] = _problems(raw)
        if bundle_kernels:
            try:
                from _bundles import measure_first_call
            except ImportError as e:
                _log(f"no bundle-growth case: {e}")
            else:
                res["bundle_growth"] = measure_first_call(tmp, os.path.join(tmp, "site"),
                                                          bundle_kernels, runs=runs, size=size)
        if threads:
            try:
                from thread_scaling import table
            except ImportError as e:
                _log(f"no threads table: {e}")
            else:
                res["threads"] = table()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def _problems(raw):
    """What would make a figure meaningless: a Tack warm process that compiled, or a site-bundle
    hit that imported archspec or LLVM's binding."""
    out = []
    for (case, k), runs in raw.items():
        for r in runs:
            if r.get("compiled"):
                out.append(f"{case}/{k}: compiled {r['compiled']}")
            if r.get("lib") == "tack" and (case == "noimage") == bool(r.get("image_served")):
                out.append(f"{case}/{k}: {r.get('image_served')} modules from the import image")
            if r.get("lib") == "tack" and (case == "moved") != bool(r.get("image_content_checks")):
                out.append(f"{case}/{k}: {r.get('image_content_checks')} modules checked by content")
            if case in ("site", "levels") and (r["loaded"].get("archspec")
                                               or r["loaded"].get("llvmlite.binding")):
                out.append(f"{case}/{k}: imported " + ", ".join(m for m in ("archspec", "llvmlite.binding")
                                                             if r["loaded"].get(m)))
    return sorted(set(out))


def _stats(runs, key, ranks_max=False):
    if ranks_max:
        vals = [max(x[key] for x in r["ranks"]) for r in runs]
    else:
        vals = [r[key] for r in runs if r.get(key) is not None]
    if not vals:
        return None
    return min(vals), statistics.median(vals), max(vals)


def _over_numpy(raw, case, kernel, key):
    """The median, over the runs, of a case's figure minus that of the NumPy-only process run
    just before it (one after the other: a slow spell of the machine moves both alike)."""
    base = {"job_cpu_s": "baseline_cpu_s", "process_wall_s": "baseline_wall_s",
            "exit_s": "baseline_exit_s"}[key]
    pairs = zip(raw[(case, kernel)], raw[("numpy", kernel)])
    return statistics.median(r[key] - r.get(base, b[key]) for r, b in pairs)


def _fmt(t, scale=1e3):
    return "-" if t is None else "/".join(f"{x * scale:.2f}" for x in t)


def _with_rank_cpu(line, res, raw, case, kernel, key):
    """A target line, with the slowest rank's CPU time (``key``) inside its closing bracket for
    the MPI case: its ranks may share fewer CPUs, so its wall time also holds the others'."""
    cpu = _stats(raw[(case, kernel)], key, ranks_max=True) if case in MPI_CASES else None
    if cpu is None:
        return line
    return (line[:-1] + f"; the slowest rank's, {res['ranks']} ranks on {res['cpus']} CPUs; "
            f"its CPU time {cpu[1] * 1e3:.2f} ms)")


def report(res, file=None):
    p = lambda s="": print(s, file=file or sys.stdout)  # noqa: E731
    raw = {tuple(k.split("/")): v for k, v in res["raw"].items()}
    p(f"Deployed warm start: {res['runs']} fresh processes per case, Python {res['python']}, "
      f"{res['machine']}, {res['cpus']} CPUs; ms, min/median/max")
    p("Measured processes: " + ("with the site module and this Python's .pth files (--with-site)"
                                if res.get("site") else "python -S (no .pth file runs), site-packages on PYTHONPATH"))
    for k in KERNELS:
        label = f"21³ contour" if k == "contour" else f"{res['saxpy']}-element saxpy"
        p(f"\n{label}")
        p(f"  {'path':<8}{'first call':>22}{'import-to-result':>22}{'process CPU':>22}{'over NumPy':>12}"
          f"{'exit':>7}{'vs user':>9}")
        base = _stats(raw[("numpy", k)], "process_cpu_s")
        user = _stats(raw[("user", k)], "first_call_s")
        for case in res["cases"]:
            if case == "numpy":
                p(f"  {'numpy':<8}{'-':>22}{'-':>22}{_fmt(base):>22}")
                continue
            runs = raw[(case, k)]
            first = _stats(runs, "first_call_s", ranks_max=case in MPI_CASES)
            itr = _stats(runs, "import_to_result_s", ranks_max=case in MPI_CASES)
            wall = _stats(runs, "process_cpu_s")
            over = f"{_over_numpy(raw, case, k, 'job_cpu_s') * 1e3:.2f}" if case not in MPI_CASES else "-"
            ex = f"{_over_numpy(raw, case, k, 'exit_s') * 1e3:.2f}" if case not in MPI_CASES else "-"
            ratio = f"{first[1] / user[1]:.2f}x"
            p(f"  {case:<8}{_fmt(first):>22}{_fmt(itr):>22}{_fmt(wall):>22}{over:>12}{ex:>7}{ratio:>9}")
    p("\nTargets (medians):")
    for k in KERNELS:
        user = _stats(raw[("user", k)], "first_call_s")[1]
        for case in ("bundle", "site", "levels", "mpi", "mpisite"):
            if case not in res["cases"]:
                continue
            first = _stats(raw[(case, k)], "first_call_s", ranks_max=case in MPI_CASES)[1]
            ok = first <= max(user * TARGET_PATH_RATIO, user + TARGET_PATH_SLACK_S)
            line = (f"  {k}/{case}: first call {first * 1e3:.2f} ms vs user {user * 1e3:.2f} ms "
                    f"(within 1.3x or 1 ms: {'met' if ok else 'NOT met'})")
            p(_with_rank_cpu(line, res, raw, case, k, "first_call_cpu_s"))
        for case in ("user", "bundle", "site", "levels", "mpi", "mpisite"):
            if case not in res["cases"]:
                continue
            itr = _stats(raw[(case, k)], "import_to_result_s", ranks_max=case in MPI_CASES)[1]
            line = (f"  {k}/{case}: import-to-result {itr * 1e3:.2f} ms (<= 15 ms: "
                    f"{'met' if itr <= TARGET_IMPORT_TO_RESULT_S else 'NOT met'})")
            p(_with_rank_cpu(line, res, raw, case, k, "import_to_result_cpu_s"))
        if "noimage" in res["cases"]:
            with_image = _stats(raw[("user", k)], "import_to_result_s")[1]
            without = _stats(raw[("noimage", k)], "import_to_result_s")[1]
            p(f"  {k}: the import image takes import-to-result from {without * 1e3:.2f} to "
              f"{with_image * 1e3:.2f} ms ({(without - with_image) * 1e3:.2f} ms less)")
        if "moved" in res["cases"]:
            by_time = _stats(raw[("user", k)], "import_to_result_s")[1]
            by_content = _stats(raw[("moved", k)], "import_to_result_s")[1]
            checks = statistics.median(r["image_content_checks"] for r in raw[("moved", k)])
            p(f"  {k}: an image checking its {checks:.0f} modules by content (sources' times moved) "
              f"takes import-to-result from {by_time * 1e3:.2f} to {by_content * 1e3:.2f} ms "
              f"({(by_content - by_time) * 1e3:.2f} ms more)")
        cpu = _over_numpy(raw, "user", k, "job_cpu_s")
        wall = _over_numpy(raw, "user", k, "process_wall_s")
        p(f"  {k}: warm process {cpu * 1e3:.2f} ms of CPU over NumPy-only, wall "
          f"{wall * 1e3:.2f} ms (<= 5 ms: {'met' if cpu <= TARGET_OVER_NUMPY_S else 'NOT met'}"
          ", by CPU time: the wall time of a 100 ms process moves by tens of ms here)")
        itr = _stats(raw[("user", k)], "import_to_result_s")[1]
        ex = _over_numpy(raw, "user", k, "exit_s")
        p(f"  {k}: the same from the clocks of its parts: import-to-result {itr * 1e3:.2f} + the "
          f"interpreter's exit over NumPy's {ex * 1e3:.2f} = {(itr + ex) * 1e3:.2f} ms "
          f"(<= 5 ms: {'met' if itr + ex <= TARGET_OVER_NUMPY_S else 'NOT met'})")
    for peer in ("numba", "warp"):
        for k in KERNELS:
            if peer in res["cases"]:
                t = _stats(raw[(peer, k)], "import_to_result_s")[1]
                u = _stats(raw[("user", k)], "import_to_result_s")[1]
                p(f"  {k}: {peer} warm import-to-result {t * 1e3:.1f} ms, Tack's {t / u:.1f}x faster")
    fault = res.get("page_fault_s")
    for k in KERNELS:
        n = _stats(raw[("user", k)], "page_faults")
        if n and fault:
            p(f"  {k}: pages first touched from import to result {n[1]:.0f} (user's directory, median); "
              f"a page fault costs {fault * 1e6:.1f} us on this machine now, so {n[1] * fault * 1e3:.2f} ms")
        objs, base = _stats(raw[("user", k)], "tracked_objects"), _stats(raw[("numpy", k)], "tracked_objects")
        if objs and base:
            p(f"  {k}: objects the collector tracks at the result {objs[1]:.0f}, NumPy-only {base[1]:.0f} "
              f"(the exit's full collection examines each)")
    for k in KERNELS:
        other = sorted({m for case in ("user", "site") if (case, k) in raw
                        for r in raw[(case, k)] for m in r.get("other_modules", ())})
        p(f"  {k}: modules a warm process imported besides Tack's own: {', '.join(other) or 'none'}")
        gcs = _stats(raw[("user", k)], "gc_s")
        middle = sum(1 for r in raw[("user", k)] if any(g >= 1 for g in r.get("gc_runs", ())))
        p(f"  {k}: of import-to-result, the collector's runs {_fmt(gcs)} ms (user's directory; "
          f"a middle-generation run in {middle} of {len(raw[('user', k)])} processes)")
    g = res.get("bundle_growth")
    if g:
        p("\nBundle mode's first call against the bundle's size (contour, ms min/median/max):")
        for row in g["rows"]:
            p(f"  {row['kernels']:>6} kernels, {row['bytes'] / 1e6:7.2f} MB: {_fmt(row['first_call'])}")
        lo, hi = g["rows"][0]["first_call"][1], g["rows"][-1]["first_call"][1]
        p(f"  growth {hi / lo:.2f}x (<= {TARGET_BUNDLE_GROWTH}x: "
          f"{'met' if hi / lo <= TARGET_BUNDLE_GROWTH else 'NOT met'})")
    if res.get("threads"):
        p("\nSteady state, 1 against 2 threads:")
        for line in res["threads"]:
            p("  " + line)
    if res["problems"]:
        p("\nPROBLEMS (figures above not meaningful where they apply):")
        for x in res["problems"]:
            p(f"  {x}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9, help="fresh processes per case (default 9)")
    ap.add_argument("--size", type=int, default=21, help="contour field extent (default 21)")
    ap.add_argument("--saxpy", type=int, default=100_000, help="saxpy elements (default 100000)")
    ap.add_argument("--ranks", type=int, default=4, help="MPI ranks (default 4; 0: no MPI case)")
    ap.add_argument("--bundle-kernels", default="10,3000",
                    help="kernel counts of the bundle-growth case (default 10,3000; 0: skip)")
    ap.add_argument("--no-threads", action="store_true", help="skip the 1 against 2 threads table")
    ap.add_argument("--with-site", action="store_true",
                    help="run the measured processes with the site module and its .pth files")
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON")
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    bk = () if a.bundle_kernels.strip() == "0" else counts(ap, a.bundle_kernels, "--bundle-kernels",
                                                            "10,3000", 1)
    global CLEAN
    CLEAN = not a.with_site
    res = measure(a.runs, a.size, a.saxpy, a.ranks, bk, not a.no_threads)
    finish(res, report, a.json, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
