"""Real MPI jobs (mpiexec -n 4, mpi4py): bundle mode, load_bundle(comm), write mode."""

import os
import shutil
import subprocess
import sys

import pytest

from tack.cache import bundle, entry

from .conftest import clean_env, mpiexec, prime_and_pack, run_one, under


def test_bundle_mode_is_the_default_under_mpi(kernel_dir, cache):
    """4 ranks, no TACK_CACHE: every rank uses bundle mode, opens the bundle once and no entry file."""
    path = prime_and_pack(kernel_dir, cache)
    ranks = mpiexec(kernel_dir, cache, 4)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for r in ranks:
        assert r["ok"] and r["mode"] == "bundle"
        assert under(r["opened"], cache) == [str(path)], r["opened"]
        assert r["stats"]["hits"]["variant"] == 2


def test_load_bundle_reads_on_rank0_only(kernel_dir, cache):
    """load_bundle(comm): only rank 0 opens the bundle; every rank gets the same entry count."""
    path = prime_and_pack(kernel_dir, cache)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"])
    for r in ranks:
        assert r["ok"] and r["loaded"] == expected
        assert r["stats"]["hits"]["variant"] == 2
        assert r["stats"]["variants_from"] == {"broadcast bundle": 2}, r["stats"]
        assert under(r["opened"], cache) == ([str(path)] if r["rank"] == 0 else []), r["opened"]


@pytest.mark.parametrize("problem", ["missing", "damaged", "group-writable"])
def test_load_bundle_unusable_on_rank0(kernel_dir, cache, problem):
    """Missing, damaged or group-writable bundle: rank 0 warns why, all ranks return 0, results right."""
    path = prime_and_pack(kernel_dir, cache)
    if problem == "missing":
        path.unlink()
    elif problem == "damaged":
        data = bytearray(path.read_bytes())
        data[50] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        os.chmod(path, 0o664)
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], timeout=120)
    assert len(ranks) == 4
    words = {"missing": "no bundle", "damaged": "damaged", "group-writable": "writable by its group"}
    for r in ranks:
        assert r["ok"] and r["loaded"] == 0
        if r["rank"] == 0:
            assert any(words[problem] in w for w in r["warnings"]), r["warnings"]
        else:                               # nobody else goes to the file system for it
            assert under(r["opened"], cache) == [] and r["warnings"] == []


@pytest.mark.parametrize("share", [{}, {"TACK_TEST_NO_SHARE": "1"}], ids=["share", "no-share"])
def test_a_rank_without_memory_for_the_broadcast_neither_hangs_the_job_nor_fails(kernel_dir, cache, share):
    """A rank that could not make its copy of a broadcast bundle (MemoryError) left the other ranks
    in a broadcast it never joined: the job hung until its time ran out.  The ranks now agree
    first: nothing is sent, rank 0 serves from the bundle it read, the others as without one (their
    kernels compile), and every rank's results are right; rank 0 says so (it was only logged)."""
    path = prime_and_pack(kernel_dir, cache)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], timeout=60, TACK_TEST_NO_MEMORY_RANK="2", **share)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for r in ranks:
        assert r["ok"] and r["loaded"] == (expected if r["rank"] == 0 else 0), r
    assert ranks[0]["stats"]["hits"]["variant"] == 2 and not ranks[0]["llvmlite"]
    # said, by rank 0 alone (it was only logged: the ranks' kernels compiled, silently)
    assert [w for w in ranks[0]["warnings"] if "no memory" in w] == [
        f"tack: load_bundle: 1 of 4 ranks had no memory for a copy of {path} ({path.stat().st_size} bytes); "
        "it is not broadcast: rank 0 serves from it, the other ranks' kernels it holds compile as "
        "without a cache"], ranks[0]["warnings"]
    assert all(r["warnings"] == [] for r in ranks[1:]), ranks


def test_write_mode_under_mpi_only_rank0_stores(kernel_dir, cache):
    """TACK_CACHE=write under MPI: a kernel only ranks 1-3 launch leaves no entry; rank 0's do."""
    ranks = mpiexec(kernel_dir, cache, 1, mpmd=[(3, ["--extra"])], TACK_CACHE="write")
    assert all(r["ok"] for r in ranks) and len(ranks) == 4
    kernels = set()
    for p in cache.rglob("*.tvar"):
        _, meta, _ = entry.decode(p.read_bytes(), entry.KIND_VARIANT)
        kernels.add(meta["kernel"])
    assert kernels == {"k_a", "k_b"}


