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


def test_demo_does_not_ask_to_run_again_when_nothing_was_stored(tmp_path):
    """A cache directory Tack refuses (others may write it): the run warns and stores nothing,
    and the demo still said "run again to start warm", which would compile again."""
    bad = tmp_path / "shared"
    bad.mkdir()
    os.chmod(bad, 0o777)
    out = demo("--size", "8", TACK_CACHE_DIR=str(bad))
    assert "run again" not in out, out
    assert "nothing was stored (the warning above says why): a next run compiles again" in out
    assert os.listdir(bad) == []


def test_demo_says_where_the_kernels_came_from(tmp_path):
    """Kernels served by a bundle are said to come from it, not from the cache directory (the
    demo had said "loaded from it" of the user's directory when a site bundle served them)."""
    import shutil
    cache = tmp_path / "cache"
    demo("--size", "8", TACK_CACHE_DIR=str(cache))
    child = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    subprocess.run([sys.executable, "-m", "tack.cache", "pack"], check=True, capture_output=True,
                   env=dict(child, PYTHONPATH=ROOT, TACK_CACHE_DIR=str(cache)), timeout=300)
    (packed,) = [p for p in cache.iterdir() if p.name.startswith("bundle-")]
    own = demo("--size", "8", TACK_CACHE_DIR=str(cache), TACK_CACHE="bundle")
    assert "2 of 2 kernels loaded this run: 2 from the cache bundle" in own, own
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(packed, site / packed.name)
    served = demo("--size", "8", TACK_CACHE_DIR=str(tmp_path / "empty"), TACK_CACHE="read",
                  TACK_CACHE_BUNDLES=str(site))
    assert "2 of 2 kernels loaded this run: 2 from the site bundles" in served, served
    assert "cache directory" not in served.split("cache:", 1)[1]
    warm = demo("--size", "8", TACK_CACHE_DIR=str(cache))
    assert "2 from the cache directory" in warm, warm


