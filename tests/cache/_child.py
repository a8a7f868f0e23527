"""Run by the cache tests in a child process: launch kernels from a module file and print what happened as JSON.

Usage: python _child.py SPEC_JSON.  The spec names the directory holding the
kernel module, the module, the launches, and optional Python code to run
after the module is imported (``prelude``) and after the launches (``after``).
Warnings raised anywhere in the run are recorded; the JSON is the last line
of stdout.
"""

import importlib
import json
import sys
import warnings

# What only a compile needs: a warm hit imports none of it.
COMPILER = ("llvmlite.binding", "tack.frontend.lower", "tack.specialize", "tack.codegen", "tack.compiler",
            "tack.backends.cpu")


def main():
    spec = json.loads(sys.argv[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.path.insert(0, spec["src"])
        import numpy as np

        import tack
        import tack.cache

        mod = importlib.import_module(spec["module"])
        scope = {"mod": mod, "np": np, "tack": tack}
        exec(spec.get("prelude", ""), scope)
        results = []
        for launch in spec["launches"]:
            kern = getattr(mod, launch["kernel"])
            dtype = np.dtype(launch.get("dtype", "float64"))
            a = np.arange(launch["n"], dtype=dtype)
            out = np.zeros(launch["n"], dtype=dtype)
            args = (a, out)
            if launch.get("template"):
                args = (getattr(mod, launch["template"]),) + args
            tack.launch(kern, launch["n"], args)
            results.append({"kernel": launch["kernel"], "out": out.tolist(),
                            "timings": sorted(kern.timings)})
        exec(spec.get("after", ""), scope)
    report = {
        "results": results,
        "stats": tack.cache.stats(),
        "settings": {k: getattr(tack.cache.settings(), k) for k in ("directory", "mode", "max_size", "sources")},
        "warnings": [{"category": w.category.__name__, "message": str(w.message)} for w in caught],
        "modules": sorted(m for m in COMPILER if m in sys.modules),
        "extra": scope.get("extra"),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
