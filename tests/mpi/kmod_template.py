"""Kernels for the bundle and MPI tests."""
import numpy as np

import tack

GAIN = tack.constant(2.0)


@tack.func
def twice(v):
    return v * GAIN


@tack.kernel
def k_a(x, y):
    i = tack.tid()
    y[i] = twice(x[i]) + 1.0


@tack.kernel
def k_b(x, y):
    i = tack.tid()
    y[i] = x[i] * x[i]


@tack.kernel
def k_extra(x, y):
    i = tack.tid()
    y[i] = x[i] - 7.0


REFERENCES = {"k_a": lambda x: 2.0 * x + 1.0, "k_b": lambda x: x * x, "k_extra": lambda x: x - 7.0}
