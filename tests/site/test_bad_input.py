"""Bad input: each a clear message naming what and where, exit status 1, and nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GOOD = """version: 1
cache:
  directory: $SCRATCH/$USER/tack-cache
  size: 4G
build:
  archs:
    cpu: [zen3]
modules:
  version: "1.0"
  conflicts: [tack-dev]
"""

CASES = {
    "invalid-yaml": (GOOD.replace("cpu: [zen3]", "cpu: [zen3"), ":8: invalid YAML"),
    "unknown-key": (GOOD.replace("  size: 4G", "  sise: 4G"),
                    ":4: cache.sise: unknown key; did you mean 'size'?"),
    # a key in capitals got no suggestion (difflib compares case)
    "key-in-capitals": (GOOD.replace("cache:", "CACHE:"), ":2: CACHE: unknown key; did you mean 'cache'?"),
    "short-key-in-capitals": (GOOD.replace("  size: 4G", "  SIZE: 4G"),
                              ":4: cache.SIZE: unknown key; did you mean 'size'?"),
    "wrong-type": (GOOD.replace("conflicts: [tack-dev]", "conflicts: tack-dev"),
                   ":10: modules.conflicts: expected a list"),
    "bad-size": (GOOD.replace("size: 4G", "size: 4Q"), ":4: cache.size: "),
    # YAML 1.1 reads a plain 1:30 as 90 and 0x10 as 16: taken as written, they are no sizes
    # (check accepted them, and the jobs' size checks kept their caches to a few bytes)
    "sexagesimal-size": (GOOD.replace("size: 4G", "size: 1:30"),
                         ":4: cache.size: '1:30' is not a size: use a number with K, M, G or T"),
    "hex-size": (GOOD.replace("size: 4G", "size: 0x10"), ":4: cache.size: '0x10' is not a size"),
    # ccache reads 0 as no limit; here each size check deleted every entry of every user, and
    # check said the config was valid
    "zero-size": (GOOD.replace("size: 4G", "size: 0G"), ":4: cache.size: '0G' keeps no entry: "
                  "each size check deletes them all (use 'unlimited' for no limit"),
    "unknown-arch": (GOOD.replace("cpu: [zen3]", "cpu: [zen33]"),
                     ":7: build.archs.cpu.0: cpu:zen33: archspec knows no such CPU microarchitecture "
                     "(did you mean cpu:zen3"),
    # YAML 1.1 reads a plain `off` as false: the message says so and how to write the mode
    "unquoted-off": (GOOD.replace("  size: 4G", "  size: 4G\n  mode: off"),
                     ":5: cache.mode: off (unquoted) is YAML's boolean false, not a cache mode; "
                     "quote it: 'off'"),
    # exported as it is, an empty TACK_CACHE_DIR is Tack's default directory for every job,
    # silently: `check` called it valid and the module set TACK_CACHE_DIR=""
    "empty-directory": (GOOD.replace("$SCRATCH/$USER/tack-cache", '""'),
                        ":3: cache.directory: '' names no directory (jobs would use the default"),
    # YAML reads a plain 1.10 as the number 1.1: the message gives the text to quote
    "unquoted-version": (GOOD.replace('version: "1.0"', "version: 1.10"),
                         ":9: modules.version: expected a string, got 1.1 (module version "
                         "(default: Tack's)); quote it for the text as written: '1.10'"),
    # an architecture twice (as written, or by another spelling) builds its bundle twice
    "arch-twice": (GOOD.replace("cpu: [zen3]", "cpu: [zen3, x86_64_v3, cpu:zen3]"),
                   ":7: build.archs.cpu.2: 'cpu:zen3' is cpu:zen3, which build.archs.cpu.0 "
                   "lists already: list each architecture once"),
    "amd-target-id-twice": (GOOD.replace("cpu: [zen3]", "cpu: [zen3]\n    rocm: [gfx90a:sramecc+:xnack-, "
                                         "gfx90a:xnack-:sramecc+]"),
                            ":8: build.archs.rocm.1: 'gfx90a:xnack-:sramecc+' is "
                            "rocm:gfx90a:sramecc+:xnack-, which build.archs.rocm.0 lists already"),
    "node-name-twice": (GOOD + "nodes:\n  - name: rome\n    cpu: zen3\n  - name: rome\n    cpu: zen3\n",
                        ":14: nodes.1.name: 'rome' is the name of nodes.0 already: give each kind "
                        "of node its own name"),
    # module avail and module whatis print whatis raw: a newline broke its one line, an ESC
    # reached the terminal
    "whatis-newline": (GOOD.replace("  version: \"1.0\"", "  version: \"1.0\"\n  whatis: \"a\\nb\""),
                       ":10: modules.whatis: 'a\\nb' holds the control character '\\n'; whatis is one line"),
    "help-escape": (GOOD.replace("  version: \"1.0\"", "  version: \"1.0\"\n  help: \"a\\e[31mb\""),
                    ":10: modules.help: "),
    "empty-module-root": (GOOD.replace("  version: \"1.0\"", "  version: \"1.0\"\n  root: ''"),
                          ":10: modules.root: '' names no directory"),
    "blank-module-root": (GOOD.replace("  version: \"1.0\"", "  version: \"1.0\"\n  root: ' '"),
                          ":10: modules.root: ' ' names no directory"),
    "blank-bundles": (GOOD.replace("  size: 4G", "  size: 4G\n  bundles: ' : '"),
                      ":5: cache.bundles: ' : ' names no directory (jobs would search no site "
                      "directory)"),
}


def site(*args):
    return subprocess.run([sys.executable, "-m", "tack.site", *map(str, args)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", ["modules", "env", "conda-activate"])
def test_bad_config(tmp_path, case, command):
    text, message = CASES[case]
    config = tmp_path / "site.yaml"
    config.write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    extra = {"modules": ["--root", out, "--format", "both"], "env": [],
             "conda-activate": ["--prefix", out]}[command]
    r = site(command, config, *extra)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"error: {config}{message}" in r.stderr, r.stderr
    assert "nothing was written" in r.stderr
    assert r.stdout == ""
    assert os.listdir(out) == [], "something was written"


@pytest.mark.parametrize("written", ["010", "1000", "4G"])
def test_a_size_is_exported_as_written(tmp_path, written):
    """A plain number is the size written, as TACK_CACHE_SIZE reads it: YAML 1.1 reads 010 as
    the octal 8, which the jobs' size checks enforced as a limit of 8 bytes."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD.replace("size: 4G", f"size: {written}"))
    r = site("env", config)
    assert r.returncode == 0, r.stderr
    assert f'TACK_CACHE_SIZE="{written}"' in r.stdout, r.stdout


