#!/usr/bin/env bash
# GPU check of the CUDA runtime (docs/gpu-runtime.md), prepared for a machine with an NVIDIA GPU
# (an H200) that reaches no package registry.  Without a GPU it says so and exits 0.
#
#   bash benchmarks/gpu_check.sh [--size N] [--runs R] [--big B]
#
# Wheels: the machine cannot download.  Beforehand, on a machine that can, put every wheel the
# check needs next to this script (benchmarks/gpu_wheels/ is not committed):
#
#   pip download -d benchmarks/gpu_wheels --python-version 3.11 --only-binary=:all: \
#       cuda-python numpy llvmlite pytest hypothesis scikit-image pyyaml jinja2 archspec
#
# (the Python version of the GPU machine's interpreter).  When that directory exists (or
# TACK_GPU_WHEELS names another) they are installed from it with `pip install --no-index`, and
# Tack itself from this checkout (PYTHONPATH); nothing else is fetched.
#
# What it does, in order, each step printing what it found:
#  1. the runtime straight through tack.backends.cuda_runtime (no dispatcher): devices, keys,
#     a toolchain-built kernel loaded and launched on NumPy arrays and device arrays, a debug
#     error record, a device array's numpy() and free on a fresh thread, and (where PyTorch is
#     installed) a tensor PyTorch produces asynchronously, read by a launch;
#  2. pytest tests/backends/test_cuda_hip_runtime.py;
#  3. through tack.launch(device="cuda"): the language suite and the contour against the CPU;
#  4. the first contour call (sphere(--size), default 21) in new processes, --runs each
#     (default 10; medians): cache off, only lowered kernels stored, PTX stored, and PTX + SASS
#     stored (tack.aot's entries for the GPU's sm, where a packaged ptxas is here: add
#     nvidia-cuda-nvcc to the wheels, or set TACK_PTXAS; else that row is skipped, said why);
#  5. the steady-state contour at --big (default 256)^3 on CUDA and on the CPU backend, and a
#     2-D kernel whose warps read consecutive elements against the same one read a row apart
#     (what mapping the grid's last dimension on x changed: benchmarks/_coalescing.py);
#  6. a site bundle built for the GPU's arch (bundles build), then the contour served from it
#     alone with nothing compiled (bundles check --device cuda).
# Targets (H200): first call with PTX stored <= 20 ms and >= 20x faster than cold; steady state
# at 256^3 >= 10x the CPU.  Timings are printed against their targets, never failed on; a
# failed check (1-3, 6) makes the exit status 1.
#
# Dry run of the script's plumbing without a GPU: put a fake `nvidia-smi` printing
# "GPU 0: ..." on PATH and set TACK_GPU_CHECK_DEVICE=cpu (steps 3-5 then run on that device;
# step 1 reports the missing runtime as a failure).

set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY="${PYTHON:-python3}"
SIZE=21
RUNS=10
BIG=256
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --big) BIG="$2"; shift 2 ;;
        *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
    esac
done

# -- is there an NVIDIA GPU? -----------------------------------------------------------------
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus="$(nvidia-smi -L 2>/dev/null | grep -i '^GPU ' || true)"
fi
if [ -z "$gpus" ] && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi lists none, no /dev/nvidia*): nothing to check"
    exit 0
fi
echo "gpu_check: GPUs:"
echo "${gpus:-  (nvidia-smi not found; /dev/nvidia* present)}" | sed 's/^/  /'

# -- wheels carried along --------------------------------------------------------------------
WHEELS="${TACK_GPU_WHEELS:-$HERE/gpu_wheels}"
if [ -d "$WHEELS" ]; then
    echo "gpu_check: installing from $WHEELS (--no-index)"
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" \
        cuda-python numpy llvmlite pytest hypothesis scikit-image pyyaml jinja2 archspec \
        || { echo "gpu_check: installing the carried wheels failed"; exit 1; }
else
    echo "gpu_check: no wheel directory ($WHEELS); using what is installed"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tack-gpu-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
