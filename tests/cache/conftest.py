"""Fixtures and helpers for the kernel cache tests: a private cache per test, kernel modules in files, child processes.

Settings are resolved once per process, so every test gets a fresh
TACK_CACHE_DIR under its tmp_path and ``tack.cache._reset_for_tests()``
around it.  Behaviour across processes is checked by running ``_child.py``
in a subprocess, which imports a kernel module written to a temporary
directory (the front end reads source, so kernels must live in files),
launches kernels and prints JSON: outputs, ``tack.cache.stats()``, each
kernel's ``timings`` stages and the warnings raised.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tack.cache
from tack.cache import entry, keys

CHILD = Path(__file__).with_name("_child.py")
ENV_VARS = ("TACK_CACHE_DIR", "TACK_CACHE", "TACK_CACHE_SIZE", "TACK_CACHE_LOG", "TACK_DEBUG",
            "TACK_TIMING", "TACK_NUM_THREADS", "XDG_CACHE_HOME")
# An MPI or Slurm launcher's variables would make Tack default to bundle mode: no test inherits them.
LAUNCHER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "MPI_", "I_MPI_", "MPICH_", "HYDRA_", "MV2_", "SLURM_",
                     "PALS_", "ALPS_")
KIND_OF_LEVEL = {"lowered": entry.KIND_LOWERED, "variants": entry.KIND_VARIANT}


def _inherited(name: str) -> bool:
    return name not in ENV_VARS and not name.startswith(LAUNCHER_PREFIXES)

# ---------------------------------------------------------------------------------------------
# The kernel module most tests use; edits are made with ``edit`` (exact, checked replacements).
# ---------------------------------------------------------------------------------------------

KMOD = textwrap.dedent('''\
    """Kernels for the cache tests."""
    import numpy as np
    import tack

    SCALE = tack.constant(np.float64(3.0))
    OFFSET = tack.constant(0.5)


    def unrelated(x):
        return x + 1


    @tack.func
    def inner(x):
        return x * 2.0 + OFFSET


    @tack.func
    def middle(x):
        return inner(x) + 1.0


    @tack.kernel
    def k_main(a, out):
        i = tack.tid()
        out[i] = middle(a[i]) * SCALE


    @tack.kernel
    def k_other(a, out):
        i = tack.tid()
        out[i] = a[i] * a[i] - 1.0


    class Policy:
        @staticmethod
        def apply(x):
            return x * 10.0


    @tack.kernel
    def k_tmpl(policy, a, out):
        i = tack.tid()
        out[i] = policy.apply(a[i]) + 1.0
    ''')

KMOD_LAUNCHES = [{"kernel": "k_main", "n": 5}, {"kernel": "k_other", "n": 5},
                 {"kernel": "k_tmpl", "n": 5, "template": "Policy"}]


def expect_main(a, scale=3.0, mul=2.0, offset=0.5, plus=0.0):
    return ((a * mul + offset) + 1.0) * scale + plus


EXPECTED = {"k_main": expect_main, "k_other": lambda a: a * a - 1.0, "k_tmpl": lambda a: a * 10.0 + 1.0}


def edit(source: str, old: str, new: str) -> str:
    """``source`` with the one occurrence of ``old`` replaced by ``new``."""
    assert source.count(old) == 1, f"{old!r} must occur exactly once"
    return source.replace(old, new)


def many_kernels_source(n: int = 20) -> str:
    """A module of ``n`` distinct kernels k00, k01, ...: out[i] = a[i] * j + j."""
    parts = ['"""Many small kernels for the size tests."""', "import tack", ""]
    for j in range(n):
        parts += ["", "@tack.kernel", f"def k{j:02d}(a, out):", "    i = tack.tid()",
                  f"    out[i] = a[i] * {j}.0 + {j}.0", ""]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Child processes
# ---------------------------------------------------------------------------------------------

@dataclass
class Run:
    """A finished child process; ``data`` is the JSON report of ``_child.py``."""
    rc: int
    stdout: str
    stderr: str

    @property
    def data(self) -> dict:
        assert self.rc == 0, f"child failed (rc {self.rc}):\n{self.stderr[-4000:]}"
        return json.loads(self.stdout.strip().splitlines()[-1])

    @property
    def results(self) -> list:
        return self.data["results"]

    def result(self, kernel: str, nth: int = 0) -> dict:
        """The ``nth`` launch of ``kernel`` in this run."""
        return [r for r in self.results if r["kernel"] == kernel][nth]

    @property
    def stats(self) -> dict:
        return self.data["stats"]

    @property
    def warnings(self) -> list:
        return self.data["warnings"]


def child_env(cache_dir, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if _inherited(k)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"      # a kernel module edited within a second must not load a stale .pyc
    if cache_dir is not None:
        env["TACK_CACHE_DIR"] = str(cache_dir)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def child_argv(src, launches, module="kmod", prelude="", after="") -> list:
    spec = {"src": str(src), "module": module, "launches": launches, "prelude": prelude, "after": after}
    return [sys.executable, str(CHILD), json.dumps(spec)]


def drop_dac_caps():
    """preexec_fn: as root, drop the capabilities that bypass file permissions (so chmod 0500 holds)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):       # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, cap, 0, 0, 0) != 0:     # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_child(cache_dir, src, launches, module="kmod", prelude="", after="", env=None,
              timeout=120, **popen) -> Run:
    """Run ``_child.py`` with TACK_CACHE_DIR=cache_dir (and ``env`` on top) and wait for it."""
    p = subprocess.run(child_argv(src, launches, module, prelude, after),
                       env=child_env(cache_dir, **(env or {})), capture_output=True, text=True,
                       timeout=timeout, **popen)
    return Run(p.returncode, p.stdout, p.stderr)


