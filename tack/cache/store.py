"""Where entries are kept: the entry format, trust, the per-kernel directory, bundles.

* **Entries.**  An entry file is a small header, a metadata block, a payload::

      magic "TACKENT1" | u8 kind | 3 pad | u32 meta length | u64 payload length
      | 32-byte sha256 of (key, meta, payload) | 64-byte key (hex) | meta | payload

  The metadata is lines of tab-separated text, ``field<TAB>value...``, a
  field that repeats giving a list of rows (``dep``, ``site``): parsed with
  ``str.split``, so a warm process need not import ``json`` (milliseconds).
  A reader that finds the wrong magic, kind, key, lengths or checksum treats
  the entry as damaged: it is never used.  Writes go to a temporary file in
  the same directory and are renamed into place, so a reader sees a whole
  entry or none; entries are created private (0600).
* **Trust.**  A directory is trusted when it is a real directory (not a
  symbolic link), owned by this user, and writable by nobody else (no group
  or other write bit).  Each level the cache creates is made private (0700)
  and checked the same way.  Site bundle directories (read-only, installed
  by an admin) may also be owned by root.
* **The per-kernel directory** (``DiskCache``): entries under
  ``<directory>/<tack version>/{lowered,variants}/<xx>/``.  Every failure of
  the file system (full disk, read-only or vanished directory, permissions,
  a lost race) is a miss and at most one warning per process: the kernel is
  then compiled and run as without a cache.  A damaged entry is a miss too,
  and is removed when this process may write there.
* **The chain** (``Chain``): where a process looks, in order, and where it
  stores:

  1. a bundle given to ``load_bundle`` (broadcast from rank 0);
  2. the user's own directory: its per-kernel entry files (modes ``write``
     and ``read``), or only its bundle (mode ``bundle``, the default under
     MPI);
  3. the site's bundle directories (TACK_CACHE_BUNDLES), read-only: in each,
     a bundle packed on a host like this one, then the bundle built ahead of
     time (``python -m tack.site bundles build``) for this host's
     microarchitecture.

  Stores are opened lazily: a bundle is read (one open, one read) at the
  first lookup that reaches it.  Only the user's directory is ever written,
  and under MPI only by rank 0.

One module, because a warm kernel call needs all of it, and each module
imported costs a few hundred microseconds of a budget of a few milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import platform
import stat
import struct
import time
import warnings

from .config import log


# -- entries ---------------------------------------------------------------------

MAGIC = b"TACKENT1"
KIND_LOWERED, KIND_VARIANT = 1, 2
_HEAD = struct.Struct("<8sB3xIQ32s64s")
SUFFIX = {KIND_LOWERED: ".tlk", KIND_VARIANT: ".tvar"}
LEVEL_DIR = {KIND_LOWERED: "lowered", KIND_VARIANT: "variants"}
TMP_MARK = ".tmp."


class DamagedEntry(Exception):
    """An entry's bytes are not a whole, valid entry for the key asked for."""


_ESCAPE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n"})


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


def encode_meta(meta: dict) -> bytes:
    """``{field: str | [row of str, ...]}`` -> text lines (rows for list fields)."""
    lines = []
    for field, value in sorted(meta.items()):
        rows = value if isinstance(value, list) else [[value]]
        for row in rows:
            lines.append("\t".join([field] + [str(v).translate(_ESCAPE) for v in row]))
    return "\n".join(lines).encode()


def decode_meta(data: bytes, list_fields=("dep", "site", "arg", "argspec")) -> dict:
    meta = {f: [] for f in list_fields}
    if b"\\" in data:                          # something escaped: unescape field by field
        for line in data.decode().split("\n"):
            field, *values = (_unescape(v) for v in line.split("\t"))
            _add_field(meta, field, values)
        return meta
    for line in data.decode().split("\n") if data else ():
        field, tab, value = line.partition("\t")
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


def encode(kind: int, key: str, meta: dict, payload: bytes) -> bytes:
    meta_b = encode_meta(meta)
    digest = hashlib.sha256(key.encode() + meta_b + payload).digest()
    return _HEAD.pack(MAGIC, kind, len(meta_b), len(payload), digest, key.encode()) + meta_b + payload


