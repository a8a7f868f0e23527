"""Module files for ``module load tack``: Lmod (Lua) and Environment Modules (Tcl).

Split as Spack's module generation is (lib/spack/spack/modules):

* ``ModuleConfiguration``: what the site config says about the module;
* ``ModuleLayout``: where each format's file goes (``ROOT/NAME/VERSION.lua``,
  ``ROOT/NAME/VERSION``);
* ``ModuleContext``: the plain values a template sees;
* ``ModuleWriter`` (one subclass per format): renders its template and
  writes the file atomically, leaving an identical file untouched.

The templates in ``tack/site/templates`` hold only presentation, in blocks a
site can override (``{% extends "modulefile.lua.j2" %}``).

References such as ``$USER``, ``${SCRATCH}`` in the exported values are not
expanded here: each becomes a lookup in the module file, made when the
module is *loaded*, by the user loading it.  If a referenced variable is not
set at load, loading fails with a message naming it (rather than building a
path such as ``/tack-cache`` from empty parts); at unload it reads as empty.
"""

from __future__ import annotations

import os
import re

import jinja2

from .atomic import write_files
from .config import path_part_problem

#: What every module file ``modules`` renders holds (its header's second line); a file without it
#: at a module file's path is someone else's, replaced only with --force (``atomic.write_files``)
OURS = b"rendered by `python -m tack.site modules`"
from .errors import SiteError

# $NAME or ${NAME}; any other "$" is a literal character.
REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# Lists of directories (":"-separated) that a module, like Spack's and EasyBuild's, puts before
# the user's own value rather than in its place: a user's own bundles stay searched, after the
# site's.
PATH_EXPORTS = ("TACK_CACHE_BUNDLES",)
DEFAULT_WHATIS = "Tack: Python kernels compiled for CPUs and GPUs, kept in an on-disk cache"


def split_references(value):
    """``"$SCRATCH/$USER/x"`` -> ``[{"variable": "SCRATCH"}, {"literal": "/"}, ...]``."""
    parts, pos = [], 0
    for m in REFERENCE.finditer(value):
        if m.start() > pos:
            parts.append({"literal": value[pos:m.start()]})
        parts.append({"variable": m.group(1) or m.group(2)})
        pos = m.end()
    if pos < len(value) or not parts:
        parts.append({"literal": value[pos:]})
    return parts


def home_references(value, path):
    """``value`` with the ``~`` that begins it (each of its directories where ``path``: a list)
    as ``$HOME``, looked up at load as other references are.  Tack expands a leading ``~``
    itself, but Environment Modules prints a value with one unquoted (``X=~/z:/own;``), the
    shell expands it, and at unload the module's ``~/z`` is no longer in the list to come off
    it.  (``~user`` is left as it is.)"""
    entries = value.split(":") if path else [value]
    return ":".join("$HOME" + e[1:] if e == "~" or e.startswith("~/") else e for e in entries)


def config_label(path) -> str:
    """The site config's file name as a module file's header names it: its base name, with
    anything but letters, digits and ``._+-`` as ``?`` (it stands in a comment line: a newline
    in a file name would end the comment)."""
    return re.sub(r"[^A-Za-z0-9._+-]", "?", os.path.basename(os.fspath(path))) or "?"


#: A module file's header line naming the config it was rendered from (``config_label``'s).
RENDERED_FROM = re.compile(re.escape(OURS) + rb" from the site config ([A-Za-z0-9._+?-]+)\.")


def rendered_from(path) -> str | None:
    """The config the module file at ``path`` says it was rendered from, or None (no file, one
    of an older Tack that named none, or not one of ours)."""
    try:
        with open(path, "rb") as f:
            m = RENDERED_FROM.search(f.read(4096))
    except OSError:
        return None
    return m.group(1).decode("ascii") if m else None


class ModuleConfiguration:
    """What the site config says about the module, with defaults filled in."""

    def __init__(self, cfg):
        self.name = cfg.module_name
        self.version = cfg.module_version
        self.whatis = (cfg.get("modules.whatis") or DEFAULT_WHATIS).strip()
        self.help = (cfg.get("modules.help") or self.whatis).rstrip()
        self.conflicts = list(cfg.get("modules.conflicts") or [])
        self.prereqs = list(cfg.get("modules.prereqs") or [])
        self.exports = cfg.exports()
        self.source = config_label(cfg.path)


class ModuleLayout:
    """File names: ``ROOT/NAME/VERSION`` plus the format's extension."""

    extensions = {"lmod": ".lua", "tcl": ""}

    def __init__(self, configuration, root):
        self.conf = configuration
        self.root = os.path.abspath(os.fspath(root))

    def filename(self, fmt):
        return os.path.join(self.root, self.conf.name, self.conf.version + self.extensions[fmt])


