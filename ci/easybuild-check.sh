#!/usr/bin/env bash
# Check recipes/easybuild with the real EasyBuild 5: install Tack from the checkout's sdist with
# `eb` (offline: the sdist in --sourcepath; the machine's Python standing for the dependencies,
# --filter-deps), Lmod as the module tool; then, in a clean shell, `module load Tack` and run the
# contour served from the installed bundles with nothing compiled.  A second install with a site
# config checks that the module exports what the site tool's own module does.
#
#   ci/easybuild-check.sh [SCRATCH]
#
# EasyBuild (easybuild==5.4.1) and the machine's Python packages come from PyPI, into venvs under
# SCRATCH; Lmod is Debian's (installed with apt-get when missing).  SCRATCH (default: a new
# temporary directory) may be reused: setup is idempotent and `eb` runs with --rebuild.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
scratch_dir easybuild-check "${1:-}"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' tack/_version.py)"
# The easyconfig, named as easybuild-easyconfigs names them: <name>-<version>-<toolchain>.eb
RECIPE="$(ls recipes/easybuild/Tack-"$VERSION"-*.eb)"
[ "$(wc -l <<<"$RECIPE")" -eq 1 ] || { echo "not one easyconfig for $VERSION: $RECIPE" >&2; exit 1; }
ECNAME="$(basename "$RECIPE")"
SITE="$ROOT/tests/packaging/site.yaml"
LMOD_INIT=/usr/share/lmod/lmod/init/bash
# The site config's module refers to $USER, which a container's root shell may not set: loading
# the module (EasyBuild's sanity check loads it) would fail.
export USER="${USER:-$(id -un)}"

# -- the sdist, where --sourcepath looks for it, and CI-local copies of the easyconfig --------------
step "sdist (python -m build --sdist)" build_sdist "$S" || exit 1
SHA="$(sha256sum "$SDIST" | cut -d' ' -f1)"
rm -rf "$S/sources" "$S/easyconfigs" && mkdir -p "$S/sources/t/Tack" "$S/easyconfigs"
cp "$SDIST" "$S/sources/t/Tack/tack-$VERSION.tar.gz"     # SOURCELOWER_TAR_GZ, in <letter>/<name>/
EC="$S/easyconfigs/$ECNAME"
committed="$(sed -n "s/^checksums = \['\([0-9a-f]*\)'\]$/\1/p" "$RECIPE")"
sed "s/$committed/$SHA/" "$RECIPE" > "$EC"
echo "$ECNAME: committed sha256 $committed; this checkout's sdist $SHA ($SDIST)"

# -- EasyBuild 5, and the machine's Python: a venv of Debian's python3 with Tack's dependencies ------
apt_install lmod
venv_with() {  # VENV PACKAGE...: a venv of Debian's python3 with these packages from PyPI
  local venv="$1"; shift
  rm -rf "$venv" && /usr/bin/python3 -m venv "$venv" || return 1
  # Debian's pip as it is: it installs EasyBuild's sdists with setup.py (a deprecation notice
  # each, filtered out) faster than a current pip, which builds their wheels first (35 to 70 s
  # against 130 s on 2 shared cores).
  "$venv/bin/pip" install -q "$@" 2>&1 | grep -v -e '^WARNING: Location' -e 'DEPRECATION: '
  [ "${PIPESTATUS[0]}" -eq 0 ] && touch "$venv/.ready"
}
if [ ! -f "$S/venv-eb/.ready" ]; then
  # pycodestyle: eb --check-contrib's style check
  step "venv + pip install easybuild==5.4.1" venv_with "$S/venv-eb" easybuild==5.4.1 pycodestyle || exit 1
fi
# eb alone on PATH: the venv's own `python` must not be the one EasyBuild picks for the install.
mkdir -p "$S/bin" && ln -sf "$S/venv-eb/bin/eb" "$S/bin/eb"
if [ ! -f "$S/python/.ready" ]; then
  # What --filter-deps says the machine provides: Python (with pip and setuptools>=77, the
  # build backend), numpy (SciPy-bundle), llvmlite (numba's), PyYAML, Jinja2 (Python-bundle-PyPI)
  # and archspec.
  step "venv + pip install of the machine's Python packages" venv_with "$S/python" \
    "setuptools>=77" numpy llvmlite pyyaml jinja2 archspec || exit 1
fi

