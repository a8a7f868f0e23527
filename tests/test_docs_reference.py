"""The docs name what the code has, and their links lead somewhere: every internal link and
anchor of README.md and docs/*.md resolves, every ``TACK_*`` variable Tack reads is named in
them, and so is every key of the site config's schema and every command and option of
``python -m tack.cache`` and ``python -m tack.site``.  Text only, no subprocess: well under a
second.
"""

import argparse
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


TEXT = {path: _read(path) for path in DOCS}
ALL = "\n".join(TEXT.values())


def anchors(path) -> set:
    """GitHub's anchors of a Markdown file's headings (lower case, punctuation dropped, spaces
    as '-', a repeated heading numbered)."""
    out, seen = set(), {}
    for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", FENCE.sub("", _read(path)), re.M):
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links():
    """[(file:line, target)] of every relative link."""
    out = []
    for path, text in TEXT.items():
        for m in re.finditer(r"\]\(([^)\s]+)\)", FENCE.sub(lambda f: "\n" * f.group(0).count("\n"),
                                                         text)):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{os.path.relpath(path, ROOT)}:{line}", path, target))
    return out


def test_internal_links_and_anchors_resolve():
    bad = []
    for where, path, target in links():
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            bad.append(f"{where}: {target}: no such file")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{where}: {target}: no heading makes that anchor")
    assert not bad, "\n".join(bad)


def _tack_sources():
    for path in glob.glob(os.path.join(ROOT, "tack", "**", "*.py"), recursive=True):
        yield path, _read(path)


def test_every_tack_variable_read_is_documented():
    read = set()
    for _, text in _tack_sources():
        read.update(re.findall(r"\bTACK_[A-Z0-9_]*[A-Z0-9]\b", text))
    missing = sorted(v for v in read if v not in ALL)
    assert not missing, f"TACK_ variables read in tack/ that no doc names: {missing}"


def _schema_keys(schema, prefix=""):
    from tack.site import config
    for key, (kind, _required, sub) in schema.items():
        path = prefix + key
        if kind != "map":               # a mapping's own key is only the prefix of its rows
            yield path
        if kind == "map":
            yield from _schema_keys(sub, path + ".")
        elif kind == "kernels":
            yield from (f"{path}[].{k}" for k in config.KERNEL_KEYS)
        elif kind == "nodes":
            yield from (f"{path}[].{k}" for k in config.NODE_KEYS)


def test_every_site_config_key_is_in_the_site_docs_table():
    from tack.site import config          # (PyYAML: the test extra's, as every site test's)
    site = TEXT[os.path.join(ROOT, "docs", "site.md")]
    documented = set(re.findall(r"^\| `([^`]+)` \|", site, re.M))
    missing = [k for k in _schema_keys(config.SCHEMA) if k not in documented]
    assert not missing, f"site config keys missing from docs/site.md's table: {missing}"


def _commands(parser, words):
    """(command words, long options) of every (sub)command of an argparse parser."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    opts = [o for a in parser._actions if a.help != argparse.SUPPRESS
            for o in a.option_strings if o.startswith("--") and o != "--help"]
    if not subs:
        yield words, opts
    for action in subs:
        for name, sub in action.choices.items():
            yield from _commands(sub, words + [name])


@pytest.mark.parametrize("tool", ["tack.cache", "tack.site"])
def test_every_command_and_option_is_documented(tool):
    if tool == "tack.site":
        from tack.site.cli import build_parser
    else:
        from tack.cache.cli import build_parser
    bad = []
    for words, opts in _commands(build_parser(), []):
        command = f"python -m {tool} {' '.join(words)}"
        # The command's own lines: its synopsis, its examples, its prose.
        lines = [ln for ln in ALL.splitlines() if command in ln or f"`{' '.join(words)}" in ln]
        if not any(command in ln for ln in lines):
            bad.append(f"{command}: never shown")
        for opt in opts:
            if not any(re.search(re.escape(opt) + r"\b", ln) for ln in lines):
                bad.append(f"{command} {opt}: not documented with its command")
    assert not bad, "\n".join(bad)
