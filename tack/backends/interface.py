"""The interface every runtime offers (``tack.backends.runtime(kind)``), the CPU's included: what
the dispatcher (``tack.launch``), the cache, ``tack.devices()`` and the site tools ask of a
device kind.  A runtime is a module; ``tests/backends/test_runtime_interface.py`` checks each
registered one (``tack.backends._RUNTIMES``) against ``Runtime``, names and parameters.

A new backend's runtime is one new module that offers these and one entry in ``_RUNTIMES``:
the dispatcher has no branch on a device kind.  Nothing on the warm path imports this module.

Optional, not in the protocol: ``store_back(kernel)`` -> (target key, artifact, metadata) or
None: code a device's driver compiled while loading portable code (Level Zero's native code
from SPIR-V, an OpenCL program binary), which the dispatcher stores under the device's key.
``startup_seconds()`` -> the seconds the runtime has spent starting its own workers (the CPU's
thread pool), which the dispatcher reports as a first call's "threads" stage.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Runtime(Protocol):
    """One device kind's runtime side (docs/architecture.md, "Adding a backend")."""

    KIND: str               # the device kind: ``cpu``, ``cuda``, ``hip``, ``level_zero`` ...
    # The machine its bundles' file names carry (``bundle-<machine>-<key>``, as ``pack`` names
    # them from its code's metadata): the host's for the CPU, the code's for a GPU kind
    # (``nvptx64``, ``amdgcn``, ``spirv64``, ``metal``: ``arch_names.bundle_machine``).
    BUNDLE_MACHINE: str

    def available(self) -> bool:
        """Whether a device of this kind is here; never raises."""

    def unavailable_reason(self) -> str | None:
        """Why there is none, with what to install; None when there is one."""

    def devices(self) -> list:
        """[(a device's label, its device string: ``cuda:0``)] of the devices found."""

    def get_device(self, device=None):
        """The device ``device`` names, opened; the runtime's unavailable error if none."""

    def host_key(self) -> str:
        """The target key of code compiled in this process (for the default device)."""

    def lookup_keys(self, device=None) -> list:
        """The target keys the cache looks a variant for ``device`` up with, most specific first."""

    def site_candidates(self, host=None) -> list:
        """[(``kind:arch``, target key)] of the site bundles this node can use, most specific first
        (the tools'; the CPU's asks archspec)."""

    def site_bundles(self, names, header, defer=None) -> list:
        """[(``kind:arch``, target key, name)] of the site bundles among ``names`` (a site
        directory's ``bundle-...`` file names) this node uses, most specific first: what the
        cache's ``SiteBundleStore`` and ``bundles status`` ask.  ``header(name)``: that bundle's
        header fields, or None when it cannot be used; read once, and only where asked.
        ``defer``: a dict where the caller takes checks of headers to run when it opens a
        bundle (name -> header fields -> None, or why not): a bundle whose header the choice did
        not need is then answered unread (the CPU's generic levels), and a file replacing a
        chosen one is checked too (the CPU puts a check there for each bundle it chooses)."""

    def toolchain_target(self, device=None):
        """The toolchain's target that compiles for ``device`` (a miss only: imports the compiler)."""

    def load(self, payload, meta, device):
        """A stored artifact and its metadata -> the loaded kernel on ``device``."""

    def host_views(self, args):
        """(the indices of the arguments this runtime takes only as views, the view: one argument
        -> a NumPy array over its memory) when there are any (the CPU: other libraries' host
        arrays); else None.  The dispatcher runs the variant over views made anew at each launch
        and checked against those it was typed from."""

    def check_args(self, name, params, args, argtypes):
        """TypeError for an argument this runtime never takes, before anything compiles."""

    def make_variant(self, fn, meta, sig):
        """The launchable variant (``run(args, dims, block)``) of a loaded kernel ``fn``, for the
        value arguments ``sig`` (``backends.variant.Signature``) describes."""

    def to_device(self, array, device):
        """``array`` kept on ``device`` across launches (``tack.to_device``)."""
