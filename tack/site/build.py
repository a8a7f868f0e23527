"""Per-architecture bundles for a site: build ahead of time, check on a node, rebuild when stale.

``build`` compiles the configured kernels for each CPU microarchitecture in
the config (object code for that CPU, whatever the build host is: no device
needed) and packs one bundle per architecture.  ``status`` says whether each
bundle still matches this node (microarchitecture, LLVM, Tack).  ``rebuild``
recompiles the variants of stale bundles from the lowered kernels they
carry: no user source, no front end.  Bundles are written atomically, so a
running job that has the old one open is not disturbed.
"""

from __future__ import annotations

import importlib
import numbers
import os
import sys
import time

import numpy as np

from .. import aot
from .. import types as T
from ..archs import bundle_machine, qualify, resolve
from ..cache import bundle as bundle_mod
from ..cache import bundle_write, entry, trust
from ..cache.bundle import BUNDLE_PREFIX, site_bundle_name
from ..backends.cpu_runtime import host_arch, llvm_version, site_candidates
from ..backends.cpu_runtime import site_bundles as cpu_site_bundles
from ..cache.keys import shown_version, tack_version_id
from .errors import SiteConfigError, SiteError


class BuildFailure(Exception):
    """One architecture or kernel could not be built; the others go on.  Given several
    messages (each a problem: every shape of an entry at fault), it says them a line each."""

    def __str__(self):
        return "\n".join(map(str, self.args))


def build_target(arch: str):
    """The toolchain target for ``arch`` (``zen3``, ``cpu:zen3``, ``cuda:sm_90``, ...);
    BuildFailure if no backend or compiler of this install can build code for it."""
    from ..aot import target_of
    try:
        return target_of(arch)
    except (ValueError, OSError) as e:          # ArchError is a ValueError
        raise BuildFailure(str(e)) from None


def llvm_target(arch: str):
    """(triple, LLVM CPU name) for an archspec microarchitecture; BuildFailure if none."""
    from ..archs import ArchError
    from ..backends.cpu import llvm_target as backend_llvm_target
    try:
        return backend_llvm_target(arch)
    except ArchError as e:
        raise BuildFailure(str(e)) from None


# -- what to warm -------------------------------------------------------------

def parse_arg(text: str):
    """An argument spec from the config -> an example value: ``float32[64,64]``, ``float64``, ``module:Class``.

    Read by ``config.parse_arg_spec``, the parser ``check`` uses.
    """
    from .config import parse_arg_spec
    try:
        spec = parse_arg_spec(text)
    except ValueError as e:
        raise BuildFailure(str(e)) from None
    if spec[0] == "array":
        try:
            return np.empty(spec[2], spec[1] if spec[1] != "bool" else np.bool_)
        except (MemoryError, ValueError) as e:  # within the bounds a spec takes, past this host's
            raise BuildFailure(f"{text.strip()!r}: this host cannot allocate the example array "
                               f"({type(e).__name__}: {' '.join(str(e).split())}); give a smaller "
                               "shape") from None
    if spec[0] == "scalar":
        return np.dtype(spec[1] if spec[1] != "bool" else np.bool_).type(0)
    try:
        return getattr(importlib.import_module(spec[1]), spec[2])
    except (Exception, SystemExit) as e:        # noqa: BLE001 - any import failure is reported
        # (SystemExit too, as for a kernel module: one that runs its command line when imported
        # ended the tool with its exit status and no word of why)
        why = " ".join(str(e).split())
        raise BuildFailure(f"template {text.strip()!r}: {type(e).__name__}: {why}") from None


def _kernels_hint(module, name) -> str:
    """"; did you mean 'x'?" and the module's kernels, for a ``kernel:`` it lacks."""
    import difflib
    from ..api import Kernel
    kernels = sorted(k for k, v in vars(module).items() if isinstance(v, Kernel))
    if not kernels:
        return " (it defines none)"
    close = difflib.get_close_matches(name, kernels, n=1)
    return (f"; did you mean {close[0]!r}?" if close else "") + f" (its kernels: {', '.join(kernels)})"


def import_kernel_module(entry: dict, where):
    """The module of one ``build.kernels`` entry, imported; BuildFailure naming it otherwise."""
    try:
        return importlib.import_module(entry["module"])
    except (Exception, SystemExit) as e:        # noqa: BLE001 - any import failure is reported
        # (SystemExit too: a module that runs its command line when imported, argparse's exit)
        why = " ".join(str(e).split())
        raise BuildFailure(f"{where(('module',))}: kernel module {entry['module']!r} failed to "
                           f"import: {type(e).__name__}: {why}") from None


def load_config(path, import_modules=False, text=None):
    """The validated config; SiteConfigError otherwise.  ``import_modules`` (check, bundles
    build, bundles install: the commands that import the kernel modules anyway): a module of
    build.kernels that fails to import is reported with the config's other problems, not only
    once they are fixed.  ``text``: its content, not yet written to ``path`` (``config.load``)."""
    from .config import load as load_yaml     # PyYAML is imported only when a config is read
    try:
        return load_yaml(path, text=text)
    except SiteConfigError as e:
        if import_modules and e.partial is not None:
            e.problems.extend(module_problems(e.partial))
        raise


def module_problems(cfg):
    """["FILE:LINE: key: why"] for each ``build.kernels`` module that fails to import, from a
    config that may have other problems (``SiteConfigError.partial``): so that ``check`` reports
    a bad module with them rather than after they are fixed."""
    problems = []
    for i, entry in enumerate(cfg.get("build.kernels") or []):
        if isinstance(entry, dict) and isinstance(entry.get("module"), str):
            try:
                import_kernel_module(entry, lambda keypath, i=i: cfg.where(("build", "kernels", i)
                                                                           + tuple(keypath)))
            except BuildFailure as e:
                problems.append(str(e))
    return problems


