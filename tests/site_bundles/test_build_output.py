"""What ``python -m tack.site bundles build`` does with what its output directory already holds
(issue 22: never replace a file Tack did not write without --force): a file that is not a
bundle at a bundle's name is refused, in one line, before anything compiles; a bundle it wrote
before is replaced atomically; a damaged bundle is replaced, and the build says so.  Each case
is a real run of the command."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

from tack.backends.cpu_runtime import host_arch
from tack.cache import bundle, trust

ARCH = f"cpu:{host_arch()}"


def build(config, out_dir, *extra):
    return subprocess.run([sys.executable, "-m", "tack.site", "bundles", "build", str(config),
                           "--output", str(out_dir), *extra], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A config for this host's CPU (the 8^3 contour) and the bundle a first build made:
    -> (config, bundle file name, its bytes)."""
    base = tmp_path_factory.mktemp("build-output")
    config = base / "site.yaml"
    config.write_text(f"version: 1\nbuild:\n  archs:\n    cpu: [{host_arch()}]\n  kernels:\n"
                      "    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n")
    r = build(config, base / "first")
    assert r.returncode == 0, r.stdout + r.stderr
    (name,) = os.listdir(base / "first")
    return config, name, (base / "first" / name).read_bytes()


def whole(path) -> int:
    """The number of entries of the bundle at ``path``, every one of them whole."""
    with bundle.read(str(path)) as b:
        assert b.meta["arch"] == ARCH
        assert b.damaged_entries() == 0
        return len(b)


def no_temporaries(directory):
    assert not [n for n in os.listdir(directory) if trust.TMP_MARK in n], os.listdir(directory)


NOT_BUNDLES = {"a user's file": b"my notes, kept here by chance\n",
               "an empty file": b"",
               "a bundle whose first bytes are lost": None}        # made from the first bundle


