"""``python -m tack.cache``: info, prune, clear.

Each subcommand is a function taking the parsed arguments and returning an
exit status; errors are raised as ``CLIError`` and printed once, as one line,
by ``main``: 0 success, 1 failure, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import errno
import sys
import stat
import time

from .. import cache as settings_mod
from . import size
from .bundle import BUNDLE_PREFIX
from .entry import KIND_VARIANT, DamagedEntry, decode
from .keys import shown_version, tack_version_id
from .trust import (VERSION_MARKER, NotRegular, Untrusted, check_parents, check_stat, check_trusted, kind_of,
                    read_regular)


class CLIError(Exception):
    """A failure to report in one line, with exit status 1."""


_NOT_GIVEN = object()          # --max-size's default ("unlimited" parses to None)


def _settings(args):
    from .. import cache
    s = cache.settings()
    if getattr(args, "max_size", _NOT_GIVEN) is not _NOT_GIVEN:
        s = s.replace(max_size=args.max_size)
    return s


def _size_argument(text):
    """argparse type of ``--max-size``: a bad size is bad usage (exit status 2, with the usage),
    and so is 0, as everywhere a size is set (``keeps_no_entry``): ccache's ``-M 0`` is no limit,
    and ``prune --max-size 0`` deleted every entry; ``clear`` is the command for that."""
    try:
        size = settings_mod.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if size == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} keeps no entry: this prune would delete them all (to delete every entry, "
            "run python -m tack.cache clear; 0 is no limit to ccache, not here)")
    return size


def path_argument(text):
    """argparse type of every path argument of ``tack.cache`` and ``tack.site``: an empty one
    (``--output "$OUTDIR"`` with OUTDIR unset) is bad usage, not taken as one not given (the
    cache directory, the config's bundle directory)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (an unset variable?)")
    return text


def arch_argument(text):
    """argparse type of every ``--arch`` of ``tack.cache`` and ``tack.site``: an empty one
    (``--arch "$ARCH"`` with ARCH unset) is bad usage, not taken as none given (which packs, or
    builds, every architecture's)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty architecture name (an unset variable?)")
    return text


class _Version(argparse.Action):
    """``--version``: Tack's version, and the id its cache entries are kept under (this Tack's
    version directory), worked out only when asked."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, help="print Tack's version and exit", **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        from .._version import __version__
        from .keys import tack_version_id
        print(f"tack {__version__} (cache entries under {tack_version_id()})")
        parser.exit()


def add_version(parser) -> None:
    """Give ``parser`` (``tack.cache``'s, ``tack.site``'s) a ``--version``, as Spack's, conda's
    and ccache's have."""
    parser.add_argument("--version", action=_Version)


