"""Fixtures for the bundle and MPI tests: a private cache, a kernel module, ranks run for real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
RANK = HERE / "_rank.py"
LAUNCHER_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "MV2_", "PALS_", "ALPS_", "SLURM_", "HYDRA_", "MPI_LOCAL")


def clean_env(cache, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(LAUNCHER_PREFIXES) and not k.startswith("TACK_")}
    env["TACK_CACHE_DIR"] = str(cache)
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def kernel_dir(tmp_path):
    d = tmp_path / "kernels"
    d.mkdir()
    shutil.copy(HERE / "kmod_template.py", d / "kmod.py")
    return d


@pytest.fixture
def cache(tmp_path):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    return d


def run_one(kernel_dir, cache, *flags, timeout=120, **env):
    """One plain process; -> its JSON report."""
    proc = subprocess.run([sys.executable, str(RANK), str(kernel_dir), "x", *flags],
                          env=clean_env(cache, **env), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mpiexec(kernel_dir, cache, n=4, flags=(), mpmd=None, timeout=120, **env):
    """A real ``mpiexec -n N`` job; -> the ranks' JSON reports, by rank."""
    exe = shutil.which("mpiexec")
    assert exe, "mpiexec is not installed (pip install mpich mpi4py)"
    cmd = [exe, "-n", str(n), sys.executable, str(RANK), str(kernel_dir), "x", *flags]
    if mpmd:
        for count, more in mpmd:
            cmd += [":", "-n", str(count), sys.executable, str(RANK), str(kernel_dir), "x", *more]
    out = Path(str(kernel_dir) + "-reports")
    if out.exists():                # a job before this one, in the same test
        shutil.rmtree(out)
    out.mkdir()
    proc = subprocess.run(cmd, env=clean_env(cache, TACK_TEST_REPORTS=out, **env),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads(p.read_text()) for p in out.glob("rank-*.json")]
    return sorted(reports, key=lambda r: r["rank"])


def prime_and_pack(kernel_dir, cache):
    """Compile k_a and k_b into the cache in one plain process, then pack a bundle."""
    report = run_one(kernel_dir, cache, TACK_CACHE="write")
    assert report["ok"] and report["stats"]["misses"]["variant"] == 2
    proc = subprocess.run([sys.executable, "-m", "tack.cache", "pack"], env=clean_env(cache),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    bundles = sorted(cache.glob("bundle-*"))
    assert len(bundles) == 1, bundles
    return bundles[0]


def under(paths, root):
    root = str(root)
    return [p for p in paths if os.path.abspath(p).startswith(root + os.sep)]
