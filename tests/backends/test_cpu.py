"""The CPU backend: object code for the host (loads and runs) and for another microarchitecture (emitted, not loadable)."""

import platform
import struct

import llvmlite.binding as llvm
import numpy as np
import pytest

import tack
from tack.backends.cpu import CPUTarget, host_target
from tack.codegen import generate
from tack.argtypes import typeof_arg
from tack.compiler import lower
from tack.specialize import specialize


@tack.kernel
def k_axpy(x, y, out, a):
    i, j = tack.tid()
    out[i, j] = a * x[i, j] + y[i, j] + math_free(i)


@tack.func
def math_free(i):
    return i * 1000.0


def typed_axpy(shape=(6, 5)):
    x = np.ones(shape)
    types = tuple(typeof_arg("k_axpy", p, v) for p, v in zip(k_axpy.params, (x, x, x, 2.0)))
    return specialize(lower(k_axpy, {}, False), types, 2)


def other_cpu():
    return "skylake-avx512" if host_target().cpu == "znver3" else "znver3"


def elf_header(obj):
    """(class, data, type, machine) of an ELF object."""
    assert obj[:4] == b"\x7fELF"
    ei_class, ei_data = obj[4], obj[5]
    e_type, e_machine = struct.unpack_from("<HH" if ei_data == 1 else ">HH", obj, 16)
    return ei_class, ei_data, e_type, e_machine


def test_non_host_cpu_emits_object_code():
    """A target for another microarchitecture emits relocatable ELF object code for this architecture."""
    target = CPUTarget(other_cpu())
    assert not target.is_host and target.identity()["cpu"] == other_cpu()
    gen = generate(typed_axpy(), target, "tack_test_cpu_other")
    ref = target.optimize(gen.module)
    assert isinstance(ref, llvm.ModuleRef)
    obj = target.emit_object(ref)
    assert isinstance(obj, bytes)
    ei_class, ei_data, e_type, e_machine = elf_header(obj)
    assert ei_class == 2 and e_type == 1                 # 64-bit, ET_REL
    if platform.machine() in ("x86_64", "AMD64"):
        assert e_machine == 62                           # EM_X86_64
    assert gen.entry.encode() in obj


def test_non_host_object_cannot_be_loaded():
    """Loading object code built for another microarchitecture raises RuntimeError."""
    target = CPUTarget(other_cpu())
    gen = generate(typed_axpy(), target, "tack_test_cpu_other_load")
    obj = target.emit_object(target.optimize(gen.module))
    with pytest.raises(RuntimeError, match=other_cpu()):
        target.load(obj, gen.entry)


def test_host_object_loads_and_runs_a_range():
    """Host object code loads and its entry point runs exactly the requested range of the first grid
    dimension, reading each array's extents from its slots."""
    target = CPUTarget()
    assert target.is_host and target.cpu == llvm.get_host_cpu_name()
    gen = generate(typed_axpy(), target, "tack_test_cpu_host")
    obj = target.emit_object(target.optimize(gen.module))
    assert elf_header(obj)[2] == 1
    fn = target.load(obj, gen.entry)
    x = np.arange(30.0).reshape(6, 5)
    y = np.full((6, 5), 0.5)
    out = np.full((6, 5), -1.0)
    # each C-ordered array: its data pointer, then its extents; then the scalar; then the grid
    slots = struct.pack("<QqqQqqQqqdqqq", x.ctypes.data, 6, 5, y.ctypes.data, 6, 5,
                        out.ctypes.data, 6, 5, 2.0, 6, 5, 1)
    fn(slots, 2, 5)
    want = 2.0 * x + y + 1000.0 * np.arange(6)[:, None]
    np.testing.assert_array_equal(out[2:5], want[2:5])
    np.testing.assert_array_equal(out[:2], -1.0)
    np.testing.assert_array_equal(out[5:], -1.0)