def warm_specs(entry: dict, where=None):
    """[(kernel, example args, grid dims)] for one ``build.kernels`` entry.

    ``where(keypath) -> "FILE:LINE: key"`` places a failure in the config; the
    keypath is relative to the entry (``("shapes", 1)``, ``("args", 0)``).
    """
    where = where or (lambda keypath: ".".join(map(str, keypath)))
    module = import_kernel_module(entry, where)
    if "kernel" in entry:
        kernel = getattr(module, entry["kernel"], None)
        if kernel is None or not hasattr(kernel, "params"):
            raise BuildFailure(f"{where(('kernel',))}: {entry['module']} has no @tack.kernel "
                               f"{entry['kernel']!r}{_kernels_hint(module, entry['kernel'])}")
        args = []
        for j, a in enumerate(entry["args"]):
            try:
                args.append(parse_arg(a))
            except BuildFailure as e:
                raise BuildFailure(f"{where(('args', j))}: {e}") from None
        if len(args) != len(kernel.params):
            raise BuildFailure(f"{where(('args',))}: {entry['kernel']} takes {len(kernel.params)} "
                               f"arguments ({', '.join(kernel.params)}), {len(args)} are given")
        return [(kernel, tuple(args), int(entry.get("grid", 1)))]
    warm = getattr(module, "tack_warm", None)
    if warm is None:
        raise BuildFailure(f"{where(('module',))}: {entry['module']} has no tack_warm(shape); "
                           "give 'kernel' and 'args'")
    specs, failed = [], []      # every shape's problem, not the first alone
    for j, shape in enumerate(entry.get("shapes") or []):
        try:
            got = list(warm(shape))
        except (Exception, SystemExit) as e:    # noqa: BLE001 - the module's own checks, reported
            failed.append(f"{where(('shapes', j))}: {entry['module']}.tack_warm"
                          f"({list(shape)}) failed: {type(e).__name__}: {e}")
            continue
        for n, item in enumerate(got):
            why = _warm_item_problem(item)
            if why is not None:
                failed.append(f"{where(('shapes', j))}: {entry['module']}.tack_warm"
                              f"({list(shape)}) item {n}: {why}; expected (kernel, "
                              "(example args...), grid dims)")
                break
        else:
            specs.extend(got)
    if failed:
        raise BuildFailure(*failed)
    if not specs:
        raise BuildFailure(f"{where(('shapes',))}: {entry['module']}.tack_warm gave no kernel to build "
                           "for these shapes")
    return specs


def _warm_item_problem(item):
    """Why one item a module's ``tack_warm`` returned is not ``(kernel, args, grid)``, or None."""
    if not isinstance(item, (tuple, list)) or len(item) != 3:
        what = f"{len(item)} values" if isinstance(item, (tuple, list)) else type(item).__name__
        return f"got {what}"
    kernel, args, grid = item
    if not hasattr(kernel, "params"):
        return f"{getattr(kernel, '__qualname__', type(kernel).__name__)} is not a @tack.kernel"
    if not isinstance(args, (tuple, list)):
        return f"its arguments are a {type(args).__name__}, not a tuple"
    if isinstance(grid, bool) or not isinstance(grid, numbers.Integral) or not 1 <= grid <= 3:
        return f"its grid is {grid!r}, not 1, 2 or 3"
    return None


def build_problems(cfg, progress=None):
    """What ``bundles build`` would fail on, found without compiling: ``["FILE:LINE: key: why"]``.

    Each CPU architecture must map to a CPU this LLVM knows; each kernel
    entry's module must import and give argument values the kernel can take
    (its ``tack_warm`` checks a shape's rank and extents), and each kernel
    must type-check for them (an array of the wrong rank fails here).  Every
    other arch name was checked with the config, by the registry that the
    toolchains build from.  Then each kernel's code is generated for each
    architecture (``target_problems``: what a target lacks, such as float64 on
    Metal or dg2, is refused there), telling ``progress`` each architecture.
    """
    problems, entries = [], []
    for i, arch in enumerate(cfg.cpu_archs()):
        try:
            llvm_target(arch)
        except BuildFailure as e:
            problems.append(f"{cfg.where(('build', 'archs', 'cpu', i))}: {e}")
    for arch, keypath in listed_archs(cfg):
        if keypath[2] != "cpu":
            try:
                build_target(arch)          # a GPU processor this LLVM does not know, ...
            except BuildFailure as e:
                problems.append(f"{cfg.where(keypath)}: {e}")
    for i, entry in enumerate(cfg.get("build.kernels") or []):
        base = ("build", "kernels", i)
        try:
            specs = warm_specs(entry, lambda keypath: cfg.where(base + tuple(keypath)))
        except BuildFailure as e:
            problems.extend(str(m) for m in e.args)     # (one for each shape at fault)
            continue
        try:
            type_check(specs)
        except BuildFailure as e:
            problems.append(f"{cfg.where(base)}: {e}{_grid_hint(entry, specs)}")
            continue
        entries.append((entry, specs))
    if not problems and entries:
        problems.extend(target_problems(cfg, entries, progress))
    return problems


def listed_archs(cfg) -> list:
    """``[("cuda:sm_90", ("build", "archs", "cuda", 0)), ...]``: each architecture of build.archs
    by the registry's name, with the key path of its config line."""
    from .config import ARCH_KINDS, _bare
    listed = cfg.get("build.archs", {}) or {}
    return [(f"{kind}:{ARCH_KINDS[kind].resolve(_bare(kind, a))}", ("build", "archs", kind, i))
            for kind in ARCH_KINDS for i, a in enumerate(listed.get(kind) or [])]


def target_problems(cfg, entries, progress=None):
    """``["FILE:LINE: build.archs.KIND[i]: ..."]`` for each architecture of build.archs that a
    configured kernel cannot be compiled for, naming the kernel, its module and the feature the
    target lacks (float64 on Metal and dg2, int64 atomics on Metal...).  Found by generating
    each distinct variant's code for each architecture (LLVM IR or MSL: where Tack refuses a
    feature), without LLVM's optimizer or a vendor tool; ``progress(line)`` is told each
    architecture first.  One problem per architecture and kernel."""
    from ..archs import ArchError
    from ..compiler import prepare
    from ..specialize import specialize
    archs = listed_archs(cfg)
    variants, seen = [], set()
    for entry, specs in entries:
        for kernel, args, grid in specs:
            typed, lowered, key = prepare(kernel, args)         # memoized by type_check
            ident = (key, tuple(map(str, typed.value_types)), grid)
            if ident not in seen:
                seen.add(ident)
                variants.append((entry["module"], kernel, lowered, typed.value_types, grid))
    problems = []
    for arch, keypath in archs:
        if progress is not None:
            progress(f"check: generating {len(variants)} variant(s) for {arch} ...")
        try:
            target = build_target(arch)
        except (BuildFailure, ArchError):
            continue                            # reported by build_problems
        refused = set()
        for module, kernel, lowered, values, grid in variants:
            name = kernel.__qualname__
            if name in refused:
                continue
            try:
                typed = specialize(lowered, values, grid)
                if target.emits_source:
                    target.generate(typed, "tack_check")
                else:
                    from ..codegen import generate
                    generate(typed, target, "tack_check")
            except Exception as e:              # noqa: BLE001 - the compiler's refusal, reported
                refused.add(name)
                why = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
                problems.append(f"{cfg.where(keypath)}: {arch} cannot build kernel {name} of "
                                f"{module} ({', '.join(map(str, values))}): "
                                f"{type(e).__name__}: {why}")
    return problems


def describe_arg(a) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype}[{','.join(map(str, a.shape))}]"
    if isinstance(a, type):
        return a.__qualname__
    return type(a).__name__


def _grid_hint(entry, specs) -> str:
    """For a ``kernel`` entry without ``grid`` that does not compile on a 1-D grid but does on
    another: "; set grid: N" (the compiler's message speaks of a launch's ``dim=``, which the
    config does not have)."""
    if "kernel" not in entry or "grid" in entry:
        return ""
    for grid in (2, 3):
        try:
            type_check([(kernel, args, grid) for kernel, args, _ in specs])
        except BuildFailure:
            continue
        return (f"; it compiles on a {grid}-D grid: set grid: {grid} in this entry (the launch "
                "grid's dimensions, 1 where it is left out)")
    return ""


