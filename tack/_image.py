"""Tack's bytecode in one file (its import image), so that a warm process imports in less time.

A warm first call runs about 28 of Tack's modules.  CPython imports each by searching its
package directory, checking and opening its ``.pyc``, and reading it: about a fifth of the
warm process's import time, for work that gives the same answer every time.  The image holds
the code of every module of the package in one file beside the ``.pyc`` files
(``tack/__pycache__/import-image.<cache tag>[.opt-N].bin``, or under ``-X pycache_prefix`` where
CPython puts them then), indexed by module name, its index and each module's code checked by a
CRC-32; ``import tack`` puts a finder for it first on ``sys.meta_path`` (after any import hook
the program put there before), which serves only Tack's
own modules.  Each module's code is compiled from the very source whose hash the index records
(never taken from a ``.pyc``, which may hold another source's code).  The modules a warm process
imports together (``import tack``'s; a first call's from the cache: ``_image_write.GROUPS``) are
marshalled as one group each, unmarshalled (and checked) at the first import of any of them:
the names and constants they share are made once, not once a module (benchmarks/README.md,
stop 60, has the count).

Each module is served from the image only while its source file is the one it was written
from: the same size and modification time in whole seconds, as CPython checks a ``.pyc``, or,
where the time differs, the same size and content (``importlib.util.source_hash``, CPython's
check of a hash-based ``.pyc``).  Installs move the times: conda's packages bring them back
some nanoseconds off (the same second), Spack's build caches set them to 0 for reproducible
tarballs (the content check, a read and a hash of each source in every process: the finder
counts them, ``image --check`` says so, and ``image`` or a compiling process writes the image
again for the present times; the Spack package sets the times to 0 before writing it).  A
source stamped in the second the image was written (or later) is recorded with no time, and
so checked by content: an edit later in that second, of the same size, would keep its time.
Otherwise, and for anything the image lacks, cannot read, finds not matching the CRC-32 its
index records for it, or cannot unmarshal, the module is imported as usual from its source and
``.pyc``, and the image serves nothing more in that process.  An image
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
import stat
import sys
import types

# What a warm process imports beyond NumPy's modules costs it at every start (zlib's module 0.2 ms,
# importlib.util 0.2 ms with importlib._abc, importlib.machinery 0.3 ms where NumPy does not
# import it, as 2.2 does not), so the image takes the little it needs of them from what is loaded
# already: ModuleSpec, SourceFileLoader and the bytecode magic are those of importlib's frozen
# bootstrap, which the interpreter loads before any script (importlib.machinery and util
# re-export the same objects), and the CRC-32 is zlib's through ctypes where the zlib module is
# not imported yet.
try:
    from _frozen_importlib import ModuleSpec
    from _frozen_importlib_external import _RAW_MAGIC_NUMBER, MAGIC_NUMBER, SourceFileLoader

    def source_hash(data: bytes) -> bytes:
        """``importlib.util.source_hash``: the hash of a hash-based ``.pyc``."""
        return _imp.source_hash(_RAW_MAGIC_NUMBER, data)
except ImportError:                         # pragma: no cover - another implementation's importlib
    from importlib.machinery import ModuleSpec, SourceFileLoader
    from importlib.util import MAGIC_NUMBER, source_hash

# The per-module lock importlib holds while a module's code runs, which ``preload`` takes as it
# does: a thread importing the module meanwhile waits until it is whole, and a deadlock between
# two threads' imports is found and broken as importlib breaks it.  Private to importlib (in
# CPython 3.10 to 3.14); without it nothing is preloaded.
try:
    from _frozen_importlib import _ModuleLockManager
except ImportError:                         # pragma: no cover - another implementation's importlib
    _ModuleLockManager = None


def crc32_function():
    """zlib's CRC-32 of a bytes object: the C library's through ctypes on Linux (``import tack``
    imports NumPy, which imports ctypes; libz is mapped in a NumPy process already), else, or if
    the library is not found, the zlib module's."""
    if "zlib" not in sys.modules and sys.platform.startswith("linux"):
        try:
            import ctypes
            f = ctypes.CDLL("libz.so.1").crc32
        except (ImportError, OSError, AttributeError):
            pass
        else:
            f.restype, f.argtypes = ctypes.c_ulong, (ctypes.c_ulong, ctypes.c_char_p, ctypes.c_uint)
            return lambda data: f(0, data, len(data))
    from zlib import crc32
    return crc32


