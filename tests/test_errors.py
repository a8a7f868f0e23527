"""Errors users see: CompileError (syntax, names, recursion, types), launch TypeErrors, debug-mode IndexErrors."""

import math

import numpy as np
import pytest

import tack
from tack.compiler import lower

from .util import check_points_at, marked_line

FILE = __file__
PLAIN_GLOBAL = 3
PLAIN_ARRAY = np.arange(4.0)
PLAIN_TUPLE = (1.0, 2.0, 3.0)
WRAPPED = tack.constant(np.arange(4.0))


def plain_python(x):
    return x + 1


# -- unsupported syntax --------------------------------------------------------

@tack.kernel
def k_list(out):
    i = tack.tid()
    xs = [1, 2]  # ERR [1, 2]
    out[i] = xs[0]


@tack.kernel
def k_lambda(out):
    i = tack.tid()
    f = lambda x: x  # ERR lambda
    out[i] = f(i)


@tack.kernel
def k_try(out):
    i = tack.tid()
    try:  # ERR try
        out[i] = 1.0
    except Exception:
        pass


@tack.kernel
def k_dict(out):
    i = tack.tid()
    d = {1: 2}  # ERR {1: 2}
    out[i] = d[1]


@tack.kernel
def k_comprehension(out):
    i = tack.tid()
    s = [j for j in range(3)]  # ERR [j for
    out[i] = s[0]


@tack.kernel
def k_slice(out):
    i = tack.tid()
    out[0:2] = 1.0  # ERR 0:2


@tack.kernel
def k_string(out):
    i = tack.tid()
    s = "text"  # ERR "text"
    out[i] = 1.0


@tack.kernel
def k_is(out):
    i = tack.tid()
    if i is None:  # ERR i is None
        out[i] = 1.0


@tack.kernel
def k_with(out):
    i = tack.tid()
    with open("x"):  # ERR with
        out[i] = 1.0


@tack.kernel
def k_nested_def(out):
    i = tack.tid()
    def inner(x):  # ERR def
        return x
    out[i] = 1.0


@tack.kernel
def k_matmul(a, out):
    i = tack.tid()
    out[i] = a[i] @ a[i]  # ERR a[i] @


@tack.kernel
def k_keyword(out):
    i = tack.tid()
    out[i] = max(i, 2, key=abs)  # ERR max(


@tack.kernel
def k_while_else(out):
    i = tack.tid()
    while i < 0:  # ERR while
        i += 1
    else:
        i = 0
    out[i] = 1.0


@tack.kernel
def k_return_value(out):
    i = tack.tid()
    out[i] = 1.0
    return i  # ERR return


@tack.kernel
def k_range_only(out):
    i = tack.tid()
    r = range(3)  # ERR range(3)
    out[i] = 1.0


SYNTAX_CASES = [
    (k_list, "List"), (k_lambda, "Lambda"), (k_try, "Try"), (k_dict, "Dict"),
    (k_comprehension, "list comprehension"), (k_slice, "slice"), (k_string, "str"), (k_is, "Is"),
    (k_with, "With"), (k_nested_def, "nested 'def'"), (k_matmul, "'@' (matrix multiplication)"),
    (k_keyword, "keyword"), (k_while_else, "else"), (k_return_value, "return"),
    (k_range_only, "range"),
]


@pytest.mark.parametrize("kern, words", SYNTAX_CASES, ids=[k.__name__ for k, _ in SYNTAX_CASES])
def test_unsupported_syntax_is_a_compile_error(kern, words):
    """Syntax outside the language raises CompileError naming the construct, the kernel, the file and line, with a caret."""
    args = (np.zeros(4),) * len(kern.params)
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=4, args=args)
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert words.lower() in msg.lower()


# -- names -----------------------------------------------------------------------

@tack.kernel
def k_unknown_name(out):
    i = tack.tid()
    out[i] = undefined_thing + 1  # noqa: F821  # ERR undefined_thing


@tack.kernel
def k_unwrapped_scalar(out):
    i = tack.tid()
    out[i] = PLAIN_GLOBAL * 2  # ERR PLAIN_GLOBAL


@tack.kernel
def k_unwrapped_array(out):
    i = tack.tid()
    out[i] = PLAIN_ARRAY[i]  # ERR PLAIN_ARRAY


@tack.kernel
def k_unwrapped_tuple(out):
    i = tack.tid()
    out[i] = PLAIN_TUPLE[i]  # ERR PLAIN_TUPLE


@tack.kernel
def k_unwrapped_tuple_value(out):
    i = tack.tid()
    x = PLAIN_TUPLE  # ERR PLAIN_TUPLE
    out[i] = x


@tack.kernel
def k_plain_function(out):
    i = tack.tid()
    out[i] = plain_python(i)  # ERR plain_python


@tack.kernel
def k_calls_kernel(out):
    i = tack.tid()
    k_unknown_name(out)  # ERR k_unknown_name


@tack.kernel
def k_reads_debug(out):
    i = tack.tid()
    out[i] = 1.0 if __debug__ else 2.0  # ERR __debug__


def test_a_builtin_value_is_told_how_to_bind_a_constant_to_it():
    """``__debug__`` was told "wrap it in tack.constant(...) where it is defined": it is defined
    nowhere; the message says to bind a constant to it in the module, naming one."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_reads_debug, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, "k_reads_debug", k_reads_debug, FILE)
    assert "'__debug__' is Python's own bool" in msg and \
        "DEBUG = tack.constant(__debug__)" in msg, msg


def test_unknown_name():
    """A name bound nowhere raises CompileError saying it is not defined, pointing at the name."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_unknown_name, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, "k_unknown_name", k_unknown_name, FILE)
    assert "undefined_thing" in msg and "not defined" in msg


@tack.kernel
def k_builtin_pow(x, out):
    i = tack.tid()
    out[i] = pow(x[i], 2.0)  # ERR pow


@tack.kernel
def k_builtin_divmod(x, out):
    i = tack.tid()
    q, r = divmod(x[i], 3.0)  # ERR divmod
    out[i] = q + r


@tack.kernel
def k_builtin_print(x, out):
    i = tack.tid()
    print(x[i])  # ERR print


@tack.kernel
def k_builtin_reversed(x, out):
    i = tack.tid()
    for j in reversed(range(2)):  # ERR reversed
        out[j] = x[i]


@tack.kernel
def k_numpy_sum(x, out):
    i = tack.tid()
    out[i] = np.sum(x)  # ERR np.sum


@tack.kernel
def k_numpy_ufunc_tack_lacks(x, out):
    i = tack.tid()
    out[i] = np.exp2(x[i])  # ERR np.exp2


@tack.kernel
def k_builtin_sum(x, out):
    i = tack.tid()
    out[i] = sum(x)  # ERR sum


@tack.kernel
def k_builtin_any(x, out):
    i = tack.tid()
    out[i] = any(x)  # ERR any


@tack.kernel
def k_builtin_sorted(x, out):
    i = tack.tid()
    out[i] = sorted(x)[0]  # ERR sorted


NUMPY_HINT = "for a sum, a product or any reduction over an array, loop over its elements"


@pytest.mark.parametrize("kern, words", [(k_builtin_pow, "x ** y"), (k_builtin_divmod, "x // y"),
                                         (k_builtin_print, "write it into an array"),
                                         (k_builtin_reversed, "range(n - 1, -1, -1)"),
                                         (k_builtin_sum, NUMPY_HINT),
                                         (k_builtin_any, "test each"),
                                         (k_builtin_sorted, "cannot sort"),
                                         (k_numpy_sum, NUMPY_HINT),
                                         (k_numpy_ufunc_tack_lacks, "np.exp2(x) is 2.0 ** x")],
                         ids=["pow", "divmod", "print", "reversed", "sum", "any", "sorted",
                              "np.sum", "np.exp2"])
