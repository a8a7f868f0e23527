"""Every script .ci/run starts as a command must be committed executable (mode 100755).

A script committed without its executable bit runs fine by hand as ``bash script`` but fails in CI
with exit status 126 (this happened to ci/conda-env-check.sh), so the mode in git's index is checked,
not the file's mode in this checkout.
"""
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _started_scripts():
    text = (ROOT / ".ci" / "run").read_text()
    return sorted(set(re.findall(r"\bstep \"[^\"]*\" (ci/[\w.-]+\.sh)\b", text)))


def _index_modes():
    try:
        out = subprocess.run(["git", "ls-files", "-s", "ci", ".ci"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return {line.split("\t")[1]: line.split()[0] for line in out.splitlines()}


def test_ci_run_starts_scripts():
    assert "ci/run-tests.sh" in _started_scripts()


@pytest.mark.parametrize("script", _started_scripts())
def test_started_script_is_executable_in_git(script):
    modes = _index_modes()
    assert script in modes, f"{script} is started by .ci/run but not committed"
    assert modes[script] == "100755", f"{script} is committed as {modes[script]}: git update-index --chmod=+x {script}"


# --- ci/lib.sh: scratch directories are removed at exit --------------------------------------
# Every run of .ci/run used to leave its scratch (about 2 GB) in /tmp; a machine that had run CI
# a few dozen times had no space left, and the next run failed unpacking Spack.

def _lib(script, tmp_path, **env):
    full = dict(os.environ, TMPDIR=str(tmp_path), **env)
    for name in ("TIMES", "TACK_CI_KEEP"):
        if name not in env:
            full.pop(name, None)
    return subprocess.run(["bash", "-c", ". ci/lib.sh\n" + script], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("ending", ["exit 0", "exit 3", "set -e; false", "kill -TERM $$"])
def test_scratch_dir_is_removed_at_exit(tmp_path, ending):
    # A read-only directory inside (as an installed prefix may leave) does not stop the removal.
    r = _lib(f'scratch_dir t; mkdir -p "$S/ro/x"; chmod a-w "$S/ro"; echo "made $S"; {ending}',
             tmp_path)
    made = Path(re.search(r"made (\S+)", r.stdout).group(1))
    assert made.parent == tmp_path and made.name.startswith("tack-ci.")
    assert not made.exists(), r.stderr
    assert list(tmp_path.iterdir()) == [], "the timings file or the scratch was left"


def test_scratch_dir_named_or_kept_is_left(tmp_path):
    named = tmp_path / "mine"
    r = _lib(f'scratch_dir t "{named}"; touch "$S/f"', tmp_path)
    assert r.returncode == 0, r.stderr
    assert (named / "f").exists()
    r = _lib('scratch_dir t; echo "made $S"', tmp_path, TACK_CI_KEEP="1")
    assert Path(re.search(r"made (\S+)", r.stdout).group(1)).is_dir()


def test_at_exit_runs_last_in_first_out(tmp_path):
    # slurm-check registers stopping its daemons after its scratch: they stop before it goes.
    r = _lib('at_exit echo first; at_exit echo second; echo body', tmp_path)
    assert r.stdout.split() == ["body", "second", "first"]


def test_ci_scripts_make_no_scratch_of_their_own():
    # A temporary directory comes from scratch_dir, which removes it, or is removed by the
    # script that made it.
    assert "mktemp" not in (ROOT / ".ci" / "run").read_text()
    for path in sorted((ROOT / "ci").glob("*.sh")):
        if path.name == "lib.sh":
            continue
        text = "\n".join(line for line in path.read_text().splitlines()
                          if not line.lstrip().startswith("#"))
        for var in re.findall(r'(\w+)="\$\(mktemp -d\)"', text):
            assert f'rm -rf "${var}"' in text, f"{path.name}: ${var} (mktemp -d) is never removed"
        assert text.count("mktemp -d") == len(re.findall(r'\w+="\$\(mktemp -d\)"', text)), path.name
        # nor does the Python a script runs: a tempfile.mkdtemp() is never removed (conda-check
        # left each package it unpacked, 5 MB a run), a TemporaryDirectory is
        assert "mkdtemp(" not in text, f"{path.name}: tempfile.mkdtemp() is never removed"


def test_conda_env_check_keeps_condas_temporary_files_in_its_scratch():
    # conda's activation writes a tmpXXXXXXXX.env file into the temporary directory and leaves it
    # (one a CI run in /tmp): the step points TMPDIR into its scratch, removed with it.
    text = (ROOT / "ci" / "conda-env-check.sh").read_text()
    assert 'export TMPDIR="$S/tmp"' in text
    assert text.index('export TMPDIR="$S/tmp"') < text.index("conda create")