def type_check(specs):
    """Lower and type each (kernel, args, grid) as the build would, without generating code."""
    from ..compiler import prepare
    from ..specialize import specialize
    for kernel, args, grid in specs:
        name = kernel.__qualname__
        try:
            typed, lowered, _ = prepare(kernel, args)       # memoized: the build lowers it once
            specialize(lowered, typed.value_types, grid)
        except Exception as e:                  # noqa: BLE001 - the compiler's errors, reported
            why = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
            raise BuildFailure(f"{name}({', '.join(map(describe_arg, args))}) "
                               f"does not compile: {type(e).__name__}: {why}") from None


# -- compiling for a target ---------------------------------------------------

class Progress:
    """Progress per kernel and architecture: a bar redrawn in place on a terminal, lines otherwise."""

    def __init__(self, out, width=14):
        self.out = out
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.width = width                      # the longest arch name's

    def say(self, msg):
        self.end()
        print(msg, file=self.out, flush=True)

    def step(self, arch, done, total, what):
        if not self.tty:
            print(f"  {arch}: [{done}/{total}] {what}", file=self.out, flush=True)
            return
        width = 30
        filled = width * done // max(total, 1)
        line = f"\r  {arch:<{self.width}} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what}"
        self.out.write(line[:120].ljust(120))
        self.out.flush()
        self._open = True

    def end(self):
        if getattr(self, "_open", False):
            self.out.write("\n")
            self._open = False


def distinct_variants(specs) -> int:
    """How many variants ``specs`` compile to: launches of one kernel with the same value
    types and grid (a shape-generic kernel warmed for several shapes) are one variant.  Counted
    by the front end alone (memoized: the build does not lower again); len(specs) if a kernel
    does not lower (the build reports it)."""
    from ..compiler import prepare
    seen = set()
    try:
        for kernel, args, grid in specs:
            typed, _, key = prepare(kernel, args)
            seen.add((key, tuple(map(str, typed.value_types)), grid))
    except Exception:                           # noqa: BLE001 - reported by the build itself
        return len(specs)
    return len(seen)


def build_arch(arch, specs, progress, total=None, verbose=False) -> list:
    """The artifacts of every spec for one architecture (CPU or GPU): ``tack.aot.build``.
    Progress: one step per distinct variant (of ``total``), the kernel's name, with its value
    types and grid when ``verbose``."""
    seen = set()

    def step(done, kernel, values):
        grid = specs[done - 1][2]
        ident = (id(kernel), tuple(map(str, values)), grid)
        if ident in seen:
            return
        seen.add(ident)
        what = kernel.__qualname__
        if verbose:
            what += f"({', '.join(map(str, values))}) grid {grid}"
        progress.step(arch, len(seen), total or len(specs), what)
    return aot.build(build_target(arch), specs, step=step)


def build_bundles(cfg, archs=None, output=None, out=sys.stdout, err=sys.stderr, verbose=False,
                  force=False) -> int:
    """``bundles build``: each configured architecture; the others go on when one fails.
    Progress is one line per distinct variant (``verbose``: with its value types and grid),
    then a table, one row per architecture.  Before anything compiles, each bundle's path is
    checked: a file there that Tack did not write (not a Tack bundle) is replaced only with
    ``force``, what is not a regular file never (one error line each, and nothing is built);
    a Tack bundle there is replaced atomically, and one that was damaged is said to have been."""
    out_dir = output
    if out_dir is None:
        out_dir, why = configured_output(cfg)
        if why is not None:
            print(f"error: {why}", file=err)
            return 1
    cpu = [qualify(a) for a in cfg.cpu_archs()]
    gpu = [(k, f"{k}:{a}") for k, a in cfg.gpu_archs()]
    try:
        wanted = {':'.join(resolve(a)) for a in archs or []}     # level_zero:acm -> level_zero:dg2
    except ValueError as e:
        print(f"error: --arch {e}", file=err)
        return 1
    if wanted:
        unknown = wanted - set(cpu) - {a for _, a in gpu}
        if unknown:
            print(f"error: --arch {', '.join(sorted(unknown))} is not in the config's build.archs "
                  f"({', '.join(cpu + [a for _, a in gpu])})", file=err)
            return 1
        cpu = [a for a in cpu if a in wanted]
        gpu = [(k, a) for k, a in gpu if a in wanted]
    if not cpu and not gpu:
        # (an empty table, the directory made, and exit 0: as if bundles had been built)
        print(f"error: {cfg.where(('build', 'archs'))}: names no architecture; "
              "nothing was built", file=err)
        return 1
    try:
        aot.bundle_directory(out_dir)       # 0755 whatever the umask, checked as a job checks it
        probe_write(out_dir)
    except trust.Untrusted as e:
        print(f"error: bundle directory {out_dir}: jobs would not use bundles from it: {e}", file=err)
        return 1
    except OSError as e:
        print(f"error: bundle directory {out_dir} is not writable: {e.strerror or e}", file=err)
        return 1
    for path in remove_dead_temporaries(out_dir):
        print(f"removed {path}: a temporary bundle a build that stopped (killed, a crash) left",
              file=out)
    replacing, held, refused = {}, {}, []
    for arch in cpu + [a for _, a in gpu]:
        try:
            path = aot.bundle_path(build_target(arch), out_dir)
        except BuildFailure:
            continue                            # reported with the others when its turn comes
        why = bundle_write.replaceable(path, force)
        if why is not None:
            refused.append(why)
        else:
            replacing[arch], held[arch] = replaced(path)
    for why in refused:
        print(f"error: {why}", file=err)
    if refused:
        return 1

    width = max([len("arch")] + [len(a) for a in cpu] + [len(a) for _, a in gpu])
    progress = Progress(out, width)
    say = progress.say

    kernels = cfg.kernels()
    rows, failures = [], []
    specs = []
    for i, entry in enumerate(kernels):
        try:
            specs.extend(warm_specs(entry, lambda keypath, i=i: cfg.where(("build", "kernels", i) + keypath)))
        except BuildFailure as e:
            failures.append(("all", str(e)))
    nvariants = distinct_variants(specs)
    launches = f" ({len(specs)} launches)" if nvariants != len(specs) else ""
    for arch in (cpu + [a for _, a in gpu]) if specs else ():     # (no kernel: said above, not built)
        t0 = time.perf_counter()
        say(f"{arch}: compiling {nvariants} variant(s){launches}")
        try:
            arts = build_arch(arch, specs, progress, nvariants, verbose)
            path = aot.save_bundle(arts, out_dir, force=force)
        except Exception as e:                  # noqa: BLE001 - one arch's failure must not stop the rest
            failures.append((arch, f"{type(e).__name__}: {e}"))
            continue
        if replacing.get(arch):
            say(f"{arch}: replaced {replacing[arch]}")
        made = entry_keys(path) if held.get(arch) else None
        dropped = len(held[arch] - made) if made is not None else 0
        if dropped:
            # (a second config built into the same directory dropped the first's kernels unsaid)
            say(f"{arch}: the bundle replaced held {dropped} entr{'y' if dropped == 1 else 'ies'} "
                "this build does not make (a kernel left out of the config, or another config's "
                f"kernels built into {out_dir}): jobs that used them compile; build a directory's "
                "kernels from one config, or give each config a bundle directory of its own")
        rows.append((arch, len({k.__qualname__ for k, _, _ in specs}), len(arts),
                     os.path.getsize(path), time.perf_counter() - t0, code_held(arch, arts), path))
    from ..cache import format_size
    say("")
    w = max(width, *(len(a) for a, _ in failures)) + 2 if failures else width + 2
    cw = max([len("code")] + [len(r[5]) for r in rows])
    say(f"{'arch':<{w}}{'kernels':>8}{'variants':>10}{'bytes':>12}{'time':>9}  {'code':<{cw}}  bundle")
    for arch, nk, nv, nb, secs, code, path in rows:
        say(f"{arch:<{w}}{nk:>8}{nv:>10}{format_size(nb):>12}{secs:>8.1f}s  {code:<{cw}}  {path}")
    for arch, why in failures:
        say(f"{arch:<{w}}  FAILED: {why}")
    return 1 if failures else 0


