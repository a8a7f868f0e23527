"""tack.argtypes: a launch's arguments typed, what every compile starts from."""

import numpy as np
import pytest

import tack
import tack.aot
from tack import types as T
from tack.argtypes import typed_args
from tack.compiler import lower, prepare


class Twice:
    @staticmethod
    def f(x):
        return x * 2.0


@tack.kernel
def k_policy(scale, policy, x, out):
    i = tack.tid()
    out[i] = policy.f(x[i]) * scale


def test_typed_args_split_templates_from_values():
    """A class is a template binding; the other arguments keep their types, names and positions."""
    x = np.zeros(4, np.float32)
    sig = typed_args(k_policy, (1.5, Twice, x, x))
    assert isinstance(sig.argtypes[1], T.Template) and sig.argtypes[1].qualname == "Twice"
    assert sig.templates == {"policy": Twice}
    assert sig.value_types == (T.float64, T.Array(T.float32, 1, "C", True), T.Array(T.float32, 1, "C", True))
    assert sig.value_params == ["scale", "x", "out"] and sig.arg_index == [0, 2, 3]


def test_prepare_lowers_once_per_template_binding():
    """The preamble's lowered kernel is the kernel's memoized one, and its key names the binding."""
    x = np.zeros(4, np.float32)
    first, again = prepare(k_policy, (1.5, Twice, x, x)), prepare(k_policy, (2.5, Twice, x, x))
    assert first.lowered is again.lowered is lower(k_policy, {"policy": Twice})
    assert first.lowered_key == again.lowered_key
    out = np.zeros(4, np.float32)
    tack.launch(k_policy, 4, (1.5, Twice, np.arange(4, dtype=np.float32), out))
    np.testing.assert_array_equal(out, [0.0, 3.0, 6.0, 9.0])


@pytest.mark.parametrize("compile_with", [
    lambda args: tack.launch(k_policy, 4, args),
    lambda args: tack.aot.compile(k_policy, "cpu", args),
    lambda args: typed_args(k_policy, args),
])
def test_every_caller_refuses_a_wrong_argument_count_alike(compile_with):
    """A launch, tack.aot and tack.argtypes itself say the same thing of a missing argument."""
    with pytest.raises(TypeError) as e:
        compile_with((1.5, Twice, np.zeros(4)))
    assert str(e.value) == "kernel 'k_policy' takes 4 arguments (scale, policy, x, out), got 3"


def test_a_namedtuple_of_arguments_launches_and_star_parameters_are_named():
    """``args`` as a namedtuple (a tuple) was refused ("args must be a tuple ..., not Args");
    a kernel with a keyword-only parameter launched with every argument was told only that it
    "takes 1 arguments", not why (the front end's refusal came after the count)."""
    import collections
    Args = collections.namedtuple("Args", "scale policy x out")
    out = np.zeros(4, np.float32)
    tack.launch(k_policy, 4, Args(1.5, Twice, np.arange(4, dtype=np.float32), out))
    np.testing.assert_array_equal(out, [0.0, 3.0, 6.0, 9.0])
    for src, what in (("def k(y, *, v):\n", "keyword-only parameter 'v'"),
                      ("def k(y, *rest):\n", "*args or **kwargs")):
        ns = {}
        exec(compile(src + "    y[0] = 1.0\n", "<test>", "exec"), ns)
        with pytest.raises(TypeError) as e:
            tack.launch(tack.kernel(ns["k"]), 1, (np.zeros(1), 1.0))
        assert str(e.value) == (f"kernel 'k' takes 1 arguments (y), got 2; it has {what}, which "
                                "Tack kernels cannot take: they take plain positional parameters "
                                "only"), str(e.value)


@tack.kernel
def k_double(x, out):
    i = tack.tid()
    out[i] = x[i] * 2


def test_a_masked_array_is_refused_not_run_as_if_unmasked(tmp_path):
    """A NumPy masked array (what netCDF4 reads a variable with fill values as) was run as its
    data alone: the kernel read the values under the mask (a fill value, say) as any others, and
    wrote under it, silently.  It is refused, as an input and as an output, saying what to pass,
    also after a launch with a plain array of the same dtype (whose variant it would have
    reused); an ndarray subclass without a mask (np.memmap) still runs, writing through."""
    x = np.arange(4.0)
    out = np.zeros(4)
    tack.launch(k_double, dim=4, args=(x, out))             # the plain arrays' variant, made first
    masked = np.ma.masked_array(x, mask=[False, True, False, False])
    for args, param in (((masked, out), "x"), ((x, np.ma.masked_array(np.zeros(4))), "out")):
        with pytest.raises(TypeError, match=f"argument '{param}' is a NumPy masked array.*"
                                            f"pass {param}.data to read and write"):
            tack.launch(k_double, dim=4, args=args)
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]
    tack.launch(k_double, dim=4, args=(masked.filled(-1.0), out))
    assert out.tolist() == [0.0, -2.0, 4.0, 6.0]
    mapped = np.memmap(tmp_path / "out.bin", dtype=np.float64, mode="w+", shape=(4,))
    tack.launch(k_double, dim=4, args=(x, mapped))
    mapped.flush()
    assert np.fromfile(tmp_path / "out.bin").tolist() == [0.0, 2.0, 4.0, 6.0]


