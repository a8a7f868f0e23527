"""The marching-cubes kernel (tack.kernels.contour) against scikit-image and the NumPy reference."""

import numpy as np
import pytest
from skimage.measure import marching_cubes

import tack
from tack.kernels.contour import Linear, Midpoint, contour

from . import fields
from .mc_reference import contour_reference

FIELDS = {"sphere": (fields.sphere, fields.SPHERE_LEVEL),
          "torus": (fields.torus, fields.TORUS_LEVEL),
          "smooth_random": (fields.smooth_random, fields.SMOOTH_RANDOM_LEVEL)}
CASES = [(name, n) for n in (21, 64) for name in FIELDS]
IDS = [f"{name}-{n}" for name, n in CASES]
TOL = 1e-4

_memo = {}


def field_of(name, n):
    make, level = FIELDS[name]
    return make(n), level


def contoured(name, n):
    """(field, level, verts, faces) for a test field, computed once per session."""
    key = (name, n)
    if key not in _memo:
        f, level = field_of(name, n)
        verts, faces = contour(f, level)
        _memo[key] = (f, level, verts, faces)
    return _memo[key]


def vertex_edges(verts, field, level, tol=TOL):
    """For each vertex, the grid edge (i, j, k, axis) it lies on; asserts it sits at the interpolated crossing.

    A vertex must have at least two integral coordinates; the third is
    ``p[axis] + t`` with ``t = (level - f(p)) / (f(p + e_axis) - f(p))`` for an
    edge whose ends lie on opposite sides of the level.  A vertex whose ``t``
    rounded to 0 or 1 (all three coordinates integral) is matched to the
    closest crossing edge at that grid point not taken by another vertex.
    """
    f = field.astype(np.float64)
    shape = np.array(field.shape)
    v = verts.astype(np.float64)
    integral = np.abs(v - np.round(v)) <= 1e-6
    nint = integral.sum(axis=1)
    assert np.all(nint >= 2), f"vertices off the grid edges: {v[nint < 2][:5]}"

    def candidates(rows, p, axis):
        """The (rows, keys, errors) of edges (p, axis) that cross the level where the vertex is."""
        q = p.copy()
        q[np.arange(len(p)), axis] += 1
        inside = np.all((p >= 0) & (q < shape), axis=1)
        rows, p, q, axis = rows[inside], p[inside], q[inside], axis[inside]
        f0 = f[p[:, 0], p[:, 1], p[:, 2]]
        f1 = f[q[:, 0], q[:, 1], q[:, 2]]
        with np.errstate(all="ignore"):
            t = (level - f0) / (f1 - f0)
        err = np.abs(v[rows, axis] - (p[np.arange(len(p)), axis] + t))
        good = ((f0 > level) != (f1 > level)) & (err <= tol)
        return rows[good], np.column_stack([p[good], axis[good]]), err[good]

    keys = np.full((len(v), 4), -1, np.int64)
    edge = np.nonzero(nint == 2)[0]
    axis = np.argmin(integral[edge], axis=1)
    p = np.round(v[edge]).astype(np.int64)
    p[np.arange(len(edge)), axis] = np.floor(v[edge, axis]).astype(np.int64)
    rows, k, _ = candidates(edge, p, axis)
    keys[rows] = k
    corner = np.nonzero(nint == 3)[0]
    found = []
    for ax in range(3):
        for back in (0, 1):
            p = np.round(v[corner]).astype(np.int64)
            p[:, ax] -= back
            found.append(candidates(corner, p, np.full(len(corner), ax)))
    if corner.size:
        rows = np.concatenate([c[0] for c in found])
        ks = np.concatenate([c[1] for c in found])
        errs = np.concatenate([c[2] for c in found])
        taken = {tuple(x) for x in keys[keys[:, 3] >= 0].tolist()}
        for c in np.argsort(errs, kind="stable"):
            r, kk = rows[c], tuple(ks[c].tolist())
            if keys[r, 3] < 0 and kk not in taken:
                keys[r] = kk
                taken.add(kk)
    bad = keys[:, 3] < 0
    assert not bad.any(), f"{bad.sum()} vertices are not at a crossing of their edge: {v[bad][:5]}"
    return keys


