"""Compile time against kernel size: nested constant loops, straight-line code, one long expression.

    python benchmarks/compile_scaling.py [--levels 1,4,8,12,16,20] [--statements 1000,2000,5000,10000,20000]
                                         [--terms 250,500,1000] [--timeout 300] [--json]
                                         [--cpu] [--repeat 1] [--base OTHER_CHECKOUT]

Each size is a fresh kernel written to a file and compiled in a fresh process
(``TACK_CACHE=off``, ``benchmarks/compile_scaling.py --child KIND N``), which
reports its first call's stages (``kernel.timings``).  For each family the
script prints compile time against size and the exponent of a power-law fit
(``time ~ size ** k``, least squares on the logs; ``k`` near 1 is linear) and,
for the loop nests, the growth per level (about 2 for work doubling with each
level).  A size that runs past ``--timeout`` is shown as such and left out of
the fit.  It never asserts on timings.

``--cpu`` reports CPU seconds of the compiling process instead of wall time
(the child's clock, ``kernel.timings`` included, is ``time.process_time``):
the figure to trust on a shared machine, where other jobs move the wall time
by tens of percent.  ``--repeat R`` keeps each size's fastest of R processes.
``--base DIR`` compiles the same kernels with the Tack of another checkout
too (``PYTHONPATH=DIR``), a process of each in turn, and prints both.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, ROOT, counts, finish  # noqa: E402


def nested(levels):
    lines = ["import tack", "@tack.kernel", "def k(out):", "    i = tack.tid()", "    acc = 0.0"]
    ind = "    "
    for lv in range(levels):
        lines.append(ind + f"for a{lv} in range(2):")
        ind += "    "
    lines.append(ind + "acc += 1.0")
    lines.append("    out[i] = acc")
    return "\n".join(lines) + "\n"


def straight(n):
    """``n`` statements, a new variable each, every tenth an ``if``."""
    lines = ["import tack", "@tack.kernel", "def k(out):", "    i = tack.tid()", "    x0 = out[i]"]
    for j in range(1, n):
        if j % 10 == 0:
            lines += [f"    x{j} = x{j - 1}", f"    if x{j} > 1e6:", f"        x{j} = x{j} * 0.5"]
        else:
            lines.append(f"    x{j} = x{j - 1} * 1.0000001 + {j % 7}.0")
    lines.append(f"    out[i] = x{n - 1}")
    return "\n".join(lines) + "\n"


def expression(n):
    return ("import tack\n@tack.kernel\ndef k(out):\n    i = tack.tid()\n    x = out[i]\n"
            "    out[i] = " + " + ".join(f"x * {j % 5}.0" for j in range(n)) + "\n")


FAMILIES = {"loops": (nested, "levels"), "statements": (straight, "statements"),
            "expression": (expression, "terms")}


def child(kind, n, cpu=False):
    if cpu:                                     # every clock of the compile, CPU seconds
        time.perf_counter = time.process_time
    import numpy as np
    import tack
    make = FAMILIES[kind][0]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"k_{kind}_{n}.py")
        with open(path, "w") as f:
            f.write(make(n))
        spec = importlib.util.spec_from_file_location(f"k_{kind}_{n}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out = np.zeros(4)
        t0 = time.perf_counter()
        tack.launch(mod.k, dim=4, args=(out,))
        total = time.perf_counter() - t0
    print(json.dumps({"kind": kind, "size": n, "compile_s": total, "stages": mod.k.timings}))


def measure(kind, n, timeout, root=ROOT, cpu=False):
    env = dict(os.environ, TACK_CACHE="off", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TACK_TIMING", None)
    try:
        proc = subprocess.run([sys.executable, os.path.join(HERE, "compile_scaling.py"), "--child", kind,
                               str(n)] + (["--cpu"] if cpu else []), cwd=root, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "size": n, "compile_s": None, "note": f"over {timeout} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"kind": kind, "size": n, "compile_s": None, "note": f"failed: {last[:120]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def power_fit(points):
    """Exponent k of time ~ size ** k (least squares on log-log), or None for under 2 points."""
    pts = [(math.log(s), math.log(t)) for s, t in points if t and t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def per_level(points):
    """Growth factor per level of nesting: exp of the slope of log(time) against levels."""
    pts = [(s, math.log(t)) for s, t in points if t and t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return math.exp(sum((x - mx) * (y - my) for x, y in pts) / sxx) if sxx else None


def fastest(kind, n, timeout, roots, cpu, repeat):
    """Each root's fastest of ``repeat`` processes compiling size ``n``, the roots in turn."""
    best = [None] * len(roots)
    for _ in range(repeat):
        for k, root in enumerate(roots):
            if best[k] is not None and best[k]["compile_s"] is None:
                continue                        # over the timeout, or failed: once is enough
            r = measure(kind, n, timeout, root, cpu)
            if best[k] is None or r["compile_s"] is None or r["compile_s"] < best[k]["compile_s"]:
                best[k] = r
    return best


