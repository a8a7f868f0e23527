"""A warm hit loads stored code and nothing of the compiler.

The point of the cache is that a later process skips the front end, the
specializer, code generation and LLVM.  These tests run the shipped contour
in a fresh process twice, from the user's cache directory and from a packed
bundle (``TACK_CACHE=bundle``), and check on the second, warm process which
modules of Tack and llvmlite it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What only a compile (or a tool, or a writer) needs: none of these may be imported by a warm
# hit, whose cost grows with the code it loads.
COMPILER_MODULES = ("tack.frontend", "tack.specialize", "tack.codegen", "tack.compiler",
                    "tack.gridcheck", "tack.aot", "tack.backends.cpu", "tack.backends.gpu",
                    "tack.backends.metal", "tack.site", "llvmlite.binding", "llvmlite.ir",
                    "tack._image_write", "tack.cache.bundle_write", "tack.cache.stores_write",
                    "tack.cache.size", "tack.cache.cli", "tack.backends.device_variant",
                    "tack.kernels.mc_bourke")

CHILD = """
import json, sys
import numpy as np
import tack
from tack.kernels.contour import contour
g = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
field = np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2)
verts, faces = contour(field, 0.7)
from tack.kernels import contour as mod
print(json.dumps({
    "faces": int(len(faces)),
    "compiled": [k for k in ("classify", "emit")
                 if {"lower", "specialize", "codegen", "llvm"} & set(getattr(mod, k).timings)],
    "modules": sorted(m for m in sys.modules if m.startswith(("tack", "llvmlite", "archspec"))),
}))
"""


def _run(tmp_path: Path, *args, **env_extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TACK_", "OMPI_", "PMI_", "SLURM_"))}
    env.update({"TACK_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT), **env_extra})
    p = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    return p


def _contour(tmp_path, **env) -> dict:
    return json.loads(_run(tmp_path, "-c", CHILD, **env).stdout.strip().splitlines()[-1])


def _compiler_modules(report) -> list:
    return [m for m in report["modules"]
            if any(m == c or m.startswith(c + ".") for c in COMPILER_MODULES)]


def test_cold_process_imports_the_compiler(tmp_path):
    """The check below can fail: a compiling process imports the modules it looks for."""
    cold = _contour(tmp_path)
    assert cold["compiled"] == ["classify", "emit"]
    assert "tack.codegen" in cold["modules"] and "llvmlite.binding" in cold["modules"]


@pytest.mark.parametrize("mode", ["write", "bundle"])
def test_warm_hit_imports_no_compiler_module(tmp_path, mode):
    """From the user's directory and from a packed bundle, a warm process compiles nothing and
    imports none of the compiler's modules nor llvmlite's."""
    cold = _contour(tmp_path)
    if mode == "bundle":
        _run(tmp_path, "-m", "tack.cache", "pack")
    warm = _contour(tmp_path, TACK_CACHE=mode)
    assert warm["compiled"] == []
    assert warm["faces"] == cold["faces"] > 0
    assert _compiler_modules(warm) == []


def _site_bundle(tmp_path, arch, n):
    """A site bundle of the contour for ``n``³ fields built for ``cpu:arch`` in tmp_path/site, and
    an empty private user directory tmp_path/cache."""
    import io

    from tack.site import build
    from tack.site.config import load
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"version: 1\nbuild:\n  archs:\n    cpu: [{arch}]\n  kernels:\n"
                   f"    - module: tack.kernels.contour\n      shapes: [[{n}, {n}, {n}]]\n")
    out = io.StringIO()
    assert build.build_bundles(load(cfg), output=str(tmp_path / "site"), out=out, err=out) == 0, out.getvalue()
    (tmp_path / "cache").mkdir(mode=0o700)


def test_site_bundle_hit_imports_neither_archspec_nor_llvmlite_binding(tmp_path):
    """With an empty user cache and a site bundle built for an ancestor of this host's
    microarchitecture (``x86_64_v3`` on an ``x86_64_v4`` host), a fresh process loads every
    kernel from the bundle and imports neither archspec nor llvmlite (its version is read from
    its _version.py), nor any compiler module: the node's bundle is chosen from the bundle's header and this host's cpuinfo."""
    from tack import archs
    from tack.backends import cpu_identity, cpu_levels
    if cpu_levels.host_facts(cpu_identity.host_cpu_identity()) is None:
        pytest.skip("this host gives no cpuinfo features: archspec names its microarchitecture")
    order = archs.cpu_candidates(cpu_identity.host_arch())
    _site_bundle(tmp_path, order[1] if len(order) > 1 else order[0], 8)
    warm = _contour(tmp_path, TACK_CACHE="read", TACK_CACHE_BUNDLES=str(tmp_path / "site"))
    assert warm["compiled"] == [] and warm["faces"] > 0
    assert [m for m in warm["modules"] if m.split(".")[0] in ("archspec", "llvmlite")] == []
    assert _compiler_modules(warm) == []
    assert os.listdir(tmp_path / "cache") == []
    # In write mode (the default) too, a process served by the site bundle alone creates no
    # user directory: only a store makes one.
    again = _contour(tmp_path, TACK_CACHE_DIR=str(tmp_path / "never"),
                     TACK_CACHE_BUNDLES=str(tmp_path / "site"))
    assert again["compiled"] == [] and again["faces"] == warm["faces"]
    assert not (tmp_path / "never").exists()