def target_argument(text):
    """argparse type of ``bundles install --target``: an empty one is bad usage, as ``--arch``."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty CPU name (an unset variable?)")
    return text


class SubcommandParser(argparse.ArgumentParser):
    """The parser of each subcommand of ``tack.cache`` and ``tack.site``
    (``add_subparsers(parser_class=SubcommandParser)``; a subcommand's own subcommands are of
    its class): it says its own usage for an argument it does not know (``clear --bogus``),
    where argparse hands the argument up to the top-level parser, whose usage lists only the
    subcommands."""

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras


def _trusted_root(s, must_exist=True):
    if not os.path.lexists(s.directory):
        if must_exist:
            raise CLIError(f"no cache directory at {s.directory}")
        return None
    try:
        check_trusted(s.directory, setting="TACK_CACHE_DIR")
        check_parents(s.directory)
    except Untrusted as e:
        raise CLIError(f"refusing to touch an untrusted cache directory: {e}") from None
    return s.directory


def bundles(root, allow_root=False):
    """Every file named like a bundle in a directory, with what it is.

    ``status``: ``ok`` (with its header fields: arch, entries...), ``damaged``
    (a Tack bundle that cannot be used: ``error`` says why; with ``partly``, one some of whose
    entries are damaged, which still serves the others), ``stale`` (another Tack's: this
    one does not use it), ``untrusted`` (not yours, or writable by others: never loaded;
    ``allow_root``: a site's, root's too), ``foreign`` (not a Tack bundle, whatever its name;
    never deleted) or ``unreadable``.  Each is read whole and checked as the runtime checks
    it, never through a link or from a FIFO.
    """
    from . import bundle
    out = []
    for name in sorted(os.listdir(root)):
        if not name.startswith(BUNDLE_PREFIX) or ".tmp." in name:
            continue
        path = os.path.join(root, name)
        item = {"name": name, "path": path, "bytes": 0}
        try:
            data, st = read_regular(path)
        except NotRegular as e:
            out.append(dict(item, status="foreign", error=e.strerror))
            continue
        except OSError as e:
            out.append(dict(item, status="unreadable", error=e.strerror or str(e)))
            continue
        item["bytes"] = st.st_size
        if not data.startswith(bundle.MAGIC):
            out.append(dict(item, status="foreign", error="not a Tack bundle" if data else "empty"))
            continue
        try:
            parsed = bundle.Bundle(data, path)
        except bundle.BundleError as e:
            out.append(dict(item, status="damaged", error=str(e)))
            continue
        damaged = parsed.damaged_entries()
        item.update(parsed.meta, entries=len(parsed), status="ok")
        try:
            check_stat(st, path, allow_root=allow_root, is_dir=False)
        except Untrusted as e:
            item.update(status="untrusted", error=str(e))
        else:
            misnamed = (bundle.named_for_another_target(path, parsed.meta)
                        if bundle.packed_bundle_machine(name) else None)
            if parsed.meta.get("tack") != tack_version_id():
                item.update(status="stale", error=f"made by Tack {shown_version(parsed.meta.get('tack'))}, "
                            f"not this one ({shown_version(tack_version_id())}): {bundle.AGAIN}")
            elif misnamed:                  # another host's copied under this name: never looked in
                item.update(status="misnamed", error=misnamed)
            elif damaged and damaged == len(parsed):    # none serves
                item.update(status="damaged",
                            error=f"all {damaged} of its entries are damaged")
            elif damaged:                   # the rest still serve: ``partly``
                item.update(status="damaged", partly=True,
                            error=f"{damaged} of {len(parsed)} entries are damaged")
        out.append(item)
    return out


def _cannot_be_made(directory: str):
    """Why a missing cache ``directory`` could never be made, as a process would find when it
    first stores (a file where a directory above it should be; a parent others may write without
    the sticky bit), or None."""
    up = os.path.dirname(directory)
    while up != os.path.dirname(up) and not os.path.lexists(up):
        up = os.path.dirname(up)
    if not os.path.isdir(up):
        return f"{up} is not a directory: no cache directory can be made below it"
    try:
        check_parents(directory)
    except Untrusted as e:
        return str(e)
    return None


def gather(s) -> dict:
    """Everything ``info`` reports, as a dict (the ``--json`` output)."""
    mpi_mode, mpi_source, mpi_problem = settings_mod.mode_under_mpi()
    info = {"directory": s.directory, "mode": s.mode, "max_size": s.max_size,
            "sources": dict(s.sources), "mpi_mode": mpi_mode, "mpi_mode_source": mpi_source,
            "mpi_mode_problem": mpi_problem, "tack_version": tack_version_id(),
            "exists": os.path.lexists(s.directory), "trusted": None, "untrusted_reason": None,
            "versions": {}, "total_bytes": 0, "total_entries": 0,
            "not_entries": {"files": 0, "bytes": 0},
            "last_size_check": None, "bundles": []}
    if not info["exists"]:
        why = _cannot_be_made(s.directory)
        if why is not None:
            info["trusted"], info["untrusted_reason"] = False, why
        return info
    try:
        check_trusted(s.directory, setting="TACK_CACHE_DIR")
        check_parents(s.directory)
        info["trusted"] = True
    except Untrusted as e:
        info["trusted"], info["untrusted_reason"] = False, str(e)
        if not os.path.isdir(s.directory):
            return info                 # a file, or a link to one: nothing to list
    labels = _Labels()
    try:
        found = size.entries(s.directory)
    except OSError as e:                # (a directory of mode 0300: used, and not listable)
        found, info["unlisted"] = [], f"cannot list {s.directory} ({e.strerror or e})"
        info["total_entries"] = info["total_bytes"] = info["bundles"] = None   # not known
    for path, nbytes, _, version, level in found:
        if not size.is_own_file(path):  # named like one, not written by the cache: as prune
            info["not_entries"]["files"] += 1       # and the limit count it, not at all
            info["not_entries"]["bytes"] += nbytes
            continue
        v = info["versions"].setdefault(version, {"lowered": {"entries": 0, "bytes": 0},
                                                  "variants": {"entries": 0, "bytes": 0}})
        v[level]["entries"] += 1
        v[level]["bytes"] += nbytes
        if level == "variants":
            t = v.setdefault("targets", {}).setdefault(labels(path), {"entries": 0, "bytes": 0})
            t["entries"] += 1
            t["bytes"] += nbytes
        info["total_bytes"] += nbytes
        info["total_entries"] += 1
    try:
        info["last_size_check"] = size.last_check(s.directory)
    except NotRegular as e:             # no check runs while it is there: said, not fatal to info
        info["size_check_problem"] = (f"{e.filename} is {e.strerror}: no size check runs until "
                                      "it is removed")
    claim = os.path.join(s.directory, size.CLAIM)
    try:
        st = os.lstat(claim)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode) and "size_check_problem" not in info:
        info["size_check_problem"] = (f"{claim} is {kind_of(st)}, not a regular file: no size "
                                      "check runs until it is removed")
    elif st is not None and stat.S_ISREG(st.st_mode):
        info["size_check_claimed"] = st.st_mtime   # a check under way, or its claim left by one that died
    if "unlisted" not in info:
        info["bundles"] = bundles(s.directory)
    return info


class _Labels:
    """The name ``info`` lists a variant entry under: the one ``pack --arch`` takes.  An arch the
    entry names (code compiled ahead of time: ``cpu:x86_64_v3``, ``cuda:sm_90``); for code this
    host compiled for itself, ``cpu:<its microarchitecture>`` (``_arch_label``, the name its bundle
    is packed under; ``cpu:host`` without archspec, which pack takes too); for another host's
    (a copied cache), ``target <key prefix>``; ``damaged`` if its metadata cannot be read."""

    def __init__(self):
        self._here = None

    def __call__(self, path: str) -> str:
        try:
            data, _ = read_regular(path)
            _, meta, _ = decode(data, KIND_VARIANT, only=("arch", "backend", "target_key"))
        except (OSError, DamagedEntry):
            return "damaged"
        if meta.get("arch"):
            return meta["arch"]
        backend, tk = meta.get("backend", "cpu"), meta.get("target_key", "")
        if backend != "cpu":
            return f"{backend}:host"
        if self._here is None:
            from .host import cpu_host_key
            self._here = cpu_host_key()
        if tk == self._here or not tk:
            return _arch_label(tk or self._here, self._here) or "cpu:host"
        return f"target {tk[:16]}"


def site_bundles(ignored=None) -> list:
    """The site's bundle directories and their bundles; ``ignored`` (a list): told why each
    TACK_CACHE_BUNDLES entry a run leaves out is left out, as the run warns."""
    from .stores import site_dirs
    out = []
    for d in site_dirs(warn=None if ignored is None else ignored.append):
        site = {"directory": d, "bundles": bundles(d, allow_root=True) if os.path.isdir(d) else None}
        if site["bundles"] is not None:
            try:                        # as a job checks a site directory before its bundles
                check_trusted(d, allow_root=True)
                check_parents(d)
            except Untrusted as e:
                site["untrusted"] = str(e)
        out.append(site)
    return out


def _print_site_bundles(info) -> None:
    fs = settings_mod.format_size
    for why in info.get("site_bundles_ignored", ()):
        print(f"site bundles: {why}")
    for site in info["site_bundles"]:
        if site["bundles"] is None:
            print(f"site bundles: {site['directory']} (missing)")
            continue
        print(f"site bundles: {site['directory']} ({len(site['bundles'])})"
              + (f"  NOT USED: {site['untrusted']}" if site.get("untrusted") else ""))
        for b in site["bundles"]:
            if b["status"] != "ok":
                print(f"  {b['name']}  {fs(b['bytes'])}  {_status(b)}: {b['error']}")
                continue
            print(f"  {b['name']}  arch {b.get('arch') or '?'}, {b.get('entries', '?')} entries, "
                  f"{fs(b['bytes'])}")


_STATUS = {"damaged": "DAMAGED, not used", "foreign": "NOT A BUNDLE, ignored",
           "stale": "STALE, not used", "untrusted": "UNTRUSTED, not used",
           "unreadable": "UNREADABLE, not used", "misnamed": "ANOTHER TARGET'S, not used"}


def _status(b: dict) -> str:
    """A bundle's status as ``info`` says it: one damaged only in some entries still serves the
    others (the runtime refuses each damaged entry alone)."""
    if b["status"] == "damaged" and b.get("partly"):
        return "DAMAGED in part, its other entries still used"
    return _STATUS[b["status"]]


def cmd_info(args) -> int:
    info = gather(_settings(args))
    info["site_bundles_ignored"] = []
    info["site_bundles"] = site_bundles(info["site_bundles_ignored"])
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    fs = settings_mod.format_size
    src = info["sources"]
    print(f"directory:    {info['directory']}  ({src['directory']})")
    print(f"mode:         {info['mode']}  ({src['mode']})")
    print(f"under MPI:    {info['mpi_mode']}  ({info['mpi_mode_source']}"
          f"{': ' + info['mpi_mode_problem'] if info['mpi_mode_problem'] else ''})")
    print(f"size limit:   {fs(info['max_size'])}  ({src['max_size']})")
    print(f"tack version: {shown_version(info['tack_version'])}")
    if not info["exists"]:
        if info["trusted"] is False:
            print(f"status:       NOT USED: {info['untrusted_reason']}")
        else:
            print("status:       no cache directory yet (created when a kernel is first stored)")
        _print_site_bundles(info)
        return 0
    if info["trusted"] is False:
        print(f"status:       NOT USED: {info['untrusted_reason']}")
    if info.get("unlisted"):            # entries and bundles not counted: none can be listed
        print(f"entries:      not counted: {info['unlisted']}; a job still reads and stores "
              "the entries it names (its owner can make it listable: chmod u+r)")
    else:
        print(f"entries:      {info['total_entries']} ({fs(info['total_bytes'])}) across "
              f"{len(info['versions'])} Tack version(s)")
    other = info["not_entries"]
    if other["files"]:
        print(f"  not counted: {other['files']} file(s) named like entries that the cache did not "
              f"write ({fs(other['bytes'])}): neither counted against the limit nor deleted")
    for version, levels in sorted(info["versions"].items()):
        mark = "  <- this version" if version == info["tack_version"] else ""
        print(f"  {shown_version(version)}{mark}")
        for level in ("lowered", "variants"):
            d = levels[level]
            print(f"    {level:<9} {d['entries']:6d} entries  {fs(d['bytes']):>10}")
        for label, d in sorted(levels.get("targets", {}).items()):
            print(f"      for {label:<20} {d['entries']:6d} entries  {fs(d['bytes']):>10}")
    last = info["last_size_check"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last)) if last is not None else "never"
    print(f"last size check: {when}")
    if info.get("size_check_claimed") is not None:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["size_check_claimed"]))
        print(f"  a size check is claimed since {since} (under way, or its process died: a claim "
              f"older than {size.STALE_CLAIM_MINUTES} minutes is taken over by the next check)")
    if info.get("size_check_problem"):
        print(f"  {info['size_check_problem']}")
    if info["bundles"] is None:
        print("bundles:      not listed (the directory cannot be listed)")
    elif info["bundles"]:
        print("bundles (not counted against the limit):")
        for b in info["bundles"]:
            if b["status"] != "ok":
                print(f"  {b['name']}  {fs(b['bytes'])}  {_status(b)}: {b['error']}")
            else:
                print(f"  {b['name']}  arch {b.get('arch') or '?'} ({b.get('machine', '?')}), "
                      f"{b['entries']} entries, {fs(b['bytes'])}, Tack {shown_version(b.get('tack', '?'))}")
    else:
        print("bundles:      none")
    _print_site_bundles(info)
    return 0


def _root_to_change(s, verb):
    """The trusted cache directory to prune or clear; None (said) when there is none."""
    root = _trusted_root(s, must_exist=False)
    if root is None:
        print(f"nothing to {verb}: no cache directory at {s.directory}")
    return root


def cmd_prune(args) -> int:
    s = _settings(args)
    root = _root_to_change(s, "prune")
    if root is None:
        return 0
    result = size.prune(root, s.max_size)
    total, freed, count = result
    size.remove_stale_temporaries(root)
    fs = settings_mod.format_size
    print(f"pruned {count} entries ({fs(freed)}); {fs(total - freed)} left, "
          f"limit {fs(s.max_size)}")
    if result.failed:
        path, e = result.failed[0]
        more = f" (and {len(result.failed) - 1} more)" if len(result.failed) > 1 else ""
        raise CLIError(f"cannot delete {path}: {e.strerror or e}{more}; the cache is still over "
                       f"its limit")
    return 0


def clear_version(root: str, version: str) -> tuple[int, list]:
    """Delete one version directory's entries, then its directories if nothing else is left.

    Never a recursive delete: each file is checked to be one the cache wrote
    (``size.is_own_file``), and each directory is removed with ``rmdir``, which
    fails on one that still holds anything.  -> (files deleted, [what was left
    in place: paths the cache did not make])
    """
    deleted, kept = 0, []
    vdir = os.path.join(root, version)
    for level in size.LEVELS:
        ldir = os.path.join(vdir, level)
        if not size._is_real_dir(ldir):
            continue
        # (what another clear or prune removed meanwhile is gone, not "left in place")
        for fan in sorted(size.listed(ldir)):
            fdir = os.path.join(ldir, fan)
            if not size._is_real_dir(fdir):
                if os.path.lexists(fdir):
                    kept.append(fdir)
                continue
            for name in sorted(size.listed(fdir)):
                path = os.path.join(fdir, name)
                if _delete(path):
                    deleted += 1
                elif os.path.lexists(path):
                    kept.append(path)
            _rmdir(fdir, kept)
        _rmdir(ldir, kept)
    marker = os.path.join(vdir, VERSION_MARKER)
    if size.is_marker(marker) and not _others_in(vdir, marker):
        _unlink(marker)
    _rmdir(vdir, kept)
    return deleted, kept


def _delete(path: str) -> bool:
    try:
        return size.delete_own(path)
    except OSError as e:
        raise CLIError(f"cannot delete {path}: {e.strerror or e}") from None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise CLIError(f"cannot delete {path}: {e.strerror or e}") from None


def _others_in(directory: str, besides: str) -> bool:
    return any(os.path.join(directory, n) != besides for n in size.listed(directory))


def _rmdir(path: str, kept: list) -> None:
    """Remove an emptied directory; one that still holds what the cache did not make stays."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            # listed, unless all it still holds is below what is listed already (a README of
            # the user's beside a directory listed for a file deeper is listed too)
            try:
                rest = [os.path.join(path, n) for n in os.listdir(path)]
            except OSError:
                rest = [path]
            if not all(any(k == r or k.startswith(r + os.sep) for k in kept) for r in rest):
                kept.append(path)
            return
        if e.errno == errno.ENOTDIR or not os.path.isdir(path) or os.path.islink(path):
            kept.append(path)
            return
        raise CLIError(f"cannot delete {path}: {e.strerror or e}") from None


