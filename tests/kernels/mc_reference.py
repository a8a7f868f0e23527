"""Plain NumPy reference marching cubes (Bourke tables, shared vertices).

Same algorithm, vertex numbering and face order as
``benchmarks/peers/numba_contour.contour_numba`` and Tack's kernel:

* a corner is "set" iff ``field > level`` (``above=True``, default: the
  Lorensen & Cline / scikit-image convention) or ``field < level``
  (``above=False``: Bourke's); cube index bit ``b`` is set iff corner
  ``cell + CORNERS[b]`` is set.  Comparisons are done in float64;
* a grid edge (point p, axis a) crosses iff exactly one of its endpoints is
  set; it gets one vertex at
  ``p + t e_a``, ``t = (level - f(p)) / (f(p + e_a) - f(p))`` (float64, then
  cast to float32);
* vertex ids are assigned in C order of ``(i, j, k, axis)``;
* faces are emitted cell by cell in C order of ``(i, j, k)``, triangles in
  ``TRI_TABLE`` order, each face ``(vid[e0], vid[e1], vid[e2])``.
"""

import numpy as np

from tack.kernels.mc_tables import EDGE_AXIS, EDGE_ORIGIN, TRI_COUNT, TRI_TABLE

__all__ = ["contour_reference"]


def contour_reference(field, level, above=True):
    """Return ``(verts float32 (V, 3), faces int32 (F, 3))`` in index space."""
    f = np.asarray(field)
    if f.ndim != 3:
        raise ValueError("field must be 3-D")
    level = float(level)
    nx, ny, nz = f.shape
    f64 = f.astype(np.float64)
    is_set = (f64 > level) if above else (f64 < level)

    # Pass 1: one vertex per crossing grid edge, ids in C order of (i, j, k, a).
    cross = np.zeros((nx, ny, nz, 3), dtype=bool)
    cross[:-1, :, :, 0] = is_set[:-1] != is_set[1:]
    cross[:, :-1, :, 1] = is_set[:, :-1] != is_set[:, 1:]
    cross[:, :, :-1, 2] = is_set[:, :, :-1] != is_set[:, :, 1:]
    flat = cross.ravel()
    nv = int(flat.sum())
    edge_vid = np.full(flat.shape, -1, dtype=np.int32)
    edge_vid[flat] = np.arange(nv, dtype=np.int32)
    edge_vid = edge_vid.reshape(nx, ny, nz, 3)

    idx = np.nonzero(flat)[0]
    p_flat, axis = np.divmod(idx, 3)
    pi, pj, pk = np.unravel_index(p_flat, (nx, ny, nz))
    p = np.stack([pi, pj, pk], axis=1)
    q = p.copy()
    q[np.arange(nv), axis] += 1
    f0 = f64[pi, pj, pk]
    f1 = f64[q[:, 0], q[:, 1], q[:, 2]]
    t = (level - f0) / (f1 - f0)
    pos = p.astype(np.float64)
    pos[np.arange(nv), axis] += t
    verts = pos.astype(np.float32)

    # Pass 2: cube indices, then faces cell by cell.
    b = is_set.astype(np.int32)
    cube = (
        b[:-1, :-1, :-1]
        | (b[1:, :-1, :-1] << 1)
        | (b[1:, 1:, :-1] << 2)
        | (b[:-1, 1:, :-1] << 3)
        | (b[:-1, :-1, 1:] << 4)
        | (b[1:, :-1, 1:] << 5)
        | (b[1:, 1:, 1:] << 6)
        | (b[:-1, 1:, 1:] << 7)
    ).ravel()
    ntri = TRI_COUNT[cube]
    cells = np.repeat(np.arange(cube.size), ntri)
    nf = cells.size
    first = np.repeat(np.cumsum(ntri) - ntri, ntri)
    tri = np.arange(nf) - first  # triangle number within its cell
    case = cube[cells]
    ci, cj, ck = np.unravel_index(cells, (nx - 1, ny - 1, nz - 1))
    faces = np.empty((nf, 3), dtype=np.int32)
    for s in range(3):
        e = TRI_TABLE[case, 3 * tri + s]
        o = EDGE_ORIGIN[e]
        faces[:, s] = edge_vid[ci + o[:, 0], cj + o[:, 1], ck + o[:, 2], EDGE_AXIS[e]]
    return verts, faces
