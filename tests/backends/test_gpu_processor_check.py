"""A GPU target whose processor the LLVM in use does not know is refused when it is made (LLVM
would build generic code for it, with a warning on stderr and nothing more: PTX of a too-old ISA,
a code object for no gfx), and every processor Tack's registry builds is known to this LLVM."""

import pytest

from tack.backends import cuda, hip, level_zero
from tack.backends.arch_names import KINDS, ArchError

MAKERS = {"cuda": lambda n: cuda.target(n, sass=False), "rocm": hip.target,
          "level_zero": level_zero.target}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_every_registry_processor_is_known_to_this_llvm(kind):
    for name in KINDS[kind].names():
        t = MAKERS[kind](f"{kind}:{name}")
        t.check_processor()                 # made without an ArchError, and checked again


@pytest.mark.parametrize("kind, unknown", [("cuda", "sm_999"), ("rocm", "gfx9999")])
def test_a_processor_llvm_does_not_know_is_refused(kind, unknown):
    t = MAKERS[kind](f"{kind}:{KINDS[kind].names()[0]}")
    t.settings = dict(t.settings, cpu=unknown)
    with pytest.raises(ArchError, match=rf"does not know the processor '{unknown}'.*newer llvmlite"):
        t.check_processor()


def test_aot_compile_for_an_unknown_processor_is_an_error_not_generic_code(monkeypatch):
    """``tack.aot.compile`` (what ``bundles build`` runs) for a GPU whose processor this LLVM does
    not know raises, instead of writing generic code with only LLVM's warning on stderr."""
    import numpy as np
    import tack
    import tack.aot
    from tack.backends import gpu
    real = gpu.settings

    def settings(kind, arch):
        out = real(kind, arch)
        return dict(out, cpu="sm_999") if kind == "cuda" else out
    monkeypatch.setattr(gpu, "settings", settings)

    @tack.kernel
    def k_fill(out):
        out[tack.tid()] = 1.0
    with pytest.raises(ArchError, match="does not know the processor 'sm_999'"):
        tack.aot.compile(k_fill, "cuda:sm_90", (np.zeros(4),))


def test_an_unknown_feature_is_named_not_the_processor():
    """With a known processor and a feature this LLVM lacks (a PTX ISA newer than it), the error
    names the feature: it said the processor was unknown."""
    t = MAKERS["cuda"]("cuda:sm_90")
    t.settings = dict(t.settings, features="+ptx999")
    with pytest.raises(ArchError) as ei:
        t.check_processor()
    message = str(ei.value)
    assert "the feature '+ptx999'" in message and "processor" not in message


THREADS = r"""
import os, sys, threading
from tack.backends.cpu import llvm_unrecognized
cases = [("nvptx64-nvidia-cuda", "sm_90", "", []),
         ("nvptx64-nvidia-cuda", "sm_999", "", [("processor", "sm_999")]),
         ("nvptx64-nvidia-cuda", "sm_90", "+ptx999", [("feature", "+ptx999")]),
         ("x86_64-unknown-linux-gnu", "znver99", "+avx,+bogus", [("processor", "znver99"), ("feature", "+bogus")])]
wrong = []
def work(n):
    for r in range(40):
        triple, cpu, features, want = cases[(n + r) % len(cases)]
        got = llvm_unrecognized(triple, cpu, features)
        if sorted(got) != sorted(want):
            wrong.append((cpu, features, got))
threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
for t in threads: t.start()
for t in threads: t.join()
os.write(2, b"MARK-AFTER-THREADS\n")
print(len(wrong), wrong[:3])
"""


def test_concurrent_checks_answer_right_and_give_stderr_back(tmp_path):
    """The check redirects file descriptor 2 to read LLVM's warning.  Done from two threads at
    once, each saved the other's capture file as the real stderr, and one restored it for good:
    the process's stderr went to a deleted file, and answers were mixed up."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("TACK_")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-c", THREADS], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("0 []"), p.stdout
    assert "MARK-AFTER-THREADS" in p.stderr
    assert "not a recognized" not in p.stderr      # every warning was captured, none leaked
