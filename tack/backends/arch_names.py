"""The architecture names Tack builds, per device kind: the one registry of them.

For each kind (``cpu``, ``cuda``, ``rocm``, ``level_zero``, ``spirv``, ``metal``): the names
it builds, their aliases, and what each name maps to (an sm's PTX ISA, an archspec
microarchitecture's LLVM CPU, whether an Intel device has float64, the ocloc names of an Intel
GPU's PCI device id).  The toolchains build from these tables, the runtimes name a device's
code with them, ``python -m tack.site check`` validates a site config by asking
``KINDS[kind].resolve(name)`` (so it refuses what ``bundles build`` refuses, with the same
message), and tests compare the Spack package's literal lists and the docs' tables with it.

Cheap to import (the site tool and the tests read it): no llvmlite, nothing of Tack's;
archspec only for CPU names, when one is asked for.  Whether this LLVM knows the CPU archspec
names is the one check left to the CPU toolchain (``backends.cpu.llvm_target``): it needs LLVM.
"""

from __future__ import annotations

import difflib


class ArchError(ValueError):
    """An architecture name that is not ``kind:name`` of a known kind, or names no arch that kind
    builds."""


# -- CUDA ---------------------------------------------------------------------------------------
# The PTX ISA each compute capability is built with: the oldest that supports it (so the oldest
# driver that knows the GPU JITs or loads the PTX).  LLVM 22 emits these by default too; they are
# part of the code generation settings, and so of the target key.
PTX_ISA = {"sm_60": "5.0", "sm_61": "5.0", "sm_62": "5.0", "sm_70": "6.0", "sm_72": "6.1",
           "sm_75": "6.3", "sm_80": "7.0", "sm_86": "7.1", "sm_87": "7.4", "sm_89": "7.8",
           "sm_90": "7.8", "sm_90a": "8.0", "sm_100": "8.6", "sm_100a": "8.6", "sm_101": "8.6",
           "sm_120": "8.7", "sm_120a": "8.7"}

# -- ROCm ---------------------------------------------------------------------------------------
# AMD GPUs LLVM 22 builds code objects (version 5: ROCm 5.x and 6.x) for: GCN 5 (gfx9) onwards.
AMD_GPUS = ("gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c",
            "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1031",
            "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036", "gfx1100", "gfx1101",
            "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200",
            "gfx1201")
# The target features an AMD target id may pin (gfx90a:sramecc+:xnack-).
AMD_FEATURES = ("sramecc", "xnack")
# The GPUs that have each setting (LLVM's AMDGPU processor table; what the code objects this LLVM
# makes record in e_flags, "unsupported" for the others: tests/backends check it).  On another
# GPU the feature names nothing a code object or a device can have.
AMD_FEATURE_GPUS = {
    "sramecc": frozenset({"gfx906", "gfx908", "gfx90a", "gfx942", "gfx950"}),
    "xnack": frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a",
                        "gfx90c", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013"}),
}

# -- Level Zero ---------------------------------------------------------------------------------
# Intel devices ocloc builds native code for (its -device names), and whether each has float64.
INTEL_DEVICES = {"pvc": True, "dg2": False, "acm-g10": False, "acm-g11": False, "acm-g12": False,
                 "dg1": False, "tgllp": False, "xe-hpc": True, "xe-hpg": False}
# Arc "Alchemist" is DG2: ocloc's family name, whose code every ACM device runs.
INTEL_ALIASES = {"acm": "dg2"}
# PCI device ids of Intel GPUs -> ocloc's names for their code (INTEL_DEVICES), most specific
# first, then the family name ocloc also takes: what a Level Zero device looks its native code
# up by.  An id not listed gets SPIR-V only (always correct; the driver builds its native code).
INTEL_VENDOR_ID = 0x8086
_PVC = (0x0BD0, 0x0BD5, 0x0BD6, 0x0BD7, 0x0BD8, 0x0BD9, 0x0BDA, 0x0BDB, 0x0B69, 0x0B6E)
_ACM_G10 = (0x4F80, 0x4F81, 0x4F82, 0x4F83, 0x4F84, 0x5690, 0x5691, 0x5692, 0x56A0, 0x56A1,
            0x56A2, 0x56BE, 0x56BF, 0x56C0, 0x56C2)
_ACM_G11 = (0x4F87, 0x4F88, 0x5693, 0x5694, 0x5695, 0x56A5, 0x56A6, 0x56B0, 0x56B1, 0x56BA,
            0x56BB, 0x56BC, 0x56BD, 0x56C1)