# eb in a shell of its own: Lmod initialised, the machine's Python first on PATH (EasyBuild
# installs with the `python` it finds there), EasyBuild's own Python for eb (EB_PYTHON), no
# configuration of the caller's (EASYBUILD_*, config files).
FILTER=Python,SciPy-bundle,numba,PyYAML,Python-bundle-PyPI,archspec,setuptools
AS_ROOT=""
[ "$(id -u)" -ne 0 ] || AS_ROOT=--allow-use-as-root-and-accept-consequences   # CI runs as root
eb_shell() {  # COMMAND...: run in eb's environment
  ( for v in $(compgen -e | grep '^EASYBUILD_' || true); do unset "$v"; done
    set +u; . "$LMOD_INIT"; set -u
    export PATH="$S/python/bin:$S/bin:$PATH" EB_PYTHON="$S/venv-eb/bin/python" \
      XDG_CONFIG_HOME="$S/xdg" XDG_CONFIG_DIRS="$S/xdg"
    "$@" )
}
install_tack() {  # EASYCONFIG INSTALLPATH: eb's output in INSTALLPATH.log, its steps shown
  local ec="$1" root="$2" rc=0
  eb_shell eb "$ec" --sourcepath="$S/sources" --buildpath="$S/eb-build" --tmpdir="$S/eb-tmp" \
    --repositorypath="$S/ebfiles_repo" --installpath="$root" --modules-tool=Lmod --module-syntax=Lua \
    --filter-deps=$FILTER --try-toolchain=system,system --disable-map-toolchains --rebuild $AS_ROOT \
    >"$root.log" 2>&1 || rc=$?
  grep -E '^== (building|installing|postprocessing|sanity|creating module|COMPLETED|FAILED)' "$root.log" || true
  [ $rc -eq 0 ] || tail -60 "$root.log"
  return $rc
}
lmod_found() {
  eb_shell eb --check-eb-deps --modules-tool=Lmod --tmpdir="$S/eb-tmp" $AS_ROOT >"$S/eb-deps.txt" 2>&1 || true
  grep -E '^\* (Python|modules tool)' "$S/eb-deps.txt"
  grep -q '^\* modules tool: Lmod [0-9]' "$S/eb-deps.txt"
}
step "eb --check-eb-deps --modules-tool=Lmod" lmod_found
# What easybuild-easyconfigs' CI runs on a contribution: the style check (pycodestyle) and sha256
# checksums, on the committed easyconfig.
step "eb --check-contrib $RECIPE" \
  eb_shell eb --check-contrib "$RECIPE" --tmpdir="$S/eb-tmp" $AS_ROOT
step "eb $ECNAME" install_tack "$EC" "$S/eb"
PREFIX="$S/eb/software/Tack/$VERSION"
echo "module files: $(cd "$S/eb/modules/all" && ls Tack/*)"

