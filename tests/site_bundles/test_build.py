"""Site bundles: build for two microarchitectures, status on this node, rebuild after an LLVM change (tack/site/build.py)."""

import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import tack
import tack.frontend.lower
from tack.cache import bundle, entry, trust
from tack.backends.cpu_runtime import arch_key as arch_target_key, host_arch, llvm_version
from tack.site import build
from tack.kernels.contour import tack_warm
from tack.site.config import load

OTHER = "sapphirerapids" if host_arch() != "sapphirerapids" else "zen3"
WARM = tack_warm((8, 8, 8))                       # what contour needs for an 8^3 field
KERNELS = len({kernel for kernel, _, _ in WARM})


def write_config(tmp_path, archs, kernels=None):
    kernels = kernels or "    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n"
    path = tmp_path / "site.yaml"
    path.write_text(f"version: 1\nbuild:\n  archs:\n    cpu: [{', '.join(archs)}]\n  kernels:\n{kernels}")
    return load(path)


def run_build(cfg, out_dir, **kw):
    out, err = io.StringIO(), io.StringIO()
    rc = build.build_bundles(cfg, output=str(out_dir), out=out, err=err, **kw)
    return rc, out.getvalue(), err.getvalue()


def contour_job(own_cache, site_dir):
    """A job's 8^3 contour in a fresh process, reading (mode read) only the site bundles in
    ``site_dir``; -> its CompletedProcess (what it said is in stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(own_cache), TACK_CACHE="read", TACK_CACHE_BUNDLES=str(site_dir),
               TACK_CACHE_INSTALLED_BUNDLES="0")
    script = ("import numpy as np\nfrom tack.kernels.contour import contour\n"
              "contour(np.random.rand(8, 8, 8).astype(np.float32), 0.5)\n")
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)


def contour_in_fresh_process(own_cache, site_dir):
    """Run the 8^3 contour with only the site bundles to draw on; -> (ok, stats)."""
    script = textwrap.dedent("""
        import json, numpy as np, tack.cache
        from tack.kernels.contour import contour
        p = np.indices((8, 8, 8)).astype(np.float32)
        f = np.sqrt(((p - 3.4) ** 2).sum(axis=0)).astype(np.float32)
        v, fc = contour(f, 2.5)
        print(json.dumps({"ntri": len(fc), "stats": tack.cache.stats()}))
    """)
    return run_with_site_bundles(script, own_cache, site_dir)


def run_with_site_bundles(script, own_cache, site_dir, mode="read"):
    """Run ``script`` in a new process reading ``own_cache`` (in ``mode``) and the site bundles of
    ``site_dir``; -> the JSON its last line prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(own_cache), TACK_CACHE=mode, TACK_CACHE_BUNDLES=str(site_dir))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def own_cache(tmp_path):
    d = tmp_path / "own"
    d.mkdir(mode=0o700)
    return d


def test_build_two_archs_then_a_node_loads_its_own(tmp_path, own_cache):
    """Bundles for this node's CPU and another: one per arch; a fresh process loads every kernel from this node's."""
    cfg = write_config(tmp_path, [host_arch(), OTHER])
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(cfg, out_dir)
    assert rc == 0, out + err
    names = sorted(os.listdir(out_dir))
    assert len(names) == 2 and any(host_arch() in n for n in names) and any(OTHER in n for n in names)
    for name in names:
        b = bundle.read(str(out_dir / name))
        assert b.meta["arch"] in (f"cpu:{host_arch()}", f"cpu:{OTHER}")
        assert b.meta["target_key"] == arch_target_key(b.meta["arch"][4:], llvm_version())
    r = contour_in_fresh_process(own_cache, out_dir)
    assert r["ntri"] > 0
    assert r["stats"]["hits"]["variant"] == KERNELS and r["stats"]["misses"]["variant"] == 0
    assert os.listdir(own_cache) == []


def test_several_shapes_build_one_set_of_variants(tmp_path, own_cache):
    """A config listing several shapes builds each shape-generic variant once (the same bundle
    as one shape gives), and a field of yet another shape loads every kernel from it."""
    kernels = "    - module: tack.kernels.contour\n      shapes: [[21, 21, 21], [5, 9, 30], [12, 12, 12]]\n"
    cfg = write_config(tmp_path, [host_arch()], kernels)
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(cfg, out_dir)
    assert rc == 0, out + err
    (name,) = os.listdir(out_dir)
    b = bundle.read(str(out_dir / name))
    nvariants = sum(1 for kind, _ in b.index if kind == entry.KIND_VARIANT)
    assert nvariants == len(WARM) == KERNELS
    r = contour_in_fresh_process(own_cache, out_dir)          # an 8^3 field: not a shape built for
    assert r["stats"]["hits"]["variant"] == KERNELS and r["stats"]["misses"]["variant"] == 0


