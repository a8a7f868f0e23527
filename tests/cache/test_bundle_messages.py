"""Messages about bundles that name the right thing (issue 14): TACK_CACHE_BUNDLES entries that
cannot be used (a symbolic link, a file, a relative path) and site bundles that cannot be chosen
without archspec (made before their headers said what a node needs) are said once, naming the setting and the fix; ``pack --output DIR`` writes
into DIR."""

import os
import shutil
import subprocess
import sys
import textwrap

from .conftest import check_results, child_env, run_child, run_cli

ONE = [{"kernel": "k_other", "n": 5}]


def site_bundle(tmp_path, src, old=False, kernels=(("k_other", "float64"),), name=None):
    """A site directory holding a bundle of k_other built ahead of time for this node's CPU
    (``old``: its header without the CPU fields a node chooses by, as an older Tack wrote it;
    ``kernels``: [(kernel, dtype)] of KMOD's to hold instead; ``name``: the directory's name)."""
    site = tmp_path / (name or ("site-old" if old else "site"))
    site.mkdir()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(src)!r})
        import numpy as np, tack.aot, kmod
        from tack.backends.cpu_runtime import host_arch
        if {old!r}:
            tack.aot.requirements = lambda arch: {{}}
        arts = [tack.aot.compile(getattr(kmod, k), "cpu:" + host_arch(),
                                 args=(np.zeros(5, dt), np.zeros(5, dt))) for k, dt in {list(kernels)!r}]
        tack.aot.save_bundle(arts, {str(site)!r})
    """)
    p = subprocess.run([sys.executable, "-c", script], env=child_env(tmp_path / "aot-cache"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert len(os.listdir(site)) == 1
    return site


def messages(run):
    return [w["message"] for w in run.warnings]


def test_symlinked_bundle_directory_names_tack_cache_bundles(warm, tmp_path):
    """A TACK_CACHE_BUNDLES that is a symbolic link to a directory of bundles: one warning naming
    TACK_CACHE_BUNDLES and the real directory (not TACK_CACHE_DIR); the kernels still run."""
    cache, src = warm
    real = tmp_path / "real"
    real.mkdir()
    assert run_cli(cache, "pack").rc == 0
    (packed,) = [n for n in os.listdir(cache) if n.startswith("bundle-")]
    shutil.move(str(cache / packed), str(real / packed))
    link = tmp_path / "link"
    link.symlink_to(real)
    run = run_child(tmp_path / "own", src, ONE, env={"TACK_CACHE_BUNDLES": str(link)})
    check_results(run)
    (msg,) = messages(run)
    assert "TACK_CACHE_BUNDLES" in msg and str(link) in msg and "symbolic link" in msg
    assert str(real) in msg and "TACK_CACHE_DIR" not in msg


def test_file_or_relative_bundle_directory_is_said(warm, tmp_path):
    """A TACK_CACHE_BUNDLES naming a file, or a relative path, is a warning saying so, not ignored
    in silence; the kernels run."""
    cache, src = warm
    afile = tmp_path / "bundles.txt"
    afile.write_text("not a directory\n")
    for value, words in [(str(afile), "not a directory"), ("site/bundles", "not an absolute path")]:
        run = run_child(tmp_path / "own", src, ONE, env={"TACK_CACHE_BUNDLES": value},
                        cwd=str(tmp_path))
        check_results(run)
        (msg,) = messages(run)
        assert "TACK_CACHE_BUNDLES" in msg and value in msg and words in msg, msg


def test_site_bundles_without_archspec_are_used_or_said(stored_kmod, tmp_path):
    """Without archspec installed, a site bundle this node uses (it loads k_other from it) still
    serves: the node chooses it from its header and cpuinfo.  One whose header lacks those fields
    (an older Tack's) needs archspec: it is not used, with one warning naming the directory and
    archspec, and the kernel is compiled."""
    from tack.backends import cpu_choice, cpu_identity
    site = site_bundle(tmp_path, stored_kmod.src)
    own = tmp_path / "own"
    no_archspec = "import sys; sys.modules['archspec'] = None   # not installed"
    env = {"TACK_CACHE_BUNDLES": str(site), "TACK_CACHE": "read"}
    run = run_child(own, stored_kmod.src, ONE, env=env)
    check_results(run)
    assert run.stats["hits"]["variant"] == 1 and messages(run) == []
    run = run_child(own, stored_kmod.src, ONE, env=env, prelude=no_archspec)
    check_results(run)
    if cpu_choice.host_facts(cpu_identity.host_cpu_identity()) is not None:
        assert run.stats["hits"]["variant"] == 1 and messages(run) == []
    old = site_bundle(tmp_path, stored_kmod.src, old=True)
    run = run_child(own, stored_kmod.src, ONE, env=dict(env, TACK_CACHE_BUNDLES=str(old)),
                    prelude=no_archspec)
    check_results(run)
    assert run.stats["hits"]["variant"] == 0
    (msg,) = messages(run)
    assert str(old) in msg and "archspec" in msg and "not used" in msg


def test_pack_output_to_a_directory_writes_into_it(warm, tmp_path):
    """pack --output DIR writes the bundle into DIR under its usual name and says that path; a
    process reading it (bundle mode) loads the kernel from it."""
    cache, src = warm
    out = tmp_path / "out"
    out.mkdir()
    run = run_cli(cache, "pack", "--output", str(out))
    assert run.rc == 0, run.stderr
    (name,) = os.listdir(out)
    assert name.startswith("bundle-") and f"into {out / name}" in run.stdout
    assert ".tmp." not in run.stdout + run.stderr
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o700)
    shutil.copy(out / name, fresh / name)
    run = run_child(fresh, src, ONE, env={"TACK_CACHE": "bundle"})
    check_results(run)
    assert run.stats["hits"]["variant"] == 1
