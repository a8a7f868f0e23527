"""Bundles: every entry of a cache directory in one file, read once per process.

Thousands of MPI ranks each looking up a file per kernel on Lustre or GPFS
load the metadata server as much as thousands of ranks importing Python.  A
bundle holds all of one Tack version's entries for one host architecture;
a rank opens it once, reads it whole, and looks entries up in memory.

Layout::

    "TACKBDL1" | u32 format | u32 entry count | u32 meta length | u32 index length
    | 32-byte sha256 of (meta, index) | meta | index | entries...

``meta`` and ``index`` are text (``entry.encode_meta`` lines); the index
lists ``kind, key, offset, length`` of each entry and comes before the
entries, so a truncated bundle still serves every entry that survives
whole.  Each entry is a normal cache entry with its own checksum: a
damaged one is ignored, and the others are used.  ``BundleStore`` and
``SiteBundleStore`` look entries up in bundles for a session (``stores.py``).
"""

from __future__ import annotations

import os
import platform
import struct
import time

from ..digests import sha256
from . import log
from .entry import (KIND_LOWERED, KIND_VARIANT, MISSING, SUFFIX, DamagedEntry, Found, decode, decode_meta,
                    encode_meta)
from .keys import tack_version_id
from .trust import TMP_MARK, NotRegular, Untrusted, check_stat, check_trusted, read_regular, write_atomic

MAGIC = b"TACKBDL1"
FORMAT = 1
_HEAD = struct.Struct("<8sIIII32s")


class BundleError(Exception):
    """A bundle that cannot be used at all, and why."""


class Bundle:
    """A bundle's bytes, parsed: lookups are dict accesses."""

    def __init__(self, data: bytes, path: str = "<memory>"):
        self.data = data
        self.path = path
        if len(data) < _HEAD.size:
            raise BundleError(f"{path} is too short to be a bundle")
        magic, fmt, count, mlen, ilen, digest = _HEAD.unpack_from(data)
        if magic != MAGIC:
            raise BundleError(f"{path} is not a Tack bundle")
        if fmt != FORMAT:
            raise BundleError(f"{path} has bundle format {fmt}, this Tack reads {FORMAT}")
        body = data[_HEAD.size:_HEAD.size + mlen + ilen]
        if len(body) != mlen + ilen or sha256(body).digest() != digest:
            raise BundleError(f"{path} is damaged (its index does not match its checksum)")
        try:
            self.meta = decode_meta(body[:mlen], list_fields=())
            self.index = self._parse_index(body[mlen:], len(data)) if ilen else {}
        except (ValueError, UnicodeDecodeError, DamagedEntry) as e:
            raise BundleError(f"{path} is damaged (its header or index is malformed: {e})") from None
        if len(self.index) != count:
            raise BundleError(f"{path} is damaged (index has {len(self.index)} of {count} entries)")

    @staticmethod
    def _parse_index(text: bytes, size: int) -> dict:
        """``kind<TAB>key<TAB>offset<TAB>length`` lines -> {(kind, key): (offset, length)};
        ValueError, naming the line, for any line that is not one (a checksum only says the
        index is the one written, not that a writer wrote it well)."""
        index = {}
        for n, line in enumerate(text.decode("ascii").split("\n"), 1):
            fields = line.split("\t")
            if len(fields) != 4 or not all(f.isascii() and f.isdigit() and len(f) <= 20
                                           for f in (fields[0], fields[2], fields[3])):
                raise ValueError(f"index line {n} is not 'kind, key, offset, length'")
            kind, key, offset, length = int(fields[0]), fields[1], int(fields[2]), int(fields[3])
            if kind not in SUFFIX or len(key) != 64 or (kind, key) in index:
                raise ValueError(f"index line {n} names no entry of this bundle")
            index[(kind, key)] = (offset, length)
        return index

    def damaged_entries(self) -> int:
        """How many entries fail their own checks (``info`` reports it; lookups skip them)."""
        bad = 0
        for (kind, key), (offset, length) in self.index.items():
            try:
                decode(self.data[offset:offset + length], kind, key)
            except DamagedEntry:
                bad += 1
        return bad

    def __len__(self):
        return len(self.index)

    def get(self, kind: int, key: str):
        """-> (meta, payload) of a whole, valid entry, or None."""
        where = self.index.get((kind, key))
        if where is None:
            return None
        offset, length = where
        try:
            _, meta, payload = decode(self.data[offset:offset + length], kind, key)
        except DamagedEntry as e:
            log.debug("bundle %s: entry %s damaged (%s); ignored", self.path, key[:16], e)
            return None
        return meta, payload