def test_status_and_rebuild_without_a_directory_cover_every_site_directory(tmp_path, monkeypatch):
    """With no DIR, status and rebuild looked at TACK_CACHE_BUNDLES's first directory alone: a
    stale bundle in the second (which jobs search too) was never reported nor rebuilt."""
    cfg = write_config(tmp_path, [host_arch()])
    first, second = tmp_path / "group-bundles", tmp_path / "site-bundles"
    first.mkdir(mode=0o755)
    from tack.backends import cpu_identity, cpu_runtime
    for where in (build, cpu_runtime, cpu_identity):
        monkeypatch.setattr(where, "llvm_version", lambda: "llvmlite-0.0.1")
    rc, out, err = run_build(cfg, second)
    assert rc == 0, out + err
    monkeypatch.undo()
    monkeypatch.setenv("TACK_CACHE_BUNDLES", f"{first}:{tmp_path / 'not-yet'}:{second}")
    monkeypatch.setenv("TACK_CACHE_INSTALLED_BUNDLES", "0")
    (name,) = os.listdir(second)

    status = io.StringIO()
    assert build.bundles_status(out=status) == 0
    text = status.getvalue()
    assert f"{first}:\nno bundles in {first}" in text, text
    assert f"{tmp_path / 'not-yet'}: missing" in text, text
    assert f"{second}:\n{name}: " in text and "STALE" in text and "built with llvmlite-0.0.1" in text
    assert text.rstrip().endswith("every kernel compiles on first use"), text

    rebuilt = io.StringIO()
    assert build.bundles_rebuild(out=rebuilt, err=rebuilt) == 0, rebuilt.getvalue()
    assert f"rebuilt {len(WARM)} variants" in rebuilt.getvalue(), rebuilt.getvalue()
    (name,) = os.listdir(second)
    status = io.StringIO()
    build.bundles_status(out=status)
    assert f"this node looks first in: {name}" in status.getvalue(), status.getvalue()


def built_with_another_llvm(tmp_path, monkeypatch):
    """A site directory of this host's bundle, built as if with llvmlite 0.0.1 (stale here)."""
    cfg = write_config(tmp_path, [host_arch()])
    out_dir = tmp_path / "bundles"
    from tack.backends import cpu_identity, cpu_runtime
    # the header's LLVM, the one the site's candidate keys and the toolchain's key are made with
    for where in (build, cpu_runtime, cpu_identity):
        monkeypatch.setattr(where, "llvm_version", lambda: "llvmlite-0.0.1")
    rc, out, err = run_build(cfg, out_dir)
    assert rc == 0, out + err
    monkeypatch.undo()
    return out_dir


def test_status_then_rebuild_after_llvm_change(tmp_path, own_cache, monkeypatch):
    """Built with another LLVM: status says stale and why; rebuild recompiles without the front end; the result loads."""
    out_dir = built_with_another_llvm(tmp_path, monkeypatch)

    status = io.StringIO()
    assert build.bundles_status(str(out_dir), out=status) == 0
    text = status.getvalue()
    assert "STALE" in text and "built with llvmlite-0.0.1" in text and llvm_version() in text
    # an old bundle is of no use to this node: every kernel compiles
    assert contour_in_fresh_process(own_cache, out_dir)["stats"]["hits"]["variant"] == 0

    def no_front_end(*a, **k):
        raise AssertionError("the front end ran during rebuild")
    monkeypatch.setattr(tack.frontend.lower, "lower_kernel", no_front_end)
    rebuilt = io.StringIO()
    assert build.bundles_rebuild(str(out_dir), out=rebuilt, err=rebuilt) == 0, rebuilt.getvalue()
    assert f"rebuilt {len(WARM)} variants" in rebuilt.getvalue()
    monkeypatch.undo()

    (name,) = os.listdir(out_dir)
    assert bundle.read(str(out_dir / name)).meta["llvm"] == llvm_version()
    status = io.StringIO()
    build.bundles_status(str(out_dir), out=status)
    assert "current" in status.getvalue() and "STALE" not in status.getvalue()
    fresh = tmp_path / "own2"
    fresh.mkdir(mode=0o700)
    r = contour_in_fresh_process(fresh, out_dir)
    assert r["stats"]["hits"]["variant"] == KERNELS


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"),
                    reason="run as root without util-linux's setpriv, which drops root's override "
                           "of the permission bits: root writes in any directory")
