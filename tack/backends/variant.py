"""What the dispatcher hands a runtime to make a launchable variant (``Signature``), and the
parts every variant shares: the bounds error of debug mode (``BoundsReport``) and the grid check
of the arrays indexed by the thread index, or at a constant index, on every point (``tidx``:
``encode_tidx`` and ``decode_tidx``; ``tack.gridcheck`` finds them at compile time).  The
device runtimes' own variant is ``device_variant``'s, which a CPU launch never imports.

Light to import (no NumPy, no compiler): the warm path makes its variants with it.
"""


def encode_tidx(checks) -> str:
    """A variant's ``tidx`` metadata: ``gridcheck.tid_indexed``'s list as text, space-separated
    items: ``param.axis.dim.offset`` (indexed by the thread index of grid dimension ``dim``) or
    ``param.axis.-1.offset.k`` (at the constant index ``k``)."""
    return " ".join(".".join(str(v) for v in c) for c in checks)


def decode_tidx(text) -> list:
    """``encode_tidx``'s text -> the list; [] for none, or for text that is not such a list (an entry
    that predates the field, or a damaged one, checks nothing)."""
    out = []
    for item in (text or "").split():
        parts = item.split(".")
        if len(parts) not in (4, 5) or not all(p.lstrip("-").isdigit() and len(p) < 12
                                               for p in parts):
            return []
        values = tuple(int(v) for v in parts)
        p, axis, dim = values[:3]
        if p < 0 or not 0 <= axis < 4 or not (0 <= dim < 3 if len(values) == 4 else dim == -1):
            return []
        out.append(values)
    return out


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
