"""Rendering module files: golden files, idempotency, atomic writes, template blocks.

Regenerate the goldens after an intended change of the templates with
``TACK_UPDATE_GOLDEN=1 python -m pytest tests/site/test_render.py``, and
review the diff.
"""

from __future__ import annotations

import os

import jinja2
import pytest

from tack.site.atomic import write_files
from tack.site.cli import main
from tack.site.config import load
from tack.site.errors import SiteError
from tack.site.modules import (LmodWriter, TclWriter, environment, lua_long_string, lua_string,
                               render_modules, split_references, tcl_string)

from .conftest import GOLDEN

LAYOUT = {"lmod": "1.0.lua", "tcl": "1.0"}


@pytest.mark.parametrize("name", ["gpu-cluster", "workstation"])
@pytest.mark.parametrize("fmt", ["lmod", "tcl"])
def test_golden(tmp_path, example, render_env, name, fmt):
    cfg = load(example(name))
    [(path, changed)] = write_files(render_modules(cfg, [fmt], tmp_path))
    assert changed and path == str(tmp_path / "tack" / LAYOUT[fmt])
    got = open(path, "rb").read()
    golden = GOLDEN / f"{name}.{'lua' if fmt == 'lmod' else 'tcl'}"
    if os.environ.get("TACK_UPDATE_GOLDEN"):
        golden.write_bytes(got)
    assert golden.exists(), f"{golden} is missing: run with TACK_UPDATE_GOLDEN=1 once"
    assert got == golden.read_bytes(), f"{path} differs from {golden}"
    if fmt == "tcl":
        assert got.startswith(b"#%Module1.0\n")
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o644)


def test_cli_formats_from_config_and_flag(tmp_path, example, capsys):
    config = example("workstation")                       # formats: [tcl]
    assert main(["modules", str(config), "--root", str(tmp_path / "a")]) == 0
    assert sorted(os.listdir(tmp_path / "a" / "tack")) == ["1.0"]
    assert main(["modules", str(config), "--root", str(tmp_path / "b"), "--format", "lmod"]) == 0
    assert sorted(os.listdir(tmp_path / "b" / "tack")) == ["1.0.lua"]
    assert main(["modules", str(config), "--root", str(tmp_path / "c"), "--format", "both"]) == 0
    assert sorted(os.listdir(tmp_path / "c" / "tack")) == ["1.0", "1.0.lua"]
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'c' / 'tack' / '1.0.lua'}" in out