status=0

# -- 1. the runtime on its own ---------------------------------------------------------------
echo
echo "== 1. tack.backends.cuda_runtime on the device"
cat > "$WORK/runtime_check.py" <<'EOF'
import numpy as np
import tack
from tack.backends import cuda_runtime as cr
from tack.argtypes import argtypes_of
from tack.compiler import compile_variant, lower

print(cr.describe())
if not cr.available():
    raise SystemExit(f"FAILED: a GPU is here but the CUDA runtime sees none: {cr.unavailable_reason()}")
print("candidate keys:", [a for a, _ in cr.candidate_keys()][:4], "...")
target = cr.toolchain_target()
assert target.key == cr.host_key() == cr.lookup_keys()[0]

@tack.kernel
def saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]

@tack.kernel
def past(a, out):
    i = tack.tid()
    out[i] = a[i + 1]

def build(kernel, args, grid, debug=False):
    types = tuple(argtypes_of(kernel, args))
    return compile_variant(lower(kernel, {}, debug), None, types, grid, target, debug)

n = 1_000_003
x = np.random.default_rng(0).random(n, dtype=np.float32)
y = np.ones(n, np.float32)
out = np.zeros(n, np.float32)
art = build(saxpy, (np.float32(2), x, y, out), 1)
k = cr.load(art.payload, art.meta)
cr.launch(k, art.meta, (np.float32(2), x, y, out), (n,))
np.testing.assert_allclose(out, 2 * x + y, rtol=1e-6)
dx, dout = cr.to_device(x), cr.to_device(np.zeros(n, np.float32))
cr.launch(k, art.meta, (np.float32(2), dx, dx, dout), (n,), block=128)
np.testing.assert_allclose(dout.numpy(), 3 * x, rtol=1e-6)
# an older sm's PTX, JIT-compiled by the driver for this GPU
older = [a for a in cr.arch_candidates() if a != target.name and not a.endswith("a")]
if older:
    from tack.backends.cuda import target as cuda_target
    t_old = cuda_target(older[-1])
    types = tuple(argtypes_of(saxpy, (np.float32(2), x, y, out)))
    art_old = compile_variant(lower(saxpy, {}, False), None, types, 1, t_old, False)
    k_old = cr.load(art_old.payload, art_old.meta)
    out[:] = 0
    cr.launch(k_old, art_old.meta, (np.float32(2), x, y, out), (n,))
    np.testing.assert_allclose(out, 2 * x + y, rtol=1e-6)
    print(f"PTX for {older[-1]} JIT-compiled and run: ok")
a = np.arange(8, dtype=np.float32)
o = np.zeros(8, np.float32)
art = build(past, (a, o), 1, debug=True)
k = cr.load(art.payload, art.meta)
err = cr.launch(k, art.meta, (a, o), (8,), debug=True)
assert err is not None and err[0] > 0 and err[2] == 8 and err[3] == 8, err
print("runtime: saxpy on NumPy and device arrays, debug error record: ok")
try:
    import cupy
except ImportError:
    cupy = None
    print("(CuPy not installed: __cuda_array_interface__ from another library not checked)")
if cupy is not None:
    c = cupy.zeros(n, cupy.float32)
    art = build(saxpy, (np.float32(2), x, y, out), 1)
    cr.launch(cr.load(art.payload, art.meta), art.meta, (np.float32(1), dx, dx, c), (n,))
    np.testing.assert_allclose(cupy.asnumpy(c), 2 * x, rtol=1e-6)
    print("CuPy array through __cuda_array_interface__: ok")
# A device array read back and freed on a thread that never made a context current (the review:
# numpy() failed there and the free leaked).
import threading
d_thread = cr.to_device(x)
e_thread = cr.to_device(y)
seen = {}
def on_thread():
    try:
        seen["numpy"] = d_thread.numpy()
        d_thread.free()
    except Exception as exc:            # reported below
        seen["error"] = exc