def configured_output(cfg):
    """The directory ``bundles build`` writes into without --output: ``cache.bundles`` as a job
    reads TACK_CACHE_BUNDLES (``stores.site_dir_entry``: ``$VAR`` and ``~`` expanded, here in this
    process's environment).  -> (directory, None), or (None, why not): no cache.bundles, a list
    of several (which one is not known), a variable that is not set here.  (It was taken as it
    is: ``$SITE/bundles`` or ``~/bundles`` made a directory of that name under the working
    directory, ``/a:/b`` one named ``/a:``, where no job looks.)"""
    from ..cache.stores import site_dir_entry
    value = cfg.get("cache.bundles")
    if not value:
        return None, "no bundle directory: give --output or set cache.bundles"
    where = cfg.where(("cache", "bundles"))
    dirs = [d.strip() for d in value.split(os.pathsep) if d.strip()]     # as a job reads them
    if len(dirs) != 1:
        return None, (f"{where}: {value!r} names {len(dirs)} directories; give --output to say "
                      "which one the bundles are built into")
    try:
        return site_dir_entry(dirs[0]), None
    except ValueError as e:
        return None, f"{where}: {e}; give --output to say where the bundles are built"


def code_held(arch, arts) -> str:
    """What a bundle's artifacts hold, for the build's table: the target's ``code_note`` where it
    has one (CUDA: ``PTX + SASS (ptxas 13.0.88)``, or ``PTX only (...)`` and why), else the
    artifacts' file type (``o``, ``hsaco``, ``spv``, ``metal``)."""
    try:
        note = getattr(build_target(arch), "code_note", "")
    except BuildFailure:
        note = ""
    return note or (arts[0].suffix.lstrip(".") if arts else "-")


def entry_keys(path):
    """The (kind, key) of every entry the bundle a build just wrote at ``path`` indexes, or None
    where it cannot be read (replaced since, by another build)."""
    try:
        with bundle_mod.read(path, allow_root=True) as b:
            return set(b.index)
    except bundle_mod.BundleError:
        return None


def replaced(path) -> tuple:
    """(what ``bundles build`` says of the file at ``path`` it is about to replace, the (kind,
    key) of every entry it indexes), from one read before the new bundle is written, which
    removes it.  What it says: None for nothing there or a whole Tack bundle (the usual
    rebuild), else what was wrong with it (a damaged bundle: its header, or how many of its
    entries; a file that is not a bundle at all, replaced because of --force).  Its keys: none
    where it is no bundle or cannot be read."""
    if not os.path.lexists(path):
        return None, set()
    if bundle_write.replaceable(path) is not None:
        return f"{path}, which was not a Tack bundle (--force)", set()
    try:
        with bundle_mod.read(path, allow_root=True) as b:
            damaged = b.damaged_entries()
            total = len(b)
            made = b.meta.get("tack")
            keys = set(b.index)
    except bundle_mod.BundleError as e:
        return f"a bundle that could not be used: {e}", set()
    if damaged:
        return f"a damaged bundle: {damaged} of {total} entries of {path} were unusable", keys
    if made != tack_version_id():
        # Bundles of two Tacks have the same name: another install's, in a directory both use,
        # is gone for its jobs (they compile).  Said, so that a shared directory is noticed.
        return (f"a bundle made by Tack {shown_version(made)} (this is "
                f"{shown_version(tack_version_id())}): jobs of that Tack no longer find one in "
                f"{os.path.dirname(path)} and compile; give each Tack install a bundle directory "
                "of its own"), keys
    return None, keys


def temporaries(directory) -> list:
    """The temporary bundles in ``directory`` (``bundle-....tmp.<pid>.<hex>``: what a build or a
    rebuild writes before its rename), sorted; [] where it cannot be listed."""
    from ..cache import size
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(os.path.join(directory, n) for n in names
                  if n.startswith(BUNDLE_PREFIX) and size.is_temporary_name(n))


def remove_dead_temporaries(directory, now=None) -> list:
    """Delete the temporary bundles of ``directory`` that a build killed before its rename left
    (jobs never read them, and no later build wrote over them: each has its writer's pid in its
    name): those more than an hour old, as the cache deletes its own, and only a file that starts
    as a bundle does (``size.delete_own``).  -> the paths removed."""
    from ..cache import size
    now = time.time() if now is None else now
    removed = []
    for path in temporaries(directory):
        try:
            if now - os.lstat(path).st_mtime > size._STALE_TMP and size.delete_own(path):
                removed.append(path)
        except OSError:
            pass
    return removed


# -- status and rebuild -------------------------------------------------------

def _directories(directory, command, err=sys.stderr):
    """[directory] if one is given (SiteError if it is not a directory), else every site
    directory a job searches, in its order (TACK_CACHE_BUNDLES's, then those installed beside
    Tack); SiteError if there is none.  Each TACK_CACHE_BUNDLES entry a job ignores is said on
    ``err``, in the words the job warns with (``stores.site_dirs``)."""
    if directory is not None:
        if not os.path.isdir(directory):
            raise SiteError(f"bundles {command}: {directory} is not a directory")
        return [directory]
    from ..cache.stores import site_dirs
    ignored = []
    dirs = site_dirs(warn=ignored.append)
    for why in ignored:
        print(f"warning: {why}", file=err)
    if not dirs:
        raw = os.environ.get("TACK_CACHE_BUNDLES", "")
        named = [d for d in raw.split(os.pathsep) if d.strip()]
        setting = ("every entry of TACK_CACHE_BUNDLES is ignored (above)" if named else
                   "TACK_CACHE_BUNDLES is not set" if not raw.strip() else
                   f"TACK_CACHE_BUNDLES ({raw!r}) names no directory")
        raise SiteError(f"bundles {command}: no bundle directory given, {setting} and no "
                        "bundles are installed beside Tack (share/tack/bundles)")
    return dirs


