"""Marching-cubes isosurfaces of a 3-D field, written in Tack.

``contour(field, level)`` returns ``(verts, faces)`` shaped like
scikit-image's ``measure.marching_cubes(field, level, method="lorensen")``:
verts float32 (V, 3) in index space times ``spacing``, faces int32 (F, 3),
with a vertex shared by every triangle that meets it.  A corner counts as
inside when its value is above ``level``, which resolves the ambiguous cases
as scikit-image's classic method does, so triangle and vertex counts agree
with it exactly.

Two launches:

1. ``classify``, over the grid points: each grid edge that crosses the level
   takes a vertex id from an atomic counter and records where it is; each
   cell the surface passes through records its case in a list of active
   cells and adds its triangle count to a second counter.
2. ``emit``, over the vertices and the active cells at once: each vertex is
   placed on its edge by the interpolation policy (a template class) through
   a device function, and each active cell appends its triangles through an
   atomic counter of output triangles.

Only the first launch visits the whole grid.

Precision: the kernels compute in the field's type (``precision``): float32
for a float32 field (and for float16 or integer fields, converted), float64
for a float64 field, and count with int32 atomics, so a float32 field's
contour builds and runs on every backend, Metal and Intel GPUs without float64
(dg2) included.  The level is given to the kernels rounded down to the
field's type (``level_as``), which makes every ``value > level`` the same as
with the exact level: a float32 field's corners, and so its vertex and
triangle counts, are scikit-image's (which compares its float32 volume with a
double level).  What the rounding left out is kept, and the interpolation
policy is given the edge's end values relative to the level (``a - level``,
``b - level``, and 0 for the level), each rounded once, so float32 places a
vertex within about 1e-7 of its edge of the float64 position.  int32 counters
hold every count of a field of up to ``MAX_POINTS`` points (about 894^3; its
vertex ids were int32 already) but the triangles', at most 5 a cell, which
only a surface through nearly every cell of a field past about 754^3 could
overflow: ``contour`` raises OverflowError then.  A 512^3 field's worst case,
6.7e8 triangles, fits.  A float64 field on Metal or dg2 is a CompileError
naming float64: pass ``field.astype(np.float32)``.

With more than one thread the order of vertices and triangles varies from
run to run; the surface does not.  The kernels are shape-generic (extents
are passed at launch), so one variant of each serves every field size,
level and triangle count, and the outputs are allocated at their exact size.
"""

import numpy as np

import tack

from .mc_tables import EDGE_AXIS as _EDGE_AXIS
from .mc_tables import EDGE_ORIGIN as _EDGE_ORIGIN
from .mc_tables import TRI_COUNT as _TRI_COUNT
from .mc_tables import TRI_TABLE as _TRI_TABLE

TRI_TABLE = tack.constant(_TRI_TABLE)
TRI_COUNT = tack.constant(_TRI_COUNT)
EDGE_AXIS = tack.constant(_EDGE_AXIS)
EDGE_ORIGIN = tack.constant(_EDGE_ORIGIN)


class Linear:
    """Place each vertex where the linear interpolant of the edge's ends meets the level.

    An interpolation policy's ``weight(a, b, level)`` is given the end values relative to the
    level (``a - level``, ``b - level``) and 0 for ``level``, in the field's type, and returns
    the vertex's place along the edge from ``a`` (clamped to [0, 1])."""

    @staticmethod
    def weight(a, b, level):
        return (level - a) / (b - a)


class Midpoint:
    """Place each vertex at the middle of its edge (blocky, but never off the edge)."""

    @staticmethod
    def weight(a, b, level):
        return tack.float32(0.5)        # exact; float32 so that a float32 field stays float32


@tack.func
def crosses(a, b, level):
    return (a > level) != (b > level)


@tack.func
def cube_case(field, i, j, k, level):
    case = 0
    if field[i, j, k] > level:
        case |= 1
    if field[i + 1, j, k] > level:
        case |= 2
    if field[i + 1, j + 1, k] > level:
        case |= 4
    if field[i, j + 1, k] > level:
        case |= 8
    if field[i, j, k + 1] > level:
        case |= 16
    if field[i + 1, j, k + 1] > level:
        case |= 32
    if field[i + 1, j + 1, k + 1] > level:
        case |= 64
    if field[i, j + 1, k + 1] > level:
        case |= 128
    return case


