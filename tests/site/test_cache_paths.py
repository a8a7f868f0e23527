"""cache.directory and cache.bundles holding a control character are refused by ``check``
(issue 22): they become TACK_CACHE_DIR and TACK_CACHE_BUNDLES in every activation script."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("key", ["directory", "bundles"])
@pytest.mark.parametrize("value, shown", [('"/scratch/a\\nb"', "\\n"), ('"/scratch/a\\tb"', "\\t")])
def test_control_character_in_a_cache_path(tmp_path, key, value, shown):
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"version: 1\ncache:\n  {key}: {value}\n")
    run = subprocess.run([sys.executable, "-m", "tack.site", "check", str(cfg)],
                         capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"cache.{key}" in run.stderr and "control character" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
