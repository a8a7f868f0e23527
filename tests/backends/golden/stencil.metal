// Tack metal:apple: MSL 3.0, emitter 4; kernel 'stencil', entry tack_stencil_entry.
// Compile with fast math off (-fno-fast-math).
#include <metal_stdlib>
#include <metal_atomic>
using namespace metal;

template <typename P, int K> struct tack_array { P p; long f[K]; };
template <typename P> struct tack_array<P, 0> { P p; };

struct tack_tuple_long_long { long v0; long v1; };

static inline long tack_wrap(long i, long n) { return i < 0 ? i + n : i; }

static inline void tack_stencil_kernel(tack_array<device float*, 2> v_src, tack_array<device float*, 2> v_dst, long tack_tid0, long tack_tid1)
{
    long v_i = {};
    long v_j = {};
    long v_n = {};
    long v_m = {};
    tack_tuple_long_long tack_t1 = tack_tuple_long_long{tack_tid0, tack_tid1};
    v_i = tack_t1.v0;
    v_j = tack_t1.v1;
    tack_tuple_long_long tack_t2 = tack_tuple_long_long{v_src.f[0], v_src.f[1]};
    v_n = tack_t2.v0;
    v_m = tack_t2.v1;
    if ((((0L < v_i) & (v_i < ((long)((ulong)v_n - (ulong)1L)))) && ((0L < v_j) & (v_j < ((long)((ulong)v_m - (ulong)1L)))))) {
        v_dst.p[tack_wrap(v_i, v_dst.f[0]) * v_dst.f[1] + tack_wrap(v_j, v_dst.f[1])] = ((0.25f * (((v_src.p[tack_wrap(((long)((ulong)v_i - (ulong)1L)), v_src.f[0]) * v_src.f[1] + tack_wrap(v_j, v_src.f[1])] + v_src.p[tack_wrap(((long)((ulong)v_i + (ulong)1L)), v_src.f[0]) * v_src.f[1] + tack_wrap(v_j, v_src.f[1])]) + v_src.p[tack_wrap(v_i, v_src.f[0]) * v_src.f[1] + tack_wrap(((long)((ulong)v_j - (ulong)1L)), v_src.f[1])]) + v_src.p[tack_wrap(v_i, v_src.f[0]) * v_src.f[1] + tack_wrap(((long)((ulong)v_j + (ulong)1L)), v_src.f[1])])) - v_src.p[tack_wrap(v_i, v_src.f[0]) * v_src.f[1] + tack_wrap(v_j, v_src.f[1])]);
    } else {
        v_dst.p[tack_wrap(v_i, v_dst.f[0]) * v_dst.f[1] + tack_wrap(v_j, v_dst.f[1])] = v_src.p[tack_wrap(v_i, v_src.f[0]) * v_src.f[1] + tack_wrap(v_j, v_src.f[1])];
    }
}

struct tack_stencil_entry_params {
    long a0_n0;
    long a0_n1;
    long a1_n0;
    long a1_n1;
    long n0;
    long n1;
    long n2;
};
static_assert(sizeof(tack_stencil_entry_params) == 56, "Tack's params layout");

kernel void tack_stencil_entry(
    device float* a0 [[buffer(0)]],
    device float* a1 [[buffer(1)]],
    constant tack_stencil_entry_params& tack_p [[buffer(2)]],
    uint3 tack_gid [[thread_position_in_grid]])
{
    const long tack_i0 = (long)tack_gid.y, tack_i1 = (long)tack_gid.x;
    if (tack_i0 >= tack_p.n0 || tack_i1 >= tack_p.n1 || tack_gid.z != 0) return;
    tack_stencil_kernel(tack_array<device float*, 2>{a0, {tack_p.a0_n0, tack_p.a0_n1}}, tack_array<device float*, 2>{a1, {tack_p.a1_n0, tack_p.a1_n1}}, tack_i0, tack_i1);
}
