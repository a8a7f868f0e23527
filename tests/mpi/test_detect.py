"""MPI detection from the launchers' variables (tack.cache.detect)."""

import pytest

from tack.cache import detect

LAUNCHES = [
    ("Open MPI", {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}, 3, 8),
    ("Open MPI", {"PMIX_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, 2, 4),
    ("MPICH/Intel MPI (Hydra)", {"PMI_RANK": "1", "PMI_SIZE": "4"}, 1, 4),
    ("MVAPICH2", {"MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_SIZE": "6"}, 5, 6),
    ("Cray PALS", {"PALS_RANKID": "7", "PMI_SIZE": "128"}, 7, 128),
    ("Cray ALPS", {"ALPS_APP_PE": "0", "PMI_SIZE": "16"}, 0, 16),
    ("Slurm srun", {"SLURM_PROCID": "9", "SLURM_STEP_NUM_TASKS": "64", "SLURM_NTASKS": "64"}, 9, 64),
]


@pytest.mark.parametrize("launcher, env, rank, size", LAUNCHES, ids=[f"{l[0]}-{l[2]}" for l in LAUNCHES])
def test_each_launcher_is_recognized(launcher, env, rank, size):
    """Each launcher's rank and size variables give the launch, its rank and its size."""
    got = detect(env)
    assert got is not None
    assert (got.launcher, got.rank, got.size) == (launcher, rank, size)


@pytest.mark.parametrize("env", [
    {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},
    {"PMI_RANK": "0", "PMI_SIZE": "1"},
    {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"},
    {"MV2_COMM_WORLD_RANK": "0", "MV2_COMM_WORLD_SIZE": "1"},
], ids=["openmpi", "hydra", "srun", "mvapich2"])
def test_one_task_is_not_mpi(env):
    """A launch of a single task counts as no MPI."""
    assert detect(env) is None


def test_slurm_batch_script_is_not_mpi():
    """A batch script has SLURM_PROCID=0 and SLURM_NTASKS>1 but no step size: not MPI."""
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "32", "SLURM_JOB_ID": "1"}) is None


def test_no_launcher_is_not_mpi():
    """A plain environment is no MPI; a rank without any size variable is not either."""
    assert detect({}) is None
    assert detect({"PMIX_RANK": "0"}) is None


@pytest.mark.parametrize("env", [
    {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},
    {"PMI_RANK": "0", "PMI_SIZE": "1"},
], ids=["mpirun-n1", "mpiexec-n1"])
def test_one_task_launched_inside_an_srun_step_is_not_a_slurm_rank(env):
    """``mpirun -n 1`` inside an srun step of 4 tasks: the step's SLURM_ variables are still set,
    but the innermost launcher started one process.  It fell through to them and was taken for
    rank 3 of 4 (bundle mode, or no store off rank 0); the first launcher whose rank and size
    are set decides."""
    slurm = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"}
    assert detect(dict(slurm, **env)) is None
    got = detect(dict(slurm, OMPI_COMM_WORLD_RANK="2", OMPI_COMM_WORLD_SIZE="8"))
    assert (got.launcher, got.rank, got.size) == ("Open MPI", 2, 8)
    got = detect(dict(slurm, PMIX_RANK="1"))           # srun --mpi=pmix: no Open MPI size, srun's
    assert (got.launcher, got.rank, got.size) == ("Slurm srun", 3, 4)


def test_a_site_mpi_mode_overriding_the_users_mode_is_said_on_rank_0(recwarn):
    """A site module's TACK_CACHE_MPI=bundle silently beat a user's TACK_CACHE=write in the
    MPI warm-up job the docs tell users to run, so it stored nothing.  TACK_CACHE_MPI still
    decides under MPI, and rank 0 (only) warns naming both and what to set; equal modes, no
    TACK_CACHE, a configure() mode or no MPI warn nothing."""
    import warnings

    import tack.errors
    from tack.cache import resolve
    env = {"TACK_CACHE_MPI": "bundle", "TACK_CACHE": "write"}
    with pytest.warns(tack.errors.TackWarning, match=r"TACK_CACHE_MPI=bundle, not TACK_CACHE=write.*set "
                                         r"TACK_CACHE_MPI=write too"):
        assert resolve({}, env, mpi=True, rank=0).mode == "bundle"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve({}, env, mpi=True, rank=3).mode == "bundle"
        assert resolve({}, env, mpi=False).mode == "write"
        assert resolve({}, {"TACK_CACHE_MPI": "bundle", "TACK_CACHE": "BUNDLE"}, mpi=True).mode == "bundle"
        assert resolve({}, {"TACK_CACHE_MPI": "read"}, mpi=True).mode == "read"
        assert resolve({"mode": "write"}, env, mpi=True).mode == "write"


def test_a_bad_setting_is_warned_of_by_rank_0_alone(recwarn):
    """A bad TACK_CACHE_MPI (TACK_CACHE, TACK_CACHE_SIZE, TACK_CACHE_DIR, TACK_CACHE_LOG) was one
    warning a rank: 4 identical lines under mpiexec -n 4, where the docs say only rank 0 warns.
    Every rank still takes the default; rank 0 alone says so."""
    import warnings

    import tack.errors
    from tack import cache
    env = {"TACK_CACHE_MPI": "bundel", "TACK_CACHE_SIZE": "4Q", "TACK_CACHE_DIR": "$NOPE_UNSET/x"}
    with pytest.warns(tack.errors.TackWarning) as said:
        got = cache.resolve({}, env, mpi=True, rank=0)
    texts = [str(w.message) for w in said]
    assert len(said) == 3 and any("'bundel' is not a cache mode" in t for t in texts), texts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        other = cache.resolve({}, env, mpi=True, rank=2)
        cache._setup_logging(rank=2)            # TACK_CACHE_LOG is not set here: nothing either
    assert (got.mode, got.max_size, got.directory) == (other.mode, other.max_size, other.directory)
    assert got.mode == "bundle" and got.sources == other.sources
    cache._reset_for_tests()
