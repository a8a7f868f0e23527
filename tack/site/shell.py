"""The site's exports as shell code, for sites without modules: ``python -m tack.site env``.

References such as ``$USER`` or ``${SCRATCH}`` are kept for the shell to
expand when the output is sourced; everything else in a value is quoted so
the shell takes it literally.  A value is set only where every variable it
refers to is set and not empty (as a module refuses to load otherwise); else
one line on standard error says which, and the variable is left as it was.
"""

from __future__ import annotations

import re

from .modules import split_references

SHELLS = ("bash", "csh", "fish")
_WORD = re.compile(r"[A-Za-z0-9_]")


def _quoted(parts, literal, reference):
    """Join the parts of a value: ``literal(text)`` and ``reference(name, braces)``."""
    out = []
    for i, p in enumerate(parts):
        if "variable" in p:
            nxt = parts[i + 1].get("literal", "") if i + 1 < len(parts) else ""
            out.append(reference(p["variable"], bool(_WORD.match(nxt[:1]))))
        else:
            out.append(literal(p["literal"]))
    return '"' + "".join(out) + '"'


def _sh_literal(text):
    out = []
    for ch in text:
        if ch in '\\"$`':
            out.append("\\" + ch)
        elif ch == "!":
            out.append("\"'!'\"")  # no history expansion in an interactive shell
        else:
            out.append(ch)
    return "".join(out)


def _csh_literal(text):
    out = []
    for ch in text:
        if ch in "$`":
            out.append(f"\"'{ch}'\"")
        elif ch == '"':
            out.append("\"'\"'\"")
        elif ch == "!":
            out.append("\\!")
        elif ch == "\n":
            out.append("\\\n")
        else:
            out.append(ch)
    return "".join(out)


def _fish_literal(text):
    return "".join("\\" + ch if ch in '\\"$' else ch for ch in text)


def quote(shell, value):
    """``value`` as one double-quoted word of ``shell``, its ``$NAME`` references left to expand."""
    parts = split_references(value)
    if shell == "bash":
        return _quoted(parts, _sh_literal, lambda n, b: f"${{{n}}}" if b else f"${n}")
    if shell == "csh":
        return _quoted(parts, _csh_literal, lambda n, b: f"${{{n}}}" if b else f"${n}")
    if shell == "fish":
        # fish takes no ${NAME} and does no brace expansion in double quotes ("{$HOME}x" is
        # "{/home/bob}x"): a name a word character follows ends with the quotes around it alone
        return _quoted(parts, _fish_literal, lambda n, b: f'""${n}""' if b else f"${n}")
    raise ValueError(f"unknown shell {shell!r}; expected one of {', '.join(SHELLS)}")


def set_line(shell, var, value_word):
    """The statement that exports ``var`` as the already quoted ``value_word``."""
    return {"bash": f"export {var}={value_word}",
            "csh": f"setenv {var} {value_word}",
            "fish": f"set -gx {var} {value_word}"}[shell]


def export_lines(shell, var, value) -> list:
    """The statements that export ``var`` as ``value`` (``$NAME`` references left to expand);
    a list of directories (``modules.PATH_EXPORTS``: TACK_CACHE_BUNDLES) goes before the
    variable's value, if any, as a module's ``prepend_path`` does."""
    from .modules import PATH_EXPORTS
    word = quote(shell, value)
    if var not in PATH_EXPORTS:
        lines = [set_line(shell, var, word)]
    elif shell == "bash":
        lines = [f'export {var}={word}"${{{var}:+:${var}}}"']
    elif shell == "csh":    # one line would substitute ${var} even where it is unset: an error
        lines = [f"if ($?{var}) then", f"    setenv {var} {word}:${{{var}:q}}", "else",
                 f"    setenv {var} {word}", "endif"]
    else:
        lines = [f"set -gx {var} (string join : -- {word} ${var})"]
    names = list(dict.fromkeys(p["variable"] for p in split_references(value) if "variable" in p))
    return _guarded(shell, var, names, lines)


