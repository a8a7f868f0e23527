"""Tack's own ELF loader and the MCJIT fallback (tack/loader.py)."""

import ctypes
import struct
import subprocess
import sys

import numpy as np
import pytest

import tack
from tack import loader as elf
from tack.backends.cpu import host_target
from tack.codegen import generate
from tack.launch import typeof_arg
from tack.specialize import specialize

if sys.platform != "linux":
    pytest.skip("Tack's ELF loader runs on Linux only", allow_module_level=True)

TABLE = tack.constant(np.array([3.0, 1.0, 4.0, 1.0, 5.0]))


@tack.kernel
def mathy(x, y):
    i = tack.tid()
    y[i] = np.tan(x[i]) + np.exp(tack.float32(x[i])) + x[i] ** 2.5 + TABLE[i % 5]


def expected(x):
    return np.tan(x) + np.exp(x.astype(np.float32)).astype(np.float64) + x ** 2.5 + np.resize(TABLE.value, x.size)


def compile_object(n=64):
    """Object code and entry symbol for ``mathy`` on float64 arrays of ``n``."""
    x = np.zeros(n)
    # static shapes: each array's slot is its data pointer alone (no extents follow)
    types = tuple(typeof_arg("mathy", p, a, static=True) for p, a in zip(mathy.params, (x, x)))
    typed = specialize(mathy.lower({}, False), types, 1)
    target = host_target()
    gen = generate(typed, target, "tack_test_loader")
    return target.emit_object(target.optimize(gen.module)), gen.entry


def call(fn, x, y):
    slots = struct.pack("<QQqqq", x.ctypes.data, y.ctypes.data, x.size, 1, 1)
    fn(slots, 0, x.size)


class TestElfLoader:
    def test_runs_code_with_constants_and_libm_calls(self):
        """An object that reads a constant table and calls libm runs with the right results."""
        obj, entry = compile_object()
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
            elf.load(obj).address(entry))
        x = np.linspace(0.1, 1.2, 64)
        y = np.zeros(64)
        call(fn, x, y)
        np.testing.assert_allclose(y, expected(x), rtol=1e-6)

    def test_rejects_what_is_not_an_elf_object(self):
        """Bytes that are not a 64-bit little-endian relocatable ELF raise LoadError."""
        obj, _ = compile_object()
        with pytest.raises(elf.LoadError, match="not an ELF"):
            elf.load(b"garbage" + obj)
        with pytest.raises(elf.LoadError, match="64-bit"):
            elf.load(obj[:4] + b"\x01" + obj[5:])
        with pytest.raises(elf.LoadError, match="relocatable"):
            elf.load(obj[:16] + struct.pack("<H", 3) + obj[18:])

    def test_unknown_symbol_name_raises(self):
        """Asking for a symbol the object does not define raises LoadError."""
        obj, _ = compile_object()
        with pytest.raises(elf.LoadError, match="not defined"):
            elf.load(obj).address("no_such_symbol")

    def test_unsupported_relocation_is_refused(self):
        """An object with a relocation type the loader lacks is refused (damaged), never handed to LLVM; MCJIT itself still loads good objects."""
        obj, entry = compile_object()
        data = bytearray(obj)
        shoff, = struct.unpack_from("<Q", data, 40)
        shentsize, shnum, _ = struct.unpack_from("<HHH", data, 58)
        patched = False
        for i in range(shnum):
            s = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
            if s[1] == elf.SHT_RELA and s[5]:
                info_at = s[4] + 8
                info, = struct.unpack_from("<Q", data, info_at)
                # R_X86_64_64 -> R_X86_64_PC64 (24): valid for MCJIT, unknown to Tack's loader.
                if info & 0xFFFFFFFF == elf.R_X86_64_64:
                    struct.pack_into("<Q", data, info_at, (info & ~0xFFFFFFFF) | 24)
                    addend_at = s[4] + 16
                    patched = (addend_at, struct.unpack_from("<q", data, addend_at)[0], info)
                    break
        assert patched, "expected an R_X86_64_64 relocation in the object"
        with pytest.raises(elf.LoadError, match="relocation type 24") as ei:
            elf.load(bytes(data))
        assert not ei.value.well_formed
        with pytest.raises(elf.LoadError):
            elf.load_object(bytes(data), entry)
        # the MCJIT path, for objects of formats the loader does not read
        from tack.backends.cpu import load_mcjit
        addr = load_mcjit(obj, entry)
        fn = elf.ENTRY_TYPE(addr)
        x = np.linspace(0.1, 1.2, 64)
        y = np.zeros(64)
        call(fn, x, y)
        np.testing.assert_allclose(y, expected(x), rtol=1e-6)


