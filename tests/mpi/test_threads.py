"""The default thread count: TACK_NUM_THREADS, else OMP_NUM_THREADS, else the cores a process may
use, shared among an MPI launch's ranks on the node (``tack.config``); the launchers' variables of
the ranks on a node (``config.detect``), and a real ``mpiexec`` job."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import tack
from tack.config import detect, threads_under_launch

from .conftest import LAUNCHER_PREFIXES, clean_env

THREADS_VARS = ("TACK_NUM_THREADS", "OMP_NUM_THREADS")


@pytest.fixture
def no_thread_settings(monkeypatch):
    """No thread variable and no launcher's variable set; the setting read afresh, before and after."""
    for name in list(os.environ):
        if name in THREADS_VARS or name.startswith(LAUNCHER_PREFIXES):
            monkeypatch.delenv(name)
    tack.config.reset()
    yield monkeypatch
    tack.config.reset()


def cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@pytest.mark.parametrize("omp, want", [("3", 3), ("4,2", 4), (" 2 ", 2)])
def test_omp_num_threads_is_the_default(no_thread_settings, omp, want):
    """A job script's OMP_NUM_THREADS (every OpenMP code's and BLAS's of the job; the first of a
    nested list) sets Tack's threads too, where TACK_NUM_THREADS is not set; it used all the cores."""
    no_thread_settings.setenv("OMP_NUM_THREADS", omp)
    assert tack.config.num_threads == want
    no_thread_settings.setenv("TACK_NUM_THREADS", "5")       # Tack's own wins
    tack.config.reset()
    assert tack.config.num_threads == 5


@pytest.mark.parametrize("omp", ["0", "two", "-1", "", "1.5"])
def test_an_omp_num_threads_openmp_would_not_take_is_passed_over_in_silence(no_thread_settings, omp):
    """Not Tack's variable: a value that is no thread count leaves the default, and Tack says
    nothing of it (the job's OpenMP runtime does)."""
    import warnings
    no_thread_settings.setenv("OMP_NUM_THREADS", omp)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tack.config.num_threads == cores()


def test_a_bad_tack_num_threads_falls_back_to_the_default_it_names(no_thread_settings):
    """A bad TACK_NUM_THREADS warns and uses the default, OMP_NUM_THREADS's where set, naming it."""
    no_thread_settings.setenv("TACK_NUM_THREADS", "many")
    no_thread_settings.setenv("OMP_NUM_THREADS", "2")
    with pytest.warns(RuntimeWarning, match="TACK_NUM_THREADS='many'.*using 2"):
        assert tack.config.num_threads == 2


@pytest.mark.parametrize("cores_, machine, local, want", [
    (16, 16, 4, 4),         # mpiexec binding nothing: every rank all 16 cores, 4 ranks on the node
    (8, 16, 8, 2),          # bound to a socket of 8 cores, shared by 4 of the node's 8 ranks
    (1, 16, 16, 1),         # bound to a core each
    (4, 16, 2, 4),          # bound to 4 cores each: its own share already
    (16, 16, None, 16),     # a launcher that does not say how many ranks a node runs
    (16, 16, 1, 16),        # one rank on this node
    (2, 2, 4, 1),           # more ranks than cores: one thread each, never none
])
def test_an_mpi_launchs_ranks_share_the_nodes_cores(cores_, machine, local, want):
    launch = None if local is None else detect({"PMI_RANK": "0", "PMI_SIZE": "64",
                                                "MPI_LOCALNRANKS": str(local)})
    assert threads_under_launch(cores_, machine, launch) == want


@pytest.mark.parametrize("env, local", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4),
    ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "2"}, 2),
    ({"MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_SIZE": "6", "MV2_COMM_WORLD_LOCAL_SIZE": "3"}, 3),
    ({"PALS_RANKID": "7", "PMI_SIZE": "128"}, None),
    ({"PMI_RANK": "1", "PMI_SIZE": "4"}, None),
    ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "two"}, None),
], ids=["openmpi", "hydra", "mvapich2", "pals", "hydra-unsaid", "hydra-bad"])
def test_each_launcher_says_how_many_ranks_run_on_the_node(env, local):
    assert detect(env).local == local


@pytest.mark.parametrize("per_node, node, want", [
    ("2(x3),1", "0", 2), ("2(x3),1", "2", 2), ("2(x3),1", "3", 1), ("4", "0", 4),
    ("1,3", "1", 3), ("2(x3),1", "4", None), ("2(x3", "0", None), ("x", "0", None), ("", "0", None),
])
def test_srun_ranks_on_this_node_from_the_steps_tasks_per_node(per_node, node, want):
    """srun's SLURM_STEP_TASKS_PER_NODE (``2(x3),1``) at this node's SLURM_NODEID; None where it
    does not parse or names fewer nodes."""
    env = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "7", "SLURM_NODEID": node,
           "SLURM_STEP_TASKS_PER_NODE": per_node}
    assert detect(env).local == want


def test_a_launcher_that_does_not_say_is_told_by_the_srun_step_its_ranks_are():
    """``srun --mpi=pmi2``: PMI_RANK and PMI_SIZE (the Hydra row) but no MPI_LOCALNRANKS; the ranks
    are the step's tasks (same size), so Slurm's count on this node says it.  ``mpirun -n 4`` inside
    a one-task step is not the step's tasks: Slurm's count is not taken for it."""
    step = {"SLURM_PROCID": "0", "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "3(x2)"}
    got = detect(dict(step, PMI_RANK="4", PMI_SIZE="6", SLURM_STEP_NUM_TASKS="6"))
    assert (got.launcher, got.local) == ("MPICH/Intel MPI (Hydra)", 3)
    got = detect(dict(step, PMI_RANK="2", PMI_SIZE="4", SLURM_STEP_NUM_TASKS="1",
                      SLURM_STEP_TASKS_PER_NODE="1"))
    assert (got.launcher, got.local) == ("MPICH/Intel MPI (Hydra)", None)


CHILD = ("import json, os, tack; print(json.dumps([tack.config.num_threads, "
         "len(os.sched_getaffinity(0)), os.cpu_count()]))")


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"),
                    reason="os.sched_getaffinity is Linux's: without it (macOS) no rank's allowed "
                           "cores can be read to hold its thread count against")
def test_mpiexec_ranks_on_one_node_share_its_cores(tmp_path):
    """A real ``mpiexec -n 2`` (MPICH's Hydra, which binds no rank to a core): each rank may use
    every core, and each took them all, so two ranks ran two threads on each core.  Each now
    takes its share; a process started alone still takes every core it may use."""
    exe = shutil.which("mpiexec")
    assert exe, "mpiexec is not installed (pip install mpich mpi4py)"
    env = {k: v for k, v in clean_env(tmp_path).items() if k not in THREADS_VARS}
    proc = subprocess.run([exe, "-n", "2", sys.executable, "-c", CHILD], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads(line) for line in proc.stdout.split("\n") if line.startswith("[")]
    assert len(ranks) == 2, proc.stdout
    for threads, affinity, machine in ranks:
        assert threads == max(1, min(affinity, machine // 2)), ranks
        if affinity == machine:             # Hydra bound nothing: the node's cores, shared
            assert threads == max(1, machine // 2) and (machine < 2 or threads < affinity)
    alone = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                           timeout=120)
    threads, affinity, _ = json.loads(alone.stdout.strip().splitlines()[-1])
    assert threads == affinity


def test_the_cache_asks_the_same_detect():
    """One home: the cache's MPI launch is config.detect's."""
    import tack.cache
    assert tack.cache.detect is detect
