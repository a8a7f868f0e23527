"""Bundles in one process: pack, bundle mode, damage, site bundles, the CLI (tack/cache/bundle.py)."""

import os
import subprocess
import sys

from tack.cache import bundle, bundle_write

from .conftest import clean_env, mpiexec, prime_and_pack, run_one, under


def listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_bundle_mode_opens_one_file_and_no_entry(kernel_dir, cache):
    """TACK_CACHE=bundle: results right, the bundle is the only cache file opened, both kernels hit."""
    path = prime_and_pack(kernel_dir, cache)
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["mode"] == "bundle"
    assert under(r["opened"], cache) == [str(path)]
    assert r["stats"]["hits"]["variant"] == 2


def test_kernel_missing_from_bundle_compiles_in_memory(kernel_dir, cache):
    """A kernel the bundle lacks compiles, runs right, and creates no file in the directory."""
    prime_and_pack(kernel_dir, cache)
    before = listing(cache)
    r = run_one(kernel_dir, cache, "--extra", TACK_CACHE="bundle")
    assert r["ok"]
    assert r["stats"]["hits"]["variant"] == 2 and r["stats"]["misses"]["variant"] == 1
    assert listing(cache) == before


def test_truncated_bundle_keeps_whole_entries(kernel_dir, cache):
    """A bundle cut inside its last entry: that entry is ignored, the others still load."""
    path = prime_and_pack(kernel_dir, cache)
    data = path.read_bytes()
    b = bundle.Bundle(data)
    last = max(off + length for off, length in b.index.values())
    assert last == len(data)
    path.write_bytes(data[:-10])
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"]
    assert r["stats"]["hits"]["variant"] + r["stats"]["hits"]["lowered"] >= 1
    assert r["stats"]["misses"]["variant"] >= 1


