"""The import image (``tack._image``): Tack's bytecode in one file, served only while current.

Each test installs a copy of the package in a temporary directory (as a wheel installs it,
byte-compiled), so that writing, damaging or editing the image and the sources never touches
the checkout, and runs fresh Pythons against it.
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import subprocess
import sys
import types
import zlib
from pathlib import Path

import pytest

from tack._image import _HEAD as H     # the image's fixed head: format, magic, index length and CRC-32

ROOT = Path(__file__).resolve().parents[1]

# A fresh process: import Tack, run the contour, say where each module came from.
CHILD = r"""
import json, sys, inspect
import importlib.util        # before the listing below, which would otherwise import it mid-loop
import numpy as np
import tack
from tack import _image
from tack.kernels.contour import contour
g = np.linspace(-1.0, 1.0, 12, dtype=np.float32)
field = np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2)
verts, faces = contour(field, 0.7)
import tack.cache.stores as stores
f = _image.finder()
mods = {m: type(sys.modules[m].__spec__.loader).__name__ for m in list(sys.modules)
        if m.startswith("tack.")}
print(json.dumps({
    "faces": int(len(faces)), "verts": float(verts.sum()),
    "finder": f is not None, "served": f.served if f else 0, "open": bool(f and f.fd is not None),
    "content_checks": f.content_checks if f else 0,
    "loaders": mods,
    "stores_file": stores.__file__,
    "co_filename": stores.open_session.__code__.co_filename,
    "source_ok": "def open_session" in inspect.getsource(stores.open_session),
    "image_path": _image.image_path(__import__("os").path.dirname(tack.__file__)),
    "cached_wrong": [m for m in list(sys.modules) if m.startswith("tack.") and sys.modules[m].__cached__
                     != importlib.util.cache_from_source(sys.modules[m].__file__)],
}))
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TACK_", "OMPI_", "PMI_", "SLURM_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture()
def site(tmp_path):
    """A byte-compiled copy of Tack in tmp_path/site (no image yet) and a warm cache for it."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "tack", site / "tack",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert compileall.compile_dir(str(site), quiet=1)
    return site


def _py(site, code, tmp_path, **extra):
    env = _env(PYTHONPATH=str(site), TACK_CACHE_DIR=str(tmp_path / "cache"))
    env.update({k: str(v) for k, v in extra.items()})
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    return p


def _child(site, tmp_path, **extra) -> dict:
    p = _py(site, CHILD, tmp_path, **extra)
    return json.loads(p.stdout.strip().splitlines()[-1])


def _image_command(site, tmp_path, *args):
    """``python -m tack.site image ARGS`` for the copy in ``site`` (the command's own main)."""
    code = f"import sys; from tack.site.cli import main; sys.exit(main(['image', *{list(args)!r}]))"
    return _py(site, code, tmp_path)


def _write(site, tmp_path):
    p = _image_command(site, tmp_path)
    assert "import image" in p.stdout and "modules" in p.stdout, p.stdout
    return next((site / "tack" / "__pycache__").glob("import-image.*.bin"))


def _served(report):
    return sorted(m for m, kind in report["loaders"].items() if kind == "_Loader")


def test_written_image_serves_every_module_with_the_same_results(site, tmp_path):
    before = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)      # compiles; writes no image
    assert not before["finder"] and not _served(before)
    assert not list((site / "tack" / "__pycache__").glob("import-image.*"))
    image = _write(site, tmp_path)
    after = _child(site, tmp_path)
    assert after["finder"] and after["image_path"] == str(image)
    # Every Tack module the warm process imported after tack/__init__ and tack._image.
    assert set(_served(after)) == set(after["loaders"]) - {"tack._image"}, after["loaders"]
    assert after["served"] == len(_served(after))
    assert (after["faces"], after["verts"]) == (before["faces"], before["verts"])
    # Code objects name the real source, which inspect and tracebacks read.
    stores_py = str(site / "tack" / "cache" / "stores.py")
    assert after["stores_file"] == after["co_filename"] == stores_py
    assert after["source_ok"]
    # __cached__ is the .pyc CPython names for the source (the finder sets it without
    # importlib's computation), for a package, a module and a subpackage's module alike.
    assert not after["cached_wrong"] and not before["cached_wrong"]


def test_an_edited_module_is_imported_from_its_source_the_rest_from_the_image(site, tmp_path):
    _write(site, tmp_path)
    keys = site / "tack" / "cache" / "keys.py"
    keys.write_text(keys.read_text() + "\nEDITED = 'after the image was written'\n")
    p = _py(site, "import json, tack.cache.keys as k, tack.cache.stores as s; "
            "print(json.dumps([getattr(k, 'EDITED', None), type(k.__spec__.loader).__name__, "
            "type(s.__spec__.loader).__name__]))", tmp_path, PYTHONDONTWRITEBYTECODE=1)
    edited, keys_loader, stores_loader = json.loads(p.stdout.strip().splitlines()[-1])
    assert edited == "after the image was written"
    assert keys_loader == "SourceFileLoader" and stores_loader == "_Loader"


def _damage(image: Path, how: str):
    data = bytearray(image.read_bytes())
    n = int.from_bytes(data[12:16], "little")
    if how == "header":
        data[0:8] = b"NOTANIMG"
    elif how == "python":
        data[8:12] = b"\x00\x00\r\n"                        # another Python's bytecode magic
    elif how == "index":
        data[H:H + n] = b"\xff" * n
    elif how == "index-not-dict":
        import marshal
        index = marshal.dumps([1, 2, 3])
        data = data[:12] + len(index).to_bytes(4, "little") + zlib.crc32(index).to_bytes(4, "little") + index
    elif how == "truncated":
        data = data[:H + n + 100]
    elif how == "code":
        for i in range(H + n, len(data), 97):            # every code blob garbled
            data[i] = 0x5A
    image.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["header", "python", "index", "index-not-dict", "truncated",
                                 "code"])
