"""Deterministic scalar fields for marching-cubes tests (NumPy only).

Every generator returns a float32, C-contiguous ``(n, n, n)`` array in index
space (array axes 0, 1, 2 = x, y, z).  Contour each at its level:

* ``sphere(n)``         level ``SPHERE_LEVEL = 0.75``: ``f = |p - c| / (n / 3)``
  with off-centre ``c = (n - 1) / 20 * (9.7, 10.3, 10.1)`` (for n = 21,
  ``c = (9.7, 10.3, 10.1)``), i.e. a sphere of radius ``n / 4``.
* ``torus(n)``          level ``TORUS_LEVEL = 0.1``: ``f`` = distance to a circle
  of radius ``0.28 n`` in the axis-0/1 plane around an off-centre point, divided
  by ``n``, i.e. a torus of tube radius ``0.1 n``.
* ``smooth_random(n, seed)`` level ``SMOOTH_RANDOM_LEVEL = 0.0``: standard
  normal noise from ``np.random.default_rng(seed)``, Gaussian-smoothed
  (sigma = 2 grid cells, periodic, via FFT) and normalised to zero mean and
  unit standard deviation.

For the sizes used in the tests (21 and 64; seeds 0..) no grid value equals
its level exactly, so the "< level" classification is unambiguous.
"""

import numpy as np

__all__ = [
    "sphere",
    "torus",
    "smooth_random",
    "SPHERE_LEVEL",
    "TORUS_LEVEL",
    "SMOOTH_RANDOM_LEVEL",
]

SPHERE_LEVEL = 0.75
TORUS_LEVEL = 0.1
SMOOTH_RANDOM_LEVEL = 0.0


def _grid(n):
    x = np.arange(n, dtype=np.float64)
    return np.meshgrid(x, x, x, indexing="ij")


def sphere(n):
    """Off-centre distance field; contour at ``SPHERE_LEVEL`` (radius n/4)."""
    s = (n - 1) / 20.0
    c = (9.7 * s, 10.3 * s, 10.1 * s)
    x, y, z = _grid(n)
    d = np.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2)
    return np.ascontiguousarray(d / (n / 3.0), dtype=np.float32)


def torus(n):
    """Torus distance field; contour at ``TORUS_LEVEL`` (R = 0.28 n, r = 0.1 n)."""
    s = (n - 1) / 20.0
    c = (10.15 * s, 9.85 * s, 10.2 * s)
    x, y, z = _grid(n)
    q = np.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2) - 0.28 * n
    d = np.sqrt(q**2 + (z - c[2]) ** 2)
    return np.ascontiguousarray(d / n, dtype=np.float32)


def smooth_random(n, seed=0, sigma=2.0):
    """Gaussian-smoothed noise; contour at ``SMOOTH_RANDOM_LEVEL`` (0.0)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((n, n, n))
    k = np.fft.fftfreq(n)
    g = np.exp(-2.0 * (np.pi * sigma * k) ** 2)  # FT of a unit Gaussian
    kernel = g[:, None, None] * g[None, :, None] * g[None, None, :]
    f = np.fft.ifftn(np.fft.fftn(noise) * kernel).real
    f = (f - f.mean()) / f.std()
    return np.ascontiguousarray(f, dtype=np.float32)