def test_a_python_builtin_that_tack_lacks_says_what_to_write(kern, words):
    """``pow(x, y)``, ``divmod`` and ``print`` (Python's builtins, which Numba takes) said
    only "'pow' (builtin_function_or_method) cannot be called"; they name what to write instead.
    So do NumPy's functions kernel code does not take (``np.sum(x)``, a reduction a newcomer
    writes first, said only "'np.sum' (_ArrayFunctionDispatcher) cannot be called"), Python's
    ``sum``, ``any`` and ``sorted`` of an array, and a NumPy ufunc Tack lacks, whose hint is
    to write it with operators, not the reduction's."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.ones(2), np.zeros(2)))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert "cannot be called in Tack code" in msg and words in msg


# -- NumPy's and Python's rounding, clip, sign, where, isclose: what they refuse ---------------

@tack.kernel
def k_round_digits(x, out):
    i = tack.tid()
    out[i] = round(x[i], 2)  # ERR round


@tack.kernel
def k_np_round_of_a_variable(x, out):
    i = tack.tid()
    d = 2
    out[i] = np.round(x[i], d)  # ERR d)


@tack.kernel
def k_np_round_out(x, out):
    i = tack.tid()
    out[i] = np.round(x[i], out=out)  # ERR out=


@tack.kernel
def k_isclose_positional_tolerance(x, out):
    i = tack.tid()
    out[i] = math.isclose(x[i], 1.0, 1e-3)  # ERR math.isclose


@tack.kernel
def k_isclose_unknown_keyword(x, out):
    i = tack.tid()
    out[i] = math.isclose(x[i], 1.0, rtol=1e-3)  # ERR rtol


@tack.kernel
def k_isclose_negative_tolerance(x, out):
    i = tack.tid()
    out[i] = math.isclose(x[i], 1.0, abs_tol=-0.5)  # ERR -0.5


@tack.kernel
def k_isclose_one_argument(x, out):
    i = tack.tid()
    out[i] = math.isclose(x[i])  # ERR math.isclose


@tack.kernel
def k_np_isclose_six_arguments(x, out):
    i = tack.tid()
    out[i] = np.isclose(x[i], 1.0, 1e-3, 1e-3, False, 2)  # ERR np.isclose


@tack.kernel
def k_np_isclose_math_keyword(x, out):
    i = tack.tid()
    out[i] = np.isclose(x[i], 1.0, rel_tol=1e-3)  # ERR rel_tol


@tack.kernel
def k_np_isclose_one_argument(x, out):
    i = tack.tid()
    out[i] = np.isclose(x[i])  # ERR np.isclose


@tack.kernel
def k_clip_one_bound(x, out):
    i = tack.tid()
    out[i] = np.clip(x[i], 0.0)  # ERR np.clip


@tack.kernel
def k_clip_both_spellings(x, out):
    i = tack.tid()
    out[i] = np.clip(x[i], 0.0, 1.0, max=2.0)  # ERR np.clip


@tack.kernel
def k_clip_twice(x, out):
    i = tack.tid()
    out[i] = np.clip(x[i], 0.0, a_min=1.0)  # ERR a_min


@tack.kernel
def k_where_alone(x, out):
    i = tack.tid()
    out[i] = np.where(x[i] > 0)  # ERR np.where


@tack.kernel
def k_sign_of_bool(x, out):
    i = tack.tid()
    out[i] = np.sign(x[i] > 0)  # ERR np.sign


@tack.kernel
def k_rint_two(x, out):
    i = tack.tid()
    out[i] = np.rint(x[i], x[i])  # ERR np.rint


@tack.kernel
def k_log_three(x, out):
    i = tack.tid()
    out[i] = math.log(x[i], 2.0, 3.0)  # ERR math.log


@tack.kernel
def k_sign_keyword(x, out):
    i = tack.tid()
    out[i] = np.sign(x[i], out=out)  # ERR np.sign


ROUNDING_CASES = [
    (k_round_digits, "write np.round(x, ndigits)"),
    (k_np_round_of_a_variable, "decimals must be an integer literal"),
    (k_np_round_out, "unexpected keyword argument 'out'"),
    (k_isclose_positional_tolerance, "takes at most 2 positional arguments (3 given)"),
    (k_isclose_unknown_keyword, "unexpected keyword argument 'rtol'"),
    (k_isclose_negative_tolerance, "abs_tol is negative"),
    (k_isclose_one_argument, "missing required argument 'b'"),
    (k_np_isclose_six_arguments, "takes at most 5 positional arguments (6 given)"),
    (k_np_isclose_math_keyword, "unexpected keyword argument 'rel_tol'"),
    (k_np_isclose_one_argument, "numpy.isclose() missing required argument 'b'"),
    (k_clip_one_bound, "missing required argument 'a_max'"),
    (k_clip_both_spellings, "passing min or max when a_min and a_max are given"),
    (k_clip_twice, "multiple values for argument 'a_min'"),
    (k_where_alone, "np.where() takes 3 arguments"),
    (k_sign_of_bool, "not bool"),
    (k_rint_two, "np.rint() takes 1 argument, got 2"),
    (k_log_three, "log() takes 1 or 2 arguments (x, base), got 3"),     # ("takes 1 argument")
    (k_sign_keyword, "keyword arguments are not supported"),
]


@pytest.mark.parametrize("kern, words", ROUNDING_CASES, ids=[k.__name__ for k, _ in ROUNDING_CASES])
def test_numpy_and_python_functions_refuse_what_they_refuse_naming_the_line(kern, words):
    """Calls of ``round``, ``np.round``, ``math.isclose``, ``np.isclose``, ``np.clip``,
    ``np.where``, ``np.sign`` and ``np.rint`` that Python or NumPy refuse, or that Tack cannot compile (``round(x, 2)``,
    Python's exact decimal rounding; a ``decimals`` not a literal), are compile errors naming the
    kernel's line, with a caret under the fault."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.ones(2), np.zeros(2)))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert words in msg, msg


@tack.kernel
def k_float_of_bad_text(out):
    i = tack.tid()
    out[i] = float("1,5")  # ERR float


def test_float_of_text_python_cannot_read_is_a_compile_error_naming_it():
    """``float('inf')`` is a literal; a text Python's float refuses is a compile error quoting it
    (it was 'str literals are not supported', pointing inside the call)."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_float_of_bad_text, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, "k_float_of_bad_text", k_float_of_bad_text, FILE)
    assert "float('1,5')" in msg and "math.inf" in msg


@pytest.mark.parametrize("kern, name", [(k_unwrapped_scalar, "PLAIN_GLOBAL"),
                                        (k_unwrapped_array, "PLAIN_ARRAY"),
                                        (k_unwrapped_tuple, "PLAIN_TUPLE"),
                                        # a 3-tuple was once taken for a template attribute
                                        # (class, value, name) and compiled as its middle item
                                        (k_unwrapped_tuple_value, "PLAIN_TUPLE")])
def test_unwrapped_global_says_tack_constant(kern, name):
    """A module-level Python value read by a kernel raises CompileError telling the user to wrap it in tack.constant."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert name in msg and "tack.constant" in msg


@tack.kernel
def k_module_as_a_value(out):
    i = tack.tid()
    m = np  # ERR np
    out[i] = 1.0


@tack.kernel
def k_class_as_a_value(out):
    i = tack.tid()
    out[i] = SomePolicy + 1  # ERR SomePolicy


@pytest.mark.parametrize("kern, words", [
    (k_module_as_a_value, "global 'np' is a module, which is not a value in Tack code: use its "
                          "functions and numbers by name (np.sqrt(x), np.pi)"),
    (k_class_as_a_value, "global 'SomePolicy' is a class, which is not a value in Tack code: a "
                         "class is a template, passed as an argument"),
], ids=["module", "class"])
def test_a_module_or_class_read_as_a_value_is_not_told_to_wrap_it(kern, words):
    """A module or a class read as a value was told to 'wrap it in tack.constant(...)', which
    takes neither: the message says how each is used."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert words in msg and "tack.constant" not in msg


def test_wrapped_global_is_readable():
    """The same array wrapped in tack.constant is readable from a kernel."""
    out = np.zeros(4)
    tack.launch(k_reads_wrapped, dim=4, args=(out,))
    np.testing.assert_array_equal(out, np.arange(4.0))


@tack.kernel
def k_reads_wrapped(out):
    i = tack.tid()
    out[i] = WRAPPED[i]


def test_plain_python_function_call():
    """Calling an undecorated Python function raises CompileError suggesting @tack.func."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_plain_function, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, "k_plain_function", k_plain_function, FILE)
    assert "@tack.func" in msg


def test_kernel_calling_kernel():
    """A kernel calling a kernel raises CompileError."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_calls_kernel, dim=2, args=(np.zeros(2),))
    check_points_at(ei.value, "k_calls_kernel", k_calls_kernel, FILE)


# -- recursion ---------------------------------------------------------------------

@tack.func
def fact(n):
    if n <= 1:
        return 1
    return n * fact(n - 1)  # ERR fact(n - 1)


@tack.kernel
def k_direct_recursion(out):
    i = tack.tid()
    out[i] = fact(i)


@tack.func
def is_even(n):
    return True if n == 0 else is_odd(n - 1)


@tack.func
def is_odd(n):
    return False if n == 0 else is_even(n - 1)  # ERR is_even(n - 1)


@tack.kernel
def k_mutual_recursion(out):
    i = tack.tid()
    out[i] = is_even(i)


def test_direct_recursion():
    """A device function calling itself raises CompileError at the recursive call."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_direct_recursion, dim=2, args=(np.zeros(2, np.int64),))
    msg = check_points_at(ei.value, "k_direct_recursion", fact, FILE)
    assert "recursion" in msg


def test_mutual_recursion():
    """Two device functions calling each other raise CompileError at the call that closes the cycle."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_mutual_recursion, dim=2, args=(np.zeros(2, bool),))
    msg = check_points_at(ei.value, "k_mutual_recursion", is_odd, FILE)
    assert "recursion" in msg and "is_even" in msg and "is_odd" in msg


@tack.func
def named_like_a_kernel(x):
    return x + 1


def _kernel_named_like_a_device_function(out):
    i = tack.tid()
    out[i] = named_like_a_kernel(i)  # ERR named_like_a_kernel(i)


def test_a_kernel_named_as_a_device_functions_id_is_refused_saying_so():
    """A kernel's qualified name equal to a device function's id (``module.name``: a class named
    as a module, or a name set by hand) was refused as the function calling itself.  The two
    share one name in the entry's dependency record, so running it would read one's names in
    the other's module (a stale constant from the cache): refused, saying why."""
    fn = _kernel_named_like_a_device_function
    fn.__qualname__ = f"{__name__}.named_like_a_kernel"
    kernel = tack.kernel(fn)
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kernel, dim=3, args=(np.zeros(3, np.int64),))
    msg = check_points_at(ei.value, fn.__qualname__, _kernel_named_like_a_device_function, FILE)
    assert "cannot tell them apart" in msg and "recursion" not in msg


# -- types -------------------------------------------------------------------------

