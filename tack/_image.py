"""Tack's bytecode in one file (its import image), so that a warm process imports in less time.

A warm first call runs about 28 of Tack's modules.  CPython imports each by searching its
package directory, checking and opening its ``.pyc``, and reading it: about a fifth of the
warm process's import time, for work that gives the same answer every time.  The image holds
the code of every module of the package in one file beside the ``.pyc`` files
(``tack/__pycache__/import-image.<cache tag>[.opt-N].bin``), indexed by module name; ``import
tack`` puts a finder for it first on ``sys.meta_path``, which serves only Tack's own modules.

Each module is served from the image only while its source file is the one it was written
from: the same size and modification time in whole seconds, as CPython checks a ``.pyc``, or,
where the time differs, the same size and content (``importlib.util.source_hash``, CPython's
check of a hash-based ``.pyc``).  Installs move the times: conda's packages bring them back
some nanoseconds off (the same second), Spack's build caches set them to 0 for reproducible
tarballs (the content check).  Otherwise, and for anything the image lacks, cannot read or
cannot unmarshal, the module is imported as usual from its source and ``.pyc``.  An image
written by another Python (another magic number or cache tag) or damaged in its header is not
used at all.  Nothing in it is trusted beyond what a ``.pyc`` is: it is written by whoever
installed the package, in the package's directory.

Written (atomically: a temporary file renamed into place; ``tack._image_write``, which a warm
process never imports) by ``python -m tack.site image``,
by ``bundles install`` (so Spack, conda and EasyBuild installs ship one), and by a process
that compiled a kernel when the image is missing or stale and the package's ``__pycache__``
is writable and Python writes bytecode (``PYTHONDONTWRITEBYTECODE`` unset): the same places
and rules as CPython's own ``.pyc`` files.  ``TACK_IMPORT_IMAGE=0`` turns the finder off.
"""

import _imp
import marshal
import os
import sys
import types
from importlib.machinery import ModuleSpec, SourceFileLoader
from importlib.util import MAGIC_NUMBER, source_hash

FORMAT = b"TACKIMG2"                    # 2: whole seconds, a source hash, relative names
_HEAD = 16                      # FORMAT, Python's bytecode magic, the index's length (uint32)


def image_path(package_dir: str) -> str | None:
    """Where the image of the package in ``package_dir`` is for this Python; None when this
    Python keeps no bytecode files (no cache tag)."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    return os.path.join(package_dir, "__pycache__", f"import-image.{tag}{opt}.bin")


def same_source(path: str, mtime: int, size: int, digest: bytes) -> bool:
    """Whether the source at ``path`` is the one the image holds the code of: its size and its
    modification time in whole seconds as recorded (CPython's check of a ``.pyc``), or, where
    the time differs (an install that set the times: a reproducible build cache sets them to
    0), the same size and content (``importlib.util.source_hash``, CPython's hash-based
    ``.pyc`` check)."""
    st = os.stat(path)
    if st.st_size != size:
        return False
    if int(st.st_mtime) == mtime:
        return True
    with open(path, "rb") as fh:
        return source_hash(fh.read()) == digest


class _Loader(SourceFileLoader):
    """A module's loader: its code from the image, or (if that fails) from its source."""

    def __init__(self, name, path, image, where):
        super().__init__(name, path)
        self._image, self._where = image, where

    def get_code(self, fullname):
        image = self._image
        if image is not None and fullname == self.name and image.fd is not None:
            try:
                code = marshal.loads(image.read(*self._where))
                if not isinstance(code, types.CodeType):
                    raise ValueError("not a code object")
            except Exception:               # noqa: BLE001 - damaged: never served again
                image.close()
            else:
                _imp._fix_co_filename(code, self.path)     # the image names no directory
                image.served += 1
                return code
        return super().get_code(fullname)


class ImageFinder:
    """Serves the modules of one package (``prefix``: its name and a dot) from its image."""

    def __init__(self, package: str, package_dir: str, fd: int, index: dict, base: int):
        self.package, self.prefix = package, package + "."
        self.root = package_dir + os.sep
        self.fd, self.index, self.base = fd, index, base
        # a module's __cached__, as CPython names its .pyc (importlib's own computation of it,
        # ``cache_from_source``, is a sixth of an import's machinery)
        opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
        self.pyc = f".{sys.implementation.cache_tag}{opt}.pyc"
        self.served = 0                     # modules served from the image, for tests and status

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(self.prefix) or self.fd is None:
            return None
        try:
            rel, is_package, mtime, size, digest, offset, length = self.index[name]
            origin = self.root + rel
            if not same_source(origin, mtime, size, digest):
                return None                 # the source changed since: imported as usual
            spec = ModuleSpec(name, _Loader(name, origin, self, (offset, length)),
                              origin=origin, is_package=is_package)
        except Exception:                   # noqa: BLE001 - not in it, no source, bad index
            return None
        spec.has_location = True
        head, _, tail = rel.rpartition("/")
        spec.cached = f"{self.root}{head}{'/' if head else ''}__pycache__/{tail[:-3]}{self.pyc}"
        if is_package:
            spec.submodule_search_locations = [os.path.dirname(origin)]
        return spec

    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self.fd, length, self.base + offset)
        if len(data) != length:
            raise ValueError("the image is shorter than its index")
        return data

    def close(self):
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def invalidate_caches(self):
        pass


def open_image(package: str, package_dir: str):
    """The finder of ``package_dir``'s image, or None if there is none this Python can use."""
    path = image_path(package_dir)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        head = os.pread(fd, _HEAD, 0)
        if len(head) != _HEAD or head[:8] != FORMAT or head[8:12] != MAGIC_NUMBER:
            raise ValueError("another format or Python")
        n = int.from_bytes(head[12:16], "little")
        index = marshal.loads(os.pread(fd, n, _HEAD))
        if type(index) is not dict:
            raise ValueError("no index")
        return ImageFinder(package, package_dir, fd, index, _HEAD + n)
    except Exception:                       # noqa: BLE001 - unusable: imported as usual
        os.close(fd)
        return None


def install(package: str, package_dir: str):
    """Put the finder of the package's image first on ``sys.meta_path`` (once); it or None."""
    if os.environ.get("TACK_IMPORT_IMAGE", "1") == "0":
        return None
    found = finder(package) or open_image(package, package_dir)
    if found is not None and found not in sys.meta_path:
        sys.meta_path.insert(0, found)
    return found


def finder(package: str = "tack"):
    """This process's finder of ``package``'s image, or None."""
    for f in sys.meta_path:
        if isinstance(f, ImageFinder) and f.package == package:
            return f
    return None
