"""The site tool's errors, and the one-line message for a missing optional dependency.

Kept free of third-party imports so that a missing PyYAML, Jinja2 or
archspec can itself be reported cleanly.
"""

from __future__ import annotations

import os
import re
import shlex

# Top-level module -> the distribution that provides it (all in the "site" extra).
SITE_EXTRA = {"yaml": "PyYAML", "jinja2": "Jinja2", "markupsafe": "MarkupSafe", "archspec": "archspec"}


class SiteError(Exception):
    """A failure to report (one or more lines), exit status 1."""


class SiteConfigError(Exception):
    """One or more problems in a site config; each line names file, line and key.  ``partial``:
    the config's valid parts (a SiteConfig), for checks that look further (kernel modules)."""

    def __init__(self, problems, partial=None):
        self.problems = problems
        self.partial = partial
        super().__init__("\n".join(problems))


def checkout_of(package_dir=None):
    """The source checkout this Tack runs from (the directory holding ``pyproject.toml`` for
    the project ``tack`` beside the package), or None for an installed Tack."""
    package_dir = package_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(package_dir)
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    return root if re.search(r'^name\s*=\s*["\']tack["\']\s*$', text, re.M) else None


def install_extra_hint(package_dir=None) -> str:
    """How to install the site extra: from PyPI, or editable in the checkout Tack runs from."""
    root = checkout_of(package_dir)
    if root is None:
        return 'pip install "tack[site]"'
    if os.path.realpath(os.getcwd()) == os.path.realpath(root):
        return 'pip install -e ".[site]"'
    return f'cd {shlex.quote(root)} && pip install -e ".[site]"'


def missing_extra(e: ImportError, package_dir=None):
    """The one-line message for an ImportError of a site dependency, or None for any other."""
    top = (getattr(e, "name", None) or "").partition(".")[0]
    if top not in SITE_EXTRA:
        return None
    return (f"python -m tack.site needs {SITE_EXTRA[top]} (module '{top}'), which is not "
            f"installed: {install_extra_hint(package_dir)}")
