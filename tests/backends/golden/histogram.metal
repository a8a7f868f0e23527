// Tack metal:apple: MSL 3.0, emitter 4; kernel 'histogram', entry tack_histogram_entry.
// Compile with fast math off (-fno-fast-math).
#include <metal_stdlib>
#include <metal_atomic>
using namespace metal;

template <typename P, int K> struct tack_array { P p; long f[K]; };
template <typename P> struct tack_array<P, 0> { P p; };

struct tack_tuple_long { long v0; };

static inline long tack_wrap(long i, long n) { return i < 0 ? i + n : i; }
static inline long tack_mod_long(long a, long b) {
    if (b == 0 || b == -1) return 0;
    long r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static inline void tack_histogram_kernel(tack_array<device int*, 1> v_values, tack_array<device int*, 1> v_bins, tack_array<device uint*, 1> v_top, tack_array<device float*, 1> v_total, long tack_tid0)
{
    long v_i = {};
    long v_b = {};
    v_i = tack_tid0;
    const tack_tuple_long tack_t1 = tack_tuple_long{v_bins.f[0]};
    v_b = tack_mod_long(((long)v_values.p[tack_wrap(v_i, v_values.f[0])]), tack_t1.v0);
    (void)(atomic_fetch_add_explicit((device atomic_int*)&v_bins.p[tack_wrap(v_b, v_bins.f[0])], ((int)1L), memory_order_relaxed));
    (void)(atomic_fetch_max_explicit((device atomic_uint*)&v_top.p[tack_wrap(0L, v_top.f[0])], ((uint)v_values.p[tack_wrap(v_i, v_values.f[0])]), memory_order_relaxed));
    (void)(atomic_fetch_add_explicit((device atomic_float*)&v_total.p[tack_wrap(0L, v_total.f[0])], 0.5f, memory_order_relaxed));
}

struct tack_histogram_entry_params {
    long a0_n0;
    long a1_n0;
    long a2_n0;
    long a3_n0;
    long n0;
    long n1;
    long n2;
};
static_assert(sizeof(tack_histogram_entry_params) == 56, "Tack's params layout");

kernel void tack_histogram_entry(
    device int* a0 [[buffer(0)]],
    device int* a1 [[buffer(1)]],
    device uint* a2 [[buffer(2)]],
    device float* a3 [[buffer(3)]],
    constant tack_histogram_entry_params& tack_p [[buffer(4)]],
    uint3 tack_gid [[thread_position_in_grid]])
{
    const long tack_i0 = (long)tack_gid.x;
    if (tack_i0 >= tack_p.n0 || tack_gid.y != 0 || tack_gid.z != 0) return;
    tack_histogram_kernel(tack_array<device int*, 1>{a0, {tack_p.a0_n0}}, tack_array<device int*, 1>{a1, {tack_p.a1_n0}}, tack_array<device uint*, 1>{a2, {tack_p.a2_n0}}, tack_array<device float*, 1>{a3, {tack_p.a3_n0}}, tack_i0);
}
