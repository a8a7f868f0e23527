"""Bundles: every entry of a cache directory in one file, opened once per process.

Thousands of MPI ranks each looking up a file per kernel on Lustre or GPFS
load the metadata server as much as thousands of ranks importing Python.  A
bundle holds all of one Tack version's entries for one host architecture;
a rank opens it once and reads from it only what it uses.

Layout (format 5)::

    "TACKBDL1" | u32 format | u32 entry count | u32 rows per block | u32 meta length
    | 32-byte digest (tack.digests) of (the head's 24 bytes before it, meta, table)
    | meta | table | index | entries...

``meta`` is text (``entry.encode_meta`` lines): the header's fields.  The
index is one row per entry, ``kind<TAB>key<TAB>offset<TAB>length<NEWLINE>``
with both numbers 16 digits wide (101 bytes), in the byte order of
``kind<TAB>key``, cut into blocks of ``rows per block`` rows (the last may
hold fewer).  The table has one 98-byte record per block: its first row's
``kind<TAB>key`` (the block's fence) and the digest of the block's bytes.
The index comes before the entries, so a truncated bundle still serves every
entry that survives whole.  Each entry is a normal cache entry with its own
checksum.  ``pack`` chooses about sqrt(entries / 2) rows per block (at least
32), so that the table checked at open and the one block a lookup checks
cost about the same, and both grow as the square root of the bundle.

Reading (``read``): one open (no link followed, trust checked on the
descriptor), one read of the fixed head, one of meta and table; their
checksum is checked, and the descriptor is kept.  A lookup finds its block
by bisecting the fences, reads that block alone with ``pread`` and checks
it once per bundle (its digest, its shape, its rows strictly in order and
within its fences), finds the row by bisection, checks that row's numbers,
and reads that entry alone; ``entry.decode`` checks it before it is used.
A damaged block refuses its own rows only, a damaged entry or a row with
unreadable numbers itself only: the rest of the bundle still serves.
``Bundle(data)`` serves the same way from bytes in memory (the broadcast of
``load_bundle``).  A bundle of an older format (1: one checksum over meta
and the whole index; 2: SHA-256, 3: BLAKE2b, 4: SHA-512 checksums) is refused with a message
saying to pack it again; bundles are version-locked, so such a bundle was never served to
this Tack.  ``BundleStore`` and ``SiteBundleStore`` look entries up in
bundles for a session (``stores.py``).
"""

import os
import platform
import struct
import time
from math import isqrt

from ..digests import hasher
from . import _lock, count, log
from .entry import HIT_FIELDS, MISSING, SUFFIX, DamagedEntry, Found, decode, decode_meta
from .keys import shown_version, tack_version_id
from .trust import (TMP_MARK, NotRegular, Untrusted, check_parents, check_stat, check_trusted, file_identity,
                    open_regular)


def _bisect(a, x, right: bool) -> int:
    """``bisect.bisect_right(a, x)`` (``right``) or ``bisect_left``: the standard library's, in
    Python, as a lookup needs two of a dozen steps each, and importing ``bisect`` loads its C
    extension, 0.27 ms of every process a bundle serves."""
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid] or not right and x == a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


MAGIC = b"TACKBDL1"                         # a Tack bundle, whatever its format
FORMAT = 5                                  # 5: BLAKE2b checksums (4: SHA-512/256t; 3: BLAKE2b; 2: SHA-256; 1: one index)
_HEAD = struct.Struct("<8sIIII32s")         # magic, format, count, rows per block, meta length, digest
_FIELDS = _HEAD.size - 32                   # the head's bytes its digest covers
# An index row, as ``pack`` writes it: ``kind<TAB>key<TAB>offset<TAB>length<NEWLINE>``, numbers 16 digits.
_ROW = len(f"0\t{'0' * 64}\t{0:016d}\t{0:016d}")
_STRIDE = _ROW + 1                          # a row and its newline
_KEY_END = 2 + 64                           # "kind<TAB>key": what a lookup compares
_TABS = (1, _KEY_END, _KEY_END + 17)        # where a row's tabs are
_RECORD = _KEY_END + 32                     # a table record: a block's fence and digest
_KINDS = "".join(str(k) for k in SUFFIX).encode()
MIN_BLOCK_ROWS = 32