def decode(data: bytes, kind: int, key: str | None = None):
    """-> (key, meta dict, payload bytes); DamagedEntry if anything is off."""
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
    if hashlib.sha256(key_b + meta_b + payload).digest() != digest:
        raise DamagedEntry("checksum mismatch")
    try:
        meta = decode_meta(meta_b)
    except (UnicodeDecodeError, ValueError):
        raise DamagedEntry("metadata is not readable") from None
    return entry_key, meta, payload


def entry_path(version_dir: str, kind: int, key: str) -> str:
    return os.path.join(version_dir, LEVEL_DIR[kind], key[:2], key + SUFFIX[kind])


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory."""
    tmp = f"{path}{TMP_MARK}{os.getpid()}.{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # No fsync: after a crash the rename may survive with incomplete data,
        # but every entry carries its checksum, so such a file is ignored, and
        # a compile does not wait for the disk (milliseconds per entry).
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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


def ensure_private_dir(path: str) -> None:
    """Create ``path`` (0700) if missing, then check it as ``check_trusted`` does."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_trusted(path)


# -- the per-kernel directory ----------------------------------------------------

class Stats:
    """Counters of this process's cache use (``tack.cache.stats()``)."""

    def __init__(self):
        self.hits = {"lowered": 0, "variant": 0}
        self.misses = {"lowered": 0, "variant": 0}
        self.bytes_read = 0
        self.bytes_written = 0
        self.load_seconds = 0.0
        self.store_seconds = 0.0
        self.damaged = 0
        self.rejected = 0          # entries whose dependency record no longer holds

    def as_dict(self) -> dict:
        return {"hits": dict(self.hits), "misses": dict(self.misses),
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "load_seconds": self.load_seconds, "store_seconds": self.store_seconds,
                "damaged": self.damaged, "rejected": self.rejected}


