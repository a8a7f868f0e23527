"""What users write: ``@tack.kernel``, ``@tack.func`` and ``tack.constant``.

A ``Kernel`` holds its compiled variants and its lowered kernels (one per
template binding), which ``tack.compiler.lower`` makes: nothing here imports
the front end or the compiler.  What a kernel may name besides its
parameters (device functions, constants, intrinsics) is ``tack.language``.
"""

import functools
import types

from .language import Constant, Func, wrapped_message


class Kernel:
    """A ``@tack.kernel`` function: launched over a 1-, 2- or 3-D grid.

    ``static_shape``: the array parameters whose shape is compiled in (a
    parameter name, a list of them, or True for every array parameter); the
    others' extents and strides are passed at launch.
    """

    def __init__(self, fn, static_shape=None):
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"@tack.kernel takes a Python function, not {type(fn).__name__}")
        if getattr(fn, "__wrapped__", None) is not None:
            raise TypeError(wrapped_message(fn, "@tack.kernel"))
        self.py_func = fn
        functools.update_wrapper(self, fn)
        code = fn.__code__
        self.params = code.co_varnames[:code.co_argcount]
        self.static_shape = _static_params(fn.__qualname__, self.params, static_shape)
        # indices of those parameters, for the launch key (None: none, the common case)
        self._static = frozenset(i for i, p in enumerate(self.params) if p in self.static_shape) or None
        self._lowered = {}    # (template bindings, debug) -> LoweredKernel (tack.compiler.lower)
        self._variants = {}   # launch signature -> compiled variant
        self.timings = {}     # stage -> seconds, of the most recent compile

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernel '{self.__name__}' is launched with "
                        f"tack.launch({self.__name__}, dim=..., args=(...))")

    def __repr__(self):
        return f"<tack.kernel {self.__qualname__}>"

    def __reduce__(self):
        # Pickled by name, as a function is (its module and qualified name), so that a kernel
        # can be handed to multiprocessing's workers, concurrent.futures, mpi4py's bcast or Dask:
        # its compiled code is the other process's own, from the cache.  (Its __dict__ held the
        # function it wraps, which pickle refused: the module's name for it is the kernel.)  One
        # its module does not hold by that name (a factory's) cannot be pickled, as such a
        # function cannot.
        return self.__qualname__


def _static_params(name, params, static_shape) -> frozenset:
    if static_shape is None or static_shape is False:
        return frozenset()
    if static_shape is True:
        return frozenset(params)
    try:
        names = (static_shape,) if isinstance(static_shape, str) else tuple(static_shape)
    except TypeError:                   # not iterable (static_shape=3)
        raise TypeError(f"kernel '{name}': static_shape takes a parameter name, a list of them "
                        f"or True, not {static_shape!r}") from None
    for p in names:
        if not isinstance(p, str) or p not in params:
            raise TypeError(f"kernel '{name}': static_shape names {p!r}, which is not one of its "
                            f"parameters ({', '.join(params)})")
    return frozenset(names)


def kernel(fn=None, *, static_shape=None):
    """Decorator: a function that runs once per point of a launch grid.

    ``@tack.kernel`` alone compiles one variant per array dtype, rank, layout
    and writability, for any shape.  ``@tack.kernel(static_shape=...)``
    compiles the shapes of the named array parameters (or of all, with
    ``True``) into the kernel: one variant per shape.
    """
    if fn is None:
        return lambda f: Kernel(f, static_shape)
    return Kernel(fn, static_shape)


def func(fn=None):
    """Decorator: a device function, callable from kernels (``@tack.func`` or ``@tack.func()``,
    as ``@tack.kernel`` takes either)."""
    if fn is None:
        return Func
    return Func(fn)


def constant(value):
    """Wrap a scalar or NumPy array so kernels may read it."""
    return Constant(value)
