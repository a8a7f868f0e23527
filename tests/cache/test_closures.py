"""Kernels made by a factory (closures over different values) keep separate cache entries."""

import json
import os
import subprocess
import sys
import textwrap

MODULE = textwrap.dedent('''
    import numpy as np
    import tack

    def make(value):
        gain = tack.constant(value)

        @tack.kernel
        def scaled(x, y):
            i = tack.tid()
            y[i] = x[i] * gain
        return scaled

    TWICE = make(2.0)
    THRICE = make(3.0)
''')

SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import tack.cache, kmod
    x = np.arange(5.0)
    a, b = np.zeros(5), np.zeros(5)
    tack.launch(kmod.TWICE, dim=5, args=(x, a))
    tack.launch(kmod.THRICE, dim=5, args=(x, b))
    print(json.dumps({"a": a.tolist(), "b": b.tolist(), "stats": tack.cache.stats()}))
''')


def run(tmp_path, cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["TACK_CACHE_DIR"] = str(cache)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_each_closure_loads_its_own_entry(tmp_path):
    """Two kernels from one factory, closing over 2.0 and 3.0: both load warm in a second process, with right results."""
    (tmp_path / "kmod.py").write_text(MODULE)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cold = run(tmp_path, cache)
    warm = run(tmp_path, cache)
    for r in (cold, warm):
        assert r["a"] == [0.0, 2.0, 4.0, 6.0, 8.0] and r["b"] == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert cold["stats"]["misses"]["variant"] == 2
    assert warm["stats"]["hits"]["variant"] == 2 and warm["stats"]["rejected"] == 0


UNBOUND = textwrap.dedent('''
    import tack

    def make(with_gain):
        if with_gain:
            gain = tack.constant(2.0)

        @tack.kernel
        def scaled(x, y):
            i = tack.tid()
            y[i] = x[i] * gain
        return scaled
''')


def test_a_closure_over_a_variable_with_no_value_is_a_compile_error(tmp_path):
    """``gain`` is never assigned: the kernel's cell is empty.  Its key read the cell and raised
    ValueError('Cell is empty') from keys.py (from the front end with the cache off), a traceback of
    Tack's; it is a CompileError naming the variable and the kernel's line."""
    import numpy as np
    import pytest

    import tack
    from .conftest import import_file
    (tmp_path / "kunbound.py").write_text(UNBOUND)
    mod = import_file(tmp_path / "kunbound.py", "kunbound")
    x, y = np.arange(3.0), np.zeros(3)
    with pytest.raises(tack.CompileError, match="'gain' is a variable of the enclosing function") as e:
        tack.launch(mod.make(False), dim=3, args=(x, y))
    assert e.value.lineno == 11 and e.value.filename.endswith("kunbound.py")
    tack.launch(mod.make(True), dim=3, args=(x, y))
    assert y.tolist() == [0.0, 2.0, 4.0]


SAME_NAMES = textwrap.dedent('''
    import numpy as np
    import tack

    def make(op):
        if op == "add":
            @tack.func
            def f(x):
                return x + 100.0
        else:
            @tack.func
            def f(x):
                return x * 1000.0
        return f

    f_add, f_mul = make("add"), make("mul")

    @tack.kernel
    def both(x, y):
        i = tack.tid()
        y[i] = f_add(x[i]) + f_mul(x[i])

    TWICE = THRICE = both
''')


def test_a_factorys_functions_of_one_name_are_loaded_warm(tmp_path):
    """A kernel calling a factory's two ``def f`` (one name, no closures, two functions): right
    in the first process, and loaded, not compiled again, in the next (the dependency record
    names each function as the next process does)."""
    (tmp_path / "kmod.py").write_text(SAME_NAMES)
    cache = tmp_path / "cache"
    want = [x + 100.0 + x * 1000.0 for x in range(5)]
    first, second = run(tmp_path, cache), run(tmp_path, cache)
    for r in (first, second):
        assert r["a"] == want and r["b"] == want, r
    assert first["stats"]["misses"]["variant"] == 1
    assert second["stats"]["hits"]["variant"] == 1 and second["stats"]["misses"]["variant"] == 0, second
    assert second["stats"]["rejected"] == 0
