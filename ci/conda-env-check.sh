#!/usr/bin/env bash
# The smoke subset of the tests that ci/venv-check.sh runs from a venv, from a conda environment
# instead: Python 3.11 and Tack's dependencies (numpy, llvmlite, pyyaml, jinja2, archspec) are the
# conda packages of the shared kit's offline channel (the environment created offline), pytest
# is added from PyPI with the environment's own pip (as a developer adds a tool), the checkout is
# installed into it with pip --no-deps --no-build-isolation, as the recipe's build script does,
# and the tests run with the environment activated and no PYTHONPATH.  A test that assumes a venv
# (pyvenv.cfg) or the system Python fails here.  .ci/run calls it.
#
#   ci/conda-env-check.sh [SCRATCH [PYTEST ARGS...]]
#
# conda comes from the shared tool kit (../shared/tools, or TACK_TOOLS; see its README).  SCRATCH
# (default: a new temporary directory) may be reused: the kit's setup is kept; the environment is
# made again.  Arguments after SCRATCH go to pytest in place of the
# default subset.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
scratch_dir conda-env-check "${1:-}"
shift || true
# conda's activation leaves a tmpXXXXXXXX.env file in the temporary directory at every run: there,
# the step's scratch, removed with it.
export TMPDIR="$S/tmp"
mkdir -p "$TMPDIR"
T0=$EPOCHREALTIME

setup_kit() {     # quiet: its log is shown if it fails
  bash "$TOOLS/conda/setup.sh" "$S/conda" >"$S/conda-setup.log" 2>&1 || { cat "$S/conda-setup.log"; return 1; }
}
step "conda/setup.sh (the shared kit)" setup_kit || exit 1
set +u; . "$S/conda/env.sh"; set -u

E="$S/env"
rm -rf "$E"
step "conda create (offline, the channel alone)" python -m conda create -q -y -p "$E" --offline \
  --override-channels -c "file://$OFFLINE_CHANNEL" \
  python=3.11 numpy llvmlite pyyaml jinja2 archspec pip setuptools || exit 1
# pytest is not in the kit's channel: from PyPI, into the env, with none of its packages replaced.
step "pip install pytest (into the env)" \
  env -u PYTHONPATH "$E/bin/python" -m pip install --quiet --disable-pip-version-check pytest==9.0.3 || exit 1
step "pip install --no-deps --no-build-isolation -e . (into the env)" \
  env -u PYTHONPATH "$E/bin/python" -m pip install --quiet --no-deps --no-build-isolation --no-index \
    --disable-pip-version-check -e . || exit 1

if [ $# -eq 0 ]; then
  set -- tests/packaging tests/test_demo.py tests/test_launch.py tests/test_messages.py
fi
# It is a conda environment, the python on PATH once it is activated, and its packages are the
# conda packages of the channel (not the system's, not a venv's).
CHECK_ENV='
import os, sys, numpy, llvmlite, yaml, archspec, pytest
assert os.path.isdir(os.path.join(sys.prefix, "conda-meta")), sys.prefix
assert sys.prefix == sys.base_prefix and os.path.realpath(sys.prefix) == os.path.realpath(sys.argv[1]), sys.prefix
for m in (numpy, llvmlite, yaml, archspec, pytest):
    assert m.__file__.startswith(sys.prefix + os.sep), m.__file__
print(f"conda env: {sys.prefix} (python {sys.version.split()[0]}, numpy {numpy.__version__}, "
      f"llvmlite {llvmlite.__version__}, pytest {pytest.__version__})")
'
in_env() {
  # The environment activated in a clean bash, as a user's shell has it; no PYTHONPATH.
  env -u PYTHONPATH -u PYTHONHOME CHECK_ENV="$CHECK_ENV" bash --noprofile --norc -c '
    set -eu
    E="$1"; shift
    eval "$(python -m conda shell.bash hook)"
    conda activate "$E"
    python -c "$CHECK_ENV" "$E"
    python -m pytest -q -p no:cacheprovider "$@"
  ' bash "$E" "$@"
}
step "tests from the conda env: pytest $*" in_env "$@" || rc=$?

# A site config's settings through conda's own env_vars.d (python -m tack.site conda-activate
# --env-vars): conda's activation of every shell it supports sets them (cmd.exe's goes to a file
# whose path it prints), and a real bash's activate sets them and deactivate clears them.
every_shell() {
  env -u PYTHONPATH "$E/bin/python" -m tack.site conda-activate tests/packaging/site.yaml \
    --prefix "$E" --env-vars || return 1
  local sh out
  for sh in posix csh fish xonsh powershell cmd.exe; do
    out="$(env -u PYTHONPATH python -m conda "shell.$sh" activate "$E")" || return 1
    if [ "$sh" = cmd.exe ]; then out="$(cat "$(printf '%s' "$out" | tail -n 1 | tr -d '\r')")"; fi
    printf '%s\n' "$out" | grep -q "TACK_CACHE_MPI.*bundle" \
      || { echo "conda shell.$sh activate does not set TACK_CACHE_MPI" >&2; return 1; }
    echo "conda shell.$sh activate: $(printf '%s\n' "$out" | grep TACK_CACHE_MPI | head -n 1)"
  done
  env -u PYTHONPATH -u TACK_CACHE_MPI bash --noprofile --norc -c '
    set -eu
    eval "$(python -m conda shell.bash hook)"
    conda activate "$1"
    test "$TACK_CACHE_MPI" = bundle && test "$TACK_CACHE_SIZE" = 3G
    conda deactivate
    test -z "${TACK_CACHE_MPI:-}"     # unset, or empty where conda stacked (Tack: the default)
    echo "bash: conda activate sets the site settings, conda deactivate clears them"
  ' bash "$E" || return 1
  rm -f "$E/etc/conda/env_vars.d/tack-site.json"
}
step "conda-activate --env-vars: every shell conda supports" every_shell || rc=$?

printf 'conda-env-check: %.0f s in all\n' "$(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')"
exit "${rc:-0}"
