"""Everything a cache hit runs, in one module: keys, reading an entry, trust, the
dependency check, and finding a compiled variant.

A kernel's first call in a process with a warm cache imports this module,
the package itself and the object loader, and nothing more: no compiler, no
llvmlite, no ``json`` or ``logging``.  Each module imported costs a few
hundred microseconds here, against a budget of a few milliseconds for the
whole warm call, so the code a hit needs is kept together and what only a
miss or a store needs lives in ``store.py`` (writing entries), ``bundle.py``
(bundles and their stores) and ``size.py`` (the size limit).

* **Keys** are named steps hashed in turn (``digest``), from code-object
  fingerprints and cheap facts about the host.
* **Entries**: an entry file is a small header, a metadata block and a
  payload::

      magic "TACKENT1" | u8 kind | 3 pad | u32 meta length | u64 payload length
      | 32-byte sha256 of (key, meta, payload) | 64-byte key (hex) | meta | payload

  The metadata is lines of tab-separated text, ``field<TAB>value...``, a
  field that repeats giving a list of rows (``dep``, ``site``).  A reader
  that finds the wrong magic, kind, key, lengths or checksum treats the
  entry as damaged: it is never used.
* **Trust**: a directory is trusted when it is a real directory (not a
  symbolic link), owned by this user, and writable by nobody else.  Each
  level the cache creates is private (0700) and checked the same way.  Site
  bundle directories (read-only, installed by an admin) may also be owned
  by root.
* **The user's directory** (``DiskCache``) holds entries under
  ``<directory>/<tack version>/{lowered,variants}/<xx>/``.  Every failure of
  the file system is a miss and at most one warning per process.
* **The chain** (``bundle.Chain``) is where a process looks, in order: a bundle
  given to ``load_bundle``; the user's directory (its per-kernel files, or in
  mode ``bundle`` only its bundle); the site's bundle directories
  (TACK_CACHE_BUNDLES): a bundle packed on a host like this one, then the one
  built for this host's microarchitecture.  Bundles are opened at the first
  lookup that reaches them.  Only the user's directory is written, and under
  MPI only by rank 0.
* **The dependency record** of a lowered kernel lists, for the kernel and
  each device function it reaches, every global name it resolved and what
  that was bound to.  An entry is used only if each name still resolves to
  the same thing.  Walking it needs no source: device functions are reached
  through the names that bind them, from the kernel outward.

Any unexpected error is a miss and one warning: no crash from the cache
reaches a user's job.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import os
import stat
import struct
import sys
import time
import types
import warnings

from .._version import __version__
from ..fingerprints import (class_fingerprint, closure_identity, func_id, function_fingerprint,
                            value_identity)
from ..language import Constant, Func, intrinsic_of, lowers_to
from . import TRACE, log



# -- keys ------------------------------------------------------------------------

LOWERED_FORMAT = 1
VARIANT_FORMAT = 2      # 2: arrays by dtype, rank, layout and writability (shapes only where static)


def digest(what: str, *steps) -> str:
    """sha256 over named steps ``(name, value)`` in turn; each is logged at TRACE with the running hash."""
    h = hashlib.sha256(what.encode())
    trace = log.isEnabledFor(TRACE)
    for name, value in steps:
        if isinstance(value, dict):
            value = sorted(value.items())
        text = value if isinstance(value, str) else repr(value)
        h.update(f"\0{name}={text}".encode())
        if trace:
            log.log(TRACE, "%s key: %s=%s -> %s", what, name, text[:80], h.hexdigest()[:16])
    return h.hexdigest()


_version_id = None      # per process, found once


def tack_version_id() -> str:
    """This Tack's version (found once per process); see ``source_version_id``."""
    global _version_id
    if _version_id is None:
        _version_id = source_version_id()
    return _version_id


