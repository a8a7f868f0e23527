"""tack.records.record: what collections.namedtuple gives, without exec."""

import collections
import pickle

import pytest

from tack.records import fields, record

Point = record("Point", ("x", "y", "z"), defaults=(0,))
Ref = collections.namedtuple("Point", "x y z", defaults=(0,))


@pytest.mark.parametrize("args,kwargs", [((1, 2, 3), {}), ((1, 2), {}), ((1,), {"y": 5}),
                                         ((), {"z": 1, "y": 2, "x": 3})])
def test_same_as_namedtuple(args, kwargs):
    p, r = Point(*args, **kwargs), Ref(*args, **kwargs)
    assert tuple(p) == tuple(r) and repr(p) == repr(r) and hash(p) == hash(r)
    assert (p.x, p.y, p.z) == (r.x, r.y, r.z)
    assert p._asdict() == r._asdict() and p._replace(y=9) == r._replace(y=9)
    assert type(p._replace(y=9)) is Point
    assert Point._fields == Ref._fields and Point._field_defaults == Ref._field_defaults


@pytest.mark.parametrize("args,kwargs,message", [
    ((), {}, "missing required argument 'x'"),
    ((1, 2, 3, 4), {}, "takes 3 arguments but 4 were given"),
    ((1, 2), {"x": 1}, "multiple values for argument 'x'"),
    ((1, 2), {"w": 1}, "unexpected keyword argument 'w'"),
])
def test_bad_construction_names_the_argument(args, kwargs, message):
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)


class Sub(record("Sub", ("a", "b"))):
    __slots__ = ()

    def total(self):
        return self.a + self.b


def test_subclass_methods_pickle_and_match():
    s = Sub(1, 2)
    assert s.total() == 3 and repr(s) == "Sub(a=1, b=2)"
    assert pickle.loads(pickle.dumps(s)) == s and type(pickle.loads(pickle.dumps(s))) is Sub
    match s:
        case Sub(a, b):
            assert (a, b) == (1, 2)
    with pytest.raises(AttributeError):
        s.c = 1                                  # slots: no instance dict


@fields(("x", "y", "z"), defaults=(0,))
class Decorated(tuple):
    __slots__ = ()

    def norm1(self):
        return abs(self.x) + abs(self.y) + abs(self.z)

    def __str__(self):
        return f"<{self.x} {self.y} {self.z}>"


@pytest.mark.parametrize("args,kwargs", [((1, 2, 3), {}), ((1, 2), {}), ((1,), {"y": 5}),
                                         ((), {"z": 1, "y": 2, "x": 3})])
def test_decorated_class_is_the_same_record_in_one_class(args, kwargs):
    d, p = Decorated(*args, **kwargs), Point(*args, **kwargs)
    assert tuple(d) == tuple(p) and hash(d) == hash(p) and d._asdict() == p._asdict()
    assert repr(d) == repr(p).replace("Point", "Decorated") and str(d) == f"<{d.x} {d.y} {d.z}>"
    assert type(d._replace(y=9)) is Decorated and d._replace(y=9).y == 9
    assert Decorated.__mro__ == (Decorated, tuple, object)          # no record class between
    assert Decorated._fields == Point._fields and Decorated._field_defaults == Point._field_defaults
    assert pickle.loads(pickle.dumps(d)) == d and type(pickle.loads(pickle.dumps(d))) is Decorated
    match d:
        case Decorated(x, y, z):
            assert (x, y, z) == tuple(d)
    with pytest.raises(AttributeError):
        d.w = 1
    with pytest.raises(TypeError, match="Decorated\\(\\) missing required argument 'x'"):
        Decorated()


def test_decorator_refuses_what_it_cannot_make_a_record():
    with pytest.raises(TypeError, match="tuple subclass with __slots__"):
        @fields(("a",))
        class NotATuple:
            __slots__ = ()
    with pytest.raises(TypeError, match="tuple subclass with __slots__"):
        @fields(("a",))
        class NoSlots(tuple):
            pass
    with pytest.raises(TypeError, match="defines 'a', one of its fields"):
        @fields(("a",))
        class Clash(tuple):
            __slots__ = ()

            def a(self):
                return 1
