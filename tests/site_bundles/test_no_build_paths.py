"""No absolute path of the machine that built a bundle is stored inside it (issue 23).

A bundle is built inside one prefix (a Spack or conda build, a site's build host) and served from
another: a Spack build cache installs it into a different install root, and Spack relocates only
the files it recognises (ELF and Mach-O binaries, text files), not a bundle. So a bundle must
name no build path at all: neither the directory it was built in, nor the tree Tack and the
kernels were imported from, nor the Python prefix, nor the home directory. Source files are
recorded relative to the import root they were loaded from (``tack/kernels/contour.py``) and
found again on the machine that reads them."""

import inspect
import json
import os
import sys
import uuid

import tack
import tack.aot
import tack.kernels.contour
from tack.backends.cpu_runtime import host_arch
from tack.cache import bundle, entry
from tack.ir import LoweredKernel
from tack.site import build
from tack.site.config import load

from .test_build import run_build

CONTOUR_FILE = inspect.getsourcefile(tack.kernels.contour)


def build_paths(build_dir):
    """The absolute paths no bundle may hold: where it was built, where Tack (and the kernels)
    were imported from, the Python prefixes and the home directory (each as given and resolved)."""
    paths = {str(build_dir), os.path.dirname(os.path.dirname(os.path.abspath(tack.__file__))),
             os.path.dirname(CONTOUR_FILE), sys.prefix, sys.base_prefix, sys.exec_prefix,
             os.path.expanduser("~"), os.getcwd()}
    paths |= {os.path.realpath(p) for p in paths}
    # "/" (a home directory of "/") would match every path: nothing to look for there.
    return sorted(p for p in paths if p.strip(os.sep))


def stored_paths(path, build_dir):
    """[(where, build path)] for each build path found in the bundle at ``path``: in its bytes,
    and in each entry's metadata and payload as the bundle decodes them."""
    paths = build_paths(build_dir)
    found = []
    data = open(path, "rb").read()
    found += [("file bytes", p) for p in paths if p.encode() in data]
    b = bundle.read(path)
    found += [("header", p) for p in paths if p in json.dumps(b.meta)]
    assert b.index, f"{path}: no entries"
    for kind, key in b.index:
        meta, payload = b.get(kind, key)
        text = json.dumps(meta)
        found += [(f"{kind}/{key[:12]} metadata", p) for p in paths if p in text]
        found += [(f"{kind}/{key[:12]} payload", p) for p in paths if p.encode() in payload]
    return found


def test_a_built_bundle_names_no_build_path(tmp_path):
    """`bundles build` for this host's CPU and CUDA PTX, in a directory no other run uses: no
    bundle holds that directory, the source tree, sys.prefix or the home directory; the lowered
    kernels record the contour's file as `tack/kernels/contour.py` and read it back as this
    machine's file (compile errors still point at it)."""
    build_dir = tmp_path / f"tack-build-{uuid.uuid4().hex}"
    build_dir.mkdir()
    config = build_dir / "site.yaml"
    config.write_text(f"version: 1\nbuild:\n  archs:\n    cpu: [{host_arch()}]\n    cuda: [sm_90]\n"
                      "  kernels:\n    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n")
    out_dir = build_dir / "bundles"
    rc, out, err = run_build(load(config), out_dir)
    assert rc == 0, out + err
    names = sorted(os.listdir(out_dir))
    assert len(names) == 2, names
    for name in names:
        path = str(out_dir / name)
        assert stored_paths(path, build_dir) == [], name
        b = bundle.read(path)
        payloads = [b.get(kind, key)[1] for kind, key in b.index if kind == entry.KIND_LOWERED]
        assert payloads, name
        for payload in payloads:
            assert b'"file":"tack/kernels/contour.py"' in payload, name
            low = LoweredKernel.from_bytes(payload)
            sources = [low.kernel.source] + [f.source for f in low.functions.values()]
            assert {s.filename for s in sources} == {CONTOUR_FILE}, name


def test_a_debug_bundle_names_no_build_path(tmp_path):
    """A debug-mode variant records its bounds checks' sites (function, array, file, line): a
    bundle of one, saved with tack.aot into a directory no other run uses, names no build path
    either, and its sites name the contour's file relative to its import root."""
    build_dir = tmp_path / f"tack-build-{uuid.uuid4().hex}"
    build_dir.mkdir()
    (art,) = tack.aot.build(tack.aot.target_of(f"cpu:{host_arch()}"),
                            tack.kernels.contour.tack_warm((8, 8, 8))[:1], debug=True)
    sites = art.meta["site"]
    assert sites, "a debug variant of classify has bounds sites"
    path = tack.aot.save_bundle([art], str(build_dir))
    assert stored_paths(path, build_dir) == []
    meta, _ = bundle.read(path).get(entry.KIND_VARIANT, art.key)
    assert {site[2] for site in meta["site"]} == {"tack/kernels/contour.py"}
