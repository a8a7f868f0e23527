"""Named tuples without ``exec``: the record classes ``import tack`` defines.

``typing.NamedTuple`` and ``collections.namedtuple`` compile each class's ``__new__`` from
source text, about 35-60 µs a class; ``import tack`` defines seven (the argument types, a
device, a bounds-check site), most of a millisecond of every process start.  ``fields``
makes the same thing from plain functions, in the tuple subclass it decorates (one class: a
record made first and subclassed took three times as long): a property per field, defaults,
keyword construction, ``_fields``, ``_replace``, ``_asdict``, pickling and ``namedtuple``'s
own ``repr`` (``Scalar(name='float64', weak=False)``), so text made from these types reads as
it did::

    @fields(("name", "weak"), defaults=(False,))
    class Scalar(tuple):
        __slots__ = ()
"""

from operator import itemgetter

_NOTHING = object()


def fields(names: tuple, defaults: tuple = ()):
    """A class decorator: the ``tuple`` subclass it decorates (with ``__slots__ = ()``) becomes a
    record with the named ``names``, the last ``len(defaults)`` taking those defaults; its own
    methods are kept."""
    def decorate(cls):
        if tuple not in cls.__bases__ or "__slots__" not in vars(cls):
            raise TypeError(f"@fields takes a tuple subclass with __slots__, not {cls.__name__}")
        return _fill(cls, names, defaults)
    return decorate


def _fill(cls, fields, defaults):
    """``cls`` (a tuple subclass without fields yet) given the ``fields``, as ``fields`` describes."""
    fields, defaults = tuple(fields), tuple(defaults)
    n, first_default = len(fields), len(fields) - len(defaults)
    position = {f: i for i, f in enumerate(fields)}

    def __new__(cls, *args, **kwargs):
        if len(args) == n and not kwargs:
            return tuple.__new__(cls, args)
        if len(args) > n:
            raise TypeError(f"{cls.__name__}() takes {n} arguments but {len(args)} were given")
        values = list(args) + [_NOTHING] * (n - len(args))
        for name, value in kwargs.items():
            i = position.get(name)
            if i is None:
                raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
            if values[i] is not _NOTHING:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            values[i] = value
        for i in range(len(args), n):
            if values[i] is _NOTHING:
                if i < first_default:
                    raise TypeError(f"{cls.__name__}() missing required argument {fields[i]!r}")
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

    own = vars(cls)
    for name, value in (("__new__", staticmethod(__new__)), ("__repr__", __repr__),
                        ("_replace", _replace), ("_asdict", _asdict),
                        ("__getnewargs__", __getnewargs__), ("_fields", fields),
                        ("_field_defaults", dict(zip(fields[first_default:], defaults))),
                        ("__match_args__", fields)):
        if name not in own:                 # the class's own methods win, as a subclass's did
            setattr(cls, name, value)
    for i, f in enumerate(fields):
        if f in own:
            raise TypeError(f"{cls.__name__} defines {f!r}, one of its fields")
        setattr(cls, f, property(itemgetter(i), doc=f"field {i}: {f}"))
    return cls