def test_warm_path_loads_without_llvmlite(tmp_path):
    """Object code loads and runs in a process that never imports llvmlite."""
    obj, entry = compile_object(16)
    path = tmp_path / "k.o"
    path.write_bytes(obj)
    script = f"""
import struct, sys
import numpy as np
from tack.loader import load_object
fn = load_object(open({str(path)!r}, "rb").read(), {entry!r})
x = np.linspace(0.1, 1.2, 16); y = np.zeros(16)
fn(struct.pack("<QQqqq", x.ctypes.data, y.ctypes.data, 16, 1, 1), 0, 16)
assert "llvmlite" not in sys.modules, "llvmlite was imported"
print(repr(y.tolist()))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    y = np.array(eval(out.stdout))
    np.testing.assert_allclose(y, expected(np.linspace(0.1, 1.2, 16)), rtol=1e-6)


def test_aarch64_relocations_patch_the_right_bits():
    """ABS64 writes the address; MOVW_UABS_G0..G3 put each 16-bit piece into a MOVZ/MOVK's imm16
    field (bits 5-20) and leave the rest of the instruction alone (host-independent arithmetic)."""
    value = 0x1234_5678_9ABC_DEF0
    buf = (ctypes.c_uint64 * 1)()
    elf._relocate(ctypes.addressof(buf), elf.EM_AARCH64, elf.R_AARCH64_ABS64, value)
    assert buf[0] == value
    movz_x3 = 0xD2800003                                   # movz x3, #0 (hw field set per group below)
    for rtype, shift in sorted(elf._AARCH64_MOVW.items()):
        insn = (ctypes.c_uint32 * 1)(movz_x3 | (shift // 16) << 21)
        elf._relocate(ctypes.addressof(insn), elf.EM_AARCH64, rtype, value)
        assert (insn[0] >> 5) & 0xFFFF == (value >> shift) & 0xFFFF
        assert insn[0] & ~(0xFFFF << 5) == movz_x3 | (shift // 16) << 21
    with pytest.raises(elf.LoadError, match="relocation type 99"):
        elf._relocate(ctypes.addressof(buf), elf.EM_AARCH64, 99, value)


def test_failed_system_calls_report_errno():
    """The loader's calls go through the process's own symbols; a failure's errno is read back."""
    import errno
    mmap, mprotect, munmap = elf._libc_handle()
    assert mprotect(1, 4096, elf._PROT_READ) == -1          # an address not on a page boundary
    assert elf._errno() == errno.EINVAL
    base = mmap(None, 4096, elf._PROT_READ | elf._PROT_WRITE, elf._MAP_PRIVATE | elf._MAP_ANONYMOUS, -1, 0)
    assert base and mprotect(base, 4096, elf._PROT_READ) == 0 and munmap(base, 4096) == 0


def test_entry_points_pass_64_bit_bounds():
    """The entry type (ctypes' own memmove type, reused) hands a kernel its full 64-bit start and
    end: a kernel over a grid starting past 2**32 sees exactly those bounds."""
    assert elf.ENTRY_TYPE is type(ctypes.memmove)          # no new ctypes type is built per process

    @tack.kernel
    def bounds(out):
        i = tack.tid()
        out[0] = i

    out = np.zeros(1, dtype=np.int64)
    types = (typeof_arg("bounds", "out", out, static=True),)
    target = host_target()
    gen = generate(specialize(bounds.lower({}, False), types, 1), target, "tack_test_bounds")
    fn = elf.load_object(target.emit_object(target.optimize(gen.module)), gen.entry)
    start = (1 << 33) + 5
    fn(struct.pack("<Qqqq", out.ctypes.data, start + 1, 1, 1), start, start + 1)   # grid (start + 1,)
    assert out[0] == start
