"""cache.directory and cache.bundles holding a control character are refused by ``check``
(issue 22): they become TACK_CACHE_DIR and TACK_CACHE_BUNDLES in every activation script."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("key", ["directory", "bundles"])
@pytest.mark.parametrize("value, shown", [('"/scratch/a\\nb"', "\\n"), ('"/scratch/a\\tb"', "\\t")])
def test_control_character_in_a_cache_path(tmp_path, key, value, shown):
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f"version: 1\ncache:\n  {key}: {value}\n")
    run = subprocess.run([sys.executable, "-m", "tack.site", "check", str(cfg)],
                         capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"cache.{key}" in run.stderr and "control character" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("value, accepted", [
    ("~/bundles", True), ("$PREFIX/share/tack/bundles", True), ("${SCRATCH}/bundles", True),
    ("/apps/tack/bundles:~/bundles", True),
    # spaces around an entry are not part of it (as around TACK_CACHE_DIR): a job strips them
    ("/apps/tack/bundles : ~/bundles", True), (" /apps/tack/bundles", True),
    ("share/bundles", False), ("rel/$PREFIX", False), ("~/bundles:rel", False),
])
def test_check_takes_the_bundle_directories_a_job_takes(tmp_path, value, accepted):
    """cache.bundles: "~/bundles" was refused ("jobs ignore a relative bundle directory"),
    while a job expands ~ and searches it: check now asks the job's own reading of
    TACK_CACHE_BUNDLES (``stores.site_dir_entry``), and refuses only what a job would ignore."""
    import os
    from tack.cache.stores import site_dirs
    home = tmp_path / "home"
    env = dict(os.environ, HOME=str(home), PREFIX="/apps/tack", SCRATCH="/scratch")
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f'version: 1\ncache:\n  bundles: "{value}"\n')
    run = subprocess.run([sys.executable, "-m", "tack.site", "check", str(cfg)],
                         capture_output=True, text=True, env=env)
    ignored = []
    site_dirs(dict(env, TACK_CACHE_BUNDLES=value, TACK_CACHE_INSTALLED_BUNDLES="0"), warn=ignored.append)
    assert (ignored == []) == accepted, ignored          # a job's reading of the same value
    if accepted:
        assert run.returncode == 0, run.stderr
        assert f"TACK_CACHE_BUNDLES={value}" in run.stdout, run.stdout
    else:
        assert run.returncode == 1, run.stdout
        relative = next(d for d in value.split(":") if not d.startswith(("/", "~")))
        assert f"{cfg}:3: cache.bundles: '{relative}' is not an absolute path: jobs ignore a " \
               "relative bundle directory" in run.stderr, run.stderr


def test_spaces_around_bundle_directories_are_stripped_as_a_job_strips_them(tmp_path):
    """``TACK_CACHE_BUNDLES="/a/b : /c"``: a job searched "/a/b " (none there, so silently no
    site bundle) and ignored " /c" as "not an absolute path".  Each entry is stripped now, as
    TACK_CACHE_DIR is: jobs, ``bundles status`` and the EasyBuild parameters take /a/b and /c."""
    import os
    from tack.cache.stores import site_dirs
    a, c = tmp_path / "a" / "b", tmp_path / "c"
    a.mkdir(parents=True)
    c.mkdir()
    value = f"{a} :\t{c} "
    ignored = []
    got = site_dirs({"TACK_CACHE_BUNDLES": value, "TACK_CACHE_INSTALLED_BUNDLES": "0"},
                    warn=ignored.append)
    assert (got, ignored) == ([str(a), str(c)], [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_BUNDLES=value, TACK_CACHE_INSTALLED_BUNDLES="0")
    run = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "status"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert f"\n{a}:\nno bundles in {a}\n{c}:\nno bundles in {c}\n" in run.stdout, run.stdout
    cfg = tmp_path / "site.yaml"
    cfg.write_text(f'version: 1\ncache:\n  bundles: "/apps/b : /scratch/b"\n')
    eb = subprocess.run([sys.executable, "-m", "tack.site", "env", str(cfg), "--shell", "easybuild"],
                        capture_output=True, text=True)
    assert eb.returncode == 0, eb.stderr
    assert "modextrapaths = {'TACK_CACHE_BUNDLES': ['share/tack/bundles', '/apps/b', '/scratch/b']}" \
        in eb.stdout, eb.stdout


@pytest.mark.parametrize("value", ["/scratch/${ABC", "/scratch/${}/tack", "${SBD/x"])
def test_a_dollar_brace_that_names_no_variable_is_refused_naming_the_setting(tmp_path, value):
    """``${`` with no name and ``}`` after it: TACK_CACHE_DIR took it as it was, and made a
    directory named ``${ABC`` (a shell refuses it: "bad substitution"); a bundle directory so
    written was refused as "the cache directory must be an absolute path".  Both say what is
    wrong now, naming the variable."""
    import warnings
    import tack.cache
    from tack.cache.stores import site_dirs
    said = []
    assert site_dirs({"TACK_CACHE_BUNDLES": f"{value}:{tmp_path}", "TACK_CACHE_INSTALLED_BUNDLES": "0"},
                     warn=said.append) == [str(tmp_path)]
    want = f"{value!r} has a '${{' that names no variable (write ${{NAME}} or $NAME)"
    assert said == [f"TACK_CACHE_BUNDLES: {want}; ignored"], said
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = tack.cache.resolve({}, environ={"TACK_CACHE_DIR": value, "HOME": str(tmp_path)})
    assert got.sources["directory"] == "default" and "${" not in got.directory, got
    assert [str(x.message) for x in w] == [f"tack: TACK_CACHE_DIR: {want}; using the default"], w
    assert "$/x" in tack.cache.check_cache_directory("/scratch/$/x", "TACK_CACHE_DIR", {})   # a lone $ is a $
