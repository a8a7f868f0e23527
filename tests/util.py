"""Helpers for checking where a CompileError points, and kernels written to files for it."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

MARK = "# ERR"
ROOT = Path(__file__).resolve().parents[1]


def run_script(tmp_path, name, text, *args, timeout=300):
    """Run ``text`` as the script ``tmp_path/name`` (a kernel's source must be in a file) in a
    fresh Python with this checkout's Tack, a cache of its own (``tmp_path/cache``) and no other
    ``TACK_`` setting, in ``tmp_path``: the finished process, its output as text."""
    script = tmp_path / name
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True,
                          text=True, cwd=tmp_path, timeout=timeout)


def marked_line(fn, mark=MARK):
    """(file line number, line text, caret token) of the line in ``fn`` marked ``# ERR <token>``."""
    py = getattr(fn, "py_func", fn)
    lines, first = inspect.getsourcelines(py)
    hits = [(first + k, ln.rstrip("\n")) for k, ln in enumerate(lines) if mark in ln]
    assert len(hits) == 1, f"{py.__qualname__} must have exactly one '{mark}' line"
    lineno, text = hits[0]
    token = text.split(mark, 1)[1].strip()
    code = text.split(mark, 1)[0].rstrip()
    return lineno, code, token


def check_points_at(err, kernel_name, where, filename):
    """Assert the CompileError ``err`` names the kernel, the file and the marked line of ``where``, with a caret under its token."""
    lineno, code, token = marked_line(where)
    msg = str(err)
    assert f"in kernel '{kernel_name}'" in msg, msg
    assert f'File "{filename}", line {lineno}' in msg, msg
    lines = msg.splitlines()
    shown = "    " + code.strip()
    starts = [k for k, ln in enumerate(lines) if ln.rstrip() == shown or
              (ln.startswith(shown) and MARK in ln)]
    assert starts, f"offending line {code.strip()!r} not shown in:\n{msg}"
    k = starts[0]
    assert k + 1 < len(lines), f"no caret line in:\n{msg}"
    caret = lines[k + 1]
    assert caret.strip() == "^", f"no caret line in:\n{msg}"
    if token:
        want = code.strip().index(token)
        assert caret.index("^") - 4 == want, f"caret not under {token!r}:\n{msg}"
    return msg


def kernel_of_arrays(n, directory, ndim=1, use_all=False):
    """A kernel of ``n`` float32 array parameters of ``ndim`` dimensions, written to a module of
    its own (a kernel's source is read from its file) -> (kernel, path of its file).  It copies
    the last array into the first, or (``use_all``) stores the sum of all the others there."""
    import importlib.util
    import os
    names = ", ".join(f"a{k}" for k in range(n))
    at = ", ".join(["i"] * ndim)
    value = (" + ".join(f"a{k}[{at}]" for k in range(1, n)) if use_all else f"a{n - 1}[{at}]")
    src = (f"import tack\n\n@tack.kernel\ndef k{n}({names}):\n    i = tack.tid()\n"
           f"    a0[{at}] = {value}\n")
    name = f"many{n}_{ndim}{'_all' if use_all else ''}"
    path = os.path.join(directory, f"{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, f"k{n}"), path