def _bundle_paths(directory):
    """The bundle files of ``directory`` (none if it is missing: a site directory a job searches
    may not be there yet; one the command line names is refused first, ``_directories``), sorted."""
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.startswith(BUNDLE_PREFIX) and trust.TMP_MARK not in n)


def staleness(b, node_llvm, uncomparable=True):
    """Why a bundle's variants are out of date (another Tack, another LLVM): [] when current.
    Which node a bundle is for is another question: ``applies``.  ``uncomparable``: a GPU
    bundle whose compilers this host lacks (so its key cannot be compared) counts as stale;
    ``bundles check``, which runs on any node, passes False."""
    why = []
    meta = b.meta
    if meta.get("tack") != tack_version_id():
        why.append(f"made by Tack {shown_version(meta.get('tack'))}, this is "
                   f"{shown_version(tack_version_id())}")
    if meta.get("llvm") and meta.get("llvm") != node_llvm:
        why.append(f"built with {meta.get('llvm')}, this node has {node_llvm}")
    arch = meta.get("arch", "")
    if arch and not arch.startswith("cpu:") and not why:
        # A GPU bundle's key holds its compilers' versions too (PTX ISA, code object version,
        # Intel's offline compiler for native code): another key today means another compiler.
        try:
            now = build_target(arch)
        except BuildFailure as e:
            if uncomparable:
                why.append(f"cannot build {arch} here to compare: {e}")
        else:
            if now.key != meta.get("target_key"):
                why.append(f"{arch}'s compilers changed since it was built (target "
                           f"{meta.get('target_key', '?')[:12]}, now {now.key[:12]})")
            else:
                why.extend(tool_changes(arch, meta.get("target", ""), now.identity(), uncomparable))
    return why


CANNOT_COMPARE = "cannot compare"


def _made(value: str) -> bool:
    """Whether a tool field of a target's identity names a tool that made code (``ptxas 13.0.88``)
    rather than none (``none: ...``, ``off``, or "" in a bundle that predates the field)."""
    return bool(value) and not value.startswith("none") and value != "off"


def tool_changes(arch, built: str, now: dict, uncomparable=True) -> list:
    """Why a GPU bundle whose target key is still this host's is stale: a tool its target's
    identity records beside LLVM and the key does not (CUDA's ptxas, ``sass``) changed since it
    was built: another version, or one that is here now and was not then (a rebuild adds what
    it makes).  A tool this host lacks cannot be compared: stale where ``uncomparable`` (as a
    GPU bundle whose compilers this host lacks), else not."""
    fields = dict(item.partition("=")[::2] for item in built.split(";") if item)
    why = []
    for field, value in sorted(now.items()):
        then = fields.get(field, "")
        if then == value or not (_made(then) or _made(value)):
            continue
        if not _made(value):
            if uncomparable:
                why.append(f"{CANNOT_COMPARE} {arch}'s {field} here: it was made by {then}; this "
                           f"host has {value} (rebuild leaves it as is)")
            continue
        why.append(f"{arch}'s {field} toolchain changed since it was built "
                   f"({then or 'none'} then, {value} now)")
    return why


def applies(b, path, node_arch, chosen, why, host_key, devices=None):
    """(rank, why) of a bundle for this node, by the runtime's own choice (``chosen``, what
    ``cpu_runtime.site_bundles`` returned for the directory, and its ``why`` for the others):
    rank 0 for one packed on a node like this one (its target is this host's own), then 1, 2...
    in the order the runtime looks in them (this node's microarchitecture, then each ancestor,
    most specific first); None (and why) for a bundle it never uses.  ``devices``: {name:
    (device kind, rank, ``kind:arch``)} of the bundles a device runtime of this node chose
    (``device_choice``): a GPU bundle is used only where one did."""
    tk, arch = b.meta.get("target_key", ""), b.meta.get("arch", "")
    name = os.path.basename(path)
    if tk == host_key and name == bundle_mod.bundle_name(host_key):
        return 0, "packed on a node like this one"
    for rank, (cand, _, cand_name) in enumerate(chosen, 1):
        if cand_name == name:
            what = "this node's microarchitecture" if cand == node_arch else f"an ancestor of {node_arch}"
            return rank, f"{cand} is {what}"
    if name in (devices or {}):
        kind, rank, cand = devices[name]
        return rank, f"{cand} is what this node's {kind} device runs"
    if arch and not arch.startswith("cpu:"):
        return None, (f"{arch} is a GPU's: its runtime reads it, not this node's CPU, and no "
                      "device here runs it")
    if name in why:
        return None, _name_reason(path, b.meta) or why[name]
    machine, here = _named_machine(name), bundle_machine("cpu")
    if machine and machine != here:
        misnamed = _misnamed(path, b.meta)      # (it said "cpu:x86_64_v3 is for aarch64 CPUs")
        if misnamed:
            return None, f"it is not named for what it holds ({misnamed}): jobs never use it"
        return None, f"{arch or 'its arch'} is for {machine} CPUs; this node's CPU is {here}"
    return None, f"{arch or 'an unnamed arch'} is not named as a site bundle of this node's CPU"


def _named_machine(name):
    """The machine a CPU site bundle's file name names (``bundle-<machine>-cpu-...``), or ''."""
    machine, sep, _ = name[len(bundle_mod.BUNDLE_PREFIX):].partition("-cpu-")
    return machine if sep and name.startswith(bundle_mod.BUNDLE_PREFIX) else ""


def _name_reason(path, meta):
    """Why no node uses a CPU site bundle because of its file name, where the runtime's reason
    (its key is not this LLVM's key for the name's arch: a job compares keys alone, without
    archspec) would say "another LLVM or codegen" of a name given by hand: an arch archspec
    does not know (``bundle-...-cpu-zen9-...``: no node looks for it), or a name that is not
    what its header holds (a copy to another arch's name, ``_misnamed``) where the runtime
    passed it over by its name's key alone; None otherwise (the runtime's reason stands: where
    the key matches, it read the header and said what it found)."""
    from ..archs import ArchError
    from ..backends.cpu_runtime import arch_key
    got = bundle_mod.site_bundle_arch(os.path.basename(path), "cpu")
    if got is None:
        return None
    misnamed = _misnamed(path, meta)
    try:
        resolve(f"cpu:{got[0]}")
    except ArchError as e:
        why = str(e).partition(": ")[2] or str(e)
        return (f"its name's cpu:{got[0]} is an unknown microarchitecture name: {why}; no node "
                "looks for it" + (f"; {misnamed}" if misnamed else ""))
    if misnamed and not arch_key(got[0], llvm_version()).startswith(got[1]):
        return f"it is not named for what it holds ({misnamed}): jobs never use it"
    return None


