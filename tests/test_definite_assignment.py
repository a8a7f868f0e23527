"""Definite assignment: a variable read where some path leaves it unassigned is a CompileError
naming the variable, its line and that path (issue 14: such kernels compiled and read garbage)."""

import numpy as np
import pytest

import tack

from .util import check_points_at, marked_line

FILE = __file__


def line_of(kern, mark):
    return marked_line(kern, mark)[0]


@tack.kernel
def k_if_only(out, n):
    i = tack.tid()
    if n > 0:  # PATH
        x = 1.0
    out[i] = x  # ERR x


@tack.kernel
def k_else_only(out, n):
    i = tack.tid()
    if n > 0:  # PATH
        pass
    else:
        x = 1.0
    out[i] = x  # ERR x


@tack.kernel
def k_elif_chain(out, n):
    i = tack.tid()
    if n > 0:  # PATH
        x = 1.0
    elif n < -3:  # NEXT
        x = 2.0
    out[i] = x  # ERR x


@tack.kernel
def k_for_zero_times(out, n):
    i = tack.tid()
    for k in range(n):  # PATH
        x = 1.0 * k
    out[i] = x  # ERR x


@tack.kernel
def k_for_target_after(out, n):
    i = tack.tid()
    for k in range(n):  # PATH
        out[i] = 1.0
    out[i] = k  # ERR k


@tack.kernel
def k_while_zero_times(out, n):
    i = tack.tid()
    while n > 0:  # PATH
        x = 1.0
        n -= 1
    out[i] = x  # ERR x


@tack.kernel
def k_first_iteration(out, n):
    i = tack.tid()
    for k in range(n):  # PATH
        if k > 0:
            out[i] = prev  # ERR prev
        prev = 1.0 * k


@tack.kernel
def k_break_path(out, n):
    i = tack.tid()
    for k in range(3):  # PATH
        if n > k:
            x = 2.0
            break
    out[i] = x  # ERR x


@tack.kernel
def k_break_skips(out, n):
    i = tack.tid()
    while True:  # PATH
        if n > 0:
            break  # NEXT
        x = 1.0
    out[i] = x  # ERR x


@tack.kernel
def k_continue_skips(out, n):
    i = tack.tid()
    for k in range(4):
        if k < n:
            continue
        x = 1.0 * k
    out[i] = x  # ERR x


@tack.func
def pick(n):
    if n > 0:  # PATH
        y = 2.0
    return y  # ERR y


@tack.kernel
def k_in_device_function(out, n):
    i = tack.tid()
    out[i] = pick(n)


@tack.kernel
def k_augassign(out, n):
    i = tack.tid()
    if n > 0:  # PATH
        s = 0.0
    s += 1.0  # ERR s
    out[i] = s


CASES = [
    (k_if_only, lambda: f"the 'if' at line {line_of(k_if_only, '# PATH')} is false"),
    (k_else_only, lambda: f"the 'if' at line {line_of(k_else_only, '# PATH')} is true"),
    (k_elif_chain, lambda: f"the 'if' at line {line_of(k_elif_chain, '# PATH')} is false and the "
                           f"'elif' at line {line_of(k_elif_chain, '# NEXT')} is false"),
    (k_for_zero_times, lambda: f"the 'for' loop at line {line_of(k_for_zero_times, '# PATH')} "
                               "runs zero times"),
    (k_for_target_after, lambda: f"the 'for' loop at line {line_of(k_for_target_after, '# PATH')} "
                                 "runs zero times"),
    (k_while_zero_times, lambda: f"the 'while' loop at line {line_of(k_while_zero_times, '# PATH')} "
                                 "runs zero times"),
    (k_first_iteration, lambda: f"the 'for' loop at line {line_of(k_first_iteration, '# PATH')} "
                                "runs its first iteration"),
    (k_break_path, lambda: f"the 'for' loop at line {line_of(k_break_path, '# PATH')} "
                           "ends without a 'break'"),
    (k_break_skips, lambda: f"the 'while' loop at line {line_of(k_break_skips, '# PATH')} ends at "
                            f"the 'break' at line {line_of(k_break_skips, '# NEXT')}"),
    (k_continue_skips, lambda: "unassigned when"),
    (k_augassign, lambda: f"the 'if' at line {line_of(k_augassign, '# PATH')} is false"),
]