@tack.kernel
def k_float_and_int(out):
    i = tack.tid()
    out[i] = 1.5 & i  # ERR 1.5 & i


@tack.kernel
def k_float_array_and(a, out):
    i = tack.tid()
    out[i] = a[i] | 1  # ERR a[i] | 1


@tack.kernel
def k_index_float(x, out):
    i = tack.tid()
    out[i] = x[0]  # ERR x[0]


@tack.kernel
def k_index_count(a, out):
    i = tack.tid()
    out[i] = a[i, i]  # ERR a[i, i]


@tack.kernel
def k_float_index(a, out):
    i = tack.tid()
    out[i] = a[i * 0.5]  # ERR a[i * 0.5]


@tack.kernel
def k_int_then_tuple(out):
    i = tack.tid()
    v = i
    v = (i, i)  # ERR v = (i, i)
    out[i] = 1.0


@tack.kernel
def k_store_tuple(out):
    i = tack.tid()
    out[i] = (1.0, 2.0)  # ERR out[i]


@tack.kernel
def k_unpack_count(out):
    i = tack.tid()
    a, b = (1.0, 2.0, 3.0)  # ERR a, b
    out[i] = a


@tack.kernel
def k_use_before_assign(out):
    i = tack.tid()
    out[i] = later  # ERR later
    later = 1.0


@tack.kernel
def k_store_template(policy, out):
    i = tack.tid()
    p = policy  # ERR policy
    out[i] = 1.0


class SomePolicy:
    @staticmethod
    def f(x):
        return x


@tack.kernel
def k_class_by_name(out):
    i = tack.tid()
    out[i] = SomePolicy.f(1.0)  # ERR SomePolicy.f


@tack.kernel
def k_write_constant(out):
    i = tack.tid()
    WRAPPED[i] = 1.0  # ERR WRAPPED[i]


@tack.kernel
def k_row_then_column(grid, out):
    i = tack.tid()
    out[i] = grid[i][0]  # ERR grid[i]


class NumpyNumberPolicy:
    DT = np.float32(0.1)
    W = WRAPPED
    BIG = np.float64(1e30)


@tack.kernel
def k_numpy_number_of_a_template(policy, out):
    i = tack.tid()
    out[i] = policy.DT  # ERR policy.DT


from math import tau  # noqa: E402 - a number imported by name, for the kernel below


@tack.kernel
def k_math_number_by_name(out):
    i = tack.tid()
    out[i] = tau  # ERR tau


@tack.kernel
def k_numpy_float64_of_a_template(policy, out):
    i = tack.tid()
    out[i] = out[i] * policy.BIG  # ERR policy.BIG


@tack.kernel
def k_constant_of_a_template(policy, out):
    i = tack.tid()
    out[i] = policy.W[i]  # ERR policy.W


@tack.kernel
def k_float_range(out):
    i = tack.tid()
    for j in range(2.5):  # ERR for
        out[i] = j


@tack.func
def uses_tid(x):
    return tack.tid() + x  # ERR tack.tid()


@tack.kernel
def k_tid_in_func(out):
    i = tack.tid()
    out[i] = uses_tid(1)


@tack.func
def two_params(a, b):
    return a + b


@tack.kernel
def k_wrong_call_arity(out):
    i = tack.tid()
    out[i] = two_params(i)  # ERR two_params(i)


@tack.func
def bad_and(x):
    return x & 1.5  # ERR x & 1.5


@tack.kernel
def k_type_error_in_func(out):
    i = tack.tid()
    out[i] = bad_and(i)


@tack.kernel
def k_type_error_in_func_stmt(out):
    i = tack.tid()
    bad_and(i)


TYPE_CASES = [
    (k_float_and_int, (np.zeros(2),), "float64"),
    (k_float_array_and, (np.zeros(2), np.zeros(2)), "float64"),
    (k_index_float, (1.5, np.zeros(2)), "indexed"),
    (k_index_count, (np.zeros(2), np.zeros(2)), "indices"),
    (k_float_index, (np.zeros(2), np.zeros(2)), "integers"),
    (k_int_then_tuple, (np.zeros(2),), "'v'"),
    (k_store_tuple, (np.zeros(2),), "store"),
    (k_unpack_count, (np.zeros(2),), "unpack"),
    (k_write_constant, (np.zeros(2),), "read-only"),
    (k_use_before_assign, (np.zeros(2),), "later"),
    (k_store_template, (SomePolicy, np.zeros(2)), "template"),
    # It said "'SomePolicy' is not a module": a class is read as a template, through a parameter.
    (k_class_by_name, (np.zeros(2),), "pass SomePolicy as an argument"),
    # They said "is not a number": a NumPy scalar and a tack.constant are named as such.
    (k_numpy_number_of_a_template, (NumpyNumberPolicy, np.zeros(2)),
     "NumpyNumberPolicy.DT is a NumPy float32; of a template class only static methods and "
     "Python numbers"),
    (k_constant_of_a_template, (NumpyNumberPolicy, np.zeros(2)),
     "NumpyNumberPolicy.W is a tack.constant"),
    # An np.float64 (a float subclass) was taken as a weak Python float: x32 * P.BIG computed in
    # float32 (inf), where NumPy's float64 makes a float64.  Refused as np.float32 is.
    # It said "wrap it in tack.constant(...) where it is defined" (in the math module).
    (k_math_number_by_name, (np.zeros(2),), "'tau' is math.tau, a number imported by name; write "
     "math.tau"),
    (k_numpy_float64_of_a_template, (NumpyNumberPolicy, np.zeros(2, np.float32)),
     "NumpyNumberPolicy.BIG is a NumPy float64; of a template class only static methods and "
     "Python numbers"),
    # It said only "a 2-D array takes 2 indices, got 1".
    (k_row_then_column, (np.zeros((2, 2)), np.zeros(2)), "write an element's 2 indices in one [], as a[i, j]"),
    (k_float_range, (np.zeros(2),), "range"),
    (k_tid_in_func, (np.zeros(2),), "tid"),
    (k_wrong_call_arity, (np.zeros(2),), "two_params"),
    (k_type_error_in_func, (np.zeros(2),), "float64"),
    (k_type_error_in_func_stmt, (np.zeros(2),), "float64"),
]


@pytest.mark.parametrize("kern, args, words", TYPE_CASES, ids=[c[0].__name__ for c in TYPE_CASES])
def test_type_errors(kern, args, words):
    """Type errors raise CompileError naming the problem and pointing at the offending expression."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=args)
    where = {k_tid_in_func: uses_tid, k_type_error_in_func: bad_and,
             k_type_error_in_func_stmt: bad_and}.get(kern, kern)
    msg = check_points_at(ei.value, kern.__qualname__, where, FILE)
    assert words in msg


def test_compile_error_attributes():
    """CompileError carries the kernel name, file name, line number and column as attributes."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_float_and_int, dim=2, args=(np.zeros(2),))
    e = ei.value
    lineno, code, _ = marked_line(k_float_and_int)
    assert (e.kernel, e.filename, e.lineno) == ("k_float_and_int", FILE, lineno)
    assert e.line_text.strip().startswith(code.strip())


# -- launch errors -------------------------------------------------------------------

@tack.kernel
def k_scale(a, factor, out):
    i = tack.tid()
    out[i] = a[i] * factor


def test_wrong_argument_count():
    """Too few or too many launch arguments raise TypeError listing the parameters."""
    a = np.ones(3)
    for args in [(a, 2.0), (a, 2.0, a, a)]:
        with pytest.raises(TypeError) as ei:
            tack.launch(k_scale, dim=3, args=args)
        msg = str(ei.value)
        assert "k_scale" in msg and "a, factor, out" in msg and str(len(args)) in msg


@pytest.mark.parametrize("bad", [[1.0, 2.0], "2.0", None, np.ones(3, np.complex128),
                                 np.ones((1, 1, 1, 1, 1)), np.ones(3, np.float16),
                                 np.ones(3, ">f8")],
                         ids=["list", "str", "None", "complex", "5d", "float16", "bigendian"])
def test_wrong_argument_type_names_parameter(bad):
    """An argument Tack cannot take raises TypeError naming the kernel and that parameter."""
    with pytest.raises(TypeError) as ei:
        tack.launch(k_scale, dim=3, args=(np.ones(3), bad, np.zeros(3)))
    msg = str(ei.value)
    assert "k_scale" in msg and "'factor'" in msg


@pytest.mark.parametrize("bad", [np.int8(3), np.float16(2.5), np.complex64(1), np.longdouble(1.5)],
                         ids=["int8", "float16", "complex64", "longdouble"])
def test_a_numpy_scalar_of_a_type_tack_lacks_says_which_numbers_are_taken(bad):
    """A NumPy scalar of a dtype Tack has no type for was 'a int8; kernels take NumPy arrays,
    numbers, ...', as if it were no number: the message names its dtype and the types taken."""
    with pytest.raises(TypeError) as ei:
        tack.launch(k_scale, dim=3, args=(np.ones(3), bad, np.zeros(3)))
    msg = str(ei.value)
    assert "'factor'" in msg and f"NumPy {bad.dtype} scalar" in msg and "int32/64" in msg


def test_a_0d_array_argument_says_to_pass_its_number():
    """A 0-d array (``np.array(2.0)``, what some NumPy reductions give) was told to 'use ...
    with 1-4 dimensions': it is told to pass its number, as tack.constant says."""
    with pytest.raises(TypeError) as ei:
        tack.launch(k_scale, dim=3, args=(np.ones(3), np.array(2.0), np.zeros(3)))
    msg = str(ei.value)
    assert "'factor'" in msg and "0 dimensions" in msg and "pass its number (factor[()])" in msg


