"""Conda activation: ``python -m tack.site conda-activate CONFIG --prefix PREFIX [--env-vars]``.

With ``--env-vars``: ``PREFIX/etc/conda/env_vars.d/tack-site.json``, the site's settings as
conda's own package variables, which ``conda activate`` sets in every shell it supports (bash,
zsh, csh, fish, xonsh, PowerShell, cmd.exe) and deactivation unsets; conda warns when one
replaces a value the user had set, and does not restore it.

Without: ``PREFIX/etc/conda/activate.d/tack.{sh,csh,fish}`` and the matching
``deactivate.d`` scripts, which restore the user's own values.  Activating saves the user's own value of each
variable (and whether it was set at all) in ``_TACK_CONDA_<TAG>_<VAR>``,
then exports the site's value; deactivating restores the saved value, or
unsets the variable if it was unset.  ``<TAG>`` is derived from the prefix,
so two stacked environments with these scripts each restore their own
saved values; activating twice without deactivating does not save Tack's
own values as the user's.
"""

from __future__ import annotations

import hashlib
import json
import os

from .atomic import write_files
from .errors import SiteError
from .shell import export_lines

EXTENSIONS = {"sh": "bash", "csh": "csh", "fish": "fish"}


def tag(prefix):
    return hashlib.sha256(os.path.realpath(prefix).encode()).hexdigest()[:8].upper()


def activate_script(cfg, ext, marker):
    shell = EXTENSIONS[ext]
    exports = cfg.exports()
    head = [f"# Tack's settings for this conda environment, from the site config.",
            f"# Written by `python -m tack.site conda-activate`; deactivate.d/tack.{ext} restores",
            f"# the values they replace."]
    save, sets = [], [line for var, value in exports.items() for line in export_lines(shell, var, value)]
    if ext == "sh":
        save.append(f'if [ -z "${{{marker}+x}}" ]; then')
        save.append(f"    export {marker}=1")
        for var in exports:
            s = f"{marker}_{var}"
            save.append(f'    if [ -n "${{{var}+x}}" ]; then export {s}="${var}"; else unset {s}; fi')
        save.append("fi")
    elif ext == "csh":
        save.append(f"if (! $?{marker}) then")
        save.append(f"    setenv {marker} 1")
        for var in exports:
            s = f"{marker}_{var}"
            save += [f"    if ($?{var}) then", f"        setenv {s} ${var}:q",
                     "    else", f"        unsetenv {s}", "    endif"]
        save.append("endif")
    else:
        save.append(f"if not set -q {marker}")
        save.append(f"    set -gx {marker} 1")
        for var in exports:
            s = f"{marker}_{var}"
            save += [f"    if set -q {var}", f"        set -gx {s} ${var}",
                     "    else", f"        set -e {s}", "    end"]
        save.append("end")
    return "\n".join(head + save + sets) + "\n"


def deactivate_script(cfg, ext, marker):
    exports = cfg.exports()
    lines = [f"# Restores what activate.d/tack.{ext} replaced: the user's own values, or unset.",
             f"# Written by `python -m tack.site conda-activate`."]
    if ext == "sh":
        lines.append(f'if [ -n "${{{marker}+x}}" ]; then')
        for var in exports:
            s = f"{marker}_{var}"
            lines.append(f'    if [ -n "${{{s}+x}}" ]; then export {var}="${s}"; else unset {var}; fi')
            lines.append(f"    unset {s}")
        lines += [f"    unset {marker}", "fi"]
    elif ext == "csh":
        lines.append(f"if ($?{marker}) then")
        for var in exports:
            s = f"{marker}_{var}"
            lines += [f"    if ($?{s}) then", f"        setenv {var} ${s}:q", f"        unsetenv {s}",
                      "    else", f"        unsetenv {var}", "    endif"]
        lines += [f"    unsetenv {marker}", "endif"]
    else:
        lines.append(f"if set -q {marker}")
        for var in exports:
            s = f"{marker}_{var}"
            lines += [f"    if set -q {s}", f"        set -gx {var} ${s}", f"        set -e {s}",
                      "    else", f"        set -e {var}", "    end"]
        lines += [f"    set -e {marker}", "end"]
    return "\n".join(lines) + "\n"


ENV_VARS = os.path.join("etc", "conda", "env_vars.d", "tack-site.json")
HEADER = "# Written by `python -m tack.site conda-activate`"


def _remove_ours(paths):
    """Remove the files of the other form that this command wrote (never a file of someone else)."""
    for path in paths:
        try:
            with open(path, "rb") as f:
                head = f.read(4096)
        except OSError:
            continue
        if path.endswith(ENV_VARS):
            if not _env_vars_ours(head):
                continue
        elif HEADER.encode() not in head:
            continue
        os.unlink(path)


def _env_vars_ours(data: bytes) -> bool:
    """Whether ``data``, an ``env_vars.d`` file's, is one this command writes: a JSON object of
    ``TACK_`` settings alone (JSON holds no header to mark it)."""
    try:
        got = json.loads(data)
    except ValueError:
        return False
    return isinstance(got, dict) and all(k.startswith("TACK_") for k in got)


def _scripts(prefix):
    return [os.path.join(prefix, "etc", "conda", d, f"tack.{ext}")
            for d in ("activate.d", "deactivate.d") for ext in EXTENSIONS]


def write_activate(cfg, prefix, env_vars=False, force=False):
    """Write the activate.d and deactivate.d scripts into ``prefix`` (``env_vars``: conda's
    ``env_vars.d`` file instead, and the scripts of an earlier run removed); return the paths.
    A script of someone else's at a script's path is replaced only with ``force``."""
    prefix = os.path.abspath(os.fspath(prefix))
    if not os.path.isdir(prefix):
        raise SiteError(f"{prefix}: not a directory; --prefix must be an existing conda "
                        "environment (its $CONDA_PREFIX)")
    if env_vars:
        text = json.dumps(cfg.exports(), indent=2, sort_keys=True) + "\n"
        path = os.path.join(prefix, ENV_VARS)
        if not force:                   # someone else's file there: replaced only with --force
            try:
                with open(path, "rb") as f:
                    old = f.read(1 << 20)
            except FileNotFoundError:
                old = None
            except OSError as e:
                raise SiteError(f"{path}: cannot be read ({e.strerror or e}); nothing was "
                                "written") from None
            if old is not None and not _env_vars_ours(old):
                raise SiteError(f"not replacing {path}: this command did not write it (it sets "
                                "more than TACK_ settings); use --force to replace it; nothing "
                                "was written")
        written = [path for path, _ in write_files({path: text.encode()})]
        _remove_ours(_scripts(prefix))
        return written
    _remove_ours([os.path.join(prefix, ENV_VARS)])
    marker = f"_TACK_CONDA_{tag(prefix)}"
    files = {}
    for ext in EXTENSIONS:
        files[os.path.join(prefix, "etc", "conda", "activate.d", f"tack.{ext}")] = \
            activate_script(cfg, ext, marker).encode()
    for ext in EXTENSIONS:
        files[os.path.join(prefix, "etc", "conda", "deactivate.d", f"tack.{ext}")] = \
            deactivate_script(cfg, ext, marker).encode()
    return [path for path, _ in write_files(files, ours=HEADER.encode(), force=force)]
