"""Every ```python example in README.md and docs/*.md runs as written (issue 14: examples used
names they never defined), each in a fresh process with a private kernel cache.

A block that cannot run on a test machine (it needs a site's directories, say) is marked by an
HTML comment on the line before it, ``<!-- not run: <why> -->``, which shows in no rendering.
"""

import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
BLOCK = re.compile(r"^```python[ \t]*\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<why>\S.*?)\s*-->$")


def blocks():
    """[(file:line, code, why not run or None)] of every python block."""
    out = []
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            above = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            mark = NOT_RUN.match(above)
            out.append((f"{os.path.relpath(path, ROOT)}:{line}", m.group("code"),
                        mark.group("why") if mark else None))
    return out


BLOCKS = blocks()


def test_there_are_examples_and_few_are_not_run():
    assert len(BLOCKS) >= 5
    skipped = [where for where, _, why in BLOCKS if why is not None]
    assert len(skipped) <= 2, f"keep 'not run' marks few: {skipped}"


@pytest.mark.parametrize("where, code, why", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_example_runs(where, code, why, tmp_path):
    if why is not None:
        pytest.skip(f"not run: {why}")
    script = tmp_path / "example.py"        # kernels must live in a file: the front end reads source
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    # An example's temporary directories (docs/aot.md's tempfile.mkdtemp(), as a user's session
    # makes them) go under the test's own directory, removed with it, not into /tmp at every run.
    (tmp_path / "tmp").mkdir()
    env.update(PYTHONPATH=ROOT, TACK_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp"))
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, f"the example at {where} fails:\n{p.stderr[-3000:]}"
    if "tempfile.mkdtemp()" in code:
        assert any((tmp_path / "tmp").iterdir()), "the example's temporary directories went elsewhere"
