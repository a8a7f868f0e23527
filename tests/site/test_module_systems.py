"""``module load tack`` under real Lmod and Environment Modules, each in its own clean bash.

The module files are rendered with USER=alice and loaded by bob, so the
variables must be expanded at load, for the user who loads.
"""

from __future__ import annotations

import string

import pytest

from tack.site.cli import main
from tack.site.config import load

from .tools import FORMAT, SHOW, clean_bash, module_init, sections

VARS = ("TACK_CACHE_DIR", "TACK_CACHE", "TACK_CACHE_MPI", "TACK_CACHE_SIZE", "TACK_CACHE_BUNDLES")
SYSTEMS = ("lmod", "envmodules")


def fake_modules(directory):
    """openmpi/4.1 and tack-dev/1.0, as both Lua (for Lmod) and Tcl (for Environment Modules)."""
    for name, var in (("openmpi/4.1", "FAKE_MPI"), ("tack-dev/1.0", "FAKE_TACK_DEV")):
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#%Module1.0\nsetenv {var} 1\n")
        path.with_name(path.name + ".lua").write_text(f'setenv("{var}", "1")\n')
    return directory


def render(config, root, capsys):
    assert main(["modules", str(config), "--format", "both", "--root", str(root)]) == 0
    capsys.readouterr()


def expected(cfg, home, user="bob", scratch="/scratch/b"):
    env = {"HOME": str(home), "USER": user, "SCRATCH": scratch}
    return {var: string.Template(value).substitute(env) for var, value in cfg.exports().items()}


@pytest.fixture
def setup(tmp_path, example, render_env, capsys):
    def make(name, system):
        init = module_init(system)
        config = example(name)
        root = tmp_path / "modulefiles"
        render(config, root, capsys)
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        fakes = fake_modules(tmp_path / "fakes")
        return init, load(config), root, home, fakes
    return make


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("name", ["gpu-cluster", "workstation"])
def test_load_expands_at_load_and_unload_restores(setup, name, system):
    init, cfg, root, home, fakes = setup(name, system)
    text = (root / "tack" / ("1.0.lua" if FORMAT[system] == "lmod" else "1.0")).read_text()
    assert "alice" not in text and "/render/" not in text, "expanded when rendered"
    vars_ = " ".join(VARS)
    prereqs = "".join(f"module load {p}\n" for p in cfg.get("modules.prereqs") or [])
    script = f"""{SHOW}
source {init}
module use {fakes}
module use {root}
export TACK_CACHE=mine
echo @@ before; show {vars_}
{prereqs}module load tack || echo LOAD-FAILED
echo @@ loaded; show {vars_}
echo @@ list; module list 2>&1
echo @@ help; module help tack 2>&1
echo @@ whatis; module whatis tack 2>&1
module unload tack || echo UNLOAD-FAILED
echo @@ unloaded; show {vars_}
"""
    r = clean_bash(script, home)
    out = sections(r.stdout)
    assert "LOAD-FAILED" not in r.stdout and "UNLOAD-FAILED" not in r.stdout, r.stdout + r.stderr
    want = expected(cfg, home)
    assert want, "the example config exports nothing"
    loaded = out["loaded"]
    for var in VARS:
        assert (f"{var}={want[var]}" if var in want else f"{var} unset") in loaded, (var, loaded, r.stderr)
    if "TACK_CACHE_DIR" in want and "$USER" in cfg.exports()["TACK_CACHE_DIR"]:
        assert "/bob/" in want["TACK_CACHE_DIR"]
    assert any("tack/1.0" in line for line in out["list"]), out["list"]
    # unload: the user's own TACK_CACHE comes back, the others are unset again
    assert out["unloaded"] == out["before"], (out["before"], out["unloaded"], r.stderr)
    assert "TACK_CACHE=mine" in out["unloaded"]
    help_text = "\n".join(out["help"])
    for line in cfg.get("modules.help").strip().splitlines():
        assert line in help_text, (line, help_text)
    assert any(cfg.get("modules.whatis") in line and "tack/1.0" in line for line in out["whatis"]), out["whatis"]


