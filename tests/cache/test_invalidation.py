"""What makes a new process compile again, and what does not: each case runs after a first process stored KMOD's kernels."""

import json
import os
import subprocess
import sys

import pytest

import tack

from .conftest import (EXPECTED, KMOD, KMOD_LAUNCHES, check_results, child_env, clone, compiled,
                       entry_files, expect_main, loaded, run_child, write_module, edit)

# (edit of KMOD, the kernel it must recompile, that kernel's expected output)
RECOMPILE = {
    "kernel body": (("out[i] = middle(a[i]) * SCALE", "out[i] = middle(a[i]) * SCALE + 100.0"),
                    "k_main", lambda a: expect_main(a, plus=100.0)),
    "device function two calls deep": (("return x * 2.0 + OFFSET", "return x * 4.0 + OFFSET"),
                                       "k_main", lambda a: expect_main(a, mul=4.0)),
    "constant value": (("SCALE = tack.constant(np.float64(3.0))", "SCALE = tack.constant(np.float64(5.0))"),
                       "k_main", lambda a: expect_main(a, scale=5.0)),
    "constant dtype": (("SCALE = tack.constant(np.float64(3.0))", "SCALE = tack.constant(np.float32(3.0))"),
                       "k_main", expect_main),
    "constant read two calls deep": (("OFFSET = tack.constant(0.5)", "OFFSET = tack.constant(0.25)"),
                                     "k_main", lambda a: expect_main(a, offset=0.25)),
    "template class method": (("return x * 10.0", "return x * 20.0"),
                              "k_tmpl", lambda a: a * 20.0 + 1.0),
}


@pytest.mark.parametrize("case", list(RECOMPILE))
def test_edit_recompiles(case, warm, tmp_path):
    """Editing what a kernel depends on makes the next process compile that kernel again (and only it), with the edit's result."""
    (old, new), kernel, want = RECOMPILE[case]
    cache, _ = warm
    src = write_module(tmp_path / "src-edited", edit(KMOD, old, new))
    run = run_child(cache, src, KMOD_LAUNCHES)
    check_results(run, {**EXPECTED, kernel: want})
    for r in run.results:
        if r["kernel"] == kernel:
            assert "lower" in r["timings"] and compiled(r), r
        else:
            assert loaded(r), r
    assert run.stats["hits"]["variant"] == 2
    assert run.stats["misses"]["variant"] == 1
    assert run.stats["hits"]["lowered"] == 0
    assert run.warnings == []
    if case == "device function two calls deep":
        # Same lowered key, new dependency record: the entries were replaced, and the next process loads them.
        again = run_child(cache, src, KMOD_LAUNCHES)
        check_results(again, {**EXPECTED, kernel: want})
        assert all(loaded(r) for r in again.results), again.results


@pytest.mark.parametrize("case", ["unrelated function", "comments outside the kernels"])
def test_unrelated_edit_loads(case, warm, tmp_path):
    """Editing an unrelated function, or adding comments that shift every line, still loads every variant."""
    cache, _ = warm
    if case == "unrelated function":
        source = edit(KMOD, "return x + 1\n", "return x + 2\n")
    else:
        source = "# a comment at the top\n# and another\n" + edit(
            KMOD, "@tack.kernel\ndef k_other", "# a comment between functions\n\n@tack.kernel\ndef k_other")
    src = write_module(tmp_path / "src-edited", source)
    run = run_child(cache, src, KMOD_LAUNCHES)
    check_results(run)
    assert all(loaded(r) for r in run.results), run.results
    assert run.stats["hits"] == {"lowered": 0, "variant": 3}
    assert run.stats["misses"] == {"lowered": 0, "variant": 0}


def test_debug_mode_is_a_separate_entry(warm):
    """TACK_DEBUG=1 misses the entries stored without it and stores its own, which the next debug process loads."""
    cache, src = warm
    before = len(entry_files(cache))
    first = run_child(cache, src, [{"kernel": "k_main", "n": 5}], env={"TACK_DEBUG": "1"})
    check_results(first)
    r = first.result("k_main")
    assert "lower" in r["timings"] and compiled(r)
    assert first.stats["misses"] == {"lowered": 1, "variant": 1}
    assert len(entry_files(cache)) == before + 2
    second = run_child(cache, src, [{"kernel": "k_main", "n": 5}], env={"TACK_DEBUG": "1"})
    check_results(second)
    assert loaded(second.result("k_main"))
    assert second.stats["hits"]["variant"] == 1


