"""The CPU backend's runtime side: what the warm path needs, without llvmlite.

* **Keys** for this node, most specific first (``backends.cpu_identity`` makes them): this
  exact host's for the user's cache (``lookup_keys``); for site bundles, those of its
  microarchitecture and each archspec ancestor, chosen from the bundles' headers and this
  host's cpuinfo without archspec (``site_bundles``, ``backends.cpu_levels`` and
  ``backends.cpu_choice``).
* **load(payload, meta, device)**: object code -> a callable entry point
  (``backends.cpu_loader``; LLVM's MCJIT only for well-formed objects it does not read).
* **The launch**: ``make_variant`` gives a ``CPUVariant``, which packs the argument slots
  (``backends.argument_layout``) into one buffer and runs the entry point over the grid, split
  along the grid's first dimension over Tack's own thread pool when the variant's cost estimate
  says the grid gains from it (``_run_grid``; ctypes releases the GIL in each call).
  Other libraries' host arrays are taken as NumPy views of their memory (``host_views``);
  device arrays are refused (``check_args``).

The cache never imports this module: the dispatcher (``tack.launch``) asks it
for keys and hands them to the cache session.
"""

import _thread
import ctypes
import itertools
import operator
import os
import platform
import struct
import time

import numpy as np

from .. import types as T
from ..argtypes import foreign_array_kind
from ..config import config
from .argument_layout import array_parts, entry_codes, slot_codes
from .cpu_loader import load_object
from .cpu_identity import KIND, arch_key, host_arch, host_cpu_identity, host_key, llvm_version
from .variant import BoundsReport, Signature, grid_check, int_argument_hint, refusal

BUNDLE_MACHINE = platform.machine()    # arch_names.bundle_machine("cpu"), without the registry on the warm path

# Each slot code's 8-byte struct format (a bool, i8, packs any truth value as 0 or 1).
_SLOT_FMT = {"ptr": "Q", "i64": "q", "i8": "?7x", "i32": "i4x", "u32": "I4x", "u64": "Q",
             "f32": "f4x", "f64": "d"}
_lookup = None


def available() -> bool:
    """The CPU is always here."""
    return True


def unavailable_reason() -> None:
    return None


def devices() -> list:
    """[(this host's processor, ``"cpu"``)]."""
    return [(platform.processor() or platform.machine(), KIND)]


def get_device(device="cpu") -> str:
    """``"cpu"``: this process's host (the dispatcher refuses any other name first)."""
    return KIND


def to_device(array, device="cpu"):
    """An array "kept" on the CPU: the array itself (a launch reads host memory in place); a
    device array of Tack's (``to_device`` on a GPU) comes back as its ``numpy()`` copy, which a
    CPU launch takes (the device array itself it refuses: its memory is not the process's)."""
    if type(array).__module__.startswith("tack.backends."):
        from .device_args import ArrayShape
        if isinstance(array, ArrayShape):
            return array.numpy()
    return array


def lookup_keys(device=None) -> tuple:
    """The target keys the user's cache is looked up with, in order: this host's alone (code a
    host compiled for itself; bundles built for its ancestors are a site's, site_candidates)."""
    global _lookup
    if _lookup is None:
        _lookup = (host_key(),)
    return _lookup


def site_candidates(host: str | None = None) -> list:
    """[(``cpu:arch``, target key)] of the site bundles a node of microarchitecture ``host``
    (this one's, by archspec) can use, most specific first: it, then each archspec ancestor
    (``tack.archs.cpu_candidates``).  Imports archspec: the tools' (``bundles status``), not a
    launch's, which asks ``site_bundles``."""
    from ..archs import cpu_candidates
    llvm = llvm_version()
    return [(f"{KIND}:{a}", arch_key(a, llvm)) for a in cpu_candidates(host or host_arch())]


