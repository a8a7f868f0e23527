"""The cache's place among Tack's modules: it imports no backend, its modules form no circle, and a hit imports no compiler."""

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import tack.cache

from .conftest import child_env

CACHE = Path(tack.cache.__file__).parent
HOST = "host"                   # the one module of the cache that asks a backend (for its tools)
TOOLS = {"bcast", "cli", "export"}    # load_bundle (bcast), python -m tack.cache pack and export
# The architecture-name registry is data (names, aliases), no backend's code: a site bundle's file
# name is checked against it (``tack.archs.parse``), so ``tack.backends`` itself, which only names
# its submodules, and ``arch_names`` may be loaded.
REGISTRY = ["tack.backends", "tack.backends.arch_names"]


def imports(module: str) -> set:
    """Every module of Tack that ``tack/cache/<module>.py`` imports, at its top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse((CACHE / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom):
            base = "tack.cache" if node.level == 1 else "tack" if node.level == 2 else ""
            name = ".".join(p for p in (base, node.module or "") if p)
            out.add(name)
            out.update(f"{name}.{a.name}" for a in node.names)     # `from . import size`
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("tack")}


MODULES = sorted(p.stem for p in CACHE.glob("*.py"))


def test_no_module_of_the_cache_but_host_imports_a_backend():
    """Only ``host.py`` names ``tack.backends``; the session is handed what the runtime knows."""
    naming = {m for m in MODULES if any(i.startswith("tack.backends") for i in imports(m))}
    assert naming == {HOST}


def test_only_the_tools_ask_host():
    """``host`` is imported by the tools alone (load_bundle, pack, export), never by what a launch runs."""
    asking = {m for m in MODULES if f"tack.cache.{HOST}" in imports(m)}
    assert asking == TOOLS


def test_the_cache_modules_form_no_circle():
    """Among the cache's modules (the package's ``__init__``, which Python runs before any of them,
    aside), no chain of imports, lazy ones included, leads back to where it started."""
    graph = {m: {i.rsplit(".", 1)[-1] for i in imports(m) if i.startswith("tack.cache.")
                 and i.rsplit(".", 1)[-1] in MODULES and i.rsplit(".", 1)[-1] != "__init__"}
             for m in MODULES if m != "__init__"}
    done, path = set(), []

    def visit(m):
        assert m not in path, f"import circle: {' -> '.join(path[path.index(m):] + [m])}"
        if m in done:
            return
        path.append(m)
        for n in sorted(graph[m]):
            visit(n)
        path.pop()
        done.add(m)
    for m in graph:
        visit(m)


CHILD = textwrap.dedent('''
    import json, sys
    import tack, tack.cache
    from tack.cache import entry, keys, stores_write

    @tack.kernel
    def k(x):
        x[tack.tid()] = 1.0

    HOST = "d" * 64
    session = tack.cache.session("cpu", lambda: HOST,
                                 lambda names, header, defer=None: [("cpu:zen2", "e" * 64, n) for n in names])
    ks = keys.keys(k, {}, (), 1, False)
    assert stores_write.store(session.disk, entry.KIND_VARIANT, ks.for_target(HOST),
                              {"dep": [], "site": [], "entry": "k"}, b"code")
    hit = session.find_variant(k, {}, ks, [HOST])
    miss = session.find_variant(k, {}, keys.keys(k, {}, (), 2, False), [HOST])
    print(json.dumps({"hit": hit.payload.decode(), "miss": miss, "stats": tack.cache.stats()["hits"],
                      "loaded": sorted(m for m in sys.modules if m.startswith(("tack.backends", "llvmlite"))
                                       or m in ("tack.frontend.lower", "tack.specialize", "tack.codegen",
                                                "tack.compiler", "tack.loader"))}))
''')


def test_a_session_reads_and_writes_without_a_backend(tmp_path):
    """In a fresh process, a session made from a host key and a candidates function stores a
    variant, finds it, misses another through the site bundle directory, and loads no backend,
    no compiler and no llvmlite."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "bundle-x86_64-cpu-zen2-eeeeeeeeeeee").write_bytes(b"")    # listed, then refused
    env = child_env(tmp_path / "cache", TACK_CACHE_BUNDLES=site, PYTHONPATH=CACHE.parent.parent)
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(out.pop("loaded")) <= set(REGISTRY)
    assert out == {"hit": "code", "miss": None, "stats": {"lowered": 0, "variant": 1}}

