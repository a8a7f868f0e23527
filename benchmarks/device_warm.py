"""First contour call on a device runtime in a new process: cold, warm from the portable code
alone, and warm with the code the driver built from it stored back (``runtime.store_back``).

    python benchmarks/device_warm.py [--device opencl] [--processes 7] [--size 21]

Here the device is ``opencl`` (Intel's OpenCL CPU runtime building Tack's SPIR-V): the one
device runtime that runs on a machine without a GPU.  On a Level Zero GPU, ``--device
level_zero`` measures the same three cases (SPIR-V, then the driver's native code).

Each case runs in fresh processes, interleaved, and medians are printed with the ratios:

1. **cold**: an empty cache directory (lower, generate SPIR-V, driver build, launch);
2. **portable only**: a directory holding the SPIR-V entries alone, read-only
   (``TACK_CACHE=read``), so each process has the driver build it again;
3. **driver's code stored**: the directory as a first process left it, with the driver's
   binaries stored back under the device's key.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np, tack
from tack.kernels import contour as mod
device, n = sys.argv[1], int(sys.argv[2])
real = tack.launch
tack.launch = lambda k, dim, args=(), *_, **kw: real(k, dim, args, device, kw.get("block"))
p = np.indices((n, n, n)).astype(np.float32)
c = (n - 1) / 2
f = np.sqrt(((p - c) ** 2).sum(axis=0)).astype(np.float32)
t1 = time.perf_counter()
v, fc = mod.contour(f, n / 3)
t2 = time.perf_counter()
formats = sorted(getattr(getattr(v, "kernel", None), "format", "?")
                 for k in (mod.classify, mod.emit) for v in k._variants.values())
print(json.dumps({"first_call": t2 - t1, "ntri": len(fc), "formats": formats}))
"""


def run(device, size, env):
    p = subprocess.run([sys.executable, "-c", RUN, device, str(size)], env=env,
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"benchmark process failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def strip_driver_entries(cache):
    """Remove the variant entries stored back from a driver's build, keeping the portable ones."""
    from tack.cache.entry import KIND_VARIANT, decode
    removed = 0
    for dirpath, _, files in os.walk(cache):
        for name in files:
            if name.endswith(".tvar"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as fh:
                    _, meta, _ = decode(fh.read(), KIND_VARIANT, only=("target",))
                if "made_by=driver" in meta.get("target", ""):
                    os.remove(path)
                    removed += 1
    return removed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="opencl")
    ap.add_argument("--processes", type=int, default=7)
    ap.add_argument("--size", type=int, default=21)
    args = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    from tack.backends import runtime_for
    _, rt = runtime_for(args.device)
    if not rt.available():
        print(f"{args.device}: not available here ({rt.unavailable_reason()}); nothing measured")
        return 0
    base = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    base["PYTHONPATH"] = ROOT + os.pathsep + base.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="tack-device-warm-") as tmp:
        stored, portable = os.path.join(tmp, "stored"), os.path.join(tmp, "portable")
        first = run(args.device, args.size, dict(base, TACK_CACHE_DIR=stored))
        shutil.copytree(stored, portable)
        removed = strip_driver_entries(portable)
        times = {"cold": [], "portable only": [], "driver's code stored": []}
        formats = {}
        for i in range(args.processes):
            cold_dir = os.path.join(tmp, f"cold{i}")
            for case, env in (("cold", dict(base, TACK_CACHE_DIR=cold_dir)),
                              ("portable only", dict(base, TACK_CACHE_DIR=portable,
                                                     TACK_CACHE="read")),
                              ("driver's code stored", dict(base, TACK_CACHE_DIR=stored))):
                got = run(args.device, args.size, env)
                assert got["ntri"] == first["ntri"], (case, got, first)
                times[case].append(got["first_call"])
                formats[case] = got["formats"]
            shutil.rmtree(cold_dir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"device {args.device}, contour {args.size}^3 ({first['ntri']} triangles), "
          f"{args.processes} processes per case, medians; {removed} driver entries stripped "
          "for 'portable only'")
    print(f"{'case':24} {'first call':>12} {'vs cold':>9}  loaded as")
    for case, t in med.items():
        print(f"{case:24} {t * 1e3:9.1f} ms {med['cold'] / t:8.1f}x  {', '.join(formats[case])}")
    stored_t = med["driver's code stored"]
    print(f"driver's code stored vs portable only: {med['portable only'] / stored_t:.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
