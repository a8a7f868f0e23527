"""The contour runs with nothing compiled: a fresh process with an empty cache of its own and only
the package's bundles (argv[1], else what TACK_CACHE_BUNDLES names) gets every kernel variant from a bundle, and never loads LLVM."""
import os
import subprocess
import sys
import tempfile

SCRIPT = """
import sys, numpy as np, tack.cache
from tack.kernels.contour import contour
p = np.indices((21, 21, 21)).astype(np.float32)
f = np.sqrt(((p - 10.0) ** 2).sum(axis=0)).astype(np.float32)
v, faces = contour(f, 6.0)
s = tack.cache.stats()
print("contour:", len(faces), "triangles; cache hits", s["hits"], "misses", s["misses"])
assert len(faces) > 0
assert s["hits"]["variant"] == 2 and s["misses"]["variant"] == 0, s
assert "llvmlite.binding" not in sys.modules, "LLVM was loaded: something was compiled"
"""

bundles = sys.argv[1] if len(sys.argv) > 1 else os.environ["TACK_CACHE_BUNDLES"]
print("the environment says TACK_CACHE_BUNDLES =", os.environ.get("TACK_CACHE_BUNDLES"))
with tempfile.TemporaryDirectory() as own:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env.update(TACK_CACHE_DIR=os.path.join(own, "cache"), TACK_CACHE="read",
               TACK_CACHE_BUNDLES=bundles)
    subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True)
print("contour served from the package's bundle, nothing compiled")
