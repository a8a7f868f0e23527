#!/usr/bin/env bash
# Tack under the other Pythons it supports (requires-python >= 3.10), not only the 3.11 the rest
# of CI runs: HPC sites run it under whatever Python their Spack or conda gives (3.12, 3.13).  For
# each of $PYENV_ROOT/versions/3.10.*, 3.12.* and 3.13.* that exists (pyenv's interpreters;
# PYENV_ROOT defaults to /root/.pyenv), a plain venv is made in the scratch directory, Tack is
# installed into it from the checkout with its dependencies and the test extra (pip install -e
# ".[test]", as ci/venv-check.sh installs it), and a subset of the tests runs there: the language,
# launch, error and message tests (the front end reads each Python's AST and bytecode; struct's
# messages changed in 3.12), DLPack host arrays (3.10 crashed raising past one), the nesting
# limits and the lowered kernel's JSON (3.12 caps C recursion), the import image and the warm
# imports (a cache tag, bytecode and gc state of each Python), the cache's keys, fingerprints
# and invalidation (3.13's classes record their first line), and the contour kernels.  A Python that is
# not there is named as such; none at all is a failure (the CI machine has them: a run that tested
# no other Python would pass and say nothing).  .ci/run calls it.
#
#   ci/other-pythons-check.sh [SCRATCH [PYTEST ARGS...]]
#
# SCRATCH: default, a new temporary directory; arguments after it go to pytest in place of the
# default subset.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
scratch_dir other-pythons-check "${1:-}"
shift || true
# pytest's tmp_path directories of failed tests are kept: in the step's scratch, removed with it.
export TMPDIR="$S/tmp"
mkdir -p "$TMPDIR"
PYENV_VERSIONS="${PYENV_ROOT:-/root/.pyenv}/versions"

if [ $# -eq 0 ]; then
  set -- tests/test_language.py tests/test_launch.py tests/test_errors.py tests/test_messages.py \
    tests/test_dlpack.py tests/test_limits.py tests/test_ir.py tests/test_warm_imports.py \
    tests/test_import_image.py::test_written_image_serves_every_module_with_the_same_results \
    tests/test_import_image.py::test_a_group_is_imported_whole_without_importlibs_machinery \
    tests/test_import_image.py::test_a_cold_process_writes_the_image_where_python_writes_bytecode \
    tests/test_import_image.py::test_an_optimizing_python_has_an_image_of_its_own \
    "tests/test_import_image.py::test_a_damaged_or_foreign_image_is_ignored_and_tack_still_works[python]" \
    tests/cache/test_invalidation.py tests/cache/test_format.py \
    tests/cache/test_warm.py tests/cache/test_closures.py tests/cache/test_module_values.py \
    tests/kernels/test_contour.py
fi

found=() missing=()
for minor in 3.10 3.12 3.13; do
  # The newest patch release of each minor version there (sort -V: 3.12.10 after 3.12.9).
  py="$(ls -d "$PYENV_VERSIONS/$minor".* 2>/dev/null | grep -E "/$minor\.[0-9]+$" | sort -V | tail -n 1 || true)"
  if [ -n "$py" ] && [ -x "$py/bin/python3" ]; then found+=("$py"); else missing+=("$minor"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "other-pythons-check: no Python ${missing[*]} under $PYENV_VERSIONS: not tested"
fi
if [ ${#found[@]} -eq 0 ]; then
  echo "other-pythons-check: FAILED: no Python 3.10, 3.12 or 3.13 under $PYENV_VERSIONS: Tack was" \
       "tested under no Python but the default one (set PYENV_ROOT, or install them with pyenv)" >&2
  exit 1
fi

rc=0
one_python() {
  local py="$1"; shift
  local version V
  version="$("$py/bin/python3" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')" || return 1
  V="$S/venv-$version"
  "$py/bin/python3" -m venv --clear "$V" || return 1
  # (pip's warnings about this machine's index locations left out)
  # (--no-compile: no bytecode written for all of SciPy and the rest, most of which no test imports)
  env -u PYTHONPATH "$V/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile \
    -e ".[test]" \
    2>&1 | { grep -v '^WARNING: Location' || true; } || return 1
  # The venv's own Python and packages, not the CI's 3.11 ones.
  env -u PYTHONPATH "$V/bin/python" -c '
import sys, numpy, llvmlite, tack
assert sys.prefix != sys.base_prefix, sys.prefix
assert tack.__file__.startswith(sys.argv[1]), tack.__file__
print(f"venv: {sys.prefix} (python {sys.version.split()[0]}, numpy {numpy.__version__}, "
      f"llvmlite {llvmlite.__version__})")' "$PWD/" || return 1
  local known=()
  case "$version" in
    # Known, open: Python 3.12 starts with immortal objects in the collector's permanent generation
    # (375 in 3.12.1), which tack/__init__.py cannot tell from a program's gc.freeze(), so it skips
    # its promotion of the young objects and a warm process may run a generation-1 collection.
    3.12.*) known=(--deselect tests/test_warm_imports.py::test_warm_process_runs_no_older_generation_collection) ;;
  esac
  env -u PYTHONPATH "$V/bin/python" -m pytest -q -p no:cacheprovider "${known[@]}" "$@" || return 1
  remove_tree "$V"
}
for py in "${found[@]}"; do
  step "tests under Python $(basename "$py")" one_python "$py" "$@" || rc=1
done
exit "$rc"
