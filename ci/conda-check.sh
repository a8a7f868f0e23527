#!/usr/bin/env bash
# Check recipes/conda with the real conda-build: render for linux-64 and osx-arm64 (with the CUDA
# variants conda-forge's pinning lists, which the recipe must not vary on), build BOTH outputs
# (tack, and tack-cuda with CONDA_OVERRIDE_CUDA) against the local channel with the recipe's
# tests (each runs `bundles check`, which fails on a stale bundle), check the packages (their
# run pins, no file in both, their sizes), create an environment from each, and run the contour
# served from the package's bundles by the env's python called directly: no activation, no
# TACK_CACHE_BUNDLES.  A bundle made stale (by the sources' Tack, the trap the recipe avoids)
# makes `bundles check` fail.
#
#   ci/conda-check.sh [SCRATCH]
#
# conda and conda-build come from the shared tool kit (../shared/tools, or TACK_TOOLS; see its
# README); cuda-python (and its dependencies) from PyPI, repackaged into the scratch copy of the
# kit's channel by its add-wheels.sh.  SCRATCH (default: a new temporary directory) may be
# reused: setup is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
scratch_dir conda-check "${1:-}"

# -- the release version's sdist and a CI-local copy of the recipe with its sha256 -----------------
step "sdist (python -m build --sdist)" build_sdist "$S" || exit 1
SHA="$(sha256sum "$SDIST" | cut -d' ' -f1)"
rm -rf "$S/recipe" && mkdir -p "$S/recipe" && cp -r recipes/conda "$S/recipe/tack"
R="$S/recipe/tack"
committed="$(sed -n 's/^{% set sha256 = "\([0-9a-f]*\)" %}$/\1/p' "$R/meta.yaml")"
sed -i "s/$committed/$SHA/" "$R/meta.yaml"
echo "tack 0.1.0: committed sha256 $committed; this checkout's sdist $SHA ($SDIST)"

step "conda/setup.sh (the shared kit)" bash "$TOOLS/conda/setup.sh" "$S/conda" >"$S/conda-setup.log" 2>&1 \
  || { cat "$S/conda-setup.log"; exit 1; }
set +u; . "$S/conda/env.sh"; set -u
CH=(--override-channels -c "file://$OFFLINE_CHANNEL")

# tack-cuda's run requirement cuda-python is not in the kit's channel: its wheels (pinned), in the
# order of their requirements, repackaged by the kit into the scratch channel (once).
add_cuda_python() {
  if ls "$OFFLINE_CHANNEL"/noarch/cuda-python-12.9.10-*.conda >/dev/null 2>&1; then
    echo "cuda-python 12.9.10 already in $OFFLINE_CHANNEL"; return 0
  fi
  bash "$TOOLS/conda/add-wheels.sh" "$S/conda" "cuda-pathfinder==1.9.1" "cuda-bindings==12.9.10" \
    "cuda-python==12.9.10"
}
step "add-wheels.sh cuda-python 12.9.10 (PyPI, into the scratch channel)" add_cuda_python || exit 1

step "seed_src.py (sdist into conda-build's source cache)" python "$TOOLS/conda/seed_src.py" "$R" "$(dirname "$SDIST")"
step "conda render linux-64 (solved)" python -m conda render "${CH[@]}" -m "$OFFLINE_PINNING" "$R"
render_matrix() {
  # The channel's pinning plus the CUDA variants conda-forge-pinning lists (the kit's has none):
  # the recipe must not vary on them (PTX needs no CUDA compiler).
  { cat "$OFFLINE_PINNING"; printf 'cuda_compiler_version:\n  - None\n  - "12.6"  # [linux64]\n'; } \
    > "$S/pinning-with-cuda.yaml"
  python "$TOOLS/conda/render_matrix.py" "$R" "$S/pinning-with-cuda.yaml" "file://$OFFLINE_CHANNEL" linux-64 osx-arm64 \
    | tee "$S/render-matrix.txt"
  local m="$S/render-matrix.txt" linux osx
  linux="$(sed -n '/^== linux-64/,/^== /p' "$m")"; osx="$(sed -n '/^== osx-arm64/,$p' "$m")"
  # linux-64: each output once (no CUDA variant), solved; tack-cuda needs a CUDA 12 driver and
  # no CUDA toolkit; every pin a bundle's key needs: llvmlite x.y.z and Python X.Y at run time.
  [ "$(grep -c -- '^  - tack-0.1.0-' <<<"$linux")" -eq 1 ] || { echo "linux-64: not one tack variant" >&2; return 1; }
  [ "$(grep -c -- '^  - tack-cuda-0.1.0-' <<<"$linux")" -eq 1 ] || { echo "linux-64: not one tack-cuda variant" >&2; return 1; }
  ! grep -q 'NOT solvable' <<<"$linux" || { echo "linux-64: an output is not solvable" >&2; return 1; }
  ! grep -q 'cuda_compiler_version\|cuda-version\|cuda-nvcc' "$m" || { echo "the recipe varies on CUDA" >&2; return 1; }
  local xy='python >=3\.[0-9]+,<3\.[0-9]+\.0a0' xyz='llvmlite >=[0-9]+\.[0-9]+\.[0-9]+,<[0-9]+\.[0-9]+\.[0-9]+\.0a0'
  grep -Eq "run: .*__cuda >=12, cuda-python >=12, $xy, tack 0\.1\.0 py3" <<<"$linux"
  grep -Eq "run: .*$xyz, .*$xy" <<<"$linux"
  # osx-arm64: the CPU output only (tack-cuda is skipped: no CUDA on macOS)
  grep -q -- '^  - tack-0.1.0-' <<<"$osx" && ! grep -q -- '^  - tack-cuda-' <<<"$osx"
}
step "render_matrix.py linux-64 + osx-arm64 (one variant each, the pins)" render_matrix

