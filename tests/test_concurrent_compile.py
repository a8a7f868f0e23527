"""Threads making the first call of a kernel together: one compiles, the others wait for its
variant and run it; one cache session per process; different kernels compile side by side; and
the locks that make it so let a launch from a signal handler (or a finalizer) on a thread that
holds them go on."""

from __future__ import annotations

import _thread
import importlib
import inspect
import signal
import sys
import threading
import time

import numpy as np
import pytest

import tack
import tack.cache
import tack.compiler

from .util import run_script

THREADS = 8
N = 64


def _scale(a, out):
    i = tack.tid()
    out[i] = a[i] * 2.0 + 1.0


def _shift(a, out):
    i = tack.tid()
    out[i] = a[i] - 3.0


def _late(a, out):
    i = tack.tid()
    out[i] = a[i] * _LATE        # noqa: F821 - a compile error until a test defines it


def fresh(fn):
    """A new kernel of ``fn``: no variant compiled yet in this process."""
    return tack.kernel(fn)


@pytest.fixture
def cache_mode(request, tmp_path, monkeypatch):
    """The cache off, or on over an empty directory; settings and session forgotten around."""
    monkeypatch.setenv("TACK_CACHE_DIR", str(tmp_path / "cache"))
    if request.param == "off":
        monkeypatch.setenv("TACK_CACHE", "off")
    else:
        monkeypatch.delenv("TACK_CACHE", raising=False)
    tack.cache._reset_for_tests()
    yield request.param
    tack.cache._reset_for_tests()


def _together(jobs):
    """Run each of ``jobs`` (callables) in a thread of its own, all released at once by a
    barrier; -> their results in order (an exception in one is raised here)."""
    barrier = threading.Barrier(len(jobs))
    results, errors = [None] * len(jobs), []

    def run(i, job):
        try:
            barrier.wait()
            results[i] = job()
        except BaseException as e:          # noqa: BLE001 - raised in the test's thread below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _first_call(kernel, dtype=np.float64):
    def job():
        a = np.arange(N, dtype=dtype)
        out = np.zeros(N, dtype=dtype)
        tack.launch(kernel, N, (a, out))
        return a, out
    return job


def _count_sessions(monkeypatch, askers=0) -> list:
    """A list that gets an item each time a cache session is opened.  ``askers``: the opening
    waits until that many threads have asked ``tack.cache.session`` for one (those threads
    then ask while it is being opened)."""
    from tack.cache import stores
    opened, asked, all_asked = [], set(), threading.Event()
    real_open, real_session = stores.open_session, tack.cache.session

    def counting_open(*a, **kw):
        opened.append(threading.get_ident())
        if askers:
            assert all_asked.wait(timeout=120), "the other threads never asked for a session"
        return real_open(*a, **kw)

    def asking(*a, **kw):
        asked.add(threading.get_ident())
        if len(asked) >= askers:
            all_asked.set()
        return real_session(*a, **kw)
    monkeypatch.setattr(stores, "open_session", counting_open)
    monkeypatch.setattr(tack.cache, "session", asking)
    return opened


@pytest.mark.parametrize("cache_mode", ["off", "empty"], indirect=True)
def test_concurrent_first_calls_compile_once(cache_mode, monkeypatch):
    """Eight threads making the first call of one kernel with the same argument types at once:
    one compile (each thread compiled its own before, 8 of the same), one cache session, and
    every thread's result right."""
    opened = _count_sessions(monkeypatch)
    kernel = fresh(_scale)
    results = _together([_first_call(kernel)] * THREADS)
    for a, out in results:
        np.testing.assert_array_equal(out, a * 2.0 + 1.0)
    st = tack.cache.stats()
    assert st["compiled"] == 1
    assert len(kernel._variants) == 1
    if cache_mode == "off":
        assert opened == [] and tack.cache._session is False
    else:
        assert len(opened) == 1                         # one session, made by one thread
        assert st["misses"]["variant"] == 1 and st["hits"]["variant"] == 0
    before = st["compiled"]
    _first_call(kernel)()                               # the variant found: no compile
    assert tack.cache.stats()["compiled"] == before


@pytest.mark.parametrize("cache_mode", ["off", "empty"], indirect=True)
def test_concurrent_first_calls_of_two_variants(cache_mode):
    """Threads at two dtypes of one kernel at once: one compile per variant."""
    kernel = fresh(_scale)
    jobs = [_first_call(kernel, (np.float64, np.float32)[i % 2]) for i in range(THREADS)]
    for a, out in _together(jobs):
        np.testing.assert_array_equal(out, a * 2.0 + 1.0)
    assert tack.cache.stats()["compiled"] == 2
    assert len(kernel._variants) == 2


