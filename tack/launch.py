"""``tack.launch``: type the arguments, find or compile the variant, run it over the grid.

The warm path (a variant this process already compiled) is one dict lookup
keyed by cheap facts about each argument (an array's dtype, rank and flags,
not its shape unless the kernel compiles it in), then packing the argument
slots (an array's data pointer, extents and strides) and calling the entry
point.
"""

import _thread
import os
import sys
import time

import numpy as np

from . import _image
from . import types as T
from .api import Kernel
from .argtypes import device_array_type, typed_args
from .config import config
from .errors import CompileError
from .language import is_masked


def launch(kernel, dim, args=(), device="cpu", block=None):
    """Run ``kernel`` once per point of the grid ``dim`` (an int or a 1-3 tuple) on ``device``.

    ``block``: on a GPU device, the work-group (CUDA block) shape, an int (work-items per group)
    or a tuple with one extent per grid dimension; Tack chooses when it is None.  The CPU, which
    has no work-groups, checks it as a device would (short of the device's limits) and uses none,
    so one call runs on either."""
    try:                            # free in 3.11 unless something is raised
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
        if variant is not None:
            variant.run(args, dims, block)
            return
        try:
            # Threads making the first call together: one finds or compiles the variant, the
            # others wait for it (``_locks``) and run it.  A launch on a thread inside a compile
            # (a signal handler's, a finalizer's: the thread holds a kernel's lock) waits for no
            # other thread, which may need a lock this one holds (llvmlite's, the cache's): it
            # compiles under a lock of its own.
            lock = _locks.get(id(kernel)) or _locks.setdefault(id(kernel), _thread.RLock())
            if not lock._is_owned() and any(map(_thread.RLock._is_owned, list(_locks.values()))):
                lock = _thread.RLock()
            # The compile this thread waits for (or makes): one for each arrival's key until
            # it ends.  Threads that waited for one that raised a CompileError get that error
            # (the same exception, as a concurrent.futures.Future gives each waiter), not a
            # compile each of the same code in turn; a call made after it ends compiles again.
            pending = (id(kernel), key)
            attempt = _attempts.get(pending) or _attempts.setdefault(pending, [None])
            with lock:
                variant = kernel._variants.get(key)
                if variant is None:
                    if attempt[0] is not None:
                        raise attempt[0]
                    try:
                        variant = _compile(kernel, dims, args, device, debug)
                    except CompileError as e:     # the kernel's fault: its waiters get it; any
                        attempt[0] = e            # other failure (MemoryError, an OSError, a
                        raise                     # KeyboardInterrupt): the next waiter tries
                    finally:
                        if _attempts.get(pending) is attempt:
                            del _attempts[pending]
                    kernel._variants[key] = variant
                    t = kernel.timings              # this compile's (``_variant`` set them)
                else:
                    t = None
                    if _attempts.get(pending) is attempt:   # made after this thread's arrival
                        del _attempts[pending]
        except CompileError as e:
            if debug:                           # TACK_DEBUG: the compiler's own frames too
                raise
            # The user's line is in the message, with its caret; the compiler's frames are not
            # the user's to read: the traceback ends at this launch.
            refused = e
        else:
            if t is None:                       # another thread's, made while this one waited
                variant.run(args, dims, block)
                return
            started = _startup_seconds(device)
            t0 = time.perf_counter()
            try:
                variant.run(args, dims, block)
            finally:                        # reported too where the run refuses (its grid)
                t["launch"] = time.perf_counter() - t0
                threads = _startup_seconds(device) - started
                if threads > 0:             # the runtime started its threads in this launch
                    t["threads"], t["launch"] = threads, t["launch"] - threads
                if config.timing:
                    report_timings(kernel)
            return
    except (TypeError, ValueError, IndexError, RuntimeError) as e:    # (a device's Unavailable)
        if config.debug or isinstance(e, RecursionError) or not _launch_error(e):
            raise
        # A launch's own refusal (its arguments, its grid): the message says it all, and the
        # frames that checked are not the user's to read: the traceback ends at this launch.
        refused = e
    # Raised past the handler, where the frames dropped with the traceback go with no exception in
    # flight: Python 3.10 keeps a handled exception's traceback until its handler is left, so
    # raising from inside it freed them mid-raise, and an array view of another library's host
    # memory dying there (NumPy's from_dlpack) ran its producer's deleter with the new exception
    # set: a deleter that is Python code (through ctypes) lost it, and the interpreter crashed.
    raise refused.with_traceback(None) from None