@pytest.mark.parametrize("what", list(NOT_BUNDLES))
def test_a_file_that_is_not_a_bundle_is_refused_without_force(first, tmp_path, what):
    """At a bundle's name, a file that does not start as a Tack bundle: exit 1, one line naming
    it and --force, nothing compiled, and the file is left exactly as it was."""
    config, name, data = first
    out_dir = tmp_path / "bundles"
    out_dir.mkdir()
    target = out_dir / name
    mine = NOT_BUNDLES[what] if NOT_BUNDLES[what] is not None else b"\0" * 16 + data[16:]
    target.write_bytes(mine)
    r = build(config, out_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.splitlines() == [f"error: not replacing {target}: "
                                     f"{'it is an empty file, not a Tack bundle' if not mine else 'it is not a Tack bundle'}; "
                                     "use --force to replace it"], r.stderr
    assert "compiling" not in r.stdout, r.stdout
    assert target.read_bytes() == mine
    assert os.listdir(out_dir) == [name]


def test_force_replaces_a_file_that_is_not_a_bundle_and_says_so(first, tmp_path):
    config, name, _ = first
    out_dir = tmp_path / "bundles"
    out_dir.mkdir()
    (out_dir / name).write_bytes(b"my notes\n")
    r = build(config, out_dir, "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{ARCH}: replaced {out_dir / name}, which was not a Tack bundle (--force)" in r.stdout.splitlines()
    assert whole(out_dir / name) > 0
    no_temporaries(out_dir)


def test_a_link_at_a_bundles_name_is_never_replaced(first, tmp_path):
    """Not even with --force: what is not a regular file is not Tack's to replace, and the file
    the link points to keeps its bytes."""
    config, name, _ = first
    out_dir = tmp_path / "bundles"
    out_dir.mkdir()
    outside = tmp_path / "outside"
    outside.write_bytes(b"the user's own file\n")
    os.symlink(outside, out_dir / name)
    r = build(config, out_dir, "--force")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.splitlines() == [f"error: not replacing {out_dir / name}: it is a symbolic link, "
                                     "not a regular file"], r.stderr
    assert os.path.islink(out_dir / name) and outside.read_bytes() == b"the user's own file\n"


def test_a_bundle_it_wrote_before_is_replaced_atomically(first, tmp_path):
    """A build over its own earlier bundle: the new bundle is renamed into place (another
    file), so a job that has the old one open keeps reading the old bytes whole; the new one is
    whole, nothing is said about damage, no temporary file is left."""
    config, name, data = first
    out_dir = tmp_path / "bundles"
    out_dir.mkdir()
    old = out_dir / name
    old.write_bytes(data)
    fd = os.open(old, os.O_RDONLY)
    try:
        before = os.fstat(fd).st_ino
        r = build(config, out_dir)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "replaced" not in r.stdout, r.stdout
        assert os.stat(old).st_ino != before, "the bundle was rewritten in place"
        assert os.pread(fd, len(data) + 1, 0) == data     # the open file: the old bundle, whole
    finally:
        os.close(fd)
    assert whole(old) == whole_count(data)
    no_temporaries(out_dir)


@pytest.mark.skipif(shutil.which("strace") is None,
                    reason="strace is not installed: the order of fsync and rename cannot be seen")
def test_a_build_under_umask_077_is_synced_renamed_and_readable_by_all(first, tmp_path):
    """An admin with ``umask 077`` builds into a directory the build makes: the bundle is written
    to a temporary file beside its name, synced (``fsync`` of that file) before it is renamed
    into place, the directory synced after; it is mode 0644 (a site bundle is for every user:
    the umask's 0600 would leave every other user's job compiling), and the directories the
    build made are 0755.  They were 0700 (``mkdir``'s mode is masked by the umask), which no
    other user may enter, and the bundle was renamed into place without a sync, so that a crash
    could leave its name over data that never reached the disk."""
    config, name, data = first
    out_dir = tmp_path / "made" / "bundles"
    trace = tmp_path / "trace"
    r = subprocess.run(["strace", "-f", "-qq", "-o", str(trace), "-e",
                        "trace=openat,open,fsync,fdatasync,rename,renameat,renameat2",
                        sys.executable, "-m", "tack.site", "bundles", "build", str(config),
                        "--output", str(out_dir)], capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: os.umask(0o077))
    assert r.returncode == 0, r.stdout + r.stderr
    final = out_dir / name
    assert oct(stat.S_IMODE(os.stat(final).st_mode)) == "0o644"
    for d in (out_dir, out_dir.parent):
        assert oct(stat.S_IMODE(os.stat(d).st_mode)) == "0o755", d
    assert whole(final) == whole_count(data)
    no_temporaries(out_dir)
    # strace's lines: "PID  call(...) = result", the PID padded to a width (two spaces after a
    # short one): split into (PID, the call).
    calls = [tuple(line.split(None, 1)) for line in trace.read_text().splitlines() if line.strip()]
    opened = [(i, c) for i, (_, c) in enumerate(calls)
              if str(final) + trust.TMP_MARK in c and "O_CREAT" in c]
    assert len(opened) == 1, "\n".join(map(" ".join, calls))
    at, line = opened[0]
    pid, fd = calls[at][0], line.rsplit("= ", 1)[1]
    tmp = line.split('"')[1]
    renamed = [i for i, (p, c) in enumerate(calls) if p == pid and "rename" in c
               and f'"{tmp}"' in c and f'"{final}"' in c and c.endswith("= 0")]
    synced = [i for i, (p, c) in enumerate(calls[:renamed[0]] if renamed else []) if i > at
              and p == pid and c.startswith(f"fsync({fd})")]
    assert renamed and synced, "\n".join(map(" ".join, calls[at:]))
    dir_synced = [c for p, c in calls[renamed[0]:] if p == pid and c.startswith("fsync(")]
    assert dir_synced, "\n".join(map(" ".join, calls[renamed[0]:]))


DAMAGE = {"an entry bit-flipped": lambda d: d[:-100] + bytes([d[-100] ^ 1]) + d[-99:],
          "cut after its first bytes": lambda d: d[:100]}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_bundle_is_replaced_and_the_build_says_so(first, tmp_path, damage):
    """A Tack bundle (it starts as one) that is damaged, in an entry or in its header: replaced
    by a whole one, and the build says what was wrong with the one it replaced."""
    config, name, data = first
    out_dir = tmp_path / "bundles"
    out_dir.mkdir()
    (out_dir / name).write_bytes(DAMAGE[damage](data))
    r = build(config, out_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    said = [line for line in r.stdout.splitlines() if line.startswith(f"{ARCH}: replaced ")]
    want = {"an entry bit-flipped": f"a damaged bundle: 1 of {whole_count(data)} entries of "
                                    f"{out_dir / name} were unusable",
            "cut after its first bytes": f"a bundle that could not be used: {out_dir / name} is cut "
                                         "short or damaged (its header and index table take "}
    assert len(said) == 1 and said[0].startswith(f"{ARCH}: replaced {want[damage]}"), r.stdout
    assert whole(out_dir / name) == whole_count(data)
    no_temporaries(out_dir)


def whole_count(data) -> int:
    with bundle.Bundle(data, "first") as b:
        return len(b)


def test_a_killed_builds_temporary_bundle_is_said_by_status_and_removed_by_the_next_build(first,
                                                                                         tmp_path):
    """A build killed before its rename (kill -9, a node lost) leaves ``bundle-....tmp.<pid>.<hex>``
    beside the bundles: jobs never read it, but nothing removed it, and ``bundles status`` did not
    say it was there, so each killed build of a site directory left a bundle's worth of disk for
    good.  Status now lists it; the next build removes one more than an hour old that starts as a
    bundle (its writer is surely dead), and leaves a younger one (a build may be writing it) and
    a file of the same form that is not a bundle's start."""
    config, name, data = first
    out_dir = tmp_path / "bundles"
    out_dir.mkdir(mode=0o755)
    (out_dir / name).write_bytes(data)
    dead = out_dir / f"{name}.tmp.999999.0123456789ab"
    young = out_dir / f"{name}.tmp.999998.0123456789ab"
    mine = out_dir / f"{name}.tmp.999997.0123456789ab"
    dead.write_bytes(data[: len(data) // 2])            # cut short where the kill stopped it
    young.write_bytes(data)
    mine.write_bytes(b"a user's notes, named like a temporary\n")
    old = os.stat(dead).st_mtime - 7200
    for p in (dead, mine):
        os.utime(p, (old, old))
    status = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "status", str(out_dir)],
                            capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr
    for p in (dead, young):
        assert f"{p.name}: a temporary bundle, never read by jobs" in status.stdout, status.stdout
    # the user's file: status said the next build would remove it, which the build does not do
    assert (f"{mine.name}: named as a temporary bundle but not one (it does not start as a "
            "bundle): never read by jobs, and no build removes it") in status.stdout, status.stdout
    r = build(config, out_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"removed {dead}: a temporary bundle a build that stopped" in r.stdout, r.stdout
    assert sorted(os.listdir(out_dir)) == sorted([name, young.name, mine.name])
    assert whole(out_dir / name)


def test_a_build_that_drops_the_replaced_bundles_kernels_says_so(first, tmp_path):
    """Another config built into a directory: the bundle it replaces held the first config's
    kernels, which jobs then compile; the build says how many entries went (it said nothing).
    Building the same config again drops nothing and says nothing of it."""
    config, name, data = first
    out_dir = tmp_path / "bundles"
    out_dir.mkdir()
    (out_dir / name).write_bytes(data)
    (tmp_path / "my_saxpy.py").write_text(
        "import tack\n\n@tack.kernel\ndef saxpy(a, x, y):\n    i = tack.tid()\n"
        "    y[i] = a * x[i] + y[i]\n")
    other = tmp_path / "other.yaml"
    other.write_text(f"version: 1\nbuild:\n  archs:\n    cpu: [{host_arch()}]\n  kernels:\n"
                     "    - module: my_saxpy\n      kernel: saxpy\n"
                     "      args: [\"float32\", \"float32[64]\", \"float32[64]\"]\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    run = lambda cfg: subprocess.run([sys.executable, "-m", "tack.site", "bundles", "build",  # noqa: E731
                                      str(cfg), "--output", str(out_dir)], capture_output=True,
                                     text=True, timeout=300, env=env)
    r = run(other)
    assert r.returncode == 0, r.stdout + r.stderr
    dropped = whole_count(data)
    assert (f"the bundle replaced held {dropped} entries this build does not make" in r.stdout
            and "jobs that used them compile" in r.stdout), r.stdout
    r = run(other)
    assert r.returncode == 0 and "does not make" not in r.stdout, r.stdout