class ModuleContext:
    """The values a template sees: name, version, help, whatis, exports, needs, conflicts, prereqs."""

    def __init__(self, configuration):
        self.conf = configuration

    def exports(self):
        """Each variable: its name, value, the value's parts (``split_references``), and whether
        it is a list of directories that goes before the user's own (``PATH_EXPORTS``)."""
        return [{"name": var, "value": value,
                 "parts": split_references(home_references(value, var in PATH_EXPORTS)),
                 "path": var in PATH_EXPORTS}
                for var, value in self.conf.exports.items()]

    def needs(self):
        """Each variable the exports reference, with the exports that reference it."""
        needs = {}
        for export in self.exports():
            for part in export["parts"]:
                if "variable" in part:
                    users = needs.setdefault(part["variable"], [])
                    if export["name"] not in users:
                        users.append(export["name"])
        return [{"variable": var, "exports": users} for var, users in needs.items()]

    def to_dict(self):
        c = self.conf
        return {"name": c.name, "version": c.version, "help": c.help, "whatis": c.whatis,
                "source": c.source, "conflicts": c.conflicts, "prereqs": c.prereqs,
                "exports": self.exports(), "needs": self.needs()}


# -- quoting filters: how a value is spelled in each language ----------------

def lua_string(value):
    """A Lua double-quoted string literal."""
    out = []
    for ch in str(value):
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\{ord(ch):03d}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def lua_long_string(value):
    """A Lua long bracket string ``[==[...]==]`` whose level the text cannot close."""
    text = str(value)
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    # A newline right after the opening bracket is dropped by Lua: add one so a
    # leading newline in the text survives.
    return f"[{eq}[\n{text}\n]{eq}]"


def tcl_string(value):
    """A Tcl double-quoted string in which nothing is substituted."""
    out = []
    for ch in str(value):
        if ch in '\\"$[]{}':
            out.append("\\" + ch)
        elif ch == "\t":
            out.append("\\t")
        elif ch != "\n" and (ord(ch) < 32 or ord(ch) == 127):
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def tcl_word(value):
    """A bare Tcl word when it is safe as one (module names), else a quoted string."""
    value = str(value)
    return value if re.fullmatch(r"[A-Za-z0-9_./+:@%=-]+", value) else tcl_string(value)


def tcl_literal(value):
    """Text to place inside a Tcl double-quoted string, substituting nothing."""
    return tcl_string(value)[1:-1]


def environment():
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tack.site", "templates"),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters.update(lua_string=lua_string, lua_long_string=lua_long_string,
                       tcl_string=tcl_string, tcl_word=tcl_word, tcl_literal=tcl_literal)
    return env


class ModuleWriter:
    """Renders one format's template with the context; writing is done for all formats at once."""

    format = None
    template = None

    def __init__(self, cfg, root, env=None):
        self.conf = ModuleConfiguration(cfg)
        self.layout = ModuleLayout(self.conf, root)
        self.context = ModuleContext(self.conf)
        self.env = env or environment()

    @property
    def filename(self):
        return self.layout.filename(self.format)

    def render(self) -> bytes:
        return self.env.get_template(self.template).render(**self.context.to_dict()).encode("utf-8")

    def write(self, force=False):
        return write_files({self.filename: self.render()}, ours=OURS, force=force)[0]


class LmodWriter(ModuleWriter):
    format = "lmod"
    template = "modulefile.lua.j2"


class TclWriter(ModuleWriter):
    format = "tcl"
    template = "modulefile.tcl.j2"


WRITERS = {"lmod": LmodWriter, "tcl": TclWriter}


def render_modules(cfg, formats, root):
    """``{path: bytes}``: the module file of each format under ``root``, all rendered, none written.

    Each path is checked to lie inside ``root`` (the config's name and version
    are single file names; see ``config.path_part_problem``); SiteError otherwise.
    """
    unknown = [f for f in formats if f not in WRITERS]
    if unknown:
        raise SiteError(f"unknown module format {unknown[0]!r}; expected {' or '.join(WRITERS)}")
    env = environment()
    writers = [WRITERS[f](cfg, root, env) for f in dict.fromkeys(formats)]
    for key, value, what, suffix in (("name", writers[0].conf.name, "module name", ""),
                                     ("version", writers[0].conf.version, "module version", ".lua")):
        why = path_part_problem(value, what, suffix)
        if why:
            raise SiteError(f"{cfg.where(('modules', key))}: {why}; nothing was written")
    files = {}
    for w in writers:
        path = w.filename
        if os.path.dirname(os.path.dirname(path)) != w.layout.root:
            raise SiteError(f"{path} is not a file of {w.layout.root}/NAME; nothing was written")
        files[path] = w.render()
    return files