def site_bundles(names, header, defer: dict | None = None, *, host: dict | None = None,
                 why: dict | None = None) -> list:
    """[(``cpu:arch``, target key, name)] of the CPU site bundles among ``names`` this node uses,
    most specific first (archspec's rule over the table the bundles' headers carry, so no
    archspec here: ``backends.cpu_levels.by_features`` where the bundles are generic levels,
    whose features alone decide, else ``backends.cpu_choice.choose``, which parses the table
    and runs its detection).  A bundle is offered when its name is a CPU
    site bundle's for this machine with this LLVM's key for its arch; ``header(name)`` gives
    its header fields (None: unusable).  ``host``: this host's identity
    (``cpu_identity.host_cpu_identity()``) unless given (a made-up one); ``why``: a dict
    filled with name -> why a bundle offered is not used.

    ``defer``: a dict, where the caller checks a bundle's header when it opens it (the cache's
    ``SiteBundleStore``): a generic level this node has whose header the choice did not need
    is then answered unread, and ``defer[name]`` is each chosen bundle's check (``check_later``:
    the header's fields -> None, or why this node does not use it), for the first open of one
    left unread and for a file that replaces any of them.  Of a site's three levels a node with
    AVX-512 then reads one header, where it read all three, and one without two (``bundles
    status`` reads every header it needs)."""
    from ..cache import log
    from ..cache.bundle import site_bundle_arch
    from .cpu_levels import by_features, header_reader, host_facts
    host = host_cpu_identity() if host is None else host
    why = {} if why is None else why
    machine = host.get("machine") or platform.machine()
    offers, llvm = [], None
    for name in names:
        got = site_bundle_arch(name, KIND, machine)
        if got is None:
            continue
        llvm = llvm or llvm_version()
        key = arch_key(got[0], llvm)
        if key.startswith(got[1]):
            offers.append((name, got[0], key))
        else:
            # (said of its name, the one thing read: a file copied to another arch's name is
            # told apart by ``bundles status``, which reads its header)
            why[name] = (f"its name is for cpu:{got[0]} built with another LLVM or codegen than "
                         f"this node's (key {got[1]}, not {key[:len(got[1])]})")
    meta_of = header_reader(header, why)            # each header read once, by either rule
    facts = host_facts(host) if offers else None
    later = None if defer is None else []
    chosen = [] if not offers else by_features(facts, offers, meta_of, why, later) if facts else None
    if chosen is None:
        from .cpu_choice import choose
        chosen = choose(host, offers, meta_of, _archspec_ancestry, why)
    for name, reason in why.items():
        log.debug("site bundle %s: not used: %s", name, reason)
    if defer is not None:               # each bundle's check, for its first open or a file replacing it
        for arch, key, name in chosen:
            offer = (name, arch.partition(":")[2], key)
            defer[name] = lambda meta, offer=offer: check_later(host, offer, meta)
    return chosen


def check_later(host: dict, offer, meta: dict):
    """None if this node uses the bundle ``offer`` ((name, arch, target key)), whose header
    fields are ``meta``, by ``site_bundles``' rule over that header alone; else why not.  What
    it raises (archspec's failure, where that rule asks it) the caller says as a warning."""
    from .cpu_levels import by_features, header_reader, host_facts
    why = {}
    facts = host_facts(host)
    got = by_features(facts, [offer], header_reader(lambda name: meta, why), why) if facts else None
    if got is None:                             # as ``site_bundles``: the whole rule, or archspec's
        from .cpu_choice import choose
        got = choose(host, [offer], lambda name: meta, _archspec_ancestry, why)
    return None if got else why.get(offer[0], "this node does not use it")


def _archspec_ancestry() -> list:
    """archspec's answer (imports it): where the table rule cannot apply (no cpuinfo features)."""
    from ..archs import cpu_candidates
    return cpu_candidates(host_arch())


def toolchain_target(device="cpu"):
    """The toolchain's target for this host's CPU (imports llvmlite: a miss only)."""
    from .cpu import target
    return target()


def load(payload: bytes, meta: dict, device="cpu"):
    """A variant's object code -> its callable entry point (``backends.cpu_loader``)."""
    return load_object(payload, meta["entry"], _load_mcjit)


def _load_mcjit(obj: bytes, entry: str) -> int:
    from .cpu import load_mcjit         # llvmlite: only for an object Tack's loader does not read
    return load_mcjit(obj, entry)


# ---------------------------------------------------------------------------
# What the dispatcher asks of the launch


