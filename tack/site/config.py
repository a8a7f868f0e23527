"""The site config: one YAML file an admin writes, validated against a documented schema.

Every error names the file, the line and the key path, says what was
expected, and suggests the closest valid key for a typo; all errors are
collected before reporting.  See docs/site.md for the schema.
"""

from __future__ import annotations

import difflib
import os
import re
import stat

import yaml

from ..archs import ArchError
from ..backends.arch_names import KINDS as ARCH_KINDS
from ..cache import MODES, SizeTooLarge, keeps_no_entry, parse_size, too_large
from .errors import SiteConfigError

#: The kernels a site config without build.kernels builds (``SiteConfig.kernels``).
DEFAULT_KERNELS = ({"module": "tack.kernels.contour", "shapes": [[21, 21, 21]]},)

# Each key: (kind, required, description).  kind: "str", "size", "mode", "int",
# "list[str]", "list[int]", "map" (a nested schema), "kernels", "nodes".
SCHEMA = {
    "version": ("int", True, "schema version; 1"),
    "cache": ("map", False, {
        "directory": ("str", False, "TACK_CACHE_DIR; $USER, $HOME, $SCRATCH... expanded at module load"),
        "mode": ("mode", False, "TACK_CACHE: write, read, bundle or off"),
        "mpi_mode": ("mode", False, "TACK_CACHE_MPI: the mode under MPI (default bundle)"),
        "size": ("size", False, "TACK_CACHE_SIZE: e.g. 500M, 4G, unlimited"),
        "bundles": ("str", False, "TACK_CACHE_BUNDLES: where the site's bundles are installed"),
    }),
    "build": ("map", False, {
        # One list per device kind of the registry (tack.backends.arch_names), which decides
        # the names each accepts.
        "archs": ("map", False, {kind: ("list[str]", False, k.what)
                                 for kind, k in ARCH_KINDS.items()}),
        "kernels": ("kernels", False, "what to warm into the bundles"),
    }),
    "modules": ("map", False, {
        "name": ("str", False, "module name (default tack)"),
        "version": ("str", False, "module version (default: Tack's)"),
        "formats": ("list[str]", False, "lmod, tcl"),
        "root": ("str", False, "where module files are written"),
        "help": ("str", False, "module help text"),
        "whatis": ("str", False, "one-line description"),
        "conflicts": ("list[str]", False, "modules that cannot be loaded with this one"),
        "prereqs": ("list[str]", False, "modules that must be loaded first (e.g. an MPI)"),
    }),
    "nodes": ("nodes", False, "node types and the architectures their bundles are built for"),
}
KERNEL_KEYS = {"module": "importable module", "shapes": "field shapes for the module's tack_warm()",
               "kernel": "a @tack.kernel in the module", "args": "argument specs, e.g. float32[64,64]",
               "grid": "launch grid dimensions (1-3)"}
NODE_KEYS = {"name": "node type", "cpu": "a build.archs.cpu entry", "gpu": "a GPU arch from build.archs"}
FORMATS = ("lmod", "tcl")


# Bounds on numbers, so that no value the config accepts overflows later.
MAX_EXTENT = 1 << 20                # one axis of a shape or an array spec
MAX_ELEMENTS = 1 << 34              # all axes of one shape together
MAX_RANK = 4                        # Tack's arrays have 1 to 4 dimensions
NAME_MAX = 255                      # bytes in one file name
MAX_DEPTH = 32                      # lists and mappings inside each other (the schema needs 6);
                                    # PyYAML's composer recurses, and ~450 levels overflow Python's stack
MAX_VALUES = 10_000                 # values once aliases (*name) are expanded: an alias repeats what
                                    # its anchor names, so a few KB of aliases of aliases are millions


