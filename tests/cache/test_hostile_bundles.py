"""A user's warm path against site bundles and bundles replaced, damaged or read without MPI:
what a job computes, where its variants came from, and what it is told."""

import os
import textwrap

import numpy as np
import pytest

from .conftest import check_results, drop_dac_caps, entry_files, expect_main, run_child, run_cli
from .test_bundle_messages import ONE, messages, site_bundle


def test_load_bundle_without_mpi_does_not_say_kernels_compile_when_site_bundles_serve(
        stored_kmod, tmp_path):
    """A new user (no cache directory of their own) on a site install calls load_bundle()
    without a communicator: it has no bundle of the user's to read, and the site bundles are
    opened as lookups need them, and serve.  The warning said "kernels compile as without a
    cache"; it now says the site bundles are looked in."""
    site = site_bundle(tmp_path, stored_kmod.src)
    run = run_child(tmp_path / "own", stored_kmod.src, ONE,
                    env={"TACK_CACHE_BUNDLES": str(site)},
                    prelude="extra = tack.cache.load_bundle()")
    check_results(run)
    assert run.stats["variants_from"] == {"site bundles": 1}       # served, nothing compiled
    assert run.stats["misses"]["variant"] == 0
    (msg,) = messages(run)
    assert msg.startswith("tack: not using a bundle: ") and str(tmp_path / "own") in msg, msg
    assert "compile as without a cache" not in msg, msg
    assert msg.endswith(f"kernels are looked up in the entries of {tmp_path / 'own'} and the site "
                        f"bundles of {site} as they are needed, and compile where none serves "
                        "them"), msg


def test_load_bundle_in_write_mode_does_not_say_kernels_compile_when_entries_serve(warm):
    """load_bundle() of a user with a cache of entries and no bundle (never packed), in write
    mode: it said "kernels compile as without a cache", and then every kernel loaded from the
    directory's entries, as in write or read mode it is looked up there."""
    cache, src = warm
    run = run_child(cache, src, ONE, prelude="extra = tack.cache.load_bundle()")
    check_results(run)
    assert run.stats["variants_from"] == {"cache directory": 1}
    (msg,) = messages(run)
    assert msg.startswith("tack: not using a bundle: there is no bundle at "), msg
    assert f"kernels are looked up in the entries of {cache} as they are needed" in msg, msg
    bundle_mode = run_child(cache, src, ONE, env={"TACK_CACHE": "bundle"},
                            prelude="extra = tack.cache.load_bundle()")
    (msg,) = messages(bundle_mode)
    assert msg.endswith("; kernels compile as without a cache"), msg


def test_load_bundle_without_mpi_counts_its_hits_as_the_cache_bundles(warm):
    """load_bundle() without a communicator reads the user's own bundle, as bundle mode does:
    its hits were counted as from a "broadcast bundle" (``stats()["variants_from"]``, which the
    demo prints), though nothing was broadcast."""
    cache, src = warm
    assert run_cli(cache, "pack").rc == 0
    run = run_child(cache, src, ONE, env={"TACK_CACHE": "bundle"},
                    prelude="extra = tack.cache.load_bundle()")
    check_results(run)
    assert run.stats["variants_from"] == {"cache bundle": 1}, run.stats
    assert run.stats["misses"]["variant"] == 0 and messages(run) == []


# A site bundle of two kernels a job opens, and a newer build of it with one kernel more: every
# entry of the newer one is at another place (its index is a row longer).
OLD_SITE = (("k_other", "float64"), ("k_main", "float64"))
NEW_SITE = OLD_SITE + (("k_other", "float32"),)


def replaced_run(tmp_path, src, replace, between=""):
    """A job that loads k_other from the old site bundle (so it has it open), runs ``replace``
    (code given ``old``, ``new``: the bundle's path and a newer build's), launches k_main (the
    old bundle's index lists it), runs ``between``, then launches k_other for float32 (only the
    new bundle holds its variant); -> the run, its results checked."""
    site = site_bundle(tmp_path, src, kernels=OLD_SITE)
    newer = site_bundle(tmp_path, src, kernels=NEW_SITE, name="newer")
    (name,) = os.listdir(site)
    assert os.listdir(newer) == [name]          # the same architecture's bundle, rebuilt
    after = "\n".join([
        f"old, new = {str(site / name)!r}, {str(newer / name)!r}",
        textwrap.dedent(replace),
        "a = np.arange(5, dtype=np.float64)",
        "out = np.zeros(5)",
        "tack.launch(mod.k_main, 5, (a, out))",
        textwrap.dedent(between),
        "a32 = np.arange(5, dtype=np.float32)",
        "out32 = np.zeros(5, dtype=np.float32)",
        "tack.launch(mod.k_other, 5, (a32, out32))",
        'extra = {"k_main": out.tolist(), "k_other32": out32.tolist()}'])
    run = run_child(tmp_path / "own", src, ONE, env={"TACK_CACHE_BUNDLES": str(site)}, after=after)
    check_results(run)
    assert run.data["extra"] == {"k_main": expect_main(np.arange(5.0)).tolist(),
                                 "k_other32": [x * x - 1.0 for x in range(5)]}
    return run, str(site / name)