def test_bad_size_message(tmp_path):
    config = tmp_path / "site.yaml"
    config.write_text(CASES["bad-size"][0])
    r = site("check", config)
    assert r.returncode == 1, r.stderr
    line = r.stderr.splitlines()[0]
    assert line.startswith(f"error: {config}:4: cache.size: ") and "4Q" in line, line
    assert line.count("is not a size") == 1, line          # said once, not twice


def test_good_config_is_good(tmp_path):
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    r = site("modules", config, "--root", tmp_path / "out", "--format", "both")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "out" / "tack")) == ["1.0", "1.0.lua"]


def test_unwritable_root(tmp_path):
    """A root under a regular file (root ignores permissions, a file in the path does not)."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    r = site("modules", config, "--root", blocker / "modulefiles", "--format", "both")
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: cannot write {blocker / 'modulefiles' / 'tack'}: "
                               f"{blocker} exists and is not a directory; nothing was written"), r.stderr
    assert sorted(os.listdir(tmp_path)) == ["file", "site.yaml"]
    assert blocker.read_text() == "not a directory\n"


def test_no_root(tmp_path):
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    r = site("modules", config)
    assert r.returncode == 1 and "no output root: give --root or set modules.root" in r.stderr


# -- paths built from config values stay under their root ---------------------

ESCAPES = {
    "version-dotdot": ('  version: "1.0"', '  version: "../../escaped"', ":9: modules.version: ",
                       "path separator"),
    "name-dotdot": ('  version: "1.0"', '  version: "1.0"\n  name: ".."', ":10: modules.name: ",
                    "would name a directory"),
    "name-separator": ('  version: "1.0"', '  version: "1.0"\n  name: "a/b"', ":10: modules.name: ",
                       "path separator"),
    "version-empty": ('  version: "1.0"', '  version: ""', ":9: modules.version: ", "is empty"),
    "name-absolute": ('  version: "1.0"', '  version: "1.0"\n  name: /etc/x', ":10: modules.name: ",
                      "path separator"),
    "name-space": ('  version: "1.0"', '  version: "1.0"\n  name: "my tack"', ":10: modules.name: ",
                   "contains ' '"),
    "version-too-long": ('  version: "1.0"', f'  version: "{"9" * 252}"', ":9: modules.version: ",
                         "too long for a file name"),
    # tack/.modulerc(.lua) is what both module systems read as the rc file of every tack version
    # (module load tack then failed, and a site's own .modulerc was replaced); a version ending
    # in .lua names a Tcl file Lmod reads as Lua (tack/1.0.lua: the default, which fails to load)
    "version-rc-file": ('  version: "1.0"', '  version: ".modulerc"', ":9: modules.version: ",
                        "rc file"),
    "version-dot-lua": ('  version: "1.0"', '  version: "1.0.lua"', ":9: modules.version: ",
                        "write '1.0'"),
    "name-hidden": ('  version: "1.0"', '  version: "1.0"\n  name: ".tack"', ":10: modules.name: ",
                    "starting with '.'"),
    # Environment Modules 5 reads +, ~, =, @, [ and { in a name as variants, a version specifier
    # or a pattern: such a module rendered, and `module load` could not find it there
    "version-variant": ('  version: "1.0"', '  version: "1.0+cuda"', ":9: modules.version: ",
                        "contains '+', which Environment Modules reads as a variant"),
    "name-at": ('  version: "1.0"', '  version: "1.0"\n  name: "tack@1"', ":10: modules.name: ",
                "contains '@'"),
    "name-bracket": ('  version: "1.0"', '  version: "1.0"\n  name: "t[b]"', ":10: modules.name: ",
                     "contains '['"),
    # a ':' splits LOADEDMODULES: Environment Modules listed tack/1:0 as 'tack/1' and '0', and
    # could not unload it; `module load -x` reads -x as an option (Lmod loaded nothing, silently)
    "version-colon": ('  version: "1.0"', '  version: "1:0"', ":9: modules.version: ",
                      "contains ':', which splits the lists of loaded modules"),
    "name-dash": ('  version: "1.0"', '  version: "1.0"\n  name: "-x"', ":10: modules.name: ",
                  "starting with '-' is read as an option"),
}


@pytest.mark.parametrize("case", list(ESCAPES))
@pytest.mark.parametrize("command", ["check", "modules"])
def test_module_paths_stay_under_root(tmp_path, case, command):
    """A module name or version that is not one file name: rejected by check and modules; nothing written."""
    old, new, where, why = ESCAPES[case]
    config = tmp_path / "site.yaml"
    config.write_text(GOOD.replace(old, new))
    root = tmp_path / "a" / "b" / "root"
    root.mkdir(parents=True)
    extra = ["--root", root, "--format", "both"] if command == "modules" else []
    r = site(command, config, *extra)
    assert r.returncode == 1, (r.stdout, r.stderr)
    line = r.stderr.splitlines()[0]
    assert line.startswith(f"error: {config}{where}") and why in line, r.stderr
    assert r.stdout == ""
    found = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert found == ["a", "a/b", "a/b/root", "site.yaml"], found


def test_failed_rename_undoes_the_others(tmp_path):
    """The second rename fails after the first succeeded (the empty-version layout: ROOT/tack/.lua,
    then ROOT/tack as a file): the first is undone, a replaced file gets its old bytes back."""
    from tack.site.atomic import write_files
    from tack.site.cli import SiteError
    root = tmp_path / "root"
    root.mkdir()
    existing = root / "existing"
    existing.write_bytes(b"old\n")
    os.chmod(existing, 0o600)
    with pytest.raises(SiteError, match=r"cannot write .*root/tack: .*; nothing was written"):
        write_files({existing: b"new\n", root / "tack" / ".lua": b"lua\n", root / "tack": b"tcl\n"})
    assert sorted(os.listdir(root)) == ["existing"]
    assert existing.read_bytes() == b"old\n" and (os.stat(existing).st_mode & 0o777) == 0o600


def test_modules_says_where_it_writes(tmp_path):
    """modules prints the root (and where it came from) and each path before writing; --dry-run writes nothing."""
    root = tmp_path / "system" / "modulefiles"
    config = tmp_path / "site.yaml"
    config.write_text(GOOD + f"  root: {root}\n")
    r = site("modules", config, "--format", "both", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"would write 2 module file(s) under {root} (from modules.root at {config}:11):",
        f"  {root / 'tack' / '1.0.lua'}", f"  {root / 'tack' / '1.0'}"]
    assert not (tmp_path / "system").exists()
    r = site("modules", config, "--format", "both")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"writing 2 module file(s) under {root} (from modules.root at {config}:11):",
        f"  {root / 'tack' / '1.0.lua'}", f"  {root / 'tack' / '1.0'}",
        f"wrote {root / 'tack' / '1.0.lua'}", f"wrote {root / 'tack' / '1.0'}"]


# -- reading the config -------------------------------------------------------

def test_not_utf8(tmp_path):
    config = tmp_path / "site.yaml"
    data = GOOD.replace("tack-cache", "tack-caf\xe9").encode("latin-1")
    config.write_bytes(data)
    r = site("check", config)
    assert r.returncode == 1
    offset = data.index(b"\xe9")
    assert r.stderr.splitlines()[0] == (
        f"error: {config}:3: not UTF-8 text: byte 0xe9 at offset {offset} (column 37) cannot be "
        "decoded; save the config as UTF-8"), r.stderr
    assert "Traceback" not in r.stderr


BLOCK = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
sys.argv = ["tack.site"] + sys.argv[1:]
runpy.run_module("tack.site", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module,dist,command", [("yaml", "PyYAML", "check"),
                                                 ("jinja2", "Jinja2", "modules"),
                                                 ("archspec", "archspec", "check")])
def test_missing_dependency(tmp_path, module, dist, command):
    """A missing site dependency (its import blocked in a fresh interpreter): one line saying what to install."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    extra = ["--root", tmp_path / "out"] if command == "modules" else []
    import tack
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(tack.__file__)))
    assert os.path.isfile(os.path.join(checkout, "pyproject.toml")), "these tests run from a checkout"
    r = subprocess.run([sys.executable, "-c", BLOCK.format(module=module), command, str(config),
                        *map(str, extra)], capture_output=True, text=True, cwd=checkout)
    assert r.returncode == 1, r.stderr
    assert r.stderr == (f"error: python -m tack.site needs {dist} (module '{module}'), which is not "
                        'installed: pip install -e ".[site]"\n'), r.stderr
    assert not (tmp_path / "out").exists()