@pytest.mark.parametrize("system", SYSTEMS)
def test_prereq_and_conflict(setup, system):
    init, cfg, root, home, fakes = setup("gpu-cluster", system)
    script = f"""{SHOW}
source {init}
module use {root}
echo @@ no-prereq; module load tack >/dev/null 2>&1 && echo LOADED || echo FAILED; show TACK_CACHE_DIR
module use {fakes}
module load openmpi tack-dev
echo @@ conflict; module load tack >/dev/null 2>&1 && echo LOADED || echo FAILED; show TACK_CACHE_DIR
module unload tack-dev
echo @@ ok; module load tack >/dev/null 2>&1 && echo LOADED || echo FAILED; show TACK_CACHE_DIR
"""
    out = sections(clean_bash(script, home).stdout)
    assert out["no-prereq"] == ["FAILED", "TACK_CACHE_DIR unset"], out
    assert out["conflict"] == ["FAILED", "TACK_CACHE_DIR unset"], out
    assert out["ok"] == ["LOADED", "TACK_CACHE_DIR=/scratch/b/bob/tack-cache"], out


@pytest.mark.parametrize("system", SYSTEMS)
def test_two_versions_are_never_loaded_together(setup, example, tmp_path, capsys, system):
    """Environment Modules loaded tack/2.0 beside tack/1.0 (Lmod swaps them): both installs'
    bundle directories ended in TACK_CACHE_BUNDLES, and a job warned of the other's bundles.
    The Tcl module conflicts with its own name; ``module switch`` still goes from one to the
    other, and unloading gives the user's environment back."""
    init, cfg, root, home, fakes = setup("workstation", system)
    second = example("workstation", edit=lambda t: t.replace('version: "1.0"', 'version: "2.0"')
                     .replace("directory: $HOME/.cache/tack", "directory: $HOME/.cache/tack2"))
    render(second, root, capsys)
    script = f"""{SHOW}
source {init}
module use {root}
echo @@ before; show TACK_CACHE_DIR
module load tack/1.0 || echo LOAD-FAILED
module load tack/2.0 >/dev/null 2>&1
echo @@ second; show TACK_CACHE_DIR; module list 2>&1 | grep -o "tack/[0-9.]*"
module unload tack
module load tack/1.0 || echo LOAD-FAILED
module switch tack tack/2.0 >/dev/null 2>&1 || echo SWITCH-FAILED
echo @@ switched; show TACK_CACHE_DIR; module list 2>&1 | grep -o "tack/[0-9.]*"
module unload tack
echo @@ unloaded; show TACK_CACHE_DIR
"""
    r = clean_bash(script, home)
    out = sections(r.stdout)
    assert "LOAD-FAILED" not in r.stdout and "SWITCH-FAILED" not in r.stdout, r.stdout + r.stderr
    # One of them loaded, and the environment its own: the second refused (Environment
    # Modules) or swapped in (Lmod's one module of a name).
    dirs = {"tack/1.0": f"{home}/.cache/tack", "tack/2.0": f"{home}/.cache/tack2"}
    assert len(out["second"]) == 2 and out["second"][1] in dirs, (out, r.stderr)
    assert out["second"][0] == f"TACK_CACHE_DIR={dirs[out['second'][1]]}", (out, r.stderr)
    assert out["switched"] == [f"TACK_CACHE_DIR={home}/.cache/tack2", "tack/2.0"], (out, r.stderr)
    assert out["unloaded"] == out["before"] == ["TACK_CACHE_DIR unset"], out


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("scratch", [None, ""], ids=["unset", "empty"])
def test_missing_variable_fails_load_naming_it(setup, system, scratch):
    """A referenced variable unset, or set but empty (which made TACK_CACHE_DIR /bob/tack-cache,
    a directory at the top of the file system), fails the load, naming it."""
    init, cfg, root, home, fakes = setup("gpu-cluster", system)
    script = f"""{SHOW}
source {init}
module use {fakes}
module use {root}
module load openmpi
module load tack && echo LOADED || echo FAILED
show TACK_CACHE_DIR TACK_CACHE
"""
    r = clean_bash(script, home, scratch=scratch)
    assert r.stdout.splitlines()[-3:] == ["FAILED", "TACK_CACHE_DIR unset", "TACK_CACHE unset"], r.stdout
    assert "$SCRATCH is unset or empty" in r.stderr and "TACK_CACHE_DIR" in r.stderr, r.stderr