OOB = "\n\n@tack.kernel\ndef k_oob(a, out):\n    i = tack.tid()\n    out[i] = a[i + 1]\n"
CATCH_OOB = ("try:\n"
             "    tack.launch(mod.k_oob, 4, (np.arange(4.0), np.zeros(4)))\n"
             "    extra = 'no error'\n"
             "except IndexError as e:\n"
             "    extra = str(e)\n")


def test_debug_variant_from_cache_checks_bounds_and_points_at_current_line(warm, tmp_path):
    """A debug variant loaded from the cache after comments were added above the kernel still raises IndexError, naming the line where the access now is."""
    cache, _ = warm
    first_src = write_module(tmp_path / "first", KMOD + OOB)
    first = run_child(cache, first_src, [], after=CATCH_OOB, env={"TACK_DEBUG": "1"})
    line = (KMOD + OOB).splitlines().index("    out[i] = a[i + 1]") + 1
    assert "out of bounds" in first.data["extra"]
    assert f"{first_src / 'kmod.py'}:{line}" in first.data["extra"], first.data["extra"]

    moved_src = write_module(tmp_path / "moved", "# one\n# two\n# three\n" + KMOD + OOB)
    moved = run_child(cache, moved_src, [], after=CATCH_OOB, env={"TACK_DEBUG": "1"})
    assert moved.stats["hits"]["variant"] == 1
    assert "out of bounds" in moved.data["extra"], moved.data["extra"]
    assert f"{moved_src / 'kmod.py'}:{line + 3}" in moved.data["extra"], moved.data["extra"]


def test_other_tack_version_has_its_own_entries(warm):
    """Another Tack version misses every stored entry and stores its own in a new version directory."""
    cache, src = warm
    before = set(os.listdir(cache))
    prelude = "import tack.cache.keys as K\nK._version_id = '9.9.9'\n"
    run = run_child(cache, src, KMOD_LAUNCHES, prelude=prelude)
    check_results(run)
    assert all(compiled(r) for r in run.results)
    assert run.stats["hits"] == {"lowered": 0, "variant": 0}
    assert run.stats["misses"] == {"lowered": 3, "variant": 3}
    assert set(os.listdir(cache)) - before == {"9.9.9"}
    assert len(list((cache / "9.9.9").glob("*/*/*.t*"))) == 6
    # The first version's entries are still there and still load.
    again = run_child(cache, src, KMOD_LAUNCHES)
    assert all(loaded(r) for r in again.results)


@pytest.mark.parametrize("fact", ["model name", "llvmlite"])
def test_other_host_has_its_own_variants(fact, warm):
    """Another CPU model or llvmlite version misses the stored variants but reuses the lowered kernels, and stores variants of its own."""
    cache, src = warm
    before = len(entry_files(cache))
    prelude = ("import tack.backends.cpu_identity as K\n"
               "_real = K.host_cpu_identity()\n"
               f"K.host_cpu_identity = lambda: {{**_real, {fact!r}: 'something else'}}\n")
    run = run_child(cache, src, KMOD_LAUNCHES, prelude=prelude)
    check_results(run)
    assert all(compiled(r) and "lower" not in r["timings"] for r in run.results), run.results
    assert run.stats["hits"] == {"lowered": 3, "variant": 0}
    assert len(entry_files(cache)) == before + 3


# Device functions and constants reached through another module's attribute (helpers.f, helpers.FACTOR).
HELPERS = '''"""Device functions and constants in a module of their own."""
import tack

FACTOR = tack.constant(10.0)


@tack.func
def f(x):
    return x + 1.0
'''

KATTR = '''"""Kernels reading another module's device function and constant through the module."""
import tack

import helpers


@tack.kernel
def k_func(a, out):
    i = tack.tid()
    out[i] = helpers.f(a[i])


@tack.kernel
def k_const(a, out):
    i = tack.tid()
    out[i] = a[i] * helpers.FACTOR
'''

KATTR_LAUNCHES = [{"kernel": "k_func", "n": 5}, {"kernel": "k_const", "n": 5}]