_ACM_G12 = (0x4F85, 0x4F86, 0x5696, 0x5697, 0x56A3, 0x56A4, 0x56B2, 0x56B3)
_DG1 = (0x4905, 0x4906, 0x4907, 0x4908, 0x4909)
_TGLLP = (0x9A40, 0x9A49, 0x9A59, 0x9A60, 0x9A68, 0x9A70, 0x9A78)
INTEL_DEVICE_IDS = {i: names for ids, names in (
    (_PVC, ("pvc", "xe-hpc")), (_ACM_G10, ("acm-g10", "dg2", "xe-hpg")),
    (_ACM_G11, ("acm-g11", "dg2", "xe-hpg")), (_ACM_G12, ("acm-g12", "dg2", "xe-hpg")),
    (_DG1, ("dg1",)), (_TGLLP, ("tgllp",))) for i in ids}

# -- SPIR-V -------------------------------------------------------------------------------------
# SPIR-V with no device's native code: what every Level Zero and OpenCL device takes.
SPIRV_VERSION = "1.2"
# Each name -> whether its code may use float64 (SPIR-V's Float64 capability).
SPIRV_TARGETS = {"generic": True, "generic-fp32": False}
PORTABLE_SPIRV = "spirv:generic"    # what an OpenCL device, or an Intel GPU Tack has no name for, runs
# ... where the device says it has no float64 (Level Zero's fp64flags, OpenCL's
# CL_DEVICE_DOUBLE_FP_CONFIG): float64 kernels are refused at compile time, naming float64.
PORTABLE_SPIRV_FP32 = "spirv:generic-fp32"


def portable_spirv(has_float64: bool) -> str:
    """The portable SPIR-V target of a device with or without float64."""
    return PORTABLE_SPIRV if has_float64 else PORTABLE_SPIRV_FP32

# -- Metal --------------------------------------------------------------------------------------
# Apple GPU families Tack emits MSL 3.0 source for (no LLVM: the driver compiles it).
METAL_FAMILIES = ("apple", "apple7", "apple8", "apple9", "mac2")

# -- CPU ----------------------------------------------------------------------------------------
# archspec's CPU families Tack builds for, and the LLVM triple of each.
CPU_TRIPLES = {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu",
               "ppc64le": "powerpc64le-unknown-linux-gnu"}
# archspec gives clang's flags; where clang's CPU name is not LLVM's: POWER CPUs as GCC spells
# them (-mcpu=power9 -> pwr9), and the first Armv8 level (-march=armv8-a), LLVM's generic AArch64.
LLVM_CPU_NAMES = {**{f"power{n}": f"pwr{n}" for n in range(7, 12)}, "armv8-a": "generic"}
# archspec's microarchitectures whose clang flags name no CPU (a -march= level with extensions,
# written for clangs older than the core): the LLVM CPU and features Tack builds each with.  A
# Neoverse core is LLVM's CPU of its name (archspec's flags for GCC say -mcpu=neoverse-n1 too);
# an Arm architecture level is LLVM's generic AArch64 CPU with that level's feature.  The one
# table from archspec's names to LLVM's: packages (Spack's target=) pass archspec names to Tack.
LLVM_CPUS = {"neoverse_n1": ("neoverse-n1", ""), "neoverse_v1": ("neoverse-v1", ""),
             **{f"armv8.{n}a": ("generic", f"+v8.{n}a") for n in range(1, 7)},
             "armv9.0a": ("generic", "+v9a"), "armv9.2a": ("generic", "+v9.2a")}


SHOWN_IN_FULL = 8       # a refusal lists a kind's names when it has no more than this; else close ones


def list_hint(kind: str) -> str:
    """How to see every name of ``kind`` (a refusal shows only the close ones)."""
    return f"'python -m tack.site archs {kind}' lists them all"


