"""Fault injection: each file a process opens, in each store, replaced by each kind of fault.

Stores: the user's directory (entries, the size-check stamp and claim), the directory's own
bundle (TACK_CACHE=bundle) and a site bundle directory (TACK_CACHE_BUNDLES).  Faults: every
kind of non-regular file (FIFO, directory, socket, links to a FIFO, to /dev/zero and to
nowhere), a truncation, a bit flip, an empty file and an unreadable file.  Each case runs
the kernels in a new process, time-bounded, and asserts: right results, at most one warning,
no traceback, nothing deleted that Tack did not make (the fault, where it is not Tack's own
file, is still there).  The CLI's info, prune and pack are run on the user-directory cases
with the same assertions.  Two classes more: a link to a file outside the cache (holding the
bytes it replaced) at every path the cache marks used or deletes, through a run and every CLI
command; and an entry owned by another user or writable by its group or others.  Totals are printed at the end of the run (tests/conftest.py) and
quoted in docs/cache.md.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time

import pytest

from tack.cache import size

from .conftest import (EXPECTED, KMOD_LAUNCHES, check_results, drop_dac_caps, entry_files,
                       run_child, run_cli)

NON_REGULAR = ("fifo", "directory", "socket", "link-to-fifo", "link-to-dev-zero", "dangling-link")
DAMAGE = ("truncated", "bit-flip", "empty", "unreadable")
TIMEOUT = 60          # a hang shows as a TimeoutExpired failure, never as a stuck suite


def inject(path, fault):
    """Replace ``path`` (which may not exist) with ``fault``; -> whether the fault is the user's
    (must survive) rather than damage to Tack's own file."""
    data = path.read_bytes() if path.is_file() else b""
    if path.is_file() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if fault == "fifo":
        os.mkfifo(path)
    elif fault == "directory":
        path.mkdir()
        (path / "inside").write_bytes(b"keep")
    elif fault == "socket":
        s, here = socket.socket(socket.AF_UNIX), os.getcwd()
        try:
            os.chdir(path.parent)               # a relative name: AF_UNIX paths are short
            s.bind(path.name)
        finally:
            os.chdir(here)
            s.close()
    elif fault == "link-to-fifo":
        os.mkfifo(str(path) + ".fifo")
        os.symlink(str(path) + ".fifo", path)
    elif fault == "link-to-dev-zero":
        os.symlink("/dev/zero", path)
    elif fault == "dangling-link":
        os.symlink(str(path) + ".nowhere", path)
    elif fault == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif fault == "bit-flip":
        flipped = bytearray(data or b"\0" * 64)
        flipped[len(flipped) // 2] ^= 0x10
        path.write_bytes(bytes(flipped))
    elif fault == "empty":
        path.write_bytes(b"")
    elif fault == "unreadable":
        path.write_bytes(data)
        os.chmod(path, 0)
    return fault in NON_REGULAR


def still_there(path, fault) -> bool:
    if fault in ("fifo", "link-to-fifo"):
        return stat.S_ISFIFO(os.stat(path).st_mode)
    if fault == "directory":
        return (path / "inside").read_bytes() == b"keep"
    if fault == "socket":
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    return os.path.islink(path)


def held(run, path, fault, users) -> None:
    assert run.rc == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    check_results(run, EXPECTED)
    assert len(run.warnings) <= 1, run.warnings
    if users:
        assert still_there(path, fault), f"{path} ({fault}) was removed or replaced"


# The cases counted in the totals printed at the end of the run (see conftest.py).
FAULT_CASES = ("test_user_directory", "test_bundle", "test_site_bundle", "test_link_out",
               "test_untrusted_entry")


def _run(cache, src, env=None, preexec=None):
    return run_child(cache, src, KMOD_LAUNCHES, env=env, timeout=TIMEOUT,
                     **({"preexec_fn": preexec} if preexec else {}))


def _target(cache, which):
    version_files = entry_files(cache)
    if which == "lowered-entry":
        return next(p for p in version_files if p.parts[-3] == "lowered")
    if which == "variant-entry":
        return next(p for p in version_files if p.parts[-3] == "variants")
    return cache / {"size-stamp": size.STAMP, "size-claim": size.CLAIM}[which]


@pytest.mark.parametrize("fault", NON_REGULAR + DAMAGE)
@pytest.mark.parametrize("which", ["lowered-entry", "variant-entry", "size-stamp", "size-claim"])
def test_user_directory(warm, which, fault):
    """A file of the user's directory faulted: the kernels run right, the CLI neither hangs nor
    fails with a traceback, and a non-regular file put there survives all of it."""
    cache, src = warm
    path = _target(cache, which)
    if which == "size-stamp" and path.exists():
        os.utime(path, (1, 1))                      # the hourly check is due: the stamp is used
    users = inject(path, fault)
    preexec = drop_dac_caps if fault == "unreadable" else None
    env = {"TACK_CACHE_SIZE": "1K"}                 # over the limit: the size check prunes
    held(_run(cache, src, env, preexec), path, fault, users)
    for args in (("info",), ("prune", "--max-size", "1"), ("pack",)):
        cli = run_cli(cache, *args, preexec_fn=preexec)
        assert cli.rc in (0, 1) and "Traceback" not in cli.stderr, (args, cli.stderr[-2000:])
        if users:
            assert still_there(path, fault), f"{path} ({fault}) removed by {args}"


@pytest.fixture
def packed(warm):
    """The warm cache packed into its bundle; -> (cache, src, bundle path)."""
    cache, src = warm
    run = run_cli(cache, "pack")
    assert run.rc == 0, run.stderr
    (path,) = [p for p in cache.iterdir() if p.name.startswith("bundle-")]
    return cache, src, path


@pytest.mark.parametrize("fault", NON_REGULAR + DAMAGE)
def test_bundle(packed, fault):
    """The directory's bundle faulted, in bundle mode: the kernels compile in memory and run right."""
    cache, src, path = packed
    users = inject(path, fault)
    preexec = drop_dac_caps if fault == "unreadable" else None
    held(_run(cache, src, {"TACK_CACHE": "bundle"}, preexec), path, fault, users)
    info = run_cli(cache, "info", preexec_fn=preexec)
    assert info.rc == 0 and "Traceback" not in info.stderr, info.stderr
    if users:
        assert still_there(path, fault)


@pytest.mark.parametrize("fault", NON_REGULAR + DAMAGE)
def test_site_bundle(packed, tmp_path, fault):
    """A site bundle faulted, with the user's cache off: the kernels compile and run right."""
    cache, src, path = packed
    site = tmp_path / "site"
    site.mkdir(mode=0o755)
    target = site / path.name
    target.write_bytes(path.read_bytes())
    users = inject(target, fault)
    preexec = drop_dac_caps if fault == "unreadable" else None
    env = {"TACK_CACHE": "read", "TACK_CACHE_DIR": str(tmp_path / "none"),
           "TACK_CACHE_BUNDLES": str(site)}
    held(_run(None, src, env, preexec), target, fault, users)
    if users:
        assert still_there(target, fault)


def test_unfaulted_cases_load_from_each_store(packed, tmp_path):
    """The control: with no fault, each store serves every kernel (so the cases above test
    the stores, not a cache that was never used)."""
    cache, src, path = packed
    site = tmp_path / "site"
    site.mkdir(mode=0o755)
    (site / path.name).write_bytes(path.read_bytes())
    for env in ({}, {"TACK_CACHE": "bundle"},
                {"TACK_CACHE": "read", "TACK_CACHE_DIR": str(tmp_path / "none"),
                 "TACK_CACHE_BUNDLES": str(site)}):
        run = run_child(None if "TACK_CACHE_DIR" in env else cache, src, KMOD_LAUNCHES, env=env)
        check_results(run)
        assert run.stats["hits"]["variant"] == 3, (env, run.stats)


def test_fifo_as_lock_does_not_hang_the_size_check(warm):
    """A FIFO in place of the size check's claim file, with the check due: no hang, one warning
    at most, the FIFO left alone (the one lock the cache takes)."""
    cache, src = warm
    claim = cache / size.CLAIM
    os.mkfifo(claim)
    run = _run(cache, src, {"TACK_CACHE_SIZE": "1K"})
    held(run, claim, "fifo", True)


def test_timeout_is_what_a_hang_looks_like(tmp_path):
    """The harness itself: opening a FIFO the old way does hang, and TIMEOUT turns that into a
    failure (so the cases above would catch a regression)."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(["python3", "-c", f"open({str(fifo)!r}, 'rb').read()"], timeout=2)


# -- links out of the cache, at every path the cache marks or deletes (issue 22) -------------

LINKED = ("lowered-entry", "variant-entry", "size-stamp", "size-claim", "version-marker", "bundle",
          "stale-temporary")
HOURS_AGO = 3 * 3600


def _linked_path(cache, which):
    """The path of ``which`` in ``cache`` (made where the cache would have one)."""
    if which in ("lowered-entry", "variant-entry", "size-stamp", "size-claim"):
        return _target(cache, which)
    (version,) = [d for d in cache.iterdir() if d.is_dir()]
    if which == "version-marker":
        from tack.cache.trust import VERSION_MARKER
        return version / VERSION_MARKER
    if which == "bundle":
        return cache / "bundle-x86_64-0123456789abcdef"
    entry = _target(cache, "variant-entry")
    return entry.with_name(entry.name + f".tmp.1.{'ab' * 6}")


@pytest.mark.parametrize("which", LINKED)
def test_link_out(warm, tmp_path, which):
    """A symbolic link, in place of a file the cache marks used or deletes, to a file outside
    the cache that holds the very bytes it replaced (an entry that would load): neither the run
    (entries due to be marked, the size check due and over its limit) nor info, prune, pack,
    clear and clear --all follow it: the outside file keeps its bytes and its mtime, and the
    link stays."""
    cache, src = warm
    old = time.time() - HOURS_AGO
    for p in entry_files(cache):
        os.utime(p, (old, old))                    # every entry is due to be marked used
    path = _linked_path(cache, which)
    outside = tmp_path / "outside" / path.name
    outside.parent.mkdir()
    outside.write_bytes(path.read_bytes() if path.is_file() else b"the user's own file\n")
    os.chmod(outside, 0o600)
    os.utime(outside, (old, old))
    if path.exists() or path.is_symlink():
        path.unlink()
    os.symlink(outside, path)
    before = (outside.read_bytes(), outside.stat().st_mtime_ns)

    def intact(after):
        assert path.is_symlink(), f"{path} ({which}): the link was removed {after}"
        assert (outside.read_bytes(), outside.stat().st_mtime_ns) == before, \
            f"{outside} was changed through the link at {which} {after}"

    run = _run(cache, src, {"TACK_CACHE_SIZE": "1K"})
    assert run.rc == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    check_results(run, EXPECTED)
    assert len(run.warnings) <= 1, run.warnings
    intact("by a run")
    for args in (("info",), ("prune", "--max-size", "1"), ("pack",), ("clear",), ("clear", "--all")):
        cli = run_cli(cache, *args)
        assert cli.rc in (0, 1) and "Traceback" not in cli.stderr, (args, cli.stderr[-2000:])
        intact(f"by {' '.join(args)}")


# -- entries that are not the user's own, or that others may write (issue 22) ----------------

UNTRUSTED = {"foreign-owner": ("belongs to uid 65534", lambda p: os.chown(p, 65534, 65534)),
             "group-writable": ("writable by its group", lambda p: os.chmod(p, 0o620)),
             "others-writable": ("writable by others", lambda p: os.chmod(p, 0o602))}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("fault", list(UNTRUSTED))
@pytest.mark.parametrize("which", ["lowered-entry", "variant-entry"])
def test_untrusted_entry(warm, which, fault):
    """An entry owned by another user, or writable by its group or others, in the user's private
    directory: never loaded (its code never runs), one warning naming it and why, the kernels
    compile and run right, and the file is left exactly as it was (its owner, mode and bytes)."""
    cache, src = warm
    path = _target(cache, which)
    if which == "lowered-entry":                    # the lowered kernel is read on a variant miss
        for p in entry_files(cache):
            if p.parts[-3] == "variants":
                p.unlink()
    reason, make = UNTRUSTED[fault]
    make(path)
    st = os.lstat(path)
    before = (path.read_bytes(), st.st_uid, st.st_mode)
    run = _run(cache, src)
    assert run.rc == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    check_results(run, EXPECTED)
    assert len(run.warnings) == 1, run.warnings
    assert reason in run.warnings[0]["message"] and str(path) in run.warnings[0]["message"], run.warnings
    level = "lowered" if which == "lowered-entry" else "variant"
    assert run.stats["hits"][level] < len(KMOD_LAUNCHES), run.stats   # not the faulted one
    st = os.lstat(path)
    assert (path.read_bytes(), st.st_uid, st.st_mode) == before
    for args in (("info",), ("pack",)):
        cli = run_cli(cache, *args)
        assert cli.rc in (0, 1) and "Traceback" not in cli.stderr, (args, cli.stderr[-2000:])