@pytest.fixture(scope="module")
def stored_attr(tmp_path_factory):
    base = tmp_path_factory.mktemp("stored-attr")
    src = write_module(base / "src", HELPERS, "helpers")
    write_module(src, KATTR, "kattr")
    cold = run_child(base / "cache", src, KATTR_LAUNCHES, module="kattr")
    check_results(cold, {"k_func": lambda a: a + 1.0, "k_const": lambda a: a * 10.0})
    return base / "cache"


@pytest.mark.parametrize("case", ["device function", "constant"])
def test_edit_reached_through_module_attribute_recompiles(case, stored_attr, tmp_path):
    """Editing a device function or constant that a kernel reaches as module.name makes the next process compile that kernel again, with the edit's result."""
    cache = clone(stored_attr, tmp_path / "cache-attr")
    if case == "device function":
        helpers = edit(HELPERS, "return x + 1.0", "return x + 5.0")
        kernel, want = "k_func", {"k_func": lambda a: a + 5.0, "k_const": lambda a: a * 10.0}
    else:
        helpers = edit(HELPERS, "FACTOR = tack.constant(10.0)", "FACTOR = tack.constant(20.0)")
        kernel, want = "k_const", {"k_func": lambda a: a + 1.0, "k_const": lambda a: a * 20.0}
    src = write_module(tmp_path / "src-edited", helpers, "helpers")
    write_module(src, KATTR, "kattr")
    run = run_child(cache, src, KATTR_LAUNCHES, module="kattr")
    check_results(run, want)
    assert compiled(run.result(kernel)), run.result(kernel)


def test_string_set_constant_loads_whatever_the_hash_seed(tmp_path):
    """A template class with a method testing ``kind in {"alpha", ...}`` (a frozenset constant, whose
    repr order follows the string hash seed) keys the same in processes with different seeds: the
    second process loads."""
    source = edit(KMOD, "    def apply(x):\n        return x * 10.0\n",
                  "    def apply(x):\n        return x * 10.0\n\n"
                  "    def describe(kind):\n"
                  "        return kind in {\"alpha\", \"beta\", \"gamma\", \"delta\", \"epsilon\"}\n")
    src = write_module(tmp_path / "src", source)
    cache = tmp_path / "cache"
    launch = [{"kernel": "k_tmpl", "n": 5, "template": "Policy"}]
    first = run_child(cache, src, launch, env={"PYTHONHASHSEED": "1"})
    check_results(first)
    assert compiled(first.result("k_tmpl"))
    for seed in ("2", "3", "4"):
        again = run_child(cache, src, launch, env={"PYTHONHASHSEED": seed})
        check_results(again)
        assert loaded(again.result("k_tmpl")), (seed, again.result("k_tmpl"))
        assert again.stats["hits"]["variant"] == 1


def test_fingerprint_of_set_constants_is_seed_free(tmp_path):
    """function_fingerprint of code holding frozensets (nested in tuples too) is the same under any seed."""
    mod = tmp_path / "fpmod.py"
    mod.write_text("def f(k):\n    return k in {'a', 'b', 'c', 'd', 'e', 'f'} or k in ('x', frozenset({'p', 'q', 'r'}))\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import fpmod, tack.fingerprints; "
            "print(tack.fingerprints.function_fingerprint(fpmod.f))")
    prints = {subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
              for seed in ("0", "1", "2", "3", "5", "8")}
    assert len(prints) == 1, prints



def test_class_fingerprint_leaves_line_numbers_out(tmp_path):
    """A template class moved down its file (lines added above it) keeps its fingerprint; a
    change of its scalar attribute or method does not.  Python 3.13 records the line a class
    starts on as an int attribute, __firstlineno__, which was hashed like a scalar attribute."""
    from tack.fingerprints import class_fingerprint
    body = ("class Policy:\n    SCALE = 2\n    @staticmethod\n    def apply(x):\n"
            "        return x * 10.0\n")

    def make(name, source):
        f = tmp_path / f"{name}.py"
        f.write_text(source)
        ns = {}
        exec(compile(source, str(f), "exec"), ns)
        return ns["Policy"]
    first = class_fingerprint(make("a", body))
    assert class_fingerprint(make("b", "# one\n# two\n\n" + body)) == first
    assert class_fingerprint(make("c", body.replace("SCALE = 2", "SCALE = 3"))) != first
    assert class_fingerprint(make("d", body.replace("10.0", "20.0"))) != first


STALE_PYC = '''import tack


@tack.kernel
def k_scale(a, out):
    i = tack.tid()
    out[i] = a[i] * 2.0
'''


