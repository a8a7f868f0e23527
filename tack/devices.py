"""``tack.devices()`` and ``tack.to_device()``: what this process can launch on, and arrays kept there."""

from .records import fields


@fields(("name", "device", "target"))
class Device(tuple):
    """A device this process can launch on: its ``name``, the ``device`` string ``tack.launch``
    takes (``"cpu"``, ``"opencl:0"``, ``"cuda:1"``) and the ``target`` it compiles for
    (``kind:name``: ``cpu:zen3``, ``spirv:generic``, ``cuda:sm_90``)."""
    __slots__ = ()


def devices() -> list:
    """Every device this process can use, the CPU first; a runtime whose driver, bindings or
    device are missing lists nothing (its ``unavailable_reason()`` says why)."""
    from .backends import _RUNTIMES, runtime
    import platform
    cpu = runtime("cpu")
    try:
        arch = f"cpu:{cpu.host_arch()}"
    except Exception:                           # noqa: BLE001 - no archspec: the host, unnamed
        arch = "cpu:host"
    out = [Device(platform.processor() or platform.machine(), "cpu", arch)]
    for kind in _RUNTIMES:
        if kind == "cpu":
            continue
        rt = runtime(kind)
        if not rt.available():
            continue
        for name, dev in rt.devices():
            try:
                target = rt.toolchain_target(dev).name
            except Exception as e:              # noqa: BLE001 - listed, with why it cannot build
                target = f"none ({type(e).__name__}: {e})"
            out.append(Device(name, dev, target))
    return out


def to_device(array, device: str):
    """``array`` kept on ``device`` across launches (its runtime's device array, whose
    ``.numpy()`` copies it back); on ``"cpu"``, the array itself."""
    from .backends import runtime_for
    from .config import config
    try:
        _, rt = runtime_for(device)
        return rt.to_device(array, device)
    except Exception as e:              # noqa: BLE001 - only a refusal is re-raised here
        if config.debug or not getattr(e, "tack_launch_error", False):
            raise
        refused = e
    # A refusal of the device (its runtime's Unavailable): the frames that checked are not the
    # user's to read (as at a launch), and raised past the handler, with no exception in flight.
    raise refused.with_traceback(None) from None