def rows_per_block(count: int) -> int:
    """The rows per index block ``pack`` writes for ``count`` entries: about sqrt(count / 2),
    at least ``MIN_BLOCK_ROWS``. Opening checks the table (98 bytes a block) and a lookup one
    block (101 bytes a row); this keeps the two about equal for a first call's two lookups,
    whatever the bundle's size (6,000 entries: 54 rows a block, 112 blocks)."""
    return max(MIN_BLOCK_ROWS, isqrt(count // 2))



#: What to do about one's own bundle another Tack made: this Tack's cache holds none of its
#: kernels yet, so ``pack`` alone finds nothing to pack.
AGAIN = ("run its kernels once with this Tack (a warm-up, TACK_CACHE=write), then pack it again "
         "(python -m tack.cache pack)")


class BundleError(Exception):
    """A bundle that cannot be used at all, and why (``missing``: there is no file at its path;
    ``directory``: the directory it is in, where that is what is not trusted)."""

    missing = False
    directory = None


def _pread(fd: int, n: int, offset: int) -> bytes:
    """Up to ``n`` bytes of ``fd`` at ``offset`` (fewer only at the end of the file)."""
    chunks = []
    while n > 0:
        chunk = _pread1(fd, n, offset)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
        offset += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


if hasattr(os, "pread"):
    _pread1 = os.pread
else:                                       # pragma: no cover - Windows: seek and read, one at a time
    import threading
    _seek_lock = threading.Lock()

    def _pread1(fd, n, offset):
        with _seek_lock:
            os.lseek(fd, offset, os.SEEK_SET)
            return os.read(fd, n)


class Bundle:
    """One bundle: its header and table checked at open, each index block read and checked when
    a lookup first needs it, each entry read and checked when looked up.

    ``Bundle(data)`` serves from bytes in memory (a broadcast, a tool that read the file), or
    from a view of memory another owner may release (``load_bundle``'s MPI shared memory, with
    ``_live()`` saying whether it is still there: a lookup after it is gone fails as damage
    would, and the kernel compiles);
    ``read(path)`` makes one that keeps the open file and reads with ``pread`` what a lookup
    needs, so a lookup costs what it reads, whatever the bundle's size.
    ``bytes_read``: the bytes this bundle read from its file so far (0 for one in memory);
    ``blocks_checked``: the index blocks whose checksum it computed (each once)."""

    def __init__(self, data: bytes | None, path: str = "<memory>", _fd: int | None = None,
                 _size: int = 0, _live=None):
        self.path = path
        self._data = data
        self._live = _live                      # memory another owner may release: still there?
        self._fd = _fd
        self.size = len(data) if data is not None else _size
        self.bytes_read = 0
        self.read_seconds = 0.0                 # spent by ``read(whole=True)`` reading and checking it
        self.blocks_checked = 0
        self.cut_said = False                   # ``cut_short`` gave its warning
        self.opened_as = None                   # ``file_identity`` of the file opened (``read``)
        self._index = None
        self._blocks = {}                       # block number -> (rows, keys) or why it is refused
        try:
            self._load()
        except BaseException:
            self._fd = None                 # not opened: the descriptor stays the caller's
            raise

    def _load(self):
        path = self.path
        head = self._at(0, _HEAD.size) if self.size >= _HEAD.size else b""
        if len(head) < _HEAD.size:              # (or cut since its size was read)
            raise BundleError(f"{path} is too short to be a bundle")
        magic, fmt, count, per, mlen, digest = _HEAD.unpack(head)
        if magic != MAGIC:
            raise BundleError(f"{path} is not a Tack bundle")
        if 0 < fmt < FORMAT:
            raise BundleError(f"{path} has bundle format {fmt} (an older Tack's); this Tack reads "
                              f"format {FORMAT}: {AGAIN}")
        if fmt != FORMAT:
            raise BundleError(f"{path} has bundle format {fmt}, this Tack reads {FORMAT}")
        nblocks = -(-count // per) if per else (1 if count else 0)
        tlen = nblocks * _RECORD
        end = _HEAD.size + mlen + tlen
        if end > self.size:                     # a copy that stopped (or a damaged length)
            raise BundleError(f"{path} is cut short or damaged (its header and index table take "
                              f"{end} bytes; the file has {self.size})")
        body = self._at(_HEAD.size, mlen + tlen)
        if len(body) != mlen + tlen or hasher(head[:_FIELDS] + body).digest() != digest:
            raise BundleError(f"{path} is damaged (its header does not match its checksum)")
        if count and not per:
            raise BundleError(f"{path} is damaged (its header says 0 rows per index block)")
        self.count, self._per, self._nblocks = count, per, nblocks
        self._start = end                       # where the index starts
        if end + count * _STRIDE > self.size:
            raise BundleError(f"{path} is damaged (truncated: its index is cut)")
        table = body[mlen:]
        self._table = table
        self._fences = [table[at:at + _KEY_END] for at in range(0, tlen, _RECORD)]
        if any(a >= b for a, b in zip(self._fences, self._fences[1:])):
            raise BundleError(f"{path} is damaged (its index blocks are out of order)")
        try:
            self.meta = decode_meta(body[:mlen], list_fields=())
        except (ValueError, UnicodeDecodeError, DamagedEntry) as e:
            raise BundleError(f"{path} is damaged (its header is malformed: {e})") from None

    # -- reading ------------------------------------------------------------

    def _at(self, offset: int, n: int) -> bytes:
        if self._data is not None:
            if self._live is not None and not self._live():
                raise BundleError(f"{self.path}: the memory it was in is released")
            got = self._data[offset:offset + n]
            return got if type(got) is bytes else bytes(got)    # (a view of shared memory)
        if self._fd is None:
            raise BundleError(f"{self.path} is closed")
        got = _pread(self._fd, n, offset)
        self.bytes_read += len(got)
        return got

    @property
    def data(self) -> bytes:
        """The whole bundle's bytes (read whole, once, for a bundle read from a file)."""
        if self._data is None:
            data = self._at(0, self.size)
            self._data = data
        return self._data

    def changed(self) -> bool:
        """Whether the file at this bundle's path is no longer the one it opened as it was then:
        another file renamed over it (its inode differs), or the same file written in place (a
        ``cp`` over it: its size or modification time differs).  One ``lstat`` of the path, asked
        only when an index block or entry fails its checks, never on a hit; False for a bundle in
        memory, and where the path is gone (a rebuild that renamed it: nothing to open instead)."""
        if self.opened_as is None:
            return False
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return file_identity(st) != self.opened_as

    def serve_from(self, view, live) -> None:
        """Serve from ``view`` from now on: the same bytes as this bundle's, in memory another
        owner may release (``live()``: still there?), so that the bytes this bundle holds can be
        let go (``load_bundle``'s rank 0, once it has put them in the node's shared memory)."""
        self._data, self._live = view, live

    def close(self):
        """Close the file; lookups then miss (except in a bundle whose bytes are in memory)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self):
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            try:
                os.close(fd)
            except Exception:               # noqa: BLE001 - at exit, os may be half gone
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the index ----------------------------------------------------------

    def _block(self, i: int):
        """-> (rows, keys) of index block ``i``, read and checked the first time it is asked
        for; DamagedEntry (why) for a block that fails its checks, every time it is asked for."""
        got = self._blocks.get(i)
        if got is None:
            got = self._blocks[i] = self._check_block(i)
        if type(got) is str:
            raise DamagedEntry(got)
        return got

    def _check_block(self, i: int):
        first = i * self._per
        n = min(self._per, self.count - first)
        # (OSError, or BundleError for a closed bundle, propagate: not remembered as damage)
        rows = self._at(self._start + first * _STRIDE, n * _STRIDE)
        self.blocks_checked += 1
        at = i * _RECORD
        if len(rows) != n * _STRIDE:
            return f"its index block {i} is cut short"
        if hasher(rows).digest() != self._table[at + _KEY_END:at + _RECORD]:
            return f"its index block {i} does not match its checksum"
        if not _shaped(rows, n):
            return f"its index block {i} is malformed"
        keys = [rows[a:a + _KEY_END] for a in range(0, len(rows), _STRIDE)]
        fences = self._fences
        if (keys[0] != fences[i] or any(a >= b for a, b in zip(keys, keys[1:]))
                or (i + 1 < len(fences) and keys[-1] >= fences[i + 1])):
            return f"its index block {i} is out of order (a key listed twice, or misplaced)"
        return rows, keys

    def _find(self, kind: int, key: str):
        """-> (offset, length) of the entry ``(kind, key)`` or None; DamagedEntry for one whose
        index block is damaged, or whose row is not one ``pack`` writes (numbers unreadable)."""
        needle = f"{kind}\t{key}".encode("ascii", "replace")
        if len(needle) != _KEY_END:
            return None
        i = _bisect(self._fences, needle, right=True) - 1
        if i < 0:
            return None
        rows, keys = self._block(i)
        j = _bisect(keys, needle, right=False)
        if j == len(keys) or keys[j] != needle:
            return None
        return _row_place(rows, j * _STRIDE)

    @property
    def index(self) -> dict:
        """{(kind, key): (offset, length)} of every well-formed row of every sound block (checked
        on first use: the tools list entries; a lookup never needs it). A row of a damaged
        block, with bad numbers, or with a separator in its key, is left out:
        ``damaged_entries`` counts it."""
        if self._index is None:
            index = {}
            for i in range(self._nblocks):
                try:
                    rows, keys = self._block(i)
                except DamagedEntry:
                    continue
                for j, k in enumerate(keys):
                    key = k[2:].decode("ascii")
                    if "\t" in key or "\n" in key:
                        continue
                    try:
                        index[(int(k[:1]), key)] = _row_place(rows, j * _STRIDE)
                    except DamagedEntry:
                        continue
            self._index = index
        return self._index

    def damaged_entries(self) -> int:
        """How many entries fail their own checks or their block's (``info`` reports it; lookups
        skip them): every index block and every entry is read and checked."""
        bad = len(self) - len(self.index)
        for (kind, key) in self.index:
            try:
                self.entry(kind, key)
            except DamagedEntry:
                bad += 1
        return bad

    def __len__(self):
        return self.count

    def cut(self):
        """(its file's size, the size its last index row gives) where the bundle is shorter than
        that, a copy or write that did not finish (its entries past the cut are lost: each is
        refused as damaged when looked up); else None.  Reads that row alone, unchecked: it only
        words a warning (``cut_short``)."""
        end = self._row_end(self.count - 1) if self.count else None
        return (self.size, end) if end is not None and end > self.size else None

    def present(self) -> int:
        """How many of its entries end within its bytes: all (``len``), less those a cut lost
        (``pack`` writes the entries in the index's order, so those are the last)."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            end = self._row_end(mid)
            if end is None:
                return self.count
            lo, hi = (mid + 1, hi) if end <= self.size else (lo, mid)
        return lo

    def _row_end(self, i: int):
        try:
            off, length = _row_place(self._at(self._start + i * _STRIDE, _STRIDE), 0)
        except (DamagedEntry, BundleError, OSError):
            return None
        return off + length

    # -- entries ------------------------------------------------------------

    def entry(self, kind: int, key: str, only=None):
        """-> (meta, payload) of the entry, None if the bundle has none; DamagedEntry (why)
        if it has one that is not whole and valid, or if the index block that would list it
        is damaged. Reads that block (once) and that entry's bytes alone."""
        place = self._find(kind, key)
        if place is None:
            return None
        offset, length = place
        if offset + length > self.size:
            raise DamagedEntry(f"it ends at byte {offset + length}, past the bundle's end "
                               f"({self.size}): truncated")
        _, meta, payload = decode(self._at(offset, length), kind, key, only=only)
        return meta, payload

    def get(self, kind: int, key: str, only=None):
        """-> (meta, payload) of a whole, valid entry, or None (a damaged or unreadable one, or a
        closed bundle: said in the log)."""
        try:
            return self.entry(kind, key, only)
        except (DamagedEntry, BundleError, OSError) as e:
            log.debug("bundle %s: entry %s not used (%s)", self.path, key[:16], e)
            return None


def _shaped(rows: bytes, n: int) -> bool:
    """Whether the block ``rows`` has the shape ``pack`` writes: ``n`` rows of ``_ROW`` ascii
    bytes, each ending in a newline, tabs where a row has them, a known kind in each (strided
    slices in C: no Python loop over the rows). A stray tab inside a key is left for the row's
    use: a lookup compares whole keys, and ``index`` leaves such a row out."""
    if len(rows) != _STRIDE * n or not rows.isascii():
        return False
    if rows[_ROW::_STRIDE] != b"\n" * n:
        return False
    if any(rows[t::_STRIDE] != b"\t" * n for t in _TABS):
        return False
    return not rows[0::_STRIDE].translate(None, _KINDS)


def _row_place(rows: bytes, at: int):
    """(offset, length) of the fixed-width row at ``at``; DamagedEntry unless both are digits."""
    off, length = rows[at + _KEY_END + 1:at + _KEY_END + 17], rows[at + _KEY_END + 18:at + _ROW]
    if not (off.isdigit() and length.isdigit()):
        raise DamagedEntry("its index row's offset or length is not a number")
    return int(off), int(length)


# Directories whose trust this process has checked: (directory, allow_root).  A site directory
# holds several bundles (conda ships one per x86-64 level, Spack the target's and its level's);
# each read would otherwise check the directory and every directory above it again, an lstat
# a level (``check_parents``), which on a parallel file system are metadata requests of every rank.
_trusted_dirs: set = set()


def _check_dir(directory: str, allow_root: bool, st=None) -> None:
    """Untrusted unless ``directory`` may be trusted (``check_trusted``, or ``check_stat`` of
    ``st``, the ``fstat`` of a descriptor opened on it without following a link; and
    ``check_parents``): checked once per process for each directory and ``allow_root``."""
    if (directory, allow_root) not in _trusted_dirs:
        if st is None:
            check_trusted(directory, allow_root=allow_root)
        else:
            check_stat(st, directory, allow_root=allow_root)
        check_parents(directory)
        _trusted_dirs.add((directory, allow_root))


_O_DIR = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
          | getattr(os, "O_CLOEXEC", 0))


def _listed_and_checked(directory: str) -> list:
    """The names in the site directory ``directory``, listed through a descriptor whose own
    ``fstat`` is the trust check ``_check_dir`` would make with an ``lstat`` (a site's: root may
    own it): one lookup of the directory for both, and the two of the same directory.  Trusted,
    it is remembered as checked (its parents too); not, the open of a bundle in it says why.
    Where it cannot be opened so (a link, a system without ``listdir`` on a descriptor), listed
    by its path as before."""
    if not hasattr(os, "O_DIRECTORY") or os.listdir not in os.supports_fd:
        return os.listdir(directory)
    # The name ``_check_dir`` checks (no trailing slash: through one, an open follows a link
    # that O_NOFOLLOW then cannot refuse).
    path = os.path.abspath(directory)
    try:
        fd = os.open(path, _O_DIR)
    except FileNotFoundError:
        raise
    except OSError:
        return os.listdir(directory)
    try:
        st = os.fstat(fd)
        names = os.listdir(fd)
    finally:
        os.close(fd)
    try:
        _check_dir(path, True, st)
    except Untrusted:
        pass                            # said when a bundle in it is opened
    return names


def _opened(path: str, allow_root: bool, check_dir: bool = True):
    """-> (descriptor, fstat) of the bundle at ``path``, checked for trust on the descriptor
    itself (opened without following a link); BundleError saying why not."""
    try:
        if check_dir:
            directory = os.path.dirname(os.path.abspath(path))
            try:
                _check_dir(directory, allow_root)
            except Untrusted as e:
                err = BundleError(str(e))
                err.directory = directory
                raise err from None
        fd, st = open_regular(path)
    except Untrusted as e:
        raise BundleError(str(e)) from None
    except FileNotFoundError:
        e = BundleError(f"there is no bundle at {path}")
        e.missing = True
        raise e from None
    except NotRegular as e:
        if e.strerror.startswith("a symbolic link"):
            raise BundleError(f"{path} is a symbolic link; bundles are read only from the file itself") from None
        raise BundleError(f"{path} is {e.strerror}") from None
    except PermissionError as e:
        # (an admin's file copied in as 0600, a umask of 077): every job of every other user
        # compiles what it holds; its owner can fix that
        raise BundleError(f"cannot read {path}: {e.strerror or e} (its owner can make it "
                          f"readable: chmod a+r {path})") from None
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror or e}") from None
    if check_dir:
        try:
            check_stat(st, path, allow_root=allow_root, is_dir=False)
        except Untrusted as e:
            os.close(fd)
            raise BundleError(str(e)) from None
    return fd, st


def read(path: str, allow_root: bool = False, tack_version: str | None = None,
         whole: bool = False) -> Bundle:
    """Open a bundle after checking it may be trusted: one open, then its header and table.

    Its directory must be trusted as the file is (else anyone who may write
    there could swap the file), and the checks on the file are made on the
    descriptor actually read (opened without following a link).  The
    descriptor stays open: each index block and entry is read from it when a
    lookup first needs it, so a
    bundle replaced while a job runs keeps serving the file that was opened.
    ``whole``: read the whole file now and close it (``load_bundle``'s rank 0,
    which broadcasts the bytes).  With ``tack_version``, a bundle made by
    another Tack version is refused.
    """
    t0 = time.perf_counter()
    fd, st = _opened(path, allow_root)
    try:
        if whole:
            data = _pread(fd, st.st_size, 0)
            b = Bundle(data, path)
            b.bytes_read, b.read_seconds = len(data), time.perf_counter() - t0
        else:
            b = Bundle(None, path, _fd=fd, _size=st.st_size)
            b.opened_as = file_identity(st)
            fd = None                           # the bundle's now: closed with it
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror or e}") from None
    finally:
        if fd is not None:
            os.close(fd)
    if tack_version is not None and b.meta.get("tack") != tack_version:
        b.close()
        raise StaleBundle(path, shown_version(b.meta.get('tack')), shown_version(tack_version))
    return b


def header(path: str) -> dict:
    """A bundle's header fields, entry count and size (its head, meta and table read and
    checked, no index block nor entry: BundleError)."""
    fd, st = _opened(path, allow_root=True, check_dir=False)
    try:
        b = Bundle(None, path, _fd=fd, _size=st.st_size)
    except OSError as e:
        os.close(fd)
        raise BundleError(f"cannot read {path}: {e.strerror or e}") from None
    except BundleError:
        os.close(fd)
        raise
    with b:
        return dict(b.meta, entries=len(b), bytes=st.st_size)


# -- names -------------------------------------------------------------------------

BUNDLE_PREFIX = "bundle-"


PACKED_KEY_DIGITS = 16                      # of the target key, in a packed bundle's name


def bundle_name(target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<target key prefix>``: the one bundle a host of that target reads."""
    return f"{BUNDLE_PREFIX}{machine or platform.machine()}-{target_key[:PACKED_KEY_DIGITS]}"


def named_for_another_target(path: str, meta: dict) -> str | None:
    """Why the packed bundle at ``path``, whose header is ``meta``, is not the one its name says
    (another target's bundle copied under this name: none of its entries is ever looked up
    here), or None.  ``load_bundle`` counted such a bundle's entries as read, and said nothing,
    while every kernel compiled."""
    key = str(meta.get("target_key") or "")
    if os.path.basename(path).endswith("-" + key[:PACKED_KEY_DIGITS]) and key:
        return None
    return (f"{path} holds code for another target (its header's target key "
            f"{key[:PACKED_KEY_DIGITS] or 'is missing'}): a copy of another host's bundle under "
            "this name")


def packed_bundle_machine(name: str) -> str | None:
    """The inverse of ``bundle_name``: the machine in a packed bundle's file name, or None for
    any other name (a site bundle's, a temporary file, another file)."""
    if not name.startswith(BUNDLE_PREFIX) or TMP_MARK in name:
        return None
    machine, sep, key = name[len(BUNDLE_PREFIX):].rpartition("-")
    if not sep or len(key) != PACKED_KEY_DIGITS or key.strip("0123456789abcdef"):
        return None
    return machine


def site_bundle_name(arch: str, target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<kind>-<name>-<target key prefix>``: a site bundle built for ``arch``
    (``kind:name``; a bare name is a CPU's), e.g. ``bundle-x86_64-cpu-zen3-1a2b3c4d5e6f``,
    ``bundle-nvptx64-cuda-sm_90-...``; ``machine``: the kind's (``archs.bundle_machine``)
    unless given."""
    from ..archs import bundle_machine, parse
    kind, name = parse(arch)
    return f"{BUNDLE_PREFIX}{machine or bundle_machine(kind)}-{kind}-{name}-{target_key[:12]}"


def site_bundle_arch(name: str, kind: str, machine: str | None = None):
    """The inverse of ``site_bundle_name`` for one kind: ``(arch name, target key prefix)`` of a
    site bundle's file name for ``kind`` on ``machine`` (this one by default), or None for any
    other name (another kind or machine, a packed bundle, a temporary file)."""
    prefix = f"{BUNDLE_PREFIX}{machine or platform.machine()}-{kind}-"
    if not name.startswith(prefix) or TMP_MARK in name:
        return None
    arch, sep, tk = name[len(prefix):].rpartition("-")
    if not sep or not arch or len(tk) != 12:
        return None
    return arch, tk


def named_candidates(candidates, names) -> list:
    """[(``kind:arch``, target key, name)] of each of ``candidates`` ([(``kind:arch``, target
    key)], in their order) whose site bundle is among ``names``: how a runtime that knows its
    candidates (the GPUs': one per device architecture) chooses among a directory's bundles."""
    names = set(names)
    out = []
    for arch, tk in candidates:
        try:
            name = site_bundle_name(arch, tk)
        except ValueError:                      # no file name (an AMD target id's features): no bundle
            continue
        if name in names:
            out.append((arch, tk, name))
    return out


# -- stores: lookups served from bundles ------------------------------------------

class StaleBundle(BundleError):
    """A bundle another Tack version packed: whole, but none of its entries could ever match.

    Its message tells the user to pack it again (their own bundle); ``site()`` is what to say
    of a site's bundle, which a user cannot pack: another Tack install's bundles (a module of
    another Tack left in ``TACK_CACHE_BUNDLES``), or a site directory not built again since
    this Tack was installed."""

    def __init__(self, path, made, this):
        self.path, self.made, self.this = path, made, this
        super().__init__(f"{path} was made by Tack {made}, this is {this}; {AGAIN}")

    def site(self) -> str:
        return (f"{self.path} was made by Tack {self.made}, this is {self.this}: it is another "
                "Tack install's bundle (does TACK_CACHE_BUNDLES name another install's "
                "directory?), or its site has not built it again for this Tack "
                "(python -m tack.site bundles build)")


class NotForThisNode(BundleError):
    """A site bundle whose header, checked at its first open (``BundleStore``'s ``check``), is
    not one this node uses."""


def checked_header(check, b: "Bundle", path: str) -> None:
    """Run the site bundle choice's ``check`` on the header of ``b`` (at ``path``):
    NotForThisNode with its reason where this node does not use it (said in the log, as the
    choice says it), BundleError where the check itself fails (archspec's rule failing: said as
    a warning, since it is no verdict on the bundle)."""
    try:
        why = check(b.meta)
    except Exception as e:                      # noqa: BLE001 - the rule failed: said
        raise BundleError(f"{path}: its CPU header cannot be checked against this node "
                          f"({type(e).__name__}: {e})") from None
    if why is not None:
        raise NotForThisNode(f"{path}: {why}")


def refused_by_check(check, b: "Bundle", path: str, warn_once, label: str = "") -> bool:
    """Whether the choice's ``check`` refuses the opened site bundle ``b`` (``checked_header``):
    a bundle this node does not use said in the log, a check that fails as a warning."""
    try:
        checked_header(check, b, path)
    except NotForThisNode as e:
        log.debug("%ssite bundle not used: %s", label, e)
    except BundleError as e:
        warn_once(f"not using the site bundle {e}")
    else:
        return False
    return True


def cut_short(b: "Bundle", label: str):
    """The warning for a bundle ``b`` cut short (``Bundle.cut``), or None where it is whole
    (or the warning was given already, by another reader of the same bundle)."""
    got = None if b.cut_said else b.cut()
    if got is None:
        return None
    b.cut_said = True                       # (said once, by whichever reader asked first)
    size, end = got
    lost = b.count - b.present()
    return (f"the {label} {b.path} is cut short ({size} of its {end} bytes: a copy or write "
            f"that did not finish): its last {lost} of {b.count} entries are lost, and their "
            f"kernels compile; copy it whole again (or pack or build it again)")


def site_reason(e: BundleError) -> str:
    """Why a site bundle is not used, as a warning says it: a ``StaleBundle``'s ``site()``."""
    return e.site() if isinstance(e, StaleBundle) else str(e)


def not_using_site(e: BundleError, what: str) -> str:
    """The warning of a site bundle (``what``: its name or path) not used: of its directory's
    bundles, where that is what is not trusted (it named the first bundle a lookup opened,
    which read as if the others were still used)."""
    if e.directory is not None:
        return f"not using the site bundles in {e.directory}: {e}"
    return f"not using the site bundle {what}: {site_reason(e)}"


class BundleStore:
    """Lookups served from one bundle, opened at the first lookup (or given in memory).

    ``target_key``: the target whose variants it holds (a variant's key is made for it).
    ``check``: the site bundle choice's check of the header (``SiteBundleStore``), run when this
    store opens a file (a bundle given ``loaded`` was checked by the choice): the first open of
    one whose header the choice left unread, and a file replacing it.  A bundle it refuses is
    not used, said only in the log, as the choice says why it leaves a bundle out."""

    writable = False                    # a bundle is only ever read

    def __init__(self, stats, warn_once, path=None, loaded=None, allow_root=False, label="bundle",
                 quiet=False, target_key=None, quiet_stale=False, check=None):
        self.stats, self.warn_once = stats, warn_once
        self.check = check              # header fields -> None, or why this node does not use it
        self.quiet_stale = quiet_stale  # another version's bundle: said only in the log
        self.path = path
        self.target_key = target_key
        self.bundle = loaded
        self.allow_root = allow_root
        self.label = label
        self.source = "site bundles" if label.startswith("site") else label
        self.quiet = quiet              # a missing bundle is normal here: say so only in the log
        self._failed = loaded is None and path is None
        self._gone = None               # the file a reopen could not use (``_reopen``), else None
        self._counted = loaded.bytes_read if loaded is not None else 0   # counted by its reader
        self._cut_checked = None        # the bundle asked whether it is cut short (once each)

    def _count(self, t0):
        """Add what the bundle read since the last count, and the time since ``t0``, to the stats."""
        b = self.bundle
        with _lock:             # as ``count``: threads read one bundle side by side
            if b is not None:
                new, self._counted = b.bytes_read - self._counted, b.bytes_read
                count(self.stats, "bytes_read", new)
            count(self.stats, "load_seconds", time.perf_counter() - t0)

    def _read(self, path):
        """``read`` of the bundle at ``path``; BundleError too for a packed bundle that is another
        target's, copied under this name (``named_for_another_target``): none of its entries is
        ever looked up here, and every kernel compiled, without a word, in bundle mode."""
        b = read(path, allow_root=self.allow_root, tack_version=tack_version_id())
        if self.check is not None:
            try:
                checked_header(self.check, b, path)
            except BundleError:
                b.close()
                raise
        if packed_bundle_machine(os.path.basename(path)) is not None:
            why = named_for_another_target(path, b.meta)
            if why is not None:
                b.close()
                raise BundleError(why)
        return b

    def _open(self):
        t0 = time.perf_counter()
        try:
            self.bundle = self._read(self.path)
            self._count(t0)
            log.debug("%s %s: %d entries", self.label, self.path, len(self.bundle))
        except BundleError as e:
            self._failed = True
            # A file there that cannot be used (a ``cp`` over it half done, another version's):
            # a later lookup opens it again once it has changed (``_reopen``), as for a file
            # replaced after it was opened; none there stays none (no lstat a lookup)
            if not e.missing:
                try:
                    self._gone = file_identity(os.stat(self.path, follow_symlinks=False))
                except OSError:
                    pass
            # none there: the open said so (no lstat to ask again), or the directory's check failed
            # for a directory that is not there either (a new user's, one a site fills later)
            if self.quiet and (e.missing or not os.path.lexists(self.path)):
                log.debug("%s: none at %s", self.label, self.path)
            elif (self.quiet_stale and isinstance(e, StaleBundle)) or isinstance(e, NotForThisNode):
                log.debug("%s not used: %s", self.label, e)
            else:
                why = site_reason(e) if self.source == "site bundles" else e
                self.warn_once(f"not using the {self.label}: {why}")

    def read(self, kind, key, level, targets=()):
        if self.bundle is None and not self._failed:
            self._open()
        if self.bundle is None and (self._gone is None or not self._reopen(None)):
            return None, MISSING
        t0 = time.perf_counter()
        key = key(self.target_key) if callable(key) else key
        b = self.bundle
        try:
            got = b.entry(kind, key, only=HIT_FIELDS)
        except (DamagedEntry, BundleError, OSError) as e:
            self._count(t0)
            if not b.changed():
                return self._damaged(b, level, key, e)
            # Not damage: the file at the bundle's path is not the one this process opened, as it
            # was (an admin's ``cp NEW OLD`` over it, or a file renamed over it whose old one has
            # this entry damaged), so the index read at open does not describe it.  Open the file
            # there now and look the entry up in it, once; what fails in the new file is its own.
            if not self._reopen(b):
                return None, f"the {self.label} {b.path} was replaced and cannot be read now"
            t0 = time.perf_counter()
            b = self.bundle
            try:
                got = b.entry(kind, key, only=HIT_FIELDS)
            except (DamagedEntry, BundleError, OSError) as e:
                self._count(t0)
                return self._damaged(b, level, key, e)
        if got is None:
            return None, MISSING
        self._count(t0)
        return Found(got[0], got[1], b.path), ""

    def _damaged(self, b, level, key, e):
        if b is not self._cut_checked:          # the first damaged entry: is the whole file cut?
            self._cut_checked = b
            why = cut_short(b, self.label)
            if why is not None:
                self.warn_once(why)
        count(self.stats, "damaged")
        log.debug("%s %s: %s %s damaged (%s); ignored", self.label, b.path, level, key[:16], e)
        return None, f"damaged in the {self.label} ({e}); ignored"

    def _reopen(self, old) -> bool:
        """Open the bundle's path again, as the file there is not the one ``old`` (this store's
        bundle) opened, or (``old`` None) not the one a reopen last found unusable (``_gone``,
        its ``file_identity`` then).  -> whether a bundle now serves.  Where the file cannot be
        used now (a ``cp`` half done: its index cut, its header's checksum failing), nothing is
        read from it, one warning says so, and a later lookup opens it again only once it has
        changed again (the ``cp`` done): one ``lstat``, no open, until then."""
        if old is not None and self.bundle is not old:     # another thread opened it again
            return self.bundle is not None
        path = old.path if old is not None else self.path
        try:
            seen = file_identity(os.stat(path, follow_symlinks=False))
        except OSError:
            seen = None
        if old is None and seen in (None, self._gone):
            return False
        if old is not None:
            self.bundle = None
            old.close()             # (a lookup of another thread in it then fails, and asks again)
        self.path, self._failed, self._gone = path, True, seen
        t0 = time.perf_counter()
        try:
            new = self._read(path)
        except BundleError as e:
            log.debug("%s %s replaced, not usable now: %s", self.label, path, e)
            if isinstance(e, NotForThisNode):
                return False            # not this node's now: as the choice, said in the log alone
            why = site_reason(e)
            why = why[len(path):].lstrip() if why.startswith(path + " ") else f"cannot be used ({why})"
            what = ("was replaced while this process had it open" if old is not None else
                    "changed since this process found it unusable")
            self.warn_once(f"the {self.label} {path} {what}, "
                           f"and the file there now {why}: its kernels compile until it is whole "
                           "again (replace a bundle by renaming a whole new file over it, as pack "
                           "and bundles build do, not by writing over it in place)")
            return False
        self.bundle, self._failed, self._gone, self._counted = new, False, None, 0
        self._count(t0)
        log.debug("%s %s replaced since it was opened: opened again, %d entries", self.label, path,
                  len(new))
        return True


class SiteBundleStore:
    """A site's bundle directory: the bundles built ahead of time for this node's architecture
    and each of its ancestors, looked in most specific first.  A bundle for an unrelated or
    newer microarchitecture is never a candidate.

    When a lookup first reaches this store it lists the directory once and asks the caller's
    ``site_bundles(names, header, defer)`` (the runtime's: ``interface.Runtime.site_bundles``) which
    bundles this node uses, in order: [(``kind:arch``, target key, name)].  ``header(name)``
    reads that bundle (``read``: trusted, this Tack's) once and gives its header fields, or None
    when it cannot be used (said once, as a warning); a bundle read so is then served as read.
    ``chosen``: [(``kind:arch``, target key, Bundle)] that ``load_bundle``'s rank 0 chose and
    broadcast, served in memory: the directory is then never listed nor a file in it opened."""

    writable = False
    source = "site bundles"

    def __init__(self, stats, warn_once, directory, site_bundles, chosen=None):
        self.stats, self.warn_once = stats, warn_once
        self.directory = directory
        self.site_bundles = site_bundles
        self.stores = None
        self._read = {}
        self._bad = {}                  # name -> file_identity of a bundle whose header failed
        self._listed = False            # the directory's bundle names once listed (None: unlistable)
        if chosen is not None:          # [(arch, target key, Bundle)] load_bundle gave: no file opened
            self.stores = [BundleStore(stats, warn_once, loaded=b, allow_root=True,
                                       label=f"site bundle for {arch}", quiet=True, target_key=tk)
                           for arch, tk, b in chosen]

    def listing(self):
        """The directory's bundle file names, sorted (no temporary files), listed once per store
        ([] where there is no such directory, as a site may name one it fills later); None if it
        cannot be listed.  The directory's ``PackedBundles`` asks it too (``holds``), so that a
        bundle packed for this host is opened only where the listing holds its name: on a
        parallel file system a failed open is a lookup its metadata server may have to answer, for
        every rank."""
        if self._listed is False:
            try:
                self._listed = sorted(n for n in _listed_and_checked(self.directory)
                                      if n.startswith(BUNDLE_PREFIX) and TMP_MARK not in n)
            except FileNotFoundError:
                log.debug("site bundles: no directory %s (yet)", self.directory)
                self._listed = []               # nothing there: nothing to open either
            except OSError as e:
                # There, but this user cannot list it (an admin's chmod 0711): every kernel the
                # bundles built for this node would have served compiles, in every job; say so.
                self.warn_once(f"cannot list the site bundle directory {self.directory} "
                               f"({e.strerror or e}): the bundles built for this node's CPU there "
                               f"are not used, and their kernels compile (its owner can make it "
                               f"readable: chmod a+rx {self.directory})")
                self._listed = None
        return self._listed

    def names(self) -> list:
        """``listing()``, or [] if the directory cannot be listed."""
        return self.listing() or []

    def holds(self, name: str) -> bool:
        """Whether the directory holds a bundle file ``name``: by the listing, or, where the
        directory cannot be listed, by ``lexists``."""
        names = self.listing()
        return name in names if names is not None else os.path.lexists(os.path.join(self.directory, name))

    def header(self, name: str):
        """The header fields of bundle ``name`` (read once), or None when it cannot be used."""
        if name not in self._read:
            path = os.path.join(self.directory, name)
            t0 = time.perf_counter()
            try:
                b = read(path, allow_root=True, tack_version=tack_version_id())
            except BundleError as e:
                self.warn_once(not_using_site(e, name))
                b = None
                if not e.missing:       # read again once it has changed (``_changed``)
                    try:
                        self._bad[name] = file_identity(os.stat(path, follow_symlinks=False))
                    except OSError:
                        pass
            else:
                count(self.stats, "bytes_read", b.bytes_read)   # its head, header and index table, no more
                count(self.stats, "load_seconds", time.perf_counter() - t0)
            self._read[name] = b
        b = self._read[name]
        return None if b is None else b.meta

    def opened(self, path: str):
        """The bundle at ``path`` as ``header`` read it (open, its header and table read), or None."""
        return self._read.get(os.path.basename(path))

    def candidates(self):
        """(rows, checks, read): ``rows`` [(``kind:arch``, target key, bundle path)] in the order
        they are looked in; ``checks`` {name: the runtime's check of that bundle's header (the
        CPU's ``cpu_runtime.check_later``: fields -> None, or why not)}; ``read`` the names
        whose headers this choice read, and so checked (a bundle it left unread is checked by
        ``checked_header`` when it is opened).  Made in locals: threads choosing at once agree."""
        names = self.names()
        checks, read = {}, set()
        if not names:
            return [], checks, read

        def header(name):
            read.add(name)
            return self.header(name)
        rows = [(arch, tk, os.path.join(self.directory, name))
                for arch, tk, name in self.site_bundles(names, header, defer=checks)]
        return rows, checks, read

    def _open(self):
        """The stores of the bundles chosen, made in locals and set whole (``self.stores``): a
        thread's lookup never sees a list another thread is filling."""
        stores = []
        try:
            found, checks, read = self.candidates()
        except Exception as e:                  # noqa: BLE001 - no archspec or llvmlite: no site bundle
            self._say_unnamed(e)
            self.stores = stores
            return
        chosen = {os.path.basename(path) for _, _, path in found}
        for name, b in list(self._read.items()):    # read for their headers only: let them go
            if b is not None and name not in chosen:
                b.close()
        for arch, tk, path in found:
            name = os.path.basename(path)
            loaded, check = self._read.get(name), checks.get(name)
            if loaded is not None and check is not None and name not in read and \
                    refused_by_check(check, loaded, path, self.warn_once):  # read for an earlier choice
                continue
            log.debug("site bundle for %s: %s", arch, path)
            stores.append(BundleStore(self.stats, self.warn_once, path, loaded=loaded,
                                      allow_root=True, label=f"site bundle for {arch}",
                                      quiet=True, target_key=tk, check=check))
        self.stores = stores

    def _say_unnamed(self, e):
        why = f"cannot name this node's microarchitecture ({type(e).__name__}: {e})"
        if isinstance(e, ImportError) and (e.name or "").split(".")[0] == "archspec":
            why += "; install archspec (pip install archspec) to use them"
        if self.names():
            self.warn_once(f"site bundles in {self.directory} not used: {why}")
        else:
            log.debug("site bundles in %s: %s", self.directory, why)

    def read(self, kind, key, level, targets=()):
        if self.stores is None:
            self._open()
        for again in (False, True):
            for store in self.stores:
                found, _ = store.read(kind, key, level, targets)
                if found is not None:
                    return found, ""
            # a bundle unusable then (a cp over it) has changed: choose again, and look once more
            if again or not (self._bad and self._changed()):
                break
            kept = set(map(id, self._read.values()))
            for store in self.stores:
                if store.bundle is not None and id(store.bundle) not in kept:
                    store.bundle.close()
            self._open()
        return None, MISSING

    def _changed(self) -> bool:
        """Whether a bundle whose header could not be used (a ``cp`` over it half done) has
        changed since: its header is then read again, and the bundles chosen again.  One
        ``lstat`` for each such bundle at a miss; none where every bundle was usable."""
        changed = False
        for name, seen in list(self._bad.items()):
            try:
                now = file_identity(os.stat(os.path.join(self.directory, name), follow_symlinks=False))
            except OSError:
                now = None
            if now != seen:
                del self._bad[name]
                self._read.pop(name, None)
                changed = True
        return changed