class DiskCache:
    """Per-kernel entries under ``<directory>/<tack version>/{lowered,variants}/<xx>/``."""

    def __init__(self, settings, stats: Stats, warn_once):
        self.settings = settings
        self.root = settings.directory
        from .lookup import tack_version_id
        self.version_dir = os.path.join(self.root, tack_version_id())
        self.writable = settings.mode == "write"
        self.marks_used = settings.mode in ("write", "read")    # loading marks an entry used
        self.stats = stats
        self.warn_once = warn_once
        self._checked = set()        # directories checked (or created) and trusted
        self._usable = None

    # -- trust and layout ---------------------------------------------------

    def usable(self) -> bool:
        """Check (once) that the directory may be trusted; create it in write mode."""
        if self._usable is None:
            self._usable = self._open()
        return self._usable

    def _open(self) -> bool:
        try:
            if self.writable and not os.path.lexists(self.root):
                os.makedirs(self.root, 0o700, exist_ok=True)
            if not os.path.lexists(self.root):
                log.debug("no cache directory at %s (mode %s)", self.root, self.settings.mode)
                return False
            check_trusted(self.root)
            self._checked.add(self.root)
            return True
        except Untrusted as e:
            self.warn_once(f"not using the kernel cache: {e}")
        except OSError as e:
            self.warn_once(f"not using the kernel cache at {self.root}: {e.strerror or e}")
        return False

    def _dir_ok(self, path: str, create: bool) -> bool:
        """Each level below the root: create it private (write mode), check it trusted."""
        if path in self._checked:
            return True
        parent = os.path.dirname(path)
        if parent != self.root and not self._dir_ok(parent, create):
            return False
        if create:
            ensure_private_dir(path)
        elif not os.path.isdir(path):
            return False
        else:
            check_trusted(path)
        self._checked.add(path)
        return True

    # -- reading ------------------------------------------------------------

    def read(self, kind: int, key: str, level: str):
        """-> (meta, payload, path) of a valid entry, or None (a miss)."""
        path = entry_path(self.version_dir, kind, key)
        t0 = time.perf_counter()
        try:
            if not self.usable() or not self._dir_ok(os.path.dirname(path), create=False):
                log.debug("%s %s: missing", level, key[:16])
                return None
            with open(path, "rb") as f:
                data = f.read()
                st = os.fstat(f.fileno())
        except FileNotFoundError:
            log.debug("%s %s: missing", level, key[:16])
            return None
        except Untrusted as e:
            self.warn_once(f"not using the kernel cache: {e}")
            self._usable = False
            return None
        except OSError as e:
            self.warn_once(f"cannot read the kernel cache at {self.root}: {e.strerror or e}")
            return None
        try:
            _, meta, payload = decode(data, kind, key)
        except DamagedEntry as e:
            self.stats.damaged += 1
            log.debug("%s %s: damaged (%s); ignored", level, key[:16], e)
            self._remove_if_unchanged(path, st)
            return None
        self.stats.bytes_read += len(data)
        self.stats.load_seconds += time.perf_counter() - t0
        if self.marks_used:
            _mark_used(path, st.st_mtime)
        return meta, payload, path

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

    # -- writing ------------------------------------------------------------

    def write(self, kind: int, key: str, meta: dict, payload: bytes) -> bool:
        if not self.writable or not self.usable():
            return False
        path = entry_path(self.version_dir, kind, key)
        t0 = time.perf_counter()
        try:
            self._dir_ok(os.path.dirname(path), create=True)
            data = encode(kind, key, meta, payload)
            write_atomic(path, data)
        except Untrusted as e:
            self.warn_once(f"not storing in the kernel cache: {e}")
            self.writable = False
            return False
        except OSError as e:
            self.warn_once(f"cannot store in the kernel cache at {self.root}: {e.strerror or e}; "
                           "kernels still compile and run")
            return False
        self.stats.bytes_written += len(data)
        self.stats.store_seconds += time.perf_counter() - t0
        self._hourly_size_check()
        return True

    def _hourly_size_check(self):
        from . import size
        try:
            result = size.maybe_prune(self.root, self.settings.max_size)
        except OSError as e:
            self.warn_once(f"cannot check the kernel cache's size at {self.root}: {e.strerror or e}")
            return
        if result and result[2]:
            log.debug("size check: %d bytes, deleted %d entries (%d bytes)",
                      result[0], result[2], result[1])


def _mark_used(path: str, mtime: float):
    """LRU: bump an entry's mtime when loaded, at most once an hour (see size.py)."""
    now = time.time()
    if now - mtime > 3600:
        try:
            os.utime(path, (now, now))
        except OSError:
            pass


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

class BundleStore:
    """Lookups served from one bundle, opened at the first lookup (or given in memory)."""

    writable = False

    def __init__(self, path=None, loaded=None, allow_root=False, label="bundle", quiet=False,
                 target_key=None):
        self.path = path
        self._target_key = target_key
        self.bundle = loaded
        self.allow_root = allow_root
        self.label = label
        self.quiet = quiet              # a missing bundle is normal here: say so only in the log
        self._failed = loaded is None and path is None

    def _open(self, chain):
        from . import bundle
        t0 = time.perf_counter()
        try:
            from .lookup import tack_version_id
            self.bundle = bundle.read(self.path, allow_root=self.allow_root,
                                      tack_version=tack_version_id())
            chain.stats.bytes_read += len(self.bundle.data)
            chain.stats.load_seconds += time.perf_counter() - t0
            log.debug("%s %s: %d entries", self.label, self.path, len(self.bundle))
        except bundle.BundleError as e:
            self._failed = True
            missing = not os.path.lexists(self.path)
            if missing and self.quiet:
                log.debug("%s: none at %s", self.label, self.path)
            else:
                chain.warn_once(f"not using the {self.label}: {e}")

    def target_key(self):
        from .lookup import host_target_key
        return self._target_key or host_target_key()

    def read(self, chain, kind, key, level):
        if self.bundle is None and not self._failed:
            self._open(chain)
        if self.bundle is None:
            return None
        if callable(key):
            key = key(self.target_key())
        got = self.bundle.get(kind, key)
        if got is None:
            return None
        meta, payload = got
        return meta, payload, self.bundle.path


