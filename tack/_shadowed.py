"""Whether a folder named ``tack`` hides the installed Tack.

Run from the directory that holds a checkout named ``tack`` (after ``pip install -e .``),
``import tack`` finds that folder first: it has no ``__init__.py`` (the package is one level
down), so Python takes it for a *namespace package* and never runs Tack's ``__init__``.  An
editable install still finds Tack's submodules (``tack.demo``, ``tack.kernels``), which then
fail on ``tack.constant`` with an ``AttributeError`` that says nothing of the cause.  The entry
points that can still run (the demo, ``tack.kernels``) ask :func:`message` first.  A script's own
``import tack; tack.kernel`` cannot be caught, since nothing of Tack's runs: README says so.
"""

from __future__ import annotations

import os
import sys


def message() -> str | None:
    """What to tell the user if ``tack`` is a namespace package here, else None."""
    mod = sys.modules.get("tack")
    if mod is None or getattr(mod, "__file__", None) is not None:
        return None
    folders = [str(p) for p in getattr(mod, "__path__", ())]
    folder = folders[0] if folders else "tack"
    installed = os.path.dirname(os.path.abspath(__file__))
    here = os.path.abspath(os.getcwd())
    hint = (f"run from another directory (from inside the checkout, `cd {os.path.relpath(folder, here)}`, "
            "works)" if os.path.dirname(os.path.abspath(folder)) == here
            else "take that directory off sys.path or PYTHONPATH")
    return (f"the folder {folder} hides the installed Tack ({installed}): it has no __init__.py, so "
            f"Python imported it as an empty namespace package named 'tack'; {hint}")


def check() -> None:
    """Raise ImportError with :func:`message` if ``tack`` is a namespace package here."""
    msg = message()
    if msg is not None:
        raise ImportError(msg, name="tack")
