"""The Metal runtime side (docs/level-zero-and-metal.md): what a warm process needs for
``device="metal"``: its target keys and the launch parameters of the Metal kernel ABI.

Loading and launching need macOS with Metal and pyobjc (``pip install pyobjc-framework-Metal``);
elsewhere ``available()`` is False and ``load``/``launch``/``to_device`` raise
``MetalUnavailable('Metal needs macOS and pyobjc ...')``.  The MSL source an artifact holds is
compiled by Metal when it is loaded (``newLibraryWithSource:options:error:`` with fast math
off); nothing here compiles it ahead of time (``xcrun metal`` is macOS-only).

``pack_params(argspec, args, dims)`` is the one writer of the ``constant`` params struct the
emitter declares (``tack.backends.metal.params_layout``): per value argument an array's
extents (unless static) and element strides (layout A), or a scalar; then the grid.
"""

from __future__ import annotations

import struct
import sys

import numpy as np

KIND = "metal"
DEFAULT_FAMILY = "apple"
INSTALL_HINT = "Metal needs macOS and pyobjc (pip install pyobjc-framework-Metal)"


class MetalUnavailable(RuntimeError):
    """Not on macOS, or pyobjc's Metal binding is missing: no Metal device."""


class MetalError(RuntimeError):
    """MSL that Metal does not compile, or a launch Metal refuses."""


def unavailable_reason() -> str | None:
    """Why there is no Metal device here (None on macOS with pyobjc's Metal). Never raises."""
    if sys.platform != "darwin":
        return f"{INSTALL_HINT}; this is {sys.platform}"
    try:
        import Metal  # noqa: F401  (pyobjc-framework-Metal)
    except Exception as e:                  # noqa: BLE001 - any import failure is the same answer
        return f"{INSTALL_HINT}; import Metal failed ({e})"
    try:
        if Metal.MTLCreateSystemDefaultDevice() is None:
            return f"{INSTALL_HINT}; this Mac reports no Metal device"
    except Exception as e:                  # noqa: BLE001
        return f"{INSTALL_HINT}; MTLCreateSystemDefaultDevice failed ({e})"
    return None


def available() -> bool:
    return unavailable_reason() is None


def devices() -> list:
    return [] if not available() else [("Metal system default device", f"{KIND}:0")]


def _need():
    reason = unavailable_reason()
    if reason is not None:
        raise MetalUnavailable(reason)
    raise MetalUnavailable("Tack's Metal runtime does not load or launch kernels yet (the MSL "
                           "emitter and the ABI are done; the pyobjc driving is not)")


def get_device(device=None):
    _need()


def toolchain_target(device=None) -> str:
    return f"{KIND}:{DEFAULT_FAMILY}"


def candidate_keys(device=None) -> list:
    """MSL source is compiled by the driver, so one key serves every Apple GPU: ``metal:apple``."""
    from .metal import key_for
    return [(f"{KIND}:{DEFAULT_FAMILY}", key_for(f"{KIND}:{DEFAULT_FAMILY}"))]


def lookup_keys(device=None) -> list:
    """The target keys of ``candidate_keys``, in its order (what the cache looks up)."""
    return [k for _, k in candidate_keys(device)]


def host_key(device=None) -> str:
    return candidate_keys(device)[0][1]


def site_candidates(host=None) -> list:
    return candidate_keys()


def load(payload: bytes, meta: dict, device=None):
    """MSL source -> a compute pipeline (macOS only: MetalUnavailable elsewhere)."""
    _need()


def launch(kernel, meta, args, dims, debug=False, block=None):
    _need()


def to_device(array, device=None):
    _need()


_FORMAT = {"bool": "?", "int": "i", "uint": "I", "long": "q", "ulong": "Q", "float": "f"}


def pack_params(argspec, args, dims) -> bytes:
    """The params struct's bytes for ``args`` (one per value argument: arrays as NumPy arrays
    whose memory the kernel's buffer holds, strides in elements of that memory) over ``dims``."""
    from .. import types as T
    from .metal import params_layout
    types = [T.parse_spec(s[0] if isinstance(s, (list, tuple)) else s) for s in argspec]
    if len(args) != len(types):
        raise TypeError(f"the kernel takes {len(types)} value arguments, got {len(args)}")
    members, size = params_layout(types)
    values = {}
    for k, (t, a) in enumerate(zip(types, args)):
        if isinstance(t, T.Array):
            a = np.asarray(a)
            if a.dtype != t.dtype.dtype or a.ndim != t.ndim:
                raise TypeError(f"argument {k} is {a.dtype}[{a.ndim}-d]; the kernel takes {T.spec(t)}")
            for d in range(t.ndim):
                values[f"a{k}_n{d}"] = a.shape[d]
                values[f"a{k}_s{d}"] = a.strides[d] // a.itemsize
        elif t.kind == "b":
            values[f"a{k}"] = bool(a)
        elif t.kind == "f":
            values[f"a{k}"] = float(a)
        else:
            values[f"a{k}"] = int(a)
    grid = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    values.update(n0=grid[0], n1=grid[1], n2=grid[2])
    out = bytearray(size)
    for name, ty, off in members:
        struct.pack_into("<" + _FORMAT[ty], out, off, values[name])
    return bytes(out)