def test_load_bundle_on_nodes_of_two_cpus_serves_each_its_own_bundle(kernel_dir, cache):
    """A job over nodes of two CPU kinds (odd ranks another CPU, another host key): rank 0's
    bundle went to every rank, and the odd ranks found none of their kernels in it and compiled
    them.  The ranks are split by CPU: rank 0 and rank 1 each read their kind's bundle once and
    broadcast it to their own kind, and no rank compiles."""
    first = prime_and_pack(kernel_dir, cache)
    other = run_one(kernel_dir, cache, TACK_CACHE="write", TACK_TEST_OTHER_CPU="all")
    assert other["ok"] and other["stats"]["misses"]["variant"] == 2
    proc = subprocess.run([sys.executable, "-m", "tack.cache", "pack"], env=clean_env(cache),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    second = [p for p in sorted(cache.glob("bundle-*")) if p != first]
    assert len(second) == 1 and other["host_key"] != run_one(kernel_dir, cache)["host_key"]
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], TACK_TEST_OTHER_CPU="odd")
    assert [r["host_key"] == other["host_key"] for r in ranks] == [False, True, False, True]
    for r in ranks:
        assert r["ok"] and not r["llvmlite"], r
        assert r["stats"]["hits"]["variant"] == 2 and r["loaded"] > 0
        wanted = {0: [str(first)], 1: [str(second[0])]}.get(r["rank"], [])
        assert under(r["opened"], cache) == wanted, r["opened"]


def _site_bundles_for_kmod(kernel_dir, tmp_path):
    """A site directory as `bundles build` makes it: the kernels k_a and k_b, built for the family's
    generic level (every node of it runs that code)."""
    import platform
    arch = {"x86_64": "x86_64_v2", "aarch64": "aarch64"}.get(platform.machine())
    if arch is None:
        pytest.skip(f"site bundles are built for x86_64 and aarch64 here, not {platform.machine()}")
    cfg = tmp_path / "site.yaml"
    kernels = "".join(f"    - module: kmod\n      kernel: {k}\n"
                      "      args: ['float64[1000]', 'float64[1000]']\n" for k in ("k_a", "k_b"))
    cfg.write_text(f"version: 1\nbuild:\n  archs:\n    cpu: [{arch}]\n  kernels:\n{kernels}")
    site = tmp_path / "site"
    # built by the Tack under test, as the ranks import it (the caller's PYTHONPATH kept): where
    # another Tack is installed, one made by it is another version's bundle, which no rank uses
    path = os.pathsep.join([str(kernel_dir)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "build", str(cfg), "--output",
                           str(site)], env=clean_env(tmp_path / "build-cache", PYTHONPATH=path),
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (name,) = os.listdir(site)
    return site, site / name


def test_load_bundle_broadcasts_the_site_bundles_so_no_other_rank_opens_them(kernel_dir, cache, tmp_path):
    """A site install and a new user (no cache of their own) in a 4-rank job: without load_bundle
    every rank lists the site directory and opens its bundle (on a parallel file system, metadata
    requests of every rank); with load_bundle(comm) rank 0 alone opens it and broadcasts it, every
    rank's kernels come from it, nothing compiles, and no warning says a bundle is missing."""
    site, path = _site_bundles_for_kmod(kernel_dir, tmp_path)
    expected = len(bundle.Bundle(path.read_bytes()))
    alone = mpiexec(kernel_dir, cache, 4, TACK_CACHE_BUNDLES=str(site))
    for r in alone:
        assert r["ok"] and not r["llvmlite"] and r["stats"]["variants_from"] == {"site bundles": 2}
        # the bundle it reads, and not the one a site directory may hold packed for this host:
        # the directory's listing, made once, says there is none
        assert under(r["opened"], site) == [str(path)], r["opened"]
    shutil.rmtree(f"{kernel_dir}-reports")
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], TACK_CACHE_BUNDLES=str(site))
    for r in ranks:
        assert r["ok"] and not r["llvmlite"], r
        assert r["loaded"] == expected and r["stats"]["variants_from"] == {"site bundles": 2}
        assert under(r["opened"], site) == ([str(path)] if r["rank"] == 0 else []), r["opened"]
        assert r["warnings"] == [], r["warnings"]


