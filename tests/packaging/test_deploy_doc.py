"""docs/deploy.md: every `sh` block runs and succeeds (in a fresh directory, with this checkout's
Tack); each `console` block names, in the paragraph just above it, the CI script that runs it:
ci/spack-check.sh, ci/easybuild-check.sh and ci/conda-check.sh (Spack, EasyBuild, conda-build:
minutes), each of whose commands must appear in the script, and ci/slurm-check.sh (a running Slurm), whose tests run the block itself
as it stands (tests/slurm/test_walkthrough.py)."""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


RUNNERS = ("ci/spack-check.sh", "ci/conda-check.sh", "ci/easybuild-check.sh", "ci/slurm-check.sh")


def blocks(lang):
    return [m.group(2) for m in BLOCK.finditer(DOC.read_text()) if m.group(1) == lang]


def attributed(script):
    """The console blocks whose paragraph just above names ``script`` (the CI script that runs
    them).  (The blank line between that paragraph and the block is stripped first: taken as the
    paragraph, it named no script, and no block was checked.)"""
    text = DOC.read_text()
    return [m.group(2) for m in BLOCK.finditer(text) if m.group(1) == "console"
            and script in text[:m.start()].rstrip().rsplit("\n\n", 1)[-1]]


def python_on_path(bindir):
    """Put a `python` that runs this interpreter in ``bindir``: a script that execs
    ``sys.executable``, not a link to it.  A link to a virtual environment's (or a conda env's)
    python placed outside the environment runs the base interpreter: Python finds its
    environment from pyvenv.cfg beside the path it was started by, and falls back to the link's
    target, so the environment's packages (archspec, ...) would be missing."""
    bindir.mkdir(parents=True, exist_ok=True)
    wrapper = bindir / "python"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_python_on_path_keeps_the_environment(tmp_path):
    """From a real virtual environment, the `python` the shell blocks run is that environment's
    (its sys.prefix), not the base interpreter a link would run."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True, timeout=120)
    code = ("import pathlib, subprocess, sys; sys.path.insert(0, sys.argv[1]); "
            "from test_deploy_doc import python_on_path; "
            "w = python_on_path(pathlib.Path(sys.argv[2])); "
            "print(subprocess.run([str(w), '-c', 'import sys; print(sys.prefix)'], "
            "capture_output=True, text=True, check=True).stdout.strip())")
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code, str(pathlib.Path(__file__).parent),
                           str(tmp_path / "bin")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert pathlib.Path(proc.stdout.strip()) == venv, proc.stdout


def test_the_doc_has_shell_blocks():
    assert len(blocks("sh")) >= 2 and len(blocks("console")) >= 2


def test_shell_blocks_run(tmp_path):
    """The sh blocks in order, in one shell, as an admin would type them."""
    for module, package in (("yaml", "PyYAML"), ("jinja2", "Jinja2"), ("archspec", "archspec")):
        pytest.importorskip(module, reason=f"the site tool needs {package}: pip install 'tack[site]'")
    bindir = tmp_path / "bin"
    python_on_path(bindir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep),
               TACK_CACHE="off")
    script = "set -euo pipefail\n" + "\n".join(blocks("sh"))
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = os.listdir(tmp_path / "bundles")
    assert any("x86_64_v2" in n or "aarch64" in n for n in names) or names, names
    assert (tmp_path / "modulefiles" / "tack").is_dir()


def _normalise(cmd):
    return re.sub(r"\s+", " ", re.sub(r"\$\{?\w+\}?|\"|'", "", cmd)).strip()


@pytest.mark.parametrize("script", ["ci/spack-check.sh", "ci/conda-check.sh",
                                    "ci/easybuild-check.sh"])
def test_console_commands_are_run_by_ci(script):
    """Each command of a console block the doc attributes to a CI script is run by it (variables
    and quotes aside)."""
    ci = _normalise((ROOT / script).read_text())
    assert attributed(script), f"no console block of docs/deploy.md names {script}"
    for block in attributed(script):
        for line in block.splitlines():
            words = _normalise(line).split()
            if not words or words[0] == "conda":       # conda activate/deactivate: a shell function
                continue
            # the command's own words, in order, somewhere in the script
            pattern = r"\b" + r"\s+(?:\S+\s+)*?".join(map(re.escape, words[:4]))
            assert re.search(pattern, ci), f"{line!r} is not run by {script}"


def test_each_console_block_names_the_script_that_runs_it():
    """No console block goes unrun: each one's paragraph names exactly one of the CI scripts."""
    named = [block for script in RUNNERS for block in attributed(script)]
    assert sorted(named) == sorted(blocks("console"))
    assert all(attributed(script) for script in RUNNERS)