def test_a_site_bundle_copied_over_in_place_is_opened_again_and_serves(warm, tmp_path):
    """An admin replaces a site bundle with ``cp NEW OLD`` (written in place, not renamed) while a
    job has it open and has loaded a kernel from it.  The job then needs k_main, which the index it
    read at open lists at a place that now holds other bytes of the new file: the entry fails its
    checks.  That job used to stop reading the bundle (one warning) and compile every kernel it
    still needed.  Now it sees that the file changed since it opened it, opens it again and serves
    k_main from the new bundle, and k_other for float32, which only the new one holds: nothing
    compiles, no warning, nothing counted as damaged."""
    _, src = warm
    run, _ = replaced_run(tmp_path, src, """
        import subprocess
        subprocess.run(["cp", new, old], check=True)
    """)
    assert run.stats["variants_from"] == {"site bundles": 3}, run.stats
    assert run.stats["misses"]["variant"] == 0 and run.stats["damaged"] == 0, run.stats
    assert messages(run) == []


def test_a_site_bundle_read_while_a_cp_writes_it_is_never_misread(warm, tmp_path):
    """The job looks k_main up while the ``cp`` has written only the new bundle's first 100 bytes
    over the old one: the entry at its old place fails its checks, and the file opened again is
    not a whole bundle.  k_main compiles (right), and one warning names the file and says how to
    replace a bundle.  Once the ``cp`` is done, the next lookup opens the file again (it changed
    since that failed open) and k_other for float32 comes from it."""
    _, src = warm
    run, path = replaced_run(tmp_path, src, """
        with open(new, "rb") as f:
            data = f.read()
        cp = open(old, "r+b")                   # as cp writes: truncate, then in order
        cp.truncate(0)
        cp.write(data[:100])
        cp.flush()
    """, between="""
        cp.write(data[100:])
        cp.close()
    """)
    assert run.stats["variants_from"] == {"site bundles": 2}, run.stats   # k_other, both types
    assert run.stats["misses"]["variant"] == 1, run.stats                 # k_main: compiled
    (msg,) = messages(run)
    # (a file cut inside its header and index table: said so, where it said "its header does
    # not match its checksum", as of a bit flipped)
    assert "the site bundle for cpu:" in msg and f"{path} was replaced while this process had " \
        "it open, and the file there now is cut short or damaged (its header and index table " \
        "take " in msg and "the file has 100)" in msg and "renaming a whole new file over it" \
        in msg, msg


def test_a_site_bundle_renamed_over_keeps_serving_the_file_the_job_opened(warm, tmp_path):
    """An admin replaces the bundle as ``bundles build`` does (a new file renamed over it): the
    job, which has the old file open, reads k_main from it (the old inode, whole), with no
    warning; k_other for float32, which only the new file holds, is compiled: while the file it
    opened serves, a job does not look at the new one (the next process opens it)."""
    _, src = warm
    run, _ = replaced_run(tmp_path, src, """
        import os, shutil
        shutil.copyfile(new, old + ".new")
        os.replace(old + ".new", old)
    """)
    assert run.stats["variants_from"] == {"site bundles": 2}, run.stats
    assert run.stats["misses"]["variant"] == 1 and run.stats["damaged"] == 0, run.stats
    assert messages(run) == []


def test_a_site_directory_the_user_cannot_list_is_said(stored_kmod, tmp_path):
    """A site bundle directory that is there but that this user cannot list (mode 0311: its
    owner may search it, but not read it): its bundles cannot be chosen, so every kernel
    compiles, in every job.  That was said only in the debug log, while ``bundles status`` and
    ``bundles check`` fail on it; now one warning names the directory and why."""
    site = site_bundle(tmp_path, stored_kmod.src)
    site.chmod(0o311)
    try:
        run = run_child(tmp_path / "own", stored_kmod.src, ONE, env={"TACK_CACHE_BUNDLES": str(site)},
                        preexec_fn=drop_dac_caps)
    finally:
        site.chmod(0o755)
    check_results(run)
    assert run.stats["variants_from"] == {} and run.stats["misses"]["variant"] == 1
    (msg,) = messages(run)
    assert f"cannot list the site bundle directory {site}" in msg and "Permission denied" in msg, msg


