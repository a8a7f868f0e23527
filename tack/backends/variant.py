"""What the dispatcher hands a runtime to make a launchable variant (``Signature``), and the
parts every variant shares: the bounds error of debug mode (``BoundsReport``) and the grid check
of the arrays indexed by the thread index, or at a constant index, on every point (``tidx``:
``encode_tidx`` and ``decode_tidx``; ``tack.gridcheck`` finds them at compile time;
``GridCheck`` makes it before each launch, on the CPU and on every device alike).  The
device runtimes' own variant is ``device_variant``'s, which a CPU launch never imports.

Light to import (no NumPy, no compiler): the warm path makes its variants with it.
"""


def int_argument_hint(type_name: str, value) -> str:
    """What a refusal of the scalar argument ``value`` for a parameter of type ``type_name``
    adds: a positive Python int past int64 is refused as an int64 (a Python int's type), and
    ``np.uint64`` is how to pass one up to 2**64 - 1; '' for anything else."""
    if type_name == "int64" and type(value) is int and value > 0:
        return "; a Python int argument is int64: pass np.uint64(...) for one up to 2**64 - 1"
    return ""


def encode_tidx(checks) -> str:
    """A variant's ``tidx`` metadata: ``gridcheck.tid_indexed``'s list as text, space-separated
    items: ``param.axis.dim.offset`` (indexed by the thread index of grid dimension ``dim``),
    ``param.axis.-1.offset.k`` (at the constant index ``k``) or ``-1.axis.dim.offset.extent.name``
    (the ``tack.constant`` array ``name``, of ``extent`` elements along ``axis``, indexed by the
    thread index of ``dim``; the name, a Python name or dotted path, comes last and may hold
    dots).  Entries are kept per Tack version, so no other version's text is read; a decoder
    that predates the constants' items would refuse the name, and check nothing, rather than
    misread one."""
    return " ".join(".".join(str(v) for v in c) for c in checks)


def _ints(parts) -> bool:
    return all(p.lstrip("-").isdigit() and len(p) < 12 for p in parts)


def decode_tidx(text) -> list:
    """``encode_tidx``'s text -> the list; [] for none, or for text that is not such a list (an entry
    that predates the field, or a damaged one, checks nothing)."""
    out = []
    for item in (text or "").split():
        if item.startswith("-1."):          # a constant's: -1.axis.dim.offset.extent.name
            parts = item.split(".", 5)
            if len(parts) != 6 or not _ints(parts[1:5]) or not parts[5]:
                return []
            values = (-1,) + tuple(int(v) for v in parts[1:5]) + (parts[5],)
            if not 0 <= values[1] < 4 or not 0 <= values[2] < 3 or values[4] < 0:
                return []
            out.append(values)
            continue
        parts = item.split(".")
        if len(parts) not in (4, 5) or not _ints(parts):
            return []
        values = tuple(int(v) for v in parts)
        p, axis, dim = values[:3]
        if p < 0 or not 0 <= axis < 4 or not (0 <= dim < 3 if len(values) == 4 else dim == -1):
            return []
        out.append(values)
    return out


def applies(check, types) -> bool:
    """Whether the ``tidx`` item ``check`` (``decode_tidx``'s, or ``gridcheck.tid_indexed``'s)
    holds for a variant of the value arguments' Tack ``types``: a ``tack.constant``'s always
    (its extent is in the item), an argument's where that argument is an array with that axis
    (another variant of the same lowered kernel may be given something else there)."""
    p, axis = check[0], check[1]
    if p < 0:
        return True
    from ..types import Array
    return p < len(types) and isinstance(types[p], Array) and axis < types[p].ndim


class Signature:
    """A variant's value arguments as the launch sees them: the kernel's ``name``; per value
    argument (a template is none) its parameter name (``params``), Tack type (``types``) and
    index among the launch's arguments (``arg_index``); the bounds sites of debug mode
    (``sites``, None without it); ``locate(fid)`` -> (file, first line) of a function now."""

    __slots__ = ("name", "params", "types", "arg_index", "sites", "locate")

    def __init__(self, name, params, types, arg_index, sites=None, locate=None):
        self.name, self.params, self.types = name, list(params), list(types)
        self.arg_index, self.sites, self.locate = list(arg_index), sites, locate


class BoundsReport:
    """The IndexError of an out-of-bounds access that debug mode recorded (``err``: the site's
    number, the axis, the index and the extent), at the line where the function is now."""

    name: str
    sites: list
    locate = None

    def raise_bounds_error(self, err):
        site = self.sites[int(err[0]) - 1]
        from ..errors import UNSIGNED_INDEX
        from ..sourcefiles import local
        where = f"{local(site.filename)}:{site.line}"
        if self.locate is not None and site.fid:
            try:
                now = self.locate(site.fid)
            except Exception:                   # noqa: BLE001 - fall back to the recorded line
                now = None
            if now is not None:
                where = f"{now[0]}:{now[1] + site.offset}"
        inside = "" if site.function == self.name.rsplit(".", 1)[-1] else f" in '{site.function}'"
        axis, index = int(err[1]), int(err[2])
        if axis & UNSIGNED_INDEX:               # the index's 64 bits are an unsigned number
            axis, index = axis & ~UNSIGNED_INDEX, index & 0xFFFF_FFFF_FFFF_FFFF
        raise IndexError(f"kernel '{self.name}': index {index} is out of bounds for axis "
                         f"{axis} of '{site.array}' with size {int(err[3])}{inside} "
                         f"({where})")


