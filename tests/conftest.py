"""Shared fixtures: a private kernel cache for the session, and tack.config read afresh around every test."""

import pytest

import tack
import tack.cache


@pytest.fixture(scope="session", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    """Point Tack's disk cache at a directory of this session, so no test sees kernels compiled by another process."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TACK_CACHE_DIR", str(tmp_path_factory.mktemp("tack-cache")))
        mp.delenv("TACK_CACHE", raising=False)
        for var in ("TACK_DEBUG", "TACK_TIMING", "TACK_NUM_THREADS"):
            mp.delenv(var, raising=False)
        tack.cache._reset_for_tests()
        yield
    tack.cache._reset_for_tests()


@pytest.fixture(autouse=True)
def _fresh_config():
    """Reset tack.config around each test so settings made by one test never leak into another."""
    tack.config.reset()
    yield
    tack.config.reset()
