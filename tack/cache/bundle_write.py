"""Writing bundles: ``pack`` (the bytes of the format ``bundle.py`` reads), the one header
writer (``header_for``), ``write``, and ``pack``'s collection of a version directory.

The writer half of the bundle format, apart from its reader so that a process that only looks
kernels up (a warm hit from a site or own bundle) does not load it; the format's layout (the
head, rows, blocks and their digests) is ``bundle.py``'s, imported from there.
"""

from __future__ import annotations

import os
import stat
import time

from ..digests import hasher
from .bundle import (_FIELDS, _HEAD, _KEY_END, _RECORD, _STRIDE, FORMAT, MAGIC, BundleError,
                     bundle_name, rows_per_block)
from .entry import KIND_LOWERED, KIND_VARIANT, SUFFIX, DamagedEntry, decode, encode_meta
from .keys import tack_version_id
from .trust import TMP_MARK, NotRegular, Untrusted, check_stat, read_regular
from .trust_write import write_atomic


def pack(entries, meta: dict, block_rows: int | None = None) -> bytes:
    """Bundle bytes (format ``bundle.FORMAT``) from ``[(kind, key, encoded entry bytes)]`` and header fields.

    Rows (and entries) are written in the byte order of ``kind<TAB>key``, one row per key (the
    first given of a key listed twice), in blocks of ``block_rows`` rows (default
    ``rows_per_block``), each block's fence and digest in the table the head's checksum
    covers. ValueError for a key that is not 64 characters of ascii without separators."""
    seen, rows_in = set(), []
    for e in sorted(entries, key=lambda e: f"{e[0]}\t{e[1]}".encode()):
        kind, key = e[0], e[1]
        if len(key) != 64 or not key.isascii() or "\t" in key or "\n" in key or kind not in SUFFIX:
            raise ValueError(f"a bundle's entries have a known kind and a 64-character key: "
                             f"{kind}, {key!r}")
        if (kind, key) not in seen:
            seen.add((kind, key))
            rows_in.append(e)
    n = len(rows_in)
    per = block_rows or rows_per_block(n)
    nblocks = -(-n // per)
    meta_b = encode_meta(meta)
    # Fixed-width numbers: the index's length does not depend on the offsets it lists.
    offset = _HEAD.size + len(meta_b) + nblocks * _RECORD + _STRIDE * n
    rows = []
    for kind, key, data in rows_in:
        rows.append(f"{kind}\t{key}\t{offset:016d}\t{len(data):016d}\n".encode())
        offset += len(data)
    table = b"".join(rows[b][:_KEY_END] + hasher(b"".join(rows[b:b + per])).digest()
                     for b in range(0, n, per))
    fields = _HEAD.pack(MAGIC, FORMAT, n, per, len(meta_b), b"")[:_FIELDS]
    digest = hasher(fields + meta_b + table).digest()
    return b"".join([fields, digest, meta_b, table] + rows + [d for _, _, d in rows_in])


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


def valid_entries(b) -> list:
    """[(kind, key, encoded entry bytes)] of every whole, valid entry of the open bundle ``b``
    (what a bundle written over it keeps: ``kept_entries``)."""
    out = []
    for (kind, key), (offset, length) in sorted(b.index.items()):
        try:
            data = b._at(offset, length)
            decode(data, kind, key)
        except (DamagedEntry, BundleError, OSError):
            continue
        out.append((kind, key, data))
    return out


def write(path: str, entries, header: dict) -> int:
    """Write a bundle of ``[(kind, key, encoded entry bytes)]`` at ``path`` (atomically and
    durably: a temporary file beside it, its data synced, renamed over it; readable by all,
    whatever the umask: a site's bundles serve every user). -> its size in bytes."""
    data = pack(entries, header)
    write_atomic(path, data, mode=0o644, durable=True)
    return len(data)


def collect(version_dir: str, target_key: str | None = None, left_out: dict | None = None):
    """The entries of one Tack version's directory that a run would load, for ``pack``: whole,
    valid, and, as their directories, yours and writable by nobody else (checked as a lookup
    checks them: one anyone could have rewritten is never put in a bundle a run then trusts).

    -> {target key: [(kind, key, bytes)]} of variants, and the lowered
    entries (which every architecture's bundle carries).  ``left_out`` (a dict): counts of
    the entries not collected, as ``damaged`` and ``untrusted``.
    """
    left_out = {} if left_out is None else left_out
    left_out.setdefault("damaged", 0)
    left_out.setdefault("untrusted", 0)
    lowered, variants = [], {}
    for kind, level in ((KIND_LOWERED, "lowered"), (KIND_VARIANT, "variants")):
        ldir = os.path.join(version_dir, level)
        if not _trusted_dir(ldir):
            continue
        for fan in sorted(os.listdir(ldir)):
            fdir = os.path.join(ldir, fan)
            if not _trusted_dir(fdir):
                continue
            for name in sorted(os.listdir(fdir)):
                if TMP_MARK in name or not name.endswith(SUFFIX[kind]):
                    continue
                path = os.path.join(fdir, name)
                try:
                    data, st = read_regular(path)
                    check_stat(st, path, is_dir=False)
                except Untrusted:
                    left_out["untrusted"] += 1
                    continue
                except OSError:
                    left_out["damaged"] += 1
                    continue
                try:
                    key, meta, _ = decode(data, kind)
                except DamagedEntry:
                    left_out["damaged"] += 1      # damaged entries are not packed
                    continue
                if kind == KIND_LOWERED:
                    lowered.append((kind, key, data))
                else:
                    tk = meta.get("target_key", "")
                    if target_key is None or tk == target_key:
                        variants.setdefault(tk, []).append((kind, key, data, meta))
    return lowered, variants


def _trusted_dir(path: str) -> bool:
    """A real directory, yours and writable by nobody else (``trust.check_stat``)."""
    try:
        check_stat(os.lstat(path), path)
        return True
    except (OSError, Untrusted):
        return False


def _real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def replaceable(path: str, force: bool = False, force_hint: str = "--force",
                for_header: dict | None = None) -> str | None:
    """Why a new bundle may not replace what is at ``path`` (None: nothing is there, or a Tack
    bundle, which Tack wrote and may replace).  A file Tack did not write is replaced only
    with ``force``; what is not a regular file (a FIFO, a directory, a link) never is.  With
    ``for_header`` (the new bundle's header), so is a bundle for another machine or
    microarchitecture (``pack --output`` over a site's zen2 bundle put x86_64_v4 code under the
    zen2 name, and the zen2 entries were gone); one for the same, of another LLVM or Tack (a
    job script's fixed ``--output`` after an upgrade), is stale, and replaced."""
    return _refused(path, *replaced_what(path, for_header), force, force_hint)


def _refused(path: str, why, never: bool, force: bool, force_hint: str = "--force") -> str | None:
    """``replaceable``'s answer from ``replaced_what``'s."""
    if why is None or (force and not never):
        return None
    return f"not replacing {path}: {why}" + ("" if never else f"; use {force_hint} to replace it")


def replaced_what(path: str, for_header: dict | None = None) -> tuple:
    """(why what is at ``path`` is replaced only with force, or None; whether it never is), as
    ``replaceable`` says it."""
    try:
        head, _ = read_regular(path, limit=len(MAGIC))
    except FileNotFoundError:
        return None, False
    except NotRegular as e:
        return f"it is {e.strerror}", True
    except OSError as e:
        return f"it cannot be read ({e.strerror or e}), so it is not known to be a bundle", False
    if head == MAGIC:
        return (None if for_header is None else _for_another_machine(path, for_header)), False
    return ("it is not a Tack bundle" if head else "it is an empty file, not a Tack bundle"), False


def _for_another_machine(path: str, new: dict) -> str | None:
    """Why the Tack bundle at ``path`` is not the new bundle's (``new``: its header) to replace:
    it is for another machine, or names another microarchitecture; None where it is for the
    same, or its header cannot be read (replaced as a damaged bundle is, and said so)."""
    from .bundle import header
    try:
        old = header(path)
    except (BundleError, OSError):
        return None
    arch, new_arch = old.get("arch") or "", new.get("arch") or ""
    if old.get("machine") == new.get("machine") and (arch == new_arch or not arch or not new_arch):
        return None
    held = f"{arch or 'an unnamed target'} ({old.get('machine')})"
    n = old.get("entries", 0)
    return (f"it is a Tack bundle for {held}, not {new_arch or 'an unnamed target'} "
            f"({new.get('machine')}), and its {n} entr{'y' if n == 1 else 'ies'} would be lost")


class NothingToPack(BundleError):
    """The version directory holds no variant (for the target asked)."""


def write_bundles(version_dir: str, out_dir: str, output: str | None = None,
                  target_key: str | None = None, arch_of=lambda target_key: "", force: bool = False):
    """Pack a version directory into one bundle per target found. -> [(path, meta)].

    ``arch_of(target key)``: the ``kind:name`` to put in the header of the bundle of variants
    that do not name their arch (those compiled on a host for itself).  A file at a bundle's
    path that is not a Tack bundle is replaced only with ``force`` (BundleError, before any
    bundle is written); what is not a regular file never is."""
    lowered, variants = collect(version_dir, target_key)
    if not variants:
        raise NothingToPack(f"no compiled variants to pack in {version_dir}" +
                            (f" for target {target_key[:16]}" if target_key else "") +
                            ": run the kernels once with this Tack (TACK_CACHE=write) first")
    if output is not None and len(variants) > 1:
        raise BundleError(f"entries for {len(variants)} targets found; --output writes one "
                          "bundle: choose one with --arch")
    planned = []
    for tk, entries in sorted(variants.items()):
        first = dict(entries[0][3], target_key=tk)
        meta = header_for(first, arch=first.get("arch") or arch_of(tk))
        path = output or os.path.join(out_dir, bundle_name(tk, meta["machine"]))
        why, never = replaced_what(path, for_header=meta)      # (its header read once)
        refused = _refused(path, why, never, force)
        if refused is not None:
            raise BundleError(refused)
        planned.append((tk, entries, meta, path, why if force else None))
    written = []
    for tk, entries, meta, path, forced in planned:
        # The valid entries of this Tack's bundle of the same target that this one replaces are
        # kept (those a run loaded from it and that the directory no longer holds: the flow
        # pack, clear, run, pack would otherwise lose them), the directory's first.
        new = lowered + [(k, key, d) for k, key, d, _ in entries]
        have = {(k, key) for k, key, _ in new}
        unread = []
        there = [] if forced else kept_entries(path, tk, why=unread)
        held = {(k, key): d for k, key, d in there}
        if there and all(held.get((k, key)) == d for k, key, d in new):
            # every entry the directory holds is in the bundle already, byte for byte: it is left
            # as it is (it was written again, a new file for jobs that watch it, to no end)
            written.append((path, dict(meta, entries=len(there), bytes=os.path.getsize(path),
                                       kept=len(there), unchanged=True, replaced_unread=None,
                                       replaced_other=False)))
            continue
        kept = [e for e in there if (e[0], e[1]) not in have]
        size = write(path, new + kept, meta)
        written.append((path, dict(meta, entries=len(new) + len(kept), bytes=size, kept=len(kept),
                                   replaced_unread=unread[0] if unread else None,
                                   replaced_other=forced)))
    return written


def kept_entries(path: str, target_key: str, allow_root: bool = False, why: list | None = None) -> list:
    """The valid entries of this Tack's bundle for ``target_key`` at ``path``, which a bundle
    written over it keeps (``pack``, ``aot.save_bundle(merge=True)``); [] if there is none (or
    another Tack's, another target's, or one that cannot be used: ``why``, a list, is told why
    a file there could not be read, a damaged head or table)."""
    from .bundle import read
    if not os.path.lexists(path):
        return []
    try:
        b = read(path, allow_root=allow_root, tack_version=tack_version_id())
    except (BundleError, OSError) as e:
        if why is not None:
            why.append(str(e))
        return []
    try:
        return valid_entries(b) if b.meta.get("target_key") == target_key else []
    finally:
        b.close()