def cmd_clear(args) -> int:
    s = _settings(args)
    root = _root_to_change(s, "clear")
    if root is None:
        return 0
    version = tack_version_id()
    targets = [v for v in sorted(os.listdir(root)) if size.is_version_dir(root, v)]
    if not args.all:
        targets = [v for v in targets if v == version]
    removed, kept = 0, []
    for name in targets:
        n, left = clear_version(root, name)
        removed += n
        kept += left
    nbundles = 0
    if args.all:
        for b in bundles(root):
            if b["status"] in ("ok", "damaged", "stale", "untrusted"):    # files that begin as bundles
                _unlink(b["path"])
                nbundles += 1
        for name in (size.STAMP, size.CLAIM):
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                _unlink(path)
        # A pack's temporary bundle: deleted once its writer has surely died (an hour old, as the
        # size check deletes them); a younger one may be a pack running now, and is said.
        size.remove_stale_temporaries(root)
        writing = [os.path.join(root, n) for n in sorted(os.listdir(root)) if size.is_temporary_name(n)]
    else:
        writing = []
    what = "every version's" if args.all else f"version {shown_version(version)}'s"
    extra = f" and {nbundles} bundle(s)" if args.all else ""
    print(f"cleared {what} entries ({removed} files in {len(targets)} version "
          f"director{'y' if len(targets) == 1 else 'ies'}){extra} from {root}")
    if kept:
        # (what the cache cannot tell is its own: a user's file, or one of its own entries cut
        # shorter than the header that would say so)
        print(f"left in place, not recognizable as the cache's own files ({len(kept)}):")
        for path in kept:
            print(f"  {path}")
    if writing:
        print(f"left in place, a pack's temporary file being written, or left by one that stopped "
              f"less than an hour ago ({len(writing)}):")
        for path in writing:
            print(f"  {path}")
    return 0


