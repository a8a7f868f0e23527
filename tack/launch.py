"""``tack.launch``: type the arguments, find or compile the variant, run it over the grid.

The warm path (a variant this process already compiled) is one dict lookup
keyed by cheap facts about each argument (an array's dtype, rank and flags,
not its shape unless the kernel compiles it in), then packing the argument
slots (an array's data pointer, extents and strides) and calling the entry
point.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from . import types as T
from .api import Kernel, class_fingerprint
from .config import config
from .errors import CompileError


def launch(kernel, dim, args=(), device="cpu", block=None):
    """Run ``kernel`` once per point of the grid ``dim`` (an int or a 1-3 tuple) on ``device``.

    ``block``: on a GPU device, the work-group (CUDA block) shape, an int (work-items per group)
    or a tuple with one extent per grid dimension; Tack chooses when it is None.  The CPU, which
    has no work-groups, ignores it, so one call runs on either."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"tack.launch takes a @tack.kernel, not {type(kernel).__name__}")
    dims = _dims(dim)
    if type(args) is not tuple:
        args = _args(args)
    debug = config.debug
    static = kernel._static
    if static is None:
        key = (device, len(dims), debug) + tuple(map(_arg_key, args))
    else:
        key = (device, len(dims), debug) + tuple(_static_key(a) if i in static else _arg_key(a)
                                                 for i, a in enumerate(args))
    variant = kernel._variants.get(key)
    if variant is None:
        try:
            variant = _compile(kernel, dims, args, device, debug)
        except CompileError as e:
            if debug:                       # TACK_DEBUG: the compiler's own frames too
                raise
            # The user's line is in the message, with its caret; the compiler's frames are not
            # the user's to read: the traceback ends at this launch.
            raise e.with_traceback(None) from None
        kernel._variants[key] = variant
        t0 = time.perf_counter()
        variant.run(args, dims, block)
        kernel.timings["launch"] = time.perf_counter() - t0
        if config.timing:
            report_timings(kernel)
        return
    variant.run(args, dims, block)


_DIM_MAX = 2**63 - 1        # grid extents and their product are int64 in the entry point


def _dims(dim):
    """``dim`` -> a tuple of 1 to 3 non-negative ints; TypeError or ValueError saying what is wrong."""
    if type(dim) is int and 0 <= dim <= _DIM_MAX:                       # the common case
        return (dim,)
    if isinstance(dim, (tuple, list)) or (isinstance(dim, np.ndarray) and dim.ndim == 1):
        dims = tuple(dim)
    else:
        dims = (dim,)
    if not 1 <= len(dims) <= 3:
        raise TypeError(f"dim must be an int or a tuple of 1 to 3 ints, not {dim!r} "
                        f"({len(dims)} dimensions)")
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, (bool, np.bool_)):
            what = "" if dims == (dim,) else f" in dim {dim!r}"
            raise TypeError(f"dim must be an int or a tuple of 1 to 3 ints; {d!r}{what} is a "
                            f"{type(d).__name__}")
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims):
        raise ValueError(f"dim must not be negative: {dim!r}")
    total = 1
    for d in dims:
        total *= d
    if max(dims) > _DIM_MAX or total > _DIM_MAX:
        raise ValueError(f"dim {dim!r} is too large: a grid has at most 2**63 - 1 points")
    return dims


def _args(args) -> tuple:
    """A launch's ``args`` as a tuple: a tuple or a list of the kernel's arguments."""
    if isinstance(args, list):
        return tuple(args)
    if args is None:
        raise TypeError("args must be a tuple of the kernel's arguments, not None")
    raise TypeError(f"args must be a tuple of the kernel's arguments, not {type(args).__name__} "
                    "(for one argument, write args=(x,))")


_FLAG_BITS = 0x403       # NumPy's C_CONTIGUOUS, F_CONTIGUOUS and WRITEABLE flags
# Those bits -> layout and writability, as types.layout_of reads them (C and F both: C).
_LAYOUT = {w | f: T.layout_of(f) + ("w" if w else "r") for w in (0, 0x400) for f in range(4)}


def _arg_key(a):
    if isinstance(a, np.ndarray):
        return (a.dtype, a.ndim, _LAYOUT[a.flags.num & _FLAG_BITS])
    if isinstance(a, type):
        return a
    t = device_array_type(a)
    if t is not None:                           # a device array (tack.to_device, CuPy, ...)
        return (type(a), t.dtype, t.ndim, t.layout + ("w" if t.writable else "r"))
    return type(a)


