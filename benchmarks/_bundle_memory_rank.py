"""One MPI rank for ``bundle_memory.py``; not meant to be imported.

usage: mpiexec -n N python benchmarks/_bundle_memory_rank.py share|copies SIZE

Imports Tack and the 21³ contour, reads its memory (``/proc/self/smaps_rollup``: Rss and Pss,
the proportional share, which counts a page shared by k processes as 1/k in each, so the ranks'
Pss summed is what the node holds), calls ``tack.cache.load_bundle(MPI.COMM_WORLD, share=...)``
between two barriers, reads its memory again, runs the contour (checked), and rank 0 prints
every rank's figures as one JSON line.
"""

import json
import sys
import time

import numpy as np
from mpi4py import MPI

import tack.cache
from tack.kernels.contour import contour


def memory_kib() -> dict:
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("Rss", "Pss"):
                out[name.lower()] = int(rest.split()[0])
    return out


comm = MPI.COMM_WORLD
share, size = sys.argv[1] == "share", int(sys.argv[2])
x = np.linspace(-1.0, 1.0, size)
field = np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2)
comm.Barrier()
before = memory_kib()
t0 = time.perf_counter()
entries = tack.cache.load_bundle(comm, share=share)
comm.Barrier()
seconds = time.perf_counter() - t0
after = memory_kib()
verts, faces = contour(field, 0.5)
ok = len(faces) > 0 and int(faces.max()) < len(verts)
stats = tack.cache.stats()
row = {"rank": comm.Get_rank(), "entries": entries, "seconds": seconds, "ok": bool(ok),
       "compiled": "llvmlite" in sys.modules, "hits": stats["hits"]["variant"],
       "rss_kib": after["rss"] - before["rss"], "pss_kib": after["pss"] - before["pss"]}
rows = comm.gather(row, root=0)
if comm.Get_rank() == 0:
    print(json.dumps(rows))
