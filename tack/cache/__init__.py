"""Tack's kernel cache: what the compiler makes, kept on disk so later processes start warm.

On by default, needing no code.  Settings (directory, mode, size limit, and
where each came from) are read once, when the first kernel compiles (or
``python -m tack.cache`` runs): ``configure()`` values first, then the
environment (TACK_CACHE_DIR, TACK_CACHE, TACK_CACHE_SIZE), then the
defaults.  A bad environment value is a warning naming the variable, and
the default is used; a bad ``configure()`` value is a ``ValueError``.  See
docs/cache.md.

The settings, the MPI launch they depend on and the ``tack.cache`` logger
live here rather than in modules of their own because a warm kernel call
imports this package anyway, and each module imported costs a few hundred
microseconds of a budget of a few milliseconds.  The rest is a module per
role: ``keys`` (what an entry is named by), ``entry`` (its format),
``trust`` (reading and writing safely), ``deps`` (whether an entry is still
current), ``stores`` (where entries are looked up and stored, and the
session that chains them), ``bundle`` (many entries in one file), ``size``
(the limit), and the tools (``cli``, ``export``, ``bcast``, ``host``).
"""

import os
import re
import sys
import _thread
import types

from ..config import detect  # noqa: F401  (tack.cache.detect, as before)
from ..errors import warn

__all__ = ["configure", "load_bundle", "settings", "stats", "reset_stats"]


# -- settings --------------------------------------------------------------------

MODES = ("write", "read", "bundle", "off")
DEFAULT_SIZE = 1 << 30
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_PATTERN = r"^\s*(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:I?B|I)?|B)?\s*$"  # 'i' only after a unit


def parse_size(text) -> int | None:
    """``'500M'``, ``'2G'``, ``'1.5GiB'``, ``'2Gi'`` (as Kubernetes writes it), ``'1048576'`` ->
    bytes (binary units); ``'unlimited'`` -> None."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a size cannot be negative: {text}")
        return _bounded_size(text, text)
    if not isinstance(text, str):
        raise ValueError(f"a size is a string such as '500M' or '2G', not {type(text).__name__}")
    if text.strip().lower() == "unlimited":
        return None
    m = re.match(_SIZE_PATTERN, text, re.IGNORECASE | re.ASCII)    # '١٢٣' is not a size
    if not m:
        raise ValueError(f"{text!r} is not a size: use a number with K, M, G or T "
                         "(binary units, e.g. 500M or 2G), or 'unlimited'")
    number, unit = m.group(1), _UNITS[(m.group(2) or "").upper()]
    if unit == 1 and "." in number:
        raise ValueError(f"{text!r} is not a size: a number of bytes is whole (use K, M, G or T "
                         "for a fraction of a larger unit, e.g. 1.5G)")
    whole, _, frac = number.partition(".")
    whole = whole.lstrip("0") or "0"
    if len(whole) > 24:                 # past any bound (and int() of thousands of digits raises)
        return _bounded_size(MAX_SIZE + 1, text.strip())
    frac = frac[:24]                    # (digits past these are under a byte of a T)
    size = int(whole) * unit + (int(frac) * unit // 10 ** len(frac) if frac else 0)
    return _bounded_size(size, text.strip())


MAX_SIZE = (1 << 63) - 1                # what a file system's 64-bit sizes can count
# The bound as a message says it: exactly, and in the largest unit a size takes (T), whole, as
# a user would write it (format_size's rounding said "8388608.0 TiB": past the bound).
_TOP_UNIT = max(_UNITS, key=_UNITS.get)
MAX_SIZE_SHOWN = f"{MAX_SIZE} bytes, {MAX_SIZE // _UNITS[_TOP_UNIT]}{_TOP_UNIT} in whole {_TOP_UNIT}"


class SizeTooLarge(ValueError):
    """A size past ``MAX_SIZE``."""


def _bounded_size(size: int, shown) -> int:
    if size > MAX_SIZE:
        shown = str(shown) if len(str(shown)) <= 32 else str(shown)[:24] + "..."
        raise SizeTooLarge(too_large(repr(shown)))
    return size


def too_large(shown: str) -> str:
    """What a size past ``MAX_SIZE`` says, for ``TACK_CACHE_SIZE``, ``--max-size``, ``configure``
    and the site config alike (``shown``: the size as given, quoted)."""
    return f"{shown} is too large a size (at most {MAX_SIZE_SHOWN}; use 'unlimited' for no limit)"


def format_size(n: int | None) -> str:
    """Bytes -> ``'1.2 GiB'``; None -> ``'unlimited'``."""
    if n is None:
        return "unlimited"
    for unit, div in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def default_directory() -> str:
    """The platform's per-user cache directory for Tack.  An empty ``HOME`` is taken as unset,
    the account's home (``expanduser`` made it ``/``: the cache went to ``/.cache/tack``)."""
    home = os.path.expanduser("~")
    if not os.environ.get("HOME", "x").strip() and hasattr(os, "getuid"):
        try:
            import pwd
            home = pwd.getpwuid(os.getuid()).pw_dir or home
        except (ImportError, KeyError):
            pass
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches", "tack")
    if sys.platform.startswith("win"):
        base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
        return os.path.join(base, "tack", "Cache")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # one that is not absolute is ignored, as the XDG spec says; so is one holding a control
    # character (no shell script sets such), which TACK_CACHE_DIR's check refuses
    usable = os.path.isabs(xdg) and not any(ord(c) < 32 or ord(c) == 127 for c in xdg)
    if not usable and home.startswith("~"):
        # no home at all (HOME unset, an account the password database lacks: a container's
        # arbitrary uid): ``~`` stays ``~``, and the cache was ``./~/.cache/tack`` in the working
        # directory; the system's temporary directory instead, one directory per user
        import tempfile
        return os.path.join(tempfile.gettempdir(), f"tack-cache-{os.getuid()}")
    base = xdg if usable else os.path.join(home, ".cache")
    return os.path.join(base, "tack")


