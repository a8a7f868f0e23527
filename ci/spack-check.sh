#!/usr/bin/env bash
# Check spack-repo/ with the real Spack: audit, info, concretize the variants, install py-tack with
# Python and its Python dependencies as externals, load it (spack load, generated Lmod and Tcl
# modules with the real module tools) and run the contour served from the installed bundle; push
# the install to a build cache and install it from there alone into another install root, where
# the relocated copy serves the contour and passes the package's stand-alone tests (spack test run).
# Also: spack style on the package, the dependencies each GPU variant brings, an aarch64 target
# concretized, and a site's settings given the Spack way (modules.yaml `environment: set`).
#
#   ci/spack-check.sh [SCRATCH]
#
# Spack comes from, in order: SPACK_ROOT (a Spack of your own, used with its own configuration:
# the externals and the mirror steps are skipped), the shared tool kit (../shared/tools, or
# TACK_TOOLS; see its README), or a clone of Spack's v1.1.0 release and spack-packages when the
# network allows.  SCRATCH (default: a new temporary directory) may be reused: setup is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
scratch_dir spack-check "${1:-}"
SITE="$ROOT/tests/packaging/site.yaml"
PACKAGE_PY=spack-repo/spack_repo/tack/packages/py_tack/package.py

# -- the release version's sdist and a CI-local copy of the repository with its sha256 -------------
step "sdist (python -m build --sdist)" build_sdist "$S" || exit 1
SHA="$(sha256sum "$SDIST" | cut -d' ' -f1)"
rm -rf "$S/repo" && mkdir -p "$S/repo/spack_repo"
cp -r spack-repo/spack_repo/tack "$S/repo/spack_repo/tack"
PKG="$S/repo/spack_repo/tack/packages/py_tack/package.py"
committed="$(grep -o 'version("0.1.0", sha256="[0-9a-f]*")' "$PKG" | grep -o '[0-9a-f]\{64\}')"
sed -i "s/$committed/$SHA/" "$PKG"
echo "py-tack@0.1.0: committed sha256 $committed; this checkout's sdist $SHA ($SDIST)"

# -- Spack -----------------------------------------------------------------------------------------
KIT=""
OWN_SPACK="${SPACK_ROOT:-}"
if [ -n "$OWN_SPACK" ]; then
  . "$SPACK_ROOT/share/spack/setup-env.sh"
elif [ -f "$TOOLS/spack/setup.sh" ]; then
  KIT=1
  step "spack/setup.sh (the shared kit)" bash "$TOOLS/spack/setup.sh" "$S/spack" >"$S/spack-setup.log" 2>&1 \
    || { cat "$S/spack-setup.log"; exit 1; }
  if [ ! -x "$S/venv-ext/bin/python" ]; then
    /usr/bin/python3 -m venv "$S/venv-ext"
  fi
  EXT=(pip setuptools wheel numpy llvmlite pyyaml jinja2 markupsafe archspec)
  step "venv + pip install of the externals" "$S/venv-ext/bin/pip" install -q -U "${EXT[@]}" 2>&1 | grep -v '^WARNING: Location' || true
  step "externals.sh + mirror-add.sh" bash -c "bash '$TOOLS/spack/externals.sh' '$S/spack' '$S/venv-ext/bin/python' ${EXT[*]} >/dev/null && bash '$TOOLS/spack/mirror-add.sh' '$S/spack' '$SDIST'"
  set +u; . "$S/spack/env.sh"; set -u
else
  echo "no SPACK_ROOT and no tool kit at $TOOLS (set TACK_TOOLS): cloning Spack v1.1.0"
  git clone -q --depth 1 -b v1.1.0 https://github.com/spack/spack "$S/spack-clone"
  git clone -q --depth 1 -b v2025.11.0 https://github.com/spack/spack-packages "$S/spack-packages-clone"
  set +u; . "$S/spack-clone/share/spack/setup-env.sh"; set -u
  spack repo add --scope site "$S/spack-packages-clone/repos/spack_repo/builtin" || true
  spack mirror add --scope site local "file://$S/mirror"
  spack_sdist_dir="$S/mirror/_source-cache/archive/${SHA:0:2}"
  mkdir -p "$spack_sdist_dir" && cp "$SDIST" "$spack_sdist_dir/$SHA.tar.gz"