def run_cli(cache_dir, *args, env=None, **popen) -> Run:
    p = subprocess.run([sys.executable, "-m", "tack.cache", *args],
                       env=child_env(cache_dir, **(env or {})), capture_output=True, text=True,
                       timeout=120, **popen)
    return Run(p.returncode, p.stdout, p.stderr)


def write_module(directory: Path, source: str, name: str = "kmod") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(source)
    return directory


def check_results(run: Run, expected=EXPECTED):
    """Every launch of ``run`` produced expected[kernel](arange(n))."""
    for r in run.data["results"]:
        n = len(r["out"])
        want = expected[r["kernel"]](np.arange(n, dtype=np.float64))
        np.testing.assert_allclose(r["out"], want, err_msg=r["kernel"])


def compiled(result) -> bool:
    """Whether a launch compiled (ran LLVM) rather than loading its variant."""
    return "llvm" in result["timings"]


HIT_STAGES = {"import", "find", "read", "deps", "load", "variant", "threads", "launch"}


def loaded(result) -> bool:
    """Whether a launch loaded its variant: its entry read and its dependency record checked, and
    only a hit's stages (no front end, no LLVM)."""
    return "deps" in result["timings"] and set(result["timings"]) <= HIT_STAGES


# ---------------------------------------------------------------------------------------------
# Inspecting a cache directory
# ---------------------------------------------------------------------------------------------

def entry_files(root) -> list[Path]:
    """Every file under the version directories' lowered/ and variants/ levels."""
    root = Path(root)
    return sorted(p for p in root.glob("*/*/*/*") if p.is_file() and p.parts[-3] in KIND_OF_LEVEL)


def decode_entry(path: Path):
    """entry.decode of an entry file with its kind and the key its name gives."""
    kind = KIND_OF_LEVEL[path.parts[-3]]
    key = path.name.split(".")[0]
    return entry.decode(path.read_bytes(), kind, key)


def entries_by_kernel(root) -> dict:
    """(level, kernel name) -> [entry paths], from each entry's metadata."""
    out = {}
    for p in entry_files(root):
        _, meta, _ = decode_entry(p)
        out.setdefault((p.parts[-3], meta["kernel"].rsplit(".", 1)[-1]), []).append(p)
    return out


def one_entry(root, level, kernel) -> Path:
    paths = entries_by_kernel(root)[(level, kernel)]
    assert len(paths) == 1, paths
    return paths[0]


def snapshot(root) -> dict:
    """path -> (size, mtime_ns) of every file below ``root`` (following a top-level symlink)."""
    root = Path(os.path.realpath(root))
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def clone(src: Path, dst: Path) -> Path:
    """Copy a cache directory, keeping modes and modification times."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


def import_file(path: Path, name: str):
    """Import the module at ``path`` under ``name`` (in-process tests)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------

