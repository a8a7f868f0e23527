"""Process-wide settings: ``tack.config.debug``, ``.timing``, ``.num_threads``.

Each defaults from its environment variable (TACK_DEBUG, TACK_TIMING,
TACK_NUM_THREADS), read the first time it is asked for, and can be set from
Python at any time; a change applies to the next launch.
"""

import os

from .errors import warn

#: The words an on/off setting takes (any case), the one vocabulary of every TACK_ switch.
TRUE_WORDS = frozenset(("1", "true", "yes", "on"))
FALSE_WORDS = frozenset(("0", "false", "no", "off"))


def _env_flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in TRUE_WORDS:
        return True
    if raw and raw not in FALSE_WORDS:
        warn(f"tack: {name}={raw!r} is not a boolean (use 1 or 0); using 0", stacklevel=3)
    return False


MAX_THREADS = 65536


def _env_threads() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    raw = os.environ.get("TACK_NUM_THREADS", "").strip()
    if not raw:
        return max(cores or 1, 1)
    if raw.isascii() and raw.isdigit() and len(raw) <= 6 and 0 < int(raw) <= MAX_THREADS:
        return int(raw)
    shown = raw if len(raw) <= 32 else raw[:24] + "..."
    warn(f"tack: TACK_NUM_THREADS={shown!r} is not an integer from 1 to {MAX_THREADS}; "
         f"using {cores}", stacklevel=3)
    return max(cores or 1, 1)


def _flag_value(name: str, value) -> bool:
    """An on/off setting set from Python: a bool or an int (0 or 1, NumPy's too), or one of
    the words its environment variable takes (``"0"``, ``"off"``...: ``bool("0")`` would turn it
    on); ValueError for anything else."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return word in TRUE_WORDS
    elif not isinstance(value, float):
        try:
            if value in (0, 1):
                return bool(value)
        except (TypeError, ValueError):         # an array: its truth is ambiguous
            pass
    raise ValueError(f"tack.config.{name} must be True or False (or 1, 0, \"on\", \"off\"), "
                     f"not {value!r}")


class Config:
    """Settings read lazily from the environment, overridable from Python."""

    _sources = {"debug": lambda: _env_flag("TACK_DEBUG"),
                "timing": lambda: _env_flag("TACK_TIMING"),
                "num_threads": _env_threads}

    def __getattr__(self, name):
        # Called only while ``name`` is not yet an instance attribute: read the
        # environment once, then keep the value as a plain attribute (fast path).
        if name.startswith("_") or name not in self._sources:
            raise AttributeError(f"tack.config has no setting {name!r}")
        value = self._sources[name]()
        object.__setattr__(self, name, value)
        return value

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name not in self._sources:
            raise AttributeError(f"tack.config has no setting {name!r}; "
                                 f"known: {', '.join(sorted(self._sources))}")
        if name == "num_threads":
            # an integer of any kind (np.int64(2), as a launch's dim takes), kept as Python's
            import operator
            try:
                # (NumPy's bool is "bool_", or "bool" since NumPy 2, which some take as an index)
                n = None if type(value).__name__ in ("bool", "bool_") else operator.index(value)
            except TypeError:
                n = None
            if n is None or not 1 <= n <= MAX_THREADS:
                raise ValueError(f"tack.config.num_threads must be an int from 1 to {MAX_THREADS}, "
                                 f"not {value!r}")
            value = n
        if name in ("debug", "timing"):
            value = _flag_value(name, value)
        object.__setattr__(self, name, value)

    def reset(self):
        """Forget values set from Python; re-read the environment on next use."""
        for name in self._sources:
            self.__dict__.pop(name, None)


config = Config()
