#!/usr/bin/env bash
# Check recipes/conda with the real conda-build: render for linux-64 and osx-arm64 (with and
# without the CUDA output), build against the local channel with the recipe's tests, create an
# environment from the built package, activate and deactivate it in bash, and run the contour
# served from the package's bundles (python -m tack.site bundles check).
#
#   ci/conda-check.sh [SCRATCH]
#
# conda and conda-build come from the shared tool kit (../shared/tools, or TACK_TOOLS; see its
# README).  SCRATCH (default: a new temporary directory) may be reused: setup is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
scratch_dir conda-check "${1:-}"

# -- the release version's sdist and a CI-local copy of the recipe with its sha256 -----------------
step "sdist (python -m build --sdist)" build_sdist "$S" || exit 1
SHA="$(sha256sum "$SDIST" | cut -d' ' -f1)"
rm -rf "$S/recipe" && mkdir -p "$S/recipe" && cp -r recipes/conda "$S/recipe/tack"
R="$S/recipe/tack"
committed="$(sed -n 's/^{% set sha256 = "\([0-9a-f]*\)" %}$/\1/p' "$R/meta.yaml")"
sed -i "s/$committed/$SHA/" "$R/meta.yaml"
echo "tack 0.1.0: committed sha256 $committed; this checkout's sdist $SHA ($SDIST)"

step "conda/setup.sh (the shared kit)" bash "$TOOLS/conda/setup.sh" "$S/conda" >"$S/conda-setup.log" 2>&1 \
  || { cat "$S/conda-setup.log"; exit 1; }
set +u; . "$S/conda/env.sh"; set -u
CH=(--override-channels -c "file://$OFFLINE_CHANNEL")
CPU=(--variants "{cuda_compiler_version: None}")

step "seed_src.py (sdist into conda-build's source cache)" python "$TOOLS/conda/seed_src.py" "$R" "$(dirname "$SDIST")"
step "conda render linux-64 (CPU variant, solved)" python -m conda render "${CH[@]}" -m "$OFFLINE_PINNING" "${CPU[@]}" "$R"
render_matrix() {
  # The channel's pinning plus the CUDA variants conda-forge-pinning lists (the kit's has none).
  { cat "$OFFLINE_PINNING"; printf 'cuda_compiler_version:\n  - None\n  - "12.6"  # [linux64]\n'; } \
    > "$S/pinning-with-cuda.yaml"
  python "$TOOLS/conda/render_matrix.py" "$R" "$S/pinning-with-cuda.yaml" "file://$OFFLINE_CHANNEL" linux-64 osx-arm64 \
    | tee "$S/render-matrix.txt"
  # linux-64: the CPU output in both variants, the CUDA output (needing __cuda) in the CUDA one;
  # osx-arm64: the CPU output only.
  grep -q -- '- tack-cuda-0.1.0' "$S/render-matrix.txt"
  grep -q '__cuda' "$S/render-matrix.txt"
}
step "render_matrix.py linux-64 + osx-arm64 (with and without CUDA)" render_matrix

rm -rf "$CONDA_BLD_PATH"/linux-64/tack-*.conda
step "conda build (with the recipe's tests)" \
  bash -c "python -m conda build ${CH[*]} -m '$OFFLINE_PINNING' --variants '{cuda_compiler_version: None}' '$R' >'$S/conda-build.log' 2>&1" \
  || { tail -80 "$S/conda-build.log"; exit 1; }
PKG="$(ls "$CONDA_BLD_PATH"/linux-64/tack-0.1.0-*.conda)"
{
  grep -E '^tack: bundles built in|^arch +kernels|^cpu:' "$S/conda-build.log" | grep -v 'compiling\|\[' | sort -u
  echo "package: $(basename "$PKG"), $(stat -c %s "$PKG") bytes"
  grep -E 'served from the bundles|^contour ' "$S/conda-build.log" | tail -2
} | tee "$S/conda-figures.txt"

rm -rf "$S/env"
step "conda create" python -m conda create -q -y -p "$S/env" --override-channels \
  -c "file://$CONDA_BLD_PATH" -c "file://$OFFLINE_CHANNEL" tack
step "conda run: import tack, tack.cache info" \
  python -m conda run -p "$S/env" bash -c "cd /tmp && python -c 'import tack' && python -m tack.cache info"
ls -l "$S/env/share/tack/bundles" | tee -a "$S/conda-figures.txt"

activation() {
  env -u TACK_CACHE_BUNDLES bash --noprofile --norc -c '
    set -eu
    eval "$(python -m conda shell.bash hook)"
    E="$1"
    want="$E/share/tack/bundles"
    # unset before: set on activation, unset again on deactivation
    conda activate "$E"
    [ "$TACK_CACHE_BUNDLES" = "$want" ] || { echo "activate: TACK_CACHE_BUNDLES=$TACK_CACHE_BUNDLES" >&2; exit 1; }
    echo "activated: TACK_CACHE_BUNDLES=$TACK_CACHE_BUNDLES"
    (cd /tmp && python -m tack.site bundles check)      # TACK_CACHE_BUNDLES, as activated
    conda deactivate
    [ -z "${TACK_CACHE_BUNDLES+x}" ] || { echo "deactivate left TACK_CACHE_BUNDLES=$TACK_CACHE_BUNDLES" >&2; exit 1; }
    echo "deactivated: TACK_CACHE_BUNDLES unset, as before"
    # a value of the user own: kept after the environment bundles, restored on deactivation
    export TACK_CACHE_BUNDLES=/home/me/my-bundles
    conda activate "$E"
    [ "$TACK_CACHE_BUNDLES" = "$want:/home/me/my-bundles" ] || { echo "activate: $TACK_CACHE_BUNDLES" >&2; exit 1; }
    conda activate "$E"            # again: saves nothing new
    conda deactivate
    [ "$TACK_CACHE_BUNDLES" = /home/me/my-bundles ] || { echo "deactivate: $TACK_CACHE_BUNDLES" >&2; exit 1; }
    echo "with a value of the user own: restored to $TACK_CACHE_BUNDLES"
  ' bash "$S/env"
}
step "activate/deactivate in bash + contour from the bundle" activation

echo; echo "=== figures ==="; cat "$S/conda-figures.txt"
print_times
