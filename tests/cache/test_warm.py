"""Stored in one process, loaded in the next: the warm path, what it skips, stats() and TACK_CACHE_LOG."""

import os
import stat

from .conftest import (KMOD, KMOD_LAUNCHES, check_results, compiled, edit, entry_files, import_file, loaded,
                       run_child, write_module, clone, drop_dac_caps, one_entry)

NO_FRONT_END = """
import ast
import inspect
import linecache
import tokenize
import tack.frontend.lower

def _front_end_called(*args, **kwargs):
    raise AssertionError("the front end ran")

tack.frontend.lower.lower_kernel = _front_end_called
ast.parse = _front_end_called
# no source read, no tokenizing:
tokenize.tokenize = tokenize.generate_tokens = tokenize.open = _front_end_called
inspect.getsource = inspect.getsourcelines = inspect.findsource = _front_end_called
linecache.getlines = linecache.updatecache = _front_end_called
"""


def test_cold_process_stores_both_levels(stored_kmod):
    """A cold process misses both levels for each kernel, writes bytes, reads none, and leaves private entries that decode."""
    cold = stored_kmod.cold
    check_results(cold)
    assert all("lower" in r["timings"] and compiled(r) for r in cold.results)
    assert cold.stats["misses"] == {"lowered": 3, "variant": 3}
    assert cold.stats["hits"] == {"lowered": 0, "variant": 0}
    assert cold.stats["bytes_written"] > 0 and cold.stats["bytes_read"] == 0
    assert cold.warnings == []
    files = entry_files(stored_kmod.cache)
    assert sorted(p.suffix for p in files) == [".tlk"] * 3 + [".tvar"] * 3
    assert sum(p.stat().st_size for p in files) == cold.stats["bytes_written"]
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
        for d in (p.parent, p.parent.parent, p.parent.parent.parent):
            assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def test_warm_process_runs_no_front_end(warm):
    """With the front end and ast.parse made to raise, a new process loads every stored variant and gets the right results."""
    cache, src = warm
    run = run_child(cache, src, KMOD_LAUNCHES, prelude=NO_FRONT_END)
    check_results(run)
    assert all(loaded(r) for r in run.results), run.results
    assert run.stats["hits"] == {"lowered": 0, "variant": 3}
    assert run.stats["misses"] == {"lowered": 0, "variant": 0}
    assert run.stats["bytes_read"] > 0 and run.stats["bytes_written"] == 0
    assert run.warnings == []


def test_warm_process_imports_neither_llvm_nor_front_end(warm):
    """A warm launch imports no compiler module: not llvmlite's LLVM binding, the front end, the
    specializer, codegen, the compile path or the CPU toolchain."""
    cache, src = warm
    run = run_child(cache, src, KMOD_LAUNCHES)
    check_results(run)
    assert run.stats["hits"]["variant"] == 3
    assert run.data["modules"] == []


def test_new_argument_types_use_lowered_entry_without_front_end(warm):
    """A new array dtype misses the variant but hits the lowered kernel, so it compiles without the front end, and is stored."""
    cache, src = warm
    launches = [{"kernel": "k_main", "n": 9, "dtype": "float32"}]
    run = run_child(cache, src, launches, prelude=NO_FRONT_END)
    check_results(run)
    r = run.result("k_main")
    assert compiled(r) and "lower" not in r["timings"]
    assert run.stats["hits"] == {"lowered": 1, "variant": 0}
    assert run.stats["misses"] == {"lowered": 0, "variant": 1}
    assert run.stats["bytes_read"] > 0 and run.stats["bytes_written"] > 0
    again = run_child(cache, src, launches, prelude=NO_FRONT_END)
    assert loaded(again.result("k_main"))
    assert again.stats["hits"] == {"lowered": 0, "variant": 1}


def test_cache_log_says_missing_loaded_and_dependency_changed(warm, tmp_path, cache_dir):
    """TACK_CACHE_LOG=1 says 'missing' on a cold run, 'loaded' on a warm one, and 'dependency changed' naming the edited function."""
    cache, src = warm
    cold = run_child(cache_dir, src, [{"kernel": "k_other", "n": 3}], env={"TACK_CACHE_LOG": "1"})
    assert "missing" in cold.stderr, cold.stderr
    assert "loaded" not in cold.stderr
    # One line per kernel: the cold one names the kernel it compiled, as the warm lines do.
    assert any("k_other" in ln for ln in cold.stderr.splitlines()), cold.stderr

    edited = write_module(tmp_path / "src-edited", edit(KMOD, "return x * 2.0 + OFFSET", "return x * 7.0 + OFFSET"))
    run = run_child(cache, edited, [{"kernel": "k_other", "n": 5}, {"kernel": "k_main", "n": 5}],
                    env={"TACK_CACHE_LOG": "1"})
    lines = run.stderr.splitlines()
    assert any("k_other" in ln and "loaded" in ln for ln in lines), run.stderr
    changed = [ln for ln in lines if "k_main" in ln and "dependency changed" in ln]
    assert changed, run.stderr
    assert all("'inner'" in ln for ln in changed), changed
    assert run.stats["rejected"] >= 1