@pytest.mark.parametrize("cache_mode", ["off", "empty"], indirect=True)
def test_different_kernels_compile_side_by_side(cache_mode, monkeypatch):
    """Two kernels' first calls in threads at once: each compiled once, both right, one cache
    session (each kernel's compiling thread made its own before), and neither waits for the
    other's compile (each compile waits, inside, for the other's to be under way: compiles
    serialized across kernels would never meet there)."""
    opened = _count_sessions(monkeypatch, askers=2)     # both compiling threads
    inside = threading.Barrier(2, timeout=120)
    met = []
    real = tack.compiler.compile_variant

    def meeting(lowered, *a, **kw):
        name = lowered.name
        with lock:
            first = name not in seen
            seen.add(name)
        if first:
            inside.wait()               # BrokenBarrierError (after 120 s) if compiles serialize
            met.append(name)
        return real(lowered, *a, **kw)
    lock, seen = threading.Lock(), set()
    monkeypatch.setattr(tack.compiler, "compile_variant", meeting)
    scale, shift = fresh(_scale), fresh(_shift)
    jobs = [_first_call(scale)] * (THREADS // 2) + [_first_call(shift)] * (THREADS // 2)
    results = _together(jobs)
    for a, out in results[:THREADS // 2]:
        np.testing.assert_array_equal(out, a * 2.0 + 1.0)
    for a, out in results[THREADS // 2:]:
        np.testing.assert_array_equal(out, a - 3.0)
    assert len(met) == 2
    assert tack.cache.stats()["compiled"] == 2
    assert len(opened) == (0 if cache_mode == "off" else 1)


class _CountedLock(_thread.RLock):
    """A kernel's compile lock that counts the threads come to it (each then has what it waits
    with, and waits, or compiles)."""

    def __init__(self):
        self.arrived = 0
        self.all_arrived = threading.Event()

    def __enter__(self):
        self.arrived += 1
        if self.arrived >= THREADS:
            self.all_arrived.set()
        return super().__enter__()


def _gated_lower(monkeypatch, kernel, first=None):
    """Count the compiles of ``kernel`` (calls of ``tack.compiler.lower``, the front end, which
    raises its CompileError); the first waits until every thread has come to the kernel's
    compile lock, then raises ``first`` if given.  -> the list of compiles."""
    locks = importlib.import_module("tack.launch")._locks      # (tack.launch: the function)
    lock = _CountedLock()
    monkeypatch.setitem(locks, id(kernel), lock)
    real, calls = tack.compiler.lower, []

    def gated(k, *a, **kw):
        calls.append(threading.get_ident())
        if len(calls) == 1:
            assert lock.all_arrived.wait(timeout=120), "the other threads never came"
            if first is not None:
                raise first
        return real(k, *a, **kw)
    monkeypatch.setattr(tack.compiler, "lower", gated)
    return calls


def _outcomes(jobs):
    """``_together``, each job's exception (any) returned as its result."""
    def catching(job):
        def run():
            try:
                return job()
            except BaseException as e:          # noqa: BLE001 - the test looks at each
                return e
        return run
    return _together([catching(job) for job in jobs])


@pytest.mark.parametrize("cache_mode", ["off", "empty"], indirect=True)
def test_threads_waiting_for_a_failed_compile_get_its_error(cache_mode, monkeypatch):
    """Eight threads' first calls of a kernel that does not compile: one compile, and each thread
    gets its CompileError (each waiting thread compiled it again in turn before, 8 compiles).
    A call made after it compiles again: once the name is defined, the kernel runs."""
    kernel = fresh(_late)
    calls = _gated_lower(monkeypatch, kernel)
    got = _outcomes([_first_call(kernel)] * THREADS)
    assert all(isinstance(e, tack.CompileError) for e in got), got
    assert len(calls) == 1
    assert "name '_LATE' is not defined" in str(got[0])
    assert {str(e) for e in got} == {str(got[0])}
    with pytest.raises(tack.CompileError, match="_LATE"):
        _first_call(kernel)()                           # later: compiled again, and refused
    assert len(calls) == 2
    monkeypatch.setitem(globals(), "_LATE", tack.constant(3.0))
    a, out = _first_call(kernel)()                      # the user defined it: compiled, run
    np.testing.assert_array_equal(out, a * 3.0)
    assert len(calls) == 3 and tack.cache.stats()["compiled"] == 1


@pytest.mark.parametrize("cache_mode", ["off"], indirect=True)
@pytest.mark.parametrize("fault", [MemoryError, OSError, KeyboardInterrupt])
def test_a_failure_not_the_kernels_lets_the_next_thread_compile(cache_mode, monkeypatch, fault):
    """The first compile of eight threads' first calls fails for a reason not the kernel's (out
    of memory, a file system's error, Ctrl-C): that thread gets it, the next waiting thread
    compiles, and the others run its variant."""
    kernel = fresh(_scale)
    calls = _gated_lower(monkeypatch, kernel, first=fault("not the kernel's fault"))
    got = _outcomes([_first_call(kernel)] * THREADS)
    failed = [e for e in got if isinstance(e, BaseException)]
    assert [type(e) for e in failed] == [fault], failed
    assert len(calls) == 2 and tack.cache.stats()["compiled"] == 1
    for a, out in (r for r in got if not isinstance(r, BaseException)):
        np.testing.assert_array_equal(out, a * 2.0 + 1.0)


class _Yielding(str):
    """A store's name that lets other threads run each time it is hashed: each time a count of
    hits per store (``variants_from``) looks its key up, between reading the count and writing
    it back."""

    def __hash__(self):
        time.sleep(0)                                   # the GIL let go: another thread runs
        return str.__hash__(self)


@pytest.mark.parametrize("cache_mode", ["empty"], indirect=True)
def test_threads_cache_hits_are_counted_exactly(cache_mode, monkeypatch):
    """Threads finding stored variants side by side (each launch a new kernel of one function:
    a lookup, a hit): ``stats()`` counts every hit, and every byte read, once.  The counts were
    ``+=`` on the stats' dicts without a lock, a read then a write: a thread switched out between
    the two lost another's count (``variants_from`` counted about 450 of 1,600 hits)."""
    from tack.cache import stores
    _first_call(fresh(_scale))()                        # stored
    tack.cache.reset_stats()
    _first_call(fresh(_scale))()                        # one hit: the bytes one lookup reads
    one = tack.cache.stats()
    assert one["hits"]["variant"] == 1 and one["compiled"] == 0
    per_hit = one["bytes_read"]
    tack.cache.reset_stats()
    monkeypatch.setattr(stores.DiskCache, "source", _Yielding(stores.DiskCache.source))
    launches = 200                                      # per thread
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)                         # a switch at nearly every chance
    try:
        def job():
            for _ in range(launches):
                _first_call(fresh(_scale))()
        _together([job] * THREADS)
    finally:
        sys.setswitchinterval(interval)
    st = tack.cache.stats()
    hits = THREADS * launches
    assert st["hits"]["variant"] == hits
    assert st["variants_from"] == {"cache directory": hits}
    assert st["bytes_read"] == hits * per_hit
    assert st["misses"] == {"lowered": 0, "variant": 0}
    assert st["compiled"] == 0


class _LoadedBundle:
    """What ``load_and_broadcast`` gives for this host's bundle: one holding nothing asked."""
    bytes_read, read_seconds, meta = 0, 0.0, {}

    def __len__(self):
        return 1

    def present(self):                  # (``Bundle.present``: the entries not lost to a cut)
        return 1

    def entry(self, kind, key, only=None):
        return None


def _lines(fn, text) -> set:
    """The file line numbers of ``fn``'s lines that hold ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return {first + k for k, line in enumerate(lines) if text in line}


def _pausing(code, lines, at_line):
    """A trace function (``sys.settrace``) that calls ``at_line()`` as ``code`` reaches one of
    ``lines``."""
    def local(frame, event, arg):
        if event == "line" and frame.f_lineno in lines:
            at_line()
        return local
    return lambda frame, event, arg: local if frame.f_code is code else None


@pytest.mark.parametrize("cache_mode", ["empty"], indirect=True)
def test_load_bundle_beside_a_threads_first_launch(cache_mode, monkeypatch):
    """``load_bundle()`` ending while another thread's first launch makes the CPU's cache session:
    the session gets the bundle.  load_bundle set what the session is made of (the bundle, and
    that it covers the CPU) without the cache's lock: here the launch's thread read no bundle,
    load_bundle then found no session to add it to, and the session had none (nor, as
    load_bundle covered the CPU, would it open the user's own)."""
    import tack.cache.bcast
    launched, resume = threading.Event(), threading.Event()
    session_set = _lines(tack.cache.session, "_session = made")
    locking = _lines(tack.cache.bcast.load_bundle, "with c._lock")     # (its work, bcast's)
    loaded = _LoadedBundle()
    results = []

    def launch_in_a_thread():
        def hold():                         # holding the cache's lock, the session about to be set
            launched.set()
            assert resume.wait(timeout=120)
        sys.settrace(_pausing(tack.cache.session.__code__, session_set, hold))
        try:
            results.append(_first_call(fresh(_scale))())
        finally:
            sys.settrace(None)
    thread = threading.Thread(target=launch_in_a_thread)

    def broadcast(*a, **kw):                # load_bundle read the bundle: the launch begins
        thread.start()
        assert launched.wait(timeout=120)
        return loaded, [], None
    monkeypatch.setattr(tack.cache.bcast, "load_and_broadcast", broadcast)
    # load_bundle, coming to the cache's lock the launch's thread holds, lets that thread go on
    sys.settrace(_pausing(tack.cache.bcast.load_bundle.__code__, locking,
                          lambda: launched.is_set() and resume.set()))
    try:
        assert tack.cache.load_bundle() == 1
    finally:
        sys.settrace(None)
        resume.set()
        thread.join()
    a, out = results[0]
    np.testing.assert_array_equal(out, a * 2.0 + 1.0)
    stores = tack.cache._session.stores
    assert [s.label for s in stores if getattr(s, "bundle", None) is loaded] == ["cache bundle"]


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="signal.SIGUSR1 does not exist on this platform (Windows): no signal can interrupt a thread inside a compile")
@pytest.mark.parametrize("cache_mode", ["off"], indirect=True)
def test_launch_from_a_signal_handler_inside_a_compile_of_the_same_kernel(cache_mode, monkeypatch):
    """A signal handler that launches the kernel the main thread is compiling (another variant,
    then the same one) re-enters the kernel's compile lock: it compiles and runs."""
    kernel = fresh(_scale)
    got = []

    def handler(signum, frame):
        for dtype in (np.float32, np.float64):
            got.append(_first_call(kernel, dtype)())
    real = tack.compiler.compile_variant
    raised = []

    def raising(*a, **kw):
        if not raised:
            raised.append(1)
            signal.raise_signal(signal.SIGUSR1)     # the handler runs here, on this thread
        return real(*a, **kw)
    monkeypatch.setattr(tack.compiler, "compile_variant", raising)
    old = signal.signal(signal.SIGUSR1, handler)
    try:
        a, out = _first_call(kernel)()
    finally:
        signal.signal(signal.SIGUSR1, old)
    np.testing.assert_array_equal(out, a * 2.0 + 1.0)
    assert [o.dtype for _, o in got] == [np.float32, np.float64]
    for a, out in got:
        np.testing.assert_array_equal(out, a * 2.0 + 1.0)
    assert tack.cache.stats()["compiled"] == 3     # the handler's two, then the main thread's


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="signal.SIGUSR1 does not exist on this platform (Windows): no signal can interrupt a thread inside a compile")
@pytest.mark.parametrize("cache_mode", ["off"], indirect=True)
def test_handler_inside_a_compile_does_not_wait_for_another_threads_compile(cache_mode, monkeypatch):
    """A launch from a signal handler on a thread already inside a compile does not wait for
    another thread's compile of the same variant (that thread may need a lock the interrupted
    thread holds: llvmlite's, the cache's): it compiles its own.  Here the other thread's
    compile waits for the main thread, which waited for it, before: the test failed at the
    other thread's timeout."""
    victim, other = fresh(_scale), fresh(_shift)
    in_victim, release = threading.Event(), threading.Event()
    real = tack.compiler.compile_variant
    calls = []

    def gated(lowered, *a, **kw):
        calls.append(threading.get_ident())
        if threading.current_thread() is not threading.main_thread() and len(calls) == 1:
            in_victim.set()
            release.wait(timeout=120)   # the main thread's handler, if it waits here, hangs until then
            waited.append(not release.is_set())
        elif threading.current_thread() is threading.main_thread() and not raised:
            raised.append(1)
            signal.raise_signal(signal.SIGUSR1)
        return real(lowered, *a, **kw)
    waited, raised, got = [], [], []

    def handler(signum, frame):
        got.append(_first_call(victim)())
    monkeypatch.setattr(tack.compiler, "compile_variant", gated)
    old = signal.signal(signal.SIGUSR1, handler)
    t = threading.Thread(target=lambda: got.append(_first_call(victim)()))
    try:
        t.start()
        assert in_victim.wait(timeout=120)
        a, out = _first_call(other)()           # its compile raises the signal
        release.set()
    finally:
        release.set()
        signal.signal(signal.SIGUSR1, old)
        t.join()
    np.testing.assert_array_equal(out, a - 3.0)
    assert len(got) == 2
    for a, out in got:
        np.testing.assert_array_equal(out, a * 2.0 + 1.0)
    assert waited == [False]


REENTER = r"""
import faulthandler, signal, sys
faulthandler.dump_traceback_later(60, exit=True)        # a deadlock: a traceback, then exit 1
import numpy as np
import tack


@tack.kernel
def k(a, out):
    i = tack.tid()
    out[i] = a[i] + 1.0


if sys.argv[1] == "cache":              # resolving the settings, making the session
    import tack.cache
    lock = tack.cache._lock
elif sys.argv[1] == "limits":           # a compile stage's recursion headroom
    import tack.limits
    lock = tack.limits._lock
elif sys.argv[1] == "capture":          # LLVM's stderr, captured to ask it whether it knows a CPU
    from tack.backends import cpu
    lock = cpu._capture_lock
else:                                   # LLVM's initialization and MCJIT
    from tack.backends import cpu
    lock = cpu._init_lock
got = []


def handler(signum, frame):             # the process's first launch: every lock on the way
    a = np.arange(8.0)
    out = np.zeros(8)
    tack.launch(k, 8, (a, out))
    ok = (out == a + 1.0).all()
    if sys.argv[1] == "capture":        # and a compile for a named arch, which asks LLVM
        from tack import aot
        ok = ok and aot.compile(k, "cpu:haswell", (a, out)).target == "cpu:haswell"
    got.append(ok)


signal.signal(signal.SIGUSR1, handler)
with lock:
    signal.raise_signal(signal.SIGUSR1)
print("ran" if got == [True] else f"wrong {got}")
"""


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="signal.SIGUSR1 does not exist on this platform (Windows): no signal can interrupt a thread inside a compile")
@pytest.mark.parametrize("lock", ["cache", "limits", "init", "capture"])
def test_launch_from_a_signal_handler_while_the_thread_holds_a_lock(tmp_path, lock):
    """A signal handler's launch on the thread that holds the cache's lock, the recursion
    headroom's or the CPU backend's around LLVM's initialization and MCJIT, or its compile for
    a named arch on a thread capturing what LLVM says of a CPU: each is re-entrant, so the
    handler's compile goes on (with plain locks it waited for its own thread for ever)."""
    p = run_script(tmp_path, "reenter.py", REENTER, lock)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip() == "ran", p.stdout + p.stderr[-2000:]