def test_missing_extra_hint_fits_how_tack_is_installed(tmp_path, monkeypatch):
    """In a checkout (pyproject.toml of the project tack beside the package) the hint is an
    editable install there, from the checkout or elsewhere; installed, it is the extra's."""
    from tack.site.errors import missing_extra
    e = ModuleNotFoundError("No module named 'yaml'", name="yaml")
    checkout, installed = tmp_path / "src", tmp_path / "site-packages"
    for root in (checkout, installed):
        (root / "tack").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project]\nname = "tack"\nversion = "0"\n')
    (installed / "pyproject.toml").write_text('[project]\nname = "other"\n')
    monkeypatch.chdir(checkout)
    assert missing_extra(e, str(checkout / "tack")).endswith(': pip install -e ".[site]"')
    monkeypatch.chdir(tmp_path)
    assert missing_extra(e, str(checkout / "tack")).endswith(f': cd {checkout} && pip install -e ".[site]"')
    assert missing_extra(e, str(installed / "tack")).endswith(': pip install "tack[site]"')


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_config_not_a_regular_file(tmp_path, kind):
    """A FIFO (no writer: a plain open() would wait for ever) or a directory: refused at once."""
    config = tmp_path / "site.yaml"
    if kind == "fifo":
        os.mkfifo(config)
    else:
        config.mkdir()
    r = subprocess.run([sys.executable, "-m", "tack.site", "check", str(config)],
                       capture_output=True, text=True, timeout=120)   # a hang fails, not waits
    assert r.returncode == 1
    what = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    assert r.stderr.splitlines()[0] == (f"error: {config}: cannot read: it is {what}; the site config "
                                        "must be a regular YAML file"), r.stderr


# -- values -------------------------------------------------------------------

DUPLICATES = {
    "top": (GOOD + "version: 1\n", ":11: version: duplicate key (first at line 1)"),
    "nested": (GOOD.replace("  size: 4G", "  size: 4G\n  size: 8G"), ":5: cache.size: duplicate key "
               "(first at line 4)"),
    "kernel-entry": (GOOD.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n    - module: a\n"
                                  "      module: b"),
                     ":10: build.kernels.0.module: duplicate key (first at line 9)"),
}


def check_fails(tmp_path, text, message, exact=False):
    """``check`` of a config holding ``text``: exit 1, no traceback, an error line that is the
    file's path and ``message`` (``exact``), or starts with them."""
    config = tmp_path / "site.yaml"
    config.write_text(text)
    r = site("check", config)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr, r.stderr
    want = f"error: {config}{message}"
    lines = r.stderr.splitlines()
    assert (want in lines) if exact else any(line.startswith(want) for line in lines), r.stderr


@pytest.mark.parametrize("case", list(DUPLICATES))
def test_duplicate_keys(tmp_path, case):
    check_fails(tmp_path, *DUPLICATES[case], exact=True)


HUGE = "1" * 311
NUMBERS = {
    # a plain number is the size as written (as TACK_CACHE_SIZE reads it), shown as the text is
    "size-int": (GOOD.replace("size: 4G", f"size: {HUGE}"), f":4: cache.size: '{HUGE[:39]}... is too "
                 "large a size"),
    "size-text": (GOOD.replace("size: 4G", f"size: {HUGE}G"), f":4: cache.size: '{HUGE[:39]}... is too "
                  "large a size"),
    "version": (GOOD.replace("version: 1", f"version: {HUGE}", 1), ":1: version: schema version "
                "111111111111... (311 digits) is not supported"),
    "beyond-int-limit": (GOOD.replace("version: 1", f"version: {'1' * 5000}", 1), ":1: version: cannot "
                         "read the value"),
    "grid": (GOOD.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n    - module: m\n      kernel: k\n"
                          f"      args: [float32]\n      grid: {HUGE}"),
             ":12: build.kernels.0.grid: a grid has 1 to 3 dimensions, not 111111111111... (311 digits)"),
    "extent": (GOOD.replace("    cpu: [zen3]", f"    cpu: [zen3]\n  kernels:\n    - module: m\n      shapes: "
                            f"[[8, {HUGE}, 8]]"), ":10: build.kernels.0.shapes.0.1: an extent is 1 to 1048576, "
               "not 111111111111... (311 digits)"),
}


@pytest.mark.parametrize("case", list(NUMBERS))
def test_huge_numbers(tmp_path, case):
    """A number far out of range: a config error naming file, line and key, no traceback."""
    check_fails(tmp_path, *NUMBERS[case])


# -- hostile YAML: deep nesting, complex keys, a wrong type at every key ------