def source_version_id() -> str:
    """This Tack's version; for a source checkout, the version plus a hash of Tack's sources.

    Each edit of a checkout then keeps its own entries, as each release does.
    The sources are identified by each file's path, size and modification
    time (an edit changes at least the time), which costs a stat per file
    rather than reading them all on every process start.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not _in_checkout(root):
        return __version__
    h = hashlib.sha256()

    def walk(path, rel):
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    walk(entry.path, f"{rel}{entry.name}/")
            elif entry.name.endswith(".py"):
                st = entry.stat()
                h.update(f"{rel}{entry.name}:{st.st_size}:{st.st_mtime_ns}\0".encode())

    walk(root, "")
    return f"{__version__}+src.{h.hexdigest()}"


def _in_checkout(package_dir: str) -> bool:
    parent = os.path.dirname(package_dir)
    return os.path.exists(os.path.join(parent, ".git")) or \
        os.path.exists(os.path.join(parent, "pyproject.toml"))


def lowered_key(kernel, template_ids, debug: bool) -> str:
    """Key of a lowered kernel: its source (as code), specialization, Tack version, debug flag."""
    fn = kernel.py_func
    return digest("lowered",
                  ("format", LOWERED_FORMAT),
                  ("tack", tack_version_id()),
                  ("python", f"{sys.version_info[0]}.{sys.version_info[1]}"),
                  ("kernel", f"{fn.__module__}.{fn.__qualname__}"),
                  ("code", function_fingerprint(fn)),
                  ("closure", _closure_ids(fn)),
                  ("templates", template_ids),
                  ("debug", bool(debug)))


def _closure_ids(fn):
    """What a kernel made by a factory closes over, so each closure keeps its own entries."""
    if not fn.__closure__:
        return []
    return [(name, closure_identity(cell.cell_contents))
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__)]


def variant_key(lowered: str, argtypes, grid_ndim: int, target: str) -> str:
    """Key of a compiled variant: the lowered key plus argument types (an array's dtype, rank,
    layout, writability, and its shape where compiled in), grid rank and target."""
    return digest("variant",
                  ("format", VARIANT_FORMAT),
                  ("lowered", lowered),
                  ("args", [repr(t) for t in argtypes]),
                  ("grid", grid_ndim),
                  ("target", target))


def template_ids(templates: dict):
    return sorted((p, f"{c.__module__}.{c.__qualname__}", class_fingerprint(c))
                  for p, c in templates.items())


def keys(kernel, templates, value_types, grid_ndim, debug):
    """A launch's cache keys: ``.lowered``, and ``.for_target(target key)``, its variant's key
    for a target (this host's: the runtime's ``host_key()``), each made once."""
    lowered = lowered_key(kernel, template_ids(templates), debug)
    argtypes = tuple(value_types)
    variants = {}

    def for_target(target_key: str) -> str:
        key = variants.get(target_key)
        if key is None:
            key = variants[target_key] = variant_key(lowered, argtypes, grid_ndim, target_key)
        return key
    return types.SimpleNamespace(lowered=lowered, argtypes=argtypes, grid=grid_ndim, for_target=for_target)


# -- entries ---------------------------------------------------------------------

MAGIC = b"TACKENT1"
KIND_LOWERED, KIND_VARIANT = 1, 2
_HEAD = struct.Struct("<8sB3xIQ32s64s")
SUFFIX = {KIND_LOWERED: ".tlk", KIND_VARIANT: ".tvar"}
LEVEL_DIR = {KIND_LOWERED: "lowered", KIND_VARIANT: "variants"}
TMP_MARK = ".tmp."
HIT_FIELDS = frozenset(("dep", "site", "entry", "tidx", "argspec"))  # what a lookup uses (argspec: a device runtime's launch)


class DamagedEntry(Exception):
    """An entry's bytes are not a whole, valid entry for the key asked for."""


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append({"t": "\t", "n": "\n"}.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def decode_meta(data: bytes, list_fields=("dep", "site", "arg", "argspec"), only=None) -> dict:
    """Metadata text -> ``{field: value or [rows]}``; ``only``: the fields wanted, others skipped."""
    meta = {f: [] for f in list_fields if only is None or f in only}
    if b"\\" in data:                          # something escaped: unescape field by field
        for line in data.decode().split("\n"):
            field, *values = (_unescape(v) for v in line.split("\t"))
            if only is None or field in only:
                _add_field(meta, field, values)
        return meta
    for line in data.decode().split("\n") if data else ():
        field, tab, value = line.partition("\t")
        if only is not None and field not in only:
            continue
        rows = meta.get(field)
        if type(rows) is list:
            rows.append(value.split("\t"))
        elif tab and "\t" not in value:
            meta[field] = value
        else:
            _add_field(meta, field, value.split("\t") if tab else [])
    return meta


def _add_field(meta: dict, field: str, values: list):
    if isinstance(meta.get(field), list):
        meta[field].append(values)
    elif len(values) == 1:
        meta[field] = values[0]
    else:
        raise DamagedEntry(f"metadata field {field!r} has {len(values)} values")


def decode(data: bytes, kind: int, key: str | None = None, only=None):
    """-> (key, meta dict, payload bytes); DamagedEntry if anything is off.

    ``only``: the metadata fields wanted (a cache hit needs three of a dozen).
    """
    if len(data) < _HEAD.size:
        raise DamagedEntry("shorter than an entry header")
    magic, k, mlen, plen, digest, key_b = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise DamagedEntry("not a Tack cache entry (bad magic)")
    if k != kind:
        raise DamagedEntry(f"entry kind {k}, expected {kind}")
    if len(data) != _HEAD.size + mlen + plen:
        raise DamagedEntry(f"length {len(data)} does not match its header "
                           f"({_HEAD.size + mlen + plen}): truncated or extended")
    entry_key = key_b.decode("ascii", "replace")
    if key is not None and entry_key != key:
        raise DamagedEntry("entry holds another key")
    meta_b = data[_HEAD.size:_HEAD.size + mlen]
    payload = data[_HEAD.size + mlen:]
    h = hashlib.sha256(key_b)
    h.update(meta_b)
    h.update(payload)
    if h.digest() != digest:
        raise DamagedEntry("checksum mismatch")
    try:
        meta = decode_meta(meta_b, only=only)
    except (UnicodeDecodeError, ValueError):
        raise DamagedEntry("metadata is not readable") from None
    return entry_key, meta, payload


def entry_path(version_dir: str, kind: int, key: str) -> str:
    return os.path.join(version_dir, LEVEL_DIR[kind], key[:2], key + SUFFIX[kind])


# -- opening files -----------------------------------------------------------------

_O_READ = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
           | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))


