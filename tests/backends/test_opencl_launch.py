"""tack.launch(..., device="opencl"): Tack's kernels compiled to SPIR-V (spirv:generic) and run
through OpenCL (Intel's CPU runtime here): the one GPU-style code path that executes on this
machine.  Results are compared with the CPU backend's and NumPy's; nothing is simulated."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import tack
from tack.backends import opencl_runtime
from tests.util import run_script


pytestmark = pytest.mark.skipif(
    not opencl_runtime.available() and not os.environ.get("TACK_REQUIRE_OPENCL"),
    reason=f"no OpenCL device takes SPIR-V here ({opencl_runtime.unavailable_reason()}); "
           "run ci/install-opencl.sh")


def test_the_language_suite_runs_on_opencl():
    """Every test of tests/test_language.py (each parameter set) passes with its launches on
    device='opencl': the suite's own assertions compare each result with NumPy."""
    from .gpu_tools import language_suite_on
    ran, failed, refused = language_suite_on("opencl")
    assert ran >= 70 and failed == {} and refused == {}, (failed, refused)


@tack.kernel
def k_mark(out):
    i, j, k = tack.tid()
    out[i, j, k] = i * 10000 + j * 100 + k


def test_the_last_grid_dimension_runs_on_x_in_grid_stride_loops(monkeypatch):
    """The runtime launches the grid's last dimension on OpenCL's dimension 0 (x, where
    work-items are consecutive: a C-order array's fastest axis), and the entry reads it from
    there: every point is written once, with its own index.  Then with the launch cut to one
    work-group along each axis (as a device with fewer groups than the grid needs would
    launch), the entry's grid-stride loops still cover every point."""
    shape = (37, 23, 5)
    want = np.indices(shape).astype(np.int64)
    want = want[0] * 10000 + want[1] * 100 + want[2]
    launched = []

    def geometry(dims, local, max_groups=None):
        got = real(dims, local, max_groups)
        launched.append(got)
        return got
    real = opencl_runtime.hardware_launch
    monkeypatch.setattr(opencl_runtime, "hardware_launch", geometry)
    out = np.full(shape, -1, np.int64)
    tack.launch(k_mark, shape, (out,), device="opencl")
    np.testing.assert_array_equal(out, want)
    groups, size = launched[-1]
    assert groups[0] * size[0] >= 5 and size[0] <= 8        # x: the last dimension's 5 points
    assert groups[2] * size[2] >= 37                         # z: the first dimension's 37

    monkeypatch.setattr(opencl_runtime, "hardware_launch",
                        lambda dims, local, max_groups=None: real(dims, local, (1, 1, 1)))
    out = np.full(shape, -1, np.int64)
    tack.launch(k_mark, shape, (out,), device="opencl", block=(2, 4, 2))
    np.testing.assert_array_equal(out, want)                 # 16 work-items, 4255 points


