"""Bundles installed beside Tack are found with no setting (issue 24): ``share/tack/bundles`` under
the prefix Tack is installed in and under ``sys.prefix``, after TACK_CACHE_BUNDLES's own
directories; ``TACK_CACHE_INSTALLED_BUNDLES=0`` turns it off.  A venv with Tack installed and its
bundles made by ``bundles install`` serves the contour from ``env/bin/python`` with no
TACK_CACHE_BUNDLES and no activation, nothing compiled."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tack
from tack.site import install
from tack.cache.stores import INSTALLED_BUNDLES, installed_dirs, site_dirs


def _prefix(tmp_path, name, layout=("lib", "python3.11", "site-packages")):
    prefix = tmp_path / name
    pkg = prefix.joinpath(*layout, "tack")
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (prefix / INSTALLED_BUNDLES).mkdir(parents=True)
    return prefix, str(pkg / "__init__.py")


def test_tack_prefix_and_sys_prefix(tmp_path):
    spack, init = _prefix(tmp_path, "spack-prefix")
    env, _ = _prefix(tmp_path, "env")
    got = installed_dirs({}, package_file=init, prefix=str(env))
    assert got == [str(spack / INSTALLED_BUNDLES), str(env / INSTALLED_BUNDLES)]


def test_debian_dist_packages_layout(tmp_path):
    usr, init = _prefix(tmp_path, "usr", ("lib", "python3", "dist-packages"))
    assert installed_dirs({}, package_file=init, prefix=str(tmp_path / "none")) == \
        [str(usr / INSTALLED_BUNDLES)]


def test_once_when_tack_is_in_sys_prefix(tmp_path):
    env, init = _prefix(tmp_path, "env")
    assert installed_dirs({}, package_file=init, prefix=str(env)) == [str(env / INSTALLED_BUNDLES)]


def test_checkout_is_not_a_prefix(tmp_path):
    """A source checkout (tack/ not in site-packages) has no prefix of its own."""
    (tmp_path / "share" / "tack" / "bundles").mkdir(parents=True)
    checkout = tmp_path / "checkout" / "tack"
    checkout.mkdir(parents=True)
    assert installed_dirs({}, package_file=str(checkout / "__init__.py"),
                          prefix=str(tmp_path / "none")) == []


def test_missing_file_and_link_are_left_out(tmp_path):
    none, init = _prefix(tmp_path, "none")
    os.rmdir(none / INSTALLED_BUNDLES)
    filep, _ = _prefix(tmp_path, "file")
    os.rmdir(filep / INSTALLED_BUNDLES)
    (filep / INSTALLED_BUNDLES).write_text("")
    assert installed_dirs({}, package_file=init, prefix=str(filep)) == []
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, none / INSTALLED_BUNDLES)
    assert installed_dirs({}, package_file=init, prefix=str(tmp_path / "x")) == []


@pytest.mark.parametrize("off", ["0", "off", "no", "false", "OFF"])
def test_turned_off(tmp_path, off):
    env, init = _prefix(tmp_path, "env")
    assert installed_dirs({"TACK_CACHE_INSTALLED_BUNDLES": off}, package_file=init,
                          prefix=str(env)) == []


def test_after_tack_cache_bundles_and_once(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    inst = str(tmp_path / "inst")
    env = {"TACK_CACHE_BUNDLES": f"{mine}:{inst}/"}
    # (each TACK_CACHE_BUNDLES entry as the trust checks name it: the trailing slash dropped)
    assert site_dirs(env, installed=[str(tmp_path / "other"), inst]) == \
        [str(mine), inst, str(tmp_path / "other")]


def _run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{args}: {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def test_venv_serves_its_bundles_without_any_setting(tmp_path):
    """Tack installed into a venv (its dependencies from the base Python), ``bundles install``
    builds the venv's bundles, and ``venv/bin/python`` called directly, with no TACK_* variable at
    all and an empty user cache, runs the contour from them: nothing compiled, no LLVM loaded."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    py = str(venv / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")
             and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # installed as pip installs a package: the package directory in the venv's site-packages
    site = Path(install.site_dirs(str(venv))[0])
    assert site.is_dir(), site
    shutil.copytree(Path(tack.__file__).parent, site / "tack",
                    ignore=shutil.ignore_patterns("__pycache__"))
    _run([py, "-m", "tack.site", "bundles", "install", str(venv), "--target", "host"], env=clean,
         cwd=tmp_path)
    bundles = venv / INSTALLED_BUNDLES
    assert any(n.startswith("bundle-") for n in os.listdir(bundles))
    script = ("import json, sys, tack, tack.cache\n"
              "from tack.demo import make_field\n"
              "from tack.kernels.contour import contour\n"
              "v, f = contour(make_field('sphere', 21), 0.5)\n"
              "s = tack.cache.stats()\n"
              "print(json.dumps({'file': tack.__file__, 'faces': len(f), 'hits': s['hits'],"
              " 'misses': s['misses'], 'llvm': 'llvmlite.binding' in sys.modules}))\n")
    env = dict(clean, TACK_CACHE_DIR=str(tmp_path / "empty-cache"), TACK_CACHE="read")
    got = json.loads(_run([py, "-c", script], env=env, cwd=tmp_path).stdout.splitlines()[-1])
    assert got["file"].startswith(str(venv)), got
    assert got["faces"] > 0 and got["hits"]["variant"] > 0, got
    assert got["misses"]["variant"] == 0 and not got["llvm"], got
    # the same run with the default turned off compiles: the bundles above were what served it
    off = dict(env, TACK_CACHE_DIR=str(tmp_path / "empty-2"), TACK_CACHE_INSTALLED_BUNDLES="0")
    got = json.loads(_run([py, "-c", script], env=off, cwd=tmp_path).stdout.splitlines()[-1])
    assert got["misses"]["variant"] > 0 and got["llvm"], got


