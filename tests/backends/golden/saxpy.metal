// Tack metal:apple: MSL 3.0, emitter 4; kernel 'saxpy', entry tack_saxpy_entry.
// Compile with fast math off (-fno-fast-math).
#include <metal_stdlib>
#include <metal_atomic>
using namespace metal;

template <typename P, int K> struct tack_array { P p; long f[K]; };
template <typename P> struct tack_array<P, 0> { P p; };

static inline long tack_wrap(long i, long n) { return i < 0 ? i + n : i; }

static inline void tack_saxpy_kernel(float v_a, tack_array<device float*, 1> v_x, tack_array<device float*, 1> v_y, tack_array<device float*, 1> v_out, long tack_tid0)
{
    long v_i = {};
    v_i = tack_tid0;
    v_out.p[tack_wrap(v_i, v_out.f[0])] = ((v_a * v_x.p[tack_wrap(v_i, v_x.f[0])]) + v_y.p[tack_wrap(v_i, v_y.f[0])]);
}

struct tack_saxpy_entry_params {
    float a0;
    long a1_n0;
    long a2_n0;
    long a3_n0;
    long n0;
    long n1;
    long n2;
};
static_assert(sizeof(tack_saxpy_entry_params) == 56, "Tack's params layout");

kernel void tack_saxpy_entry(
    device float* a1 [[buffer(0)]],
    device float* a2 [[buffer(1)]],
    device float* a3 [[buffer(2)]],
    constant tack_saxpy_entry_params& tack_p [[buffer(3)]],
    uint3 tack_gid [[thread_position_in_grid]])
{
    const long tack_i0 = (long)tack_gid.x;
    if (tack_i0 >= tack_p.n0 || tack_gid.y != 0 || tack_gid.z != 0) return;
    tack_saxpy_kernel(tack_p.a0, tack_array<device float*, 1>{a1, {tack_p.a1_n0}}, tack_array<device float*, 1>{a2, {tack_p.a2_n0}}, tack_array<device float*, 1>{a3, {tack_p.a3_n0}}, tack_i0);
}