def test_host_and_non_host_assembly_name_the_entry():
    """emit_assembly gives text defining the entry symbol for host and non-host targets alike."""
    for target in (host_target(), CPUTarget(other_cpu())):
        gen = generate(typed_axpy(), target, "tack_test_cpu_asm")
        asm = target.emit_assembly(target.optimize(gen.module))
        assert f"{gen.entry}:" in asm


def test_identity_describes_compiled_code():
    """A target's identity names the backend, LLVM version, triple, CPU and features."""
    ident = host_target().identity()
    assert ident["backend"] == "cpu"
    assert set(ident) >= {"llvm", "triple", "cpu", "features"}
    assert ident["cpu"] == llvm.get_host_cpu_name()
    assert CPUTarget(other_cpu()).identity()["cpu"] != ident["cpu"]


@tack.kernel
def k_powers(x, out):
    i = tack.tid()
    out[i, 0] = x[i] ** 2.0
    out[i, 1] = x[i] ** 0.5


@tack.kernel
def k_power_of_eight(x, out):
    i = tack.tid()
    out[i] = 8.0 ** x[i]


def test_pow_keeps_its_exact_rewrites_and_is_otherwise_a_call_of_libm_pow():
    """Powers are C's ``pow``, declared so LLVM cannot rewrite it (``8.0 ** x`` is not
    ``exp2(3 * x)``), but ``x ** 2`` still becomes a multiply and ``x ** 0.5`` a square root:
    no call is left in their kernel."""
    target = host_target()
    texts = {}
    for kern in (k_powers, k_power_of_eight):
        x = np.ones(4)
        out = np.zeros((4, 2)) if kern is k_powers else np.zeros(4)
        types = tuple(typeof_arg(kern.__name__, p, v) for p, v in zip(kern.params, (x, out)))
        gen = generate(specialize(lower(kern, {}, False), types, 1), target, f"tack_test_{kern.__name__}")
        texts[kern] = str(target.optimize(gen.module))
    assert "@pow(" not in texts[k_powers] and "exp2" not in texts[k_powers]
    assert "llvm.sqrt" in texts[k_powers] and "fmul" in texts[k_powers]
    assert "@pow(double 8.0" in texts[k_power_of_eight] and "exp2" not in texts[k_power_of_eight]


@tack.kernel
def k_saxpy32(a, x, y, out):
    i = tack.tid()
    out[i] = a * x[i] + y[i]


@pytest.mark.parametrize("kernel, args, ndim", [
    (k_saxpy32, (np.float32(2.0), np.ones(64, np.float32), np.ones(64, np.float32),
                 np.empty(64, np.float32)), 1),
    (k_axpy, (np.ones((6, 5)), np.ones((6, 5)), np.ones((6, 5)), 2.0), 2),
])
def test_an_elementwise_loop_over_the_grid_is_vectorized(kernel, args, ndim):
    """The entry tells LLVM a grid's indices are never negative, so an index's wrap-around
    (Python's ``x[-1]``) folds away where the index is the thread's, and the grid loop is
    vectorized with whole-vector loads.  (Before, each element went through a select on
    ``i < 0``: scalar code for ``x86_64_v3``, 14 instructions an element, and gathers on a host
    with AVX-512.)"""
    import re

    from tack.backends.cpu import target as cpu_target
    types = tuple(typeof_arg(kernel.__name__, p, v) for p, v in zip(kernel.params, args))
    targets = [host_target()]
    if platform.machine() in ("x86_64", "AMD64"):
        targets.append(cpu_target("x86_64_v3"))       # what a site bundle is usually built for
    for target in targets:
        gen = generate(specialize(lower(kernel, {}, False), types, ndim), target, "tack_test_vec")
        ir_text = str(target.optimize(gen.module))
        assert re.search(r"= load <\d+ x (float|double)>", ir_text), (target.cpu, ir_text)
        assert re.search(r"= fmul [a-z ]*<\d+ x (float|double)>", ir_text), (target.cpu, ir_text)
        assert "gather" not in ir_text, (target.cpu, ir_text)
