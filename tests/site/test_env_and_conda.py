"""``python -m tack.site env`` for bash, csh and fish, and the conda activate.d/deactivate.d scripts."""

from __future__ import annotations

import os
import string
import subprocess
import sys

import pytest

from tack.site.conda import write_activate
from tack.site.errors import SiteError
from tack.site.config import load
from tack.site.shell import render_env

from .tools import SHOW, clean_bash, have, sections

VARS = ("TACK_CACHE_DIR", "TACK_CACHE", "TACK_CACHE_MPI", "TACK_CACHE_SIZE", "TACK_CACHE_BUNDLES")
ODD = 'x "q" \\b `c` !d $ $5 {e}'


def site_env(config, shell):
    r = subprocess.run([sys.executable, "-m", "tack.site", "env", str(config), "--shell", shell],
                       capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr, r.stderr
    return r.stdout


def expanded(cfg, home, user="bob", scratch="/scratch/b"):
    env = {"HOME": str(home), "USER": user, "SCRATCH": scratch}
    return {var: string.Template(value).substitute(env) for var, value in cfg.exports().items()}


def odd_config(example):
    return example("gpu-cluster", lambda t: t.replace(
        "directory: $SCRATCH/$USER/tack-cache", "directory: '${SCRATCH}/$USER/" + ODD + "'"))


@pytest.mark.parametrize("name", ["gpu-cluster", "workstation"])
def test_env_bash_sourced(tmp_path, example, name):
    config = example(name)
    cfg = load(config)
    out = site_env(config, "bash")
    assert "$USER" in out or "$HOME" in out, "references must be left for the shell"
    script_file = tmp_path / "env.sh"
    script_file.write_text(out)
    r = clean_bash(f"{SHOW}. {script_file}\nshow {' '.join(VARS)}", tmp_path)
    want = expanded(cfg, tmp_path)
    assert r.stdout.splitlines() == [f"{v}={want[v]}" if v in want else f"{v} unset" for v in VARS]


def test_env_literal_characters(tmp_path, example):
    config = odd_config(example)
    (tmp_path / "env.sh").write_text(site_env(config, "bash"))
    r = clean_bash(f"set -H; {SHOW}. {tmp_path / 'env.sh'}\nshow TACK_CACHE_DIR", tmp_path)
    assert r.stdout == f"TACK_CACHE_DIR=/scratch/b/bob/{ODD}\n", r.stdout + r.stderr


def test_env_csh_and_fish_text(example):
    config = example("gpu-cluster")
    why = ("tack: TACK_CACHE_DIR is not set: it is made from $SCRATCH and $USER, and one of "
           "them is unset or empty")
    assert site_env(config, "csh").splitlines()[1:] == [
        'if ( $?SCRATCH && $?USER ) then',
        '    if ( "${SCRATCH:q}" != "" && "${USER:q}" != "" ) then',
        '        setenv TACK_CACHE_DIR "$SCRATCH/$USER/tack-cache"',
        '    else', f"        echo '{why}' > /dev/stderr", '    endif',
        'else', f"    echo '{why}' > /dev/stderr", 'endif', 'setenv TACK_CACHE "write"',
        'setenv TACK_CACHE_MPI "bundle"', 'setenv TACK_CACHE_SIZE "4G"',
        'if ($?TACK_CACHE_BUNDLES) then',
        '    setenv TACK_CACHE_BUNDLES "/apps/tack/0.1.0/bundles":${TACK_CACHE_BUNDLES:q}',
        'else', '    setenv TACK_CACHE_BUNDLES "/apps/tack/0.1.0/bundles"', 'endif']
    assert site_env(config, "fish").splitlines()[1:] == [
        'if test -n "$SCRATCH"; and test -n "$USER"',
        '    set -gx TACK_CACHE_DIR "$SCRATCH/$USER/tack-cache"',
        'else', f"    echo '{why}' >&2", 'end', 'set -gx TACK_CACHE "write"',
        'set -gx TACK_CACHE_MPI "bundle"', 'set -gx TACK_CACHE_SIZE "4G"',
        'set -gx TACK_CACHE_BUNDLES (string join : -- "/apps/tack/0.1.0/bundles" $TACK_CACHE_BUNDLES)']
    assert render_env(load(config), "bash").startswith("# ")


UNSET = {"bash": (["bash", "--noprofile", "--norc", "-c"], "source", "printenv TACK_CACHE_DIR"),
         "csh": (["tcsh", "-f", "-c"], "source", "printenv TACK_CACHE_DIR"),
         "fish": (["fish", "--no-config", "-c"], "source", "printenv TACK_CACHE_DIR")}


@pytest.mark.parametrize("how", ["env", "conda"])
@pytest.mark.parametrize("shell", sorted(UNSET))
@pytest.mark.parametrize("scratch", [None, ""])
def test_a_value_made_from_an_unset_variable_is_not_set(tmp_path, example, shell, how, scratch):
    """``$SCRATCH/$USER/tack-cache`` with SCRATCH unset or empty: sourcing `tack.site env`'s
    output or activating the conda scripts set TACK_CACHE_DIR to ``/bob/tack-cache``, without a
    word (the modules refuse to load).  Now the variable is left as it was (the user's own, or
    unset: Tack's default), and one line on standard error names the variables; the other
    settings are made."""
    config = example("gpu-cluster")
    if how == "env":
        script = tmp_path / f"env.{shell}"
        script.write_text(site_env(config, shell))
    else:
        prefix = tmp_path / "env"
        prefix.mkdir()
        write_activate(load(config), str(prefix))
        script = prefix / "etc" / "conda" / "activate.d" / f"tack.{'sh' if shell == 'bash' else shell}"
    argv, source, show = UNSET[shell]
    env = {"HOME": str(tmp_path), "USER": "bob", "PATH": "/usr/bin:/bin"}
    if scratch is not None:
        env["SCRATCH"] = scratch
    r = subprocess.run(argv + [f"{source} {script}; {show}; printenv TACK_CACHE"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.stdout == "write\n", r.stdout + r.stderr
    assert r.stderr == ("tack: TACK_CACHE_DIR is not set: it is made from $SCRATCH and $USER, and "
                        "one of them is unset or empty\n"), r.stderr


def _run_shell(argv, home, script):
    env = {"HOME": str(home), "USER": "bob", "SCRATCH": "/scratch/b", "PATH": "/usr/bin:/bin"}
    return subprocess.run(argv + [script], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(not have("tcsh"), reason="tcsh is not installed; csh output checked as text")
def test_env_csh_sourced(tmp_path, example):
    config = odd_config(example)
    (tmp_path / "env.csh").write_text(site_env(config, "csh"))
    r = _run_shell(["tcsh", "-f", "-c"], tmp_path, f"source {tmp_path / 'env.csh'}; printenv TACK_CACHE_DIR")
    assert r.stdout == f"/scratch/b/bob/{ODD}\n", r.stdout + r.stderr


@pytest.mark.skipif(not have("fish"), reason="fish is not installed; fish output checked as text")
def test_env_fish_sourced(tmp_path, example):
    config = odd_config(example)
    (tmp_path / "env.fish").write_text(site_env(config, "fish"))
    # fish sets USER itself, from the account running it
    r = _run_shell(["fish", "--no-config", "-c"], tmp_path,
                   f"source {tmp_path / 'env.fish'}; printenv TACK_CACHE_DIR; echo $USER")
    path, user = r.stdout.splitlines()
    assert path == f"/scratch/b/{user}/{ODD}", r.stdout + r.stderr


BUNDLES_SHELLS = {"bash": (["bash", "--noprofile", "--norc", "-c"], "export TACK_CACHE_BUNDLES=/home/me/mine",
                           "printenv TACK_CACHE_BUNDLES"),
                  "csh": (["tcsh", "-f", "-c"], "setenv TACK_CACHE_BUNDLES /home/me/mine",
                          "printenv TACK_CACHE_BUNDLES"),
                  "fish": (["fish", "--no-config", "-c"], "set -gx TACK_CACHE_BUNDLES /home/me/mine",
                           "printenv TACK_CACHE_BUNDLES")}


@pytest.mark.parametrize("shell", sorted(BUNDLES_SHELLS))
def test_env_puts_the_sites_bundles_before_the_users_own(tmp_path, example, shell):
    """`tack.site env` prepends cache.bundles to the user's TACK_CACHE_BUNDLES, as the modules,
    Spack's and EasyBuild's do (it replaced it: the user's own bundles were no longer searched);
    with none set, the site's alone.  Two directories, one made of $HOME, in each shell."""
    argv, mine, show = BUNDLES_SHELLS[shell]
    if not have(argv[0]):
        pytest.skip(f"{argv[0]} is not installed here, so this shell cannot be run (ci/run-tests.sh installs it)")
    config = example("gpu-cluster", lambda t: t.replace(
        "bundles: /apps/tack/0.1.0/bundles", "bundles: /apps/tack/0.1.0/bundles:$HOME/site-b"))
    script = tmp_path / f"env.{shell}"
    script.write_text(site_env(config, shell))
    site = f"/apps/tack/0.1.0/bundles:{tmp_path}/site-b"
    alone = _run_shell(argv, tmp_path, f"source {script}; {show}")
    assert alone.stdout == f"{site}\n", alone.stdout + alone.stderr
    both = _run_shell(argv, tmp_path, f"{mine}; source {script}; {show}")
    assert both.stdout == f"{site}:/home/me/mine\n", both.stdout + both.stderr


def test_a_bundle_directory_named_twice_is_searched_once(tmp_path):
    """A module and a sourced env script (or one sourced twice) can name the same directory twice
    in TACK_CACHE_BUNDLES: it is one directory to search."""
    from tack.cache.stores import site_dirs
    a, b = tmp_path / "a", tmp_path / "b"
    env = {"TACK_CACHE_BUNDLES": f"{a}:{b}:{a}/:{b}", "TACK_CACHE_INSTALLED_BUNDLES": "0"}
    assert site_dirs(env, installed=[]) == [str(a), str(b)]


# -- EasyBuild ---------------------------------------------------------------------

def test_env_easybuild_parameters(example):
    """`--shell easybuild`: modextravars (and modextrapaths after the install's own bundles) that
    an easyconfig takes as Python; each value, resolved the way EasyBuild 5 resolves a
    modextravars value when the module is loaded ($NAME and ${NAME} looked up, $$ a `$`: the
    rules of Python's string.Template, which EasyBuild uses), is the site tool's own value, odd
    characters and lone `$`s included."""
    config = odd_config(example)
    text = site_env(config, "easybuild")
    params = {}
    exec(text, {}, params)                      # as EasyBuild reads an easyconfig
    assert params["modextrapaths"] == {"TACK_CACHE_BUNDLES": ["share/tack/bundles",
                                                              "/apps/tack/0.1.0/bundles"]}
    env = {"HOME": "/home/bob", "USER": "bob", "SCRATCH": "/scratch/b"}
    got = {var: string.Template(value).substitute(env) for var, value in params["modextravars"].items()}
    want = load(config).exports()
    want.pop("TACK_CACHE_BUNDLES")
    want["TACK_CACHE_DIR"] = f"/scratch/b/bob/{ODD}"
    assert got == want, text


def test_env_easybuild_refuses_bundles_it_cannot_carry(tmp_path):
    # (a relative directory is refused by the config itself, for every shell: jobs ignore it)
    # each error names the config's file and line, as every other config error does
    config = tmp_path / "site.yaml"
    for bundles, why in (("$HOME/bundles", f"error: {config}:3: cache.bundles: '$HOME/bundles' "
                                           "refers to variables"),
                         ("/apps/b:${X}/b", f"error: {config}:3: cache.bundles: '${{X}}/b' refers "
                                            "to variables"),
                         ("~/bundles", f"error: {config}:3: cache.bundles: '~/bundles' is not an "
                                       "absolute path"),
                         ("bundles", "site.yaml:3: cache.bundles: 'bundles' is not an absolute path")):
        config.write_text(f"version: 1\ncache:\n  bundles: {bundles}\n")
        r = subprocess.run([sys.executable, "-m", "tack.site", "env", str(config), "--shell",
                            "easybuild"], capture_output=True, text=True)
        assert r.returncode == 1 and why in r.stderr, r.stderr
    config.write_text("version: 1\n")
    assert site_env(config, "easybuild").splitlines()[-2:] == ["modextravars = {", "}"]


# -- conda -----------------------------------------------------------------------

def conda_scripts(tmp_path, example, name="gpu-cluster", config=None):
    prefix = tmp_path / "env"
    prefix.mkdir()
    config = config or example(name)
    r = subprocess.run([sys.executable, "-m", "tack.site", "conda-activate", str(config),
                        "--prefix", str(prefix)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = prefix / "etc" / "conda"
    written = sorted(line.split(" ", 1)[1] for line in r.stdout.splitlines())
    assert written == sorted(str(d / a / f"tack.{x}") for a in ("activate.d", "deactivate.d")
                             for x in ("sh", "csh", "fish"))
    return load(config), d


@pytest.mark.parametrize("name", ["gpu-cluster", "workstation"])
def test_conda_activate_deactivate_bash(tmp_path, example, name):
    cfg, d = conda_scripts(tmp_path, example, name)
    want = expanded(cfg, tmp_path)
    show = f"show {' '.join(VARS)}"
    script = f"""{SHOW}
export TACK_CACHE=mine
export TACK_CACHE_SIZE=''
unset TACK_CACHE_DIR
echo @@ before; {show}
. {d}/activate.d/tack.sh
echo @@ active; {show}
. {d}/deactivate.d/tack.sh
echo @@ after; {show}
. {d}/activate.d/tack.sh
. {d}/activate.d/tack.sh
. {d}/deactivate.d/tack.sh
echo @@ twice; {show}
. {d}/deactivate.d/tack.sh
echo @@ extra; {show}
echo @@ leftovers; env | grep ^_TACK_CONDA || true
"""
    r = clean_bash(script, tmp_path)
    out = sections(r.stdout)
    assert out["before"] == ["TACK_CACHE_DIR unset", "TACK_CACHE=mine", "TACK_CACHE_MPI unset",
                             "TACK_CACHE_SIZE=", "TACK_CACHE_BUNDLES unset"]
    assert out["active"] == [f"{v}={want[v]}" if v in want else out["before"][i]
                             for i, v in enumerate(VARS)], r.stderr
    # restored: set values come back (an empty one too), unset ones are unset again
    assert out["after"] == out["before"]
    # activating twice does not save Tack's values as the user's
    assert out["twice"] == out["before"]
    # a deactivate without an activate changes nothing
    assert out["extra"] == out["before"]
    assert out["leftovers"] == []


def test_conda_literal_characters_bash(tmp_path, example):
    cfg, d = conda_scripts(tmp_path, example, config=odd_config(example))
    r = clean_bash(f"{SHOW}export TACK_CACHE_DIR='my \"own\" $dir'\n. {d}/activate.d/tack.sh\n"
                   f"show TACK_CACHE_DIR\n. {d}/deactivate.d/tack.sh\nshow TACK_CACHE_DIR", tmp_path)
    assert r.stdout.splitlines() == [f"TACK_CACHE_DIR=/scratch/b/bob/{ODD}",
                                     "TACK_CACHE_DIR=my \"own\" $dir"], r.stderr


def test_conda_two_environments_stacked(tmp_path, example):
    """Two environments with these scripts, activated one over the other, each restore their own."""
    cfg, d1 = conda_scripts(tmp_path, example)
    other = example("workstation")
    prefix2 = tmp_path / "env2"
    prefix2.mkdir()
    write_activate(load(other), prefix2)
    d2 = prefix2 / "etc" / "conda"
    r = clean_bash(f"""{SHOW}export TACK_CACHE_SIZE=1M
. {d1}/activate.d/tack.sh; . {d2}/activate.d/tack.sh; show TACK_CACHE_SIZE
. {d2}/deactivate.d/tack.sh; show TACK_CACHE_SIZE
. {d1}/deactivate.d/tack.sh; show TACK_CACHE_SIZE""", tmp_path)
    assert r.stdout.splitlines() == ["TACK_CACHE_SIZE=2G", "TACK_CACHE_SIZE=4G", "TACK_CACHE_SIZE=1M"]


@pytest.mark.skipif(not have("tcsh"), reason="tcsh is not installed")
def test_conda_csh(tmp_path, example):
    cfg, d = conda_scripts(tmp_path, example)
    r = _run_shell(["tcsh", "-f", "-c"], tmp_path,
                   f"setenv TACK_CACHE mine; source {d}/activate.d/tack.csh; printenv TACK_CACHE; "
                   f"printenv TACK_CACHE_DIR; source {d}/deactivate.d/tack.csh; printenv TACK_CACHE; "
                   f"printenv TACK_CACHE_DIR || echo unset")
    assert r.stdout.splitlines() == ["write", "/scratch/b/bob/tack-cache", "mine", "unset"], r.stderr


@pytest.mark.skipif(not have("fish"), reason="fish is not installed")
def test_conda_fish(tmp_path, example):
    cfg, d = conda_scripts(tmp_path, example)
    r = _run_shell(["fish", "--no-config", "-c"], tmp_path,
                   f"set -gx TACK_CACHE mine; source {d}/activate.d/tack.fish; printenv TACK_CACHE; "
                   f"source {d}/deactivate.d/tack.fish; printenv TACK_CACHE; "
                   f"printenv TACK_CACHE_DIR; or echo unset")
    assert r.stdout.splitlines() == ["write", "mine", "unset"], r.stderr


@pytest.mark.parametrize("shell", sorted(BUNDLES_SHELLS))
def test_conda_activation_puts_the_sites_bundles_before_the_users_own(tmp_path, example, shell):
    """Activation prepends cache.bundles to the user's TACK_CACHE_BUNDLES (it replaced it), and
    deactivation gives the user's value back."""
    argv, mine, show = BUNDLES_SHELLS[shell]
    if not have(argv[0]):
        pytest.skip(f"{argv[0]} is not installed here, so this shell cannot be run (ci/run-tests.sh installs it)")
    cfg, d = conda_scripts(tmp_path, example)
    ext = {"bash": "sh"}.get(shell, shell)
    r = _run_shell(argv, tmp_path, f"{mine}; source {d}/activate.d/tack.{ext}; {show}; "
                   f"source {d}/deactivate.d/tack.{ext}; {show}")
    assert r.stdout.splitlines() == ["/apps/tack/0.1.0/bundles:/home/me/mine", "/home/me/mine"], \
        r.stdout + r.stderr


def test_conda_scripts_text(tmp_path, example):
    cfg, d = conda_scripts(tmp_path, example)
    for x in ("csh", "fish"):
        act = (d / "activate.d" / f"tack.{x}").read_text()
        deact = (d / "deactivate.d" / f"tack.{x}").read_text()
        for var in VARS:
            assert var in act and var in deact
    assert 'setenv TACK_CACHE_DIR "$SCRATCH/$USER/tack-cache"' in (d / "activate.d" / "tack.csh").read_text()
    assert 'set -gx TACK_CACHE_DIR "$SCRATCH/$USER/tack-cache"' in (d / "activate.d" / "tack.fish").read_text()
    assert all(oct(os.stat(p).st_mode & 0o777) == "0o644" for p in d.rglob("tack.*"))


def test_conda_prefix_must_exist(tmp_path, example):
    r = subprocess.run([sys.executable, "-m", "tack.site", "conda-activate", str(example("gpu-cluster")),
                        "--prefix", str(tmp_path / "nope")], capture_output=True, text=True)
    assert r.returncode == 1 and f"{tmp_path / 'nope'}: not a directory" in r.stderr
    assert not (tmp_path / "nope").exists()


def test_conda_env_vars_file(tmp_path, example):
    """--env-vars: the site's exports as conda's env_vars.d JSON (every shell conda supports),
    and the scripts of an earlier run removed; the scripts again remove the JSON, and a file of
    someone else's is never removed."""
    import json
    cfg = load(example("gpu-cluster"))
    prefix = tmp_path / "env"
    prefix.mkdir()
    scripts = write_activate(cfg, prefix)
    other = prefix / "etc" / "conda" / "activate.d" / "someone-elses.sh"
    other.write_text("export X=1\n")
    (written,) = write_activate(cfg, prefix, env_vars=True)
    assert written == str(prefix / "etc" / "conda" / "env_vars.d" / "tack-site.json")
    assert json.loads(open(written).read()) == cfg.exports()
    assert not any(os.path.exists(p) for p in scripts) and other.exists()
    again = write_activate(cfg, prefix)
    assert not os.path.exists(written) and all(os.path.exists(p) for p in again)
    foreign = prefix / "etc" / "conda" / "env_vars.d" / "tack-site.json"
    foreign.write_text('{"OTHER": "1"}')
    write_activate(cfg, prefix)
    assert foreign.exists()
    # --env-vars replaced that file of someone else's, silently: refused now but with force
    with pytest.raises(SiteError, match=r"not replacing .*tack-site\.json: this command did not "
                                        r"write it .*use --force"):
        write_activate(cfg, prefix, env_vars=True)
    assert foreign.read_text() == '{"OTHER": "1"}'
    assert all(os.path.exists(p) for p in again)            # nothing else changed either
    write_activate(cfg, prefix, env_vars=True, force=True)
    assert json.loads(foreign.read_text()) == cfg.exports()
    assert write_activate(cfg, prefix, env_vars=True) == [str(foreign)]     # its own: replaced


def test_conda_env_vars_cli(tmp_path, example):
    prefix = tmp_path / "env"
    prefix.mkdir()
    r = subprocess.run([sys.executable, "-m", "tack.site", "conda-activate", str(example("gpu-cluster")),
                        "--prefix", str(prefix), "--env-vars"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"wrote {prefix / 'etc' / 'conda' / 'env_vars.d' / 'tack-site.json'}"
