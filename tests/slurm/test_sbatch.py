"""An sbatch job as docs/cache.md describes it: warm up on the batch script's own line (one
process, not MPI: it compiles and stores), pack, then an srun step of 4 ranks that calls
load_bundle(comm): rank 0 alone reads the bundle, and the step compiles and writes nothing."""

import json
import shlex
import sys

from tack.cache import bundle

from ..mpi.conftest import RANK, under
from .conftest import record, slurm_env, timed

SCRIPT = """#!/bin/bash
#SBATCH --job-name=tack-warm-pack-run
#SBATCH --ntasks=4
set -euo pipefail
mark() {{ echo "$1 $EPOCHREALTIME" >> {times}; }}
mark start
{python} {rank} {kernels} x > {warm}
mark warm-up
{python} -m tack.cache pack
mark pack
find {cache} -type f -printf '%P %s %T@\\n' | sort > {before}
TACK_TEST_REPORTS={reports} TACK_TEST_SHARE_FROM=0 srun --mpi=pmi2 -n 4 {python} {rank} {kernels} x --comm
mark step
find {cache} -type f -printf '%P %s %T@\\n' | sort > {after}
"""


def q(path):
    return shlex.quote(str(path))


LABELS = {"warm-up": "in the job: the script's own line (warm-up)",
          "pack": "in the job: python -m tack.cache pack",
          "step": "in the job: srun --mpi=pmi2 -n 4, load_bundle(comm)"}


def job_marks(path):
    """The batch script's marks -> their names; each line's time goes to $TACK_SLURM_TIMES."""
    marks = [line.split() for line in path.read_text().splitlines()]
    for (_, t0), (name, t1) in zip(marks, marks[1:]):
        record(LABELS[name], float(t1) - float(t0))
    return [name for name, _ in marks]


def test_sbatch_warm_pack_and_srun_load_bundle(kernel_dir, cache, tmp_path):
    """sbatch --wait: the script's own line runs in write mode (not MPI) and compiles both
    kernels; pack writes one bundle; in the srun -n 4 step every rank gets the bundle's entries
    from load_bundle(comm), loads both kernels and compiles nothing (no miss, llvmlite never
    imported), only rank 0 opens the bundle (and reads it whole), the node holds one copy of it
    (the ranks' shared memory), and no file of the cache is written or touched."""
    reports = tmp_path / "reports"
    reports.mkdir()
    f = {name: tmp_path / name for name in ("times", "warm", "before", "after")}
    job = tmp_path / "job.sh"
    job.write_text(SCRIPT.format(python=q(sys.executable), rank=q(RANK), kernels=q(kernel_dir),
                                 cache=q(cache), reports=q(reports),
                                 **{k: q(v) for k, v in f.items()}))
    out = tmp_path / "job.out"
    proc = timed("sbatch --wait (warm-up, pack, srun -n 4)",
                 ["sbatch", "--wait", f"--output={out}", f"--chdir={tmp_path}", str(job)],
                 env=slurm_env(cache))
    log = out.read_text() if out.exists() else "(no job output)"
    assert proc.returncode == 0, proc.stdout + proc.stderr + log
    assert job_marks(f["times"]) == ["start", "warm-up", "pack", "step"]

    warm = json.loads(f["warm"].read_text())
    assert warm["ok"] and warm["mode"] == "write" and warm["launcher"] is None, warm
    assert warm["stats"]["misses"]["variant"] == 2 and warm["llvmlite"]

    (path,) = sorted(cache.glob("bundle-*"))
    size, entries = path.stat().st_size, len(bundle.Bundle(path.read_bytes()))
    ranks = sorted((json.loads(p.read_text()) for p in reports.glob("rank-*.json")),
                   key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for r in ranks:
        assert r["ok"] and r["mode"] == "bundle" and r["loaded"] == entries, r
        assert r["stats"]["hits"]["variant"] == 2
        assert r["stats"]["misses"] == {"lowered": 0, "variant": 0} and not r["llvmlite"]
        assert r["stats"]["bytes_written"] == 0 and r["warnings"] == []
        assert under(r["opened"], cache) == ([str(path)] if r["rank"] == 0 else []), r["opened"]
        assert r["stats"]["bytes_read"] == (size if r["rank"] == 0 else 0)
    # One copy on the node (the small bundle shared as a big one would be, TACK_TEST_SHARE_FROM=0):
    # every rank serves it from the same shared mapping.
    assert all(isinstance(r["memory"], list) and "s" in r["memory"][0] for r in ranks), ranks
    assert len({tuple(r["memory"][1:3]) for r in ranks}) == 1, [r["memory"] for r in ranks]
    before = f["before"].read_text()
    assert path.name in before and ".tvar" in before            # a listing of the real files
    assert f["after"].read_text() == before