def test_an_edit_a_stale_pyc_hides_recompiles(tmp_path):
    """CPython takes a .pyc as current while the source's size and mtime in seconds match: an
    edit in the same second that keeps the size (2.0 -> 3.0) runs the old bytecode.  The front end
    compiles the source, so a cold process computes a * 3; the warm one loaded the a * 2 stored
    under the old bytecode's key."""
    src = write_module(tmp_path / "src", STALE_PYC, "kstale")
    path = src / "kstale.py"
    cache = tmp_path / "cache"
    launches = [{"kernel": "k_scale", "n": 3}]
    bytecode = {"PYTHONDONTWRITEBYTECODE": ""}          # (child_env sets it): a .pyc is written
    first = run_child(cache, src, launches, module="kstale", env=bytecode)
    assert first.rc == 0, first.stderr
    assert first.result("k_scale")["out"] == [0.0, 2.0, 4.0]
    assert list((src / "__pycache__").glob("kstale.*.pyc"))
    st = path.stat()
    path.write_text(STALE_PYC.replace("* 2.0", "* 3.0"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))    # the same second, deterministically
    cold = run_child(None, src, launches, module="kstale", env=dict(bytecode, TACK_CACHE="off"))
    warm = run_child(cache, src, launches, module="kstale", env=bytecode)
    for run in (cold, warm):
        assert run.rc == 0, run.stderr
        assert run.result("k_scale")["out"] == [0.0, 3.0, 6.0]


TWO_KERNELS = STALE_PYC + '''

@tack.kernel
def k_shift(a, out):
    i = tack.tid()
    out[i] = a[i] + 2.0
'''

EDIT_IN_PROCESS = '''import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import kboth
import tack
a, out = np.arange(3, dtype=np.float64), np.empty(3)
tack.launch(kboth.k_scale, 3, (a, out))
first = out.tolist()
with open(sys.argv[2]) as f:
    text = f.read()
with open(sys.argv[2], "w") as f:                # edited, not reloaded: a notebook's way
    f.write(text.replace("2.0", "3.0"))
tack.launch(kboth.k_shift, 3, (a, out))
print(json.dumps({"first": first, "second": out.tolist()}))
'''


def test_an_edit_in_a_running_process_is_never_stored_under_the_old_sources_key(tmp_path):
    """A notebook's kernel module edited (2.0 -> 3.0) after one kernel's first launch, not
    reloaded, then another kernel of it launched for the first time: the front end compiles the
    file as it is (a + 3), and its key must say so.  It said the old code alone (the code object
    is still the old one), and a later process running the old source loaded a + 3 for a + 2."""
    src = write_module(tmp_path / "src", TWO_KERNELS, "kboth")
    path = src / "kboth.py"
    script = tmp_path / "edit_in_process.py"
    script.write_text(EDIT_IN_PROCESS)
    cache = tmp_path / "cache"
    p = subprocess.run([sys.executable, str(script), str(src), str(path)],
                       env=child_env(cache), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"first": [0.0, 2.0, 4.0], "second": [3.0, 4.0, 5.0]}, got
    path.write_text(TWO_KERNELS)                        # back as it was: the old code's keys
    launches = [{"kernel": "k_scale", "n": 3}, {"kernel": "k_shift", "n": 3}]
    again = run_child(cache, src, launches, module="kboth")
    assert again.rc == 0, again.stderr
    assert [r["out"] for r in again.results] == [[0.0, 2.0, 4.0], [2.0, 3.0, 4.0]], again.results


DEAD_TAIL = '''import tack


@tack.kernel
def k_scale(a, out):
    i = tack.tid()
    x = 4611686018427387905
    out[i] = a[i] + (x - 4611686018427387904)
    return
    x = 2
'''


@pytest.mark.parametrize("tail", ["", "    y = (1 +\n1)\n", "    y = 1 + \\\n1\n"],
                         ids=["plain", "bracket", "backslash"])
