"""One process for ``warm_instructions.py``:
``python benchmarks/_instructions_runner.py numpy|tack contour|saxpy SIZE STOP [--exit] [--check]``.

Builds the input after importing NumPy (as ``_deployed_runner.py`` does), then runs a warm
Tack process's phases in order up to ``STOP``: ``numpy`` (nothing of Tack's), ``import``
(``import tack``), ``module`` (the kernel's module) or ``call`` (the first call, made through
``sys.call_tracing`` so that callgrind's ``--toggle-collect=sys_call_tracing`` can count it
alone).  Then it leaves with ``os._exit`` (no interpreter exit counted), or with ``--exit``
through the interpreter's normal exit.  ``--check`` (not counted: run natively) checks the
result (exit status 3 if wrong) and prints one JSON line saying whether the call compiled or
imported archspec or LLVM's binding, and how much code each of Tack's modules it imported holds.  Not meant to be imported.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (os.path.join(ROOT, "tests", "kernels"), os.path.join(ROOT, "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)
if os.environ.get("TACK_BENCH_SITE"):               # the installed copy of Tack, found first
    sys.path.insert(0, os.environ["TACK_BENCH_SITE"])

STOPS = ("numpy", "import", "module", "call")


def _code_loaded() -> dict:
    """{Tack module imported: bytes of its code marshalled} (each compiled from its source now:
    what a warm process unmarshals, less what a group's shared constants save)."""
    import marshal
    got = {}
    for name, module in sorted(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.split(".")[0] == "tack" and path and path.endswith(".py"):
            with open(path, "rb") as f:
                got[name] = len(marshal.dumps(compile(f.read(), path, "exec")))
    return got


def main(argv):
    lib, kernel, size, stop = argv[0], argv[1], int(argv[2]), argv[3]
    import _deployed_inputs as inputs
    args = inputs.make(kernel, size)
    reach = STOPS.index(stop)
    fn = None
    if lib == "tack" and reach >= 1:
        import tack  # noqa: F401
    if lib == "tack" and reach >= 2:
        fn = inputs.function(kernel, lib)
    if fn is not None and reach >= 3:
        result = sys.call_tracing(fn, args)
        if "--check" in argv:           # not in a counted process: the check is no user's work
            if not inputs.check(kernel, args, result):
                sys.exit(3)
            import json
            import tack.cache
            st = tack.cache.stats()
            print(json.dumps({"ok": True, "hits": st["hits"]["variant"],
                              "misses": st["misses"]["variant"],
                              "archspec": "archspec" in sys.modules,
                              "llvm": "llvmlite.binding" in sys.modules,
                              "code": _code_loaded()}))
    sys.stdout.flush()
    if "--exit" not in argv:
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