@pytest.mark.parametrize("system", SYSTEMS)
def test_literal_characters_survive(tmp_path, system, example, render_env, capsys):
    """Quotes, backslashes, brackets, braces and a lone $ reach the environment unchanged."""
    init = module_init(system)
    odd = 'x "q" \\b [c] {d} $ $5 ;e'
    config = example("workstation", lambda t: t.replace(
        "directory: $HOME/.cache/tack", "directory: '${HOME}/" + odd.replace("'", "''") + "'"))
    root = tmp_path / "m"
    render(config, root, capsys)
    home = tmp_path / "home"
    home.mkdir()
    script = f"""{SHOW}
source {init}
module use {root}
module load tack && show TACK_CACHE_DIR
"""
    r = clean_bash(script, home)
    assert r.stdout.splitlines()[-1] == f"TACK_CACHE_DIR={home}/{odd}", r.stdout + r.stderr


def _bundles_loaded_and_unloaded(tmp_path, system, example, capsys, bundles, users):
    """Render the gpu-cluster module with ``cache.bundles: BUNDLES``, then in a clean bash, for
    each of ``users`` (the user's own TACK_CACHE_BUNDLES, None: unset), load and unload it:
    -> ({user's: [the value loaded, the value unloaded]}, home, the run)."""
    init = module_init(system)
    config = example("gpu-cluster", lambda t: t.replace(
        "bundles: /apps/tack/0.1.0/bundles", f"bundles: {bundles}"))
    root = tmp_path / "m"
    render(config, root, capsys)
    home = tmp_path / "home"
    home.mkdir()
    fakes = fake_modules(tmp_path / "fakes")
    script = f"""{SHOW}
source {init}
module use {fakes}
module use {root}
module load openmpi
"""
    for k, own in enumerate(users):
        if own is not None:
            script += f"export TACK_CACHE_BUNDLES={own}\n"
        script += (f"echo @@ {k}; module load tack; show TACK_CACHE_BUNDLES; module unload tack; "
                   "show TACK_CACHE_BUNDLES\n")
    r = clean_bash(script, home)
    out = sections(r.stdout)
    return {own: out.get(str(k)) for k, own in enumerate(users)}, home, r


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_sites_bundles_go_before_the_users_own(tmp_path, system, example, render_env, capsys):
    """cache.bundles is prepended to the user's TACK_CACHE_BUNDLES, as Spack's and EasyBuild's
    modules do, and comes off again at unload: the module replaced it, so a user's own bundles
    were no longer searched while it was loaded.  Two directories, one made of $HOME."""
    assert "$HOME/site-b" in load(example("gpu-cluster", lambda t: t.replace(
        "bundles: /apps/tack/0.1.0/bundles", "bundles: /apps/tack/0.1.0/bundles:$HOME/site-b"))
        ).exports()["TACK_CACHE_BUNDLES"]
    out, home, r = _bundles_loaded_and_unloaded(tmp_path, system, example, capsys,
                                                "/apps/tack/0.1.0/bundles:$HOME/site-b",
                                                [None, "/home/me/mine"])
    site = f"/apps/tack/0.1.0/bundles:{home}/site-b"
    assert out[None] == [f"TACK_CACHE_BUNDLES={site}", "TACK_CACHE_BUNDLES unset"], r.stdout + r.stderr
    assert out["/home/me/mine"] == [f"TACK_CACHE_BUNDLES={site}:/home/me/mine",
                                    "TACK_CACHE_BUNDLES=/home/me/mine"], r.stdout + r.stderr


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_tilde_in_the_sites_bundles_comes_off_at_unload(tmp_path, system, example, render_env,
                                                          capsys):
    """``cache.bundles: ~/site-b`` (Tack expands a leading ``~``): Environment Modules printed the
    value unquoted, bash expanded the ``~``, and at unload the module's ``~/site-b`` was no
    longer in the list, so it stayed on the user's TACK_CACHE_BUNDLES.  The module now looks
    ``$HOME`` up at load, as any reference; the value is the same in both systems."""
    out, home, r = _bundles_loaded_and_unloaded(tmp_path, system, example, capsys,
                                                "'~/site-b:/apps/tack/0.1.0/bundles:~'", ["/own"])
    assert out["/own"] == [f"TACK_CACHE_BUNDLES={home}/site-b:/apps/tack/0.1.0/bundles:{home}:/own",
                           "TACK_CACHE_BUNDLES=/own"], r.stdout + r.stderr