def test_a_damaged_or_foreign_image_is_ignored_and_tack_still_works(site, tmp_path, how):
    reference = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    _damage(_write(site, tmp_path), how)
    report = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert (report["faces"], report["verts"]) == (reference["faces"], reference["verts"])
    if how in ("header", "python", "index", "index-not-dict"):
        assert not report["finder"]                        # never put on sys.meta_path
    if how in ("truncated", "code"):
        assert report["finder"] and not report["open"]     # closed at the first bad module
        # the bad module and every one after it came from their sources
        assert report["served"] < len(_served(report))


def test_damage_that_still_unmarshals_is_caught_by_the_checksum(site, tmp_path):
    """A flipped letter in a name inside a module's code still unmarshals into a code object,
    one that would define ``open_sessioX`` instead of ``open_session``: the CRC-32 the index
    records for each module refuses it, and the module comes from its source (before the
    checksum, this depended on where the damage fell, and ran the wrong code)."""
    import marshal
    image = _write(site, tmp_path)
    data = bytearray(image.read_bytes())
    n = int.from_bytes(data[12:16], "little")
    index = marshal.loads(bytes(data[H:H + n]))
    offset, length, _, slot = index["tack.cache.stores"][5:9]
    assert slot is not None                         # one of a group's (a first call's modules)
    start = H + n + offset
    blob = bytes(data[start:start + length])
    at = blob.index(b"open_session")
    data[start + at:start + at + 12] = b"open_sessioX"
    assert isinstance(marshal.loads(bytes(data[start:start + length]))[slot], types.CodeType)
    image.write_bytes(bytes(data))
    report = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert report["source_ok"] and report["faces"] > 0
    assert report["finder"] and not report["open"]          # closed at the damaged module