def cmd_pack(args) -> int:
    from . import bundle, bundle_write
    from .host import cpu_host_key
    s = _settings(args)
    root = _trusted_root(s)
    version = tack_version_id()
    here = cpu_host_key()
    target = _match_arch(root, version, args.arch, here) if args.arch else None
    output, out_dir = args.output, root
    if output is not None and os.path.isdir(output):      # into that directory, named as usual
        output, out_dir = None, output
    try:
        written = bundle_write.write_bundles(os.path.join(root, version), out_dir, output=output,
                                       target_key=target, arch_of=lambda tk: _arch_label(tk, here),
                                       force=args.force)
    except bundle_write.NothingToPack as e:
        # pack, clear, run, pack: the run loaded every kernel from the bundle, which holds them
        path = output or os.path.join(out_dir, bundle.bundle_name(target or here))
        kept = len(bundle_write.kept_entries(path, target or here))
        if not kept:
            raise CLIError(str(e)) from None
        print(f"nothing new to pack: {path} keeps its {kept} entries")
        return 0
    except bundle.BundleError as e:
        raise CLIError(str(e)) from None
    except OSError as e:                        # a full disk, a read-only one: say which file
        raise CLIError(f"cannot write {e.filename or out_dir}: {e.strerror or e}") from None
    fs = settings_mod.format_size
    for path, meta in written:
        if meta.get("unchanged"):
            print(f"nothing new to pack: {path} keeps its {meta['entries']} entries")
            continue
        print(f"packed {meta['entries']} entries ({fs(meta['bytes'])}) for {meta['arch'] or 'arch ?'} "
              f"({meta['machine']}) into {path}")
        if meta.get("replaced_other"):
            print(f"note: --force replaced what was there: {meta['replaced_other']}")
        elif meta.get("replaced_unread"):
            print(f"note: the bundle it replaced could not be read ({meta['replaced_unread']}): "
                  "none of its entries were kept")
    name = bundle.bundle_name(here)
    # A copy of another host's cache packs CPU bundles no process here reads: say so.  A GPU
    # kind's bundle is for that kind's devices (its runtime names it), never "this host's".
    cpu = [m for _, m in written if (m.get("arch") or "cpu:").startswith("cpu:")]
    if output is None and cpu and not any(os.path.basename(p) == name for p, _ in written):
        print(f"note: none of these is this host's CPU bundle ({name})")
    return 0


