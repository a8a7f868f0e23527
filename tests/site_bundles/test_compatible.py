"""Bundles for compatible CPUs: a node uses the site bundles of its own microarchitecture and of
each archspec ancestor, most specific first, never those of an unrelated or newer one; one
target identity for the toolchain and the runtime; ``kind:name`` in every command."""

import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tack import archs
from tack.backends import cpu as toolchain
from tack.backends import cpu_identity, cpu_runtime
from tack.cache import bundle
from tack.site import build

from .made_up import host_for
from .test_build import run_build, run_with_site_bundles, write_config

GENERIC = "x86_64_v2" if cpu_runtime.platform.machine() == "x86_64" else "aarch64"
pytestmark = pytest.mark.skipif(cpu_runtime.platform.machine() not in ("x86_64", "aarch64"),
                                reason="bundles are built for x86_64 and aarch64 hosts here")


class TestTargetIdentity:
    def test_toolchain_key_of_the_host_is_the_runtimes(self):
        """target() (this host) makes code under the key the runtime looks this host up with."""
        assert toolchain.target().key == cpu_runtime.host_key()

    def test_toolchain_key_of_an_arch_is_the_runtimes(self):
        """target('cpu:<arch>') makes code under the key a node of that arch (or a descendant)
        looks its site bundle up with: for this host's arch and for a generic level."""
        here = cpu_runtime.host_arch()
        candidates = dict(cpu_runtime.site_candidates())
        assert toolchain.target(f"cpu:{here}").key == candidates[f"cpu:{here}"]
        assert toolchain.target(here).key == candidates[f"cpu:{here}"]      # a bare name is a CPU's
        assert toolchain.target(f"cpu:{GENERIC}").key == candidates[f"cpu:{GENERIC}"]

    def test_codegen_settings_are_the_ones_the_machine_is_built_with(self):
        """The key's codegen settings are what the target machine is created with (no hand copy):
        another setting gives another key."""
        t = toolchain.target(f"cpu:{GENERIC}")
        assert t.opt == cpu_identity.CODEGEN["opt"]
        before = cpu_identity.arch_key(GENERIC)
        saved = dict(cpu_identity.CODEGEN)
        try:
            cpu_identity.CODEGEN["opt"] = 2
            assert cpu_identity.arch_key(GENERIC) != before
        finally:
            cpu_identity.CODEGEN.clear()
            cpu_identity.CODEGEN.update(saved)


class TestAncestorOrder:
    @pytest.mark.parametrize("host, expected", [
        ("zen3", ["zen3", "zen2", "zen", "x86_64_v3", "x86_64_v2", "x86_64"]),
        ("x86_64_v4", ["x86_64_v4", "x86_64_v3", "x86_64_v2", "x86_64"]),
        ("zen", ["zen", "x86_64_v3", "x86_64_v2", "x86_64"]),
    ])
    def test_most_specific_first(self, host, expected):
        """A node looks for its own microarchitecture, then its ancestors, most specific first."""
        assert archs.cpu_candidates(host) == expected

    @pytest.mark.parametrize("host", ["zen3", "sapphirerapids", "neoverse_v2", "power9le", "icelake"])
    def test_every_candidate_is_the_host_or_an_ancestor_and_deeper_comes_first(self, host):
        """Each candidate after the first is an archspec ancestor of the host, and no candidate comes
        after one of its own ancestors."""
        import archspec.cpu
        got = archs.cpu_candidates(host)
        t = archspec.cpu.TARGETS
        assert got[0] == host and all(t[c] in t[host].ancestors for c in got[1:])
        for i, c in enumerate(got):
            assert not any(t[earlier] in t[c].ancestors for earlier in got[:i]), (c, got)

    @pytest.mark.parametrize("host, never", [("zen2", "zen3"), ("zen2", "skylake"),
                                             ("x86_64_v3", "x86_64_v4"), ("haswell", "zen")])
    def test_newer_or_unrelated_is_never_a_candidate(self, host, never):
        assert never not in archs.cpu_candidates(host)


CONTOUR = textwrap.dedent("""
    import json, sys, numpy as np, tack.cache
    {prelude}
    from tack.kernels.contour import contour
    from skimage.measure import marching_cubes
    out = []
    for shape in [(33, 33, 33), (17, 23, 30), (21, 21, 21)]:
        p = np.indices(shape).astype(np.float32)
        c = (np.array(shape, np.float32) - 1) / 2
        f = np.sqrt(((p - c[:, None, None, None]) ** 2).sum(axis=0)).astype(np.float32)
        v, fc = contour(f, min(shape) / 3)
        sv, sf, _, _ = marching_cubes(f, min(shape) / 3)
        out.append([len(fc), len(sf), float(np.abs(np.sort(v, axis=0) - np.sort(sv, axis=0)).max())])
    print(json.dumps({{"surfaces": out, "stats": tack.cache.stats(), "archspec": "archspec" in sys.modules,
                      "compiler": sorted(m for m in ("llvmlite.binding", "tack.specialize",
                                                     "tack.codegen", "tack.frontend.lower")
                                         if m in sys.modules)}}))
""")


