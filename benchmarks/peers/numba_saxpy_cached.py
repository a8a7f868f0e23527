"""Numba peer of ``_deployed_kernels.saxpy``: the same loop, ``cache=True`` (``NUMBA_CACHE_DIR``)."""

import numba


@numba.njit(cache=True)
def _saxpy(a, x, y, out):
    for i in range(out.shape[0]):
        out[i] = a * x[i] + y[i]


def run(a, x, y, out):
    _saxpy(a, x, y, out)
    return out
