"""One MPI rank (or a plain process) for ``mpi_metadata.py``; not meant to be imported.

usage: python benchmarks/_mpi_rank.py KERNEL_DIR REPORT_DIR files|bundle|comm|site|sitecomm

The parent sets TACK_CACHE_DIR and TACK_CACHE (and, for ``site`` and ``sitecomm``,
TACK_CACHE_BUNDLES: the site's bundle directory).  Before anything else (before
``import tack``, so before the first launch) this process starts counting the
metadata operations it makes under TACK_CACHE_DIR and the site's bundle directories:

* opens: the audit event ``open`` (``open()``, ``io.open``, ``os.open``),
* stat-like: ``os.stat`` and ``os.lstat`` (wrapped here, as they raise no
  audit event; ``os.path.exists``/``isdir``/``lexists``/``getsize`` go
  through them), ``DirEntry.stat()`` of entries from ``os.scandir`` (wrapped
  too), and the audit events ``os.listdir`` and ``os.scandir``,
* other: the audit events ``os.mkdir``, ``os.rename``, ``os.remove``,
  ``os.rmdir``, ``os.utime``, ``os.chmod``, ``os.truncate`` (none expected
  when only loading).

``fstat`` on an already open descriptor is not counted: it is no path
lookup, and the ones Python's ``open()`` and ``read()`` make in C cannot be
seen from here anyway.  The same counters are kept for Tack's own package
directory (what computing the version id of a source checkout costs).

Then it imports ``kmod`` from KERNEL_DIR, with ``comm`` or ``sitecomm`` calls
``tack.cache.load_bundle(MPI.COMM_WORLD)``, launches every kernel of
``kmod.KERNELS`` once, checks each result, and writes one JSON report to
REPORT_DIR/rank-<rank>-<pid>.json.
"""

import os
import sys

kernel_dir, report_dir, strategy = sys.argv[1], sys.argv[2], sys.argv[3]
CACHE = os.path.abspath(os.environ["TACK_CACHE_DIR"])
ROOTS = {"cache": {CACHE, os.path.realpath(CACHE)}}
for _d in filter(None, os.environ.get("TACK_CACHE_BUNDLES", "").split(os.pathsep)):
    ROOTS["cache"] |= {os.path.abspath(_d), os.path.realpath(_d)}

_EMPTY = {"open": 0, "stat": 0, "lstat": 0, "direntry_stat": 0, "listdir": 0, "scandir": 0,
          "other": 0}
counts = {"cache": dict(_EMPTY), "tack_pkg": dict(_EMPTY)}
cache_paths = []                  # every cache path touched, in order: (op, path)


def _where(path):
    if isinstance(path, int) or path is None:
        return None
    try:
        p = os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None
    for name, roots in ROOTS.items():
        for r in roots:
            if p == r or p.startswith(r + os.sep):
                return name, p
    return None


def _count(op, path):
    hit = _where(path)
    if hit is not None:
        counts[hit[0]][op] += 1
        if hit[0] == "cache":
            cache_paths.append((op, hit[1]))


_OTHER = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.utime", "os.chmod", "os.truncate"}


def _hook(event, args):
    if event == "open":
        _count("open", args[0])
    elif event == "os.listdir":
        _count("listdir", args[0] if args and args[0] is not None else ".")
    elif event == "os.scandir":
        _count("scandir", args[0] if args and args[0] is not None else ".")
    elif event in _OTHER and args:
        _count("other", args[0])


_real_stat, _real_lstat, _real_scandir = os.stat, os.lstat, os.scandir


def _stat(path, *a, **k):
    _count("stat", path)
    return _real_stat(path, *a, **k)


def _lstat(path, *a, **k):
    _count("lstat", path)
    return _real_lstat(path, *a, **k)


class _Entry:
    """A DirEntry whose stat() is counted (it is a stat system call for most entries)."""

    __slots__ = ("_e",)

    def __init__(self, e):
        self._e = e

    def stat(self, *a, **k):
        _count("direntry_stat", self._e.path)
        return self._e.stat(*a, **k)

    def __getattr__(self, name):
        return getattr(self._e, name)

    def __fspath__(self):
        return self._e.__fspath__()


class _Scandir:
    def __init__(self, it):
        self._it = it

    def __iter__(self):
        return self

    def __next__(self):
        return _Entry(next(self._it))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._it.close()

    def close(self):
        self._it.close()


def _scandir(*a, **k):
    return _Scandir(_real_scandir(*a, **k))


os.stat, os.lstat, os.scandir = _stat, _lstat, _scandir
sys.addaudithook(_hook)

# -- from here on every operation under the cache directory is counted --------------------------

import json  # noqa: E402
import warnings  # noqa: E402

warnings.simplefilter("always")
caught = []
warnings.showwarning = lambda msg, *a, **k: caught.append(str(msg))

import numpy as np  # noqa: E402

import tack  # noqa: E402
import tack.cache  # noqa: E402

ROOTS["tack_pkg"] = {os.path.dirname(os.path.abspath(tack.__file__))}
sys.path.insert(0, kernel_dir)
import kmod  # noqa: E402

rank, size, loaded = 0, 1, None
if strategy in ("comm", "sitecomm"):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    loaded = tack.cache.load_bundle(comm)
else:
    launch = tack.cache.mpi_launch()
    if launch is not None:
        rank, size = launch.rank, launch.size

x = np.arange(1000, dtype=np.float64)
ok = True
for name in kmod.KERNELS:
    a, b = kmod.COEFFS[name]
    y = np.zeros_like(x)
    tack.launch(getattr(kmod, name), dim=x.size, args=(x, y))
    ok = ok and bool(np.allclose(y, a * x + b))

# -- done: nothing below is counted --------------------------------------------------------------
final = {k: dict(v) for k, v in counts.items()}
ROOTS.clear()
from tack.cache.keys import tack_version_id  # noqa: E402  (already computed by the launches)
report = {"rank": rank, "size": size, "strategy": strategy, "ok": ok, "loaded": loaded,
          "kernels": len(kmod.KERNELS), "counts": final, "cache_paths": cache_paths,
          "stats": tack.cache.stats(), "mode": tack.cache.settings().mode,
          "mode_source": tack.cache.settings().sources["mode"],
          "llvm_loaded": "llvmlite.binding" in sys.modules,
          "warnings": caught, "pid": os.getpid(), "tack_version": tack_version_id()}
with open(os.path.join(report_dir, f"rank-{rank}-{os.getpid()}.json"), "w") as f:
    json.dump(report, f)
