// Tack metal:apple: MSL 3.0, emitter 4; kernel 'classify', entry tack_contour_classify_entry.
// Compile with fast math off (-fno-fast-math).
#include <metal_stdlib>
#include <metal_atomic>
using namespace metal;

template <typename P, int K> struct tack_array { P p; long f[K]; };
template <typename P> struct tack_array<P, 0> { P p; };

struct tack_tuple_long_long_long { long v0; long v1; long v2; };

constant int tack_const_0[256] = {
    0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 2,
    1, 2, 2, 3, 2, 3, 3, 4, 2, 3, 3, 4, 3, 4, 4, 3,
    1, 2, 2, 3, 2, 3, 3, 4, 2, 3, 3, 4, 3, 4, 4, 3,
    2, 3, 3, 2, 3, 4, 4, 3, 3, 4, 4, 3, 4, 5, 5, 2,
    1, 2, 2, 3, 2, 3, 3, 4, 2, 3, 3, 4, 3, 4, 4, 3,
    2, 3, 3, 4, 3, 4, 4, 5, 3, 4, 4, 5, 4, 5, 5, 4,
    2, 3, 3, 4, 3, 4, 2, 3, 3, 4, 4, 5, 4, 5, 3, 2,
    3, 4, 4, 3, 4, 5, 3, 2, 4, 5, 5, 4, 5, 2, 4, 1,
    1, 2, 2, 3, 2, 3, 3, 4, 2, 3, 3, 4, 3, 4, 4, 3,
    2, 3, 3, 4, 3, 4, 4, 5, 3, 2, 4, 3, 4, 3, 5, 2,
    2, 3, 3, 4, 3, 4, 4, 5, 3, 4, 4, 5, 4, 5, 5, 4,
    3, 4, 4, 3, 4, 5, 5, 4, 4, 3, 5, 2, 5, 4, 2, 1,
    2, 3, 3, 4, 3, 4, 4, 5, 3, 4, 4, 5, 2, 3, 3, 2,
    3, 4, 4, 5, 4, 5, 5, 2, 4, 3, 5, 4, 3, 2, 4, 1,
    3, 4, 4, 5, 4, 5, 3, 4, 4, 5, 5, 2, 3, 4, 2, 1,
    2, 3, 3, 2, 3, 4, 2, 1, 3, 2, 4, 1, 2, 1, 1, 0,
};

static inline long tack_wrap(long i, long n) { return i < 0 ? i + n : i; }

static inline bool tack_contour_classify_fn0_crosses(float v_a, float v_b, float v_level)
{
    return ((v_a > v_level) != (v_b > v_level));
    return bool{};
}

template <typename A0, typename A1, typename A2>
static inline void tack_contour_classify_fn1_claim_vertex(A0 v_edge_vid, A1 v_vert_src, A2 v_counts, long v_i, long v_j, long v_k, long v_lin)
{
    int v_vid = {};
    v_vid = atomic_fetch_add_explicit((device atomic_int*)&v_counts.p[tack_wrap(0L, v_counts.f[0])], ((int)1L), memory_order_relaxed);
    v_edge_vid.p[tack_wrap(v_i, v_edge_vid.f[0]) * (v_edge_vid.f[3] * v_edge_vid.f[2] * v_edge_vid.f[1]) + tack_wrap(v_j, v_edge_vid.f[1]) * (v_edge_vid.f[3] * v_edge_vid.f[2]) + tack_wrap(v_k, v_edge_vid.f[2]) * v_edge_vid.f[3] + tack_wrap(0L, v_edge_vid.f[3])] = v_vid;
    v_vert_src.p[tack_wrap(((long)v_vid), v_vert_src.f[0])] = ((int)((long)((ulong)((long)((ulong)3L * (ulong)v_lin)) + (ulong)0L)));
}

template <typename A0, typename A1, typename A2>
static inline void tack_contour_classify_fn2_claim_vertex(A0 v_edge_vid, A1 v_vert_src, A2 v_counts, long v_i, long v_j, long v_k, long v_lin)
{
    int v_vid = {};
    v_vid = atomic_fetch_add_explicit((device atomic_int*)&v_counts.p[tack_wrap(0L, v_counts.f[0])], ((int)1L), memory_order_relaxed);
    v_edge_vid.p[tack_wrap(v_i, v_edge_vid.f[0]) * (v_edge_vid.f[3] * v_edge_vid.f[2] * v_edge_vid.f[1]) + tack_wrap(v_j, v_edge_vid.f[1]) * (v_edge_vid.f[3] * v_edge_vid.f[2]) + tack_wrap(v_k, v_edge_vid.f[2]) * v_edge_vid.f[3] + tack_wrap(1L, v_edge_vid.f[3])] = v_vid;
    v_vert_src.p[tack_wrap(((long)v_vid), v_vert_src.f[0])] = ((int)((long)((ulong)((long)((ulong)3L * (ulong)v_lin)) + (ulong)1L)));
}