def test_flipped_entry_is_ignored_others_used(kernel_dir, cache):
    """One entry's bytes flipped: that kernel compiles again, the other still loads."""
    path = prime_and_pack(kernel_dir, cache)
    data = bytearray(path.read_bytes())
    b = bundle.Bundle(bytes(data))
    variants = sorted(v for (kind, _), v in b.index.items() if kind == 2)
    off, length = variants[0]
    data[off + length // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"]
    assert r["stats"]["hits"]["variant"] == 1 and r["stats"]["misses"]["variant"] == 1


def test_damaged_index_makes_bundle_unused_with_warning(kernel_dir, cache):
    """A bundle whose index fails its checksum is not used at all, with one warning naming it."""
    path = prime_and_pack(kernel_dir, cache)
    data = bytearray(path.read_bytes())
    data[60] ^= 0xFF                        # inside the header's text (meta/index)
    path.write_bytes(bytes(data))
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["stats"]["hits"]["variant"] == 0
    assert len(r["warnings"]) == 1 and "damaged" in r["warnings"][0]


def test_site_bundle_is_used_after_the_users_directory(kernel_dir, cache, tmp_path):
    """TACK_CACHE_BUNDLES: a site bundle serves kernels the user's own cache lacks."""
    path = prime_and_pack(kernel_dir, cache)
    site = tmp_path / "site"
    site.mkdir(mode=0o755)
    os.replace(path, site / path.name)
    empty = tmp_path / "own"
    empty.mkdir(mode=0o700)
    r = run_one(kernel_dir, empty, TACK_CACHE="read", TACK_CACHE_BUNDLES=str(site))
    assert r["ok"] and r["stats"]["hits"]["variant"] == 2
    assert str(site / path.name) in r["opened"]


def test_group_writable_site_bundle_is_refused(kernel_dir, cache, tmp_path):
    """A site bundle writable by its group is not trusted: a warning, and kernels compile."""
    path = prime_and_pack(kernel_dir, cache)
    site = tmp_path / "site"
    site.mkdir(mode=0o755)
    os.replace(path, site / path.name)
    os.chmod(site / path.name, 0o664)
    empty = tmp_path / "own"
    empty.mkdir(mode=0o700)
    r = run_one(kernel_dir, empty, TACK_CACHE="read", TACK_CACHE_BUNDLES=str(site))
    assert r["ok"] and r["stats"]["hits"]["variant"] == 0
    assert any("writable by its group" in w for w in r["warnings"])


def cli(cache, *args):
    return subprocess.run([sys.executable, "-m", "tack.cache", *args], env=clean_env(cache),
                          capture_output=True, text=True, timeout=120)


def test_info_lists_bundles_prune_keeps_them_clear_all_removes(kernel_dir, cache):
    """info shows each bundle's arch and entry count; prune leaves it; clear --all deletes it."""
    path = prime_and_pack(kernel_dir, cache)
    info = cli(cache, "info")
    assert info.returncode == 0
    head = bundle.header(str(path))
    line = next(ln for ln in info.stdout.splitlines() if path.name in ln)
    assert f"arch {head['arch']}" in line and f"{head['entries']} entries" in line
    assert cli(cache, "prune", "--max-size", "1K").returncode == 0
    assert path.exists()
    assert cli(cache, "clear", "--all").returncode == 0
    assert not path.exists()


def test_pack_output_and_unknown_arch(kernel_dir, cache, tmp_path):
    """pack --output writes there; pack --arch with an unknown name fails naming what is there."""
    prime_and_pack(kernel_dir, cache)
    out = tmp_path / "elsewhere.bundle"
    r = cli(cache, "pack", "--output", str(out))
    assert r.returncode == 0 and out.exists()
    assert len(bundle.Bundle(out.read_bytes())) == 2 + 2 + 0  # 2 lowered + 2 variants
    bad = cli(cache, "pack", "--arch", "no-such-cpu")
    assert bad.returncode == 1
    assert "unknown architecture 'no-such-cpu' (cpu:no-such-cpu: archspec knows no such CPU " \
        "microarchitecture" in bad.stderr and "; the cache holds: cpu:" in bad.stderr, bad.stderr


def test_bundle_in_a_group_writable_directory_is_refused(kernel_dir, cache):
    """A bundle whose directory others may write is not used (the file could be swapped): warning, compile."""
    prime_and_pack(kernel_dir, cache)
    os.chmod(cache, 0o770)
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["stats"]["hits"]["variant"] == 0
    assert any("writable by its group" in w for w in r["warnings"])


def test_symlinked_bundle_is_refused(kernel_dir, cache, tmp_path):
    """A bundle that is a symbolic link is not followed: warning, compile."""
    path = prime_and_pack(kernel_dir, cache)
    real = tmp_path / "real-bundle"
    os.replace(path, real)
    os.symlink(real, path)
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["stats"]["hits"]["variant"] == 0
    assert any("symbolic link" in w for w in r["warnings"])


def test_bundle_of_another_tack_version_is_refused(kernel_dir, cache):
    """A bundle packed by another Tack version is not used, with a warning that says so."""
    path = prime_and_pack(kernel_dir, cache)
    b = bundle.Bundle(path.read_bytes())
    entries = [(kind, key, b.data[off:off + n]) for (kind, key), (off, n) in b.index.items()]
    path.write_bytes(bundle_write.pack(entries, dict(b.meta, tack="0.0.1")))
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["stats"]["hits"]["variant"] == 0
    assert any("made by Tack 0.0.1" in w for w in r["warnings"])
    # what to do: warm up with this Tack, then pack (it said "pack it again", and pack alone then
    # found none of this Tack's entries to pack)
    assert any("run its kernels once with this Tack (a warm-up, TACK_CACHE=write), then pack it "
               "again" in w for w in r["warnings"]), r["warnings"]


LATE_LOAD = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import tack, tack.cache, kmod
x = np.arange(1000, dtype=np.float64)                    # the shape _rank.py primed
y = np.zeros_like(x)
tack.launch(kmod.k_extra, dim=x.size, args=(x, y))       # the session starts: the user's directory
loaded = tack.cache.load_bundle()                        # then a bundle, without MPI
ok = bool(np.allclose(y, x - 7.0))
for name in ("k_a", "k_b"):
    y = np.zeros_like(x)
    tack.launch(getattr(kmod, name), dim=x.size, args=(x, y))
    ok = ok and bool(np.allclose(y, kmod.REFERENCES[name](x)))
print(json.dumps({"ok": ok, "loaded": loaded, "stats": tack.cache.stats()}))
"""


def test_load_bundle_after_the_first_kernel(kernel_dir, cache):
    """load_bundle() called once a kernel already ran (the session was the user's directory
    alone): the bundle joins the lookups, and its kernels load from it."""
    prime_and_pack(kernel_dir, cache)
    for level in ("lowered", "variants"):                 # only the bundle can serve k_a and k_b
        for p in sorted(cache.glob(f"*/{level}/*/*")):
            p.unlink()
    proc = subprocess.run([sys.executable, "-c", LATE_LOAD, str(kernel_dir)], env=clean_env(cache),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    assert r["ok"] and r["loaded"] >= 4
    assert r["stats"]["hits"]["variant"] == 2 and r["stats"]["misses"]["variant"] == 1


def test_load_bundle_warns_of_an_unusable_gpu_bundle_and_serves_the_cpus(kernel_dir, cache):
    """load_bundle(comm) also reads the GPU kinds' packed bundles: one it cannot use (here not a
    bundle at all) is named in one warning, and this host's CPU bundle still serves."""
    path = prime_and_pack(kernel_dir, cache)
    bad = cache / bundle.bundle_name("0123456789abcdef" * 4, "spirv64")
    bad.write_bytes(b"not a bundle")
    bad.chmod(0o600)
    r = run_one(kernel_dir, cache, "--comm", TACK_CACHE="bundle")
    assert r["ok"] and r["loaded"] == len(bundle.Bundle(path.read_bytes()))
    assert r["stats"]["hits"]["variant"] == 2
    assert len(r["warnings"]) == 1 and bad.name in r["warnings"][0], r["warnings"]


