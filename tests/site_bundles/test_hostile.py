"""What an admin's tools say, and what a job gets, when site bundles are damaged, replaced or
read without MPI: each case a real process, as an admin or a job would run it."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import tack
from tack.backends.cpu_runtime import host_arch
from tack.cache import bundle, entry

from .test_build import OTHER, run_build, write_config

TACK_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(tack.__file__)))


def site_cli(cwd, *args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    e["PYTHONPATH"] = TACK_PARENT
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "tack.site", *args], env=e, capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def flip_one_variant(path) -> str:
    """Flip a byte in the middle of one variant entry of the bundle at ``path`` (its index, header
    and every other entry whole); -> that variant's key."""
    with bundle.read(str(path), allow_root=True) as b:
        (kind, key), (offset, length) = next((k, v) for k, v in sorted(b.index.items())
                                             if k[0] == entry.KIND_VARIANT)
    data = bytearray(path.read_bytes())
    data[offset + length // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return key


def test_bundles_check_fails_on_a_bundle_with_a_damaged_entry(tmp_path):
    """``bundles status`` says DAMAGED of a bundle one of whose entries fails its checksum (jobs
    refuse that entry and compile its kernel); ``bundles check``, the install test, said the
    directory was fine (exit 0, "nothing compiled") as long as the contour was served."""
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(write_config(tmp_path, [host_arch(), OTHER]), out_dir)
    assert rc == 0, out + err
    (other,) = [p for p in out_dir.iterdir() if f"-cpu-{OTHER}-" in p.name]
    flip_one_variant(other)
    status = site_cli(tmp_path, "bundles", "status", str(out_dir))
    assert status.returncode == 0 and "DAMAGED: 1 of" in status.stdout, status.stdout + status.stderr
    check = site_cli(tmp_path, "bundles", "check", str(out_dir))
    assert check.returncode == 1, check.stdout + check.stderr
    assert "compiled 0" in check.stdout                 # this node's bundle still serves the contour
    (line,) = [x for x in check.stdout.splitlines() if "damaged" in x]
    assert line.startswith(f"error: {other} is damaged: 1 of ") and "build it again" in line, line
    assert "nothing compiled" not in check.stdout


def test_bundles_check_fails_on_a_bundle_copied_to_another_archs_name(tmp_path):
    """An admin copies the x86_64_v3 bundle to the name of this node's own bundle (``cp``, a
    restore from a backup under the wrong name).  A job reads its header, sees it names another
    arch, and passes it over (said in its log only), so the kernels come from the generic
    bundle; ``bundles status`` says it is not used.  ``bundles check`` said the directory was
    fine; a bundle that serves nothing fails it, as a stale one does, naming its right name."""
    out_dir = tmp_path / "bundles"
    root = platform.machine()                           # the family's root: x86_64, aarch64
    rc, out, err = run_build(write_config(tmp_path, [host_arch(), root]), out_dir)
    assert rc == 0, out + err
    (mine,) = [p for p in out_dir.iterdir() if f"-cpu-{host_arch()}-" in p.name]
    (generic,) = [p for p in out_dir.iterdir() if f"-cpu-{root}-" in p.name]
    mine.write_bytes(generic.read_bytes())
    status = site_cli(tmp_path, "bundles", "status", str(out_dir))
    assert f"{mine.name}: cpu:{root}, " in status.stdout and "not used by this node (its header " \
        "names another arch or target than its file name)" in status.stdout, status.stdout
    check = site_cli(tmp_path, "bundles", "check", str(out_dir))
    assert check.returncode == 1, check.stdout + check.stderr
    assert "compiled 0" in check.stdout                 # the generic bundle serves the contour
    (line,) = [x for x in check.stdout.splitlines() if "not named for what it holds" in x]
    assert line.startswith(f"error: {mine} is not named for what it holds (its header says "
                           f"cpu:{root}, ") and generic.name in line, line


def test_status_names_which_directorys_copy_a_job_reads_first(tmp_path):
    """Two site directories holding the same bundle names (one site's bundles copied into a
    group's directory): a job reads the first directory's.  ``bundles status`` ended with
    "this node looks first in: NAME, NAME2, NAME, NAME2", which does not say which file that
    is; a name two directories hold is now said with its directory, and the first one is the
    file the job's log says it read."""
    first, second = tmp_path / "group", tmp_path / "site"
    rc, out, err = run_build(write_config(tmp_path, [host_arch()]), second)
    assert rc == 0, out + err
    shutil.copytree(second, first)
    (name,) = os.listdir(second)
    env = {"TACK_CACHE_BUNDLES": f"{first}:{second}", "TACK_CACHE_INSTALLED_BUNDLES": "0"}
    status = site_cli(tmp_path, "bundles", "status", env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    last = status.stdout.strip().splitlines()[-1]
    assert last == f"this node looks first in: {first / name}, {second / name}", last
    e = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    e.update(env, PYTHONPATH=TACK_PARENT, TACK_CACHE_DIR=str(tmp_path / "own"), TACK_CACHE_LOG="1")
    job = subprocess.run([sys.executable, "-c", "import numpy as np, tack.cache\n"
                          "from tack.kernels.contour import contour\n"
                          "contour(np.indices((8, 8, 8)).sum(axis=0).astype(np.float32), 9.5)\n"
                          "print(tack.cache.stats()['variants_from'])"],
                         env=e, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    assert job.stdout.strip() == "{'site bundles': 2}", job.stdout + job.stderr
    assert f"site bundle for cpu:{host_arch()}: {first / name}\n" in job.stderr, job.stderr
