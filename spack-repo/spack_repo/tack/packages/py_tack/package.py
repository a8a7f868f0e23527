# Copyright Tack developers.
#
# SPDX-License-Identifier: BSD-3-Clause

import glob
import json
import os
import tempfile

from spack_repo.builtin.build_systems.cuda import CudaPackage
from spack_repo.builtin.build_systems.python import PythonPackage
from spack_repo.builtin.build_systems.rocm import ROCmPackage

from spack.package import *

# The architecture names below are Tack's registry's (tack/backends/arch_names.py), copied
# because a package cannot import Tack when Spack concretizes; tests/site/test_arch_registry.py
# checks that the copies equal the registry.

#: Intel GPU devices Tack builds native Level Zero code for (``level_zero:<name>``).
LEVEL_ZERO_DEVICES = ("pvc", "dg2", "acm-g10", "acm-g11", "acm-g12", "dg1", "tgllp", "xe-hpc",
                      "xe-hpg")

#: cuda_arch values Tack builds PTX for (``cuda:sm_<value>``).
CUDA_ARCHS = ("60", "61", "62", "70", "72", "75", "80", "86", "87", "89", "90", "90a", "100",
              "100a", "101", "120", "120a")

#: amdgpu_target GPUs Tack builds code objects for (``rocm:<gfx>``; a feature suffix is dropped).
AMD_GPUS = ("gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c",
            "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1031",
            "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036", "gfx1100", "gfx1101",
            "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200",
            "gfx1201")

#: archspec targets of x86_64, aarch64 and ppc64le that Tack's LLVM has no CPU for (their clang
#: flags are ``-march=`` strings, or archspec has none for this clang), so ``bundles build``
#: cannot target them.
NO_LLVM_CPU = ("armv8.1a", "armv8.2a", "armv8.3a", "armv8.4a", "armv8.5a", "armv8.6a",
               "armv9.0a", "armv9.2a", "neoverse_n1", "neoverse_v1", "zen6")

#: The kernels a bundle holds when the site config names none (what `bundles build` defaults to).
DEFAULT_KERNELS = [{"module": "tack.kernels.contour", "shapes": [[21, 21, 21]]}]

#: Reads a site config with Tack's own loader (the same checks `python -m tack.site check` makes)
#: and prints what the package needs from it as JSON.
READ_SITE_CONFIG = """
import json, sys
from tack.site.config import load
cfg = load(sys.argv[1])
print(json.dumps({"exports": cfg.exports(), "kernels": cfg.get("build.kernels") or None}))
"""


