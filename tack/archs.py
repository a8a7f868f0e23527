"""Architecture names as users type them: ``kind:name``, one vocabulary everywhere.

``cpu:zen3``, ``cpu:x86_64_v3`` (CPUs by archspec's names, conda-forge's
microarchitecture levels among them), ``cuda:sm_90``, ``rocm:gfx90a``,
``level_zero:pvc``, ``spirv:generic``, ``metal:apple``.  A bare name means
``cpu:``.  Every command line, site config, bundle header and message reads
and writes these; LLVM's own CPU names (``znver3``) are an implementation
detail of the CPU backend.  Which names each kind builds is the registry's
(``tack.backends.arch_names``): ``resolve`` asks it.

The CPU rule for compatible code: a node can run code built for its own
microarchitecture and for each of archspec's ancestors of it, and looks for
it in that order, most specific first (``zen3``, ``zen2``, ``zen``,
``x86_64_v3``, ``x86_64_v2``, ``x86_64``).  Code for an unrelated or newer
microarchitecture is never a candidate.
"""

from __future__ import annotations

import difflib
import sys
import warnings

# bundle_machine: the arch registry's, re-exported for the cache, which imports no backend
# module itself (tests/cache/test_layering.py).
from .backends.arch_names import KINDS, ArchError, bundle_machine, cpu_microarch  # noqa: F401


def parse(text) -> tuple[str, str]:
    """``'zen3'`` or ``'cpu:zen3'`` -> ``('cpu', 'zen3')``; ``'cuda:sm_90'`` -> ``('cuda', 'sm_90')``."""
    if not isinstance(text, str):
        raise ArchError(f"an architecture is a string such as 'cpu:zen3', not {text!r}")
    kind, sep, name = text.strip().partition(":")
    if not sep:
        kind, name = "cpu", kind
    if kind == "rocm" and name.count(":") and all(name.split(":")):
        # An AMD target id keeps its features (rocm:gfx942:sramecc+:xnack-): the gfx is the
        # name checked here, the features by the registry (arch_names.AMDKind).
        parse(f"rocm:{name.split(':')[0]}")
        return kind, name
    if kind not in KINDS:
        hint = difflib.get_close_matches(kind, KINDS, n=1)
        raise ArchError(f"{text!r}: unknown kind {kind!r}"
                        + (f" (did you mean {hint[0]!r}?)" if hint else "")
                        + f"; use {', '.join(k + ':' for k in KINDS)}")
    if not name or any(c in name for c in "/\\: \t\n\0") or name in (".", ".."):
        raise ArchError(f"{text!r}: {name!r} is not an architecture name")
    return kind, name


def qualify(text) -> str:
    """The ``kind:name`` spelling of an architecture name (``'zen3'`` -> ``'cpu:zen3'``)."""
    kind, name = parse(text)
    return f"{kind}:{name}"


def resolve(text) -> tuple[str, str]:
    """``(kind, name)`` of an architecture Tack builds (an alias gives its name: ``level_zero:acm``
    -> ``('level_zero', 'dg2')``); ArchError, saying what the kind builds, otherwise.  The one
    check of a name (``tack.backends.arch_names``), for the site config, ``bundles build`` and
    the toolchains alike.  An AMD target id keeps its features: ``rocm:gfx90a:xnack-``."""
    kind, name = parse(text)
    return kind, KINDS[kind].resolve(name)


def cpu_candidates(name: str) -> list[str]:
    """``name`` and every archspec ancestor of it, most specific first: the CPU archs whose code
    a node of microarchitecture ``name`` runs, in the order it looks for them."""
    target = cpu_microarch(name)
    order = {a.name: i for i, a in enumerate(target.ancestors)}
    # Deeper in archspec's tree = more specific; ties keep archspec's own order.
    ancestors = sorted(target.ancestors, key=lambda a: (-len(a.ancestors), order[a.name]))
    return [name] + [a.name for a in ancestors]


def host_cpu() -> str:
    """This node's microarchitecture by archspec's name (imports archspec: tens of milliseconds,
    paid only where a site bundle is looked for, never on a hit in the user's own cache).
    archspec reads ``/proc/cpuinfo`` without naming an encoding: under ``-X warn_default_encoding``
    with ``-W error::EncodingWarning`` its detection failed and named this node ``x86_64``."""
    import archspec.cpu
    if not sys.flags.warn_default_encoding:     # the only way an EncodingWarning is ever raised
        return archspec.cpu.host().name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EncodingWarning)
        return archspec.cpu.host().name


def generic_level(name: str) -> str:
    """The generic level of the CPU microarchitecture ``name``, whose code runs on every node of
    its family at that level or above: the highest x86-64 level among ``name`` and its ancestors
    (``zen3`` -> ``x86_64_v3``; ``x86_64_v4`` is its own), else the family (``neoverse_v2`` ->
    ``aarch64``, ``power9le`` -> ``ppc64le``).  What a package builds besides the target's own
    bundle, so that one install serves a mixed partition."""
    for cand in cpu_candidates(name):
        if cand.startswith("x86_64_v"):
            return cand
    return cpu_microarch(name).family.name
