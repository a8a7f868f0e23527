# Copyright Tack developers.
#
# SPDX-License-Identifier: BSD-3-Clause

import os
import tempfile

from spack_repo.builtin.build_systems.python import PythonPackage

from spack.package import *

# The GPU names below are Tack's registry's (tack/backends/arch_names.py), copied because variant
# values must be known when Spack concretizes, before Tack is installed;
# tests/site/test_arch_registry.py checks that the copies equal the registry.  CPU targets are
# not copied: the spec's target goes to Tack, which maps archspec's names to LLVM's CPUs.

#: cuda_arch values Tack builds PTX for (``cuda:sm_<value>``).
CUDA_ARCHS = "60 61 62 70 72 75 80 86 87 89 90 90a 100 100a 101 120 120a".split()

#: amdgpu_target values Tack builds code objects for (``rocm:<gfx>``).
AMD_GPUS = (
    "gfx900 gfx902 gfx904 gfx906 gfx908 gfx909 gfx90a gfx90c gfx942 gfx950 gfx1010 gfx1011"
    " gfx1012 gfx1013 gfx1030 gfx1031 gfx1032 gfx1033 gfx1034 gfx1035 gfx1036 gfx1100 gfx1101"
    " gfx1102 gfx1103 gfx1150 gfx1151 gfx1152 gfx1153 gfx1200 gfx1201"
).split()


