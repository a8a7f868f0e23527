"""What putting the grid's last dimension on x buys on a GPU: one kernel's memory access in the
order a warp's threads read it, against the same work in the order the earlier mapping (grid
dimension 0 on x) gave every 2-D kernel.

``python benchmarks/_coalescing.py [DEVICE] [N]`` (``gpu_check.sh`` step 5 runs it with
``cuda`` and 4096): ``dst = 2 * src`` over an N x N float32 array kept on the device, by

* ``scale_rows``: ``i, j = tack.tid()``; ``dst[i, j]``: consecutive threads (j, on x) touch
  consecutive elements, one memory transaction a warp (every 2-D kernel now);
* ``scale_cols``: ``j, i = tack.tid()``; the same ``dst[i, j]``: consecutive threads (i, on x)
  touch elements a row apart, 32 transactions a warp (every 2-D kernel before the change).

Prints the medians of 20 launches each and their ratio; checks both results.  On the CPU
backend (a dry run) both run the same loops in another order.
"""

import os
import statistics
import sys
import time

import numpy as np

import tack


@tack.kernel
def scale_rows(src, dst):
    i, j = tack.tid()
    dst[i, j] = src[i, j] * 2.0


@tack.kernel
def scale_cols(src, dst):
    j, i = tack.tid()
    dst[i, j] = src[i, j] * 2.0


def measure(device="cuda", n=4096, launches=20) -> dict:
    """{kernel: median seconds a launch} over an n x n array kept on ``device``."""
    host = np.arange(n * n, dtype=np.float32).reshape(n, n)
    src = tack.to_device(host, device)
    out = {}
    for kernel, grid in ((scale_rows, (n, n)), (scale_cols, (n, n))):
        dst = tack.to_device(np.zeros_like(host), device)
        tack.launch(kernel, grid, (src, dst), device=device)          # compiled, loaded
        got = dst.numpy() if hasattr(dst, "numpy") else dst
        if not np.array_equal(got, 2 * host):
            raise AssertionError(f"{kernel.__name__} on {device}: wrong result")
        times = []
        for _ in range(launches):
            t = time.perf_counter()
            tack.launch(kernel, grid, (src, dst), device=device)
            times.append(time.perf_counter() - t)
        out[kernel.__name__] = statistics.median(times)
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    device = argv[0] if argv else os.environ.get("TACK_GPU_CHECK_DEVICE", "cuda")
    n = int(argv[1]) if len(argv) > 1 else 4096
    t = measure(device, n)
    rows, cols = t["scale_rows"] * 1e3, t["scale_cols"] * 1e3
    print(f"  {n}x{n} float32 on {device}: the last grid dimension on x {rows:.3f} ms, "
          f"dimension 0 on x (the earlier mapping's access) {cols:.3f} ms: {cols / rows:.1f}x")


if __name__ == "__main__":
    main()