class _ShapeLiar(np.ndarray):
    """An ndarray subclass whose ``shape``, ``strides`` and ``dtype`` say more than its memory."""

    @property
    def shape(self):
        return (1_000_000,)

    @property
    def strides(self):
        return (0,)

    @property
    def dtype(self):
        return np.dtype(np.float32)


def test_an_ndarray_subclass_is_launched_as_its_own_memory_says_not_as_its_class_says():
    """A subclass whose ``shape`` said a million elements over an array of four passed the grid
    check, and the kernel wrote past the array's memory (the process crashed).  A subclass is
    launched as a plain ndarray over its memory: the grid past its four elements is refused,
    naming it; a launch over its real shape runs, writing through, again from the variant made
    (twice: the second launch takes the kernel's cached variant)."""
    x = np.arange(4.0)
    liar = np.zeros(4).view(_ShapeLiar)
    with pytest.raises(IndexError, match="runs past 'out'.*'out' has 4 elements along that axis"):
        tack.launch(k_double, dim=1_000_000, args=(np.arange(1_000_000.0), liar))
    for scale in (1.0, 3.0):
        tack.launch(k_double, dim=4, args=(x * scale, liar))
        assert np.ndarray.view(liar, np.ndarray).tolist() == (x * scale * 2).tolist()



class _StrideLiar(np.ndarray):
    """An ndarray subclass whose ``strides`` say a stride far past its memory."""

    @property
    def strides(self):
        return (8 * 10**7,)


@tack.kernel(static_shape="out")
def k_fill_static(out):
    i = tack.tid()
    out[i] = 7.0


def test_a_subclass_after_a_plain_array_of_a_static_shape_runs_as_its_memory_says():
    """With the shape compiled in, a subclass's key was a plain ndarray's (its class left out):
    launched after a plain strided array, it took that array's variant, unwrapped, which read
    the class's ``strides`` (a crash).  Its key keeps its class: it gets a variant of its own,
    run over its memory."""
    plain = np.zeros(8)[::2]
    tack.launch(k_fill_static, dim=4, args=(plain,))
    base = np.zeros(8)
    liar = base[::2].view(_StrideLiar)
    tack.launch(k_fill_static, dim=4, args=(liar,))
    assert plain.tolist() == [7.0] * 4 and base.tolist() == [7.0, 0.0] * 4


def test_an_array_tack_cannot_take_is_told_by_its_parameters_name_and_the_copy_it_writes():
    """A big-endian output's and a byte-strided one's refusals said to pass
    ``a.astype(...)`` / ``np.ascontiguousarray(a)``, naming no parameter of the kernel, and not
    that a kernel writing to a copy writes to the copy: they name the parameter and say so."""
    byte_strided = np.ndarray((4,), np.float64, np.zeros(40, np.uint8), 1, (9,))
    for out in (np.zeros(4, ">f8"), byte_strided):
        with pytest.raises(TypeError) as e:
            tack.launch(k_double, dim=4, args=(np.arange(4.0), out))
        msg = str(e.value)
        assert "argument 'out'" in msg and "(out" in msg and "a.astype" not in msg, msg
        assert "writes to the copy: copy the results back (out[...] = copy)" in msg, msg


def test_a_masked_array_of_a_static_shape_is_refused_after_a_plain_array():
    """With the shape compiled in, a masked array's key was a plain array's: after a plain
    launch it ran that variant, reading and writing the values under its mask.  It keeps its
    class in its key, and is refused."""
    x = np.arange(4.0)
    out = np.zeros(4)
    tack.launch(k_double_static, dim=4, args=(x, out))
    with pytest.raises(TypeError, match="is a NumPy masked array"):
        tack.launch(k_double_static, dim=4, args=(np.ma.masked_array(x, mask=[0, 1, 0, 0]), out))


@tack.kernel(static_shape=True)
def k_double_static(x, out):
    i = tack.tid()
    out[i] = x[i] * 2
