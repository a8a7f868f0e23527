"""Tests under a real Slurm (ci/slurm-check.sh starts one): srun steps, an sbatch job.

Skipped, saying why, where no Slurm is running; with TACK_REQUIRE_SLURM=1 (ci/slurm-check.sh)
a missing Slurm fails them instead.  Each srun and sbatch they run is timed, and the time appended
to the file TACK_SLURM_TIMES names (ci/slurm-check.sh prints them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..mpi.conftest import RANK, cache, clean_env, kernel_dir  # noqa: F401 (fixtures)

REQUIRED = os.environ.get("TACK_REQUIRE_SLURM") == "1"
UP = {"idle", "mixed", "allocated", "completing"}


def slurm_problem():
    """Why no Slurm can run a job from here, or None."""
    missing = [c for c in ("srun", "sbatch", "sinfo") if shutil.which(c) is None]
    if missing:
        return f"Slurm's commands are not installed ({', '.join(missing)} not on PATH)"
    conf = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
    if not os.path.isfile(conf):              # sinfo would retry for a minute
        return f"no Slurm configuration: {conf} does not exist (SLURM_CONF)"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 60 s"
    if proc.returncode != 0:
        return f"no Slurm controller answers: sinfo: {proc.stderr.strip()}"
    states = {s.strip().rstrip("*~#") for s in proc.stdout.split()}
    if not states & UP:
        return f"no Slurm node is up (sinfo: {', '.join(sorted(states)) or 'no nodes'})"
    return None


@pytest.fixture(scope="session")
def slurm():
    """A running Slurm, or the tests skip (fail with TACK_REQUIRE_SLURM=1)."""
    problem = slurm_problem()
    if problem and REQUIRED:
        pytest.fail(f"TACK_REQUIRE_SLURM=1 but {problem}")
    if problem:
        pytest.skip(f"needs a running Slurm (ci/slurm-check.sh starts one): {problem}")


@pytest.fixture(autouse=True)
def _needs_slurm(slurm):
    pass


def slurm_env(cache, **extra):
    """The environment of a fresh login: no launcher's or Tack's variables (clean_env), but the
    Slurm configuration this test run uses."""
    env = clean_env(cache, **extra)
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    return env


def timed(label, cmd, timeout=300, **kwargs):
    """subprocess.run(cmd), its wall time appended to $TACK_SLURM_TIMES as 'label: N s'."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    record(label, time.perf_counter() - t0)
    return proc


def record(label, seconds):
    """Append 'label: N s' to the file $TACK_SLURM_TIMES names, if it is set."""
    out = os.environ.get("TACK_SLURM_TIMES")
    if out:
        with open(out, "a") as f:
            f.write(f"{label}: {seconds:.1f} s\n")


def srun(label, kernel_dir, cache, n, mpi, flags=(), **env):
    """``srun --mpi=MPI -n N`` of _rank.py; -> the ranks' JSON reports, by rank."""
    reports = Path(str(kernel_dir) + "-reports")
    reports.mkdir()
    cmd = ["srun", f"--mpi={mpi}", "-n", str(n), sys.executable, str(RANK), str(kernel_dir), "x",
           *flags]
    proc = timed(label, cmd, env=slurm_env(cache, TACK_TEST_REPORTS=reports, **env))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    got = [json.loads(p.read_text()) for p in reports.glob("rank-*.json")]
    return sorted(got, key=lambda r: r["rank"])


def listing(root):
    """{path below root: (size, mtime in ns)} of every file, to tell that nothing was written."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}