class PyTack(PythonPackage):
    """Tack compiles Python kernels for CPUs and GPUs (CUDA, HIP, Level Zero) with LLVM, and
    keeps what it compiles on disk. At install, `python -m tack.site bundles install` builds the
    kernel bundles for the spec's target and its generic level, and for the GPUs the variants
    name, then checks them: jobs load Tack's kernels without compiling them."""

    homepage = "https://github.com/tack-dev/tack"
    pypi = "tack/tack-0.1.0.tar.gz"
    git = "https://github.com/tack-dev/tack.git"

    license("BSD-3-Clause")

    version("main", branch="main")
    # No release is published yet. This sha256 is that of the sdist `python -m build --sdist`
    # made from commit d27ca8f (sdists are not byte-reproducible: the archive records times).
    # ci/spack-check.sh builds the sdist of the checkout it tests and writes that sdist's sha256
    # here in a CI-local copy of this repository (docs/deploy.md, "Versions and checksums").
    version("0.1.0", sha256="2864a41fd5a5eb8b0ae27db5b0d65b5c323697a0fce710ae70a4906f1d98a4af")

    # sticky (here and for the GPU names): the concretizer would otherwise turn bundles off to
    # save building a tool (llvm-amdgpu for +rocm), or pick GPUs no one asked for
    variant(
        "bundles",
        default=True,
        sticky=True,
        description="Build the kernel bundles for the target (and its generic level) at install",
    )
    variant("mpi", default=False, description="MPI support (py-mpi4py): bundles read once per job")
    variant("cuda", default=False, description="CUDA: PTX bundles for cuda_arch, and the runtime")
    variant(
        "cuda_arch",
        sticky=True,
        values=any_combination_of(*CUDA_ARCHS),
        when="+cuda",
        description="NVIDIA compute capabilities to build PTX for (cuda:sm_XX)",
    )
    variant("rocm", default=False, description="ROCm: code object bundles for amdgpu_target")
    variant(
        "amdgpu_target",
        sticky=True,
        values=any_combination_of(*AMD_GPUS),
        when="+rocm",
        description="AMD GPUs to build code objects for (rocm:gfxNNN)",
    )
    # Native code for Intel GPUs needs Intel's ocloc, which Spack does not package: only the
    # portable SPIR-V is built here, which every Level Zero and OpenCL device compiles when it
    # loads it. A site with ocloc builds native bundles with `python -m tack.site bundles build`.
    variant(
        "spirv",
        default=False,
        description="Portable SPIR-V bundles (spirv:generic, and spirv:generic-fp32 for "
        "devices without float64): Intel GPUs, OpenCL devices",
    )

    # pyproject.toml: requires-python = ">=3.10"
    depends_on("python@3.10:", type=("build", "run"))
    # pyproject.toml: [build-system] requires = ["setuptools>=77"] (an SPDX license string)
    depends_on("py-setuptools@77:", type="build")
    # pyproject.toml: dependencies; also at build time: the bundles are compiled (llvmlite) at
    # install, and llvmlite's LLVM version is part of every bundle's key.  llvmlite 0.45 (LLVM
    # 20): the new pass manager, and every cuda_arch, amdgpu_target and +spirv LLVM builds.
    depends_on("py-numpy@1.24:", type=("build", "run"))
    depends_on("py-llvmlite@0.45:", type=("build", "run"))
    # pyproject.toml: extra "site": pyyaml>=6 (site configs), jinja2>=3.1 (module files),
    # archspec>=0.2.5 (a node finds the bundle of its microarchitecture or an ancestor of it).
    # Build too: `python -m tack.site bundles install` runs at install.
    depends_on("py-pyyaml@6:", type=("build", "run"))
    depends_on("py-jinja2@3.1:", type=("build", "run"))
    depends_on("py-archspec@0.2.5:", type=("build", "run"))
    # pyproject.toml: extra "mpi": mpi4py>=3.1
    depends_on("py-mpi4py@3.1:", when="+mpi", type="run")
    # +cuda: PTX is made by LLVM alone, so no CUDA toolkit at build time. At run time Tack drives
    # the GPU through cuda-python's driver bindings (cuda.bindings.driver; extra "cuda"), which
    # Spack packages as py-cuda-bindings (it brings the CUDA toolkit it is built against).
    depends_on("py-cuda-bindings@12:", when="+cuda", type="run")
    # +rocm: code objects are linked by LLVM's ld.lld: ROCm's LLVM (llvm-amdgpu) provides it,
    # and setup_build_environment points Tack at it. At run time Tack loads them with AMD's
    # hip-python (extra "hip"), which Spack does not package: `pip install hip-python` matching
    # the node's ROCm. Nothing links HIP or the HSA runtime, so neither is a dependency.
    depends_on("llvm-amdgpu", when="+rocm +bundles", type="build")

    conflicts(
        "cuda_arch=none",
        when="+cuda +bundles",
        msg="+cuda builds CUDA bundles for the GPUs cuda_arch names: give cuda_arch=XX",
    )
    conflicts(
        "amdgpu_target=none",
        when="+rocm +bundles",
        msg="+rocm builds ROCm bundles for the GPUs amdgpu_target names: give "
        "amdgpu_target=gfxNNN",
    )
    # +rocm and +spirv only build bundles (ROCm's runtime binding, hip-python, is not a Spack
    # package): with ~bundles they would change the hash and nothing else
    conflicts("+rocm", when="~bundles", msg="+rocm builds ROCm bundles, which ~bundles turns off")
    conflicts(
        "+spirv", when="~bundles", msg="+spirv builds SPIR-V bundles, which ~bundles turns off"
    )
    conflicts("+cuda", when="platform=darwin", msg="CUDA is not available on macOS")
    conflicts("+rocm", when="platform=darwin", msg="ROCm is not available on macOS")
    conflicts("+spirv", when="platform=darwin", msg="Level Zero and OpenCL: Linux and Windows")
    # each other family of archspec's (riscv64 alone was refused: big-endian ppc64 concretized,
    # then its bundles failed to build at install time)
    for _family in ("arm", "ppc", "ppc64", "ppcle", "riscv64", "sparc", "sparc64", "x86"):
        conflicts(
            "+bundles",
            when=f"target={_family}:",
            msg="Tack's CPU backend builds bundles for x86_64, aarch64 and ppc64le",
        )

    @property
    def bundles_dir(self):
        return join_path(self.prefix.share, "tack", "bundles")

    def bundle_archs(self):
        """`bundles install` arguments: the target (Tack adds its generic level), the GPUs."""
        spec = self.spec
        args = ["--target", spec.target.name]
        if spec.satisfies("+cuda"):
            args += [f"--arch=cuda:sm_{a}" for a in spec.variants["cuda_arch"].value]
        if spec.satisfies("+rocm"):
            args += [f"--arch=rocm:{a}" for a in spec.variants["amdgpu_target"].value]
        if spec.satisfies("+spirv"):
            args += ["--arch=spirv:generic", "--arch=spirv:generic-fp32"]
        return args

    def setup_build_environment(self, env: EnvironmentModifications) -> None:
        if self.spec.satisfies("+rocm +bundles"):
            env.set("TACK_LD_LLD", join_path(self.spec["llvm-amdgpu"].prefix.bin, "ld.lld"))

    @run_after("install")
    def bytecode_and_import_image(self):
        """Tack's sources at time 0, then its .pyc files and its import image written for them.
        A build cache sets every file's time to 0, so set here first, the bytecode and the image
        match the sources by time both where Spack built Tack and where it installs the binary:
        otherwise the image checks each module's source by content (one read and hash per
        module, 0.2 to 1 ms of every process) and time-stamped .pyc files are stale. The .pyc
        files are compiled hash-checked as well, which holds whatever the times. Runs before
        install_bundles, which finds the image current and leaves it."""
        tack_dir = join_path(python_purelib, "tack")
        for root, _, files in os.walk(tack_dir):
            for name in files:
                if name.endswith(".py"):
                    os.utime(join_path(root, name), (0, 0))
        # -f: pip's time-stamped .pyc files look current to compileall, which keeps them
        python("-m", "compileall", "-q", "-f", "--invalidation-mode", "checked-hash", tack_dir)
        # Not from the stage, whose sources `python -m` would import first.
        path = [python_purelib] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
        with tempfile.TemporaryDirectory() as empty, working_dir(empty):
            python("-m", "tack.site", "image", extra_env={"PYTHONPATH": ":".join(path)})

    @run_after("install")
    def install_bundles(self):
        """Tack's one command for packages: builds the bundles with the Tack installed in the
        prefix, then checks them; a bundle that fails to build (a missing tool, a stale
        bundle) fails the install."""
        if self.spec.satisfies("+bundles"):
            python("-m", "tack.site", "bundles", "install", self.prefix, *self.bundle_archs())

    # test_bundles imports Tack and runs it, which test_imports cannot do here: over an external
    # python, Spack's import_modules looks where that python installs (Debian's scheme:
    # local/lib/python3.X/dist-packages), not where python-venv's pip put Tack.
    install_time_test_callbacks = ["test_bundles"]

    def test_bundles(self):
        """the contour is served from the installed bundles: nothing is compiled"""
        if self.spec.satisfies("~bundles"):
            raise SkipTest("built ~bundles: no bundle to serve the contour")
        # Not from the stage, whose sources `python -m` would import first. `bundles check` runs
        # the contour in a new process with an empty cache and these bundles only, and fails on
        # a stale bundle or anything compiled. python_purelib: where python-venv installed Tack
        # (not on PYTHONPATH during the install).
        path = [python_purelib] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
        check = ["-m", "tack.site", "bundles", "check", self.bundles_dir]
        with tempfile.TemporaryDirectory() as empty, working_dir(empty):
            python(*check, extra_env={"PYTHONPATH": ":".join(path)})

    def setup_run_environment(self, env: EnvironmentModifications) -> None:
        if self.spec.satisfies("+bundles"):
            env.prepend_path("TACK_CACHE_BUNDLES", self.bundles_dir)