t = threading.Thread(target=on_thread)
t.start(); t.join()
assert "error" not in seen, seen.get("error")
np.testing.assert_array_equal(seen["numpy"], x)
def drop():
    global e_thread
    del e_thread
t = threading.Thread(target=drop)
t.start(); t.join()
print("device array: numpy() and free on a fresh thread, a del on another: ok")
# A PyTorch tensor written by kernels PyTorch queued just before (its __cuda_array_interface__
# is version 2, with no stream: Tack waits for the legacy default stream before reading it).
try:
    import torch
except ImportError:
    torch = None
    print("(PyTorch not installed: an asynchronously produced tensor not checked)")
if torch is not None and torch.cuda.is_available():
    big = 1 << 24
    src = torch.arange(big, dtype=torch.float32, device="cuda")
    for _ in range(20):                 # queued work, still running when Tack reads
        src = src * 1.0001 + 1
    res = torch.zeros(big, dtype=torch.float32, device="cuda")
    host = np.zeros(big, np.float32)
    art = build(saxpy, (np.float32(2), host, host, host), 1)
    cr.launch(cr.load(art.payload, art.meta), art.meta, (np.float32(1), src, src, res), (big,))
    np.testing.assert_allclose(res.cpu().numpy(), 2 * src.cpu().numpy(), rtol=1e-5)
    print("PyTorch tensor produced asynchronously, read after its stream: ok")
EOF
"$PY" "$WORK/runtime_check.py" || status=1

# -- 2. the runtime's tests ------------------------------------------------------------------
echo
echo "== 2. pytest tests/backends/test_cuda_hip_runtime.py"
"$PY" -m pytest -q -p no:cacheprovider tests/backends/test_cuda_hip_runtime.py || status=1

# -- 3. through the dispatcher ----------------------------------------------------------------
echo
echo "== 3. tack.launch(device='cuda'): the language suite and the contour against the CPU"
cat > "$WORK/dispatch_check.py" <<'EOF'
import os
import sys
import numpy as np
import tack

DEVICE = os.environ.get("TACK_GPU_CHECK_DEVICE", "cuda")

@tack.kernel
def probe(a):
    a[tack.tid()] = 1.0

try:
    tack.launch(probe, 1, (np.zeros(1),), device=DEVICE)
except ValueError as e:
    if "not available" in str(e):
        print(f"SKIPPED: this Tack's dispatcher does not take device='cuda' yet ({e}); "
              "register runtime('cuda') in tack/backends/__init__.py")
        raise SystemExit(3)
    raise
sys.path.insert(0, "tests/kernels")
from tests.backends.gpu_tools import language_suite_on
# refused: a CompileError (math CUDA has no library-free lowering for), not a failure
ran, failed, refused = language_suite_on(DEVICE)
print(f"language suite on {DEVICE}: {ran} ran, {len(failed)} failed, {len(refused)} refused at compile time")
for k, v in list(failed.items())[:20]:
    print("  FAILED", k, v)
from fields import SPHERE_LEVEL, sphere
from tack.kernels.contour import contour
bad = 0
for n in (21, 64, 97):
    f = sphere(n)
    vc, fc = contour(f, SPHERE_LEVEL)
    vg, fg = contour(f, SPHERE_LEVEL, device=DEVICE)
    def tri(v, fa):
        t = np.sort(np.round(v[fa], 4).reshape(len(fa), 3, 3).view([("", v.dtype)] * 3).reshape(len(fa), 3), axis=1)
        return np.sort(t.view(v.dtype).reshape(len(fa), 9), axis=0)
    same = len(fc) == len(fg) and np.allclose(tri(vg, fg), tri(vc, fc), atol=1e-4)
    bad += not same
    print(f"contour sphere({n}): cpu {len(fc)} triangles, {DEVICE} {len(fg)}: {'same surface' if same else 'DIFFERENT'}")
