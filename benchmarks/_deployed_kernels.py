"""The saxpy of ``deployed_warm.py``: a 100k-element ``out = a * x + y`` as Tack runs it, the
module a site config names to build its bundle (``kernel: saxpy``)."""

import numpy as np

import tack


@tack.kernel
def saxpy(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


def inputs(n):
    """(a, x, y, out) for ``n`` elements, float32 as a GPU user would have them."""
    x = np.arange(n, dtype=np.float32)
    return np.float32(2.0), x, np.ones(n, dtype=np.float32), np.empty(n, dtype=np.float32)


def run(a, x, y, out):
    tack.launch(saxpy, len(out), (a, x, y, out))
    return out