def test_rebuild_into_a_directory_it_cannot_write_says_so_before_compiling(tmp_path, monkeypatch):
    """A stale bundle in a directory this process cannot write: rebuild recompiled every variant,
    then failed on the new file's PermissionError; it now says so first, compiling nothing, and
    leaves the bundle as it was.  (Root writes anywhere: as root the command runs with root's
    override of the permission bits dropped, as an admin's unprivileged account would.)"""
    out_dir = built_with_another_llvm(tmp_path, monkeypatch)
    (name,) = os.listdir(out_dir)
    before = (out_dir / name).read_bytes()
    out_dir.chmod(0o555)
    try:
        drop = (["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                 "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else [])
        r = subprocess.run(drop + [sys.executable, "-m", "tack.site", "bundles", "rebuild", str(out_dir)],
                           capture_output=True, text=True, timeout=600,
                           env={k: v for k, v in os.environ.items() if not k.startswith("TACK_")})
    finally:
        out_dir.chmod(0o755)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"{name}: rebuild failed: {out_dir} is not writable (Permission denied): " \
           "nothing was recompiled" in r.stderr, r.stderr
    assert "recompiled" not in r.stdout, r.stdout
    assert os.listdir(out_dir) == [name] and (out_dir / name).read_bytes() == before


def test_one_arch_failing_does_not_stop_the_others(tmp_path):
    """An architecture LLVM cannot target fails alone: the others are built, the exit status is 1, a summary names it."""
    cfg = write_config(tmp_path, [host_arch(), "zen6"])
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(cfg, out_dir)
    assert rc == 1
    assert "zen6" in out and "FAILED" in out and "cannot target cpu:zen6" in out
    names = os.listdir(out_dir)
    assert len(names) == 1 and host_arch() in names[0]
    assert not [n for n in names if trust.TMP_MARK in n]


def test_module_that_fails_to_import_is_reported(tmp_path):
    """A kernel module that fails to import: a clear message naming it, exit status 1."""
    cfg = write_config(tmp_path, [host_arch()],
                       "    - module: no_such_module_here\n      shapes: [[8, 8, 8]]\n")
    rc, out, err = run_build(cfg, tmp_path / "bundles")
    assert rc == 1
    assert "no_such_module_here" in out and "failed to import" in out


def test_gpu_archs_are_built_into_bundles_of_their_own(tmp_path):
    """GPU architectures of build.archs are built with their toolchains, one bundle each, named
    and headed by kind:name: PTX for cuda:sm_90, a code object for rocm:gfx90a, SPIR-V for
    spirv:generic (PTX with SASS beside it for cuda:sm_90); a node's CPU does not use them
    (status says so)."""
    from tack.backends.gpu import unpack_cuda, unpack_level_zero
    from tests.backends.gpu_tools import tool
    tool("ld.lld")                      # rocm code objects are linked with it (skips, naming it)
    path = tmp_path / "site.yaml"
    path.write_text("version: 1\nbuild:\n  archs:\n    cpu: [" + host_arch() + "]\n    cuda: [sm_90]\n"
                    "    rocm: [gfx90a]\n    spirv: [generic]\n  kernels:\n    - module: tack.kernels.contour\n"
                    "      shapes: [[8, 8, 8]]\n")
    rc, out, err = run_build(load(path), tmp_path / "bundles")
    assert rc == 0, out + err
    names = sorted(os.listdir(tmp_path / "bundles"))
    assert len(names) == 4 and any("-cuda-sm_90-" in n for n in names) and any("-rocm-gfx90a-" in n for n in names)
    assert any("-spirv-generic-" in n for n in names)
    for name in names:
        b = bundle.read(str(tmp_path / "bundles" / name))
        meta, payload = next(b.get(k, key) for (k, key) in b.index if k == entry.KIND_VARIANT)
        if b.meta["arch"] == "cuda:sm_90":
            ptx, cubin, label = unpack_cuda(payload)          # SASS beside it where ptxas is
            assert ptx.startswith(b"//") and b".target sm_90" in ptx and meta["suffix"] == ".ptx"
            assert (cubin[:4] == b"\x7fELF" and label.startswith("sm_90 ptxas ")) or not cubin
        elif b.meta["arch"] == "rocm:gfx90a":
            assert payload[:4] == b"\x7fELF" and meta["suffix"] == ".hsaco"
        elif b.meta["arch"] == "spirv:generic":
            assert unpack_level_zero(payload)[0][:4] == b"\x03\x02\x23\x07" and meta["suffix"] == ".spv"
    status = io.StringIO()
    build.bundles_status(str(tmp_path / "bundles"), out=status)
    assert "cuda:sm_90 is a GPU's: its runtime reads it, not this node's CPU" in status.getvalue()


def test_other_isa_object_code(tmp_path):
    """An aarch64 microarchitecture builds aarch64 object code on any host."""
    cfg = write_config(tmp_path, ["neoverse_v2"])
    rc, out, err = run_build(cfg, tmp_path / "bundles")
    assert rc == 0, out + err
    (name,) = os.listdir(tmp_path / "bundles")
    b = bundle.read(str(tmp_path / "bundles" / name))
    meta, payload = next(b.get(k, key) for (k, key) in b.index if k == entry.KIND_VARIANT)
    assert payload[:4] == b"\x7fELF" and int.from_bytes(payload[18:20], "little") == 183  # EM_AARCH64
    assert "triple=aarch64" in meta["target"]
    status = io.StringIO()          # on another machine, status says what machine it is for
    build.bundles_status(str(tmp_path / "bundles"), out=status)
    if platform.machine() != "aarch64":
        assert (f"cpu:neoverse_v2 is for aarch64 CPUs; this node's CPU is {platform.machine()}"
                in status.getvalue()), status.getvalue()


def test_unwritable_output_is_refused(tmp_path):
    """A bundle directory that cannot be written: exit 1 with a message naming it, nothing built."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cfg = write_config(tmp_path, [host_arch()])
    rc, out, err = run_build(cfg, blocker / "sub")
    assert rc == 1 and "not writable" in err and str(blocker / "sub") in err


def test_cpu_llvm_does_not_know_fails_its_arch(tmp_path):
    """archspec has no flags for zen6 with this LLVM's clang (22), and Tack's table no CPU for it:
    that arch fails (never generic code after LLVM's warning); the others are built.  (armv8.2a,
    whose clang flag is a -march= string, builds: the registry's LLVM_CPUS maps it.)"""
    cfg = write_config(tmp_path, [host_arch(), "zen6", "armv8.2a"])
    rc, out, err = run_build(cfg, tmp_path / "bundles")
    assert rc == 1
    assert "zen6" in out and "FAILED" in out and "cannot target cpu:zen6" in out, out
    assert sorted(n.split("-cpu-")[1].rsplit("-", 1)[0]
                  for n in os.listdir(tmp_path / "bundles")) == sorted([host_arch(), "armv8.2a"])


def test_power_cpu_gets_llvm_name(tmp_path):
    """archspec spells POWER9 as GCC does (power9); the build asks LLVM for pwr9, a CPU it knows."""
    cfg = write_config(tmp_path, ["power9le"])
    rc, out, err = run_build(cfg, tmp_path / "bundles")
    assert rc == 0, out + err
    (name,) = os.listdir(tmp_path / "bundles")
    b = bundle.read(str(tmp_path / "bundles" / name))
    meta, payload = next(b.get(k, key) for (k, key) in b.index if k == entry.KIND_VARIANT)
    assert "cpu=pwr9" in meta["target"] and int.from_bytes(payload[18:20], "little") == 21  # EM_PPC64


def test_shape_of_wrong_rank_fails_cleanly_in_build(tmp_path):
    """A 2-D shape for contour (3-D): build reports it by file, line and key, no traceback, nothing built."""
    cfg = write_config(tmp_path, [host_arch()],
                       "    - module: tack.kernels.contour\n      shapes: [[8, 8]]\n")
    rc, out, err = run_build(cfg, tmp_path / "bundles")
    assert rc == 1
    assert (f"{cfg.path}:7: build.kernels.0.shapes.0: tack.kernels.contour.tack_warm([8, 8]) failed: "
            "ValueError: contour needs a 3-D field shape") in out, out


CHECK_CASES = {
    "2-D shape for contour": ("cpu: [zen3]", "    - module: tack.kernels.contour\n      shapes: [[8, 8, 8], [8, 8]]\n",
                              ":7: build.kernels.0.shapes.1: tack.kernels.contour.tack_warm([8, 8]) failed: "
                              "ValueError: contour needs a 3-D field shape, not 2-D"),
    "negative extent": ("cpu: [zen3]", "    - module: tack.kernels.contour\n      shapes: [[8, -8, 8]]\n",
                        ":7: build.kernels.0.shapes.0.1: an extent is 1 to 1048576, not -8"),
    "absurd extent": ("cpu: [zen3]", "    - module: tack.kernels.contour\n      shapes: [[8, 8, 100000000]]\n",
                      ":7: build.kernels.0.shapes.0.2: an extent is 1 to 1048576, not 100000000"),
    "too many elements": ("cpu: [zen3]", "    - module: tack.kernels.contour\n      shapes: [[65536, 65536, 65536]]\n",
                          ":7: build.kernels.0.shapes.0: 65536x65536x65536 is 281474976710656 elements"),
    "malformed type": ("cpu: [zen3]", "    - module: tack.kernels.contour\n      kernel: classify\n"
                       "      args: [\"flaot32[8,8,8]\", float32]\n",
                       ":8: build.kernels.0.args.0: unknown element type 'flaot32'"),
    "wrong rank for kernel": ("cpu: [zen3]", "    - module: tack.kernels.contour\n      kernel: classify\n"
                              "      args: [\"float32[8,8]\", float32, \"int32[8,8,8,3]\", \"int32[1536]\", "
                              "\"int64[512]\", \"int64[4]\"]\n      grid: 3\n",
                              ":6: build.kernels.0: classify(float32[8,8], float32, int32[8,8,8,3], int32[1536], "
                              "int64[512], int64[4]) does not compile: CompileError"),
    "wrong argument count": ("cpu: [zen3]", "    - module: tack.kernels.contour\n      kernel: classify\n"
                             "      args: [float32]\n",
                             ":8: build.kernels.0.args: classify takes 6 arguments"),
    "CPU LLVM does not know": ("cpu: [zen3, zen6]", "    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n",
                               ":4: build.archs.cpu.1: LLVM"),
}


@pytest.mark.parametrize("case", list(CHECK_CASES))
def test_check_catches_what_build_would_fail_on(tmp_path, case):
    archs, kernels, message = CHECK_CASES[case]
    config = tmp_path / "site.yaml"
    config.write_text(f"version: 1\nbuild:\n  archs:\n    {archs}\n  kernels:\n{kernels}")
    r = subprocess.run([sys.executable, "-m", "tack.site", "check", str(config)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert any(line.startswith(f"error: {config}{message}") for line in r.stderr.splitlines()), r.stderr


def test_check_accepts_what_builds(tmp_path):
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\nbuild:\n  archs:\n    cpu: [zen3, power9le, neoverse_v2]\n  kernels:\n"
                      "    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n"
                      "    - module: tack.kernels.contour\n      kernel: classify\n"
                      "      args: [\"float32[8,8,8]\", float32, \"int32[8,8,8,3]\", \"int32[1536]\", "
                      "\"int64[512]\", \"int64[4]\"]\n      grid: 3\n")
    r = subprocess.run([sys.executable, "-m", "tack.site", "check", str(config)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{config}: valid" in r.stdout


def test_bundles_check_says_whether_the_contour_is_served_from_the_bundles(tmp_path):
    """`python -m tack.site bundles check DIR`: 0 and "nothing compiled" when this node's bundle
    serves the contour; 1 naming the variants compiled when only another CPU's bundle is there;
    a clear error for a directory that is not one."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    for arch, out_dir in ((host_arch(), mine), (OTHER, other)):
        rc, out, err = run_build(write_config(tmp_path, [arch]), out_dir)
        assert rc == 0, out + err

    def check(*args, **settings):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(tack.__file__)))
        env.update(settings)
        return subprocess.run([sys.executable, "-m", "tack.site", "bundles", "check", *args],
                              env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    ok = check(str(mine))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"variants from bundles {KERNELS}, compiled 0" in ok.stdout
    assert f"contour served from the bundles in {mine}: nothing compiled" in ok.stdout
    # the demo's field and level: the same triangles as python -m tack.demo (a 21^3 sphere)
    demo = subprocess.run([sys.executable, "-m", "tack.demo"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    triangles = re.search(r"^  (\d+) triangles, ", demo.stdout, re.M).group(1)
    assert f"contour of the demo's 21^3 sphere on cpu: {triangles} triangles;" in ok.stdout, ok.stdout
    relative = check("mine")                # the contour runs elsewhere: the path still holds
    assert relative.returncode == 0 and f"in {mine}: nothing compiled" in relative.stdout
    bad = check(str(other), "--size", "9")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"{KERNELS} kernel variant(s) were compiled, not found in {other}" in bad.stdout
    assert "LLVM was loaded" in bad.stdout
    missing = check(str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "is not a directory" in missing.stderr
    # No DIR: a site directory jobs search that is not there yet is skipped, as jobs skip it (it
    # was "bundles check: ... is not a directory", as if given); ":" names none
    later = check(TACK_CACHE_BUNDLES=f"{tmp_path / 'notyet'}:{mine}",
                  TACK_CACHE_INSTALLED_BUNDLES="0")
    assert later.returncode == 0, later.stdout + later.stderr
    assert f"{tmp_path / 'notyet'} (a site directory jobs search) is missing: skipped" in later.stdout
    assert f"contour served from the bundles in {mine}: nothing compiled" in later.stdout
    nothing = check(":")
    assert nothing.returncode == 1 and "':' names no directory" in nothing.stderr, nothing.stderr
    small = check(str(mine), "--size", "1")     # bad usage (2), as the demo's --size 1
    assert small.returncode == 2 and "argument --size: 1: the contour needs at least 2 points" \
        in small.stderr, small.stderr
    for size in ("2", "4"):     # grids the sphere passes between: no triangles to find, and fine
        tiny = check(str(mine), "--size", size)   # (it said "the contour found no triangles", 1)
        assert tiny.returncode == 0 and f"variants from bundles {KERNELS}, compiled 0" in tiny.stdout, \
            tiny.stdout + tiny.stderr
    for device in ("tpu", "banana"):
        # a device that is not one: the one line the contour's error makes, no child traceback
        elsewhere = check(str(mine), "--device", device)
        assert elsewhere.returncode == 1, elsewhere.stdout + elsewhere.stderr
        (line,) = elsewhere.stderr.splitlines()
        assert line.startswith(f"error: bundles check: the contour failed on {device}: ValueError: "
                               f"device {device!r} is not available"), elsewhere.stderr



def test_build_output_is_one_line_per_variant_and_an_aligned_table(tmp_path):
    """Two shapes give the same variants: one progress line per distinct variant, the kernel's
    name only (the value types under verbose); the table's columns line up for a long arch
    name (cpu:sapphirerapids overflowed a 16-character column)."""
    archs = [host_arch(), "sapphirerapids" if host_arch() != "sapphirerapids" else "icelake"]
    kernels = "    - module: tack.kernels.contour\n      shapes: [[21, 21, 21], [8, 8, 8]]\n"
    cfg = write_config(tmp_path, archs, kernels)
    rc, out, err = run_build(cfg, tmp_path / "bundles")
    assert rc == 0, out + err
    steps = [line for line in out.splitlines() if line.startswith("  cpu:")]
    assert len(steps) == len(archs) * KERNELS, out
    assert "array(" not in out, out
    assert f"compiling {KERNELS} variant(s) ({2 * len(WARM)} launches)" in out
    table = out[out.index("\narch") + 1:].splitlines()
    column = table[0].index("bundle")
    assert [row.index(str(tmp_path)) for row in table[1:]] == [column] * len(archs), out
    rc, verbose, err = run_build(cfg, tmp_path / "bundles", verbose=True)
    assert rc == 0 and "classify(array(float32" in verbose, verbose


def test_rebuild_after_an_llvm_update_keeps_what_the_new_build_holds(tmp_path, monkeypatch):
    """After an LLVM update the admin builds the new bundles (with one kernel more); the old
    LLVM's bundle of the same arch is still there and ``bundles check`` says to rebuild it. The
    rebuild wrote its fewer variants over the new bundle of that name (a kernel lost, compiled by
    every job); it now adds them to what that bundle holds, and removes the stale one."""
    from tack.backends import cpu_identity, cpu_runtime
    out_dir = tmp_path / "bundles"
    for where in (build, cpu_runtime, cpu_identity):
        monkeypatch.setattr(where, "llvm_version", lambda: "llvmlite-0.0.1")
    rc, out, err = run_build(write_config(tmp_path, ["x86_64_v2"]), out_dir)
    assert rc == 0, out + err
    monkeypatch.undo()
    (tmp_path / "sitek_rebuild.py").write_text("import tack\n\n\n@tack.kernel\ndef saxpy(a, x, y, out):\n"
                                              "    i = tack.tid()\n    out[i] = a * x[i] + y[i]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    both = ("    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n"
            "    - module: sitek_rebuild\n      kernel: saxpy\n"
            "      args: [float32, 'float32[16]', 'float32[16]', 'float32[16]']\n")
    rc, out, err = run_build(write_config(tmp_path, ["x86_64_v2"], both), out_dir)
    assert rc == 0, out + err
    assert len(os.listdir(out_dir)) == 2
    new_name = next(n for n in os.listdir(out_dir)
                    if bundle.read(str(out_dir / n), allow_root=True).meta["llvm"] == llvm_version())
    want = sorted(bundle.read(str(out_dir / new_name), allow_root=True).index)
    rebuilt = io.StringIO()
    assert build.bundles_rebuild(str(out_dir), out=rebuilt, err=rebuilt) == 0, rebuilt.getvalue()
    assert os.listdir(out_dir) == [new_name]
    assert sorted(bundle.read(str(out_dir / new_name), allow_root=True).index) == want


def test_status_names_another_tacks_bundle_as_stale_not_unreadable(tmp_path, monkeypatch):
    """A bundle another Tack version made: status said "not used by this node (its header cannot
    be read)", where the header was read and the reason is the version; now it points to that."""
    from tack.cache import keys
    monkeypatch.setattr(keys, "_version_id", "0.0.9")
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(write_config(tmp_path, ["x86_64_v2"]), out_dir)
    assert rc == 0, out + err
    monkeypatch.undo()
    status = io.StringIO()
    build.bundles_status(str(out_dir), out=status)
    text = status.getvalue()
    assert "not used by this node (stale: below)" in text and "cannot be read" not in text, text
    assert "stale: made by Tack 0.0.9" in text, text


def test_status_says_a_device_of_this_node_uses_the_spirv_bundle(tmp_path):
    """An OpenCL device runs spirv:generic, and its runtime reads the site's spirv:generic bundle
    (``bundles check --device opencl`` is served from it): status said this node used none of
    them.  It asks each device runtime that has a device here, as a launch's session does; on a
    node without one, it still says none."""
    from tack.backends import opencl_runtime
    if not opencl_runtime.available():
        pytest.skip("no OpenCL device: run ci/install-opencl.sh")
    path = tmp_path / "site.yaml"
    path.write_text("version: 1\nbuild:\n  archs:\n    spirv: [generic]\n  kernels:\n"
                    "    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n")
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(load(path), out_dir)
    assert rc == 0, out + err
    (name,) = os.listdir(out_dir)
    assert "-spirv-generic-" in name

    status = io.StringIO()
    assert build.bundles_status(str(out_dir), out=status) == 0
    text = status.getvalue()
    assert "its opencl device looks for: spirv:generic (most specific first)" in text, text
    assert (f"{name}: spirv:generic, 4 entries (2 variants), {os.path.getsize(out_dir / name)} bytes: "
            "current; used by this node (spirv:generic is what this node's opencl device runs)") in text, text
    assert text.rstrip().endswith("this node's CPU uses none of these bundles: its kernels compile "
                                  f"on first use\nits opencl device looks first in: {name}"), text
    assert "uses none of these bundles: every kernel" not in text

    # A node without an OpenCL device (no ICD, no runtime library): no device runs it.
    empty = tmp_path / "no-vendors"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(OCL_ICD_VENDORS=str(empty), TACK_OPENCL_LIBRARY=str(tmp_path / "absent.so"),
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(tack.__file__))))
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "status", str(out_dir)],
                       env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "opencl" not in r.stdout, r.stdout
    assert (f"{name}: spirv:generic, 4 entries (2 variants), {os.path.getsize(out_dir / name)} bytes: "
            "current; not used by this node (spirv:generic is a GPU's: its runtime reads it, not "
            "this node's CPU, and no device here runs it)") in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith("this node uses none of these bundles: every kernel compiles "
                                      "on first use"), r.stdout


def test_rebuild_of_a_directory_without_bundles_says_so(tmp_path):
    """`bundles rebuild DIR` of a directory that holds no bundles printed nothing and exited 0:
    it says there were none to rebuild, naming DIR, and exits 0 as `bundles status` does (nothing
    there is stale); a file that is not a bundle is not one."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README").write_text("bundles go here\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(tack.__file__)))

    def site(*args):
        return subprocess.run([sys.executable, "-m", "tack.site", "bundles", *args], env=env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
    r = site("rebuild", str(empty))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == f"no bundles in {empty}: nothing to rebuild\n" and r.stderr == "", r
    status = site("status", str(empty))
    assert status.returncode == 0 and f"no bundles in {empty}\n" in status.stdout, status
    assert os.listdir(empty) == ["README"]

    # No DIR: each site directory a job searches that holds none is named, a missing one too.
    env.update(TACK_CACHE_BUNDLES=f"{empty}{os.pathsep}{tmp_path / 'not-yet'}",
               TACK_CACHE_INSTALLED_BUNDLES="0")
    r = site("rebuild")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == (f"no bundles in {empty}: nothing to rebuild\n"
                        f"no bundles in {tmp_path / 'not-yet'} (missing): nothing to rebuild\n"), r


def test_build_says_it_replaced_another_tacks_bundle_and_jobs_say_whose_it_is(tmp_path, own_cache,
                                                                             monkeypatch):
    """Two Tack installs whose bundles share a directory: a bundle's name holds its target, not
    its Tack, so one install's ``bundles build`` replaced the other's silently, and that Tack's
    jobs then compiled, each warning to "pack it again", which a user cannot do to a site bundle.
    The build now says whose bundle it replaced and that its jobs compile; a job's warning says
    the bundle is another install's (or not built again for this Tack) and what builds it."""
    from tack.cache import keys
    out_dir = tmp_path / "bundles"
    cfg = write_config(tmp_path, ["x86_64_v2"])
    monkeypatch.setattr(keys, "_version_id", "0.0.9")
    rc, out, err = run_build(cfg, out_dir)
    assert rc == 0, out + err
    monkeypatch.undo()
    (name,) = os.listdir(out_dir)
    proc = contour_job(own_cache, out_dir)
    assert proc.returncode == 0, proc.stderr
    assert f"not using the site bundle {name}: " in proc.stderr, proc.stderr
    assert "made by Tack 0.0.9" in proc.stderr and "pack it again" not in proc.stderr, proc.stderr
    assert "another Tack install's bundle" in proc.stderr, proc.stderr
    assert "python -m tack.site bundles build" in proc.stderr, proc.stderr
    rc, out, err = run_build(cfg, out_dir)
    assert rc == 0, out + err
    assert os.listdir(out_dir) == [name]
    assert f"cpu:x86_64_v2: replaced a bundle made by Tack 0.0.9 (this is " in out, out
    assert f"jobs of that Tack no longer find one in {out_dir} and compile" in out, out
    rc, out, err = run_build(cfg, out_dir)          # its own bundle again: nothing to say
    assert rc == 0 and "x86_64_v2: replaced" not in out, out + err


def test_status_says_a_hand_named_bundles_true_reason(tmp_path):
    """A bundle copied by hand to a name whose microarchitecture archspec does not know
    (``bundle-...-cpu-zen9-...``) was "built for cpu:zen9 with another LLVM or codegen than this
    node's": the LLVM is this one, and no node looks for zen9.  Status names the unknown
    microarchitecture; a copy to a known arch's name, that it is not named for what it holds."""
    from tack.archs import generic_level
    level = generic_level(host_arch())
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(write_config(tmp_path, [level]), out_dir)
    assert rc == 0, out + err
    (name,) = os.listdir(out_dir)
    for arch in ("zen9", OTHER):
        shutil.copy(out_dir / name, out_dir / name.replace(f"-cpu-{level}-", f"-cpu-{arch}-"))
    status = io.StringIO()
    assert build.bundles_status(str(out_dir), out=status) == 0
    lines = {ln.split(":", 1)[0]: ln for ln in status.getvalue().splitlines()}
    zen9 = lines[name.replace(f"-cpu-{level}-", "-cpu-zen9-")]
    assert "another LLVM" not in zen9, zen9
    assert (f": current; not used by this node (its name's cpu:zen9 is an unknown "
            "microarchitecture name: archspec knows no such CPU microarchitecture") in zen9, zen9
    assert f"its header says cpu:{level}" in zen9 and name in zen9, zen9
    other = lines[name.replace(f"-cpu-{level}-", f"-cpu-{OTHER}-")]
    assert "another LLVM" not in other, other
    assert (f": current; not used by this node (it is not named for what it holds (its header "
            f"says cpu:{level}") in other and name in other, other


def test_status_says_a_copy_to_another_machines_name_is_misnamed(tmp_path):
    """A bundle copied to another machine's name (``bundle-aarch64-cpu-x86_64_v3-...``) was
    "cpu:x86_64_v3 is for aarch64 CPUs": its code is this machine's, only its name is not.
    Status says it is not named for what it holds."""
    from tack.archs import generic_level
    level = generic_level(host_arch())
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(write_config(tmp_path, [level]), out_dir)
    assert rc == 0, out + err
    (name,) = os.listdir(out_dir)
    from tack.backends.arch_names import bundle_machine
    here = bundle_machine("cpu")
    there = "aarch64" if here != "aarch64" else "x86_64"
    copy = name.replace(f"bundle-{here}-", f"bundle-{there}-")
    assert copy != name
    shutil.copy(out_dir / name, out_dir / copy)
    status = io.StringIO()
    assert build.bundles_status(str(out_dir), out=status) == 0
    line = next(ln for ln in status.getvalue().splitlines() if ln.startswith(copy + ":"))
    assert f"is for {there} CPUs" not in line, line
    assert f"not used by this node (it is not named for what it holds (its header says cpu:{level}" \
        in line and name in line, line


def test_a_jobs_log_says_it_judged_a_site_bundle_by_its_name(monkeypatch):
    """A bundle whose name's key is not this LLVM's for the name's arch is passed over by its name
    alone (its header is not read): the log said "built for cpu:X with another LLVM or codegen",
    of a file that may hold anything (a copy to another arch's name); it says it is the name,
    with both keys."""
    from tack.backends import cpu_runtime
    machine = platform.machine()
    name = f"bundle-{machine}-cpu-x86_64_v2-000000000000"
    want = arch_target_key("x86_64_v2", llvm_version())[:12]
    why = {}
    assert cpu_runtime.site_bundles([name], lambda n: pytest.fail("a header read"), why=why) == []
    assert why == {name: "its name is for cpu:x86_64_v2 built with another LLVM or codegen than "
                         f"this node's (key 000000000000, not {want})"}, why


def test_a_writable_site_directory_is_named_not_one_of_its_bundles(tmp_path, own_cache):
    """A site bundle directory others may write is refused whole; the warning named the first
    bundle a lookup opened ("not using the site bundle bundle-...-zen2-...: the directory ... is
    writable"), which read as if its other bundles were still used.  It names the directory."""
    from tack.archs import generic_level
    out_dir = tmp_path / "bundles"
    rc, out, err = run_build(write_config(tmp_path, [generic_level(host_arch())]), out_dir)
    assert rc == 0, out + err
    os.chmod(out_dir, 0o777)
    try:
        proc = contour_job(own_cache, out_dir)
    finally:
        os.chmod(out_dir, 0o755)
    assert proc.returncode == 0, proc.stderr
    assert f"not using the site bundles in {out_dir}: the directory {out_dir} is writable by its " \
           "group and others (mode 0777)" in proc.stderr, proc.stderr
    assert "not using the site bundle bundle-" not in proc.stderr, proc.stderr


def test_a_config_naming_no_architecture_builds_nothing_and_says_so(tmp_path):
    """``build.archs`` empty (or left out): bundles build printed an empty table, made the output
    directory and exited 0, as if bundles had been built.  It says so now, exit 1, nothing made."""
    out_dir = tmp_path / "out"
    rc, out, err = run_build(write_config(tmp_path, []), out_dir)
    assert rc == 1 and out == "", out
    assert err == f"error: {tmp_path / 'site.yaml'}:3: build.archs: names no architecture; nothing was built\n"
    assert not out_dir.exists()
