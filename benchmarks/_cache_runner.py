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

import importlib  # noqa: E402
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
COMPILE_STAGES = ("lower", "specialize", "init", "codegen", "llvm")
CACHE_STAGES = ("find", "read", "deps")        # a hit's: the session and keys, the entry, its record


def _timed(out, key, fn):
    t0 = time.perf_counter()
    result = fn()
    out[key] = time.perf_counter() - t0
    return result


def _library_and_call(n, out, start, module, call):
    """Time the library's import (``start``: import and any init), the contour module's
    import, then the first call of ``module.call`` on ``sphere(n)``; -> (module, verts, faces)."""
    _timed(out, "import_s", start)
    mod = _timed(out, "module_import_s", lambda: importlib.import_module(module))
    import fields
    field, level = fields.sphere(n), fields.SPHERE_LEVEL
    verts, faces = _timed(out, "first_call_s", lambda: getattr(mod, call)(field, level))
    return mod, verts, faces


def _run_tack(n, out):
    mod, verts, faces = _library_and_call(n, out, lambda: importlib.import_module("tack"),
                                          "tack.kernels.contour", "contour")
    # What the first call did (nothing below is timed).
    out["llvm_loaded"] = "llvmlite.binding" in sys.modules
    out["frontend_modules"] = sorted(m for m in sys.modules if m.startswith("tack.frontend"))
    timings = {k: dict(getattr(mod, k).timings) for k in KERNELS}
    out["timings"] = timings
    out["compiled"] = [k for k in KERNELS if any(s in timings[k] for s in COMPILE_STAGES)]
    out["cache_stage_s"] = sum(t.get(s, 0.0) for t in timings.values() for s in CACHE_STAGES)
    import tack
    import tack.cache
    from tack.cache.keys import tack_version_id
    out["cache_stats"] = tack.cache.stats()
    out["cache_env"] = os.environ.get("TACK_CACHE")
    out["tack_version"] = tack_version_id()      # the version directory this process used
    out["tack_file"] = tack.__file__
    return verts, faces


def _run_numba(n, out):
    peer, verts, faces = _library_and_call(n, out, lambda: importlib.import_module("numba"),
                                           "numba_contour_cached", "contour_numba")
    out["numba_version"] = sys.modules["numba"].__version__
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

    def start():
        import warp
        with contextlib.redirect_stdout(io.StringIO()):
            warp.init()
    said = io.StringIO()
    with contextlib.redirect_stdout(said):          # Warp says per module: "(compiled)" or "(cached)"
        _, verts, faces = _library_and_call(n, out, start, "warp_contour", "contour_warp")
    out["warp_version"] = sys.modules["warp"].__version__
    out["compiled"] = ["warp_contour"] if "(compiled)" in said.getvalue() else []
    return verts, faces


def _run_taichi(n, out):
    """Taichi (CPU) from its offline cache (TACK_BENCH_TAICHI_CACHE).  ``ti.init()`` is
    Taichi's start-up call: it is counted with the import."""
    def start():
        import taichi as ti
        ti.init(arch=ti.cpu, offline_cache=True, log_level=ti.ERROR,
                offline_cache_file_path=os.environ["TACK_BENCH_TAICHI_CACHE"])
    _, verts, faces = _library_and_call(n, out, start, "taichi_contour", "contour_taichi")
    out["taichi_version"] = ".".join(map(str, sys.modules["taichi"].__version__))
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
