"""srun steps: two ranks are an MPI launch (bundle mode), one task is not (the normal mode).

With ``--mpi=none`` Tack recognizes the ranks from Slurm's own variables (SLURM_PROCID,
SLURM_STEP_NUM_TASKS); with ``--mpi=pmi2`` (the plugin MPICH's ranks talk to) from PMI_RANK and
PMI_SIZE, which Slurm's pmi2 plugin sets as MPICH's Hydra does, and by whose name Tack calls the
launch.
"""

import pytest

from ..mpi.conftest import prime_and_pack, under
from .conftest import listing, srun

MPI = ["none", "pmi2"]
LAUNCHER = {"none": "Slurm srun", "pmi2": "MPICH/Intel MPI (Hydra)"}


@pytest.mark.parametrize("mpi", MPI)
def test_srun_2_ranks_read_the_bundle_once_and_write_nothing(kernel_dir, cache, mpi):
    """srun -n 2 with no TACK_CACHE: each rank is in bundle mode, opens the bundle once and no
    other file of the cache, loads both kernels from it (nothing compiled) and writes nothing."""
    path = prime_and_pack(kernel_dir, cache)
    before = listing(cache)
    ranks = srun(f"srun --mpi={mpi} -n 2 (bundle mode)", kernel_dir, cache, 2, mpi)
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["ok"] and r["mode"] == "bundle", r
        assert r["launcher"] == LAUNCHER[mpi]
        assert under(r["opened"], cache) == [str(path)], r["opened"]
        assert r["stats"]["hits"]["variant"] == 2 and r["stats"]["misses"]["variant"] == 0
        assert r["stats"]["bytes_written"] == 0 and not r["llvmlite"]
        assert r["warnings"] == []
        # The step's two ranks on this node share its cores (Slurm's count, which the pmi2 plugin
        # does not repeat in MPI_LOCALNRANKS): each took every core it could use before
        threads, affinity, machine = r["threads"]
        assert r["local"] == 2 and threads == max(1, min(affinity, machine // 2)), r
    assert listing(cache) == before


@pytest.mark.parametrize("mpi", MPI)
def test_srun_1_task_is_not_mpi(kernel_dir, cache, mpi):
    """srun -n 1 into an empty cache: not an MPI launch, so the cache's normal mode (write):
    both kernels compile and are stored, as on a workstation."""
    ranks = srun(f"srun --mpi={mpi} -n 1 (not MPI)", kernel_dir, cache, 1, mpi)
    assert len(ranks) == 1
    r = ranks[0]
    assert r["ok"] and r["mode"] == "write" and r["launcher"] is None, r
    assert r["stats"]["misses"]["variant"] == 2 and r["stats"]["bytes_written"] > 0
    assert r["llvmlite"]
    assert len(list(cache.rglob("*.tvar"))) == 2 and len(list(cache.rglob("*.tlk"))) == 2
    assert not list(cache.glob("bundle-*"))