FORMAT = b"TACKIMG5"        # 5: groups of modules marshalled together; 4: the index's CRC-32, code
                            # compiled from the source read, modules not served; 3: a CRC-32 per
                            # module; 2: whole seconds, a source hash
_HEAD = 20                      # FORMAT, Python's bytecode magic, the index's length and CRC-32 (uint32)


def cache_dir(package_dir: str) -> str:
    """Where CPython writes the bytecode of ``package_dir``'s modules: its ``__pycache__``, or,
    under ``-X pycache_prefix`` (``PYTHONPYCACHEPREFIX``), the mirror of its absolute path there
    (``importlib.util.cache_from_source``'s rule, without importing it)."""
    prefix = sys.pycache_prefix
    if not prefix:
        return os.path.join(package_dir, "__pycache__")
    head = os.path.abspath(package_dir)
    if len(head) > 1 and head[1] == ":" and head[0] not in "\\/":
        head = head[2:]                     # a Windows drive, as CPython drops it
    return os.path.join(prefix, head.lstrip("\\/"))


def image_path(package_dir: str) -> str | None:
    """Where the image of the package in ``package_dir`` is for this Python; None when this
    Python keeps no bytecode files (no cache tag)."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    return os.path.join(cache_dir(package_dir), f"import-image.{tag}{opt}.bin")


BY_TIME, BY_CONTENT = "time", "content"


def same_source(path: str, mtime: int, size: int, digest: bytes):
    """Whether the source at ``path`` is the one the image holds the code of, and how that was
    found: ``BY_TIME``, its size and its modification time in whole seconds as recorded
    (CPython's check of a ``.pyc``: one stat); ``BY_CONTENT``, where the time differs (an
    install that moved the times: a reproducible build cache sets them to 0), the same size and
    content (``importlib.util.source_hash``, CPython's hash-based ``.pyc`` check: the source
    read and hashed, in every process: also where ``mtime`` is None, a source stamped when the
    image was written); False if it is not."""
    st = os.stat(path)
    if st.st_size != size:
        return False
    if int(st.st_mtime) == mtime:
        return BY_TIME
    with open(path, "rb") as fh:
        return BY_CONTENT if source_hash(fh.read()) == digest else False


class _Loader:
    """The loader of every module a finder serves (one object, as ``spec.loader``): the module's
    code from the image (where it lies: ``spec.loader_state``), or, if that fails, from its
    source and ``.pyc``.  One shared object, not a ``SourceFileLoader`` per module (with its
    dict: 54 objects a warm contour made, kept to its exit, for about 4 us a module).  The
    ``importlib.abc`` methods that tools call with a module's name (``runpy``'s ``get_code``,
    ``get_source``, ``get_resource_reader``...) answer for any module the image holds."""

    def __init__(self, image):
        self._image = image

    def create_module(self, spec):
        return None                         # the default module object

    def exec_module(self, module):
        spec = module.__spec__
        code = self._code(spec.name, spec.origin, spec.loader_state)
        exec(code, module.__dict__)

    def _code(self, fullname, path, where):
        image = self._image
        if image.fd is not None and where is not None:
            try:
                code = image.code(*where)
            except Exception:               # noqa: BLE001 - damaged: never served again
                image.close()
            else:
                _imp._fix_co_filename(code, path)          # the image names no directory
                image.served += 1
                return code
        return SourceFileLoader(fullname, path).get_code(fullname)

    def _entry(self, fullname):
        """(source path, is a package, where its code lies in the image or None: its source and
        ``.pyc``): a module whose source changed since the image was written is still answered
        for, from its source, as the finder found it before."""
        image = self._image
        found = image.entry(fullname)
        if found is None:
            try:
                rel, is_package = image.index[fullname][:2]
                return image.root + rel, bool(is_package), None
            except Exception:               # noqa: BLE001 - not one of the image's modules
                raise ImportError(f"{fullname!r} is not served by Tack's import image", name=fullname) from None
        return found

    def get_code(self, fullname):
        path, _, where = self._entry(fullname)
        return self._code(fullname, path, where)

    def get_filename(self, fullname):
        return self._entry(fullname)[0]

    def is_package(self, fullname):
        return self._entry(fullname)[1]

    def get_source(self, fullname):
        return SourceFileLoader(fullname, self.get_filename(fullname)).get_source(fullname)

    def get_data(self, path):
        with open(path, "rb") as fh:
            return fh.read()

    def get_resource_reader(self, fullname):
        from importlib.readers import FileReader
        return FileReader(SourceFileLoader(fullname, self.get_filename(fullname)))


class ImageFinder:
    """Serves the modules of one package (``prefix``: its name and a dot) from its image."""

    def __init__(self, package: str, package_dir: str, fd: int, index: dict, base: int, crc32=None,
                 identity=None):
        self.package, self.prefix = package, package + "."
        self.root = package_dir + os.sep
        self.fd, self.index, self.base = fd, index, base
        self.identity = identity            # (st_dev, st_ino) of the file ``fd`` was opened on
        # a module's __cached__, as CPython names its .pyc (importlib's own computation of it,
        # ``cache_from_source``, is a sixth of an import's machinery)
        opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
        self.pyc = f".{sys.implementation.cache_tag}{opt}.pyc"
        self.pycache_prefix = sys.pycache_prefix
        self.groups = {}                    # a group's offset -> [its codes not handed out, how many]
        self.served = 0                     # modules served from the image, for tests and status
        self.content_checks = 0             # sources found current by their content (times moved)
        self.loader = _Loader(self)
        self.crc32 = crc32 or crc32_function()

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(self.prefix) or self.fd is None:
            return None
        found = self.entry(name)
        if found is None:
            return None
        origin, is_package, where = found
        head, _, tail = origin.rpartition(os.sep)
        if path is not None and list(path) != [head.rpartition(os.sep)[0] if is_package else head]:
            return None                     # the parent's __path__ is not where the image's module
                                            # lies (another copy of the package, an override)
        spec = ModuleSpec(name, self.loader, origin=origin, loader_state=where, is_package=is_package)
        spec.has_location = True
        if self.pycache_prefix:
            spec.cached = os.path.join(cache_dir(head), tail[:-3] + self.pyc)
        else:
            spec.cached = f"{head}{os.sep}__pycache__{os.sep}{tail[:-3]}{self.pyc}"
        if is_package:
            spec.submodule_search_locations = [head]
        return spec

    def entry(self, name):
        """``(source path, is a package, (offset, length, CRC-32, place in its group or None, path
        in the package))`` of a module the image holds whose source is still the one it was
        written from; None otherwise."""
        try:
            rel, is_package, mtime, size, digest, offset, length, crc, slot = self.index[name]
            if crc is None:
                return None                 # held as not served (its source does not compile)
            origin = self.root + rel
            how = same_source(origin, mtime, size, digest)
            if not how:
                return None                 # the source changed since: imported as usual
            if how is BY_CONTENT:
                self.content_checks += 1
        except Exception:                   # noqa: BLE001 - not in it, no source, bad index
            return None
        return origin, is_package, (offset, length, crc, slot, rel)

    def code(self, offset: int, length: int, crc: int, slot, rel: str):
        """The code object of the module at ``rel`` (its path in the package): its own marshalled
        code (``slot`` None), or the ``slot``-th of its group's, which is read, checked and
        unmarshalled at the first import of any of its modules and kept until each module's code
        is handed out, once (a module imported again, or code asked for by a tool, reads the
        group again and keeps none of it).  ValueError (or another error of marshal's) where it
        is damaged, or is another module's code (the writer names each by its path: an index
        whose places were changed, its checksum made again, would run one module's code as
        another)."""
        if slot is None:
            code = marshal.loads(self.read(offset, length, crc))
        else:
            if type(slot) is not int or slot < 0:
                raise ValueError("no such place in a group")
            group = self.groups.get(offset)
            if group is None:               # [its codes not handed out yet, how many those are]
                codes = list(marshal.loads(self.read(offset, length, crc)))
                group = self.groups[offset] = [codes, len(codes)]
            codes = group[0]
            code = codes[slot] if codes is not None and slot < len(codes) else None
            if code is None:                # handed out before: read again, and kept not
                code = marshal.loads(self.read(offset, length, crc))[slot]  # (IndexError past its end)
            else:
                codes[slot] = None
                group[1] -= 1
                if not group[1]:
                    group[0] = None         # all handed out: none kept
        if not isinstance(code, types.CodeType) or code.co_filename != rel:
            raise ValueError("not this module's code")
        return code

    def read(self, offset: int, length: int, crc: int) -> bytes:
        """A module's marshalled code, checked against the CRC-32 the index records for it:
        damage that still unmarshals (a flipped byte in a name or a constant) would otherwise
        run as wrong code."""
        data = os.pread(self.fd, length, self.base + offset)
        if len(data) != length:
            raise ValueError("the image is shorter than its index")
        if self.crc32(data) != crc:
            raise ValueError("a module's code does not match its checksum")
        return data

    def close(self):
        """Serve nothing more; close the image's descriptor if it still is the image's: a program
        that closed every descriptor (a daemon) may have another file open under its number."""
        fd, self.fd = self.fd, None
        self.groups = {}
        if fd is not None:
            try:
                st = os.fstat(fd)
                if self.identity is None or (st.st_dev, st.st_ino) == self.identity:
                    os.close(fd)
            except OSError:
                pass

    def invalidate_caches(self):
        pass

    def preload(self, name: str) -> int:
        """Import the modules of the group ``name`` is in (``_image_write.GROUPS``), in the
        image's order (each after the group's modules it imports at its top), where the process
        imports them all next anyway: ``import tack`` its group, a first call on the CPU the
        other.  Each is made as importlib makes it (this finder's spec, the module's attributes
        from it, its place in ``sys.modules`` while it runs and after, its parent's attribute,
        the ``import`` audit event), without importlib's own Python: some 50 of its calls a
        module, more than a warm first call's own (about 8 us a module).  Each module's code runs
        under importlib's lock for it (``_ModuleLockManager``), as importlib runs it: another
        thread importing it meanwhile waits until it is whole.  Counting Python's threads instead
        (``_thread._count()``) missed those a C library starts and calls back into Python from
        (a ctypes callback, a pybind11 worker), which got a module half made.  Not where an
        import hook comes before this finder (it sees them as usual then).  A module imported
        already, not served from the image (its source changed), or whose parent is not
        imported is left to importlib, as is one whose code raises (removed again: its import
        raises where it is made).  -> how many it imported."""
        entry = self.index.get(name) if self.fd is not None else None
        if entry is None or entry[8] is None or _ModuleLockManager is None:
            return 0
        for f in sys.meta_path:
            if f is self:
                break
            if (getattr(f, "__name__", None) or type(f).__name__) not in _NEVER_OURS:
                return 0                    # a hook first: it sees Tack's modules as usual
        else:
            return 0
        offset, done = entry[5], 0
        for _, member in sorted((e[8], n) for n, e in self.index.items()
                                if e[5] == offset and e[8] is not None):
            if member in sys.modules:
                continue
            with _ModuleLockManager(member):
                made = self._make(member)
            if made is None:
                return done                 # imported as usual where it is imported: raised there
            done += made
        return done

    def _make(self, member: str):
        """``preload``'s module ``member``, under its lock: 1 made, 0 left to importlib (another
        thread made it first, its parent is not imported, the image does not serve it), None
        where its code raised an Exception (removed again)."""
        if member in sys.modules:
            return 0
        parent_name, _, child = member.rpartition(".")
        parent = sys.modules.get(parent_name)
        spec = None if parent is None else self.find_spec(member, getattr(parent, "__path__", None))
        if spec is None:
            return 0
        sys.audit("import", member, None, sys.path, sys.meta_path, sys.path_hooks)
        module = types.ModuleType(member)
        module.__loader__, module.__package__, module.__spec__ = self.loader, spec.parent, spec
        if spec.submodule_search_locations is not None:
            module.__path__ = spec.submodule_search_locations
        module.__file__, module.__cached__ = spec.origin, spec.cached
        sys.modules[member] = module
        spec._initializing = True
        try:
            self.loader.exec_module(module)
        except BaseException as e:
            if sys.modules.get(member) is module:
                del sys.modules[member]
            if isinstance(e, Exception):
                return None
            raise
        finally:
            spec._initializing = False
        module = sys.modules[member] = sys.modules.pop(member)     # as importlib: its own
        setattr(parent, child, module)
        return 1


def open_image(package: str, package_dir: str):
    """The finder of ``package_dir``'s image, or None if there is none this Python can use."""
    path = image_path(package_dir)
    if path is None:
        return None
    try:
        # non-blocking: a FIFO put there would otherwise wait for a writer forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        head = os.pread(fd, _HEAD, 0)
        if len(head) != _HEAD or head[:8] != FORMAT or head[8:12] != MAGIC_NUMBER:
            raise ValueError("another format or Python")
        n = int.from_bytes(head[12:16], "little")
        raw = os.pread(fd, n, _HEAD)
        crc32 = crc32_function()
        if len(raw) != n or crc32(raw) != int.from_bytes(head[16:20], "little"):
            raise ValueError("a damaged index")
        index = marshal.loads(raw)
        if type(index) is not dict:
            raise ValueError("no index")
        return ImageFinder(package, package_dir, fd, index, _HEAD + n, crc32, (st.st_dev, st.st_ino))
    except Exception:                       # noqa: BLE001 - unusable: imported as usual
        os.close(fd)
        return None