def test_int_too_large_names_parameter():
    """A Python int that does not fit int64 raises TypeError naming the parameter."""
    with pytest.raises(TypeError) as ei:
        tack.launch(k_scale, dim=3, args=(np.ones(3), 2**64, np.zeros(3)))
    assert "'factor'" in str(ei.value)
    # It names the type (it said "the type it was compiled for", on a first launch too), and
    # for a value past int64 that np.uint64 holds, how to pass it.
    with pytest.raises(TypeError) as ei:
        tack.launch(k_scale, dim=3, args=(np.ones(3), 2**63, np.zeros(3)))
    assert str(ei.value) == ("kernel 'k_scale': argument 'factor' = 9223372036854775808 does not "
                             "fit int64 (argument out of range); a Python int argument is int64: "
                             "pass np.uint64(...) for one up to 2**64 - 1")
    with pytest.raises(TypeError, match=r"= -9223372036854775809 does not fit int64 \(argument "
                                        r"out of range\)$"):
        tack.launch(k_scale, dim=3, args=(np.ones(3), -2**63 - 1, np.zeros(3)))


@pytest.mark.parametrize("dim, exc", [((1, 2, 3, 4), TypeError), ((), TypeError), (2.5, TypeError),
                                      ((2, "3"), TypeError), (-1, ValueError), ((3, -2), ValueError)])
def test_bad_grid(dim, exc):
    """A grid that is not 1-3 non-negative ints is rejected."""
    with pytest.raises(exc):
        tack.launch(k_scale, dim=dim, args=(np.ones(3), 1.0, np.zeros(3)))


def test_bad_device_and_kernel():
    """An unknown device raises ValueError; launching something that is not a kernel raises TypeError."""
    with pytest.raises(ValueError):
        tack.launch(k_scale, dim=3, args=(np.ones(3), 1.0, np.zeros(3)), device="tpu")
    with pytest.raises(TypeError):
        tack.launch(plain_python, dim=3, args=(1,))


# -- debug mode: bounds checks ------------------------------------------------------------

@tack.kernel
def k_shift_write(a, shift):
    i = tack.tid()
    a[i + shift] = 1.0  # OOB


@tack.func
def poke(buf, j):
    buf[j] = 2.0  # OOB


@tack.kernel
def k_poke(a, shift):
    i = tack.tid()
    poke(a, i + shift)


@tack.kernel
def k_read2d(grid, out):
    i, j = tack.tid()
    out[i, j] = grid[i, j + 1]


def test_out_of_bounds_in_debug_mode():
    """In debug mode an out-of-bounds store raises IndexError naming the kernel, the array and the index, after the launch."""
    tack.config.debug = True
    a = np.zeros(10)
    with pytest.raises(IndexError) as ei:
        tack.launch(k_shift_write, dim=10, args=(a, 1))
    msg = str(ei.value)
    assert "k_shift_write" in msg and "'a'" in msg and "index 10" in msg
    assert f"{FILE}:{marked_line(k_shift_write, '# OOB')[0]}" in msg
    np.testing.assert_array_equal(a[1:], 1.0)   # every in-bounds point ran


def test_negative_out_of_bounds_in_debug_mode():
    """A negative index below -size raises IndexError quoting that index in debug mode."""
    tack.config.debug = True
    with pytest.raises(IndexError) as ei:
        tack.launch(k_shift_write, dim=1, args=(np.zeros(10), -11))
    assert "-11" in str(ei.value) and "'a'" in str(ei.value)


def test_out_of_bounds_in_device_function():
    """An out-of-bounds store inside a device function names the kernel, the function's array parameter and the index."""
    tack.config.debug = True
    with pytest.raises(IndexError) as ei:
        tack.launch(k_poke, dim=4, args=(np.zeros(4), 3))
    msg = str(ei.value)
    assert "k_poke" in msg and "'buf'" in msg and "'poke'" in msg and "index 4" in msg
    assert f"{FILE}:{marked_line(poke, '# OOB')[0]}" in msg


@tack.kernel
def k_read_constant_past_end(out, shift):
    i = tack.tid()
    out[i] = WRAPPED[i + shift]  # OOB


def test_out_of_bounds_of_a_constant_in_debug_mode_names_the_constant():
    """A tack.constant array read out of bounds was named 'constant array': the message names
    the constant as the kernel reads it."""
    tack.config.debug = True
    with pytest.raises(IndexError) as ei:
        tack.launch(k_read_constant_past_end, dim=4, args=(np.zeros(4), 1))
    msg = str(ei.value)
    assert "'WRAPPED'" in msg and "index 4" in msg and "size 4" in msg
    assert f"{FILE}:{marked_line(k_read_constant_past_end, '# OOB')[0]}" in msg


def test_out_of_bounds_axis_in_debug_mode():
    """An out-of-bounds read on the second axis of a 2-D array raises IndexError naming that array and index."""
    tack.config.debug = True
    with pytest.raises(IndexError) as ei:
        tack.launch(k_read2d, dim=(3, 4), args=(np.zeros((3, 4)), np.zeros((3, 4))))
    msg = str(ei.value)
    assert "k_read2d" in msg and "'grid'" in msg and "4" in msg


def test_debug_in_bounds_matches_release():
    """Debug and release builds of a kernel give identical results for in-bounds accesses, negative indices included."""
    a1, a2 = np.zeros(10), np.zeros(10)
    tack.launch(k_shift_write, dim=5, args=(a1, -5))
    tack.config.debug = True
    tack.launch(k_shift_write, dim=5, args=(a2, -5))
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(a1, [0] * 5 + [1] * 5)


def test_release_mode_has_no_bounds_check():
    """Without debug mode, a kernel's lowered form is not a debug one."""
    assert tack.config.debug is False
    assert lower(k_shift_write, {}, False).debug is False
    assert lower(k_shift_write, {}, True).debug is True


def test_debug_kernel_is_a_different_lowered_kernel():
    """The debug build of a kernel is a distinct lowered kernel with its own fingerprint."""
    rel = lower(k_poke, {}, False)
    dbg = lower(k_poke, {}, True)
    assert rel is not dbg and rel.fingerprint() != dbg.fingerprint()
    assert lower(k_poke, {}, True) is dbg


def test_numpy_minimum_takes_two_numbers():
    """np.minimum is NumPy's two-number rule, not min's any-count one: a third is refused."""
    @tack.kernel
    def k_three(a, out):
        out[0] = np.minimum(a[0], a[1], a[2])
    with pytest.raises(tack.CompileError, match=r"minimum\(\) takes 2 arguments, got 3"):
        tack.launch(k_three, dim=1, args=(np.zeros(3), np.zeros(1)))


def test_range_of_a_uint64_and_a_negative_step_names_the_cause():
    """``range(n, 0, -1)`` with a uint64 ``n`` said "loop variable 'q' also holds float64
    elsewhere", which it does not: the message now names the uint64 and the signed value, and
    the cast that compiles; the cast version then counts down as Python does."""
    @tack.kernel
    def k_down(n, out):
        c = 0
        for q in range(n, 0, -1):
            c += 1
        out[0] = c
    out = np.zeros(1, np.int64)
    with pytest.raises(tack.CompileError, match=r"range\(\) of a uint64 and a signed or negative "
                       r"value: no integer type holds both") as e:
        tack.launch(k_down, dim=1, args=(np.uint64(5), out))
    assert "also holds" not in str(e.value)

    @tack.kernel
    def k_cast(n, out):
        c = 0
        for q in range(tack.int64(n), 0, -1):
            c += 1
        out[0] = c
    tack.launch(k_cast, dim=1, args=(np.uint64(5), out))
    assert out[0] == 5


# -- array attributes of what is not an array ------------------------------------

@tack.kernel
def k_ndim_of_number(out):
    i = tack.tid()
    x = 1.0
    out[i] = x.ndim  # ERR x.ndim


@tack.kernel
def k_size_of_tuple(out):
    i = tack.tid()
    t = (1, 2)
    out[i] = t.size  # ERR t.size


@pytest.mark.parametrize("kern, words", [(k_ndim_of_number, "float64 has no attribute 'ndim'"),
                                         (k_size_of_tuple, "has no attribute 'size'")])
def test_array_attribute_of_a_non_array(kern, words):
    """``x.ndim`` / ``x.size`` of a number or a tuple is a CompileError at its line (it was an
    AttributeError from the code generator)."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert words in msg


# -- where the source comes from ----------------------------------------------------

class _Nested:
    @tack.kernel
    def k_nested_unindented_string(out):
        """A docstring whose second line starts at column 0,