# Each kernel's compile lock, by id(kernel), made at its first compile: an RLock, since a signal
# handler's or a finalizer's launch comes back into it.  A forked child forgets them all (the
# dict's own method, as tack.cache resets its lock: another thread may have held one at the fork).
# An entry outlives its kernel (a later kernel at the same id shares the lock, which is harmless).
_locks = {}
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_locks.clear)


# (id(kernel), launch key) -> [the CompileError of the compile under way for it, or None]; an
# entry lives from the first arrival to the end of its compile (or to a waiter's finding the
# variant made).  A forked child forgets them, as it forgets the locks.
_attempts = {}
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_attempts.clear)

# The process's first launch imports Tack's modules a first call needs (``_first_imports``),
# and its first compile the compiler's (``compiler.import_all``).  A fork while another thread
# is inside those imports left the child one of Python's module locks held by a thread it does
# not have: its first launch hung for good.  So a fork waits for them (``os.register_at_fork``),
# as it waits for an LLVM call under way.  ``_importer``: the thread inside them; ``_imported``:
# how many of the two are done.
_imports_lock = _thread.allocate_lock()
_importer = None
_imported = 0
_fork_holds = []


def _before_fork():
    if _imported < 2 and _importer != _thread.get_ident():  # (not a fork from inside them)
        _imports_lock.acquire()
        _fork_holds.append(True)
        # The compiler's imports this fork waited for may have registered LLVM's fork guard
        # (backends.cpu): CPython had taken its list of befores already, so that one did not
        # run, and the child got LLVM's lock held by the compiling thread.  Run it now.
        cpu = sys.modules.get("tack.backends.cpu")
        before = getattr(cpu, "_fork_before", None)
        if before is not None and not cpu._fork_held:
            before()


def _after_fork():
    if _fork_holds:
        _fork_holds.clear()
        _imports_lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def _first_imports(device):
    """-> (``tack.cache``, ``tack.cache.keys``, the device's kind and runtime), importing what a
    first call needs.  ValueError for a device there is none of (``runtime_for``)."""
    return _imports(1, _import_modules, device)


def _imports(phase, make, *args):
    """``make(*args)``, which imports modules: the process's first time (``phase`` 1: a launch's,
    2: a compile's) under ``_imports_lock``, which a fork waits for.  A launch that comes back into
    them on the same thread (a signal handler's, run between two of their byte codes) would find
    modules half made (``ImportError: cannot import name ... from partially initialized
    module``): a RuntimeError says so instead."""
    global _importer, _imported
    if _imported >= phase:
        return make(*args)
    if _importer == _thread.get_ident():
        raise RuntimeError("tack.launch from a signal handler (or a finalizer) that ran while this "
                           "process's first launch (or first compile) imported Tack's modules; "
                           "launch a kernel once before installing the handler")
    with _imports_lock:
        _importer = _thread.get_ident()
        try:
            got = make(*args)
        finally:
            _importer = None
        _imported = max(_imported, phase)
    return got


def _import_compiler():
    from .compiler import import_all
    import_all()


def _import_modules(device):
    if device == "cpu":         # the CPU's first call imports its group of the image whole
        found = _image.finder(__package__)
        if found is not None:
            found.preload(__package__ + ".cache")
    from . import cache
    from .backends import runtime_for
    from .cache import keys
    from .cache import stores  # noqa: F401 - the session's; timed with the others
    return (cache, keys) + runtime_for(device)


# Where a launch refuses its arguments or grid; an error raised anywhere else is a fault, and keeps
# its frames.
_CHECKING = frozenset(("launch.py", "argtypes.py", "gridcheck.py"))


def _launch_error(e) -> bool:
    """Whether ``e`` is a launch refusing what it was given (raised where the arguments and grid
    are checked, or marked ``tack_launch_error`` where it was made, as the grid check does)."""
    if getattr(e, "tack_launch_error", False):
        return True
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = tb.tb_frame.f_code.co_filename
    return (os.path.basename(path) in _CHECKING
            and os.path.dirname(os.path.abspath(path)) == os.path.dirname(os.path.abspath(__file__)))


_DIM_MAX = 2**63 - 1        # grid extents and their product are int64 in the entry point


def _startup_seconds(device) -> float:
    """The runtime's time spent starting its workers so far (0 for one that starts none)."""
    from .backends import runtime_for
    return getattr(runtime_for(device)[1], "startup_seconds", lambda: 0.0)()


