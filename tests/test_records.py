"""tack.records.fields: what collections.namedtuple gives, without exec, in the class it decorates."""

import collections
import pickle

import pytest

from tack.records import fields


@fields(("x", "y", "z"), defaults=(0,))
class Point(tuple):
    __slots__ = ()


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
    assert Point.__mro__ == (Point, tuple, object)              # one class: no record between


@pytest.mark.parametrize("args,kwargs,message", [
    ((), {}, "Point\\(\\) missing required argument 'x'"),
    ((1, 2, 3, 4), {}, "takes 3 arguments but 4 were given"),
    ((1, 2), {"x": 1}, "multiple values for argument 'x'"),
    ((1, 2), {"w": 1}, "unexpected keyword argument 'w'"),
])
def test_bad_construction_names_the_argument(args, kwargs, message):
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)


@fields(("a", "b"))
class Sub(tuple):
    __slots__ = ()

    def total(self):
        return self.a + self.b

    def __str__(self):
        return f"<{self.a} {self.b}>"


def test_own_methods_pickle_and_match():
    s = Sub(1, 2)
    assert s.total() == 3 and repr(s) == "Sub(a=1, b=2)" and str(s) == "<1 2>"
    assert pickle.loads(pickle.dumps(s)) == s and type(pickle.loads(pickle.dumps(s))) is Sub
    match s:
        case Sub(a, b):
            assert (a, b) == (1, 2)
    with pytest.raises(AttributeError):
        s.c = 1                                  # slots: no instance dict


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
