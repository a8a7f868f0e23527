#!/usr/bin/env bash
# Install what Tack's OpenCL runtime (tack/backends/opencl_runtime.py) and its tests need:
#   - Intel's OpenCL CPU runtime and pyopencl, from PyPI (intel-cmplr-lib-rt is needed by the
#     runtime though its wheel does not declare it);
#   - Tack's ICD file, naming the runtime's libintelocl.so (the wheel's own names a path that
#     does not exist), in ~/.cache/tack-opencl/vendors (TACK_OPENCL_ICD_DIR overrides);
#   - spirv-tools (spirv-val) from Debian, which the tests validate their SPIR-V with.
# Idempotent and quiet: each step is skipped when what it installs is there; prints what it did.
# Exits non-zero when, at the end, no OpenCL device takes SPIR-V.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

say() { echo "install-opencl: $*"; }

quiet() {  # a command, its output shown only if it fails
  local log; log="$(mktemp)"
  if ! "$@" >"$log" 2>&1; then cat "$log" >&2; rm -f "$log"; return 1; fi
  rm -f "$log"
}

packages_present() {
  "$PY" - <<'EOF'
import importlib.metadata as md, sys
try:
    for name in ("intel-opencl-rt", "intel-cmplr-lib-rt", "pyopencl"):
        md.version(name)
    import pyopencl  # noqa: F401
except Exception:
    sys.exit(1)
EOF
}

if packages_present; then
  say "intel-opencl-rt, intel-cmplr-lib-rt and pyopencl already installed"
else
  quiet "$PY" -m pip install --quiet --disable-pip-version-check intel-opencl-rt intel-cmplr-lib-rt pyopencl
  say "installed intel-opencl-rt, intel-cmplr-lib-rt and pyopencl with pip"
fi

if command -v spirv-val >/dev/null; then
  say "spirv-val already installed"
elif command -v apt-get >/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 update
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 \
      install -y --no-install-recommends spirv-tools
  say "installed spirv-tools with apt-get"
else
  say "spirv-val not found and no apt-get: the tests that validate SPIR-V will fail" >&2
fi

# Find libintelocl.so, write the ICD file, and list the devices: the runtime module's own code,
# so the script and in-process setup agree.  OCL_ICD_VENDORS is unset for this step so the ICD
# file is written even where the caller's environment points elsewhere.
say "setup:"
env -u OCL_ICD_VENDORS PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" -m tack.backends.opencl_runtime | sed 's/^/  /'