def path_part_problem(value, what, suffix=""):
    """Why ``value`` cannot be one file name under a root (None when it can).

    A name from the config becomes exactly one path component: not empty,
    not ``.`` or ``..``, no ``/`` (or ``\\``), no whitespace or control
    character (module commands split on whitespace), not starting with ``.``
    (a module system's rc file, ``.modulerc``, or a hidden one) or ``-`` (an option), none of
    the characters Environment Modules reads as variants, version specifiers or patterns, no
    ``:`` (the lists of loaded modules are split on it), not ending in
    ``.lua`` (the Tcl file's name would), and short enough for the file system
    once ``suffix`` is added.
    """
    if not isinstance(value, str) or value == "":
        return f"the {what} is empty; it names a file and must not be"
    if value in (".", ".."):
        return f"{value!r} cannot be a {what}: it would name a directory, not a file under the root"
    if "/" in value or "\\" in value:
        return (f"{value!r} cannot be a {what}: it contains a path separator, and each "
                f"{what} must be one file name under the root")
    bad = [c for c in value if c.isspace() or ord(c) < 32 or ord(c) == 127]
    if bad:
        return f"{value!r} cannot be a {what}: it contains {bad[0]!r} (no whitespace or control characters)"
    if value.startswith("."):
        # Lmod and Environment Modules read .modulerc, .version... as rc files, and hide the rest
        return (f"{value!r} cannot be a {what}: a name starting with '.' is a module system's rc "
                "file or hidden from module avail")
    special = [c for c in value if c in "+~=@[]{}"]
    if special:
        # Environment Modules 5 reads these in what `module load` is given as variants (+, ~,
        # =), a version spec (@) or a glob or list ([], {}): 't+x/1.0' or 'tack/1.0+cuda' is
        # "Unable to locate a modulefile" there (Lmod loads them)
        return (f"{value!r} cannot be a {what}: it contains {special[0]!r}, which Environment "
                "Modules reads as a variant, a version specifier or a pattern in a module name "
                "(no +, ~, =, @, brackets or braces)")
    if ":" in value:
        # LOADEDMODULES and _LMFILES_ are lists split on ':': Environment Modules listed
        # tack/1:0 as 'tack/1' and '0', and could then unload it no more (module purge failed)
        return (f"{value!r} cannot be a {what}: it contains ':', which splits the lists of loaded "
                "modules (LOADEDMODULES) the module systems keep")
    if value.startswith("-"):
        # `module load -x` reads -x as an option: Environment Modules refused it, Lmod loaded
        # nothing and said nothing
        return (f"{value!r} cannot be a {what}: a name starting with '-' is read as an option "
                "by `module load`")
    if value.endswith(".lua"):
        # the Tcl file would be NAME.lua, which Lmod reads as Lua and fails on
        return (f"{value!r} cannot be a {what}: the module files add '.lua' themselves (the Tcl "
                f"file's name would end in .lua, which Lmod reads as Lua): write {value[:-4]!r}")
    if len((value + suffix).encode("utf-8", "surrogatepass")) > NAME_MAX:
        return f"the {what} is too long for a file name ({NAME_MAX} bytes at most, with {suffix or 'no'} extension)"
    return None


def shown(value, limit=40):
    """``repr(value)``, shortened when long (a 311-digit number is not repeated whole)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, int):
        return f"{text[:12]}... ({len(text)} digits)"
    return text[:limit] + "..."


class SiteConfig:
    """A validated site config: plain values, with the file it came from."""

    def __init__(self, path, data, lines=None):
        self.path = path
        self.data = data
        self.lines = lines or {}

    def where(self, keypath) -> str:
        """``FILE:LINE: key.path`` for a key path such as ``("build", "kernels", 0, "shapes", 1)``."""
        keypath = tuple(keypath)
        line = 1
        for n in range(len(keypath), 0, -1):       # the nearest key the file has a line for
            if keypath[:n] in self.lines:
                line = self.lines[keypath[:n]]
                break
        return f"{self.path}:{line}: {'.'.join(map(str, keypath)) or '(top level)'}"

    def get(self, dotted, default=None):
        node = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def module_name(self):
        return self.get("modules.name", "tack")

    @property
    def module_version(self):
        from .._version import __version__
        return str(self.get("modules.version", __version__))

    @property
    def formats(self):
        return self.get("modules.formats", list(FORMATS))

    def exports(self) -> dict:
        """Environment variables the site sets for users, values unexpanded ($USER stays)."""
        out = {}
        for key, var in (("directory", "TACK_CACHE_DIR"), ("mode", "TACK_CACHE"),
                         ("mpi_mode", "TACK_CACHE_MPI"), ("size", "TACK_CACHE_SIZE"),
                         ("bundles", "TACK_CACHE_BUNDLES")):
            value = self.get(f"cache.{key}")
            if value is not None:
                out[var] = str(value)
        return out

    def kernels(self) -> list:
        """build.kernels, or where the config has none the default: the contour at 21x21x21."""
        return self.get("build.kernels") or list(DEFAULT_KERNELS)

    def archs(self) -> list:
        """Every architecture of build.archs as ``kind:name``, the CPUs first, aliases resolved
        (``level_zero: [acm]`` -> ``level_zero:dg2``): what ``bundles build`` builds."""
        listed = self.get("build.archs", {}) or {}
        return [f"{kind}:{ARCH_KINDS[kind].resolve(_bare(kind, a))}"
                for kind in ARCH_KINDS for a in listed.get(kind) or []]

    def cpu_archs(self):
        """build.archs.cpu by archspec's bare names (an entry may be written ``cpu:zen3``)."""
        return [a.partition(":")[2] for a in self.archs() if a.startswith("cpu:")]

    def gpu_archs(self):
        """[(kind, name)] of build.archs' other kinds (GPUs, portable SPIR-V, Metal)."""
        return [tuple(a.split(":", 1)) for a in self.archs() if not a.startswith("cpu:")]


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"))


