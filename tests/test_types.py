"""Type promotion (tack.types.promote) against NumPy 2's rules for scalars."""

import itertools
import warnings

import numpy as np
import pytest

from tack import types as T

NUMERIC = ["int32", "int64", "uint32", "uint64", "float32", "float64"]
ALL = ["bool"] + NUMERIC


@pytest.mark.parametrize("a, b", list(itertools.product(ALL, ALL)))
def test_strong_promotion_matches_numpy(a, b):
    """Two typed values promote to numpy.result_type of their dtypes."""
    want = np.result_type(np.dtype(a), np.dtype(b)).name
    assert T.promote(T.SCALARS[a], T.SCALARS[b]).name == want
    assert not T.promote(T.SCALARS[a], T.SCALARS[b]).weak


def _numpy_weak(name, literal):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return (np.dtype(name).type(1) * literal).dtype.name


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("weak, literal", [(T.WEAK_INT, 2), (T.WEAK_FLOAT, 2.0)], ids=["int", "float"])
def test_weak_literal_promotion_matches_nep50(name, weak, literal):
    """A Python literal is weak: typed value op literal has the type NumPy 2 gives it, on either side."""
    want = _numpy_weak(name, literal)
    assert T.promote(T.SCALARS[name], weak).strong().name == want
    assert T.promote(weak, T.SCALARS[name]).strong().name == want


def test_weak_with_weak_stays_weak():
    """Two literals give a weak result: int with int is a weak int, anything with a float a weak float."""
    assert T.promote(T.WEAK_INT, T.WEAK_INT) == T.WEAK_INT
    assert T.promote(T.WEAK_INT, T.WEAK_FLOAT) == T.WEAK_FLOAT


def test_typeof_array():
    """typeof_array records dtype, rank, layout and writability (the shape only when static),
    and rejects unsupported arrays."""
    a = np.zeros((3, 4), np.float32)
    t = T.typeof_array(a)
    assert t == T.Array(T.float32, 2, "C", True, None) and t.ndim == 2 and t.shape is None
    assert T.typeof_array(a, static=True) == T.Array(T.float32, 2, "C", True, (3, 4))
    assert T.typeof_array(a.T).layout == "F"
    assert T.typeof_array(a[::-1]).layout == "A"
    assert T.typeof_array(a[:, ::2]).layout == "A"
    assert T.typeof_array(np.zeros(5)).layout == "C"             # C and F both: C
    ro = a.copy()
    ro.flags.writeable = False
    assert T.typeof_array(ro).writable is False
    assert T.typeof_array(np.zeros(3, ">f8")) is None
    assert T.typeof_array(np.zeros(3, np.complex128)) is None
    assert T.typeof_array(np.zeros((1,) * 5)) is None


def test_spec_round_trip():
    """spec() text holds dtype, rank, layout, writability and a static shape; parse_spec reads it
    back, and refuses the specs of older Tacks (shapes and strides)."""
    for t in (T.float32, T.uint64, T.Array(T.float32, 3, "C"), T.Array(T.int64, 2, "F", False),
              T.Array(T.bool_ if hasattr(T, "bool_") else T.boolean, 1, "A"),
              T.Array(T.float64, 2, "C", True, (21, 33)), T.Array(T.int32, 4, "A", False, (2, 3, 4, 5))):
        assert T.parse_spec(T.spec(t)) == t
    assert T.spec(T.Array(T.float32, 3, "C")) == "array:float32:3:C:w"
    assert T.spec(T.Array(T.float32, 2, "F", False, (4, 5))) == "array:float32:2:F:r:4x5"
    for bad in ("array:float32:21x21x21:441x21x1:w", "array:float32:3:X:w", "array:float32:2:C:w:4",
                "array:float32:5:C:w", "array:float16:1:C:w", "float16"):
        with pytest.raises(ValueError):
            T.parse_spec(bad)


def test_types_hash_and_compare():
    """Types are values: equal types are equal and hash alike, so they can key caches."""
    assert T.Array(T.float64, 1, "C") == T.Array(T.float64, 1, "C")
    assert T.Array(T.float64, 1, "C") != T.Array(T.float64, 1, "F")
    assert len({T.Scalar("int32"), T.Scalar("int32"), T.int32}) == 1
    assert T.Tuple((T.int64, T.float32)) != T.Tuple((T.float32, T.int64))
