"""Whether a cache directory may be trusted: entries hold code that this process will run.

A directory is trusted when it is a real directory (not a symbolic link),
owned by this user, and writable by nobody else (no group or other write
bit).  Each level the cache creates is made private (0700) and checked the
same way.  Site bundle directories (read-only, installed by an admin) may
also be owned by root.
"""

from __future__ import annotations

import os
import stat


class Untrusted(Exception):
    """Why a directory or file is not trusted, and how to fix it."""


def check(path: str, allow_root: bool = False, is_dir: bool = True) -> None:
    """Raise Untrusted, with the reason and the fix, unless ``path`` is safe to load from."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Untrusted(f"{path} does not exist") from None
    check_stat(st, path, allow_root, is_dir)


def check_stat(st, path: str, allow_root: bool = False, is_dir: bool = True) -> None:
    """``check`` on a stat result (from lstat, or fstat of an open file)."""
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
    """Create ``path`` (0700) if missing, then check it as ``check`` does."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check(path)
