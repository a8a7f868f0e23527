"""Object code for this host -> a callable entry point, without importing llvmlite.

This is what a warm process runs: Tack's own ELF loader (``elf.py``), and
llvmlite's MCJIT only where that loader cannot take the object.
"""

from __future__ import annotations

import ctypes

from . import elf

ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def load_object(obj: bytes, entry: str):
    """A ctypes function for ``entry`` in object code ``obj`` (built for this host)."""
    try:
        addr = elf.load(obj).address(entry)
    except elf.LoadError as e:
        if not e.well_formed:
            raise
        from .cpu import load_mcjit
        addr = load_mcjit(obj, entry)
    if not addr:
        raise RuntimeError(f"entry point {entry} not found in object code")
    return ENTRY_TYPE(addr)
