"""The registry of architecture names (tack.backends.arch_names) is the one list: every name it
accepts builds, what it refuses the site config's check and the build refuse with one message,
and the Spack package's and the docs' lists are the registry's."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tack
import tack.aot
from tack.archs import ArchError, resolve
from tack.backends.arch_names import (AMD_GPUS, INTEL_ALIASES, INTEL_DEVICES, KINDS,
                                      METAL_FAMILIES, PTX_ISA, SPIRV_TARGETS)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "spack-repo", "spack_repo", "tack", "packages", "py_tack", "package.py")


@tack.kernel
def k_axpy(a, x, out):
    i = tack.tid()
    out[i] = a * x[i] + out[i]


ARGS = (np.float32(2), np.zeros(4, np.float32), np.zeros(4, np.float32))


def cpu_refused() -> dict:
    """{name: message} of archspec's CPUs of a built family that this LLVM cannot build."""
    from tack.backends.cpu import llvm_target
    out = {}
    for name in KINDS["cpu"].names():
        try:
            llvm_target(name)
        except ArchError as e:
            out[name] = str(e)
    return out


def site(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tack.site", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True)


KERNELS = ["  kernels:", "    - module: tack.kernels.contour", "      shapes: [[4, 4, 4]]"]
AXPY = ["  kernels:", f"    - module: {__name__}", "      kernel: k_axpy",
        "      args: [float32, 'float32[4]', 'float32[4]']"]      # no float64: builds for dg2


def config(tmp_path, archs: dict, kernels=KERNELS):
    lines = ["version: 1", "build:", "  archs:"]
    lines += [f"    {kind}: [{', '.join(names)}]" for kind, names in archs.items()]
    lines += kernels
    path = tmp_path / "site.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


class TestEveryNameBuilds:
    @pytest.mark.parametrize("kind", [k for k in KINDS if k != "cpu"])
    def test_every_gpu_name_compiles(self, kind):
        """tack.aot.compile of a tiny kernel for every name of the kind (and every alias), with the
        vendors' tools where the artifact needs one; an alias builds its name's code."""
        from tests.backends.gpu_tools import tool
        tool({"rocm": "ld.lld", "level_zero": "ocloc"}.get(kind, "spirv-val"))
        for name in KINDS[kind].names():
            art = tack.aot.compile(k_axpy, f"{kind}:{name}", ARGS)
            assert art.payload and art.meta["arch"] == f"{kind}:{name}", name
        for alias, name in KINDS[kind].aliases.items():
            art = tack.aot.compile(k_axpy, f"{kind}:{alias}", ARGS)
            assert art.key == tack.aot.compile(k_axpy, f"{kind}:{name}", ARGS).key

    def test_every_cpu_name_compiles_or_is_refused_by_build(self):
        """Each archspec CPU of a family Tack builds for compiles, or is one LLVM cannot build,
        which the toolchain refuses with an ArchError; most of them compile."""
        refused = cpu_refused()
        for name in KINDS["cpu"].names():
            if name in refused:
                with pytest.raises(ArchError, match=re.escape(refused[name])):
                    tack.aot.compile(k_axpy, f"cpu:{name}", ARGS)
                continue
            art = tack.aot.compile(k_axpy, f"cpu:{name}", ARGS)
            assert art.payload[:4] == b"\x7fELF", name
        assert len(refused) < len(KINDS["cpu"].names()) / 3
        assert "aarch64" not in refused        # armv8-a: LLVM's generic AArch64 CPU

    def test_every_aarch64_microarchitecture_builds(self):
        """Every aarch64 microarchitecture archspec knows maps to a CPU (and features) this LLVM
        knows, through the registry's one table where archspec's clang flags name no CPU: the
        default targets of Graviton2/3 and Ampere Altra nodes (neoverse_n1, neoverse_v1) among
        them, so a Spack spec of any of them builds its bundle (spack-repo's package passes
        archspec's name to Tack; the Spack check concretizes target=neoverse_v1)."""
        import archspec.cpu
        from tack.backends.arch_names import LLVM_CPUS
        from tack.backends.cpu import llvm_knows_cpu, llvm_target
        arm = [n for n, t in archspec.cpu.TARGETS.items() if t.family.name == "aarch64"]
        assert {"neoverse_n1", "neoverse_v1", "neoverse_v2", "a64fx"} <= set(arm)
        refused = cpu_refused()
        assert not set(arm) & set(refused), {n: refused[n] for n in arm if n in refused}
        for name in arm:
            flags = archspec.cpu.TARGETS[name].optimization_flags("clang", "22.0")
            triple, cpu, features = llvm_target(name)
            assert triple.startswith("aarch64-") and llvm_knows_cpu(triple, cpu, features)
            if name in LLVM_CPUS:       # the table only where archspec names no CPU for clang
                assert "-mcpu=" not in flags and flags != "-march=armv8-a -mtune=generic", name
        assert llvm_target("neoverse_v1")[1:] == ("neoverse-v1", "")
        assert llvm_target("armv8.2a")[1:] == ("generic", "+v8.2a")
        # the table's entries are archspec's names, and every one is an aarch64 one
        assert set(LLVM_CPUS) <= set(arm)

    def test_arm_targets_are_built_for_their_core(self):
        """The CPU toolchain builds cpu:neoverse_v1 for LLVM's neoverse-v1 and cpu:armv8.2a for
        generic AArch64 with the Armv8.2 feature, not for the family's generic CPU."""
        from tack.backends.cpu import target
        t = target("cpu:neoverse_v1")
        assert (t.cpu, t.features, t.triple) == ("neoverse-v1", "", "aarch64-unknown-linux-gnu")
        t = target("cpu:armv8.2a")
        assert (t.cpu, t.features) == ("generic", "+v8.2a")
        art = tack.aot.compile(k_axpy, "cpu:neoverse_v1", ARGS)
        assert art.payload[:4] == b"\x7fELF"


class TestRefusedAlike:
    REFUSED = {"cuda": ["sm_50"], "rocm": ["gfx1250", "gfx90a:xnack"], "level_zero": ["bmg", "spirv"],
               "spirv": ["v1.2"], "metal": ["apple1"], "cpu": ["zen33", "riscv64"]}

    def test_check_and_build_refuse_with_the_registrys_message(self, tmp_path):
        """A name the registry refuses: `check` and `bundles build` fail on it with the message
        the toolchain (tack.aot) gives, one line each, at the entry's line and key."""
        path = config(tmp_path, self.REFUSED)
        check, build = site("check", path), site("bundles", "build", path, "--output", tmp_path / "b")
        assert check.returncode == build.returncode == 1
        assert check.stderr == build.stderr
        for line, (kind, names) in enumerate(self.REFUSED.items(), 4):
            for i, name in enumerate(names):
                with pytest.raises(ArchError) as e:
                    tack.aot.target_of(f"{kind}:{name}")
                assert f"error: {path}:{line}: build.archs.{kind}.{i}: {e.value}\n" in check.stderr

    def test_a_cpu_llvm_cannot_build_is_refused_by_check_and_build(self, tmp_path):
        """archspec knows it, LLVM does not: check's dry run and the build say the same."""
        name, message = next(iter(cpu_refused().items()))
        path = config(tmp_path, {"cpu": [name]})
        check = site("check", path)
        assert check.returncode == 1
        assert f"error: {path}:4: build.archs.cpu.0: {message}\n" in check.stderr
        build = site("bundles", "build", path, "--output", tmp_path / "b")
        assert build.returncode == 1
        assert re.search(f"cpu:{re.escape(name)} +FAILED: BuildFailure: {re.escape(message)}\n",
                         build.stdout), build.stdout

    def test_alias_and_qualified_names(self, tmp_path):
        """level_zero: [acm] builds level_zero:dg2, an entry may be written kind:name, and check
        lists what is built as kind:name."""
        path = config(tmp_path, {"cpu": ["cpu:x86_64_v3", "zen2"], "level_zero": ["acm"],
                                 "cuda": ["cuda:sm_90"], "spirv": ["generic"]}, AXPY)
        r = site("check", path)
        assert r.returncode == 0, r.stderr
        assert "bundles to build:\n  cpu:x86_64_v3\n  cpu:zen2\n  cuda:sm_90\n  level_zero:dg2\n" \
            "  spirv:generic\n" in r.stdout
        assert "no backend" not in r.stdout
        assert resolve("level_zero:acm") == ("level_zero", "dg2")
        build = site("bundles", "build", path, "--arch", "level_zero:acm", "--output", tmp_path / "b")
        assert build.returncode == 0, build.stdout + build.stderr
        assert [n.split("-")[2:4] for n in os.listdir(tmp_path / "b")] == [["level_zero", "dg2"]]

    def test_a_level_zero_devices_names_are_names_tack_builds(self):
        """Every ocloc name a PCI device id maps to builds (level_zero:<name>), most specific
        first; an unknown device or vendor maps to none (SPIR-V only)."""
        from tack.backends.arch_names import INTEL_DEVICE_IDS, intel_device_archs
        assert {n for names in INTEL_DEVICE_IDS.values() for n in names} <= set(INTEL_DEVICES)
        assert intel_device_archs(0x8086, 0x56A0) == ("acm-g10", "dg2", "xe-hpg")
        assert intel_device_archs(0x8086, 0xFFFF) == () == intel_device_archs(0x10DE, 0x0BD5)

    def test_an_opencl_device_is_not_level_zero(self):
        """The portable SPIR-V target is spirv:generic; the old level_zero:spirv says so."""
        with pytest.raises(ArchError, match="level_zero:spirv: .* is spirv:generic"):
            resolve("level_zero:spirv")
        from tack.backends import opencl_runtime
        assert [name for name, _ in opencl_runtime.site_candidates()] == ["spirv:generic"]


def package_lists() -> dict:
    """The module-level lists of names of the Spack package (tuples, or ``"a b c".split()``),
    read from its source (it imports Spack)."""
    lists = {}
    for node in ast.parse(open(PACKAGE).read()).body:
        if not isinstance(node, ast.Assign):
            continue
        value = node.value
        if isinstance(value, ast.Tuple):
            lists[node.targets[0].id] = ast.literal_eval(value)
        elif (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
              and value.func.attr == "split" and isinstance(value.func.value, ast.Constant)):
            lists[node.targets[0].id] = tuple(value.func.value.value.split())
    return lists


class TestSpackPackage:
    def test_variant_values_are_the_registrys(self):
        """The CUDA compute capabilities and AMD GPUs the package's variants offer are the ones
        Tack builds; it offers no Intel device (native code needs ocloc, which Spack lacks:
        +spirv builds the portable SPIR-V) and keeps no other list."""
        lists = package_lists()
        assert set(lists) == {"CUDA_ARCHS", "AMD_GPUS"}
        assert lists["CUDA_ARCHS"] == tuple(sm[len("sm_"):] for sm in PTX_ISA)
        assert lists["AMD_GPUS"] == AMD_GPUS

    def test_the_package_keeps_no_cpu_names(self):
        """The package passes the spec's target to Tack (`bundles install --target`), which maps
        it through the registry: no frozen list of CPUs, no conflicts on targets."""
        assert "NO_LLVM_CPU" not in package_lists()
        assert 'conflicts("+bundles", when=f"target=' not in open(PACKAGE).read()


def doc(name) -> str:
    with open(os.path.join(ROOT, "docs", name)) as f:
        return f.read()


def row(text, first_cell) -> list:
    """The backticked words of the table row whose first cell is ``first_cell``, past that cell."""
    line = next(l for l in text.splitlines() if l.startswith(f"| {first_cell} |"))
    return re.findall(r"`([^`]+)`", line.split("|", 2)[2])


class TestDocs:
    @pytest.mark.parametrize("kind,names", [
        ("cuda", tuple(PTX_ISA)), ("rocm", AMD_GPUS), ("spirv", SPIRV_TARGETS),
        ("level_zero", tuple(INTEL_DEVICES) + tuple(INTEL_ALIASES)), ("metal", METAL_FAMILIES)])
    def test_site_md_lists_the_registrys_names(self, kind, names):
        assert row(doc("site.md"), f"`build.archs.{kind}`")[:-1] == list(names)   # last: example

    def test_deploy_md_names_the_packages_gpu_variants(self):
        """The Spack variants table: `spirv` builds the portable spirv:generic; no Level Zero
        device list (the package builds no native Intel code)."""
        assert "spirv:generic" in row(doc("deploy.md"), "`spirv`")
        assert not any(l.startswith("| `level_zero` |") for l in doc("deploy.md").splitlines())

    @pytest.mark.parametrize("name", ["site.md", "deploy.md"])
    def test_cpus_without_bundles_are_named(self, name):
        """The paragraph naming the CPUs LLVM cannot build names exactly those."""
        text = doc(name)
        start = text.index("LLVM has no CPU for")
        named = set(re.findall(r"`([a-z0-9_.=]+)`", text[start:text.index("\n\n", start)]))
        generic = {"aarch64", "target=aarch64", "target=x86_64_v4"}
        assert set(cpu_refused()) <= named <= set(cpu_refused()) | generic

    @pytest.mark.parametrize("name", ["site.md", "deploy.md", "gpu.md", "opencl.md", "aot.md",
                                      "level-zero-and-metal.md"])
    def test_every_arch_the_docs_name_resolves(self, name):
        """Every backticked kind:name of a GPU kind in the docs is one the registry builds (a
        device, ``metal:0``, is not an architecture)."""
        kinds = "|".join(k for k in KINDS if k != "cpu")
        for arch in re.findall(rf"`((?:{kinds}):[a-z0-9][a-z0-9_:+.-]*)`", doc(name)):
            if not arch.partition(":")[2].isdigit():
                resolve(arch)


@tack.kernel
def k_double_count(x, counts):
    i = tack.tid()
    tack.atomic_add(counts, 0, 1)
    x[i] = x[i] * 2.0


class TestCheckCompilesForEachArch:
    """`check` generates each configured kernel's code for each arch (no LLVM optimizer, no vendor
    tool), so an arch a kernel cannot be built for is refused before `bundles build` runs."""

    DOUBLE = ["  kernels:", f"    - module: {__name__}", "      kernel: k_double_count",
              "      args: ['float64[4]', 'int64[4]']"]

    def test_an_arch_lacking_a_feature_is_refused_naming_kernel_and_feature(self, tmp_path):
        path = config(tmp_path, {"cpu": ["x86_64_v3"], "cuda": ["sm_90"], "level_zero": ["pvc", "acm"],
                                 "metal": ["apple"]}, self.DOUBLE)
        r = site("check", path)
        assert r.returncode == 1 and r.stdout == ""
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 2, r.stderr
        assert errors[0].startswith(f"error: {path}:6: build.archs.level_zero.1: level_zero:dg2 "
                                    f"cannot build kernel k_double_count of {__name__}")
        assert "float64 (this device has no double precision) is not supported on level_zero:dg2" \
            in errors[0]
        assert errors[1].startswith(f"error: {path}:7: build.archs.metal.0: metal:apple cannot "
                                    "build kernel k_double_count")
        assert "is not supported on metal:apple" in errors[1]
        for arch in ("cpu:x86_64_v3", "cuda:sm_90", "level_zero:pvc", "level_zero:dg2", "metal:apple"):
            assert f"check: generating 1 variant(s) for {arch} ...\n" in r.stderr

    def test_the_contour_passes_check_for_every_kind(self, tmp_path):
        """The shipped contour (float32, int32 counters) is valid for Metal and dg2 too."""
        path = config(tmp_path, {"cpu": ["x86_64_v3"], "cuda": ["sm_90"], "rocm": ["gfx90a"],
                                 "level_zero": ["dg2", "pvc"], "spirv": ["generic"],
                                 "metal": ["apple"]})
        r = site("check", path)
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("check: generating 2 variant(s) for ") == 7


def test_check_refuses_a_gpu_processor_this_llvm_does_not_know(tmp_path, monkeypatch):
    """The registry knows the name, the LLVM of this llvmlite does not know its processor (an old
    llvmlite): `check` reports it at the arch's line, as `bundles build` fails on it.  `check`
    passed such a config, and only the build refused it."""
    from tack.backends import gpu
    from tack.site.build import build_problems
    from tack.site.config import load
    real = gpu.settings

    def settings(kind, arch):
        out = real(kind, arch)
        return dict(out, cpu="sm_999") if kind == "cuda" else out
    monkeypatch.setattr(gpu, "settings", settings)
    path = config(tmp_path, {"cpu": ["x86_64_v3"], "cuda": ["sm_90"], "spirv": ["generic"]})
    problems = build_problems(load(path))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}:5: build.archs.cuda.0: cuda:sm_90: the LLVM of this "
                                  "llvmlite"), problems[0]
    assert "does not know the processor 'sm_999'" in problems[0]
