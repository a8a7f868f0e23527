"""Warp peer (CPU): the marching cubes of ``numba_contour.py`` as two Warp kernels.

``contour_warp(field, level) -> (verts float32 (V, 3), faces int32 (F, 3))``,
for ``cache_warm.py``: a corner is set iff ``field > level``; pass 1 gives
each crossing grid edge a vertex (an atomic counter), pass 2 emits each
cell's triangles from ``TRI_TABLE``.  Counts equal Tack's and Numba's;
vertex and face order follow the atomics, as Tack's do with threads.

Warp keeps compiled modules in its kernel cache (``WARP_CACHE_PATH``, or
``wp.config.kernel_cache_dir``); a process whose cache is warm loads the
module's object code instead of compiling it.  ``init()`` is Warp's own
start-up (``wp.init()``), which the runner counts with the library import.
"""

import numpy as np
import warp as wp

from tack.kernels.mc_tables import CORNERS, EDGE_AXIS, EDGE_ORIGIN, TRI_TABLE

wp.config.quiet = True

__all__ = ["contour_warp", "init"]


@wp.kernel
def _vertices(f: wp.array3d(dtype=wp.float32), level: float, edge_vid: wp.array4d(dtype=wp.int32),
              verts: wp.array2d(dtype=wp.float32), count: wp.array(dtype=wp.int32)):
    i, j, k = wp.tid()
    nx = f.shape[0]
    ny = f.shape[1]
    nz = f.shape[2]
    f0 = f[i, j, k]
    b0 = f0 > level
    for a in range(3):
        i1 = i
        j1 = j
        k1 = k
        if a == 0:
            i1 = i + 1
        if a == 1:
            j1 = j + 1
        if a == 2:
            k1 = k + 1
        if i1 < nx and j1 < ny and k1 < nz:
            f1 = f[i1, j1, k1]
            if b0 != (f1 > level):
                v = wp.atomic_add(count, 0, 1)
                t = (level - f0) / (f1 - f0)
                x = float(i)
                y = float(j)
                z = float(k)
                if a == 0:
                    x = x + t
                if a == 1:
                    y = y + t
                if a == 2:
                    z = z + t
                verts[v, 0] = x
                verts[v, 1] = y
                verts[v, 2] = z
                edge_vid[i, j, k, a] = v


@wp.kernel
def _faces(f: wp.array3d(dtype=wp.float32), level: float, edge_vid: wp.array4d(dtype=wp.int32),
           corners: wp.array2d(dtype=wp.int32), edge_origin: wp.array2d(dtype=wp.int32),
           edge_axis: wp.array(dtype=wp.int32), tri_table: wp.array2d(dtype=wp.int32),
           faces: wp.array2d(dtype=wp.int32), count: wp.array(dtype=wp.int32)):
    i, j, k = wp.tid()
    cube = int(0)
    for c in range(8):
        if f[i + corners[c, 0], j + corners[c, 1], k + corners[c, 2]] > level:
            cube = cube | (1 << c)
    if cube != 0 and cube != 255:
        for s in range(0, 16, 3):
            if tri_table[cube, s] >= 0:
                n = wp.atomic_add(count, 1, 1)
                for m in range(3):
                    e = tri_table[cube, s + m]
                    faces[n, m] = edge_vid[i + edge_origin[e, 0], j + edge_origin[e, 1],
                                           k + edge_origin[e, 2], edge_axis[e]]


def init():
    wp.init()


def contour_warp(field, level):
    """Return ``(verts float32 (V, 3), faces int32 (F, 3))``, in index space."""
    f_np = np.ascontiguousarray(field, dtype=np.float32)
    nx, ny, nz = f_np.shape
    dev = "cpu"
    f = wp.array(f_np, dtype=wp.float32, device=dev)
    edge_vid = wp.full((nx, ny, nz, 3), -1, dtype=wp.int32, device=dev)
    verts = wp.empty((nx * ny * nz * 3, 3), dtype=wp.float32, device=dev)
    faces = wp.empty(((nx - 1) * (ny - 1) * (nz - 1) * 5, 3), dtype=wp.int32, device=dev)
    count = wp.zeros(2, dtype=wp.int32, device=dev)
    tables = [wp.array(t, dtype=wp.int32, device=dev) for t in (CORNERS, EDGE_ORIGIN, EDGE_AXIS, TRI_TABLE)]
    wp.launch(_vertices, dim=(nx, ny, nz), inputs=[f, float(level), edge_vid, verts, count], device=dev)
    wp.launch(_faces, dim=(nx - 1, ny - 1, nz - 1),
              inputs=[f, float(level), edge_vid, *tables, faces, count], device=dev)
    nv, nf = (int(c) for c in count.numpy())
    return verts.numpy()[:nv], faces.numpy()[:nf]
