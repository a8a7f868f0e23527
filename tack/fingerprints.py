"""What a kernel depends on, hashed: functions, template classes, numbers read from modules
and the values a function closes over.

The fingerprints hash a function's code object (bytecode, constants, names)
and the lines of source it spans, as its file held them when this process
first needed that code object (``source_snapshot``, the very bytes the front
end then parses: a stale ``.pyc`` or an edit without a reload can hold other
code than the file), so they are computed without tokenizing or parsing, in microseconds: a cached
kernel's warm path can afford them, and this module imports nothing more for
them.  Line numbers are left out, so an edit elsewhere in a module does not
change a fingerprint.  The front end records
them when it lowers a kernel, and the cache compares them before it reuses one.
"""

import os
import stat
import sys
import types
from _weakref import ref as _weakref

from .language import Constant, Func, number_text
from .digests import hasher

_PY = f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}".encode()


def _feed_code(h, code: types.CodeType):
    """Bytecode, names and constants (nested code objects in turn); no line numbers."""
    h.update(code.co_code)
    consts = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(h, const)
            consts.append("<code>")
        else:
            consts.append(_const_text(const))
    h.update(repr((code.co_name, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                   code.co_argcount, code.co_kwonlyargcount, code.co_flags, consts)).encode())


def _const_text(const):
    """A code constant as text that is the same in every process.

    ``x in {"a", "b"}`` compiles to a frozenset constant, whose repr lists its
    items in an order that depends on the process's string hash seed: its
    items are sorted here (by their own text, which is seed-free in turn).
    """
    if isinstance(const, frozenset):
        return ("frozenset", sorted(repr(_const_text(c)) for c in const))
    if isinstance(const, tuple):
        return ("tuple", tuple(_const_text(c) for c in const))
    return (type(const).__name__, const)


# id(code) -> (a weak reference to the code, ...): an entry goes when its code object does (a
# notebook's module reloaded again and again keeps neither its old code nor its old file's bytes),
# and an id a later code object reuses is told apart by the reference.
_memo = {}      # id(code) -> (ref, defaults, qualified name, fingerprint)


def _held(table, code):
    """A weak reference to ``code`` whose death removes ``table[id(code)]`` (if still its entry)."""
    key = id(code)

    def forget(ref):
        got = table.get(key)
        if got is not None and got[0] is ref:
            del table[key]
    return _weakref(code, forget)


def function_fingerprint(fn) -> str:
    """Hex digest (``tack.digests``) of a Python function's code (and defaults and Python version)."""
    code = fn.__code__
    hit = _memo.get(id(code))
    if hit is not None and hit[0]() is code and hit[1] == fn.__defaults__ and hit[2] == fn.__qualname__:
        return hit[3]
    fp = _function_fingerprint(fn)
    _memo[id(code)] = (_held(_memo, code), fn.__defaults__, fn.__qualname__, fp)
    return fp


def _function_fingerprint(fn) -> str:
    h = hasher(_PY)
    h.update(fn.__qualname__.encode())
    _feed_code(h, fn.__code__)
    h.update(repr(fn.__defaults__).encode())
    h.update(_source_text(fn.__code__))
    return h.hexdigest()


# A file's ctime is in its identity: a write moves it, and no one can set it back, where a tool that
# keeps times (cp -p, tar, rsync -t, os.utime) gives an edited file of the same size its old mtime.
_files = {}         # file name -> ((inode, size, mtime, ctime in ns), the file's bytes, its lines)
_snapshots = {}     # id(code) -> (weak ref to the code, its file's (bytes, lines) when first needed, or None)