def test_load_bundle_on_nodes_of_two_cpus_chooses_site_bundles_once_per_cpu(kernel_dir, cache, tmp_path):
    """A new user's 4-rank job over nodes of two CPU kinds (odd ranks another host key) on a site
    install: the ranks are split by CPU, and each kind's first rank (0 and 1) chooses and reads
    the site bundle for its kind and broadcasts it to its own; the other ranks open nothing, and
    every rank's kernels come from the site bundle, nothing compiled."""
    site, path = _site_bundles_for_kmod(kernel_dir, tmp_path)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], TACK_CACHE_BUNDLES=str(site),
                    TACK_TEST_OTHER_CPU="odd")
    assert len({r["host_key"] for r in ranks}) == 2
    for r in ranks:
        assert r["ok"] and not r["llvmlite"], r
        assert r["loaded"] == expected and r["stats"]["variants_from"] == {"site bundles": 2}, r
        assert under(r["opened"], site) == ([str(path)] if r["rank"] in (0, 1) else []), r["opened"]
        assert r["warnings"] == [], r["warnings"]


def test_load_bundle_after_rank0_ran_a_kernel_makes_the_same_calls_on_every_rank(kernel_dir, cache, tmp_path):
    """Rank 0 ran a kernel before load_bundle(comm) (its session made, the others' not): every rank
    still makes the same collective calls, so the job's own broadcast after it reaches every
    rank. Each rank's state decided whether it took part in the site bundles' broadcast: rank 1
    took the job's message for it, then hung in the job's own broadcast."""
    site, path = _site_bundles_for_kmod(kernel_dir, tmp_path)
    ranks = mpiexec(kernel_dir, cache, 2, flags=["--comm", "--warm-rank0"], TACK_CACHE_BUNDLES=str(site),
                    timeout=120)
    assert len(ranks) == 2
    for r in ranks:
        assert r["ok"] and not r["llvmlite"] and r["app_bcast"] == "the job's own", r
        assert r["stats"]["variants_from"] == {"site bundles": 2}, r["stats"]


def test_rank0_reads_site_bundles_whole_and_keeps_no_descriptor(kernel_dir, tmp_path):
    """Where the choice read no header (archspec's answer, on a host without cpuinfo features), rank
    0 read the chosen bundle on a descriptor it then kept for the life of the process."""
    from tack.cache import bcast, new_stats
    site, path = _site_bundles_for_kmod(kernel_dir, tmp_path)
    arch = "cpu:" + path.name.split("-cpu-")[1].rsplit("-", 1)[0]
    key = bundle.header(str(path))["target_key"]
    fds = lambda: len(os.listdir("/proc/self/fd"))      # noqa: E731
    before = fds()
    choice = lambda names, header, defer=None: [(arch, key, path.name)]      # noqa: E731 - reads no header
    rows = bcast._site_bundles_in(str(site), "no-host-bundle-here", choice, lambda message: None,
                                  new_stats())
    assert [(r[1], r[2]) for r in rows] == [(arch, key)]
    assert fds() == before
    assert len(rows[0][3]) == len(bundle.Bundle(path.read_bytes()))


def _shared_mapping(ranks):
    """The one shared mapping every rank serves its bundle from: (device, inode)."""
    found = {tuple(r["memory"][1:3]) for r in ranks}
    for r in ranks:
        assert isinstance(r["memory"], list) and "s" in r["memory"][0], r["memory"]
    assert len(found) == 1, [r["memory"] for r in ranks]
    return found.pop()


def test_load_bundle_keeps_one_copy_per_node_in_shared_memory(kernel_dir, cache):
    """load_bundle(comm) with 4 ranks on one node, of a bundle as big as the sharing's threshold
    (lowered, for the test kernels' small bundle, to 0): every rank serves the bundle from one
    shared mapping (the same device and inode in each, mapped shared), not a copy each (rank 0
    lets go of the bytes it read); every result right and nothing compiled.  With share=False,
    or where /dev/shm has no room for it, each rank holds its own copy, as before, and is served
    alike; so with a bundle under the threshold (the default 4 MiB), and then no window is made."""
    path = prime_and_pack(kernel_dir, cache)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], TACK_TEST_SHARE_FROM="0")
    for r in ranks:
        assert r["ok"] and r["loaded"] == expected and not r["llvmlite"], r
        assert r["stats"]["hits"]["variant"] == 2 and r["windows"] == 1
    _shared_mapping(ranks)
    for env in ({"TACK_TEST_NO_SHARE": "1", "TACK_TEST_SHARE_FROM": "0"},
                {"TACK_TEST_NO_SHM_ROOM": "1", "TACK_TEST_SHARE_FROM": "0"}, {}):
        ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], **env)
        for r in ranks:
            assert r["ok"] and r["loaded"] == expected and not r["llvmlite"], (env, r)
            assert r["stats"]["hits"]["variant"] == 2 and r["memory"] == "private", (env, r)
            assert r["windows"] == 0, (env, r)


