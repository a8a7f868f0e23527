"""``python -m tack.demo``: what it says about the cache is true of the run, and its help reads as
text (issue 14)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def demo(*args, **env):
    child = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    child.update(PYTHONPATH=ROOT, **env)
    p = subprocess.run([sys.executable, "-m", "tack.demo", *args], env=child, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_demo_says_warm_only_when_it_was(tmp_path):
    """The first run (cold) says a second starts warm; the second, which loads both kernels from
    the cache, says it started warm and does not ask to run again."""
    cache = str(tmp_path / "cache")
    first = demo("--size", "8", TACK_CACHE_DIR=cache)
    assert "0 of 2 kernels loaded" in first and "run again to start warm" in first
    second = demo("--size", "8", TACK_CACHE_DIR=cache)
    assert "2 of 2 kernels loaded" in second and "started warm" in second
    assert "run again" not in second
    read_only = demo("--size", "8", TACK_CACHE_DIR=str(tmp_path / "other"), TACK_CACHE="read")
    assert "run again" not in read_only and "stores nothing" in read_only


def test_demo_help_is_plain_text_and_covers_every_option():
    """--help has no reStructuredText backticks, and says what each option is, not only its name."""
    out = demo("--help")
    assert "`" not in out
    entries, current = {}, None
    for line in out.split("options:", 1)[1].splitlines():
        if line.startswith("  -"):
            current = line.split()[0].rstrip(",")
            entries[current] = line
        elif current:
            entries[current] += "\n" + line
    for option in ("--field", "--size", "--level"):
        assert len(entries[option].split()) > 2, f"no help for {option}:\n{out}"