@tack.func
def edge_weight(policy, a, b, level, level_lo):
    # The policy sees the end values relative to the level, level + level_lo (level_lo: what
    # rounding the level to the field's type left out; 0 for float64).  Each difference is
    # rounded once, so float32 arithmetic places the vertex as float64 would to about 1e-7 of
    # the edge, where (level - a) / (b - a) would lose the level's rounding over b - a.
    ra = (a - level) - level_lo
    rb = (b - level) - level_lo
    t = policy.weight(ra, rb, ra - ra)
    return min(max(t, 0.0), 1.0)


@tack.func
def claim_vertex(edge_vid, vert_src, counts, i, j, k, axis, lin):
    vid = tack.atomic_add(counts, 0, 1)
    edge_vid[i, j, k, axis] = vid
    vert_src[vid] = 3 * lin + axis


@tack.kernel
def classify(field, level, edge_vid, vert_src, active, counts):
    i, j, k = tack.tid()
    nx, ny, nz = field.shape
    lin = (i * ny + j) * nz + k
    f0 = field[i, j, k]
    if i + 1 < nx and crosses(f0, field[i + 1, j, k], level):
        claim_vertex(edge_vid, vert_src, counts, i, j, k, 0, lin)
    if j + 1 < ny and crosses(f0, field[i, j + 1, k], level):
        claim_vertex(edge_vid, vert_src, counts, i, j, k, 1, lin)
    if k + 1 < nz and crosses(f0, field[i, j, k + 1], level):
        claim_vertex(edge_vid, vert_src, counts, i, j, k, 2, lin)
    if i + 1 < nx and j + 1 < ny and k + 1 < nz:
        case = cube_case(field, i, j, k, level)
        n = TRI_COUNT[case]
        if n > 0:
            active[tack.atomic_add(counts, 1, 1)] = 256 * lin + case
            tack.atomic_add(counts, 2, n)


@tack.func
def unflatten(lin, ny, nz):
    return lin // (ny * nz), (lin // nz) % ny, lin % nz