def _padded(path, nbytes):
    """The bundle at ``path`` written again with one more entry of ``nbytes`` payload (a kernel no
    rank looks up): a bundle big enough that what load_bundle holds of it outweighs the rest."""
    from tack.cache import bundle_write
    b = bundle.read(str(path), whole=True)
    rows = bundle_write.valid_entries(b)
    key = "ab" * 32
    rows.append((entry.KIND_LOWERED, key, entry.encode(
        entry.KIND_LOWERED, key, {"kernel": "padding", "dep": [["padding", "tack", "module", "tack"]]},
        os.urandom(nbytes))))
    return bundle_write.write(str(path), rows, dict(b.meta))


@pytest.mark.parametrize("share", [{"TACK_TEST_NO_SHARE": "1"}, {"TACK_TEST_NO_SHM_ROOM": "1"}],
                         ids=["share-false", "no-room"])
def test_a_bundle_copied_to_each_rank_is_held_once_on_each(kernel_dir, cache, share):
    """load_bundle(comm) without the node's shared memory: each rank held the bundle twice while
    its copy was made (rank 0 copied the bytes it read to send them; the others received into a
    buffer, then copied it into the bytes their bundle served from): 634 MB at the peak for a
    301 MB bundle, where the ranks' agreement checked room for one copy only.  Now each rank's
    most memory held during load_bundle (tracemalloc's peak) is one copy and a little, and every
    rank is served from it."""
    path = prime_and_pack(kernel_dir, cache)
    size = _padded(path, 16 << 20)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = mpiexec(kernel_dir, cache, 2, flags=["--comm"], timeout=120, TACK_TEST_PEAK="1",
                    TACK_TEST_SHARE_FROM="0", **share)
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["ok"] and r["loaded"] == expected and not r["llvmlite"], r
        assert r["memory"] == "private" and r["stats"]["hits"]["variant"] == 2, r
        assert size <= r["peak"] < 1.25 * size, (r["rank"], r["peak"], size)


def test_a_shared_bundle_after_mpi_finalize_compiles_instead(kernel_dir, cache):
    """A kernel first launched after MPI.Finalize(), once the node's shared memory may be gone:
    the shared bundle is not read (no crash), the kernel compiles on every rank and its result
    is right."""
    report = run_one(kernel_dir, cache, "--extra", TACK_CACHE="write")
    assert report["ok"] and report["stats"]["misses"]["variant"] == 3
    proc = subprocess.run([sys.executable, "-m", "tack.cache", "pack"], env=clean_env(cache),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], TACK_TEST_FINALIZE="1",
                    TACK_TEST_SHARE_FROM="0")
    assert len(ranks) == 4
    _shared_mapping(ranks)
    for r in ranks:
        assert r["ok"] and r["stats"]["hits"]["variant"] == 2 and r["llvmlite"], r


def test_load_bundle_shares_on_each_node_of_a_job(kernel_dir, cache):
    """A job over two nodes (ranks 0 and 2 taken for one node, 1 and 3 for another): rank 0
    broadcasts the bundle to the other node's lowest rank (1), and each node's ranks serve it
    from their own node's shared mapping: two mappings, each shared by its node's two ranks.
    Every result right, nothing compiled, and only rank 0 opens the bundle."""
    path = prime_and_pack(kernel_dir, cache)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], TACK_TEST_SHARE_FROM="0",
                    TACK_TEST_TWO_NODES="1")
    for r in ranks:
        assert r["ok"] and r["loaded"] == expected and not r["llvmlite"], r
        assert r["stats"]["hits"]["variant"] == 2 and r["windows"] == 1, r
        assert under(r["opened"], cache) == ([str(path)] if r["rank"] == 0 else []), r["opened"]
    nodes = [_shared_mapping([r for r in ranks if r["rank"] % 2 == parity]) for parity in (0, 1)]
    assert nodes[0] != nodes[1], nodes