def test_deep_nesting_is_a_config_error(tmp_path):
    """Nesting far past what PyYAML's recursive composer survives (it raised RecursionError at
    about 450 levels): one error naming the file, line and key path, no traceback."""
    deep = "[" * 5000 + "]" * 5000
    check_fails(tmp_path, GOOD + f"nodes: {deep}\n", ":11: nodes.0.0.0.0.0... (32 levels): lists and "
                "mappings are nested more than 32 levels deep")
    check_fails(tmp_path, GOOD.replace("  conflicts: [tack-dev]", "  help: " + "{a: " * 600 + "1"
                                       + "}" * 600), ":10: modules.help.a.a.a.a... (32 levels): ")


def test_a_character_yaml_does_not_allow_is_one_line_at_its_line(tmp_path):
    """A NUL or another control character: PyYAML's reader gives no line and two lines of text
    ('in "<unicode string>", position 50'); the error is one line at the character's line."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD.replace("size: 4G", "size: 4G\x00"))
    r = site("check", config)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.splitlines() == [f"error: {config}:4: invalid YAML: the character '\\x00' (column 11) "
                                     "is not allowed in YAML (special characters are not allowed)",
                                     "1 problem(s); nothing was written"], r.stderr


def test_nesting_the_schema_needs_is_read():
    """The depth bound leaves room for the schema's deepest value (an extent of a shape)."""
    from tack.site.config import MAX_DEPTH, _check_depth
    _check_depth("site.yaml", "build: {kernels: [{module: m, shapes: [[1, 2, 3]]}]}")
    _check_depth("site.yaml", "[" * MAX_DEPTH + "]" * MAX_DEPTH)