def _guarded(shell, var, names, lines) -> list:
    """``lines``, run only where each of ``names`` (the variables ``var``'s value is made from) is
    set and not empty; else ``var`` is left as it was, and one line on standard error says why.
    As a module refuses to load then: ``$SCRATCH/$USER/tack-cache`` with SCRATCH unset made
    ``/bob/tack-cache``, without a word."""
    if not names:
        return lines
    refs = " and ".join(f"${n}" for n in names)
    why = f"tack: {var} is not set: it is made from {refs}, " + \
        ("which is unset or empty" if len(names) == 1 else "and one of them is unset or empty")
    inner = ["    " + line for line in lines]
    if shell == "bash":
        test = " && ".join(f'[ -n "${{{n}-}}" ]' for n in names)
        return [f"if {test}; then", *inner, "else", f"    echo '{why}' >&2", "fi"]
    if shell == "csh":
        # csh substitutes a whole line before it runs it: whether each is set is asked first
        have = " && ".join(f"$?{n}" for n in names)
        full = " && ".join(f'"${{{n}:q}}" != ""' for n in names)
        say = f"echo '{why}' > /dev/stderr"
        return [f"if ( {have} ) then", f"    if ( {full} ) then", *["    " + line for line in inner],
                "    else", f"        {say}", "    endif", "else", f"    {say}", "endif"]
    test = "; and ".join(f'test -n "${n}"' for n in names)
    return [f"if {test}", *inner, "else", f"    echo '{why}' >&2", "end"]


def easybuild_value(value) -> str:
    """``value`` as EasyBuild 5 writes a ``modextravars`` value into a module: a ``$NAME`` or
    ``${NAME}`` is looked up when the module is loaded (Lmod's ``os.getenv``, Tcl's
    ``$::env``), ``$$`` is a literal ``$``.  So each reference is written ``${NAME}`` and every
    other ``$`` doubled."""
    return "".join("${%s}" % p["variable"] if "variable" in p else p["literal"].replace("$", "$$")
                   for p in split_references(value))


def render_easybuild(cfg) -> str:
    """The site's settings as easyconfig parameters (``modextravars``, and ``modextrapaths``
    when ``cache.bundles`` adds directories after the install's own bundles), for
    recipes/easybuild/Tack-*.eb: appended to it, they replace its own."""
    from .errors import SiteError
    exports = cfg.exports()
    lines = ["# Tack's settings for this site, as easyconfig parameters: append them to a copy of",
             "# recipes/easybuild/Tack-*.eb.  EasyBuild 5 resolves $NAME references when the module",
             "# is loaded."]
    bundles = exports.pop("TACK_CACHE_BUNDLES", None)
    if bundles is not None:
        dirs = [d.strip() for d in bundles.split(":") if d.strip()]     # as a job reads them
        where = cfg.where(("cache", "bundles"))         # FILE:LINE: cache.bundles, as the config's errors
        for d in dirs:
            if any("variable" in p for p in split_references(d)):
                raise SiteError(f"{where}: {d!r} refers to variables; EasyBuild's modextrapaths "
                                "takes directories as they are")
            if not d.startswith("/"):
                raise SiteError(f"{where}: {d!r} is not an absolute path; EasyBuild's "
                                "modextrapaths takes directories as they are: name it from /")
        lines.append(f"modextrapaths = {{'TACK_CACHE_BUNDLES': {['share/tack/bundles'] + dirs!r}}}")
    lines.append("modextravars = {")
    lines += [f"    {var!r}: {easybuild_value(value)!r}," for var, value in exports.items()]
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_env(cfg, shell) -> str:
    """Shell code exporting the site's settings, for ``eval`` or ``source``; for ``easybuild``,
    easyconfig parameters (``render_easybuild``)."""
    if shell == "easybuild":
        return render_easybuild(cfg)
    if shell not in SHELLS:
        raise ValueError(f"unknown shell {shell!r}; expected one of {', '.join(SHELLS)}")
    lines = [f"# Tack's settings for this site ({shell}); $NAME references expand when this is sourced."]
    for var, value in cfg.exports().items():
        lines += export_lines(shell, var, value)
    return "\n".join(lines) + "\n"
