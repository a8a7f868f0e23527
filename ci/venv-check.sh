#!/usr/bin/env bash
# The README's install and a smoke subset of the tests, from a plain virtual environment (no system
# site packages): what a new user does first.  A test that links or copies sys.executable out of
# the environment (which runs the base interpreter, without the environment's packages) fails here.
# .ci/run calls it.  $1: scratch directory (default: a new temporary one).  Arguments after it go
# to pytest in place of the default subset.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
scratch_dir venv-check "${1:-}"
shift || true
V="$S/venv"
python3 -m venv --clear "$V"
"$V/bin/python" -m pip install --quiet --upgrade pip
"$V/bin/python" -m pip install --quiet -e ".[site]" pytest
# It is a virtual environment, and the one running the tests.
"$V/bin/python" -c 'import sys; assert sys.prefix != sys.base_prefix, sys.prefix; print("venv:", sys.prefix)'
if [ $# -eq 0 ]; then
  set -- tests/packaging tests/test_demo.py tests/test_launch.py tests/test_messages.py
fi
env -u PYTHONPATH "$V/bin/python" -m pytest -q -p no:cacheprovider "$@"
