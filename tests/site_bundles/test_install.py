"""``python -m tack.site bundles install PREFIX``: a package's one command to build and check the
bundles of an install prefix with the Tack installed there (tack/site/install.py), and ``bundles
check`` failing on a stale bundle."""

import io
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import tack
from tack import __version__
from tack.archs import generic_level
from tack.cache import bundle
from tack.site import install
from tack.site.config import load
from tack.site.errors import SiteError

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = ROOT / "tests" / "packaging" / "site.yaml"


@pytest.mark.parametrize("name, level", [
    ("zen3", "x86_64_v3"), ("haswell", "x86_64_v3"), ("icelake", "x86_64_v4"),
    ("x86_64_v4", "x86_64_v4"), ("core2", "x86_64"), ("neoverse_v2", "aarch64"),
    ("aarch64", "aarch64"), ("power9le", "ppc64le")])
def test_generic_level(name, level):
    assert generic_level(name) == level


def test_target_archs_are_each_target_and_its_level_then_the_archs():
    assert install.target_archs(["zen3"], []) == ["cpu:zen3", "cpu:x86_64_v3"]
    assert install.target_archs(["cpu:x86_64_v3", "haswell"], ["cuda:sm_90", "level_zero:acm"]) == \
        ["cpu:x86_64_v3", "cpu:haswell", "cuda:sm_90", "level_zero:dg2"]


def installed_prefix(tmp_path):
    """A prefix with this checkout's Tack installed in it as pip installs a package: the package
    directory in the prefix's site-packages (so the installed Tack is Tack __version__, not a
    checkout's 0.1.0+src.<hash>)."""
    prefix = tmp_path / "prefix"
    site = pathlib.Path(install.site_dirs(str(prefix))[0])
    shutil.copytree(pathlib.Path(tack.__file__).parent, site / "tack",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return prefix, site


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(extra)
    return env


def test_install_from_the_sources_builds_with_the_installed_tack(tmp_path):
    """Run from the checkout, where `python -m tack.site` imports the checkout's Tack first (as a
    package's build does in the unpacked sources): the bundles are made by the Tack installed in
    PREFIX, so that it uses them; the site config is kept with its exports; the contour is served
    from them with nothing compiled."""
    prefix, site = installed_prefix(tmp_path)
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "install", str(prefix),
                        "--target", "host", "--arch", "cpu:x86_64_v2", "--site-config", str(SITE)],
                       cwd=ROOT, env=clean_env(PYTHONPATH=str(ROOT)), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"by Tack {__version__} from {site}" in r.stdout, r.stdout
    share = prefix / "share" / "tack"
    assert "nothing compiled" in r.stdout and "bundles install: built in " in r.stdout, r.stdout
    names = sorted(os.listdir(share / "bundles"))
    metas = [bundle.read(str(share / "bundles" / n)).meta for n in names]
    assert {m["tack"] for m in metas} == {__version__}, metas
    wanted = install.target_archs(["host"], ["cpu:x86_64_v2"])
    assert sorted(m["arch"] for m in metas) == sorted(wanted)
    built = load(str(share / "bundles-build.yaml"))
    assert built.archs() == wanted
    assert built.get("build.kernels") == load(str(SITE)).get("build.kernels")
    assert (share / "site.yaml").read_bytes() == SITE.read_bytes()
    assert json.loads((share / "site-env.json").read_text()) == load(str(SITE)).exports()
    # The installed Tack's import image, written once the bundles are built, and current.
    from tack import _image, _image_write
    image = _image.image_path(str(site / "tack"))
    assert f"bundles install: import image {image}: " in r.stdout, r.stdout
    assert _image_write.current("tack", str(site / "tack"))

    # A bundle the checkout's Tack makes there (0.1.0+src.<hash>) serves the installed Tack
    # nothing: `bundles check` with the installed Tack fails and names it.
    src = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "build",
                          str(share / "bundles-build.yaml"), "--arch", "cpu:x86_64_v2",
                          "--output", str(share / "bundles")],
                         cwd=ROOT, env=clean_env(PYTHONPATH=str(ROOT), TACK_CACHE="off"),
                         capture_output=True, text=True, timeout=600)
    assert src.returncode == 0, src.stdout + src.stderr
    check = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "check",
                            str(share / "bundles")], cwd=tmp_path,
                           env=clean_env(PYTHONPATH=str(site)), capture_output=True, text=True,
                           timeout=600)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "cpu-x86_64_v2-" in check.stdout and f"is stale (made by Tack {__version__}+src." \
        in check.stdout, check.stdout


