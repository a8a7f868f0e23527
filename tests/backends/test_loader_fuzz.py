"""Fuzzing Tack's ELF loader with mutated real objects (tests/backends/loader_fuzz.py, in a child process)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

if sys.platform != "linux":
    pytest.skip("Tack's ELF loader runs on Linux only", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Thousands in CI; set TACK_LOADER_FUZZ_CASES for a longer run by hand.
CASES = int(os.environ.get("TACK_LOADER_FUZZ_CASES", "4000"))


def test_mutated_objects_load_correctly_or_raise_load_error(tmp_path, capsys):
    """Each of CASES objects, real kernels' objects with one to three fields changed, cut short
    or bit-flipped, is refused with a LoadError (never marked well-formed, nothing left mapped)
    or loaded with every write and symbol inside its mapping; those that load exactly as the
    real object run and compute the right results.  A crash fails this test with the case."""
    last = tmp_path / "last-case.o"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "tests.backends.loader_fuzz", str(last), str(CASES)],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        pytest.fail(f"loader fuzz failed (status {proc.returncode}); its last case is {last}\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["cases"] == CASES
    assert counts["cases"] == sum(v for k, v in counts.items() if k != "cases")
    # The mutations reach both outcomes, or the fuzz tests nothing.
    assert counts["LoadError"] > CASES // 10 and counts["loaded and ran correctly"] > CASES // 10
    with capsys.disabled():
        print(f"\nloader fuzz: {counts['cases']} cases, {counts['LoadError']} LoadError, "
              f"{counts['loaded and ran correctly']} loaded and ran correctly, "
              f"{counts.get('loaded with changed contents', 0)} loaded with changed contents, 0 crashes")