def test_an_edit_of_code_after_a_return_recompiles(tmp_path, tail):
    """Lines after a kernel's last return compile to no bytecode (CPython drops them), but the
    front end compiles them: here the dead 'x = 2.5' makes x a float64 (2**62 + 1 rounds to
    2**62), so a cold process computes a + 0.  The key hashed the lines up to the last one an
    instruction is on, and a warm process loaded the a + 1 stored for 'x = 2'.  A statement
    continued on a line at column 0 (in brackets, after a backslash) ended the span there,
    before 'x = 2'."""
    source = DEAD_TAIL.replace("    return\n", "    return\n" + tail)
    src = write_module(tmp_path / "src", source, "kdead")
    cache = tmp_path / "cache"
    launches = [{"kernel": "k_scale", "n": 3}]
    first = run_child(cache, src, launches, module="kdead")
    assert first.rc == 0, first.stderr
    assert first.result("k_scale")["out"] == [1.0, 2.0, 3.0]
    (src / "kdead.py").write_text(source.replace("    x = 2\n", "    x = 2.5\n"))
    cold = run_child(None, src, launches, module="kdead", env={"TACK_CACHE": "off"})
    warm = run_child(cache, src, launches, module="kdead")
    for run in (cold, warm):
        assert run.rc == 0, run.stderr
        assert run.result("k_scale")["out"] == [0.0, 1.0, 2.0]


EXEC_CELL = '''import json, linecache, sys
import numpy as np
import tack, tack.cache
path, body = sys.argv[1], sys.argv[2]
src = f"""import tack

@tack.kernel
def k_cell(a, out):
    i = tack.tid()
    out[i] = a[i] {body}
"""
linecache.cache[path] = (len(src), None, src.splitlines(True), path)    # as IPython registers a cell
ns = {"__name__": "__main__"}
exec(compile(src, path, "exec"), ns)
a, out = np.arange(3, dtype=np.float64), np.zeros(3)
tack.launch(ns["k_cell"], 3, (a, out))
print(json.dumps({"out": out.tolist(), "hits": tack.cache.stats()["hits"]["variant"]}))
'''