def edge_codes(keys, shape):
    """One integer per grid edge (C order of i, j, k, axis)."""
    nx, ny, nz = shape
    return ((keys[:, 0] * ny + keys[:, 1]) * nz + keys[:, 2]) * 3 + keys[:, 3]


def canonical_faces(faces, codes):
    """Faces as rows of edge codes, each rotated to start at its smallest (orientation kept), rows sorted."""
    f = codes[faces]
    start = np.argmin(f, axis=1)
    idx = (start[:, None] + np.arange(3)) % 3
    rot = np.take_along_axis(f, idx, axis=1)
    return rot[np.lexsort(rot.T[::-1])]


@pytest.mark.parametrize("name, n", CASES, ids=IDS)
def test_counts_match_scikit_image(name, n):
    """Vertex and triangle counts equal skimage.measure.marching_cubes(field, level, method='lorensen')."""
    f, level, verts, faces = contoured(name, n)
    sk_verts, sk_faces, _, _ = marching_cubes(f, level, method="lorensen")
    assert len(verts) > 0
    assert (len(verts), len(faces)) == (len(sk_verts), len(sk_faces))


@pytest.mark.parametrize("name, n", CASES, ids=IDS)
def test_vertices_lie_on_crossing_edges(name, n):
    """Every vertex lies on a grid edge, at the linear interpolation of the level between the edge's end values, one vertex per edge."""
    f, level, verts, faces = contoured(name, n)
    assert verts.dtype == np.float32 and verts.ndim == 2 and verts.shape[1] == 3
    codes = edge_codes(vertex_edges(verts, f, level), f.shape)
    assert len(np.unique(codes)) == len(codes), "two vertices on one edge"


@pytest.mark.parametrize("name, n", CASES, ids=IDS)
def test_faces_are_valid(name, n):
    """Faces index existing vertices, no face repeats a vertex, and every vertex is used."""
    f, level, verts, faces = contoured(name, n)
    assert faces.dtype == np.int32 and faces.ndim == 2 and faces.shape[1] == 3
    assert faces.min() >= 0 and faces.max() < len(verts)
    assert np.all((faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2]))
    assert len(np.unique(faces)) == len(verts)