less indented than the def."""
        i = tack.tid()
        out[i] = 2.0

    @tack.kernel
    def k_nested_error(out):
        i = tack.tid()
        out[i] = 1.0 + \
  2.0
        out[i] = undefined_here  # noqa: F821  # ERR undefined_here


def test_nested_kernel_with_lines_less_indented_than_its_def():
    """A kernel in a class whose lines go left of its def (a string's, a continued line's) compiles
    (it was an IndentationError from the parser), and its errors keep their columns."""
    out = np.zeros(3)
    tack.launch(_Nested.k_nested_unindented_string, dim=3, args=(out,))
    np.testing.assert_array_equal(out, 2.0)
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(_Nested.k_nested_error, dim=3, args=(out,))
    check_points_at(ei.value, "_Nested.k_nested_error", _Nested.k_nested_error, FILE)


def _load(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_EDITED_KERNEL = "import tack\n\n@tack.kernel\ndef k(out):\n    i = tack.tid()\n    out[i] = 1.0\n"


@pytest.mark.parametrize("now", [
    "import tack\n\n@tack.kernel\ndef k(out):\n    i = tack.tid(\n",          # no longer parses
    "import tack\nX = 1\n\n\n\n\nY = 2\n",                                      # the def is gone
    "import tack\n\n@tack.kernel\ndef other(a, b):\n    i = tack.tid()\n",     # another def there
], ids=["broken", "gone", "other-def"])
def test_source_edited_since_import(tmp_path, now):
    """A kernel whose file changed after it was imported raises a CompileError saying so, with the
    file (it was a TokenError from inspect, or 'not a plain def', or another function compiled)."""
    path = tmp_path / "edited_kernel_mod.py"
    path.write_text(_EDITED_KERNEL)
    mod = _load(path)
    path.write_text(now)
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(mod.k, dim=2, args=(np.zeros(2),))
    msg = str(ei.value)
    assert "has changed since it was defined" in msg and str(path) in msg, msg


@pytest.mark.parametrize("above", ["\x0c\n", "# a page break \x0c here\n", "S = '\u2028'\n",
                                   "# \x85 \x1c \x1d \x1e \x0b\n"],
                         ids=["form-feed-line", "form-feed-comment", "line-separator", "others"])
def test_kernel_below_characters_python_does_not_end_lines_at(tmp_path, above):
    """A form feed (or U+2028, NEL...) above a kernel, which Python does not count as a line's end,
    leaves the kernel compiling (the front end split the file's text there, so the def was looked for
    on the wrong line: 'the source of k has changed since it was defined')."""
    path = tmp_path / "form_feed_kernel_mod.py"
    path.write_text("import tack\n" + above + _EDITED_KERNEL.split("\n", 1)[1], encoding="utf-8")
    mod = _load(path)
    out = np.zeros(2)
    tack.launch(mod.k, dim=2, args=(out,))
    np.testing.assert_array_equal(out, 1.0)


def test_multiline_lambda_kernel(tmp_path):
    """A lambda spread over lines (its source alone does not parse) is a CompileError naming it,
    not a SyntaxError from the parser."""
    path = tmp_path / "lambda_kernel_mod.py"
    path.write_text("import tack\nk = tack.kernel(\n    lambda out:\n        None)\n")
    mod = _load(path)
    with pytest.raises(tack.CompileError, match="is not a plain 'def' function"):
        tack.launch(mod.k, dim=2, args=(np.zeros(2),))


def _decorator(fn):
    import functools

    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


def test_kernel_over_another_decorator():
    """@tack.kernel / @tack.func over a functools.wraps wrapper is refused when it is applied,
    saying why (the wrapper's signature made a launch say 'takes 0 arguments')."""
    def body(out):
        pass
    for deco in (tack.kernel, tack.func):
        with pytest.raises(TypeError, match="wrapper made by another decorator"):
            deco(_decorator(body))


# -- names that are variables, constants, or of an enclosing function ----------------

def _kernel_closing_over_an_unassigned_name():
    @tack.kernel
    def k_closure(out):
        i = tack.tid()
        out[i] = late  # ERR late
    late = tack.constant(1.0)      # noqa: F841 - assigned after the def: empty while compiled
    del late
    return k_closure


def test_closure_variable_without_a_value():
    """A kernel closing over a variable of its factory that has no value (assigned after the
    def, then deleted) is a CompileError at the read (it was 'ValueError: Cell is empty')."""
    k = _kernel_closing_over_an_unassigned_name()
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, k.__qualname__, k, FILE)
    assert "'late'" in msg and "has no value" in msg


@tack.kernel
def k_array_method(out):
    i = tack.tid()
    out.fill(0.0)  # ERR out.fill
    out[i] = 1.0


@tack.func
def _calls_its_template(policy, x):
    return policy.weight(x)  # ERR policy.weight


@tack.kernel
def k_template_given_a_number(out):
    i = tack.tid()
    out[i] = _calls_its_template(i, 1.0)


