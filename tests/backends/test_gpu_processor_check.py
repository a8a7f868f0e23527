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
