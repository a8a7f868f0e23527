"""Tack's own ELF loader and the MCJIT fallback (tack/backends/cpu_loader.py)."""

import ctypes
import platform
import struct
import subprocess
import sys

import numpy as np
import pytest

import tack
from tack.backends import cpu_loader as elf
from tack.backends.cpu import host_target
from tack.codegen import generate
from tack.argtypes import typeof_arg
from tack.compiler import lower
from tack.specialize import specialize

from .elf_util import HEADER_FIELDS, Elf, load_in_child

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
    typed = specialize(lower(mathy, {}, False), types, 1)
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
from tack.backends.cpu_runtime import load
fn = load(open({str(path)!r}, "rb").read(), {{"entry": {entry!r}}}, "cpu")
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
    image = bytearray(12)
    elf._relocate(image, 4, elf.EM_AARCH64, elf.R_AARCH64_ABS64, value)
    assert struct.unpack_from("<Q", image, 4)[0] == value and image[:4] == bytes(4)
    movz_x3 = 0xD2800003                                   # movz x3, #0 (hw field set per group below)
    for rtype, shift in sorted(elf._AARCH64_MOVW.items()):
        insn = bytearray(struct.pack("<I", movz_x3 | (shift // 16) << 21))
        elf._relocate(insn, 0, elf.EM_AARCH64, rtype, value)
        got, = struct.unpack("<I", insn)
        assert (got >> 5) & 0xFFFF == (value >> shift) & 0xFFFF
        assert got & ~(0xFFFF << 5) == movz_x3 | (shift // 16) << 21
    with pytest.raises(elf.LoadError, match="relocation type 99"):
        elf._relocate(image, 0, elf.EM_AARCH64, 99, value)

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
    gen = generate(specialize(lower(bounds, {}, False), types, 1), target, "tack_test_bounds")
    fn = elf.load_object(target.emit_object(target.optimize(gen.module)), gen.entry)
    start = (1 << 33) + 5
    fn(struct.pack("<Qqqq", out.ctypes.data, start + 1, 1, 1), start, start + 1)   # grid (start + 1,)
    assert out[0] == start


# -- damaged objects: each is refused before anything is mapped or written (issue 14) --------

@pytest.fixture(scope="module")
def mathy_elf():
    return compile_object()[0]


def refused(data, match):
    with pytest.raises(elf.LoadError, match=match) as ei:
        elf.load(bytes(data))
    assert not ei.value.well_formed, "a damaged object must never be handed to LLVM"


def test_huge_uninitialised_section_cannot_wrap_the_mapping(mathy_elf):
    """A writable NOBITS section of 2**64 - 4096 bytes made the layout's total wrap to one page
    (mmap takes a size_t), and the read-only sections were then copied past the mapping; it is
    refused before anything is mapped (in a child process: the old loader crashed there)."""
    e = Elf(mathy_elf)
    i = e.index(".note.GNU-stack")
    e.set_section(i, "name", 0)                   # a name the loader does not skip
    e.set_section(i, "type", elf.SHT_NOBITS)
    e.set_section(i, "flags", elf.SHF_ALLOC | elf.SHF_WRITE)
    e.set_section(i, "size", 2**64 - 4096)
    got = load_in_child(e.data)
    assert got["outcome"] == "LoadError" and not got["well_formed"], got
    assert "more than the loader maps" in got["message"]


def test_sections_over_the_mapping_cap_are_refused(mathy_elf):
    """Each section may be up to 1 GiB, but not all of them together: the layout stops at the cap."""
    e = Elf(mathy_elf)
    i = e.index(".note.GNU-stack")
    e.set_section(i, "name", 0)
    e.set_section(i, "type", elf.SHT_NOBITS)
    e.set_section(i, "flags", elf.SHF_ALLOC | elf.SHF_WRITE)
    e.set_section(i, "size", elf._MAX_TOTAL)
    refused(e.data, "need more than")


@pytest.mark.parametrize("align", [3, 8192, 2**63])
def test_bad_alignment_is_refused(mathy_elf, align):
    """An alignment that is not a power of two, or more than the page the groups start on (which
    the layout could not honour: aligned loads of the constants would fault), is refused."""
    e = Elf(mathy_elf)
    e.set_section(e.index(".lrodata"), "align", align)
    refused(e.data, "alignment")


def test_symbol_past_its_section_is_refused(mathy_elf):
    """A symbol whose value lies past its section's end would resolve outside the mapping."""
    e = Elf(mathy_elf)
    symtab, = e.of_type(elf.SHT_SYMTAB)
    text = e.index(".ltext")
    entry = next(at for at in e.entries(symtab) if e.get(at + 6, "<H") == text)
    e.put(entry + 8, "<Q", 1 << 40)
    refused(e.data, "past the end of its section")


def test_symbol_in_a_section_that_does_not_exist_is_refused(mathy_elf):
    e = Elf(mathy_elf)
    symtab, = e.of_type(elf.SHT_SYMTAB)
    e.put(e.entries(symtab)[-1] + 6, "<H", e.shnum + 3)
    refused(e.data, "does not exist")


def test_relocation_section_for_a_missing_section_is_refused(mathy_elf):
    """A relocation section whose target index is out of range was skipped, leaving the code
    unrelocated (its calls would jump to address 0); it is refused."""
    e = Elf(mathy_elf)
    rela, = e.of_type(elf.SHT_RELA)
    e.set_section(rela, "info", e.shnum + 5)
    refused(e.data, "bad symbol table, target")


def test_relocation_section_linked_to_another_table_is_refused(mathy_elf):
    e = Elf(mathy_elf)
    rela, = e.of_type(elf.SHT_RELA)
    e.set_section(rela, "link", e.index(".strtab"))
    refused(e.data, "bad symbol table, target")


def test_relocation_into_a_section_without_contents_is_refused(mathy_elf):
    """Relocations apply to bytes from the object; one into a NOBITS section is damage."""
    e = Elf(mathy_elf)
    e.set_section(e.index(".ltext"), "type", elf.SHT_NOBITS)
    refused(e.data, "without contents")


def test_relocation_past_its_section_or_symbol_table_is_refused(mathy_elf):
    e = Elf(mathy_elf)
    rela, = e.of_type(elf.SHT_RELA)
    first = e.entries(rela)[0]
    e.put(first, "<Q", e.section(e.index(".ltext"), "size") - 7)      # 8 bytes patched, 7 left
    refused(e.data, "outside its section")
    e = Elf(mathy_elf)
    e.put(first + 8, "<Q", (1000 << 32) | elf.R_X86_64_64)
    refused(e.data, "symbol 1000 does not exist")


def test_symbol_table_must_link_a_string_table(mathy_elf):
    """Symbol names were read from whatever section the table linked to (the code, say)."""
    e = Elf(mathy_elf)
    symtab, = e.of_type(elf.SHT_SYMTAB)
    e.set_section(symtab, "link", e.index(".ltext"))
    refused(e.data, "not linked to a string table")


def test_unterminated_name_is_refused(mathy_elf):
    """A name must end inside its string table; it was read on into whatever bytes followed."""
    e = Elf(mathy_elf)
    strtab = e.index(".strtab")
    e.set_section(strtab, "size", e.section(strtab, "size") - 1)      # drop the last NUL
    refused(e.data, "not terminated")


@pytest.mark.parametrize("field, value, match", [
    ("e_shentsize", 65, "section header size"),
    ("e_shstrndx", 200, "out of range"),
    ("e_shnum", 0, "out of range"),
    ("e_shoff", 2**64 - 64, "outside the object"),
])
def test_bad_section_header_table_is_refused(mathy_elf, field, value, match):
    e = Elf(mathy_elf)
    at, fmt = HEADER_FIELDS[field]
    e.put(at, fmt, value)
    refused(e.data, match)


def test_macho_bytes_never_reach_llvm_off_macos(mathy_elf):
    """Any bytes starting with the Mach-O magic were declared well-formed and went to MCJIT
    unchecked; on Linux, where Tack never makes Mach-O, they are refused."""
    for magic in elf._MACHO_MAGIC:
        refused(magic + b"\0" * 60, "Mach-O")


def minimal_macho(cpu):
    """A Mach-O object: header, one segment with one 16-byte section and one relocation, a symbol table."""
    seg = struct.pack("<II16sQQQQiiII", 0x19, 72 + 80, b"", 0, 16, 256, 16, 7, 7, 1, 0)
    sect = struct.pack("<16s16sQQIIIIIIII", b"__text", b"__TEXT", 0, 16, 256, 4, 272, 1, 0x80000400, 0, 0, 0)
    symtab = struct.pack("<IIIIII", 0x2, 24, 280, 1, 296, 8)
    cmds = seg + sect + symtab
    header = struct.pack("<8I", 0xFEEDFACF, cpu, 3, 1, 2, len(cmds), 0, 0)
    body = header + cmds
    return body + bytes(256 - len(body)) + bytes(16) + bytes(8) + bytes(16) + b"\0_f\0\0\0\0\0"


def test_macho_layout_checks():
    """On macOS a Mach-O object goes to MCJIT only with its commands, sections, relocations and
    symbol table inside its bytes (the checks run here on a hand-made object)."""
    good = minimal_macho(0x01000007)
    elf._check_macho_layout(good, 0x01000007)
    for bad in (good[:200],                                   # load commands cut
                good[:270],                                   # section bytes cut
                good[:290]):                                  # symbol table cut
        with pytest.raises(elf.LoadError):
            elf._check_macho_layout(bad, 0x01000007)
    with pytest.raises(elf.LoadError, match="another CPU"):
        elf._check_macho_layout(good, 0x0100000C)
    huge = bytearray(good)
    struct.pack_into("<I", huge, 32 + 72 + 48, 2**32 - 8)      # the section's file offset
    with pytest.raises(elf.LoadError, match="section outside"):
        elf._check_macho_layout(bytes(huge), 0x01000007)


def test_only_a_checked_object_is_well_formed(mathy_elf, monkeypatch):
    """On a host whose machine the loader lacks, a valid object is handed to LLVM (well_formed),
    but a damaged one is not: it used to be declared well-formed before any section was read."""
    monkeypatch.setitem(elf._HOST_MACHINE, platform.machine(), 21)        # as if on ppc64le
    e = Elf(mathy_elf)
    e.put(18, "<H", 21)
    with pytest.raises(elf.LoadError) as ei:
        elf.load(bytes(e.data))
    assert ei.value.well_formed
    rela, = e.of_type(elf.SHT_RELA)
    e.put(e.entries(rela)[0], "<Q", 1 << 50)                      # a relocation far past its section
    refused(e.data, "outside its section")
