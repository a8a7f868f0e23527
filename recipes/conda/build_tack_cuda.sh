#!/usr/bin/env bash
# Build script of the `tack-cuda` output: CUDA PTX bundles for the compute capabilities in
# TACK_CUDA_ARCHS (meta.yaml's script_env; default sm_70 sm_80 sm_90) into
# $PREFIX/share/tack/bundles, next to the CPU ones.
# PTX needs LLVM alone (llvmlite's NVPTX target): no CUDA toolkit at build time.  The driver
# compiles it for the GPU when a job loads it.
set -euxo pipefail

share="$PREFIX/share/tack"
mkdir -p "$share/bundles"
cuda_archs="${TACK_CUDA_ARCHS:-sm_70 sm_80 sm_90}"
archs=()
for a in ${cuda_archs}; do archs+=(--arch "cuda:$a"); done
{
  echo "version: 1"
  echo "build:"
  echo "  archs:"
  echo "    cuda: [$(echo ${cuda_archs} | sed 's/ /, /g')]"
  echo "  kernels:"
  echo "    - module: tack.kernels.contour"
  echo "      shapes: [[21, 21, 21]]"
} > "$SRC_DIR/bundles-cuda.yaml"

if ! env -u TACK_CACHE_DIR -u TACK_CACHE_BUNDLES TACK_CACHE=off \
     "$PYTHON" -m tack.site bundles build "$SRC_DIR/bundles-cuda.yaml" --output "$share/bundles" "${archs[@]}"; then
  echo "tack-cuda: bundles build failed for ${cuda_archs}" >&2
  exit 1
fi