def host_views(args):
    """(the indices of other libraries' host arrays among ``args``, the view that reads one as a
    NumPy array over its memory) when there are any (PyTorch CPU tensors, JAX CPU arrays:
    DLPack); None otherwise."""
    host = _host_dlpack(args)
    if not host:
        return None
    from ..dlpack import host_array
    return host, host_array


def check_args(name, params, args, argtypes):
    """TypeError for an array argument that is not in host memory (a device array)."""
    for p, a, t in zip(params, args, argtypes):
        if isinstance(t, T.Array) and not isinstance(a, np.ndarray):
            if foreign_array_kind(a) != "host":     # (DLPack host arrays are views by now)
                raise TypeError(f"kernel '{name}': argument '{p}' is an array on a device "
                                f"({type(a).__name__}); launch on that device, or pass its "
                                ".numpy() copy")
            # shape and dtype of its own, in host memory (h5py's Dataset, zarr's Array...)
            raise TypeError(f"kernel '{name}': argument '{p}' is a {type(a).__name__}, not a "
                            f"NumPy array: pass np.asarray({p}) (a CPU launch takes NumPy "
                            "arrays, and other libraries' host arrays through DLPack)")


def make_variant(fn, meta, sig: Signature) -> "CPUVariant":
    """The launchable variant of the loaded entry point ``fn``."""
    return CPUVariant(sig.name, fn, sig.params, sig.types, sig.arg_index, sig.sites, sig.locate,
                      grid_check(sig, meta.get("tidx")))


def _host_dlpack(args) -> list:
    """Indices of the arguments that are another library's arrays in host memory (DLPack).
    (tack.dlpack is imported only when an argument offers DLPack: not on a NumPy launch.)"""
    offers = [i for i, a in enumerate(args) if hasattr(a, "__dlpack__")
              and not isinstance(a, (np.ndarray, np.generic, type))]
    if not offers:
        return []
    from .. import dlpack
    return [i for i in offers if dlpack.is_dlpack(args[i])
            and dlpack.device_of(args[i])[0] in dlpack.HOST]


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


def _slot_values(plan):
    """``values(args)``: a launch's slot values in ``argument_layout``'s order, from ``plan``
    [(argument index, None for a scalar, else the array parts after its pointer)].  Built from
    closures, not from source text: compiling a lambda costs a first call about 0.4 M
    instructions a kernel, more than the loop costs in thousands of launches."""
    dp, strides = data_pointer, _element_strides
    if all(parts == () or parts == ("extents",) for _, parts in plan):
        splat = tuple((i, parts is not None, parts == ("extents",)) for i, parts in plan)

        def values(args):                   # the common case: C or F arrays and scalars
            out = []
            for i, array, extents in splat:
                a = args[i]
                if array:
                    out.append(dp(a))
                    if extents:
                        out += a.shape
                else:
                    out.append(a)
            return out
        return values

    def values(args):
        out = []
        for i, parts in plan:
            a = args[i]
            if parts is None:
                out.append(a)
                continue
            out.append(dp(a))
            for part in parts:
                out += a.shape if part == "extents" else strides(a)
        return out
    return values


def _pack_reason(code, value, e) -> str:
    """Why ``value`` does not pack as slot format ``code`` (``e``: struct's error), worded the
    same on every Python: struct's range messages changed in 3.12 ("argument out of range" for
    a value past 64 bits became "'q' format requires -9223372036854775808 <= number <= ...")."""
    c = code[0]
    if c in "qQiI":                             # an integer slot: its range from its size
        try:
            v = operator.index(value)
        except TypeError:
            return str(e)
        bits = 8 * struct.calcsize(c)
        low, high = (-(1 << bits - 1), (1 << bits - 1) - 1) if c.islower() else (0, (1 << bits) - 1)
        if not low <= v <= high:
            return "argument out of range"
    return str(e)