@pytest.mark.parametrize("kern, where, words", [
    (k_array_method, k_array_method, "'out.fill' cannot be used"),
    (k_template_given_a_number, _calls_its_template, "'policy.weight' cannot be used"),
], ids=["array-method", "template-param-given-a-number"])
def test_attribute_of_a_variable(kern, where, words):
    """``a.method(...)`` of a parameter or local says it is a variable (it said "name 'out' is
    not defined")."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, kern.__qualname__, where, FILE)
    assert words in msg and "is a variable here" in msg and "not defined" not in msg


@tack.kernel
def k_element_method(a, out):
    i = tack.tid()
    out[i] = a[i].astype(np.float32)  # ERR a[i]


@tack.kernel
def k_slice_method(a, out):
    i = tack.tid()
    out[i] = a[0:2].sum()  # ERR 0:2


@tack.kernel
def k_expression_attribute(a, out):
    i = tack.tid()
    out[i] = (a[i] + 1.0).real  # ERR (a[i]


@pytest.mark.parametrize("kern, words", [
    (k_element_method, ["'.astype' of an array element", "cast it", "tack.float32(x)"]),
    (k_slice_method, ["'.sum' of a slice", "slices are not supported"]),
    (k_expression_attribute, ["'.real' of this expression", "shape, ndim and size"]),
], ids=["element-method", "slice-method", "expression-attribute"])
def test_attribute_of_an_expression_names_it(kern, words):
    """``a[i].astype(...)``, ``a[0:2].sum()`` and ``(a[i] + 1.0).real`` name the attribute and
    what is wrong (all three said "attribute access on this expression is not supported", the
    slice's caret under the array, not the slice)."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.ones(2), np.zeros(2)))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert all(w in msg for w in words), msg


_TABLE = tack.constant(np.arange(6.0).reshape(2, 3))


@tack.kernel
def k_constant_shape(out):
    i = tack.tid()
    out[i] = _TABLE.shape[0] * 100 + _TABLE.shape[1] * 10 + _TABLE.ndim + _TABLE.size * 1000


def test_shape_of_an_array_constant():
    """``C.shape``, ``C.ndim`` and ``C.size`` of an array constant read its shape (they said
    "'C' is not a module"), as ``len(C)`` does."""
    out = np.zeros(2)
    tack.launch(k_constant_shape, dim=2, args=(out,))
    np.testing.assert_array_equal(out, 6000 + 200 + 30 + 2)


# -- messages that named the wrong thing -----------------------------------------------

@tack.kernel
def k_two_d_body(out):
    i, j = tack.tid()  # ERR i, j
    out[i, j] = 1.0


@tack.kernel
def k_one_name_of_tid(out):
    i, = tack.tid()  # ERR i,
    out[i] = 1.0


@tack.kernel
def k_shape_called(out):
    i = tack.tid()
    if i < out.shape():  # ERR out.shape
        out[i] = 1.0


@tack.kernel
def k_float_of_array(out):
    i = tack.tid()
    out[i] = float(out)  # ERR float(out)


@tack.kernel
def k_one_d_body(out):
    i = tack.tid()
    out[i] = 1.0  # ERR out[i]


@pytest.mark.parametrize("kern, dim, words", [
    (k_two_d_body, 4, "tack.tid() is an int in this 1-D launch; 2 names need a 2-D grid"),
    (k_float_of_array, 4, "float64() takes numbers"),
    (k_one_d_body, (4, 1), "as tack.tid() is in this 2-D launch: a 1-D array indexed by "
                           "tack.tid() needs a 1-D dim"),
    # it said "1 names need a 1-D grid (dim=(...,))", of a 1-D grid
    (k_one_name_of_tid, (4,), "tack.tid() is an int in a 1-D launch, not a tuple; write i = tack.tid()"),
    # it said "only an array's shape, ndim and size can be read", of x.shape
    (k_shape_called, 4, "'out.shape' is read, not called: write out.shape[0]"),
], ids=["2-D kernel on a 1-D grid", "cast name", "1-D kernel on a 2-D grid", "one name of tid",
        "shape called"])
def test_messages_name_what_the_user_wrote(kern, dim, words):
    """A 2-D kernel launched on a 1-D grid says the grid is the problem (it said 'cannot unpack
    a non-tuple values'), and so does a 1-D kernel on a 2-D grid (it said only 'a 1-D array
    takes 1 indices, got 2'); a cast's message names the type, not 'cast:float64()'.  One name
    unpacked from tack.tid() in a 1-D launch, and a called shape, say what to write (each said
    what contradicted what the user wrote: found by a new user's review)."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=dim, args=(np.zeros((4, 4)) if kern is k_two_d_body else np.zeros(4),))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert words in msg and "cast:" not in msg


def test_array_arguments_refused_say_why():
    """A non-native byte order or strides that are not whole elements say so (the message
    listed the dtypes and ranks Tack takes, which the array already had); static_shape=3 says
    what static_shape takes (it was "'int' object is not iterable")."""
    with pytest.raises(TypeError, match="byte order is not this machine's"):
        tack.launch(k_two_d_body, dim=(2, 2), args=(np.zeros((2, 2), np.float64).astype(">f8"),))
    odd = np.ndarray((4,), np.float64, np.zeros(64, np.uint8).data, 1, (9,))
    with pytest.raises(TypeError, match=r"strides are not multiples of its itemsize \(8\)"):
        tack.launch(k_float_of_array, dim=4, args=(odd,))
    with pytest.raises(TypeError, match="static_shape takes a parameter name"):
        tack.kernel(static_shape=3)(lambda out: None)


@tack.func
def _fills(x):
    x[0] = 1.0


@tack.kernel
def k_uses_no_value(a):
    i = tack.tid()
    a[i] = _fills(a) + 1


@tack.kernel
def k_calls_for_effect(a):
    _fills(a)


def test_a_call_that_returns_no_value_used_as_one():
    """``f(a) + 1`` where ``f`` returns nothing said "unsupported operand types for +: () and
    int64"; it now says ``f`` returns no value.  The same call as a statement compiles."""
    a = np.zeros(2)
    with pytest.raises(tack.CompileError, match="'_fills' returns no value: a call of it can only "
                       "be a statement of its own") as ei:
        tack.launch(k_uses_no_value, dim=1, args=(a,))
    assert "()" not in str(ei.value)
    tack.launch(k_calls_for_effect, dim=1, args=(a,))
    assert a[0] == 1.0


@tack.kernel
def k_real_of_an_int(out):
    i = tack.tid()
    out[i] = i.real


def test_an_attribute_of_a_number_variable_names_the_variable():
    """``i.real`` of an int said "arrays have no attribute 'real'", naming arrays, which ``i`` is
    not: the message names the variable and what can be read of one."""
    with pytest.raises(tack.CompileError, match=r"'i\.real': of a variable only an array's shape, "
                       r"ndim and size can be read") as ei:
        tack.launch(k_real_of_an_int, dim=2, args=(np.zeros(2),))
    assert "arrays have no attribute" not in str(ei.value)


def make_self_calling():
    @tack.func
    def again(x):
        return again(x - 1.0)
    return again


AGAIN = make_self_calling()


@tack.kernel
def k_again(a):
    i = tack.tid()
    a[i] = AGAIN(a[i])


def test_a_closure_over_itself_is_the_recursion_error():
    """A factory's function that calls itself closes over itself: its id, made of what it closes
    over, stops there (a RecursionError of Python's otherwise), and the front end says recursion.
    (Here, not in tests/test_language.py, whose kernels every GPU target builds.)"""
    with pytest.raises(tack.CompileError, match="recursion"):
        tack.launch(k_again, dim=1, args=(np.zeros(1),))



# -- a tack.constant array at an index it has not ----------------------------------------

TABLE = tack.constant(np.arange(6.0).reshape(2, 3))
COLUMN = tack.constant(3)


@tack.kernel
def k_constant_past_its_end(out):
    i = tack.tid()
    out[i] = WRAPPED[4]  # ERR WRAPPED[4]


@tack.kernel
def k_constant_before_its_start(out):
    i = tack.tid()
    out[i] = WRAPPED[-5]  # ERR WRAPPED[-5]


@tack.kernel
def k_constant_past_its_end_under_an_if(out):
    i = tack.tid()
    if i > 100:
        out[i] = WRAPPED[7]  # ERR WRAPPED[7]


@tack.kernel
def k_constant_column_by_a_constant(out):
    i = tack.tid()
    out[i] = TABLE[1, COLUMN]  # ERR TABLE[1, COLUMN]


@tack.func
def entry(k):
    return WRAPPED[k]  # ERR WRAPPED[k]


@tack.kernel
def k_constant_past_its_end_in_a_func(out):
    i = tack.tid()
    out[i] = entry(9)


@tack.kernel
def k_constant_past_its_end_where_its_size_is_checked_live(out):
    i = tack.tid()
    if WRAPPED.shape[0] == 4 and i >= 0:
        out[i] = WRAPPED[4]  # ERR WRAPPED[4]


@tack.func
def fifth_of(t):
    return t[4]  # ERR t[4]


@tack.func
def fifth_through(u, scale):
    return fifth_of(u) * scale


@tack.kernel
def k_constant_passed_to_a_func_past_its_end(out):
    i = tack.tid()
    out[i] = fifth_of(WRAPPED)


@tack.kernel
def k_constant_passed_on_through_two_funcs(out):
    i = tack.tid()
    if i >= 0:
        out[i] = fifth_through(WRAPPED, 2.0)


CONSTANT_INDEX_CASES = [
    (k_constant_past_its_end, k_constant_past_its_end, "index 4 is out of bounds for axis 0 of "
     "the constant 'WRAPPED' with size 4"),
    (k_constant_before_its_start, k_constant_before_its_start, "index -5 is out of bounds for "
     "axis 0 of the constant 'WRAPPED' with size 4"),
    (k_constant_past_its_end_under_an_if, k_constant_past_its_end_under_an_if, "index 7 is out of "
     "bounds for axis 0 of the constant 'WRAPPED' with size 4"),
    (k_constant_column_by_a_constant, k_constant_column_by_a_constant, "index 3 is out of bounds "
     "for axis 1 of the constant 'TABLE' with size 3"),
    (k_constant_past_its_end_in_a_func, entry, "index 9 is out of bounds for axis 0 of the "
     "constant 'WRAPPED' with size 4"),
    (k_constant_past_its_end_where_its_size_is_checked_live,
     k_constant_past_its_end_where_its_size_is_checked_live, "index 4 is out of bounds for axis 0 "
     "of the constant 'WRAPPED' with size 4"),
    (k_constant_passed_to_a_func_past_its_end, fifth_of, "index 4 is out of bounds for axis 0 of "
     "the constant 'WRAPPED' with size 4, passed to 'fifth_of' as 't' at line "),
    (k_constant_passed_on_through_two_funcs, fifth_of, "index 4 is out of bounds for axis 0 of "
     "the constant 'WRAPPED' with size 4, passed to 'fifth_through' as 'u' at line "),
]

PASSING_CALLS = {k_constant_passed_to_a_func_past_its_end: "= fifth_of(WRAPPED)",
                 k_constant_passed_on_through_two_funcs: "= fifth_through(WRAPPED, 2.0)"}


@pytest.mark.parametrize("kern, where, words", CONSTANT_INDEX_CASES,
                         ids=[c[0].__name__ for c in CONSTANT_INDEX_CASES])
def test_a_constant_index_past_a_constant_array_is_a_compile_error(kern, where, words):
    """A tack.constant array indexed at a literal or an integer tack.constant it has no element
    at (``WRAPPED[4]`` of 4 elements, ``WRAPPED[-5]``, ``TABLE[1, COLUMN]`` with COLUMN = 3 of 3
    columns; under an ``if`` too, in a device function given the literal, and in one given the
    constant, directly or through another) read past its data, silently: its shape is known
    when the kernel compiles, so it is a CompileError there, naming the constant, the axis, the
    index and the size (and the call that passed it), at the access's line."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, kern.__qualname__, where, FILE)
    assert words in msg, msg
    call = PASSING_CALLS.get(kern)
    if call is not None:                    # the line of the call that passed the constant
        lines = open(FILE).read().splitlines()
        assert f"at line {next(n for n, t in enumerate(lines, 1) if call in t)} " in msg, msg


@tack.kernel
def k_constant_in_branches_its_size_rules_out(out):
    i = tack.tid()
    out[i] = WRAPPED[0]
    if WRAPPED.shape[0] > 4:                # code for a constant of any size: never runs here
        out[i] = WRAPPED[4]
    if len(WRAPPED) >= 4 and not (TABLE.shape[1] > 3 or COLUMN > 3):
        out[i] += 1.0
    else:
        out[i] = TABLE[1, COLUMN]
    out[i] += WRAPPED[9] if WRAPPED.size > 9 else 10.0
    while TABLE.ndim == 3:
        out[i] = TABLE[5, 5]
    if COLUMN < 3:
        out[i] = TABLE[0, COLUMN]
    out[i] += WRAPPED.shape[0] > 4 and WRAPPED[4]       # False: the read never runs
    out[i] += (len(WRAPPED) == 4 or WRAPPED[7]) * 100.0  # True
    if WRAPPED.size > 9 and WRAPPED[9] > 0 or COLUMN > 3 and TABLE[0, COLUMN] > 0:
        out[i] = -1.0


def test_a_constant_index_in_a_branch_its_size_rules_out_is_no_error():
    """Where a condition the compile knows (a constant's ``shape[k]``, ``len``, ``size``, ``ndim``,
    an integer constant, literals; ``and``, ``or``, ``not``) rules a branch out, a literal index
    there past the constant's extent never runs: no compile error (code written for constants of
    any size; it was one), and the branches that run give the right values.  So does an operand
    of ``and``/``or`` after one the compile knows decides it (``C.shape[0] > 4 and C[4]``: it
    was an error), as Python short-circuits it."""
    out = np.zeros(2)
    tack.launch(k_constant_in_branches_its_size_rules_out, dim=2, args=(out,))
    np.testing.assert_array_equal(out, [0.0 + 1.0 + 10.0 + 0.0 + 100.0] * 2)


@tack.kernel
def k_constant_past_its_end_after_an_and_that_holds(out):
    i = tack.tid()
    out[i] = WRAPPED.shape[0] == 4 and WRAPPED[4]  # ERR WRAPPED[4]


def test_a_constant_index_after_an_and_the_compile_knows_holds_is_still_an_error():
    """The operand after a known-true ``and`` operand (a known-false ``or`` one) runs: a literal
    index past the constant's extent there is the compile error, at its line."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_constant_past_its_end_after_an_and_that_holds, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, "k_constant_past_its_end_after_an_and_that_holds",
                          k_constant_past_its_end_after_an_and_that_holds, FILE)
    assert "index 4 is out of bounds for axis 0 of the constant 'WRAPPED' with size 4" in msg, msg


