"""Site bundle of the shipped kernels for one CPU arch: variants, size and build time per shape list.

    python benchmarks/site_bundle.py [--arch cpu:x86_64_v3]

Builds the contour's bundle (``tack.site bundles build``) for one shape, then for
four shapes, and prints for each its variant count, entries, bytes and build
time: with shape-generic variants the contour needs the same handful of
variants for any number of shapes.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = ([[21, 21, 21]], [[21, 21, 21], [33, 33, 33], [64, 64, 64], [17, 23, 30]])


def build(arch: str, shapes, directory: str):
    from tack.cache import bundle, entry
    from tack.site import build as site_build
    from tack.site.config import load
    cfg_path = os.path.join(directory, "site.yaml")
    with open(cfg_path, "w") as f:
        f.write(f"version: 1\nbuild:\n  archs:\n    cpu: [{arch}]\n  kernels:\n"
                f"    - module: tack.kernels.contour\n      shapes: {shapes}\n")
    out = os.path.join(directory, "bundles")
    t0 = time.perf_counter()
    rc = site_build.build_bundles(load(cfg_path), output=out, out=io.StringIO(), err=sys.stderr)
    secs = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"bundles build failed for {arch}")
    (name,) = os.listdir(out)
    b = bundle.read(os.path.join(out, name))
    variants = sum(1 for kind, _ in b.index if kind == entry.KIND_VARIANT)
    return variants, len(b), len(b.data), secs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="cpu:x86_64_v3", help="the CPU arch (default cpu:x86_64_v3)")
    args = ap.parse_args(argv)
    print(f"Site bundle of tack.kernels.contour for {args.arch}")
    print(f"  {'shapes':<44}{'variants':>9}{'entries':>9}{'bytes':>10}{'build':>9}")
    for shapes in SHAPES:
        with tempfile.TemporaryDirectory() as d:
            variants, entries, nbytes, secs = build(args.arch, shapes, d)
        label = ", ".join("x".join(map(str, s)) for s in shapes)
        print(f"  {label:<44}{variants:>9}{entries:>9}{nbytes:>10}{secs:>8.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
