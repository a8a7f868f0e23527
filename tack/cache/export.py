"""``python -m tack.cache export BUNDLE_OR_DIR --output DIR``: artifacts as files, for vendor tools.

Each variant entry of a bundle, or of a cache directory (this Tack version's
entries), is written as ``<kernel>-<kind>-<arch>-<key prefix><suffix>``:
``.o`` (CPU object code), ``.ptx``, ``.hsaco``, ``.spv`` (and ``.zebin`` for
Intel native code, ``.cubin`` for SASS, ``.clbin`` for an OpenCL driver's binary), so an admin can run ``objdump``, ``ptxas``,
``llvm-readelf`` or ``spirv-dis`` on it.  Entries that fail their checksum
are skipped and counted.  Nothing is read through a link or from a FIFO.
"""

from __future__ import annotations

import os
import re

from .entry import KIND_VARIANT, decode
from .keys import digest, tack_version_id
from .trust import NotRegular, read_regular
from .trust_write import write_atomic


class ExportError(Exception):
    """An export that would replace a file it did not write, and why."""


def variants(source: str):
    """-> ([(meta, payload)] of every whole variant entry in ``source``, damaged count)."""
    from . import bundle, bundle_write
    out, damaged = [], 0
    if not os.path.lexists(source):
        raise FileNotFoundError(2, "no such bundle or cache directory", source)
    if os.path.isdir(source) and not os.path.islink(source):
        version_dir = os.path.join(source, tack_version_id())
        if not os.path.lexists(version_dir):
            raise ExportError(_not_a_cache_of_this_version(source))
        left_out = {}
        _, found = bundle_write.collect(version_dir, left_out=left_out)
        for entries in found.values():
            for _kind, key, data, _meta in entries:
                _, meta, payload = decode(data, KIND_VARIANT, key)
                out.append((meta, payload))
        return out, left_out["damaged"] + left_out["untrusted"]
    data, _ = read_regular(source)
    b = bundle.Bundle(data, source)
    # the rows of a damaged index block are in no index: counted, as ``info`` counts them (they
    # went unsaid, and an export of such a bundle said "exported 0 file(s)", exit 0)
    damaged = len(b) - len(b.index)
    for (kind, key) in sorted(b.index):
        if kind != KIND_VARIANT:
            continue
        got = b.get(kind, key)
        if got is None:
            damaged += 1
        else:
            out.append(got)
    return out, damaged


def _not_a_cache_of_this_version(source: str) -> str:
    """Why a directory without this Tack version's directory exports nothing: a directory of
    bundles (a site's, ``bundles build``'s output) names its bundles, exported one by one."""
    from .bundle import BUNDLE_PREFIX
    from .keys import shown_version
    from .trust import TMP_MARK
    names = sorted(n for n in os.listdir(source) if n.startswith(BUNDLE_PREFIX) and TMP_MARK not in n)
    why = (f"{source} holds no entries of this Tack ({shown_version(tack_version_id())}): it is "
           "not a cache directory this Tack stored in")
    if names:
        more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        why += (f"; it holds {len(names)} bundle(s): export a bundle by its path, e.g. "
                f"{os.path.join(source, names[0])}{more}")
    return why


def parts(meta: dict, payload: bytes):
    """[(suffix, bytes)] of one artifact: a backend whose artifacts hold several parts (Level
    Zero: native code and its SPIR-V; an OpenCL driver's binary, in the same container) splits
    them with ``host.artifact_parts``, its toolchain's where it has one."""
    kind = meta.get("backend", "cpu")
    if kind != "cpu":
        from .host import artifact_parts
        split = artifact_parts(kind)
        if split is not None:
            return split(payload)
    return [(meta.get("suffix") or ".o", payload)]


_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")


def file_stem(meta: dict, key: str) -> str:
    kernel = meta.get("kernel", "kernel").rsplit(".", 1)[-1]
    arch = meta.get("arch") or f"{meta.get('backend', 'cpu')}:host"
    return _UNSAFE.sub("_", f"{kernel}-{arch.replace(':', '-')}-{key[:12]}")


def export(source: str, output: str, force: bool = False) -> tuple[list, int]:
    """Write each variant's artifact under ``output``. -> ([paths written], damaged skipped).

    A file already at one of the paths is left as it is when it holds what would be written
    (an export run again); one that differs is replaced only with ``force``, and what is not a
    regular file never: ExportError before anything is written, as for ``output`` that is there
    and not a directory, and for a ``source`` that cannot be read (``cannot read SOURCE``)."""
    if os.path.lexists(output) and not os.path.isdir(output):
        raise ExportError(f"--output {output} is not a directory")
    try:
        found, damaged = variants(source)
    except OSError as e:
        raise ExportError(f"cannot read {e.filename or source}: {e.strerror or e}") from None
    planned = []
    for meta, payload in found:
        key = meta.get("target_key", "")
        stem = file_stem(meta, digest("export", ("entry", meta.get("entry", "")), ("key", key)))
        for suffix, data in parts(meta, payload):
            path = os.path.join(output, stem + suffix)
            planned.append((path, data, _existing(path, data, force)))
    os.makedirs(output, exist_ok=True)
    written = []
    for path, data, same in planned:
        if not same:
            write_atomic(path, data, mode=0o644)
        written.append(path)
    return written, damaged


def _existing(path: str, data: bytes, force: bool) -> bool:
    """Whether ``path`` already holds ``data``; ExportError if something else is there that may
    not be replaced."""
    try:
        there, _ = read_regular(path, limit=len(data) + 1)
    except FileNotFoundError:
        return False
    except NotRegular as e:
        raise ExportError(f"not replacing {path}: it is {e.strerror}") from None
    except OSError as e:
        if force:
            return False
        raise ExportError(f"not replacing {path}: it cannot be read ({e.strerror or e}); "
                          "use --force to replace it") from None
    if there == data:
        return True
    if force:
        return False
    raise ExportError(f"not replacing {path}: it exists and holds something else; use --force "
                      "to replace it") from None
