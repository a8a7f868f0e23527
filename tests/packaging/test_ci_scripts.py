"""Every script .ci/run starts as a command must be committed executable (mode 100755).

A script committed without its executable bit runs fine by hand as ``bash script`` but fails in CI
with exit status 126 (this happened to ci/conda-env-check.sh), so the mode in git's index is checked,
not the file's mode in this checkout.
"""
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