def install(package: str, package_dir: str):
    """Put the finder of the package's image on ``sys.meta_path`` (once; ``_first_place``): it
    or None."""
    raw = os.environ.get("TACK_IMPORT_IMAGE", "1").strip().lower()
    if raw in ("0", "off", "no", "false"):  # config.FALSE_WORDS (config is not imported yet)
        return None
    if raw not in ("1", "on", "yes", "true", ""):       # and TRUE_WORDS: else said, as config says
        from .errors import warn
        warn(f"tack: TACK_IMPORT_IMAGE={raw!r} is not a boolean (use 1 or 0); using 1",
             stacklevel=3)
    found = finder(package)
    if found is not None and found.root != package_dir + os.sep:
        sys.meta_path.remove(found)         # another copy's image: not this package's code
        found = None
    found = found or open_image(package, package_dir)
    if found is not None and found not in sys.meta_path:
        sys.meta_path.insert(_first_place(sys.meta_path), found)
    return found


# The finders the interpreter (and setuptools' ``distutils-precedence.pth``) put before the path
# finder, which never answer for a package of files: the image's finder may go before them.
_NEVER_OURS = ("BuiltinImporter", "FrozenImporter", "DistutilsMetaFinder")


def _first_place(meta_path) -> int:
    """Where the image's finder goes on ``meta_path``: first, but after any other finder a
    program put before the path finder before ``import tack`` (an import hook that instruments
    or replaces packages: typeguard's, beartype's, a profiler's), so that such a hook still sees
    Tack's modules as it would without the image.  One the program adds later goes first
    anyway."""
    place = 0
    for i, f in enumerate(meta_path):
        name = getattr(f, "__name__", None) or type(f).__name__
        if name == "PathFinder":
            break
        if name not in _NEVER_OURS:
            place = i + 1
    return place


def finder(package: str = "tack"):
    """This process's finder of ``package``'s image, or None."""
    for f in sys.meta_path:
        if isinstance(f, ImageFinder) and f.package == package:
            return f
    return None