def test_the_image_names_no_directory_and_serves_a_moved_install(site, tmp_path):
    """What conda's and Spack's relocation rewrite (the old prefix wherever a file holds it)
    never occurs in the image: its code objects are named relative to the package, and a copy
    of the install moved elsewhere (times kept) is served with the real paths."""
    image = _write(site, tmp_path)
    assert str(site).encode() not in image.read_bytes()
    moved = tmp_path / "elsewhere" / "site-packages"
    moved.parent.mkdir()
    shutil.copytree(site, moved, copy_function=shutil.copy2)
    report = _child(moved, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert set(_served(report)) == set(report["loaders"]) - {"tack._image"}
    assert report["co_filename"] == str(moved / "tack" / "cache" / "stores.py")


def test_a_compiling_process_rewrites_a_damaged_image(site, tmp_path):
    _damage(_write(site, tmp_path), "code")
    _child(site, tmp_path)                                  # compiles: finds it damaged
    report = _child(site, tmp_path)
    assert report["open"] and set(_served(report)) == set(report["loaders"]) - {"tack._image"}
    assert report["served"] == len(_served(report))


@pytest.mark.parametrize("off", ["0", "off", " OFF ", "false", "no"])
def test_switched_off_by_TACK_IMPORT_IMAGE_0(site, tmp_path, off):
    """Off by any word the TACK_ switches take for off (only "0" turned it off)."""
    _write(site, tmp_path)
    report = _child(site, tmp_path, TACK_IMPORT_IMAGE=off)
    assert not report["finder"] and not _served(report)


def test_a_TACK_IMPORT_IMAGE_that_is_no_boolean_is_said(site, tmp_path):
    """A value neither on nor off ("disable", "none") left the image on without a word; it is
    said, as config says a TACK_DEBUG that is no boolean, and the image stays on."""
    _write(site, tmp_path)
    p = _py(site, CHILD, tmp_path, TACK_IMPORT_IMAGE="disable")
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["finder"] and _served(report)
    assert "tack: TACK_IMPORT_IMAGE='disable' is not a boolean (use 1 or 0); using 1" in p.stderr, \
        p.stderr


def test_a_module_is_served_only_where_its_parents_path_leads(site, tmp_path):
    """The finder answered every tack.* name from its own copy, whatever the parent's __path__:
    a second copy of Tack imported in the same process ran its __init__ with the first copy's
    submodules, and a directory put first on a subpackage's __path__ was passed over."""
    _write(site, tmp_path)
    other = tmp_path / "other"
    shutil.copytree(site / "tack", other / "tack", ignore=shutil.ignore_patterns("__pycache__"))
    (other / "tack" / "_version.py").write_text('__version__ = "9.9.9-other"\n')
    override = tmp_path / "override"
    override.mkdir()
    (override / "contour.py").write_text("WHO = 'override'\n")
    p = _py(site, "import sys, tack, tack.kernels; from tack import _image\n"
            "assert _image.finder() is not None\n"
            f"tack.kernels.__path__.insert(0, {str(override)!r})\n"
            "import tack.kernels.contour as c; print(c.WHO)\n"
            "for k in [k for k in sys.modules if k == 'tack' or k.startswith('tack.')]:\n"
            "    del sys.modules[k]\n"
            f"sys.path.insert(0, {str(other)!r})\n"
            "import tack, tack._version; print(tack.__version__, tack._version.__file__)\n",
            tmp_path)
    assert p.stdout.split() == ["override", "9.9.9-other", str(other / "tack" / "_version.py")], p.stdout


def test_a_cold_process_writes_the_image_where_python_writes_bytecode(site, tmp_path):
    cache = site / "tack" / "__pycache__"
    _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert not list(cache.glob("import-image.*"))               # as no .pyc would be written
    shutil.rmtree(tmp_path / "cache")
    _child(site, tmp_path)                                # compiles: writes it
    assert len(list(cache.glob("import-image.*.bin"))) == 1
    assert _served(_child(site, tmp_path))
    p = _py(site, "import sys; from tack.site.cli import main; sys.exit(main(['image', '--check']))",
            tmp_path)
    assert "current" in p.stdout


def test_an_image_that_cannot_be_written_is_no_error(site, tmp_path):
    # The image's name taken by a directory: the rename fails (as on a read-only install, which
    # root, running these tests, would not see), the compiling process runs on, and leaves no
    # temporary file behind.
    cache = site / "tack" / "__pycache__"
    (cache / f"import-image.{sys.implementation.cache_tag}.bin").mkdir()
    report = _child(site, tmp_path)
    assert report["faces"] > 0 and not report["finder"]
    assert sorted(p.name for p in cache.glob("import-image*")) == [
        f"import-image.{sys.implementation.cache_tag}.bin"]


def test_image_command_says_what_it_cannot_write(site, tmp_path):
    taken = site / "tack" / "__pycache__" / f"import-image.{sys.implementation.cache_tag}.bin"
    taken.mkdir()
    env = _env(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE=1)
    p = subprocess.run([sys.executable, "-m", "tack.site", "image"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith("error: image: cannot write the import image of ") \
        and str(taken) in p.stderr, p.stderr
    # (it said "[Errno None] a directory, not a regular file: '...'")
    assert f"{taken} is a directory, not a regular file" in p.stderr and "Errno" not in p.stderr, \
        p.stderr
    p = subprocess.run([sys.executable, "-m", "tack.site", "image", "--check"], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and "missing or stale" in p.stderr


def test_installed_twice_is_one_finder(site, tmp_path):
    _write(site, tmp_path)
    p = _py(site, "import sys, tack; from tack import _image; f = _image.finder(); "
            "g = _image.install('tack', tack.__path__[0]); "
            "print(f is g, sum(isinstance(x, _image.ImageFinder) for x in sys.meta_path))",
            tmp_path)
    assert p.stdout.split() == ["True", "1"]


def test_current_sees_an_edit_and_a_new_module(site, tmp_path):
    _write(site, tmp_path)
    check = "import sys; from tack.site.cli import main; sys.exit(main(['image', '--check']))"
    env = _env(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE=1)

    def rc():
        return subprocess.run([sys.executable, "-c", check], env=env, capture_output=True,
                              cwd=tmp_path).returncode
    assert rc() == 0
    (site / "tack" / "extra_module.py").write_text("X = 1\n")
    assert rc() == 1
    (site / "tack" / "extra_module.py").unlink()
    assert rc() == 0
    # A time changed, the content not (an install that sets the times): still current, by content.
    records = site / "tack" / "records.py"
    os.utime(records, ns=(1, 1))
    assert rc() == 0
    # The same size and another content: not current.
    records.write_text(_same_size_edit(records.read_text()))
    os.utime(records, ns=(2 * 10**9, 2 * 10**9))    # not the second recorded (a fast test's)
    assert rc() == 1


def _same_size_edit(text: str) -> str:
    """The module's text with one letter of its docstring in the other case."""
    assert text.startswith('"""') and text[3].isalpha()
    return text[:3] + text[3].swapcase() + text[4:]


def test_an_edit_in_the_second_the_image_was_written_is_not_served_stale(site, tmp_path):
    """A source stamped in the second the image is written (or later: an edit as it is written,
    a clock behind the file server's) may be edited again within that second at the same size,
    and keep the time recorded: it is recorded with no time, checked by its content."""
    keys = site / "tack" / "cache" / "keys.py"
    import time
    stamp = time.time_ns() + 3600 * 10**9             # "now", as the image sees it, or later
    os.utime(keys, ns=(stamp, stamp))
    _write(site, tmp_path)
    said = _image_command(site, tmp_path, "--check").stdout
    assert "1 of its modules by their content" in said, said
    original = keys.read_text()
    keys.write_text(_same_size_edit(original))
    os.utime(keys, ns=(stamp, stamp))                 # the same second, the same size
    for pyc in (keys.parent / "__pycache__").glob("keys.*.pyc"):
        pyc.unlink()                                  # CPython's .pyc has the same hole: not the image's
    code = ("import json, tack.cache.keys as k; "
            "print(json.dumps([k.__doc__[0], type(k.__spec__.loader).__name__]))")
    p = _py(site, code, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    first, loader = json.loads(p.stdout.strip().splitlines()[-1])
    assert first == _same_size_edit(original)[3] != original[3]
    assert loader == "SourceFileLoader"
    # Unedited, the same module is served from the image, after its content is checked.
    keys.write_text(original)
    os.utime(keys, ns=(stamp, stamp))
    p = _py(site, code, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [original[3], "_Loader"]


def test_an_image_written_just_after_an_install_still_checks_by_time(site, tmp_path):
    """``image`` (as an install runs it, just after copying the sources) waits for the
    sources' second to pass rather than leave every process to read and hash them."""
    for path in (site / "tack").rglob("*.py"):
        os.utime(path)                                # stamped now, as a copy leaves them
    _write(site, tmp_path)
    said = _image_command(site, tmp_path, "--check").stdout
    assert "current, every module by its source's time" in said, said


def test_sources_whose_times_were_reset_are_served_by_content(site, tmp_path):
    """What Spack's build cache does to an install (every file's time 0) and what a tar that
    keeps microseconds does: each module is served after its content is checked."""
    reference = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    _write(site, tmp_path)
    for path in (site / "tack").rglob("*.py"):
        os.utime(path, ns=(0, 0))
    report = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert set(_served(report)) == set(report["loaders"]) - {"tack._image"}
    assert (report["faces"], report["verts"]) == (reference["faces"], reference["verts"])
    # An edit of the same size with its time reset too: that module from its source.
    keys = site / "tack" / "cache" / "keys.py"
    keys.write_text(_same_size_edit(keys.read_text()))
    os.utime(keys, ns=(0, 0))
    report = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert report["loaders"]["tack.cache.keys"] == "SourceFileLoader"
    assert report["loaders"]["tack.cache.stores"] == "_Loader"


def test_an_image_whose_sources_times_moved_is_written_again_for_their_times(site, tmp_path):
    """Served by content, every process reads and hashes every source it imports: ``image
    --check`` says so, and ``image`` writes the image again, for the times the sources have now,
    after which each is checked by its time (a stat) again."""
    _write(site, tmp_path)
    report = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert report["content_checks"] == 0 and _served(report)
    assert "current, every module by its source's time" in _image_command(site, tmp_path, "--check").stdout
    for path in (site / "tack").rglob("*.py"):
        os.utime(path, ns=(0, 0))
    report = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert report["content_checks"] >= len(_served(report)) > 0
    said = _image_command(site, tmp_path, "--check").stdout
    assert "of its modules by their content" in said and "writes it again" in said, said
    assert "KiB" in _image_command(site, tmp_path).stdout           # written again
    report = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert report["content_checks"] == 0
    assert set(_served(report)) == set(report["loaders"]) - {"tack._image"}
    assert "current, every module by its source's time" in _image_command(site, tmp_path, "--check").stdout


def test_a_compiling_process_writes_again_an_image_whose_sources_times_moved(site, tmp_path):
    _write(site, tmp_path)
    for path in (site / "tack").rglob("*.py"):
        os.utime(path, ns=(0, 0))
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
    first = _child(site, tmp_path)                  # compiles the contour: refreshes the image
    assert first["content_checks"] > 0
    report = _child(site, tmp_path)
    assert report["content_checks"] == 0
    assert set(_served(report)) == set(report["loaders"]) - {"tack._image"}


def test_the_finder_serves_only_its_own_package(site, tmp_path):
    _write(site, tmp_path)
    (tmp_path / "tackle.py").write_text("WHO = 'not tack'\n")
    p = _py(site, "import sys, tack, tackle; sys.path.insert(0, '.'); "
            "from tack import _image; f = _image.finder(); "
            "print(f.find_spec('tackle'), f.find_spec('tack.nothing_here'), f.find_spec('os'), "
            "tackle.WHO)", tmp_path, PYTHONPATH=f"{site}{os.pathsep}{tmp_path}")
    assert p.stdout.split() == ["None", "None", "None", "not", "tack"]


def test_an_optimizing_python_has_an_image_of_its_own(site, tmp_path):
    """Under ``-OO`` (``PYTHONOPTIMIZE=2``) the image is ``import-image.<tag>.opt-2.bin``, as the
    ``.pyc`` files are ``.opt-2.pyc``: written apart from the plain one, and it serves code
    compiled at that level (no docstrings), while the plain image keeps serving its own."""
    tag = sys.implementation.cache_tag
    plain = _write(site, tmp_path)
    assert plain.name == f"import-image.{tag}.bin"
    p = _py(site, "import sys; from tack.site.cli import main; sys.exit(main(['image']))",
            tmp_path, PYTHONOPTIMIZE=2)
    optimized = site / "tack" / "__pycache__" / f"import-image.{tag}.opt-2.bin"
    assert str(optimized) in p.stdout and optimized.is_file() and plain.is_file()
    ask = ("import json, tack, tack.cache.stores as s; from tack import _image; f = _image.finder(); "
           "print(json.dumps([f.served, s.__doc__ is None, type(s.__spec__.loader).__name__]))")
    served, no_doc, loader = json.loads(_py(site, ask, tmp_path, PYTHONOPTIMIZE=2).stdout)
    assert served > 0 and no_doc and loader == "_Loader"
    served, no_doc, loader = json.loads(_py(site, ask, tmp_path).stdout)
    assert served > 0 and not no_doc and loader == "_Loader"
    report = _child(site, tmp_path, PYTHONOPTIMIZE=2)
    assert report["image_path"] == str(optimized) and report["faces"] > 0


def test_tools_that_ask_the_loader_get_answers(site, tmp_path):
    """The one loader the image's modules share answers what tools ask a module's loader by
    name: ``runpy`` (``python -m tack.cache``) its code, ``importlib.resources`` and Jinja's
    ``PackageLoader`` the package's files, ``get_source`` its text."""
    _write(site, tmp_path)
    ask = ("import json, importlib.resources, jinja2, tack, tack.site, tack.cache.keys as k; "
           "from tack import _image; loader = k.__spec__.loader; "
           "env = jinja2.Environment(loader=jinja2.PackageLoader('tack.site', 'templates')); "
           "print(json.dumps([type(loader).__name__, loader is tack.site.__spec__.loader, "
           "'def digest' in loader.get_source('tack.cache.keys'), "
           "loader.get_filename('tack.cache.keys') == k.__file__, loader.is_package('tack.site'), "
           "sorted(p.name for p in importlib.resources.files('tack.site').joinpath('templates').iterdir()), "
           "sorted(env.list_templates()), _image.finder().served > 0, "
           "__import__('pkgutil').get_data('tack.site', 'templates/modulefile.lua.j2')[:2].decode()]))")
    got = json.loads(_py(site, ask, tmp_path).stdout.strip().splitlines()[-1])
    assert got[:5] == ["_Loader", True, True, True, True]
    assert got[5] == got[6] == ["modulefile.lua.j2", "modulefile.tcl.j2"] and got[7]
    lua = (ROOT / "tack" / "site" / "templates" / "modulefile.lua.j2").read_text()
    assert got[8] == lua[:2]                                 # pkgutil.get_data: the loader's get_data
    env = _env(PYTHONPATH=str(site), TACK_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-m", "tack.cache", "--help"], env=env, capture_output=True,
                       text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 0 and "usage" in p.stdout.lower(), p.stderr


def test_image_checks_with_zlibs_crc32_and_importlibs_source_hash_without_importing_them(monkeypatch):
    """The image's CRC-32 (zlib's, through ctypes when the zlib module is not imported: its import
    is 0.2 ms of a warm process) and source hash (``importlib.util``'s, from importlib's frozen
    bootstrap) are the values the image's writer records, whichever path computes them."""
    import importlib.util
    import zlib

    from tack import _image
    samples = [b"", b"a", bytes(range(256)) * 37, os.urandom(100_003)]
    monkeypatch.delitem(sys.modules, "zlib")                   # as in a fresh NumPy process
    through_ctypes = _image.crc32_function()
    monkeypatch.setitem(sys.modules, "zlib", zlib)
    through_module = _image.crc32_function()
    assert through_module is zlib.crc32
    if sys.platform.startswith("linux"):
        assert through_ctypes is not zlib.crc32                 # libz.so.1 is found on Linux
    for data in samples:
        assert through_ctypes(data) == through_module(data) == zlib.crc32(data)
        assert _image.source_hash(data) == importlib.util.source_hash(data)


def test_image_crc32_falls_back_to_the_zlib_module_without_libz(monkeypatch):
    """Where no libz.so.1 can be opened (another libc's naming, a stripped container), the CRC-32
    is the zlib module's: the image still serves, at the module's import cost."""
    import ctypes
    import zlib

    from tack import _image

    def no_library(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.delitem(sys.modules, "zlib")
    monkeypatch.setattr(ctypes, "CDLL", no_library)
    crc32 = _image.crc32_function()
    assert crc32(b"tack") == zlib.crc32(b"tack") and "zlib" in sys.modules


def test_the_image_holds_what_the_source_compiles_to_not_a_stale_pyc(site, tmp_path):
    """A ``.pyc`` that is not its source's (unchecked-hash, left from before an edit) was the
    image's code, recorded with the new source's hash: the old code was served for good, and the
    image called current. It is now compiled from the source it records."""
    records = site / "tack" / "records.py"
    original = records.read_text()
    records.write_text(original + "\nMARK = 'old'\n")
    assert compileall.compile_dir(str(site), quiet=1, force=True,
                                  invalidation_mode=__import__("py_compile").PycInvalidationMode.UNCHECKED_HASH)
    records.write_text(original + "\nMARK = 'new, and longer'\n")
    _write(site, tmp_path)
    assert compileall.compile_dir(str(site), quiet=1, force=True)       # the .pyc files rebuilt
    p = _py(site, "import json, tack, tack.records as r, tack._image as i; "
            "print(json.dumps([r.MARK, type(r.__loader__).__name__]))", tmp_path)
    assert json.loads(p.stdout.strip().splitlines()[-1]) == ["new, and longer", "_Loader"]


def test_a_module_edited_after_its_import_is_still_answered_for_by_name(site, tmp_path):
    """A module imported from the image whose source is then edited in the running process (an
    upgrade under a service, an editor beside a notebook): ``get_source``, ``get_filename`` and
    package resources answer from the source, as without the image, instead of ImportError."""
    _write(site, tmp_path)
    code = ("import json, importlib.resources, tack.site as s, tack.records as r\n"
            "from pathlib import Path\n"
            "p = Path(r.__file__); p.write_text(p.read_text() + '\\n# edited\\n')\n"
            "print(json.dumps([type(r.__loader__).__name__, r.__loader__.get_filename('tack.records') == r.__file__,\n"
            "                  r.__loader__.get_source('tack.records').endswith('# edited\\n'),\n"
            "                  importlib.resources.files('tack.site').joinpath('__init__.py').is_file()]))\n")
    p = _py(site, code, tmp_path)
    assert json.loads(p.stdout.strip().splitlines()[-1]) == ["_Loader", True, True, True]


def test_damage_to_the_index_is_caught_by_its_checksum(site, tmp_path):
    """One byte of the index (a package's flag) changed: the index no longer matches the CRC-32
    the head records, so the image is not used (it was, and ``import tack.cache.keys`` failed)."""
    import marshal
    image = _write(site, tmp_path)
    data = bytearray(image.read_bytes())
    n = int.from_bytes(data[12:16], "little")
    index = marshal.loads(bytes(data[H:H + n]))
    entry = list(index["tack.cache"])
    assert entry[1] is True
    entry[1] = False
    index["tack.cache"] = tuple(entry)
    raw = marshal.dumps(index)
    assert len(raw) == n
    data[H:H + n] = raw
    image.write_bytes(bytes(data))
    report = _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert report["faces"] > 0 and not report["finder"]


def test_under_a_pycache_prefix_the_image_is_where_python_writes_bytecode(site, tmp_path):
    """``-X pycache_prefix``: a compiling process writes the image under the prefix, as CPython
    writes its ``.pyc`` files, nothing into the install's tree, and the modules served from it
    name their ``__cached__`` there (before: the install's ``__pycache__`` for both)."""
    shutil.rmtree(site / "tack" / "__pycache__", ignore_errors=True)
    for d in (site / "tack").rglob("__pycache__"):
        shutil.rmtree(d)
    prefix = tmp_path / "prefix"
    _child(site, tmp_path, PYTHONPYCACHEPREFIX=prefix)                  # compiles: writes the image
    assert not list((site / "tack").rglob("__pycache__"))
    assert list(prefix.rglob("import-image.*.bin"))
    report = _child(site, tmp_path, PYTHONPYCACHEPREFIX=prefix)
    assert report["finder"] and _served(report) and report["cached_wrong"] == []


def test_the_finder_never_closes_a_descriptor_that_is_no_longer_its_image(site, tmp_path):
    """A program that closed every descriptor (a daemon) and opened its log under the image's old
    number: the finder, finding its reads no longer the image, stops serving and leaves the log
    open (it closed it)."""
    image = _write(site, tmp_path)
    from tack import _image
    f = _image.open_image("tack", str(site / "tack"))
    assert f is not None
    os.close(f.fd)                                  # the daemon's closerange
    log = os.open(str(tmp_path / "log"), os.O_WRONLY | os.O_CREAT)
    try:
        assert log == f.fd
        f.close()
        os.write(log, b"still open\n")
    finally:
        os.close(log)
    assert image.exists()


def test_a_fifo_where_the_image_is_is_not_waited_on(site, tmp_path):
    """A FIFO at the image's path (never an image): ``open_image`` returns at once (it waited for
    a writer forever)."""
    from tack import _image
    path = Path(_image.image_path(str(site / "tack")))
    path.parent.mkdir(exist_ok=True)
    os.mkfifo(path)
    p = subprocess.run([sys.executable, "-c", "import sys; from tack import _image; "
                        f"print(_image.open_image('tack', {str(site / 'tack')!r}))"],
                       env=_env(PYTHONPATH=str(site)), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr


def test_a_module_that_does_not_compile_leaves_the_image_current(site, tmp_path):
    """A stray module whose source does not compile: the image is written with every other
    module (``image`` died with its SyntaxError before), stays current, and importing that module
    raises its SyntaxError as without the image."""
    (site / "tack" / "stray_broken.py").write_text("def broken(:\n")
    _write(site, tmp_path)
    p = _py(site, "import sys; from tack.site.cli import main; sys.exit(main(['image', '--check']))", tmp_path)
    assert p.returncode == 0
    p = _py(site, "import tack, tack.records as r\ntry:\n    import tack.stray_broken\n"
            "except SyntaxError as e:\n    print('SyntaxError', type(r.__loader__).__name__)", tmp_path)
    assert p.stdout.split() == ["SyntaxError", "_Loader"]


def test_image_command_writes_where_the_finder_reads_through_a_linked_path(site, tmp_path):
    """Tack imported through a symbolic link to its directory, under ``-X pycache_prefix``:
    ``image`` writes the image where the finder (and CPython, for the ``.pyc`` files) looks, under
    the path as imported, and ``--check`` speaks of that image (before: it resolved the link and
    wrote it under the real path, said it was current, and no process ever used it)."""
    link, prefix = tmp_path / "link", tmp_path / "prefix"
    link.symlink_to(site, target_is_directory=True)
    env = {"PYTHONPATH": link, "PYTHONPYCACHEPREFIX": prefix, "PYTHONDONTWRITEBYTECODE": 1}
    _py(site, "import sys; from tack.site.cli import main; sys.exit(main(['image']))", tmp_path, **env)
    report = _child(site, tmp_path, **env)
    assert report["finder"] and _served(report), report
    assert report["image_path"].startswith(str(prefix / str(link).lstrip(os.sep)))


HOOKED = r"""
import json, sys
import importlib.machinery


class Instrument:
    '''An import hook a program installs before importing Tack (as typeguard's and beartype's
    do): it records the modules it is asked for and takes tack.errors itself, marking it.'''
    asked = []

    def find_spec(self, name, path=None, target=None):
        self.asked.append(name)
        if name != "tack.errors":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader

        class Marking(importlib.machinery.SourceFileLoader):
            def exec_module(self, module):
                module.INSTRUMENTED = True
                real.exec_module(module)
        spec.loader = Marking(name, spec.origin)
        return spec


hook = Instrument()
sys.meta_path.insert(0, hook)
import numpy as np
import tack
from tack import _image
from tack.kernels.contour import contour
g = np.linspace(-1.0, 1.0, 12, dtype=np.float32)
verts, faces = contour(np.sqrt(g[:, None, None] ** 2 + g[None, :, None] ** 2 + g[None, None, :] ** 2), 0.7)
f = _image.finder()
print(json.dumps({"asked": sorted(n for n in hook.asked if n.startswith("tack.")),
                  "marked": getattr(sys.modules["tack.errors"], "INSTRUMENTED", False),
                  "served": f.served, "faces": int(len(faces)),
                  "loaders": {m: type(sys.modules[m].__spec__.loader).__name__
                              for m in ("tack.errors", "tack.api", "tack.launch")},
                  "order": [type(x).__name__ if not isinstance(x, type) else x.__name__
                            for x in sys.meta_path][:3]}))
"""


def test_an_import_hook_installed_before_tack_still_sees_its_modules(site, tmp_path):
    """A hook a program puts on ``sys.meta_path`` before ``import tack`` (to instrument or type-
    check packages) is asked for Tack's modules before the image's finder, and what it takes is
    imported its way; the rest are still served from the image.  (The finder went first: such a
    hook never saw a Tack module.)  One added after ``import tack`` goes first by itself."""
    _write(site, tmp_path)
    p = _py(site, HOOKED, tmp_path)
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["order"] == ["Instrument", "ImageFinder", "DistutilsMetaFinder"] or \
        got["order"][:2] == ["Instrument", "ImageFinder"], got["order"]
    assert {"tack.api", "tack.errors", "tack.launch", "tack.kernels.contour"} <= set(got["asked"]), got
    assert got["marked"] is True
    assert got["loaders"] == {"tack.errors": "Marking", "tack.api": "_Loader", "tack.launch": "_Loader"}
    assert got["served"] >= 20 and got["faces"] > 0, got


def test_a_group_is_read_once_and_a_module_imported_again_is_served_again(site, tmp_path):
    """The modules ``import tack`` imports are one group in the image: one blob, read, checked and
    unmarshalled at the first of them, each module's code handed out once, and the group dropped
    when all are (none kept past its import).  A module removed from ``sys.modules`` and
    imported again gets its code again, the group read for it and not kept."""
    _write(site, tmp_path)
    code = r"""
import json, sys
import tack
from tack import _image
f = _image.finder()
states = {m: sys.modules[m].__spec__.loader_state for m in ("tack.api", "tack.launch", "tack.types")}
served, groups = f.served, [v[1] for v in f.groups.values()]
del sys.modules["tack.types"]
import tack.types as again
import tack.cache.keys
left = [v[1] for v in f.groups.values() if v[0] is not None]
print(json.dumps([states, served, groups, f.served - served, left,
                  type(again.__spec__.loader).__name__, hasattr(again, "Array")]))
"""
    states, served, groups, again, left, loader, ok = json.loads(
        _py(site, code, tmp_path).stdout.splitlines()[-1])
    offsets = {s[0] for s in states.values()}
    assert len(offsets) == 1 and sorted(s[3] for s in states.values()) == sorted(
        {s[3] for s in states.values()})                                # one blob, three places
    assert served >= 12 and groups == [0]                             # each handed out, none kept
    assert (loader, ok) == ("_Loader", True) and again >= 3   # types again; cache, keys...
    assert left == [12 - (again - 1)]       # the first call's group: those not imported yet


@pytest.mark.parametrize("how", ["swapped", "negative", "bool"])
def test_an_index_whose_places_were_changed_serves_no_module_anothers_code(site, tmp_path, how):
    """An index rewritten with its checksum made again (no writer of Tack's does this) whose
    group places were swapped, or set to -1 or True (which index a list from its end, or as 1):
    a module ran another module's code (``tack.cache.keys`` got ``trust``'s), and ``image
    --check`` called the image current.  Each code object is named by its module's path and
    checked against it: the module comes from its source, and ``--check`` says stale."""
    import marshal
    image = _write(site, tmp_path)
    data = bytearray(image.read_bytes())
    n = int.from_bytes(data[12:16], "little")
    index = marshal.loads(bytes(data[H:H + n]))
    keys, stores = list(index["tack.cache.keys"]), list(index["tack.cache.stores"])
    if how == "swapped":
        keys[8], stores[8] = stores[8], keys[8]
        index["tack.cache.stores"] = tuple(stores)
    else:
        keys[8] = -1 if how == "negative" else True
    index["tack.cache.keys"] = tuple(keys)
    raw = marshal.dumps(index)
    data = data[:12] + len(raw).to_bytes(4, "little") + zlib.crc32(raw).to_bytes(4, "little") + raw \
        + data[H + n:]
    image.write_bytes(bytes(data))
    p = _py(site, "import json, tack.cache.keys as k, tack.cache.stores as s; "
            "print(json.dumps([hasattr(k, 'tack_version_id'), hasattr(s, 'open_session')]))",
            tmp_path, PYTHONDONTWRITEBYTECODE=1)
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [True, True]
    assert _child(site, tmp_path, PYTHONDONTWRITEBYTECODE=1)["faces"] > 0
    check = subprocess.run([sys.executable, "-c", "import sys; from tack.site.cli import main; "
                            "sys.exit(main(['image', '--check']))"], capture_output=True, text=True,
                           env=_env(PYTHONPATH=str(site), TACK_IMPORT_IMAGE="0"), cwd=tmp_path,
                           timeout=300)
    assert check.returncode == 1, check.stdout + check.stderr


PRELOADED = r"""
import json, sys, threading
import numpy as np
through = []                            # the Tack modules importlib's own machinery imported
audited = []
def prof(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_find_and_load" and "importlib" in frame.f_code.co_filename:
        name = frame.f_locals.get("name", "")
        if name.startswith("tack"):
            through.append(name)
sys.addaudithook(lambda event, args: event == "import" and str(args[0]).startswith("tack.")
                 and audited.append(args[0]))
if "--thread" in sys.argv:
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True).start()
sys.setprofile(prof)
import tack
after_import = list(through)
x = np.arange(5, dtype=np.float64)
@tack.kernel
def twice(a, out):
    i = tack.tid()
    out[i] = 2.0 * a[i]
out = np.empty_like(x)
tack.launch(twice, 5, (x, out))
sys.setprofile(None)
if "--thread" in sys.argv:
    stop.set()
from tack._image_write import GROUPS
wrong = []
for group in GROUPS:
    for m in group:
        mod = sys.modules[m]
        spec = mod.__spec__
        parent, _, child = m.rpartition(".")
        if not (spec.name == m and mod.__loader__ is spec.loader and mod.__file__ == spec.origin
                and mod.__cached__ == spec.cached and mod.__package__ == spec.parent
                and not spec._initializing
                and (getattr(sys.modules[parent], child) is mod     # or what the package rebound
                     or not isinstance(getattr(sys.modules[parent], child), type(sys)))
                and (getattr(mod, "__path__", None) == spec.submodule_search_locations)):
            wrong.append(m)
print(json.dumps({"import": after_import, "call": through[len(after_import):], "wrong": wrong,
                  "ok": bool((out == 2 * x).all()), "audited": audited,
                  "groups": [list(g) for g in GROUPS]}))
"""


def test_a_group_is_imported_whole_without_importlibs_machinery(site, tmp_path):
    """``import tack`` imports the image's first group, and a first call on the CPU the second,
    each module made as importlib makes it (spec, attributes, parent's attribute, the ``import``
    audit event) but without ``_find_and_load`` and the 50 or so calls of importlib's Python
    behind each (all 24 went through it).  With another thread running, the same: each module
    runs under importlib's lock for it, as importlib runs it (``C_THREAD``)."""
    _write(site, tmp_path)
    (tmp_path / "p.py").write_text(PRELOADED)
    runs = {}
    for how in ("alone", "--thread"):
        p = subprocess.run([sys.executable, str(tmp_path / "p.py"), how], capture_output=True, text=True,
                           env=_env(PYTHONPATH=str(site), TACK_CACHE_DIR=str(tmp_path / "cache")),
                           cwd=tmp_path, timeout=600)
        assert p.returncode == 0, p.stderr
        runs[how] = json.loads(p.stdout.strip().splitlines()[-1])
    alone, threaded = runs["alone"], runs["--thread"]
    first, second = alone["groups"]
    for got in (alone, threaded):
        assert got["ok"] and got["wrong"] == [], got
        assert set(first) | set(second) <= set(got["audited"]), got["audited"]
    for got in (alone, threaded):       # (the second run's first call is a hit: it compiles none)
        assert not set(got["import"]) & set(first), got["import"]
        assert not set(got["call"]) & set(second), got["call"]
        assert "tack" in got["import"] and "tack._image" in got["import"]   # not the image's to serve


# A thread that imports a module of the first group as soon as it is in sys.modules, while
# ``import tack`` imports the group: one started by a C library calling back into Python
# (pthread_create, a ctypes callback), which Python's thread count (``_thread._count()``, what
# preload looked at) leaves out, or a Python thread.  A switch interval of a microsecond hands
# the interpreter to it while the module's code runs.
C_THREAD = r"""
import ctypes, json, sys, threading, time
which, module, name = sys.argv[1], sys.argv[2], sys.argv[3]
got = []
def body(_=None):
    try:
        t0 = time.perf_counter()
        while module not in sys.modules and time.perf_counter() - t0 < 30:
            pass
        got.append(getattr(__import__(module, fromlist=[name]), name).__name__)
    except BaseException as e:
        got.append(repr(e))
    return None
if which == "c":
    libc = ctypes.CDLL(None)
    callback = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(body)
    tid = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(tid), None, callback, None) == 0
else:
    t = threading.Thread(target=body)
    t.start()
sys.setswitchinterval(1e-6)
import tack
if which == "c":
    libc.pthread_join(tid, None)
else:
    t.join()
print(json.dumps(got))
"""


@pytest.mark.parametrize("which", [
    pytest.param("c", marks=pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="starts a thread with the C library's "
        "pthread_create through ctypes.CDLL(None), which names glibc on Linux")),
    "python"])
def test_a_thread_importing_a_group_module_meanwhile_gets_it_whole(site, tmp_path, which):
    """Another thread importing a module while its group is imported waits until the module is
    whole, as under importlib, and gets what it asked for.  A thread a C library started (which
    preload did not count) got ``ImportError: cannot import name 'lowers_to' from partially
    initialized module 'tack.language'``, in each of three runs (found by a hostile review)."""
    _write(site, tmp_path)
    (tmp_path / "t.py").write_text(C_THREAD)
    for module, name in (("tack.language", "lowers_to"), ("tack.launch", "report_timings")):
        p = subprocess.run([sys.executable, str(tmp_path / "t.py"), which, module, name],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env=_env(PYTHONPATH=str(site), TACK_CACHE_DIR=str(tmp_path / "cache")))
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout.strip().splitlines()[-1]) == [name], (module, p.stdout)


def test_a_module_that_raises_when_its_group_is_imported_is_left_to_importlib(site, tmp_path):
    """A module whose code raises while its group is imported is taken out of ``sys.modules``
    and the group's import stops there: importlib imports it where it is imported (and raises
    there, if it raises again); here it raises once, and Tack works with one ``tack.types``."""
    _write(site, tmp_path)
    code = r"""
import importlib.util, json, os, sys
# tack._image alone (its package's __init__ not run yet), to watch the loader it will use
path = os.path.join(os.environ["PYTHONPATH"], "tack", "_image.py")
spec = importlib.util.spec_from_file_location("tack._image", path)
_image = sys.modules["tack._image"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(_image)
raised = []
real = _image._Loader.exec_module
def once(self, module):
    if module.__name__ == "tack.types" and not raised:
        raised.append(1)
        raise RuntimeError("once")
    return real(self, module)
_image._Loader.exec_module = once
import tack
launch = sys.modules["tack.launch"]
print(json.dumps([raised, launch.T is sys.modules["tack.types"], hasattr(launch.T, "Array"),
                  tack.types is sys.modules["tack.types"]]))
"""
    assert json.loads(_py(site, code, tmp_path).stdout.splitlines()[-1]) == [[1], True, True, True]


def test_each_group_lists_a_module_after_its_package_and_what_it_imports_first():
    """``GROUPS``' order is the order ``preload`` runs the modules in: each after its package and
    after the group's modules it imports at its top (found here from its syntax), so that none
    of them is imported through importlib from inside another."""
    import ast
    from tack._image_write import GROUPS
    pkg_dir = ROOT / "tack"

    def source(name):
        rel = Path(*name.split(".")[1:])
        return pkg_dir / rel / "__init__.py" if (pkg_dir / rel).is_dir() else pkg_dir / rel.with_suffix(".py")

    for group in GROUPS:
        for i, name in enumerate(group):
            path = source(name)
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            needs = {package} if package != name else set()
            for node in ast.parse(path.read_text()).body:
                for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
                    if isinstance(n, ast.Import):
                        needs |= {a.name for a in n.names}
                    elif isinstance(n, ast.ImportFrom):
                        base = n.module or ""
                        if n.level:
                            parts = package.split(".")[:len(package.split(".")) - n.level + 1]
                            base = ".".join(parts + ([n.module] if n.module else []))
                        needs |= {base} | {f"{base}.{a.name}" for a in n.names}
            later = (needs & set(group)) - set(group[:i])
            assert not later, f"{name} imports {sorted(later)}, listed after it in its group"