@tack.func
def fifth_or_first(t):
    if t.shape[0] > 4 and len(t) == t.size:     # its shape is compiled in: known here
        return t[4]
    return t[0] + 100.0


@tack.kernel
def k_constant_passed_where_its_size_rules_the_index_out(out):
    i = tack.tid()
    out[i] = fifth_or_first(WRAPPED)
    if WRAPPED.shape[0] > 4:                # the call never runs
        out[i] = fifth_of(WRAPPED)


@tack.kernel(static_shape="a")
def k_static_argument_passed_past_its_end(a, n, out):
    i = tack.tid()
    out[i] = fifth_or_first(a)
    if n > 4:
        out[i] = fifth_of(a)


def test_a_constant_passed_to_a_func_where_its_index_never_runs_is_no_error():
    """A device function given a constant (or a ``static_shape`` array) knows its shape: a
    condition on it rules a branch out there as in the kernel, and a call in a branch the
    kernel rules out passes nothing.  A ``static_shape`` argument is not a constant: a literal
    index past it in a device function is left to run time (here it never runs), as in the
    kernel."""
    out = np.zeros(2)
    tack.launch(k_constant_passed_where_its_size_rules_the_index_out, dim=2, args=(out,))
    np.testing.assert_array_equal(out, [100.0] * 2)
    tack.launch(k_static_argument_passed_past_its_end, dim=2, args=(np.arange(3.0) + 7, 4, out))
    np.testing.assert_array_equal(out, [107.0] * 2)


@tack.kernel
def k_constant_ends(out):
    i = tack.tid()
    out[i] = WRAPPED[-4] * 10.0 + WRAPPED[-1] + TABLE[-1, 2] * 100.0


def test_a_constant_index_within_a_constant_array_counts_from_the_end_as_python():
    """``WRAPPED[-4]`` and ``WRAPPED[-1]`` of 4 elements, ``TABLE[-1, 2]``: in bounds, as Python
    counts them."""
    out = np.zeros(2)
    tack.launch(k_constant_ends, dim=2, args=(out,))
    np.testing.assert_array_equal(out, [0.0 * 10 + 3.0 + 5.0 * 100] * 2)


# -- atomics of a value the array's type cannot take as NumPy's a += v does --------------------

@tack.kernel
def k_atomic_add_float_into_int(counts, out):
    i = tack.tid()
    tack.atomic_add(counts, 0, 0.5)  # ERR tack.atomic_add


@tack.kernel
def k_atomic_max_float32_into_int32(counts, values):
    i = tack.tid()
    tack.atomic_max(counts, i, values[i])  # ERR tack.atomic_max


@tack.kernel
def k_atomic_min_int_into_unsigned(counts, values):
    i = tack.tid()
    tack.atomic_min(counts, 0, values[i])  # ERR tack.atomic_min


@tack.kernel
def k_atomic_add_minus_one_into_unsigned(counts, out):
    i = tack.tid()
    tack.atomic_add(counts, 0, -1)  # ERR tack.atomic_add


@tack.kernel
def k_atomic_min_two_to_the_63_into_unsigned(counts, out):
    i = tack.tid()
    tack.atomic_min(counts, 0, 2**63)  # ERR tack.atomic_min


ATOMIC_CASES = [
    # a literal from 2**63 up (a weak uint64) was let through, wrapped: atomic_min of 2**63 into
    # a uint32 array stored 0
    (k_atomic_min_two_to_the_63_into_unsigned, (np.zeros(2, np.uint32), np.zeros(2)),
     ["atomic_min() of the integer 9223372036854775808 into an array of uint32", "OverflowError",
      "tack.uint32(...)"]),
    (k_atomic_add_float_into_int, (np.zeros(2, np.int64), np.zeros(2)),
     ["atomic_add() of a value of type float64 into an array of int64 would truncate it",
      "'same_kind'", "int(...)"]),
    (k_atomic_max_float32_into_int32, (np.zeros(2, np.int32), np.zeros(2, np.float32)),
     ["atomic_max() of a value of type float32 into an array of int32 would truncate it",
      "int(...)"]),
    (k_atomic_min_int_into_unsigned, (np.zeros(2, np.uint32), np.zeros(2, np.int64)),
     ["atomic_min() of a value of type int64 into an array of uint32", "tack.uint32(...)"]),
    (k_atomic_add_minus_one_into_unsigned, (np.zeros(2, np.uint32), np.zeros(2)),
     ["atomic_add() of the integer -1 into an array of uint32", "OverflowError",
      "tack.uint32(...)"]),
]


@pytest.mark.parametrize("kern, args, words", ATOMIC_CASES, ids=[c[0].__name__ for c in ATOMIC_CASES])
def test_an_atomic_of_a_value_numpy_would_not_cast_in_place_is_a_compile_error(kern, args, words):
    """``tack.atomic_add(counts, 0, 0.5)`` into an int64 array added 0 at every point, silently
    (each addend truncated); NumPy's ``counts += 0.5`` refuses it (casting rule 'same_kind'), and
    so does the compile now, naming the line, the value's and the array's types and the explicit
    conversion to write.  A signed integer into an unsigned array, and a literal the array's
    type cannot hold, are refused too, as NumPy refuses them."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=args)
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    for w in words:
        assert w in msg, msg
    np.testing.assert_array_equal(args[0], 0)


@tack.kernel
def k_atomics_numpy_casts_in_place(f64, f32, i64, i32, u32, ints, uints, halves):
    i = tack.tid()
    tack.atomic_add(f64, 0, ints[i])            # an integer into a float array
    tack.atomic_add(f32, 0, halves[i])          # float64 into float32: same kind
    tack.atomic_add(i64, 0, uints[i])           # uint32 into int64
    tack.atomic_max(i32, 0, ints[i])            # int64 into int32: same kind
    tack.atomic_add(u32, 0, tack.uint32(ints[i]))
    tack.atomic_add(i64, 1, int(halves[i] * 4.0))


def test_atomics_take_what_numpy_casts_in_place():
    """What NumPy's ``a += v`` takes stays allowed, and adds what it adds: an integer into a float
    array, a wider float into a narrower one, an unsigned into a wider signed array, a wider
    signed integer into a narrower one, and an explicit conversion."""
    ints, halves = np.arange(1, 5), np.full(4, 0.5)
    f64, f32, i64, i32, u32 = (np.zeros(1), np.zeros(1, np.float32), np.zeros(2, np.int64),
                               np.zeros(1, np.int32), np.zeros(1, np.uint32))
    tack.launch(k_atomics_numpy_casts_in_place, dim=4,
                args=(f64, f32, i64, i32, u32, ints, ints.astype(np.uint32), halves))
    assert (f64[0], f32[0], i32[0], u32[0]) == (10.0, 2.0, 4, 10)
    assert i64.tolist() == [10, 8]

@tack.kernel
def k_int_to_a_negative_power(ia, out):
    i = tack.tid()
    out[i] = ia[i] ** -2  # ERR ia[i] ** -2


@tack.func
def power_of(a, b):
    return a ** b  # ERR a ** b


@tack.kernel
def k_int_to_a_negative_literal_argument(ia, out):
    i = tack.tid()
    out[i] = power_of(ia[i], -1)


def test_an_integer_to_a_negative_literal_power_is_refused():
    """An integer to a negative integer literal power (``n ** -2``, or a literal exponent passed
    to a device function) is refused when it compiles, as NumPy refuses it: it gave 0, silently,
    where Python gives a float.  An exponent negative only at run time still gives 0, as
    documented; a float base is computed (``float(n) ** -2``)."""
    for kern, where in ((k_int_to_a_negative_power, k_int_to_a_negative_power),
                        (k_int_to_a_negative_literal_argument, power_of)):
        with pytest.raises(tack.CompileError) as ei:
            tack.launch(kern, dim=3, args=(np.arange(1, 4), np.zeros(3)))
        msg = check_points_at(ei.value, kern.__qualname__, where, FILE)
        assert "an integer to a negative integer power (int64 ** -" in msg, msg
        assert "write float(x) ** -n, or 1.0 / x ** n" in msg, msg
        # (it said only "Python gives a float": of 0, Python raises)
        assert "of 0 raises ZeroDivisionError" in msg, msg


@tack.kernel
def k_index_widened_later(out):
    i = tack.tid()
    x = i
    out[x] = 1  # ERR out
    x = 0.5


def test_an_index_made_float_by_a_later_assignment_says_which_line():
    """``x = i``, ``out[x]``, then ``x = 0.5``: "array indices must be integers, not float64" at
    ``out[x]``, the line right after ``x = i``, with nothing about the later assignment that
    made x a float64 everywhere (a variable has one type).  It names that line now."""
    import inspect
    with pytest.raises(tack.CompileError) as e:
        tack.launch(k_index_widened_later, 2, (np.zeros(2),))
    lines, first = inspect.getsourcelines(k_index_widened_later.py_func)
    later = first + next(k for k, line in enumerate(lines) if "x = 0.5" in line)
    assert (f"array indices must be integers, not float64 ('x' is float64 wherever it is read: a "
            f"variable has one type, and line {later} assigns it a value that makes it "
            "float64)") in str(e.value), str(e.value)


@tack.kernel
def k_after_non_ascii_names(x, y):
    i = tack.tid()
    αβγ = x[i]
    y[i] = αβγ + αβγ + not_defined_anywhere  # ERR not_defined_anywhere


def test_the_caret_after_non_ascii_names_is_under_the_name():
    """ast's column is a count of UTF-8 bytes: after ``αβγ + αβγ`` (6 two-byte letters) the caret
    stood 6 columns right of the undefined name."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_after_non_ascii_names, dim=2, args=(np.zeros(2), np.zeros(2)))
    check_points_at(ei.value, "k_after_non_ascii_names", k_after_non_ascii_names, FILE)