def read_text(path) -> str:
    """The text of the config file ``path``: a regular file, in UTF-8.

    Opened without blocking (a FIFO with no writer would otherwise hang the
    open) and refused unless it is a regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise SiteConfigError([f"{path}: cannot read: {e.strerror or e}"]) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _FILE_KINDS if test(st.st_mode)), "not a regular file")
            raise SiteConfigError([f"{path}: cannot read: it is {kind}; the site config must be a "
                                   "regular YAML file"])
        os.set_blocking(fd, True)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as e:
        raise SiteConfigError([f"{path}: cannot read: {e.strerror or e}"]) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise SiteConfigError([f"{path}:{line}: not UTF-8 text: byte 0x{data[e.start]:02x} at offset "
                               f"{e.start} (column {column}) cannot be decoded; save the config "
                               "as UTF-8"]) from None


def yaml_problem(path, text, e) -> str:
    """PyYAML's syntax error ``e`` as one line naming ``path`` and a line: what it was reading
    and where that began (``while scanning a quoted scalar``, at the quote never closed), then
    what it found and where; the line named is where it began when what it found is the end
    of the file (the line of the quote, not the file's last), else where it found it.  (Only
    the problem was said, at its line: an unclosed quote on line 3 of 27 was "27: found
    unexpected end of stream", and "but found another document" lost its first half.)"""
    def at(mark):
        return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    context, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    problem, pmark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    parts = [f"{context}{at(cmark)}"] if context else []
    if problem:
        parts.append(f"{problem}{at(pmark)}")
    why = " ".join((", ".join(parts) or str(e)).split())       # one line
    at_end = pmark is not None and not text[pmark.index:].strip()
    lead = cmark if cmark is not None and (at_end or pmark is None) else pmark
    where = f"{path}:{lead.line + 1}" if lead is not None else path
    return f"{where}: invalid YAML: {why}"


def load(path, text=None) -> SiteConfig:
    """Read and validate ``path``; SiteConfigError listing every problem otherwise.  ``text``:
    the config's content, when it is not (yet) at ``path`` (``bundles install`` builds from the
    config it writes only once the build succeeded); errors name ``path`` all the same."""
    path = os.fspath(path)
    if text is None:
        text = read_text(path)
    try:
        _check_depth(path, text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.reader.ReaderError as e:     # a character YAML does not allow (a NUL, a control)
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        raise SiteConfigError([f"{path}:{line}: invalid YAML: the character {chr(e.character)!r} "
                               f"(column {column}) is not allowed in YAML ({e.reason})"]) from None
    except yaml.YAMLError as e:
        raise SiteConfigError([yaml_problem(path, text, e)]) from None
    except RecursionError:              # not reached: _check_depth bounds the nesting first
        raise SiteConfigError([f"{path}: the YAML is nested too deeply to read"]) from None
    v = _Validator(path)
    if root is None:
        raise SiteConfigError([f"{path}:1: the config is empty; expected a mapping with "
                               f"'version: 1' and {', '.join(k for k in SCHEMA if k != 'version')}"])
    v.collection_tags(root)
    data = v.mapping(root, SCHEMA, ())
    if data is _BAD:                    # not a mapping at all (reported)
        data = {}
    v.cross_checks(data, root)
    if v.problems:
        raise SiteConfigError(v.problems, partial=SiteConfig(path, data, v.lines))
    return SiteConfig(path, data, v.lines)


def _check_depth(path, text):
    """SiteConfigError if lists and mappings nest deeper than MAX_DEPTH anywhere in ``text``, or
    if aliases expand it past MAX_VALUES values.

    Read with PyYAML's event parser, which keeps its own stack (no Python recursion), before the
    composer, which recurses once per level and raises RecursionError a few hundred levels down.
    The parser does not expand aliases; the count does, anchor by anchor (each anchor's values
    once, each alias adding its anchor's count), so that a config whose aliases name aliases
    (a few KB that the validator would walk as millions of values, and report each problem as
    often) is refused before it is composed.  An alias of an anchor still open (a recursive
    one) counts one: the validator never descends further than the schema goes.  A config
    without aliases is never refused for its size.  The message names the key path down to the
    level that is too deep, or to the alias that crosses the bound.
    """
    stack = []              # per open collection: [is mapping, next node is a key, key or index,
    anchors = {}            #                      its anchor, the count before it]
    count = 0               # values so far, aliases expanded
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            frame = stack.pop()
            if frame[3] is not None:
                anchors[frame[3]] = count - frame[4]
            continue
        if not isinstance(event, yaml.NodeEvent):
            continue
        if stack:
            frame = stack[-1]
            if not frame[0]:
                frame[2] += 1
            elif frame[1]:
                frame[2] = event.value if isinstance(event, yaml.ScalarEvent) else "?"
            if frame[0]:
                frame[1] = not frame[1]
        if isinstance(event, yaml.AliasEvent):
            repeats = anchors.get(event.anchor) or 1
            count += repeats
            if count > MAX_VALUES:
                raise SiteConfigError([f"{path}:{event.start_mark.line + 1}: {_name(stack)}: the alias "
                                       f"*{event.anchor} repeats {repeats} value(s), and with the "
                                       f"aliases before it the config holds more than {MAX_VALUES} "
                                       "values once they are expanded; a site config needs far fewer: "
                                       "write them out, or alias less"])
            continue
        before = count
        count += 1
        if isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
            anchors[event.anchor] = 1
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise SiteConfigError([f"{path}:{event.start_mark.line + 1}: {_name(stack)}: lists and "
                                       f"mappings are nested more than {MAX_DEPTH} levels deep; the "
                                       "schema's deepest value, an extent of build.kernels[].shapes, "
                                       "is 6 levels down"])
            mapping = isinstance(event, yaml.MappingStartEvent)
            stack.append([mapping, True, None if mapping else -1, event.anchor, before])


def _name(stack) -> str:
    """The key path of ``_check_depth``'s open collections, shortened past 6 levels."""
    parts = [str(f[2]) for f in stack]
    return (".".join(parts[:6]) + (f"... ({len(parts)} levels)" if len(parts) > 6 else "")) \
        or "(top level)"


_NODE_KINDS = {yaml.SequenceNode: "a list", yaml.MappingNode: "a mapping"}


class _AnyVariable(dict):
    """The environment ``check`` expands cache.bundles in: every variable is set, to a
    directory named from / (its value is the job's, not known here)."""

    def __contains__(self, name):
        return True

    def __missing__(self, name):
        return "/" + name


_ANY_VARIABLE = _AnyVariable()


class _Validator:
    def __init__(self, path):
        self.path = path
        self.problems = []
        self.lines = {}
        self.tagged = set()             # key paths of lists and mappings refused for their tag

    def fail(self, node, keypath, message):
        if tuple(keypath) in self.tagged:
            return                      # its tag is said: not also that it is a list, a mapping
        line = node.start_mark.line + 1 if node is not None else 1
        name = ".".join(map(str, keypath)) or "(top level)"
        self.problems.append(f"{self.path}:{line}: {name}: {message}")

    def collection_tags(self, root):
        """Report each list or mapping that carries a tag (``!!python/object/new:dict {...}``,
        ``!foo {mode: write}``, ``!!set``): read as a plain one, its tag was dropped without a
        word.  A tag on a single value is the value's constructor's to refuse (``scalar``)."""
        plain = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}
        stack = [(root, ())]            # no recursion: _check_depth has bounded the nesting
        seen = set()                    # each node once: an alias may hold itself (&x [*x])
        while stack:
            node, keypath = stack.pop()
            if type(node) not in plain or id(node) in seen:
                continue
            seen.add(id(node))
            if node.tag != plain[type(node)]:
                tag = node.tag.replace("tag:yaml.org,2002:", "!!", 1)
                self.fail(node, keypath, f"the tag {tag!r} on {_NODE_KINDS[type(node)]} is not "
                          "supported: a site config is plain YAML (nothing in it is constructed "
                          "or run); remove the tag")
                self.tagged.add(tuple(keypath))
            if isinstance(node, yaml.MappingNode):
                stack.extend((value, keypath + (key.value if isinstance(key, yaml.ScalarNode)
                                                else "?",))
                             for key, value in reversed(node.value))
            else:
                stack.extend((item, keypath + (i,)) for i, item in reversed(list(enumerate(node.value))))

    def scalar(self, node, keypath=None):
        """The value of a scalar node; _BAD (reported when ``keypath`` is given) if it has none."""
        try:
            return yaml.SafeLoader.construct_object(_loader(), node, deep=True)
        except (ValueError, OverflowError, yaml.YAMLError) as e:
            if keypath is not None:
                # A YAMLError's text adds where it is and the source line under it: the problem alone
                why = " ".join(str(getattr(e, "problem", None) or e).split())
                self.fail(node, keypath, f"cannot read the value {shown(node.value)}: {why}")
            return _BAD

    def key(self, knode, keypath, known):
        """The name of a mapping's key node, or None (reported) if it is no name: a complex
        key (``? [a, b]``) is a list or mapping, which no key of the schema is."""
        if not isinstance(knode, yaml.ScalarNode):
            self.fail(knode, keypath, f"a key must be a name, not {_NODE_KINDS.get(type(knode), 'a node')} "
                      f"(a '? ' complex key); expected one of: {', '.join(known)}")
            return None
        return knode.value

    def unknown(self, knode, keypath, known):
        key = keypath[-1]
        # a key typed in capitals (CACHE:, modules.NAME) is its own case's match; difflib
        # compares case and found none, so those got no suggestion
        same = [k for k in known if isinstance(key, str) and k.lower() == key.lower()]
        close = same or difflib.get_close_matches(key, list(known), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else \
            "; YAML merge keys (<<) are not supported" if key == "<<" else ""
        self.fail(knode, keypath, f"unknown key{hint} (expected one of: {', '.join(known)})")

    def mapping(self, node, schema, keypath):
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, keypath, f"expected a mapping of {', '.join(schema)}")
            return _BAD
        out = {}
        seen = {}
        for knode, vnode in node.value:
            key = self.key(knode, keypath, schema)
            if key is None:
                continue
            here = keypath + (key,)
            if self.duplicate(knode, here, seen):
                continue
            self.lines[here] = knode.start_mark.line + 1
            if key not in schema:
                self.unknown(knode, here, schema)
                continue
            kind, _, detail = schema[key]
            value = self.value(vnode, kind, detail, here)
            if value is not _BAD:
                out[key] = value
        for key, (kind, required, _) in schema.items():
            if required and key not in seen:
                self.fail(node, keypath + (key,), "missing; it is required")
        return out

    def duplicate(self, knode, keypath, seen):
        """Report a key met twice in one mapping (YAML would silently keep the last)."""
        key = knode.value
        if key in seen:
            self.fail(knode, keypath, f"duplicate key (first at line {seen[key]})")
            return True
        seen[key] = knode.start_mark.line + 1
        return False

    def value(self, node, kind, detail, keypath):
        self.lines.setdefault(keypath, node.start_mark.line + 1)
        if kind == "map":
            return self.mapping(node, detail, keypath)
        if kind == "kernels":
            return self.kernels(node, keypath)
        if kind == "nodes":
            return self.nodes(node, keypath)
        if kind.startswith("list["):
            if not isinstance(node, yaml.SequenceNode):
                self.fail(node, keypath, f"expected a list ({detail})")
                return _BAD
            item_kind = kind[5:-1]
            items = [self.value(n, item_kind, detail, keypath + (i,)) for i, n in enumerate(node.value)]
            return [item for item in items if item is not _BAD]     # a bad item is reported, not used
        if not isinstance(node, yaml.ScalarNode):
            self.fail(node, keypath, f"expected a single value, not {_NODE_KINDS.get(type(node), 'a node')} "
                      f"({detail})")
            return _BAD
        value = self.scalar(node, keypath)
        if value is _BAD:
            return _BAD
        if kind == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                self.fail(node, keypath, f"expected an integer, got {shown(value)} ({detail})")
                return _BAD
            if keypath == ("version",) and value != 1:
                self.fail(node, keypath, f"schema version {shown(value)} is not supported; expected 1")
            return value
        if kind == "size":
            if node.style is None and isinstance(value, (int, float)) and not isinstance(value, bool):
                # the number as written, as TACK_CACHE_SIZE reads it: YAML 1.1 reads a plain 010
                # as 8, 0x10 as 16, 1_000 as 1000 and 1:30 as 90 (a limit of a few bytes, which
                # each size check then enforces on the whole cache)
                value = node.value
            try:
                size = parse_size(value)
            except SizeTooLarge:
                self.fail(node, keypath, too_large(shown(value)))
                return _BAD
            except ValueError as e:
                why = str(e)        # parse_size's message names the value itself
                self.fail(node, keypath, why if repr(str(value).strip()) in why
                          else f"{shown(value)} is not a size: {why}")
                return _BAD
            if size == 0:
                # ccache reads max_size 0 as no limit; here it is a limit every size check
                # enforces, deleting every entry of every user the config reaches
                self.fail(node, keypath, keeps_no_entry(shown(value), "mode: read or off"))
                return _BAD
            return value
        if kind == "mode":
            if isinstance(value, bool) and node.style is None:
                # YAML 1.1 reads a plain off/no/false as false: the mode meant is 'off' (or 'write')
                fix = (f"quote it: '{node.value}'" if node.value in MODES
                       else f"expected one of {', '.join(MODES)}")
                self.fail(node, keypath, f"{node.value} (unquoted) is YAML's boolean "
                          f"{str(value).lower()}, not a cache mode; {fix}")
                return _BAD
            if value not in MODES:
                close = difflib.get_close_matches(str(value), MODES, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.fail(node, keypath, f"{shown(value)} is not a cache mode; expected one of "
                          f"{', '.join(MODES)}{hint}")
                return _BAD
            return value
        if not isinstance(value, str):
            quote = ""
            if isinstance(node, yaml.ScalarNode) and node.style is None and value is not None:
                # YAML reads a plain 1.10 as the number 1.1, yes as true...: quoting keeps the text
                quote = f"; quote it for the text as written: '{node.value}'"
            self.fail(node, keypath, f"expected a string, got {shown(value)} ({detail}){quote}")
            return _BAD
        return value

    def kernels(self, node, keypath):
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, keypath, "expected a list of {module: ..., shapes: [...]} or "
                      "{module: ..., kernel: ..., args: [...]}")
            return _BAD
        if not node.value:
            self.fail(node, keypath, "an empty list names no kernel; leave build.kernels out "
                      "for the default, the contour at 21x21x21")
            return _BAD
        out = []
        for i, item in enumerate(node.value):
            here = keypath + (i,)
            if not isinstance(item, yaml.MappingNode):
                self.fail(item, here, "expected a mapping with 'module'")
                continue
            entry = {}
            seen = {}
            refused = False                 # a key not read: what it was is not known
            self.lines[here] = item.start_mark.line + 1
            for knode, vnode in item.value:
                key = self.key(knode, here, KERNEL_KEYS)
                if key is None:
                    refused = True
                    continue
                if self.duplicate(knode, here + (key,), seen):
                    continue
                self.lines[here + (key,)] = knode.start_mark.line + 1
                if key not in KERNEL_KEYS:
                    self.unknown(knode, here + (key,), KERNEL_KEYS)
                    continue
                if key == "shapes":
                    value = self.shapes(vnode, here + (key,))
                elif key == "args":
                    value = self.value(vnode, "list[str]", KERNEL_KEYS[key], here + (key,))
                elif key == "grid":
                    value = self.value(vnode, "int", KERNEL_KEYS[key], here + (key,))
                    if isinstance(value, int) and not 1 <= value <= 3:
                        self.fail(vnode, here + (key,), f"a grid has 1 to 3 dimensions, not {shown(value)}")
                        value = _BAD
                else:
                    value = self.value(vnode, "str", KERNEL_KEYS[key], here + (key,))
                if value is not _BAD:
                    entry[key] = value
            if "module" not in seen:
                self.fail(item, here + ("module",), "missing; it is required")
            if "kernel" in seen and "args" not in seen:
                self.fail(item, here + ("args",), "missing; a 'kernel' entry needs its 'args'")
            # keys of the other form of entry were ignored, silently: each is said
            if "kernel" in seen and "shapes" in seen:
                self.fail_at(here + ("shapes",), "ignored by a 'kernel' entry, which is "
                             "built for its 'args'; give the shapes to an entry without 'kernel' "
                             "(its module's tack_warm(shape))")
            for key in ("args", "grid"):
                if key in seen and "kernel" not in seen:
                    self.fail_at(here + (key,), "ignored by an entry without 'kernel' "
                                 "(its module's tack_warm(shape) gives each kernel's arguments and "
                                 "grid); add 'kernel' or leave it out")
            if "kernel" not in seen and "shapes" not in seen and not refused:
                self.fail(item, here + ("shapes",), "missing; an entry without 'kernel' needs its "
                          "'shapes' (its module's tack_warm(shape) names the kernels of each)")
            out.append(entry)
        return out

    def shapes(self, node, keypath):
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, keypath, "expected a list of shapes, e.g. [[21, 21, 21], [64, 64, 64]]")
            return _BAD
        if not node.value:
            self.fail(node, keypath, "an empty list; give at least one shape, e.g. [[21, 21, 21]]")
            return _BAD
        out = []
        for i, s in enumerate(node.value):
            self.lines[keypath + (i,)] = s.start_mark.line + 1
            shape = self.shape(s, keypath + (i,))
            if shape is not None:
                out.append(shape)
        return out

    def shape(self, node, keypath):
        """A list of 1 to MAX_RANK extents, each 1 to MAX_EXTENT, MAX_ELEMENTS in all; None if not."""
        expected = "expected a shape: a list of positive integers, e.g. [64, 64, 64]"
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, keypath, expected)
            return None
        if not 1 <= len(node.value) <= MAX_RANK:
            self.fail(node, keypath, f"a shape has 1 to {MAX_RANK} extents, not {len(node.value)}")
            return None
        extents = []
        for j, n in enumerate(node.value):
            value = self.scalar(n) if isinstance(n, yaml.ScalarNode) else _BAD
            if value is _BAD or not isinstance(value, int) or isinstance(value, bool):
                self.fail(n, keypath + (j,), f"{expected}; got {shown(value if value is not _BAD else n.value)}")
                return None
            if not 1 <= value <= MAX_EXTENT:
                self.fail(n, keypath + (j,), f"an extent is 1 to {MAX_EXTENT}, not {shown(value)}")
                return None
            extents.append(value)
        total = 1
        for e in extents:
            total *= e
        if total > MAX_ELEMENTS:
            self.fail(node, keypath, f"{'x'.join(map(str, extents))} is {total} elements; at most "
                      f"{MAX_ELEMENTS} (2^34) in one shape")
            return None
        return extents

    def nodes(self, node, keypath):
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, keypath, "expected a list of {name: ..., cpu: ..., gpu: ...}")
            return _BAD
        out = []
        for i, item in enumerate(node.value):
            if not isinstance(item, yaml.MappingNode):
                self.fail(item, keypath + (i,), "expected a mapping with 'name' and 'cpu'")
                continue
            entry = self.mapping(item, {k: ("str", k == "name", d) for k, d in NODE_KEYS.items()},
                                 keypath + (i,))
            entry["_line"] = item.start_mark.line + 1
            out.append(entry)
        return out

    # -- checks across keys -------------------------------------------------

    def at(self, keypath):
        return self.lines.get(keypath, 1)

    def fail_at(self, keypath, message):
        name = ".".join(map(str, keypath))
        self.problems.append(f"{self.path}:{self.at(keypath)}: {name}: {message}")

    def check_cache_paths(self, cache):
        """cache.directory and cache.bundles become TACK_CACHE_DIR and TACK_CACHE_BUNDLES in
        every module and activation script: no control character (a newline would end a csh
        line), as Tack itself refuses in the environment."""
        for key in ("directory", "bundles"):
            value = cache.get(key)
            bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None) \
                if isinstance(value, str) else None
            if bad is not None:
                self.fail_at(("cache", key), f"{shown(value)} holds the control character {bad!r}; "
                             "a path cannot (the activation scripts would not parse)")
            elif isinstance(value, str) and not value.replace(os.pathsep, "").strip():
                # exported as it is, an empty TACK_CACHE_DIR is the default (~/.cache/tack) for
                # every job, with no warning; an empty TACK_CACHE_BUNDLES names no directory
                self.fail_at(("cache", key), f"{shown(value)} names no directory (jobs would "
                             + ("use the default, ~/.cache/tack" if key == "directory" else
                                "search no site directory") + "); give a path, or leave the key "
                             "out to keep each user's own setting")
            elif key == "bundles" and isinstance(value, str):
                # As a job reads TACK_CACHE_BUNDLES (``stores.site_dir_entry``): each directory
                # named from /, or from what it expands ($PREFIX/..., ~/...); a relative one is
                # ignored, with a warning.  A variable is the job's: taken to be a directory
                # named from /, as a site's $PREFIX or $SCRATCH is.
                from ..cache.stores import site_dir_entry
                relative = []
                for d in value.split(os.pathsep):
                    d = d.strip()               # as a job strips each (stores.site_dirs)
                    try:
                        if d and not os.path.isabs(site_dir_entry(d, _ANY_VARIABLE)):
                            relative.append(d)
                    except ValueError:
                        relative.append(d)
                if relative:
                    self.fail_at(("cache", key), f"{shown(relative[0])} is not an absolute path: jobs "
                                 "ignore a relative bundle directory; name it from / (or from a "
                                 "variable, $PREFIX/..., or from ~)")

    def cross_checks(self, data, root):
        self.check_cache_paths(data.get("cache") or {})
        modules = data.get("modules") or {}
        for key, allowed in (("whatis", ""), ("help", "\n\t")):
            # whatis is one line of module avail's; neither may carry a terminal's escapes
            value = modules.get(key)
            bad = next((c for c in value if (ord(c) < 32 or ord(c) == 127) and c not in allowed),
                       None) if isinstance(value, str) else None
            if bad is not None:
                self.fail_at(("modules", key), f"{shown(value)} holds the control character {bad!r}"
                             + ("; whatis is one line" if key == "whatis" else
                                "; help text may hold newlines and tabs only"))
        if isinstance(modules.get("root"), str) and not modules["root"].strip():
            # check passed it, and modules then said "give --root or set modules.root" (it was
            # set), or wrote into a directory named " " under the working directory
            self.fail_at(("modules", "root"), f"{shown(modules['root'])} names no directory; give "
                         "the module root's path, or leave the key out and pass --root")
        for key, what, suffix in (("name", "module name", ""), ("version", "module version", ".lua")):
            if key in modules and modules[key] is not None:
                why = path_part_problem(modules[key], what, suffix)
                if why:
                    self.fail_at(("modules", key), why)
        for i, entry in enumerate((data.get("build") or {}).get("kernels") or []):
            for j, spec in enumerate(entry.get("args") or []):
                try:
                    parse_arg_spec(spec)
                except ValueError as e:
                    self.fail_at(("build", "kernels", i, "args", j), str(e))
        archs = (data.get("build") or {}).get("archs") or {}
        for kind, names in archs.items():
            first = {}
            for i, a in enumerate(names or []):
                resolved = self.check_arch(kind, a, ("build", "archs", kind, i))
                if resolved is not None and resolved in first:
                    self.fail_at(("build", "archs", kind, i), f"{a!r} is {kind}:{resolved}, which "
                                 f"build.archs.{kind}.{first[resolved]} lists already: list each "
                                 "architecture once")
                elif resolved is not None:
                    first[resolved] = i
        for key in ("conflicts", "prereqs"):
            for i, name in enumerate((data.get("modules") or {}).get(key) or []):
                bad = next((c for c in name if c.isspace() or ord(c) < 32 or ord(c) == 127), None) \
                    if isinstance(name, str) else None
                if isinstance(name, str) and (not name or bad is not None):
                    # a module file's conflict/prereq of '' or 'a b' fails every load, obscurely
                    why = ("is empty: give a module's name, or leave the item out" if not name
                           else f"holds {bad!r}: a module name has no whitespace (list each "
                           "module as its own item)")
                    self.fail_at(("modules", key, i), f"{name!r} {why}")
        if (data.get("modules") or {}).get("formats") == []:
            # (modules rendered no file, and failed with an IndexError)
            self.fail_at(("modules", "formats"), f"an empty list names no module format; give "
                         f"{' or '.join(FORMATS)} (or leave the key out for both)")
        for i, fmt in enumerate((data.get("modules") or {}).get("formats") or []):
            if fmt not in FORMATS:
                close = difflib.get_close_matches(fmt, FORMATS, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.fail_at(("modules", "formats"), f"unknown module format {fmt!r}{hint} "
                             f"(expected {' or '.join(FORMATS)})")
        cpus = {_bare("cpu", a) for a in archs.get("cpu") or []}
        # each GPU entry by every name it goes by: as listed and as the registry builds it
        # (level_zero: [acm] builds dg2, so a node's gpu: dg2 is among them)
        gpus = {name for k, listed in archs.items() if k != "cpu" for a in listed or []
                for name in _names_of(k, a)}
        named = {}
        for i, n in enumerate(data.get("nodes") or []):
            n.pop("_line", None)
            if n.get("name") and n["name"] in named:
                self.fail_at(("nodes", i, "name"), f"{n['name']!r} is the name of nodes."
                             f"{named[n['name']]} already: give each kind of node its own name")
            elif n.get("name"):
                named[n["name"]] = i
            node = f" (node {n['name']!r})" if n.get("name") else ""
            if n.get("cpu") and _bare("cpu", n["cpu"]) not in cpus:
                self.fail_at(("nodes", i, "cpu"), f"{n['cpu']!r} is not in build.archs.cpu, so no "
                             f"bundle is built for it{node}")
            if n.get("gpu") and not _gpu_names(n["gpu"]) & gpus:
                self.fail_at(("nodes", i, "gpu"), f"{n['gpu']!r} is not among build.archs' GPU "
                             f"architectures{node}")

    def check_arch(self, kind, name, keypath):
        """Report an entry of build.archs.<kind> the registry does not build, with its message
        (the one ``bundles build`` and ``tack.aot`` give); -> the name it builds, or None."""
        if not isinstance(name, str):
            return None
        other = name.partition(":")[0]
        if ":" in name and other != kind and other in ARCH_KINDS:
            self.fail_at(keypath, f"{name!r} is not a {kind} architecture: list it under "
                         f"build.archs.{other}")
            return None
        try:
            return ARCH_KINDS[kind].resolve(_bare(kind, name))
        except ArchError as e:
            self.fail_at(keypath, str(e))
        return None


ARG_ARRAY = re.compile(r"^([a-z0-9_]+)\[([^\]]*)\]$")
ARG_TEMPLATE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_][A-Za-z0-9_]*)$")


