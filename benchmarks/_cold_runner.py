"""One cold process for ``cold_first_call.py``: ``python benchmarks/_cold_runner.py tack|numba [N]``.

Builds ``sphere(N)`` (NumPy and the field module are imported first and not
counted), then times, in this order:

* the library import (Tack: ``import tack`` and ``tack.kernels.contour``;
  Numba: ``import numba``, then the peer module separately),
* the first contour call (compiles; Tack also reports its per-kernel stage
  times from each kernel's ``timings``),
* the second call (already compiled; for reference).

Prints one JSON object on the last line of stdout.  Not meant to be imported.
"""

import time

T_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "tests", "kernels"), os.path.join(ROOT, "benchmarks", "peers")):
    if p not in sys.path:
        sys.path.insert(0, p)


def _run_tack(field, level, out):
    t0 = time.perf_counter()
    import tack  # noqa: F401
    from tack.kernels import contour as mod
    t1 = time.perf_counter()
    out["import_s"] = t1 - t0

    t0 = time.perf_counter()
    verts, faces = mod.contour(field, level)
    t1 = time.perf_counter()
    out["first_call_s"] = t1 - t0
    out["stages"] = {k: dict(getattr(mod, k).timings)
                     for k in ("classify", "emit")}

    t0 = time.perf_counter()
    mod.contour(field, level)
    out["second_call_s"] = time.perf_counter() - t0
    out["tack_cache_env"] = os.environ.get("TACK_CACHE")
    return verts, faces


def _run_numba(field, level, out):
    t0 = time.perf_counter()
    import numba
    t1 = time.perf_counter()
    out["import_s"] = t1 - t0
    out["numba_version"] = numba.__version__

    t0 = time.perf_counter()
    from numba_contour import contour_numba  # also imports tack.kernels.mc_tables (tables)
    t1 = time.perf_counter()
    out["peer_import_s"] = t1 - t0

    t0 = time.perf_counter()
    verts, faces = contour_numba(field, level)
    t1 = time.perf_counter()
    out["first_call_s"] = t1 - t0

    t0 = time.perf_counter()
    contour_numba(field, level)
    out["second_call_s"] = time.perf_counter() - t0
    return verts, faces


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    which = argv[0]
    n = int(argv[1]) if len(argv) > 1 else 21
    out = {"which": which, "n": n}

    t0 = time.perf_counter()
    import numpy  # noqa: F401
    out["numpy_import_s"] = time.perf_counter() - t0
    import fields

    field = fields.sphere(n)
    level = fields.SPHERE_LEVEL

    if which == "tack":
        verts, faces = _run_tack(field, level, out)
    elif which == "numba":
        verts, faces = _run_numba(field, level, out)
    else:
        raise SystemExit(f"unknown runner {which!r}; use 'tack' or 'numba'")
    out["nverts"] = int(len(verts))
    out["ntris"] = int(len(faces))
    out["in_process_s"] = time.perf_counter() - T_START
    print(json.dumps(out))


if __name__ == "__main__":
    main()
