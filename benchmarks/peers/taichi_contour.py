"""Taichi peer (CPU): the marching cubes of ``numba_contour.py`` as two Taichi kernels.

``contour_taichi(field, level) -> (verts float32 (V, 3), faces int32 (F, 3))``,
for ``cache_warm.py``: a corner is set iff ``field > level``; pass 1 gives
each crossing grid edge a vertex (an atomic counter), pass 2 emits each
cell's triangles from ``TRI_TABLE``.  Counts equal Tack's and Numba's.
Kernels take ndarrays, so Taichi's offline cache (``ti.init(offline_cache=True,
offline_cache_file_path=...)``, done by the caller) keeps them across
processes.
"""

import numpy as np
import taichi as ti

from tack.kernels.mc_tables import CORNERS, EDGE_AXIS, EDGE_ORIGIN, TRI_TABLE

__all__ = ["contour_taichi"]

_I32 = ti.types.ndarray(dtype=ti.i32, ndim=1)
_I32x2 = ti.types.ndarray(dtype=ti.i32, ndim=2)


@ti.kernel
def _vertices(f: ti.types.ndarray(dtype=ti.f32, ndim=3), level: ti.f32,
              edge_vid: ti.types.ndarray(dtype=ti.i32, ndim=4),
              verts: ti.types.ndarray(dtype=ti.f32, ndim=2), count: _I32):
    nx, ny, nz = f.shape[0], f.shape[1], f.shape[2]
    for i, j, k in ti.ndrange(nx, ny, nz):
        f0 = f[i, j, k]
        for a in ti.static(range(3)):
            i1 = i + (1 if a == 0 else 0)
            j1 = j + (1 if a == 1 else 0)
            k1 = k + (1 if a == 2 else 0)
            if i1 < nx and j1 < ny and k1 < nz:
                f1 = f[i1, j1, k1]
                if (f0 > level) != (f1 > level):
                    v = ti.atomic_add(count[0], 1)
                    t = (level - f0) / (f1 - f0)
                    verts[v, 0] = ti.f32(i) + (t if a == 0 else 0.0)
                    verts[v, 1] = ti.f32(j) + (t if a == 1 else 0.0)
                    verts[v, 2] = ti.f32(k) + (t if a == 2 else 0.0)
                    edge_vid[i, j, k, a] = v


@ti.kernel
def _faces(f: ti.types.ndarray(dtype=ti.f32, ndim=3), level: ti.f32,
           edge_vid: ti.types.ndarray(dtype=ti.i32, ndim=4), corners: _I32x2, edge_origin: _I32x2,
           edge_axis: _I32, tri_table: _I32x2, faces: _I32x2, count: _I32):
    for i, j, k in ti.ndrange(f.shape[0] - 1, f.shape[1] - 1, f.shape[2] - 1):
        cube = 0
        for c in range(8):
            if f[i + corners[c, 0], j + corners[c, 1], k + corners[c, 2]] > level:
                cube |= 1 << c
        if cube != 0 and cube != 255:
            for t in range(5):
                s = 3 * t
                if tri_table[cube, s] >= 0:
                    n = ti.atomic_add(count[1], 1)
                    for m in range(3):
                        e = tri_table[cube, s + m]
                        faces[n, m] = edge_vid[i + edge_origin[e, 0], j + edge_origin[e, 1],
                                               k + edge_origin[e, 2], edge_axis[e]]


def contour_taichi(field, level):
    """Return ``(verts float32 (V, 3), faces int32 (F, 3))``, in index space."""
    f = np.ascontiguousarray(field, dtype=np.float32)
    nx, ny, nz = f.shape
    edge_vid = np.full((nx, ny, nz, 3), -1, dtype=np.int32)
    verts = np.empty((nx * ny * nz * 3, 3), dtype=np.float32)
    faces = np.empty(((nx - 1) * (ny - 1) * (nz - 1) * 5, 3), dtype=np.int32)
    count = np.zeros(2, dtype=np.int32)
    _vertices(f, float(level), edge_vid, verts, count)
    _faces(f, float(level), edge_vid, CORNERS, EDGE_ORIGIN, EDGE_AXIS, TRI_TABLE, faces, count)
    ti.sync()
    return verts[:count[0]], faces[:count[1]]
