"""``bundles install PREFIX``: build and check the bundles of an install prefix, for packages.

What a package (EasyBuild, Spack, conda) runs once Tack is installed into PREFIX: the bundles
for the CPUs it names (``--target``: a microarchitecture and its generic level; ``--arch``: any
architecture) are built into ``PREFIX/share/tack/bundles`` with the kernels of a site config (or
Tack's contour), then ``bundles check`` runs the contour from them with nothing compiled.

It is always the Tack installed in PREFIX that builds and checks, whatever ``python -m
tack.site`` imported first: the command finds PREFIX's Tack where Python's install schemes put
packages (purelib and platlib, under PREFIX) and does the work in a new Python that imports it,
with no user cache (``TACK_CACHE=off``) and no ``TACK_*`` setting of the caller's but those
naming a vendor tool (``TOOL_SETTINGS``: a package points ``TACK_LD_LLD`` at the ``ld.lld`` it
depends on, so what the install holds does not depend on what the build host has).  An
architecture that fails to build, a missing tool among the causes, fails the command.  A build run
from an unpacked source tree (where ``python -m`` imports the sources first, whose Tack tags what
it makes ``0.1.0+src.<hash>``) therefore makes bundles the installed Tack uses, and a package
needs no ``cd`` to get them.

Written beside the bundles, in ``PREFIX/share/tack``: ``bundles-build.yaml`` (the config they
were built from, for ``bundles rebuild`` and the admin; with ``--config-name NAME``, ``NAME.yaml``:
a second package adding bundles to the same prefix, conda's ``tack-cuda`` beside ``tack``, keeps
its own and leaves the first one's file as it is) and, with ``--site-config``, the site config
itself (``site.yaml``) and its exports (``site-env.json``: what a package's environment sets
besides ``TACK_CACHE_BUNDLES``).  They are written together, once every architecture is built,
and then the installed Tack's import image (``import_image``): a failed build leaves those of the
previous install, and its image, as they were.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time

from .errors import SiteError


#: The caller's settings kept for the build: where the vendor tools are (tack.backends.gpu).
TOOL_SETTINGS = ("TACK_LD_LLD", "TACK_OCLOC")


def share_dir(prefix) -> str:
    return os.path.join(prefix, "share", "tack")


def site_dirs(prefix) -> list:
    """Where an install into ``prefix`` puts Python packages, by each of this Python's install
    schemes (``posix_prefix``, ``venv``, Debian's ``posix_local`` ...): purelib and platlib,
    the default scheme's first; user schemes aside (they ignore the prefix)."""
    schemes = [sysconfig.get_default_scheme()] + [s for s in sysconfig.get_scheme_names()
                                                  if not s.endswith("_user")]
    dirs = []
    for scheme in schemes:
        try:
            paths = sysconfig.get_paths(scheme, vars={"base": prefix, "platbase": prefix,
                                                      "installed_base": prefix,
                                                      "installed_platbase": prefix})
        except KeyError:
            continue
        for key in ("purelib", "platlib"):
            d = os.path.normpath(paths[key])
            if d not in dirs and d.startswith(os.path.normpath(prefix) + os.sep):
                dirs.append(d)
    return dirs


def installed_tack(prefix) -> str:
    """The directory under ``prefix`` that holds its installed ``tack`` package; SiteError naming
    where it looked otherwise."""
    dirs = site_dirs(prefix)
    for d in dirs:
        if os.path.isfile(os.path.join(d, "tack", "__init__.py")):
            return d
    raise SiteError(f"bundles install: no Tack is installed in {prefix} (looked for "
                    f"tack/__init__.py in {', '.join(dirs)}): install it there first")


def target_archs(targets, archs) -> list:
    """``cpu:T`` and ``cpu:<generic level of T>`` for each of ``targets`` (``host``: this node's
    microarchitecture), then ``archs``, each once, by their ``kind:name``; ArchError for a name
    Tack does not build."""
    from ..archs import generic_level, host_cpu, resolve
    names = []
    for t in targets:
        if t.startswith("cpu:"):
            t = t[len("cpu:"):]
        cpu = host_cpu() if t == "host" else resolve(f"cpu:{t}")[1]
        names += [f"cpu:{cpu}", f"cpu:{generic_level(cpu)}"]
    for a in archs:
        names.append(":".join(resolve(a)))
    return list(dict.fromkeys(names))


def build_config(archs, kernels) -> dict:
    """The site config ``bundles build`` reads: ``archs`` by kind, ``kernels``."""
    by_kind = {}
    for a in archs:
        kind, name = a.split(":", 1)
        by_kind.setdefault(kind, []).append(name)
    return {"version": 1, "build": {"archs": by_kind, "kernels": kernels}}


#: The site config as an install with ``--site-config`` keeps it, in ``PREFIX/share/tack``.
SITE_CONFIG_FILE = "site.yaml"

#: The name (without ``.yaml``) of the build config written beside the bundles, by default.
CONFIG_NAME = "bundles-build"


def config_file(name) -> str:
    """``NAME.yaml``, the build config's file name in ``PREFIX/share/tack``; SiteError for a name
    that is not a plain file name."""
    if not name or name in (".", "..") or "/" in name or os.sep in name or name.startswith("."):
        raise SiteError(f"bundles install: --config-name {name!r} is not a plain file name")
    if f"{name}.yaml" == SITE_CONFIG_FILE:
        # it replaced the site config an install with --site-config keeps there (the admin's
        # cache: section gone), in the same install or a later one
        raise SiteError(f"bundles install: --config-name {name!r} names {SITE_CONFIG_FILE}, the "
                        "site config an install with --site-config keeps; name another")
    return f"{name}.yaml"


def bundles_install(prefix, targets=(), archs=(), site_config=None, out=sys.stdout,
                    err=sys.stderr, config_name=CONFIG_NAME) -> int:
    """Build and check ``prefix``'s bundles with the Tack installed there, in a new Python (see
    the module's doc); its exit status."""
    if not os.path.isdir(prefix):
        raise SiteError(f"bundles install: {prefix} is not a directory")
    prefix = os.path.abspath(prefix)
    config_file(config_name)
    site = installed_tack(prefix)
    if site_config is not None:
        if not os.path.isfile(site_config):
            raise SiteError(f"bundles install: --site-config {site_config} is not a file")
        site_config = os.path.abspath(site_config)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TACK_") or k in TOOL_SETTINGS}
    env.update(TACK_CACHE="off", PYTHONNOUSERSITE="1",
               PYTHONPATH=os.pathsep.join([site] + [p for p in [env.get("PYTHONPATH")] if p]))
    args = [sys.executable, "-m", "tack.site", "bundles", "install", prefix, "--in", site]
    for t in targets:
        args += ["--target", t]
    for a in archs:
        args += ["--arch", a]
    if site_config:
        args += ["--site-config", site_config]
    if config_name != CONFIG_NAME:
        args += ["--config-name", config_name]
    # cwd: the installed packages' own directory, which Python puts first on the path.
    try:
        streams = {"stdout": out.fileno(), "stderr": err.fileno()}
    except (AttributeError, OSError, ValueError):       # io.StringIO and the like
        streams = {"capture_output": True, "text": True}
    out.flush()
    err.flush()
    r = subprocess.run(args, env=env, cwd=site, **streams)
    if "capture_output" in streams:
        out.write(r.stdout)
        err.write(r.stderr)
    return r.returncode


def install_here(prefix, site, targets=(), archs=(), site_config=None, out=sys.stdout,
                 err=sys.stderr, config_name=CONFIG_NAME) -> int:
    """The work of ``bundles install``, in the Python that imports the Tack of ``site``."""
    import tack
    from .build import build_bundles, bundles_check, used_by_this_cpu
    from .build import load_config as load
    from ..cache.keys import shown_version, tack_version_id
    here = os.path.dirname(os.path.realpath(tack.__file__))
    if here != os.path.realpath(os.path.join(site, "tack")):
        raise SiteError(f"bundles install: this Python imports Tack from {here}, not the one "
                        f"installed in {prefix} ({site})")
    config_path = os.path.join(share_dir(prefix), config_file(config_name))
    from .config import DEFAULT_KERNELS
    kernels = list(DEFAULT_KERNELS)             # where no site config names any
    share = share_dir(prefix)
    files = {}              # written together once every architecture is built
    cfg = None
    if site_config:
        cfg = load(site_config, import_modules=True)
        # a kernel module that fails to import (load imports them only beside other problems):
        # said with its line in the site config, before anything is built or written
        from .build import module_problems
        from .errors import SiteConfigError
        problems = module_problems(cfg)
        if problems:
            raise SiteConfigError(problems)
        kernels = cfg.kernels()
        kept = os.path.join(share, SITE_CONFIG_FILE)
        if os.path.realpath(site_config) != os.path.realpath(kept):
            with open(site_config, "rb") as f:
                files[kept] = f.read()
        files[os.path.join(share, "site-env.json")] = \
            (json.dumps(cfg.exports(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    from ..archs import ArchError
    try:
        wanted = target_archs(targets or (["host"] if not archs else []), archs)
    except ArchError as e:
        # before anything is written: the prefix's kept config and exports stay as they were
        raise SiteError(f"bundles install: {e}; nothing was written") from None
    import yaml
    config_text = ("# The config the latest bundles were built from (python -m tack.site bundles "
                   "install); bundles/ keeps those of earlier installs\n# too, of other "
                   "architectures: python -m tack.site bundles status lists every one\n"
                   + yaml.safe_dump(build_config(wanted, kernels), sort_keys=False))
    files[config_path] = config_text.encode("utf-8")
    from ..cache.trust_write import make_shared_dirs
    from .atomic import check_files, write_files
    from .build import probe_write
    check_files(files)                      # what write_files would refuse, said before the build
    make_shared_dirs(share)                 # 0755 whatever the umask: jobs trust what is below
    try:
        probe_write(share)                  # said now, not once everything is built
    except OSError as e:
        raise SiteError(f"bundles install: {share} is not writable ({e.strerror or e}); nothing "
                        "was written") from None
    if cfg is not None and cfg.archs():
        print(f"bundles install: {site_config}'s build.archs are not what this install "
              "builds: --target and --arch are", file=out)
    bundles = os.path.join(share, "bundles")
    print(f"bundles install: {', '.join(wanted)} into {bundles}, by Tack "
          f"{shown_version(tack_version_id())} from {site}", file=out, flush=True)
    t0 = time.perf_counter()
    # Built from the config as it will be kept, which is written, with the site config and its
    # exports, only once every architecture is built: a failed build (a rebuild after a driver
    # update) leaves the running site's files as they were.  Its errors name the lines of the
    # file the kernels come from: the site config's (the admin's own file), else the build
    # config's, as it will be written.
    build_cfg = load(config_path, import_modules=True, text=config_text)
    if cfg is not None and cfg.get("build.kernels"):
        from .config import SiteConfig
        build_cfg = SiteConfig(site_config, build_cfg.data,
                               {k: n for k, n in cfg.lines.items() if k[:2] == ("build", "kernels")})
    rc = build_bundles(build_cfg, output=bundles, out=out, err=err)
    built = time.perf_counter() - t0
    print(f"bundles install: built in {built:.1f} s", file=out, flush=True)
    if rc:
        kept = ", ".join(os.path.basename(p) for p in files)
        print(f"error: bundles install: an architecture failed to build (above); {kept} in "
              f"{share} left as they were", file=err)
        return rc
    write_files(files)                      # together, each whole: never a half-written one
    # The import image too only now: a failed build leaves the prefix's files as they were, its
    # image with them (nothing needs it before: the build runs with the modules it imported, and
    # the check, in a new Python, then imports Tack from it as every job will).
    import_image(out=out, err=err, said="bundles install: ")
    t0 = time.perf_counter()
    contour = any(isinstance(k, dict) and k.get("module") == "tack.kernels.contour" for k in kernels)
    cpu = any(a.startswith("cpu:") for a in wanted) or _holds_cpu_bundles(bundles)
    # (a stack built for other CPUs, --target neoverse_v2 on an x86_64 build host: the contour
    # check would compile it here and fail the install; its bundles are checked as jobs read them)
    fits = cpu and bool(used_by_this_cpu(bundles))
    if contour and fits:
        rc = bundles_check(bundles, out=out, err=err)
    else:
        # The contour check runs the demo's contour on this CPU from the bundles alone: only
        # for bundles that hold it.  Others (a site's own kernels, GPU code alone) are checked
        # as a job reads them: each readable, made by this Tack with this LLVM.
        from .build import stale_bundles
        problems = stale_bundles([bundles])
        for problem in problems:
            print(f"error: {problem}", file=out)
        what = ("the site's kernels are not the contour" if not contour else
                "no CPU bundle was built" if not cpu else
                "no CPU bundle there is for this build host's CPU")
        print(f"bundles install: no contour check ({what}); every bundle "
              f"{'read and current' if not problems else 'read'}", file=out)
        rc = 1 if problems else 0
    print(f"bundles install: checked in {time.perf_counter() - t0:.1f} s", file=out, flush=True)
    return rc


def _holds_cpu_bundles(directory) -> bool:
    """Whether ``directory`` holds a CPU bundle this Tack can read (one an earlier install put
    there, beside the GPU bundles this one adds)."""
    from ..cache import bundle
    for name in sorted(os.listdir(directory)):
        try:
            b = bundle.read(os.path.join(directory, name), allow_root=True)
        except bundle.BundleError:
            continue
        try:
            if str(b.meta.get("arch", "")).startswith("cpu:"):
                return True
        finally:
            b.close()
    return False


def import_image(check=False, out=sys.stdout, err=sys.stderr, said="image: ") -> int:
    """Write (or with ``check``, only check) the import image of the Tack this Python imports
    (``tack._image``, written by ``tack._image_write``); its exit status, with one line saying
    what was done."""
    import tack
    from .. import _image, _image_write
    # the directory as imported, links unresolved, as the finder (``tack/__init__``) and CPython
    # name it: under -X pycache_prefix the image's place mirrors that path
    here = os.path.dirname(tack.__file__)
    path = _image.image_path(here)
    ok, moved = _image_write.check("tack", here)
    if ok and moved:
        what = (f"current, {moved} of its modules by their content: their sources' times moved "
                "since it was written (an install that set them), so every process reads and "
                "hashes those sources; `python -m tack.site image` writes it again for these times")
    else:
        what = "current, every module by its source's time" if ok else "missing or stale"
    if check or (ok and not moved):     # a current image is left as it is, its time too
        print(f"{said}import image {path}: {what}", file=out if ok else err)
        return 0 if ok else 1
    try:
        path, modules, size = _image_write.write("tack", here)
    except OSError as e:
        raise SiteError(f"{said}cannot write the import image of {here}: {e}") from None
    print(f"{said}import image {path}: {modules} modules, {size // 1024} KiB", file=out,
          flush=True)
    return 0
