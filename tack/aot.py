"""Ahead of time: compile a kernel for named targets and argument types, with no device.

    import numpy as np, tack, tack.aot
    arts = [tack.aot.compile(kernel, arch, args=(np.empty((2, 2, 2), np.float32), 0.5))
            for arch in ("cpu:zen4", "cuda:sm_90", "rocm:gfx90a", "level_zero:pvc")]
    arts[1].payload.decode()            # PTX text
    tack.aot.save(arts, directory="/scratch/me/tack-cache")     # as a cache directory's entries
    tack.aot.save_bundle(arts[:1], "/apps/tack/bundles")     # one target per bundle, named as
                                                              # a node looks it up

Example arguments give the argument types only (an array's dtype, rank,
layout and writability; its shape where the kernel compiles it in), as at a
launch; nothing runs. The artifacts are what the runtime of each backend
loads, stored exactly as a launch would store them: the same compile path
(``tack.compiler.compile_variant``), keys and metadata.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from . import types as T

__all__ = ["Artifact", "compile", "save", "save_bundle"]


class Artifact(NamedTuple):
    """A compiled variant: ``kind`` (cpu, cuda, rocm, level_zero), ``target`` (``kind:name``),
    ``payload`` (object code, PTX text, a code object, SPIR-V with native code), ``entry`` (the
    entry point's name), ``key`` (its cache key), ``meta`` (its entry's metadata) and the lowered
    kernel it came from, with that kernel's key."""
    kind: str
    target: str
    payload: bytes
    entry: str
    key: str
    meta: dict
    lowered: object
    lowered_key: str

    @property
    def suffix(self) -> str:
        return self.meta.get("suffix", ".bin")


def target_of(arch: str):
    """The toolchain target for ``kind:name`` (a bare name is a CPU's); ValueError if none."""
    from .archs import resolve
    from .backends import toolchain
    kind, name = resolve(arch)
    return toolchain(kind).target(f"{kind}:{name}")


def compile(kernel, target: str, args=(), *, grid: int = 1, debug: bool = False) -> Artifact:  # noqa: A001
    """Compile ``kernel`` for ``target`` (``cpu:zen4``, ``cuda:sm_90``, ``rocm:gfx90a``,
    ``level_zero:pvc``; ``cpu`` alone: this host) with the types of the example ``args``, for a
    ``grid``-dimensional launch."""
    from .cache.keys import lowered_key, template_ids
    from .compiler import compile_variant
    from .launch import argtypes_of
    if not 1 <= grid <= 3:
        raise ValueError(f"grid must be 1, 2 or 3 dimensions, not {grid!r}")
    if len(args) != len(kernel.params):
        raise TypeError(f"kernel '{kernel.__qualname__}' takes {len(kernel.params)} arguments "
                        f"({', '.join(kernel.params)}), got {len(args)}")
    tgt = _host_or(target)
    argtypes = argtypes_of(kernel, args)
    templates = {p: a for p, a, t in zip(kernel.params, args, argtypes) if isinstance(t, T.Template)}
    values = tuple(t for t in argtypes if not isinstance(t, T.Template))
    lowered = kernel.lower(templates, debug)
    lkey = lowered_key(kernel, template_ids(templates), debug)
    art = compile_variant(lowered, lkey, values, grid, tgt, debug)
    arch = art.meta["arch"] or f"{tgt.kind}:host"
    return Artifact(tgt.kind, arch, art.payload, art.entry, art.key, art.meta, lowered, lkey)


def _host_or(target):
    if target in ("cpu", "cpu:host", None):
        from .backends.cpu import host_target
        return host_target()
    return target_of(target)


def _entries(artifacts):
    """[(kind, key, encoded entry)]: each lowered kernel once, then each variant."""
    from .cache import entry
    out, seen = [], set()
    for a in artifacts:
        if a.lowered_key not in seen:
            seen.add(a.lowered_key)
            meta = {"kernel": a.lowered.kernel.source.name, "dep": a.lowered.deps}
            out.append((entry.KIND_LOWERED, a.lowered_key,
                        entry.encode(entry.KIND_LOWERED, a.lowered_key, meta, a.lowered.to_bytes())))
    for a in artifacts:
        out.append((entry.KIND_VARIANT, a.key, entry.encode(entry.KIND_VARIANT, a.key, a.meta, a.payload)))
    return out


def save(artifacts, directory: str) -> int:
    """Store artifacts as entries of the cache directory ``directory`` (this Tack version's
    part of it, created private as the cache creates it). -> entries written."""
    from .cache import trust
    from .cache.entry import entry_path
    from .cache.keys import tack_version_id
    from .cache.trust import VERSION_MARKER
    version_dir = os.path.join(directory, tack_version_id())
    os.makedirs(directory, 0o700, exist_ok=True)
    entries = _entries(artifacts)
    for kind, key, data in entries:
        path = entry_path(version_dir, kind, key)
        for d in (version_dir, os.path.dirname(os.path.dirname(path)), os.path.dirname(path)):
            trust.ensure_private_dir(d, VERSION_MARKER if d == version_dir else None)
        trust.write_atomic(path, data)
    return len(entries)


def save_bundle(artifacts, path: str) -> str:
    """Write the artifacts, all for one target, as a bundle at ``path``, or, if ``path`` is a
    directory, in it under the name a node looks a site bundle up by. -> the bundle's path."""
    from .backends.cpu_runtime import llvm_version
    from .cache import bundle, trust
    from .cache.keys import tack_version_id
    targets = {a.meta["target_key"] for a in artifacts}
    if len(targets) != 1:
        raise ValueError(f"a bundle holds one target's variants; these are for {len(targets)}")
    first = artifacts[0].meta
    meta = {"tack": tack_version_id(), "target_key": first["target_key"], "machine": first["machine"],
            "arch": first["arch"], "backend": first.get("backend", "cpu"), "llvm": llvm_version(),
            "target": first["target"], "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if os.path.isdir(path):
        path = os.path.join(path, bundle.site_bundle_name(meta["arch"] or f"{meta['backend']}:host",
                                                          meta["target_key"], meta["machine"]))
    trust.write_atomic(path, bundle.pack(_entries(artifacts), meta), mode=0o644)
    return path