fi

spack repo remove --scope user tack >/dev/null 2>&1 || true
step "spack repo add" spack repo add --scope user "$S/repo/spack_repo/tack"
step "spack audit packages py-tack" spack audit packages py-tack
step "spack info py-tack" spack info py-tack >"$S/spack-info.txt"
grep -E "^    (bundles|mpi|spirv|cuda|rocm|cuda_arch|amdgpu_target) " "$S/spack-info.txt"

# -- spack style: flake8 (99 columns) and black, as Spack checks a package ---------------------------
# flake8 and black from PyPI, at the versions spack-packages' own style check pins.  Spack's
# .flake8 lets package files under var/spack/ star-import spack.package: the package is checked
# there, as a copy (anywhere else Spack's configuration would take it for library code).
spack_style() {
  [ -z "$OWN_SPACK" ] || { echo "SPACK_ROOT is your own Spack: nothing is written into it, no style check"; return 0; }
  if [ ! -x "$S/venv-style/bin/black" ]; then
    /usr/bin/python3 -m venv "$S/venv-style" &&
      "$S/venv-style/bin/pip" install -q black==25.1.0 flake8==7.2.0 2>&1 | grep -v '^WARNING: Location' || true
  fi
  local d="$SPACK_ROOT/var/spack/tack-style"
  rm -rf "$d" && mkdir -p "$d" && cp "$PACKAGE_PY" "$d/package.py"
  PATH="$S/venv-style/bin:$PATH" spack style -t flake8,black "$d/package.py"
}

# direct_deps SPEC...: concretize SPEC, print the root's variants and its direct dependencies
SPACK_GLOBAL=()     # spack's own options for direct_deps (a configuration scope)
direct_deps() {
  spack "${SPACK_GLOBAL[@]}" spec --json "$@" | python3 -c '
import json, sys
root = json.load(sys.stdin)["spec"]["nodes"][0]
print("variants:", " ".join(f"{k}={v}" for k, v in sorted(root["parameters"].items())
                            if k in ("bundles", "cuda", "rocm", "spirv", "cuda_arch", "amdgpu_target")))
t = root["arch"]["target"]
print("target:", t["name"] if isinstance(t, dict) else t)
for d in root["dependencies"]:
    print("depends on", d["name"], ",".join(d["parameters"]["deptypes"]))'
}
# expect_deps WANT NOT SPEC...: the root keeps +bundles, depends on each of WANT, on none of NOT
expect_deps() {
  local want="$1" not="$2" out; shift 2
  out="$(direct_deps "$@")" || return 1
  echo "$out"
  grep -q "^variants: .*bundles=True" <<<"$out" || { echo "the concretizer turned bundles off" >&2; return 1; }
  for d in $want; do grep -q "^depends on $d " <<<"$out" || { echo "no dependency on $d" >&2; return 1; }; done
  for d in $not; do ! grep -q "^depends on $d " <<<"$out" || { echo "a dependency on $d" >&2; return 1; }; done
}
step "spack style -t flake8,black (package.py)" spack_style
step "spack spec -l py-tack" spack spec -l py-tack
# +cuda: PTX needs LLVM alone, the runtime binding is py-cuda-bindings: no CUDA toolkit dependency
step "spack spec py-tack +cuda cuda_arch=90 +mpi (its dependencies)" \
  expect_deps "py-cuda-bindings py-mpi4py" "cuda" py-tack +cuda cuda_arch=90 +mpi
step "spack spec -l py-tack ~bundles" spack spec -l py-tack ~bundles
step "spack spec py-tack +cuda (conflict: no cuda_arch)" \
  expect_failure "+cuda builds CUDA bundles for the GPUs cuda_arch names" spack spec py-tack +cuda
step "spack spec py-tack ~bundles +spirv (conflict: it would do nothing)" \
  expect_failure "+spirv builds SPIR-V bundles, which ~bundles turns off" spack spec py-tack ~bundles +spirv