class CPUVariant(BoundsReport):
    """A compiled kernel variant loaded in this process."""

    def __init__(self, name, fn, params, types, arg_index, sites, locate=None, grid=None):
        self.name = name
        self.locate = locate
        self.fn = fn
        self.sites = sites
        # One 8-byte slot per slot of the argument layout (backends/argument_layout.py), as the
        # entry reads them (cpu.CPUTarget.emit_entry).
        self.params, self.slot_formats, plan = [], [], []
        for i, p, t in zip(arg_index, params, types):
            # (argument, whether to splat its extents, whether its strides): an array's
            # pointer comes first; a scalar (None) passes its value.
            plan.append((i, None) if not isinstance(t, T.Array) else
                        (i, tuple(part for part in array_parts(t) if part != "pointer")))
            codes = slot_codes(t)
            self.params += [p] * len(codes)
            self.slot_formats += [_SLOT_FMT[c] for c in codes]
        self.values = _slot_values(tuple(plan))
        self.param_types = dict(zip(params, types))     # for ``argument_error``'s message
        codes = entry_codes(types, sites is not None)
        self.packer = struct.Struct("<" + "".join(_SLOT_FMT[c] for c in codes))
        # The launch check of the arrays indexed by the thread index, or at a constant index,
        # on every point (``variant.GridCheck``; None: nothing to check, or debug mode).
        self.grid = grid
        # Seconds per grid point of this variant, from its last launch that took long enough to
        # measure (None: not yet measured); the thread rule's estimate (``_run_grid``).
        self.cost = None
        # Grids of fewer points than this run serially untimed: the measured cost puts them
        # below both what a thread is given and what is worth timing (0: not measured yet).
        self.serial_points = 0
        # Grids of fewer points than this get no second thread even at twice the cost measured:
        # only one launch in SAMPLE_EVERY of them is timed (to follow a cost that changes), the
        # others run as the fast path does; ``quiet_runs`` counts them (0: not measured yet).
        self.quiet_points = self.quiet_runs = 0

    def run(self, args, dims, block=None):
        if block is not None:           # unused here, checked as a device would (one call runs on either)
            from .device_args import block_request
            block_request(dims, block)
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
            raise refusal(self.argument_error(values)) from None
        if d[0] * d[1] * d[2] == 0:
            return
        if self.grid is not None and self.grid.too_large(args, d):
            self.grid.refuse(args, dims)
        _run_grid(self, buf, d)
        if err is not None and err[0]:
            self.raise_bounds_error(err)

    def argument_error(self, values) -> TypeError:
        """Name the argument whose value does not fit the type it was compiled for."""
        for name, code, value in zip(self.params, self.slot_formats, values):
            try:
                struct.pack("<" + code, value)
            except struct.error as e:
                t = self.param_types.get(name)
                hint = int_argument_hint(str(t), value)
                return TypeError(f"kernel '{self.name}': argument '{name}' = {value!r} does not "
                                 f"fit {t if t is not None else 'its type'} "
                                 f"({_pack_reason(code, value, e)}){hint}")
        return TypeError(f"kernel '{self.name}': an argument does not fit the type it was "
                         f"compiled for ({', '.join(map(repr, values))})")


