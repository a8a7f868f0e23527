"""Backends, each in two halves (docs/architecture.md):

* the **runtime side** (``cpu_runtime``): what a warm process needs, with no
  compiler imported: the candidate target keys for a device, most specific
  first, and ``load(payload, meta)`` of a stored artifact;
* the **toolchain side** (``cpu``): ``target(name)``, whose ``.key`` equals
  the runtime's key for that device, and the code generation hooks that
  ``tack.compiler.compile_variant`` drives from a typed kernel to an artifact.

``runtime(kind)`` gives the runtime side of a device kind (``cpu``; the GPU
kinds come with their backends).
"""

from __future__ import annotations


def runtime(kind: str = "cpu"):
    """The runtime side of the backend for device kind ``kind``."""
    if kind == "cpu":
        from . import cpu_runtime
        return cpu_runtime
    raise ValueError(f"device {kind!r} is not available; this build of Tack runs kernels on 'cpu'")
