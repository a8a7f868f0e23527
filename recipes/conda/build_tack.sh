#!/usr/bin/env bash
# Build script of the `tack` output: install the package, then build and check its CPU kernel
# bundles in $PREFIX/share/tack/bundles (no post-link script: the bundles are in the package).
set -euxo pipefail

"$PYTHON" -m pip install . --no-deps --no-build-isolation -vv

# The CPUs, fixed by the recipe (not by the build host, nor by a setting outside the recipe:
# what the package holds is what its hash names).  A conda binary runs on any machine of its
# platform, so each x86-64 microarchitecture level gets a bundle and every x86-64 node finds the
# one of the highest level it supports (a node looks for its own microarchitecture, then each
# archspec ancestor); generic aarch64 on ARM (archspec's armv8.Xa levels have no LLVM CPU).
case "${target_platform}" in
  linux-64|osx-64) archs=(--arch cpu:x86_64_v2 --arch cpu:x86_64_v3 --arch cpu:x86_64_v4) ;;
  linux-aarch64|osx-arm64) archs=(--arch cpu:aarch64) ;;
  *) echo "tack: no CPU bundles are defined for ${target_platform}" >&2; exit 1 ;;
esac

# Built and checked by the Tack just installed in $PREFIX, in a fresh Python (not the one in the
# unpacked sources, where `python -m` would import Tack from the working directory), with no
# user cache; `bundles check` fails on a stale bundle or on anything compiled.  Its exit status
# decides.  Writes $PREFIX/share/tack/bundles-build.yaml, the config they were built from.
"$PYTHON" -m tack.site bundles install "$PREFIX" "${archs[@]}"
