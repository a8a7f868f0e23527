"""Numba peer: classic marching cubes with shared vertices (Bourke tables).

``contour_numba(field, level) -> (verts float32 (V, 3), faces int32 (F, 3))``
implements exactly the algorithm of Tack's contour kernel and of
``tests/kernels/mc_reference.contour_reference`` (same vertex numbering and
face order):

* a corner is "set" iff ``field > level`` (default ``above=True``, the
  Lorensen & Cline / scikit-image convention; ``above=False`` gives Bourke's
  ``field < level``).  Cube index bit ``b`` is set iff corner ``b`` is set;
  cases 0 and 255 are skipped;
* pass 1 over points: each crossing grid edge (point p, axis a; exactly one
  endpoint set) gets the next vertex id (C order of ``(i, j, k, a)``), stored in
  ``edge_vid[i, j, k, a]``, at ``p + t e_a``,
  ``t = (level - f(p)) / (f(p + e_a) - f(p))``;
* pass 2 over cells: each triangle of ``TRI_TABLE[cube]`` becomes a face of the
  three edges' vertex ids.

With ``above=True`` the triangle and vertex counts equal
``skimage.measure.marching_cubes(field, level, method="lorensen")`` exactly
(same vertex positions; same polygon per cell, possibly split along the other
diagonal) and triangle normals (right-hand rule) point towards increasing
``field``, as scikit-image's do.

Compiled with ``cache=False`` so the first call measures a cold compile;
``numba_contour_cached.py`` sets TACK_BENCH_NUMBA_CACHE=1 before importing
this module, for ``cache=True`` (Numba's on-disk cache).
"""

import os

import numpy as np
from numba import njit

_CACHE = os.environ.get("TACK_BENCH_NUMBA_CACHE") == "1"

from tack.kernels.mc_tables import CORNERS, EDGE_AXIS, EDGE_ORIGIN, TRI_TABLE

__all__ = ["contour_numba"]


@njit(cache=_CACHE)
def _is_set(v, level, above):
    if above:
        return v > level
    return v < level


@njit(cache=_CACHE)
def _contour(f, level, above, corners, edge_axis, edge_origin, tri_table):
    nx, ny, nz = f.shape

    # Pass 1: vertices on crossing grid edges.
    edge_vid = np.full((nx, ny, nz, 3), -1, dtype=np.int32)
    cap = 1024
    verts = np.empty((cap, 3), dtype=np.float32)
    nv = 0
    for i in range(nx):
        for j in range(ny):
            for k in range(nz):
                f0 = np.float64(f[i, j, k])
                b0 = _is_set(f0, level, above)
                for a in range(3):
                    i1 = i + (1 if a == 0 else 0)
                    j1 = j + (1 if a == 1 else 0)
                    k1 = k + (1 if a == 2 else 0)
                    if i1 >= nx or j1 >= ny or k1 >= nz:
                        continue
                    f1 = np.float64(f[i1, j1, k1])
                    if b0 == _is_set(f1, level, above):
                        continue
                    if nv == cap:
                        cap *= 2
                        grown = np.empty((cap, 3), dtype=np.float32)
                        grown[:nv] = verts[:nv]
                        verts = grown
                    t = (level - f0) / (f1 - f0)
                    x = np.float64(i)
                    y = np.float64(j)
                    z = np.float64(k)
                    if a == 0:
                        x += t
                    elif a == 1:
                        y += t
                    else:
                        z += t
                    verts[nv, 0] = np.float32(x)
                    verts[nv, 1] = np.float32(y)
                    verts[nv, 2] = np.float32(z)
                    edge_vid[i, j, k, a] = nv
                    nv += 1

    # Pass 2: faces, cell by cell.
    fcap = 1024
    faces = np.empty((fcap, 3), dtype=np.int32)
    nf = 0
    for i in range(nx - 1):
        for j in range(ny - 1):
            for k in range(nz - 1):
                cube = 0
                for c in range(8):
                    v = np.float64(f[i + corners[c, 0], j + corners[c, 1], k + corners[c, 2]])
                    if _is_set(v, level, above):
                        cube |= 1 << c
                if cube == 0 or cube == 255:
                    continue
                s = 0
                while s < 16 and tri_table[cube, s] >= 0:
                    if nf == fcap:
                        fcap *= 2
                        grown_f = np.empty((fcap, 3), dtype=np.int32)
                        grown_f[:nf] = faces[:nf]
                        faces = grown_f
                    for m in range(3):
                        e = tri_table[cube, s + m]
                        faces[nf, m] = edge_vid[
                            i + edge_origin[e, 0],
                            j + edge_origin[e, 1],
                            k + edge_origin[e, 2],
                            edge_axis[e],
                        ]
                    nf += 1
                    s += 3
    return verts[:nv].copy(), faces[:nf].copy()


def contour_numba(field, level, above=True):
    """Return ``(verts float32 (V, 3), faces int32 (F, 3))``.

    Vertices are in index space (array axes 0, 1, 2).  ``above`` selects which
    corners set cube-index bits: ``field > level`` (True) or ``< level``.
    """
    f = np.asarray(field)
    if f.ndim != 3:
        raise ValueError("field must be 3-D")
    return _contour(f, float(level), bool(above), CORNERS, EDGE_AXIS, EDGE_ORIGIN, TRI_TABLE)