sys.exit(1 if failed or bad else 0)
EOF
"$PY" "$WORK/dispatch_check.py"
rc=$?
if [ $rc -eq 3 ]; then
    echo "gpu_check: steps 4 and 5 need tack.launch(device='cuda'): stopping here"
    exit $status
fi
[ $rc -eq 0 ] || status=1

# -- 4. first call in new processes ------------------------------------------------------------
echo
echo "== 4. first contour call (sphere($SIZE)) in new processes, $RUNS runs each, medians"
cat > "$WORK/first.py" <<'EOF'
import json, os, sys, time
t0 = time.perf_counter()
import numpy as np
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "kernels"))
from fields import SPHERE_LEVEL, sphere
import tack
from tack.kernels.contour import contour
from tack.backends import cuda_runtime as cr
f = sphere(int(sys.argv[1]))
t1 = time.perf_counter()
device = os.environ.get("TACK_GPU_CHECK_DEVICE", "cuda")
if device.startswith("cuda"):
    cr.get_device(device)                   # the driver's context: a per-process cost, apart
t2 = time.perf_counter()
contour(f, SPHERE_LEVEL, device=device)
t3 = time.perf_counter()
print(json.dumps({"first_ms": (t3 - t2) * 1e3, "context_ms": (t2 - t1) * 1e3,
                  "import_ms": (t1 - t0) * 1e3, "sass_refused": cr._refused_count[0]}))
EOF
cat > "$WORK/sass.py" <<'EOF'
import os, sys
import tack.aot
from tack.backends import cuda_runtime as cr
from tack.backends.gpu import sass_tool
from tack.kernels.contour import tack_warm
arch = cr.build_arch()
path, what = sass_tool(arch.split(":")[1])
if path is None:
    print(f"skipped: no SASS for {arch} ({what})")
    sys.exit(0)
n = int(sys.argv[2])
arts = tack.aot.build(tack.aot.target_of(arch), tack_warm((n, n, n)))
tack.aot.save(arts, sys.argv[1])            # the same keys as the PTX entries: replaced
print(f"stored: {len(arts)} variants with SASS for {arch} ({what})")
EOF
"$PY" - "$WORK" "$SIZE" "$RUNS" <<'EOF'
import json, os, shutil, statistics, subprocess, sys
work, size, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
py = sys.executable

def once(cache, directory):
    env = dict(os.environ, TACK_CACHE=cache, TACK_CACHE_DIR=directory)
    r = subprocess.run([py, os.path.join(work, "first.py"), size], env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode:
        raise SystemExit(f"a first-call process failed:\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])

full = os.path.join(work, "cache-full")
once("write", full)                          # lowered kernels and PTX stored
lowered = os.path.join(work, "cache-lowered")
shutil.copytree(full, lowered)
for d, subdirs, _ in os.walk(lowered):
    if os.path.basename(d) == "variants":
        shutil.rmtree(d)
modes = [("cache off", "off", os.path.join(work, "cache-none")),
         ("only lowered stored", "read", lowered),
         ("PTX stored", "read", full)]
sass = os.path.join(work, "cache-sass")
shutil.copytree(full, sass)
r = subprocess.run([py, os.path.join(work, "sass.py"), sass, size], capture_output=True, text=True,
                   timeout=600, env=dict(os.environ, TACK_CACHE_DIR=sass))
said = (r.stdout + r.stderr).strip().splitlines()
print(f"  PTX + SASS: {said[-1] if said else 'no output'}")
if r.returncode == 0 and said and said[-1].startswith("stored"):
    modes.append(("PTX + SASS stored", "read", sass))
res = {label: [] for label, _, _ in modes}
for _ in range(runs):                        # interleaved, so drift hits every mode alike
    for label, cache, d in modes:
        res[label].append(once(cache, d))
med = {label: statistics.median(r["first_ms"] for r in rs) for label, rs in res.items()}
ctx = statistics.median(r["context_ms"] for rs in res.values() for r in rs)
for label in med:
    print(f"  {label:22s} first call {med[label]:9.1f} ms (median of {runs})")
print(f"  (CUDA context, made before the timed call: {ctx:.1f} ms median)")
if "PTX + SASS stored" in med:
    refused = sum(r["sass_refused"] for r in res["PTX + SASS stored"])
    print(f"  (SASS refused by the driver in {refused} of {runs} runs: the PTX loaded instead)")
    s_ms = med["PTX + SASS stored"]
    print(f"target: first call with SASS stored <= 10 ms: {s_ms:.1f} ms -> {'met' if s_ms <= 10 else 'NOT met'}")
warm, cold = med["PTX stored"], med["cache off"]
print(f"target: first call with PTX stored <= 20 ms: {warm:.1f} ms -> {'met' if warm <= 20 else 'NOT met'}")
print(f"target: >= 20x faster than cold: {cold / warm:.1f}x -> {'met' if cold / warm >= 20 else 'NOT met'}")
EOF
[ $? -eq 0 ] || echo "gpu_check: the first-call timing did not run"

# -- 5. steady state ---------------------------------------------------------------------------
echo
echo "== 5. steady-state contour at ${BIG}^3: CUDA vs the CPU backend"
"$PY" - "$BIG" <<'EOF'
import os, statistics, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "kernels"))
from fields import SPHERE_LEVEL, sphere
from tack.kernels.contour import contour
f = sphere(int(sys.argv[1]))