class Settings:
    """The settings in force, and where each came from ("default", "environment", "configure")."""

    __slots__ = ("directory", "mode", "max_size", "sources")

    def __init__(self, directory: str, mode: str, max_size, sources: dict):
        self.directory = directory
        self.mode = mode
        self.max_size = max_size          # bytes, or None: unlimited
        self.sources = sources

    def replace(self, **changes) -> "Settings":
        values = {k: getattr(self, k) for k in self.__slots__}
        values.update(changes)
        return Settings(**values)

    def __repr__(self):
        return (f"Settings(directory={self.directory!r}, mode={self.mode!r}, "
                f"max_size={self.max_size!r}, sources={self.sources!r})")


_VARIABLE = None


def expand(value: str, origin: str, environ=None) -> str:
    """``value`` with ``$VAR`` and ``${VAR}`` taken from ``environ`` (default: this process's)
    and a leading ``~`` expanded, as ccache expands its ``cache_dir``: a site's modules and
    Spack's may export ``$SCRATCH/$USER/tack`` unexpanded.  ValueError naming ``origin`` and
    the variable when one is not set, or is empty (as the site's module files refuse it)."""
    global _VARIABLE
    original = value
    if "$" in value:
        if _VARIABLE is None:
            import re
            _VARIABLE = re.compile(r"\$(?:(\w+)|\{(\w+)\})")
        environ = os.environ if environ is None else environ

        def sub(m):
            name = m.group(1) or m.group(2)
            if name not in environ:
                raise ValueError(f"{origin}: {value!r} names ${name}, which is not set")
            if not environ[name]:       # '$SCRATCH/tack' would name /tack, a root directory
                raise ValueError(f"{origin}: {value!r} names ${name}, which is empty")
            return environ[name]
        value = _VARIABLE.sub(sub, value)
        if "${" in value:               # '${ABC' named a directory '${ABC' (a shell refuses it)
            raise ValueError(f"{origin}: {original!r} has a '${{' that names no variable "
                             "(write ${NAME} or $NAME)")
    expanded = os.path.expanduser(value)
    if expanded.startswith("~"):        # ~name of no account: not a directory named '~name' here
        user = expanded[1:].split(os.sep, 1)[0]
        raise ValueError(f"{origin}: {value!r} names the home of "
                         + (f"user {user!r}, who has no account here" if user else
                            "this process's user, which cannot be found (HOME is not set)"))
    return expanded