def parse_arg_spec(text):
    """An argument spec of ``build.kernels[].args``, read; ValueError saying why not.

    -> ``("array", dtype, shape)`` for ``float32[64,64]``, ``("scalar", dtype)``
    for ``float64``, ``("template", module, name)`` for ``pkg.mod:Class``.
    ``bundles build`` reads specs with this same function.
    """
    from ..types import SCALAR_NAMES
    usage = "use e.g. float32[64,64], float64, or pkg.module:Class for a template"
    if not isinstance(text, str):
        raise ValueError(f"an argument spec is a string ({usage})")
    text = text.strip()
    m = ARG_ARRAY.match(text)
    if m:
        dtype, dims = m.groups()
        if dtype not in SCALAR_NAMES:
            raise ValueError(f"unknown element type {dtype!r} in {text!r} (known: {', '.join(SCALAR_NAMES)})")
        parts = [d.strip() for d in dims.split(",")]
        if not 1 <= len(parts) <= MAX_RANK:
            raise ValueError(f"{text!r}: an array has 1 to {MAX_RANK} extents, not {len(parts)}")
        shape = []
        for d in parts:
            if not (d.isascii() and d.isdigit()) or not 1 <= int(d) <= MAX_EXTENT:
                raise ValueError(f"{text!r}: an extent is an integer 1 to {MAX_EXTENT}, not {shown(d)}")
            shape.append(int(d))
        total = 1
        for d in shape:
            total *= d
        if total > MAX_ELEMENTS:
            raise ValueError(f"{text!r} is {total} elements; at most {MAX_ELEMENTS} (2^34)")
        return ("array", dtype, tuple(shape))
    if text in SCALAR_NAMES:
        return ("scalar", text)
    m = ARG_TEMPLATE.match(text)
    if m:
        return ("template", m.group(1), m.group(2))
    raise ValueError(f"cannot read argument spec {shown(text)} ({usage})")


