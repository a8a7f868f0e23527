"""Fault injection: each file a process opens, in each store, replaced by each kind of fault.

Stores: the user's directory (entries, the size-check stamp and claim), the directory's own
bundle (TACK_CACHE=bundle) and a site bundle directory (TACK_CACHE_BUNDLES).  Faults: every
kind of non-regular file (FIFO, directory, socket, links to a FIFO, to /dev/zero and to
nowhere), a truncation, a bit flip, an empty file and an unreadable file.  Each case runs
the kernels in a new process, time-bounded, and asserts: right results, at most one warning,
no traceback, nothing deleted that Tack did not make (the fault, where it is not Tack's own
file, is still there).  The CLI's info, prune and pack are run on the user-directory cases
with the same assertions.  Classes more, each case in new processes (issue 22): a link to a
file outside the cache (holding the bytes it replaced) at every path the cache marks used or
deletes, through a run and every CLI command; an entry owned by another user or writable by
its group or others; hostile site configs (deep and odd YAML: nesting thousands of levels,
complex keys, lists and mappings where a string belongs, tags, aliases of aliases, characters
YAML refuses) through ``tack.site check`` and ``bundles build``; kernels as deep as Python
compiles (long expressions, long device-function call chains), cold, warm and from their
lowered entry; kernels past Tack's bounds (a CompileError at the line); and a lowered entry
whose JSON nests 100,000 levels with a right checksum.  Totals are printed at the end of the
run (tests/cache/conftest.py) and quoted in docs/cache.md.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import struct
import subprocess
import sys
import time

import pytest

import tack
from tack.cache import entry, size

from ..test_limits import call_chain, sum_chain
from ..site.test_bad_input import GOOD
from .conftest import (EXPECTED, KMOD_LAUNCHES, Run, check_results, child_env, compiled,
                       decode_entry, drop_dac_caps, entry_files, loaded, one_entry, run_child,
                       run_cli, write_module)

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


# The cases counted in the totals printed at the end of the run (see conftest.py), by class.
FAULT_CASES = {"test_user_directory": "user directory", "test_bundle": "own bundle",
               "test_site_bundle": "site bundle", "test_link_out": "links out",
               "test_untrusted_entry": "foreign or writable entries",
               "test_hostile_site_config": "deep and odd YAML", "test_deep_kernel": "deep kernels",
               "test_deep_kernel_refused": "kernels past the bounds",
               "test_forged_deep_lowered_entry": "forged deep lowered entry"}


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


# -- hostile site configs (issue 22): deep and odd YAML, through check and bundles build -----

SITE = GOOD                 # the site tests' valid config, which each case spoils
_ALIASES = ("[&k {module: tack.kernels.contour, shapes: [&s [8, 8, 8], " + ", ".join(["*s"] * 999)
            + "]}, " + ", ".join(["*k"] * 999) + "]")

# name -> (the config's text (bytes: as they are), what the one error line says after the file's
# path: ":LINE: KEY: ..." as far as given).  Each is refused by check and by bundles build.
HOSTILE_YAML = {
    "lists nested 5,000 deep": (SITE + "nodes: " + "[" * 5000 + "]" * 5000 + "\n",
                                ":11: nodes.0.0.0.0.0... (32 levels): lists and mappings are nested more "
                                "than 32 levels deep"),
    "flow mappings nested 600 deep": (SITE.replace("  conflicts: [tack-dev]", "  help: " + "{a: " * 600
                                                   + "1" + "}" * 600),
                                      ":10: modules.help.a.a.a.a... (32 levels): lists and mappings"),
    "block mappings indented 400 deep": (SITE + "".join(f"{'  ' * j}k{j}:\n" for j in range(400))
                                         + "  " * 400 + "x\n",
                                         ":43: k0.k1.k2.k3.k4.k5... (32 levels): lists and mappings"),
    "a complex key (a list) at the top": (SITE + "? [a, b]\n: 1\n",
                                          ":11: (top level): a key must be a name, not a list"),
    "a complex key (a mapping) in cache": (SITE.replace("  size: 4G", "  size: 4G\n  ? {x: 1}\n  : 2"),
                                           ":5: cache: a key must be a name, not a mapping"),
    "a complex key in a kernel entry": (SITE.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n"
                                                     "    - module: tack.kernels.contour\n      ? [shapes]\n      : [[8, 8, 8]]"),
                                        ":10: build.kernels.0: a key must be a name, not a list"),
    "a list in build.archs.cpu": (SITE.replace("cpu: [zen3]", "cpu: [[zen3]]"),
                                  ":7: build.archs.cpu.0: expected a single value, not a list"),
    "a mapping in build.archs.cpu": (SITE.replace("cpu: [zen3]", "cpu: [{a: 1}]"),
                                     ":7: build.archs.cpu.0: expected a single value, not a mapping"),
    "a list in build.archs.cuda": (SITE.replace("cpu: [zen3]", "cpu: [zen3]\n    cuda: [[sm_90]]"),
                                   ":8: build.archs.cuda.0: expected a single value, not a list"),
    "a mapping as cache.directory": (SITE.replace("  directory: $SCRATCH/$USER/tack-cache", "  directory: {a: 1}"),
                                     ":3: cache.directory: expected a single value, not a mapping"),
    "a list as modules.version": (SITE.replace('  version: "1.0"', "  version: [1, 0]"),
                                  ":9: modules.version: expected a single value, not a list"),
    "a Python object tag (never run)": (SITE.replace("  size: 4G", "  size: !!python/object/apply:os.mkdir [{made}]"),
                                        ":4: cache.size: the tag '!!python/object/apply:os.mkdir' "
                                        "on a list is not supported"),
    "a Python name tag (never run)": (SITE.replace("  size: 4G", "  size: !!python/name:os.system"),
                                      ":4: cache.size: cannot read the value '': could not determine a "
                                      "constructor for the tag 'tag:yaml.org,2002:python/name:os.system'"),
    "aliases of aliases (8 KB, 4 million values)": (SITE.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels: "
                                                                 + _ALIASES),
                                                    ":8: build.kernels.2: the alias *k repeats 4005 value(s)"),
    "a recursive alias": (SITE.replace("  size: 4G", "  size: &c [*c]"),
                          ":4: cache.size: expected a single value, not a list"),
    "a merge key": (SITE.replace("  size: 4G", "  <<: {size: 1G}"),
                    ":4: cache.<<: unknown key; YAML merge keys (<<) are not supported"),
    "a NUL character": (SITE.replace("size: 4G", "size: 4G\0"),
                        ":4: invalid YAML: the character '\\x00' (column 11) is not allowed in YAML"),
    "a tab in the indentation": (SITE.replace("  size: 4G", "\tsize: 4G"),
                                 ":4: invalid YAML: while scanning for the next token, found character "
                                 "'\\t' that cannot start any token (line 4, column 1)"),
    "two documents": (SITE + "---\nversion: 1\n", ":11: invalid YAML: expected a single document in the "
                      "stream (line 1, column 1), but found another document (line 11, column 1)"),
    # PyYAML's context and where it began: the line of the quote never closed, not the file's last
    "an unclosed quote": (SITE.replace('  version: "1.0"', '  version: "1.0') + "# a\n" * 20,
                          ":9: invalid YAML: while scanning a quoted scalar (line 9, column 12), "
                          "found unexpected end of stream (line 31, column 1)"),
    "bytes that are not UTF-8": (SITE.replace("tack-cache", "tack-\xff").encode("latin-1"),
                                 ":3: not UTF-8 text: byte 0xff at offset"),
    "an empty file": ("", ":1: the config is empty"),
    "a list at the top": ("- version: 1\n", ":1: (top level): expected a mapping of version"),
}


def run_site(*args, cwd=None) -> Run:
    p = subprocess.run([sys.executable, "-m", "tack.site", *map(str, args)], env=child_env(None),
                       capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)
    return Run(p.returncode, p.stdout, p.stderr)


@pytest.mark.parametrize("case", list(HOSTILE_YAML))
def test_hostile_site_config(tmp_path, case):
    """A site config that is deep or odd YAML: ``check`` and ``bundles build``, each in a new
    process, exit 1 with one error line naming the file, the line and the key, and the count;
    no traceback, nothing written, no tag run."""
    text, said = HOSTILE_YAML[case]
    made = tmp_path / "made-by-a-tag"
    config = tmp_path / "site.yaml"
    if isinstance(text, bytes):
        config.write_bytes(text)
    else:
        config.write_text(text.replace("{made}", str(made)), encoding="utf-8")
    out = tmp_path / "bundles"
    for args in (("check", config), ("bundles", "build", config, "--output", out)):
        run = run_site(*args, cwd=tmp_path)
        assert run.rc == 1 and "Traceback" not in run.stderr, (args, run.stderr[-3000:])
        lines = run.stderr.splitlines()
        assert len(lines) == 2 and lines[0].startswith(f"error: {config}{said}"), (args, lines[:3])
        assert lines[1] == "1 problem(s); nothing was written", (args, lines)
        assert run.stdout == "", (args, run.stdout[-2000:])
    assert not out.exists() and not made.exists()
    assert sorted(os.listdir(tmp_path)) == ["site.yaml"]


def test_aliases_a_site_config_may_use(tmp_path):
    """The control: anchors and aliases that repeat a few values are read as those values."""
    config = tmp_path / "site.yaml"
    config.write_text(SITE.replace("    cpu: [zen3]", "    cpu: &cpus [zen3, x86_64_v3]\n  kernels:\n"
                                   "    - {module: tack.kernels.contour, shapes: &s [[8, 8, 8], [5, 9, 30]]}\n"
                                   "    - {module: tack.kernels.contour, shapes: *s}\n"
                                   "nodes:\n  - {name: a, cpu: zen3}\n"))
    run = run_site("check", config)
    # stderr: only check's progress, a line per arch as it generates the kernels' code
    assert run.rc == 0 and run.stderr == ("check: generating 2 variant(s) for cpu:zen3 ...\n"
                                          "check: generating 2 variant(s) for cpu:x86_64_v3 ...\n"), \
        run.stderr
    assert f"{config}: valid" in run.stdout and "  cpu:x86_64_v3" in run.stdout, run.stdout
    assert run.stdout.count("kernels: tack.kernels.contour (8x8x8, 5x9x30)") == 2, run.stdout


# -- deep expressions and long device-function call chains (issue 22) ---------------------------

def _terms(n):
    return float(sum(j % 5 for j in range(n)))


def _calls(n):
    def f(a):
        a = a + 1.0
        for _ in range(n - 1):
            a = a * 1.5 + 1.0
        return a
    return f


# name -> (the kernel module's source, what ``k(src, out)`` computes of src).  Each is valid
# Python, and Tack compiles it: cold, warm, and from its lowered entry alone.
DEEP_KERNELS = {
    "a 600-term + chain": (sum_chain(600), lambda a: a * _terms(600)),
    "a 2,000-term + chain": (sum_chain(2000), lambda a: a * _terms(2000)),
    "200 device functions, each calling the next": (call_chain(200), _calls(200)),
    "700 nested unary minus": ("import tack\n@tack.kernel\ndef k(src, out):\n    i = tack.tid()\n"
                               "    out[i] = " + "-" * 700 + "src[i]\n", lambda a: a),
    "700 nested conditional expressions": ("import tack\n@tack.kernel\ndef k(src, out):\n    i = tack.tid()\n"
                                           "    x = src[i]\n    out[i] = " + " if x > 1.0 else ".join(["x"] * 700)
                                           + "\n", lambda a: a),
}
DEEP_LAUNCH = [{"kernel": "k", "n": 5}]


def _deep_run(cache, src, want, name):
    run = run_child(cache, src, DEEP_LAUNCH, module=name, timeout=TIMEOUT)
    assert run.rc == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    check_results(run, {"k": want})
    assert run.warnings == [], run.warnings
    return run


@pytest.mark.parametrize("case", list(DEEP_KERNELS))
def test_deep_kernel(tmp_path, case):
    """A kernel as deep as Python compiles, in three new processes: compiled and stored; loaded
    from its variant; compiled again from its lowered entry alone (the deep lowered kernel read
    back from disk).  Right results each time, no warning, no traceback."""
    source, want = DEEP_KERNELS[case]
    name = "deep_" + "".join(c if c.isalnum() else "_" for c in case)
    src = write_module(tmp_path / "src", source, name)
    cache = tmp_path / "cache"
    cold = _deep_run(cache, src, want, name)
    assert compiled(cold.result("k")) and cold.stats["bytes_written"] > 0, cold.stats
    warm = _deep_run(cache, src, want, name)
    assert loaded(warm.result("k")) and warm.stats["hits"]["variant"] == 1, warm.stats
    for p in entry_files(cache):
        if p.parts[-3] == "variants":
            p.unlink()
    again = _deep_run(cache, src, want, name)
    assert again.stats["hits"] == {"lowered": 1, "variant": 0}, again.stats


# name -> (the module's source, what the CompileError says).  Past Tack's bounds (beyond what
# Python itself compiles without a raised recursion limit, for the expression).
DEEP_REFUSED = {
    "an expression nested 3,500 deep": (sum_chain(3500), 5, "this expression is nested more than "
                                        "3000 levels deep; split it into several statements"),
    "1,050 device functions, each calling the next": (call_chain(1050), None, "device functions call "
                                                      "each other more than 1000 deep (k -> f1049 -> "),
}
SCRIPT = """import sys
sys.setrecursionlimit(30000)            # only so that Python itself compiles the module
sys.path.insert(0, {src!r})
import numpy as np
import tack
import {name}
tack.launch({name}.k, dim=2, args=(np.zeros(2), np.zeros(2)))
"""


@pytest.mark.parametrize("case", list(DEEP_REFUSED))
def test_deep_kernel_refused(tmp_path, case):
    """Past the bounds, a user's script that launches the kernel, in a new process, fails with
    Tack's CompileError naming the kernel, the bound, the file and the line: no RecursionError,
    no frame of Tack's compiler (only the user's and the launch, as for every compile error),
    nothing stored."""
    source, line, said = DEEP_REFUSED[case]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 30000))          # as SCRIPT does
    try:
        compile(source, "refused.py", "exec")
    except RecursionError:
        # Python 3.12 parses about 3,000 levels whatever the recursion limit: no module holds
        # this kernel there (tests/test_limits.py checks a stale source that does, on every Python)
        pytest.skip(f"Python {sys.version_info[0]}.{sys.version_info[1]} itself compiles no "
                    "module nested this deep")
    finally:
        sys.setrecursionlimit(old)
    name = "refused_" + "".join(c if c.isalnum() else "_" for c in case)
    src = write_module(tmp_path / "src", source, name)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(src=str(src), name=name))
    cache = tmp_path / "cache"
    p = subprocess.run([sys.executable, str(script)], env=child_env(cache), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "RecursionError" not in p.stderr and "During handling" not in p.stderr, p.stderr[-3000:]
    frames = re.findall(r'^  File "([^"]+)", line \d+, in ', p.stderr, re.M)
    tack_dir = os.path.dirname(os.path.abspath(tack.__file__))
    assert frames == [str(script), os.path.join(tack_dir, "launch.py")], p.stderr[-3000:]
    error = [i for i, s in enumerate(p.stderr.splitlines()) if s.startswith("tack.errors.CompileError: ")]
    assert len(error) == 1, p.stderr[-3000:]
    lines = p.stderr.splitlines()[error[0]:]
    assert lines[0] == f"tack.errors.CompileError: in kernel 'k': {said}" or \
        lines[0].startswith(f"tack.errors.CompileError: in kernel 'k': {said}"), lines[0][:300]
    where = f'  File "{src / (name + ".py")}", line '
    assert lines[1].startswith(where) and (line is None or lines[1] == f"{where}{line}"), lines[1]
    assert entry_files(cache) == []


def test_forged_deep_lowered_entry(warm):
    """A lowered entry whose kernel JSON nests 100,000 levels, with a right checksum (a forged
    or corrupted-and-resummed file): refused as damaged (never a RecursionError or a crash of
    the JSON decoder), the kernels compile and run right, at most one warning."""
    from tack import ir
    cache, src = warm
    for p in entry_files(cache):
        if p.parts[-3] == "variants":
            p.unlink()                              # the lowered entries are read
    path = one_entry(cache, "lowered", "k_other")
    key, meta, _ = decode_entry(path)
    head = b"[" * 100_000 + b"]" * 100_000
    payload = ir._MAGIC + struct.pack("<QI", len(head), 0) + head
    path.write_bytes(entry.encode(entry.KIND_LOWERED, key, meta, payload))
    run = _run(cache, src)
    assert run.rc == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    check_results(run, EXPECTED)
    assert len(run.warnings) <= 1, run.warnings
    assert run.stats["damaged"] >= 1 and run.stats["hits"]["lowered"] == len(KMOD_LAUNCHES) - 1, run.stats