def pack(entries, meta: dict) -> bytes:
    """Bundle bytes from ``[(kind, key, encoded entry bytes)]`` and header fields."""
    meta_b = encode_meta(meta)
    # Fixed-width numbers: the index's length does not depend on the offsets it lists.
    row = len(f"0\t{'0' * 64}\t{0:016d}\t{0:016d}")
    offset = _HEAD.size + len(meta_b) + (row + 1) * len(entries) - (1 if entries else 0)
    lines = []
    for kind, key, data in entries:
        lines.append(f"{kind}\t{key}\t{offset:016d}\t{len(data):016d}")
        offset += len(data)
    index_b = "\n".join(lines).encode()
    digest = sha256(meta_b + index_b).digest()
    head = _HEAD.pack(MAGIC, FORMAT, len(entries), len(meta_b), len(index_b), digest)
    return b"".join([head, meta_b, index_b] + [d for _, _, d in entries])


def header_for(meta: dict, llvm: str = "", arch: str = "", requires: dict | None = None) -> dict:
    """A new bundle's header, from the metadata of one of its variants (a bundle holds one
    target's): this Tack's version, the target key, machine, arch (``arch`` where the variant
    names none: one compiled on a host for itself), backend and the target's identity, the LLVM
    that compiled it (``llvm``: "" where that is not known), and when the bundle was made.
    ``requires``: what a node needs to run the code, as its runtime reads it back (a CPU
    bundle's ``cpu_*`` fields: ``backends.cpu_choice``); string fields, none of the others'."""
    head = {"tack": tack_version_id(), "target_key": meta["target_key"],
            "machine": meta.get("machine", ""), "arch": meta.get("arch", "") or arch,
            "backend": meta.get("backend", "cpu"), "llvm": llvm, "target": meta.get("target", ""),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    for field, value in (requires or {}).items():
        if field in head or not isinstance(value, str):
            raise ValueError(f"bundle header field {field!r}: a new field's string value expected")
        head[field] = value
    return head


def write(path: str, entries, header: dict) -> int:
    """Write a bundle of ``[(kind, key, encoded entry bytes)]`` at ``path`` (atomically, readable
    by all: a site's bundles serve every user). -> its size in bytes."""
    data = pack(entries, header)
    write_atomic(path, data, mode=0o644)
    return len(data)


def read(path: str, allow_root: bool = False, tack_version: str | None = None) -> Bundle:
    """Open a bundle after checking it may be trusted: one open, one read.

    Its directory must be trusted as the file is (else anyone who may write
    there could swap the file), and the checks on the file are made on the
    descriptor actually read (opened without following a link).  With
    ``tack_version``, a bundle made by another Tack version is refused.
    """
    try:
        check_trusted(os.path.dirname(os.path.abspath(path)), allow_root=allow_root)
        data, st = read_regular(path)
        check_stat(st, path, allow_root=allow_root, is_dir=False)
    except Untrusted as e:
        raise BundleError(str(e)) from None
    except FileNotFoundError:
        raise BundleError(f"there is no bundle at {path}") from None
    except NotRegular as e:
        if e.strerror.startswith("a symbolic link"):
            raise BundleError(f"{path} is a symbolic link; bundles are read only from the file itself") from None
        raise BundleError(f"{path} is {e.strerror}") from None
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror or e}") from None
    b = Bundle(data, path)
    if tack_version is not None and b.meta.get("tack") != tack_version:
        raise BundleError(f"{path} was made by Tack {b.meta.get('tack')}, this is {tack_version}; "
                          "pack it again")
    return b


def header(path: str) -> dict:
    """A bundle's header fields, entry count and size (read whole and checked: BundleError)."""
    try:
        data, st = read_regular(path)
    except OSError as e:
        raise BundleError(f"cannot read {path}: {e.strerror or e}") from None
    b = Bundle(data, path)
    return dict(b.meta, entries=len(b), bytes=st.st_size)


