"""Made-up hosts and small real site bundles, for the tests of how a node chooses its bundle.

A made-up host is the dict ``cpu_identity.host_cpu_identity()`` gives (cpuinfo's fields), for
a CPU of an archspec microarchitecture: its vendor, features and CPU part.  A small bundle is a
real bundle file, written by the code ``bundles build`` writes with (``bundle_write.header_for``,
``tack.aot.requirements``), holding one made-up variant entry whose payload says which bundle
served it.
"""

from __future__ import annotations

import archspec.cpu
from archspec.cpu.schema import TARGETS_JSON

from tack import aot
from tack.backends import cpu_runtime
from tack.cache import bundle, bundle_write, entry, keys

ARM_CODES = {v: k for k, v in TARGETS_JSON["conversions"]["arm_vendors"].items()}
META = {"dep": [], "site": [], "entry": "k_main", "kernel": "kmod.k_main"}


def host_for(arch: str, vendor: str | None = None, drop=(), add=()) -> dict:
    """cpuinfo's fields of a made-up host with ``arch``'s vendor (or ``vendor``), features (less
    ``drop``, plus ``add``) and CPU part."""
    t = archspec.cpu.TARGETS[arch]
    family = t.family.name
    vendor = t.vendor if vendor is None else vendor
    # cpuinfo never lists sse3 (archspec adds it for ssse3)
    feats = [f for f in sorted(t.features) if f not in drop and f != "sse3"] + list(add)
    host = {"machine": family, "system": "linux", "llvmlite": "made-up"}
    if family == "x86_64":
        host.update({"flags": " ".join(feats)})
        if vendor != "generic":
            host["vendor_id"] = vendor
    else:
        host.update({"Features": " ".join(feats), "CPU part": t.cpu_part})
        if vendor != "generic":
            host["CPU implementer"] = ARM_CODES.get(vendor, vendor)
    return host


def variant_key(target_key: str) -> str:
    return keys.digest("variant", ("test", "site choice"), ("target", target_key))


def write_site_bundle(directory, arch: str, requires=None, llvm=None, empty=False) -> str:
    """A site bundle for ``cpu:<arch>`` in ``directory``, named as ``bundles build`` names it,
    whose one variant (``variant_key`` of its target) holds ``b"code for <arch>"`` (none if
    ``empty``: a lookup goes on to the next bundle).  ``requires``: header fields instead of
    ``tack.aot.requirements``'s. -> its file name."""
    llvm = llvm or cpu_runtime.llvm_version()
    tk = cpu_runtime.arch_key(arch, llvm)
    machine = archspec.cpu.TARGETS[arch].family.name
    meta = {"target_key": tk, "machine": machine, "arch": f"cpu:{arch}", "backend": "cpu"}
    header = bundle_write.header_for(meta, llvm, requires=aot.requirements(f"cpu:{arch}")
                               if requires is None else requires)
    vkey = variant_key(tk)
    data = entry.encode(entry.KIND_VARIANT, vkey, dict(META, target_key=tk), f"code for {arch}".encode())
    name = bundle.site_bundle_name(f"cpu:{arch}", tk, machine)
    bundle_write.write(str(directory / name), [] if empty else [(entry.KIND_VARIANT, vkey, data)], header)
    return name


def served_by(store) -> str | None:
    """The arch whose bundle ``store`` serves the made-up variant from, or None."""
    got, _ = store.read(entry.KIND_VARIANT, variant_key, "variant")
    return None if got is None else got.payload.decode().removeprefix("code for ")
