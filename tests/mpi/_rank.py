"""One process (one MPI rank, or a plain process) for the bundle and MPI tests.

usage: python _rank.py KERNEL_DIR MODE [--comm] [--kinds=K1,K2] [--extra] [--warm-rank0]

Imports ``kmod`` from KERNEL_DIR, records every file it opens (Python's audit
hook on ``open``) from the first launch on, launches the kernels, checks the
results, and reports as JSON (on stdout, or in a file per rank under
$TACK_TEST_REPORTS): rank, results ok, entries loaded by load_bundle, the
opened paths, the job's own broadcast after load_bundle (--comm; --warm-rank0: rank 0 runs a
kernel before it), cache stats and warnings, the cache mode, the MPI launcher
recognized (None: not MPI), and whether llvmlite was imported (a compile).
"""

import json
import os
import sys
import warnings

kernel_dir, mode = sys.argv[1], sys.argv[2]
use_comm = "--comm" in sys.argv
kinds = next(([k for k in a.split("=", 1)[1].split(",") if k] for a in sys.argv if a.startswith("--kinds=")), None)
extra = "--extra" in sys.argv
warm_rank0 = "--warm-rank0" in sys.argv
app_bcast = None
sys.path.insert(0, kernel_dir)

import numpy as np  # noqa: E402

import tack  # noqa: E402
import tack.cache  # noqa: E402

opened = []
recording = False


def hook(event, args):
    if recording and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        opened.append(os.fsdecode(args[0]))


sys.addaudithook(hook)
warnings.simplefilter("always")
caught = []
warnings.showwarning = lambda msg, *a, **k: caught.append(str(msg))

import kmod  # noqa: E402



def other_cpu():
    """Take this process's CPU for another kind (its host key another), as on a node of a
    second kind in the same job: TACK_TEST_OTHER_CPU=all (every process) or =odd (odd ranks)."""
    from tack.backends import cpu_identity
    cpu_identity._host_identity = dict(cpu_identity.host_cpu_identity(), **{"model name": "another"})
    cpu_identity._host_key = None


if os.environ.get("TACK_TEST_OTHER_CPU") == "all":
    other_cpu()
rank, loaded, peak = 0, None, None
recording = True
if use_comm:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if os.environ.get("TACK_TEST_OTHER_CPU") == "odd" and rank % 2:
        other_cpu()
    if warm_rank0 and rank == 0:        # rank 0 ran a kernel before: its session exists already
        tack.launch(kmod.k_b, dim=4, args=(np.ones(4), np.zeros(4)))
    import tack.cache.bcast
    if os.environ.get("TACK_TEST_NO_SHM_ROOM"):     # /dev/shm as good as full on every node
        tack.cache.bcast._shm_room = lambda: 0
    if os.environ.get("TACK_TEST_SHARE_FROM"):      # the test kernels' bundles are small
        tack.cache.bcast._NodeShare.MIN_BYTES = int(os.environ["TACK_TEST_SHARE_FROM"])
    if os.environ.get("TACK_TEST_TWO_NODES"):       # even and odd ranks as two nodes' ranks
        def two_nodes(MPI, comm):
            node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
            try:
                return node.Split(comm.Get_rank() % 2, comm.Get_rank())
            finally:
                node.Free()
        tack.cache.bcast._NodeShare.node_comm = staticmethod(two_nodes)
    if os.environ.get("TACK_TEST_NO_WINDOW") == "odd":  # the MPI cannot make odd ranks' windows
        def no_window(MPI, nbytes, node):
            if comm.Get_rank() % 2:
                raise MemoryError("no shared memory here (the test's)")
            return MPI.Win.Allocate_shared(nbytes, 1, comm=node)
        tack.cache.bcast._allocate_shared = no_window
    if os.environ.get("TACK_TEST_NO_MEMORY_RANK") == str(rank):   # no memory for a broadcast's copy
        def no_memory(*args):
            raise MemoryError("no memory here (the test's)")
        tack.cache.bcast.bytearray = no_memory
    if os.environ.get("TACK_TEST_PEAK"):        # the most memory load_bundle held at once
        import tracemalloc
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
    loaded = tack.cache.load_bundle(comm, kinds=kinds, share=not os.environ.get("TACK_TEST_NO_SHARE"))
    if os.environ.get("TACK_TEST_PEAK"):
        peak = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
    app_bcast = comm.bcast("the job's own" if rank == 0 else None, root=0)   # matched as the job's
else:
    launch = tack.cache.mpi_launch()
    rank = launch.rank if launch else 0

x = np.arange(1000, dtype=np.float64)
ok = True
for name, ref in kmod.REFERENCES.items():
    if name == "k_extra" and not extra:
        continue
    y = np.zeros_like(x)
    tack.launch(getattr(kmod, name), dim=x.size, args=(x, y))
    ok = ok and bool(np.allclose(y, ref(x)))
recording = False
launch = tack.cache.mpi_launch()


def memory_of(b):
    """Where the bytes a broadcast bundle serves from lie: (the /proc/self/maps mapping's perms,
    device, inode, path) of a view of shared memory, or "private" for bytes of this process."""
    data = getattr(b, "_data", None)
    if data is None or isinstance(data, (bytes, bytearray)):
        return "private" if data is not None else None
    address = np.frombuffer(data, dtype=np.uint8).ctypes.data
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[1], fields[3], fields[4], fields[5] if len(fields) > 5 else ""
    return "unmapped"


if use_comm and os.environ.get("TACK_TEST_FINALIZE"):     # MPI finalized, then a kernel not run yet
    MPI.Finalize()
    y = np.zeros_like(x)
    tack.launch(kmod.k_extra, dim=x.size, args=(x, y))
    ok = ok and bool(np.allclose(y, kmod.REFERENCES["k_extra"](x)))
report = json.dumps({"rank": rank, "ok": ok, "loaded": loaded, "opened": opened, "app_bcast": app_bcast,
                     "stats": tack.cache.stats(), "warnings": caught,
                     "mode": tack.cache.settings().mode,
                     "host_key": __import__("tack.cache.host").cache.host.cpu_host_key(),
                     "launcher": launch.launcher if launch else None,
                     "local": launch.local if launch else None,
                     "threads": [tack.config.num_threads, len(os.sched_getaffinity(0))
                                 if hasattr(os, "sched_getaffinity") else None, os.cpu_count()],
                     "llvmlite": "llvmlite" in sys.modules,     # False: nothing was compiled
                     "memory": memory_of(tack.cache._loaded_bundle) if use_comm else None,
                     "windows": len(tack.cache.bcast._windows) if use_comm else None,
                     "peak": peak})
out = os.environ.get("TACK_TEST_REPORTS")
if out:                                   # ranks share stdout: each writes its own file
    with open(os.path.join(out, f"rank-{rank}-{os.getpid()}.json"), "w") as f:
        f.write(report)
else:
    print(report)