def collect(version_dir: str, target_key: str | None = None):
    """The entries of one Tack version's directory, for ``pack``.

    -> {target key: [(kind, key, bytes)]} of variants, and the lowered
    entries (which every architecture's bundle carries).
    """
    lowered, variants = [], {}
    for kind, level in ((KIND_LOWERED, "lowered"), (KIND_VARIANT, "variants")):
        ldir = os.path.join(version_dir, level)
        if not os.path.isdir(ldir):
            continue
        for fan in sorted(os.listdir(ldir)):
            fdir = os.path.join(ldir, fan)
            if not os.path.isdir(fdir):
                continue
            for name in sorted(os.listdir(fdir)):
                if TMP_MARK in name or not name.endswith(SUFFIX[kind]):
                    continue
                try:
                    data, _ = read_regular(os.path.join(fdir, name))
                    key, meta, _ = decode(data, kind)
                except (OSError, DamagedEntry):
                    continue                      # damaged entries are not packed
                if kind == KIND_LOWERED:
                    lowered.append((kind, key, data))
                else:
                    tk = meta.get("target_key", "")
                    if target_key is None or tk == target_key:
                        variants.setdefault(tk, []).append((kind, key, data, meta))
    return lowered, variants


def write_bundles(version_dir: str, out_dir: str, output: str | None = None,
                  target_key: str | None = None, arch_of=lambda target_key: ""):
    """Pack a version directory into one bundle per target found. -> [(path, meta)].

    ``arch_of(target key)``: the ``kind:name`` to put in the header of the bundle of variants
    that do not name their arch (those compiled on a host for itself)."""
    lowered, variants = collect(version_dir, target_key)
    if not variants:
        raise BundleError(f"no compiled variants to pack in {version_dir}" +
                          (f" for target {target_key[:16]}" if target_key else ""))
    if output is not None and len(variants) > 1:
        raise BundleError(f"entries for {len(variants)} targets found; --output writes one "
                          "bundle: choose one with --arch")
    written = []
    for tk, entries in sorted(variants.items()):
        first = dict(entries[0][3], target_key=tk)
        meta = header_for(first, arch=first.get("arch") or arch_of(tk))
        path = output or os.path.join(out_dir, bundle_name(tk, meta["machine"]))
        size = write(path, lowered + [(k, key, d) for k, key, d, _ in entries], meta)
        written.append((path, dict(meta, entries=len(lowered) + len(entries), bytes=size)))
    return written


# -- names -------------------------------------------------------------------------

BUNDLE_PREFIX = "bundle-"