def test_aliases_a_config_needs_are_read_and_only_expansion_past_the_bound_is_refused(tmp_path):
    """An alias that repeats a shapes list is read as the list; a config of more than MAX_VALUES
    values written out (no alias) is not refused for its size; aliases of aliases that expand
    past MAX_VALUES are (an 8 KB config made a million problem lines)."""
    from tack.site.config import MAX_VALUES, _check_depth, load
    from tack.site.errors import SiteConfigError
    config = tmp_path / "site.yaml"
    config.write_text(GOOD.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n"
                                   "    - {module: tack.kernels.contour, shapes: &s [[8, 8, 8]]}\n"
                                   "    - {module: tack.kernels.contour, shapes: *s}"))
    cfg = load(config)
    assert [k["shapes"] for k in cfg.get("build.kernels")] == [[[8, 8, 8]], [[8, 8, 8]]]
    _check_depth("site.yaml", "[" + ", ".join(["x"] * (2 * MAX_VALUES)) + "]")
    bomb = "[&a [x, x, x, x, x, x, x, x, x, x], " + ", ".join(["*a"] * (MAX_VALUES // 10)) + "]"
    with pytest.raises(SiteConfigError, match=r"site.yaml:1: [0-9]+: the alias \*a repeats 11 "
                                              rf"value\(s\).* more than {MAX_VALUES} values"):
        _check_depth("site.yaml", bomb)


COMPLEX_KEYS = {
    "top": (GOOD + "? [a, b]\n: 1\n", ":11: (top level): a key must be a name, not a list"),
    "nested": (GOOD.replace("  size: 4G", "  size: 4G\n  ? {x: 1}\n  : 2"),
               ":5: cache: a key must be a name, not a mapping"),
    "kernel-entry": (GOOD.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n    - module: m\n"
                                  "      ? [shapes]\n      : [[8, 8, 8]]"),
                     ":10: build.kernels.0: a key must be a name, not a list"),
    "node": (GOOD + "nodes:\n  - name: n\n    ? [cpu]\n    : zen3\n",
             ":13: nodes.0: a key must be a name, not a list"),
}


@pytest.mark.parametrize("case", list(COMPLEX_KEYS))
def test_complex_keys(tmp_path, case):
    """A '? ' key that is a list or mapping (it raised TypeError: unhashable type: 'list')."""
    check_fails(tmp_path, *COMPLEX_KEYS[case])


ITEMS = {
    "cpu-list": ("cpu: [[zen3]]", ":7: build.archs.cpu.0: expected a single value, not a list"),
    "cpu-mapping": ("cpu: [{a: 1}]", ":7: build.archs.cpu.0: expected a single value, not a mapping"),
    "cuda-list": ("cpu: [zen3]\n    cuda: [[sm_90]]", ":8: build.archs.cuda.0: expected a single value"),
    "cpu-number": ("cpu: [zen3, 5]", ":7: build.archs.cpu.1: expected a string, got 5"),
}


@pytest.mark.parametrize("case", list(ITEMS))
def test_list_items_of_the_wrong_type(tmp_path, case):
    """A list or mapping as an item of build.archs (it ended in TypeError from cross_checks)."""
    new, message = ITEMS[case]
    check_fails(tmp_path, GOOD.replace("cpu: [zen3]", new), message)


WRONG = ["[x]", "{a: 1}", "[[x]]", "[{a: 1}]", "[[[]]]", "~", "1", "-1", "true", "1.5", "x", "''",
         "!!binary aGk=", "2001-01-01", "{? [a, b]: 1}", "[1, [2]]", "[{? [a]: 1}]", "!!set {a}",
         "!!python/name:os.system ''", "!!python/object/apply:os.getpid []", "&x [*x]"]


def schema_paths():
    """Every key path of the schema, a kernel entry's and a node's keys as in item 0."""
    from tack.site.config import KERNEL_KEYS, NODE_KEYS, SCHEMA

    def walk(schema, prefix):
        for key, (kind, _, detail) in schema.items():
            yield prefix + (key,)
            if kind == "map":
                yield from walk(detail, prefix + (key,))
            for listed, keys in (("kernels", KERNEL_KEYS), ("nodes", NODE_KEYS)):
                if kind == listed:
                    for k in keys:
                        yield prefix + (key, 0, k)
    return list(walk(SCHEMA, ()))


def flow(keypath, value):
    """A one-line config holding ``value`` at ``keypath`` (flow style), with ``version: 1``."""
    text = value
    for part in reversed(keypath):
        text = f"[{text}]" if part == 0 else f"{{{part}: {text}}}"
    return text if keypath == ("version",) else text[:-1] + ", version: 1}"


def test_every_key_every_wrong_type(tmp_path):
    """Walk the schema: each value of WRONG (a list, a mapping, nested ones, null, numbers, a
    boolean, binary, a date, a complex key...) at every key and every list item.  Each config
    loads or is refused with SiteConfigError whose every line is FILE:LINE: KEY: why, and one
    line names the key (or one above or below it, or a required key it lacks); nothing else is raised, and a config that loads
    gives its exports and archs."""
    from tack.site.config import load
    from tack.site.errors import SiteConfigError
    config = tmp_path / "site.yaml"
    crashes, refused, total = [], 0, 0
    for keypath in schema_paths():
        for value in WRONG:
            for where in (keypath, keypath + (0,)):     # the value itself, and as a list's item
                text = flow(where, value)
                config.write_text(text + "\n")
                total += 1
                try:
                    cfg = load(config)
                    cfg.exports(), cfg.archs(), cfg.module_name, cfg.module_version, cfg.formats
                except SiteConfigError as e:
                    refused += 1
                    for line in e.problems:
                        assert line.startswith(f"{config}:1: ") and "\n" not in line, (text, line)
                    names = [line.split(": ")[1] for line in e.problems
                             if ": missing; " not in line]        # a required key beside it
                    dotted = ".".join(map(str, where))
                    assert not names or any(dotted.startswith(n) or n.startswith(dotted)
                                            or n == "(top level)" for n in names), (text, e.problems)
                except Exception as e:                  # noqa: BLE001 - what the test looks for
                    crashes.append(f"{text}: {type(e).__name__}: {e}")
    print(f"\nsite config: {total} hostile values at {len(schema_paths())} key paths, "
          f"{refused} refused with a config error, {len(crashes)} crashes")
    assert not crashes, "\n".join(crashes)


# -- messages -----------------------------------------------------------------

BAD_MODULE = GOOD.replace("size: 4G", "size: 4Q").replace(
    "    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n    - module: no_such_module_here\n      shapes: [[8, 8, 8]]")


@pytest.mark.parametrize("command", ["check", "bundles build"])
def test_bad_module_is_reported_with_the_other_problems(tmp_path, command):
    """A kernel module that fails to import is reported with the config's other problems, not
    only once they are fixed (the commands that import the kernel modules anyway)."""
    config = tmp_path / "site.yaml"
    config.write_text(BAD_MODULE)
    r = site(*command.split(), config, *(["--output", tmp_path / "b"] if "build" in command else []))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.splitlines() == [
        f"error: {config}:4: cache.size: '4Q' is not a size: use a number with K, M, G or T "
        "(binary units, e.g. 500M or 2G), or 'unlimited'",
        f"error: {config}:9: build.kernels.0.module: kernel module 'no_such_module_here' failed to "
        "import: ModuleNotFoundError: No module named 'no_such_module_here'",
        "2 problem(s); nothing was written"], r.stderr
    assert not (tmp_path / "b").exists()


def test_other_commands_do_not_import_kernel_modules(tmp_path):
    """modules and env read the config only: no kernel module is imported to report it."""
    config = tmp_path / "site.yaml"
    config.write_text(BAD_MODULE)
    r = site("env", config)
    assert r.returncode == 1 and "no_such_module_here" not in r.stderr, r.stderr


@pytest.mark.parametrize("name,close", [("zen9", ["cpu:zen", "cpu:zen6", "cpu:zen5"]),
                                        ("zen99999", []),
                                        ("rocm:gfx9999", ["rocm:gfx909", "rocm:gfx950", "rocm:gfx942"]),
                                        ("cuda:sm_1", ["cuda:sm_61", "cuda:sm_120", "cuda:sm_101"])])
def test_unknown_arch_shows_close_names_and_how_to_list_them(tmp_path, name, close):
    """An unknown name gets a few close matches, not archspec's (or a kind's) whole list, and
    the command that lists them all; that command lists exactly the registry's names."""
    from tack.backends.arch_names import KINDS
    kind = name.partition(":")[0] if ":" in name else "cpu"
    text = GOOD.replace("cpu: [zen3]", f"cpu: [zen3]\n    {kind}: [{name}]" if kind != "cpu" else f"cpu: [{name}]")
    config = tmp_path / "site.yaml"
    config.write_text(text)
    r = site("check", config)
    assert r.returncode == 1, r.stderr
    (line,) = [l for l in r.stderr.splitlines() if f"build.archs.{kind}.0:" in l]
    named = re.findall(rf"\b{kind}:[a-z0-9_]+", line.split(": ", 3)[3])
    assert named[1:] == close, line                   # the name itself, then the close ones
    assert line.endswith(f"; 'python -m tack.site archs {kind}' lists them all"), line
    listed = site("archs", kind)
    assert listed.returncode == 0, listed.stderr
    assert [line.split(" (not built by")[0] for line in
            listed.stdout.splitlines()[:len(KINDS[kind].names())]] == KINDS[kind].qualified()


def test_archs_says_each_kind_in_whole_words():
    """``archs`` printed spirv's kind as "portable SPIR-V, for any Level Zero or OpenCL device,
    as (2)": its description was written for the refusal's "Tack builds ... as spirv:generic"."""
    from tack.backends.arch_names import KINDS
    listed = site("archs")
    assert listed.returncode == 0, listed.stderr
    heads = [line for line in listed.stdout.splitlines() if not line.startswith(" ")]
    assert [h.split(":", 1)[0] for h in heads] == list(KINDS), heads
    for h in heads:
        assert not h.rsplit(" (", 1)[0].endswith((" as", ",")), h
    assert "Tack builds portable SPIR-V, for any Level Zero or OpenCL device: spirv:generic" \
        in KINDS["spirv"].refusal("x")


def test_archs_says_which_cpus_this_llvm_does_not_build():
    """``archs cpu`` listed archspec's every name, zen6 too, which this LLVM (22) has no CPU for:
    ``bundles build`` of it failed, and docs/deploy.md said so.  Each such name is now marked,
    and the marks are exactly the names whose build refuses them."""
    from tack.archs import ArchError
    from tack.backends.cpu import llvm_target
    from llvmlite import binding
    listed = site("archs", "cpu")
    assert listed.returncode == 0, listed.stderr
    mark = f" (not built by this LLVM {binding.llvm_version_info[0]})"
    marked = {line[4:-len(mark)] for line in listed.stdout.splitlines() if line.endswith(mark)}
    for line in listed.stdout.splitlines():
        name = line[4:].split(" ", 1)[0]
        try:
            llvm_target(name)
            refused = False
        except ArchError:
            refused = True
        assert refused == (name in marked), line
    if binding.llvm_version_info[0] == 22:
        assert "zen6" in marked, marked


def test_status_without_a_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TACK_CACHE_BUNDLES"}
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "status"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr == ("error: bundles status: no bundle directory given, TACK_CACHE_BUNDLES is "
                        "not set and no bundles are installed beside Tack (share/tack/bundles)\n"), r.stderr


@pytest.mark.parametrize("command", ["status", "rebuild"])
def test_status_and_rebuild_refuse_what_is_not_a_directory(tmp_path, command):
    """A directory that is not there, or a file: status said "no bundles in ..." and rebuild
    nothing, both exiting 0; now each refuses it as ``bundles check`` does."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for d in (tmp_path / "nowhere", a_file):
        r = site("bundles", command, d)
        assert r.returncode == 1, (d, r.stdout, r.stderr)
        assert r.stderr == f"error: bundles {command}: {d} is not a directory\n", r.stderr
        assert r.stdout == "" and "Traceback" not in r.stderr


def _site_env(bundles):
    return dict({k: v for k, v in os.environ.items() if not k.startswith("TACK_")},
                TACK_CACHE_BUNDLES=bundles, TACK_CACHE_INSTALLED_BUNDLES="0")


@pytest.mark.parametrize("command", ["status", "rebuild", "check"])
def test_without_a_directory_each_ignored_entry_is_said_as_a_job_says_it(tmp_path, command):
    """TACK_CACHE_BUNDLES set, to entries a job ignores (a relative path, a file): the commands
    said "TACK_CACHE_BUNDLES is not set"; now each entry is said, in the words a job warns with,
    and then that none is left."""
    from tack.cache.stores import site_dirs
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    env = _site_env(f"relative/bundles{os.pathsep}{a_file}")
    job_says = []
    assert site_dirs(env, warn=job_says.append) == []
    assert len(job_says) == 2 and "'relative/bundles', which is not an absolute path" in job_says[0]
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", command], env=env,
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [f"warning: {w}" for w in job_says] + [
        f"error: bundles {command}: no bundle directory given, every entry of TACK_CACHE_BUNDLES "
        "is ignored (above) and no bundles are installed beside Tack (share/tack/bundles)"], r.stderr
    # set but empty: not set
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", command], env=_site_env(""),
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr == (
        f"error: bundles {command}: no bundle directory given, TACK_CACHE_BUNDLES is not set and "
        "no bundles are installed beside Tack (share/tack/bundles)\n"), r.stderr
    # set, and only separators: it is set, and names no directory (it said "is not set")
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", command], env=_site_env("::"),
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr == (
        f"error: bundles {command}: no bundle directory given, TACK_CACHE_BUNDLES ('::') names no "
        "directory and no bundles are installed beside Tack (share/tack/bundles)\n"), r.stderr


def test_status_says_an_ignored_entry_beside_one_it_reads(tmp_path):
    """Some entries ignored, one used: status reports on that one, and says the others as a
    job warns of them."""
    from tack.cache.stores import site_dirs
    env = _site_env(f"relative/bundles{os.pathsep}{tmp_path}")
    job_says = []
    assert site_dirs(env, warn=job_says.append) == [str(tmp_path)]
    r = subprocess.run([sys.executable, "-m", "tack.site", "bundles", "status"], env=env,
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [f"warning: {w}" for w in job_says], r.stderr
    assert f"no bundles in {tmp_path}" in r.stdout, r.stdout


ENTRIES = {
    # (each passed ``check`` and then failed the build with "a bundle holds one target's
    # variants; these are for 0", naming no key; a relative bundle directory passed and every job
    # ignored it)
    "no-shapes": (GOOD.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n    - module: tack.kernels.contour"),
                  ":9: build.kernels.0.shapes: missing; an entry without 'kernel' needs its 'shapes'"),
    "empty-shapes": (GOOD.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n"
                                  "    - module: tack.kernels.contour\n      shapes: []"),
                     ":10: build.kernels.0.shapes: an empty list; give at least one shape"),
    "relative-bundles": (GOOD.replace("  size: 4G", "  size: 4G\n  bundles: share/bundles"),
                         ":5: cache.bundles: 'share/bundles' is not an absolute path: jobs ignore"),
}


@pytest.mark.parametrize("case", list(ENTRIES))
def test_entries_check_refuses_before_a_build_or_a_job_would(tmp_path, case):
    check_fails(tmp_path, *ENTRIES[case])


def test_a_kernel_module_that_exits_when_imported_is_an_error_naming_it(tmp_path):
    """A kernel module that calls sys.exit() when imported (one that runs its command line):
    ``check`` and ``bundles build`` exited 0 with nothing said and nothing built."""
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(0)\n")
    config = tmp_path / "site.yaml"
    config.write_text(GOOD.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n"
                                   "    - module: exits_on_import\n      shapes: [[8, 8, 8]]"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    for command in (["check"], ["bundles", "build"]):
        r = subprocess.run([sys.executable, "-m", "tack.site", *command, str(config)]
                           + (["--output", str(tmp_path / "b")] if "build" in command else []),
                           capture_output=True, text=True, env=env, cwd=tmp_path)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (command, r.stdout, r.stderr)
        assert f"{config}:9: build.kernels.0.module: kernel module 'exits_on_import' failed to " \
               "import: SystemExit: 0" in r.stdout + r.stderr, (r.stdout, r.stderr)
        assert "these are for 0" not in r.stdout + r.stderr


@pytest.mark.parametrize("argv, option", [
    (["bundles", "build", "{config}", "--output", ""], "--output"),
    (["bundles", "build", ""], "config"),
    (["bundles", "status", ""], "dir"),
    (["bundles", "rebuild", ""], "dir"),
    (["bundles", "check", ""], "dir"),
    (["modules", "{config}", "--root", ""], "--root"),
    (["conda-activate", "{config}", "--prefix", ""], "--prefix"),
    (["bundles", "install", ""], "prefix"),
    (["bundles", "install", "{prefix}", "--site-config", ""], "--site-config"),
])
def test_an_empty_path_is_bad_usage(tmp_path, argv, option):
    """``--output "$OUTDIR"`` with OUTDIR unset: an empty path was taken as none given, and
    ``bundles build`` wrote into the config's own cache.bundles (production's directory);
    ``bundles status ""`` reported on nothing and exited 0.  Now each is bad usage, naming
    the argument: exit status 2, and nothing written."""
    production = tmp_path / "production-bundles"
    config = tmp_path / "site.yaml"
    config.write_text(GOOD.replace("  size: 4G", f"  size: 4G\n  bundles: {production}\n")
                      + f"  root: {tmp_path / 'modules'}\n")
    r = subprocess.run([sys.executable, "-m", "tack.site",
                        *[a.format(config=config, prefix=tmp_path / "prefix") for a in argv]],
                       capture_output=True, text=True, cwd=tmp_path)     # "": here, before
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.splitlines()[-1].endswith(
        f": error: argument {option}: an empty path (an unset variable?)"), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert sorted(os.listdir(tmp_path)) == ["site.yaml"]


@pytest.mark.parametrize("argv", [["bundles", "build", "{config}", "--arch", ""],
                                  ["bundles", "install", "{prefix}", "--arch", " "],
                                  ["bundles", "install", "{prefix}", "--target", ""]])
def test_an_empty_arch_is_bad_usage(tmp_path, argv):
    """``--arch "$ARCH"`` with ARCH unset: bad usage (exit status 2), as ``pack --arch`` says it,
    where ``bundles build`` failed with status 1 as of a bad config; nothing written.  The same
    for ``install --target`` (status 1, "'' is not an architecture name")."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    r = subprocess.run([sys.executable, "-m", "tack.site",
                        *[a.format(config=config, prefix=tmp_path / "prefix") for a in argv]],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    said = ("argument --target: an empty CPU name" if "--target" in argv else
            "argument --arch: an empty architecture name")
    assert r.stderr.splitlines()[-1].endswith(f": error: {said} (an unset variable?)"), r.stderr
    assert sorted(os.listdir(tmp_path)) == ["site.yaml"]


