"""The contour's marching-cubes tables: ``mc_tables`` holds them packed, ``mc_bourke`` holds
Bourke's numbers as he published them and derives the tables; the two must agree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tack.kernels import mc_bourke, mc_tables

ROOT = Path(__file__).resolve().parents[2]


def test_packed_tables_are_the_ones_derived_from_bourkes():
    derived = mc_bourke.tables()
    assert [name for name, _ in mc_tables.LAYOUT] == list(derived)
    for name, shape in mc_tables.LAYOUT:
        got = getattr(mc_tables, name)
        assert got.dtype == np.int32 and got.shape == shape and got.flags.c_contiguous, name
        assert not got.flags.writeable, name
        assert got.tolist() == derived[name], name
    assert sorted(mc_tables.__all__) == sorted(derived)


def test_the_printed_data_is_what_mc_tables_holds():
    """``python -m tack.kernels.mc_bourke`` prints the text ``mc_tables`` holds, verbatim: the
    way to regenerate it after a change to the tables."""
    p = subprocess.run([sys.executable, "-m", "tack.kernels.mc_bourke"], capture_output=True,
                       text=True, cwd=ROOT, timeout=300, check=True)
    printed = p.stdout.rstrip("\n")
    assert printed.count("\n") > 100
    source = (ROOT / "tack" / "kernels" / "mc_tables.py").read_text()
    assert "_DATA = bytes.fromhex(\n" + printed + ")\n" in source


def test_bourkes_tables_hold_their_invariants():
    """Each case's edge mask is the OR of the edges its triangles use; complementary cases
    differ in triangle count for the 44 pairs of Lorensen classes 3, 6 and 7 (the docstring's
    claim); every triangle's edges are edges, and each edge joins corners one axis apart."""
    tri, count, edges = mc_tables.TRI_TABLE, mc_tables.TRI_COUNT, mc_tables.EDGE_TABLE
    for case in range(256):
        used = [int(e) for e in tri[case] if e >= 0]
        assert len(used) == 3 * count[case]
        assert all(0 <= e < 12 for e in used)
        assert (tri[case][len(used):] == -1).all()
        assert int(edges[case]) == sum(1 << e for e in set(used)), case
    assert count[0] == count[255] == 0
    assert sum(1 for c in range(128) if count[c] != count[255 - c]) == 44
    for (a, b), axis, origin in zip(mc_tables.EDGE_CORNERS, mc_tables.EDGE_AXIS, mc_tables.EDGE_ORIGIN):
        diff = np.abs(mc_tables.CORNERS[a] - mc_tables.CORNERS[b])
        assert diff.sum() == 1 and diff[axis] == 1
        assert (origin == np.minimum(mc_tables.CORNERS[a], mc_tables.CORNERS[b])).all()
