"""What the device runtimes (OpenCL, Level Zero, CUDA, HIP, Metal) share when they take a
launch's arguments: the ``meta["argspec"]`` parser, the per-argument checks of an array or a
scalar (the same TypeErrors with the same messages in every runtime), the bookkeeping that
gives an array passed twice one device buffer and copies the writable ones back, the slot
values of a launch in the argument layout's order (``argument_values``), the launch's
geometry (which grid dimension goes on which hardware axis, the work-group shape) and
device-name parsing.

Light to import (NumPy only): each runtime keeps its own device-array class and driver calls.
"""

from __future__ import annotations

import operator
import threading

import numpy as np

from .. import types as T
from .argument_layout import array_values, entry_codes
from .variant import int_argument_hint, refusal

SCALAR_TYPES = {"bool": np.int8, "int32": np.int32, "int64": np.int64, "uint32": np.uint32,
                "uint64": np.uint64, "float32": np.float32, "float64": np.float64}


class ArgSpec:
    """One value argument of the ABI, from its ``tack.types.spec`` text (``type``: its Tack type,
    whose slots ``argument_layout`` gives)."""

    __slots__ = ("text", "type", "is_array", "dtype", "ndim", "layout", "writable", "shape",
                 "scalar")

    def __init__(self, text):
        self.text = text
        self.type = t = T.parse_spec(text)
        self.is_array = isinstance(t, T.Array)
        if self.is_array:
            self.dtype = t.dtype.dtype
            self.ndim, self.layout, self.writable, self.shape = t.ndim, t.layout, t.writable, t.shape
        else:
            self.scalar = SCALAR_TYPES[t.name]


def launch_codes(specs, debug: bool) -> list:
    """The slot codes of a launch of value arguments ``specs`` (``argument_layout.entry_codes``)."""
    return entry_codes([s.type for s in specs], debug)


def argspecs(meta, error) -> list:
    """The ``ArgSpec`` of each value argument of ``meta["argspec"]``; ``error`` (the runtime's
    exception class) when it has none that can be read."""
    try:
        return [ArgSpec(s[0] if isinstance(s, (list, tuple)) else s) for s in meta["argspec"]]
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise error(f"variant metadata has no usable argspec ({type(e).__name__}: {e})") from None


# ---------------------------------------------------------------------------
# Scalars


def scalar_numpy(spec, a):
    """A scalar argument as the ABI's NumPy type: bool as an i8 0 or 1; an integer type takes
    only integers (as the CPU backend does), in range; a float type any real number."""
    if spec.text == "bool":
        return np.int8(1 if a else 0)
    if spec.scalar in (np.float32, np.float64):
        return spec.scalar(float(a))
    return spec.scalar(operator.index(a))


def scalar_value(spec, a):
    """A scalar argument as a Python value of the ABI's type: bool as 0 or 1; an integer type
    takes only integers, in range; a float type any real number.  TypeError/OverflowError
    otherwise."""
    if spec.text == "bool":
        return 1 if a else 0
    if spec.scalar in (np.float32, np.float64):
        return float(spec.scalar(float(a)))
    v = operator.index(a)
    info = np.iinfo(spec.scalar)
    if not info.min <= v <= info.max:
        raise OverflowError(f"{v} is out of range for {spec.text}")
    return v


def check_scalar(what, spec, a, is_array, convert=scalar_numpy):
    """``convert(spec, a)`` of a scalar argument; TypeError when ``a`` is an array
    (``is_array(a)``) or does not fit the scalar type."""
    if is_array(a):
        raise TypeError(f"{what} is a {spec.text} scalar, not an array")
    try:
        return convert(spec, a)
    except (OverflowError, TypeError, ValueError) as e:
        # an integer past the type's range: said as the CPU says it, not in the words of the
        # conversion that failed ("Python int too large to convert to C long")
        why = "argument out of range" if isinstance(e, OverflowError) else e
        raise TypeError(f"{what} = {a!r} does not fit {spec.text} ({why})"
                        f"{int_argument_hint(spec.text, a)}") from None


# ---------------------------------------------------------------------------
# Arrays


class ArrayShape:
    """``ndim``, ``size`` and ``nbytes`` of a device array from its ``shape`` and ``dtype``."""

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