@pytest.mark.parametrize("argv", [["bundles", "build", "{config}", "--bogus"],
                                  ["check", "{config}", "--arch", "x86_64"],
                                  ["bundles", "--bogus", "status", "{config}"]])
def test_a_commands_unknown_argument_gets_the_commands_usage(tmp_path, argv):
    """An argument a subcommand does not take printed the program's usage (``[-h] COMMAND
    ...``), not the subcommand's: argparse hands it up to the top-level parser."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    r = subprocess.run([sys.executable, "-m", "tack.site", *[a.format(config=config) for a in argv]],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    command = " ".join(argv[:2] if argv[0] == "bundles" and argv[1] != "--bogus" else argv[:1])
    bad = " ".join(a for a in argv if a.startswith("--") or a == "x86_64")
    assert r.stderr.startswith(f"usage: python -m tack.site {command} [-h]"), r.stderr
    assert r.stderr.splitlines()[-1] == (f"python -m tack.site {command}: error: "
                                         f"unrecognized arguments: {bad}"), r.stderr
    assert sorted(os.listdir(tmp_path)) == ["site.yaml"]


def test_the_bound_docs_give_cache_size_is_the_one_check_applies(tmp_path):
    """docs/site.md said cache.size is "at most 8E": E is no unit the size parser takes ('8E'
    is not a size).  The bound it gives now is in units check takes, accepted, and one more
    refused."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "site.md"),
              encoding="utf-8") as f:
        text = " ".join(f.read().split())
    m = re.search(r"`cache\.size` at most 2\^63 - 1 bytes \(`T` is the largest unit: `(\d+T)` is "
                  r"accepted, `(\d+T)` is not\)", text)
    assert m, "docs/site.md does not give cache.size's bound in units the parser takes"
    largest, past = m.groups()
    from tack.cache import MAX_SIZE, parse_size
    assert parse_size(largest) <= MAX_SIZE < parse_size(largest) + (1 << 40)
    config = tmp_path / "site.yaml"
    config.write_text(GOOD.replace("size: 4G", f"size: {largest}"))
    r = site("env", config)
    assert r.returncode == 0 and f'TACK_CACHE_SIZE="{largest}"' in r.stdout, (r.stdout, r.stderr)
    check_fails(tmp_path, GOOD.replace("size: 4G", f"size: {past}"),
                f":4: cache.size: '{past}' is too large a size (at most 9223372036854775807 bytes, "
                f"{largest} in whole T; use 'unlimited' for no limit)", exact=True)


