"""What the warm path's never-run functions cost: an installed copy of Tack against the same copy
with them taken out, side by side.

    python benchmarks/cold_code.py [--runs 21] [--size 21] [--saxpy 100000] [--only PREFIXES] [--json]

A warm process imports some 26 of Tack's modules, and with them every function they define,
run or not: each is a code object unmarshalled from the import image and a function object
made when its module runs, and both are torn down at the interpreter's exit.  This measures
what those that a warm process never calls cost it, to size the splitting of warm modules
(what a hit runs in one module, the rest in modules a hit does not import):

1. an installed copy of Tack (``deployed_warm._install``: byte-compiled, with its import image)
   and its user cache, primed for the 21³ contour and the 100k-element saxpy;
2. which of Tack's functions run in a warm process of each kernel (``sys.setprofile`` in a
   process that runs ``_deployed_runner.py`` as the benchmark runs it, figures included);
3. two copies of the modules those processes import, each rewritten from its syntax tree
   (``ast.unparse``, so that both differ from the install alike, in line numbers only): the
   *control*, and the *stripped*, where every module- and class-level function that no warm
   process ran is replaced by ``name = None`` (no code object, no function); the kernels'
   own module (``tack.kernels``) is left whole, as its kernels are compiled, not called;
4. ``--runs`` rounds, each a warm process of each kernel on the control copy then on the
   stripped one (``python -S``, as ``deployed_warm`` runs them), both served from the user
   cache: medians of ``import tack``, the first call and import-to-result, and the median of
   the paired differences with the share of rounds the stripped copy was faster.

``--only tack/cache/,tack/backends/`` strips only the modules under those paths, to size one
split.  This is an experiment on a copy, not a build of Tack: the stripped copy serves only the
two warm processes it was traced from.  Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import deployed_warm as dw  # noqa: E402  (benchmarks/ is on sys.path)
from _common import finish  # noqa: E402

# Run in the traced process: the runner under sys.setprofile; the calls of the install's code.
_TRACER = r"""
import json, runpy, sys
site, out = sys.argv[1], sys.argv[2]
used = set()
def prof(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(site):
        c = frame.f_code
        used.add((c.co_filename[len(site) + 1:].replace("\\", "/"), c.co_firstlineno, c.co_name))
sys.setprofile(prof)
sys.argv = [sys.argv[3]] + sys.argv[4:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    sys.setprofile(None)
    with open(out, "w") as f:
        json.dump(sorted(used), f)
"""


def trace(site, env, size, n):
    """{(path in site, first line, name)} of the install's functions a warm process of each
    kernel ran, and the paths of the modules they are in."""
    used = set()
    with tempfile.TemporaryDirectory() as tmp:
        for k in dw.KERNELS:
            out = os.path.join(tmp, f"{k}.json")
            python, e = dw._python(env)
            subprocess.run(python + ["-c", _TRACER, site, out, dw.RUNNER, "tack", k,
                                     str(dw._size(k, size, n))],
                           cwd=ROOT, env=e, check=True, capture_output=True, text=True, timeout=600)
            with open(out) as f:
                used |= {tuple(u) for u in json.load(f)}
    return used


def _cold(body, rel, used, removed, prefix=""):
    """``body`` with each function no traced process ran replaced by ``name = None``."""
    out = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = {node.lineno} | {d.lineno for d in node.decorator_list}
            if not any((rel, line, node.name) in used for line in lines):
                removed.append((rel, prefix + node.name, node.end_lineno - node.lineno + 1))
                out.append(ast.Assign(targets=[ast.Name(node.name, ast.Store())],
                                      value=ast.Constant(None)))
                continue
        elif isinstance(node, ast.ClassDef):
            node.body = _cold(node.body, rel, used, removed, prefix + node.name + ".") or [ast.Pass()]
        out.append(node)
    return out


def copies(site, used, tmp, only=()):
    """(control site, stripped site, [(module path, function, lines)] taken out)."""
    files = sorted({rel for rel, _, _ in used if not rel.startswith("tack/kernels/")})
    sites, removed = [], []
    for label in ("control", "stripped"):
        dest = os.path.join(tmp, label)
        shutil.copytree(site, dest, ignore=shutil.ignore_patterns("__pycache__"))
        for rel in files:
            path = os.path.join(dest, rel)
            with open(path) as f:
                tree = ast.parse(f.read())
            if label == "stripped" and (not only or any(rel.startswith(p) for p in only)):
                tree.body = _cold(tree.body, rel, used, removed)
            with open(path, "w") as f:
                f.write(ast.unparse(ast.fix_missing_locations(tree)))
        sites.append(dest)
    control, stripped = sites
    for dest in sites:
        # Byte-compiled and imaged by the control copy's tools (the stripped copy lacks them).
        dw._tool(["compileall", "-q", dest], dw._env(PYTHONPATH=control), tmp)
        code = f"from tack import _image_write as w; w.write('tack', {os.path.join(dest, 'tack')!r})"
        p = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=dw._env(PYTHONPATH=control),
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"writing the import image of {dest} failed:\n{p.stderr[-2000:]}")
    return control, stripped, removed


def measure(runs=21, size=21, n=100_000, only=()):
    tmp = tempfile.mkdtemp(prefix="tack-cold-code-")
    try:
        site = dw._install(tmp)
        user = os.path.join(tmp, "user")
        base = dict(TACK_CACHE_DIR=user, PYTHONPATH=os.pathsep.join([site, HERE]), TACK_BENCH_SITE=site)
        for k in dw.KERNELS:
            dw.runner("tack", k, dw._size(k, size, n), dw._env(**base))
        used = trace(site, dw._env(**base), size, n)
        control, stripped, removed = copies(site, used, tmp, only)
        raw = {(lab, k): [] for lab in ("control", "stripped") for k in dw.KERNELS}
        for i in range(runs):
            dw._log(f"round {i + 1}/{runs}")
            for k in dw.KERNELS:
                for lab, s in (("control", control), ("stripped", stripped)):
                    env = dw._env(TACK_CACHE_DIR=user, PYTHONPATH=os.pathsep.join([s, HERE]),
                                  TACK_BENCH_SITE=s)
                    got = dw.runner("tack", k, dw._size(k, size, n), env)
                    if got.get("compiled"):
                        raise RuntimeError(f"{lab} {k}: compiled, not served from the user cache")
                    raw[(lab, k)].append(got)
        return {"benchmark": "cold_code", "runs": runs, "size": size, "saxpy": n, "only": list(only),
                "traced_functions": len(used), "removed": removed,
                "raw": {f"{lab}/{k}": v for (lab, k), v in raw.items()}}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(res, file=None):
    out = file or sys.stdout
    removed = res["removed"]
    per = {}
    for rel, _, lines in removed:
        c = per.setdefault(rel, [0, 0])
        c[0] += 1
        c[1] += lines
    print(f"Functions no warm process ran, taken out of the stripped copy: {len(removed)} "
          f"({sum(x[2] for x in removed)} lines; {res['traced_functions']} ran)", file=out)
    for rel, (count, lines) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"  {rel:38s} {count:4d} functions {lines:5d} lines", file=out)
    print(f"\n{res['runs']} rounds, medians in ms; 'paired' is the median of each round's stripped "
          "minus control: import-to-result, and it plus the interpreter's exit", file=out)
    print(f"  {'kernel':8s} {'copy':9s} {'import tack':>12s} {'first call':>11s} {'import-to-result':>17s}"
          f" {'exit':>6s}", file=out)
    for k in dw.KERNELS:
        rows = {lab: res["raw"][f"{lab}/{k}"] for lab in ("control", "stripped")}
        for lab, r in rows.items():
            med = [statistics.median(x[key] for x in r) * 1e3
                   for key in ("import_s", "first_call_s", "import_to_result_s", "exit_s")]
            print(f"  {k:8s} {lab:9s} {med[0]:12.3f} {med[1]:11.3f} {med[2]:17.3f} {med[3]:6.3f}", file=out)
        pairs = list(zip(rows["control"], rows["stripped"]))
        diffs = [s["import_to_result_s"] - c["import_to_result_s"] for c, s in pairs]
        whole = [s["import_to_result_s"] + s["exit_s"] - c["import_to_result_s"] - c["exit_s"] for c, s in pairs]
        ratio = statistics.median(s["import_to_result_s"] / c["import_to_result_s"] for c, s in pairs)
        print(f"  {k:8s} paired: import-to-result {statistics.median(diffs) * 1e3:+.3f} ms, {ratio:.3f}x (the stripped "
              f"copy faster in {sum(d < 0 for d in diffs)} of {len(diffs)} rounds), with the exit "
              f"{statistics.median(whole) * 1e3:+.3f} ms ({sum(d < 0 for d in whole)} of {len(whole)})",
              file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=21, help="rounds of paired processes (default 21)")
    ap.add_argument("--size", type=int, default=21, help="contour field extent (default 21)")
    ap.add_argument("--saxpy", type=int, default=100_000, help="saxpy elements (default 100000)")
    ap.add_argument("--only", default="", help="strip only modules under these comma-separated paths "
                                               "(tack/cache/,tack/backends/...)")
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON")
    a = ap.parse_args(argv)
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    only = tuple(p.strip() for p in a.only.split(",") if p.strip())
    res = measure(a.runs, a.size, a.saxpy, only)
    finish(res, report, a.json, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