template <typename A0, typename A1, typename A2>
static inline void tack_contour_classify_fn3_claim_vertex(A0 v_edge_vid, A1 v_vert_src, A2 v_counts, long v_i, long v_j, long v_k, long v_lin)
{
    int v_vid = {};
    v_vid = atomic_fetch_add_explicit((device atomic_int*)&v_counts.p[tack_wrap(0L, v_counts.f[0])], ((int)1L), memory_order_relaxed);
    v_edge_vid.p[tack_wrap(v_i, v_edge_vid.f[0]) * (v_edge_vid.f[3] * v_edge_vid.f[2] * v_edge_vid.f[1]) + tack_wrap(v_j, v_edge_vid.f[1]) * (v_edge_vid.f[3] * v_edge_vid.f[2]) + tack_wrap(v_k, v_edge_vid.f[2]) * v_edge_vid.f[3] + tack_wrap(2L, v_edge_vid.f[3])] = v_vid;
    v_vert_src.p[tack_wrap(((long)v_vid), v_vert_src.f[0])] = ((int)((long)((ulong)((long)((ulong)3L * (ulong)v_lin)) + (ulong)2L)));
}

template <typename A0>
static inline long tack_contour_classify_fn4_cube_case(A0 v_field, long v_i, long v_j, long v_k, float v_level)
{
    long v_case = {};
    v_case = 0L;
    if ((v_field.p[tack_wrap(v_i, v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(v_j, v_field.f[1]) * v_field.f[2] + tack_wrap(v_k, v_field.f[2])] > v_level)) {
        v_case = (v_case | 1L);
    }
    if ((v_field.p[tack_wrap(((long)((ulong)v_i + (ulong)1L)), v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(v_j, v_field.f[1]) * v_field.f[2] + tack_wrap(v_k, v_field.f[2])] > v_level)) {
        v_case = (v_case | 2L);
    }
    if ((v_field.p[tack_wrap(((long)((ulong)v_i + (ulong)1L)), v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(((long)((ulong)v_j + (ulong)1L)), v_field.f[1]) * v_field.f[2] + tack_wrap(v_k, v_field.f[2])] > v_level)) {
        v_case = (v_case | 4L);
    }
    if ((v_field.p[tack_wrap(v_i, v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(((long)((ulong)v_j + (ulong)1L)), v_field.f[1]) * v_field.f[2] + tack_wrap(v_k, v_field.f[2])] > v_level)) {
        v_case = (v_case | 8L);
    }
    if ((v_field.p[tack_wrap(v_i, v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(v_j, v_field.f[1]) * v_field.f[2] + tack_wrap(((long)((ulong)v_k + (ulong)1L)), v_field.f[2])] > v_level)) {
        v_case = (v_case | 16L);
    }
    if ((v_field.p[tack_wrap(((long)((ulong)v_i + (ulong)1L)), v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(v_j, v_field.f[1]) * v_field.f[2] + tack_wrap(((long)((ulong)v_k + (ulong)1L)), v_field.f[2])] > v_level)) {
        v_case = (v_case | 32L);
    }
    if ((v_field.p[tack_wrap(((long)((ulong)v_i + (ulong)1L)), v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(((long)((ulong)v_j + (ulong)1L)), v_field.f[1]) * v_field.f[2] + tack_wrap(((long)((ulong)v_k + (ulong)1L)), v_field.f[2])] > v_level)) {
        v_case = (v_case | 64L);
    }
    if ((v_field.p[tack_wrap(v_i, v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(((long)((ulong)v_j + (ulong)1L)), v_field.f[1]) * v_field.f[2] + tack_wrap(((long)((ulong)v_k + (ulong)1L)), v_field.f[2])] > v_level)) {
        v_case = (v_case | 128L);
    }
    return v_case;
    return long{};
}

static inline void tack_contour_classify_kernel(tack_array<device float*, 3> v_field, float v_level, tack_array<device int*, 4> v_edge_vid, tack_array<device int*, 1> v_vert_src, tack_array<device long*, 1> v_active, tack_array<device int*, 1> v_counts, long tack_tid0, long tack_tid1, long tack_tid2)
{
    long v_i = {};
    long v_j = {};
    long v_k = {};
    long v_nx = {};
    long v_ny = {};
    long v_nz = {};
    long v_lin = {};
    float v_f0 = {};
    long v_case = {};
    int v_n = {};
    tack_tuple_long_long_long tack_t1 = tack_tuple_long_long_long{tack_tid0, tack_tid1, tack_tid2};
    v_i = tack_t1.v0;
    v_j = tack_t1.v1;
    v_k = tack_t1.v2;
    tack_tuple_long_long_long tack_t2 = tack_tuple_long_long_long{v_field.f[0], v_field.f[1], v_field.f[2]};
    v_nx = tack_t2.v0;
    v_ny = tack_t2.v1;
    v_nz = tack_t2.v2;
    v_lin = ((long)((ulong)((long)((ulong)((long)((ulong)((long)((ulong)v_i * (ulong)v_ny)) + (ulong)v_j)) * (ulong)v_nz)) + (ulong)v_k));
    v_f0 = v_field.p[tack_wrap(v_i, v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(v_j, v_field.f[1]) * v_field.f[2] + tack_wrap(v_k, v_field.f[2])];
    if (((((long)((ulong)v_i + (ulong)1L)) < v_nx) && tack_contour_classify_fn0_crosses(v_f0, v_field.p[tack_wrap(((long)((ulong)v_i + (ulong)1L)), v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(v_j, v_field.f[1]) * v_field.f[2] + tack_wrap(v_k, v_field.f[2])], v_level))) {
        (void)(tack_contour_classify_fn1_claim_vertex(v_edge_vid, v_vert_src, v_counts, v_i, v_j, v_k, v_lin));
    }
    if (((((long)((ulong)v_j + (ulong)1L)) < v_ny) && tack_contour_classify_fn0_crosses(v_f0, v_field.p[tack_wrap(v_i, v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(((long)((ulong)v_j + (ulong)1L)), v_field.f[1]) * v_field.f[2] + tack_wrap(v_k, v_field.f[2])], v_level))) {
        (void)(tack_contour_classify_fn2_claim_vertex(v_edge_vid, v_vert_src, v_counts, v_i, v_j, v_k, v_lin));
    }
    if (((((long)((ulong)v_k + (ulong)1L)) < v_nz) && tack_contour_classify_fn0_crosses(v_f0, v_field.p[tack_wrap(v_i, v_field.f[0]) * (v_field.f[2] * v_field.f[1]) + tack_wrap(v_j, v_field.f[1]) * v_field.f[2] + tack_wrap(((long)((ulong)v_k + (ulong)1L)), v_field.f[2])], v_level))) {
        (void)(tack_contour_classify_fn3_claim_vertex(v_edge_vid, v_vert_src, v_counts, v_i, v_j, v_k, v_lin));
    }
    if (((((long)((ulong)v_i + (ulong)1L)) < v_nx) && (((long)((ulong)v_j + (ulong)1L)) < v_ny) && (((long)((ulong)v_k + (ulong)1L)) < v_nz))) {
        v_case = tack_contour_classify_fn4_cube_case(v_field, v_i, v_j, v_k, v_level);
        v_n = tack_array<constant int*, 0>{tack_const_0}.p[tack_wrap(v_case, 256L)];
        if ((v_n > ((int)0L))) {
            v_active.p[tack_wrap(((long)atomic_fetch_add_explicit((device atomic_int*)&v_counts.p[tack_wrap(1L, v_counts.f[0])], ((int)1L), memory_order_relaxed)), v_active.f[0])] = ((long)((ulong)((long)((ulong)256L * (ulong)v_lin)) + (ulong)v_case));
            (void)(atomic_fetch_add_explicit((device atomic_int*)&v_counts.p[tack_wrap(2L, v_counts.f[0])], v_n, memory_order_relaxed));
        }
    }
}

struct tack_contour_classify_entry_params {
    long a0_n0;
    long a0_n1;
    long a0_n2;
    float a1;
    long a2_n0;
    long a2_n1;
    long a2_n2;
    long a2_n3;
    long a3_n0;
    long a4_n0;
    long a5_n0;
    long n0;
    long n1;
    long n2;
};
static_assert(sizeof(tack_contour_classify_entry_params) == 112, "Tack's params layout");

kernel void tack_contour_classify_entry(
    device float* a0 [[buffer(0)]],
    device int* a2 [[buffer(1)]],
    device int* a3 [[buffer(2)]],
    device long* a4 [[buffer(3)]],
    device int* a5 [[buffer(4)]],
    constant tack_contour_classify_entry_params& tack_p [[buffer(5)]],
    uint3 tack_gid [[thread_position_in_grid]])
{
    const long tack_i0 = (long)tack_gid.z, tack_i1 = (long)tack_gid.y, tack_i2 = (long)tack_gid.x;
    if (tack_i0 >= tack_p.n0 || tack_i1 >= tack_p.n1 || tack_i2 >= tack_p.n2) return;
    tack_contour_classify_kernel(tack_array<device float*, 3>{a0, {tack_p.a0_n0, tack_p.a0_n1, tack_p.a0_n2}}, tack_p.a1, tack_array<device int*, 4>{a2, {tack_p.a2_n0, tack_p.a2_n1, tack_p.a2_n2, tack_p.a2_n3}}, tack_array<device int*, 1>{a3, {tack_p.a3_n0}}, tack_array<device long*, 1>{a4, {tack_p.a4_n0}}, tack_array<device int*, 1>{a5, {tack_p.a5_n0}}, tack_i0, tack_i1, tack_i2);
}