def test_code_compiled_from_a_registered_linecache_text_is_that_text(tmp_path):
    """exec() of code registered in linecache (as IPython and editors' "run cell" do) under
    the name of a file that holds something else (the file as last saved): Python's
    tracebacks show the registered text, and the front end compiled it; the source snapshot
    read the file instead (a kernel of the same name and parameters: its old body, silently),
    and each process with another body got the file's code from the cache."""
    path = tmp_path / "cell.py"
    path.write_text('import tack\n\n@tack.kernel\ndef k_cell(a, out):\n    i = tack.tid()\n'
                    '    out[i] = a[i] * 2.0\n')
    script = tmp_path / "exec_cell.py"
    script.write_text(EXEC_CELL)
    cache = tmp_path / "cache"

    def run(body):
        p = subprocess.run([sys.executable, str(script), str(path), body], env=child_env(cache),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    assert run("* 5.0") == {"out": [0.0, 5.0, 10.0], "hits": 0}
    assert run("* 5.0") == {"out": [0.0, 5.0, 10.0], "hits": 1}
    assert run("+ 7.0") == {"out": [7.0, 8.0, 9.0], "hits": 0}


NOTEBOOK_CELL = '''import json, linecache, sys
import numpy as np
import tack, tack.cache
name, tail = sys.argv[1], sys.argv[2]
src = """import tack

@tack.kernel
def k_cell(a, out):
    i = tack.tid()
    x = 4611686018427387904
    x = x * 4
    out[i] = x
""" + tail
linecache.cache[name] = (len(src), None, src.splitlines(True), name)    # as IPython registers a cell
ns = {"__name__": "__main__"}
exec(compile(src, name, "exec"), ns)
out = np.zeros(2)
tack.launch(ns["k_cell"], 2, (np.zeros(2), out))
print(json.dumps({"out": out.tolist(), "hits": tack.cache.stats()["hits"]["variant"]}))
'''


@pytest.mark.parametrize("name", ["<ipython-input-1-0123abcd>", "ipykernel_1/0123.py"])
def test_a_notebook_cells_kernel_has_the_key_of_its_registered_text(tmp_path, name):
    """A cell's code is registered in ``linecache`` under a name no file has (IPython's
    ``<ipython-input-...>``, ipykernel's temporary path): its key hashed the code object alone,
    so a cell whose kernel differed only in code after a return (which CPython compiles to
    nothing, and the front end compiles: ``x`` becomes a float64 there) loaded the other cell's
    variant (an int64 that wraps to 0 instead of 2**64)."""
    script = tmp_path / "cell.py"
    script.write_text(NOTEBOOK_CELL)
    cache = tmp_path / "cache"
    if not name.startswith("<"):
        name = str(tmp_path / name)

    def run(tail):
        p = subprocess.run([sys.executable, str(script), name, tail], env=child_env(cache),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    assert run("") == {"out": [0.0, 0.0], "hits": 0}
    assert run("    return\n    x = 0.5\n") == {"out": [2.0 ** 64] * 2, "hits": 0}
    assert run("    return\n    x = 0.5\n") == {"out": [2.0 ** 64] * 2, "hits": 1}
    assert run("") == {"out": [0.0, 0.0], "hits": 1}


def test_a_kernel_imported_from_a_zip_has_the_key_of_the_same_source_on_disk(tmp_path):
    """A zipped deployment of a kernel module (zipimport, a zipapp) is served what the same
    source compiled from disk stored (a bundle built from the checkout).  A zip member has no file
    of its own, so its key hashed the bytecode alone, and never met the on-disk source's key; an
    edited member still computes its own text."""
    import zipfile
    src = write_module(tmp_path / "src", STALE_PYC, "kzip")
    cache = tmp_path / "cache"
    launches = [{"kernel": "k_scale", "n": 3}]
    disk = run_child(cache, src, launches, module="kzip")
    assert disk.result("k_scale")["out"] == [0.0, 2.0, 4.0]
    assert disk.stats["misses"]["variant"] == 1
    archive = tmp_path / "app.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(src / "kzip.py", "kzip.py")
    zipped = run_child(cache, archive, launches, module="kzip",
                       after="assert mod.__file__.startswith(" + repr(str(archive)) + ")")
    assert zipped.result("k_scale")["out"] == [0.0, 2.0, 4.0]
    assert zipped.stats["misses"]["variant"] == 0 and zipped.stats["hits"]["variant"] == 1, zipped.stats
    edited = tmp_path / "edited.zip"
    with zipfile.ZipFile(edited, "w") as z:
        z.writestr("kzip.py", STALE_PYC.replace("* 2.0", "* 3.0"))
    again = run_child(cache, edited, launches, module="kzip")
    assert again.result("k_scale")["out"] == [0.0, 3.0, 6.0]
    assert again.stats["misses"]["variant"] == 1


def test_the_fingerprint_memos_let_a_reloaded_modules_old_code_go(tmp_path, monkeypatch):
    """The memos of fingerprints and source snapshots kept every code object they saw, and its
    file's bytes, for the process's life: a notebook module edited and reloaded again and again
    grew the process by a copy of the file each time.  Old code objects now die with their
    module's old functions, and their entries with them."""
    import gc
    import importlib
    import weakref
    from tack import fingerprints
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "kreload.py"
    path.write_text("def f(x):\n    return x + 0\n")
    import kreload
    try:
        refs = []
        for n in range(1, 6):
            fingerprints.function_fingerprint(kreload.f)
            assert fingerprints.source_snapshot(kreload.f.__code__)[1][1].strip() == f"return x + {n - 1}".encode()
            refs.append(weakref.ref(kreload.f.__code__))
            path.write_text(f"def f(x):\n    return x + {n}\n")
            importlib.reload(kreload)
        gc.collect()
        assert [r() is None for r in refs] == [True] * 5
        held = [e for e in list(fingerprints._memo.values()) + list(fingerprints._snapshots.values())
                if e[0]() is not None and e[0]().co_filename == str(path)]
        assert held == []
    finally:
        sys.modules.pop("kreload", None)


def test_a_module_edited_with_its_size_and_mtime_kept_and_reloaded_compiles_what_it_holds(tmp_path, monkeypatch):
    """The process's copy of a file's bytes was kept while the file's inode, size and mtime were
    the same: an edit that keeps the size, made by a tool that keeps times (cp -p, tar, rsync -t,
    os.utime), then a reload without bytecode, ran the new code in Python and the old text's
    kernel in Tack.  The ctime, which a write always moves, is now part of what is compared."""
    import importlib
    import numpy as np
    import tack
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = "import tack\n\n@tack.kernel\ndef k(a, out):\n    i = tack.tid()\n    out[i] = a[i] * {}\n"
    path = tmp_path / "kkept.py"
    path.write_text(text.format("2.0"))
    import kkept
    try:
        a, out = np.arange(3.0), np.zeros(3)
        tack.launch(kkept.k, 3, (a, out))
        assert out.tolist() == [0.0, 2.0, 4.0]
        st = path.stat()
        while path.stat().st_ctime_ns == st.st_ctime_ns:    # a file system's coarse ctime
            path.write_text(text.format("3.0"))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        importlib.reload(kkept)
        assert 3.0 in kkept.k.py_func.__code__.co_consts
        tack.launch(kkept.k, 3, (a, out))
        assert out.tolist() == [0.0, 3.0, 6.0]
    finally:
        sys.modules.pop("kkept", None)


def test_the_hashed_span_ends_at_the_block_whatever_brackets_its_prose_leaves_open(tmp_path, monkeypatch):
    """Where a bracket is left open in a comment or a docstring, the span still ends with the
    function's block: an edit of the next function does not change this one's fingerprint, and an
    edit of this one's dead code does."""
    import importlib
    from tack import fingerprints
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = ('def f(x):\n    """Scale (see\n    the notes."""\n    y = x * 2  # (as before\n'
            '    return y\n    z = [1,\n2]\n\n\ndef g(x):\n    return x + 1\n')
    prints = []
    for n, body in enumerate([text, text.replace("x + 1", "x + 7"), text.replace("2]", "3]")]):
        (tmp_path / f"kspan{n}.py").write_text(body)
        mod = importlib.import_module(f"kspan{n}")
        prints.append(fingerprints.function_fingerprint(mod.f))
    assert prints[0] == prints[1] != prints[2]


RO = ("\n\n@tack.kernel\ndef k_fill(y, v):\n    i = tack.tid()\n    y[i] = v\n")
CATCH_RO = ("y = np.zeros(3)\n"
            "if os.environ.get('TACK_TEST_READONLY'):\n"
            "    y.setflags(write=False)\n"
            "try:\n"
            "    tack.launch(mod.k_fill, 3, (y, 1.0))\n"
            "    extra = 'no error'\n"
            "except tack.CompileError as e:\n"
            "    extra = str(e)\n")


def test_a_compile_error_from_a_cached_lowered_kernel_names_where_the_kernel_is_now(warm, tmp_path):
    """A compile error raised while specializing a lowered kernel read from the cache (a read-only
    array written) named the file and line where the same text was first lowered: ten lines up
    after comments were added above it, or another script's file."""
    cache, _ = warm
    first_src = write_module(tmp_path / "first", KMOD + RO)
    run = run_child(cache, first_src, [], after="import os\n" + CATCH_RO)
    assert run.data["extra"] == "no error", run.data["extra"]
    line = (KMOD + RO).splitlines().index("    y[i] = v") + 1
    for where, text, at in (("moved", "# one\n# two\n# three\n" + KMOD + RO, line + 3),
                            ("other", KMOD + "\n# another script\n" + RO, line + 2)):
        src = write_module(tmp_path / where, text)
        run = run_child(cache, src, [], after="import os\n" + CATCH_RO, env={"TACK_TEST_READONLY": "1"})
        assert run.stats["hits"]["lowered"] == 1, run.stats
        assert f'File "{src / "kmod.py"}", line {at}' in run.data["extra"], run.data["extra"]
        assert "y[i] = v" in run.data["extra"]


PLUGIN_MAIN = """\
import importlib.util
import os

import tack

HERE = os.path.dirname(os.path.abspath(__file__))


def load(n):
    spec = importlib.util.spec_from_file_location("ops", os.path.join(HERE, f"p{n}", "ops.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


F1, F2 = load(1).f, load(2).f


@tack.kernel
def k_plugins(a, out):
    i = tack.tid()
    out[i] = F1(a[i]) + 10.0 * F2(a[i])
"""

PLUGIN_RUN = """\
import json
import numpy as np
import tack, tack.cache
import plugin_main
out = np.zeros(3)
tack.launch(plugin_main.k_plugins, dim=3, args=(np.arange(3.0), out))
st = tack.cache.stats()
print(json.dumps({"out": out.tolist(), "hits": st["hits"]["variant"], "misses": st["misses"]["variant"],
                  "written": st["bytes_written"]}))
"""


def test_two_plugin_files_of_one_module_name_are_two_functions_and_cached(tmp_path):
    """Two plugin files loaded under one module name (spec_from_file_location("ops", ...), neither
    in sys.modules), each f of one text reading its own S: two functions (a kernel calling both
    ran the first twice), told apart by their files, so that the next process finds the kernel
    in the cache (told apart by the order the front end met them, it compiled and wrote the
    kernel again in every process)."""
    for n in (1, 2):
        (tmp_path / f"p{n}").mkdir()
        (tmp_path / f"p{n}" / "ops.py").write_text(
            f"import tack\nS = tack.constant({n}.0)\n\n\n@tack.func\ndef f(x):\n    return x * S\n")
    (tmp_path / "plugin_main.py").write_text(PLUGIN_MAIN)
    env = dict(os.environ, TACK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", PLUGIN_RUN], env=env, capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    for run in runs:
        assert run["out"] == [0.0, 21.0, 42.0], run
    assert runs[0]["misses"] == 1 and runs[1] == dict(runs[1], hits=1, misses=0, written=0), runs


def _pair(f, g):
    @tack.func
    def both(x):
        return f(x) + g(x)
    return both


def test_a_function_reached_by_many_paths_has_a_short_identity():
    """A device function closing over ``pair(f, f)`` nested 18 deep is reached by 2**18 paths: its
    identity wrote each out in full (38 MB of text, most of a second, in a warm process's first
    call too); each function's identity is made once per key and is a digest."""
    from tack.fingerprints import closure_identity, func_id

    @tack.func
    def base(x):
        return x

    f = base
    for _ in range(18):
        f = _pair(f, f)
    assert len(closure_identity(f)) < 200
    assert len(func_id(f.py_func)) < 300
    g = base
    for _ in range(17):
        g = _pair(g, g)
    assert closure_identity(_pair(g, g)) == closure_identity(f)     # the same text, the same id
    assert closure_identity(_pair(g, base)) != closure_identity(f)


def test_a_metaclass_gives_its_numbers_and_static_methods_not_its_plain_methods():
    """What a template's metaclass gives it counts (``P.K`` is read from it, as Python does), but
    not the metaclass's plain functions, which reach the class as bound methods no kernel reads:
    hashing them read and hashed abc.py for every ABC template, enum.py for every Enum."""
    import abc

    from tack.fingerprints import class_fingerprint

    def make(k, body):
        meta = type("Meta", (type,), {"K": k, "helper": body})
        return meta("Policy", (), {})

    base = class_fingerprint(make(2.0, lambda cls: 1))
    assert class_fingerprint(make(2.0, lambda cls: 2)) == base
    assert class_fingerprint(make(3.0, lambda cls: 1)) != base

    class ABCPolicy(abc.ABC):
        K = 1.0
    sources = []
    import tack.fingerprints as fp
    real = fp._file
    fp._file = lambda name: sources.append(name) or real(name)
    try:
        fp.class_fingerprint(ABCPolicy)
    finally:
        fp._file = real
    # (abc.py is a file on Python 3.10; 3.11 and later freeze abc: ABCMeta's __new__, a static
    # method, was hashed there, reading it)
    assert not [s for s in sources if s.endswith("abc.py")], sources


MATH_OR_NUMPY = """
import sys
import numpy as np
import tack
from {origin} import sqrt


@tack.kernel
def k(out, x):
    i = tack.tid()
    out[i] = x[i] * sqrt(2.0)


x = np.array([1 / 3], dtype=np.float32)
out = np.zeros(1)
tack.launch(k, dim=1, args=(out, x))
print(repr(float(out[0])))
"""


def test_math_sqrt_and_numpy_sqrt_are_two_dependencies(tmp_path):
    """``from math import sqrt`` made ``from numpy import sqrt`` (or back): the record kept the
    intrinsic's name alone, ``sqrt`` for both, and the next process was served the other's
    code, which lowers otherwise (Python's math of a literal is a weak float, folded: x32 *
    sqrt(2.0) a float32 product; NumPy's a float64).  Each now gives what a cold process does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]))
    script = tmp_path / "job.py"

    def run(origin, cache="write"):
        script.write_text(MATH_OR_NUMPY.format(origin=origin))
        p = subprocess.run([sys.executable, str(script)], env=dict(env, TACK_CACHE=cache),
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        return p.stdout.strip()

    cold = {origin: run(origin, "off") for origin in ("math", "numpy")}
    assert cold["math"] != cold["numpy"]            # (else this test shows nothing)
    for origin in ("math", "numpy", "math", "numpy"):
        assert run(origin) == cold[origin], origin
