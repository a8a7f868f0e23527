#!/usr/bin/env bash
# The README's test command: install what the tests need on a fresh machine (Debian 12: the Python
# extras, MPICH from PyPI, Lmod and Environment Modules, tcsh and fish), then run pytest.
# .ci/run calls it.  Arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --upgrade pip
python3 -m pip install --quiet -e ".[test,mpi]"
# A real MPI for the MPI tests: MPICH's runtime from PyPI (mpiexec on PATH).
python3 -m pip install --quiet mpich

# Module systems for tests/site: Debian's Lmod (8.6) installed with apt, and
# Environment Modules (5.2) unpacked into a directory of its own, since the
# two Debian packages conflict.  tests/site/tools.py knows these locations.
# Idempotent and quiet: each step is skipped when what it installs is there.
ENVMODULES_DIR=/opt/envmodules
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
apt_quiet() {  # apt-get, its output shown only if it fails
  local log; log="$(mktemp)"
  if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 "$@" >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}
apt_updated=""
apt_update_once() { [ -n "$apt_updated" ] || { apt_quiet update; apt_updated=1; }; }

if [ ! -f /usr/share/lmod/lmod/init/bash ]; then
  apt_update_once
  apt_quiet install -y --no-install-recommends lmod
fi

if [ ! -x "$ENVMODULES_DIR/usr/bin/envml" ] || [ ! -f "$ENVMODULES_DIR/.tack-installed" ]; then
  apt_update_once
  # What environment-modules depends on (none of it conflicts with lmod).
  apt_quiet install -y --no-install-recommends tcl8.6 less procps
  work="$(mktemp -d)"
  chmod 777 "$work"   # apt-get download writes as the _apt user
  (cd "$work" && apt_quiet download environment-modules)
  $SUDO dpkg-deb -x "$work"/environment-modules_*.deb "$work/root"
  # Its scripts name their own absolute paths: point them into ENVMODULES_DIR.
  triplet="$(cd "$work/root/usr/lib" && ls -d */modulecmd.tcl | cut -d/ -f1)"
  $SUDO grep -rlIZ -e /usr/share/modules -e /etc/environment-modules -e "/usr/lib/$triplet" \
      "$work/root" | $SUDO xargs -0 -r sed -i \
      -e "s#/usr/share/modules#$ENVMODULES_DIR/usr/share/modules#g" \
      -e "s#/etc/environment-modules#$ENVMODULES_DIR/etc/environment-modules#g" \
      -e "s#/usr/lib/$triplet#$ENVMODULES_DIR/usr/lib/$triplet#g"
  $SUDO ln -sfn "$ENVMODULES_DIR/etc/environment-modules/modulespath" \
      "$work/root/usr/share/modules/init/.modulespath"
  $SUDO ln -sfn "$ENVMODULES_DIR/usr/share/modules/init/csh" "$work/root/etc/csh/login.d/modules"
  $SUDO touch "$work/root/.tack-installed"
  $SUDO rm -rf "$ENVMODULES_DIR"
  $SUDO mkdir -p "$(dirname "$ENVMODULES_DIR")"
  $SUDO mv "$work/root" "$ENVMODULES_DIR"
  $SUDO rm -rf "$work"
fi

# tcsh and fish, so the csh and fish activation scripts are run, not only read.
if ! command -v tcsh >/dev/null || ! command -v fish >/dev/null; then
  apt_update_once
  apt_quiet install -y --no-install-recommends tcsh fish
fi
# strace, which shows the order of a bundle write's fsync and rename (tests/site_bundles).
if ! command -v strace >/dev/null; then
  apt_update_once
  apt_quiet install -y --no-install-recommends strace
fi

# The vendors' tools that check GPU code ahead of time (ptxas, ld.lld-22, llvm-readelf-22,
# spirv-val, ocloc), and Intel's OpenCL CPU runtime with pyopencl, which runs Tack's SPIR-V here.
bash ci/install-gpu-tools.sh
bash ci/install-opencl.sh
# The GPU runtimes' Python bindings and HIP's runtime library, with no GPU: their import and
# error paths are tested for real (a missing driver or device is a clear error, never a crash).
python3 -m pip install --quiet cuda-python hip-python
# Older hip-python releases, each in a directory of its own, for the test that runs the real-binding
# check with each first on the path: 6.x and 7.x (ROCm 6.2-7.2) take hipGetDeviceProperties(prop,
# deviceId), 10 (above) hipGetDeviceProperties(deviceId).
HIP_PYTHONS=/opt/tack-hip-pythons
for v in 6.2.0.499.16 7.2.2.562.43; do
  if [ ! -f "$HIP_PYTHONS/$v/.installed" ]; then
    $SUDO rm -rf "$HIP_PYTHONS/$v"
    $SUDO python3 -m pip install --quiet --no-deps --target "$HIP_PYTHONS/$v" "hip-python==$v" \
      2>&1 | grep -v '^WARNING: ' || true
    [ -d "$HIP_PYTHONS/$v/hip" ] && $SUDO touch "$HIP_PYTHONS/$v/.installed"
  fi
done
export TACK_TEST_HIP_PYTHONS="$HIP_PYTHONS"
# HIP's runtime library and the Level Zero loader (with its header, which the tests compare the
# ctypes structures with), with no GPU: a missing device is an error, never a crash.
missing=""
for pkg in libamdhip64-5 libze1 libze-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  apt_update_once
  # shellcheck disable=SC2086
  apt_quiet install -y --no-install-recommends $missing
fi
export TACK_REQUIRE_OPENCL=1      # the OpenCL tests fail, rather than skip, without a device

# The README's test command.
set +e
python3 -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