HANDLER_IN_THE_FIRST_IMPORTS = r"""
import faulthandler, os, signal, sys
faulthandler.dump_traceback_later(60, exit=True)
import numpy as np
import tack


@tack.kernel
def k(a, out):
    i = tack.tid()
    out[i] = a[i] + 1.0


said = []


def handler(signum, frame):
    a, out = np.arange(8.0), np.zeros(8)
    try:
        tack.launch(k, 8, (a, out))
        said.append("ran" if (out == a + 1.0).all() else "wrong")
    except Exception as e:
        said.append(f"{type(e).__name__}: {e}")


def tracer(frame, event, arg):          # the signal comes inside the body of tack.cache.stores
    if event == "call" and frame.f_code.co_name == "<module>" and not said and \
            frame.f_code.co_filename.endswith(os.path.join("cache", "stores.py")):
        sys.settrace(None)
        signal.raise_signal(signal.SIGUSR1)
    return None


signal.signal(signal.SIGUSR1, handler)
a, out = np.arange(8.0), np.zeros(8)
sys.settrace(tracer)
tack.launch(k, 8, (a, out))
sys.settrace(None)
print("main", (out == a + 1.0).all())
for line in said:
    print("handler", line)
signal.raise_signal(signal.SIGUSR1)         # once the first launch is done
print("handler", said[-1])
"""


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="signal.SIGUSR1 does not exist on this platform")
def test_a_signal_handlers_launch_inside_the_first_launchs_imports_says_so(tmp_path):
    """A signal handler that launched while the process's first launch imported Tack's modules
    got them half made: ``ImportError: cannot import name 'TRACE' from partially initialized
    module 'tack.cache'`` (or 'open_session', 'digest'...), and the main launch could fail with it.
    The handler is told why and what to do; the main launch is right, and a launch from the
    handler after it runs."""
    p = run_script(tmp_path, "handler_in_imports.py", HANDLER_IN_THE_FIRST_IMPORTS)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == [
        "main True",
        "handler RuntimeError: tack.launch from a signal handler (or a finalizer) that ran while "
        "this process's first launch (or first compile) imported Tack's modules; launch a kernel once before "
        "installing the handler",
        "handler ran"], p.stdout + p.stderr[-2000:]