class ContiguousArray(ArrayShape):
    """A runtime's own device array: contiguous memory in C order, or F order when made from an
    F-ordered array (``layout``).  ``numpy()`` copies it back into a new NumPy array through
    the runtime's ``read(out)`` (``out``: a contiguous, flat view of the new array)."""

    def __init__(self, dev, shape, dtype, layout, writable=True):
        self.dev, self.shape, self.dtype = dev, tuple(shape), np.dtype(dtype)
        self.layout, self.writable = layout, writable

    def element_strides(self) -> list:
        """Strides in elements of its memory order."""
        return layout_strides(self.shape, self.layout)

    def contiguity(self) -> tuple:
        return layout_contiguity(self.layout, self.ndim)

    def numpy(self) -> np.ndarray:
        """A new NumPy array with the device memory's contents (after the launches made)."""
        out = np.empty(self.shape, self.dtype, order=self.layout)
        if self.nbytes:
            self.read(out.ravel(order="K"))
        return out

    def read(self, out):
        raise NotImplementedError

    def __repr__(self):
        return (f"<{type(self).__name__} {self.dtype}{list(self.shape)} {self.layout} on "
                f"{self.dev.name}>")


def layout_contiguity(layout, ndim) -> tuple:
    """(C-contiguous, F-contiguous) of a contiguous device array of ``layout`` (C or F)."""
    return layout == "C" or ndim == 1, layout == "F" or ndim == 1


def layout_strides(shape, layout) -> list:
    """Element strides of contiguous memory of ``shape`` in ``layout`` order (C or F)."""
    ndim = len(shape)
    strides, n = [0] * ndim, 1
    for d in (range(ndim - 1, -1, -1) if layout == "C" else range(ndim)):
        strides[d] = n
        n *= shape[d]
    return strides


def _named(dev) -> str:
    index = getattr(dev, "index", None)
    return dev.name if index is None else f"device {index} ({dev.name})"


def check_array(what, spec, a, dev, device_type, expected, foreign=None) -> tuple:
    """(shape, dtype, C-contiguous, F-contiguous) of the array argument ``a``: a NumPy array or
    the runtime's ``device_type`` (which has ``dev``, ``shape``, ``dtype``, ``writable`` and
    ``contiguity()``) on ``dev``.  TypeError (ValueError for another device's array) naming
    the argument when it does not fit ``spec``; ``expected`` says what it may be, ``foreign`` why
    another library's array (DLPack, ``__cuda_array_interface__``) is not taken."""
    if isinstance(a, device_type):
        if a.dev is not dev:
            # by index too: a node's GPUs are often of one name
            raise ValueError(f"{what} lives on {_named(a.dev)}, the kernel on {_named(dev)}")
        if spec.writable and not a.writable:
            raise TypeError(f"{what}: the kernel writes it but the device array is read-only")
        shape, dtype = a.shape, a.dtype
        c, f = a.contiguity()
    elif isinstance(a, np.ndarray):
        shape, dtype = a.shape, a.dtype
        c, f = a.flags.c_contiguous, a.flags.f_contiguous
        if spec.writable and not a.flags.writeable:
            raise TypeError(f"{what}: the kernel was compiled for a writable array; this one is "
                            "read-only")
    elif foreign and (hasattr(a, "__dlpack__") or hasattr(a, "__cuda_array_interface__")):
        raise TypeError(f"{what} is another library's array ({type(a).__name__}): {foreign}; pass "
                        f"a NumPy copy of it, or {expected}")
    else:
        raise TypeError(f"{what} must be {expected} ({spec.text}), not {type(a).__name__}")
    if dtype != spec.dtype or len(shape) != spec.ndim:
        raise TypeError(f"{what} is {dtype}[{len(shape)}-d]; the kernel takes {spec.text}")
    if spec.shape is not None and tuple(shape) != spec.shape:
        raise TypeError(f"{what} has shape {tuple(shape)}; the kernel compiled in {spec.shape}")
    if spec.layout != "A" and not (c if spec.layout == "C" else f):
        raise TypeError(f"{what} is not {spec.layout}-contiguous, as the kernel's {spec.text} "
                        "requires")
    return shape, dtype, c, f