def test_idempotent(tmp_path, example, capsys):
    config = example("gpu-cluster")
    root = tmp_path / "m"
    assert main(["modules", str(config), "--root", str(root), "--format", "both"]) == 0
    capsys.readouterr()
    files = [root / "tack" / "1.0.lua", root / "tack" / "1.0"]
    before = {f: (f.read_bytes(), os.stat(f).st_mtime_ns, os.stat(f).st_ino) for f in files}
    assert main(["modules", str(config), "--root", str(root), "--format", "both"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"writing 2 module file(s) under {root} (from --root):"] + \
        [f"  {f}" for f in files] + [f"unchanged {f}" for f in files]
    assert {f: (f.read_bytes(), os.stat(f).st_mtime_ns, os.stat(f).st_ino) for f in files} == before
    assert sorted(os.listdir(root / "tack")) == ["1.0", "1.0.lua"], "temporary files left behind"
    # A change to the config rewrites the files, and only then.
    config.write_text(config.read_text().replace("size: 4G", "size: 8G"))
    result = write_files(render_modules(load(config), ["lmod", "tcl"], root))
    assert [changed for _, changed in result] == [True, True]
    assert b'"8G"' in files[0].read_bytes() and b'"8G"' in files[1].read_bytes()


def test_a_module_file_another_config_rendered_is_replaced_with_a_note(tmp_path, example, capsys):
    """Each module file names the config it was rendered from; rendering another config's
    module of the same name and version over it says so, once (it said "wrote" alone, and a
    reader of the file could not tell which config made it)."""
    first = example("gpu-cluster")
    second = tmp_path / "other-site.yaml"
    second.write_text(first.read_text().replace("size: 4G", "size: 8G"))
    root = tmp_path / "m"
    assert main(["modules", str(first), "--root", str(root), "--format", "both"]) == 0
    files = [root / "tack" / "1.0.lua", root / "tack" / "1.0"]
    for f in files:
        assert b"from the site config gpu-cluster.yaml." in f.read_bytes()
    capsys.readouterr()
    assert main(["modules", str(second), "--root", str(root), "--format", "both"]) == 0
    out = capsys.readouterr().out
    assert out.count("  note: it replaced the module file rendered from the site config "
                     "gpu-cluster.yaml: two configs render tack/1.0 here") == 2, out
    for f in files:
        assert b"from the site config other-site.yaml." in f.read_bytes()
    assert main(["modules", str(second), "--root", str(root), "--format", "both"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_a_config_name_is_one_comment_line_in_the_header(tmp_path, example):
    """A config whose file name holds a newline or a quote is named with ``?`` for them: the
    header's comment stays one line (a newline would have ended it, the rest run as code)."""
    from tack.site.modules import config_label
    assert config_label("/a/b/site.yaml") == "site.yaml"
    odd = tmp_path / "x\nos.execute('id')\n.yaml"
    odd.write_text(example("workstation").read_text())
    for fmt, comment in (("lmod", "--"), ("tcl", "##")):
        (data,) = render_modules(load(odd), [fmt], tmp_path / "m").values()
        header = [line for line in data.decode().splitlines() if "rendered by" in line]
        assert header == [f"{comment} tack/1.0: rendered by `python -m tack.site modules` from "
                          "the site config x?os.execute??id???.yaml."], data.decode()[:400]
        assert "os.execute" not in data.decode().replace(header[0], "")


def test_all_or_nothing(tmp_path, example):
    """If one file cannot be written, none is: no file replaced, no temporary file, no new directory."""
    cfg = load(example("gpu-cluster"))
    root = tmp_path / "m"
    (root / "tack" / "1.0").mkdir(parents=True)           # where the Tcl file should go
    with pytest.raises(SiteError, match=r"1\.0: it exists and is not a regular file; nothing was written"):
        write_files(render_modules(cfg, ["lmod", "tcl"], root))
    assert os.listdir(root / "tack") == ["1.0"]


def test_unwritable_root_leaves_nothing(tmp_path, example):
    cfg = load(example("gpu-cluster"))
    blocker = tmp_path / "file"
    blocker.write_text("a regular file\n")
    with pytest.raises(SiteError) as e:
        write_files(render_modules(cfg, ["lmod", "tcl"], blocker / "modules"))
    assert str(blocker) in str(e.value) and "not a directory" in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["file", "gpu-cluster.yaml"]


def test_failed_write_removes_its_directories(tmp_path, example, monkeypatch):
    cfg = load(example("gpu-cluster"))
    calls = []
    real = os.replace

    def failing_replace(src, dst):
        calls.append(dst)
        raise OSError(28, "No space left on device", dst)
    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(SiteError, match="No space left on device; nothing was written"):
        write_files(render_modules(cfg, ["lmod", "tcl"], tmp_path / "new" / "root"))
    monkeypatch.setattr(os, "replace", real)
    assert calls and not (tmp_path / "new").exists()



@pytest.mark.parametrize("umask, dirs", [(0o077, 0o755), (0o002, 0o775)], ids=["umask077", "umask002"])
def test_module_directories_are_open_to_every_user_whatever_the_umask(tmp_path, example, umask,
                                                                     dirs):
    """An admin with ``umask 077`` renders the module files into a new tree: the files are 0644
    and the directories made for them 0755, so every user's ``module load`` finds them (mkdir
    gave 0700, which no other user may enter).  A group's write bit that the umask allows
    (``umask 002``) is kept."""
    cfg = load(example("gpu-cluster"))
    root = tmp_path / "new" / "root"
    old = os.umask(umask)
    try:
        written = write_files(render_modules(cfg, ["lmod", "tcl"], root))
    finally:
        os.umask(old)
    assert written
    for path, _ in written:
        assert oct(os.stat(path).st_mode & 0o777) == "0o644", path
        d = os.path.dirname(path)
        while d != str(tmp_path):
            assert oct(os.stat(d).st_mode & 0o777) == oct(dirs), d
            d = os.path.dirname(d)

def test_template_blocks_can_be_overridden(tmp_path, example):
    """A site template extends ours and replaces one block; the rest is unchanged."""
    cfg = load(example("gpu-cluster"))
    env = environment()
    env.loader = jinja2.ChoiceLoader([jinja2.DictLoader({
        "site.lua.j2": '{% extends "modulefile.lua.j2" %}\n'
                       '{% block header %}\n-- Site ACME: ask hpc@acme.example\n{% endblock %}\n'}),
        env.loader])

    class SiteLmod(LmodWriter):
        template = "site.lua.j2"
    ours, theirs = LmodWriter(cfg, tmp_path, env).render(), SiteLmod(cfg, tmp_path, env).render()
    assert b"-- Site ACME: ask hpc@acme.example\n" in theirs
    assert theirs.split(b"help(", 1)[1] == ours.split(b"help(", 1)[1]
    assert TclWriter(cfg, tmp_path).filename == str(tmp_path / "tack" / "1.0")


def test_references_and_quoting():
    assert split_references("$SCRATCH/${USER}x/$ $5") == [
        {"variable": "SCRATCH"}, {"literal": "/"}, {"variable": "USER"}, {"literal": "x/$ $5"}]
    assert split_references("plain") == [{"literal": "plain"}]
    assert lua_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert lua_long_string("x]]y]=]") == "[==[\nx]]y]=]\n]==]"
    assert tcl_string('a"$b[c]{d}\\') == '"a\\"\\$b\\[c\\]\\{d\\}\\\\"'


def test_missing_module_system_fails_saying_to_run_ci(monkeypatch):
    from . import tools
    monkeypatch.setitem(tools.SYSTEMS, "lmod", ("Lmod", "/nonexistent/lmod/init/bash"))
    with pytest.raises(pytest.fail.Exception, match=r"/nonexistent/lmod/init/bash is missing\. Run \.ci/run"):
        tools.module_init("lmod")
