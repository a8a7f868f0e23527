"""The variant of a device runtime (CUDA, HIP, Level Zero, OpenCL, Metal): ``DeviceVariant``,
launched through that runtime's ``launch``, and the answers every device runtime gives alike to
the dispatcher (``device_variant`` for ``make_variant``, ``no_host_views``, ``any_arrays``,
``ordered_site_bundles`` for ``site_bundles``).

Apart from ``variant`` (what every variant shares), so that a CPU launch, which imports that,
does not define what only a device's launch runs.
"""

from .device_args import block_request
from .variant import BoundsReport, Signature, grid_check, refusal


class DeviceVariant(BoundsReport):
    """A compiled variant on a device: ``launch(kernel, meta, values, dims, debug, block)`` is
    its runtime's, which copies NumPy arrays to the device and back around each launch.  Before
    it, the launch check every variant makes (``variant.GridCheck``): a grid that runs past an
    array indexed by the thread index on every point, or an array without the element a
    constant index of every point names, is refused, as on the CPU, instead of writing past
    the array's device memory."""

    def __init__(self, launch, kernel, meta, sig: Signature):
        self.launch, self.kernel, self.meta = launch, kernel, meta
        self.name, self.params, self.arg_index = sig.name, sig.params, sig.arg_index
        self.sites, self.locate = sig.sites, sig.locate
        self.grid = grid_check(sig, meta.get("tidx"))

    def run(self, args, dims, block=None):
        if block is not None:           # as the CPU checks it, first, whatever the grid
            block_request(dims, block)
        values = [args[i] for i in self.arg_index]
        grid = self.grid
        if grid is not None and all(dims):
            try:
                refused = grid.too_large(args, dims + (1,) * (3 - len(dims)))
            except (AttributeError, TypeError, IndexError):
                refused = False                 # not an array a device takes: its launch says why
            if refused:
                grid.refuse(args, dims)
        try:
            err = self.launch(self.kernel, self.meta, values, dims, self.sites is not None, block)
        except (TypeError, ValueError, RuntimeError) as e:
            said = self.in_user_terms(str(e))
            if said == str(e):
                raise
            named = type(e)(said)
            raise (refusal(named) if getattr(e, "tack_launch_error", False) else named) from None
        if err is not None and err[0]:
            self.raise_bounds_error(err)

    def in_user_terms(self, message: str) -> str:
        """A runtime's message with the kernel's name for its entry symbol, and each argument's
        parameter name for its index among the value arguments."""
        entry = f"kernel '{self.meta.get('entry')}'"
        if entry not in message:
            return message
        message = message.replace(entry, f"kernel '{self.name}'")
        for i, p in enumerate(self.params):
            message = message.replace(f"'{self.name}': argument {i} ", f"'{self.name}': argument '{p}' ")
        return message


def device_variant(launch):
    """A device runtime's ``make_variant(fn, meta, sig)``: a ``DeviceVariant`` of the loaded
    kernel ``fn``, launched through ``launch``."""
    def make_variant(fn, meta, sig: Signature) -> DeviceVariant:
        return DeviceVariant(launch, fn, meta, sig)
    return make_variant


def ordered_site_bundles(site_candidates):
    """A device runtime's ``site_bundles(names, header, defer=None)``: [(``kind:arch``, target
    key, name)] of the site bundles among ``names`` it uses, in ``site_candidates()``' order.
    Read when a lookup first reaches them: no header is needed, so nothing is left to
    ``defer``'s checks."""
    def site_bundles(names, header, defer=None) -> list:
        from ..cache.bundle import named_candidates
        return named_candidates(site_candidates(), names)
    return site_bundles


def no_host_views(args):
    """A device runtime's ``host_views``: it takes NumPy arrays and its own, and views nothing."""
    return None


def any_arrays(name, params, args, argtypes):
    """A device runtime's ``check_args``: its launch checks each array itself."""
