"""The entry format, reader and writer together.

An entry file is a small header, a metadata block and a payload::

    magic "TACKENT4" | u8 kind | 3 pad | u32 meta length | u64 payload length
    | 32-byte digest (tack.digests) of (key, meta, payload) | 64-byte key (hex) | meta | payload

The metadata is lines of tab-separated text, ``field<TAB>value...``, a field
that repeats giving a list of rows (``dep``, ``site``); tabs, newlines and
backslashes in values are escaped.  A reader that finds the wrong magic,
kind, key, lengths or checksum treats the entry as damaged: it is never
used.  Bundles (``bundle.py``) hold entries in this same format.
"""

import os
import struct

from ..digests import hasher

MAGIC = b"TACKENT4"                     # 4: BLAKE2b checksum (3: SHA-512/256t; 2: BLAKE2b; 1: SHA-256)
KIND_LOWERED, KIND_VARIANT = 1, 2
HEAD = struct.Struct("<8sB3xIQ32s64s")
SUFFIX = {KIND_LOWERED: ".tlk", KIND_VARIANT: ".tvar"}
LEVEL_DIR = {KIND_LOWERED: "lowered", KIND_VARIANT: "variants"}
LEVEL_NAMES = {"variant": "compiled variant", "lowered": "lowered kernel"}    # a lookup's level, as said
HIT_FIELDS = frozenset(("dep", "site", "entry", "tidx", "argspec"))  # what a lookup uses (argspec: a device runtime's launch)


MISSING = "missing"          # the reason of a plain miss: nothing there


class Found:
    """An entry a store read whole and valid: its metadata, payload, where it was read from,
    whether reading it marked it used (the user's directory, at most once an hour), which kind of
    store served it (``source``: "cache directory", "cache bundle", "site bundles"...), and, for
    a file of its own (the user's directory), its ``os.stat`` as read (``st``: so that removing
    it, found unusable later, never removes another process's newer file in its place)."""
    __slots__ = ("meta", "payload", "path", "marked", "source", "st")

    def __init__(self, meta, payload, path, marked=False, st=None):
        self.meta, self.payload, self.path, self.marked, self.st = meta, payload, path, marked, st
        self.source = None              # which store served it (``Session.read``: its ``source``)


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
        for line in data.decode("utf-8", "surrogateescape").split("\n"):
            field, *values = (_unescape(v) for v in line.split("\t"))
            if only is None or field in only:
                _add_field(meta, field, values)
        return meta
    for line in data.decode("utf-8", "surrogateescape").split("\n") if data else ():
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


def is_entry_magic(magic: bytes) -> bool:
    """Whether ``magic`` opens an entry of some Tack's format, this one's, an older one's
    (``TACKENT1``...) or a newer one's: the header's layout has never changed, so the cache's
    size limit and ``clear`` know every version's entries for the cache's own."""
    return len(magic) == 8 and magic[:7] == MAGIC[:7] and b"1" <= magic[7:] <= b"9"


def stated_length(head: bytes):
    """The length an entry's header (the first ``HEAD.size`` bytes of ``head``) gives the entry,
    or None where they are not one of this format's headers."""
    if len(head) < HEAD.size:
        return None
    magic, _, mlen, plen, _, _ = HEAD.unpack_from(head)
    return HEAD.size + mlen + plen if magic == MAGIC else None


def decode(data: bytes, kind: int, key: str | None = None, only=None):
    """-> (key, meta dict, payload bytes); DamagedEntry if anything is off.

    ``only``: the metadata fields wanted (a cache hit needs three of a dozen).
    """
    if len(data) < HEAD.size:
        raise DamagedEntry("shorter than an entry header")
    magic, k, mlen, plen, digest, key_b = HEAD.unpack_from(data)
    if magic != MAGIC:
        older = is_entry_magic(magic) and magic[7:] < MAGIC[7:]
        raise DamagedEntry(f"an entry of an older Tack's format ({magic.decode()})" if older
                           else "not a Tack cache entry (bad magic)")
    if k != kind:
        raise DamagedEntry(f"entry kind {k}, expected {kind}")
    if len(data) != HEAD.size + mlen + plen:
        raise DamagedEntry(f"length {len(data)} does not match its header "
                           f"({HEAD.size + mlen + plen}): truncated or extended")
    entry_key = key_b.decode("ascii", "replace")
    if key is not None and entry_key != key:
        raise DamagedEntry("entry holds another key")
    meta_b = data[HEAD.size:HEAD.size + mlen]
    payload = data[HEAD.size + mlen:]
    h = hasher(key_b)
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


_ESCAPE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n"})


def encode_meta(meta: dict) -> bytes:
    """``{field: str | [row of str, ...]}`` -> text lines (rows for list fields), UTF-8; a file
    name's bytes that are not UTF-8 (a path's undecodable bytes, which Python holds as lone
    surrogates) are written as they are and read back (``decode_meta``) the same."""
    lines = []
    for field, value in sorted(meta.items()):
        rows = value if isinstance(value, list) else [[value]]
        for row in rows:
            lines.append("\t".join([field] + [str(v).translate(_ESCAPE) for v in row]))
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def encode(kind: int, key: str, meta: dict, payload: bytes) -> bytes:
    """One entry's bytes, as ``decode`` reads them back."""
    meta_b = encode_meta(meta)
    digest = hasher(key.encode() + meta_b + payload).digest()
    return HEAD.pack(MAGIC, kind, len(meta_b), len(payload), digest, key.encode()) + meta_b + payload
