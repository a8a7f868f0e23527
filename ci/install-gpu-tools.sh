#!/usr/bin/env bash
# Installs the vendors' tools that check Tack's GPU code ahead of time (no GPU needed):
#   spirv-val            Debian spirv-tools          (SPIR-V validation, level_zero)
#   ld.lld-22            Debian lld-22               (links AMDGPU code objects, rocm)
#   llvm-readelf-22      Debian llvm-22              (reads code objects' notes and symbols)
#   ocloc                Debian intel-opencl-icd     (SPIR-V -> Intel native code, level_zero)
#   ptxas                PyPI nvidia-cuda-nvcc       (assembles PTX, cuda; found in site-packages)
#   cuobjdump, nvdisasm  PyPI nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm (read the stored SASS)
# Idempotent and quiet: each step runs only when what it installs is missing, and its
# output is shown only when it fails.  Run as root or with sudo available.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
quiet() {  # a command, its output shown only if it fails
  local log; log="$(mktemp)"
  if ! "$@" >"$log" 2>&1; then cat "$log" >&2; rm -f "$log"; return 1; fi
  rm -f "$log"
}

missing=()
command -v spirv-val >/dev/null || missing+=(spirv-tools)
[ -x /usr/lib/llvm-22/bin/ld.lld ] || missing+=(lld-22)
[ -x /usr/lib/llvm-22/bin/llvm-readelf ] || missing+=(llvm-22)
command -v ocloc >/dev/null || missing+=(intel-opencl-icd)
if [ "${#missing[@]}" -gt 0 ]; then
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 update
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 \
      install -y --no-install-recommends "${missing[@]}"
fi

# ptxas from NVIDIA's PyPI wheel (nvidia/cu*/bin/ptxas inside site-packages); never a ptxas
# that happens to be on PATH.
if ! python3 -c 'import sys; sys.path.insert(0, "."); from tack.backends.cuda import find_ptxas; find_ptxas()' \
     >/dev/null 2>&1; then
  quiet python3 -m pip install --quiet nvidia-cuda-nvcc
fi

# cuobjdump and nvdisasm from NVIDIA's PyPI wheels, beside the wheel's ptxas (nvidia/cu*/bin):
# the tests read every cubin stored beside PTX with them.
for tool in cuobjdump nvdisasm; do
  if ! python3 - "$tool" >/dev/null 2>&1 <<'PY'
import sys, glob, importlib.util, os
spec = importlib.util.find_spec("nvidia")
roots = spec.submodule_search_locations if spec else []
sys.exit(0 if any(os.access(p, os.X_OK) for r in roots for p in glob.glob(os.path.join(r, "cu*", "bin", sys.argv[1]))) else 1)
PY
  then
    quiet python3 -m pip install --quiet "nvidia-cuda-$tool"
  fi
done
