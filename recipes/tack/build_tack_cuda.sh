#!/usr/bin/env bash
# Build script of the `tack-cuda` output: CUDA PTX bundles for tack_cuda_archs
# (conda_build_config.yaml) into $PREFIX/share/tack/bundles, next to the CPU ones.
#
# NOT BUILT YET: this Tack has no CUDA code generation, so `bundles build` reports
# "no CUDA backend is installed yet" and this output fails to build.  It is rendered in CI so that
# the output, its run requirements (__cuda, cuda-version) and the pass-through of the
# architectures are ready for the Tack that has the backend.
set -euxo pipefail

share="$PREFIX/share/tack"
mkdir -p "$share/bundles"
archs=()
for a in ${tack_cuda_archs}; do archs+=(--arch "cuda:$a"); done
{
  echo "version: 1"
  echo "build:"
  echo "  archs:"
  echo "    cuda: [$(echo ${tack_cuda_archs} | sed 's/ /, /g')]"
  echo "  kernels:"
  echo "    - module: tack.kernels.contour"
  echo "      shapes: [[21, 21, 21]]"
} > "$SRC_DIR/bundles-cuda.yaml"

if ! env -u TACK_CACHE_DIR -u TACK_CACHE_BUNDLES TACK_CACHE=off \
     "$PYTHON" -m tack.site bundles build "$SRC_DIR/bundles-cuda.yaml" --output "$share/bundles" "${archs[@]}"; then
  echo "tack-cuda: CUDA bundles are not built yet (this Tack has no CUDA backend)" >&2
  exit 1
fi
