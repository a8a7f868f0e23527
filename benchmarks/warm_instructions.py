"""A warm process's cost in instructions: what it adds to a NumPy-only process, phase by phase.

    python benchmarks/warm_instructions.py [--size 21] [--saxpy 100000] [--runs 9]
                                           [--kernels contour,saxpy] [--json]

``deployed_warm.py`` times warm processes, and on a shared machine its figures move by
tenths of a millisecond between runs, by milliseconds between machines.  This script counts
instead: each process runs under valgrind's callgrind (``valgrind`` on PATH; without it the
script says so and stops), which counts the instructions a process executes, the same count
for the same process whatever else the machine is doing.  A change to the warm path can then
be sized to a few tenths of a percent in one run.

The path counted is the site bundle's (``deployed_warm.py``'s **site** case: an installed,
byte-compiled copy of Tack with its import image, a site bundle built for ``cpu:x86_64_v3``,
or ``cpu:aarch64`` on Arm, and an empty user cache): valgrind does not run AVX-512 code, so a
kernel compiled for an AVX-512 host cannot run under it, while the site bundle's can.  Every
process runs with ``PYTHONHASHSEED=0`` (string hashes, hence dictionary probes, the same in
every process) and ``TACK_NUM_THREADS=1`` (no worker thread's waiting counted).

For each kernel (the 21³ contour, a 100k-element saxpy; ``_instructions_runner.py``), the
same process stopped after each phase with ``os._exit`` (no interpreter exit counted): NumPy
and the input only, then ``import tack``, the kernel's module, the first call; and the NumPy-
only and the whole warm process each with its interpreter exit.  Differences give each
phase's instructions, and the exit's over NumPy-only's.  Then what the whole process adds,
split by what CPython does for it (inclusive counts of its C functions, the warm process's
less the NumPy-only one's): unmarshalling code, making classes, the collector, hashing (the
entries' BLAKE2b checksums, the import image's CRC-32s) and the kernel's code with other
calls through ctypes.  And the code the warm process loads: each of Tack's modules it imported,
compiled from its source and marshalled (a process not counted, ``--check``), in KB: every cost
above grows with it.

To read the counts as time: the NumPy-only process's CPU time, measured natively ``--runs``
times (median), over its instruction count gives this machine's rate for such a process, and
the warm process's added instructions at that rate estimate its milliseconds over NumPy-only,
beside the target of ``deployed_warm.py`` (5 ms).  Instructions are not all alike (a
checksum's run faster than the interpreter's), so this is an estimate; the counts themselves
are exact.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import deployed_warm as dw  # noqa: E402  (benchmarks/ is on sys.path)

RUNNER = os.path.join(HERE, "_instructions_runner.py")
KERNELS = ("contour", "saxpy")
PHASES = ("numpy", "import", "module", "call")
# What CPython does for the warm process: (row, [C functions whose inclusive counts add up],
# [C functions whose counts are taken off]).  The import image's CRC-32 is zlib's through ctypes
# on Linux (``tack._image.crc32_function``: ``ffi_call`` holds it, so it is taken off that row);
# where the zlib module serves it instead, the ctypes row is short by the CRC's count.
PARTS = (("unmarshalling code", ["marshal_loads"], []),
         ("making classes", ["builtin___build_class__"], []),
         ("the collector (at the exit too)", ["gc_collect_main"], []),
         ("hashing (BLAKE2b checksums, CRC-32s)", ["PyBlake2_blake2b_update", "crc32_z"], []),
         ("the kernel's code, other ctypes calls", ["ffi_call"], ["crc32_z"]))


def _log(msg):
    print(f"[warm_instructions] {msg}", file=sys.stderr, flush=True)


def _argv(lib, kernel, size, stop, exit_):
    python = dw._python({})[0]          # the interpreter's argv (-S); each run's env is measure()'s
    return python + [RUNNER, lib, kernel, str(size), stop] + (["--exit"] if exit_ else [])


def _callgrind(argv, env, tmp):
    """(instructions the process executed, {C function: inclusive count})."""
    out = os.path.join(tmp, "callgrind.out")
    p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
                       cwd=dw.ROOT, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} under callgrind failed ({p.returncode}):\n"
                           f"{p.stderr[-3000:]}")
    with open(out) as f:
        total = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
    names = {n for _, plus, minus in PARTS for n in plus + minus}
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                               capture_output=True, text=True, timeout=300).stdout
    counts = dict.fromkeys(names, 0)
    for line in annotated.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(?:\*\s+)?\S*?:?([\w.']+) ", line + " ")
        if m and m.group(2) in names:     # "'2" (a recursive call's) lines are inside the first
            counts[m.group(2)] = max(counts[m.group(2)], int(m.group(1).replace(",", "")))
    os.unlink(out)
    return total, counts


def _numpy_cpu(env, kernel, size, runs):
    """Median CPU seconds of the NumPy-only process, run natively."""
    argv = _argv("numpy", kernel, size, "numpy", True)
    got = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, cwd=dw.ROOT, env=env, check=True, timeout=300)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        got.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(got)


def site_process(args, tmp, log=None):
    """The counted process's setting, made in ``tmp``: an installed copy of Tack, a site bundle
    for ``dw._site_arch()``; -> (its user cache directory, empty, its environment: one thread,
    ``PYTHONHASHSEED=0``).  ``warm_profile.py`` counts the same process."""
    site = dw._install(tmp)
    sites = os.path.join(tmp, "sites")
    (log or _log)(f"building a site bundle for {dw._site_arch()}")
    dw._tool(["tack.site", "bundles", "build", dw._site_config(tmp, args.size, args.saxpy),
              "--output", sites], dw._env(PYTHONPATH=os.pathsep.join([site, HERE])), tmp)
    user = os.path.join(tmp, "user-cache")
    return user, dw._env(TACK_BENCH_SITE=site, PYTHONPATH=os.pathsep.join([site, HERE]),
                         TACK_CACHE_BUNDLES=sites, TACK_CACHE_DIR=user, TACK_NUM_THREADS=1,
                         PYTHONHASHSEED=0)


def measure(args, tmp):
    user, env = site_process(args, tmp)
    env = dw._python(env)[1]
    res = {"arch": dw._site_arch(), "kernels": {}}
    for kernel in args.kernels:
        size = args.size if kernel == "contour" else args.saxpy
        shutil.rmtree(user, ignore_errors=True)
        check = subprocess.run(_argv("tack", kernel, size, "call", False) + ["--check"], cwd=dw.ROOT,
                               env=env, capture_output=True, text=True, timeout=600)
        got = json.loads(check.stdout.strip().splitlines()[-1]) if check.returncode == 0 else {}
        if got.get("misses") or got.get("archspec") or got.get("llvm") or not got.get("ok"):
            raise RuntimeError(f"{kernel}: the site bundle did not serve a warm hit "
                               f"({got or check.stderr[-2000:]})")
        counts = {}
        for lib, stop, exit_ in [("numpy", "numpy", False), ("numpy", "numpy", True),
                                 *[("tack", s, False) for s in PHASES[1:]], ("tack", "call", True)]:
            shutil.rmtree(user, ignore_errors=True)
            name = f"{lib}:{stop}{':exit' if exit_ else ''}"
            _log(f"{kernel}: {name} under callgrind")
            counts[name] = _callgrind(_argv(lib, kernel, size, stop, exit_), env, tmp)
        n0, ne = counts["numpy:numpy"][0], counts["numpy:numpy:exit"][0]
        t = {s: counts[f"tack:{s}"][0] for s in PHASES[1:]}
        te = counts["tack:call:exit"][0]
        _log(f"{kernel}: the NumPy-only process natively, {args.runs} runs")
        cpu = _numpy_cpu(env, kernel, size, args.runs)
        whole, base = counts["tack:call:exit"][1], counts["numpy:numpy:exit"][1]
        parts = {row: sum(whole[n] - base[n] for n in plus) - sum(whole[n] - base[n] for n in minus)
                 for row, plus, minus in PARTS}
        res["kernels"][kernel] = {
            "numpy_only": ne, "numpy_only_cpu_s": cpu, "code": got.get("code", {}),
            "phases": {"import tack": t["import"] - n0, "the kernel's module": t["module"] - t["import"],
                       "first call": t["call"] - t["module"],
                       "exit, over NumPy-only's": (te - t["call"]) - (ne - n0)},
            "over_numpy": te - ne, "parts": parts}
    return res


def report(res):
    lines = [f"Warm process over a NumPy-only one, in instructions (callgrind; the site bundle for "
             f"{res['arch']}, empty user cache)", ""]
    for kernel, r in res["kernels"].items():
        rate = r["numpy_only"] / r["numpy_only_cpu_s"]           # instructions a second
        lines.append(f"{kernel}: NumPy-only process {r['numpy_only'] / 1e6:.2f} M instructions, "
                     f"{r['numpy_only_cpu_s'] * 1e3:.1f} ms of CPU natively "
                     f"({rate / 1e9:.2f} G/s)")
        lines.append(f"  {'phase':<40} {'M instr':>8} {'share':>6} {'~ms':>6}")
        for name, n in r["phases"].items():
            lines.append(f"  {name:<40} {n / 1e6:8.2f} {n / r['over_numpy']:6.1%} {n / rate * 1e3:6.2f}")
        n = r["over_numpy"]
        est = n / rate
        verdict = "met" if est <= dw.TARGET_OVER_NUMPY_S else "NOT met"
        lines.append(f"  {'whole process over NumPy-only':<40} {n / 1e6:8.2f} {1:6.1%} {est * 1e3:6.2f}"
                     f"   target {dw.TARGET_OVER_NUMPY_S * 1e3:.0f} ms: {verdict} (estimate)")
        lines.append(f"  warm process / NumPy-only process: {(r['numpy_only'] + n) / r['numpy_only']:.3f}x "
                     f"the instructions")
        lines.append("  of which, by what CPython does:")
        for name, m in r["parts"].items():
            lines.append(f"    {name:<38} {m / 1e6:8.2f} {m / n:6.1%} {m / rate * 1e3:6.2f}")
        code = r.get("code") or {}
        if code:
            big = sorted(code.items(), key=lambda kv: -kv[1])[:5]
            lines.append(f"  code it loads: {sum(code.values()) / 1024:.0f} KB marshalled in {len(code)} "
                         f"of Tack's modules (largest: "
                         + ", ".join(f"{m} {b / 1024:.0f}" for m, b in big) + ")")
        lines.append("")
    return "\n".join(lines)


def kernel_arguments(ap):
    """The options every callgrind script here takes: the two kernels' sizes, which kernels,
    ``--json`` (``warm_profile.py`` too)."""
    ap.add_argument("--size", type=int, default=21)
    ap.add_argument("--saxpy", type=int, default=100000)
    ap.add_argument("--kernels", default=",".join(KERNELS),
                    help="which kernels, comma-separated (default: %(default)s)")
    ap.add_argument("--json", action="store_true")


def parsed(ap, argv):
    """``ap``'s arguments, ``kernels`` as a list of known kernels (else the usage error)."""
    args = ap.parse_args(argv)
    args.kernels = [k for k in args.kernels.split(",") if k]
    unknown = [k for k in args.kernels if k not in KERNELS]
    if unknown or not args.kernels:
        ap.error(f"--kernels: {unknown[0] if unknown else 'none'} is not one of {', '.join(KERNELS)}")
    return args


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kernel_arguments(ap)
    ap.add_argument("--runs", type=int, default=9, help="native runs of the NumPy-only process")
    args = parsed(ap, argv)
    if not (shutil.which("valgrind") and shutil.which("callgrind_annotate")):
        print("warm_instructions: valgrind (callgrind) is not installed; nothing measured "
              "(Debian: apt-get install valgrind)")
        return 0
    with tempfile.TemporaryDirectory(prefix="tack-instr-") as tmp:
        res = measure(args, tmp)
    print(json.dumps(res, indent=1) if args.json else report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
