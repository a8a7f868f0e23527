"""Ahead-of-time builds of the shipped kernels (the contour) for GPU and CPU targets: total time,
time per arch, and per-kernel code generation time per target against the CPU backend's.  The
``cubin ms`` column is CUDA's SASS step (the packaged ptxas assembling the PTX for the target's
sm, as tack.aot and bundles store it); ``compile ms`` is LLVM's part alone.

    PYTHONPATH=. python3 benchmarks/gpu_codegen.py
"""

from __future__ import annotations

import time

from tack import types as T
from tack.backends import toolchain
from tack.codegen import generate
from tack.compiler import lower
from tack.kernels import contour
from tack.argtypes import argtypes_of
from tack.specialize import specialize

ARCHS = ["cuda:sm_80", "cuda:sm_90", "rocm:gfx90a", "rocm:gfx942", "level_zero:pvc",
         "cpu:x86_64_v3", "cpu:zen4"]


def main():
    launches = []
    for kernel, args, grid in contour.tack_warm():
        argtypes = argtypes_of(kernel, args)
        templates = {p: a for p, a, t in zip(kernel.params, args, argtypes) if isinstance(t, T.Template)}
        values = tuple(t for t in argtypes if not isinstance(t, T.Template))
        launches.append((kernel.__qualname__, specialize(lower(kernel, templates, False), values, grid)))
    rows, total0 = [], time.perf_counter()
    for arch in ARCHS:
        t0 = time.perf_counter()
        target = toolchain(arch.split(":")[0]).target(arch)
        setup = time.perf_counter() - t0
        for name, typed in launches:
            a = time.perf_counter()
            gen = generate(typed, target, f"tack_bench_{name}")
            b = time.perf_counter()
            payload = target.compile(gen.module)
            c = time.perf_counter()
            sass = getattr(target, "sass_seconds", None) if getattr(target, "ptxas", None) else None
            rows.append((arch, name, b - a, c - b - (sass or 0.0), sass, len(payload)))
        rows.append((arch, "(arch total)", setup, time.perf_counter() - t0, None, None))
    total = time.perf_counter() - total0
    print(f"{'arch':16} {'kernel':14} {'codegen ms':>10} {'compile ms':>11} {'cubin ms':>9} {'bytes':>8}")
    for arch, name, g, c, sass, n in rows:
        cubin = f"{sass * 1e3:9.1f}" if sass is not None else f"{'-':>9}"
        if n is None:
            print(f"{arch:16} {name:14} {'':>10} {c * 1e3:11.1f} {'':>9} {'':>8}")
        else:
            print(f"{arch:16} {name:14} {g * 1e3:10.2f} {c * 1e3:11.1f} {cubin} {n:8d}")
    print(f"total: {total:.2f} s for {len(ARCHS)} archs x {len(launches)} kernels")
    for arch in ARCHS:
        t = toolchain(arch.split(":")[0]).target(arch)
        if hasattr(t, "code_note"):
            print(f"  {arch}: {t.code_note}")
    cpu = {name: g for arch, name, g, c, s, n in rows if arch == "cpu:x86_64_v3" and n is not None}
    print("\ncodegen (LLVM IR generation) time relative to the CPU backend's (cpu:x86_64_v3):")
    for arch, name, g, c, s, n in rows:
        if n is not None and not arch.startswith("cpu"):
            print(f"  {arch:16} {name:10} {g / cpu[name]:.2f}x")


if __name__ == "__main__":
    main()
