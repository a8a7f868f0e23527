"""Warp peer (CPU) of ``_deployed_kernels.saxpy``, from Warp's kernel cache (``WARP_CACHE_PATH``)."""

import warp as wp

wp.config.quiet = True


@wp.kernel
def _saxpy(a: float, x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32),
           out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def run(a, x, y, out):
    xs, ys = wp.array(x, device="cpu"), wp.array(y, device="cpu")
    o = wp.array(out, device="cpu")
    wp.launch(_saxpy, dim=len(out), inputs=[float(a), xs, ys, o], device="cpu")
    out[:] = o.numpy()
    return out
