"""One process for ``warm_profile.py``: ``python benchmarks/_profile_runner.py contour|saxpy SIZE
EVENTS_FILE``, run under ``valgrind --tool=callgrind --dump-before=os_getppid``.

A warm Tack process (``_instructions_runner.py``'s: the input built after NumPy's import, then
``import tack``, the kernel's module, the first call), with a marker at each boundary worth
counting: ``os.getppid()``, which nothing else in the process calls, so that callgrind writes
the instructions since the last marker to a file of its own.  The markers are put before and
after each of Tack's modules (the import image's loader, ``tack._image._Loader.exec_module``,
wrapped before ``import tack`` runs: the image module is loaded by hand first and registered as
``tack._image``, which ``tack/__init__`` then imports), around each run of the cyclic collector
(``gc.callbacks``) and each step of the first call
(``STEPS``: wrapped once their modules are imported, before the call).  The events, one per
line (``+name``, ``-name``), go to ``EVENTS_FILE``; then ``os._exit`` (the exit is
``warm_instructions.py``'s to count).  Not meant to be imported.
"""

import gc
import importlib
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (os.path.join(ROOT, "tests", "kernels"), os.path.join(ROOT, "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)
SITE = os.environ["TACK_BENCH_SITE"]            # the installed copy of Tack, found first
sys.path.insert(0, SITE)

# The first call's steps: (module, attribute path).  Each is looked up where the dispatcher or
# the store calls it from, so that the wrapped one is the one called.
STEPS = (("tack.launch", "typed_args"),
         ("tack.cache", "session"),
         ("tack.backends.cpu_runtime", "site_bundles"),
         ("tack.cache.keys", "keys"),
         ("tack.cache.stores", "DiskCache.read"),
         ("tack.cache.bundle", "SiteBundleStore.read"),
         ("tack.cache.stores", "check_deps"),
         ("tack.backends.cpu_runtime", "load"),
         ("tack.launch", "_variant"),
         ("tack.backends.cpu_runtime", "CPUVariant.run"))
# Imported before the call, so that the steps can be wrapped: their import is then counted as
# the modules' (the ``import`` stage of the first call), not inside a step.
FIRST_CALL_MODULES = ("tack.cache", "tack.cache.keys", "tack.cache.stores", "tack.cache.bundle",
                      "tack.cache.deps", "tack.backends", "tack.backends.cpu_runtime",
                      "tack.backends.cpu_levels", "tack.backends.variant")

EVENTS = []


def mark(event):
    EVENTS.append(event)
    os.getppid()                        # callgrind: --dump-before=os_getppid


def _marked(f, name):
    def marked(*args, **kwargs):
        mark("+" + name)
        try:
            return f(*args, **kwargs)
        finally:
            mark("-" + name)
    marked.__wrapped__ = f
    return marked


def main(argv):
    kernel, size, events_file = argv[0], int(argv[1]), argv[2]
    import _deployed_inputs as inputs
    args = inputs.make(kernel, size)
    # The collector runs where an allocation crosses its threshold, inside whatever is being
    # imported or run then: its runs are a row of their own, not that module's or step's.
    gc.callbacks.append(lambda phase, info: mark("+the collector" if phase == "start" else
                                                 "-the collector"))
    mark("+tack._image")
    spec = importlib.util.spec_from_file_location("tack._image", os.path.join(SITE, "tack", "_image.py"))
    image = importlib.util.module_from_spec(spec)
    sys.modules["tack._image"] = image
    spec.loader.exec_module(image)
    exec_module = image._Loader.exec_module

    def exec_marked(self, module):
        mark("+" + module.__name__)
        try:
            return exec_module(self, module)
        finally:
            mark("-" + module.__name__)
    image._Loader.exec_module = exec_marked
    mark("-tack._image")
    mark("+import tack")
    import tack  # noqa: F401
    mark("-import tack")
    mark("+the kernel's module")
    fn = inputs.function(kernel, "tack")
    mark("-the kernel's module")
    mark("+first call: Tack's imports")
    for name in FIRST_CALL_MODULES:
        importlib.import_module(name)
    mark("-first call: Tack's imports")
    for module, path in STEPS:
        owner = sys.modules[module]
        *head, attr = path.split(".")
        for part in head:
            owner = getattr(owner, part)
        setattr(owner, attr, _marked(getattr(owner, attr), path))
    mark("+first call")
    fn(*args)
    mark("-first call")
    with open(events_file, "w") as f:
        f.write("\n".join(EVENTS) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
