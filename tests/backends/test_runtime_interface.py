"""Every registered runtime, the CPU's included, offers the runtime interface
(``tack.backends.interface.Runtime``): the same names, taking the same parameters."""

import importlib
import inspect
import subprocess
import sys

import pytest

from tack.backends import _RUNTIMES, runtime
from tack.backends.interface import Runtime

KINDS = sorted(_RUNTIMES)


def _methods():
    return [n for n, v in vars(Runtime).items() if inspect.isfunction(v) and not n.startswith("_")]


@pytest.mark.parametrize("kind", KINDS)
def test_runtime_satisfies_the_protocol(kind):
    """The runtime module is a ``Runtime`` and names its own kind."""
    rt = runtime(kind)
    assert isinstance(rt, Runtime), [n for n in _methods() + ["KIND"] if not hasattr(rt, n)]
    assert rt.KIND == kind


# The registry kind of each runtime's code, whose machine names its bundles (``pack``'s names).
CODE_KIND = {"cpu": "cpu", "cuda": "cuda", "hip": "rocm", "opencl": "spirv",
             "level_zero": "level_zero", "metal": "metal"}


@pytest.mark.parametrize("kind", KINDS)
def test_bundle_machine_is_the_registrys_for_the_runtimes_code(kind):
    """``BUNDLE_MACHINE`` is ``arch_names.bundle_machine`` of the kind the runtime's code is (the
    CPU's spelled out as ``platform.machine()``, to keep the registry off the warm path)."""
    from tack.backends.arch_names import bundle_machine
    assert runtime(kind).BUNDLE_MACHINE == bundle_machine(CODE_KIND[kind])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", _methods())
def test_runtime_methods_take_the_protocols_parameters(kind, name):
    """Each method takes the protocol's parameters by the same names, in the same order; any more
    it takes have defaults."""
    want = list(inspect.signature(getattr(Runtime, name)).parameters)[1:]        # without self
    got = list(inspect.signature(getattr(runtime(kind), name)).parameters.values())
    assert [p.name for p in got[:len(want)]] == want, f"{kind}.{name}{[p.name for p in got]}"
    assert all(p.default is not p.empty for p in got[len(want):]), f"{kind}.{name}"


def test_optional_store_back_takes_the_kernel():
    """Where a runtime stores its driver's code back (Level Zero's, OpenCL's), ``store_back``
    takes the loaded kernel alone."""
    stores = [k for k in KINDS if hasattr(runtime(k), "store_back")]
    assert stores == ["level_zero", "opencl"]
    for kind in stores:
        assert list(inspect.signature(runtime(kind).store_back).parameters) == ["kernel"], kind


def test_every_runtime_imports_without_its_driver():
    """In a fresh process, every runtime imports without importing its driver's bindings or the
    compiler: a runtime is light until a call needs a device."""
    modules = ", ".join(f"'tack.backends.{m}'" for m in _RUNTIMES.values())
    script = (f"import importlib, sys\nfor m in [{modules}]:\n    importlib.import_module(m)\n"
              "heavy = ('cuda', 'hip', 'pyopencl', 'Metal', 'llvmlite', 'tack.codegen', "
              "'tack.frontend', 'tack.specialize', 'tack.compiler')\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or "
              "m.startswith(heavy)))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_registered_runtimes_are_modules_of_the_package():
    """``_RUNTIMES`` names a module of ``tack.backends`` for each kind."""
    for kind, module in _RUNTIMES.items():
        assert importlib.import_module(f"tack.backends.{module}") is runtime(kind)