def test_cache_log_unknown_value_is_told_and_logs(warm, cache_dir):
    """TACK_CACHE_LOG=verbose was taken as 1 with no word: it still logs as 1 (the user asked for
    output), and a warning names the variable, the value and the levels there are."""
    _, src = warm
    run = run_child(cache_dir, src, [{"kernel": "k_other", "n": 3}], env={"TACK_CACHE_LOG": "verbose"})
    said = [w["message"] for w in run.data["warnings"]]
    assert any("TACK_CACHE_LOG='verbose' is not a log level" in m for m in said), said
    assert any("k_other" in ln and "missing" in ln for ln in run.stderr.splitlines()), run.stderr


def test_no_log_output_by_default(warm):
    """Without TACK_CACHE_LOG, a process that loads one variant and compiles another writes nothing to stderr."""
    cache, src = warm
    run = run_child(cache, src, [{"kernel": "k_main", "n": 5}, {"kernel": "k_main", "n": 6, "dtype": "float32"}])
    assert run.stats["hits"] == {"lowered": 1, "variant": 1}
    assert run.stderr == ""


def test_reset_stats_starts_counting_afresh(tmp_path):
    """After tack.cache.reset_stats(), stats() counts what the process does next from zero."""
    import numpy as np

    import tack
    import tack.cache

    mod = import_file(write_module(tmp_path / "src", KMOD, "kmod_reset") / "kmod_reset.py", "kmod_reset")
    tack.launch(mod.k_other, 4, (np.arange(4.0), np.zeros(4)))
    assert tack.cache.stats()["misses"] == {"lowered": 1, "variant": 1}
    tack.cache.reset_stats()
    assert tack.cache.stats()["misses"] == {"lowered": 0, "variant": 0}
    out = np.zeros(6, np.float32)                   # new argument types: a new variant
    tack.launch(mod.k_other, 6, (np.arange(6, dtype=np.float32), out))
    np.testing.assert_array_equal(out, np.arange(6.0) ** 2 - 1)
    stats = tack.cache.stats()
    assert stats["misses"] == {"lowered": 0, "variant": 1}
    assert stats["bytes_written"] > 0


def test_cache_log_says_damaged_and_untrusted_per_kernel(warm, tmp_path):
    """TACK_CACHE_LOG=1 names the kernel whose entry was damaged or unreadable, and says
    'untrusted' (with the reason) for each kernel when the directory cannot be trusted, rather
    than 'missing'."""
    cache, src = warm
    cache = clone(cache, tmp_path / "copy")
    variant = one_entry(cache, "variants", "k_other")
    variant.write_bytes(variant.read_bytes()[:100])
    run = run_child(cache, src, [{"kernel": "k_other", "n": 5}], env={"TACK_CACHE_LOG": "1"})
    check_results(run)
    lines = [ln for ln in run.stderr.splitlines() if "kernel 'k_other'" in ln]
    assert any("compiled variant not used: damaged" in ln for ln in lines), run.stderr
    assert not any("missing" in ln for ln in lines if "variant" in ln), run.stderr

    variant = one_entry(cache, "variants", "k_main")
    os.chmod(variant, 0)
    try:
        run = run_child(cache, src, [{"kernel": "k_main", "n": 5}], env={"TACK_CACHE_LOG": "1"},
                        preexec_fn=drop_dac_caps)
    finally:
        os.chmod(variant, 0o600)
    check_results(run)
    said = [ln for ln in run.stderr.splitlines() if "kernel 'k_main'" in ln and "variant" in ln]
    assert said and all("not used: unreadable: Permission denied" in ln and str(variant) in ln
                        for ln in said), run.stderr

    os.chmod(cache, 0o770)
    try:
        run = run_child(cache, src, [{"kernel": "k_main", "n": 5}, {"kernel": "k_other", "n": 5}],
                        env={"TACK_CACHE_LOG": "1"})
    finally:
        os.chmod(cache, 0o700)
    check_results(run)
    for kernel in ("k_main", "k_other"):
        said = [ln for ln in run.stderr.splitlines() if f"kernel '{kernel}'" in ln and "variant" in ln]
        assert said and all("not used: untrusted" in ln and "chmod go-w" in ln for ln in said), run.stderr
