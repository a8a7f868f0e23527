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
from tack.config import _cgroup_cpus, detect, job_cores, threads_under_launch

from .conftest import LAUNCHER_PREFIXES, clean_env

THREADS_VARS = ("TACK_NUM_THREADS", "OMP_NUM_THREADS")
CONFIG = sys.modules["tack.config"]     # the module (``tack.config`` is its Config object)


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


# Each rank's line in one write: print() writes the text and its newline apart, and mpiexec
# joined two ranks' lines into one ("[1, 2, 2][1, 2, 2]", seen under Python 3.12).
CHILD = ("import json, os, tack; os.write(1, (json.dumps([tack.config.num_threads, "
         "len(os.sched_getaffinity(0)), os.cpu_count()]) + '\\n').encode())")


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


def _cgroup_root(tmp_path, lines, files):
    """A made-up root: its proc/self/cgroup ``lines`` and {path under root: text} ``files``."""
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("".join(line + "\n" for line in lines))
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize("lines, files, want", [
    (["0::/slurm/job_7/step_0"], {"sys/fs/cgroup/slurm/job_7/step_0/cpuset.cpus.effective": "0-3,8-11\n"}, 8),
    # the step's cgroup without the controller's files: its nearest parent's set
    (["0::/slurm/job_7/step_0"], {"sys/fs/cgroup/slurm/job_7/cpuset.cpus.effective": "4-7\n"}, 4),
    (["0::/"], {"sys/fs/cgroup/cpuset.cpus.effective": "0-63\n"}, 64),        # a container's root
    (["3:cpuset:/docker/ab", "0::/"], {"sys/fs/cgroup/cpuset/docker/ab/cpuset.effective_cpus": "2,5\n"}, 2),
    (["5:cpu,cpuset:/job"], {"sys/fs/cgroup/cpuset/job/cpuset.effective_cpus": "0\n"}, 1),
    (["0::/a"], {}, None),                                                       # nothing to read
    (["0::/a"], {"sys/fs/cgroup/a/cpuset.cpus.effective": "\n"}, None),          # an empty set
    (["0::/a"], {"sys/fs/cgroup/a/cpuset.cpus.effective": "3-1\n"}, None),       # no CPU list
    (["garbage"], {}, None),
])
def test_the_cpuset_of_the_process_cgroup(tmp_path, lines, files, want):
    """How many CPUs this process's cgroup holds (v2, v1 and a hybrid's v1 half; its nearest
    parent's set where its own has none), read from the kernel's files under a made-up root."""
    assert _cgroup_cpus(_cgroup_root(tmp_path, lines, files)) == want


def test_without_proc_there_is_no_cpuset(tmp_path):
    assert _cgroup_cpus(str(tmp_path)) is None


@pytest.mark.parametrize("cgroup, slurm, want", [
    (None, None, 64), (8, None, 8), (None, "8", 8), (16, "8", 8), (8, "16", 8), (None, "x", 64),
    (None, "0", 64),
])
def test_the_cores_a_launchs_ranks_share_are_what_confines_the_job(monkeypatch, cgroup, slurm, want):
    """The node's cores, or the fewer its job is confined to: the cgroup's cpuset, Slurm's
    SLURM_CPUS_ON_NODE (a bad one is not a bound)."""
    monkeypatch.setattr(CONFIG, "_cgroup_cpus", lambda root="/": cgroup)
    env = {} if slurm is None else {"SLURM_CPUS_ON_NODE": slurm}
    assert job_cores(64, env) == want


@pytest.mark.parametrize("confined_by", ["cgroup", "slurm"])
def test_ranks_sharing_a_jobs_cores_share_them_out(no_thread_settings, confined_by):
    """``mpiexec -n 8`` (MPICH, binding no rank) in a job of 8 cores of a 64-core node: every rank
    may use the 8 (its affinity), and each took 8 threads, 64 on 8 cores (the node's 64 // 8 ranks
    bounded nothing; a hostile review's case).  Each takes 1 now."""
    no_thread_settings.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    no_thread_settings.setattr(os, "cpu_count", lambda: 64)
    for name, value in (("PMI_RANK", "0"), ("PMI_SIZE", "8"), ("MPI_LOCALNRANKS", "8")):
        no_thread_settings.setenv(name, value)
    if confined_by == "slurm":
        no_thread_settings.setattr(CONFIG, "_cgroup_cpus", lambda root="/": None)
        no_thread_settings.setenv("SLURM_CPUS_ON_NODE", "8")
    else:
        no_thread_settings.setattr(CONFIG, "_cgroup_cpus", lambda root="/": 8)
    assert tack.config.num_threads == 1
