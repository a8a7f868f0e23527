"""CUDA bundles carry SASS beside their PTX (a cubin from the packaged ptxas, for exactly each
configured sm), say what they carry in the build's table, and treat a ptxas update as
``bundles status`` and ``rebuild`` treat an LLVM update: stale, then rebuilt current.  With no
ptxas they carry PTX only and the table says so."""

from __future__ import annotations

import io
import os

import pytest

from tack.backends import gpu
from tack.backends.gpu import unpack_cuda
from tack.cache import bundle, entry
from tack.site import build
from tack.site.config import load

from ..backends.gpu_tools import tool

CONFIG = ("version: 1\nbuild:\n  archs:\n    cuda: [sm_80, sm_90]\n  kernels:\n"
          "    - module: tack.kernels.contour\n      shapes: [[8, 8, 8]]\n")


def run_build(tmp_path, out_dir):
    path = tmp_path / "site.yaml"
    path.write_text(CONFIG)
    out, err = io.StringIO(), io.StringIO()
    rc = build.build_bundles(load(path), output=str(out_dir), out=out, err=err)
    assert rc == 0, out.getvalue() + err.getvalue()
    return out.getvalue()


def variants(path):
    with bundle.read(str(path)) as b:
        return b.meta, [b.get(k, key) for (k, key) in sorted(b.index) if k == entry.KIND_VARIANT]


def status(directory) -> str:
    out = io.StringIO()
    build.bundles_status(str(directory), out=out)
    return out.getvalue()


def rebuild(directory) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert build.bundles_rebuild(str(directory), out=out, err=err) == 0, err.getvalue()
    return out.getvalue()


def table_row(text, arch):
    return next(line for line in text.splitlines() if line.startswith(arch + " "))


def test_cuda_bundles_carry_sass_and_a_ptxas_update_makes_them_stale(tmp_path, monkeypatch):
    tool("ptxas")
    version, sms = gpu.ptxas_info(gpu.find_ptxas())
    out_dir = tmp_path / "bundles"
    said = run_build(tmp_path, out_dir)
    assert "code" in next(line for line in said.splitlines() if line.startswith("arch "))
    names = sorted(os.listdir(out_dir))
    assert len(names) == 2
    for sm in ("sm_80", "sm_90"):
        assert f"PTX + SASS (ptxas {version})" in table_row(said, f"cuda:{sm}")
        path = out_dir / next(n for n in names if f"-cuda-{sm}-" in n)
        head, found = variants(path)
        assert f"sass=ptxas {version}" in head["target"]
        for meta, payload in found:
            ptx, cubin, label = unpack_cuda(payload)
            assert ptx.startswith(b"//") and cubin[:4] == b"\x7fELF" and label == f"{sm} ptxas {version}"
    assert "STALE" not in status(out_dir)
    assert "current, left as is" in rebuild(out_dir)

    # A ptxas update (another version, same key): stale, as an LLVM update is; rebuilt current.
    monkeypatch.setattr(gpu, "_ptxas_info", {gpu.find_ptxas(): ("99.1.2", sms)})
    text = status(out_dir)
    assert text.count("STALE") == 2, text
    assert f"cuda:sm_90's sass toolchain changed since it was built (ptxas {version} then, " \
           "ptxas 99.1.2 now)" in text
    assert build.stale_bundles([str(out_dir)])
    said = rebuild(out_dir)
    assert said.count("rebuilt") == 2, said
    assert "STALE" not in status(out_dir)
    for name in os.listdir(out_dir):
        head, found = variants(out_dir / name)
        assert "sass=ptxas 99.1.2" in head["target"]
        assert all(unpack_cuda(p)[2].endswith(" ptxas 99.1.2") for _, p in found)

    # A node with no ptxas cannot compare: status says so, bundles check does not fail on it,
    # and a rebuild there would drop the SASS, so it is not stale to ``check``.
    def missing():
        raise gpu.ToolError("ptxas not found: tried nowhere")
    monkeypatch.setattr(gpu, "find_ptxas", missing)
    assert "cannot compare cuda:sm_90's sass here: it was made by ptxas 99.1.2" in status(out_dir)
    assert build.stale_bundles([str(out_dir)]) == []
    said = rebuild(out_dir)
    assert said.count("left as is: cannot compare") == 2, said
    for name in os.listdir(out_dir):
        assert all(unpack_cuda(p)[2].endswith(" ptxas 99.1.2") for _, p in variants(out_dir / name)[1])


def test_without_ptxas_bundles_carry_ptx_only_and_say_so(tmp_path, monkeypatch):
    def missing():
        raise gpu.ToolError("ptxas not found: tried nowhere")
    monkeypatch.setattr(gpu, "find_ptxas", missing)
    out_dir = tmp_path / "bundles"
    said = run_build(tmp_path, out_dir)
    for sm in ("sm_80", "sm_90"):
        assert "PTX only (ptxas not found)" in table_row(said, f"cuda:{sm}"), said
    for name in os.listdir(out_dir):
        head, found = variants(out_dir / name)
        assert "sass=none: ptxas not found" in head["target"]
        assert all(p.startswith(b"//") and unpack_cuda(p)[1] == b"" for _, p in found)
    assert "STALE" not in status(out_dir)
    monkeypatch.undo()
    tool("ptxas")
    # ptxas installed since: stale (a rebuild adds the SASS), then current with it.
    text = status(out_dir)
    assert "sass toolchain changed since it was built (none: ptxas not found then, ptxas " in text, text
    rebuild(out_dir)
    assert "STALE" not in status(out_dir)
    for name in os.listdir(out_dir):
        assert all(unpack_cuda(p)[1][:4] == b"\x7fELF" for _, p in variants(out_dir / name)[1])


@pytest.mark.parametrize("arch", ["cuda:sm_70"])
def test_an_sm_the_packaged_ptxas_dropped_is_ptx_only(arch):
    """CUDA 13's ptxas builds no sm below 75: those targets carry PTX only and say why."""
    tool("ptxas")
    from tack.backends.cuda import target
    version, sms = gpu.ptxas_info(gpu.find_ptxas())
    t = target(arch)
    if "sm_70" in sms:
        assert t.ptxas and t.code_note == f"PTX + SASS (ptxas {version})"
    else:
        assert t.ptxas is None and t.code_note == f"PTX only (ptxas {version} does not build sm_70)"