rm -rf "$CONDA_BLD_PATH"/linux-64/tack-*.conda
# CONDA_OVERRIDE_CUDA: the CUDA driver (the __cuda virtual package) that tack-cuda's test
# environment, and the CUDA env below, pretend to have; no GPU is needed: the contour runs on the CPU.
step "conda build: tack and tack-cuda (with the recipe's tests)" \
  bash -c "CONDA_OVERRIDE_CUDA=12.4 python -m conda build ${CH[*]} -m '$OFFLINE_PINNING' '$R' >'$S/conda-build.log' 2>&1" \
  || { tail -80 "$S/conda-build.log"; exit 1; }
PKG="$(ls "$CONDA_BLD_PATH"/linux-64/tack-0.1.0-*.conda)"
PKG_CUDA="$(ls "$CONDA_BLD_PATH"/linux-64/tack-cuda-0.1.0-*.conda)"

packages() {
  # What each package holds and needs, from its own metadata (info/paths.json, info/index.json).
  python - "$PKG" "$PKG_CUDA" >"$S/packages.txt" <<'EOF'
import json, os, sys, tempfile
import yaml
from conda_package_handling.api import extract
got, hosts = {}, {}
for path in sys.argv[1:]:
    with tempfile.TemporaryDirectory() as d:       # the package unpacked: 5 MB, gone after
        extract(path, d)
        paths = [p["_path"] for p in json.load(open(os.path.join(d, "info", "paths.json")))["paths"]]
        index = json.load(open(os.path.join(d, "info", "index.json")))
        got[index["name"]] = (set(paths), index["depends"])
        with open(os.path.join(d, "info", "recipe", "meta.yaml")) as f:
            hosts[index["name"]] = yaml.safe_load(f)["requirements"]["host"]
    bundles = sorted(p.rsplit("/", 1)[1] for p in paths if p.startswith("share/tack/bundles/"))
    print(f"{os.path.basename(path)}: {os.path.getsize(path)} bytes; bundles: {', '.join(bundles)}")
    print(f"  depends: {', '.join(index['depends'])}")
(cpu, cpu_deps), (cuda, cuda_deps) = got["tack"], got["tack-cuda"]
problems = []
if cpu & cuda:
    problems.append(f"files in both packages: {sorted(cpu & cuda)}")
if "share/tack/bundles-build.yaml" not in cpu or "share/tack/bundles-build-cuda.yaml" not in cuda:
    problems.append("each package keeps the config its bundles were built from")
if any(p.startswith("etc/conda/") for p in cpu | cuda):
    problems.append("an activation script: bundles are found beside Tack, with no setting")
# what built the bundles: llvmlite x.y.z and Python X.Y of tack's build (host) environment, as
# its rendered recipe (info/recipe/meta.yaml) records them
built = {name: version for name, version, _ in (r.split() for r in hosts["tack"])
         if name in ("llvmlite", "python")}
x, y, z = built["llvmlite"].split(".")[:3]
py = built["python"].split(".")
want = [f"llvmlite >={x}.{y}.{z},<{x}.{y}.{int(z) + 1}.0a0",
        f"python >={py[0]}.{py[1]},<{py[0]}.{int(py[1]) + 1}.0a0"]
if not all(w in cpu_deps for w in want):
    problems.append(f"tack: llvmlite x.y.z and Python X.Y are not pinned to {want}: {cpu_deps}")
if "__cuda >=12" not in cuda_deps or not any(d.startswith("tack 0.1.0 py3") for d in cuda_deps):
    problems.append(f"tack-cuda: __cuda >=12 and tack exactly: {cuda_deps}")
for p in problems:
    print(f"error: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
}
{
  echo "== conda build"
  grep -E '^bundles install: |^contour |^arch +kernels|^(cpu|cuda):[a-z0-9_]+ +[0-9]' "$S/conda-build.log" \
    | sed -E 's|/[^ ]*/_h_env_placehold[a-z_]*|$PREFIX|g' | grep -v compiling
} > "$S/conda-figures.txt"
step "the packages: their pins, their files (none in both), sizes" packages \
  || { cat "$S/packages.txt"; exit 1; }
{ echo "== packages"; cat "$S/packages.txt"; } | tee -a "$S/conda-figures.txt"

# -- environments: the CPU one, and the CUDA one (tack-cuda brings tack) -----------------------------
CREATE=(python -m conda create -q -y --override-channels -c "file://$CONDA_BLD_PATH" -c "file://$OFFLINE_CHANNEL")
rm -rf "$S/env" "$S/env-cuda"
step "conda create" "${CREATE[@]}" -p "$S/env" tack
step "conda create tack-cuda (CONDA_OVERRIDE_CUDA=12.4)" \
  env CONDA_OVERRIDE_CUDA=12.4 "${CREATE[@]}" -p "$S/env-cuda" tack-cuda
no_gpu_runtime() {     # a CPU-only install pulls no GPU runtime
  ! ls "$S/env/conda-meta" | grep -q '^cuda-' || { echo "env: a cuda package was installed" >&2; return 1; }
  ls "$S/env-cuda/conda-meta" | grep -q '^cuda-python-12.9.10-'
}
step "the CPU env has no cuda-python; the CUDA env has" no_gpu_runtime
step "conda run: import tack, tack.cache info" \
  python -m conda run -p "$S/env" bash -c "cd /tmp && python -c 'import tack' && python -m tack.cache info"
ls -l "$S/env-cuda/share/tack" "$S/env-cuda/share/tack/bundles" | tee -a "$S/conda-figures.txt"

# -- served with no activation: env/bin/python run directly (a Jupyter kernel, csh, fish ...) ------
# Tack finds share/tack/bundles under sys.prefix by itself (tack/cache/stores.py installed_dirs).
served() {
  local E="$1"
  (cd /tmp && env -u TACK_CACHE_BUNDLES -u TACK_CACHE_INSTALLED_BUNDLES -u PYTHONPATH \
     TACK_CACHE_DIR="$S/empty-cache-$$" TACK_CACHE=read "$E/bin/python" - <<'EOF'
import sys
import tack.cache
from tack.demo import make_field
from tack.kernels.contour import contour
v, faces = contour(make_field("sphere", 21), 0.5)
s = tack.cache.stats()
compiled = "llvmlite.binding" in sys.modules
image = tack._image.finder()        # the import image `bundles install` wrote into the package
served = image.served if image is not None else 0
by_content = image.content_checks if image is not None else 0   # conda keeps the times' seconds
print(f"{sys.prefix}: {len(faces)} triangles; variants from bundles {s['hits']['variant']}, "
      f"compiled {s['misses']['variant']}; LLVM loaded: {compiled}; "
      f"modules from the import image: {served}, checked by content: {by_content}")
sys.exit(0 if s["hits"]["variant"] and not s["misses"]["variant"] and not compiled and len(faces)
         and served and not by_content else 1)
EOF
  ) || return 1
  # bundles check with no directory: the installed ones, found with no setting
  (cd /tmp && env -u TACK_CACHE_BUNDLES -u PYTHONPATH "$E/bin/python" -m tack.site bundles check)
}
step "env/bin/python, no activation, no TACK_CACHE_BUNDLES: contour served" served "$S/env"
step "env-cuda/bin/python, no activation: contour served, bundles check" served "$S/env-cuda"

# -- a stale bundle fails the check -----------------------------------------------------------------
# The trap the recipe used to need a `cd` for: the unpacked sources' Tack (0.1.0+src.<hash>) builds
# a bundle; the installed Tack (0.1.0) finds it stale, and `bundles check` fails naming it.
stale() {
  rm -rf "$S/stale" && cp -r "$S/env/share/tack/bundles" "$S/stale"
  (cd "$S/recipe" && PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$ROOT" TACK_CACHE=off "$S/env/bin/python" -m tack.site \
     bundles build "$S/env/share/tack/bundles-build.yaml" --arch cpu:x86_64_v2 --output "$S/stale" >/dev/null)
  (cd /tmp && expect_failure "is stale (made by Tack 0.1.0+src." \
     env -u TACK_CACHE_BUNDLES -u PYTHONPATH "$S/env/bin/python" -m tack.site bundles check "$S/stale")
}
step "a bundle made by the sources' Tack: bundles check fails" stale

echo; echo "=== figures ==="; cat "$S/conda-figures.txt"
print_times