def test_a_site_bundle_built_for_spirv_serves_the_opencl_device(tmp_path):
    """``bundles build`` for ``spirv:generic``, then ``bundles check --device opencl``: the
    device's runtime finds the bundle by the name the build gave it (``bundle-spirv64-spirv-
    generic-<key>``, the target's machine, not this host's) and the contour compiles nothing.
    Every GPU runtime's site bundles were looked for under this host's machine (x86_64), so
    none was ever found."""
    cfg = tmp_path / "site.yaml"
    cfg.write_text("version: 1\nbuild:\n  archs:\n    spirv: [generic]\n  kernels:\n"
                   "    - module: tack.kernels.contour\n      shapes: [[21, 21, 21]]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["TACK_CACHE_DIR"] = str(tmp_path / "cache")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root

    def site(*args):
        return subprocess.run([sys.executable, "-m", "tack.site", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=900)
    built = site("bundles", "build", str(cfg), "--output", str(tmp_path / "bundles"))
    assert built.returncode == 0, built.stdout + built.stderr
    assert [p.name.startswith("bundle-spirv64-spirv-generic-")
            for p in (tmp_path / "bundles").iterdir()] == [True]
    checked = site("bundles", "check", str(tmp_path / "bundles"), "--device", "opencl")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "variants from bundles 2, compiled 0" in checked.stdout, checked.stdout


# A child's report: printed, or under mpiexec (whose ranks' output lines can interleave) written
# to its rank's file in $REPORTS.
_REPORT = """
    out = json.dumps(report)
    if os.environ.get("REPORTS"):
        launch = tack.cache.mpi_launch()
        with open(os.path.join(os.environ["REPORTS"], f"rank-{launch.rank}.json"), "w") as f:
            f.write(out)
    else:
        print(out)
"""

_CONTOUR_STATS = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tack, tack.cache
    from tack.kernels.contour import contour
    g = np.linspace(-1.0, 1.0, 21, dtype=np.float32)
    field = np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2)
    verts, faces = contour(field, 0.6, device="opencl")
    report = dict(tack.cache.stats(), faces=int(len(faces)))
""" + _REPORT)


def test_a_bundle_packed_from_opencl_runs_serves_from_a_site_directory(tmp_path):
    """A user's OpenCL entries packed (``python -m tack.cache pack``: the SPIR-V's bundle is
    ``bundle-spirv64-<key>``, its code's machine) and put in a site directory serve a new process
    whose own cache is empty: both kernels come from the bundle, nothing compiles.  The session
    looked for it as ``bundle-x86_64-<key>`` (this host's machine), so it was never read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def run(*args, **extra):
        p = subprocess.run([sys.executable, *args], env=dict(env, **extra), cwd=tmp_path,
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout
    first = json.loads(run("-c", _CONTOUR_STATS, TACK_CACHE_DIR=str(tmp_path / "a")).splitlines()[-1])
    assert first["misses"]["variant"] == 2
    said = run("-m", "tack.cache", "pack", TACK_CACHE_DIR=str(tmp_path / "a"))
    assert "(spirv64) into" in said and "note:" not in said, said     # no "not for this host"
    packed = sorted((tmp_path / "a").glob("bundle-spirv64-*"))
    assert len(packed) == 2                 # the SPIR-V's, and the driver's program binaries
    site = tmp_path / "site"
    site.mkdir()
    for p in packed:
        p.rename(site / p.name)
    got = json.loads(run("-c", _CONTOUR_STATS, TACK_CACHE_DIR=str(tmp_path / "b"),
                         TACK_CACHE_BUNDLES=str(site)).splitlines()[-1])
    assert got["faces"] == first["faces"] > 0
    assert got["hits"]["variant"] == 2 and got["misses"]["variant"] == 0, got
    assert got["variants_from"] == {"site bundles": 2}, got
    assert got["bytes_written"] == 0, got   # the driver's binaries served too: nothing built


_LOAD_BUNDLE_THEN_CONTOUR = textwrap.dedent("""
    import json, os, sys
    opened = []
    sys.addaudithook(lambda event, args: opened.append(os.fsdecode(args[0])) if event == "open"
                     and isinstance(args[0], (str, bytes)) and "bundle-" in os.fsdecode(args[0]) else None)
    import numpy as np
    import tack, tack.cache
    from mpi4py import MPI
    from tack.kernels.contour import contour
    kinds = os.environ.get("LOAD_KINDS")
    entries = tack.cache.load_bundle(MPI.COMM_WORLD, kinds=kinds.split(",") if kinds else None)
    broadcast_done = list(opened)
    g = np.linspace(-1.0, 1.0, 21, dtype=np.float32)
    field = np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2)
    verts, faces = contour(field, 0.6, device="opencl")
    report = dict(tack.cache.stats(), faces=int(len(faces)), entries=entries, opened=opened,
                  at_load=broadcast_done, rank=MPI.COMM_WORLD.Get_rank())
""" + _REPORT)


def test_the_users_own_opencl_bundle_serves_bundle_mode_mpi_ranks_and_a_cleared_directory(tmp_path):
    """A user's OpenCL entries packed (``python -m tack.cache pack``) serve as the CPU's do:
    with ``TACK_CACHE=bundle`` (nothing stored), under ``mpiexec -n 2`` (bundle mode by default:
    every rank reads the bundle, none writes a file), and in write mode after ``clear`` removed
    the per-kernel files, the program binaries the driver built included (``pack`` writes them
    in a bundle of their own, under the device's key, which the session opens beside the
    SPIR-V's).  A GPU kind's session read no bundle of the user's own, so each of these compiled
    both kernels; and the driver's binaries were packed under this host's machine, where no
    session looked.  ``load_bundle(comm)`` broadcasts them from rank 0 beside the CPU's: no other
    rank opens a bundle (it broadcast the CPU's alone, and every rank opened the GPU's itself)."""
    import shutil
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["TACK_CACHE_DIR"] = str(tmp_path / "cache")

    def run(*args, **extra):
        p = subprocess.run([*args], env=dict(env, **extra), cwd=tmp_path, capture_output=True,
                           text=True, timeout=900)
        assert p.returncode == 0, p.stdout + p.stderr
        return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]

    def ranks(script, n=2, **extra):
        reports = tmp_path / f"reports-{script is _CONTOUR_STATS}-{len(extra)}"
        reports.mkdir()
        run(mpiexec, "-n", str(n), sys.executable, "-c", script, REPORTS=str(reports), **extra)
        return [json.loads((reports / f"rank-{i}.json").read_text()) for i in range(n)]
    first, = run(sys.executable, "-c", _CONTOUR_STATS)
    assert first["misses"]["variant"] == 2
    run(sys.executable, "-m", "tack.cache", "pack")
    # Two: the SPIR-V's, and the program binary the driver built from it (the device's key).
    assert len(list((tmp_path / "cache").glob("bundle-spirv64-*"))) == 2

    got, = run(sys.executable, "-c", _CONTOUR_STATS, TACK_CACHE="bundle")
    assert got["variants_from"] == {"cache bundle": 2} and got["bytes_written"] == 0, got
    assert got["faces"] == first["faces"]
    mpiexec = shutil.which("mpiexec")
    if mpiexec:                                 # CI installs one; without it, the rest still runs
        for r in ranks(_CONTOUR_STATS):
            assert r["variants_from"] == {"cache bundle": 2} and r["bytes_written"] == 0, r
            assert r["faces"] == first["faces"]
        # load_bundle(comm): rank 0 reads the GPU bundles too and broadcasts them; no other rank
        # opens a bundle, and the kernels come from the broadcast bytes.
        both = ranks(_LOAD_BUNDLE_THEN_CONTOUR)
        assert [r["rank"] for r in both] == [0, 1], both
        for r in both:
            assert r["variants_from"] == {"cache bundle": 2} and r["bytes_written"] == 0, r
            assert r["entries"] == both[0]["entries"] > 0 and r["faces"] == first["faces"], r
        assert both[0]["opened"] and not both[1]["opened"], both
        # load_bundle(comm, kinds=["cpu"]): rank 0 reads (here looks for: no CPU kernel ran) the
        # CPU's bundle alone; each rank opens the OpenCL bundles itself at its first OpenCL kernel.
        cpu_only = ranks(_LOAD_BUNDLE_THEN_CONTOUR, LOAD_KINDS="cpu")
        at_load = [os.path.basename(p) for p in cpu_only[0]["at_load"]]
        assert at_load and not any(n.startswith("bundle-spirv64-") for n in at_load), cpu_only
        assert cpu_only[0]["entries"] == cpu_only[1]["entries"] < both[0]["entries"], (cpu_only, both)
        for r in cpu_only:
            assert r["variants_from"] == {"cache bundle": 2} and r["faces"] == first["faces"], r
            assert any("bundle-spirv64-" in p for p in r["opened"]), r
    run(sys.executable, "-m", "tack.cache", "clear")
    got, = run(sys.executable, "-c", _CONTOUR_STATS)
    assert got["variants_from"] == {"cache bundle": 2} and got["misses"]["variant"] == 0, got
    # The driver's binaries came from their bundle: nothing was built, so nothing stored back.
    assert got["bytes_written"] == 0, got


def sphere(shape, r):
    p = np.indices(shape).astype(np.float32)
    c = (np.array(shape, np.float32) - 1) / 2
    return np.sqrt(((p - c[:, None, None, None]) ** 2).sum(axis=0)).astype(np.float32), r


@pytest.mark.parametrize("debug", [False, True])
def test_contour_on_opencl_equals_the_cpu_and_scikit_image(monkeypatch, debug):
    """The contour's kernels on OpenCL give the CPU backend's surface, and scikit-image's
    triangle count, on two shapes; in debug mode (bounds-checked) too."""
    from skimage.measure import marching_cubes

    tack.config.debug = debug

    from tack.kernels import contour as mod
    for shape, r in ((21, 21, 21), 6.0), ((17, 23, 30), 5.0):
        field, level = sphere(shape, r)
        v_cpu, f_cpu = mod.contour(field, level)
        real = tack.launch
        monkeypatch.setattr(tack, "launch", lambda k, dim, args=(), device="cpu": real(k, dim, args, "opencl"))
        v_cl, f_cl = mod.contour(field, level)
        monkeypatch.undo()
        _, sk_faces, _, _ = marching_cubes(field, level)
        assert len(f_cl) == len(f_cpu) == len(sk_faces) > 0
        # Work-items append vertices and faces with atomics, in another order than the CPU's
        # threads: the same surface is the same set of triangles, each a set of points.
        np.testing.assert_allclose(triangles(v_cl, f_cl), triangles(v_cpu, f_cpu), atol=1e-5)


def triangles(verts, faces):
    """Each triangle's corners sorted, then the triangles sorted: an order-free surface."""
    tri = np.sort(np.round(verts[faces], 5).view([("", verts.dtype)] * 3).reshape(len(faces), 3), axis=1)
    tri = tri.view(verts.dtype).reshape(len(faces), 9)
    return tri[np.lexsort(tri.T[::-1])]


@tack.kernel
def k_oob(a, out):
    i = tack.tid()
    out[i] = a[i + 1]


def test_debug_mode_reads_the_error_record_after_the_kernel(monkeypatch):
    """In debug mode an out-of-bounds read on the device is an IndexError naming the array,
    the index and the line, read from the error record once the kernel has finished."""
    tack.config.debug = True
    a = np.arange(4.0)
    out = np.zeros(4)
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 0 of 'a' with size 4"):
        tack.launch(k_oob, 4, (a, out), device="opencl")
    tack.launch(k_oob, 3, (a, out), device="opencl")
    np.testing.assert_array_equal(out[:3], a[1:])


WARM = textwrap.dedent("""
    import json, sys, numpy as np, tack, tack.cache
    from tack.kernels import contour as mod
    real = tack.launch
    tack.launch = lambda k, dim, args=(), device="cpu": real(k, dim, args, "opencl")
    p = np.indices((19, 19, 19)).astype(np.float32)
    f = np.sqrt(((p - 9.0) ** 2).sum(axis=0)).astype(np.float32)
    v, fc = mod.contour(f, 5.0)
    formats = sorted(v.kernel.format for k in (mod.classify, mod.emit) for v in k._variants.values())
    print(json.dumps({"ntri": len(fc), "stats": tack.cache.stats(), "formats": formats,
                      "compiler": sorted(m for m in ("llvmlite.binding", "tack.codegen")
                                         if m in sys.modules)}))
""")


def run_warm(cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["TACK_CACHE_DIR"] = str(cache)
    p = subprocess.run([sys.executable, "-c", WARM], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def variant_entries(cache):
    """{path: (backend, arch, payload, key, meta)} of the variant entries under a cache directory."""
    from tack.cache.entry import KIND_VARIANT, decode
    out = {}
    for path in sorted(cache.rglob("*.tvar")):
        key, meta, payload = decode(path.read_bytes(), KIND_VARIANT)
        out[path] = (meta["backend"], meta["arch"], payload, key, meta)
    return out


def test_a_second_process_loads_the_drivers_binary_from_the_cache(tmp_path):
    """A first process compiles the contour's kernels to SPIR-V and stores it, and stores the
    program binaries the driver built from it under the device's key; a second process loads
    those binaries (no driver compile, no compiler module imported).  A binary the driver
    refuses (corrupted here) falls back to the SPIR-V stored with it, and is replaced."""
    from tack.backends import gpu
    cache = tmp_path / "cache"
    cold = run_warm(cache)
    assert cold["stats"]["misses"]["variant"] == 2 and cold["formats"] == ["spirv", "spirv"]
    entries = variant_entries(cache)
    assert sorted(e[:2] for e in entries.values()) == [
        ("opencl", "opencl:0")] * 2 + [("spirv", "spirv:generic")] * 2
    warm = run_warm(cache)
    assert warm["ntri"] == cold["ntri"] > 0 and warm["formats"] == ["native", "native"]
    assert warm["stats"]["hits"]["variant"] == 2 and warm["compiler"] == []
    assert warm["stats"]["bytes_written"] == 0
    from tack.cache.entry import KIND_VARIANT, encode
    for path, (backend, _, payload, key, meta) in entries.items():
        if backend == "opencl":         # a valid entry whose binary the driver refuses
            spirv, native = gpu.unpack_level_zero(payload)
            assert spirv[:4] == b"\x03\x02\x23\x07" and native
            damaged = native[:64] + bytes(len(native) - 64)
            path.write_bytes(encode(KIND_VARIANT, key, meta, gpu.pack_level_zero(spirv, damaged)))
    bad = run_warm(cache)
    assert bad["ntri"] == cold["ntri"] and bad["formats"] == ["spirv", "spirv"]
    assert bad["stats"]["hits"]["variant"] == 2 and bad["stats"]["damaged"] == 0
    again = run_warm(cache)
    assert again["formats"] == ["native", "native"] and again["ntri"] == cold["ntri"]


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="device 'tpu' is not available.*'opencl'"):
        tack.launch(k_oob, 1, (np.zeros(2), np.zeros(2)), device="tpu")


@pytest.mark.parametrize("damage", ["as built", "corrupted"])
def test_level_zero_native_code_refused_falls_back_to_its_spirv(damage):
    """A level_zero:pvc artifact (SPIR-V plus ocloc's native code for pvc) loaded on a device
    that refuses the native part (this CPU device; or the part corrupted) is built from the
    SPIR-V stored with it, and runs right: the fallback the spec asks of Level Zero, for real."""
    import tack.aot
    from tack.backends import gpu

    from .gpu_tools import tool
    tool("ocloc")
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    art = tack.aot.compile(k_saxpy, "level_zero:pvc", (np.float32(2.0), x, x, out))
    spirv, native = gpu.unpack_level_zero(art.payload)
    assert native, "ocloc made no native code"
    if damage == "corrupted":
        native = native[:len(native) // 2] + bytes(64) + native[len(native) // 2 + 64:]
    kernel = opencl_runtime.load(gpu.pack_level_zero(spirv, native), art.meta)
    assert kernel.format == "spirv" and kernel.native_refused
    opencl_runtime.launch(kernel, art.meta, [np.float32(2.0), x, x, out], (8,))
    np.testing.assert_array_equal(out, 3 * x)


@tack.kernel
def k_saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


@tack.kernel
def k_scale2d(a, out):
    i, j = tack.tid()
    out[i, j] = 2.0 * a[i, j]


@tack.kernel
def k_fill(out, v):
    out[tack.tid()] = v


def test_block_is_the_work_group_of_a_device_launch():
    """tack.launch(..., block=): the work-group shape on the device (an int or one extent per grid
    dimension, any size that does not divide the grid); one the device cannot take is a
    ValueError naming the kernel and the device's limits; the CPU uses none (past the device's
    limits is no error there), and refuses the blocks any device refuses with the device's own
    errors."""
    a = np.arange(35.0 * 17).reshape(35, 17)
    for block in (None, 1, 16, (5, 3), (35, 1), (1, 17)):
        out = np.zeros_like(a)
        tack.launch(k_scale2d, a.shape, (a, out), device="opencl", block=block)
        np.testing.assert_array_equal(out, 2 * a)
    with pytest.raises(ValueError, match=r"block \(5,\) does not match the grid \(35, 17\)"):
        tack.launch(k_scale2d, a.shape, (a, out), device="opencl", block=(5,))
    with pytest.raises(ValueError, match=r"block \(65536, 65536\) is larger than kernel 'k_scale2d' on "):
        tack.launch(k_scale2d, a.shape, (a, out), device="opencl", block=(1 << 16, 1 << 16))
    # an int past the limit alike (it was quietly made the limit: another block than asked)
    with pytest.raises(ValueError, match=r"block 4294967296 is larger than kernel 'k_scale2d' on .* work-items\)"):
        tack.launch(k_scale2d, a.shape, (a, out), device="opencl", block=1 << 32)
    with pytest.raises(TypeError, match=r"kernel 'k_fill': argument 'v' = 2361183241434822606848 "
                                        r"does not fit int64"):
        tack.launch(k_fill, 4, (np.zeros(4, np.int64), 1 << 71), device="opencl")
    with pytest.raises(TypeError, match="block must be an int or a tuple of ints"):
        tack.launch(k_scale2d, a.shape, (a, out), device="opencl", block="big")
    out = np.zeros_like(a)
    tack.launch(k_scale2d, a.shape, (a, out), block=(1 << 16, 1 << 16))
    np.testing.assert_array_equal(out, 2 * a)
    for block in ((5,), (0, 17), 0, -3, "big", (2.0, 1), True, (1, 1, 1), np.array(4)):
        for shape in (a.shape, (0, 17)):            # an empty grid too: checked first, alike
            said = {}
            for device in ("opencl", "cpu"):
                with pytest.raises((TypeError, ValueError)) as e:
                    tack.launch(k_scale2d, shape, (a, out), device=device, block=block)
                said[device] = (type(e.value), str(e.value))
                last = traceback.extract_tb(e.value.__traceback__)[-1]
                assert last.name == "launch", (device, block)        # the checks' frames trimmed
            assert said["cpu"] == said["opencl"], (block, shape)
    with pytest.raises(ValueError, match="is larger than") as e:
        tack.launch(k_scale2d, a.shape, (a, out), device="opencl", block=(1 << 16, 1 << 16))
    assert traceback.extract_tb(e.value.__traceback__)[-1].name == "launch"


def test_another_librarys_array_is_refused_saying_why():
    """A DLPack array (here one claiming CUDA memory) reaches the OpenCL runtime as a TypeError
    naming the parameter and why OpenCL cannot take it, never a crash."""
    from tests.dlpack_producer import Producer
    a = np.arange(6.0).reshape(2, 3)
    foreign = Producer(a.ctypes.data, a.shape, a.dtype, device=(2, 0))
    with pytest.raises(TypeError, match=r"kernel 'k_scale2d': argument 'a' is another library's "
                                        r"array \(Producer\): OpenCL kernels take OpenCL buffers"):
        tack.launch(k_scale2d, a.shape, (foreign, np.zeros_like(a)), device="opencl")


@tack.kernel
def k_to_uint32(x, out):
    i = tack.tid()
    out[i] = tack.uint32(x[i])


@tack.kernel
def k_to_int64(x, out):
    i = tack.tid()
    out[i] = tack.int64(x[i])


def test_a_float_to_integer_cast_of_nan_gives_0_as_on_the_cpu():
    """Float to integer truncates and saturates, NaN giving 0 (docs/language.md).  Intel's
    OpenCL CPU runtime gives 4294967295 for a float32 NaN cast to uint32 (SPIR-V's saturating
    OpConvertFToU): the generated code selects 0 for NaN itself."""
    for dtype in (np.float32, np.float64):
        x = np.array([np.nan, -np.nan, np.inf, -np.inf, -1.5, 2.5, 5e9, 1e30], dtype)
        for kernel, otype in ((k_to_uint32, np.uint32), (k_to_int64, np.int64)):
            got = np.full(x.size, 7, otype)
            tack.launch(kernel, x.size, (x, got), device="opencl")
            want = np.full(x.size, 7, otype)
            tack.launch(kernel, x.size, (x, want))
            info = np.iinfo(otype)
            assert got[0] == got[1] == 0, (dtype, otype, got)
            np.testing.assert_array_equal(got, want)
            assert got[2] == info.max and got[3] == info.min


@tack.kernel
def k_negated_bool(b, out32, out64):
    i = tack.tid()
    out32[i] = tack.float32(-tack.int64(b))
    out64[i] = -b + 0.5


def test_a_negated_bool_converted_to_float_keeps_its_sign():
    """``float(-int(b))`` with a bool ``b`` is -1.0 for True.  LLVM's optimizer makes it
    ``sitofp i1``, which LLVM 22's SPIR-V backend converted as unsigned (+1.0, seen on
    Intel's OpenCL runtime): the SPIR-V targets rewrite it as a select."""
    for b in (True, False):
        out32, out64 = np.zeros(3, np.float32), np.zeros(3)
        tack.launch(k_negated_bool, 3, (b, out32, out64), device="opencl")
        np.testing.assert_array_equal(out32, -float(b))
        np.testing.assert_array_equal(out64, -float(b) + 0.5)


CHECKED = textwrap.dedent("""
    import json, sys, numpy as np, tack, tack.cache

    @tack.kernel
    def fill(out):
        i = tack.tid()
        out[i] = i + 1

    @tack.kernel
    def third(out, x):
        i = tack.tid()
        out[i] = x[2]

    @tack.kernel
    def plane(out):
        i, j = tack.tid()
        out[i, j] = i * 10 + j

    said = []
    def refused(kernel, dims, args):
        try:
            tack.launch(kernel, dims, args, device="opencl")
        except IndexError as e:
            said.append(str(e))
        else:
            said.append(None)

    out = np.zeros(10, np.int64)
    refused(fill, 1_000_000, (out,))                    # past 'out' along the grid
    refused(third, 10, (out, np.zeros(2, np.int64)))    # x[2] of two elements
    p = np.zeros((4, 3), np.int64)
    refused(plane, (4, 5), (p,))                        # the grid's second dimension past axis 1
    kept = tack.to_device(np.zeros(10, np.int64), "opencl")
    refused(fill, 11, (kept,))                          # an array kept on the device
    untouched = bool((out == 0).all() and (p == 0).all())
    tack.launch(fill, 10, (out,), device="opencl")      # the grid that fits runs
    tack.launch(third, 10, (out, np.arange(3)), device="opencl")
    tack.launch(plane, (4, 3), (p,), device="opencl")
    untouched = untouched and bool((kept.numpy() == 0).all())
    tack.launch(fill, 10, (kept,), device="opencl")
    print(json.dumps({"said": said, "untouched": untouched, "out": out.tolist(),
                      "kept": kept.numpy().tolist(),
                      "p": p.tolist(), "misses": tack.cache.stats()["misses"]["variant"]}))
""")


def test_a_device_launch_makes_the_cpus_grid_and_constant_index_checks(tmp_path):
    """A launch on a device refuses, before anything runs, a grid that runs past an array the
    kernel indexes by the thread index on every point, and an array without the element a
    constant index of every point names, saying so as on the CPU; cold (compiled) and warm (the
    check's record read back from the cache).  Before, the launch ran: the OpenCL CPU runtime
    wrote past the 10-element array and the process died (SIGSEGV), where a GPU would have
    faulted or written over another buffer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["TACK_CACHE_DIR"] = str(tmp_path / "cache")
    script = tmp_path / "checked.py"
    script.write_text(CHECKED)
    for warm in (False, True):
        p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        got = json.loads(p.stdout.strip().splitlines()[-1])
        grid, index, axis1, kept = got["said"]
        assert grid is not None and "the grid (1000000,) runs past 'out'" in grid
        assert "'out' has 10 elements along that axis" in grid and f"{script}:7" in grid
        assert index is not None and "index 2 is out of bounds for 'x'" in index
        assert "'x' has 2 elements" in index and "nothing was run" in index
        assert axis1 is not None and "the grid (4, 5) runs past 'out'" in axis1
        assert "on axis 1 by tack.tid()[1]" in axis1
        assert kept is not None and "the grid (11,) runs past 'out'" in kept
        assert got["untouched"] and got["kept"] == list(range(1, 11))
        assert got["out"] == [2] * 10 and got["p"] == [[i * 10 + j for j in range(3)] for i in range(4)]
        assert (got["misses"] == 0) == warm           # warm: every check read from the cache


# A signal handler that launches on OpenCL while its thread is inside an OpenCL launch
# (``kernel``: between the kernel's set_args and its enqueue) or holds the runtime's lock
# (``devices``: around discovery and the making of a context).
NESTED = r"""
import faulthandler, signal, sys
faulthandler.dump_traceback_later(60, exit=True)        # a deadlock: a traceback, then exit 1
import numpy as np
import pyopencl
import tack
from tack.backends import opencl_runtime


@tack.kernel
def add(a, out):
    i = tack.tid()
    out[i] = a[i] + 1.0


@tack.kernel
def twice(a, out):
    i = tack.tid()
    out[i] = a[i] * 2.0


got, fired = [], []


def handler(signum, frame):
    b, other = np.full(8, 100.0), np.zeros(8)
    tack.launch(twice, 8, (b, other), device="opencl")  # another kernel runs
    got.append(("twice", bool((other == 200.0).all())))
    try:
        tack.launch(add, 8, (b, other), device="opencl")
        got.append(("add", bool((other == 101.0).all())))
    except RuntimeError as e:
        got.append(("refused", str(e)))


a, out = np.arange(8.0), np.zeros(8)
if sys.argv[1] == "kernel":
    tack.launch(add, 8, (a, out), device="opencl")     # both loaded: the next launches only run
    tack.launch(twice, 8, (a, out), device="opencl")
    # Intel's OpenCL runtime, once loaded, has SIGUSR1 for itself: Python's handler back
    signal.signal(signal.SIGUSR1, handler)
    real = pyopencl.enqueue_nd_range_kernel

    def enqueue(*args, **kw):
        if not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGUSR1)
        return real(*args, **kw)
    pyopencl.enqueue_nd_range_kernel = enqueue
    tack.launch(add, 8, (a, out), device="opencl")
else:
    signal.signal(signal.SIGUSR1, handler)
    with opencl_runtime._lock:
        signal.raise_signal(signal.SIGUSR1)
    tack.launch(add, 8, (a, out), device="opencl")
print(repr(got))
print("outer", bool((out == a + 1.0).all()))
"""


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="signal.SIGUSR1 does not exist on "
                    "this platform (Windows): no signal can interrupt a thread inside a launch")
@pytest.mark.parametrize("inside", ["kernel", "devices"])
def test_a_launch_from_a_signal_handler_inside_an_opencl_launch(tmp_path, inside):
    """A signal handler's launches on the thread inside an OpenCL launch of ``add`` (``kernel``)
    or holding the runtime's lock (``devices``).  Another kernel runs; ``add`` itself is refused
    with a RuntimeError naming it, since its one kernel object holds the outer launch's
    arguments (re-entering would overwrite them), and the outer launch's result is right.
    Holding the runtime's lock, the handler's launches find the devices and make the context
    themselves (the lock is re-entrant) and both run.  Every lock was a plain Lock: the
    handler's launch waited for its own thread for ever."""
    p = run_script(tmp_path, "nested.py", NESTED, inside)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    *_, said, outer = p.stdout.splitlines()
    assert outer == "outer True", p.stdout
    got = eval(said)                        # noqa: S307 - the child's repr of a list of pairs
    assert got[0] == ("twice", True), got
    if inside == "devices":
        assert got[1] == ("add", True), got
    else:
        what, message = got[1]
        assert what == "refused" and message.startswith("kernel 'add") and \
            "already under way on this thread" in message, got


@tack.kernel
def k_split_write(a, b):
    i = tack.tid()
    if i < 3:
        a[i] = 1.0
    else:
        b[i] = 2.0


def test_overlapping_views_written_through_both_keep_each_ones_writes():
    """Two views of one array that overlap (``y[0:4]`` and ``y[2:6]``; a row and a column of a
    matrix), each written at points the other is not: each had a device buffer of its own and
    was copied back whole, the second over the first's results (``y[2]`` came back 0, the CPU
    gives 1).  Now an array whose memory another written one overlaps is copied back only where
    the launch changed it, as the CPU's in-place launch leaves it."""
    def run(device):
        y, z, w = np.zeros(6), np.zeros((4, 4)), np.arange(8.0)
        tack.launch(k_split_write, dim=4, args=(y[0:4], y[2:6]), device=device)
        tack.launch(k_split_write, dim=4, args=(z[0], z[:, 0]), device=device)
        tack.launch(k_split_write, dim=4, args=(w[::2], w[1::2]), device=device)   # disjoint
        return y, z, w
    for got, want in zip(run("opencl"), run("cpu")):
        np.testing.assert_array_equal(got, want)
    y, z, _ = run("opencl")
    assert y.tolist() == [1, 1, 1, 0, 0, 2] and z[0, 0] == 1 and z[3, 0] == 2


@tack.kernel
def k_pow_exact(a, y, out):
    i = tack.tid()
    out[i, 0] = a[i] ** 2
    out[i, 1] = a[i] ** 0.5
    out[i, 2] = a[i] ** y[i]


def test_the_exact_rewrites_of_pow_are_made_on_opencl_too():
    """``x ** 2`` is ``x * x`` and ``x ** 0.5`` a square root (exact, as docs/language.md says),
    with a literal exponent or one that is 2 or 0.5 at run time: made in the CPU's ``pow``
    alone, so on OpenCL ``0.1 ** 2`` was the device's ``pow``, 0.01, for Python's
    0.010000000000000002, and ``1e200 ** 0.5`` 9.999999999999998e+99 for 1e+100."""
    import math
    a = np.array([0.1, 1e200, 1e-200, 2.5, -np.inf, -0.0, np.nan, 3.0, 1e-300])
    y = np.array([2.0, 0.5, 2.0, 0.5, 0.5, 0.5, 2.0, 0.5, 2.0])

    def python(x, e):
        x = float(x)                        # Python's float, as the docs compare with (NumPy's warns)
        if x == -math.inf and e == 0.5:
            return math.inf                 # pow's, as Python's math.pow gives it
        try:
            return x ** e
        except OverflowError:
            return math.inf
    want = np.array([[python(x, 2.0), python(x, 0.5), python(x, e)] for x, e in zip(a, y)])
    for device in ("opencl", "cpu"):
        out = np.zeros((a.size, 3))
        tack.launch(k_pow_exact, dim=a.size, args=(a, y, out), device=device)
        assert out.tobytes() == want.tobytes() or (
            np.array_equal(out, want, equal_nan=True)
            and np.array_equal(np.signbit(out), np.signbit(want))), (device, out, want)


@tack.kernel
def k_store_scalar(out, s):
    i = tack.tid()
    out[i] = s


def test_a_python_int_past_int64_is_told_about_np_uint64_on_opencl_too():
    """The CPU's refusal of 2**63 for an int64 parameter says to pass np.uint64; a device's
    said only "Python int too large to convert to C long".  One hint, for both, and one reason
    ("argument out of range", where a device said the conversion's "Python int too large...")."""
    with pytest.raises(TypeError) as e:
        tack.launch(k_store_scalar, 1, (np.zeros(1, np.int64), 2**63), device="opencl")
    assert str(e.value).startswith("kernel 'k_store_scalar': argument 's' = 9223372036854775808 "
                                   "does not fit int64 (argument out of range)"), str(e.value)
    with pytest.raises(TypeError) as cpu:
        tack.launch(k_store_scalar, 1, (np.zeros(1, np.int64), 2**63))
    assert str(cpu.value) == str(e.value)
    assert str(e.value).endswith("; a Python int argument is int64: pass np.uint64(...) for one "
                                 "up to 2**64 - 1"), str(e.value)
    with pytest.raises(TypeError) as e:                 # a negative one: no such hint
        tack.launch(k_store_scalar, 1, (np.zeros(1, np.int64), -2**63 - 1), device="opencl")
    assert "np.uint64" not in str(e.value)


FIBONACCI = textwrap.dedent("""\
    import numpy as np, tack

    @tack.kernel
    def fib(out):
        i = tack.tid()
        a = 0
        b = 1
        for _ in range(i):
            a, b = b, a + b
        out[i] = a

    out = np.zeros(16, np.int64)
    tack.launch(fib, dim=16, args=(out,), device="opencl")
    print(out.tolist())
    """)


def test_the_workaround_docs_give_for_the_cpu_runtimes_vectorizer_crash(tmp_path, monkeypatch):
    """docs/opencl.md: Intel's CPU runtime (2026.2) crashes building this kernel (its vectorizer,
    ``vplan-vec``); with ``CL_CONFIG_USE_VECTORIZER=False``, as the docs say, it builds and gives
    the CPU backend's numbers."""
    monkeypatch.setenv("CL_CONFIG_USE_VECTORIZER", "False")
    p = run_script(tmp_path, "fib.py", FIBONACCI, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    want = [0, 1]
    while len(want) < 16:
        want.append(want[-1] + want[-2])
    assert p.stdout.strip() == str(want), p.stdout


# A constant whose bytes spell " i0 " (0x20306920): LLVM writes a constant array as a byte string,
# c"...", in which the SPIR-V targets' check for integer types of odd widths read a type i0.
I0_BYTES = tack.constant(np.array([1, 0x20306920, 3, 4], dtype=np.int32))


@tack.kernel
def k_constant_spelling_a_type(o):
    i = tack.tid()
    o[i] = I0_BYTES[i % 4]


def test_a_constant_whose_bytes_read_as_a_type_builds_for_spirv():
    """The kernel was refused on every SPIR-V target ("LLVM's optimizer left an integer type
    SPIR-V cannot hold (i0)") for its constant's values; it builds for spirv:generic and
    level_zero:pvc and runs on OpenCL as on the CPU."""
    import tack.aot
    for target in ("spirv:generic", "level_zero:pvc"):
        tack.aot.compile(k_constant_spelling_a_type, target, (np.zeros(4, np.int32),))
    cpu, ocl = np.zeros(8, np.int32), np.zeros(8, np.int32)
    tack.launch(k_constant_spelling_a_type, 8, (cpu,))
    tack.launch(k_constant_spelling_a_type, 8, (ocl,), device="opencl")
    np.testing.assert_array_equal(ocl, cpu)
    assert cpu[1] == 0x20306920


@tack.kernel
def k_unsigned_product_overflows(x, y, o):
    i = tack.tid()
    a = x[i]
    b = y[i]
    ov = 0
    if b != 0 and a * b // b != a:      # LLVM: llvm.umul.with.overflow
        ov = 1
    o[i] = ov


@pytest.mark.parametrize("dt", [np.uint32, np.uint64])
def test_an_unsigned_overflow_check_runs_on_opencl(dt):
    """LLVM makes this check llvm.umul.with.overflow, which the SPIR-V backend emits as
    OpUMulExtended: valid SPIR-V (spirv-val, ocloc), which Intel's OpenCL CPU runtime cannot build
    ("Symbols not found: _Z20__spirv_UMulExtendedii"): the launch failed.  It is now the product
    and a division, and runs as on the CPU."""
    big = np.iinfo(dt).max // 2 + 1
    x = np.array([3, big, 5, big, 0], dt)
    y = np.array([7, 2, 0, 1, 9], dt)
    cpu, ocl = np.zeros(5, np.int64), np.zeros(5, np.int64)
    tack.launch(k_unsigned_product_overflows, 5, (x, y, cpu))
    tack.launch(k_unsigned_product_overflows, 5, (x, y, ocl), device="opencl")
    np.testing.assert_array_equal(cpu, [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(ocl, cpu)


@tack.kernel
def k_reverse_8_bits(x, o):
    i = tack.tid()
    v = x[i]
    r = v & 0
    for b in range(8):                  # a loop LLVM makes llvm.bitreverse of
        r = (r << 1) | ((v >> b) & 1)
    o[i] = r


@tack.kernel
def k_reverse_bits_32(x, o):
    i = tack.tid()
    v = x[i]
    v = ((v >> 1) & 0x55555555) | ((v & 0x55555555) << 1)
    v = ((v >> 2) & 0x33333333) | ((v & 0x33333333) << 2)
    v = ((v >> 4) & 0x0F0F0F0F) | ((v & 0x0F0F0F0F) << 4)
    v = ((v >> 8) & 0x00FF00FF) | ((v & 0x00FF00FF) << 8)
    o[i] = (v >> 16) | (v << 16)


@tack.kernel
def k_reverse_bits_64(x, o):
    i = tack.tid()
    v = x[i]
    v = ((v >> 1) & 0x5555555555555555) | ((v & 0x5555555555555555) << 1)
    v = ((v >> 2) & 0x3333333333333333) | ((v & 0x3333333333333333) << 2)
    v = ((v >> 4) & 0x0F0F0F0F0F0F0F0F) | ((v & 0x0F0F0F0F0F0F0F0F) << 4)
    v = ((v >> 8) & 0x00FF00FF00FF00FF) | ((v & 0x00FF00FF00FF00FF) << 8)
    v = ((v >> 16) & 0x0000FFFF0000FFFF) | ((v & 0x0000FFFF0000FFFF) << 16)
    o[i] = (v >> 32) | (v << 32)


@pytest.mark.parametrize("kern, dt, bits", [(k_reverse_8_bits, np.uint32, 8),
                                            (k_reverse_bits_32, np.uint32, 32),
                                            (k_reverse_bits_64, np.uint64, 64)],
                         ids=["loop-8", "masks-32", "masks-64"])
def test_bit_reversals_run_on_opencl(kern, dt, bits):
    """LLVM's optimizer makes a bit reversal llvm.bitreverse, which the SPIR-V backend cannot emit
    for OpenCL (OpBitReverse is a Shader instruction): the compile aborted ("Unable to meet
    SPIR-V requirements for this target").  It is now the masks and shifts, and runs as on the
    CPU: the bits reversed."""
    x = np.random.default_rng(7).integers(0, np.iinfo(dt).max, 64, dtype=dt, endpoint=True)
    cpu, ocl = np.zeros_like(x), np.zeros_like(x)
    tack.launch(kern, x.size, (x, cpu))
    tack.launch(kern, x.size, (x, ocl), device="opencl")
    np.testing.assert_array_equal(ocl, cpu)
    low = [int(v) & ((1 << bits) - 1) for v in x]
    want = [int(format(v, f"0{bits}b")[::-1], 2) for v in low]
    assert [int(v) for v in cpu] == want