class NotRegular(OSError):
    """A path that should be one of the cache's files is something else (FIFO, device, socket,
    directory, link): it is never read, written through or deleted."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{path} is {what}, not a regular file")
        self.filename = path
        self.strerror = f"{what}, not a regular file"


def _kind_of(st) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(st.st_mode):
            return what
    return "not a file"


def open_regular(path: str):
    """Open ``path`` for reading without ever blocking; NotRegular unless it is a regular file.

    Opened non-blocking (a FIFO would otherwise wait for a writer forever) and
    without following a link; the type is checked on the descriptor itself.
    -> (descriptor, its fstat), the caller closing the descriptor.
    """
    try:
        fd = os.open(path, _O_READ)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegular(path, "a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, _kind_of(st))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str, limit: int = -1):
    """-> (bytes, fstat result) of the regular file ``path``: all of it, or its first ``limit`` bytes."""
    fd, st = open_regular(path)
    try:
        chunks = []
        while limit:
            chunk = os.read(fd, limit if limit > 0 else max(st.st_size, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            if limit > 0:
                limit -= len(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


# -- trust -----------------------------------------------------------------------

class Untrusted(Exception):
    """Why a directory or file is not trusted, and how to fix it."""


def check_trusted(path: str, allow_root: bool = False, is_dir: bool = True) -> None:
    """Raise Untrusted, with the reason and the fix, unless ``path`` is safe to load from."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Untrusted(f"{path} does not exist") from None
    check_stat(st, path, allow_root, is_dir)