def device_runtimes() -> list:
    """[(device kind, runtime)] of the device runtimes (every one but the CPU's) that have a
    device on this node: those whose ``site_bundles`` a launch's session asks (a launch on a
    kind without a device fails before its cache is looked in)."""
    from ..backends import _RUNTIMES, runtime
    out = []
    for kind in _RUNTIMES:
        if kind == "cpu":
            continue
        try:
            rt = runtime(kind)
        except (ImportError, ValueError):
            continue
        if rt.available():
            out.append((kind, rt))
    return out


def device_choice(paths, runtimes) -> dict:
    """{bundle name: (device kind, rank, ``kind:arch``)} of a directory's bundles that this node's
    device runtimes (``device_runtimes``) use, by each runtime's own ``site_bundles`` (the
    function a launch's ``SiteBundleStore`` asks), ranked in the order it looks in them."""
    names = [os.path.basename(p) for p in paths]
    out = {}
    for kind, rt in runtimes:
        for rank, (cand, _, name) in enumerate(rt.site_bundles(names, lambda n: None), 1):
            out.setdefault(name, (kind, rank, cand))
    return out


def _node():
    from ..backends import runtime
    rt = runtime("cpu")
    node_arch = f"cpu:{host_arch()}"
    candidates = [(arch, tk, site_bundle_name(arch, tk)) for arch, tk in site_candidates()]
    return rt.host_key(), node_arch, candidates


def choice(paths, bundles):
    """What this node's CPU runtime uses among a directory's bundles: (chosen, why), from
    ``cpu_runtime.site_bundles``, the function a launch's ``SiteBundleStore`` asks, given the
    headers of ``bundles`` ({path: Bundle} of those that could be read) made by this Tack (the
    runtime refuses the others)."""
    headers = {os.path.basename(p): b.meta for p, b in bundles.items()
               if b.meta.get("tack") == tack_version_id()}
    why = {}
    chosen = cpu_site_bundles([os.path.basename(p) for p in paths], headers.get, why=why)
    return chosen, why


def used_by_this_cpu(directory) -> list:
    """The names of ``directory``'s bundles this node's CPU would read, most specific first (as
    ``bundles status`` says them): none where every CPU bundle there is for another CPU."""
    import io
    node_llvm = llvm_version()
    host_key, node_arch, _ = _node()
    return [name for kind, name in _status_of(directory, node_llvm, host_key, node_arch,
                                              io.StringIO()) if kind == "cpu"]


def bundles_status(directory=None, out=sys.stdout, err=sys.stderr) -> int:
    """What this node uses of ``directory``'s bundles, or (None) of every site directory a job
    searches, each in turn, as a job searches them: its CPU's, and those of each device runtime
    that has a device here (``device_runtimes``: an OpenCL or a Level Zero device runs the
    ``spirv:generic`` bundle)."""
    directories = _directories(directory, "status", err)
    node_llvm = llvm_version()
    host_key, node_arch, candidates = _node()
    runtimes = device_runtimes()
    print(f"node: {node_arch}, {node_llvm}, Tack {shown_version(tack_version_id())}", file=out)
    print(f"looks for: {', '.join(c for c, _, _ in candidates)} (most specific first)", file=out)
    for kind, rt in runtimes:
        print(f"its {kind} device looks for: {', '.join(c for c, _ in rt.site_candidates())} "
              "(most specific first)", file=out)
    chosen = []
    for d in directories:
        if directory is None:
            print(f"{d}:" if os.path.isdir(d) else f"{d}: missing", file=out)
        chosen += [(kind, name, d) for kind, name in _status_of(d, node_llvm, host_key, node_arch,
                                                                out, runtimes)]
    # A name held by two directories (one site's bundles copied into another's) is said with its
    # directory: by its name alone the line named the same bundle twice, not which file a job reads.
    twice = {n for n in {name for _, name, _ in chosen}
             if len({d for _, name, d in chosen if name == n}) > 1}
    chosen = [(kind, os.path.join(d, name) if name in twice else name) for kind, name, d in chosen]
    cpu = [name for kind, name in chosen if kind == "cpu"]
    if cpu:
        print(f"this node looks first in: {', '.join(cpu)}", file=out)
    elif chosen:
        print("this node's CPU uses none of these bundles: its kernels compile on first use", file=out)
    for kind, _ in runtimes:
        used = [name for k, name in chosen if k == kind]
        if used:
            print(f"its {kind} device looks first in: {', '.join(used)}", file=out)
    if not chosen:
        print("this node uses none of these bundles: every kernel compiles on first use", file=out)
    return 0


def _status_of(directory, node_llvm, host_key, node_arch, out, runtimes=()) -> list:
    """``bundles status``'s lines for one directory; -> [(device kind, name)] of the bundles this
    node uses there (``cpu`` for its CPU's), in the order each kind looks in them."""
    paths = _bundle_paths(directory)
    if not paths:
        print(f"no bundles in {directory}", file=out)
    from ..cache import size
    for path in temporaries(directory):
        if size.is_own_file(path):
            print(f"{os.path.basename(path)}: a temporary bundle, never read by jobs: a build "
                  "writing it now, or one that stopped left it (the next bundles build removes it "
                  "once it is an hour old)", file=out)
        else:
            print(f"{os.path.basename(path)}: named as a temporary bundle but not one (it does not "
                  "start as a bundle): never read by jobs, and no build removes it", file=out)
    bundles, unusable = {}, {}
    for path in paths:
        try:
            bundles[path] = bundle_mod.read(path, allow_root=True)
        except bundle_mod.BundleError as e:
            unusable[path] = e
    chosen_by_runtime, why_not = choice(paths, bundles)
    by_devices = device_choice(paths, runtimes)
    chosen = []
    for path in paths:
        if path in unusable:
            print(f"{os.path.basename(path)}: UNUSABLE: {unusable[path]}", file=out)
            continue
        b = bundles[path]
        why = staleness(b, node_llvm)
        rank, reason = applies(b, path, node_arch, chosen_by_runtime, why_not, host_key, by_devices)
        variants = [k for (kind, k) in b.index if kind == entry.KIND_VARIANT]
        state = "current" if not why else "STALE"
        use = "not used by this node (stale: below)" if why else \
            f"used by this node ({reason})" if rank is not None else f"not used by this node ({reason})"
        print(f"{os.path.basename(path)}: {b.meta.get('arch') or 'arch ?'}, {len(b)} entries "
              f"({len(variants)} variants), {b.size} bytes: {state}; {use}", file=out)
        damaged = b.damaged_entries()
        if damaged:         # refused one by one at run time (they compile); the rest serves
            print(f"  DAMAGED: {damaged} of {len(b)} entries unusable; build it again "
                  "(python -m tack.site bundles build)", file=out)
        if rank is not None and not why:
            name = os.path.basename(path)
            kind = by_devices[name][0] if name in by_devices else "cpu"
            chosen.append((kind, rank, name))
        for reason in why:
            print(f"  stale: {reason}", file=out)
        if why:
            for kind, key in sorted(b.index):
                if kind == entry.KIND_VARIANT:
                    got = b.get(kind, key)
                    name = got[0].get("kernel", "?") if got else "(damaged)"
                    print(f"    {name} {key[:16]}", file=out)
    return [(kind, n) for kind, _, n in sorted(chosen, key=lambda c: c[1])]


