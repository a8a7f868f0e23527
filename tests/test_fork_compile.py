"""A process forked while another of its threads is inside LLVM (compiling a kernel) compiles in
the child: multiprocessing's "fork" start method, or os.fork(), with a compile under way in a
thread of the parent."""

from __future__ import annotations

import os

import pytest

from .util import run_script


FORK_WHILE_HELD = r"""
import os, sys, threading, time
import numpy as np
import tack
from tack.backends import cpu


@tack.kernel
def first(out):
    i = tack.tid()
    out[i] = i + 1.0


@tack.kernel
def second(out):
    i = tack.tid()
    out[i] = i * 2.0


if sys.argv[1] != "cache":              # the compiler loaded, as in a parent that compiled
    out = np.zeros(8)
    tack.launch(first, dim=out.size, args=(out,))

if sys.argv[1] == "llvm":               # llvmlite's lock, held by a thread inside an LLVM call
    from llvmlite.binding import ffi
    lock = ffi.lib._lock
elif sys.argv[1] == "init":             # Tack's lock around LLVM's initialization and MCJIT
    lock = cpu._init_lock
elif sys.argv[1] == "limits":           # the compiler's recursion headroom (each stage)
    import tack.limits
    lock = tack.limits._lock
elif sys.argv[1] == "kernel":           # the kernel's compile lock: another thread compiling it
    import importlib
    import _thread
    locks = importlib.import_module("tack.launch")._locks
    lock = locks.setdefault(id(second), _thread.RLock())
else:                                   # the cache's, while a first compile resolves its settings
    import tack.cache
    lock = tack.cache._lock
held, go = threading.Event(), threading.Event()


def inside_llvm():
    with lock:
        held.set()
        time.sleep(0.5)                 # the fork comes meanwhile


t = threading.Thread(target=inside_llvm)
t.start()
held.wait()
pid = os.fork()
if pid == 0:                            # the child: a new kernel compiles (LLVM called again)
    code = 1
    try:
        if sys.argv[1] == "init":
            cpu._initialize(all_targets=True)       # a GPU or another arch's target does this
        out = np.zeros(8)
        tack.launch(second, dim=out.size, args=(out,))
        code = 0 if (out == np.arange(8) * 2.0).all() else 2
    finally:
        os._exit(code)
t.join()
deadline = time.monotonic() + 60
while True:
    got, status = os.waitpid(pid, os.WNOHANG)
    if got:
        print("child exit", os.waitstatus_to_exitcode(status))
        break
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("child hung")
        break
    time.sleep(0.05)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork does not exist on this platform (Windows): there is no forked child to compile in")
@pytest.mark.parametrize("lock", ["llvm", "init", "limits", "cache", "kernel"])
def test_child_forked_while_a_thread_is_inside_llvm_compiles(tmp_path, lock):
    """A fork while another thread held llvmlite's lock (every LLVM call takes it, and the GIL is
    released inside the call) left it held in the child by a thread that does not exist there:
    the child's first compile waited for it for ever (27 forks in 30 hung with a thread compiling
    in a loop in the parent). Now a fork waits for the LLVM call under way, and the child gets
    the lock free; the same for Tack's own lock around LLVM's initialization and MCJIT. Tack's
    short-held locks (the compiler's recursion headroom, the cache's settings) are made afresh in
    the child: one held by another thread at the fork hung the child's compile the same way; so
    is a kernel's compile lock, which another thread compiling that kernel holds."""
    p = run_script(tmp_path, "fork_while_held.py", FORK_WHILE_HELD, lock)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "child exit 0", p.stdout + p.stderr[-2000:]