def test_a_generic_level_site_bundle_hit_imports_not_the_whole_cpu_rule(tmp_path):
    """Served by a site bundle for a generic level (the deepest of ``x86_64_v4``..``x86_64``, or
    ``aarch64``, this host is of: what an install usually ships), a fresh process chooses it by
    the features alone (``backends.cpu_levels``) and never imports ``backends.cpu_choice``, the
    detection table's parser and whole rule; a bundle for a specific microarchitecture (the test
    above) takes that rule."""
    from tack import archs
    from tack.backends import cpu_identity, cpu_levels
    if cpu_levels.host_facts(cpu_identity.host_cpu_identity()) is None:
        pytest.skip("this host gives no cpuinfo features: archspec names its microarchitecture")
    order = archs.cpu_candidates(cpu_identity.host_arch())
    level = next(a for a in order if a in ("x86_64_v4", "x86_64_v3", "x86_64_v2", "x86_64", "aarch64"))
    _site_bundle(tmp_path, level, 8)
    warm = _contour(tmp_path, TACK_CACHE="read", TACK_CACHE_BUNDLES=str(tmp_path / "site"))
    assert warm["compiled"] == [] and warm["faces"] > 0
    assert "tack.backends.cpu_levels" in warm["modules"]
    assert "tack.backends.cpu_choice" not in warm["modules"]

def test_demo_field_and_contour_import_no_argparse(tmp_path):
    """What a warm contour process imports besides Tack (the demo's field, the kernels' module)
    leaves the command line's argparse to ``main``: it cost the warm process about 1.5 ms."""
    code = ("import sys, json\nimport tack.demo, tack.kernels.contour\n"
            "print(json.dumps(sorted(m for m in ('argparse', 'gettext') if m in sys.modules)))")
    assert json.loads(_run(tmp_path, "-c", code).stdout.strip().splitlines()[-1]) == []


# What a warm process may import besides Tack's own modules and what NumPy imports: BLAKE2b's
# extension module (its keys and checksums, ``tack.digests``), and ``gc``, built into the
# interpreter (no file to find; ``import tack`` promotes the objects made before it).  Everything else costs every warm
# process its import: threading was 0.5 ms, bisect 0.27, zlib 0.23, importlib.util 0.19,
# __future__ 0.11; and a failed try (_sha2 on Python 3.11) 0.05.  Run without the site module
# (``-S``): a .pth file that imports such modules at start (an editable install's finder imports
# pathlib, tempfile, importlib.util...) would hide them.
ALLOWED_BESIDES_NUMPY = {"_blake2", "gc"}

CLEAN_CHILD = """
import sys
import numpy as np
# As NumPy 2.2 leaves them (2.4 imports them itself): so the check holds whatever NumPy runs it.
for name in ("importlib.util", "importlib._abc", "importlib.machinery", "importlib"):
    sys.modules.pop(name, None)
before = set(sys.modules)
asked = []
class Spy:                      # first on the meta path: every module asked for, found or not
    def find_spec(self, name, path=None, target=None):
        asked.append(name)
sys.meta_path.insert(0, Spy())
import tack
from tack.kernels.contour import contour
g = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
field = np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2)
verts, faces = contour(field, 0.7)
from tack.kernels import contour as mod
new = sorted(m for m in set(sys.modules) - before if m.partition(".")[0] != "tack")
compiled = [k for k in ("classify", "emit")
            if {"lower", "specialize", "codegen", "llvm"} & set(getattr(mod, k).timings)]
import json
failed = sorted(set(asked) - set(sys.modules))
print(json.dumps({"faces": int(len(faces)), "compiled": compiled, "new": new, "failed": failed}))
"""


def _clean(tmp_path, **env) -> dict:
    env.setdefault("PYTHONPATH", _clean_path())
    return json.loads(_run(tmp_path, "-S", "-c", CLEAN_CHILD, **env).stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["write", "bundle", "site"])
