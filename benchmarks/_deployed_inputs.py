"""The two kernels of ``deployed_warm.py`` and ``warm_instructions.py`` as their runners call
them: where each library's version lives, its input, and the check of its result.  Imports
nothing at its own import (what it imports is a measured process's)."""

MODULES = {"contour": {"tack": ("tack.kernels.contour", "contour"),
                       "numba": ("numba_contour_cached", "contour_numba"),
                       "warp": ("warp_contour", "contour_warp")},
           "saxpy": {"tack": ("_deployed_kernels", "run"), "numba": ("numba_saxpy_cached", "run"),
                     "warp": ("warp_saxpy", "run")}}


def make(kernel, size):
    """The call's arguments: the 21³ sphere and its level, or saxpy's (a, x, y, out)."""
    if kernel == "contour":
        import fields
        return fields.sphere(size), fields.SPHERE_LEVEL
    import numpy as np
    x = np.arange(size, dtype=np.float32)
    return np.float32(2.0), x, np.ones(size, dtype=np.float32), np.empty(size, dtype=np.float32)


def function(kernel, lib):
    """The library's callable for ``kernel`` (imports its module)."""
    import importlib
    module, call = MODULES[kernel][lib]
    return getattr(importlib.import_module(module), call)


def check(kernel, args, result) -> bool:
    if kernel == "contour":
        verts, faces = result
        return len(faces) > 0 and int(faces.max()) < len(verts)
    a, x, y, _ = args
    return bool((result == a * x + y).all())