@pytest.mark.parametrize("command", ["modules", "conda-activate"])
def test_a_link_where_a_file_goes_is_not_replaced(tmp_path, command):
    """A module file (or activate.d script) the site keeps elsewhere, linked into place: the
    command wrote its file over the link, leaving the linked-to file as it was, so the site's
    copy and the one in use parted.  Now it refuses, naming the link and where it points, and
    writes nothing, --force or not; a link to a file already as it would be written is left."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    out = tmp_path / "out"
    out.mkdir()
    extra = ["--root", out, "--format", "tcl"] if command == "modules" else ["--prefix", out]
    assert site(command, config, *extra).returncode == 0
    path = (out / "tack" / "1.0") if command == "modules" else \
        (out / "etc" / "conda" / "activate.d" / "tack.sh")
    kept = tmp_path / "kept"
    path.rename(kept)
    path.symlink_to(kept)
    assert site(command, config, *extra).returncode == 0      # unchanged: nothing to write
    assert path.is_symlink()
    before = kept.read_bytes()
    config.write_text(GOOD.replace("size: 4G", "size: 8G"))
    for force in ([], ["--force"]):
        r = site(command, config, *extra, *force)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert f"cannot write {path}: it is a symbolic link (to {kept})" in r.stderr, r.stderr
        assert "nothing was written" in r.stderr and "wrote" not in r.stdout, r.stdout
        assert path.is_symlink() and kept.read_bytes() == before


@pytest.mark.parametrize("command", ["modules", "conda-activate"])
def test_a_file_this_command_did_not_write_is_kept_without_force(tmp_path, command):
    """A hand-written module file (or activate.d script) at the path a file goes to was replaced,
    and the output said "wrote" as of a new file: now the command refuses, naming it and
    --force, and writes nothing; with --force it is replaced; one it wrote is rewritten as before."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD)
    out = tmp_path / "out"
    if command == "modules":
        mine = out / "tack" / "1.0"
        extra = ["--root", out, "--format", "tcl"]
    else:
        mine = out / "etc" / "conda" / "activate.d" / "tack.sh"
        extra = ["--prefix", out]
    mine.parent.mkdir(parents=True)
    mine.write_text("#%Module1.0\nsetenv MY_HANDWRITTEN 1\n")
    r = site(command, config, *extra)
    assert r.returncode == 1 and f"not replacing {mine}" in r.stderr and "--force" in r.stderr, r.stderr
    assert "nothing was written" in r.stderr and r.stdout.count("wrote") == 0, r.stdout
    assert mine.read_text() == "#%Module1.0\nsetenv MY_HANDWRITTEN 1\n"
    assert sorted(p.name for p in mine.parent.iterdir()) == [mine.name]
    r = site(command, config, *extra, "--force")
    assert r.returncode == 0, r.stderr
    assert "MY_HANDWRITTEN" not in mine.read_text() and "python -m tack.site" in mine.read_text()
    changed = GOOD.replace("size: 4G", "size: 8G")
    config.write_text(changed)
    r = site(command, config, *extra)              # its own file: rewritten without --force
    assert r.returncode == 0 and "8G" in mine.read_text(), r.stderr