def test_warm_process_imports_nothing_numpy_does_not_besides_blake2(tmp_path, mode):
    env = {}
    if mode == "site":
        from tack import archs
        from tack.backends import cpu_identity
        _site_bundle(tmp_path, archs.cpu_candidates(cpu_identity.host_arch())[-1], 16)  # the family's
        env = {"TACK_CACHE": "read", "TACK_CACHE_BUNDLES": str(tmp_path / "site")}
    else:
        cold = _clean(tmp_path)
        assert cold["compiled"] == ["classify", "emit"]
        if mode == "bundle":
            _run(tmp_path, "-m", "tack.cache", "pack")
        env = {"TACK_CACHE": mode}
    warm = _clean(tmp_path, **env)
    assert warm["compiled"] == [] and warm["faces"] > 0
    assert set(warm["new"]) <= ALLOWED_BESIDES_NUMPY, warm["new"]
    # nor tries one that is not there: each such try searches every directory on sys.path
    assert warm["failed"] == []


# The collector around ``import tack`` (``tack._promote_young_objects``): a warm process that
# imported NumPy first runs no collection of the middle or oldest generation from ``import tack``
# to its first result, which examined all of NumPy's young objects (0.6-0.8 ms) to free none.
GC_CHILD = """
import gc, json, sys, weakref
import numpy as np
class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a                      # a cycle only the collector can free
dead = weakref.ref(a)
del a, b
runs = []
gc.callbacks.append(lambda phase, info: phase == "start" and runs.append(info["generation"]))
MODE
import tack
from tack.kernels.contour import contour
g = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
field = np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2)
verts, faces = contour(field, 0.7)
gc.callbacks.clear()
state = {"runs": runs, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
         "faces": int(len(faces))}
gc.enable()
gc.collect()
state["cycle_freed"] = dead() is None
print(json.dumps(state))
"""


def _gc_child(tmp_path, mode=""):
    return json.loads(_run(tmp_path, "-S", "-c", GC_CHILD.replace("MODE", mode),
                           PYTHONPATH=_clean_path()).stdout.strip().splitlines()[-1])


def _clean_path():
    import site
    dirs = [d for d in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(d)]
    return os.pathsep.join([str(ROOT), *dirs])


def test_warm_process_runs_no_older_generation_collection(tmp_path):
    _gc_child(tmp_path)                                     # compiles and stores
    warm = _gc_child(tmp_path)
    assert warm["faces"] > 0
    assert [g for g in warm["runs"] if g > 0] == [], warm["runs"]
    # what was made before ``import tack`` is promoted, not kept from the collector: a cycle
    # dropped before it is freed by the next full collection, and nothing is left frozen but what
    # the interpreter froze itself (none up to 3.11 and from 3.13; Python 3.12 starts with its
    # statically allocated tuples frozen, 375 in 3.12.1, which Tack leaves so, as it leaves
    # anything frozen before its import)
    started = int(_run(tmp_path, "-S", "-c", "import gc; print(gc.get_freeze_count())").stdout)
    assert warm["cycle_freed"] and warm["enabled"] and warm["frozen"] == started


def test_import_keeps_a_programs_frozen_objects_frozen(tmp_path):
    """A program that froze its objects (before a fork, say) keeps them frozen: ``import tack``
    promotes nothing then (``gc.unfreeze()`` would release them)."""
    got = _gc_child(tmp_path, "gc.freeze()")
    assert got["frozen"] > 0 and got["enabled"]
    assert not got["cycle_freed"]                   # frozen with the rest, as the program asked


PHASES = """
import json, sys
import numpy as np
seen = set(sys.modules)
import tack
imported = set(sys.modules) - seen
from tack.kernels.contour import contour
g = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
field = np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2)
seen = set(sys.modules)
contour(field, 0.7)
called = set(sys.modules) - seen
ours = lambda ms: sorted(m for m in ms if m.startswith("tack.") and not m.startswith("tack.kernels"))
print(json.dumps([ours(imported), ours(called)]))
"""


def test_the_import_images_groups_are_what_a_warm_process_imports_together(tmp_path):
    """The import image marshals as one the modules ``import tack`` imports, and those a warm
    first call from the user's directory adds (``_image_write.GROUPS``): each group is read
    whole at the first import of any of its modules, so a module listed that a warm process
    does not import would be read for nothing, and one it imports that is not listed read
    alone.  This holds the list to what a warm process (the contour's) imports."""
    from tack._image_write import GROUPS
    _run(tmp_path, "-c", PHASES)                                        # compiles: stores
    imported, called = json.loads(_run(tmp_path, "-c", PHASES).stdout.strip().splitlines()[-1])
    assert sorted(GROUPS[0]) == [m for m in imported if m != "tack._image"]
    assert sorted(GROUPS[1]) == called
    assert len(GROUPS) == 2