def report(res):
    for label, fam in (("", "families"), ("base: ", "base_families")):
        if fam not in res:
            continue
        _report(res, fam, "fits" if fam == "families" else "base_fits", label)


def _report(res, fam, fits, label):
    clock = "cpu s" if res.get("cpu") else "compile s"
    for kind, rows in res[fam].items():
        unit = FAMILIES[kind][1]
        print(f"\n{label}{kind} ({unit}):")
        print(f"  {unit:>10}  {clock:>10}  {'lower':>8}  {'specialize':>10}  {'codegen':>8}  {'llvm':>8}")
        for r in rows:
            if r["compile_s"] is None:
                print(f"  {r['size']:>10}  {r['note']}")
                continue
            st = r.get("stages", {})
            print(f"  {r['size']:>10}  {r['compile_s']:>10.3f}  {st.get('lower', 0):>8.3f}  "
                  f"{st.get('specialize', 0):>10.3f}  {st.get('codegen', 0):>8.3f}  {st.get('llvm', 0):>8.3f}")
        fit = res[fits][kind]
        if fit.get("exponent") is not None:
            print(f"  power-law fit: time ~ size ** {fit['exponent']:.2f}")
        if fit.get("per_level") is not None:
            print(f"  growth per level: x{fit['per_level']:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--levels", default="1,4,8,12,16,20")
    ap.add_argument("--statements", default="1000,2000,5000,10000,20000")
    ap.add_argument("--terms", default="250,500,1000")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="CPU seconds, not wall time")
    ap.add_argument("--repeat", type=int, default=1, help="each size's fastest of this many processes")
    ap.add_argument("--base", help="another checkout: compile with its Tack too, in turn")
    a = ap.parse_args(argv)
    if a.child:
        child(a.child[0], int(a.child[1]), a.cpu)
        return None
    sizes = {"loops": counts(ap, a.levels, "--levels", "1,8,16", 1),
             "statements": counts(ap, a.statements, "--statements", "1000,5000", 2),
             "expression": counts(ap, a.terms, "--terms", "250,1000", 2)}
    res = {"families": {}, "fits": {}, "cpu": a.cpu}
    trees = [("families", "fits", ROOT)]
    if a.base:
        res.update(base=os.path.abspath(a.base), base_families={}, base_fits={})
        trees.insert(0, ("base_families", "base_fits", os.path.abspath(a.base)))
    for kind, ns in sizes.items():
        for fam, _, _ in trees:
            res[fam][kind] = []
        for n in ns:                            # the checkouts in turn, size by size
            rows = fastest(kind, n, a.timeout, [root for _, _, root in trees], a.cpu, max(1, a.repeat))
            for (fam, _, _), r in zip(trees, rows):
                res[fam][kind].append(r)
        for fam, fits, _ in trees:
            rows = res[fam][kind]
            pts = [(r["size"], r["compile_s"]) for r in rows if r["compile_s"] is not None]
            res[fits][kind] = {"exponent": power_fit(pts)}
            if kind == "loops":
                res[fits][kind]["per_level"] = per_level(pts)
    return finish(res, report, a.json)


if __name__ == "__main__":
    main()