class Kind:
    """One device kind's names: ``names()`` it builds, ``aliases`` (alias -> name), and
    ``resolve(name)``: the name it builds for ``name``, or ArchError saying what it builds."""

    def __init__(self, kind: str, what: str, names=(), aliases=None, retired=None, machine=None):
        self.kind = kind
        self.what = what
        # The machine its code is for, as its toolchain target's ``machine_name`` and its
        # bundles' file names (``bundle-<machine>-<kind>-<name>-<key>``) spell it; None: the
        # host's (``platform.machine()``, the CPU's).
        self.machine = machine
        self._names = tuple(names)
        self.aliases = dict(aliases or {})
        self.retired = dict(retired or {})      # old name -> what to write instead

    def names(self) -> tuple:
        return self._names

    def resolve(self, name: str) -> str:
        if name in self.retired:
            raise ArchError(f"{self.kind}:{name}: {self.retired[name]}")
        name = self.aliases.get(name, name)
        if name not in self.names():
            raise ArchError(f"{self.kind}:{name}: {self.refusal(name)}")
        return name

    def refusal(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.names()) + list(self.aliases), n=3)
        hint = f" (did you mean {', '.join(f'{self.kind}:{c}' for c in close)}?)" if close else ""
        if len(self.names()) <= SHOWN_IN_FULL:
            return f"Tack builds {self.what}: {', '.join(self.qualified())}{hint}"
        return (f"Tack builds {self.what}, {len(self.names())} of them, and not this one{hint}; "
                f"{list_hint(self.kind)}")

    def qualified(self) -> list:
        return [f"{self.kind}:{n}" for n in self.names()]


class AMDKind(Kind):
    """ROCm names: an AMD GPU, optionally with target features (``gfx90a:sramecc+:xnack-``)."""

    def resolve(self, name: str) -> str:
        """The target id in ROCm's own spelling (``gfx90a:sramecc+:xnack-``: the features in
        alphabetical order, as ROCm reports a device and LLVM writes a target id), so that every
        spelling of one target id has one key; a feature given twice, or one the GPU does not
        have (``gfx1030:xnack+``), is refused."""
        gfx, *feats = name.split(":")
        gfx = super().resolve(gfx)
        settings = {}
        for f in feats:
            if len(f) < 2 or f[-1] not in "+-" or f[:-1] not in AMD_FEATURES:
                raise ArchError(f"rocm:{name}: {f!r} is not a target feature; use sramecc+/- and "
                                "xnack+/- as ROCm spells them (gfx90a:sramecc+:xnack-)")
            feature = f[:-1]
            if feature in settings:
                raise ArchError(f"rocm:{name}: {feature} is set twice; give each target feature "
                                "once (gfx90a:sramecc+:xnack-)")
            if gfx not in AMD_FEATURE_GPUS[feature]:
                has = sorted(AMD_FEATURE_GPUS[feature], key=lambda g: AMD_GPUS.index(g))
                raise ArchError(f"rocm:{name}: {gfx} has no {feature} setting (only "
                                f"{', '.join(has)} do); use rocm:{gfx}")
            settings[feature] = f[-1]
        return ":".join([gfx] + [f"{k}{settings[k]}" for k in sorted(settings)])


class CPUKind(Kind):
    """CPU names: archspec's microarchitectures of the families in ``CPU_TRIPLES`` (archspec is
    imported when a name is asked for, never at import)."""

    def names(self) -> tuple:
        import archspec.cpu
        return tuple(sorted(n for n, t in archspec.cpu.TARGETS.items()
                            if t.family.name in CPU_TRIPLES))

    def resolve(self, name: str) -> str:
        family = cpu_microarch(name).family.name
        if family not in CPU_TRIPLES:
            raise ArchError(f"cpu:{name} is a {family} CPU; Tack builds for "
                            f"{', '.join(CPU_TRIPLES)}")
        return name


def cpu_microarch(name: str):
    """archspec's microarchitecture ``name``; ArchError (with close matches) if it knows none."""
    import archspec.cpu
    try:
        return archspec.cpu.TARGETS[name]
    except KeyError:
        if name in KINDS and name != "cpu":        # "cuda": a bare name is a CPU's
            raise ArchError(f"cpu:{name}: archspec knows no such CPU microarchitecture; a bare "
                            f"name is a CPU's, and {name} is a kind: name one of its "
                            f"architectures, {name}:<name> ({list_hint(name)})") from None
        close = difflib.get_close_matches(name, list(KINDS["cpu"].names()), n=3)
        raise ArchError(f"cpu:{name}: archspec knows no such CPU microarchitecture"
                        + (f" (did you mean {', '.join('cpu:' + c for c in close)}?)" if close
                           else "") + f"; {list_hint('cpu')}") from None