@pytest.mark.parametrize("what", ["bundle", "directory"])
def test_a_site_bundle_the_user_cannot_read_is_said_once_and_its_kernels_compile(stored_kmod,
                                                                                 tmp_path, what):
    """A site bundle the user cannot read (mode 0000, as a bundle copied in as 0600 is to every
    other user), or a directory of bundles the user can neither list nor search (0000): the job
    runs, right, with one warning naming what it cannot read and the chmod that fixes it (for
    two kernels the bundle holds), and the kernels it compiled are stored in the user's own
    cache."""
    site = site_bundle(tmp_path, stored_kmod.src, kernels=OLD_SITE)
    (name,) = os.listdir(site)
    shut = site / name if what == "bundle" else site
    shut.chmod(0o000)
    try:
        run = run_child(tmp_path / "own", stored_kmod.src, ONE + [{"kernel": "k_main", "n": 5}],
                        env={"TACK_CACHE_BUNDLES": str(site)}, preexec_fn=drop_dac_caps)
    finally:
        shut.chmod(0o644 if what == "bundle" else 0o755)
    check_results(run)
    assert run.stats["variants_from"] == {} and run.stats["misses"]["variant"] == 2, run.stats
    (msg,) = messages(run)
    assert str(shut) in msg and "Permission denied" in msg, msg
    assert f"chmod a+r{'x' if what == 'directory' else ''} {shut}" in msg, msg
    assert sorted(p.suffix for p in entry_files(tmp_path / "own")) == [".tlk", ".tlk", ".tvar", ".tvar"]


CUT_IN_PLACE = """
import os
path = {path!r}
with open(path, "rb") as f:
    whole = f.read()
with open(path, "r+b") as f:            # a cp over it has written its first 100 bytes
    f.truncate(0)
    f.write(whole[:100])
"""
CP_DONE = """
with open(path, "r+b") as f:            # the cp done: the same file, whole
    f.seek(100)
    f.write(whole[100:])
a = np.arange(5, dtype=np.float64)
out = np.zeros(5)
tack.launch(mod.k_main, 5, (a, out))
extra = {"k_main": out.tolist()}
"""


@pytest.mark.parametrize("which", ["own bundle", "site bundle"])
def test_a_bundle_met_half_copied_at_the_first_lookup_serves_once_whole(warm, tmp_path, which):
    """A job's first lookup meets a bundle that a ``cp`` over it has only half written (its header
    cut): that kernel compiles, and one warning says so.  The process used to leave the bundle
    for good, and compile every kernel of its life, the ``cp`` done or not (ranks started during
    an admin's ``cp``, in bundle mode); now a later lookup opens it again once it has changed,
    and k_main is served from it."""
    cache, src = warm
    if which == "own bundle":
        assert run_cli(cache, "pack").rc == 0
        (path,) = [cache / n for n in os.listdir(cache) if n.startswith("bundle-")]
        where, env = cache, {"TACK_CACHE": "bundle"}
    else:
        site = site_bundle(tmp_path, src, kernels=OLD_SITE)
        (path,) = [site / n for n in os.listdir(site)]
        where, env = tmp_path / "own", {"TACK_CACHE_BUNDLES": str(site)}
    run = run_child(where, src, ONE, env=env, prelude=CUT_IN_PLACE.format(path=str(path)),
                    after=CP_DONE)
    check_results(run)
    assert run.data["extra"] == {"k_main": expect_main(np.arange(5.0)).tolist()}
    assert run.stats["misses"]["variant"] == 1, run.stats        # k_other, during the cp
    assert sum(run.stats["variants_from"].values()) == 1, run.stats  # k_main, after it
    (msg,) = messages(run)
    assert str(path) in msg and "too short" in msg or "damaged" in msg, msg


def test_a_bundle_cut_short_behind_its_index_is_said_once_and_counted_as_it_is(stored_many, tmp_path):
    """A packed bundle cut short after its index (a copy or write that did not finish): its
    entries past the cut were refused one by one as damaged and their kernels compiled, without
    a word, and ``load_bundle()`` counted every entry of the index as read.  One warning now says
    the file is cut short and how many entries it lost, and ``load_bundle()`` counts those left;
    every result is right and the entries before the cut still serve."""
    from tack.cache import bundle
    from .conftest import clone
    cache = clone(stored_many.cache, tmp_path / "cache")
    assert run_cli(cache, "pack").rc == 0
    (path,) = [p for p in cache.iterdir() if p.name.startswith("bundle-")]
    b = bundle.read(str(path), allow_root=True)
    total = len(b)
    b.close()
    size = path.stat().st_size
    os.truncate(path, size - (size - 16000) // 2 if size > 20000 else size * 3 // 4)
    b = bundle.read(str(path), allow_root=True)
    left = b.present()
    assert b.cut() is not None and 0 < left < total
    b.close()
    launches = [{"kernel": f"k{j:02d}", "n": 4} for j in range(20)]
    expected = {f"k{j:02d}": (lambda a, j=j: a * j + j) for j in range(20)}
    for prelude in ("", "extra = tack.cache.load_bundle()"):
        run = run_child(cache, stored_many.src, launches, module="kmany", prelude=prelude,
                        env={"TACK_CACHE": "bundle"})
        check_results(run, expected)
        (msg,) = messages(run)
        assert " is cut short (" in msg and f"of {total} entries are lost" in msg, msg
        assert run.stats["variants_from"].get("cache bundle", 0) > 0        # those before the cut
        if prelude:
            assert run.data["extra"] == left
