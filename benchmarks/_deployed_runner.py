"""One process for ``deployed_warm.py``:
``python benchmarks/_deployed_runner.py tack|numba|warp|numpy contour|saxpy SIZE [--mpi]``.

The parent sets the environment (the cache settings of the path measured, TACK_BENCH_SITE
for the installed copy) and times the process from spawn to exit.  In here: ``import
numpy`` (timed), the input built (not timed), then, timed together as import-to-result and
each on its own: the library's import (Tack: ``import tack``; Warp with its ``wp.init()``),
the kernel's module, under ``--mpi`` ``tack.cache.load_bundle(MPI.COMM_WORLD)`` (mpi4py
itself is imported before the clock starts: it is the job's, not Tack's), and the first
call.  ``numpy`` runs no library: the baseline a warm process is compared with.  Then,
untimed: whether the result is right, what the cache did, the first call's stages, and
which modules were loaded.  Prints one JSON object on the last line (rank 0 under
``--mpi``, with every rank's figures).  Not meant to be imported.
"""

import time

T_START = time.perf_counter()

import gc  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "tests", "kernels"), os.path.join(ROOT, "benchmarks"),
          os.path.join(ROOT, "benchmarks", "peers")):
    if p not in sys.path:
        sys.path.insert(0, p)
if os.environ.get("TACK_BENCH_SITE"):               # an installed copy of Tack, found first
    sys.path.insert(0, os.environ["TACK_BENCH_SITE"])
if os.environ.get("TACK_BENCH_PEERS"):              # peers installed with pip --target
    sys.path.append(os.environ["TACK_BENCH_PEERS"])

COMPILE_STAGES = ("lower", "specialize", "init", "codegen", "llvm")
from _deployed_inputs import MODULES, check as _check, make as _inputs  # noqa: E402


def _emit(out):
    import json                 # not before: NumPy does not import it, nor may anything measured
    print(json.dumps(out), flush=True)


def _gc_clock(runs):
    """A ``gc.callbacks`` entry appending (generation, seconds) of each collector run to ``runs``."""
    started = [0.0]

    def callback(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            runs.append((info["generation"], time.perf_counter() - started[0]))
    return callback


def _start(lib):
    if lib == "tack":
        import tack  # noqa: F401
    elif lib == "numba":
        import numba  # noqa: F401
    elif lib == "warp":
        import contextlib
        import io
        import warp
        with contextlib.redirect_stdout(io.StringIO()):
            warp.init()


def main():
    lib, kernel, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mpi = "--mpi" in sys.argv
    comm = None
    if mpi:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    out = {"lib": lib, "kernel": kernel, "size": size}
    t0 = time.perf_counter()
    import numpy  # noqa: F401
    out["numpy_import_s"] = time.perf_counter() - t0
    args = _inputs(kernel, size)
    if comm is not None:
        comm.Barrier()          # the ranks start Tack together: their start-up skew is the job's
    if lib == "numpy":
        c = time.process_time()
        out["ok"], out["tracked_objects"] = True, len(gc.get_objects())
        out["report_cpu_s"] = time.process_time() - c
        _emit(out)
        return
    module, call = MODULES[kernel][lib]
    before = set(sys.modules)
    gc_runs = []                # the collector's runs from here to the result: (generation, s)
    clock = _gc_clock(gc_runs)
    gc.callbacks.append(clock)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    c_lib = time.process_time()
    t_lib = time.perf_counter()
    _start(lib)
    t1 = time.perf_counter()
    out["import_s"] = t1 - t_lib
    fn = getattr(importlib.import_module(module), call)
    t2 = time.perf_counter()
    out["module_import_s"] = t2 - t1
    if mpi:
        import tack.cache
        out["bundle_entries"] = tack.cache.load_bundle(comm)
    c3 = time.process_time()
    t3 = time.perf_counter()
    out["load_bundle_s"] = t3 - t2
    result = fn(*args)
    t4 = time.perf_counter()
    c4 = time.process_time()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    gc.callbacks.remove(clock)
    # pages touched for the first time, each a page fault (deployed_warm says what one costs)
    out["page_faults"] = faults
    out["first_call_s"] = t4 - t3
    out["import_to_result_s"] = t4 - t_lib
    # its CPU time: under MPI with more ranks than CPUs, the wall clock also holds the other ranks'
    out["import_to_result_cpu_s"] = c4 - c_lib
    out["first_call_cpu_s"] = c4 - c3
    out["gc_s"] = sum(t for _, t in gc_runs)
    out["gc_runs"] = [g for g, _ in gc_runs]
    # what the full collection at the interpreter's exit examines (after the clock: untimed)
    out["tracked_objects"] = len(gc.get_objects())
    out["ok"] = _check(kernel, args, result)
    out["loaded"] = {m: m in sys.modules for m in ("archspec", "llvmlite.binding",
                                                   "concurrent.futures", "hashlib")}
    if lib == "tack":
        # what the warm path imported besides Tack (and the job's mpi4py): its cost is Tack's
        out["other_modules"] = sorted(m for m in set(sys.modules) - before
                                      if m.partition(".")[0] not in ("tack", "mpi4py", module))
        import tack.cache
        kernels = ("classify", "emit") if kernel == "contour" else ("saxpy",)
        mod = sys.modules[module] if kernel == "saxpy" else importlib.import_module(module)
        timings = {k: dict(getattr(mod, k).timings) for k in kernels}
        out["timings"] = timings
        out["compiled"] = [k for k in kernels if any(s in timings[k] for s in COMPILE_STAGES)]
        st = tack.cache.stats()
        out["cache"] = {"hits": st["hits"]["variant"], "bytes_read": st.get("bytes_read"),
                        "mode": tack.cache.settings().mode}
        out["tack_file"] = tack.__file__
        image = tack._image.finder()
        out["image_served"] = image.served if image is not None else 0
        out["image_content_checks"] = image.content_checks if image is not None else 0
    # The CPU this process spent after the result, checking it and gathering the figures above:
    # the harness's, not a user's process's, so deployed_warm takes it off the process's CPU time.
    out["report_cpu_s"] = time.process_time() - c4
    if comm is not None:
        ranks = comm.gather(out, root=0)
        if comm.Get_rank() != 0:
            return
        out = dict(ranks[0], ranks=ranks)
    _emit(out)                          # now: what follows is the interpreter's exit


main()