def cpu_site_facts(name: str) -> dict:
    """What a node needs to run code built for the archspec microarchitecture ``name``, and the
    data its family's host detection reads, as plain data from archspec (a CPU bundle's header
    records them: ``backends.cpu_choice.header_fields``): the family, the target's vendor,
    features (archspec's names, which are cpuinfo's) and rank (its number of ancestors); each
    microarchitecture of the family in archspec's order as (name, vendor, CPU part, [parents],
    [features]); and on aarch64 archspec's "CPU implementer" -> vendor conversions."""
    import archspec.cpu
    spec = cpu_microarch(KINDS["cpu"].resolve(name))
    family = spec.family.name
    targets = [(t.name, t.vendor, t.cpu_part, [p.name for p in t.parents], sorted(t.features))
               for t in archspec.cpu.TARGETS.values() if t.family.name == family]
    arm_vendors = {}
    if family == "aarch64":
        from archspec.cpu.schema import TARGETS_JSON
        arm_vendors = dict(TARGETS_JSON["conversions"]["arm_vendors"])
    return {"family": family, "vendor": spec.vendor, "features": sorted(spec.features),
            "rank": len(spec.ancestors), "targets": targets, "arm_vendors": arm_vendors}


def llvm_cpu(name: str, llvm_major: int) -> tuple[str, str, str, str]:
    """(triple, LLVM CPU name, LLVM features, what it came from) for the archspec
    microarchitecture ``name``: ``LLVM_CPUS``'s entry, else the CPU of archspec's flags for the
    clang of LLVM ``llvm_major``; ArchError if archspec gives none."""
    spec = cpu_microarch(KINDS["cpu"].resolve(name))
    triple = CPU_TRIPLES[spec.family.name]
    if name in LLVM_CPUS:
        cpu, features = LLVM_CPUS[name]
        return triple, cpu, features, f"Tack's table: {cpu}{' ' + features if features else ''}"
    try:
        flags = spec.optimization_flags("clang", f"{llvm_major}.0")
    except Exception as e:                      # noqa: BLE001 - archspec's own error types
        raise ArchError(f"LLVM {llvm_major} cannot target cpu:{name}: {e}") from None
    for flag in flags.split():
        if flag.startswith(("-march=", "-mcpu=")):
            cpu = flag.split("=", 1)[1]
            return triple, LLVM_CPU_NAMES.get(cpu, cpu), "", flag
    raise ArchError(f"archspec gives no CPU name for cpu:{name} with clang {llvm_major} "
                    f"(flags: {flags!r})")


def intel_device_archs(vendor_id: int, device_id: int) -> tuple:
    """ocloc's names for a device's code, most specific first; () when Tack knows none (SPIR-V
    only)."""
    return INTEL_DEVICE_IDS.get(device_id, ()) if vendor_id == INTEL_VENDOR_ID else ()


def rocm_target_id(name: str) -> tuple[str, str]:
    """``'gfx90a:sramecc+:xnack-'`` -> (``'gfx90a'``, ``'+sramecc,-xnack'``): the LLVM CPU and
    features of an AMD target id (features not named are "any": code that runs either way)."""
    gfx, *feats = KINDS["rocm"].resolve(name).split(":")
    return gfx, ",".join(sorted((f[-1] + f[:-1] for f in feats), key=lambda x: x[1:]))


KINDS = {k.kind: k for k in (
    CPUKind("cpu", "object code for CPU microarchitectures, by archspec's names"),
    Kind("cuda", "PTX for NVIDIA compute capabilities", PTX_ISA, machine="nvptx64"),
    AMDKind("rocm", "code objects for the AMD GPUs", AMD_GPUS, machine="amdgcn"),
    Kind("level_zero", "SPIR-V and ocloc's native code for the Intel GPUs", INTEL_DEVICES,
         aliases=INTEL_ALIASES,
         retired={"spirv": f"SPIR-V alone, which Level Zero and OpenCL devices both take, is "
                           f"{PORTABLE_SPIRV}"}, machine="spirv64"),
    Kind("spirv", "portable SPIR-V, for any Level Zero or OpenCL device", SPIRV_TARGETS,
         machine="spirv64"),
    Kind("metal", "MSL source for the Apple GPU families", METAL_FAMILIES, machine="metal"),
)}


def bundle_machine(kind: str) -> str:
    """The machine the code of kind ``kind`` (``cuda``, ``rocm``, ``spirv``...) is for, as its
    bundles' file names spell it (``bundle-<machine>-...``): the GPU kinds' own (``nvptx64``,
    ``amdgcn``, ``spirv64``, ``metal``, each its toolchain target's ``machine_name``), the
    host's (``platform.machine()``) for the CPU; a runtime's ``BUNDLE_MACHINE``."""
    import platform
    return KINDS[kind].machine or platform.machine()
