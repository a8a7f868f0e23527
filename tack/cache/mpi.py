"""Recognizing an MPI launch from the launcher's environment, without importing mpi4py.

| Launcher | Rank | Size |
|---|---|---|
| Open MPI (mpirun, prterun) | OMPI_COMM_WORLD_RANK, or PMIX_RANK | OMPI_COMM_WORLD_SIZE |
| MPICH and Intel MPI (Hydra) | PMI_RANK | PMI_SIZE |
| MVAPICH2 (mpirun_rsh) | MV2_COMM_WORLD_RANK | MV2_COMM_WORLD_SIZE |
| Cray PALS | PALS_RANKID | PMI_SIZE |
| Cray ALPS (aprun) | ALPS_APP_PE | PMI_SIZE |
| Slurm (srun) | SLURM_PROCID | SLURM_STEP_NUM_TASKS |

A launch of one task is not MPI.  A Slurm batch script is not either: it has
SLURM_PROCID=0 and SLURM_NTASKS, but SLURM_STEP_NUM_TASKS is set only inside
an srun step, so a warm-up run on the script's own line stores entries as on
a workstation.
"""

from __future__ import annotations

import os

# (launcher, rank variables, size variables), tried in order
LAUNCHERS = (
    ("Open MPI", ("OMPI_COMM_WORLD_RANK", "PMIX_RANK"), ("OMPI_COMM_WORLD_SIZE",)),
    ("MVAPICH2", ("MV2_COMM_WORLD_RANK",), ("MV2_COMM_WORLD_SIZE",)),
    ("Cray PALS", ("PALS_RANKID",), ("PMI_SIZE",)),
    ("Cray ALPS", ("ALPS_APP_PE",), ("PMI_SIZE",)),
    ("MPICH/Intel MPI (Hydra)", ("PMI_RANK",), ("PMI_SIZE",)),
    ("Slurm srun", ("SLURM_PROCID",), ("SLURM_STEP_NUM_TASKS",)),
)


class Launch:
    __slots__ = ("launcher", "rank", "size")

    def __init__(self, launcher: str, rank: int, size: int):
        self.launcher = launcher
        self.rank = rank
        self.size = size

    def __repr__(self):
        return f"Launch({self.launcher!r}, rank={self.rank}, size={self.size})"


def _int(environ, names):
    for name in names:
        raw = environ.get(name, "").strip()
        if raw.isdigit():
            return int(raw)
    return None


def detect(environ=None) -> Launch | None:
    """The MPI launch this process is part of (more than one task), or None."""
    environ = os.environ if environ is None else environ
    for launcher, rank_vars, size_vars in LAUNCHERS:
        rank = _int(environ, rank_vars)
        if rank is None:
            continue
        size = _int(environ, size_vars)
        if size is None or size <= 1:
            continue
        return Launch(launcher, rank, size)
    return None
