"""One compile path for every caller: a lowered kernel, argument types and a target -> a variant.

``compile_variant`` is what a launch's cache miss (``tack.launch``), ``tack.site
bundles build`` and ``bundles rebuild`` all run, and ``variant_meta`` the one
writer of a variant entry's metadata, so that an entry says the same things
whoever made it.  The boundary with a backend is the typed kernel: the target
turns it into its artifact's bytes (``target.compile``), so a backend that
emits source rather than LLVM IR fits the same path.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from . import types as T


class Artifact(NamedTuple):
    """A compiled variant: its cache key, the bytes a backend's runtime loads, the entry
    point's name, the bounds-check sites (debug mode) and the entry's metadata."""
    key: str
    payload: bytes
    entry: str
    sites: list
    meta: dict


def compile_variant(lowered, lowered_key, argtypes, grid: int, target, debug: bool = False,
                    stage=lambda label: None) -> Artifact:
    """Specialize ``lowered`` for ``argtypes`` and a ``grid``-dimensional launch, generate
    code for ``target`` and compile it.  ``stage(label)`` is called after each step (the
    launch's timings: specialize, codegen, llvm)."""
    from .cache.keys import variant_key
    from .codegen import generate
    from .specialize import specialize
    typed = specialize(lowered, argtypes, grid)
    stage("specialize")
    if lowered_key is not None:
        key = variant_key(lowered_key, argtypes, grid, target.key)
    else:                                       # no cache: a name unique to this variant
        key = hashlib.sha256(repr((lowered.fingerprint(), argtypes, grid, debug)).encode()).hexdigest()
    if hasattr(target, "compile_typed"):        # a source-emitting backend (Metal): no LLVM
        gen = target.generate(typed, "tack_" + key)
        payload = gen.source.encode("utf-8")
        stage("codegen")
    else:
        gen = generate(typed, target, "tack_" + key)
        stage("codegen")
        payload = target.compile(gen.module)
    stage("llvm")
    meta = variant_meta(lowered, lowered_key, argtypes, grid, gen.entry,
                        gen.sites if debug else (), target)
    return Artifact(key, payload, gen.entry, gen.sites, meta)


def variant_meta(lowered, lowered_key, argtypes, grid, entry, sites, target) -> dict:
    """The metadata of a variant entry: what it was compiled from, for which target, and what a
    hit needs (dependency record, entry point, bounds-check sites, the arrays indexed by the
    thread index on every point: ``tack.gridcheck``)."""
    from .gridcheck import encode, tid_indexed
    ident = target.identity()
    tidx = [c for c in tid_indexed(lowered, int(grid))
            if isinstance(argtypes[c[0]], T.Array) and c[1] < argtypes[c[0]].ndim]
    return {"kernel": lowered.kernel.source.name, "dep": lowered.deps, "entry": entry,
            "lowered": lowered_key or "", "arg": [[str(t)] for t in argtypes],
            "argspec": [[T.spec(t)] for t in argtypes], "grid": str(grid),
            "target_key": target.key, "machine": target.machine_name,
            "backend": target.kind, "suffix": target.suffix,
            "arch": f"{target.kind}:{target.arch}" if target.arch else "",
            "target": ";".join(f"{k}={v}" for k, v in sorted(ident.items())),
            "site": [list(s) for s in sites or ()],
            "tidx": encode(tidx)}


def driver_meta(meta, kernel_name, lowered_key, argtypes, grid: int, target_key, made) -> dict:
    """Metadata of code a device's driver built from a variant (``meta``: the variant's, or the
    fields a cache hit read of it) for the dispatcher to store back under the device's key:
    what a hit uses, copied; what the variant was compiled from, as ``variant_meta`` writes it;
    the device's target and what made the code (``made``: a runtime's ``store_back`` says)."""
    out = {f: meta[f] for f in ("dep", "entry", "site", "tidx", "argspec") if f in meta}
    out.update(kernel=kernel_name, lowered=lowered_key or "",
               arg=[[str(t)] for t in argtypes], argspec=[[T.spec(t)] for t in argtypes],
               grid=str(grid), target_key=target_key, machine="", backend=made["backend"],
               suffix=made["suffix"], arch=made["arch"],
               target=";".join(f"{k}={v}" for k, v in sorted(made.items())))
    return out
