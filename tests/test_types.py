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
    """typeof_array records dtype, shape and element strides, and rejects unsupported arrays."""
    a = np.zeros((3, 4), np.float32)
    t = T.typeof_array(a)
    assert t.dtype == T.float32 and t.shape == (3, 4) and t.strides == (4, 1) and t.ndim == 2
    assert T.typeof_array(a.T).strides == (1, 4)
    assert T.typeof_array(a[::-1]).strides == (-4, 1)
    assert T.typeof_array(np.zeros(3, ">f8")) is None
    assert T.typeof_array(np.zeros(3, np.complex128)) is None
    assert T.typeof_array(np.zeros((1,) * 5)) is None


def test_types_hash_and_compare():
    """Types are values: equal types are equal and hash alike, so they can key caches."""
    assert T.Array(T.float64, (3,), (1,)) == T.Array(T.float64, (3,), (1,))
    assert len({T.Scalar("int32"), T.Scalar("int32"), T.int32}) == 1
    assert T.Tuple((T.int64, T.float32)) != T.Tuple((T.float32, T.int64))
