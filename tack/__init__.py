"""Tack: Python kernels compiled for CPUs and GPUs, kept on disk so later processes start warm.

``import tack`` is light: llvmlite and the compiler load on the first compile.
"""

from . import _image

with _image.quiet_collector():              # no collection of the imports' objects (see there)
    _image.install(__name__, __path__[0])   # the rest of Tack from its import image, where current

    from ._version import __version__
    from .api import Kernel, constant, func, kernel
    from .language import (Constant, Func, atomic_add, atomic_max, atomic_min, bool_, float32,
                           float64, int32, int64, tid, uint32, uint64)
    from .config import config
    from .devices import devices, to_device
    from .errors import CompileError, TackWarning
    from .launch import launch, report_timings

__all__ = [
    "__version__", "CompileError", "Constant", "TackWarning", "Func", "Kernel", "atomic_add", "atomic_max",
    "atomic_min", "bool_", "config", "constant", "float32", "float64", "func", "int32", "int64",
    "devices", "kernel", "launch", "report_timings", "tid", "to_device", "uint32", "uint64",
]
