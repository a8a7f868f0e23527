"""Numba peer, cached: the marching cubes of ``numba_contour.py`` with ``cache=True``.

For ``cache_warm.py``: its processes load the functions from Numba's on-disk
cache (``NUMBA_CACHE_DIR``) after one priming process.  Import this module
in a fresh process (the flag is read when ``numba_contour`` is first imported).
"""

import os

os.environ["TACK_BENCH_NUMBA_CACHE"] = "1"

from numba_contour import _contour, contour_numba  # noqa: E402,F401 (_contour: its cache stats)

__all__ = ["contour_numba"]