def test_install_uses_the_callers_tool_and_fails_when_it_fails(tmp_path):
    """A package names the tool it depends on (TACK_LD_LLD: Spack's llvm-amdgpu): the install
    uses that one, not whatever the build host has, and fails, not warns, when it fails (or is
    missing): one install per package hash."""
    prefix, _ = installed_prefix(tmp_path)
    marker = tmp_path / "lld-ran"
    lld = tmp_path / "ld.lld"
    lld.write_text(f"#!/bin/sh\ntouch {marker}\necho 'ld.lld: error: no' >&2\nexit 1\n")
    lld.chmod(0o755)
    for tool in (lld, tmp_path / "missing" / "ld.lld"):
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TACK_LD_LLD", str(tool))
            mp.setenv("TACK_CACHE_DIR", str(tmp_path / "not-used"))
            rc = install.bundles_install(str(prefix), ["x86_64"], ["rocm:gfx90a"], out=out,
                                         err=err)
        assert rc != 0, out.getvalue() + err.getvalue()
        assert "rocm:gfx90a" in err.getvalue() + out.getvalue()
    assert marker.exists()
    assert not (tmp_path / "not-used").exists()     # the caller's cache settings are not kept


def test_install_refuses_a_prefix_without_tack(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SiteError, match=r"no Tack is installed in .*empty \(looked for "
                                        r"tack/__init__.py in .*site-packages"):
        install.bundles_install(str(tmp_path / "empty"))
    with pytest.raises(SiteError, match="is not a directory"):
        install.bundles_install(str(tmp_path / "nowhere"))


def test_install_refuses_an_arch_tack_does_not_build(tmp_path):
    prefix, _ = installed_prefix(tmp_path)
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "install", str(prefix),
                        "--target", "zen9"], cwd=tmp_path,
                       env=clean_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 1 and not (prefix / "share" / "tack" / "bundles").exists()
    assert "error: bundles install: cpu:zen9: archspec knows no such CPU" in r.stderr, r.stderr


def test_a_second_install_into_the_prefix_keeps_the_first_ones_config(tmp_path):
    """conda's tack-cuda adds PTX bundles to the prefix tack filled: with --config-name it writes
    its own config (conda-build packages only the files an output adds, so a rewritten
    bundles-build.yaml would be left out of tack-cuda and change tack's file in the build prefix),
    leaves the first one's as it was, and the check runs over every bundle there."""
    prefix, _ = installed_prefix(tmp_path)
    share = prefix / "share" / "tack"
    run = dict(cwd=ROOT, env=clean_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True,
               timeout=600)
    cmd = [sys.executable, "-m", "tack.site", "bundles", "install", str(prefix)]
    first = subprocess.run(cmd + ["--arch", "cpu:x86_64_v2", "--target", "host"], **run)
    assert first.returncode == 0, first.stdout + first.stderr
    cpu_config = (share / "bundles-build.yaml").read_bytes()
    second = subprocess.run(cmd + ["--arch", "cuda:sm_70", "--config-name", "bundles-build-cuda"],
                            **run)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "nothing compiled" in second.stdout, second.stdout
    assert (share / "bundles-build.yaml").read_bytes() == cpu_config
    assert load(str(share / "bundles-build-cuda.yaml")).archs() == ["cuda:sm_70"]
    metas = [bundle.read(str(share / "bundles" / n)).meta for n in os.listdir(share / "bundles")]
    assert "cuda:sm_70" in {m["arch"] for m in metas} and {m["tack"] for m in metas} == {__version__}
    bad = subprocess.run(cmd + ["--arch", "cuda:sm_70", "--config-name", "../x"], **run)
    assert bad.returncode == 1 and "is not a plain file name" in bad.stderr, bad.stderr
    # --config-name site replaced the site config an install with --site-config keeps
    (share / "site.yaml").write_text("version: 1\ncache:\n  size: 5G\n")
    kept = (share / "site.yaml").read_bytes()
    site = subprocess.run(cmd + ["--arch", "cuda:sm_70", "--config-name", "site"], **run)
    assert site.returncode == 1 and "names site.yaml, the site config" in site.stderr, site.stderr
    assert (share / "site.yaml").read_bytes() == kept


def test_an_install_of_the_sites_own_kernels_passes_its_check(tmp_path):
    """``bundles install --site-config`` whose kernels are the site's own, not the contour: the
    bundles are built and checked as a job reads them (the check ran the contour, which they do
    not hold, and the install always failed)."""
    prefix, site = installed_prefix(tmp_path)
    (site / "sitek.py").write_text("import tack\n\n\n@tack.kernel\ndef saxpy(a, x, y, out):\n"
                                   "    i = tack.tid()\n    out[i] = a * x[i] + y[i]\n")
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\nbuild:\n  kernels:\n    - module: sitek\n      kernel: saxpy\n"
                      "      args: [float32, 'float32[64]', 'float32[64]', 'float32[64]']\n")
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "install", str(prefix),
                        "--arch", "cpu:x86_64_v2", "--site-config", str(config)], cwd=tmp_path,
                       env=clean_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no contour check (the site's kernels are not the contour); every bundle read and current" \
        in r.stdout, r.stdout
    (name,) = [n for n in os.listdir(prefix / "share" / "tack" / "bundles") if "x86_64_v2" in n]
    b = bundle.read(str(prefix / "share" / "tack" / "bundles" / name))
    assert [m["kernel"] for m in (b.get(k, key)[0] for k, key in b.index if k == 2)] == ["saxpy"]


def test_bundle_directories_are_made_as_jobs_trust_them_whatever_the_umask(tmp_path):
    """Under ``umask 002`` (many sites' default) ``bundles install`` made share/tack and its
    bundles 0775, which every job then refused (group-writable); they are 0755 now, and a
    directory that already is group-writable is refused by the build, naming it."""
    prefix, _ = installed_prefix(tmp_path)
    run = dict(cwd=tmp_path, env=clean_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True,
               timeout=600, preexec_fn=lambda: os.umask(0o002))
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "install", str(prefix),
                        "--arch", "cpu:x86_64_v2"], **run)
    assert r.returncode == 0, r.stdout + r.stderr
    for d in (prefix / "share", prefix / "share" / "tack", prefix / "share" / "tack" / "bundles"):
        assert oct(d.stat().st_mode & 0o777) == "0o755", d
    (prefix / "share" / "tack" / "bundles").chmod(0o775)
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "install", str(prefix),
                        "--arch", "cpu:x86_64_v2"], **run)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "jobs would not use bundles from it" in r.stderr and "is writable by its group (mode 0775)" \
        in r.stderr, r.stderr