def contour_shapes(own_cache, site_dir, prelude=""):
    return run_with_site_bundles(CONTOUR.format(prelude=prelude), own_cache, site_dir)


@pytest.fixture
def own_cache(tmp_path):
    d = tmp_path / "own"
    d.mkdir(mode=0o700)
    return d


def test_generic_level_bundle_serves_every_shape_with_nothing_compiled(tmp_path, own_cache):
    """A bundle built for one generic level and one shape (8^3) serves 33^3, 17x23x30 and 21^3
    fields on this host: every variant from the bundle, no compiler module imported, and the
    surfaces equal scikit-image's."""
    cfg = write_config(tmp_path, [f"cpu:{GENERIC}"])
    rc, out, err = run_build(cfg, tmp_path / "site")
    assert rc == 0, out + err
    (name,) = os.listdir(tmp_path / "site")
    assert f"-cpu-{GENERIC}-" in name
    r = contour_shapes(own_cache, tmp_path / "site")
    assert r["compiler"] == [], r
    assert r["stats"]["hits"]["variant"] == 2 and r["stats"]["misses"]["variant"] == 0
    for ntri, sk_ntri, dist in r["surfaces"]:
        assert ntri == sk_ntri and ntri > 0 and dist < 1e-3


def test_newer_arch_bundle_is_never_used(tmp_path, own_cache):
    """A made-up x86_64_v2 node (its cpuinfo fields) given only an x86_64_v3 bundle (newer) compiles
    every kernel; given an x86_64 bundle (its ancestor) too, it loads every kernel from that one,
    without importing archspec."""
    if cpu_runtime.platform.machine() != "x86_64":
        pytest.skip(f"the x86_64 microarchitecture levels exist on x86_64 hosts only; this one is "
                    f"{cpu_runtime.platform.machine()}")
    cfg = write_config(tmp_path, ["x86_64_v3", "x86_64"])
    site = tmp_path / "site"
    rc, out, err = run_build(cfg, site, archs=["cpu:x86_64_v3"])
    assert rc == 0, out + err
    # a made-up x86_64_v2 node: cpuinfo's fields for one, as the runtime reads them
    host = host_for("x86_64_v2", "GenuineIntel")
    prelude = ("import tack.backends.cpu_identity as I; "
               f"I._host_identity = dict(I.host_cpu_identity(), **{host!r})")
    r = contour_shapes(own_cache, site, prelude)
    assert r["stats"]["hits"]["variant"] == 0 and "llvmlite.binding" in r["compiler"]
    rc, out, err = run_build(cfg, site, archs=["x86_64"])          # a bare name is a CPU's
    assert rc == 0, out + err
    r = contour_shapes(own_cache, site, prelude)
    assert r["stats"]["hits"]["variant"] == 2 and r["compiler"] == [] and not r["archspec"]


def test_status_names_archs_and_the_bundle_a_node_uses(tmp_path):
    """bundles status prints kind:name, the node's lookup order, and which bundles the node uses
    and why (its own arch, an ancestor), and why not (neither)."""
    here = cpu_runtime.host_arch()
    cfg = write_config(tmp_path, [here, GENERIC])
    rc, out, err = run_build(cfg, tmp_path / "site")
    assert rc == 0, out + err
    assert f"cpu:{here}" in out and f"cpu:{GENERIC}" in out
    text = io.StringIO()
    build.bundles_status(str(tmp_path / "site"), out=text)
    lines = text.getvalue().splitlines()
    assert lines[0].startswith(f"node: cpu:{here}")
    assert lines[1].startswith(f"looks for: cpu:{here}, ")
    line = {ln.split(":")[0]: ln for ln in lines if ln.startswith("bundle-")}
    own = next(v for k, v in line.items() if f"-cpu-{here}-" in k)
    gen = next(v for k, v in line.items() if f"-cpu-{GENERIC}-" in k)
    assert "current; used by this node (cpu:" + here + " is this node's microarchitecture)" in own
    if here != GENERIC:
        assert f"used by this node (cpu:{GENERIC} is an ancestor of cpu:{here})" in gen
    assert lines[-1].startswith("this node looks first in: ") and f"-cpu-{here}-" in lines[-1]