@pytest.mark.parametrize("name, n", CASES, ids=IDS)
def test_surface_equals_reference(name, n):
    """The vertex set (edge by edge, positions within 1e-5) and the oriented triangles equal contour_reference's."""
    f, level, verts, faces = contoured(name, n)
    ref_verts, ref_faces = contour_reference(f, level)
    codes = edge_codes(vertex_edges(verts, f, level), f.shape)
    ref_codes = edge_codes(vertex_edges(ref_verts, f, level), f.shape)
    order, ref_order = np.argsort(codes), np.argsort(ref_codes)
    np.testing.assert_array_equal(codes[order], ref_codes[ref_order])
    np.testing.assert_allclose(verts[order], ref_verts[ref_order], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(canonical_faces(faces, codes), canonical_faces(ref_faces, ref_codes))


def test_single_thread_order_equals_reference():
    """With one thread, vertices and faces come out in the reference's order."""
    tack.config.num_threads = 1
    f, level = field_of("torus", 64)
    verts, faces = contour(f, level)
    ref_verts, ref_faces = contour_reference(f, level)
    np.testing.assert_allclose(verts, ref_verts, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(faces, ref_faces)


def test_spacing_scales_vertices():
    """spacing multiplies each vertex coordinate by that axis's spacing and leaves faces alone."""
    f, level, verts, faces = contoured("sphere", 21)
    spacing = (2.0, 0.5, 1.25)
    sv, sf = contour(f, level, spacing=spacing)
    assert (len(sv), len(sf)) == (len(verts), len(faces))
    codes = edge_codes(vertex_edges(verts, f, level), f.shape)
    scodes = edge_codes(vertex_edges(sv / np.array(spacing, np.float32), f, level), f.shape)
    a, b = np.argsort(codes), np.argsort(scodes)
    np.testing.assert_array_equal(codes[a], scodes[b])
    np.testing.assert_allclose(sv[b], verts[a] * np.array(spacing), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(canonical_faces(sf, scodes), canonical_faces(faces, codes))


def test_midpoint_policy_puts_vertices_at_half():
    """The Midpoint interpolation policy puts every vertex at the middle of the same crossing edges."""
    f, level, verts, faces = contoured("torus", 21)
    mv, mf = contour(f, level, interpolation=Midpoint)
    frac = np.abs(mv - np.floor(mv))
    assert np.all((frac == 0).sum(axis=1) == 2) and np.all((frac == 0.5).sum(axis=1) == 1)
    axis = np.argmax(frac, axis=1)
    p = np.floor(mv).astype(np.int64)
    mkeys = np.column_stack([p, axis])
    codes = edge_codes(vertex_edges(verts, f, level), f.shape)
    np.testing.assert_array_equal(np.sort(edge_codes(mkeys, f.shape)), np.sort(codes))
    assert len(mf) == len(faces)


def test_explicit_linear_policy_is_the_default():
    """Passing interpolation=Linear gives the same surface as the default."""
    f, level, verts, faces = contoured("sphere", 21)
    lv, lf = contour(f, level, interpolation=Linear)
    np.testing.assert_array_equal(np.unique(lv, axis=0), np.unique(verts, axis=0))
    assert len(lf) == len(faces)


def test_non_contiguous_and_other_dtype_fields():
    """A non-contiguous float32 field, or a float16 one (computed in float32), gives the same
    surface as its contiguous float32 copy."""
    f, level, verts, faces = contoured("sphere", 21)
    h = f.astype(np.float16)
    vh, fh = contour(h.astype(np.float32), level)
    for g, (v, fc) in ((np.asfortranarray(f), (verts, faces)), (h, (vh, fh))):
        v2, f2 = contour(g, level)
        np.testing.assert_array_equal(np.unique(v2, axis=0), np.unique(v, axis=0))
        assert len(f2) == len(fc)


@pytest.mark.parametrize("name, n", CASES, ids=IDS)
def test_float64_field_is_contoured_in_float64(name, n):
    """A float64 field is contoured in float64: its surface is the float64 reference's (edges,
    oriented triangles, vertices within a float32 rounding), and its vertices are as close to
    the float32 field's as float32 allows."""
    f, level, verts, faces = contoured(name, n)
    g = f.astype(np.float64)
    v2, f2 = contour(g, level)
    ref_verts, ref_faces = contour_reference(g, level)
    codes = edge_codes(vertex_edges(v2, g, level), g.shape)
    ref_codes = edge_codes(vertex_edges(ref_verts, g, level), g.shape)
    order, ref_order = np.argsort(codes), np.argsort(ref_codes)
    np.testing.assert_array_equal(codes[order], ref_codes[ref_order])
    np.testing.assert_allclose(v2[order], ref_verts[ref_order], rtol=2e-7, atol=0)
    np.testing.assert_array_equal(canonical_faces(f2, codes), canonical_faces(ref_faces, ref_codes))
    assert len(f2) == len(faces)


def test_level_outside_field_gives_empty_surface():
    """A level above every value gives no vertices and no faces, with the right shapes and dtypes."""
    f, _ = field_of("sphere", 21)
    verts, faces = contour(f, float(f.max()) + 1.0)
    assert verts.shape == (0, 3) and faces.shape == (0, 3)
    assert verts.dtype == np.float32 and faces.dtype == np.int32


@pytest.mark.parametrize("shape", [(5, 5), (1, 5, 5), (5, 5, 1)])
def test_bad_field_shapes(shape):
    """Fields that are not 3-D with at least 2 points per axis raise ValueError."""
    with pytest.raises(ValueError):
        contour(np.zeros(shape, np.float32), 0.5)


def ellipsoid(shape):
    """A smooth field on a grid of any ``shape``: distance from an off-centre point, per-axis scaled."""
    p = np.indices(shape, dtype=np.float64)
    c = [0.45 * (n - 1) for n in shape]
    r = [0.35 * (n - 1) for n in shape]
    return np.sqrt(sum(((p[k] - c[k]) / r[k]) ** 2 for k in range(3))).astype(np.float32)


SHAPES = [(21, 21, 21), (33, 33, 33), (17, 23, 30), (30, 12, 19), (4, 40, 9)]


def test_one_variant_per_kernel_for_every_field_shape():
    """Fields of several shapes, including non-cubic ones, match scikit-image's surface (counts and
    vertices, edge by edge); after the first shape nothing compiles."""
    import tack.cache
    before = None
    for shape in SHAPES:
        f = ellipsoid(shape)
        verts, faces = contour(f, 1.0)
        sk_verts, sk_faces, _, _ = marching_cubes(f, 1.0, method="lorensen")
        assert (len(verts), len(faces)) == (len(sk_verts), len(sk_faces)), shape
        codes = edge_codes(vertex_edges(verts, f, 1.0), f.shape)
        sk_codes = edge_codes(vertex_edges(sk_verts.astype(np.float32), f, 1.0), f.shape)
        np.testing.assert_array_equal(np.sort(codes), np.sort(sk_codes))
        assert faces.max() < len(verts) and verts.base is None and faces.base is None   # exact outputs
        misses = tack.cache.stats()["misses"]["variant"]
        if before is not None:
            assert misses == before, f"{shape} compiled a variant"
        before = misses


def test_tack_warm_lists_the_same_variants_for_every_shape():
    """tack_warm gives the same kernels and argument types (so the same variant keys) for any shape."""
    from tack.cache import keys as cache_keys
    from tack.kernels.contour import tack_warm
    from tack import types as T
    from tack.argtypes import argtypes_of

    def keys(shape):
        out = []
        for kernel, args, grid in tack_warm(shape):
            types = argtypes_of(kernel, args)
            templates = {p: a for p, a in zip(kernel.params, args) if isinstance(a, type)}
            values = tuple(t for t in types if not isinstance(t, T.Template))
            out.append(cache_keys.keys(kernel, templates, values, grid, False).for_target("t"))
        return out
    k8 = keys((8, 8, 8))
    assert len(k8) == 2 and keys((21, 21, 21)) == k8 == keys((5, 64, 33))


def test_level_rounded_down_keeps_scikit_images_corners():
    """A float32 value just above a float64 level that rounds up to it in float32 (0.4 -> float32
    0.40000000596) is inside, as scikit-image's double comparison has it: the level is given to
    the float32 kernels rounded down, and the triangle counts stay scikit-image's."""
    from tack.kernels.contour import level_as
    f, _ = field_of("sphere", 21)
    g = f.copy()
    near = np.abs(g - 0.75) < 0.05
    g[near] = np.float32(0.4)                       # many corners exactly at float32(0.4)
    g[~near] = np.where(g[~near] > 0.75, np.float32(1.0), np.float32(0.0))
    assert float(np.float32(0.4)) > 0.4 and level_as(0.4, np.float32) < np.float32(0.4)
    verts, faces = contour(g, 0.4)
    sk_verts, sk_faces, _, _ = marching_cubes(g, 0.4, method="lorensen")
    assert (len(verts), len(faces)) == (len(sk_verts), len(sk_faces)) and len(faces) > 0
    below, _ = contour(g, np.nextafter(np.float32(0.4), np.float32(1)))  # above every 0.4 corner
    assert len(below) != len(verts)


@pytest.mark.parametrize("level, expect", [(0.4, np.float32(0.39999998)), (0.5, np.float32(0.5)),
                                           (1e39, np.finfo(np.float32).max), (-1e39, -np.inf)])
def test_level_as_is_the_largest_float32_at_most_the_level(level, expect):
    from tack.kernels.contour import level_as
    got = level_as(level, np.float32)
    assert got.dtype == np.float32 and got == expect and float(got) <= level
    assert level_as(level, np.float64) == level