[ -n "$KIT" ] || { echo "SPACK_ROOT/clone: Python and its dependencies are not externals here; stopping after concretization"; print_times; exit 0; }

# kit_scope DIR SED: a configuration scope whose packages are the kit's (its gcc, the externals)
# edited by SED, and only those; for concretizing specs this host cannot build.
kit_scope() {
  mkdir -p "$1"
  { echo "packages::"
    sed -n '/^  gcc:/,$p' "$SPACK_USER_CONFIG_PATH/packages.yaml"
    sed -n '/^packages:/,$p' "$S/spack/spack/etc/spack/site/packages.yaml" | tail -n +2
  } | sed -E "$2" >"$1/packages.yaml"
}

# -- +rocm: ld.lld from llvm-amdgpu (build); nothing links HIP or the HSA runtime ----------------
# llvm-amdgpu is built with a Fortran compiler, which this host lacks: a scope declares the host's
# gcc with Fortran too (concretization only: nothing is built).
rocm_spec() {
  kit_scope "$S/fortran-scope" "s/languages:='c,c\+\+'/languages:='c,c++,fortran'/"
  SPACK_GLOBAL=(-C "$S/fortran-scope")
  local rc=0
  expect_deps "llvm-amdgpu" "hip hsa-rocr-dev" py-tack +rocm amdgpu_target=gfx90a +spirv || rc=$?
  SPACK_GLOBAL=(); return $rc
}
step "spack spec py-tack +rocm amdgpu_target=gfx90a +spirv (its dependencies)" rocm_spec

# -- an aarch64 target (Graviton3's default, neoverse_v1), concretized on this x86-64 host ---------
# Spack concretizes only host-compatible targets, and the externals are this host's: a scope of
# its own declares the same externals (and gcc) for aarch64, and host_compatible:false lets the
# target leave the host's family.  Concretization only: nothing here could run aarch64 code.
aarch64_spec() {
  kit_scope "$S/aarch64-scope" 's/^(    - spec: .*)$/\1 target=aarch64/'
  SPACK_GLOBAL=(-C "$S/aarch64-scope" -c concretizer:targets:host_compatible:false)
  local out rc=0
  out="$(expect_deps "python-venv" "" py-tack target=neoverse_v1)" || rc=$?
  SPACK_GLOBAL=(); echo "$out"
  [ $rc -eq 0 ] && grep -qx "target: neoverse_v1" <<<"$out"
}
step "spack spec py-tack target=neoverse_v1 (+bundles; aarch64 externals)" aarch64_spec

# -- a family Tack builds no bundles for (big-endian POWER8): refused when concretized, not at install
power8_spec() {
  kit_scope "$S/ppc64-scope" 's/^(    - spec: .*)$/\1 target=ppc64/'
  expect_failure "Tack's CPU backend builds bundles for x86_64, aarch64 and ppc64le" \
    spack -C "$S/ppc64-scope" -c concretizer:targets:host_compatible:false spec py-tack target=power8
}
step "spack spec py-tack target=power8 (conflict: bundles for x86_64, aarch64, ppc64le only)" power8_spec

# The real module tools, each in a clean shell (Lmod from apt; Environment Modules as ci/run-tests.sh
# installs it).
LMOD_INIT=/usr/share/lmod/lmod/init/bash
TCL_INIT=/usr/share/modules/init/bash
[ -f "$TCL_INIT" ] || TCL_INIT=/opt/envmodules/usr/share/modules/init/bash   # where ci/run-tests.sh puts it
in_module_shell() {  # INIT USE-DIRS MODULE : load MODULE in a clean bash, print TACK_*, run contour
  env -i HOME="$HOME" PATH=/usr/bin:/bin TERM=dumb bash --noprofile --norc -c "
    set -e; source '$1'; for d in $2; do module use \$d; done; module load $3
    cd /tmp; env | grep '^TACK_CACHE' | sort
    said=\"\$(python3 -m tack.site image --check)\"; echo \"\$said\"
    grep -q 'every module by its source.s time' <<<\"\$said\"
    python3 -m tack.site bundles check"
}