def _dims(dim):
    """``dim`` -> a tuple of 1 to 3 non-negative ints; TypeError or ValueError saying what is wrong."""
    if type(dim) is int and 0 <= dim <= _DIM_MAX:                       # the common case
        return (dim,)
    if isinstance(dim, (tuple, list)) or (isinstance(dim, np.ndarray) and dim.ndim == 1):
        dims = tuple(dim)
    elif isinstance(dim, np.ndarray) and dim.ndim == 0:    # its number (np.array([6]) is taken too)
        dims = (dim[()],)
    else:
        dims = (dim,)
    if not 1 <= len(dims) <= 3:
        raise TypeError(f"dim must be an int or a tuple of 1 to 3 ints, not {dim!r} "
                        f"({len(dims)} dimensions)")
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, (bool, np.bool_)):
            # (dims is (dim,) itself where dim was one value: == would compare a NumPy value's
            # elements, whose truth is ambiguous)
            what = "" if len(dims) == 1 and dims[0] is dim else f" in dim {dim!r}"
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
    """A launch's ``args`` as a tuple: a tuple (a namedtuple too) or a list of the kernel's
    arguments."""
    if isinstance(args, (list, tuple)):
        return tuple(args)
    if args is None:
        raise TypeError("args must be a tuple of the kernel's arguments, not None")
    raise TypeError(f"args must be a tuple of the kernel's arguments, not {type(args).__name__} "
                    "(for one argument, write args=(x,))")


_FLAG_BITS = 0x503       # NumPy's C_CONTIGUOUS, F_CONTIGUOUS, ALIGNED and WRITEABLE flags
# Those bits of an aligned array -> layout and writability, as types.layout_of reads them (C and
# F both: C).  An aligned array's strides are whole elements (each dtype Tack takes is aligned to
# its size); an array that is not aligned (``_unaligned``) may have strides that are not, which
# types.typeof_array refuses, so its key says which it is.
_LAYOUT = {0x100 | w | f: T.layout_of(f) + ("w" if w else "r") for w in (0, 0x400) for f in range(4)}


def _unaligned(a):
    """The layout part of the key of an array NumPy does not flag aligned: its pointer or its
    strides are not multiples of its alignment.  Strides that are not whole elements (a field of
    a structured array) get a key of their own, which no variant has: the launch then goes
    through ``typeof_array``, which refuses it, where a variant for a strided view of the same
    dtype would have run over the wrong elements."""
    layout = _LAYOUT[a.flags.num & _FLAG_BITS | 0x100]
    size = a.dtype.itemsize
    return layout if all(s % size == 0 for s in a.strides) else layout + ":bytes"


def _arg_key(a):
    if type(a) is np.ndarray:
        return (a.dtype, a.ndim, _LAYOUT.get(a.flags.num & _FLAG_BITS) or _unaligned(a))
    if isinstance(a, np.ndarray):               # a subclass: a masked array is refused, not run
        b = _base_view(a)                       # its own dtype, shape and flags, whatever its class says
        return (type(a), b.dtype, b.ndim, _LAYOUT.get(b.flags.num & _FLAG_BITS) or _unaligned(b))
    if isinstance(a, type):
        return ("class", a)                     # not type(x) of an instance x of it: another variant
    t = device_array_type(a)
    if t is not None:                           # a device array (tack.to_device, CuPy, ...)
        return (type(a), t.dtype, t.ndim, t.layout + ("w" if t.writable else "r"))
    return type(a)


def _static_key(a):
    """The key of an argument whose shape the kernel compiles in: another library's array's
    too (``_arg_key`` leaves it out, and a static kernel launched with a DLPack host array of
    3 elements, then 6, ran the variant compiled for 3 twice)."""
    if isinstance(a, np.ndarray):               # a subclass's own class, its array's own attributes
        b = a if type(a) is np.ndarray else _base_view(a)
        return (type(a), b.dtype, b.shape, _LAYOUT.get(b.flags.num & _FLAG_BITS) or _unaligned(b))
    t = device_array_type(a, True)
    if t is not None:
        return (type(a), t.dtype, t.layout + ("w" if t.writable else "r"), t.shape)
    return _arg_key(a)


# An ndarray subclass is launched as a plain ndarray over its memory (its array's own shape,
# strides and dtype, read by NumPy's C getters): a class whose ``shape`` said more elements than
# its memory holds passed the grid check, and the kernel wrote past the end (a crash).  A masked
# array is left as it is, for ``typeof_arg`` to refuse.
def _base_view(a, _view=np.ndarray.view, _plain=np.ndarray):
    return _view(a, _plain)


