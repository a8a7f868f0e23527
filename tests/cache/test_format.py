"""The warm path's parsers, on their own: entry metadata text and the host's cpuinfo."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tack.backends import cpu_identity
from tack.cache import entry

from .conftest import KMOD, check_results, run_child, write_module

# Field names as the store writes them: no tab, newline or backslash.
names = st.text(st.characters(blacklist_characters="\t\n\\", blacklist_categories=("Cs",)),
                min_size=1, max_size=8)
values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(scalars=st.dictionaries(names, values, max_size=5),
       rows=st.lists(st.lists(values, min_size=1, max_size=4), max_size=4))
def test_metadata_round_trip(scalars, rows):
    """Any text (tabs, newlines, backslashes included) comes back as written, rows as rows."""
    meta = {k: v for k, v in scalars.items() if k not in ("dep", "site", "arg", "argspec")}
    meta["dep"] = rows
    assert entry.decode_meta(entry.encode_meta(meta)) == {"site": [], "arg": [], "argspec": [], **meta}


@pytest.mark.parametrize("text", [b"kernel", b"kernel\ta\tb", b"dep\ta\nkernel", b"entry\\t\tx\ty"])
def test_metadata_with_a_wrong_number_of_values_is_damaged(text):
    with pytest.raises(entry.DamagedEntry, match="metadata field"):
        entry.decode_meta(text)


def test_first_cpu_block_across_reads(tmp_path):
    """Only the first CPU's block is used, even when it spans several reads and others follow."""
    flags = " ".join(f"flag{i}" for i in range(1500))          # a block longer than one read
    block = ("processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
             "model name\t: AMD EPYC {n}\nflags\t\t: {flags}\nbogomips\t: 4000\n\n")
    path = tmp_path / "cpuinfo"
    path.write_text("".join(block.format(n=n, flags=flags if n == 0 else "other") for n in range(64)))
    fields = cpu_identity._first_cpu(str(path))
    assert fields == {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "1",
                      "model name": "AMD EPYC 0", "flags": flags}


def test_first_cpu_without_blank_line(tmp_path):
    """An AArch64-style file (one block, no trailing blank line) is read whole."""
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f")
    assert cpu_identity._first_cpu(str(path)) == {"Features": "fp asimd sve", "CPU implementer": "0x41",
                                            "CPU part": "0xd4f"}


def test_metadata_only_the_fields_asked_for():
    """A hit parses just what it uses; the other fields are skipped, even when odd."""
    text = entry.encode_meta({"arch": "zen3", "dep": [["k", "tack", "module", "tack"]], "entry": "e",
                              "site": [["f", "a", "p", "1", "k", "0"]], "target": "x\ty",
                              "argspec": [["array:float64:1:C:w"]]})
    meta = entry.decode_meta(text, only=entry.HIT_FIELDS)
    assert meta == {"dep": [["k", "tack", "module", "tack"]], "entry": "e",
                    "site": [["f", "a", "p", "1", "k", "0"]], "argspec": [["array:float64:1:C:w"]]}
    assert entry.decode_meta(text + b"\nkernel\ta\tb", only=entry.HIT_FIELDS) == meta
    with pytest.raises(entry.DamagedEntry):
        entry.decode_meta(text + b"\nentry\ta\tb", only=entry.HIT_FIELDS)


@pytest.mark.parametrize("cpuinfo", ["missing", "no flags"])
def test_host_identity_without_cpuinfo_flags_uses_llvm(monkeypatch, tmp_path, cpuinfo):
    """Without /proc/cpuinfo (macOS, Windows) or without feature flags in it (POWER, some
    containers), the host's identity is LLVM's own CPU name and features, what code is compiled
    for: two different CPUs never share a key."""
    import llvmlite.binding as llvm

    def first_cpu(path):
        if cpuinfo == "missing":
            raise FileNotFoundError(2, "No such file or directory", path)
        return {"model name": "a CPU without a flags line"}
    monkeypatch.setattr(cpu_identity, "_first_cpu", first_cpu)
    monkeypatch.setattr(cpu_identity, "_host_identity", None)
    ident = cpu_identity.host_cpu_identity()
    assert ident["llvm cpu"] == llvm.get_host_cpu_name()
    assert ident["llvm features"] == llvm.get_host_cpu_features().flatten()
    assert "+" in ident["llvm features"]
    monkeypatch.setattr(cpu_identity, "_host_identity", None)
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: llvm.FeatureMap({"avx512f": False}))
    assert cpu_identity.host_cpu_identity() != ident        # another CPU's features: another identity


