"""Ahead of time: compile a kernel for named targets and argument types, with no device.

    import numpy as np, tack, tack.aot, tack.backends.cuda
    arts = [tack.aot.compile(kernel, arch, args=(np.empty((2, 2, 2), np.float32), 0.5))
            for arch in ("cpu:zen4", "cuda:sm_90", "rocm:gfx90a", "level_zero:pvc")]
    tack.backends.cuda.ptx_of(arts[1].payload).decode()   # PTX text (SASS beside it: docs/gpu.md)
    tack.aot.save(arts, directory="/scratch/me/tack-cache")     # as a cache directory's entries
    tack.aot.save_bundle(arts[:1], "/apps/tack/bundles")     # one target per bundle, named as
                                                              # a node looks it up

Example arguments give the argument types only (an array's dtype, rank,
layout and writability; its shape where the kernel compiles it in), as at a
launch; nothing runs. The artifacts are what the runtime of each backend
loads, stored exactly as a launch would store them: the same preamble and
compile path (``tack.compiler``), keys and metadata.  ``tack.site bundles
build`` is ``build`` then ``save_bundle`` for each architecture of a site.
"""

from __future__ import annotations

import os

from .compiler import Artifact

__all__ = ["Artifact", "SaveError", "build", "bundle_path", "compile", "save", "save_bundle",
           "target_of"]


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
    if isinstance(grid, bool) or not hasattr(grid, "__index__"):     # an int, NumPy's too
        raise TypeError(f"grid is the launch grid's number of dimensions, 1, 2 or 3, not {grid!r}"
                        + (" (a launch's dim: pass its length)" if isinstance(grid, (tuple, list))
                           else ""))
    grid = grid.__index__()
    if not 1 <= grid <= 3:
        raise ValueError(f"grid is the launch grid's number of dimensions, 1, 2 or 3, not "
                         f"{grid!r} (not its size: code serves a launch of any size)")
    from .api import Kernel
    if not isinstance(kernel, Kernel):
        raise TypeError(f"tack.aot.compile takes a @tack.kernel, not {type(kernel).__name__} "
                        f"{getattr(kernel, '__qualname__', kernel)!r}")
    return build(_host_or(target), [(kernel, args, grid)], debug)[0]


def build(target, specs, debug: bool = False, step=None) -> list:
    """Compile each ``(kernel, example args, grid)`` of ``specs`` for the toolchain ``target``
    -> [Artifact].  Specs that need the same variant (a shape-generic kernel warmed for several
    shapes) compile it once.  ``step(done, kernel, value types)`` follows each spec."""
    from .cache.keys import variant_key
    from .compiler import compile_variant, prepare
    if isinstance(target, str) or target is None:      # a kind:name, as compile takes it
        target = _host_or(target)
    arts, seen = [], set()
    specs = list(specs)
    for spec in specs:
        if not (isinstance(spec, (tuple, list)) and len(spec) == 3):
            raise TypeError(f"each of build's specs is (kernel, example args, grid), not {spec!r:.80}")
    for done, (kernel, args, grid) in enumerate(specs, 1):
        typed, lowered, key = prepare(kernel, args, debug)
        values = typed.value_types
        vkey = variant_key(key, values, grid, target.key)
        if vkey not in seen:
            seen.add(vkey)
            arts.append(compile_variant(lowered, key, values, grid, target, debug))
        if step is not None:
            step(done, kernel, values)
    return arts


def _host_or(target):
    if target in ("cpu", "cpu:host", None):
        from .backends.cpu import host_target
        return host_target()
    return target_of(target)


def _entries(artifacts, encoded=True):
    """[(kind, key, encoded entry)] (``encoded=False``: (kind, key, meta, payload)): each lowered
    kernel once, then each variant."""
    from .cache import entry
    from .compiler import lowered_meta
    out, seen = [], set()
    artifacts = _artifacts(artifacts)
    for a in artifacts:
        if a.lowered_key not in seen:
            seen.add(a.lowered_key)
            out.append((entry.KIND_LOWERED, a.lowered_key, lowered_meta(a.lowered), a.lowered.to_bytes()))
    for a in artifacts:
        out.append((entry.KIND_VARIANT, a.key, a.meta, a.payload))
    return [(k, key, entry.encode(k, key, m, p)) for k, key, m, p in out] if encoded else out


def _artifacts(artifacts) -> list:
    """``artifacts`` as a list (one ``Artifact`` alone too: a named tuple, which was iterated
    into its fields); TypeError for anything that is not an ``Artifact`` (an AttributeError deep
    inside otherwise)."""
    artifacts = [artifacts] if isinstance(artifacts, Artifact) else list(artifacts)
    for a in artifacts:
        if not isinstance(a, Artifact):
            raise TypeError(f"artifacts are what tack.aot.compile and build return, not "
                            f"{type(a).__name__} {a!r:.60}")
    return artifacts