@pytest.mark.parametrize("on", ["1", "yes", "On", "true", ""])
def test_turned_on_says_nothing(tmp_path, on):
    env, init = _prefix(tmp_path, "env")
    said = []
    assert installed_dirs({"TACK_CACHE_INSTALLED_BUNDLES": on}, package_file=init,
                          prefix=str(env), warn=said.append) == [str(env / INSTALLED_BUNDLES)]
    assert said == []


@pytest.mark.parametrize("bad", ["of", "disabled", "2"])
def test_unknown_value_is_told_and_looks_as_by_default(tmp_path, bad):
    """A value neither on nor off (a typo of ``off``) was taken as on with no word: the run still
    looks (the default), and the warning names the variable and the value."""
    env, init = _prefix(tmp_path, "env")
    said = []
    assert installed_dirs({"TACK_CACHE_INSTALLED_BUNDLES": bad}, package_file=init,
                          prefix=str(env), warn=said.append) == [str(env / INSTALLED_BUNDLES)]
    assert len(said) == 1 and f"TACK_CACHE_INSTALLED_BUNDLES={bad!r}" in said[0], said
    said.clear()
    assert site_dirs({"TACK_CACHE_INSTALLED_BUNDLES": bad}, said.append,
                     ) == installed_dirs({}, warn=said.append)
    assert len(said) == 1 and "neither on" in said[0], said


def test_after_a_settings_warning_the_sessions_warnings_are_logged_only(tmp_path):
    """docs/cache.md: a bad TACK_CACHE_INSTALLED_BUNDLES is the process's one cache warning,
    and where another setting warned first, only that one is shown.  Both were shown: the
    settings' warnings and the session's each had a first.  The second is in the log still."""
    (tmp_path / "k.py").write_text(
        "import warnings, numpy as np, tack\n"
        "@tack.kernel\n"
        "def double(x):\n"
        "    i = tack.tid()\n"
        "    x[i] = 2.0 * x[i]\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    tack.launch(double, 4, (np.ones(4),))\n"
        "print([str(x.message) for x in w])\n")
    env = dict(os.environ, TACK_CACHE_DIR=str(tmp_path / "cache"), TACK_CACHE_LOG="1",
               TACK_CACHE="bogus", TACK_CACHE_INSTALLED_BUNDLES="maybe")
    r = subprocess.run([sys.executable, "k.py"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    said = eval(r.stdout.strip().splitlines()[-1])
    assert len(said) == 1 and "TACK_CACHE: 'bogus' is not a cache mode" in said[0], said
    assert "TACK_CACHE_INSTALLED_BUNDLES='maybe' is neither on" in r.stderr, r.stderr   # the log
    del env["TACK_CACHE"]
    r = subprocess.run([sys.executable, "k.py"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    said = eval(r.stdout.strip().splitlines()[-1])
    assert len(said) == 1 and "TACK_CACHE_INSTALLED_BUNDLES='maybe'" in said[0], said