# -- the installed module, in a clean shell ------------------------------------------------------------
in_module_shell() {  # MODULEPATH SCRIPT: Lmod in a clean bash, the machine's Python on PATH
  env -i HOME="$HOME" USER="$USER" PATH="$S/python/bin:/usr/bin:/bin" TERM=dumb \
    bash --noprofile --norc -c "set -euo pipefail; source '$LMOD_INIT'; module use '$1'
    cd /tmp; $2"
}
loaded() {
  in_module_shell "$S/eb/modules/all" '
    module load Tack
    env | grep "^TACK_CACHE" | sort
    said="$(python -m tack.site image --check)"; echo "$said"
    grep -q "every module by its source.s time" <<<"$said"
    python -m tack.site bundles check'
}
step "clean shell: module load Tack + import image by time + contour (bundles check)" loaded
prepended() {   # the user's own bundles stay after the module's, and come back on unload
  in_module_shell "$S/eb/modules/all" "
    export TACK_CACHE_BUNDLES=/home/me/my-bundles
    module load Tack
    [ \"\$TACK_CACHE_BUNDLES\" = '$PREFIX/share/tack/bundles:/home/me/my-bundles' ] || { echo \"load: \$TACK_CACHE_BUNDLES\" >&2; exit 1; }
    module unload Tack
    [ \"\$TACK_CACHE_BUNDLES\" = /home/me/my-bundles ] || { echo \"unload: \$TACK_CACHE_BUNDLES\" >&2; exit 1; }
    echo 'TACK_CACHE_BUNDLES: the module prepends its bundles to /home/me/my-bundles; unload restores it'"
}
step "clean shell: TACK_CACHE_BUNDLES prepended by load" prepended

# The sanity check fails on a stale bundle: one made by the checkout's Tack (0.1.0+src.<hash>),
# put beside the installed ones, fails `eb --sanity-check-only`; then it is taken away again.
stale_fails() {
  rm -rf "$S/stale" && mkdir -p "$S/stale"
  printf 'version: 1\nbuild:\n  archs:\n    cpu: [x86_64_v2]\n' > "$S/stale/site.yaml"
  PYTHONPATH="$ROOT" TACK_CACHE=off "$S/python/bin/python" -m tack.site bundles build \
    "$S/stale/site.yaml" --output "$S/stale" >/dev/null || return 1
  local planted rc=0
  planted="$(ls "$S"/stale/bundle-*-cpu-x86_64_v2-*)" || return 1
  cp "$planted" "$PREFIX/share/tack/bundles/" || return 1
  expect_failure "is stale (made by Tack $VERSION+src." eb_shell eb "$EC" --sanity-check-only \
    --installpath="$S/eb" --tmpdir="$S/eb-tmp" --modules-tool=Lmod --module-syntax=Lua \
    --filter-deps=$FILTER --try-toolchain=system,system --disable-map-toolchains $AS_ROOT || rc=$?
  rm -f "$PREFIX/share/tack/bundles/$(basename "$planted")"
  return $rc
}
step "eb --sanity-check-only fails on a stale bundle" stale_fails

# -- with a site config: its kernels in the bundles, its settings in the module -------------------------
# The packaging checks' site config, its cache directory made of $HOME and $USER, which EasyBuild
# 5 resolves when the module is loaded; the easyconfig copy names it and ends with what
# `python -m tack.site env --shell easybuild` prints for it.
SITE_EB="$S/site.yaml"
sed 's|^  directory: /tmp/tack-site-cache$|  directory: $HOME/tack-site-cache/$USER|' "$SITE" > "$SITE_EB"
grep -q 'directory: \$HOME/tack-site-cache/\$USER' "$SITE_EB"
EC_SITE="$S/easyconfigs/site/$ECNAME"
mkdir -p "$(dirname "$EC_SITE")"
{ sed "s|^local_site_config = None$|local_site_config = '$SITE_EB'|" "$EC"
  PYTHONPATH="$ROOT" "$S/python/bin/python" -m tack.site env "$SITE_EB" --shell easybuild
} > "$EC_SITE"
grep -q "^local_site_config = '$SITE_EB'$" "$EC_SITE"
tail -7 "$EC_SITE"
step "eb $ECNAME (site config)" install_tack "$EC_SITE" "$S/eb-site"
SITED="$S/eb-site/software/Tack/$VERSION"
compare_site_settings() {
  cmp "$SITE_EB" "$SITED/share/tack/site.yaml"
  rm -rf "$S/site-modules"
  PYTHONPATH="$ROOT" "$S/python/bin/python" -m tack.site modules "$SITE_EB" --format lmod \
    --root "$S/site-modules" >/dev/null
  local want got
  want="$(in_module_shell "$S/site-modules" 'module load tack; env | grep "^TACK_CACHE" | grep -v "^TACK_CACHE_BUNDLES=" | sort')"
  got="$(in_module_shell "$S/eb-site/modules/all" 'module load Tack; env | grep "^TACK_CACHE" | sort; python -m tack.site bundles check')"
  echo "python -m tack.site modules (Lmod) exports:"; echo "$want" | sed 's/^/  /'
  [ "$(echo "$got" | grep '^TACK_CACHE' | grep -v '^TACK_CACHE_BUNDLES=')" = "$want" ] \
    || { echo "EasyBuild's module exports other settings:" >&2; echo "$got" >&2; return 1; }
  echo "$got" | grep -qx "TACK_CACHE_BUNDLES=$SITED/share/tack/bundles" \
    || { echo "TACK_CACHE_BUNDLES is not the install's bundles" >&2; echo "$got" >&2; return 1; }
  echo "$got" | grep 'nothing compiled'
  echo "EasyBuild's module: the site tool's settings (\$HOME and \$USER resolved when loaded); TACK_CACHE_BUNDLES=$SITED/share/tack/bundles"
}
step "site config: the module sets what tack.site modules sets" compare_site_settings

# -- figures -------------------------------------------------------------------------------------------
# eb's own total (its log), and the bundle build and check inside it (bundles install's lines,
# in the install's EasyBuild log).
{
  for root in "$S/eb" "$S/eb-site"; do
    log="$(ls -t "$root/software/Tack/$VERSION/easybuild/"easybuild-Tack-*.log | head -1)"
    echo "--- $(basename "$root"): $(sed -n 's/^== Build succeeded for .*(total: \(.*\))$/eb total \1/p' "$root.log")"
    grep -E '^bundles install: (built|checked)|^arch +kernels|^cpu:[^ ]+ +[0-9]' "$log"
  done
} > "$S/easybuild-figures.txt" 2>&1 || true
echo; echo "=== figures ==="; cat "$S/easybuild-figures.txt"
print_times