def test_a_positional_only_parameter_is_refused_in_words_that_agree(tmp_path):
    """``def po(a, /, b)`` was refused with "has positional-only parameter 'a': Tack functions
    take plain positional parameters only", which contradicts itself."""
    import importlib.util
    path = tmp_path / "po_mod.py"
    path.write_text("import tack\n\n\n@tack.func\ndef po(a, /, b):\n    return a + b\n\n\n"
                    "@tack.kernel\ndef k_po(x, out):\n    i = tack.tid()\n    out[i] = po(x[i], 1.0)\n")
    spec = importlib.util.spec_from_file_location("po_mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(mod.k_po, dim=1, args=(np.zeros(1), np.zeros(1)))
    msg = str(ei.value)
    assert "has positional-only parameter 'a': Tack functions take plain parameters only" in msg, msg
    assert "positional-only, '/')" in msg and "plain positional" not in msg, msg


@tack.kernel
def k_calls_tack_api(out):
    i = tack.tid()
    out[i] = tack.constant(3.0)  # ERR tack.constant


def test_tacks_python_api_called_in_a_kernel_is_named_as_such():
    """``tack.constant(3.0)`` (or ``tack.launch``) inside a kernel was told to "decorate it with
    @tack.func"."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_calls_tack_api, dim=1, args=(np.zeros(1),))
    msg = check_points_at(ei.value, "k_calls_tack_api", k_calls_tack_api, FILE)
    assert "'tack.constant' is Tack's Python API, called from Python, not from Tack code" in msg
    assert "@tack.func" not in msg


# Python's names for what kernels cannot hold, not ``ast``'s ('JoinedStr', 'NamedExpr', 'In'),
# and what to write instead.
@tack.kernel
def k_list_display(out):
    i = tack.tid()
    a = [1.0, 2.0]  # ERR [
    out[i] = a[0]


@tack.kernel
def k_fstring(out):
    i = tack.tid()
    s = f"{i}"  # ERR f"
    out[i] = 1.0


@tack.kernel
def k_walrus(out):
    i = tack.tid()
    out[i] = (k := 1.0)  # ERR k
    out[i] = k


@tack.kernel
def k_raise(out):
    i = tack.tid()
    raise ValueError(i)  # ERR raise


@tack.kernel
def k_in_tuple(out):
    i = tack.tid()
    out[i] = 1.0 if i in (0, 1) else 0.0  # ERR i in


@tack.kernel
def k_matmul(out):
    i = tack.tid()
    out[i] = out[i] @ out[i]  # ERR out[i] @


@tack.kernel
def k_starred_target(out):
    i = tack.tid()
    a, *b = (1.0, 2.0, 3.0)  # ERR *b
    out[i] = a


PYTHON_NAMES = [
    (k_list_display, "a list display ([...]) is not supported in Tack code; use a tuple"),
    (k_fstring, "an f-string is not supported in Tack code; kernels have no strings"),
    (k_walrus, "an assignment expression (:=) is not supported in Tack code; assign on a line of its own"),
    (k_raise, "'raise' is not supported in Tack code; a kernel cannot raise"),
    (k_in_tuple, "comparison 'in' is not supported in Tack code; compare with each value: i == 0 or i == 1"),
    (k_matmul, "operator '@' (matrix multiplication) is not supported in Tack code"),
    (k_starred_target, "cannot assign to a starred target (a, *b = ...); unpack into as many names"),
    (k_nested_def, "a nested 'def' is not supported in Tack code; define it at module level, decorated with @tack.func"),
]


@pytest.mark.parametrize("kern, words", PYTHON_NAMES, ids=[k.__name__ for k, _ in PYTHON_NAMES])
def test_what_kernels_cannot_hold_is_named_as_python_names_it_with_the_fix(kern, words):
    """A list display was "'List' expressions are not supported", an f-string "'JoinedStr'", ``in``
    "comparison 'In'", ``@`` "operator 'MatMult'": ``ast``'s class names, and no fix."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.zeros(2),))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert words in msg, msg


@tack.kernel
def k_np_zeros(out):
    i = tack.tid()
    t = np.zeros(3)  # ERR np.zeros
    out[i] = t[0]


@tack.kernel
def k_np_max_of_two(x, out):
    i = tack.tid()
    out[i] = np.max(x[i], 0.0)  # ERR np.max


@pytest.mark.parametrize("kern, words", [
    (k_np_zeros, "a kernel makes no arrays: make it before the launch and pass it as an argument"),
    (k_np_max_of_two, "of two numbers, the larger is max(a, b) or np.maximum(a, b)"),
], ids=["np.zeros", "np.max"])
def test_numpy_functions_of_arrays_say_what_they_were_likely_meant_for(kern, words):
    """Every NumPy function that is not a ufunc got the reduction hint ("for a sum... loop over
    its elements"), np.zeros too; np.max(a, b), a mix-up with np.maximum, was not told of it."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.zeros(2),) if kern is k_np_zeros else (np.ones(2), np.zeros(2)))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert words in msg, msg


class _MetaWithPlainFunction(type):
    def shift(x):                       # a method of the class, as Python binds it
        return x + 10.0

    _K = 2.0


class _PolicyOfMeta(metaclass=_MetaWithPlainFunction):
    pass


@tack.kernel
def k_metaclass_shift(out, P):
    i = tack.tid()
    out[i] = P.shift(1.0 * i)


@tack.kernel
def k_metaclass_private(out, P):
    i = tack.tid()
    out[i] = P._K


@pytest.mark.parametrize("kern, attr", [(k_metaclass_shift, "shift"), (k_metaclass_private, "_K")])
def test_what_a_metaclass_gives_that_no_fingerprint_holds_is_refused(kern, attr):
    """A template's metaclass's plain function (which Python binds to the class: P.shift(1.0)
    is Meta.shift(P, 1.0)) and private names were read by kernels, but left out of the class's
    fingerprint: edited, the next process was served the code of before (a stale result).  They
    are refused, naming the metaclass; its public static methods and numbers are read (above)."""
    with pytest.raises(tack.CompileError, match=rf"_PolicyOfMeta's '{attr}' comes from its metaclass "
                                                r"_MetaWithPlainFunction"):
        tack.launch(kern, dim=3, args=(np.zeros(3), _PolicyOfMeta))


NO_FILE_PROGRAM = """import numpy as np, tack
@tack.kernel
def k(out):
    i = tack.tid()
    out[i] = 2.0
o = np.zeros(3)
try:
    tack.launch(k, dim=3, args=(o,))
    print("RESULT", o.tolist())
except tack.CompileError as e:
    print("REFUSED", str(e).splitlines()[0])
"""


@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_a_kernel_of_no_file_is_refused_though_a_file_bears_its_name(tmp_path, how):
    """A kernel of ``python -c`` or stdin has no source file (``<string>``, ``<stdin>``); with a
    file of that very name in the working directory, its text was compiled (and keyed) in the
    program's place: ``out[i] = 7.0`` ran where the program said 2.0.  It is refused, as with no
    such file (or, where Python keeps the program's own text, ``-c`` on Python 3.13, compiled
    from that: 2.0), never the file's."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    decoy = NO_FILE_PROGRAM.replace("2.0", "7.0")
    for name in ("<string>", "<stdin>"):
        (tmp_path / name).write_text(decoy)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(PYTHONPATH=root, TACK_CACHE_DIR=str(tmp_path / "cache"))
    argv, stdin = ([sys.executable, "-c", NO_FILE_PROGRAM], None) if how == "-c" else \
        ([sys.executable, "-"], NO_FILE_PROGRAM)
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    last = p.stdout.strip().splitlines()[-1]
    if how == "-c" and sys.version_info >= (3, 13):    # linecache keeps -c's text from 3.13 on
        assert last == "RESULT [2.0, 2.0, 2.0]", last
    else:
        assert last.startswith("REFUSED ") and "the source of 'k' is not available" in last, last


def test_a_kernel_whose_file_is_gone_is_refused_naming_the_file(tmp_path):
    """A kernel whose source file was removed after its module was imported (a deployment that
    ships only .pyc files) was refused with "kernels must be defined in a file", of a kernel
    defined in one, naming no file.  The message names the file and line its code says, and why
    the source is needed."""
    import importlib
    import sys
    mod = tmp_path / "gone_kernel_mod.py"
    mod.write_text("import tack\n\n\n@tack.kernel\ndef k(x):\n    x[tack.tid()] = 1.0\n")
    sys.path.insert(0, str(tmp_path))
    try:
        m = importlib.import_module("gone_kernel_mod")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("gone_kernel_mod", None)
    mod.unlink()
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(m.k, 2, (np.zeros(2),))
    msg = str(ei.value)
    assert f"its code says {mod}, line 4, and that file cannot be read now" in msg, msg
    assert "not only its .pyc" in msg, msg
