"""The lower bounds pyproject.toml declares are the ones Tack needs, and the Spack package, the
conda recipe and the EasyBuild easyconfig declare (or provide) the same: a package whose
llvmlite is older than Tack's code needs installs, then fails at its first kernel (llvmlite 0.43
has no new pass manager: AttributeError on create_pipeline_tuning_options), or builds GPU bundles
for targets its LLVM does not know."""

import pathlib
import re

import pytest

from tack.backends.arch_names import AMD_GPUS, PTX_ISA

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = (ROOT / "pyproject.toml").read_text()
SPACK = (ROOT / "spack-repo" / "spack_repo" / "tack" / "packages" / "py_tack" / "package.py").read_text()
CONDA = (ROOT / "recipes" / "conda" / "meta.yaml").read_text()
EASYCONFIG = next((ROOT / "recipes" / "easybuild").glob("Tack-*.eb")).read_text()

# llvmlite's LLVM (llvmlite's README, "Compatibility"; Spack's py-llvmlite says the same).
LLVMLITE_LLVM = {(0, 42): 14, (0, 43): 14, (0, 44): 15, (0, 45): 20, (0, 46): 20}
# The oldest LLVM that builds every target of Tack's registry: PTX ISA 8.6/8.7 for sm_100 and
# sm_120, code objects for gfx950 and gfx12xx, and the SPIR-V backend (none in LLVM 15: "No
# available targets are compatible with triple spirv64v1.2"), all LLVM 20's.
REGISTRY_LLVM = 20

# pyproject.toml name -> (Spack package, conda package)
NAMES = {"numpy": ("py-numpy", "numpy"), "llvmlite": ("py-llvmlite", "llvmlite"),
         "pyyaml": ("py-pyyaml", "pyyaml"), "jinja2": ("py-jinja2", "jinja2"),
         "archspec": ("py-archspec", "archspec"), "mpi4py": ("py-mpi4py", "mpi4py")}


def version(text):
    return tuple(int(p) for p in text.split("."))


def pyproject_bounds():
    """{name: lower bound} of [project] dependencies and the extras the packages carry."""
    deps = re.search(r"^dependencies = \[(.*?)^\]", PYPROJECT, re.S | re.M).group(1)
    extras = "".join(re.findall(r"^(?:site|mpi) = \[(.*)\]$", PYPROJECT, re.M))
    return dict(re.findall(r'"([a-z0-9_-]+)>=([0-9.]+)"', deps + extras))


def test_the_lowest_llvmlite_allowed_builds_every_registry_target():
    assert "sm_100" in PTX_ISA and "gfx950" in AMD_GPUS and "gfx1200" in AMD_GPUS
    low = version(pyproject_bounds()["llvmlite"])[:2]
    assert LLVMLITE_LLVM[low] >= REGISTRY_LLVM, (
        f"pyproject.toml allows llvmlite {low}, whose LLVM {LLVMLITE_LLVM[low]} is older than "
        f"the LLVM {REGISTRY_LLVM} Tack's targets need")


@pytest.mark.parametrize("name", sorted(NAMES))
def test_spack_and_conda_declare_pyprojects_bounds(name):
    bound = pyproject_bounds()[name]
    spack, conda = NAMES[name]
    assert f'depends_on("{spack}@{bound}:"' in SPACK, (name, bound)
    assert re.search(rf"^\s+- {re.escape(conda)} >={re.escape(bound)}\s", CONDA, re.M), (name, bound)


def test_easyconfig_provides_llvmlite_within_the_bound():
    """numba's easyconfig brings llvmlite as an extension: the easyconfig names its version."""
    provided = re.search(r"# llvmlite (\d+\.\d+\.\d+), an extension of numba's", EASYCONFIG)
    assert provided, "the easyconfig does not say which llvmlite its numba brings"
    assert version(provided.group(1)) >= version(pyproject_bounds()["llvmlite"]), provided.group(0)


def test_the_easyconfig_is_named_as_easybuild_names_them():
    """easybuild-easyconfigs names a file <name>-<version>-<toolchain>-<toolchain version>.eb
    (what `eb --robot` looks for, and the module's name: Tack/0.1.0-foss-2025a); it was
    Tack-0.1.0.eb, the name of an easyconfig with the system toolchain."""
    import ast
    files = list((ROOT / "recipes" / "easybuild").glob("*.eb"))
    assert len(files) == 1, files
    values = {}
    for node in ast.parse(files[0].read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("name", "version", "toolchain", "versionsuffix"):
            values[node.targets[0].id] = ast.literal_eval(node.value)
    toolchain = values["toolchain"]
    assert toolchain["name"] != "system"
    want = f"{values['name']}-{values['version']}-{toolchain['name']}-{toolchain['version']}" \
           f"{values.get('versionsuffix', '')}.eb"
    assert files[0].name == want
