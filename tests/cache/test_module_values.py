"""A number read as ``module.NAME`` is compiled in: editing it must make the next process compile again."""

import json
import os
import subprocess
import sys

KMOD = '''
import tack
import helpers


@tack.kernel
def scaled(x, y):
    i = tack.tid()
    y[i] = x[i] * helpers.SCALE
'''

SCRIPT = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import tack.cache, kmod
x = np.arange(4.0); y = np.zeros(4)
tack.launch(kmod.scaled, dim=4, args=(x, y))
print(json.dumps({"y": y.tolist(), "stats": tack.cache.stats()}))
'''


def run(src, cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["TACK_CACHE_DIR"] = str(cache)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(src)], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_editing_a_module_number_recompiles(tmp_path):
    """helpers.SCALE 2 -> 3: the second process does not reuse the kernel compiled with 2."""
    (tmp_path / "kmod.py").write_text(KMOD)
    (tmp_path / "helpers.py").write_text("SCALE = 2\n")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    first = run(tmp_path, cache)
    assert first["y"] == [0.0, 2.0, 4.0, 6.0]
    again = run(tmp_path, cache)
    assert again["stats"]["hits"]["variant"] == 1
    (tmp_path / "helpers.py").write_text("SCALE = 3\n")
    edited = run(tmp_path, cache)
    assert edited["y"] == [0.0, 3.0, 6.0, 9.0]
    assert edited["stats"]["hits"]["variant"] == 0


REBOUND = '''
import tack

C = tack.constant(2.0)


@tack.kernel
def k(a, out):
    i = tack.tid()
    out[i] = a[i] + C
'''

# After the first launch, C is rebound and the kernel launched with new argument types (a new
# variant): what that variant computes must not depend on whether the first came from the cache.
REBIND_AND_LAUNCH = '''
mod.C = tack.constant(5.0)
a = np.arange(2, dtype=np.float32); o = np.zeros(2, dtype=np.float32)
tack.launch(mod.k, 2, (a, o))
extra = o.tolist()
'''


def test_a_variant_compiled_after_a_rebinding_is_the_same_from_a_warm_or_cold_process(tmp_path):
    """A cold process lowered k itself and kept its lowered kernel, read with C = 2; a warm one
    loaded k's first variant from the cache and lowers only for the float32 launch, with C = 5.
    The float32 variant was the first's 2 + a in one and 5 + a in the other: now both 5 + a."""
    from .conftest import run_child, write_module
    src = write_module(tmp_path / "src", REBOUND)
    cache = tmp_path / "cache"
    launches = [{"kernel": "k", "n": 2}]
    runs = [run_child(cache, src, launches, after=REBIND_AND_LAUNCH) for _ in range(2)]
    runs.append(run_child(cache, src, launches, after=REBIND_AND_LAUNCH, env={"TACK_CACHE": "off"}))
    for run in runs:
        assert run.rc == 0, run.stderr
        assert run.result("k")["out"] == [2.0, 3.0]
    assert [run.data["extra"] for run in runs] == [[5.0, 6.0]] * 3
    assert runs[1].stats["hits"]["variant"] == 2          # the second process was warm: both hit


TEMPLATED = '''
import tack


class Policy:
    K = 2.0


@tack.kernel
def k(a, out, policy):
    i = tack.tid()
    out[i] = a[i] + policy.K
'''

# The template class is changed in place (after the first launch, or before any), and the kernel
# launched with new argument types: a new variant, whose key names the class as it is now.
CHANGE_AND_LAUNCH = '''
mod.Policy.K = 5.0
a = np.arange(2, dtype=np.float32); o = np.zeros(2, dtype=np.float32)
tack.launch(mod.k, 2, (a, o, mod.Policy))
extra = o.tolist()
'''

def test_a_variant_compiled_after_a_template_class_changed_reads_the_class_as_it_is(tmp_path):
    """The lowered kernel kept from the first launch (Policy.K = 2) was reused for a variant
    compiled after ``Policy.K = 5.0``, whose dependency record holds no number of a template
    class: the float32 variant computed a + 2, and was stored under the key of K = 5, so the
    next process that set K = 5 first loaded a + 2 too.  Both now compute a + 5."""
    from .conftest import run_child, write_module
    src = write_module(tmp_path / "src", TEMPLATED)
    cache = tmp_path / "cache"
    first = run_child(cache, src, [], after=("a = np.arange(2.0); o = np.zeros(2)\n"
                                             "tack.launch(mod.k, 2, (a, o, mod.Policy))\n"
                                             "assert o.tolist() == [2.0, 3.0], o\n" + CHANGE_AND_LAUNCH))
    off = run_child(cache, src, [], after=("a = np.arange(2.0); o = np.zeros(2)\n"
                                           "tack.launch(mod.k, 2, (a, o, mod.Policy))\n" + CHANGE_AND_LAUNCH),
                    env={"TACK_CACHE": "off"})
    later = run_child(cache, src, [], after=CHANGE_AND_LAUNCH)
    for run in (first, off, later):
        assert run.rc == 0, run.stderr
    assert [run.data["extra"] for run in (first, off, later)] == [[5.0, 6.0]] * 3


def test_a_numpy_number_read_as_module_attribute_is_refused(tmp_path):
    """``helpers.B64 = np.float64(1e30)`` (a float subclass) was compiled in as a weak Python
    float: ``x32 * helpers.B64`` gave inf where NumPy gives 1e40.  A NumPy number there is refused
    as any other value a kernel cannot read (np.float32 was), pointing at tack.constant."""
    (tmp_path / "kmod.py").write_text(KMOD.replace("helpers.SCALE", "helpers.B64"))
    (tmp_path / "helpers.py").write_text("import numpy as np\nB64 = np.float64(1e30)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["TACK_CACHE_DIR"] = str(tmp_path / "cache")
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1 and "CompileError" in out.stderr, out.stderr
    assert "'helpers.B64' is a Python float64, which kernels cannot read; wrap it in " \
           "tack.constant(...)" in out.stderr, out.stderr