def _arch_label(target_key, here) -> str:
    """``cpu:<archspec name>`` of variants compiled on this host (their key is its own, ``here``),
    else '' (a copy of another host's cache: unnamed)."""
    if target_key == here:
        from .host import cpu_host_arch
        try:
            return f"cpu:{cpu_host_arch()}"
        except Exception:                       # noqa: BLE001 - no archspec: unnamed
            return ""
    return ""


def _match_arch(root, version, arch, here):
    """The target key whose variants are for ``arch``: ``kind:name`` (this host's
    microarchitecture, or an arch a variant names, as ``opencl:0`` names a device's driver-built
    code), LLVM's CPU name, or a key prefix: every name ``info`` lists."""
    from . import bundle_write
    from ..archs import ArchError, qualify, resolve
    _, variants = bundle_write.collect(os.path.join(root, version))

    def names(tk, entries):
        out = {tk[:16]}
        label = _arch_label(tk, here)
        out.update(n for n in (label, *(m.get("arch", "") for *_, m in entries)) if n)
        out.update(f.split("=", 1)[1] for *_, m in entries for f in m.get("target", "").split(";")
                   if f.startswith("cpu="))             # LLVM's name: what older Tacks printed
        return out
    label = arch.strip()
    if label.startswith("target ") and label[len("target "):].strip():
        # the name info (and the 'no entries' message) lists another host's code by: its key prefix
        prefix = label[len("target "):].strip()
        found = {tk for tk in variants if tk.startswith(prefix)}
        if not found:
            raise CLIError(f"no entries for {label!r}: no target key starts with {prefix!r}")
        if len(found) > 1:
            raise CLIError(f"{label!r} matches {len(found)} targets; give more of the key")
        return found.pop()
    try:
        wanted, refused = qualify(arch), None
    except ArchError as e:
        # Not a kind code is built for, but maybe a name info lists: the code a device's driver
        # built (opencl:0, stored back under the device's key) is packed by that name too.
        wanted, refused = arch.strip(), e
    if refused is not None:                 # that name exactly, never a key prefix
        found = {tk for tk, entries in variants.items() if ":" in wanted and wanted in names(tk, entries)}
    elif wanted == "cpu:host":               # this host's own code, however info names it
        found = {here} & set(variants)
    else:
        found = {tk for tk, entries in variants.items()
                 if {arch, wanted} & names(tk, entries) or tk.startswith(arch)}
    if not found:
        known = sorted({n for tk, e in variants.items() for n in names(tk, e) if ":" in n}
                       | {f"target {tk[:16]}" for tk, e in variants.items()
                          if not any(":" in n for n in names(tk, e))})
        held = f"the cache holds: {', '.join(known) or 'none'}"
        if refused is None and wanted != "cpu:host":
            try:
                resolve(wanted)             # a name Tack knows, or one it never builds?
            except ArchError as e:
                refused = e
        if refused is not None:             # not "no entries": no such architecture at all
            raise CLIError(f"unknown architecture {label!r} ({refused}); {held}")
        raise CLIError(f"no entries for arch {wanted!r}; {held}")
    if len(found) > 1:
        raise CLIError(f"arch {wanted!r} matches {len(found)} targets; give a target key prefix")
    return found.pop()


