#!/usr/bin/env bash
# Build script of the `tack-cuda` output: CUDA PTX bundles in $PREFIX/share/tack/bundles, next to
# the CPU ones of the `tack` output (installed in this output's host prefix, pinned exactly).
# PTX needs LLVM alone (llvmlite's NVPTX target): no CUDA toolkit at build time.  The driver
# compiles it for the GPU when a job loads it.
set -euxo pipefail

# The compute capabilities, fixed by the recipe: sm_70 (Volta), sm_80 (Ampere), sm_90 (Hopper).
# The driver JIT-compiles PTX of an older sm for a newer GPU (sm_80's for an sm_86, sm_90's for
# Blackwell), so these three serve every GPU from Volta on, each from the newest PTX it can run.
# `bundles install` builds them with the Tack installed in $PREFIX (the tack package's 0.1.0,
# not the unpacked sources' 0.1.0+src.<hash>), then checks every bundle there (fails on a stale
# one).  --config-name: conda-build packages only the files an output adds, so tack-cuda keeps
# its config as bundles-build-cuda.yaml and leaves tack's bundles-build.yaml as it is.
"$PYTHON" -m tack.site bundles install "$PREFIX" \
  --arch cuda:sm_70 --arch cuda:sm_80 --arch cuda:sm_90 --config-name bundles-build-cuda
