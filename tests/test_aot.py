"""tack.aot: compile for named targets without a device, save as cache entries or bundles; the
cache CLI's export and per-target info."""

import json
import re
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tack
import tack.aot
from tack.backends import cpu_runtime
from tack.cache import bundle
from tack.kernels.contour import tack_warm

GENERIC = "cpu:x86_64_v2" if cpu_runtime.platform.machine() == "x86_64" else "cpu:aarch64"


def contour_artifacts(target):
    return [tack.aot.compile(k, target, args, grid=len(grid) if isinstance(grid, tuple) else grid)
            for k, args, grid in tack_warm((8, 8, 8))]


RUN = textwrap.dedent("""
    import json, sys, numpy as np, tack.cache
    from tack.kernels.contour import contour
    p = np.indices((19, 23, 17)).astype(np.float32)
    f = np.sqrt(((p - 8.0) ** 2).sum(axis=0)).astype(np.float32)
    v, fc = contour(f, 6.0)
    print(json.dumps({"ntri": len(fc), "stats": tack.cache.stats(),
                      "llvm": "llvmlite.binding" in sys.modules}))
""")


def run_contour(**env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    e.update({k: str(v) for k, v in env.items()})
    p = subprocess.run([sys.executable, "-c", RUN], env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_artifact_fields():
    """An artifact names its kind and target and holds the code and its entry point."""
    (a, *_) = contour_artifacts(GENERIC)
    assert a.kind == "cpu" and a.target == GENERIC and a.suffix == ".o"
    assert a.payload[:4] == b"\x7fELF" and a.entry.startswith("tack_")
    assert a.meta["arch"] == GENERIC and a.meta["target_key"] == cpu_runtime.arch_key(GENERIC[4:])


def test_saved_entries_serve_a_new_process(tmp_path):
    """Artifacts for this host saved as a cache directory: a new process in read mode runs the
    contour on another shape with nothing compiled."""
    cache = tmp_path / "cache"
    assert tack.aot.save(contour_artifacts("cpu"), str(cache)) == 4        # 2 lowered + 2 variants
    r = run_contour(TACK_CACHE_DIR=cache, TACK_CACHE="read")
    assert r["stats"]["hits"]["variant"] == 2 and not r["llvm"] and r["ntri"] > 0


def test_saved_bundle_serves_a_node_as_a_site_bundle(tmp_path):
    """Artifacts for a generic level saved as a bundle in a directory get the site bundle's name:
    a new process with only that directory loads both kernels from it."""
    site = tmp_path / "site"
    site.mkdir()
    path = tack.aot.save_bundle(contour_artifacts(GENERIC), str(site))
    assert os.path.dirname(path) == str(site) and f"-{GENERIC.replace(':', '-')}-" in path
    assert bundle.read(path).meta["arch"] == GENERIC
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    r = run_contour(TACK_CACHE_DIR=own, TACK_CACHE="read", TACK_CACHE_BUNDLES=site)
    assert r["stats"]["hits"]["variant"] == 2 and not r["llvm"]


def test_saved_bundle_replaces_a_bundle_never_a_users_file(tmp_path):
    """save_bundle (so bundles build and rebuild) writes over a Tack bundle, over a file that is
    not one only with force=True, and never through a link; ``bundle_path`` is where it writes."""
    site = tmp_path / "site"
    site.mkdir()
    arts = contour_artifacts(GENERIC)
    path = tack.aot.bundle_path(tack.aot.target_of(GENERIC), str(site))
    # its kind:name too, as compile takes it (AttributeError: 'str' object has no attribute 'arch')
    assert tack.aot.bundle_path(GENERIC, str(site)) == path
    from tack.backends.cpu import host_target
    assert tack.aot.bundle_path("cpu", str(site)) == tack.aot.bundle_path(host_target(), str(site))
    assert tack.aot.save_bundle(arts, str(site)) == path
    assert tack.aot.save_bundle(arts, str(site)) == path          # its own bundle: replaced
    with open(path, "wb") as f:
        f.write(b"a user's file\n")
    with pytest.raises(bundle.BundleError, match=r"it is not a Tack bundle; use force=True"):
        tack.aot.save_bundle(arts, str(site))       # the API's word for it, not the CLI's
    assert open(path, "rb").read() == b"a user's file\n"
    assert tack.aot.save_bundle(arts, str(site), force=True) == path
    assert bundle.read(path).meta["arch"] == GENERIC
    os.unlink(path)
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(bundle.BundleError, match="symbolic link"):
        tack.aot.save_bundle(arts, str(site), force=True)
    assert os.path.islink(path) and not (tmp_path / "elsewhere").exists()


def test_one_target_per_bundle(tmp_path):
    with pytest.raises(ValueError, match="one target"):
        tack.aot.save_bundle(contour_artifacts("cpu")[:1] + contour_artifacts(GENERIC)[:1],
                             str(tmp_path / "b"))


def test_bad_targets_and_arguments():
    k, args, grid = tack_warm((8, 8, 8))[0]
    with pytest.raises(ValueError, match="unknown kind 'gpu'"):
        tack.aot.compile(k, "gpu:x", args)
    with pytest.raises(ValueError, match="archspec knows no such"):
        tack.aot.compile(k, "cpu:zen99", args)
    with pytest.raises(TypeError, match="takes"):
        tack.aot.compile(k, "cpu", args[:-1])


def cli(*args, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    e.update({k: str(v) for k, v in env.items()})
    return subprocess.run([sys.executable, "-m", "tack.cache", *args], env=e, capture_output=True,
                          text=True, timeout=120)


def test_export_writes_each_artifact_for_vendor_tools(tmp_path):
    """export of a bundle and of a cache directory writes one file per variant, named by kernel
    and target, holding the artifact's bytes (.o: an ELF object)."""
    site = tmp_path / "site"
    site.mkdir()
    path = tack.aot.save_bundle(contour_artifacts(GENERIC), str(site))
    r = cli("export", path, "--output", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    files = sorted(os.listdir(tmp_path / "out"))
    assert [f.split("-")[0] for f in files] == ["classify", "emit"]
    assert all(f.endswith(".o") and GENERIC.replace(":", "-") in f for f in files)
    assert all((tmp_path / "out" / f).read_bytes()[:4] == b"\x7fELF" for f in files)
    cache = tmp_path / "cache"
    tack.aot.save(contour_artifacts("cpu"), str(cache))
    r = cli("export", str(cache), "--output", str(tmp_path / "out2"))
    assert r.returncode == 0, r.stderr
    assert len(os.listdir(tmp_path / "out2")) == 2 and "cpu-host" in os.listdir(tmp_path / "out2")[0]


def test_export_of_nothing_there_is_an_error(tmp_path):
    r = cli("export", str(tmp_path / "missing"), "--output", str(tmp_path / "o"))
    assert r.returncode == 1 and "no such bundle or cache directory" in r.stderr


def test_info_lists_entries_per_target(tmp_path):
    """info lists a version's variants per target: this host's and a generic level's."""
    cache = tmp_path / "cache"
    tack.aot.save(contour_artifacts("cpu") + contour_artifacts(GENERIC), str(cache))
    r = cli("info", TACK_CACHE_DIR=cache)
    assert r.returncode == 0, r.stderr
    lines = [ln.split() for ln in r.stdout.splitlines() if ln.strip().startswith("for ")]
    from tack.cache.host import cpu_host_arch
    here = f"cpu:{cpu_host_arch()}"          # the name pack --arch takes for this host's code
    assert sorted((ln[1], ln[2]) for ln in lines) == sorted([(here, "2"), (GENERIC, "2")])
    np.testing.assert_equal(len(lines), 2)


def test_gpu_artifacts_export_with_their_vendor_suffixes(tmp_path):
    """AOT artifacts for CUDA, ROCm and Level Zero export as .ptx plus .cubin (the PTX and the SASS
    stored beside it), .hsaco, and .spv plus .zebin (the container's two parts): each file what
    the vendor's tool reads."""
    from tests.backends.gpu_tools import tool
    tool("ld.lld")
    tool("ocloc")
    tool("ptxas")
    k, args, grid = tack_warm((8, 8, 8))[0]
    for arch, suffixes, head in (("cuda:sm_90", [".ptx", ".cubin"], b"//"),
                                 ("rocm:gfx90a", [".hsaco"], b"\x7fELF"),
                                 ("level_zero:pvc", [".spv", ".zebin"], b"\x03\x02\x23\x07")):
        art = tack.aot.compile(k, arch, args, grid=grid)
        site = tmp_path / arch.replace(":", "-")
        site.mkdir()
        path = tack.aot.save_bundle([art], str(site))
        out = tmp_path / ("out-" + site.name)
        r = cli("export", path, "--output", str(out))
        assert r.returncode == 0, r.stderr
        files = sorted(os.listdir(out))
        assert [os.path.splitext(f)[1] for f in files] == sorted(suffixes), files
        first = next(f for f in files if f.endswith(suffixes[0]))
        assert (out / first).read_bytes().startswith(head)
        if arch.startswith("cuda:"):
            cubin = next(f for f in files if f.endswith(".cubin"))
            assert cubin[:-len(".cubin")] == first[:-len(".ptx")]       # beside its PTX
            assert (out / cubin).read_bytes()[:4] == b"\x7fELF"


@tack.kernel
def k_saxpy32(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


def test_metal_source_through_the_one_compile_path():
    """metal:apple goes through the same compile path (the typed kernel to Metal source, no LLVM):
    an artifact of MSL text naming its entry, keyed by the Metal target."""
    x = np.zeros(4, np.float32)
    art = tack.aot.compile(k_saxpy32, "metal:apple", (np.float32(2.0), x, x, x.copy()))
    assert art.kind == "metal" and art.target == "metal:apple" and art.suffix == ".metal"
    src = art.payload.decode()
    assert "#include <metal_stdlib>" in src and f"kernel void {art.entry}" in src
    assert art.meta["target_key"] == tack.aot.target_of("metal:apple").key


@pytest.mark.parametrize("arch", ["cpu", GENERIC, "cuda:sm_90", "rocm:gfx90a", "level_zero:pvc",
                                  "metal:apple"])
def test_every_target_says_whether_it_emits_source(arch):
    """The compile path asks a target one question, ``emits_source``, before calling either its
    ``generate`` (source from the typed kernel: Metal) or ``compile`` (LLVM IR): every target
    answers it, and has the method its answer names."""
    t = tack.aot._host_or(arch)
    assert t.emits_source is arch.startswith("metal:")
    assert callable(t.generate if t.emits_source else t.compile)


ENTRIES = textwrap.dedent("""
    import sys, numpy as np, tack, tack.aot
    sys.path.insert(0, sys.argv[1])
    from aot_kmod import k_scale
    x, out = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    tack.launch(k_scale, 5, (x, out, 2.0))                  # stored by the launch's miss
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    tack.aot.save([tack.aot.compile(k_scale, "cpu", (x, out, 2.0))], sys.argv[2])
""")


def entry_bytes(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.suffix in (".tlk", ".tvar")}


def test_a_launch_and_aot_write_the_same_entries(tmp_path):
    """A launch's miss and ``tack.aot.save`` run one preamble and one metadata writer: the same
    kernel and arguments give the same lowered and variant entries, byte for byte."""
    (tmp_path / "aot_kmod.py").write_text(textwrap.dedent("""
        import tack

        @tack.kernel
        def k_scale(x, out, a):
            i = tack.tid()
            out[i] = x[i] * a
    """))
    launched, saved = tmp_path / "launched", tmp_path / "saved"
    e = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    p = subprocess.run([sys.executable, "-c", ENTRIES, str(tmp_path), str(saved)], capture_output=True,
                       text=True, timeout=300, env=dict(e, TACK_CACHE_DIR=str(launched)))
    assert p.returncode == 0, p.stderr
    got, want = entry_bytes(launched), entry_bytes(saved)
    assert sorted(os.path.splitext(n)[1] for n in got) == [".tlk", ".tvar"]
    assert got == want


def test_a_packed_bundle_and_a_saved_one_have_the_same_header(tmp_path):
    """``python -m tack.cache pack`` and ``tack.aot.save_bundle`` write a bundle's header through
    one writer: the same fields, the same values but for the time and the LLVM (which a cache
    directory does not record)."""
    arts = contour_artifacts("cpu")
    cache = tmp_path / "cache"
    tack.aot.save(arts, str(cache))
    r = cli("pack", "--output", str(tmp_path / "packed"), TACK_CACHE_DIR=cache)
    assert r.returncode == 0, r.stderr
    packed = bundle.read(str(tmp_path / "packed")).meta
    saved = bundle.read(tack.aot.save_bundle(arts, str(tmp_path / "saved"))).meta
    assert sorted(packed) == sorted(saved)
    assert saved["llvm"] == cpu_runtime.llvm_version() and packed["llvm"] == ""
    same = ("tack", "target_key", "machine", "backend", "target")
    assert {f: packed[f] for f in same} == {f: saved[f] for f in same}
    assert saved["arch"] == "" and packed["arch"] == "cpu:" + cpu_runtime.host_arch()


def test_pack_says_when_no_bundle_it_wrote_is_this_hosts_cpu_bundle(tmp_path):
    """Entries saved for another CPU target (a generic level's, as another host's copy would be)
    pack into a bundle no process here reads by default: ``pack`` says so, naming this host's
    bundle; entries of this host pack without the note."""
    cache = tmp_path / "cache"
    tack.aot.save(contour_artifacts(GENERIC), str(cache))
    r = cli("pack", TACK_CACHE_DIR=cache)
    assert r.returncode == 0, r.stderr
    assert "note: none of these is this host's CPU bundle (bundle-" in r.stdout, r.stdout
    mine = tmp_path / "mine"
    tack.aot.save(contour_artifacts("cpu"), str(mine))
    r = cli("pack", TACK_CACHE_DIR=mine)
    assert r.returncode == 0 and "packed" in r.stdout and "note:" not in r.stdout, r.stdout + r.stderr


def test_aot_and_the_site_tool_compile_without_the_dispatcher():
    """The compile preamble lives in the compiler: tack.aot, tack.site.build and the compiler
    itself never import tack.launch; and tack.api, which the front end imports, imports neither
    the front end nor the compiler back (tack.compiler.lower runs the front end)."""
    import ast
    root = os.path.dirname(os.path.abspath(tack.__file__))

    def imports(rel):
        tree = ast.parse(open(os.path.join(root, rel)).read())
        pkg = ("tack." + os.path.dirname(rel).replace(os.sep, ".")).rstrip(".")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = pkg.rsplit(".", node.level - 1)[0] if node.level else ""
                mod = ".".join(filter(None, [base, node.module]))
                yield from [mod] + [f"{mod}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                yield from (a.name for a in node.names)
    for rel in ("aot.py", "compiler.py", "argtypes.py", os.path.join("site", "build.py")):
        assert "tack.launch" not in set(imports(rel)), rel
    assert "tack.api.Kernel" in set(imports(os.path.join("frontend", "lower.py")))
    assert not {m for m in imports("api.py") if m.startswith(("tack.frontend", "tack.compiler"))}
    assert "tack.api" not in set(imports("fingerprints.py")) | set(imports("language.py"))


def test_save_stores_as_a_launch_does_and_refuses_what_a_launch_refuses(tmp_path):
    """``tack.aot.save`` goes through the cache's write side: a directory it makes is private and
    tagged (it was not tagged, and no later store would tag it), and a directory a launch would
    not trust (a link to a directory anyone may write in) is refused, naming it, with nothing
    written through it (it wrote through)."""
    arts = contour_artifacts("cpu")
    fresh = tmp_path / "fresh"
    assert tack.aot.save(arts, str(fresh)) == 4
    assert (fresh / "CACHEDIR.TAG").exists() and stat.S_IMODE(fresh.stat().st_mode) == 0o700
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o777)
    (tmp_path / "link").symlink_to(public)
    with pytest.raises(tack.aot.SaveError, match=str(tmp_path / "link")):
        tack.aot.save(arts, str(tmp_path / "link"))
    assert os.listdir(public) == []


@tack.kernel
def _scale(x, a):
    i, j, k = tack.tid()
    x[i, j, k] = x[i, j, k] * a


def test_compile_checks_its_own_arguments():
    """grid=True compiled under a key no launch looks up, grid=2.0 and grid=(4, 4) (a launch's
    dim) failed inside the compiler with TypeErrors about sequences and tuples, and a @tack.func
    or plain function with AttributeError ('params')."""
    args = (np.zeros((2, 2, 2), np.float32), 0.5)
    for grid, exc, words in ((True, TypeError, "not True"), (2.0, TypeError, "not 2.0"),
                             ((4, 4), TypeError, "pass its length"), (0, ValueError, "not 0"),
                             (4, ValueError, "not 4 (not its size")):
        with pytest.raises(exc, match=re.escape(words)):
            tack.aot.compile(_scale, "cpu", args, grid=grid)
    art = tack.aot.compile(_scale, "cpu", args, grid=np.int64(3))
    assert art.key == tack.aot.compile(_scale, "cpu", args, grid=3).key
    for not_a_kernel in (tack.func(lambda x: x), len):
        with pytest.raises(TypeError, match="tack.aot.compile takes a @tack.kernel"):
            tack.aot.compile(not_a_kernel, "cpu", args)


def test_save_and_build_check_what_they_are_given(tmp_path, monkeypatch):
    """An empty path (an unset variable's) was made the current directory: save([a], "") wrote a
    cache there, and save_bundle raised a bare FileNotFoundError; now each is a ValueError, with
    nothing written.  Something that is not an artifact was an AttributeError deep inside; build
    with a target's ``kind:name``, as compile takes it, was one too ('str' has no 'key')."""
    monkeypatch.chdir(tmp_path)
    args = (np.zeros((2, 2, 2), np.float32), 0.5)
    art = tack.aot.compile(_scale, "cpu", args, grid=3)
    with pytest.raises(ValueError, match="names no directory or file"):
        tack.aot.save([art], "")
    with pytest.raises(ValueError, match="names no directory or file"):
        tack.aot.save_bundle([art], "")
    assert os.listdir(tmp_path) == []
    for bad in (["x"], [art, None]):
        with pytest.raises(TypeError, match="artifacts are what tack.aot.compile and build return"):
            tack.aot.save(bad, str(tmp_path / "c"))
        with pytest.raises(TypeError, match="artifacts are what tack.aot.compile and build return"):
            tack.aot.save_bundle(bad, str(tmp_path / "b"))
    (built,) = tack.aot.build("cpu", [(_scale, args, 3)])
    assert built.key == art.key
    assert tack.aot.build(GENERIC, [(_scale, args, 3)])[0].target == GENERIC


def test_save_bundle_makes_its_directory_and_refuses_one_jobs_would_not_read(tmp_path):
    """save_bundle into a directory others may write wrote a bundle every node then refused
    (bundles build checks its directory first; save_bundle did not); into a missing directory
    it raised a bare FileNotFoundError.  A missing one is made as bundles build makes one
    (0755), a path ending in a separator names a directory, and one jobs refuse is a SaveError
    naming it, nothing written."""
    arts = contour_artifacts(GENERIC)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(tack.aot.SaveError, match=r"jobs would not use bundles from .*shared: the "
                                                 r"directory .* is writable by its group and others"):
        tack.aot.save_bundle(arts, str(shared))
    assert os.listdir(shared) == []
    made = tack.aot.save_bundle(arts, str(tmp_path / "new" / "deeper") + os.sep)
    assert made == tack.aot.bundle_path(GENERIC, str(tmp_path / "new" / "deeper"))
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "deeper").st_mode) == 0o755
    assert bundle.read(tack.aot.save_bundle(arts, str(tmp_path / "other" / "b.bin"))).meta["arch"] \
        == GENERIC
    assert "SaveError" in tack.aot.__all__


def test_aot_takes_one_artifact_and_says_what_a_spec_and_a_path_are(tmp_path):
    """One artifact given alone (a named tuple) was iterated into its fields: "not str
    '0841...'"; a bytes path was "names no directory or file (an unset variable?)"; a spec of
    two items a bare "not enough values to unpack"; bundle_path("") a relative name; and a bare
    kind ("cuda") was only "archspec knows no such CPU microarchitecture"."""
    args = (np.zeros((2, 2, 2), np.float32), 0.5)
    art = tack.aot.compile(_scale, "cpu", args, grid=3)
    assert tack.aot.save(art, str(tmp_path / "c")) == tack.aot.save([art], str(tmp_path / "d"))
    with pytest.raises(TypeError, match=r"directory is a path \(a str or os.PathLike\), not bytes"):
        tack.aot.save([art], os.fsencode(str(tmp_path / "e")))
    with pytest.raises(TypeError, match=r"each of build's specs is \(kernel, example args, grid\)"):
        tack.aot.build("cpu", [(_scale, args)])
    with pytest.raises(ValueError, match="names no directory or file"):
        tack.aot.bundle_path(GENERIC, "")
    with pytest.raises(ValueError, match=r"a bare name is a CPU's, and cuda is a kind: name one of "
                                         r"its architectures, cuda:<name> \('python -m tack.site "
                                         r"archs cuda' lists them all\)"):
        tack.aot.compile(_scale, "cuda", args, grid=3)


def test_save_into_a_link_says_to_name_the_real_directory_not_a_variable(tmp_path):
    """save's directory is an argument: a link there was refused with "set TACK_CACHE_DIR to the
    real directory", a setting save does not read."""
    args = (np.zeros((2, 2, 2), np.float32), 0.5)
    art = tack.aot.compile(_scale, "cpu", args, grid=3)
    (tmp_path / "real").mkdir(mode=0o700)
    os.symlink(tmp_path / "real", tmp_path / "linked")
    with pytest.raises(tack.aot.SaveError) as e:
        tack.aot.save([art], str(tmp_path / "linked"))
    assert "TACK_CACHE_DIR" not in str(e.value), str(e.value)
    assert f"name the real directory, {tmp_path / 'real'}" in str(e.value), str(e.value)
