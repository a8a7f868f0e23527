"""A user's warm path against site bundles and bundles replaced, damaged or read without MPI:
what a job computes, where its variants came from, and what it is told."""

import os
import textwrap

from .conftest import check_results, drop_dac_caps, run_child, run_cli
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
    assert f"looked up in the site bundles of {site}" in msg, msg


def test_a_site_bundle_copied_over_in_place_is_said_and_no_longer_read(warm, tmp_path):
    """An admin replaces a site bundle with ``cp NEW OLD`` (written in place, not renamed) while a
    job has it open and has loaded a kernel from it.  The job then needs that kernel for another
    argument type: the lowered entry its index (read at open) lists is read from where the old
    file had it, and fails its checks.  That was logged as damage ("not a Tack cache entry"),
    the bundle then looked fine to every tool, and each later lookup read bytes of the new file
    at the old file's places.  Now: one warning naming the file and what happened, the bundle
    is no longer read by this process, and the results are right."""
    cache, src = warm
    site = site_bundle(tmp_path, src)
    (name,) = os.listdir(site)
    new = tmp_path / "new-bundle"                       # another bundle's bytes: KMOD's own, packed
    assert run_cli(cache, "pack", "--output", str(new)).rc == 0
    after = textwrap.dedent(f"""
        import subprocess
        subprocess.run(["cp", {str(new)!r}, {str(site / name)!r}], check=True)
        a = np.arange(5, dtype=np.float32)
        out = np.zeros(5, dtype=np.float32)
        tack.launch(mod.k_other, 5, (a, out))
        extra = out.tolist()
    """)
    run = run_child(tmp_path / "own", src, ONE, env={"TACK_CACHE_BUNDLES": str(site)}, after=after)
    check_results(run)                                  # the float64 launch, from the site bundle
    assert run.stats["variants_from"] == {"site bundles": 1}
    assert run.data["extra"] == [x * x - 1.0 for x in range(5)]
    (msg,) = messages(run)
    assert str(site / name) in msg and "written in place" in msg, msg
    assert run.stats["damaged"] == 0


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