@tack.func
def place_vertex(field, level, level_lo, policy, vert_src, verts, v, sx, sy, sz):
    nx, ny, nz = field.shape
    src = vert_src[v]
    axis = src % 3
    i, j, k = unflatten(src // 3, ny, nz)
    di = 1 if axis == 0 else 0
    dj = 1 if axis == 1 else 0
    dk = 1 if axis == 2 else 0
    t = edge_weight(policy, field[i, j, k], field[i + di, j + dj, k + dk], level,
                     level_lo)
    # In the field's precision: t has the field's type, and the integer coordinates are cast
    # to float32 first (exact below 2**24), so that int64 + float32 does not make float64.
    verts[v, 0] = (tack.float32(i) + (t if axis == 0 else 0.0)) * sx
    verts[v, 1] = (tack.float32(j) + (t if axis == 1 else 0.0)) * sy
    verts[v, 2] = (tack.float32(k) + (t if axis == 2 else 0.0)) * sz


@tack.func
def cell_faces(field, active, edge_vid, faces, counts, a):
    nx, ny, nz = field.shape
    code = active[a]
    case = code % 256
    i, j, k = unflatten(code // 256, ny, nz)
    n = TRI_COUNT[case]
    base = tack.atomic_add(counts, 3, n)
    for tri in range(n):
        for v in range(3):
            e = TRI_TABLE[case, 3 * tri + v]
            faces[base + tri, v] = edge_vid[i + EDGE_ORIGIN[e, 0], j + EDGE_ORIGIN[e, 1],
                                            k + EDGE_ORIGIN[e, 2], EDGE_AXIS[e]]


@tack.kernel
def emit(field, level, level_lo, policy, vert_src, active, edge_vid, verts, faces, counts,
         nverts, nactive, sx, sy, sz):
    t = tack.tid()
    if t < nverts:
        place_vertex(field, level, level_lo, policy, vert_src, verts, t, sx, sy, sz)
    if t < nactive:
        cell_faces(field, active, edge_vid, faces, counts, t)


def _outputs(nverts: int, ntris: int):
    """Output arrays for ``nverts`` vertices and ``ntris`` triangles."""
    return np.empty((nverts, 3), np.float32), np.empty((ntris, 3), np.int32)


MAX_POINTS = (2**31 - 1) // 3
"""The most points a field may have: a vertex's source (3 * point + axis) and the vertex, cell
and triangle counters are int32."""


def precision(dtype) -> np.dtype:
    """The type ``contour`` computes in for a field of ``dtype``: float64 for a float64 field,
    float32 for any other (float32, float16, integers: converted)."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def level_as(level, dtype):
    """``level`` as a scalar of the float type ``dtype`` that compares with every value of that
    type as the exact ``level`` does: rounded down, not to nearest (``v > level`` for a float32
    ``v`` is ``v > l`` with ``l`` the largest float32 at most ``level``, also past float32's
    range).  So a float32 field's inside and outside corners, and its triangle counts, are
    scikit-image's, which compares its float32 volume with a double level."""
    level = float(level)
    if np.dtype(dtype) == np.float64:
        return np.float64(level)
    with np.errstate(over="ignore"):
        low = np.float32(level)
    if low == np.inf and level != np.inf:
        return np.float32(np.finfo(np.float32).max)
    if float(low) > level:
        low = np.nextafter(low, np.float32(-np.inf))
    return low


def _scratch(shape):
    """The work arrays ``contour`` passes to its kernels for a field of ``shape``."""
    n = shape[0] * shape[1] * shape[2]
    # Only the entries near the surface are ever written or read, so most of
    # these pages are never touched (np.empty does not fault them in).
    # The counters are int32, which every backend has atomics for (Metal and most Intel GPUs
    # have no 64-bit ones); MAX_POINTS keeps every count in range but the triangles', which a
    # surface through nearly every cell could overflow: contour checks it.
    return (np.empty(tuple(shape) + (3,), np.int32), np.empty(3 * n, np.int32),
            np.empty(n, np.int64), np.zeros(4, np.int32))


def tack_warm(shape=(8, 8, 8), dtype=np.float32):
    """What ``contour`` launches: ``[(kernel, example args, grid dims)]``.

    For building bundles ahead of time (``python -m tack.site bundles
    build``).  The kernels are shape-generic, so the list is the same for
    every ``shape``: it only sizes the example arguments, which are
    allocated, not filled.  ``dtype`` is the field's (float32, which every
    backend builds, by default; float64 for the float64 variants, which Metal
    and Intel GPUs without float64 refuse).
    """
    shape = tuple(int(s) for s in shape)
    if len(shape) != 3:
        raise ValueError(f"contour needs a 3-D field shape, not {len(shape)}-D {list(shape)}")
    if min(shape) < 2:
        raise ValueError(f"contour needs at least 2 points along each axis, not {list(shape)}")
    real = precision(dtype).type
    field = np.empty(shape, real)
    edge_vid, vert_src, active, counts = _scratch(shape)
    verts, faces = _outputs(1, 1)
    zero, one = real(0), real(1)
    return [(classify, (field, zero, edge_vid, vert_src, active, counts), 3),
            (emit, (field, zero, zero, Linear, vert_src, active, edge_vid, verts, faces, counts,
                    0, 0, one, one, one), 1)]


def contour(field, level, device="cpu", spacing=(1, 1, 1), interpolation=Linear):
    """Isosurface of ``field`` at ``level``: ``(verts (V, 3) float32, faces (F, 3) int32)``.

    Computed in the field's precision (``precision``): float64 for a float64 field, float32
    otherwise, so a float32 field runs on every backend (Metal and Intel GPUs without float64
    refuse a float64 one: pass ``field.astype(np.float32)`` there)."""
    field = np.asarray(field)
    if field.ndim != 3:
        raise ValueError(f"contour needs a 3-D field, not {field.ndim}-D")
    if min(field.shape) < 2:
        raise ValueError(f"contour needs at least 2 points along each axis, not {field.shape}")
    if field.size > MAX_POINTS:
        raise ValueError(f"contour takes at most {MAX_POINTS} points (its vertex ids are int32), "
                         f"not {field.size} ({list(field.shape)})")
    real = precision(field.dtype)
    if field.dtype != real or not field.flags.c_contiguous:
        field = np.ascontiguousarray(field, dtype=real)
    sx, sy, sz = (real.type(s) for s in spacing)
    edge_vid, vert_src, active, counts = _scratch(field.shape)
    exact = float(level)
    level = level_as(exact, real)
    level_lo = real.type(exact - float(level))
    tack.launch(classify, dim=field.shape, args=(field, level, edge_vid, vert_src, active, counts),
                device=device)
    nverts, nactive, ntris = (int(c) for c in counts[:3])
    if ntris < 0:       # wrapped: 2**31 or more (at most 5 a cell: < 2**32 below MAX_POINTS)
        raise OverflowError(f"the surface has {ntris + 2**32} triangles, more than contour's "
                            f"int32 counters hold ({2**31 - 1})")
    verts, faces = _outputs(nverts, ntris)
    tack.launch(emit, dim=max(nverts, nactive),
                args=(field, level, level_lo, interpolation, vert_src, active, edge_vid, verts, faces, counts,
                      nverts, nactive, sx, sy, sz), device=device)
    return verts, faces
