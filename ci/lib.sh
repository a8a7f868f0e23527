# Helpers shared by the ci/ scripts (sourced from the checkout's root).

# The checkout, the shared tool kit (../shared/tools, or TACK_TOOLS), and scratch_dir.
ROOT="$PWD"
TOOLS="${TACK_TOOLS:-$ROOT/../shared/tools}"

# at_exit CMD...: run CMD when the script exits (by exit, error or signal), after every CMD
# registered later (last in, first out: a daemon under a scratch directory is stopped before the
# directory goes).  A script keeps its own EXIT trap only through this.
_AT_EXIT=()
at_exit() {
  _AT_EXIT+=("$*")
  trap _run_at_exit EXIT
  trap 'exit 130' INT TERM HUP
}
_run_at_exit() {
  local i
  for ((i = ${#_AT_EXIT[@]} - 1; i >= 0; i--)); do eval "${_AT_EXIT[i]}" || true; done
  _AT_EXIT=()
}

# scratch_dir NAME [DIR]: S is DIR, made and absolute.  Without DIR, S is a new temporary directory
# (tack-ci.*, under $TMPDIR or /tmp) removed when the script exits, unless TACK_CI_KEEP=1: every
# run of .ci/run used to leave about 2 GB behind (the Spack and conda kits, environments, build
# stages), and on a machine that had run CI a few dozen times the next run failed unpacking Spack,
# with no space left.  Not to be called in a subshell: the removal is registered in this shell.
scratch_dir() {
  if [ -n "${2:-}" ]; then
    S="$2"; mkdir -p "$S"
  else
    S="$(mktemp -d "${TMPDIR:-/tmp}/tack-ci.XXXXXX")" || return 1
    [ "${TACK_CI_KEEP:-}" = 1 ] || at_exit "remove_tree '$S'"
  fi
  S="$(cd "$S" && pwd)"
  echo "$1: scratch $S"
}

# remove_tree DIR: rm -rf, making read-only directories (a Go-style cache, an installed prefix)
# writable first if plain removal fails.
remove_tree() {
  rm -rf "$1" 2>/dev/null && return 0
  chmod -R u+w "$1" 2>/dev/null; rm -rf "$1"
}

# disk_free DIR: the space left under DIR, in GiB (an integer).
disk_free() {
  df -Pk "$1" 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }'
}

# step NAME CMD...: run CMD, then print how long it took; the figures are collected in $TIMES.
if [ -z "${TIMES:-}" ]; then
  TIMES="$(mktemp "${TMPDIR:-/tmp}/tack-ci-times.XXXXXX")"
  at_exit "rm -f '$TIMES'"
fi
step() {
  local name="$1"; shift
  local t0 t1 rc=0
  echo "::: $name"
  t0=$EPOCHREALTIME
  "$@" || rc=$?
  t1=$EPOCHREALTIME
  printf '%-58s %7.1f s%s\n' "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "$([ $rc -eq 0 ] || echo "  FAILED ($rc)")" | tee -a "$TIMES"
  return $rc
}

# expect_failure PATTERN CMD...: CMD must fail and print PATTERN.
expect_failure() {
  local pattern="$1"; shift
  local out
  if out="$("$@" 2>&1)"; then echo "expected a failure: $*" >&2; return 1; fi
  if ! grep -qF -- "$pattern" <<<"$out"; then echo "$out" >&2; echo "missing: $pattern" >&2; return 1; fi
  grep -F -- "$pattern" <<<"$out" | head -1
}

# The sdist of this checkout (what package.py's and meta.yaml's release version are checked with).
# TACK_SDIST, if set, names one already built.  $1: scratch directory.  Sets SDIST.
build_sdist() {
  local scratch="$1"
  if [ -n "${TACK_SDIST:-}" ]; then SDIST="$TACK_SDIST"; echo "$SDIST"; return; fi
  if [ ! -f "$scratch/venv-sdist/.ready" ]; then
    python3 -m venv "$scratch/venv-sdist" >&2
    "$scratch/venv-sdist/bin/pip" install -q -U build "setuptools>=77" 2>&1 | grep -v '^WARNING: Location' >&2
    touch "$scratch/venv-sdist/.ready"
  fi
  rm -rf "$scratch/dist" "$scratch/sdist-src"
  # From a copy of the tracked files: nothing is written into the checkout (egg-info).
  mkdir -p "$scratch/sdist-src"
  git ls-files -z | xargs -0 cp --parents -t "$scratch/sdist-src" || return 1
  (cd "$scratch/sdist-src" && "$scratch/venv-sdist/bin/python" -m build --sdist --no-isolation \
     -o "$scratch/dist" . >&2) || return 1
  SDIST="$(ls "$scratch"/dist/tack-*.tar.gz)" || return 1
  # The package, its LICENSE and README: no part of the test suite, which cannot run from it
  # (setuptools shipped tests/test*.py alone, without conftest.py or the sub-suites).
  if tar tzf "$SDIST" | grep -q '^tack-[^/]*/tests/'; then
    echo "$SDIST holds tests/: MANIFEST.in prunes them" >&2
    return 1
  fi
  echo "$SDIST"
}

print_times() {
  echo
  echo "=== timings ==="
  cat "$TIMES"
}

# apt_install PKG...: install the Debian packages that are missing (quiet; the log on failure).
apt_install() {
  local missing=() p sudo=""
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  local log; log="$(mktemp)"
  if ! { $sudo env DEBIAN_FRONTEND=noninteractive apt-get -qq update &&
         $sudo env DEBIAN_FRONTEND=noninteractive apt-get -qq -o=Dpkg::Use-Pty=0 install -y \
           --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}