# Run by ``bundles check`` in a new process: the contour from the bundles alone.
_CHECK_SCRIPT = """
import json, sys
n, device = int(sys.argv[1]), sys.argv[2]
try:
    import tack.cache
    from tack.demo import make_field
    from tack.kernels.contour import contour
    field = make_field("sphere", n)
    v, faces = contour(field, 0.5, device=device)
except Exception as e:
    print(json.dumps({"error": " ".join(f"{type(e).__name__}: {e}".split())}))
    sys.exit(3)
s = tack.cache.stats()
# the surface crosses the grid (some points above the level, some not): there are triangles
above = field > 0.5
crossed = bool(above.any() and not above.all())
print(json.dumps({"triangles": len(faces), "crossed": crossed, "hits": s["hits"],
                  "misses": s["misses"], "llvm": "llvmlite.binding" in sys.modules}))
"""


def _child_result(r):
    """The JSON a ``bundles check`` child printed last, or None."""
    import json
    lines = r.stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def bundles_check(directory=None, device="cpu", size=21, out=sys.stdout, err=sys.stderr) -> int:
    """Run the contour demo (``python -m tack.demo``'s sphere in a ``size``^3 field, the same field
    and level, so the same triangles) on ``device`` in a new Python with an
    empty cache of its own, reading only the bundles in ``directory`` (default: every directory
    of TACK_CACHE_BUNDLES, then those installed beside Tack).  0 when every kernel variant came from a bundle and LLVM was never
    loaded, and no bundle there is stale or unreadable (``stale_bundles``); 1, saying what was
    compiled or which bundle, otherwise.  What a package's install test and an admin after
    ``bundles build`` or ``rebuild`` run."""
    import subprocess
    import tempfile
    if int(size) < 2:
        raise SiteError(f"bundles check: --size {size}: the contour needs at least 2 points per axis")
    _check_size_fits(int(size))
    if not directory:
        # a directory of TACK_CACHE_BUNDLES that is not there yet is skipped, as jobs skip it
        # (and status says "missing"): it was "is not a directory", as if one were given
        found = []
        for d in _directories(None, "check", err):
            if os.path.isdir(d):
                found.append(d)
            else:
                print(f"bundles check: {d} (a site directory jobs search) is missing: skipped, "
                      "as jobs skip it", file=out)
        if not found:
            raise SiteError("bundles check: no site directory jobs search exists yet")
        directory = os.pathsep.join(found)
    bundles = directory
    if not any(bundles.split(os.pathsep)):
        raise SiteError(f"bundles check: {bundles!r} names no directory")
    for d in bundles.split(os.pathsep):
        if d and not os.path.isdir(d):
            raise SiteError(f"bundles check: {d} is not a directory")
    # absolute: the contour runs in a directory of its own
    bundles = os.pathsep.join(os.path.abspath(d) for d in bundles.split(os.pathsep) if d)
    problems = stale_bundles(bundles.split(os.pathsep))
    with tempfile.TemporaryDirectory(prefix="tack-bundles-check-") as own:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
        env.update(TACK_CACHE_DIR=os.path.join(own, "cache"), TACK_CACHE="read",
                   TACK_CACHE_BUNDLES=bundles, TACK_CACHE_INSTALLED_BUNDLES="0")
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # this Tack's parent
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(here)]
                                            + [p for p in [env.get("PYTHONPATH")] if p])
        r = subprocess.run([sys.executable, "-c", _CHECK_SCRIPT, str(int(size)), device], env=env,
                           cwd=own, capture_output=True, text=True, timeout=900)
    got = _child_result(r)
    if r.returncode != 0 or got is None or "error" in got:
        # One line: the contour's own error (a device that is not there, or not one), not the
        # child's traceback; a child that died without one gives its last line of stderr.
        why = (got or {}).get("error") or (r.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"error: bundles check: the contour failed on {device}: {why}", file=err)
        for problem in problems:
            print(f"error: {problem}", file=out)
        return 1
    print(f"contour of the demo's {size}^3 sphere on {device}: {got['triangles']} triangles; variants from bundles "
          f"{got['hits']['variant']}, compiled {got['misses']['variant']}", file=out)
    if got["misses"]["variant"] or not got["hits"]["variant"]:
        problems.append(f"{got['misses']['variant']} kernel variant(s) were compiled, not found in "
                        f"{bundles}: build them (bundles build) or rebuild stale ones (bundles "
                        "rebuild; bundles status says which)")
    if got["llvm"]:
        problems.append("LLVM was loaded: something was compiled")
    if not got["triangles"] and got.get("crossed", True):
        # (a small grid the sphere passes between, --size 2 or 4, has none to find)
        problems.append("the contour found no triangles")
    for problem in problems:
        print(f"error: {problem}", file=out)
    if not problems:
        print(f"contour served from the bundles in {bundles}: nothing compiled", file=out)
    return 1 if problems else 0


def _check_size_fits(n):
    """SiteError, before anything runs, for a ``bundles check --size`` the contour demo refuses
    (``demo.size_problem``: more points than the contour takes, or more memory than is
    available).  (The check allocated it in its child first: ``--size 1000`` asked for 22 GiB,
    then failed.)  Any size from 2 checks the same kernels: they are shape-generic."""
    from ..demo import size_problem
    problem = size_problem(n, "give a smaller --size (the default, 21, checks the same kernels: "
                              "they are shape-generic)")
    if problem is not None:
        raise SiteError(f"bundles check: --size {n}: {problem}")


def stale_bundles(directories) -> list:
    """One line for each bundle of ``directories`` that this Tack cannot use as it is: one that
    cannot be read (damaged, untrusted, another format), one made by another Tack or with
    another LLVM (``staleness``), or one with damaged entries or index blocks (``bundles status``'s
    DAMAGED).  ``bundles check`` fails on them even when the contour is
    served by another bundle: a stale bundle serves nothing."""
    node_llvm = llvm_version()
    lines = []
    for d in directories:
        paths = _bundle_paths(d)
        for path in paths:
            try:
                b = bundle_mod.read(path, allow_root=True)
            except bundle_mod.BundleError as e:
                lines.append(f"{path}: cannot be used: {e}")
                continue
            misnamed = _misnamed(path, b.meta)
            if misnamed:
                b.close()
                lines.append(f"{path} is not named for what it holds ({misnamed}): jobs never use "
                             "it; build it again (bundles build), or rename it to that name")
                continue
            why = staleness(b, node_llvm, uncomparable=False)
            if why:
                # rebuild reads the lowered kernels of this Tack's bundles only
                fix = "rebuild it (bundles rebuild)" if b.meta.get("tack") == tack_version_id() \
                    else "build it again (bundles build; a package's prefix: bundles install)"
                lines.append(f"{path} is stale ({'; '.join(why)}): {fix}")
                continue
            # Its header whole, an entry or an index block may still be damaged: jobs refuse those
            # one by one and compile their kernels, and ``bundles status`` says DAMAGED; so must this.
            with b:
                damaged = b.damaged_entries()
            if damaged:
                lines.append(f"{path} is damaged: {damaged} of {len(b)} entries unusable (their "
                             "kernels compile in every job): build it again (bundles build; a "
                             "package's prefix: bundles install)")
    return lines