def _subclassed(args) -> list:
    """Indices of the arguments that are ndarray subclasses (masked arrays aside)."""
    return [i for i, a in enumerate(args)
            if type(a) is not np.ndarray and isinstance(a, np.ndarray) and not is_masked(a)]


class _Viewed:
    """A variant launched with the arguments at ``keys``'s indices viewed: each replaced at every
    run by ``view(a)``, a plain NumPy array over its memory (an ndarray subclass's own array,
    another library's host array read through DLPack), and run only where each view has the
    launch key (``_arg_key``, or ``_static_key`` for a static shape) of the view it was made for.
    A DLPack producer exports anew at every read: the launch is typed from one export and run
    over the next, and one whose next export differed (another dtype, a smaller array under a
    static shape) ran over memory of another size."""

    __slots__ = ("inner", "view", "keys", "name", "params")

    def __init__(self, inner, view, keys, kernel):
        self.inner, self.view, self.keys = inner, view, keys
        self.name, self.params = kernel.__qualname__, kernel.params

    def run(self, args, dims, block=None):
        view, keys = self.view, self.keys
        viewed = tuple(view(a) if i in keys else a for i, a in enumerate(args))
        for i, (key, key_of, made_for) in keys.items():
            if key_of(viewed[i]) != key:
                from .backends.variant import refusal
                raise refusal(TypeError(
                    f"kernel '{self.name}': argument '{self.params[i]}' "
                    f"({type(args[i]).__name__}), read again to run, is a "
                    f"{_described(viewed[i])}, not the {made_for} this "
                    "launch was typed from (its DLPack exports of one array differ, or it "
                    "changed between two reads); nothing ran"))
        self.inner.run(viewed, dims, block)


def _viewed(kernel, args, indices, view):
    """(``args`` with those at ``indices`` viewed, each view's key for ``_Viewed``)."""
    viewed = tuple(view(a) if i in indices else a for i, a in enumerate(args))
    static = kernel._static or ()
    keys = {}
    for i in indices:
        key_of = _static_key if i in static else _arg_key
        keys[i] = (key_of(viewed[i]), key_of, _described(viewed[i]))
    return viewed, keys


def _described(a) -> str:
    """An array as a refusal names it: ``float64 array of shape (8,)``."""
    return f"{a.dtype} array of shape {a.shape}{'' if a.flags.writeable else ', read-only'}"


def _compile(kernel, dims, args, device, debug):
    """The variant of ``kernel`` for these arguments on ``device``: from the cache, else compiled
    (and stored).  Every step that differs by device kind is the runtime's."""
    stage = _Stages()
    # Tack's own modules a first call needs, imported here so that they are its "import" stage
    # (the runtime's module and what it imports come with runtime_for).
    try:
        _cache, _keys, kind, runtime = _first_imports(device)   # ValueError naming the devices there are
    except ValueError as e:                     # a refusal of the launch's device: ends at the launch
        from .backends.variant import refusal
        raise refusal(e) from None
    stage("import")
    runtime.get_device(device)                  # <Kind>Unavailable, saying what to install
    subclassed = _subclassed(args)
    views = (subclassed, _base_view) if subclassed else runtime.host_views(args)
    if views is not None:               # ndarray subclasses, other libraries' host arrays: views
        viewed, keys = _viewed(kernel, args, *views)
        return _Viewed(_compile(kernel, dims, viewed, device, debug), views[1], keys, kernel)
    typed = typed_args(kernel, args)
    try:                    # the runtime's refusal of an argument (a device array on the CPU)
        runtime.check_args(kernel.__qualname__, kernel.params, args, typed.argtypes)
    except (TypeError, ValueError) as e:
        from .backends.variant import refusal
        raise refusal(e)
    session = _cache.session(kind, runtime.host_key, runtime.site_bundles, runtime.BUNDLE_MACHINE)
    keys = None
    if session is not None:
        keys = _keys.keys(kernel, typed.templates, typed.value_types, len(dims), debug)
        stage("find")
        found = _from_cache(session, kernel, typed, keys, runtime, device, len(dims), stage)
        if found is not None:
            fn, sites, meta = found
            return _variant(runtime, kernel, typed, debug, fn, sites, meta["dep"], meta, stage)

    _imports(2, _import_compiler)
    stage("import")                     # the compiler's modules, the process's first compile
    from .compiler import compile_variant, lower
    lkey = keys.lowered if keys else None
    lowered = lower(kernel, typed.templates, debug, session, lkey, stage)
    target = runtime.toolchain_target(device)
    stage("init")
    art = compile_variant(lowered, lkey, typed.value_types, len(dims), target, debug, stage)
    fn = runtime.load(art.payload, art.meta, device)
    stage("load")
    if session is not None:
        from .cache.stores_write import store_variant
        store_variant(session, art)
        _store_back(runtime, session, keys, kernel, typed.value_types, len(dims), fn, art.meta)
        from ._image_write import refresh   # the next process imports Tack from its image
        refresh()
        stage("cache")
    return _variant(runtime, kernel, typed, debug, fn, art.sites, lowered.deps, art.meta, stage)