def refusal(e):
    """``e`` marked as a launch's refusal of what it was given, not a fault: ``tack.launch`` trims
    the frames that checked (``launch._launch_error``)."""
    e.tack_launch_error = True
    return e


def _extent_for(k: int) -> int:
    """The extent an axis needs for the index ``k`` (counted from the end if negative)."""
    return k + 1 if k >= 0 else -k


class GridCheck:
    """The check a launch makes before anything runs, for the cost of comparing a few ints:
    the grid must not run past an array the kernel indexes by the thread index on every point
    (``tidx``), nor past a ``tack.constant`` array indexed so (its extent is in ``tidx``), and
    an array must hold the element a constant index of every point names (``a[0]`` of an empty
    one, ``p[i, 2]`` of one with two columns).  Made on the CPU and on
    every device alike: on a device such an access would write or read past the end of the
    array's memory.  (Debug mode checks every access as it runs instead, and says which index
    of which line.)  ``grid_check`` makes one, or None where there is nothing to check."""

    __slots__ = ("name", "locate", "checks", "_grid", "_fixed", "_limits")

    def __init__(self, name, locate, checks):
        self.name, self.locate = name, locate
        # [(argument, parameter, axis, grid dimension, line offset, k: a constant index's,
        #   extent: a tack.constant's (argument None, parameter its name))]
        self.checks = checks
        self._grid = tuple((i, axis, dim) for i, _, axis, dim, _, k, n in checks
                           if k is None and n is None)
        self._fixed = tuple((i, axis, _extent_for(k)) for i, _, axis, _, _, k, _ in checks
                            if k is not None)
        self._limits = tuple((dim, n) for _, _, _, dim, _, _, n in checks if n is not None)

    def too_large(self, args, d) -> bool:
        """Whether the grid ``d`` (three extents) runs past one of the arrays or constants, or an
        array is shorter than a constant index of every point needs it along that axis."""
        for i, axis, dim in self._grid:
            if args[i].shape[axis] < d[dim]:
                return True
        for i, axis, extent in self._fixed:
            if args[i].shape[axis] < extent:
                return True
        for dim, extent in self._limits:
            if extent < d[dim]:
                return True
        return False

    def refuse(self, args, dims):
        """Raise the IndexError of ``error``, as a launch's ``refusal``."""
        raise refusal(self.error(args, dims))

    def error(self, args, dims) -> IndexError:
        """The first array the grid ``dims`` runs past, or too short for a constant index of
        every point, named with the access that would run past it."""
        for i, param, axis, dim, off, k, n in self.checks:
            extent = n if n is not None else args[i].shape[axis]
            if extent < (dims[dim] if k is None else _extent_for(k)):
                break
        where = ""
        if self.locate is not None and off >= 0:
            try:
                now = self.locate(self.name)
            except Exception:                   # noqa: BLE001 - the message without the line
                now = None
            if now is not None:
                where = f" ({now[0]}:{now[1] + off})"
        if k is not None:
            return IndexError(
                f"kernel '{self.name}': index {k} is out of bounds for '{param}': the kernel "
                f"indexes '{param}' on axis {axis} at {k} at every point{where}, and '{param}' has "
                f"{extent} elements along that axis; nothing was run (TACK_DEBUG=1 checks every "
                "access as it runs)")
        tid = "tack.tid()" if len(dims) == 1 else f"tack.tid()[{dim}]"
        what = f"the constant '{param}'" if n is not None else f"'{param}'"
        return IndexError(
            f"kernel '{self.name}': the grid {dims} runs past {what}: the kernel indexes "
            f"'{param}' on axis {axis} by {tid} at every point{where}, and '{param}' has "
            f"{extent} elements along that axis, the grid {dims[dim]}. Launch over {param}.shape, "
            "or guard the access with an 'if'; nothing was run (TACK_DEBUG=1 checks every "
            "access as it runs)")


def grid_check(sig: Signature, tidx):
    """The ``GridCheck`` of a variant of ``sig`` whose metadata's ``tidx`` is ``tidx``; None
    where it has nothing to check, or in debug mode (``sig.sites``), which checks every access
    itself."""
    if not tidx or sig.sites is not None:
        return None
    params, arg_index = sig.params, sig.arg_index
    checks = [(arg_index[c[0]], params[c[0]], c[1], c[2], c[3], c[4] if c[2] < 0 else None, None)
              if c[0] >= 0 else (None, c[5], c[1], c[2], c[3], None, c[4])
              for c in decode_tidx(tidx) if applies(c, sig.types)]
    return GridCheck(sig.name, sig.locate, checks) if checks else None