def _misnamed(path, meta):
    """None when the file name of the bundle at ``path`` is one a job looks for what its header
    says it holds (``bundle_name`` of a packed bundle, ``site_bundle_name`` of a built one);
    else what that name is.  A bundle copied or renamed by hand (``cp`` of the x86_64_v3
    bundle to the zen3 bundle's name) serves nothing: a job checks the header against the name
    it chose it by, and passes it over, saying so only in its log."""
    arch, tk = meta.get("arch"), meta.get("target_key")
    if not arch or not tk:
        return None                             # too little to tell: staleness says the rest
    names = set()
    for machine in {meta.get("machine") or None, None}:
        names.add(bundle_mod.bundle_name(tk, machine))
        try:
            names.add(site_bundle_name(arch, tk, machine))
        except ValueError:                      # an arch with no file name of its own
            return None
    if os.path.basename(path) in names:
        return None
    return f"its header says {arch}, target {tk[:12]}: " + " or ".join(sorted(names))


def probe_write(directory) -> None:
    """Make and remove a file in ``directory``: OSError where this process cannot write there
    (the permission bits, a read-only mount, a file in the way), found before any compiling."""
    probe = os.path.join(directory, f".tack-write-test.{os.getpid()}")
    with open(probe, "wb"):
        pass
    os.unlink(probe)


def rebuild_bundle(path, out=sys.stdout):
    """Recompile one bundle's variants for its own architecture with this LLVM. -> (new path,
    variants recompiled); BuildFailure if none could be, or if its directory cannot be written
    (said before anything is compiled)."""
    from ..compiler import compile_variant
    from ..ir import LoweredKernel
    try:
        probe_write(os.path.dirname(path) or ".")
    except OSError as e:
        raise BuildFailure(f"{os.path.dirname(path)} is not writable ({e.strerror or e}): nothing "
                           "was recompiled") from None
    b = bundle_mod.read(path, allow_root=True)
    arch = b.meta.get("arch")
    if not arch:
        raise BuildFailure(f"{path} does not name its architecture")
    if b.meta.get("tack") != tack_version_id():
        raise BuildFailure(f"{path} was made by Tack {shown_version(b.meta.get('tack'))}; its "
                           f"lowered kernels cannot be read by {shown_version(tack_version_id())}: "
                           "build it again")
    target = build_target(arch)
    lowered, arts = {}, []
    for (kind, key) in sorted(b.index):
        got = b.get(kind, key) if kind == entry.KIND_LOWERED else None
        if got is not None:
            lowered[key] = LoweredKernel.from_bytes(got[1])
    for (kind, key) in sorted(b.index):
        if kind != entry.KIND_VARIANT:
            continue
        got = b.get(kind, key)
        if got is None:
            print(f"  {arch}: skipping a damaged variant {key[:16]}", file=out)
            continue
        meta = got[0]
        lk = meta.get("lowered")
        if lk not in lowered:
            print(f"  {arch}: skipping {meta.get('kernel')}: its lowered kernel is not in the bundle",
                  file=out)
            continue
        argtypes = tuple(T.parse_spec(row[0]) for row in meta["argspec"])
        arts.append(compile_variant(lowered[lk], lk, argtypes, int(meta["grid"]), target))
        print(f"  {arch}: recompiled {meta.get('kernel')}", file=out)
    if not arts:
        raise BuildFailure(f"{path}: none of its variants could be recompiled")
    # Into the bundle of the new name, keeping what a current one there holds (a ``bundles build``
    # after the same LLVM update may have made it): never fewer kernels than before.  Under its
    # own name, nothing of the stale bundle is kept.
    renamed = os.path.abspath(aot.bundle_path(target, os.path.dirname(path))) != os.path.abspath(path)
    new_path = aot.save_bundle(arts, os.path.dirname(path), merge=renamed)
    if os.path.abspath(new_path) != os.path.abspath(path):
        os.unlink(path)                         # open readers keep the old file until they close it
    return new_path, len(arts)


def bundles_rebuild(directory=None, out=sys.stdout, err=sys.stderr) -> int:
    """Rebuild the stale bundles of ``directory``, or (None) of every site directory a job
    searches; -> 1 if any could not be.  A directory with no bundles is said to have none (as
    ``bundles status`` says it, exit status 0: nothing there is stale)."""
    llvm = llvm_version()
    paths = []
    for d in _directories(directory, "rebuild", err):
        found = _bundle_paths(d)
        if not found:
            where = d if os.path.isdir(d) else f"{d} (missing)"
            print(f"no bundles in {where}: nothing to rebuild", file=out)
        paths += found
    failures = 0
    for path in paths:
        try:
            b = bundle_mod.read(path, allow_root=True)
        except bundle_mod.BundleError as e:
            print(f"{os.path.basename(path)}: cannot rebuild: {e}", file=err)
            failures += 1
            continue
        damaged = b.damaged_entries()
        if damaged:         # its own lowered kernels are what a rebuild compiles: not all here
            print(f"{os.path.basename(path)}: cannot rebuild: {damaged} of {len(b)} entries are "
                  "damaged; build it again (python -m tack.site bundles build)", file=err)
            failures += 1
            continue
        why = staleness(b, llvm)
        if not why:
            print(f"{os.path.basename(path)}: current, left as is", file=out)
            continue
        if all(w.startswith(CANNOT_COMPARE) for w in why):
            # a tool it was built with is not here (ptxas): rebuilding would drop what it made
            print(f"{os.path.basename(path)}: left as is: {'; '.join(why)}", file=out)
            continue
        try:
            new, n = rebuild_bundle(path, out)
        except Exception as e:                  # noqa: BLE001 - report and go on with the others
            # a build's own refusal says itself; anything else is named by its class
            why = str(e) if isinstance(e, (BuildFailure, SiteError)) else f"{type(e).__name__}: {e}"
            print(f"{os.path.basename(path)}: rebuild failed: {why}", file=err)
            failures += 1
            continue
        print(f"{os.path.basename(path)}: rebuilt {n} variants -> {os.path.basename(new)}", file=out)
    return 1 if failures else 0


__all__ = ["build_bundles", "bundles_status", "bundles_rebuild"]
