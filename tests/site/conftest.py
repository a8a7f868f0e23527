"""Site-config fixtures: the example configs with a fixed module version."""

from __future__ import annotations

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "site-config"
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
MODULE_VERSION = "1.0"   # fixed, so the goldens do not change with Tack's version


def with_version(text, version=MODULE_VERSION):
    """The config text with ``modules.version`` set, inserted after ``modules:``."""
    assert "\nmodules:\n" in text
    return text.replace("\nmodules:\n", f"\nmodules:\n  version: \"{version}\"\n", 1)


@pytest.fixture
def example(tmp_path):
    """example(name) -> path of a copy of site-config/NAME.yaml with modules.version fixed."""
    def make(name, edit=None):
        text = with_version((EXAMPLES / f"{name}.yaml").read_text())
        if edit:
            text = edit(text)
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        return path
    return make


@pytest.fixture
def render_env(monkeypatch):
    """Render as a user other than the one who loads: USER=alice, SCRATCH=/render/scratch."""
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("SCRATCH", "/render/scratch")
    monkeypatch.setenv("HOME", "/render/home")
