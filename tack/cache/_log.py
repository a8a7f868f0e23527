"""The ``tack.cache`` logger, without importing ``logging`` on the warm path.

``logging`` costs milliseconds to import, a large share of a warm kernel
call.  Until the process has imported it (so someone may have configured a
handler) or TACK_CACHE_LOG asks for output, messages are dropped unformatted.
"""

from __future__ import annotations

import sys

NAME = "tack.cache"
TRACE = 5            # the key steps, below DEBUG


class _Logger:
    __slots__ = ()

    @staticmethod
    def _real():
        logging = sys.modules.get("logging")
        return logging.getLogger(NAME) if logging is not None else None

    def isEnabledFor(self, level) -> bool:
        real = self._real()
        return real is not None and real.isEnabledFor(level)

    def log(self, level, msg, *args):
        real = self._real()
        if real is not None and real.isEnabledFor(level):
            real.log(level, msg, *args)

    def debug(self, msg, *args):
        self.log(10, msg, *args)


log = _Logger()