def check_stat(st, path: str, allow_root: bool = False, is_dir: bool = True) -> None:
    """``check_trusted`` on a stat result (from lstat, or fstat of an open file)."""
    what = "directory" if is_dir else "file"
    if stat.S_ISLNK(st.st_mode):
        raise Untrusted(f"{path} is a symbolic link (to {os.readlink(path)}); set TACK_CACHE_DIR "
                        "to the real directory")
    if is_dir and not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"{path} is not a directory")
    if not is_dir and not stat.S_ISREG(st.st_mode):
        raise Untrusted(f"{path} is not a regular file")
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid is not None:
        owners = (uid, 0) if allow_root else (uid,)
        if st.st_uid not in owners:
            raise Untrusted(f"the {what} {path} belongs to uid {st.st_uid}, not to you (uid {uid}); "
                            "use a directory of your own")
    writers = [who for bit, who in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))
               if st.st_mode & bit]
    if writers:
        raise Untrusted(f"the {what} {path} is writable by {' and '.join(writers)} "
                        f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod go-w {path}")


# -- the user's directory --------------------------------------------------------

def new_stats() -> dict:
    """Counters of this process's cache use (what ``tack.cache.stats()`` returns a copy of)."""
    return {"hits": {"lowered": 0, "variant": 0}, "misses": {"lowered": 0, "variant": 0},
            "bytes_read": 0, "bytes_written": 0, "load_seconds": 0.0, "store_seconds": 0.0,
            "damaged": 0,
            "rejected": 0}          # entries whose dependency record no longer holds


class DiskCache:
    """Per-kernel entries under ``<directory>/<tack version>/{lowered,variants}/<xx>/``."""

    def __init__(self, settings, stats: dict, warn_once, runtime):
        self.settings = settings
        self.runtime = runtime       # the backend's runtime side: this host's target key
        self.root = settings.directory
        self.version_dir = os.path.join(self.root, tack_version_id())
        self.writable = settings.mode == "write"
        self.marks_used = settings.mode in ("write", "read")    # loading marks an entry used
        self.stats = stats
        self.warn_once = warn_once
        self._checked = set()        # directories checked (or created) and trusted
        self._usable = None
        self._unusable_why = "missing (no cache directory)"
        self.why = "missing"         # why the last read was a miss, for the kernel's log line
        self.bumped = False          # whether the last read marked its entry used

    # -- trust and layout ---------------------------------------------------

    def usable(self) -> bool:
        """Check (once) that the directory may be trusted; create it in write mode."""
        if self._usable is None:
            self._usable = self._open()
        return self._usable

    def _open(self) -> bool:
        try:
            try:
                st = os.lstat(self.root)            # one system call when it exists, as it usually does
            except FileNotFoundError:
                if not self.writable:
                    log.debug("no cache directory at %s (mode %s)", self.root, self.settings.mode)
                    self._unusable_why = f"missing (no cache directory at {self.root})"
                    return False
                os.makedirs(self.root, 0o700, exist_ok=True)
                st = os.lstat(self.root)
                from .store import tag_new_root
                tag_new_root(self.root)
            check_stat(st, self.root)
            self._checked.add(self.root)
            return True
        except Untrusted as e:
            self.warn_once(f"not using the kernel cache: {e}")
            self._unusable_why = f"untrusted: {e}"
        except OSError as e:
            self.warn_once(f"not using the kernel cache at {self.root}: {e.strerror or e}")
            self._unusable_why = f"unreadable: {e.strerror or e}"
        return False

    def _dir_ok(self, path: str, create: bool) -> bool:
        """Each level below the root: create it private (write mode), check it trusted."""
        if path in self._checked:
            return True
        parent = os.path.dirname(path)
        if parent != self.root and not self._dir_ok(parent, create):
            return False
        if create:
            from .store import ensure_private_dir
            from .size import VERSION_MARKER
            ensure_private_dir(path, VERSION_MARKER if path == self.version_dir else None)
        else:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return False                    # not made yet: a miss
            check_stat(st, path)
        self._checked.add(path)
        return True

    # -- reading ------------------------------------------------------------

    def lookup(self, chain, kind: int, key, level: str):
        """As a store of a ``bundle.Chain``: ``read``."""
        return self.read(kind, key, level)

    def read(self, kind: int, key, level: str):
        """-> (meta, payload, path) of a valid entry, or None (a miss).

        ``key`` may be a function of the target key (a variant's): it is then looked up for
        each of the runtime's ``lookup_keys()`` in turn (the CPU: this host's alone; CUDA: the
        device's sm, then PTX of lower ones the driver compiles), the first found used.
        """
        if not callable(key):
            return self._read(kind, key, level)
        for target_key in self.runtime.lookup_keys():
            got = self._read(kind, key(target_key), level)
            if got is not None:
                return got
        return None

    def _read(self, kind: int, key: str, level: str):
        path = entry_path(self.version_dir, kind, key)
        t0 = time.perf_counter()
        self.why = "missing"
        try:
            if not self.usable():
                self.why = self._unusable_why
                return None
            if not self._dir_ok(os.path.dirname(path), create=False):
                return None
            data, st = read_regular(path)
        except FileNotFoundError:
            return None
        except NotRegular as e:
            self.stats["damaged"] += 1
            self.why = f"not used: {e.strerror}; left alone"
            log.debug("%s %s: %s; ignored", level, key[:16], e)
            return None
        except Untrusted as e:
            self.warn_once(f"not using the kernel cache: {e}")
            self._usable = False
            self.why = self._unusable_why = f"untrusted: {e}"
            return None
        except OSError as e:
            self.warn_once(f"cannot read the kernel cache at {self.root}: {e.strerror or e}")
            self.why = f"unreadable: {e.strerror or e} ({e.filename or path})"
            return None
        try:
            _, meta, payload = decode(data, kind, key, only=HIT_FIELDS)
        except DamagedEntry as e:
            self.stats["damaged"] += 1
            self.why = f"damaged ({e}); ignored"
            log.debug("%s %s: damaged (%s); ignored", level, key[:16], e)
            self._remove_if_unchanged(path, st)
            return None
        self.stats["bytes_read"] += len(data)
        self.stats["load_seconds"] += time.perf_counter() - t0
        self.bumped = self.marks_used and _mark_used(path, st.st_mtime)
        return meta, payload, path

    def touch(self, kind: int, key: str):
        """Mark an entry used now (a lowered kernel whose variant was just marked: see _find_variant)."""
        if self.marks_used:
            now = time.time()
            try:
                os.utime(entry_path(self.version_dir, kind, key), (now, now))
            except OSError:
                pass

    def _remove_if_unchanged(self, path, st):
        """Remove a damaged entry, unless another process has just replaced it."""
        if not self.writable:
            return
        try:
            now = os.stat(path)
            if (now.st_ino, now.st_mtime_ns, now.st_size) == (st.st_ino, st.st_mtime_ns, st.st_size):
                os.unlink(path)
        except OSError:
            pass

    def discard(self, path: str):
        """Remove an entry found unusable (e.g. it no longer loads), if it is one of ours."""
        if self.writable and os.path.dirname(os.path.dirname(os.path.dirname(path))) == self.version_dir:
            try:
                os.unlink(path)
            except OSError:
                pass

    def write(self, kind: int, key: str, meta: dict, payload: bytes) -> bool:
        from .store import write_entry
        return write_entry(self, kind, key, meta, payload)


def _mark_used(path: str, mtime: float) -> bool:
    """LRU: bump an entry's mtime when loaded, at most once an hour (see size.py); -> bumped."""
    now = time.time()
    if now - mtime > 3600:
        try:
            os.utime(path, (now, now))
            return True
        except OSError:
            pass
    return False


def warn_once_factory(quiet=False):
    """A function that warns the first time it is called in this process, and logs always.

    ``quiet``: log only (MPI ranks other than 0, so a job of thousands of
    ranks does not print one warning per rank).
    """
    said = set()

    def warn_once(message: str):
        if not said and not quiet:
            warnings.warn(f"tack: {message}", RuntimeWarning, stacklevel=2)
        said.add(message)
        log.debug("%s", message)
    return warn_once


# -- the chain of stores ---------------------------------------------------------

def user_directory(settings, stats: dict, warn_once, runtime, launch=None) -> DiskCache:
    """The user's directory as this process uses it: under MPI only rank 0 stores entries,
    or marks them used (no storm of metadata writes from thousands of ranks)."""
    disk = DiskCache(settings, stats, warn_once, runtime)
    if launch is not None and launch.rank != 0:
        disk.writable = False
        disk.marks_used = False
    return disk


def site_dirs(environ=None, warn=None) -> list:
    """TACK_CACHE_BUNDLES: the site's bundle directories, searched after the user's own.

    An entry that cannot name a bundle directory (a relative path, a file, a symbolic link) is
    left out, and ``warn`` (if given) is told why; one that does not exist yet is left in
    (a missing bundle is normal, and said only in the log)."""
    environ = os.environ if environ is None else environ
    raw = environ.get("TACK_CACHE_BUNDLES", "")
    out = []
    for d in raw.split(os.pathsep):
        if not d.strip():
            continue
        if "$" in d or d.startswith("~"):       # as TACK_CACHE_DIR: $VAR, ${VAR} and ~ expanded
            from . import check_directory
            try:
                d = check_directory(d, "TACK_CACHE_BUNDLES", environ)
            except ValueError as e:
                if warn is not None:
                    warn(f"{e}; ignored")
                continue
        why = _site_dir_problem(d)
        if why is None:
            out.append(d)
        elif warn is not None:
            warn(f"TACK_CACHE_BUNDLES names {why}; ignored")
    return out


def _site_dir_problem(d: str):
    if not os.path.isabs(d):
        return f"{d!r}, which is not an absolute path (name bundle directories from /)"
    try:
        st = os.lstat(d)
    except OSError:
        return None                             # none there (yet): the lookups say so in the log
    if stat.S_ISLNK(st.st_mode):
        return (f"{d}, a symbolic link (to {os.readlink(d)}): set TACK_CACHE_BUNDLES to the real "
                f"directory, {os.path.realpath(d)}")
    if not stat.S_ISDIR(st.st_mode):
        return f"{d}, which is not a directory"
    return None


# -- the dependency record -------------------------------------------------------

_MISSING = object()


def _resolve(fn, name):
    """What ``name`` (or a dotted ``module.attr`` chain) means in ``fn`` now."""
    if "." in name:
        head, *attrs = name.split(".")
        obj = _resolve(fn, head)
        for attr in attrs:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                break
        return obj
    code = fn.__code__
    if fn.__closure__ and name in code.co_freevars:
        return fn.__closure__[code.co_freevars.index(name)].cell_contents
    g = fn.__globals__
    if name in g:
        return g[name]
    return vars(builtins).get(name, _MISSING)


def _func_fid(func: Func) -> str:
    return func_id(func.py_func)


def template_scopes(cls) -> dict:
    """fid -> function for each static method of a template class, as lowering names them."""
    out = {}
    fp = class_fingerprint(cls)[:16]
    attrs = {}
    for klass in reversed(cls.__mro__[:-1]):
        attrs.update(vars(klass))
    for name, attr in attrs.items():
        if isinstance(attr, staticmethod):
            attr = attr.__func__
        if isinstance(attr, Func):
            attr = attr.py_func
        if isinstance(attr, types.FunctionType):
            out[f"{cls.__module__}.{cls.__qualname__}.{name}#{fp}"] = attr
    return out


def identity(kind: str, obj):
    """What a dependency of ``kind`` is bound to now, as the record writes it (None: not that kind)."""
    if kind == "func":
        return function_fingerprint(obj.py_func) if isinstance(obj, Func) else None
    if kind == "const":
        return obj.fingerprint if isinstance(obj, Constant) else None
    if kind == "module":
        return obj.__name__ if isinstance(obj, types.ModuleType) else None
    if kind == "template":
        return class_fingerprint(obj) if isinstance(obj, type) else None
    if kind == "intrinsic":
        return intrinsic_of(obj)          # (check_deps asks lowers_to(), which is cheaper)
    if kind == "value":
        return value_identity(obj)
    return None


def check_deps(deps, kernel, templates: dict, scopes: dict | None = None):
    """None if every recorded name still resolves as recorded; else the reason it does not.

    ``scopes``, if given, is filled with fid -> Python function for every
    function the record reaches (to locate source lines later).
    """
    scopes = {} if scopes is None else scopes
    scopes[kernel.__qualname__] = kernel.py_func
    for cls in templates.values():
        scopes.update(template_scopes(cls))
    for scope, name, kind, recorded in deps:
        fn = scopes.get(scope.split("[", 1)[0])
        if fn is None:
            return f"device function {scope} can no longer be reached"
        obj = _resolve(fn, name)
        if obj is _MISSING:
            return f"name '{name}' (in {fn.__qualname__}) is no longer defined"
        if not (lowers_to(obj, recorded) if kind == "intrinsic" else identity(kind, obj) == recorded):
            return f"'{name}' (in {fn.__qualname__}) changed"
        if kind == "func":
            scopes[_func_fid(obj)] = obj.py_func
        elif kind == "template":
            scopes.update(template_scopes(obj))
    return None


# -- finding a compiled variant --------------------------------------------------

def _read_current(cache, kernel, templates, kind, key, level):
    """-> (meta, payload) of an entry whose dependency record still holds; None on a miss."""
    name = kernel.__qualname__
    got = cache.read(kind, key, level)
    if got is None:
        cache.stats["misses"][level] += 1
        why = getattr(cache, "why", "missing")
        if why == "missing":
            log.debug("kernel '%s': %s missing", name, LEVEL_NAMES[level])
        else:
            log.debug("kernel '%s': %s not used: %s", name, LEVEL_NAMES[level], why)
        return None
    meta, payload, path = got
    reason = check_deps(meta["dep"], kernel, templates)
    if reason is not None:
        cache.stats["rejected"] += 1
        cache.stats["misses"][level] += 1
        log.debug("kernel '%s': %s not used: dependency changed: %s", name, LEVEL_NAMES[level], reason)
        return None
    return meta, payload, path


LEVEL_NAMES = {"variant": "compiled variant", "lowered": "lowered kernel"}


def _unusable(cache, kernel, level, path, why):
    cache.stats["damaged"] += 1
    cache.stats["misses"][level] += 1
    log.debug("kernel '%s': %s not used: %s", kernel.__qualname__, LEVEL_NAMES[level], why)
    cache.discard(path)


class Hit:
    """A valid, current variant entry: what the backend's runtime loads (payload, meta), the
    bounds-check sites, and where it was read from."""
    __slots__ = ("meta", "payload", "sites", "path")

    def __init__(self, meta, payload, sites, path):
        self.meta, self.payload, self.sites, self.path = meta, payload, sites, path


def find_variant(cache, kernel, templates, keys):
    """-> the ``Hit`` of a valid, current variant; None on a miss.  The cache reads and checks
    the entry; loading its code is the backend's (the dispatcher calls ``runtime.load``)."""
    try:
        return _find_variant(cache, kernel, templates, keys)
    except Exception as e:                      # noqa: BLE001 - the cache must never break a job
        cache.warn_once(f"kernel cache error ({type(e).__name__}: {e}); compiling without it")
        return None


def _find_variant(cache, kernel, templates, keys):
    got = _read_current(cache, kernel, templates, KIND_VARIANT, keys.for_target, "variant")
    if got is None:
        return None
    meta, payload, path = got
    from ..errors import BoundsSite
    try:
        sites = [BoundsSite(f, a, p, int(n), fid, int(off)) for f, a, p, n, fid, off in meta["site"]]
    except (ValueError, TypeError) as e:
        _unusable(cache, kernel, "variant", path, f"damaged ({type(e).__name__}: {e})")
        return None
    cache.stats["hits"]["variant"] += 1
    if cache.bumped:
        # A warm process never reads the lowered kernel: mark it used with its variant (the same
        # hourly write), or the size limit would delete the lowered kernels of the kernels in use
        # first, and their next new shape would run the front end again.
        cache.touch(KIND_LOWERED, keys.lowered)
    log.debug("kernel '%s': loaded from the cache", kernel.__qualname__)
    return Hit(meta, payload, sites, path)


def unusable(cache, kernel, level, path, why):
    """An entry read whole but unusable (its code does not load): counted, said, discarded."""
    cache.stats["hits"]["variant"] -= 1
    _unusable(cache, kernel, level, path, why)