_VERSION_AT_START = pytest.StashKey[str]()
FAULT_TOTALS = pytest.StashKey[dict]()       # test_fault_injection.py's cases: class -> [run, held]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    totals = config.stash.get(FAULT_TOTALS, None)
    if totals:
        run = sum(r for r, _ in totals.values())
        held = sum(h for _, h in totals.values())
        classes = ", ".join(f"{name} {h}/{r}" for name, (r, h) in totals.items())
        terminalreporter.write_line(f"fault injection: {run} cases run, {held} held ({classes})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, say if tack/ was edited while the test ran: entries stored before the edit belong to another version."""
    outcome = yield
    report = outcome.get_result()
    cases = getattr(getattr(item, "module", None), "FAULT_CASES", {})
    counted = report.when == "call" or (report.when == "setup" and report.failed)   # a broken fixture: run, not held
    if counted and getattr(item, "originalname", None) in cases:
        totals = item.config.stash.setdefault(FAULT_TOTALS, {})
        counts = totals.setdefault(cases[item.originalname], [0, 0])
        counts[0] += 1
        counts[1] += report.passed
    before = item.stash.get(_VERSION_AT_START, None)
    if report.when == "call" and report.failed and before is not None:
        now = current_version()
        if now != before:
            report.sections.append(("tack/ was edited during this test",
                                    f"Tack's version id changed from {before} to {now} while the test ran; "
                                    "entries stored before the edit are another version's: rerun"))


@pytest.fixture(autouse=True)
def cache_dir(request, tmp_path, monkeypatch):
    """A fresh TACK_CACHE_DIR (not yet created) and settings forgotten before and after the test."""
    request.node.stash[_VERSION_AT_START] = current_version()
    d = tmp_path / "cache"
    for var in [v for v in os.environ if not _inherited(v)]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TACK_CACHE_DIR", str(d))
    tack.cache._reset_for_tests()
    yield d
    tack.cache._reset_for_tests()


@dataclass
class Stored:
    """A cache filled by a first (cold) process, kept pristine: tests clone it."""
    cache: Path
    src: Path
    source: str
    cold: Run


def _store(base: Path, source: str, launches, module="kmod") -> Stored:
    src = write_module(base / "src", source, module)
    cache = base / "cache"
    cold = run_child(cache, src, launches, module=module)
    assert cold.rc == 0, cold.stderr
    return Stored(cache, src, source, cold)


def current_version() -> str:
    """Tack's version id as a new process computes it now (a checkout's id changes with every edit of tack/)."""
    return keys.source_version_id()


@pytest.fixture(scope="session")
def _stored_pool():
    """Stored caches made so far, by (name, Tack version id): an edit of tack/ between tests gets fresh ones."""
    return {}


def stored(pool, factory, name, source, launches, module) -> Stored:
    key = (name, current_version())
    if key not in pool:
        pool[key] = _store(factory.mktemp(f"stored-{name}"), source, launches, module)
    return pool[key]


@pytest.fixture
def stored_kmod(_stored_pool, tmp_path_factory) -> Stored:
    """KMOD's three kernels (k_main, k_other, k_tmpl) launched once on arange(5) by a cold process."""
    return stored(_stored_pool, tmp_path_factory, "kmod", KMOD, KMOD_LAUNCHES, "kmod")


def stored_many_in(pool, factory) -> Stored:
    """Twenty distinct small kernels k00..k19 launched once on arange(4) by a cold process."""
    launches = [{"kernel": f"k{j:02d}", "n": 4} for j in range(20)]
    return stored(pool, factory, "many", many_kernels_source(20), launches, "kmany")


@pytest.fixture
def stored_many(_stored_pool, tmp_path_factory) -> Stored:
    """Twenty distinct small kernels launched once by a cold process."""
    return stored_many_in(_stored_pool, tmp_path_factory)


@pytest.fixture
def warm(stored_kmod, tmp_path):
    """A private copy of the stored KMOD cache: (cache dir, source dir holding the same kmod.py)."""
    cache = clone(stored_kmod.cache, tmp_path / "warm-cache")
    src = write_module(tmp_path / "src", KMOD)
    return cache, src