# -- install, with the install-time tests (imports; contour served from the bundle) ---------------
spack uninstall -y -a py-tack >/dev/null 2>&1 || true
step "spack install --test=root py-tack" spack install --fail-fast --test=root py-tack

# -- a build cache: push the install, install it from the cache alone into another install root --
# "Another machine" for Spack: a user scope of its own (a copy of the kit's) whose install tree and
# module roots lie elsewhere, at paths of another length, so that Spack relocates the install.
# Externals (Python and its packages) are never pushed: the push takes py-tack and what Spack
# built for it (python-venv), and the other machine has the same externals.
BC="$S/buildcache"
R2="$S/relocated"
TREE2="$R2/an-install-root-longer-than-the-build-one"
BUILT="$(spack find --format '{prefix}' py-tack)"
HASH="$(spack find --format '{hash}' py-tack)"
rm -rf "$BC" "$R2" && mkdir -p "$R2/spack-config"
cp "$SPACK_USER_CONFIG_PATH"/*.yaml "$R2/spack-config/"
sed -i "s|$S/spack/spack-install|$TREE2|; s|$S/spack/spack-modules|$R2/spack-modules|" \
  "$R2/spack-config/config.yaml" "$R2/spack-config/modules.yaml"
relocated() { ( export SPACK_USER_CONFIG_PATH="$R2/spack-config"; "$@" ); }
step "spack buildcache push --unsigned" spack buildcache push --unsigned --update-index "$BC" py-tack
add_mirror() { spack mirror add --unsigned tack-buildcache "file://$BC" && spack buildcache list --long; }
step "spack mirror add --unsigned + buildcache list (other root)" relocated add_mirror
# By its hash: exactly the binary pushed, with no concretization (`spack install --cache-only py-tack`
# concretizes first, about a minute here, and reuses that binary too).
step "spack install --cache-only /HASH (other root)" relocated spack install --cache-only "/$HASH"
check_relocated() {  # under spack load of the relocated copy: its own Tack, the bundle as built, served
  local prefix; prefix="$(spack find --format '{prefix}' py-tack)"
  echo "built in $BUILT"; echo "installed from the build cache in $prefix"
  case "$prefix" in "$TREE2"/*) ;; *) echo "not in the other install root $TREE2" >&2; return 1 ;; esac
  # Spack relocated the install's text files and links; a bundle names no path, so it is the bytes
  # built (tests/site_bundles/test_no_build_paths.py), and nothing in share/tack names the build root.
  diff <(cd "$BUILT/share/tack/bundles" && sha256sum ./*) <(cd "$prefix/share/tack/bundles" && sha256sum ./*) \
    || { echo "the relocated bundles differ from those built" >&2; return 1; }
  if grep -rlF "$S/spack/spack-install" "$prefix/share/tack"; then
    echo "the relocated share/tack names the build root $S/spack/spack-install" >&2; return 1
  fi
  ( spack load py-tack
    cd /tmp
    env | grep '^TACK_CACHE' | sort
    [ "$TACK_CACHE_BUNDLES" = "$prefix/share/tack/bundles" ] || { echo "TACK_CACHE_BUNDLES is not the relocated bundles" >&2; exit 1; }
    python3 -c 'import tack; print(tack.__file__)' | grep "^$prefix/" \
      || { echo "spack load imports another Tack" >&2; exit 1; }
    # the demo with a new, empty user cache, then bundles check (nothing compiled, LLVM not loaded)
    TACK_CACHE_DIR="$R2/user-cache" python3 -m tack.demo | tee "$R2/demo.txt" || exit 1
    grep -q "(2 of 2 kernels loaded this run: 2 from the site bundles)" "$R2/demo.txt" \
      || { echo "the demo compiled its kernels" >&2; exit 1; }
    # The relocated import image still serves, each module checked by its source's time: the
    # package set the sources' times to 0 before writing it, as the build cache set them again.
    python3 -m tack.site image --check | tee "$R2/image.txt" || exit 1
    grep -q "every module by its source's time" "$R2/image.txt" \
      || { echo "the relocated import image checks its modules by content" >&2; exit 1; }
    # Spack's build cache set every source's time to 0: Tack's .pyc files are checked by content
    # (the package compiles them so), not left stale.
    python3 - <<'PYEOF' || { echo "tack's .pyc files are not hash-checked" >&2; exit 1; }
import importlib.util, os, sys, tack
pyc = importlib.util.cache_from_source(tack.__file__)
flags = int.from_bytes(open(pyc, "rb").read(8)[4:8], "little")
print(f"{pyc}: flags {flags}, source time {os.stat(tack.__file__).st_mtime:.0f}")
sys.exit(0 if flags == 3 else 1)
PYEOF
    python3 -m tack.site bundles check )
}
step "spack load py-tack (other root) + contour from the relocated bundle" relocated check_relocated
relocated_module() {
  spack module lmod refresh -y >/dev/null &&
    in_module_shell "$LMOD_INIT" "$(echo "$R2"/spack-modules/lmod/linux-*/Core)" "$(spack module lmod find py-tack)"
}
step "Lmod: module load py-tack (other root) + contour" relocated relocated_module
standalone_tests() {  # spack test run, then its results; fails if a test failed
  spack test remove -y tack-relocated >/dev/null 2>&1 || true
  local rc=0
  spack test run --alias tack-relocated py-tack || rc=$?
  spack test results -l tack-relocated | sed -n '/^=* SUMMARY/,$p'
  return $rc
}
step "spack test run py-tack (other root: stand-alone tests)" relocated standalone_tests

