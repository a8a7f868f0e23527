"""Backends, each in two halves (docs/architecture.md):

* the **runtime side** (``cpu_runtime``, ``<kind>_runtime``): what a warm
  process needs, with no compiler imported: the candidate target keys for a
  device, most specific first, ``load(payload, meta, device)`` of a stored
  artifact and the launchable variant (``make_variant``); every runtime
  offers the same interface, ``interface.Runtime``;
* the **toolchain side** (``cpu``): ``target(name)``, whose ``.key`` equals
  the runtime's key for that device, and the code generation hooks that
  ``tack.compiler.compile_variant`` drives from a typed kernel to an artifact.

``runtime(kind)`` gives the runtime side of a device kind (``cpu``; the GPU
kinds come with their backends); ``toolchain(kind)`` the toolchain side
(``cpu``, ``cuda``, ``rocm``, ``level_zero``, ``spirv``, ``metal``: each
module's ``target(name)`` takes a ``kind:arch`` name; docs/gpu.md for the GPU
ones).  The names each kind builds are ``arch_names``'s, the one registry.
"""

import sys


def _submodule(name: str):
    """``importlib.import_module(f"tack.backends.{name}")``, without importing importlib's
    package (0.1 ms of a warm process where NumPy has not)."""
    full = f"{__name__}.{name}"
    __import__(full)
    return sys.modules[full]


def toolchain(kind: str = "cpu"):
    """The toolchain side of the backend for architecture kind ``kind`` (``cpu``, ``cuda``,
    ``rocm``, ``level_zero``, ``spirv``, ``metal``): a module with ``target(name)``."""
    modules = {"cpu": "cpu", "cuda": "cuda", "rocm": "hip", "level_zero": "level_zero",
               "spirv": "level_zero", "metal": "metal"}
    if kind not in modules:
        raise ValueError(f"no backend for architectures of kind {kind!r}")
    try:
        return _submodule(modules[kind])
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{modules[kind]}":
            raise
        raise ValueError(f"no {kind} backend is installed in this Tack") from None


_RUNTIMES = {"cpu": "cpu_runtime", "opencl": "opencl_runtime", "cuda": "cuda_runtime",
             "hip": "hip_runtime", "level_zero": "level_zero_runtime", "metal": "metal_runtime"}


def runtime(kind: str = "cpu"):
    """The runtime side of the backend for device kind ``kind``: ``cpu``; ``opencl`` (SPIR-V
    through OpenCL, docs/opencl.md); ``cuda`` and ``hip`` (docs/gpu-runtime.md)."""
    module = _RUNTIMES.get(kind)
    if module is None:
        raise ValueError(f"device {kind!r} is not available; this build of Tack runs kernels "
                         f"on {', '.join(repr(k) for k in _RUNTIMES)} (with an index: 'opencl:0')")
    return _submodule(module)


def runtime_for(device) -> tuple:
    """``(kind, runtime)`` of a launch's ``device`` (``"cpu"``, ``"opencl"``, ``"opencl:1"``)."""
    kind = device.split(":", 1)[0] if isinstance(device, str) else None
    if kind is None or (kind == "cpu" and device != "cpu"):
        raise ValueError(f"device {device!r} is not available; this build of Tack runs kernels "
                         f"on {', '.join(repr(k) for k in _RUNTIMES)} (with an index: 'opencl:0')")
    return kind, runtime(kind)
