"""Tack: Python kernels compiled for CPUs and GPUs, kept on disk so later processes start warm.

``import tack`` is light: llvmlite and the compiler load on the first compile.
"""

import gc as _gc

from . import _image


def _promote_young_objects():
    """Move the objects the cyclic collector tracks into its oldest generation unexamined, and
    reset its young generations' counts (``gc.freeze()`` then ``gc.unfreeze()``: two list
    splices, whatever the number of objects).

    A program's imports make objects that live as long as it does (modules, functions, classes,
    NumPy's type tables).  Right after NumPy's import the collector's middle generation is one
    run from its threshold, so the next 700 or so objects anything makes set off a collection
    that examines all of NumPy's young objects, 0.6-0.8 ms, to free none of them; a NumPy-only
    process never pays it.  Promoted here, they are examined only by full collections, as they
    would be once they had survived two.  Nothing is kept from the collector: an unreachable
    cycle among them is freed by the next full collection.  Left alone where the program froze
    objects itself (``gc.unfreeze()`` would release them).  Tack's imports themselves run with
    the collector on: its young collections of Tack's objects (three in a warm contour, 60-100 us
    each) also untrack the tuples that hold no containers, about 1,200, which the full
    collection at the interpreter's exit would otherwise examine: kept off for Tack's imports,
    the collector saved those three runs and the exit's collection took as much longer (3.41 ->
    3.75 ms)."""
    if not _gc.get_freeze_count():
        _gc.freeze()
        _gc.unfreeze()


_promote_young_objects()                # what the program made before (NumPy's import)
_finder = _image.install(__name__, __path__[0])   # the rest of Tack from its image, where current
if _finder is not None:
    _finder.preload(__name__ + "._version")         # the image's group of the imports below
del _finder

from ._version import __version__
from .api import Kernel, constant, func, kernel
from .language import (Constant, Func, atomic_add, atomic_max, atomic_min, bool_, float32, float64,
                       int32, int64, tid, uint32, uint64)
from .config import config
from .devices import devices, to_device
from .errors import CompileError, TackWarning
from .launch import launch, report_timings

_promote_young_objects()                # and Tack's own modules (and NumPy's, imported by them)

__all__ = [
    "__version__", "CompileError", "Constant", "TackWarning", "Func", "Kernel", "atomic_add", "atomic_max",
    "atomic_min", "bool_", "config", "constant", "float32", "float64", "func", "int32", "int64",
    "devices", "kernel", "launch", "report_timings", "tid", "to_device", "uint32", "uint64",
]
