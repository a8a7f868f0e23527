"""The site tool's errors, and the one-line message for a missing optional dependency.

Kept free of third-party imports so that a missing PyYAML, Jinja2 or
archspec can itself be reported cleanly.
"""

from __future__ import annotations

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


def missing_extra(e: ImportError):
    """The one-line message for an ImportError of a site dependency, or None for any other."""
    top = (getattr(e, "name", None) or "").partition(".")[0]
    if top not in SITE_EXTRA:
        return None
    return (f"python -m tack.site needs {SITE_EXTRA[top]} (module '{top}'), which is not "
            f"installed: pip install \"tack[site]\"")
