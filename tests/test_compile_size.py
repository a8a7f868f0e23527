"""Compile time linear in the kernel's size (issue 22), checked without timing anything: the
garbage collector is paused during a compile and restored after (even on an error), and
very long basic blocks are cut at the limit before instruction selection, with the code
computing what it did.  ``TACK_TEST_BLOCK_LIMIT=N`` cuts every block past ``N``
instructions in a whole process (its keys differ): run the language tests through it with

    TACK_TEST_BLOCK_LIMIT=4 python -m pytest tests/test_language.py tests/test_edge_semantics.py tests/kernels
"""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import numpy as np
import pytest

import tack
from tack import codegen, compiler
from tack.backends import cpu_identity, long_blocks
from tack.frontend import lower as lower_mod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def straight(n):
    """``n`` statements, a new variable each, every tenth an ``if`` (benchmarks/compile_scaling.py)."""
    lines = ["import tack", "@tack.kernel", "def k(out):", "    i = tack.tid()", "    x0 = out[i]"]
    for j in range(1, n):
        if j % 10 == 0:
            lines += [f"    x{j} = x{j - 1}", f"    if x{j} > 1e6:", f"        x{j} = x{j} * 0.5"]
        else:
            lines.append(f"    x{j} = x{j - 1} * 1.0000001 + {j % 7}.0")
    lines.append(f"    out[i] = x{n - 1}")
    return "\n".join(lines) + "\n"


def expected(n, start):
    out = np.array(start, dtype=np.float64)
    for idx in range(len(out)):
        x = out[idx]
        for j in range(1, n):
            if j % 10 == 0:
                if x > 1e6:
                    x = x * 0.5
            else:
                x = x * 1.0000001 + float(j % 7)
        out[idx] = x
    return out


START = [1.0, 2e6, 3.0, -5.0]


# -- the garbage collector ----------------------------------------------------------------------


def _spy(monkeypatch, module, name, seen, fail=False):
    real = getattr(module, name)

    def spy(*a, **kw):
        seen.append((name, gc.isenabled()))
        if fail:
            raise RuntimeError("injected")
        return real(*a, **kw)
    monkeypatch.setattr(module, name, spy)


def test_gc_is_paused_while_compiling_and_restored_after(tmp_path, monkeypatch):
    mod = load(tmp_path, "gc_on", straight(30))
    seen = []
    _spy(monkeypatch, lower_mod, "lower_kernel", seen)
    _spy(monkeypatch, codegen, "generate", seen)
    assert gc.isenabled()
    out = np.array(START)
    tack.launch(mod.k, dim=4, args=(out,))
    assert seen == [("lower_kernel", False), ("generate", False)]
    assert gc.isenabled()
    np.testing.assert_allclose(out, expected(30, START), rtol=1e-12)


@pytest.mark.parametrize("stage", ["lower_kernel", "generate"])
def test_gc_is_restored_after_a_failed_compile(tmp_path, monkeypatch, stage):
    mod = load(tmp_path, f"gc_fail_{stage}", straight(20))
    seen = []
    _spy(monkeypatch, lower_mod if stage == "lower_kernel" else codegen, stage, seen, fail=True)
    with pytest.raises(RuntimeError, match="injected"):
        tack.launch(mod.k, dim=4, args=(np.array(START),))
    assert seen == [(stage, False)]
    assert gc.isenabled()


def test_gc_left_off_when_the_user_turned_it_off(tmp_path, monkeypatch):
    mod = load(tmp_path, "gc_off", straight(20))
    gc.disable()
    try:
        tack.launch(mod.k, dim=4, args=(np.array(START),))
        assert not gc.isenabled()
    finally:
        gc.enable()


def _interrupted_pause(n):
    """``with compiler.gc_paused(): pass`` with a KeyboardInterrupt raised at the ``n``-th point of
    the pause's own code where CPython runs a signal handler (Ctrl-C): after a call returns, and
    at a function's start.  -> where it was raised (function, line), or None: fewer points."""
    import dis
    mine = {"__init__", "__enter__", "__exit__", "_end", "__del__"}
    seen, fired = [0], [None]

    def tracer(frame, event, arg):
        code = frame.f_code
        if code.co_name not in mine or code.co_filename != compiler.__file__:
            return None
        frame.f_trace_opcodes = True
        ops = {i.offset: i.opname for i in dis.get_instructions(code)}
        prev = [None]

        def local(frame, event, arg):
            if event == "opcode":
                op = ops.get(frame.f_lasti)
                checked = op == "RESUME" or (prev[0] or "").startswith("CALL")
                prev[0] = op
                if checked and fired[0] is None:
                    seen[0] += 1
                    if seen[0] == n:
                        fired[0] = (code.co_name, frame.f_lineno)
                        raise KeyboardInterrupt
            return local
        return local
    sys.settrace(tracer)
    try:
        with compiler.gc_paused():
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return fired[0]


def test_ctrl_c_anywhere_in_the_pause_leaves_the_collector_on():
    """Ctrl-C landing inside the pause's own bookkeeping (just after the collector went off, before
    the pause was counted; or as its end took the lock) left the collector off for the rest of
    the process, and every later compile took it for the user's own ``gc.disable()``.  A
    KeyboardInterrupt at each point where CPython can raise one there leaves no pause under way
    and the collector on."""
    points = []
    try:
        for n in range(1, 100):
            gc.enable()
            where = _interrupted_pause(n)
            if where is None:
                break
            points.append((where, compiler._GCPaused._depth, gc.isenabled()))
    finally:
        compiler._GCPaused._depth = 0
        gc.enable()
    assert len(points) >= 3, points
    assert [p for p in points if p[1:] != (0, True)] == [], points


