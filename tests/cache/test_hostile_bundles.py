"""A user's warm path against site bundles and bundles replaced, damaged or read without MPI:
what a job computes, where its variants came from, and what it is told."""

from .conftest import check_results, run_child
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