def device_array_type(a, static=False):
    """The Tack type of an array that is not a NumPy array: a device array of Tack's
    (``tack.to_device``), another library's with ``__cuda_array_interface__`` or DLPack (CuPy,
    PyTorch, JAX...), or one with NumPy-style ``shape``, ``dtype`` and ``strides``; None for
    anything else."""
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(a, type):
        return None
    writable = getattr(a, "writable", None)
    layout = getattr(a, "layout", None) if writable is not None else None
    try:
        if layout is not None:                          # Tack's own device arrays
            shape, dtype, estrides = a.shape, np.dtype(a.dtype), None
        elif hasattr(a, "__cuda_array_interface__"):
            cai = a.__cuda_array_interface__
            shape, dtype = cai["shape"], np.dtype(cai["typestr"])
            strides = cai.get("strides")
            estrides = None if strides is None else [s // dtype.itemsize for s in strides]
            writable = not cai["data"][1]
        elif hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"):
            from . import dlpack
            t = dlpack.view(a)
            shape, dtype, estrides, writable = t.shape, t.dtype, t.estrides, t.writable
            t.close()
        else:
            shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
            if shape is None or dtype is None:
                return None
            dtype = np.dtype(dtype)
            strides = getattr(a, "estrides", None)
            if strides is None and getattr(a, "strides", None) is not None:
                strides = [s // dtype.itemsize for s in a.strides]
            estrides = strides
        shape = tuple(int(n) for n in shape)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        from .dlpack import DLPackError
        if isinstance(e, DLPackError):  # a DLPack object that cannot be taken: say why
            raise
        return None                     # not an array Tack reads: typeof_arg says what it is
    st = T.from_dtype(dtype)
    if st is None or not 1 <= len(shape) <= 4:
        return None
    if layout is None:
        layout = _layout_of_strides(shape, estrides)
    return T.Array(st, len(shape), layout, bool(True if writable is None else writable),
                   shape if static else None)


def _layout_of_strides(shape, strides):
    if strides is None:
        return "C"
    c = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
    f = [int(np.prod(shape[:k])) for k in range(len(shape))]
    return "C" if list(strides) == c else "F" if list(strides) == f else "A"


def _static_key(a):
    """The key of an argument whose shape the kernel compiles in."""
    if isinstance(a, np.ndarray):
        return (a.dtype, a.shape, _LAYOUT[a.flags.num & _FLAG_BITS])
    return _arg_key(a)


def argtypes_of(kernel, args):
    """The Tack types of a launch's arguments (with their shapes where the kernel compiles them in)."""
    name, static = kernel.__qualname__, kernel.static_shape
    return [typeof_arg(name, p, a, p in static) for p, a in zip(kernel.params, args)]


def typeof_arg(kernel_name, param, a, static=False):
    """The Tack type of one launch argument; TypeError naming the parameter otherwise.

    ``static``: an array's shape is compiled in.
    """
    if isinstance(a, np.ndarray):
        t = T.typeof_array(a, static)
        if t is None:
            raise TypeError(f"kernel '{kernel_name}': argument '{param}' is an array Tack cannot "
                            f"take (dtype {a.dtype}, {a.ndim} dimensions, strides {a.strides}); "
                            "use bool, int32/64, uint32/64 or float32/64 with 1-4 dimensions")
        return t
    if isinstance(a, bool):
        return T.boolean
    if isinstance(a, int):
        return T.int64
    if isinstance(a, float):
        return T.float64
    if isinstance(a, np.generic) and T.from_dtype(a.dtype) is not None:
        return T.from_dtype(a.dtype)
    if isinstance(a, type):
        return T.Template(a.__qualname__, class_fingerprint(a))
    t = device_array_type(a, static)
    if t is not None:
        return t
    raise TypeError(f"kernel '{kernel_name}': argument '{param}' is a {type(a).__name__}; "
                    "kernels take NumPy arrays, numbers, and classes (as templates)")


def _compile(kernel, dims, args, device, debug):
    from .backends import runtime_for
    kind, runtime = runtime_for(device)         # ValueError naming the devices there are
    runtime.get_device(device)                  # <Kind>Unavailable, saying what to install
    name = kernel.__qualname__
    params = kernel.params
    if len(args) != len(params):
        raise TypeError(f"kernel '{name}' takes {len(params)} arguments ({', '.join(params)}), "
                        f"got {len(args)}")
    views = runtime.host_views(args)
    if views is not None:               # other libraries' host arrays: NumPy views of them
        viewed, wrap = views
        return wrap(_compile(kernel, dims, viewed, device, debug))
    argtypes = argtypes_of(kernel, args)
    runtime.check_args(name, params, args, argtypes)
    templates = {p: a for p, a, t in zip(params, args, argtypes) if isinstance(t, T.Template)}
    value_types = tuple(t for t in argtypes if not isinstance(t, T.Template))
    value_params = [p for p, t in zip(params, argtypes) if not isinstance(t, T.Template)]
    arg_index = [i for i, t in enumerate(argtypes) if not isinstance(t, T.Template)]

    def variant(fn, sites, deps, meta):
        def locate(fid):
            from .cache.deps import locate as _locate
            return _locate(deps, kernel, templates, fid)
        from .backends.variant import Signature
        sig = Signature(name, value_params, value_types, arg_index, sites if debug else None,
                        locate)
        return runtime.make_variant(fn, meta, sig)

    timings = {}
    clock = time.perf_counter()

    def stage(label):
        nonlocal clock
        now = time.perf_counter()
        timings[label] = timings.get(label, 0.0) + now - clock
        clock = now

    from . import cache as _cache
    session = _cache.session(kind, runtime.host_key(), runtime.site_candidates)
    keys = None
    if session is not None:
        from .cache.keys import keys as cache_keys
        keys = cache_keys(kernel, templates, value_types, len(dims), debug)
        hit = session.find_variant(kernel, templates, keys, runtime.lookup_keys(device))
        if hit is not None:
            fn = _load_hit(session, kernel, runtime, device, hit)
            stage("cache")
            if fn is not None:
                _store_back(runtime, session, keys, kernel, value_types, len(dims), fn, hit.meta)
                kernel.timings = timings
                return variant(fn, hit.sites, hit.meta["dep"], hit.meta)
        stage("cache")

    memo = kernel._memo_key(templates, debug)
    lowered = kernel._lowered.get(memo)
    if lowered is None and session is not None:
        lowered = session.find_lowered(kernel, templates, keys.lowered)
        stage("cache")
        if lowered is not None:
            kernel._lowered[memo] = lowered
    if lowered is None:
        lowered = kernel.lower(templates, debug)
        stage("lower")
        if session is not None:
            session.store_lowered(keys.lowered, lowered)
            stage("cache")

    from .compiler import compile_variant
    target = runtime.toolchain_target(device)
    stage("init")
    art = compile_variant(lowered, keys.lowered if keys else None, value_types, len(dims), target,
                          debug, stage)
    fn = runtime.load(art.payload, art.meta, device)
    stage("load")
    if session is not None:
        session.store_variant(art)
        _store_back(runtime, session, keys, kernel, value_types, len(dims), fn, art.meta)
        stage("cache")
    kernel.timings = timings
    return variant(fn, art.sites, lowered.deps, art.meta)


def _store_back(runtime, session, keys, kernel, value_types, grid, fn, meta):
    """Store what a device's driver compiled while loading portable code (Level Zero's native
    code from SPIR-V, an OpenCL program binary) under the device's own key, where the runtime
    offers it (``runtime.store_back``); the next process then skips the driver's compile.
    Never fails a launch: a store that does not work is said in the debug log."""
    back = getattr(runtime, "store_back", None)
    if back is None:
        return
    try:
        got = back(fn)
        if got is None:
            return
        target_key, payload, made = got
        from .compiler import Artifact, driver_meta
        m = driver_meta(meta, kernel.__qualname__, keys.lowered, value_types, grid, target_key, made)
        session.store_variant(Artifact(keys.for_target(target_key), payload, m["entry"], [], m))
    except Exception as e:                  # noqa: BLE001 - the cache must never break a job
        from .cache import log
        log.debug("kernel '%s': the driver's code was not stored (%s: %s)",
                  kernel.__qualname__, type(e).__name__, e)


def _load_hit(session, kernel, runtime, device, hit):
    """A stored variant's entry point, through the backend's runtime; None (the entry left
    unused, and said why) if it does not load."""
    try:
        return runtime.load(hit.payload, hit.meta, device)
    except Exception as e:                  # noqa: BLE001 - a foreign or damaged entry, never a crash
        session.unusable(kernel, "variant", hit.path, f"does not load ({type(e).__name__}: {e})")
        return None


def report_timings(kernel, file=None):
    t = kernel.timings
    parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in t.items())
    print(f"tack: first call of '{kernel.__qualname__}': {parts} "
          f"(total {sum(t.values()) * 1e3:.1f} ms)", file=file or sys.stderr)
