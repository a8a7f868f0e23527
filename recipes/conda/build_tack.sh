#!/usr/bin/env bash
# Build script of the `tack` output: install the package, then build its CPU kernel bundles into
# $PREFIX/share/tack/bundles (no post-link script: the bundles are in the package).
set -euxo pipefail

"$PYTHON" -m pip install . --no-deps --no-build-isolation -vv

share="$PREFIX/share/tack"
mkdir -p "$share/bundles"

# The CPUs the bundles are built for: the x86-64 microarchitecture levels, so that every x86-64
# machine finds the bundle of the highest level it supports (a node uses the bundle of its own
# microarchitecture or of its nearest archspec ancestor); generic aarch64 on ARM (LLVM has no CPU
# for archspec's armv8.Xa levels).  TACK_CPU_ARCHS (meta.yaml's script_env) overrides them.
case "${target_platform}" in
  *-64) default_archs="x86_64_v2 x86_64_v3 x86_64_v4" ;;
  *-aarch64|*-arm64) default_archs="aarch64" ;;
  *) echo "tack: no CPU bundles are defined for ${target_platform}" >&2; exit 1 ;;
esac
cpu_archs="${TACK_CPU_ARCHS:-$default_archs}"

# The build config, kept in the package for `python -m tack.site bundles rebuild` and for admins.
{
  echo "version: 1"
  echo "build:"
  echo "  archs:"
  echo "    cpu: [$(echo ${cpu_archs} | sed 's/ /, /g')]"
  echo "  kernels:"
  echo "    - module: tack.kernels.contour"
  echo "      shapes: [[21, 21, 21]]"
} > "$share/bundles-build.yaml"

# No user cache is read or written while building; the bundles are all that is made.  Run from
# the prefix, not the source tree: `python -m` imports from the working directory first, and Tack
# run from its source tree tags what it makes with a hash of the sources ("0.1.0+src.<hash>"),
# which the installed Tack ("0.1.0") would find stale.
cd "$share"
start=$(date +%s)
env -u TACK_CACHE_DIR -u TACK_CACHE_BUNDLES TACK_CACHE=off \
  "$PYTHON" -m tack.site bundles build "$share/bundles-build.yaml" --output "$share/bundles"
echo "tack: bundles built in $(( $(date +%s) - start )) s"
du -b "$share"/bundles/* || true
if "$PYTHON" -m tack.site bundles status "$share/bundles" | grep STALE; then
  echo "tack: the bundles just built are stale for the installed Tack" >&2
  exit 1
fi
cd "$SRC_DIR"

# Activation: TACK_CACHE_BUNDLES points at this environment's bundles (the user's own value is
# saved, and restored on deactivation).
for d in activate deactivate; do
  mkdir -p "$PREFIX/etc/conda/$d.d"
  cp "$RECIPE_DIR/tack_$d.sh" "$PREFIX/etc/conda/$d.d/tack_$d.sh"
done
