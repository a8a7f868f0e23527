"""recipes/conda, read as a conda-forge reviewer would (ci/conda-check.sh builds and tests it with
the real conda-build; these are the quick checks of what it must say): both outputs build their
bundles with `bundles install "$PREFIX"` (no `cd`, no scraping of STALE), for architectures fixed
in the recipe (nothing from script_env), and the run requirements pin what a bundle's key holds."""

import pathlib
import re

import pytest

from tack.backends.cpu_identity import llvm_version

RECIPE = pathlib.Path(__file__).resolve().parents[2] / "recipes" / "conda"
META = (RECIPE / "meta.yaml").read_text()


def commands(script):
    """The script's command lines, comments and blank lines aside."""
    lines = (RECIPE / script).read_text().splitlines()
    return [ln for ln in (ln.split("#", 1)[0].strip() for ln in lines) if ln]


@pytest.mark.parametrize("script, archs", [
    ("build_tack.sh", ["cpu:x86_64_v2", "cpu:x86_64_v3", "cpu:x86_64_v4", "cpu:aarch64"]),
    ("build_tack_cuda.sh", ["cuda:sm_70", "cuda:sm_80", "cuda:sm_90"])])
def test_each_output_builds_its_bundles_with_bundles_install(script, archs):
    cmds = commands(script)
    text = "\n".join(cmds)
    assert sum('"$PYTHON" -m tack.site bundles install "$PREFIX"' in c for c in cmds) == 1, text
    assert not any(re.match(r"(cd|pushd)\b", c) for c in cmds), text
    assert "STALE" not in text and "bundles build" not in text and "|| true" not in text, text
    assert "TACK_" not in text, text      # no setting from the environment changes the contents
    for arch in archs:
        assert f"--arch {arch}" in text, arch


def test_tack_cuda_keeps_its_own_config():
    """conda-build packages the files an output adds: tack-cuda rewriting tack's
    bundles-build.yaml would leave it out of tack-cuda and change tack's file."""
    assert "--config-name bundles-build-cuda" in "\n".join(commands("build_tack_cuda.sh"))


def test_no_script_env_no_cuda_variant_no_activation():
    assert "script_env" not in META and "TACK_CPU_ARCHS" not in META and "TACK_CUDA_ARCHS" not in META
    assert "cuda_compiler_version" not in META and "cuda-version" not in META
    assert re.search(r"^\s+- __cuda >=\d+", META, re.M), "__cuda needs a lower bound"
    assert not list(RECIPE.glob("*activate*")) and "etc/conda" not in META
    assert "noarch" not in META.split("outputs:")[0].replace("# Not noarch", "")


def test_run_pins_cover_what_a_bundle_key_holds():
    """The key holds llvmlite's whole version (llvm_version: llvmlite-x.y.z), so the run pin is
    x.x.x wide: numba's max_pin='x.x' would take llvmlite x.y.(z+1), and every shipped bundle
    would be stale."""
    version = llvm_version()
    assert re.fullmatch(r"llvmlite-\d+\.\d+\.\d+.*", version), version
    run = META.split("run:", 1)[1].split("test:", 1)[0]
    assert "{{ pin_compatible('llvmlite', min_pin='x.x.x', max_pin='x.x.x') }}" in run
    assert re.search(r"^\s+- python\b", run, re.M)          # conda-build pins it to X.Y
    cuda_run = META.split("name: {{ name }}-cuda", 1)[1].split("run:", 1)[1].split("test:", 1)[0]
    assert "{{ pin_subpackage(name, exact=True) }}" in cuda_run