def test_load_bundle_kinds_reads_only_the_kinds_asked_for(kernel_dir, cache):
    """``load_bundle(comm, kinds=[...])``: with ``["cpu"]`` rank 0 never reads the GPU bundle
    beside the CPU's (here not a bundle: no warning names it); with ``["cuda"]`` it reads no CPU
    bundle, says no asked-for kind had one, and the CPU session opens the directory's bundle
    itself, which serves both kernels; an unknown kind is a ValueError naming it."""
    path = prime_and_pack(kernel_dir, cache)
    bad = cache / bundle.bundle_name("0123456789abcdef" * 4, "spirv64")
    bad.write_bytes(b"not a bundle")
    bad.chmod(0o600)
    r = run_one(kernel_dir, cache, "--comm", "--kinds=cpu", TACK_CACHE="bundle")
    assert r["ok"] and r["loaded"] == len(bundle.Bundle(path.read_bytes())) and not r["warnings"], r
    assert bad.name not in " ".join(r["opened"])
    r = run_one(kernel_dir, cache, "--comm", "--kinds=cuda", TACK_CACHE="bundle")
    assert r["ok"] and r["loaded"] == 0 and r["stats"]["hits"]["variant"] == 2, r
    assert len(r["warnings"]) == 1 and "no kind of code asked for" in r["warnings"][0], r["warnings"]
    # (it went on "kernels compile as without a cache", and the CPU's were served from its bundle)
    assert r["warnings"][0].endswith("the kinds asked for compile as without a cache; the CPU's "
                                     "kernels, not asked for, are served as without load_bundle")
    # the cache off: named by the variable that turned it off (it said TACK_CACHE=off always)
    first, second = mpiexec(kernel_dir, cache, n=2, flags=("--comm",), TACK_CACHE_MPI="off")
    assert first["ok"] and second["ok"] and first["loaded"] == second["loaded"] == 0, first
    assert first["warnings"] == ["tack: not using a bundle: the cache is off (TACK_CACHE_MPI=off); "
                                 "kernels compile as without a cache"], first["warnings"]
    assert second["warnings"] == [], second
    r = run_one(kernel_dir, cache, "--comm", "--kinds=", TACK_CACHE="bundle")
    assert r["ok"] and r["loaded"] == 0 and r["stats"]["hits"]["variant"] == 2, r
    assert r["warnings"] == ["tack: load_bundle: kinds names no kind of code (kinds=[]); no bundle read, "
                             "kernels are served as without load_bundle"], r["warnings"]
    proc = subprocess.run([sys.executable, "-c",
                           "import tack.cache; tack.cache.load_bundle(kinds=['cpu', 'gpu'])"],
                          env=clean_env(cache), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "ValueError" in proc.stderr and "'gpu'" in proc.stderr, proc.stderr


def test_load_bundle_refuses_another_targets_bundle_under_this_hosts_name(kernel_dir, cache):
    """Another host's bundle copied under this host's name: load_bundle counted its entries as
    read and said nothing, while every kernel compiled (their keys name the other target).  It
    is refused now, with a warning naming it, 0 entries; the kernels compile, right."""
    path = prime_and_pack(kernel_dir, cache)
    real = bundle.Bundle(path.read_bytes())
    entries = bundle_write.valid_entries(real)
    meta = dict(real.meta, target_key="f" * 64)
    path.write_bytes(bundle_write.pack(entries, meta))
    path.chmod(0o600)
    r = run_one(kernel_dir, cache, "--comm", TACK_CACHE="bundle")
    assert r["ok"] and r["loaded"] == 0, r
    assert len(r["warnings"]) == 1 and "holds code for another target" in r["warnings"][0] \
        and path.name in r["warnings"][0], r["warnings"]
    # bundle mode without load_bundle (the MPI default) said nothing, and info called it fine
    r = run_one(kernel_dir, cache, TACK_CACHE="bundle")
    assert r["ok"] and r["stats"]["misses"]["variant"] == 2, r
    assert len(r["warnings"]) == 1 and "holds code for another target" in r["warnings"][0] \
        and path.name in r["warnings"][0], r["warnings"]
    info = subprocess.run([sys.executable, "-m", "tack.cache", "info"], env=clean_env(cache),
                          capture_output=True, text=True, timeout=120)
    assert f"{path.name}" in info.stdout and "ANOTHER TARGET'S, not used" in info.stdout, info.stdout