class _Stages:
    """The first call's timings, stage by stage, with no gap: ``stage(label)`` adds the time
    since the last call to ``label``.  A hit: import (Tack's own lazy imports), find (the
    cache session and the keys), read (the entry's bytes and checksum), deps (its dependency
    record), load (its code), variant (making the launchable variant), threads (starting the
    CPU's workers, the first parallel launch only) and launch.  A miss adds the compiler's:
    lower, specialize, init, codegen, llvm, load, cache (storing)."""

    __slots__ = ("timings", "clock")

    def __init__(self):
        self.timings, self.clock = {}, time.perf_counter()

    def __call__(self, label):
        now = time.perf_counter()
        self.timings[label] = self.timings.get(label, 0.0) + now - self.clock
        self.clock = now


def _from_cache(session, kernel, typed, keys, runtime, device, grid, stage):
    """(loaded kernel, bounds sites, metadata) of a stored variant this launch can use, or None."""
    hit = session.find_variant(kernel, typed.templates, keys, runtime.lookup_keys(device), stage)
    if hit is None:
        stage("find")               # a miss: looking was all of it
        return None
    fn = _load_hit(session, kernel, runtime, device, hit)
    stage("load")
    if fn is None:
        return None
    _store_back(runtime, session, keys, kernel, typed.value_types, grid, fn, hit.meta)
    return fn, hit.sites, hit.meta


def _variant(runtime, kernel, typed, debug, fn, sites, deps, meta, stage):
    """The runtime's launchable variant of a loaded kernel ``fn``; ``deps`` (its dependency
    record) places a debug-mode bounds error at the line where its function is now."""
    from .backends.variant import Signature

    def locate(fid):
        from .cache.deps import locate as _locate
        return _locate(deps, kernel, typed.templates, fid)
    sig = Signature(kernel.__qualname__, typed.value_params, typed.value_types, typed.arg_index,
                    sites if debug else None, locate)
    variant = runtime.make_variant(fn, meta, sig)
    stage("variant")
    kernel.timings = stage.timings
    return variant


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
        made = dict(made, machine=runtime.BUNDLE_MACHINE)    # its bundle's name, as for its kind
        from .cache.stores_write import store_variant
        from .compiler import Artifact, driver_meta
        m = driver_meta(meta, kernel.__qualname__, keys.lowered, value_types, grid, target_key, made)
        store_variant(session, Artifact(keys.for_target(target_key), payload, m["entry"], [], m,
                                        None, keys.lowered))
    except Warning:                         # one of Tack's, raised as an error (-W error):
        raise                               # as it is, not as a cache error of its own
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
        from .cache.stores_write import unusable
        from .errors import no_room
        # No memory for its code (mmap refused, a driver out of memory): the entry is not at
        # fault, and is kept for the next process
        unusable(session, kernel, "variant", hit.found, f"does not load ({type(e).__name__}: {e})",
                 counted_hit=True, keep=no_room(e))
        return None


def report_timings(kernel, file=None):
    """Print the stages of ``kernel``'s latest first call with new argument types in this
    process (its ``timings``), in milliseconds, to ``file`` (standard error by default): what
    ``TACK_TIMING=1`` prints at that call."""
    from .api import Kernel
    if not isinstance(kernel, Kernel):
        raise TypeError(f"report_timings takes a kernel (a function decorated with @tack.kernel), "
                        f"not {type(kernel).__name__}")
    t = kernel.timings
    if not t:
        print(f"tack: '{kernel.__qualname__}' has not been launched in this process: no first "
              "call to report", file=file or sys.stderr)
        return
    parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in t.items())
    print(f"tack: first call of '{kernel.__qualname__}': {parts} "
          f"(total {sum(t.values()) * 1e3:.1f} ms)", file=file or sys.stderr)