class PyTack(PythonPackage, CudaPackage, ROCmPackage):
    """Tack compiles Python kernels for CPUs and GPUs (CUDA, HIP, Level Zero) with LLVM, and
    keeps what it compiles on disk. This package builds the kernel bundles for the spec's CPU
    microarchitecture and its generic level at install time, so that jobs load Tack's kernels
    without compiling them.

    GPU bundles are built for cuda_arch (PTX: LLVM alone), amdgpu_target (code objects: needs
    LLVM's ld.lld, Debian's lld-22 or PyPI's ziglang) and level_zero (SPIR-V plus Intel's
    native code: needs ocloc), passed to `python -m tack.site bundles build` as cuda:sm_XX,
    rocm:gfxNNN and level_zero:NAME. An arch whose vendor tool is missing is skipped with a
    warning naming the tool; the CPU bundles are always built."""

    homepage = "https://github.com/tack-dev/tack"
    pypi = "tack/tack-0.1.0.tar.gz"
    git = "https://github.com/tack-dev/tack.git"

    license("BSD-3-Clause")

    # Listed, not discovered: with an external Debian python, Spack looks for them in
    # local/lib/python3.X/dist-packages while pip (run by python-venv) installs into site-packages.
    import_modules = ["tack", "tack.cache", "tack.site", "tack.kernels.contour"]

    version("main", branch="main")
    # No release is published yet. This sha256 is that of the sdist `python -m build --sdist`
    # made from commit d27ca8f (sdists are not byte-reproducible: the archive records times).
    # ci/spack-check.sh builds the sdist of the checkout it tests and writes that sdist's sha256
    # here in a CI-local copy of this repository (docs/deploy.md, "Versions and checksums").
    version("0.1.0", sha256="2864a41fd5a5eb8b0ae27db5b0d65b5c323697a0fce710ae70a4906f1d98a4af")

    variant("bundles", default=True,
            description="Build the kernel bundles for the target (and its generic level) at install")
    variant("mpi", default=False, description="MPI support (py-mpi4py): bundles read once per job")
    variant("level_zero", values=any_combination_of(*LEVEL_ZERO_DEVICES),
            description="Intel GPU devices to build Level Zero bundles for (SPIR-V and native "
                        "code from Intel's ocloc)")
    variant("site_config", default="none", values=lambda x: True,
            description="Absolute path of a site config YAML applied to the install: its cache "
                        "settings are exported by `spack load` and the modules, and its "
                        "build.kernels are what the bundles hold")

    # pyproject.toml: requires-python = ">=3.10"
    depends_on("python@3.10:", type=("build", "run"))
    # pyproject.toml: [build-system] requires = ["setuptools>=77"] (an SPDX license string)
    depends_on("py-setuptools@77:", type="build")
    # pyproject.toml: dependencies "numpy>=1.24"; also at build time: bundles are built at install
    depends_on("py-numpy@1.24:", type=("build", "run"))
    # pyproject.toml: dependencies "llvmlite>=0.43"; the bundles are compiled with it
    depends_on("py-llvmlite@0.43:", type=("build", "run"))
    # pyproject.toml: extra "site": pyyaml>=6 (site configs), jinja2>=3.1 (module files),
    # archspec>=0.2.5 (a node finds the bundle of its microarchitecture or an ancestor of it).
    # Build too: `python -m tack.site bundles build` runs at install.
    depends_on("py-pyyaml@6:", type=("build", "run"))
    depends_on("py-jinja2@3.1:", type=("build", "run"))
    depends_on("py-archspec@0.2.5:", type=("build", "run"))
    # pyproject.toml: extra "mpi": mpi4py>=3.1
    depends_on("py-mpi4py@3.1:", when="+mpi", type=("build", "run"))
    # The CUDA (cuda-python>=12) and ROCm runtime dependencies come with Tack's GPU backends;
    # CudaPackage and ROCmPackage add the toolkits themselves.

    conflicts("+cuda", when="cuda_arch=none",
              msg="+cuda builds CUDA bundles for the GPUs cuda_arch names: give cuda_arch=XX")
    conflicts("+rocm", when="amdgpu_target=none",
              msg="+rocm builds ROCm bundles for the GPUs amdgpu_target names: give amdgpu_target=gfxNNN")
    for _a in CudaPackage.cuda_arch_values:
        if _a != "none" and _a not in CUDA_ARCHS:
            conflicts(f"cuda_arch={_a}", when="+cuda +bundles",
                      msg=f"Tack builds no PTX for sm_{_a}; its CUDA bundles are for cuda_arch="
                          f"{','.join(CUDA_ARCHS)}")
    for _t in ROCmPackage.amdgpu_targets:
        if _t != "none" and _t.split(":")[0] not in AMD_GPUS:
            conflicts(f"amdgpu_target={_t}", when="+rocm +bundles",
                      msg=f"Tack builds no code object for {_t}; its ROCm bundles are for "
                          f"amdgpu_target={','.join(AMD_GPUS)}")
    for _dev in LEVEL_ZERO_DEVICES:
        conflicts(f"level_zero={_dev}", when="platform=darwin",
                  msg="Intel GPUs (Level Zero) are supported on Linux and Windows only")
    conflicts("+cuda", when="platform=darwin", msg="CUDA is not available on macOS")
    conflicts("+rocm", when="platform=darwin", msg="ROCm is not available on macOS")
    for _t in NO_LLVM_CPU:
        conflicts("+bundles", when=f"target={_t}",
                  msg=f"Tack's LLVM has no CPU for archspec's {_t} (its clang flag is a -march= "
                      f"string, or archspec has none for this clang), so no bundle can be built "
                      f"for it: use its family's generic level (target=aarch64, target=x86_64_v4: "
                      f"that bundle serves every node of the family) or ~bundles")
    conflicts("+bundles", when="target=riscv64:",
              msg="Tack's CPU backend builds bundles for x86_64, aarch64 and ppc64le")

    # -- what to build ---------------------------------------------------------

    @property
    def bundles_dir(self):
        return join_path(self.prefix.share, "tack", "bundles")

    @property
    def site_config_path(self):
        """The site config copied into the prefix at install, or None."""
        return join_path(self.prefix.share, "tack", "site.yaml")

    def generic_level(self):
        """The generic level of the spec's target, whose bundle serves every node of its family
        at that level or above: x86_64_v2/v3/v4 (the highest the target has), else the family."""
        target = self.spec.target
        family = target.family
        if family.name == "x86_64":
            levels = [t for t in [target] + list(target.ancestors)
                      if t.name.startswith("x86_64_v")]
            if levels:
                return max(levels, key=lambda t: len(t.ancestors)).name
        return family.name

    def cpu_archs(self):
        """cpu:<target> and cpu:<its generic level>, without duplicates."""
        names = [self.spec.target.name, self.generic_level()]
        return [f"cpu:{n}" for n in dict.fromkeys(names)]

    def gpu_archs(self):
        spec = self.spec
        archs = []
        if spec.satisfies("+cuda"):
            archs += [f"cuda:sm_{a}" for a in spec.variants["cuda_arch"].value if a != "none"]
        if spec.satisfies("+rocm"):
            # gfx90a:xnack+ and the like: the bundle is per GPU, the feature suffix is not a target
            archs += list(dict.fromkeys(f"rocm:{a.split(':')[0]}"
                                        for a in spec.variants["amdgpu_target"].value if a != "none"))
        archs += [f"level_zero:{d}" for d in spec.variants["level_zero"].value
                  if d in LEVEL_ZERO_DEVICES]
        return archs

    def read_site_config(self, path):
        python = self.spec["python"].command
        out = python("-c", READ_SITE_CONFIG, path, output=str, env=self.tack_build_env())
        return json.loads(out.strip().splitlines()[-1])

    def tack_build_env(self):
        """Tack's environment while the package builds: no user cache is read or written."""
        env = dict(os.environ)
        for var in list(env):
            if var.startswith("TACK_"):
                del env[var]
        env["TACK_CACHE"] = "off"
        env["PYTHONNOUSERSITE"] = "1"
        # The installed Tack, wherever pip put it in the prefix (site-packages of python-venv;
        # an external Debian python's scheme says local/lib/python3.X/dist-packages).
        found = glob.glob(join_path(self.prefix, "**", "tack", "__init__.py"), recursive=True)
        if found:
            site = os.path.dirname(os.path.dirname(found[0]))
            env["PYTHONPATH"] = os.pathsep.join([site] + [p for p in
                                                          env.get("PYTHONPATH", "").split(os.pathsep) if p])
        return env

    # -- install ---------------------------------------------------------------

    @run_after("install")
    def install_site_config(self):
        path = self.spec.variants["site_config"].value
        if path == "none":
            return
        if not os.path.isabs(path) or not os.path.isfile(path):
            raise InstallError(f"site_config={path}: not an absolute path of a file")
        mkdirp(os.path.dirname(self.site_config_path))
        copy(path, self.site_config_path)
        settings = self.read_site_config(self.site_config_path)   # fails on an invalid config
        with open(join_path(self.prefix.share, "tack", "site-env.json"), "w") as f:
            json.dump(settings["exports"], f, indent=2, sort_keys=True)
        for var, value in settings["exports"].items():
            if "$" in value and var != "TACK_CACHE_BUNDLES":
                tty.warn(f"site_config: {var}={value} refers to variables, which Spack's modules "
                         f"and `spack load` cannot expand per user: it is not exported (render "
                         f"the module with `python -m tack.site modules` for this config)")

    @run_after("install")  # after install_site_config: same phase, in order
    def build_bundles(self):
        if self.spec.satisfies("~bundles"):
            return
        kernels = DEFAULT_KERNELS
        if os.path.isfile(self.site_config_path):
            kernels = self.read_site_config(self.site_config_path)["kernels"] or kernels
        cpu = self.cpu_archs()
        gpu = self.gpu_archs()
        config = {
            "version": 1,
            "build": {
                "archs": {
                    "cpu": [a.split(":", 1)[1] for a in cpu],
                    **{kind: [a.split(":", 1)[1] for a in gpu if a.startswith(kind + ":")]
                       for kind in ("cuda", "rocm", "level_zero")
                       if any(a.startswith(kind + ":") for a in gpu)},
                },
                "kernels": kernels,
            },
        }
        share = join_path(self.prefix.share, "tack")
        mkdirp(self.bundles_dir)
        # The config the bundles were built from, kept for `bundles rebuild` and for the admin.
        # JSON is YAML: Tack's site config loader reads it.
        build_config = join_path(share, "bundles-build.yaml")
        with open(build_config, "w") as f:
            json.dump(config, f, indent=2)
        python = self.spec["python"].command
        env = self.tack_build_env()
        args = ["-m", "tack.site", "bundles", "build", build_config, "--output", self.bundles_dir]
        tty.msg(f"Building Tack bundles for {', '.join(cpu)} into {self.bundles_dir}")
        with working_dir(share):
            self.run_bundles_build(python, args, cpu, gpu, env)

    def run_bundles_build(self, python, args, cpu, gpu, env):
        # Run from the prefix, not the stage: `python -m` imports from the working directory
        # first, and Tack run from its source tree tags what it makes with a hash of the sources
        # ("0.1.0+src.<hash>"), which the installed Tack ("0.1.0") would find stale.
        python(*args, *[x for a in cpu for x in ("--arch", a)], env=env)
        # GPU bundles, one per arch: one whose vendor tool (ld.lld for rocm, ocloc for Intel's
        # native code) is not installed is skipped with a warning; any other failure fails.
        for arch in gpu:
            out = python(*args, "--arch", arch, env=env, output=str, error=str,
                         fail_on_error=False)
            if python.returncode == 0:
                continue
            if "not found: tried" in out:
                tty.warn(f"{arch}: GPU bundle not built, a vendor tool is missing:\n{out}")
            else:
                raise InstallError(f"bundles build --arch {arch} failed:\n{out}")
        status = python("-m", "tack.site", "bundles", "status", self.bundles_dir, env=env,
                        output=str)
        tty.msg(status)
        if "STALE" in status:
            raise InstallError(f"the bundles just built are stale for the installed Tack:\n{status}")

    # -- tests -------------------------------------------------------------------

    install_time_test_callbacks = ["test_imports", "test_contour_from_bundle"]

    def test_imports(self):
        """import the installed Tack's modules"""
        # PythonPackage's own test_imports relies on PYTHONPATH, which during install lacks the
        # prefix when pip's scheme and python's differ (python-venv over an external python).
        python = self.spec["python"].command
        env = self.tack_build_env()
        for module in self.import_modules:
            with test_part(self, f"test_imports_{module}", purpose=f"checking import of {module}",
                           work_dir="spack-test"):
                python("-c", f"import {module}", env=env)

    def test_contour_from_bundle(self):
        """the contour is served by the installed bundle: nothing is compiled"""
        if self.spec.satisfies("~bundles"):
            raise SkipTest("built ~bundles: no bundle to serve the contour")
        python = self.spec["python"].command
        with tempfile.TemporaryDirectory() as own:
            with working_dir(own):      # not the stage: the installed Tack is tested
                # `bundles check` runs the contour in a new process with an empty cache of its
                # own and these bundles only, and fails if anything was compiled.
                out = python("-m", "tack.site", "bundles", "check", self.bundles_dir,
                             output=str, error=str, env=self.tack_build_env())
            tty.msg(out)
            assert "nothing compiled" in out, out

    # -- environment -----------------------------------------------------------

    def setup_run_environment(self, env: EnvironmentModifications) -> None:
        """TACK_CACHE_BUNDLES, and the site config's TACK_CACHE_DIR, TACK_CACHE,
        TACK_CACHE_MPI and TACK_CACHE_SIZE: what `python -m tack.site modules` exports."""
        settings = {}
        path = join_path(self.prefix.share, "tack", "site-env.json")
        if os.path.isfile(path):
            with open(path) as f:
                settings = json.load(f)
        bundles = [self.bundles_dir] if self.spec.satisfies("+bundles") else []
        if settings.get("TACK_CACHE_BUNDLES"):
            bundles.append(settings["TACK_CACHE_BUNDLES"])
        if bundles:
            env.set("TACK_CACHE_BUNDLES", os.pathsep.join(bundles))
        for var in ("TACK_CACHE_DIR", "TACK_CACHE", "TACK_CACHE_MPI", "TACK_CACHE_SIZE"):
            value = settings.get(var)
            if value is None:
                continue
            if "$" in value:
                # The site tool's module files expand $USER, $SCRATCH ... when each user loads
                # the module; Spack writes values literally, and Tack reads TACK_CACHE_DIR
                # without expanding it, so such a value cannot be carried here.
                tty.debug(f"{var}={value} refers to variables: not set by Spack's environment "
                          f"(use `python -m tack.site modules` for this site config)")
                continue
            env.set(var, value)
