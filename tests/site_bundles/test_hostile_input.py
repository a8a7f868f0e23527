"""Hostile input to ``python -m tack.site`` and ``python -m tack.cache``: each is refused with one
clear line naming where it is at fault (no traceback), and nothing good is lost."""

import textwrap

import pytest

from tack.site import cli


def write_module(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))


WARM_MODULE = """
    import numpy as np
    import tack

    @tack.kernel
    def k(a):
        i = tack.tid()
        a[i] = a[i] + 1.0

    def tack_warm(shape):
        a = np.zeros(shape, np.float32)
        return {items}
"""


@pytest.mark.parametrize("items, why", [
    ("[5]", "item 0: got int"),
    ("[(k, (a,))]", "item 0: got 2 values"),
    ("[(k, (a,), 1), (len, (a,), 1)]", "item 1: len is not a @tack.kernel"),
    ("[(k, (a,), 'x')]", "item 0: its grid is 'x', not 1, 2 or 3"),
])
def test_check_malformed_tack_warm_items(tmp_path, monkeypatch, capsys, items, why):
    """A module's tack_warm that returns something other than (kernel, args, grid) items: check
    names the config's line and key and what is wrong, instead of a traceback (TypeError,
    ValueError from unpacking)."""
    name = f"warm_{abs(hash(items)) % 10**8}"
    write_module(tmp_path, monkeypatch, name, WARM_MODULE.format(items=items))
    config = tmp_path / "site.yaml"
    config.write_text(f"version: 1\nbuild:\n  archs: {{cpu: [x86_64_v3]}}\n  kernels:\n"
                      f"    - module: {name}\n      shapes: [[4]]\n")
    rc = cli.main(["check", str(config)])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"{config}:6: build.kernels.0.shapes.0: {name}.tack_warm([4]) {why}" in err, err
    assert "Traceback" not in err
