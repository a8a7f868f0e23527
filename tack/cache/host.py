"""This host as the cache's tools see it: the one module of the cache that asks a backend.

A launch hands its session what the runtime knows (``tack.cache.session``).
Three tools run with no launch to ask: ``load_bundle`` (the bundle a rank
reads is named by this host's CPU target key, and the site bundles it reads are
those this node's CPU uses), ``python -m tack.cache pack``
(which bundle is this host's, and its architecture's name) and ``export``
(a backend whose artifacts hold several parts splits them).  They ask here;
nothing a launch imports does.
"""

from __future__ import annotations


def cpu_host_key() -> str:
    """The target key of CPU code compiled on this host (``cpu_runtime.host_key``)."""
    from ..backends import runtime
    return runtime("cpu").host_key()


def cpu_site_bundles(names, header, defer=None) -> list:
    """Which of a site directory's bundles this node's CPU uses (``cpu_runtime.site_bundles``):
    what ``load_bundle``'s rank 0 reads and broadcasts."""
    from ..backends import runtime
    return runtime("cpu").site_bundles(names, header, defer=defer)


def known_kinds(kinds=None) -> frozenset:
    """The kinds of code ``kinds`` names (every kind if None), each checked against the arch
    registry (``backends.arch_names.KINDS``): ValueError naming one it does not know."""
    from ..backends.arch_names import KINDS
    if kinds is None:
        return frozenset(KINDS)
    if isinstance(kinds, str):
        kinds = [kinds]
    asked = frozenset(kinds)
    unknown = sorted(str(k) for k in asked if k not in KINDS)
    if unknown:
        raise ValueError(f"load_bundle: unknown kind {unknown[0]!r} in kinds; the kinds are "
                         f"{', '.join(KINDS)}")
    return asked


def machines_of(kinds) -> frozenset:
    """The machines the GPU kinds among ``kinds`` write their code for, as bundle names spell
    them (``nvptx64``, ``spirv64``...): what a GPU session's ``machine`` is compared with."""
    from ..backends.arch_names import KINDS
    return frozenset(KINDS[k].machine for k in kinds if KINDS[k].machine)


def gpu_packed_bundles(names, kinds=None) -> list:
    """Of a directory's file names, those of the bundles ``pack`` made for a GPU kind's code
    (``bundle.bundle_name`` with that kind's machine), of the ``kinds`` given (every GPU kind if
    None), sorted: what ``load_bundle`` broadcasts beside this host's."""
    from ..backends.arch_names import KINDS
    from .bundle import packed_bundle_machine
    machines = machines_of(KINDS if kinds is None else kinds)
    return sorted(n for n in names if packed_bundle_machine(n) in machines)


def cpu_host_arch() -> str:
    """This host's microarchitecture by archspec's name (``cpu_runtime.host_arch``)."""
    from ..backends import runtime
    return runtime("cpu").host_arch()


def artifact_parts(kind: str):
    """The function splitting an artifact of architecture kind ``kind`` into [(suffix, bytes)],
    or None where it is one file (the toolchain's ``artifact_parts``)."""
    if kind == "opencl":    # no toolchain: the driver's binary, stored back in Level Zero's container
        from ..backends.gpu import container_parts
        return lambda payload: container_parts(payload, ".clbin")
    from ..backends import toolchain
    try:
        return getattr(toolchain(kind), "artifact_parts", None)
    except ValueError:
        return None

