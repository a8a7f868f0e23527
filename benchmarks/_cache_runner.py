"""One process for ``cache_warm.py``: ``python benchmarks/_cache_runner.py tack|numba|warp|taichi [N]``.

The parent sets the environment (TACK_CACHE, TACK_CACHE_DIR, NUMBA_CACHE_DIR)
and times the whole process from spawn to exit.  In here, in this order:

* ``import numpy`` (timed),
* the library: Tack: ``import tack`` (timed), then ``tack.kernels.contour``
  (timed separately); Numba: ``import numba`` (timed), then the cached peer
  module ``numba_contour_cached`` (timed separately; it also imports
  ``tack.kernels.mc_tables`` for the tables),
* ``sphere(N)`` is built (not timed),
* the first contour call (timed): a compile, or a load from the disk cache.

Then, untimed, what the cache did: Tack's ``tack.cache.stats()``, which
kernels ran a compile stage, and whether LLVM (``llvmlite.binding``) or the
front end's parser was loaded; Numba's dispatcher cache hits and misses.
There is no second call, so the parent's process wall is that of a process
doing one contour.  Prints one JSON object on the last line of stdout.
Not meant to be imported.
"""

import time

T_START = time.perf_counter()

import os  # noqa: E402
import sys  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "tests", "kernels"), os.path.join(ROOT, "benchmarks", "peers")):
    if p not in sys.path:
        sys.path.insert(0, p)
# TACK_BENCH_SITE: a directory holding an installed copy of Tack, found before the checkout.
if os.environ.get("TACK_BENCH_SITE"):
    sys.path.insert(0, os.environ["TACK_BENCH_SITE"])

KERNELS = ("classify", "emit")
COMPILE_STAGES = ("lower", "specialize", "init", "codegen", "llvm", "load")


def _run_tack(n, out):
    t0 = time.perf_counter()
    import tack  # noqa: F401
    out["import_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    from tack.kernels import contour as mod
    out["module_import_s"] = time.perf_counter() - t0

    import fields
    field, level = fields.sphere(n), fields.SPHERE_LEVEL

    t0 = time.perf_counter()
    verts, faces = mod.contour(field, level)
    out["first_call_s"] = time.perf_counter() - t0

    # What the first call did (nothing below is timed).
    out["llvm_loaded"] = "llvmlite.binding" in sys.modules
    out["frontend_modules"] = sorted(m for m in sys.modules if m.startswith("tack.frontend"))
    timings = {k: dict(getattr(mod, k).timings) for k in KERNELS}
    out["timings"] = timings
    out["compiled"] = [k for k in KERNELS if any(s in timings[k] for s in COMPILE_STAGES)]
    out["cache_stage_s"] = sum(t.get("cache", 0.0) for t in timings.values())
    import tack.cache
    out["cache_stats"] = tack.cache.stats()
    out["cache_env"] = os.environ.get("TACK_CACHE")
    from tack.cache.warm import tack_version_id
    import tack
    out["tack_version"] = tack_version_id()      # the version directory this process used
    out["tack_file"] = tack.__file__
    return verts, faces


def _run_numba(n, out):
    t0 = time.perf_counter()
    import numba
    out["import_s"] = time.perf_counter() - t0
    out["numba_version"] = numba.__version__

    t0 = time.perf_counter()
    import numba_contour_cached as peer
    out["module_import_s"] = time.perf_counter() - t0

    import fields
    field, level = fields.sphere(n), fields.SPHERE_LEVEL

    t0 = time.perf_counter()
    verts, faces = peer.contour_numba(field, level)
    out["first_call_s"] = time.perf_counter() - t0

    st = peer._contour.stats
    out["cache_hits"] = int(sum(st.cache_hits.values()))
    out["cache_misses"] = int(sum(st.cache_misses.values()))
    out["compiled"] = ["_contour"] if out["cache_misses"] else []
    return verts, faces


def _run_warp(n, out):
    """Warp (CPU) from its kernel cache (WARP_CACHE_PATH).  ``wp.init()`` (loading Warp's
    native libraries) is Warp's documented start-up call: it is counted with the import."""
    import contextlib
    import io

    t0 = time.perf_counter()
    import warp
    with contextlib.redirect_stdout(io.StringIO()):
        warp.init()
    out["import_s"] = time.perf_counter() - t0
    out["warp_version"] = warp.__version__

    t0 = time.perf_counter()
    import warp_contour as peer
    out["module_import_s"] = time.perf_counter() - t0

    import fields
    field, level = fields.sphere(n), fields.SPHERE_LEVEL

    said = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(said):          # Warp says per module: "(compiled)" or "(cached)"
        verts, faces = peer.contour_warp(field, level)
    out["first_call_s"] = time.perf_counter() - t0
    out["compiled"] = ["warp_contour"] if "(compiled)" in said.getvalue() else []
    return verts, faces


def _run_taichi(n, out):
    """Taichi (CPU) from its offline cache (TACK_BENCH_TAICHI_CACHE).  ``ti.init()`` is
    Taichi's start-up call: it is counted with the import."""
    t0 = time.perf_counter()
    import taichi as ti
    ti.init(arch=ti.cpu, offline_cache=True, log_level=ti.ERROR,
            offline_cache_file_path=os.environ["TACK_BENCH_TAICHI_CACHE"])
    out["import_s"] = time.perf_counter() - t0
    out["taichi_version"] = ".".join(map(str, ti.__version__))

    t0 = time.perf_counter()
    import taichi_contour as peer
    out["module_import_s"] = time.perf_counter() - t0

    import fields
    field, level = fields.sphere(n), fields.SPHERE_LEVEL

    t0 = time.perf_counter()
    verts, faces = peer.contour_taichi(field, level)
    out["first_call_s"] = time.perf_counter() - t0
    out["compiled"] = []           # Taichi does not say; the timings tell (a compile is seconds)
    return verts, faces


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    which = argv[0]
    n = int(argv[1]) if len(argv) > 1 else 21
    out = {"which": which, "n": n}

    t0 = time.perf_counter()
    import numpy  # noqa: F401
    out["numpy_import_s"] = time.perf_counter() - t0

    if which == "tack":
        verts, faces = _run_tack(n, out)
    elif which == "numba":
        verts, faces = _run_numba(n, out)
    elif which == "warp":
        verts, faces = _run_warp(n, out)
    elif which == "taichi":
        verts, faces = _run_taichi(n, out)
    else:
        raise SystemExit(f"unknown runner {which!r}; use tack, numba, warp or taichi")
    out["nverts"] = int(len(verts))
    out["ntris"] = int(len(faces))
    out["in_process_s"] = time.perf_counter() - T_START
    import json
    print(json.dumps(out))


if __name__ == "__main__":
    main()