# -- figures of the install -------------------------------------------------------------------------
PLAIN="$(spack find --format '{prefix}' py-tack)"
for prefix in "$PLAIN"; do
  echo "--- $prefix"
  python3 - "$prefix/.spack/install_times.json" "$prefix/.spack/spack-build-out.txt.gz" <<'PY'
import datetime, gzip, json, re, sys
t = json.load(open(sys.argv[1]))
print("py-tack build: " + ", ".join(f"{p['name']} {p['seconds']:.1f} s" for p in t["phases"])
      + f"; total {t['total']:.1f} s")
# bundle building: from Spack's log line running `bundles install` to the log's next line
stamps = [(datetime.datetime.strptime(m[1], "%Y-%m-%d-%H:%M:%S.%f"), line)
          for line in gzip.open(sys.argv[2], "rt") if (m := re.match(r"==> \[([^]]+)\]", line))]
for (t0, line), (t1, _) in zip(stamps, stamps[1:]):
    if "'bundles' 'install'" in line:
        print(f"bundles install (build + check, in the install): {(t1 - t0).total_seconds():.2f} s")
PY
  zcat "$prefix/.spack/spack-build-out.txt.gz" | sed -n '/^arch *kernels/,/^bundles install: checked/p'
  ls -l "$prefix/share/tack/bundles"
  grep -h "served from the bundles" "$prefix/.spack/install-time-test-log.txt"
done | tee "$S/spack-figures.txt"
{ echo "--- build cache $BC: $(du -sh "$BC" | cut -f1)"
  ls "$BC"/v3/manifests/spec/*/ | grep -o '^[a-z0-9.-]*-[a-z0-9]\{32\}' | sed 's/^/  pushed /'
  echo "  relocated to $TREE2 (install tree $(echo -n "$TREE2" | wc -c) characters long; built in one of $(echo -n "$S/spack/spack-install" | wc -c))"
} | tee -a "$S/spack-figures.txt"

# -- spack load: TACK_CACHE_BUNDLES is prepended to, not overwritten ---------------------------------
check_load() {
  ( export TACK_CACHE_BUNDLES=/a/site/bundle/dir
    spack load "$@"
    cd /tmp
    env | grep '^TACK_CACHE' | sort
    [ "$TACK_CACHE_BUNDLES" = "$PLAIN/share/tack/bundles:/a/site/bundle/dir" ] \
      || { echo "spack load did not prepend the install's bundles to TACK_CACHE_BUNDLES" >&2; exit 1; }
    python3 -m tack.site bundles check "$PLAIN/share/tack/bundles" )
}
step "spack load py-tack (TACK_CACHE_BUNDLES prepended) + contour from the bundle" check_load py-tack

# -- modules, loaded with the real module systems ----------------------------------------------------
step "spack module tcl refresh + lmod refresh" bash -c "spack module tcl refresh -y >/dev/null && spack module lmod refresh -y >/dev/null"
MODS="$S/spack/spack-modules"
LMOD_NAME="$(spack module lmod find py-tack)"
TCL_NAME="$(spack module tcl find py-tack)"
step "Lmod: module load py-tack (Spack's) + contour" \
  in_module_shell "$LMOD_INIT" "$(echo "$MODS"/lmod/linux-*/Core)" "$LMOD_NAME"