def test_a_node_that_cannot_make_the_window_gets_copies_and_the_job_goes_on(kernel_dir, cache):
    """Two nodes (ranks by parity), the MPI unable to make a shared window on the odd one: that
    node's ranks get a copy each, the even node's still share one, every result is right and no
    rank waits forever (before, the even node's ranks hung in the broadcast)."""
    path = prime_and_pack(kernel_dir, cache)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = mpiexec(kernel_dir, cache, 4, flags=["--comm"], TACK_TEST_SHARE_FROM="0",
                    TACK_TEST_TWO_NODES="1", TACK_TEST_NO_WINDOW="odd", timeout=60)
    assert len(ranks) == 4
    for r in ranks:
        assert r["ok"] and r["loaded"] == expected and not r["llvmlite"], r
        assert r["stats"]["hits"]["variant"] == 2
    _shared_mapping([r for r in ranks if r["rank"] % 2 == 0])
    assert [r["memory"] for r in ranks if r["rank"] % 2] == ["private", "private"]


def test_ranks_asking_for_different_kinds_agree_and_none_hangs(kernel_dir, cache, tmp_path):
    """Rank 0 asking for the CPU's code (``kinds=["cpu"]``) beside ranks asking only for CUDA's
    made the ranks' collective calls differ (the CPU's group and site bundles on rank 0 only):
    the other ranks failed inside MPI and rank 0 waited for ever.  The ranks now agree on the
    kinds any of them asked for: every rank gets the CPU bundle and runs from it.  A rank naming
    an unknown kind makes every rank raise that ValueError, naming the rank, and none hangs."""
    path = prime_and_pack(kernel_dir, cache)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = mpiexec(kernel_dir, cache, 1, flags=["--comm", "--kinds=cpu"],
                    mpmd=[(3, ["--comm", "--kinds=cuda"])], timeout=120)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for r in ranks:
        assert r["ok"] and r["loaded"] == expected, r
        assert r["stats"]["hits"]["variant"] == 2 and r["app_bcast"] == "the job's own", r
        assert under(r["opened"], cache) == ([str(path)] if r["rank"] == 0 else []), r["opened"]
    script = tmp_path / "kinds.py"
    script.write_text(
        "from mpi4py import MPI\n"
        "import tack.cache\n"
        "comm = MPI.COMM_WORLD\n"
        "try:\n"
        "    tack.cache.load_bundle(comm, kinds=['cpu', 'gpu'] if comm.Get_rank() == 2 else ['cpu'])\n"
        "except ValueError as e:\n"
        f"    open(f'{tmp_path}/rank{{comm.Get_rank()}}', 'w').write(str(e))\n")
    proc = subprocess.run([shutil.which("mpiexec"), "-n", "3", sys.executable, str(script)],
                          env=clean_env(cache), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [(tmp_path / f"rank{r}").read_text() for r in range(3)]
    assert all("unknown kind 'gpu'" in s for s in said), said
    assert said[0].endswith("(on rank 2)") and said[1] == said[0] and "(on rank" not in said[2], said


_HOSTILE = """
import json, os, sys, warnings
from mpi4py import MPI
import tack.cache, tack.cache.bcast
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
case = os.environ["CASE"]
tack.cache.bcast._NodeShare.MIN_BYTES = 0          # the test kernels' bundle is small
if case == "warnings-are-errors":
    warnings.simplefilter("error")
else:
    warnings.simplefilter("always")
    said = []
    warnings.showwarning = lambda message, *a, **k: said.append(str(message))
if case == "no-host-key" and rank == 1:            # this rank cannot tell its CPU's key
    import tack.cache.host
    def no_key():
        raise RuntimeError("no cpuinfo on this node (the test's)")
    tack.cache.host.cpu_host_key = no_key
report = {}
try:
    if case == "intercommunicator":
        local = comm.Split(rank % 2, rank)
        report["loaded"] = tack.cache.load_bundle(local.Create_intercomm(0, comm, 1 - rank % 2, tag=7))
    else:
        report["loaded"] = tack.cache.load_bundle(comm, share=(rank == 0) if case == "share" else True)
except Exception as e:
    report["raised"] = f"{type(e).__name__}: {e}"
report["app_bcast"] = comm.bcast("the job's own" if rank == 0 else None, root=0)
report["windows"] = len(tack.cache.bcast._windows)
if case != "warnings-are-errors":
    report["warnings"] = said
with open(os.path.join(os.environ["OUT"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
"""


def _hostile_job(tmp_path, cache, case, n=3, **env):
    """``n`` ranks calling load_bundle as ``case`` says (_HOSTILE), then the job's own broadcast;
    -> each rank's report, by rank.  A job that hangs fails on the timeout."""
    script, out = tmp_path / "hostile.py", tmp_path / f"out-{case}"
    script.write_text(_HOSTILE)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    proc = subprocess.run([shutil.which("mpiexec"), "-n", str(n), sys.executable, str(script)],
                          env=clean_env(cache, CASE=case, OUT=out, **env), capture_output=True,
                          text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


def test_a_warning_raised_as_an_error_on_rank0_leaves_no_rank_waiting(kernel_dir, cache, tmp_path):
    """Warnings as errors (python -W error, a test suite's filterwarnings) and no bundle: rank 0's
    "not using a bundle" warning was raised between two collective calls, so the other ranks took
    the job's own broadcast for load_bundle's (an MPI error there) or waited for ever.  Rank 0 now
    warns once every collective call is made: it alone raises its warning, the others get 0, and
    the job's broadcast reaches every rank.  A setting warned of on rank 0 alone (TACK_CACHE_MPI
    overriding TACK_CACHE) is raised on every rank, naming rank 0, before any broadcast."""
    ranks = _hostile_job(tmp_path, cache, "warnings-are-errors")
    assert "TackWarning" in ranks[0]["raised"] and "no bundle" in ranks[0]["raised"], ranks[0]
    for r in ranks:
        assert r["app_bcast"] == "the job's own", ranks
    assert [r.get("loaded") for r in ranks[1:]] == [0, 0], ranks
    ranks = _hostile_job(tmp_path, cache, "warnings-are-errors", TACK_CACHE="write",
                         TACK_CACHE_MPI="bundle")
    assert ranks[0]["raised"].startswith("TackWarning: tack: under MPI"), ranks[0]
    for r in ranks:
        assert r["app_bcast"] == "the job's own" and "TACK_CACHE_MPI=bundle" in r["raised"], ranks
    assert all(r["raised"].startswith("RuntimeError: load_bundle failed on rank 0: TackWarning")
               for r in ranks[1:]), ranks


def test_ranks_asking_to_share_or_not_agree_and_none_hangs(kernel_dir, cache, tmp_path):
    """share=True on rank 0, share=False on the others, with a bundle over the sharing threshold:
    rank 0 made the node's communicator and window while the others broadcast: the job hung.
    The ranks agree (a copy each, as where any rank asked share=False), every rank gets the
    bundle and the job's own broadcast."""
    path = prime_and_pack(kernel_dir, cache)
    expected = len(bundle.Bundle(path.read_bytes()))
    for r in _hostile_job(tmp_path, cache, "share"):
        assert r == {"loaded": expected, "app_bcast": "the job's own", "windows": 0, "warnings": []}, r


def test_an_intercommunicator_is_a_type_error_on_every_rank(kernel_dir, cache, tmp_path):
    """load_bundle(an intercommunicator): its broadcasts go between the two groups, each group's
    rank 0 waiting for the other's: the job hung.  Every rank now raises a TypeError saying so."""
    prime_and_pack(kernel_dir, cache)
    ranks = _hostile_job(tmp_path, cache, "intercommunicator", n=4)
    for r in ranks:
        assert r["raised"].startswith("TypeError: load_bundle: comm is an intercommunicator"), r
        assert r["app_bcast"] == "the job's own"


def test_a_rank_that_cannot_tell_its_cpu_says_why(kernel_dir, cache, tmp_path):
    """Rank 1 cannot tell its CPU's target key (it counts as a CPU of its own, the lowest rank of
    that kind): it warned "TypeError: 'NoneType' object is not subscriptable" (the bundle's name
    made of no key); it now says why it has no key.  The others get rank 0's bundle."""
    path = prime_and_pack(kernel_dir, cache)
    expected = len(bundle.Bundle(path.read_bytes()))
    ranks = _hostile_job(tmp_path, cache, "no-host-key")
    assert [r["loaded"] for r in ranks] == [expected, 0, expected], ranks
    assert [r["app_bcast"] for r in ranks] == ["the job's own"] * 3
    assert ranks[0]["warnings"] == ranks[2]["warnings"] == [], ranks
    assert len(ranks[1]["warnings"]) == 1 and "RuntimeError: no cpuinfo on this node" in ranks[1]["warnings"][0], ranks[1]
