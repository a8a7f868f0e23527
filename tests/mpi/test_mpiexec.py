"""Real MPI jobs (mpiexec -n 4, mpi4py): bundle mode, load_bundle(comm), write mode."""

import os

import pytest

from tack.cache import bundle, entry

from .conftest import mpiexec, prime_and_pack, under


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


def test_write_mode_under_mpi_only_rank0_stores(kernel_dir, cache):
    """TACK_CACHE=write under MPI: a kernel only ranks 1-3 launch leaves no entry; rank 0's do."""
    ranks = mpiexec(kernel_dir, cache, 1, mpmd=[(3, ["--extra"])], TACK_CACHE="write")
    assert all(r["ok"] for r in ranks) and len(ranks) == 4
    kernels = set()
    for p in cache.rglob("*.tvar"):
        _, meta, _ = entry.decode(p.read_bytes(), entry.KIND_VARIANT)
        kernels.add(meta["kernel"])
    assert kernels == {"k_a", "k_b"}