def cmd_export(args) -> int:
    from . import bundle, export
    try:
        written, damaged = export.export(args.source, args.output, force=args.force)
    except (bundle.BundleError, export.ExportError) as e:
        raise CLIError(str(e)) from None
    except OSError as e:
        raise CLIError(f"cannot write {e.filename or args.output}: {e.strerror or e}") from None
    for path in written:
        print(path)
    print(f"exported {len(written)} file(s) to {args.output}"
          + (f"; {damaged} damaged entr{'y' if damaged == 1 else 'ies'} skipped" if damaged else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tack.cache",
                                description="Inspect and manage Tack's kernel cache.")
    add_version(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True,
                           parser_class=SubcommandParser)
    info = sub.add_parser("info", help="settings, entries and size",
                          description="Show the settings in force, entries and bytes per Tack "
                                      "version and level, the limit, the last size check and bundles.")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(func=cmd_info)
    prune = sub.add_parser("prune", help="keep to the size limit now",
                           description="Delete least recently used entries until 90% of the "
                                       "limit is left (if over it). Bundles are never touched.")
    prune.add_argument("--max-size", metavar="SIZE", type=_size_argument, default=_NOT_GIVEN,
                       help="prune to this size instead (e.g. 200M)")
    prune.set_defaults(func=cmd_prune)
    clear = sub.add_parser("clear", help="delete this Tack version's entries",
                           description="Delete this Tack version's entries; with --all, every "
                                       "version's and the bundles. Other files are left alone.")
    clear.add_argument("--all", action="store_true", help="every version's entries and bundles")
    clear.set_defaults(func=cmd_clear)
    pack = sub.add_parser("pack", help="pack this version's entries into bundles",
                          description="Pack this Tack version's entries into one bundle file per "
                                      "architecture, in the cache directory: what MPI ranks read "
                                      "(TACK_CACHE=bundle) instead of a file per kernel.")
    pack.add_argument("--output", metavar="PATH", type=path_argument,
                      help="write the bundle to this file instead, or into this directory under "
                           "its usual name")
    pack.add_argument("--arch", metavar="ARCH", type=arch_argument,
                      help="only this architecture's entries (kind:name, e.g. cpu:zen3, or "
                           "'target KEY' as info lists another host's)")
    pack.add_argument("--force", action="store_true",
                      help="replace a file at the bundle's path that is not a Tack bundle")
    pack.set_defaults(func=cmd_pack)
    export = sub.add_parser("export", help="write each entry's artifact as a file",
                            description="Write each compiled variant of a bundle, or of a cache "
                                        "directory (this Tack version's entries), as a file named "
                                        "by kernel and target (.o, .ptx, .hsaco, .spv, .zebin), to "
                                        "inspect with the vendors' tools.")
    export.add_argument("source", metavar="BUNDLE_OR_DIR", type=path_argument, help="a bundle file or a cache directory")
    export.add_argument("--output", metavar="DIR", required=True, type=path_argument, help="where to write the files")
    export.add_argument("--force", action="store_true",
                        help="replace existing files that differ from what would be written")
    export.set_defaults(func=cmd_export)
    return p


def run_tool(main, tool) -> None:
    """``sys.exit(main())`` for a tool's ``__main__``, where Ctrl-C is one line, not a traceback
    (30 lines of one in the middle of ``bundles build``): what the tool writes goes into place
    whole (a temporary file renamed), so what it wrote is whole and the rest as it was.  The
    process then dies of SIGINT, as an uncaught interrupt makes it, so that a shell script or
    ``make`` running it stops too."""
    try:
        code = main()
    except KeyboardInterrupt:
        import signal
        print(f"{tool}: interrupted; each file it writes is put in place whole, so what it wrote "
              "is whole and the rest is as it was", file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130                      # (where the signal could not end the process)
    sys.exit(code)


def tolerant_output() -> None:
    """Let stdout write any file name: a name that is not UTF-8 (``bundle-\\xff``) is a lone
    surrogate in Python, which a UTF-8 locale's strict stdout (en_US.UTF-8; C.UTF-8 already
    escapes) refused with a traceback in the middle of ``info`` or ``bundles status``.  Written
    as its own bytes, as ``ls`` writes it.  Both tools' ``main`` call it."""
    stream = sys.stdout
    if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
        try:
            stream.reconfigure(errors="surrogateescape")
        except (ValueError, OSError):           # not a text stream that can be changed
            pass


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    tolerant_output()
    try:
        status = args.func(args)
        sys.stdout.flush()                      # a closed pipe shows here, not at exit
        return status
    except CLIError as e:
        print(f"tack.cache: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:                     # `info | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # so the flush at exit finds somewhere to write
        return 0
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"tack.cache: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