def test_nested_pauses_restore_once_at_the_outermost():
    with compiler.gc_paused():
        with compiler.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


# -- long basic blocks --------------------------------------------------------------------------


IR = textwrap.dedent("""\
    define double @"f g"(double %a, i1 %c) {
    entry:
      %x1 = fadd double %a, 1.0
      %x2 = fadd double %x1, 1.0
      %x3 = fadd double %x2, 1.0
      %x4 = fadd double %x3, 1.0
      %x5 = fadd double %x4, 1.0
      br i1 %c, label %"long one", label %done

    "long one":
      %p = phi double [ %x5, %entry ], [ %y6, %"long one" ]
      %y1 = fmul double %p, 2.0
      %y2 = fmul double %y1, 2.0
      %y3 = fmul double %y2, 2.0
      %y4 = fmul double %y3, 2.0
      %y5 = fmul double %y4, 2.0
      %y6 = fmul double %y5, 0.5
      %k = fcmp olt double %y6, 1.0
      switch i32 0, label %done [
        i32 1, label %"long one"
      ]

    done:
      %r = phi double [ %x5, %entry ], [ %y6, %"long one" ]
      ret double %r
    }
    """)


def blocks(mod):
    fn = next(f for f in mod.functions if not f.is_declaration)
    return [(b.name, len(list(b.instructions))) for b in fn.blocks]


def test_long_blocks_are_cut_at_the_limit():
    llvm.initialize_native_target()
    text, cuts = long_blocks.cut(IR, 3)
    mod = llvm.parse_assembly(text)
    mod.verify()
    got = blocks(mod)
    assert cuts == 3                    # entry: 6 -> 3+1 | 3; "long one": 9 -> 3+1 | 3+1 | 3
    assert all(n <= 3 + 1 for _, n in got), got
    assert [n for n, _ in got].count("done") == 1
    last = [n for n, _ in got if n.startswith(long_blocks.PREFIX)][-1]
    assert f"%{last} ]" in text          # the phis name the block's last piece
    assert '%y6, %"long one" ]' not in text
    assert "!tack.cuts" in text


def test_blocks_within_the_limit_are_left_as_they_are():
    assert long_blocks.cut(IR, 9) == (IR, 0)


def test_cut_blocks_compute_what_they_did():
    """Cut or whole, the function returns the same."""
    import ctypes
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    results = []
    for limit in (None, 2):
        text = IR if limit is None else long_blocks.cut(IR, limit)[0]
        tm = llvm.Target.from_default_triple().create_target_machine()
        mod = llvm.parse_assembly(text)
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
        f = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_bool)(
            engine.get_function_address("f g"))
        results.append([f(3.0, True), f(3.0, False), f(0.25, True)])
        del engine
    assert results[0] == results[1]


def test_a_long_kernel_is_cut_before_instruction_selection(tmp_path, monkeypatch):
    """The CPU target cuts the optimized module's long blocks at its limit, and only then."""
    from tack.backends.cpu import host_target
    mod = load(tmp_path, "cut_kernel", straight(200))
    prep = compiler.prepare(mod.k, (np.array(START),))
    from tack.specialize import specialize
    typed = specialize(prep.lowered, prep.typed.value_types, 1)
    target = host_target()
    monkeypatch.setattr(target, "block_limit", 25)
    optimized = target.optimize(codegen.generate(typed, target, "tack_cut_test").module)
    sizes = [len(list(b.instructions)) for f in optimized.functions for b in f.blocks]
    assert max(sizes) <= 25 + 1
    assert any(b.name.startswith(long_blocks.PREFIX) for f in optimized.functions for b in f.blocks)
    monkeypatch.setattr(target, "block_limit", 100000)
    whole = target.optimize(codegen.generate(typed, target, "tack_cut_test").module)
    assert not any(b.name.startswith(long_blocks.PREFIX) for f in whole.functions for b in f.blocks)


def test_the_block_limit_enters_the_target_keys(monkeypatch):
    before = cpu_identity.arch_key("x86_64"), cpu_identity.host_key()
    monkeypatch.setitem(cpu_identity.LIMITS, "block", cpu_identity.LIMITS["block"] + 1)
    monkeypatch.setattr(cpu_identity, "_host_key", None)
    assert cpu_identity.arch_key("x86_64") != before[0]
    assert cpu_identity.host_key() != before[1]
    monkeypatch.setattr(cpu_identity, "_host_key", None)   # the next caller's, made afresh


def test_a_small_limit_runs_kernels_right(tmp_path):
    """A process with ``TACK_TEST_BLOCK_LIMIT`` cuts every long block and computes the same."""
    src = tmp_path / "run_cut.py"
    src.write_text(textwrap.dedent(f"""\
        import importlib.util, sys
        import numpy as np, tack
        from tack.backends import cpu_identity
        assert cpu_identity.LIMITS["block"] == 5
        spec = importlib.util.spec_from_file_location("kk", {str(tmp_path / "kk.py")!r})
        mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
        out = np.array({START!r})
        tack.launch(mod.k, dim=4, args=(out,))
        print(repr(out.tolist()))
        """))
    (tmp_path / "kk.py").write_text(straight(120))
    env = dict(os.environ, TACK_TEST_BLOCK_LIMIT="5", TACK_CACHE="off",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(src)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = eval(proc.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(got, expected(120, START), rtol=1e-12)