def test_demo_refuses_a_size_or_level_it_cannot_contour_before_anything_runs(tmp_path):
    """--size 100000 made a field of 10**15 points first, and ended in a raw MemoryError
    traceback; now it is a usage error naming --size and the memory it would need, before any
    field is made (the rule ``bundles check --size`` follows).  A level that is not a finite
    number is one too: every comparison with NaN is false, and gave 0 triangles silently."""
    for args, words in [(("--size", "100000"), "--size 100000: a 100000^3 field is more than the "
                                                "contour takes"),
                        (("--level", "nan"), "--level must be a finite number"),
                        (("--level", "inf"), "--level must be a finite number")]:
        child = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
        child.update(PYTHONPATH=ROOT, TACK_CACHE_DIR=str(tmp_path / "cache"))
        p = subprocess.run([sys.executable, "-m", "tack.demo", *args], env=child,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 2 and words in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and p.stdout == "", p.stderr
    assert not (tmp_path / "cache").exists()


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


def _first_call_lines(out):
    """-> (first call ms, {stage: ms}) from the demo's output."""
    lines = out.splitlines()
    i = next(n for n, line in enumerate(lines) if line.strip().startswith("first call:"))
    first = float(lines[i].split(":")[1].split()[0])
    stages = {}
    for line in lines[i + 1:]:
        if not line.startswith("    "):
            break
        name, ms = line.split()[:2]
        stages[name] = float(ms)
    return first, stages


def test_demo_first_call_lines_add_up(tmp_path):
    """Issue 21: the demo's first call is broken down with no gap. Cold, its lines are the
    compiler's stages; warm, a hit's (import, find, read, deps, load, variant, launch) and no
    compile; both add up, with the contour's own NumPy work between the kernels ("rest"), to the
    first call (each line is rounded to 0.1 ms)."""
    cache = str(tmp_path / "cache")
    for run, must, must_not in (("cold", {"lower", "llvm"}, set()),
                                ("warm", {"import", "find", "read", "deps", "load", "launch"},
                                 {"lower", "specialize", "codegen", "llvm"})):
        first, stages = _first_call_lines(demo("--size", "8", TACK_CACHE_DIR=cache))
        assert must <= set(stages) and not must_not & set(stages), (run, stages)
        assert "rest" in stages, stages
        assert abs(sum(stages.values()) - first) <= 0.05 * len(stages) + 0.05, (run, first, stages)


def test_timing_stages_of_a_hit_follow_one_clock(tmp_path):
    """TACK_TIMING's stages of a warm first call are a hit's, in the order they happen, and add
    up to no more than the call itself (one clock, nothing counted twice)."""
    code = """
import json, time, numpy as np, tack
@tack.kernel
def k(a, out):
    i = tack.tid()
    out[i] = a[i] * 2.0
a, out = np.arange(8.0), np.zeros(8)
t0 = time.perf_counter()
tack.launch(k, 8, (a, out))
wall = time.perf_counter() - t0
print(json.dumps({"stages": list(k.timings), "sum": sum(k.timings.values()), "wall": wall,
                  "ok": bool((out == 2 * a).all())}))
"""
    src = tmp_path / "kmod.py"
    src.write_text(code)
    child = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    # One thread: a new variant's first launch times its first row, and on a busy machine a
    # preempted row sent the other seven to the pool, adding the "threads" stage to the list.
    child.update(PYTHONPATH=ROOT, TACK_CACHE_DIR=str(tmp_path / "cache"), TACK_NUM_THREADS="1")
    import json
    runs = [json.loads(subprocess.run([sys.executable, str(src)], env=child, capture_output=True,
                                      text=True, check=True, timeout=300).stdout) for _ in range(2)]
    warm = runs[1]
    assert warm["ok"]
    assert warm["stages"] == ["import", "find", "read", "deps", "load", "variant", "launch"], warm
    assert warm["sum"] <= warm["wall"], warm


# An editable install as setuptools makes it: a finder after the path finder that maps tack.* to
# this checkout, so a folder named tack earlier on sys.path (the directory holding a checkout) is
# taken as a namespace package and hides it.
EDITABLE = """
import importlib.machinery, os, runpy, sys
ROOT = sys.argv.pop(1)
class Editable:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "tack" or name.startswith("tack."):
            parent = os.path.join(ROOT, *name.split(".")[:-1])
            return importlib.machinery.PathFinder.find_spec(name, [parent])
k = sys.meta_path.index(importlib.machinery.PathFinder)
sys.meta_path.insert(k + 1, Editable)
sys.path.insert(0, os.getcwd())          # as python -m puts the working directory first
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""


def run_beside_a_checkout(tmp_path, module, *args):
    checkout = tmp_path / "tack"             # the folder a clone makes: no __init__.py in it
    (checkout / "docs").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'tack'\n")
    child = {k: v for k, v in os.environ.items() if not k.startswith("TACK_") and k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", EDITABLE, ROOT, module, *args], cwd=tmp_path,
                          env=child, capture_output=True, text=True, timeout=300)


def test_demo_beside_its_checkout_says_the_folder_hides_tack(tmp_path):
    """Run from the directory holding a checkout named tack (editable install), the demo says that
    folder hides the install and what to do, in one line, instead of an AttributeError."""
    p = run_beside_a_checkout(tmp_path, "tack.demo", "--size", "8")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "AttributeError" not in p.stderr, p.stderr
    line, = p.stderr.strip().splitlines()
    assert f"the folder {tmp_path / 'tack'} hides the installed Tack ({ROOT}{os.sep}tack)" in line
    assert "namespace package" in line and "cd tack" in line


def test_kernels_beside_its_checkout_raise_an_import_error_naming_the_folder(tmp_path):
    """Importing tack.kernels there raises ImportError saying why, not AttributeError."""
    code = ("try:\n    import tack.kernels.contour\nexcept ImportError as e:\n    print('IE', e)\n")
    script = tmp_path / "use.py"
    script.write_text(code)
    p = run_beside_a_checkout(tmp_path, "use")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("IE the folder") and "hides the installed Tack" in p.stdout, p.stdout


def _field_at(kind, n, i, j, k):
    """The demo field's value at one point, from Python floats (IEEE doubles, the operations in
    the order the demo's docs give), rounded to float32 as the field is."""
    import math
    import numpy as np
    x, y, z = i / (n - 1), j / (n - 1), k / (n - 1)
    if kind == "sphere":
        v = math.sqrt(((x - 0.47) ** 2 + (y - 0.52) ** 2) + (z - 0.49) ** 2) / 0.35
    elif kind == "torus":
        ring = math.sqrt((x - 0.49) ** 2 + (y - 0.51) ** 2) - 0.28
        v = math.sqrt(ring ** 2 + (z - 0.5) ** 2) / 0.2
    else:
        tau = 2 * math.pi
        v = 0.5 + 0.25 * (math.sin(2 * (tau * x)) * math.cos(3 * (tau * y))
                          + math.sin(2.5 * (tau * z) + 0.3))
    return np.float32(v)


def test_demo_fields_are_exact_and_made_in_a_fifth_of_the_memory():
    """``make_field`` broadcasts each axis's coordinates against the others rather than holding
    every point's three (56-72 bytes a point at its peak before, 12 now: ``bundles check
    --size`` and a big demo field fit where they did not), and gives the same values: each
    point's, from Python's own double arithmetic, bit for bit."""
    import tracemalloc
    import numpy as np
    from tack.demo import FIELDS, make_field
    for kind in FIELDS:
        for n in (2, 5, 21):
            f = make_field(kind, n)
            assert f.dtype == np.float32 and f.shape == (n, n, n) and f.flags.c_contiguous
            want = np.array([[[_field_at(kind, n, i, j, k) for k in range(n)] for j in range(n)]
                             for i in range(n)], dtype=np.float32)
            assert np.array_equal(f.view(np.uint32), want.view(np.uint32)), (kind, n)
        n = 120
        tracemalloc.start()
        try:
            make_field(kind, n)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= 13 * n ** 3, (kind, peak / n ** 3)