# ---------------------------------------------------------------------------
# Threads: the rule that picks a launch's thread count, and the pool that runs it
#
# The rule. A launch runs on n threads, n = min(config.num_threads, the grid's first extent,
# estimate // PER_THREAD_S), and on the calling thread alone when n < 2, where ``estimate`` is
# the variant's measured seconds per point (``CPUVariant.cost``) times the grid's points. Each
# thread is thus handed at least PER_THREAD_S of work: waking a parked worker and collecting it
# costs 10-30 us here, so 2 threads start only where one would take 200 us or more, and win
# there by far more than that; where the other core is busy and the worker does not get to run,
# the calling thread takes every chunk itself and loses only the wake (a few us, about 2%).
# The cost is measured on each launch that runs long enough to time (MEASURE_MIN_S: the call's
# own overhead stays under 5%): a serial launch's time over its points, or a parallel launch's
# chunks timed on the calling thread over their points (not the launch's wall time, which would
# count the dispatch and the other threads' share). A variant not measured yet is estimated at
# FLOOR_S a point, the cheapest a kernel that writes its output runs here, so its first launch
# goes parallel only where even that cheapest kernel gains (about 800k points on 2 threads);
# otherwise a sixteenth of its rows runs first, timed, and the rest on the pool where that part
# shows it worth more threads (``_serial``). A measurement lower than the estimate replaces
# it, a higher one moves it a quarter of the way (``_learn``: a launch preempted by another
# process does not make a variant look costly for long).
# A busy machine: each parallel launch also measures its overhead, the time its calling thread
# spent not running chunks itself (waking workers, waiting for the last chunk) beyond one
# chunk's time; ``_overhead`` is the median of the last OVERHEAD_SAMPLES of them
# (``_note_overhead``), so one launch whose worker was preempted once does not count, and two
# slow launches in three do. Each thread's
# minimum work is then max(PER_THREAD_S, OVERHEAD_FACTOR * _overhead), so where other processes
# keep the worker from running promptly, mid-size grids go back to one thread. One launch in
# PROBE_EVERY held back only by that overhead runs parallel anyway, to see if it has gone.
# (A moving average, before: one preempted launch, a 2 ms lag, held a 10^6-point saxpy on one
# thread for some 190 launches, six probes, at 1.45x the time two threads took.)
#
# The pool. Workers are started once per process (``_thread``: no threading.Thread start
# handshake), as many as the first launch that wants them needs, more when a later one wants
# more, and each parks on its own lock. A launch hands its job (entry point, argument buffer,
# chunk bounds) to the workers it wakes; every thread, the calling one included, claims chunks
# from the job's counter (``itertools.count``: atomic under the GIL) until none are left, so a
# worker that wakes late finds the work done and parks again, and the caller never waits for a
# worker that has not started. The last chunk to finish releases the job's ``done`` lock.
# One launch uses the pool at a time: a launch from a second Python thread while it is busy
# runs serially, as does one nested in a parallel launch on its own thread (a signal handler's).
# A forked child forgets the parent's workers (``os.register_at_fork``) and
# starts its own; workers never keep the interpreter from exiting.

PER_THREAD_S = 100e-6        # the least estimated work a thread is given
FLOOR_S = 0.25e-9            # seconds per point assumed for a variant not measured yet
MEASURE_MIN_S = 20e-6        # a launch (or the caller's chunks) shorter than this is not measured
CHUNKS_PER_THREAD = 4        # chunks per thread, claimed in turn (balances a busy core)
PROBE_PARTS = 16             # a variant not measured yet: 1 in this many of its rows run first, timed
INTERRUPT_S = 50e-3          # a long serial launch runs in parts of about this long (Ctrl-C between)
OVERHEAD_FACTOR = 2.0        # each thread's work is also at least this times the overhead seen
PROBE_EVERY = 32             # one launch in this many held back by that overhead goes parallel
SAMPLE_EVERY = 8             # one launch in this many that cannot gain a thread is timed
FAST_SAMPLE_EVERY = 16       # and one in this many below the size found too small to time

OVERHEAD_SAMPLES = 3         # the overheads measured last, whose median is ``_overhead``

_overhead = 20e-6            # what parallel launches took beyond their share of the work
_overheads = [_overhead] * OVERHEAD_SAMPLES     # (the median of these, the newest last)
_held_back = 0               # (a moving average), and launches held back by it since a probe

_clock = time.perf_counter
_busy = _thread.RLock()             # held while a launch uses the pool (its owner known)
_wakes: list = []                   # per worker: the lock it parks on (held while parked)
_slots: list = []                   # per worker: the job it is woken for
_inside: list = []                  # per worker: the job it is working on now (None: parked)
_max_workers = None                 # the workers this process could start, once one failed to
_stats = {"workers": 0, "parallel_launches": 0, "last_threads": 1, "start_seconds": 0.0}


def startup_seconds() -> float:
    """Seconds this process has spent starting worker threads (``interface.Runtime``): the
    dispatcher reports a first call's share of it as its "threads" stage."""
    return _stats["start_seconds"]


def pool_stats() -> dict:
    """How the pool stands: ``workers`` started in this process, ``parallel_launches`` so far,
    ``last_threads``, the number of threads the last CPU launch was given (1: serial), and
    ``start_seconds``, the time spent starting workers (a first call's "threads" stage)."""
    return dict(_stats)