def median_ms(device, runs):
    contour(f, SPHERE_LEVEL, device=device)          # compiled, loaded, warm
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        contour(f, SPHERE_LEVEL, device=device)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)

gpu = median_ms(os.environ.get("TACK_GPU_CHECK_DEVICE", "cuda"), 10)
cpu = median_ms("cpu", 5)
print(f"  cuda {gpu:8.1f} ms   cpu ({os.cpu_count()} cores) {cpu:8.1f} ms   (medians)")
print(f"target: CUDA >= 10x the CPU at {sys.argv[1]}^3: {cpu / gpu:.1f}x -> "
      f"{'met' if cpu / gpu >= 10 else 'NOT met'}")
EOF
[ $? -eq 0 ] || echo "gpu_check: the steady-state timing did not run"
# What the grid's last dimension on x buys (docs/gpu.md): dst = 2 * src over 4096^2 float32 on
# the device, read in a warp's order against the earlier mapping's access (benchmarks/_coalescing.py).
"$PY" benchmarks/_coalescing.py "${TACK_GPU_CHECK_DEVICE:-cuda}" 4096 \
    || echo "gpu_check: the coalescing timing did not run"

# -- 6. a site bundle for this GPU ---------------------------------------------------------------
echo
DEVICE="${TACK_GPU_CHECK_DEVICE:-cuda}"
echo "== 6. a site bundle for this device's arch: bundles build, then bundles check --device $DEVICE"
ARCH="$("$PY" -c "
import sys, tack
d = [x.target for x in tack.devices() if x.device.split(':')[0] == sys.argv[1]]
print(d[0] if d else '')" "$DEVICE")"
if [ -z "$ARCH" ]; then
    echo "gpu_check: tack.devices() lists no $DEVICE device"; status=1
else
    kind="${ARCH%%:*}"; name="${ARCH#*:}"
    printf 'version: 1\nbuild:\n  archs:\n    %s: [%s]\n  kernels:\n    - module: tack.kernels.contour\n      shapes: [[21, 21, 21]]\n' \
        "$kind" "$name" > "$WORK/site.yaml"
    if "$PY" -m tack.site bundles build "$WORK/site.yaml" --output "$WORK/bundles"; then
        "$PY" -m tack.site bundles check "$WORK/bundles" --device "$DEVICE" || status=1
    else
        echo "gpu_check: bundles build for $ARCH failed"; status=1
    fi
fi

echo
[ $status -eq 0 ] && echo "gpu_check: checks passed" || echo "gpu_check: a check FAILED"
exit $status