FORK_WHILE_PAUSED = r"""
import gc, os, sys, threading
import numpy as np
import tack
import tack.compiler


@tack.kernel
def k(out):
    i = tack.tid()
    out[i] = i + 1.0


held, go = threading.Event(), threading.Event()


def compiling():                        # another thread inside a compile: the collector paused
    with tack.compiler.gc_paused():
        held.set()
        go.wait()


t = threading.Thread(target=compiling)
t.start()
held.wait()
assert not gc.isenabled()
pid = os.fork()
if pid == 0:                            # the child: its own compile, then the collector's state
    code = 1
    try:
        out = np.zeros(8)
        tack.launch(k, dim=out.size, args=(out,))
        print("child", "right" if (out == np.arange(8) + 1.0).all() else "wrong",
              "gc on" if gc.isenabled() else "gc off", flush=True)
        code = 0
    finally:
        os._exit(code)
go.set()
t.join()
_, status = os.waitpid(pid, 0)
print("parent", "gc on" if gc.isenabled() else "gc off", "child exit", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork does not exist on this platform (Windows): there is no forked child to compile in")
def test_child_forked_while_a_thread_compiles_turns_the_collector_back_on(tmp_path):
    """A child forked while another thread was compiling (the cyclic collector paused) inherits
    the collector off and the count of pauses under way, which no thread of the child ends: its
    own compile left the collector off for good.  The child now starts with no pause under way,
    and the collector back on."""
    p = run_script(tmp_path, "fork_while_paused.py", FORK_WHILE_PAUSED)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[:2] == ["child right gc on", "parent gc on child exit 0"], \
        p.stdout + p.stderr[-2000:]


FORK_WHILE_CAPTURING = r"""
import faulthandler, os, sys, threading, time
faulthandler.dump_traceback_later(60, exit=True)        # a deadlock: a traceback, then exit 1
import llvmlite.binding as llvm
from tack.backends import cpu

inside, go, forked = threading.Event(), threading.Event(), threading.Event()
real = llvm.Target.create_target_machine


def held_inside(self, *args, **kwargs):         # the capture's LLVM call, held until released
    inside.set()
    go.wait()
    return real(self, *args, **kwargs)


llvm.Target.create_target_machine = held_inside
capture = threading.Thread(target=cpu.llvm_unrecognized, args=(llvm.get_process_triple(), "generic"))
capture.start()
inside.wait()                                   # fd 2 is the capture's temporary file now
main = threading.main_thread().ident


def release():      # the capture goes on once the fork waits for its lock, or once it is made
    while not forked.is_set():
        frame = sys._current_frames().get(main)
        if frame is not None and frame.f_code.co_name == "before" and \
                frame.f_locals.get("lock") is cpu._capture_lock:
            break
        time.sleep(0.01)
    go.set()


threading.Thread(target=release, daemon=True).start()
pid = os.fork()
if pid == 0:
    os.write(2, b"the child's stderr\n")
    os._exit(0)