class Staging:
    """The NumPy arrays of one launch in device buffers: one buffer per array however often it
    is passed, and the list of those to copy back (``back``: (array, buffer, host)) after it."""

    def __init__(self):
        self.shared = {}                    # NumPy array identity -> (buffer, element strides, host)
        self.back = []
        self._backed = set()
        self._written = []                  # (array, index in ``back``) of each written identity
        self._before = {}                   # id(host) -> what was uploaded, for a merged copy back

    def stage(self, spec, a, c, f, upload) -> tuple:
        """(buffer, element strides) of the NumPy array ``a`` (C-/F-contiguous: ``c``/``f``).

        The first time: ``upload(host)`` -> (buffer, host) puts ``host`` on the device: ``a``
        itself when contiguous, else a C copy (passed with its strides); the host returned
        is what the buffer is copied back into when ``spec`` is writable."""
        ident = (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)
        known = self.shared.get(ident)
        if known is None:
            host = a if (c or f) else np.ascontiguousarray(a)
            estrides = [s // a.itemsize for s in host.strides]
            buf, host = upload(host)
            known = self.shared[ident] = (buf, estrides, host)
        buf, estrides, host = known
        if spec.writable and a.size and ident not in self._backed:
            self._backed.add(ident)
            self.back.append((a, buf, host))
            overlapping = [k for other, k in self._written if _overlap(a, other)]
            self._written.append((a, len(self.back) - 1))
            for k in overlapping + [len(self.back) - 1] if overlapping else ():
                self._merge(k)
        return buf, estrides

    def _merge(self, k):
        """Copy ``back[k]`` back only where the launch changed it: its array's memory overlaps
        another written array's (two views of one array, ``a[:4]`` and ``a[2:]``), each with a
        buffer of its own, and copied back whole, one would put back what it was given over
        the other's results.  Its buffer then comes back into memory of its own, compared
        with what was uploaded (bit for bit) once the launch is over (``finish``)."""
        a, buf, host = self.back[k]
        if id(host) in self._before:
            return
        scratch = np.empty_like(host)
        self._before[id(scratch)] = host.copy()
        self.back[k] = (a, buf, scratch)

    def finish(self):
        """Copy what came back into the arrays whose memory it is not (strided ones, and the
        overlapping ones where the launch changed them: ``_merge``)."""
        for a, _, host in self.back:
            before = self._before.get(id(host))
            if before is not None:
                bits = f"u{host.itemsize}" if host.itemsize in (1, 2, 4, 8) else None
                changed = (host != before) if bits is None else (host.view(bits) != before.view(bits))
                np.copyto(a, host.reshape(a.shape), where=changed.reshape(a.shape))
            elif not np.shares_memory(host, a):
                np.copyto(a, host.reshape(a.shape))


def _overlap(a, b) -> bool:
    """Whether NumPy arrays ``a`` and ``b`` share an element's memory (exactly, where NumPy can
    say so in little work; else, as their extents of memory overlap)."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except _TOO_HARD:
        return True


_TOO_HARD = getattr(getattr(np, "exceptions", np), "TooHardError")


def argument_values(kernel, args, own, handle, upload, staging, expected, foreign=None,
                    convert=scalar_numpy, adopt=None) -> list:
    """The slot values of ``args`` (one per value argument of ``kernel.specs``) in the argument
    layout's order (``argument_layout``), the grid and the error record left to the caller.

    A scalar is ``convert(spec, a)``.  An array passes its handle (a pointer, a buffer), then
    its extents and strides as its type says: the runtime's own device array (``own``) its
    ``handle(a)`` -> (handle, element strides); a NumPy array the buffer ``staging`` puts it in
    (``upload``, ``Staging.stage``); another library's array is first ``adopt(a)``ed as the
    runtime's own where the runtime takes them (CUDA's, HIP's), else refused with ``foreign``
    (why).  TypeError naming the argument for one that does not fit (``expected``: what it may
    be)."""
    def is_array(a):
        return (isinstance(a, (np.ndarray, own)) or hasattr(a, "__cuda_array_interface__")
                or hasattr(a, "__dlpack__"))

    values = []
    for i, (spec, a) in enumerate(zip(kernel.specs, args)):
        what = f"kernel '{kernel.entry}': argument {i}"
        if not spec.is_array:
            values.append(check_scalar(what, spec, a, is_array, convert))
            continue
        if adopt is not None and not isinstance(a, (np.ndarray, own)):
            a = adopt(a)
        shape, _, c, f = check_array(what, spec, a, kernel.dev, own, expected, foreign)
        if isinstance(a, own):
            ref, estrides = handle(a)
        else:
            ref, estrides = staging.stage(spec, a, c, f, upload)
        values += array_values(spec.type, ref, [int(n) for n in shape], [int(s) for s in estrides])
    return values


def check_entry_params(entry, specs, count, error):
    """``error`` unless an entry point of ``count`` parameters takes what ``specs`` make, with or
    without debug mode's error record (what ``load`` checks)."""
    base = len(launch_codes(specs, False))
    if count not in (base, base + 1):
        raise error(f"kernel '{entry}' takes {count} parameters; its metadata "
                    f"({', '.join(s.text for s in specs)}) makes {base}, or {base + 1} in debug "
                    "mode")


def host_copy(array) -> tuple:
    """(the array, its contiguous host copy, layout) for ``to_device``: its own memory order,
    C unless it is F; ValueError for a scalar, TypeError for an array no kernel takes (its
    dtype, rank or byte order, as a launch says it: ``object`` arrays' pointers copied to a
    device, then read back, crashed the process) or a masked one (its mask would be lost).  A
    device array of Tack's is copied (through the host)."""
    from ..argtypes import is_masked, why_not_taken
    if hasattr(array, "layout") and hasattr(array, "numpy") and not isinstance(array, np.ndarray):
        array = array.numpy()                           # another device's array, or this one's
    if is_masked(array):
        raise TypeError("to_device takes no NumPy masked array: its mask would be lost (a launch "
                        "refuses one too); pass its .filled(value) or its .data")
    a = np.asarray(array)
    if a.ndim == 0:
        raise ValueError("to_device takes an array of rank 1 or more, not a scalar")
    if T.from_dtype(a.dtype) is None or not 1 <= a.ndim <= 4 or not a.dtype.isnative:
        raise TypeError(f"to_device takes arrays a kernel takes, not a {a.ndim}-D {a.dtype} "
                        f"array: {why_not_taken(a, 'array', launch=False)}")
    layout = "F" if (a.flags.f_contiguous and not a.flags.c_contiguous) else "C"
    return a, np.asarray(a, order=layout), layout


# ---------------------------------------------------------------------------
# Launch shapes and device names


def check_launch(kernel, args, dims) -> tuple:
    """``dims`` as a tuple of ints; ValueError unless 1 to 3 non-negative extents, TypeError
    unless ``args`` has one value per value argument of ``kernel.specs``."""
    dims = tuple(int(d) for d in dims)
    if not 1 <= len(dims) <= 3 or any(d < 0 for d in dims):
        raise ValueError(f"dims must be 1 to 3 extents, none negative: {dims!r}")
    if len(args) != len(kernel.specs):
        raise TypeError(f"kernel '{kernel.entry}' takes {len(kernel.specs)} value arguments, "
                        f"got {len(args)}")
    return dims


def check_param_count(kernel, num_params, debug, error) -> list:
    """The slot codes of a launch of ``kernel`` (``launch_codes``); ``error`` when the kernel
    takes ``num_params`` parameters and the launch passes another number (None: unknown)."""
    codes = launch_codes(kernel.specs, debug)
    expected = len(codes)
    if num_params is not None and expected != num_params:
        raise error(f"kernel '{kernel.entry}' takes {num_params} parameters but a "
                    f"{'debug' if debug else 'non-debug'} launch passes {expected}: was it "
                    "compiled with debug mode as this launch says?")
    return codes


# -- the launch's geometry ---------------------------------------------------------------
#
# A grid's dimensions are a NumPy array's: the last is the fastest-varying axis of a C-order
# array.  On a GPU the fastest work-item index is x (consecutive work-items of a warp or
# wavefront differ in x), so the last grid dimension goes on x, the one before on y, the one
# before that on z (``hardware_order``), as Warp, CUDA C and Numba's CUDA target map them:
# consecutive work-items then touch consecutive elements (one memory transaction a warp,
# not 32).  Every entry of a GPU target (``gpu.GPUTarget.emit_entry``, Metal's) takes the
# grid index d from hardware axis ndim-1-d, and loops over its axes (a grid-stride loop: a
# device with fewer work-groups than the grid needs along an axis, CUDA's 65535 along y and z,
# launches at most its limit and each work-item takes several points).  Work-groups
# (``group_shape``) fill x first.  A ``block`` a user gives and every message keep the grid's
# order.


def hardware_axis(d: int, ndim: int) -> int:
    """The hardware axis (0: x) grid dimension ``d`` of an ``ndim``-dimensional grid runs on:
    the last dimension on x.  (The same formula maps an axis back to its dimension.)"""
    return ndim - 1 - d


def hardware_order(extents) -> tuple:
    """Per-dimension values of a grid (``extents``: its 1 to 3 dimensions, in its order) in the
    hardware's (x, y, z), 1 for an axis the grid does not use (``hardware_axis``)."""
    out = [1, 1, 1]
    for d, n in enumerate(extents):
        out[hardware_axis(d, len(extents))] = n
    return tuple(out)


def hardware_launch(dims, local, max_groups=None, max_items=None) -> tuple:
    """(work-groups, work-group size) of a launch over ``dims`` in work-groups of ``local``
    (both in the grid's order), each three values in the hardware's (x, y, z).  ``max_groups``:
    the device's limit of work-groups per axis; ``max_items``: of work-items per axis (HIP's
    dispatch packet counts them in 32 bits).  Where the grid needs more, the most the device
    takes is launched and the entry's grid-stride loop covers the rest."""
    ext, size = hardware_order(dims), hardware_order(local)
    groups = tuple(-(-n // b) for n, b in zip(ext, size))
    if max_groups is not None:
        groups = tuple(max(1, min(g, int(m))) for g, m in zip(groups, max_groups))
    if max_items is not None:
        groups = tuple(max(1, min(g, max_items // b)) for g, b in zip(groups, size))
    return groups, size


def group_shape(dims, limit, max_items) -> tuple:
    """A work-group (block) over ``dims`` with at most ``limit`` work-items, in the grid's
    order, filled along the last dimension (the hardware's x, ``max_items[0]``) first: each a
    power of two, no larger than the grid needs along it."""
    sizes, left = [], max(1, limit)
    for axis, n in enumerate(reversed(tuple(dims))):
        s = 1
        while s < n and s * 2 <= left and s * 2 <= max_items[axis]:
            s *= 2
        sizes.append(s)
        left //= s
    return tuple(reversed(sizes))


def _not_bool(x):
    """``x``, or a TypeError for a bool (which ``operator.index`` would take as 0 or 1), NumPy's
    too (NumPy before 2.3, the newest for Python 3.10, takes np.True_ as 1 with a warning)."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError("a bool")
    return x


def block_request(dims, block):
    """``tack.launch``'s ``block=`` checked against the grid ``dims`` as every device checks it
    before its own limits: an int of at least 1 (the work-items of a group) -> that int; one
    extent of at least 1 per grid dimension -> their tuple.  TypeError or ValueError (marked as
    a launch's refusal) otherwise.  The CPU, which runs no work-groups and so uses none, checks
    it too: a call the CPU runs is not refused by a device for what the CPU could have said."""
    if isinstance(block, (int, np.integer)) and not isinstance(block, (bool, np.bool_)):
        if block < 1:
            raise refusal(ValueError(f"block {block!r} must be at least 1 work-item"))
        return int(block)
    try:
        shape = tuple(operator.index(_not_bool(x)) for x in block)
    except TypeError:
        raise refusal(TypeError(f"block must be an int or a tuple of ints, not {block!r}")) from None
    if len(shape) != len(dims) or any(x < 1 for x in shape):
        raise refusal(ValueError(f"block {block!r} does not match the grid {dims!r} (one extent "
                                  "of at least 1 per grid dimension)"))
    return shape


def choose_block(dims, block, default, limit, max_items, where) -> tuple:
    """The work-group (block) shape of a launch over ``dims``, in the grid's order: ``default``
    work-items (capped by ``limit``, the kernel's and the device's) unless ``block`` says
    otherwise: an int is the work-items of a group, a tuple (one extent per grid dimension) the
    shape, either refused above ``limit``.  ``max_items``: the device's limit per hardware axis (x, y, z).  ValueError, naming
    ``where`` (the kernel and device), for a shape that does not fit."""
    if block is None:
        return group_shape(dims, min(default, limit), max_items)
    shape = block_request(dims, block)
    if isinstance(shape, int):
        if shape > limit:                       # refused, as a shape is: not quietly made smaller
            raise refusal(ValueError(f"block {shape} is larger than {where} allows ({limit} "
                                      "work-items)"))
        return group_shape(dims, shape, max_items)
    per_dim = tuple(reversed(tuple(max_items[:len(dims)])))        # the grid's order
    if int(np.prod(shape)) > limit or any(x > m for x, m in zip(shape, per_dim)):
        raise refusal(ValueError(f"block {shape} is larger than {where} allows ({limit} "
                                  f"work-items, at most {per_dim} per dimension)"))
    return shape


def device_index(device, kind, name, device_type=None) -> int:
    """The index ``device`` names: None or ``kind`` is 0, ``kind:<index>`` its index, a
    ``device_type`` its own; ValueError otherwise (``name``: "a CUDA", "an OpenCL", ...)."""
    if device is None or device == kind:
        return 0
    if isinstance(device, str) and device.startswith(kind + ":"):
        digits = device.split(":", 1)[1]
        # digits only: int() takes "-1" (the last device, under a second context of its own),
        # " 0", "+0" and "0_0"
        if digits.isascii() and digits.isdigit():
            return int(digits)
    if device_type is not None and isinstance(device, device_type):
        return device.index
    raise ValueError(f"not {name} device name: {device!r} (use '{kind}' or '{kind}:<index>')")


def no_such_device(label, kind, index, listing) -> ValueError:
    """The ValueError for ``kind:index`` on a machine with the devices ``listing`` (index, name)."""
    return ValueError(f"no {label} device {kind}:{index}; this machine has "
                      f"{', '.join(f'{kind}:{i} ({n})' for i, n in listing)}")


class LaunchLock:
    """The lock around state one launch sets and the next would overwrite (an OpenCL kernel's
    arguments, a Level Zero kernel's and its device's command list): another thread waits for
    it; the thread that holds it, launching again from a signal handler or a finalizer while it
    is inside a launch, gets a RuntimeError naming ``what`` instead of waiting for itself for
    ever (a re-entrant lock would let the nested launch overwrite the outer one's arguments:
    wrong results, silently)."""

    def __init__(self, what):
        self.what = what
        self._lock = threading.RLock()      # an RLock knows its owner: _is_owned()

    def __enter__(self):
        if self._lock._is_owned():
            raise RuntimeError(f"{self.what} is in use by a launch already under way on this "
                               f"thread (a signal handler or a finalizer launched again while "
                               f"its thread was inside that launch); launch from elsewhere, "
                               f"e.g. set a flag in the handler and launch when it has returned")
        self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()


class Devices:
    """A runtime's devices, found once per process by ``discover()``, which returns
    ``(api, [device], reason)`` and never raises (``reason``: why there is none, with what to
    install).  Each device has ``index``, ``name``, ``label`` (what ``tack.devices()`` shows),
    ``open()`` (its context or stream, made once) and ``lost`` (None, or why a kernel's sticky
    fault lost it: CUDA and HIP set it).  ``kind`` (``cuda``), ``label`` (``CUDA``) and ``unavailable`` (the runtime's
    exception) make the errors."""

    def __init__(self, discover, kind, label, device_type, unavailable):
        self.discover, self.kind, self.label = discover, kind, label
        self.device_type, self.unavailable = device_type, unavailable
        self.lock = threading.RLock()
        self._state = None

    def state(self) -> tuple:
        with self.lock:
            if self._state is None:
                self._state = self.discover()
            return self._state

    def reset(self):
        """Forget the devices found (the next call looks again); for tests."""
        with self.lock:
            self._state = None

    def found(self) -> list:
        return self.state()[1]

    def available(self) -> bool:
        """Whether a usable device is here (never raises): one found, and not lost to a sticky
        error (a kernel's fault, ``lost``)."""
        return any(d.lost is None for d in self.state()[1])

    def reason(self):
        """Why there is no device, with what to install, or why each found was lost; None when
        there is one."""
        _, devs, reason = self.state()
        if devs and not self.available():
            return f"{self.label} is not available: " + "; ".join(d.lost for d in devs)
        return reason

    def listing(self) -> list:
        """[(a device's ``label``, ``kind:<index>``)] of the usable devices; empty if none."""
        return [(d.label, f"{self.kind}:{d.index}") for d in self.state()[1]
                if d.lost is None]

    def index(self, device) -> int:
        article = "an" if self.label[0] in "AEIOU" else "a"
        return device_index(device, self.kind, f"{article} {self.label}", self.device_type)

    def describe(self, device=None):
        """The device ``device`` names as found, nothing made for it (keys need no context);
        the runtime's unavailable error if there is none, ValueError past the last."""
        if isinstance(device, self.device_type):
            return device
        index = self.index(device)
        _, devs, reason = self.state()
        if not devs:                # a refusal of the device asked for: its frames are not the user's
            raise refusal(self.unavailable(reason))
        if index >= len(devs):
            raise no_such_device(self.label, self.kind, index, ((d.index, d.name) for d in devs))
        return devs[index]

    def get(self, device=None):
        """``describe(device)``, opened; the runtime's unavailable error for a device lost to a
        sticky error."""
        d = self.describe(device)
        if d.lost is not None:
            raise refusal(self.unavailable(d.lost))
        with self.lock:
            return d.open()
