"""What the GPU code generation tests share: the vendors' tools (each test names the one it
needs and skips, saying which and how to install it, only where it is absent: CI installs them
with ci/install-gpu-tools.sh), the launches of the CPU language suite, and a build helper."""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import subprocess

import pytest

import tack
from tack import types as T
from tack.backends import toolchain
from tack.backends.gpu import ToolError, find_lld, find_ocloc, find_ptxas
from tack.compiler import compile_variant, lower
from tack.argtypes import argtypes_of

INSTALL = "run ci/install-gpu-tools.sh"


def _found(finder):
    try:
        return finder()
    except ToolError:
        return None


def _llvm_tool(name):
    import llvmlite.binding as llvm
    major = llvm.llvm_version_info[0]
    for path in (f"/usr/lib/llvm-{major}/bin/{name}", f"/usr/bin/{name}-{major}"):
        if os.access(path, os.X_OK):
            return path
    return None


def _beside_ptxas(name):
    """NVIDIA's ``cuobjdump``/``nvdisasm`` from their PyPI wheels (nvidia-cuda-cuobjdump,
    nvidia-cuda-nvdisasm), which install beside the wheel's ptxas (site-packages/nvidia/cu*/bin)."""
    import glob
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(glob.glob(os.path.join(root, "cu*", "bin", name))
                           + glob.glob(os.path.join(root, f"cuda_{name}", "bin", name)), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


TOOLS = {
    "ptxas": (lambda: _found(find_ptxas), "PyPI nvidia-cuda-nvcc"),
    "cuobjdump": (lambda: _beside_ptxas("cuobjdump"), "PyPI nvidia-cuda-cuobjdump"),
    "nvdisasm": (lambda: _beside_ptxas("nvdisasm"), "PyPI nvidia-cuda-nvdisasm"),
    "ld.lld": (lambda: _found(find_lld), "Debian lld-22"),
    "llvm-readelf": (lambda: _llvm_tool("llvm-readelf"), "Debian llvm-22"),
    "spirv-val": (lambda: shutil.which("spirv-val"), "Debian spirv-tools"),
    "spirv-dis": (lambda: shutil.which("spirv-dis"), "Debian spirv-tools"),
    "ocloc": (lambda: _found(find_ocloc), "Debian intel-opencl-icd"),
}


@functools.lru_cache(maxsize=None)
def tool(name: str):
    """The path (or command) of a vendor tool; the test is skipped, naming it, if it is absent."""
    finder, package = TOOLS[name]
    found = finder()
    if found is None:
        pytest.skip(f"{name} is not installed (from {package}; {INSTALL})")
    return found


def run(cmd, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stdout}{res.stderr}"
    return res


def build(kernel, args, grid, target, debug=False, templates=None, argtypes=None):
    """compile_variant (the one compile path) for a kernel and example launch arguments."""
    if argtypes is None:
        argtypes = argtypes_of(kernel, args)
        templates = {p: a for p, a, t in zip(kernel.params, args, argtypes) if isinstance(t, T.Template)}
    values = tuple(t for t in argtypes if not isinstance(t, T.Template))
    lowered = lower(kernel, templates or {}, debug)
    return compile_variant(lowered, None, values, grid, target, debug)


def gpu_target(name, **options):
    """The toolchain's target for ``name``; ``options`` for its kind's ``target`` (CUDA's
    ``sass``: False for PTX alone)."""
    return toolchain(name.split(":")[0]).target(name, **options)


class Launch:
    """One launch of the CPU language suite: kernel, argument types, templates, grid rank."""

    def __init__(self, kernel, argtypes, templates, grid):
        self.kernel, self.argtypes, self.templates, self.grid = kernel, argtypes, templates, grid

    @property
    def name(self):
        return self.kernel.__qualname__

    def __repr__(self):
        return f"{self.name}({', '.join(map(str, self.argtypes))}; {self.grid}-D)"

    def build(self, target, debug=False):
        return build(self.kernel, None, self.grid, target, debug, self.templates, self.argtypes)


@functools.lru_cache(maxsize=None)
def language_launches() -> tuple:
    """Every distinct launch tests/test_language.py makes (kernel, argument types, grid rank),
    recorded by running its tests (each parameter set) on the CPU with tack.launch wrapped."""
    real = tack.launch
    seen = {}

    def recording(kernel, dim, args=(), device="cpu", block=None):
        argtypes = tuple(argtypes_of(kernel, args))
        templates = {p: a for p, a, t in zip(kernel.params, args, argtypes) if isinstance(t, T.Template)}
        grid = 1 if isinstance(dim, int) or not hasattr(dim, "__len__") else len(dim)
        key = (kernel.__qualname__, argtypes, grid)
        seen.setdefault(key, Launch(kernel, argtypes, templates, grid))
        return real(kernel, dim, args, device)

    for case, error in replay_language_suite(recording).items():
        if error is not None:
            raise AssertionError(f"{case} failed on the CPU: {type(error).__name__}: {error}")
    return tuple(seen.values())


def replay_language_suite(launch) -> dict:
    """Run every test of tests/test_language.py (each parameter set) with ``tack.launch`` replaced
    by ``launch``, in a kernel cache of its own: {case: the exception it raised, or None}.  The
    suite's kernels start and are left as a fresh import would leave them (its own tests count
    variants, and may have run before in this process)."""
    from tests import test_language as suite
    _fresh(suite)
    real = tack.launch
    tack.launch = launch
    private = _private_cache()
    out = {}
    try:
        for name in sorted(n for n in dir(suite) if n.startswith("test_")):
            fn = getattr(suite, name)
            marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
            for combo in itertools.product(*[_param_sets(m) for m in marks]):
                kwargs = {k: v for names, values in combo for k, v in zip(names, values)}
                try:
                    fn(**kwargs)
                    out[f"{name}{kwargs}"] = None
                except Exception as e:              # noqa: BLE001 - the caller judges it
                    out[f"{name}{kwargs}"] = e
                tack.config.reset()
    finally:
        tack.launch = real
        tack.config.reset()
        private.close()
        _fresh(suite)
    return out


def _fresh(suite):
    """The suite's kernels with nothing lowered or compiled in this process."""
    for value in vars(suite).values():
        if isinstance(value, tack.api.Kernel):
            value._lowered.clear()
            value._variants.clear()


def language_suite_on(device) -> tuple:
    """``replay_language_suite`` with every launch on ``device``: (cases run, {case: error} of
    those that failed, {case: first line} of those refused at compile time)."""
    real = tack.launch
    results = replay_language_suite(
        lambda k, dim, args=(), device_=None, block=None: real(k, dim, args, device))
    failed = {c: f"{type(e).__name__}: {e}" for c, e in results.items()
              if e is not None and not isinstance(e, tack.CompileError)}
    refused = {c: str(e).splitlines()[0] for c, e in results.items()
               if isinstance(e, tack.CompileError)}
    return len(results), failed, refused


class _private_cache:
    """A kernel cache of its own while the language suite is replayed (its entries must not
    serve the suite's own tests later in the run: they count what compiles), then the run's."""

    def __init__(self):
        import tempfile
        import tack.cache
        self._dir = tempfile.TemporaryDirectory(prefix="tack-replay-")
        self._saved = os.environ.get("TACK_CACHE_DIR")
        os.environ["TACK_CACHE_DIR"] = self._dir.name
        tack.cache._reset_for_tests()

    def close(self):
        import tack.cache
        if self._saved is None:
            os.environ.pop("TACK_CACHE_DIR", None)
        else:
            os.environ["TACK_CACHE_DIR"] = self._saved
        tack.cache._reset_for_tests()
        self._dir.cleanup()


def _param_sets(mark):
    names = mark.args[0]
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    out = []
    for values in mark.args[1]:
        if hasattr(values, "values"):            # pytest.param
            values = values.values
        out.append((names, values if len(names) > 1 else (values,)))
    return out


# -- kernels both the GPU codegen and the Metal tests build --------------------------------------

@tack.func
def lerp(a, b, t):
    return a + (b - a) * t


@tack.kernel
def lerp_literal(x, y, out):
    """A float32 kernel passing a literal to a device function (weak there: float32)."""
    i = tack.tid()
    out[i] = lerp(x[i], y[i], 0.25) * 2.0


def spirv_has_float64(spirv: bytes) -> bool:
    """Whether a SPIR-V module declares OpCapability Float64."""
    return (2 << 16 | 17).to_bytes(4, "little") + (10).to_bytes(4, "little") in spirv