forked.set()
_, status = os.waitpid(pid, 0)
capture.join()
print("child exit", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork does not exist on this platform (Windows): there is no forked child")
def test_child_forked_while_a_thread_captures_llvms_stderr_keeps_its_stderr(tmp_path):
    """A fork while another thread asked LLVM about a CPU (``cpu.llvm_unrecognized`` has fd 2 on a
    temporary file around the call) left the child's fd 2 on that file for good: what the child
    wrote to stderr was lost.  Now the fork waits for the capture to end (its lock is one of those
    a fork waits for), and the child's stderr is the real one."""
    p = run_script(tmp_path, "fork_while_capturing.py", FORK_WHILE_CAPTURING)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "child exit 0", p.stdout + p.stderr[-2000:]
    assert "the child's stderr" in p.stderr, p.stderr[-2000:]


FORK_INSIDE_THE_FIRST_IMPORTS = r"""
import faulthandler, os, sys, threading
import numpy as np
import tack


@tack.kernel
def first(out):
    i = tack.tid()
    out[i] = i + 1.0


if sys.argv[1] == "prime":          # the kernel stored: the first launch below loads it
    tack.launch(first, dim=8, args=(np.zeros(8),))
    sys.exit(0)
paused, go = threading.Event(), threading.Event()
inside = os.path.join(*sys.argv[2].split("/"))


def tracer(frame, event, arg):      # the thread stops inside the body of that module
    if event == "call" and frame.f_code.co_name == "<module>" and \
            frame.f_code.co_filename.endswith(inside):
        paused.set()
        go.wait(3.0)                # (a fork that waits for the imports waits for this)
    return None


def first_launch():
    sys.settrace(tracer)
    tack.launch(first, dim=8, args=(np.zeros(8),))


t = threading.Thread(target=first_launch)
t.start()
assert paused.wait(60), "the first launch never imported " + inside
pid = os.fork()
if pid == 0:
    faulthandler.dump_traceback_later(30, exit=True)
    out = np.zeros(8)
    tack.launch(first, dim=8, args=(out,))
    os._exit(0 if (out == np.arange(1.0, 9.0)).all() else 3)
go.set()
t.join()
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork does not exist on this platform")
@pytest.mark.parametrize("primed,inside", [(True, "cache/stores.py"), (False, "codegen.py"),
                                           (False, "llvmlite/binding/targets.py")])
def test_child_forked_while_a_thread_makes_the_first_launchs_imports_launches(tmp_path, primed,
                                                                              inside):
    """A fork while another thread was inside the process's first launch's imports of Tack's
    modules (tack.cache.stores here, the kernel stored) left the child that module's import
    lock, held by a thread it does not have: the child's first launch hung for good.  A fork now
    waits for those imports, and for those of the process's first compile (the kernel not
    stored: tack.codegen, LLVM's binding): a child's launch then compiles."""
    if primed:
        done = run_script(tmp_path, "fork_in_imports.py", FORK_INSIDE_THE_FIRST_IMPORTS, "prime",
                          inside)
        assert done.returncode == 0, done.stderr[-3000:]
    p = run_script(tmp_path, "fork_in_imports.py", FORK_INSIDE_THE_FIRST_IMPORTS, "fork", inside,
                   timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "child 0", (p.stdout, p.stderr[-3000:])


COMPILE_IMPORTS_ALL = r"""
import importlib, sys
import numpy as np
import tack
from tack.kernels import contour as mc

launch = importlib.import_module("tack.launch")


@tack.kernel
def saxpy(x, y, a):
    i = tack.tid()
    y[i] = a * x[i] + y[i]


launch._first_imports("cpu")
launch._imports(2, launch._import_compiler)
field = np.random.default_rng(1).random((9, 9, 9), dtype=np.float32)
before = set(sys.modules)
x = np.arange(8.0)
tack.launch(saxpy, dim=8, args=(x, x.copy(), 2.0))
mc.contour(field, 0.5)
print(sorted(set(sys.modules) - before))
"""


@pytest.mark.parametrize("cache", ["write", "off"])
def test_a_compile_imports_nothing_after_the_imports_a_fork_waits_for(tmp_path, cache):
    """``compiler.COMPILE_MODULES``, which a fork waits for at the first compile, is all a compile
    imports: after them, compiling saxpy and the contour's kernels (and storing them) imports no
    module, so none is left half made in a child forked meanwhile."""
    script = f"import os\nos.environ['TACK_CACHE'] = '{cache}'\n" + COMPILE_IMPORTS_ALL
    p = run_script(tmp_path, "compile_imports.py", script)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout


FIRST_COMPILE_STAGES = r"""
import json, time
import numpy as np
import tack
import tack.compiler

made = tack.compiler.import_all


def slow_imports():                 # the compiler's imports, made to take a second
    made()
    time.sleep(1.0)


tack.compiler.import_all = slow_imports


@tack.kernel
def fill(out):
    i = tack.tid()
    out[i] = 1.0


tack.launch(fill, dim=4, args=(np.zeros(4),))
print(json.dumps(fill.timings))
"""


def test_the_first_compiles_imports_are_its_import_stage(tmp_path):
    """The imports of the process's first compile (the ones a fork waits for) are the first call's
    "import" stage (TACK_TIMING); they were booked to the next stage, "cache" (the lowered
    kernel's lookup), 80-100 ms of it."""
    import json
    p = run_script(tmp_path, "stages.py", FIRST_COMPILE_STAGES)
    assert p.returncode == 0, p.stderr[-3000:]
    stages = json.loads(p.stdout.strip().splitlines()[-1])
    assert stages["import"] >= 1.0 and stages.get("cache", 0.0) < 1.0, stages
