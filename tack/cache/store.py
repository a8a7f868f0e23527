"""Entry files: a small header, a JSON metadata block, a payload; written atomically.

Layout of an entry::

    magic "TACKENT1" | u8 kind | 3 pad | u32 meta length | u64 payload length
    | 32-byte sha256 of (key, meta, payload) | 64-byte key (hex) | meta | payload

The metadata is lines of tab-separated text, ``field<TAB>value...``, a field
that repeats giving a list of rows (``dep``, ``site``): parsed with
``str.split``, so a warm process need not import ``json`` (milliseconds).

A reader that finds the wrong magic, kind, key, lengths or checksum treats
the entry as damaged: it is never used.  Writes go to a temporary file in
the same directory and renamed into place, so a reader sees a whole entry
or none; entries are created private (0600).
"""

from __future__ import annotations

import hashlib
import os
import struct

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
    plain = b"\\" not in data                  # nothing escaped: no per-field work
    for line in data.decode().split("\n") if data else ():
        field, *values = line.split("\t") if plain else [_unescape(v) for v in line.split("\t")]
        if field in meta and isinstance(meta[field], list):
            meta[field].append(values)
        elif len(values) == 1:
            meta[field] = values[0]
        else:
            raise DamagedEntry(f"metadata field {field!r} has {len(values)} values")
    return meta


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