def test_llvmlite_found_only_by_an_import_hook_is_still_told_apart(monkeypatch, tmp_path):
    """An llvmlite that no sys.path entry holds, found by an import hook (an editable install),
    was "none" to the host key, so every such LLVM shared one key and served another's code.
    Its library is found through the hook, and two of them are two keys."""
    import importlib.abc
    import importlib.machinery
    import sys

    class Hook(importlib.abc.MetaPathFinder):
        def __init__(self, where):
            self.where = where

        def find_spec(self, name, path=None, target=None):
            if name != "llvmlite":
                return None
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(self.where / "llvmlite")]
            return spec

    def llvmlite_at(where, size):
        (where / "llvmlite" / "binding").mkdir(parents=True)
        (where / "llvmlite" / "binding" / "libllvmlite.so").write_bytes(b"\0" * size)
        return where

    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere")])
    monkeypatch.delitem(sys.modules, "llvmlite", raising=False)
    seen = []
    for n, size in ((1, 10), (2, 20)):
        hook = Hook(llvmlite_at(tmp_path / f"llvm{n}", size))
        monkeypatch.setattr(sys, "meta_path", [hook] + sys.meta_path)
        seen.append(cpu_identity._llvmlite_version())
        monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f is not hook])
    assert seen[0] != seen[1]
    assert seen[0].startswith(str(tmp_path / "llvm1" / "llvmlite" / "binding" / "libllvmlite.so") + ":10:")



@pytest.mark.parametrize("magic", [b"TACKENT1", b"TACKENT2", b"TACKENT3"])
def test_entry_of_an_older_format_is_refused_as_an_older_one(magic):
    """An entry written with SHA-256 (magic TACKENT1), BLAKE2b (TACKENT2) or SHA-512 (TACKENT3)
    checksums is damaged to
    this Tack, and the reason says it is an older format, not foreign data; today's round-trips;
    another magic is not a Tack entry."""
    import hashlib
    key = "ab" * 32
    kind = entry.KIND_VARIANT
    data = entry.encode(kind, key, {"entry": "k"}, b"payload")
    assert entry.decode(data, kind, key)[2] == b"payload"
    meta_b = data[entry.HEAD.size:-len(b"payload")]
    old = entry.HEAD.pack(magic, kind, len(meta_b), 7,
                          hashlib.sha256(key.encode() + meta_b + b"payload").digest(),
                          key.encode()) + meta_b + b"payload"
    with pytest.raises(entry.DamagedEntry, match=f"older Tack's format \\({magic.decode()}\\)"):
        entry.decode(old, kind, key)
    with pytest.raises(entry.DamagedEntry, match="not a Tack cache entry"):
        entry.decode(b"TACKENT9" + old[8:], kind, key)


def test_llvm_version_read_without_importing_llvmlite():
    """A node's LLVM (part of a site bundle's key) is llvmlite's own version, read from its
    _version.py, with llvmlite not imported."""
    import subprocess
    import sys
    code = ("import sys; from tack.backends import cpu_identity as c; v = c.llvm_version(); "
            "print('llvmlite' in sys.modules); import llvmlite; print(v == 'llvmlite-' + llvmlite.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("version_py", ["", "def get_versions():\n    return {'version': 'x'}\n",
                                        "version_version = get()\n"])
def test_llvm_version_falls_back_to_the_package(tmp_path, monkeypatch, version_py):
    """An llvmlite whose _version.py does not state its version plainly: its __version__."""
    pkg = tmp_path / "llvmlite"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("__version__ = '9.8.7'\n")
    (pkg / "_version.py").write_text(version_py)
    import sys
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cpu_identity, "_llvm_version", None)
    real = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "llvmlite"}
    for k in real:
        del sys.modules[k]
    try:
        assert cpu_identity.llvm_version() == "llvmlite-9.8.7"
    finally:                    # the real llvmlite back for the rest of the run, the made-up one gone
        for k in [k for k in sys.modules if k.split(".")[0] == "llvmlite"]:
            del sys.modules[k]
        sys.modules.update(real)


def test_a_debug_variant_of_a_kernel_in_a_path_that_is_not_utf8_is_stored_and_found(tmp_path):
    """In debug mode a variant's metadata names its file (bounds-check sites); a kernel imported
    from a directory whose name is not UTF-8 made every store fail ('kernel cache error
    (UnicodeEncodeError ...)' in every process) and its variant never cached.  Now stored, and
    the next process finds it, the file's bytes read back as they were."""
    meta = {"site": [["k", "a", os.fsdecode(b"/d/\xff\xfe/k.py"), "3"]], "kernel": "k"}
    assert entry.decode_meta(entry.encode_meta(meta)) == dict(meta, dep=[], arg=[], argspec=[])
    src = write_module(tmp_path / os.fsdecode(b"src-\xff\xfe"), KMOD)
    for n, want in ((1, {"lowered": 0, "variant": 0}), (2, {"lowered": 0, "variant": 1})):
        run = run_child(tmp_path / "cache", src, [{"kernel": "k_main", "n": 5}],
                        env={"TACK_DEBUG": "1"})
        check_results(run)
        assert run.warnings == [] and run.stats["hits"] == want, (n, run.warnings, run.stats)