def bundle_name(target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<target key prefix>``: the one bundle a host of that target reads."""
    return f"{BUNDLE_PREFIX}{machine or platform.machine()}-{target_key[:16]}"


def site_bundle_name(arch: str, target_key: str, machine: str | None = None) -> str:
    """``bundle-<machine>-<kind>-<name>-<target key prefix>``: a site bundle built for ``arch``
    (``kind:name``; a bare name is a CPU's), e.g. ``bundle-x86_64-cpu-zen3-1a2b3c4d5e6f``."""
    from ..archs import parse
    kind, name = parse(arch)
    return f"{BUNDLE_PREFIX}{machine or platform.machine()}-{kind}-{name}-{target_key[:12]}"


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

class _ReadOnly:
    """What a store that is never written offers of ``Store``'s writing half."""

    writable = False

    def write(self, kind, key, meta, payload) -> bool:
        return False

    def touch(self, kind, key) -> None:
        pass

    def discard(self, path) -> None:
        pass


class BundleStore(_ReadOnly):
    """Lookups served from one bundle, opened at the first lookup (or given in memory).

    ``target_key``: the target whose variants it holds (a variant's key is made for it)."""

    def __init__(self, stats, warn_once, path=None, loaded=None, allow_root=False, label="bundle",
                 quiet=False, target_key=None):
        self.stats, self.warn_once = stats, warn_once
        self.path = path
        self.target_key = target_key
        self.bundle = loaded
        self.allow_root = allow_root
        self.label = label
        self.quiet = quiet              # a missing bundle is normal here: say so only in the log
        self._failed = loaded is None and path is None

    def _open(self):
        t0 = time.perf_counter()
        try:
            self.bundle = read(self.path, allow_root=self.allow_root, tack_version=tack_version_id())
            self.stats["bytes_read"] += len(self.bundle.data)
            self.stats["load_seconds"] += time.perf_counter() - t0
            log.debug("%s %s: %d entries", self.label, self.path, len(self.bundle))
        except BundleError as e:
            self._failed = True
            if self.quiet and not os.path.lexists(self.path):
                log.debug("%s: none at %s", self.label, self.path)
            else:
                self.warn_once(f"not using the {self.label}: {e}")

    def read(self, kind, key, level, targets=()):
        if self.bundle is None and not self._failed:
            self._open()
        if self.bundle is None:
            return None, MISSING
        got = self.bundle.get(kind, key(self.target_key) if callable(key) else key)
        if got is None:
            return None, MISSING
        return Found(got[0], got[1], self.bundle.path), ""


class SiteBundleStore(_ReadOnly):
    """A site's bundle directory: the bundles built ahead of time for this node's architecture
    and each of its ancestors, looked in most specific first.  A bundle for an unrelated or
    newer microarchitecture is never a candidate.

    When a lookup first reaches this store it lists the directory once and asks the caller's
    ``site_bundles(names, header)`` (the runtime's: ``interface.Runtime.site_bundles``) which
    bundles this node uses, in order: [(``kind:arch``, target key, name)].  ``header(name)``
    reads that bundle (``read``: trusted, this Tack's) once and gives its header fields, or None
    when it cannot be used (said once, as a warning); a bundle read so is then served as read."""

    def __init__(self, stats, warn_once, directory, site_bundles):
        self.stats, self.warn_once = stats, warn_once
        self.directory = directory
        self.site_bundles = site_bundles
        self.stores = None
        self._read = {}

    def names(self) -> list:
        """The directory's bundle file names, sorted (no temporary files); [] if it cannot be listed."""
        try:
            return sorted(n for n in os.listdir(self.directory)
                          if n.startswith(BUNDLE_PREFIX) and TMP_MARK not in n)
        except OSError as e:
            log.debug("site bundles: cannot list %s (%s)", self.directory, e.strerror or e)
            return []

    def header(self, name: str):
        """The header fields of bundle ``name`` (read once), or None when it cannot be used."""
        if name not in self._read:
            path = os.path.join(self.directory, name)
            t0 = time.perf_counter()
            try:
                b = read(path, allow_root=True, tack_version=tack_version_id())
            except BundleError as e:
                self.warn_once(f"not using the site bundle {name}: {e}")
                b = None
            else:
                self.stats["bytes_read"] += len(b.data)
                self.stats["load_seconds"] += time.perf_counter() - t0
            self._read[name] = b
        b = self._read[name]
        return None if b is None else b.meta

    def candidates(self):
        """[(``kind:arch``, target key, bundle path)] in the order they are looked in."""
        names = self.names()
        if not names:
            return []
        return [(arch, tk, os.path.join(self.directory, name))
                for arch, tk, name in self.site_bundles(names, self.header)]

    def _open(self):
        self.stores = []
        try:
            found = self.candidates()
        except Exception as e:                  # noqa: BLE001 - no archspec or llvmlite: no site bundle
            self._say_unnamed(e)
            return
        for arch, tk, path in found:
            log.debug("site bundle for %s: %s", arch, path)
            self.stores.append(BundleStore(self.stats, self.warn_once, path,
                                           loaded=self._read.get(os.path.basename(path)),
                                           allow_root=True, label=f"site bundle for {arch}",
                                           quiet=True, target_key=tk))

    def _say_unnamed(self, e):
        why = f"cannot name this node's microarchitecture ({type(e).__name__}: {e})"
        if isinstance(e, ImportError) and (e.name or "").split(".")[0] == "archspec":
            why += "; install archspec (pip install archspec) to use them"
        try:
            any_bundle = any(n.startswith(BUNDLE_PREFIX) for n in os.listdir(self.directory))
        except OSError:
            any_bundle = False
        if any_bundle:
            self.warn_once(f"site bundles in {self.directory} not used: {why}")
        else:
            log.debug("site bundles in %s: %s", self.directory, why)

    def read(self, kind, key, level, targets=()):
        if self.stores is None:
            self._open()
        for store in self.stores:
            found, _ = store.read(kind, key, level, targets)
            if found is not None:
                return found, ""
        return None, MISSING
