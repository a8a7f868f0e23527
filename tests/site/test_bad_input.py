"""Bad input: each a clear message naming what and where, exit status 1, and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

GOOD = """version: 1
cache:
  directory: $SCRATCH/$USER/tack-cache
  size: 4G
build:
  archs:
    cpu: [zen3]
modules:
  version: "1.0"
  conflicts: [tack-dev]
"""

CASES = {
    "invalid-yaml": (GOOD.replace("cpu: [zen3]", "cpu: [zen3"), ":8: invalid YAML"),
    "unknown-key": (GOOD.replace("  size: 4G", "  sise: 4G"),
                    ":4: cache.sise: unknown key; did you mean 'size'?"),
    "wrong-type": (GOOD.replace("conflicts: [tack-dev]", "conflicts: tack-dev"),
                   ":10: modules.conflicts: expected a list"),
    "bad-size": (GOOD.replace("size: 4G", "size: 4Q"), ":4: cache.size: "),
    "unknown-arch": (GOOD.replace("cpu: [zen3]", "cpu: [zen33]"),
                     ":7: build.archs.cpu: unknown CPU microarchitecture 'zen33'; did you mean 'zen3'"),
}


def site(*args):
    return subprocess.run([sys.executable, "-m", "tack.site", *map(str, args)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", ["modules", "env", "conda-activate"])
def test_bad_config(tmp_path, case, command):
    text, message = CASES[case]
    config = tmp_path / "site.yaml"
    config.write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    extra = {"modules": ["--root", out, "--format", "both"], "env": [],
             "conda-activate": ["--prefix", out]}[command]
    r = site(command, config, *extra)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"error: {config}{message}" in r.stderr, r.stderr
    assert "nothing was written" in r.stderr
    assert r.stdout == ""
    assert os.listdir(out) == [], "something was written"


def test_bad_size_message(tmp_path):
    config = tmp_path / "site.yaml"
    config.write_text(CASES["bad-size"][0])
    r = site("check", config)
    assert r.returncode == 1, r.stderr
    line = r.stderr.splitlines()[0]
    assert line.startswith(f"error: {config}:4: cache.size: ") and "4Q" in line, line


def test_good_config_is_good(tmp_path):
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    r = site("modules", config, "--root", tmp_path / "out", "--format", "both")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "out" / "tack")) == ["1.0", "1.0.lua"]


def test_unwritable_root(tmp_path):
    """A root under a regular file (root ignores permissions, a file in the path does not)."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    r = site("modules", config, "--root", blocker / "modulefiles", "--format", "both")
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: cannot write {blocker / 'modulefiles' / 'tack'}: "
                               f"{blocker} exists and is not a directory; nothing was written"), r.stderr
    assert sorted(os.listdir(tmp_path)) == ["file", "site.yaml"]
    assert blocker.read_text() == "not a directory\n"


def test_no_root(tmp_path):
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    r = site("modules", config)
    assert r.returncode == 1 and "no output root: give --root or set modules.root" in r.stderr
