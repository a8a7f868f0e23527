import sys as _sys

if getattr(_sys.modules.get("tack"), "__file__", "") is None:   # a folder named tack hides Tack
    from .._shadowed import check as _check
    _check()