def check_directory(value, origin: str, environ=None, relative_to_cwd=False,
                    what: str = "the cache directory") -> str:
    """The absolute, normalized path ``value`` names (``expand``-ed); ValueError naming ``origin``
    (and ``what`` the directory is) for an unset variable or a relative path, or, with
    ``relative_to_cwd`` (the cache directory), a relative path taken from the working directory
    now (when the settings are read)."""
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{origin}: {what} is a path (a str or os.PathLike), not "
                         f"{type(value).__name__} {value!r:.40}")
    if not os.fspath(value):
        raise ValueError(f"{origin}: {what} must be a non-empty path")
    path = expand(os.fspath(value), origin, environ)
    bad = next((c for c in path if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise ValueError(f"{origin}: {what} {path!r} holds the control character "
                         f"{bad!r}; name a directory without one")
    if not os.path.isabs(path):
        if not relative_to_cwd:
            raise ValueError(f"{origin}: {what} must be an absolute path, not {value!r}")
        try:
            path = os.path.join(os.getcwd(), path)
        except OSError as e:            # the working directory was deleted
            raise ValueError(f"{origin}: {value!r} is relative, and the working directory cannot "
                             f"be read ({e.strerror or e})") from None
    return os.path.normpath(path)


def check_cache_directory(value, origin: str, environ=None) -> str:
    """The cache directory ``value`` names: ``check_directory``, a relative path taken from the
    working directory when the settings are read (as Python takes ``PYTHONPYCACHEPREFIX``)."""
    return check_directory(value, origin, environ, relative_to_cwd=True)


def check_mode(value, origin: str) -> str:
    mode = str(value).strip().lower() if isinstance(value, str) else value
    if mode not in MODES:
        raise ValueError(f"{origin}: {value!r} is not a cache mode; use one of {', '.join(MODES)}")
    return mode


def keeps_no_entry(shown: str, store_none: str) -> str:
    """What a size limit of 0 says, for ``TACK_CACHE_SIZE``, ``configure`` and the site config
    alike (``shown``: the size as given, quoted; ``store_none``: the setting that stores none).
    ccache reads a limit of 0 as no limit; here every size check would enforce it, deleting
    every entry of every Tack version (of every user a site config reaches)."""
    return (f"{shown} keeps no entry: each size check deletes them all (use 'unlimited' for no "
            f"limit, or {store_none} to store none)")


def check_size(value, origin: str):
    """A setting's size (``parse_size``); a ValueError naming ``origin`` for a bad one, and for
    0 (``keeps_no_entry``).  ``prune --max-size 0`` still deletes every entry: that is asked
    once, by hand."""
    try:
        size = parse_size(value)
    except ValueError as e:
        raise ValueError(f"{origin}: {e}") from None
    if size == 0:
        raise ValueError(f"{origin}: " + keeps_no_entry(repr(value), "TACK_CACHE=read or off"))
    return size


_CHECKS = {"directory": ("TACK_CACHE_DIR", check_cache_directory),
           "mode": ("TACK_CACHE", check_mode),
           "max_size": ("TACK_CACHE_SIZE", check_size)}


def resolve(configured: dict, environ=None, mpi=False, rank=0) -> Settings:
    """Settings from ``configure()`` values, the environment and the defaults, in that order.

    Under MPI the mode comes from TACK_CACHE_MPI if set (a site's default for
    jobs), else TACK_CACHE, else ``bundle``.  Where TACK_CACHE_MPI overrides a
    TACK_CACHE of another mode (a user's ``TACK_CACHE=write`` for an MPI warm-up
    job, under a site module's ``TACK_CACHE_MPI=bundle``), rank 0 warns once,
    naming both: Tack cannot tell who set which.  A bad value is warned (then the default):
    the process's cache warning, after which the sessions' warnings are logged only.
    """
    global _settings_warned
    environ = os.environ if environ is None else environ
    defaults = {"directory": None, "mode": default_mode(mpi), "max_size": DEFAULT_SIZE}
    checks = dict(_CHECKS)
    checks["mode"] = (_mode_variable(environ, mpi), check_mode)
    if checks["mode"][0] == "TACK_CACHE_MPI" and "mode" not in configured and rank == 0:
        _warn_overridden_mode(environ)
    values, sources = {}, {}
    for key, (var, check) in checks.items():
        if key in configured:
            values[key], sources[key] = configured[key], "configure"
            continue
        raw = environ.get(var)
        if raw is not None and raw.strip() != "":
            raw = raw.strip()               # " /scratch/tack" is no directory below the cwd
            try:
                values[key] = (check(raw, var, environ) if key == "directory" else check(raw, var))
                sources[key] = "environment"
                continue
            except ValueError as e:
                _settings_warned = True
                if rank == 0:               # one line a job, not one a rank (all read the same)
                    warn(f"tack: {e}; using the default", stacklevel=4)
                else:
                    log.debug("%s; using the default (rank 0 warns of it)", e)
        values[key], sources[key] = defaults[key], "default"
    if values["directory"] is None:
        values["directory"] = default_directory()
        if not os.path.isabs(values["directory"]):     # a relative HOME: taken from the cwd now,
            try:                                        # as a relative TACK_CACHE_DIR is
                values["directory"] = os.path.abspath(values["directory"])
            except OSError:                             # the working directory was deleted
                pass
    return Settings(values["directory"], values["mode"], values["max_size"], sources)


def default_mode(mpi: bool) -> str:
    """The cache mode where nothing sets one: ``bundle`` under an MPI launch, else ``write``."""
    return "bundle" if mpi else "write"


def _mode_variable(environ, mpi: bool) -> str:
    """The variable that sets the cache mode: TACK_CACHE_MPI under MPI where it is set, else
    TACK_CACHE."""
    return "TACK_CACHE_MPI" if mpi and (environ.get("TACK_CACHE_MPI") or "").strip() else "TACK_CACHE"


def mode_under_mpi(environ=None) -> tuple:
    """(mode, where it comes from, why the value set is not used or None): the cache mode an MPI
    launch with this environment would use where ``configure`` sets none, by ``resolve``'s rule
    (``tack.cache info`` shows it, outside a launch too, so a bad TACK_CACHE_MPI is seen before a
    job warns of it)."""
    environ = os.environ if environ is None else environ
    var = _mode_variable(environ, mpi=True)
    raw = (environ.get(var) or "").strip()
    if raw:
        try:
            return check_mode(raw, var), var, None
        except ValueError as e:
            return default_mode(True), "default", f"{e}; an MPI launch uses the default"
    return default_mode(True), "default", None


# -- the MPI launch: ``config.detect`` (the thread count's default asks it too) ----------------

# -- the tack.cache logger, without importing ``logging`` on the warm path -------
#
# ``logging`` costs milliseconds to import, a large share of a warm kernel
# call.  Until the process has imported it (so someone may have configured a
# handler) or TACK_CACHE_LOG asks for output, messages are dropped unformatted.

NAME = "tack.cache"
TRACE = 5            # the key steps, below DEBUG


def _real_logger():
    logging = sys.modules.get("logging")
    return logging.getLogger(NAME) if logging is not None else None


def _is_enabled_for(level) -> bool:
    real = _real_logger()
    return real is not None and real.isEnabledFor(level)


def _log(level, msg, *args):
    real = _real_logger()
    if real is not None and real.isEnabledFor(level):
        real.log(level, msg, *args)


def _debug(msg, *args):
    _log(10, msg, *args)


# The logger's three methods the cache uses (an object, not a class: no class to build at import).
log = types.SimpleNamespace(isEnabledFor=_is_enabled_for, log=_log, debug=_debug)


# -- this process's cache -------------------------------------------------------


# threading's RLock, without threading's import (0.5 ms).  Re-entrant: a signal handler's (or a
# finalizer's) launch on a thread holding it compiles through it again (a Lock waited for ever),
# and the session is made under it while the settings take it too.
_lock = _thread.RLock()


# After ``os.fork()`` the child's lock is made free again, in place: another thread of the parent
# may have held it at the fork (resolving the settings), and no thread of the child would ever
# release it (its first compile waited for ever).  The hook is the lock's own method (the one
# ``threading`` resets its locks with after a fork), not a function of this module: one holding this
# module's globals kept them past the interpreter's first collection at exit, which then took
# 0.8 M instructions longer in every warm process.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_lock._at_fork_reinit)
_configured = {}
_resolved = None          # Settings, once the first kernel compiled
_resolved_by = None       # what made them resolved (for configure()'s error)
_session = None           # this process's CPU Session (False: the cache is off)
_other_sessions = {}      # those of other runtimes (OpenCL), by kind
_warn = None              # the process's warn_once, shared by its sessions
_settings_warned = False  # a setting's bad value was warned about: ``_warn`` then only logs
_stats = None
_launch = None            # the MPI launch, if any (detected once)
_loaded_bundle = None     # a Bundle given by load_bundle()
_loaded_label = "broadcast bundle"  # what its hits are counted as: "cache bundle" without a comm
_loaded_gpu: dict = {}    # target key -> a GPU kind's packed Bundle given by load_bundle()
_bundle_covers = frozenset()   # what load_bundle() read ("cpu", GPU machines): no rank opens those itself
_loaded_sites = None      # {site directory: (packed Bundle or None, [(arch, key, Bundle)])}
                          # load_bundle() gave: those directories' files are never opened


def configure(directory=None, mode=None, max_size=None):
    """Set the cache directory, mode (write, read, bundle, off) or size limit (e.g. "4G").

    Call before the first kernel compiles; a bad value raises ValueError.
    """
    if _resolved is not None:
        raise RuntimeError(f"tack.cache.configure() must be called before the cache's settings are "
                           f"in use; they are since {_resolved_by}")
    given = {}
    if directory is not None:
        given["directory"] = check_cache_directory(directory, "configure(directory=...)")
    if mode is not None:
        given["mode"] = check_mode(mode, "configure(mode=...)")
    if max_size is not None:
        given["max_size"] = check_size(max_size, "configure(max_size=...)")
    _configured.update(given)


def settings() -> Settings:
    """The settings in force (resolving them now if no kernel has compiled yet)."""
    return _settings_in_use("tack.cache.settings() was called")


def _warn_overridden_mode(environ) -> None:
    try:
        under_mpi = check_mode(environ["TACK_CACHE_MPI"], "TACK_CACHE_MPI")
        plain = check_mode(environ.get("TACK_CACHE") or "", "TACK_CACHE")
    except ValueError:
        return                                  # a bad value has its own warning, or is unset
    if under_mpi != plain:
        warn(f"tack: under MPI the cache mode is TACK_CACHE_MPI={under_mpi}, not TACK_CACHE="
             f"{plain} (a site module may set TACK_CACHE_MPI); for an MPI job that should "
             f"{'store entries' if plain == 'write' else 'use ' + plain + ' mode'}, set "
             f"TACK_CACHE_MPI={plain} too", stacklevel=5)


def _settings_in_use(by: str) -> Settings:
    """The settings, resolved now if they were not yet; ``by``: what needed them first."""
    global _resolved, _resolved_by
    with _lock:
        if _resolved is None:
            launch = mpi_launch()
            _setup_logging(launch.rank if launch is not None else 0)
            _resolved = resolve(_configured, mpi=launch is not None,
                                rank=launch.rank if launch is not None else 0)
            _resolved_by = by
        return _resolved


def mpi_launch():
    """The MPI launch this process belongs to (from the launcher's variables), or None."""
    global _launch
    if _launch is None:
        _launch = detect() or False
    return _launch or None


def stats() -> dict:
    """This process's hits and misses per level, bytes read and written, seconds loading and
    storing, where its variant hits came from (``variants_from``: "cache directory",
    "cache bundle", "broadcast bundle", "site bundles"), and how many variants it compiled
    (``compiled``, counted with the cache off too)."""
    with _lock:
        return {k: dict(v) if isinstance(v, dict) else v for k, v in _get_stats().items()}


def reset_stats() -> None:
    """Start this process's counters again from zero."""
    with _lock:
        if _stats is not None:
            _stats.update(new_stats())


def count(stats: dict, name: str, n=1, key=None) -> None:
    """Add ``n`` to ``stats[name]`` (with ``key``: to ``stats[name][key]``, from 0) under the
    cache's lock.  Threads look entries up side by side, and ``+=`` on a dict's item is a read
    then a write: a thread switched out between the two (at a call, as ``x[k] += len(data)``
    makes) lost the other thread's count.  Only lookups, stores and compiles count; a launch
    that finds its variant in memory takes no lock."""
    with _lock:
        if key is None:
            stats[name] += n
        else:
            counts = stats[name]
            counts[key] = counts.get(key, 0) + n


def new_stats() -> dict:
    """Counters of a process's cache use (what ``stats()`` returns a copy of)."""
    return {"hits": {"lowered": 0, "variant": 0}, "misses": {"lowered": 0, "variant": 0},
            "bytes_read": 0, "bytes_written": 0, "load_seconds": 0.0, "store_seconds": 0.0,
            "damaged": 0,
            "variants_from": {},    # hits per kind of store: "cache directory", "site bundles"...
            "rejected": 0,          # entries whose dependency record no longer holds
            "compiled": 0}          # variants this process compiled (the cache on or off)


def _get_stats():
    global _stats
    if _stats is None:
        _stats = new_stats()
    return _stats


def warn_once_factory(quiet=False, said_before=False):
    """A function that warns the first time it is called in this process, and logs always.

    ``quiet``: log only (MPI ranks other than 0, so a job of thousands of
    ranks does not print one warning per rank).  ``said_before``: the process has had its
    cache warning already (a setting's bad value): log only.
    """
    said = {None} if said_before else set()

    def warn_once(message: str):
        first = not said
        said.add(message)                   # (before: a warning raised as an error, -W error)
        log.debug("%s", message)
        if first and not quiet:
            warn(f"tack: {message}", stacklevel=2)
    return warn_once


def deferred_warn_once(said: list):
    """A ``warn_once_factory()`` whose messages are added to ``said``, to be given later by
    ``give_deferred``, as that factory would have given them (``load_bundle``: rank 0 warns
    once every collective call is made)."""
    group = object()
    return lambda message: said.append((group, message))


def give_deferred(said: list) -> None:
    """Give the messages ``deferred_warn_once`` functions added to ``said``: each function's as
    one ``warn_once_factory()`` would have."""
    factories = {}
    for group, message in said:
        if group not in factories:
            # (after a setting's bad value, the process's one cache warning, these are logged:
            # it also said "not using a bundle: there is no bundle at" the default directory)
            factories[group] = warn_once_factory(said_before=_settings_warned)
        factories[group](message)


def session(kind: str, host_key, site_bundles, machine: str | None = None):
    """This process's ``stores.Session`` for device kind ``kind``, or None when the cache is off.

    The caller (the dispatcher) names what only its runtime knows, as functions called only when
    the session is made: ``host_key()``, the target key of code compiled here (it names this
    host's bundle), and ``site_bundles(names, header, defer)``, which of a site directory's bundles
    this node uses, [(``kind:arch``, target key, name)] most specific first, called only if a
    lookup reaches a site bundle directory (``bundle.SiteBundleStore``); and ``machine``, the one
    its bundles' file names carry (the runtime's ``BUNDLE_MACHINE``: a GPU kind's code machine;
    None: this host's, the CPU's), which names a bundle packed on a host like this one in a site
    directory and the user's own (``pack`` writes one per kind and target found).  Each kind
    has a session of its own (a CPU and an OpenCL device look up different keys and bundles);
    they share the settings, statistics and warnings.  A bundle given to ``load_bundle`` is the
    CPU's; those ``load_bundle`` broadcast for the GPU kinds serve their sessions, which then
    open no bundle of the user's themselves (without ``load_bundle``, or where its ``kinds`` left
    a kind out, each rank opens that kind's own).
    """
    global _session
    if kind != "cpu":
        made = _other_sessions.get(kind)
        if made is None:
            with _lock:                         # threads' first calls together: one session
                if kind not in _other_sessions:
                    _other_sessions[kind] = _new_session(
                        host_key, site_bundles, True, machine,
                        _loaded_gpu if machine in _bundle_covers else None)
                made = _other_sessions[kind]
        return made or None
    made = _session
    if made is None:
        with _lock:
            if _session is None:
                made = _new_session(host_key, site_bundles, "cpu" not in _bundle_covers, machine,
                                    sites=_loaded_sites)
                if made and _loaded_bundle is not None:
                    made.add_loaded(_loaded_bundle, _loaded_label)
                _session = made
            made = _session
    return made or None


def _new_session(host_key, site_bundles, own_bundle, machine=None, loaded=None, sites=None):
    """``sites``: the site bundles ``load_bundle`` gave (``bcast.load_and_broadcast``), in place
    of the site directories' files; None: this process reads those itself."""
    s = _settings_in_use("a kernel's first call looked it up (the cache's first use)")
    if s.mode == "off":
        return False
    host_key = host_key()
    from .stores import open_session, site_dirs
    launch = mpi_launch()
    global _warn
    if _warn is None:
        _warn = warn_once_factory(quiet=launch is not None and launch.rank != 0,
                                  said_before=_settings_warned)
    return open_session(s, _get_stats(), _warn, host_key, site_bundles,
                        rank=launch.rank if launch is not None else 0,
                        sites=site_dirs(warn=_warn) if sites is None else list(sites),
                        own_bundle=own_bundle, machine=machine, loaded=loaded, loaded_sites=sites)


def load_bundle(comm=None, kinds=None, share=True) -> int:
    """Read this host's bundle on rank 0 and broadcast it to every rank of ``comm``, with the
    bundles ``pack`` made for GPU kinds in the same directory, and the site bundles this node's
    CPU uses (``TACK_CACHE_BUNDLES``, those installed beside Tack): no other rank opens them.

    Call on every rank before the first kernel. Returns the number of entries
    read, the site bundles' included; 0 on every rank if rank 0 can use no
    bundle (there is none, it is damaged, or it is not the user's own, and no
    site bundle serves this node), after rank 0 warns why. Every rank takes
    part in the same collective calls whatever happens on rank 0 and whatever
    each has run before.  Each bundle rank 0 sends of 4 MiB or more (the user's
    bundle, every site bundle the node's CPU uses: each of conda's x86-64 levels
    it can run, say) is held once per node, in MPI-3 shared memory that the
    node's ranks read in place, wherever some node runs more than one rank; a
    smaller one, and any with ``share=False``, an MPI without shared memory, too
    little room free in ``/dev/shm`` or a window the MPI could not make, goes to
    each rank as its own copy.  Without ``comm``, this process reads the bundles
    itself.  ``kinds`` (by
    default every one) names the kinds of code to read and broadcast, as
    ``bundles build --arch`` names them (``cpu``, ``cuda``, ``rocm``, ``spirv``,
    ``level_zero``, ``metal``): ``kinds=["cpu"]`` keeps a CPU-only job from
    broadcasting GPU code it will not run.  Where ranks ask for different kinds, every
    rank reads those any rank asked for (``bcast._agreed_kinds``), and each rank gets its own copy
    where any rank asked ``share=False``.  An unknown kind on any rank raises ValueError, on every
    rank alike, before any other collective call; so does any failure there (a RuntimeError on
    the other ranks, naming the rank), and an intercommunicator is a TypeError.  Rank 0 warns once
    every collective call is made (a warning raised as an error raises on rank 0 alone then).
    """
    from .bcast import load_bundle as _load     # MPI's code: a process without it never imports it
    return _load(comm, kinds, share)


def _setup_logging(rank=0):
    """TACK_CACHE_LOG=1: say per kernel what the cache did; 2: also each key step.  A bad value
    is warned of by a job's rank 0 alone, as the other settings are."""
    from ..config import FALSE_WORDS, TRUE_WORDS
    raw = os.environ.get("TACK_CACHE_LOG", "")
    level = raw.strip().lower()
    if not level or level in FALSE_WORDS:
        return
    import logging
    if level not in TRUE_WORDS and level != "2" and rank == 0:
        warn(f"tack: TACK_CACHE_LOG={raw!r} is not a log level; use 1 (what the cache did per "
             f"kernel), 2 (also each key step) or 0 (off); logging as with 1", stacklevel=4)
    logger = logging.getLogger(NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tack.cache: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(TRACE if level == "2" else logging.DEBUG)


def _reset_for_tests():
    """Forget settings, session, stats, MPI detection and bundles, as in a new process."""
    global _resolved, _session, _launch, _loaded_bundle, _bundle_covers, _stats, _warn, _loaded_sites, _loaded_label
    global _settings_warned
    _bundle_covers = frozenset()
    _loaded_gpu.clear()
    _other_sessions.clear()
    _warn = None
    _settings_warned = False
    _configured.clear()
    _resolved = None
    _session = None
    _launch = None
    _loaded_bundle, _loaded_label = None, "broadcast bundle"
    _loaded_sites = None
    reset_stats()
    _stats = None
    bundle = sys.modules.get(__name__ + ".bundle")      # the directories it checked, if loaded
    if bundle is not None:
        bundle._trusted_dirs.clear()
