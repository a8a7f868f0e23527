"""Where a warm process's instructions go: each of Tack's modules, each step of the first call.

    python benchmarks/warm_profile.py [--size 21] [--saxpy 100000] [--kernels contour,saxpy]
                                      [--top 40] [--json]

``warm_instructions.py`` counts a warm process phase by phase and by what CPython does (the
unmarshalling, the classes, the collector).  This script says which of Tack's parts the count
is made of, to size a change before making it: the same process (the site bundle's, with
``PYTHONHASHSEED=0`` and one thread), run once under valgrind's callgrind with a marker at each
boundary (``_profile_runner.py``: a call of ``os.getppid()``, which callgrind is told to dump its
counts before, ``--dump-before=os_getppid``).  Every instruction between two markers belongs to
what was open then, the innermost: a module being imported (its code read from the import image,
checked, unmarshalled and run, less the modules it imports; ``tack._image``, which the runner
loads by hand, as ``import tack`` would), a step of the first call (less the
steps inside it), the cyclic collector (its runs, wherever an allocation set them off: a row of
their own, which the exit's collection is not part of), or the phase around them.  Each row
gives that exclusive count, the inclusive one (with what is inside) and that one's share of the
whole, from ``import tack`` to the first call's end.

The first call's steps are wrapped once their modules are imported, so the runner imports the
first call's modules itself just before the call (what the dispatcher's ``import`` stage
imports), on a row of their own.  The wrappers' own instructions (a few thousand a call) fall to
the caller's rows; the sum of the rows is the process's count from NumPy's end to the first
call's end, within about 0.1 M of ``warm_instructions.py``'s phases.

Needs ``valgrind`` on PATH; without it the script says so and measures nothing.  A run takes
about a minute: the setup (an install, a site bundle) and one process per kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import deployed_warm as dw  # noqa: E402  (benchmarks/ is on sys.path)
import warm_instructions as wi  # noqa: E402

RUNNER = os.path.join(HERE, "_profile_runner.py")


def _log(msg):
    print(f"[warm_profile] {msg}", file=sys.stderr, flush=True)


def _total(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{path}: no total in callgrind's output")


def attribute(events: list, costs: list) -> dict:
    """{name: [exclusive, inclusive]} from the markers' ``events`` ("+name", "-name") and the
    instructions before each (``costs[i]``: since the marker before event ``i``)."""
    stack, rows, opened = [], {}, []
    spent = 0
    for event, cost in zip(events, costs):
        if stack:
            rows.setdefault(stack[-1], [0, 0])[0] += cost
        spent += cost
        name = event[1:]
        if event[0] == "+":
            stack.append(name)
            opened.append(spent)
        else:
            if not stack or stack[-1] != name:
                raise RuntimeError(f"markers out of order at {event!r}")
            stack.pop()
            rows.setdefault(name, [0, 0])[1] += spent - opened.pop()
    if stack:
        raise RuntimeError(f"markers left open: {stack}")
    return rows


def profile(kernel, size, env, tmp) -> dict:
    out = os.path.join(tmp, f"callgrind.{kernel}")
    events_file = os.path.join(tmp, f"events.{kernel}")
    python, env = dw._python(env)
    argv = ["valgrind", "--tool=callgrind", "--dump-before=os_getppid",
            f"--callgrind-out-file={out}", *python, RUNNER, kernel, str(size), events_file]
    p = subprocess.run(argv, cwd=dw.ROOT, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{kernel} under callgrind failed ({p.returncode}):\n{p.stderr[-3000:]}")
    with open(events_file) as f:
        events = [e for e in f.read().split("\n") if e]
    # callgrind names the dumps out.1, out.2, ... in order (the part after the last marker: out)
    parts = sorted((n for n in os.listdir(tmp) if n.startswith(f"callgrind.{kernel}.")),
                   key=lambda n: int(n.rsplit(".", 1)[1]))
    if len(parts) != len(events):
        raise RuntimeError(f"{kernel}: {len(parts)} dumps for {len(events)} markers: something else "
                           "called os.getppid(), or this Python names it otherwise")
    costs = [_total(os.path.join(tmp, n)) for n in parts]
    for n in parts:
        os.unlink(os.path.join(tmp, n))
    os.unlink(out)
    rows = attribute(events, costs)
    return {"rows": rows, "events": len(events)}


def measure(args, tmp):
    user, env = wi.site_process(args, tmp, _log)
    res = {"arch": dw._site_arch(), "kernels": {}}
    for kernel in args.kernels:
        size = args.size if kernel == "contour" else args.saxpy
        shutil.rmtree(user, ignore_errors=True)
        _log(f"{kernel}: the warm process under callgrind, with markers")
        res["kernels"][kernel] = profile(kernel, size, env, tmp)
    return res


PHASES = ("import tack", "the kernel's module", "first call: Tack's imports", "first call")
COLLECTOR = "the collector"


def report(res, top=40):
    lines = [f"Where a warm process's instructions go (callgrind; the site bundle for {res['arch']}, "
             "empty user cache), M instructions", ""]
    for kernel, r in res["kernels"].items():
        rows = r["rows"]
        whole = sum(rows[p][1] for p in PHASES + ("tack._image",) if p in rows)
        modules = {n: v for n, v in rows.items() if n.startswith("tack") and n != "import tack"}
        steps = {n: v for n, v in rows.items() if n not in modules and n not in PHASES + (COLLECTOR,)}
        lines.append(f"{kernel}: from `import tack` to the first call's end {whole / 1e6:.2f} M")
        def row(indent, name, ex, inc=None):     # M instructions, and the share of the whole
            tail = f" {inc / 1e6:7.2f}" if inc is not None else " " * 8
            lines.append(f"{indent}{name:<{46 - len(indent)}} {ex / 1e6:7.2f}{tail} "
                         f"{(inc if inc is not None else ex) / whole:6.1%}")

        lines.append(f"  {'phase':<44} {'excl':>7} {'incl':>7} {'share':>6}")
        for p in PHASES:
            if p in rows:
                row("  ", p, *rows[p])
        row("  ", "of which the collector, wherever it ran", rows.get(COLLECTOR, [0, 0])[1])
        mods = sum(v[0] for v in modules.values())
        lines.append(f"  Tack's modules ({len(modules)}), by their own import ({mods / 1e6:.2f} M "
                     f"in all, {mods / whole:.1%}):")
        for n, (ex, inc) in sorted(modules.items(), key=lambda kv: -kv[1][0])[:top]:
            row("    ", n, ex, inc)
        lines.append("  the first call's steps:")
        for n, (ex, inc) in sorted(steps.items(), key=lambda kv: -kv[1][1]):
            row("    ", n, ex, inc)
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    wi.kernel_arguments(ap)
    ap.add_argument("--top", type=int, default=40, help="modules shown per kernel")
    args = wi.parsed(ap, argv)
    if not shutil.which("valgrind"):
        print("warm_profile: valgrind (callgrind) is not installed; nothing measured "
              "(Debian: apt-get install valgrind)")
        return 0
    with tempfile.TemporaryDirectory(prefix="tack-profile-") as tmp:
        res = measure(args, tmp)
    print(json.dumps(res, indent=1) if args.json else report(res, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
