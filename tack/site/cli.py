"""``python -m tack.site``: check a site config, render module files and activation scripts, build bundles.

Each subcommand returns an exit status: 0 success, 1 failure (one line per
problem on stderr), 2 bad usage.  Nothing is written when the config is invalid.
"""

from __future__ import annotations

import argparse
import os
import sys

from .errors import SiteConfigError, SiteError, missing_extra


def load(path, import_modules=False):
    """The validated config (``build.load_config``); SiteConfigError otherwise."""
    from .build import load_config
    return load_config(path, import_modules)


def cmd_check(args) -> int:
    cfg = load(args.config, import_modules=True)
    from .build import build_problems
    # Generating each kernel's code for each arch takes a moment: say so, on stderr (stdout is
    # the report).
    problems = build_problems(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    if problems:
        raise SiteConfigError(problems)
    print(f"{args.config}: valid")
    print("exports (expanded when the module is loaded):")
    for var, value in cfg.exports().items():
        print(f"  {var}={value}")
    print(f"modules: {cfg.module_name}/{cfg.module_version} as {', '.join(cfg.formats)}"
          f" under {cfg.get('modules.root', '(--root)')}")
    archs = cfg.archs()
    if archs:
        print("bundles to build:")
        for arch in archs:
            print(f"  {arch}")
    else:
        # valid for modules and settings, and for bundles install, whose --target and --arch
        # name the architectures; bundles build refuses it
        print(f"bundles to build: none ({cfg.where(('build', 'archs'))} names no architecture: "
              "bundles build would refuse this config; bundles install builds its kernels for "
              "its --target and --arch)")
    kernels = cfg.kernels()
    for k in kernels:
        what = k.get("kernel") or ", ".join("x".join(map(str, s)) for s in k.get("shapes", []))
        print(f"  kernels: {k['module']} ({what})")
    return 0


def cmd_modules(args) -> int:
    from .atomic import write_files
    from .modules import render_modules
    cfg = load(args.config)
    formats = list(cfg.formats) if args.format in (None, "config") else \
        (["lmod", "tcl"] if args.format == "both" else [args.format])
    root = args.root if args.root is not None else cfg.get("modules.root")
    if not root:
        raise SiteError("no output root: give --root or set modules.root in the config")
    source = "--root" if args.root else \
        f"modules.root at {cfg.path}:{cfg.lines.get(('modules', 'root'), 1)}"
    if args.root is None:
        # As a shell would have expanded --root: '~/modulefiles' or '$APPS/modulefiles' made a
        # directory named '~' or '$APPS' under the working directory
        from ..cache import expand
        try:
            root = expand(root, cfg.where(("modules", "root")))
        except ValueError as e:
            raise SiteError(f"{e}; nothing was written") from None
    plan = render_modules(cfg, formats, root)
    print(f"{'would write' if args.dry_run else 'writing'} {len(plan)} module file(s) under "
          f"{os.path.abspath(root)} (from {source}):", flush=True)
    for path in plan:
        print(f"  {path}", flush=True)
    if args.dry_run:
        return 0
    from .modules import OURS, config_label, rendered_from
    before = {path: rendered_from(path) for path in plan}
    source = config_label(cfg.path)
    for path, changed in write_files(plan, ours=OURS, force=args.force):
        print(f"{'wrote' if changed else 'unchanged'} {path}")
        if changed and before[path] not in (None, source):
            # (another config's module of the same name and version, written over unsaid)
            print(f"  note: it replaced the module file rendered from the site config "
                  f"{before[path]}: two configs render {cfg.module_name}/{cfg.module_version} "
                  "here; give each its own modules.name, modules.version or modules.root")
    return 0


def cmd_env(args) -> int:
    from .shell import render_env
    cfg = load(args.config)
    sys.stdout.write(render_env(cfg, args.shell))
    return 0


def cmd_conda_activate(args) -> int:
    from .conda import write_activate
    cfg = load(args.config)
    for path in write_activate(cfg, args.prefix, env_vars=args.env_vars, force=args.force):
        print(f"wrote {path}")
    return 0


def cmd_archs(args) -> int:
    """Every architecture name each kind builds (the registry's), one ``kind:name`` a line."""
    from ..backends.arch_names import KINDS
    kinds = [args.kind] if args.kind else list(KINDS)
    for kind in kinds:
        k = KINDS[kind]
        names = k.qualified()
        if kind == "cpu":                   # archspec's names: some this LLVM has no CPU for
            names = [n + _cpu_unbuildable(n.split(":", 1)[1]) for n in names]
        names += [f"{kind}:{a} (builds {kind}:{n})" for a, n in k.aliases.items()]
        if not args.kind:
            print(f"{kind}: {k.what} ({len(k.names())})")
        for name in names:
            print(f"{'  ' if not args.kind else ''}{name}")
    return 0


def _cpu_unbuildable(name) -> str:
    """'' where this LLVM builds the archspec microarchitecture ``name``, else a note saying it
    does not (a build of it fails with the reason): ``bundles build`` checks the same."""
    from ..archs import ArchError
    from ..backends.cpu import llvm_target
    try:
        llvm_target(name)
    except ArchError:
        from llvmlite import binding
        return f" (not built by this LLVM {binding.llvm_version_info[0]})"
    return ""


def cmd_bundles_build(args) -> int:
    from .build import build_bundles
    cfg = load(args.config, import_modules=True)
    return build_bundles(cfg, archs=args.arch, output=args.output, verbose=args.verbose,
                         force=args.force)


def cmd_bundles_status(args) -> int:
    from .build import bundles_status
    return bundles_status(args.dir)


def _points(text):
    """argparse type of ``bundles check --size``: at least 2 points an axis, as the demo's (a
    smaller one is bad usage, exit status 2, there too)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < 2:
        raise argparse.ArgumentTypeError(f"{n}: the contour needs at least 2 points per axis")
    return n


def cmd_bundles_check(args) -> int:
    from .build import bundles_check
    return bundles_check(args.dir, device=args.device, size=args.size)


def cmd_bundles_rebuild(args) -> int:
    from .build import bundles_rebuild
    return bundles_rebuild(args.dir)


def cmd_image(args) -> int:
    from .install import import_image
    return import_image(check=args.check)


def cmd_bundles_install(args) -> int:
    from . import install
    if args.installed_in is None:
        return install.bundles_install(args.prefix, args.target or (), args.arch or (),
                                       args.site_config, config_name=args.config_name)
    return install.install_here(args.prefix, args.installed_in, args.target or (), args.arch or (),
                                args.site_config, config_name=args.config_name)


def build_parser() -> argparse.ArgumentParser:
    from ..cache.cli import arch_argument as _arch      # one rule for both tools' --arch
    from ..cache.cli import add_version, target_argument
    from ..cache.cli import path_argument as _path     # one rule for both tools' paths
    from ..cache.cli import SubcommandParser            # a subcommand's usage for its errors
    p = argparse.ArgumentParser(prog="python -m tack.site",
                                description="Deploy Tack at a site from one YAML config.")
    add_version(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True,
                           parser_class=SubcommandParser)

    c = sub.add_parser("check", help="validate a config; print what would be exported and built")
    c.add_argument("config", type=_path)
    c.set_defaults(func=cmd_check)

    m = sub.add_parser("modules", help="render Lmod (Lua) and/or Environment Modules (Tcl) files")
    m.add_argument("config", type=_path)
    m.add_argument("--format", choices=("lmod", "tcl", "both"), default=None,
                   help="default: the config's modules.formats")
    m.add_argument("--root", type=_path, help="output root (default: the config's modules.root)")
    m.add_argument("--dry-run", action="store_true",
                   help="print the files that would be written, and write nothing")
    m.add_argument("--force", action="store_true",
                   help="replace a file at a module file's path that this command did not write")
    m.set_defaults(func=cmd_modules)

    e = sub.add_parser("env", help="print the exports for a shell, for sites without modules")
    e.add_argument("config", type=_path)
    e.add_argument("--shell", choices=("bash", "csh", "fish", "easybuild"), default="bash",
                   help="easybuild: modextravars (and modextrapaths) for an easyconfig")
    e.set_defaults(func=cmd_env)

    a = sub.add_parser("conda-activate", help="write conda activate.d/deactivate.d scripts")
    a.add_argument("config", type=_path)
    a.add_argument("--prefix", required=True, type=_path, help="the conda environment's prefix")
    a.add_argument("--env-vars", action="store_true",
                   help="write conda's env_vars.d file (every shell conda supports; deactivation "
                        "unsets) instead of sh, csh and fish scripts (which restore the user's values)")
    a.add_argument("--force", action="store_true",
                   help="replace a script at a script's path that this command did not write")
    a.set_defaults(func=cmd_conda_activate)

    from ..backends.arch_names import KINDS
    n = sub.add_parser("archs", help="list the architecture names each kind builds")
    n.add_argument("kind", nargs="?", choices=list(KINDS), help="only this kind (default: every kind)")
    n.set_defaults(func=cmd_archs)

    b = sub.add_parser("bundles", help="build, check and rebuild per-architecture bundles")
    bsub = b.add_subparsers(dest="bundles_command", metavar="ACTION", required=True)
    bb = bsub.add_parser("build", help="warm the configured kernels for each architecture and pack")
    bb.add_argument("config", type=_path)
    bb.add_argument("--arch", action="append", type=_arch, help="only this architecture (repeatable)")
    bb.add_argument("--output", type=_path, help="bundle directory (default: the config's cache.bundles)")
    bb.add_argument("--verbose", "-v", action="store_true",
                    help="show each variant's value types and grid as it compiles")
    bb.add_argument("--force", action="store_true",
                    help="replace a file at a bundle's name that is not a Tack bundle")
    bb.set_defaults(func=cmd_bundles_build)
    bs = bsub.add_parser("status", help="does each bundle still match this node?")
    bs.add_argument("dir", nargs="?", default=None, type=_path,
                    help="bundle directory (default: every directory a job searches: "
                         "TACK_CACHE_BUNDLES's, then share/tack/bundles beside Tack)")
    bs.set_defaults(func=cmd_bundles_status)
    br = bsub.add_parser("rebuild", help="recompile stale variants from the bundles' lowered kernels")
    br.add_argument("dir", nargs="?", default=None, type=_path)
    br.set_defaults(func=cmd_bundles_rebuild)
    bc = bsub.add_parser("check", help="run the contour from the bundles alone: is anything compiled?")
    bc.add_argument("dir", nargs="?", default=None, type=_path,
                    help="bundle directory, or several joined with ':' (default: "
                         "TACK_CACHE_BUNDLES, then share/tack/bundles beside Tack)")
    bc.add_argument("--device", default="cpu", help="where the contour runs (default: cpu)")
    bc.add_argument("--size", type=_points, default=21, help="the field's extent (default: 21)")
    bc.set_defaults(func=cmd_bundles_check)
    bi = bsub.add_parser("install", help="build and check the bundles of an install prefix, with "
                         "the Tack installed there (what packages run)")
    bi.add_argument("prefix", type=_path, help="the prefix Tack is installed in; the bundles go into "
                    "PREFIX/share/tack/bundles")
    bi.add_argument("--target", action="append", metavar="CPU", type=target_argument,
                    help="a CPU microarchitecture (archspec's name, or 'host': this node's): "
                    "bundles for it and for its generic level (zen3: cpu:zen3 and "
                    "cpu:x86_64_v3); repeatable (default, without --arch: host)")
    bi.add_argument("--arch", action="append", metavar="KIND:NAME", type=_arch,
                    help="one more architecture (cpu:x86_64_v2, cuda:sm_90 ...); repeatable")
    bi.add_argument("--site-config", metavar="FILE", type=_path,
                    help="a site config: its build.kernels are what the bundles hold; it is "
                    "kept as PREFIX/share/tack/site.yaml, its exports as site-env.json")
    bi.add_argument("--config-name", metavar="NAME", default="bundles-build",
                    help="the config the bundles were built from is kept as "
                    "PREFIX/share/tack/NAME.yaml (default: bundles-build): a package adding "
                    "bundles to a prefix another one filled names its own")
    bi.add_argument("--in", dest="installed_in", type=_path, help=argparse.SUPPRESS)
    bi.set_defaults(func=cmd_bundles_install)
    im = sub.add_parser("image", help="write the import image of this Tack (all its bytecode in "
                        "one file in its __pycache__, read by every later import; bundles "
                        "install writes it too)")
    im.add_argument("--check", action="store_true",
                    help="write nothing: exit 0 if the image is there and current, 1 if not")
    im.set_defaults(func=cmd_image)
    return p


def main(argv=None) -> int:
    from ..cache.cli import tolerant_output
    args = build_parser().parse_args(argv)
    tolerant_output()
    try:
        return args.func(args)
    except ImportError as e:
        message = missing_extra(e)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 1
    except SiteConfigError as e:
        for problem in e.problems:
            print(f"error: {problem}", file=sys.stderr)
        print(f"{len(e.problems)} problem(s); nothing was written", file=sys.stderr)
        return 1
    except SiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:             # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