def _named(path, what):
    """ValueError for an empty path (an unset variable's), which os.path.abspath makes the
    current directory: the cache's CLIs refuse one as bad usage too."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise TypeError(f"{what} is a path (a str or os.PathLike), not {type(path).__name__} "
                        f"{path!r:.60}")
    if not os.fspath(path):
        raise ValueError(f"{what} {path!r} names no directory or file (an unset variable?)")


class SaveError(OSError):
    """``save`` could not use or write the cache directory; the message names it and says why."""


def save(artifacts, directory: str) -> int:
    """Store artifacts as entries of the cache directory ``directory`` (this Tack version's part
    of it), through the cache's own write side, as a launch stores what it compiles: the
    directory made private and tagged if missing, used only if trusted (``docs/cache.md``).
    -> entries written; ``SaveError`` naming the directory and why if it cannot be used."""
    from .cache import Settings, new_stats
    from .cache.stores import DiskCache
    from .cache.stores_write import store

    def refuse(message):
        raise SaveError(f"tack.aot.save: {message}")
    _named(directory, "directory")
    disk = DiskCache(Settings(os.path.abspath(directory), "write", None, {}), new_stats(), refuse)
    disk.named_by = None                    # an argument, not TACK_CACHE_DIR: name the real one
    entries = _entries(artifacts, encoded=False)
    for kind, key, meta, payload in entries:
        if not store(disk, kind, key, meta, payload):
            refuse(f"cannot store in {directory}")
    return len(entries)


def requirements(arch: str) -> dict:
    """What a node needs to run code built for ``arch``, as a bundle's header records it: for
    an archspec CPU microarchitecture, its features, vendor, rank and family's detection table
    (``backends.cpu_choice``: how a node chooses its site bundle without archspec); {} for
    another kind, or for code a host compiled for itself (``cpu:host``: its own key names it)."""
    from .archs import parse
    kind, name = parse(arch)
    if kind != "cpu" or name == "host":
        return {}
    from .backends.arch_names import cpu_site_facts
    from .backends.cpu_choice import header_fields
    return header_fields(cpu_site_facts(name))


def save_bundle(artifacts, path: str, force: bool = False, merge: bool = False) -> str:
    """Write the artifacts, all for one target, as a bundle at ``path``, or, if ``path`` is a
    directory, in it under the name a node looks a site bundle up by. -> the bundle's path.

    Written atomically (a job that has the old bundle open keeps reading it).  A Tack bundle
    already there is replaced (``merge``: with the valid entries it holds for the same target
    from this Tack kept beside the artifacts, theirs first); a file that is not one only with
    ``force`` (``tack.cache.bundle.BundleError`` otherwise), and what is not a regular file (a
    link, a FIFO) never."""
    from .backends.cpu_runtime import llvm_version
    from .cache import bundle, bundle_write
    _named(path, "path")
    artifacts = _artifacts(artifacts)
    if not artifacts:
        raise ValueError("save_bundle has no artifacts to write")
    targets = {a.meta["target_key"] for a in artifacts}
    if len(targets) != 1:
        raise ValueError(f"a bundle holds one target's variants; these are for {len(targets)}")
    header = bundle_write.header_for(artifacts[0].meta, llvm_version(),
                                     requires=requirements(artifacts[0].target))
    path = os.fspath(path)
    if os.path.isdir(path) or path.endswith(os.sep):
        path = os.path.join(path, bundle.site_bundle_name(artifacts[0].target, header["target_key"],
                                                          header["machine"]))
    _bundle_directory(os.path.dirname(os.path.abspath(path)))
    why = bundle_write.replaceable(path, force, force_hint="force=True")
    if why is not None:
        raise bundle.BundleError(why)
    entries = _entries(artifacts)
    if merge:                               # the artifacts' own entries come first
        entries += bundle_write.kept_entries(path, header["target_key"], allow_root=True)
    bundle_write.write(path, entries, header)
    return path


def bundle_directory(directory) -> None:
    """Make ``directory`` (and missing parents) as a site's bundle directory is made (0755,
    whatever the umask) and check it as a job checks one before reading its bundles:
    ``cache.trust.Untrusted`` where jobs would refuse it (others may write it), OSError where
    it cannot be made.  ``save_bundle`` and ``bundles build`` (before its long compile) ask it."""
    from .cache import trust
    from .cache.trust_write import make_shared_dirs
    make_shared_dirs(directory)
    trust.check_trusted(directory, allow_root=True)
    trust.check_parents(directory)


def _bundle_directory(directory):
    """``bundle_directory``, with ``SaveError`` naming the directory: a bundle written where jobs
    would refuse it is refused by every node, silently."""
    from .cache import trust
    try:
        bundle_directory(directory)
    except trust.Untrusted as e:
        raise SaveError(f"tack.aot.save_bundle: jobs would not use bundles from {directory}: "
                        f"{e}") from None
    except OSError as e:
        raise SaveError(f"tack.aot.save_bundle: cannot make {e.filename or directory}: "
                        f"{e.strerror or e}") from None


def bundle_path(target, directory: str) -> str:
    """Where ``save_bundle`` writes, in ``directory``, the bundle of toolchain ``target``'s
    artifacts (known before anything is compiled: ``bundles build`` checks it first); ``target``
    a toolchain target (``target_of``) or its ``kind:name``, as ``compile`` takes it."""
    from .cache import bundle
    _named(directory, "directory")
    if isinstance(target, str):
        target = _host_or(target)
    arch = f"{target.kind}:{target.arch}" if target.arch else f"{target.kind}:host"
    return os.path.join(directory, bundle.site_bundle_name(arch, target.key, target.machine_name))