def _run_grid(variant, buf, d):
    """Run ``variant.fn`` over the grid ``d`` (3 extents), on as many threads as the rule
    above gives, measuring the variant's cost per point where the launch is long enough."""
    global _held_back
    fn = variant.fn
    threads = config.num_threads
    d0 = d[0]
    points = d0 * d[1] * d[2]
    if threads == 1 or d0 < 2:
        _stats["last_threads"] = 1          # the fast path: as cheap as TACK_NUM_THREADS=1
        fn(buf, 0, d0)
        return
    if points < variant.serial_points:      # the same, but for one launch in FAST_SAMPLE_EVERY
        _stats["last_threads"] = 1
        variant.quiet_runs += 1
        if variant.quiet_runs % FAST_SAMPLE_EVERY:
            fn(buf, 0, d0)
            return
        # One launch in FAST_SAMPLE_EVERY timed: a kernel whose work per point depends on its
        # arguments (a loop over one) may cost more now than when its size was found too small.
        t0 = _clock()
        fn(buf, 0, d0)
        t = _clock() - t0
        if t >= MEASURE_MIN_S:
            _learn(variant, t / points)
        return
    if points < variant.quiet_points:       # serial even at twice the cost: timed now and then
        variant.quiet_runs += 1
        if variant.quiet_runs % SAMPLE_EVERY:
            _stats["last_threads"] = 1
            fn(buf, 0, d0)
            return
    cost = variant.cost
    estimate = points * (FLOOR_S if cost is None else cost)
    n = min(threads, d0, int(estimate / max(PER_THREAD_S, OVERHEAD_FACTOR * _overhead)))
    if n < 2:
        base = min(threads, d0, int(estimate / PER_THREAD_S))
        if base >= 2:                   # held back by the overhead measured: probe now and then
            _held_back += 1
            if _held_back >= PROBE_EVERY:
                _held_back, n = 0, base
    if n >= 2 and _on_pool(variant, buf, d, n, 0):
        return
    _serial(variant, buf, d, points)


def _on_pool(variant, buf, d, n, lo):
    """Run rows ``lo`` to ``d[0]`` of the grid on ``n`` threads, where the pool is free; ->
    whether it did."""
    # A launch on the thread of a parallel launch still running (a signal handler's, a finalizer's
    # run by the garbage collector) runs serially: the pool's lock is that thread's own, and taking
    # it again put a second job in the workers' slots and released a worker's wake lock the outer
    # launch was about to release ("release unlocked lock", raised by the outer launch).
    if _busy._is_owned():
        return False
    try:
        if _busy.acquire(False):
            _parallel(variant, buf, d, n, lo)
            return True
        return False
    finally:
        # Released by whichever way this ends, an interrupt raised just as ``acquire``
        # returned included (it was left held: every later launch ran on one thread). An
        # RLock knows its owner: one another thread's launch holds is not released here.
        try:
            _busy.release()
        except RuntimeError:
            pass