@pytest.mark.parametrize("package", ["tack.site", "tack.cache"])
def test_an_interrupt_is_one_line_and_the_death_of_sigint(package):
    """Ctrl-C in ``bundles build`` printed a 30-line traceback: both tools now say it in one line
    (what they wrote is whole: each file goes into place whole) and die of SIGINT, as an
    uncaught interrupt makes a process, so that a script running them stops too.  The
    interrupt is raised where main() runs, as Ctrl-C raises it in the middle of a build."""
    import signal
    code = (f"import {package}.cli as c\n"
            "def interrupted(argv=None):\n    raise KeyboardInterrupt\n"
            "c.main = interrupted\n"
            f"import runpy\nrunpy.run_module({package!r}, run_name='__main__', alter_sys=True)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == -signal.SIGINT, (r.returncode, r.stderr)
    assert r.stderr.splitlines() == [f"python -m {package}: interrupted; each file it writes is put "
                                     "in place whole, so what it wrote is whole and the rest is as "
                                     "it was"], r.stderr


def test_check_reports_every_bad_shape_of_an_entry_at_once(tmp_path):
    """``check`` stopped at an entry's first shape its module refused: the second bad one came
    only once the first was fixed, where every problem is said at once (docs/site.md)."""
    config = tmp_path / "site.yaml"
    config.write_text(GOOD.replace("    cpu: [zen3]", "    cpu: [zen3]\n  kernels:\n"
                                   "    - module: tack.kernels.contour\n"
                                   "      shapes: [[2, 2, 2], [1, 5, 5], [21, 21]]"))
    r = site("check", config)
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    said = r.stdout + r.stderr
    assert "build.kernels.0.shapes.1: tack.kernels.contour.tack_warm([1, 5, 5]) failed" in said, said
    assert "build.kernels.0.shapes.2: tack.kernels.contour.tack_warm([21, 21]) failed" in said, said
    assert "shapes.0" not in said and "2 problem(s)" in said, said


TAGGED = {
    "list-python-object": ("    cpu: !!python/object/apply:os.system [zen3]",
                           ":4: build.archs.cpu: the tag '!!python/object/apply:os.system' on a list"),
    "mapping-own-tag": ("    cpu: [zen3]\ncache: !foo {size: 4G}",
                        ":5: cache: the tag '!foo' on a mapping"),
    "mapping-python-dict": ("    cpu: [zen3]\nmodules: !!python/object/new:dict {version: '1.0'}",
                            ":5: modules: the tag '!!python/object/new:dict' on a mapping"),
    "set": ("    cpu: !!set {zen3}", ":4: build.archs.cpu: the tag '!!set' on a mapping"),
}


@pytest.mark.parametrize("case", list(TAGGED))
def test_a_tag_on_a_list_or_mapping_is_an_error(tmp_path, case):
    """A tag on a list or mapping names its key (it was dropped and the config called valid: a
    ``cpu: !!python/object/apply:os.system [zen3]`` built zen3; site.md says such a tag is an
    error)."""
    new, message = TAGGED[case]
    check_fails(tmp_path, "version: 1\nbuild:\n  archs:\n" + new + "\n", message)


def test_the_tags_of_plain_yaml_are_taken(tmp_path):
    """``!!map`` and ``!!seq`` are the plain tags: a config holding them is valid."""
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\ncache: !!map {size: 4G}\nbuild:\n  archs:\n    cpu: !!seq [zen3]\n")
    r = site("check", config)
    assert r.returncode == 0 and "cpu:zen3" in r.stdout, r.stdout + r.stderr


def test_an_empty_kernel_list_is_an_error(tmp_path):
    """``build.kernels: []`` is refused, as ``shapes: []`` is (it quietly built the contour)."""
    check_fails(tmp_path, GOOD.replace("    cpu: [zen3]\n", "    cpu: [zen3]\n  kernels: []\n"),
                ":8: build.kernels: an empty list names no kernel; leave build.kernels out")


def test_check_says_a_config_without_architectures_builds_nothing(tmp_path):
    """A config naming no architecture is valid (modules, settings, bundles install's kernels),
    and ``check`` says that ``bundles build`` would refuse it, not a list of nothing to build."""
    config = tmp_path / "site.yaml"
    config.write_text("version: 1\nbuild:\n  kernels:\n    - module: tack.kernels.contour\n"
                      "      shapes: [[8, 8, 8]]\n")
    r = site("check", config)
    assert r.returncode == 0, r.stderr
    assert "bundles to build: none" in r.stdout and "bundles build would refuse" in r.stdout
    assert "kernels: tack.kernels.contour (8x8x8)" in r.stdout
    r = site("bundles", "build", config, "--output", tmp_path / "b")
    assert r.returncode == 1 and "names no architecture" in r.stderr


def test_a_kernel_name_not_in_the_module_suggests_and_lists_its_kernels(tmp_path):
    """A ``kernel:`` the module lacks gets the closest name and the module's kernels."""
    text = GOOD.replace("    cpu: [zen3]\n", "    cpu: [zen3]\n  kernels:\n"
                        "    - module: tack.kernels.contour\n      kernel: clasify\n"
                        "      args: [\"float32[4,4,4]\"]\n")
    check_fails(tmp_path, text, ":10: build.kernels.0.kernel: tack.kernels.contour has no "
                "@tack.kernel 'clasify'; did you mean 'classify'? (its kernels: classify, emit)",
                exact=True)


def test_a_kernel_entry_that_needs_a_grid_it_lacks_is_told_to_set_it(tmp_path):
    """A 2-D kernel's entry without ``grid`` is refused with the compiler's message, then the
    config's fix: ``set grid: 2`` (the message spoke of a launch's ``dim=`` only, which the
    config does not have).  With ``grid: 2`` the config is valid."""
    (tmp_path / "my2d.py").write_text("import tack\n\n@tack.kernel\ndef fill2(a):\n"
                                      "    i, j = tack.tid()\n    a[i, j] = 1.0\n")
    entry = ("version: 1\nbuild:\n  archs:\n    cpu: [zen3]\n  kernels:\n    - module: my2d\n"
             "      kernel: fill2\n      args: [\"float64[4,4]\"]\n")
    config = tmp_path / "site.yaml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    config.write_text(entry)
    r = subprocess.run([sys.executable, "-m", "tack.site", "check", str(config)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"error: {config}:6: build.kernels.0: fill2(float64[4,4]) does not compile" in r.stderr
    assert "; it compiles on a 2-D grid: set grid: 2 in this entry" in r.stderr, r.stderr
    config.write_text(entry + "      grid: 2\n")
    r = subprocess.run([sys.executable, "-m", "tack.site", "check", str(config)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
