"""Processes sharing one cache directory: concurrent writers, and a writer killed in the middle of storing an entry."""

import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tack.cache import trust

from .conftest import (check_results, child_argv, child_env, compiled, decode_entry, entry_files, run_child,
                       write_module, Run)

CONC = '''"""Four kernels for the concurrency tests."""
import tack


@tack.kernel
def c0(a, out):
    i = tack.tid()
    out[i] = a[i] * 2.0 - 0.0


@tack.kernel
def c1(a, out):
    i = tack.tid()
    out[i] = a[i] * 3.0 - 1.0


@tack.kernel
def c2(a, out):
    i = tack.tid()
    out[i] = a[i] * 4.0 - 2.0


@tack.kernel
def c3(a, out):
    i = tack.tid()
    out[i] = a[i] * 5.0 - 3.0
'''

PROCESSES = 8
WAIT_FOR_GO = "import os, time\nwhile not os.path.exists({go!r}):\n    time.sleep(0.002)\n"


def launches_of(i):
    """Process i: c0 (every process, at one of two dtypes, and one of two shapes that share a
    variant) and one of c1..c3."""
    return [{"kernel": "c0", "n": 5 + i % 4 // 2, "dtype": ("float64", "float32")[i % 2]},
            {"kernel": f"c{1 + i % 3}", "n": 5}]


def own_variant_of(i):
    """Process i: a variant no other process launches (c0..c3 at float64 for 0-3, at float32 for
    4-7), so that every process must compile and store at least one entry, however late it
    starts; the lowered kernels are shared between i and i + 4."""
    return [{"kernel": f"c{i % 4}", "n": 5, "dtype": ("float64", "float32")[i // 4]}]


def run_released(tmp_path, cache, prelude="", launches=launches_of):
    """PROCESSES children of ``launches`` (``prelude`` run first in each), started together,
    all released at once into ``cache``; -> their Runs."""
    src = write_module(tmp_path / "src", CONC, "conc")
    go = tmp_path / "go"
    prelude = WAIT_FOR_GO.format(go=str(go)) + prelude
    procs = [subprocess.Popen(child_argv(src, launches(i), "conc", prelude=prelude),
                              env=child_env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(PROCESSES)]
    go.touch()
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        runs.append(Run(p.returncode, out, err))
    return runs


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_writers(round_, tmp_path):
    """Eight processes released at once into one empty directory all get the right results, and every entry left there is whole."""
    cache = tmp_path / "shared-cache"
    runs = run_released(tmp_path, cache)
    for run in runs:
        for r in run.results:
            j = int(r["kernel"][1:])
            np.testing.assert_array_equal(r["out"], np.arange(len(r["out"])) * (j + 2.0) - j)
        assert run.warnings == [], run.warnings
    files = entry_files(cache)
    assert not [p for p in cache.rglob("*") if trust.TMP_MARK in p.name]
    assert sorted(p.suffix for p in files) == [".tlk"] * 4 + [".tvar"] * 5
    for p in files:
        decode_entry(p)


SLOW_VARIANT_STORE = '''
import os, time
_real_replace = os.replace

def _slow_replace(src, dst, *args, **kwargs):
    if str(dst).endswith(".tvar"):
        print("READY", src, dst, flush=True)
        time.sleep(300)
    return _real_replace(src, dst, *args, **kwargs)

os.replace = _slow_replace
'''


def test_writer_killed_mid_store(tmp_path, cache_dir):
    """A writer killed between writing its temporary file and renaming it leaves no partial entry at a final path; the next process compiles and runs right."""
    src = write_module(tmp_path / "src", CONC, "conc")
    launches = [{"kernel": "c1", "n": 6}]
    p = subprocess.Popen(child_argv(src, launches, "conc", prelude=SLOW_VARIANT_STORE),
                         env=child_env(cache_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("READY"), (line, p.stderr.read() if p.poll() is not None else "")
        _, tmp, final = line.split()
        assert os.path.isfile(tmp) and not os.path.lexists(final)
        assert trust.TMP_MARK in Path(tmp).name and Path(tmp).parent == Path(final).parent
    finally:
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    assert not os.path.lexists(final)
    finals = [f for f in entry_files(cache_dir) if trust.TMP_MARK not in f.name]
    assert [f.suffix for f in finals] == [".tlk"]
    decode_entry(finals[0])

    run = run_child(cache_dir, src, launches, module="conc")
    r = run.result("c1")
    np.testing.assert_array_equal(r["out"], np.arange(6) * 3.0 - 1.0)
    assert compiled(r) and "lower" not in r["timings"]
    assert run.stats["hits"] == {"lowered": 1, "variant": 0}
    assert run.warnings == []
    decode_entry(Path(final))


COUNT_SIZE_CHECKS = '''
import os
import tack.cache.size as _size
_real_maybe_prune = _size.maybe_prune

def _counted(root, *args, **kwargs):
    result = _real_maybe_prune(root, *args, **kwargs)
    if result is not None:                       # this process scanned the directory
        with open({log!r}, "a") as f:
            f.write(str(os.getpid()) + chr(10))
    return result

_size.maybe_prune = _counted

# A slow scan (a big cache on a parallel file system): the others store while it runs.
import time
_real_prune = _size.prune
_size.prune = lambda *args: (time.sleep(1.0), _real_prune(*args))[1]
'''


@pytest.mark.parametrize("round_", range(2))
def test_hourly_size_check_is_made_by_one_process(round_, tmp_path):
    """Eight processes storing entries at once into a directory whose size check is due, the scan
    taking a second: exactly one of them scans it (the claim, then the stamp), every store of
    every other process skips it.  Each process launches a variant of its own (with
    ``launches_of``, processes 0 and 6, 1 and 7 launch the same variants, and one that started
    late found all of its entries stored by its twin and stored nothing)."""
    cache, log = tmp_path / "shared-cache", tmp_path / "scans.log"
    runs = run_released(tmp_path, cache, COUNT_SIZE_CHECKS.format(log=str(log)), own_variant_of)
    assert [run.warnings for run in runs] == [[]] * len(runs)
    assert all(run.stats["bytes_written"] > 0 for run in runs)
    assert len(log.read_text().split()) == 1, log.read_text()
    from tack.cache import size
    assert (cache / size.STAMP).exists() and not (cache / size.CLAIM).exists()


def test_a_level_removed_between_its_making_and_its_check_is_made_again(warm):
    """A prune or clear beside a storing job removes the directories it empties: one removed
    between the store's ``mkdir`` and its trust check was taken for an untrusted directory ("…
    does not exist"), and storing was turned off for the rest of the process.  It is made again,
    and the entry stored, with no warning."""
    cache, src = warm
    prelude = """
import os, shutil
import tack.cache.trust as trust
real_mkdir, removed = os.mkdir, []

def mkdir_then_pruned(path, mode=0o777):
    real_mkdir(path, mode)
    if path.endswith(os.sep + "variants") and not removed:      # a prune, right then
        removed.append(path)
        shutil.rmtree(path)

trust.os = type(os)("os_with_a_prune")
trust.os.__dict__.update(os.__dict__, mkdir=mkdir_then_pruned)
"""
    variants = [p for p in cache.glob("*/variants")]
    assert len(variants) == 1
    import shutil
    shutil.rmtree(variants[0])                      # the level a store makes again
    run = run_child(cache, src, [{"kernel": "k_other", "n": 5}, {"kernel": "k_main", "n": 5}],
                    prelude=prelude)
    check_results(run)
    assert run.warnings == [], run.warnings
    assert run.stats["compiled"] == 2 and run.stats["bytes_written"] > 0, run.stats
    assert len(list(variants[0].glob("*/*.tvar"))) == 2