def test_hosts_own_packed_bundle_is_current_for_status(tmp_path):
    """A bundle packed on this host (python -m tack.cache pack), copied into a site directory, is
    'current; used by this node', not STALE for naming its arch differently; rebuild leaves it."""
    from tests.cache.conftest import KMOD, run_child, run_cli, write_module
    cache, src = tmp_path / "cache", write_module(tmp_path / "src", KMOD)
    run_child(cache, src, [{"kernel": "k_main", "n": 5}]).data
    run = run_cli(cache, "pack")
    assert run.rc == 0, run.stderr
    assert f"for cpu:{cpu_runtime.host_arch()} (" in run.stdout
    site = tmp_path / "site"
    site.mkdir()
    (path,) = [p for p in cache.iterdir() if p.name.startswith("bundle-")]
    (site / path.name).write_bytes(path.read_bytes())
    text = io.StringIO()
    build.bundles_status(str(site), out=text)
    assert "current; used by this node (packed on a node like this one)" in text.getvalue()
    assert "STALE" not in text.getvalue()
    rebuilt = io.StringIO()
    assert build.bundles_rebuild(str(site), out=rebuilt, err=rebuilt) == 0
    assert "current, left as is" in rebuilt.getvalue()


@pytest.mark.parametrize("arch", ["gpu:x", "cpu:", "cpu:../x", "cuda:sm_90:1"])
def test_bad_arch_names_are_errors_naming_them(arch):
    with pytest.raises(archs.ArchError, match="is not an architecture name|unknown kind"):
        archs.parse(arch)


def test_cache_pack_takes_kind_name(tmp_path):
    """tack.cache pack --arch cpu:<this host's arch> packs that arch; a bare name is the same."""
    from tests.cache.conftest import KMOD, run_child, run_cli, write_module
    cache, src = tmp_path / "cache", write_module(tmp_path / "src", KMOD)
    run_child(cache, src, [{"kernel": "k_main", "n": 5}]).data
    here = cpu_runtime.host_arch()
    for arch in (f"cpu:{here}", here):
        run = run_cli(cache, "pack", "--arch", arch, "--output", str(tmp_path / "b"))
        assert run.rc == 0, run.stderr
        assert bundle.read(str(tmp_path / "b")).meta["arch"] == f"cpu:{here}"
    bad = run_cli(cache, "pack", "--arch", "gpu:x")
    assert bad.rc == 1 and "unknown kind 'gpu'" in bad.stderr
    np.testing.assert_equal(len(bundle.read(str(tmp_path / "b"))) > 0, True)


COUNT_DIRECTORY_CHECKS = textwrap.dedent("""
    import collections, json
    import tack.cache.bundle as B
    checked = collections.Counter()
    real = B.check_parents

    def counting(path):
        checked[path] += 1
        return real(path)

    B.check_parents = counting
    import numpy as np, tack.cache
    from tack.kernels.contour import contour
    p = np.indices((8, 8, 8)).astype(np.float32)
    f = np.sqrt(((p - 3.4) ** 2).sum(axis=0)).astype(np.float32)
    v, faces = contour(f, 2.5)
    s = tack.cache.stats()
    print(json.dumps({"checked": dict(checked), "hits": s["hits"]["variant"],
                      "misses": s["misses"]["variant"], "faces": len(faces)}))
""")


def test_a_site_directory_is_checked_once_however_many_bundles_it_holds(tmp_path, own_cache):
    """Two generic levels in one directory, as conda ships three: the kernels served, and the
    directory (with every directory above it) checked for trust once, not once per bundle read
    nor again for the bundle named for this host that a lookup tries there first."""
    if cpu_runtime.platform.machine() != "x86_64":
        pytest.skip(f"the x86_64 microarchitecture levels exist on x86_64 hosts only; this one is "
                    f"{cpu_runtime.platform.machine()}")
    cfg = write_config(tmp_path, ["x86_64", "x86_64_v2"])
    site = tmp_path / "site"
    rc, out, err = run_build(cfg, site)
    assert rc == 0, out + err
    assert len(os.listdir(site)) == 2
    r = run_with_site_bundles(COUNT_DIRECTORY_CHECKS, own_cache, site)
    assert r["hits"] == 2 and r["misses"] == 0 and r["faces"] > 0
    assert r["checked"] == {str(site): 1}, r


COUNT_PATH_OPERATIONS = textwrap.dedent("""
    import json, os, sys
    roots = [*os.environ["TACK_CACHE_BUNDLES"].split(os.pathsep), os.environ["TACK_CACHE_DIR"]]
    ops = []

    def note(op, path):
        if isinstance(path, (str, bytes, os.PathLike)):
            p = os.path.abspath(os.fsdecode(path))
            if any(p == r or p.startswith(r + os.sep) for r in roots):
                ops.append([op, p])

    def wrap(op, real):
        def counted(path, *a, **k):
            note(op, path)
            return real(path, *a, **k)
        return counted

    os.stat, os.lstat = wrap("stat", os.stat), wrap("lstat", os.lstat)
    sys.addaudithook(lambda event, args: event in ("open", "os.listdir", "os.scandir") and args
                     and note(event.rpartition(".")[2], args[0]))
    import numpy as np, tack.cache
    from tack.kernels.contour import contour
    p = np.indices((8, 8, 8)).astype(np.float32)
    f = np.sqrt(((p - 3.4) ** 2).sum(axis=0)).astype(np.float32)
    v, faces = contour(f, 2.5)
    s = tack.cache.stats()
    print(json.dumps({"ops": ops, "hits": s["hits"]["variant"], "misses": s["misses"]["variant"],
                      "faces": len(faces)}))
""")


