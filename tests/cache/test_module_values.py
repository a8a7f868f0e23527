"""A number read as ``module.NAME`` is compiled in: editing it must make the next process compile again."""

import json
import os
import subprocess
import sys

KMOD = '''
import tack
import helpers


@tack.kernel
def scaled(x, y):
    i = tack.tid()
    y[i] = x[i] * helpers.SCALE
'''

SCRIPT = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import tack.cache, kmod
x = np.arange(4.0); y = np.zeros(4)
tack.launch(kmod.scaled, dim=4, args=(x, y))
print(json.dumps({"y": y.tolist(), "stats": tack.cache.stats()}))
'''


def run(src, cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["TACK_CACHE_DIR"] = str(cache)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(src)], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_editing_a_module_number_recompiles(tmp_path):
    """helpers.SCALE 2 -> 3: the second process does not reuse the kernel compiled with 2."""
    (tmp_path / "kmod.py").write_text(KMOD)
    (tmp_path / "helpers.py").write_text("SCALE = 2\n")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    first = run(tmp_path, cache)
    assert first["y"] == [0.0, 2.0, 4.0, 6.0]
    again = run(tmp_path, cache)
    assert again["stats"]["hits"]["variant"] == 1
    (tmp_path / "helpers.py").write_text("SCALE = 3\n")
    edited = run(tmp_path, cache)
    assert edited["y"] == [0.0, 3.0, 6.0, 9.0]
    assert edited["stats"]["hits"]["variant"] == 0