class SiteBundleStore(BundleStore):
    """A site's bundle directory: the bundle built ahead of time for this node's architecture.

    The node's architecture (archspec) and LLVM version (llvmlite) are found
    only when a lookup first reaches this store, after a miss in the user's
    own cache.
    """

    def __init__(self, directory):
        super().__init__(None, allow_root=True, label="site bundle", quiet=True)
        self.directory = directory
        self._failed = False

    def _open(self, chain):
        from .lookup import arch_target_key, host_arch, llvm_version
        try:
            arch = host_arch()
            self._target_key = arch_target_key(arch, llvm_version())
        except Exception as e:                  # noqa: BLE001 - no archspec or llvmlite: no site bundle
            self._failed = True
            log.debug("site bundles in %s: cannot name this node's architecture (%s)", self.directory, e)
            return
        self.path = os.path.join(self.directory, site_bundle_name(arch, self._target_key))
        super()._open(chain)


class DiskStore:
    """Adapts a DiskCache (per-kernel files) to the chain."""

    def __init__(self, disk):
        self.disk = disk

    @property
    def writable(self):
        return self.disk.writable

    def read(self, chain, kind, key, level):
        if callable(key):
            from .lookup import host_target_key
            key = key(host_target_key())
        return self.disk.read(kind, key, level)


class Chain:
    """The stores of this process, tried in order; what ``lookup`` talks to."""

    def __init__(self, settings, stats, warn_once, launch=None, site_dirs=(), own_bundle=True):
        from .lookup import host_target_key
        self.settings = settings
        self.stats = stats
        self.warn_once = warn_once
        self.disk = None
        self.stores = []
        name = bundle_name(host_target_key())
        if settings.mode == "bundle":
            if own_bundle:                      # else load_bundle() already read (or tried) it
                self.stores.append(BundleStore(os.path.join(settings.directory, name),
                                               label="cache bundle", quiet=True))
        else:
            self.disk = DiskCache(settings, stats, warn_once)
            if launch is not None and launch.rank != 0:
                self.disk.writable = False          # under MPI only rank 0 stores
                self.disk.marks_used = False        # nor marks entries used: no storm of utimes
            self.stores.append(DiskStore(self.disk))
        for d in site_dirs:
            # a bundle packed on a node like this one, then one built for its architecture
            self.stores.append(BundleStore(os.path.join(d, name), allow_root=True,
                                           label="site bundle", quiet=True))
            self.stores.append(SiteBundleStore(d))

    def add_loaded(self, loaded):
        self.stores.insert(0, BundleStore(loaded=loaded, label="broadcast bundle"))

    @property
    def writable(self):
        return self.disk is not None and self.disk.writable

    def read(self, kind, key, level):
        for s in self.stores:
            got = s.read(self, kind, key, level)
            if got is not None:
                return got
        return None

    def write(self, kind, key, meta, payload):
        return self.disk.write(kind, key, meta, payload) if self.writable else False

    def discard(self, path):
        """Remove an unusable entry found at ``path`` (only ever a per-kernel file of ours)."""
        if self.disk is not None:
            self.disk.discard(path)


BUNDLE_PREFIX = "bundle-"


def bundle_name(target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<target key prefix>``: the one bundle a host of that target reads."""
    return f"{BUNDLE_PREFIX}{machine or platform.machine()}-{target_key[:16]}"


def site_bundle_name(arch: str, target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<arch>-<target key prefix>``: a site bundle built for ``arch``."""
    return f"{BUNDLE_PREFIX}{machine or platform.machine()}-{arch}-{target_key[:12]}"


def site_dirs(environ=None) -> list:
    """TACK_CACHE_BUNDLES: the site's bundle directories, searched after the user's own."""
    environ = os.environ if environ is None else environ
    raw = environ.get("TACK_CACHE_BUNDLES", "")
    return [d for d in raw.split(os.pathsep) if d.strip()]