def test_a_site_bundle_hit_opens_and_stats_only_what_it_reads(tmp_path, own_cache):
    """Bundle mode (MPI's default) with an empty cache of the user's own and one site bundle: a
    process asks the site directory's kind once (the settings), opens it once (its listing and
    its trust check, from the same descriptor) and opens the bundle it reads, and nothing else
    there: not the bundle packed for this host that the listing does not hold (each failed open
    is a lookup a parallel file system's metadata server may answer for every rank), nor an
    lstat of a file after an open found none, nor the directory again for trust (it was
    lstat-ed twice and listed by path: 4 lookups there, now 3)."""
    cfg = write_config(tmp_path, [f"cpu:{GENERIC}"])
    site = tmp_path / "site"
    rc, out, err = run_build(cfg, site)
    assert rc == 0, out + err
    (name,) = os.listdir(site)
    r = run_with_site_bundles(COUNT_PATH_OPERATIONS, own_cache, site, mode="bundle")
    assert r["hits"] == 2 and r["misses"] == 0 and r["faces"] > 0, r
    in_site = [(op, os.path.relpath(p, site)) for op, p in r["ops"] if p.startswith(str(site))]
    assert sorted(in_site) == [("lstat", "."), ("open", "."), ("open", name)], r["ops"]
    in_own = [(op, os.path.relpath(p, own_cache)) for op, p in r["ops"] if p.startswith(str(own_cache))]
    # the user's own packed bundle: one open, which finds none, and nothing more asked of it
    assert [op for op, rel in in_own if rel != "."] == ["open"], in_own


@pytest.mark.parametrize("suffix", ["/", "/.", ""])
def test_a_site_directory_named_through_a_link_is_refused_however_it_is_written(tmp_path, own_cache,
                                                                               suffix):
    """TACK_CACHE_BUNDLES naming a symbolic link to a site directory, with a trailing slash, a
    trailing ``/.`` or neither: a warning says it is a link and nothing comes from it (the
    kernels compile).  With the slash, an open of the name follows the link that O_NOFOLLOW would
    refuse without it, and the directory was trusted through the link."""
    cfg = write_config(tmp_path, [f"cpu:{GENERIC}"])
    site = tmp_path / "site"
    rc, out, err = run_build(cfg, site)
    assert rc == 0, out + err
    link = tmp_path / "link"
    link.symlink_to(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(own_cache), TACK_CACHE="bundle", TACK_CACHE_BUNDLES=f"{link}{suffix}")
    proc = subprocess.run([sys.executable, "-c", COUNT_PATH_OPERATIONS], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["hits"] == 0 and r["misses"] == 2 and r["faces"] > 0, r
    assert "symbolic link" in proc.stderr and str(link) in proc.stderr, proc.stderr


@pytest.mark.parametrize("mode", ["bundle", "read"])
def test_directories_not_made_yet_are_no_warning(tmp_path, mode):
    """A new user whose cache directory does not exist yet, and a site whose TACK_CACHE_BUNDLES
    names a directory it has not made yet before the one it filled: the kernels come from the
    site bundle and nothing is said (a missing bundle, or its directory, is said in the log
    only).  The bundle mode case warned once the listing replaced the lstat after a failed open,
    because a directory that is not there fails the trust check before any open."""
    cfg = write_config(tmp_path, [f"cpu:{GENERIC}"])
    site = tmp_path / "site"
    rc, out, err = run_build(cfg, site)
    assert rc == 0, out + err
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(tmp_path / "not-yet" / "tack"), TACK_CACHE=mode,
               TACK_CACHE_BUNDLES=f"{tmp_path / 'later'}:{site}")
    proc = subprocess.run([sys.executable, "-c", COUNT_PATH_OPERATIONS], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["hits"] == 2 and r["misses"] == 0 and r["faces"] > 0, r
    assert "tack:" not in proc.stderr, proc.stderr
    # the directory not there yet: one listing finds it missing, and nothing in it is asked for
    later = str(tmp_path / "later")
    assert [op for op, p in r["ops"] if p == later].count("open") == 1, r["ops"]
    assert [(op, p) for op, p in r["ops"] if p.startswith(later + os.sep)] == [], r["ops"]
