"""Named tuples without ``exec``: the record classes ``import tack`` defines.

``typing.NamedTuple`` and ``collections.namedtuple`` compile each class's ``__new__`` from
source text, about 35-60 µs a class; ``import tack`` defines seven (the argument types, a
device, a bounds-check site), most of a millisecond of every process start.  ``record`` makes
the same thing from plain functions: a tuple subclass with a property per field, defaults,
keyword construction, ``_fields``, ``_replace``, ``_asdict``, pickling and
``namedtuple``'s own ``repr`` (``Scalar(name='float64', weak=False)``), so text made from
these types reads as it did.  Subclass the result to add methods::

    class Scalar(record("Scalar", ("name", "weak"), defaults=(False,))):
        __slots__ = ()
"""

from __future__ import annotations

from operator import itemgetter

_NOTHING = object()


def record(typename: str, fields: tuple, defaults: tuple = ()):
    """A tuple class named ``typename`` with the named ``fields``; the last ``len(defaults)``
    fields take those defaults."""
    fields, defaults = tuple(fields), tuple(defaults)
    n, first_default = len(fields), len(fields) - len(defaults)
    position = {f: i for i, f in enumerate(fields)}

    def __new__(cls, *args, **kwargs):
        if len(args) == n and not kwargs:
            return tuple.__new__(cls, args)
        if len(args) > n:
            raise TypeError(f"{typename}() takes {n} arguments but {len(args)} were given")
        values = list(args) + [_NOTHING] * (n - len(args))
        for name, value in kwargs.items():
            i = position.get(name)
            if i is None:
                raise TypeError(f"{typename}() got an unexpected keyword argument {name!r}")
            if values[i] is not _NOTHING:
                raise TypeError(f"{typename}() got multiple values for argument {name!r}")
            values[i] = value
        for i in range(len(args), n):
            if values[i] is _NOTHING:
                if i < first_default:
                    raise TypeError(f"{typename}() missing required argument {fields[i]!r}")
                values[i] = defaults[i - first_default]
        return tuple.__new__(cls, values)

    body = "(" + ", ".join(f"{f}=%r" for f in fields) + ")"

    def __repr__(self):
        return type(self).__name__ + body % tuple(self)

    def _replace(self, **changes):
        return type(self)(**dict(zip(fields, self), **changes))

    def _asdict(self):
        return dict(zip(fields, self))

    def __getnewargs__(self):
        return tuple(self)

    namespace = {"__slots__": (), "__new__": __new__, "__repr__": __repr__,
                 "_replace": _replace, "_asdict": _asdict, "__getnewargs__": __getnewargs__,
                 "_fields": fields, "_field_defaults": dict(zip(fields[first_default:], defaults)),
                 "__match_args__": fields}
    namespace.update((f, property(itemgetter(i), doc=f"field {i}: {f}")) for i, f in enumerate(fields))
    return type(typename, (tuple,), namespace)