_BAD = object()      # a scalar that has no value (already reported)
_loader_instance = None


def _loader():
    global _loader_instance
    if _loader_instance is None:
        _loader_instance = yaml.SafeLoader("")
    return _loader_instance


def _names_of(kind, name) -> set:
    """The names an entry of build.archs.<kind> goes by: bare and ``kind:``-qualified, as written
    and as the registry resolves it (an alias: ``acm`` is ``dg2``)."""
    if not isinstance(name, str):
        return set()
    bare = _bare(kind, name)
    names = {bare, f"{kind}:{bare}"}
    try:
        resolved = ARCH_KINDS[kind].resolve(bare)
    except (ArchError, KeyError):
        return names
    return names | {resolved, f"{kind}:{resolved}"}


def _gpu_names(value) -> set:
    """Every name a node's ``gpu`` may stand for: itself, and what each device kind (the one it
    names, or every kind but the CPU's for a bare name) resolves it to."""
    if not isinstance(value, str):
        return set()
    kind, sep, _ = value.partition(":")
    kinds = [kind] if sep and kind in ARCH_KINDS else [k for k in ARCH_KINDS if k != "cpu"]
    names = {value}
    for k in kinds:
        names |= {n for n in _names_of(k, value) if n != _bare(k, value) or not sep}
    return names


def _bare(kind, name):
    """``cpu:zen3`` -> ``zen3``: an entry of build.archs.<kind> may be written either way."""
    prefix = f"{kind}:"
    return name[len(prefix):] if isinstance(name, str) and name.startswith(prefix) else name
