"""This host as the cache's tools see it: the one module of the cache that asks a backend.

A launch hands its session what the runtime knows (``tack.cache.session``).
Three tools run with no launch to ask: ``load_bundle`` (the bundle a rank
reads is named by this host's CPU target key), ``python -m tack.cache pack``
(which bundle is this host's, and its architecture's name) and ``export``
(a backend whose artifacts hold several parts splits them).  They ask here;
nothing a launch imports does.
"""

from __future__ import annotations


def cpu_host_key() -> str:
    """The target key of CPU code compiled on this host (``cpu_runtime.host_key``)."""
    from ..backends import runtime
    return runtime("cpu").host_key()


def gpu_packed_bundles(names) -> list:
    """Of a directory's file names, those of the bundles ``pack`` made for a GPU kind's code
    (``bundle.bundle_name`` with that kind's machine), sorted: what ``load_bundle`` broadcasts
    beside this host's."""
    from ..backends.arch_names import KINDS
    from .bundle import packed_bundle_machine
    machines = {k.machine for k in KINDS.values() if k.machine}
    return sorted(n for n in names if packed_bundle_machine(n) in machines)


def cpu_host_arch() -> str:
    """This host's microarchitecture by archspec's name (``cpu_runtime.host_arch``)."""
    from ..backends import runtime
    return runtime("cpu").host_arch()


def artifact_parts(kind: str):
    """The function splitting an artifact of architecture kind ``kind`` into [(suffix, bytes)],
    or None where it is one file (the toolchain's ``artifact_parts``)."""
    from ..backends import toolchain
    try:
        return getattr(toolchain(kind), "artifact_parts", None)
    except ValueError:
        return None
