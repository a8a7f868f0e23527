#!/usr/bin/env bash
# Build script of the `tack` output: install the package, then build its CPU kernel bundles into
# $PREFIX/share/tack/bundles (no post-link script: the bundles are in the package).
set -euxo pipefail

"$PYTHON" -m pip install . --no-deps --no-build-isolation -vv

share="$PREFIX/share/tack"
mkdir -p "$share/bundles"

# The build config, kept in the package for `python -m tack.site bundles rebuild` and for admins.
# tack_cpu_archs comes from conda_build_config.yaml (x86_64_v2 x86_64_v3 x86_64_v4, or aarch64).
{
  echo "version: 1"
  echo "build:"
  echo "  archs:"
  echo "    cpu: [$(echo ${tack_cpu_archs} | sed 's/ /, /g')]"
  echo "  kernels:"
  echo "    - module: tack.kernels.contour"
  echo "      shapes: [[21, 21, 21]]"
} > "$share/bundles-build.yaml"

# No user cache is read or written while building; the bundles are all that is made.
start=$(date +%s)
env -u TACK_CACHE_DIR -u TACK_CACHE_BUNDLES TACK_CACHE=off \
  "$PYTHON" -m tack.site bundles build "$share/bundles-build.yaml" --output "$share/bundles"
echo "tack: bundles built in $(( $(date +%s) - start )) s"
du -b "$share"/bundles/* || true

# Activation: TACK_CACHE_BUNDLES points at this environment's bundles (the user's own value is
# saved, and restored on deactivation).
for d in activate deactivate; do
  mkdir -p "$PREFIX/etc/conda/$d.d"
  cp "$RECIPE_DIR/tack_$d.sh" "$PREFIX/etc/conda/$d.d/tack_$d.sh"
done