def _serial(variant, buf, d, points):
    """Run a launch the rule gave one thread on the calling thread, measuring its cost.

    A variant not measured yet runs a first part of its rows first (1 in PROBE_PARTS), timed:
    where that part shows the rest worth more threads, the rest runs on the pool.  Estimated at
    FLOOR_S a point, a costly kernel's first launch on a small grid (a loop at each point) ran
    whole on one thread, however long.  A launch whose measured cost puts it past 2 *
    INTERRUPT_S (the pool busy with another thread's launch) runs in parts of about INTERRUPT_S
    each, so that Ctrl-C is raised between them, not once the whole grid has run."""
    fn, d0, row = variant.fn, d[0], d[1] * d[2]
    _stats["last_threads"] = 1
    t0 = _clock()
    lo = 0
    if variant.cost is None:
        lo = max(1, d0 // PROBE_PARTS)
        fn(buf, 0, lo)
        t = _clock() - t0
        if t >= MEASURE_MIN_S:
            _learn(variant, t / (lo * row))
            rest = (d0 - lo) * row * variant.cost
            n = min(config.num_threads, d0 - lo,
                    int(rest / max(PER_THREAD_S, OVERHEAD_FACTOR * _overhead)))
            if n >= 2 and _on_pool(variant, buf, d, n, lo):
                return
    cost = variant.cost
    if cost is not None and (d0 - lo) * row * cost > 2 * INTERRUPT_S:
        step = max(1, int(INTERRUPT_S / (row * cost)))
        for start in range(lo, d0, step):
            fn(buf, start, min(start + step, d0))
    elif lo < d0:
        fn(buf, lo, d0)
    t = _clock() - t0
    if t >= MEASURE_MIN_S:
        _learn(variant, t / points)
    elif t < 2 * PER_THREAD_S and points >= variant.serial_points:
        variant.serial_points = points + 1  # too quick to time: grids this small never gain


def _parallel(variant, buf, d, n, lo=0):
    """Run rows ``lo`` to ``d[0]`` of a launch on ``n`` threads, the calling one included (the
    pool held: ``_busy``)."""
    global _overhead
    rows = d[0] - lo
    t0 = _clock()
    if len(_wakes) < n - 1:
        n = min(n, _start_workers(n - 1) + 1)
    _stats["last_threads"] = n
    _stats["parallel_launches"] += 1
    chunks = min(rows, n * CHUNKS_PER_THREAD)
    job = _Job(variant.fn, buf, [lo + rows * k // chunks for k in range(chunks + 1)])
    try:
        for i in range(n - 1):
            _slots[i] = job
            wake = _wakes[i]
            if wake.locked():           # parked (or about to park): wake it
                wake.release()
        job.work(timed=True)
        job.wait()
    except BaseException:
        # An interrupt (Ctrl-C's KeyboardInterrupt, raised as a call returns) at a moment
        # ``work`` and ``wait`` cannot guard: raised once no worker is in the launch.
        job.abandon()
        raise
    wall = _clock() - t0
    if job.timed_rows and job.timed >= MEASURE_MIN_S:     # (the workers may have run them all)
        _learn(variant, job.timed / (job.timed_rows * d[1] * d[2]))
    # The launch's overhead: the time the calling thread did not spend on chunks of its own
    # (waking the workers, then waiting for the last chunk another thread still ran), less
    # one chunk's time, the wait any split into chunks has. Not the wall time against an
    # estimate: one learnt at another grid size, or work the caller took over from a late
    # worker, would count as overhead.
    if job.timed_rows:
        chunk = job.timed * (rows / chunks) / job.timed_rows
        _overhead = _note_overhead(max(wall - job.timed - chunk, 0.0))
    if job.error is not None:
        raise job.error


def _note_overhead(sample):
    """The overhead estimate once a parallel launch measured ``sample`` seconds: the median of
    the last OVERHEAD_SAMPLES measured (the pool held: ``_busy``)."""
    del _overheads[0]
    _overheads.append(sample)
    return sorted(_overheads)[len(_overheads) // 2]


def _learn(variant, cost):
    """A launch measured ``cost`` seconds a point: lower is taken at once, higher a quarter of
    the way (one launch preempted by another process does not make a variant look costly)."""
    old = variant.cost
    variant.cost = cost = cost if old is None or cost <= old else old + (cost - old) / 4
    # Below this many points a launch would be given no second thread, nor be worth timing,
    # even at half the cost measured: such launches skip the rule and the clock.
    if cost > 0:
        # (Both ways, as the cost: a kernel whose work grows with an argument comes back under
        # the rule; the fast path times one launch in FAST_SAMPLE_EVERY to see it.)
        variant.serial_points = int(min(PER_THREAD_S * 2, MEASURE_MIN_S) / (2 * cost))
        # Below this many points even twice the cost gives no second thread (n needs an estimate
        # of 2 * PER_THREAD_S): those launches are timed one in SAMPLE_EVERY. It follows the cost
        # both ways, so a kernel whose cost rises is soon back under the rule.
        variant.quiet_points = int(PER_THREAD_S / cost)


class _Job:
    """One parallel launch: ``fn(buf, bounds[k], bounds[k + 1])`` for every chunk k, each run
    by whichever thread claims it first."""

    __slots__ = ("fn", "buf", "bounds", "chunks", "claim", "finish", "done", "all_done", "stop",
                 "error", "timed", "timed_rows")

    def __init__(self, fn, buf, bounds):
        self.fn, self.buf, self.bounds = fn, buf, bounds
        self.chunks = len(bounds) - 1
        self.claim = itertools.count().__next__
        self.finish = itertools.count(1).__next__
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.all_done = False       # set by the thread that finished the last chunk, then ``done``
        self.stop = False           # set by an interrupted caller: no chunk is claimed any more
        self.error = None
        self.timed = 0.0            # seconds the calling thread's chunks took
        self.timed_rows = 0         # and the rows of the first dimension they covered

    def work(self, timed=False):
        fn, buf, bounds, chunks = self.fn, self.buf, self.bounds, self.chunks
        while not self.stop:
            k = self.claim()
            if k >= chunks:
                return
            lo, hi = bounds[k], bounds[k + 1]
            try:
                if timed:
                    t0 = _clock()
                    fn(buf, lo, hi)
                    self.timed += _clock() - t0
                    self.timed_rows += hi - lo
                else:
                    fn(buf, lo, hi)
            except BaseException as e:              # noqa: BLE001 - raised by the caller
                if timed and not isinstance(e, Exception):
                    # An interrupt (Ctrl-C's handler runs as the caller's chunk returns): no
                    # chunk is claimed any more, and the caller raises it once no worker is
                    # in the launch (``abandon``), not after the whole grid has run.
                    self.stop = True
                    raise
                if self.error is None:
                    self.error = e
            if self.finish() == chunks:
                self.all_done = True
                self.done.release()

    def wait(self):
        """Until every chunk has run; an interrupt while waiting is raised only once no thread
        still writes into the launch's arrays.  Led by ``all_done``, not by the lock alone: an
        interrupt raised just as ``acquire`` returned would otherwise send it to wait again for a
        release that has been and gone (a hang)."""
        interrupted = None
        while not self.all_done:
            try:
                self.done.acquire()
            except BaseException as e:              # noqa: BLE001 - re-raised below
                interrupted = e
        if interrupted is not None:
            raise interrupted

    def abandon(self):
        """After an interrupt the caller could not hold back: no chunk is claimed any more, and
        this returns once no worker is in the launch (none writes into its arrays then); a
        second interrupt meanwhile (Ctrl-C pressed again) is raised then, not at once."""
        self.stop = True
        interrupted = None
        while True:
            try:
                while any(job is self for job in _inside):
                    time.sleep(50e-6)
                break
            except BaseException as e:              # noqa: BLE001 - re-raised below
                interrupted = e
        if interrupted is not None:
            raise interrupted


def _worker(i):
    """Worker i: parked on its lock; woken, it works on the job in its slot (the one it was woken
    for, or a later one: either way only chunks still unclaimed), then parks again."""
    wake, slots, inside = _wakes[i], _slots, _inside
    while True:
        wake.acquire()
        job = slots[i]
        if job is not None:
            inside[i] = job             # before it claims a chunk: ``abandon`` waits for it
            job.work()
            inside[i] = None


def _start_workers(n):
    """Start workers until there are ``n``, each parked on its held lock; -> how many there are:
    fewer where the system starts no more threads (a container's limit, TACK_NUM_THREADS far above
    the cores), and then no more are asked for in this process."""
    global _max_workers
    t0 = _clock()
    if not _wakes:
        _watch_fork()
    if _max_workers is not None:
        n = min(n, _max_workers)
    while len(_wakes) < n:
        wake = _thread.allocate_lock()
        wake.acquire()
        _wakes.append(wake)
        _slots.append(None)
        _inside.append(None)
        try:
            _thread.start_new_thread(_worker, (len(_wakes) - 1,))
        except RuntimeError:                # "can't start new thread": run on those there are
            del _wakes[-1], _slots[-1], _inside[-1]
            _max_workers = len(_wakes)
            break
        _stats["workers"] = len(_wakes)
    _stats["start_seconds"] += _clock() - t0
    return len(_wakes)


_fork_watched = False


def _watch_fork():
    global _fork_watched
    if not _fork_watched and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_pool)
        _fork_watched = True


def _forget_pool():
    """In a forked child: the parent's workers do not exist here; start afresh when needed."""
    global _busy, _wakes, _slots, _inside, _max_workers
    _busy = _thread.RLock()
    _wakes, _slots, _inside, _max_workers = [], [], [], None
    _stats["workers"] = 0
