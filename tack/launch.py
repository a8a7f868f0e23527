"""``tack.launch``: type the arguments, find or compile the variant, run it over the grid.

The warm path (a variant this process already compiled) is one dict lookup
keyed by cheap facts about each argument (an array's dtype, rank and flags,
not its shape unless the kernel compiles it in), then packing the argument
slots (an array's data pointer, extents and strides) and calling the entry
point.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import time

import numpy as np

from . import types as T
from .api import Kernel, class_fingerprint
from .config import config
from .errors import CompileError

_PARALLEL_MIN = 1 << 14      # grid points below which a launch runs on the calling thread
_SLOT_FMT = {"bool": "?7x", "int32": "i4x", "int64": "q", "uint32": "I4x", "uint64": "Q",
             "float32": "f4x", "float64": "d"}
_pool = None
_pool_size = 0


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
    if kind != "cpu":
        runtime.get_device(device)              # <Kind>Unavailable, saying what to install
    name = kernel.__qualname__
    params = kernel.params
    if len(args) != len(params):
        raise TypeError(f"kernel '{name}' takes {len(params)} arguments ({', '.join(params)}), "
                        f"got {len(args)}")
    if kind == "cpu":
        host = _host_dlpack(args)
        if host:                        # other libraries' host arrays: NumPy views of them
            inner = _compile(kernel, dims, _as_numpy(args, host), device, debug)
            return HostArraysVariant(inner, host)
    argtypes = argtypes_of(kernel, args)
    if kind == "cpu":
        for p, a, t in zip(params, args, argtypes):
            if isinstance(t, T.Array) and not isinstance(a, np.ndarray):
                raise TypeError(f"kernel '{name}': argument '{p}' is an array on a device "
                                f"({type(a).__name__}); launch on that device, or pass its "
                                ".numpy() copy")
    templates = {p: a for p, a, t in zip(params, args, argtypes) if isinstance(t, T.Template)}
    value_types = tuple(t for t in argtypes if not isinstance(t, T.Template))
    value_params = [p for p, t in zip(params, argtypes) if not isinstance(t, T.Template)]
    arg_index = [i for i, t in enumerate(argtypes) if not isinstance(t, T.Template)]

    def variant(fn, sites, deps, meta):
        def locate(fid):
            from .cache.deps import locate as _locate
            return _locate(deps, kernel, templates, fid)
        if kind != "cpu":
            return DeviceVariant(name, fn, runtime, meta, arg_index, sites if debug else None,
                                 locate, value_params)
        return CPUVariant(name, fn, value_params, value_types, arg_index,
                          sites if debug else None, locate, meta.get("tidx"))

    def load(payload, meta):
        return runtime.load(payload, meta) if kind == "cpu" else runtime.load(payload, meta, device)

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
            fn = _load_hit(session, kernel, load, hit)
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
    fn = load(art.payload, art.meta)
    stage("load")
    if session is not None:
        session.store_variant(art)
        _store_back(runtime, session, keys, kernel, value_types, len(dims), fn, art.meta)
        stage("cache")
    kernel.timings = timings
    return variant(fn, art.sites, lowered.deps, art.meta)


def _host_dlpack(args) -> list:
    """Indices of the arguments that are another library's arrays in host memory (DLPack).
    (tack.dlpack is imported only when an argument offers DLPack: not on a NumPy launch.)"""
    offers = [i for i, a in enumerate(args) if hasattr(a, "__dlpack__")
              and not isinstance(a, (np.ndarray, np.generic, type))]
    if not offers:
        return []
    from . import dlpack
    return [i for i in offers if dlpack.is_dlpack(args[i])
            and dlpack.device_of(args[i])[0] in dlpack.HOST]


def _as_numpy(args, host):
    from .dlpack import host_array
    return tuple(host_array(a) if i in host else a for i, a in enumerate(args))


class HostArraysVariant:
    """A CPU variant launched with other libraries' host arrays (PyTorch CPU tensors, JAX CPU
    arrays...): each is read through DLPack as a NumPy array over its memory, no copy."""

    def __init__(self, inner, host):
        self.inner, self.host = inner, set(host)

    def run(self, args, dims, block=None):
        self.inner.run(_as_numpy(args, self.host), dims, block)


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


def _load_hit(session, kernel, load, hit):
    """A stored variant's entry point, through the backend's runtime; None (the entry left
    unused, and said why) if it does not load."""
    try:
        return load(hit.payload, hit.meta)
    except Exception as e:                  # noqa: BLE001 - a foreign or damaged entry, never a crash
        session.unusable(kernel, "variant", hit.path, f"does not load ({type(e).__name__}: {e})")
        return None


def report_timings(kernel, file=None):
    t = kernel.timings
    parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in t.items())
    print(f"tack: first call of '{kernel.__qualname__}': {parts} "
          f"(total {sum(t.values()) * 1e3:.1f} ms)", file=file or sys.stderr)


def _probe_data_offset():
    """Offset of the data pointer in a NumPy array object, if reading it is safe here.

    Reading ``PyArrayObject.data`` straight from the object is 7x faster than
    ``a.ctypes.data``; it is used only where it was seen to agree.
    """
    off = 2 * ctypes.sizeof(ctypes.c_void_p)
    probes = [np.zeros(3), np.arange(12).reshape(3, 4)[1:, ::2], np.empty((0,), np.int32)]
    for a in probes:
        if ctypes.c_void_p.from_address(id(a) + off).value != a.ctypes.data:
            return None
    return off


_DATA_OFFSET = _probe_data_offset()
_read_pointer = ctypes.c_void_p.from_address


def data_pointer(a):
    if _DATA_OFFSET is None:
        return a.ctypes.data
    return _read_pointer(id(a) + _DATA_OFFSET).value or 0


def _element_strides(a):
    size = a.itemsize
    return [s // size for s in a.strides]


class CPUVariant:
    """A compiled kernel variant loaded in this process."""

    def __init__(self, name, fn, params, types, arg_index, sites, locate=None, tidx=None):
        self.name = name
        self.locate = locate
        self.fn = fn
        self.sites = sites
        # One 8-byte slot per scalar; per array, its data pointer, then its extents unless
        # its shape is static, then its strides in elements if its layout is A (as
        # codegen.array_fields and the backend's entry read them).
        self.params, self.slot_formats, parts = [], [], []
        for i, p, t in zip(arg_index, params, types):
            if isinstance(t, T.Array):
                parts.append(f"dp(args[{i}])")
                n = 1
                if t.shape is None:
                    parts.append(f"*args[{i}].shape")
                    n += t.ndim
                if t.layout == "A":
                    parts.append(f"*strides(args[{i}])")
                    n += t.ndim
                self.params += [p] * n
                self.slot_formats += ["Q"] + ["q"] * (n - 1)
            else:
                parts.append(f"args[{i}]")
                self.params.append(p)
                self.slot_formats.append(_SLOT_FMT[t.name])
        self.values = eval(f"lambda args: [{', '.join(parts)}]",     # noqa: S307 - our own text
                           {"dp": data_pointer, "strides": _element_strides})
        fmt = "<" + "".join(self.slot_formats) + "qqq" + ("Q" if sites is not None else "")
        self.packer = struct.Struct(fmt)
        # Arrays the kernel indexes by the thread index on every point (tack.gridcheck): a grid
        # larger than one of them is refused before the launch, for the cost of comparing ints.
        # (Debug mode checks every access as it runs, and says which index of which line.)
        self.grid_checks = []
        if tidx and sites is None:
            from .gridcheck import decode
            self.grid_checks = [(arg_index[p], params[p], axis, dim, off)
                                for p, axis, dim, off in decode(tidx)
                                if p < len(types) and isinstance(types[p], T.Array)
                                and axis < types[p].ndim]
        self.grid_too_large = None
        if self.grid_checks:
            test = " or ".join(f"args[{i}].shape[{axis}] < d[{dim}]"
                               for i, _, axis, dim, _ in self.grid_checks)
            self.grid_too_large = eval(f"lambda args, d: {test}")     # noqa: S307 - our own text

    def run(self, args, dims, block=None):
        values = self.values(args)
        d = dims + (1,) * (3 - len(dims))
        values += d
        err = None
        if self.sites is not None:
            err = np.zeros(4, np.int64)
            values.append(err.ctypes.data)
        try:
            buf = self.packer.pack(*values)
        except struct.error:
            raise self.argument_error(values) from None
        if d[0] * d[1] * d[2] == 0:
            return
        if self.grid_too_large is not None and self.grid_too_large(args, d):
            raise self.grid_error(args, dims)
        _run_grid(self.fn, buf, d)
        if err is not None and err[0]:
            self.raise_bounds_error(err)

    def argument_error(self, values) -> TypeError:
        """Name the argument whose value does not fit the type it was compiled for."""
        for name, code, value in zip(self.params, self.slot_formats, values):
            try:
                struct.pack("<" + code, value)
            except struct.error as e:
                return TypeError(f"kernel '{self.name}': argument '{name}' = {value!r} does not "
                                 f"fit the type it was compiled for ({e})")
        return TypeError(f"kernel '{self.name}': an argument does not fit the type it was "
                         f"compiled for ({', '.join(map(repr, values))})")

    def grid_error(self, args, dims) -> IndexError:
        """The first array the grid ``dims`` runs past, named with the access that would."""
        for i, param, axis, dim, off in self.grid_checks:
            extent = args[i].shape[axis]
            if extent < dims[dim]:
                break
        where = ""
        if self.locate is not None and off >= 0:
            try:
                now = self.locate(self.name)
            except Exception:                   # noqa: BLE001 - the message without the line
                now = None
            if now is not None:
                where = f" ({now[0]}:{now[1] + off})"
        tid = "tack.tid()" if len(dims) == 1 else f"tack.tid()[{dim}]"
        return IndexError(
            f"kernel '{self.name}': the grid {dims} runs past '{param}': the kernel indexes "
            f"'{param}' on axis {axis} by {tid} at every point{where}, and '{param}' has "
            f"{extent} elements along that axis, the grid {dims[dim]}. Launch over {param}.shape, "
            "or guard the access with an 'if'; nothing was run (TACK_DEBUG=1 checks every "
            "access as it runs)")

    def raise_bounds_error(self, err):
        site = self.sites[int(err[0]) - 1]
        where = f"{site.filename}:{site.line}"
        if self.locate is not None and site.fid:
            try:
                now = self.locate(site.fid)
            except Exception:                   # noqa: BLE001 - fall back to the recorded line
                now = None
            if now is not None:
                where = f"{now[0]}:{now[1] + site.offset}"
        inside = "" if site.function == self.name.rsplit(".", 1)[-1] else f" in '{site.function}'"
        raise IndexError(f"kernel '{self.name}': index {int(err[2])} is out of bounds for axis "
                         f"{int(err[1])} of '{site.array}' with size {int(err[3])}{inside} "
                         f"({where})")


class DeviceVariant:
    """A compiled variant on a device (OpenCL): launched through its runtime, which copies NumPy
    arrays to the device and back around each launch (docs/opencl.md)."""

    def __init__(self, name, kernel, runtime, meta, arg_index, sites, locate=None, params=()):
        self.name, self.kernel, self.runtime, self.meta = name, kernel, runtime, meta
        self.arg_index, self.sites, self.locate = arg_index, sites, locate
        self.params = list(params)

    def run(self, args, dims, block=None):
        values = [args[i] for i in self.arg_index]
        try:
            err = self.runtime.launch(self.kernel, self.meta, values, dims,
                                      self.sites is not None, block)
        except (TypeError, ValueError, RuntimeError) as e:
            said = self.in_user_terms(str(e))
            if said == str(e):
                raise
            raise type(e)(said) from None
        if err is not None and err[0]:
            self.raise_bounds_error(err)

    def in_user_terms(self, message: str) -> str:
        """A runtime's message with the kernel's name for its entry symbol, and each argument's
        parameter name for its index among the value arguments."""
        entry = f"kernel '{self.meta.get('entry')}'"
        if entry not in message:
            return message
        message = message.replace(entry, f"kernel '{self.name}'")
        for i, p in enumerate(self.params):
            message = message.replace(f"'{self.name}': argument {i} ", f"'{self.name}': argument '{p}' ")
        return message

    raise_bounds_error = CPUVariant.raise_bounds_error


def _run_grid(fn, buf, d):
    threads = config.num_threads
    total = d[0] * d[1] * d[2]
    if threads == 1 or total < _PARALLEL_MIN or d[0] < 2:
        fn(buf, 0, d[0])
        return
    pool = _get_pool(threads)
    chunks = min(d[0], threads * 4)
    bounds = [d[0] * k // chunks for k in range(chunks + 1)]
    futures = [pool.submit(fn, buf, lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
    for f in futures:
        f.result()


def _get_pool(n):
    global _pool, _pool_size
    if _pool is None or _pool_size != n:
        if _pool is not None:
            _pool.shutdown(wait=False)
        from concurrent.futures import ThreadPoolExecutor
        _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tack")
        _pool_size = n
    return _pool
