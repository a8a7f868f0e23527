"""docs/deploy.md's Slurm walk-through, run as it stands: the console block its paragraph
attributes to ci/slurm-check.sh (a batch script that warms up, packs and srun's the job)."""

import os
import re

from tack.cache import bundle

from ..packaging.test_deploy_doc import ROOT, attributed, python_on_path
from .conftest import timed

LINE = re.compile(r"rank (\d+) of (\d+): (\d+) triangles; cache mode (\w+), (\d+) kernels compiled, "
                  r"(\d+) bytes read$")


def expected_triangles(level):
    """The triangle count of job.py's contour at ``level``, computed here."""
    from tack.demo import make_field
    from tack.kernels.contour import contour
    return len(contour(make_field("sphere", 32), level)[1])


def test_the_slurm_walkthrough_runs(tmp_path):
    """The block runs under Slurm and its job.out shows it: the warm-up (rank 0 of 1) in write
    mode compiling contour's two kernels; the step's 4 ranks in bundle mode with nothing
    compiled, rank 0 having read the whole bundle and the others nothing; every triangle count
    right."""
    (block,) = attributed("ci/slurm-check.sh")
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    work.mkdir()
    scratch.mkdir()
    bindir = tmp_path / "bin"
    python_on_path(bindir)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TACK_", "SLURM_", "PMI_", "OMPI_", "PMIX_", "HYDRA_"))}
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", SCRATCH=str(scratch),
               PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep))
    proc = timed("docs/deploy.md's Slurm block (sbatch --wait: warm-up, pack, srun -n 4)",
                 ["bash", "-c", "set -euo pipefail\n" + block], cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    lines = (work / "job.out").read_text().splitlines()
    runs = [tuple(int(g) if g.isdigit() else g for g in m.groups())
            for m in map(LINE.match, lines) if m]
    assert len(runs) == 5, lines
    (path,) = (scratch / "tack-cache").glob("bundle-*")
    assert (scratch / "tack-cache").stat().st_mode & 0o077 == 0
    warm, step = runs[0], sorted(runs[1:])
    assert warm == (0, 1, expected_triangles(0.4), "write", 2, 0)
    assert step == [(rank, 4, expected_triangles(0.4 + 0.05 * rank), "bundle", 0,
                     path.stat().st_size if rank == 0 else 0) for rank in range(4)]
    assert len(bundle.Bundle(path.read_bytes())) == 4            # 2 lowered kernels, 2 variants