@pytest.mark.parametrize("kernels", [
    # a spec the kernel cannot take (two arguments given, four taken): the build fails
    "    - module: sitek\n      kernel: saxpy\n      args: [float32, 'float32[64]']\n",
    # a module whose tack_warm raises
    "    - module: sitek\n      shapes: [[4]]\n",
    # a module that raises when imported: refused with the config, before anything is built
    "    - module: sitebad\n      shapes: [[4]]\n"], ids=["spec", "tack_warm", "import"])
def test_a_failed_install_leaves_the_kept_files_of_the_previous_one(tmp_path, kernels):
    """An install whose build fails (an admin rebuilding after a driver update) must not touch
    what the running site reads: site.yaml, site-env.json and bundles-build.yaml stay as they
    were, byte for byte (they were replaced before the build, which then failed), and the
    installed Tack's import image is not written either (it was, before the build)."""
    prefix, site = installed_prefix(tmp_path)
    (site / "sitek.py").write_text("import tack\n\n\n@tack.kernel\ndef saxpy(a, x, y, out):\n"
                                   "    i = tack.tid()\n    out[i] = a * x[i] + y[i]\n\n\n"
                                   "def tack_warm(shape):\n    raise RuntimeError('no')\n")
    (site / "sitebad.py").write_text("raise RuntimeError('a driver is missing')\n")
    share = prefix / "share" / "tack"
    (share / "bundles").mkdir(parents=True)
    before = {"site.yaml": b"version: 1\n# the running site's\n",
              "site-env.json": b'{"TACK_CACHE_BUNDLES": "/old"}\n',
              "bundles-build.yaml": b"# the running site's bundles\n"}
    for name, data in before.items():
        (share / name).write_bytes(data)
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\ncache:\n  bundles: /new\nbuild:\n  kernels:\n" + kernels)
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "install", str(prefix),
                        "--arch", "cpu:x86_64_v2", "--site-config", str(config)], cwd=tmp_path,
                       env=clean_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    # each error names the line of the site config, the file the admin wrote
    why = {"sitebad": f"error: {config}:6: build.kernels.0.module: kernel module 'sitebad' failed "
                      "to import: RuntimeError: a driver is missing",
           "saxpy": f"{config}:8: build.kernels.0.args: saxpy takes 4 arguments",
           "shapes": f"{config}:7: build.kernels.0.shapes.0: sitek.tack_warm([4]) failed: "
                     "RuntimeError: no"}
    said = next(w for key, w in why.items() if key in kernels)
    assert said in r.stdout + r.stderr, r.stdout + r.stderr
    if "sitebad" not in kernels:
        assert "an architecture failed to build" in r.stderr, r.stdout + r.stderr
    assert {p.name: p.read_bytes() for p in share.iterdir() if p.is_file()} == before
    assert os.listdir(share / "bundles") == []
    from tack import _image
    image = _image.image_path(str(site / "tack"))
    assert not os.path.exists(image), f"{image} was written by a failed install"
    assert "import image" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_an_install_for_another_machines_cpu_checks_its_bundles_as_jobs_read_them(tmp_path):
    """A stack built for another CPU (site.md's ``--target neoverse_v2`` on an x86_64 build host,
    EasyBuild's local_cpu_target): its contour check ran the contour here from bundles this CPU
    cannot use, compiled it, and failed the install ("2 kernel variant(s) were compiled").  The
    bundles are checked as a job reads them instead, and the install says why."""
    import platform
    other = "cpu:aarch64" if platform.machine() in ("x86_64", "AMD64") else "cpu:x86_64"
    prefix, _ = installed_prefix(tmp_path)
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "install", str(prefix),
                        "--arch", other], cwd=ROOT, env=clean_env(PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("no contour check (no CPU bundle there is for this build host's CPU); every bundle "
            "read and current") in r.stdout, r.stdout
    (name,) = os.listdir(prefix / "share" / "tack" / "bundles")
    assert bundle.read(str(prefix / "share" / "tack" / "bundles" / name)).meta["arch"] == other