@pytest.mark.parametrize("kern, path", CASES, ids=[c[0].__name__ for c in CASES])
def test_unassigned_on_some_path(kern, path):
    """Reading a variable some path leaves unassigned raises CompileError naming it, pointing at
    the read, and naming a path on which it is unassigned."""
    name = marked_line(kern)[2]
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(kern, dim=2, args=(np.zeros(2), 1))
    msg = check_points_at(ei.value, kern.__qualname__, kern, FILE)
    assert f"variable '{name}' may be used before it is assigned" in msg, msg
    assert path() in msg, msg


def test_unassigned_in_device_function():
    """The check covers device functions: the error points at the function's line and path."""
    with pytest.raises(tack.CompileError) as ei:
        tack.launch(k_in_device_function, dim=2, args=(np.zeros(2), 1))
    msg = check_points_at(ei.value, "k_in_device_function", pick, FILE)
    assert "variable 'y' may be used before it is assigned" in msg
    assert f"the 'if' at line {line_of(pick, '# PATH')} is false" in msg


# -- what stays legal: every path assigns before the read ---------------------------------

@tack.kernel
def k_both_branches(out, n):
    i = tack.tid()
    if n > i:
        x = 1.0
    else:
        x = 2.0
    out[i] = x


@tack.kernel
def k_other_branch_returns(out, n):
    i = tack.tid()
    if n > i:
        x = 3.0
    else:
        out[i] = -1.0
        return
    out[i] = x


@tack.kernel
def k_while_true_breaks(out, n):
    i = tack.tid()
    k = 0
    while True:
        x = 1.0 * k
        k += 1
        if k > n:
            break
    out[i] = x


@tack.kernel
def k_constant_range(out, n):
    i = tack.tid()
    for k in range(2, 5):
        x = 1.0 * k
    out[i] = x + k


@tack.kernel
def k_assigned_in_loop_and_before(out, n):
    i = tack.tid()
    x = 0.0
    for k in range(n):
        x = x + k
    out[i] = x


def test_assigned_on_every_path_runs():
    """Kernels that assign on every path compile and give Python's results."""
    out = np.zeros(4)
    tack.launch(k_both_branches, dim=4, args=(out, 2))
    np.testing.assert_array_equal(out, [1, 1, 2, 2])
    tack.launch(k_other_branch_returns, dim=4, args=(out, 2))
    np.testing.assert_array_equal(out, [3, 3, -1, -1])
    tack.launch(k_while_true_breaks, dim=4, args=(out, 3))
    np.testing.assert_array_equal(out, [3, 3, 3, 3])
    tack.launch(k_constant_range, dim=4, args=(out, 0))
    np.testing.assert_array_equal(out, [8, 8, 8, 8])
    tack.launch(k_assigned_in_loop_and_before, dim=4, args=(out, 4))
    np.testing.assert_array_equal(out, [6, 6, 6, 6])


N_CONST = tack.constant(4)
C3_CONST = tack.constant(np.arange(3.0))
ZERO_CONST = tack.constant(0)


@tack.kernel
def k_range_of_constants(out):
    i = tack.tid()
    for k in range(N_CONST):
        y = 1.0 * k
    for k in range(C3_CONST.shape[0]):
        z = C3_CONST[k]
    while N_CONST > 0:
        w = 2.0
        break
    out[i] = y + z + w


@tack.kernel
def k_range_of_a_zero_constant(out):
    i = tack.tid()
    for k in range(ZERO_CONST):
        y = 1.0 * k
    out[i] = y  # ERR y


def test_loops_whose_constants_decide_they_run_are_assigned_on_every_path():
    """docs/language.md: a ``for`` over a ``range`` of constant, non-empty bounds runs its body
    at least once, and ``tack.constant`` values and a constant array's shape are constants.
    Only literal bounds counted: ``range(N)`` of N = tack.constant(4), ``range(C.shape[0])`` and
    ``while N > 0`` were said to leave a variable unassigned when they run zero times.  A
    constant range that is empty still leaves it so."""
    out = np.zeros(2)
    tack.launch(k_range_of_constants, dim=2, args=(out,))
    assert out.tolist() == [3.0 + 2.0 + 2.0] * 2
    with pytest.raises(tack.CompileError, match="runs zero times") as e:
        tack.launch(k_range_of_a_zero_constant, dim=2, args=(out,))
    check_points_at(e.value, "k_range_of_a_zero_constant", k_range_of_a_zero_constant, FILE)