step "Tcl (Environment Modules): module load py-tack + contour" \
  in_module_shell "$TCL_INIT" "$(echo "$MODS"/tcl/linux-*)" "$TCL_NAME"

# -- a site's settings, the Spack way: modules.yaml `environment: set` in a scope of the site's ----
# Nothing of them is in the package or its hash.  The scope is written from the site config, so
# that Spack's modules set what the site tool's own module files (python -m tack.site modules) do;
# TACK_CACHE_BUNDLES stays the install's bundles.
SITE_SCOPE="$S/site-scope"
write_site_scope() {
  mkdir -p "$SITE_SCOPE"
  PYTHONPATH="$ROOT" "$S/venv-ext/bin/python" - "$SITE" >"$SITE_SCOPE/modules.yaml" <<'PY' || return 1
import sys, yaml
from tack.site.config import load
env = {k: v for k, v in load(sys.argv[1]).exports().items() if k != "TACK_CACHE_BUNDLES"}
modules = {kind: {"py-tack": {"environment": {"set": dict(env)}}} for kind in ("lmod", "tcl")}
print("# the site's Tack settings, for the module files Spack generates (from tests/packaging/site.yaml)")
print(yaml.safe_dump({"modules": {"default": modules}}, sort_keys=False), end="")
PY
  cat "$SITE_SCOPE/modules.yaml"
  spack -C "$SITE_SCOPE" module lmod refresh -y >/dev/null && spack -C "$SITE_SCOPE" module tcl refresh -y >/dev/null
}
step "site settings: modules.yaml environment: set (scope $SITE_SCOPE) + module refresh" write_site_scope
site_module_env() {
  rm -rf "$S/site-modules"
  # The site tool's module files, rendered by this checkout's Tack (with the externals' venv:
  # Spack's external py-jinja2 does not bring MarkupSafe along).
  PYTHONPATH="$ROOT" "$S/venv-ext/bin/python" -m tack.site modules "$SITE" --root "$S/site-modules" >/dev/null
  in_module_shell "$LMOD_INIT" "$S/site-modules" tack | grep '^TACK_CACHE' | grep -v '^TACK_CACHE_BUNDLES='
}
compare_site_settings() {
  local want; want="$(site_module_env)"
  echo "python -m tack.site modules (Lmod) exports:"; echo "$want" | sed 's/^/  /'
  local how got
  for how in lmod tcl; do
    case $how in
      lmod) got="$(in_module_shell "$LMOD_INIT" "$(echo "$MODS"/lmod/linux-*/Core)" "$LMOD_NAME")" ;;
      tcl)  got="$(in_module_shell "$TCL_INIT" "$(echo "$MODS"/tcl/linux-*)" "$TCL_NAME")" ;;
    esac
    if [ "$(echo "$got" | grep '^TACK_CACHE' | grep -v '^TACK_CACHE_BUNDLES=')" != "$want" ]; then
      echo "$how: the site's settings differ:" >&2; echo "$got" >&2; return 1
    fi
    echo "$got" | grep -qx "TACK_CACHE_BUNDLES=$PLAIN/share/tack/bundles" \
      || { echo "$how: TACK_CACHE_BUNDLES is not the install's bundles" >&2; echo "$got" >&2; return 1; }
    echo "$how: same settings as the site tool's module; TACK_CACHE_BUNDLES=$PLAIN/share/tack/bundles; contour served from the bundle"
  done
}
step "site settings: Lmod and Tcl set what tack.site modules sets" compare_site_settings

echo; echo "=== figures ==="; cat "$S/spack-figures.txt"
print_times