def _file(name: str):
    """(bytes, lines) of the file ``name`` now (read again only if it changed since this process
    last read it), or None: no such regular file ("<string>", a zip archive's member).  A name
    in angle brackets (``<string>``, ``<stdin>``: code of ``exec``, ``-c``, a REPL) names no file,
    as ``linecache`` takes it, even where the working directory holds one so named: its text,
    not the program's, was compiled and keyed."""
    if name[:1] == "<" and name[-1:] == ">":
        return None
    try:
        st = os.stat(name)
        if not stat.S_ISREG(st.st_mode):                    # never open a FIFO or a device
            return None
        ident = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        got = _files.get(name)
        if got is not None and got[0] == ident:
            return got[1:]
        with open(name, "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    _files[name] = (ident, data, data.splitlines())
    return data, _files[name][2]


def _zip_member(name: str):
    """(bytes, lines) of ``name`` if it is ``ARCHIVE/member`` (what zipimport makes a module's
    ``__file__``), read from the archive, else None.  The same bytes as the file the archive was
    made from: a kernel imported from a zip has the key of the same source on disk, so a bundle
    built from the checkout serves a zipped deployment (and an edit of the member is seen)."""
    archive = name
    while True:
        archive, tail = os.path.split(archive)
        if not tail or not archive:
            return None
        try:
            st = os.stat(archive)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            return None
        break
    member = os.path.relpath(name, archive).replace(os.sep, "/")
    ident = ("zip", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    got = _files.get(name)
    if got is not None and got[0] == ident:
        return got[1:]
    try:
        import zipfile
        with zipfile.ZipFile(archive) as z:
            data = z.read(member)
    except Exception:                       # noqa: BLE001 - not a zip, no such member: no text
        return None
    _files[name] = (ident, data, data.splitlines())
    return data, _files[name][2]


def source_snapshot(code):
    """(bytes, lines) of the file of ``code`` as it was when this process first needed the source
    of that code object (its fingerprint, or its lowering), or None (no file); the text
    registered in ``linecache`` for that file name instead, if any (``_registered``); the
    member of a zip archive for a module imported from one (``_zip_member``).

    The same bytes for the fingerprint and for the front end, whatever happens to the file in
    between: a module edited and not reloaded keeps its code objects, and so their source; one
    reloaded has new code objects, which read the file as it is then."""
    hit = _snapshots.get(id(code))
    if hit is not None and hit[0]() is code:
        return hit[1]
    snap = _file(code.co_filename)
    if snap is not None:
        snap = _registered(code.co_filename) or snap
    else:
        snap = _zip_member(code.co_filename) or _registered(code.co_filename)
    _snapshots[id(code)] = (_held(_snapshots, code), snap)
    return snap


def _registered(name: str):
    """(bytes, lines) of the text registered in ``linecache`` for ``name`` (an entry with no
    mtime, as IPython and other ``exec()`` callers make for the code they compile), or None.

    That text is what the code object was compiled from, and what Python's tracebacks show,
    even where a file of that name holds something else, or where no file has that name (an
    IPython cell's ``<ipython-input-3-...>``, ipykernel's ``/tmp/ipykernel_.../....py``): without
    it the key of a cell's kernel was its code object alone, which leaves out what CPython
    compiles to nothing (code after a return), and two cells that differ only there shared
    entries.  A zip archive's member is read from the archive first (its loader gives it an
    entry of the same form when a traceback or ``inspect`` reads it, which would make the key
    depend on what ran before)."""
    lc = sys.modules.get("linecache")
    entry = lc.cache.get(name) if lc is not None else None
    if not isinstance(entry, tuple) or len(entry) != 4 or entry[1] is not None:
        return None
    data = "".join(entry[2]).encode("utf-8", "surrogatepass")
    return data, data.splitlines()


def _source_text(code) -> bytes:
    """The lines of source ``code`` spans (its first line to the last any instruction of it
    is on, or past it to the end of its indented block: ``_block_end``), from
    ``source_snapshot``; empty where there is no file.

    The front end compiles a function's source, which its code object does not always come
    from: CPython runs a ``.pyc`` whose recorded size and mtime (in seconds) match the source,
    so an edit in the same second that keeps the file's size runs the old code, and a cold
    compile the new source.  The text is read, never tokenized or parsed: line endings are
    left out (a CRLF checkout keeps the keys), and so are the lines outside the function.
    """
    snap = source_snapshot(code)
    if not snap:
        return b""
    first = code.co_firstlineno - 1
    return b"\n".join(snap[1][first:_block_end(snap[1], first, _last_line(code))])


def _block_end(lines, first, last) -> int:
    """``last``, or past it the last line indented deeper than the ``def`` (or its decorator) on
    line ``first`` (0-based) before a line that is not: code after a return (or in an
    ``if False:``) that CPython compiles to nothing, which the front end compiles all the same
    (an assignment there changes a variable's type).  Blank and comment lines after the body
    are left out, so a comment between two functions changes neither."""
    if not 0 <= first < len(lines):
        return last
    head = lines[first]
    indent = len(head) - len(head.lstrip(b" \t"))
    end = last
    for n in range(last, len(lines)):
        line = lines[n]
        body = line.lstrip(b" \t\x0c")
        if not body or body.startswith(b"#"):
            continue
        if len(line) - len(line.lstrip(b" \t")) <= indent and not _continues(lines, first, n):
            break
        end = n + 1
    return end


def _continues(lines, first, n) -> bool:
    """Does line ``n`` (0-based) go on a statement that lines ``first``..``n-1`` left open: a
    bracket or a triple-quoted string not closed, a backslash at the end?  Then it belongs to the
    block however far left it starts (``y = (1 +`` and ``1)`` at column 0).  Counted, not
    tokenized: a bracket in a comment or a docstring is left out; one in a string may take the
    span further than needed, which costs a recompile when those lines change, never a stale
    hit."""
    if lines[n - 1].endswith(b"\\"):
        return True
    text = b"\n".join(lines[first:n])
    if text.count(b'"""') % 2 or text.count(b"'''") % 2:
        return True
    opened = text.count(b"(") + text.count(b"[") + text.count(b"{")
    if opened == text.count(b")") + text.count(b"]") + text.count(b"}"):
        return False
    depth, in_text = 0, False
    for line in lines[first:n]:
        quotes = line.count(b'"""') + line.count(b"'''")
        if in_text or quotes:                   # a docstring's line: its brackets are prose
            in_text ^= quotes % 2 == 1
            continue
        if b"#" in line and b'"' not in line and b"'" not in line:
            line = line[:line.index(b"#")]
        depth += (line.count(b"(") + line.count(b"[") + line.count(b"{")
                  - line.count(b")") - line.count(b"]") - line.count(b"}"))
    return depth > 0


def _last_line(code) -> int:
    """The last line an instruction of ``code`` (or of the code nested in it) starts on."""
    last = code.co_firstlineno
    for _, _, line in code.co_lines():
        if line is not None and line > last:
            last = line
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            last = max(last, _last_line(const))
    return last


# What Python itself records in a class's namespace that is no attribute of the template: 3.13's
# __firstlineno__ (the line the class starts on, an int), which moves with every edit above it.
_CLASS_BOOKKEEPING = frozenset({"__firstlineno__"})


def metaclass_attr_read(name: str, attr) -> bool:
    """Whether a template reads ``name`` (``attr``) from its metaclass, and its fingerprint holds
    it: a public static method, device function or number.  The front end refuses the others
    (``frontend.lower``): a plain function there reaches the class as a bound method, and a
    private name was read but never fingerprinted (a stale entry served when it changed)."""
    return not name.startswith("_") and isinstance(attr, (staticmethod, Func, bool, int, float))


def class_fingerprint(cls, _seen=frozenset(), _memo=None) -> str:
    """Hex digest (``tack.digests``) of a template class: its name, static methods and scalar
    attributes, and those its metaclass gives it (``class Meta(type): K = 2.0``: the front end
    reads ``P.K`` as Python does, from the metaclass where the class has none); no line
    numbers, as for a function (``_CLASS_BOOKKEEPING``).  ``_seen``, ``_memo``: what
    ``closure_identity`` is already making the identity of, and what it has made."""
    h = hasher(cls.__qualname__.encode())
    seen = _seen | {id(cls)}
    memo = {} if _memo is None else _memo
    meta = type(cls).__mro__
    metas = reversed(meta[:meta.index(type)])
    for klass, of_meta in (*((k, True) for k in metas), *((k, False) for k in reversed(cls.__mro__[:-1]))):
        for name, attr in sorted(vars(klass).items()):
            if name in _CLASS_BOOKKEEPING:
                continue
            # a metaclass's plain function reaches the class as a bound method, which no kernel
            # reads, nor its special or private names (``__new__`` is a static method, and so is
            # 3.10's EnumMeta._get_mixins_): hashing ABCMeta's or EnumMeta's would read abc.py or
            # enum.py, which Python 3.11 freezes and 3.10 does not
            if of_meta and not metaclass_attr_read(name, attr):
                continue
            if isinstance(attr, staticmethod):
                attr = attr.__func__
            if isinstance(attr, Func):
                attr = attr.py_func
            if isinstance(attr, types.FunctionType):
                h.update(f"{name}=fn:{function_fingerprint(attr)}{_closure_text(attr, seen, memo)};".encode())
            elif isinstance(attr, (bool, int, float)):
                h.update(f"{name}={number_text(attr)};".encode())
    return h.hexdigest()


def _closure_text(fn, seen, memo) -> str:
    """What a template class's function closes over ("" for none): the classes a factory makes
    at each call (``def make(v): S = tack.constant(v); class Policy: ...``) have one name and one
    text, and were one template (a kernel given two of them compiled the first's methods for
    both).  ``seen``: the classes and functions whose identity is being made (a method closing
    over its own class is named, not fingerprinted again)."""
    if not fn.__closure__:
        return ""
    out = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
        try:
            obj = cell.cell_contents
        except ValueError:                          # an empty cell
            out.append(f"{name}=<empty>")
            continue
        out.append(f"{name}=" + closure_identity(obj, seen, memo))
    return "@" + ",".join(out)


def value_identity(obj) -> str | None:
    """What a number read from a module is, for the dependency record (None: not a number)."""
    if isinstance(obj, (bool, int, float)):
        return number_text(obj)
    return None


def closure_identity(obj, _seen=frozenset(), _memo=None) -> str:
    """A stable text for a value a function closes over.  A device function is named by its
    code and by what it closes over in turn, a class by its module and name and its
    fingerprint: the functions a factory makes (``make_apply(make_scale(2.0))`` and
    ``make_apply(make_scale(3.0))``), or closing over two modules' classes of one name and
    text, were one function, and a kernel calling both ran the first twice.  ``_seen``: the
    functions and classes this identity is already being made of (a closure that names itself);
    ``_memo``: the identities of the functions made so far in it, each a digest, so that one
    reached by many paths (``pair(f, f)`` nested 18 deep) is made once and its text stays short,
    where writing each out in full at each path grew with 2**depth (38 MB, 0.8 s)."""
    if isinstance(obj, Func):
        fn = obj.py_func
        if id(fn) in _seen:
            return "func:<again>"
        memo = {} if _memo is None else _memo
        got = memo.get(id(fn))
        if got is None:
            text = function_fingerprint(fn) + _closure_text(fn, _seen | {id(fn)}, memo)
            got = memo[id(fn)] = "func:" + hasher(text.encode()).hexdigest()
        return got
    if isinstance(obj, Constant):
        return "const:" + obj.fingerprint
    if isinstance(obj, types.ModuleType):
        return "module:" + obj.__name__
    if isinstance(obj, type):
        name = f"class:{obj.__module__}.{obj.__qualname__}"
        return name if id(obj) in _seen else f"{name}:{class_fingerprint(obj, _seen, _memo)}"
    ident = value_identity(obj)
    if ident is not None or isinstance(obj, str) or obj is None:
        return ident or f"{type(obj).__name__}:{obj!r}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def class_id(cls, member: str = "", fingerprint: str | None = None) -> str:
    """A template class's id within a lowered kernel, or with ``member`` its static method's:
    ``module.qualname[.member]#`` and the first 16 digits of its ``class_fingerprint`` (given
    as ``fingerprint`` where the caller has it).  The front end names the functions it lowers
    so, and the dependency record finds them again by it (``cache.deps.template_scopes``)."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    if member:
        name += "." + member
    return f"{name}#{(fingerprint or class_fingerprint(cls))[:16]}"


def func_id(fn) -> str:
    """A device function's id within a lowered kernel: module, qualified name; for one its module
    does not hold under that name (a factory's, one defined again since, a plugin's loaded from a
    file under a module name sys.modules does not give it), its code's fingerprint and its
    module's file too (two such functions of one name are two functions); and for a function made by a
    factory, what it closes over (two closures are two functions)."""
    fid = f"{fn.__module__}.{fn.__qualname__}"
    if not _held_by_module(fn):
        # and its module's file: two plugin files loaded under one module name (neither in
        # sys.modules), each f of one text reading its own globals, are two functions
        fid += "#" + hasher(f"{function_fingerprint(fn)}:{fn.__globals__.get('__file__')}".encode()).hexdigest()[:16]
    if fn.__closure__:
        h, memo = hasher(), {}
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                h.update(f"{name}={closure_identity(cell.cell_contents, frozenset((id(fn),)), memo)};".encode())
            except ValueError:                      # an empty cell
                h.update(f"{name}=<empty>;".encode())
        fid += "@" + h.hexdigest()[:16]
    return fid


def _held_by_module(fn) -> bool:
    """Whether ``fn`` (or the ``@tack.func`` made of it) is what its module holds at its
    qualified name."""
    if "<locals>" in fn.__qualname__:
        return False
    obj = sys.modules.get(fn.__module__)
    try:        # a module's __getattr__, a class's property: whatever they raise, not held
        for part in fn.__qualname__.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return False
        return obj is fn or getattr(obj, "py_func", None) is fn
    except Exception:                       # noqa: BLE001
        return False
