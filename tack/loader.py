"""Load an ELF relocatable object (what LLVM emits for the CPU) into this process.

Why not llvmlite's MCJIT: importing llvmlite's binding costs tens of
milliseconds, more than a whole warm kernel call is allowed; a process that
finds its kernels in the cache must be able to run them without it.  Tack
compiles CPU code with the static relocation model and the large code model,
so an object's relocations are absolute addresses only (``R_X86_64_64``;
``ABS64`` and ``MOVW_UABS_G0..G3`` on AArch64): the loader maps the
allocated sections, writes those addresses, resolves libm and libc symbols
with ``dlsym``, and makes the code executable.  An object it cannot load
(another format, another relocation) raises ``LoadError``, and the caller
falls back to MCJIT.

It sits beside the package's top modules rather than in ``backends/``: a
process whose kernels all come from the cache imports it and nothing else
of the compiler.
"""

from __future__ import annotations

import ctypes
import platform
import struct
import sys

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHT_SYMTAB, SHT_RELA, SHT_NOBITS = 2, 4, 8
EM_X86_64, EM_AARCH64 = 62, 183
R_X86_64_64 = 1
R_AARCH64_ABS64 = 257
_AARCH64_MOVW = {263: 0, 264: 0, 265: 16, 266: 16, 267: 32, 268: 32, 269: 48}  # G0, G0_NC, ... G3
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20       # Linux values; the loader runs on Linux only
_PAGE = 4096
_SKIP = (".eh_frame", ".note", ".comment", ".llvm")

_libc = None


class LoadError(Exception):
    """This object cannot be loaded by Tack's own loader.

    ``well_formed`` is True when the object is a valid one this loader does
    not handle (another machine, a relocation it lacks): LLVM's own loader
    may take it.  Bytes that are not a well-formed object must never reach
    LLVM, which would crash the process on them.
    """

    def __init__(self, message, well_formed=False):
        super().__init__(message)
        self.well_formed = well_formed


class LoadedObject:
    """An object's code, mapped into this process (for the rest of its life)."""

    def __init__(self, base, size, symbols):
        self.base = base
        self.size = size
        self.symbols = symbols        # name -> absolute address (defined symbols)

    def address(self, name: str) -> int:
        try:
            return self.symbols[name]
        except KeyError:
            raise LoadError(f"symbol {name!r} is not defined in the object") from None


def _libc_handle():
    """mmap, mprotect and munmap, as private function pointers on the process's global symbols.

    ``ctypes.pythonapi`` is ``dlopen(NULL)``, opened when ctypes was imported:
    looking the calls up there is cheaper than opening a handle of our own
    (this runs on a warm call's path).  Indexing it makes a new function
    pointer each time, so setting its argument types touches no one else's.
    """
    global _libc
    if _libc is None:
        lib = ctypes.pythonapi
        mmap, mprotect, munmap = lib["mmap"], lib["mprotect"], lib["munmap"]
        mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                         ctypes.c_int, ctypes.c_long)
        mmap.restype = ctypes.c_void_p
        mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        mprotect.restype = munmap.restype = ctypes.c_int
        _libc = (mmap, mprotect, munmap)
    return _libc


def _errno() -> int:
    """The calling thread's errno, after a failed call made through ``_libc_handle``."""
    try:
        where = ctypes.pythonapi["__errno_location"]
    except AttributeError:
        return -1
    where.restype = ctypes.POINTER(ctypes.c_int)
    return where().contents.value


def _resolve_external(name: str) -> int:
    for lib in (ctypes.pythonapi, _libm()):
        try:
            return ctypes.cast(lib[name], ctypes.c_void_p).value
        except AttributeError:
            continue
    raise LoadError(f"external symbol {name!r} not found in this process")


_libm_handle = None


def _libm():
    global _libm_handle
    if _libm_handle is None:
        try:
            _libm_handle = ctypes.CDLL("libm.so.6")
        except OSError:
            from ctypes import util
            _libm_handle = ctypes.CDLL(util.find_library("m"))
    return _libm_handle


_HOST_MACHINE = {"x86_64": EM_X86_64, "AMD64": EM_X86_64, "aarch64": EM_AARCH64, "arm64": EM_AARCH64,
                 "ppc64le": 21, "ppc64": 21, "riscv64": 243, "s390x": 22}
_MACHO_MAGIC = (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf")


def load(obj: bytes) -> LoadedObject:
    """Map an ELF64 relocatable object and apply its relocations."""
    try:
        return _load(obj)
    except LoadError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError) as e:
        raise LoadError(f"malformed ELF object ({type(e).__name__}: {e})") from None


def _load(obj: bytes) -> LoadedObject:
    if obj[:4] in _MACHO_MAGIC:
        raise LoadError("a Mach-O object", well_formed=True)
    if sys.platform.startswith("win") or obj[:4] != b"\x7fELF":
        raise LoadError("not an ELF object")
    if obj[4] != 2 or obj[5] != 1:
        raise LoadError("only 64-bit little-endian ELF objects are supported")
    e_type, machine = struct.unpack_from("<HH", obj, 16)
    if e_type != 1:
        raise LoadError("not a relocatable object")
    host = _HOST_MACHINE.get(platform.machine())
    if machine != host:
        # Never code for this host: damaged, or another node's; LLVM must not see it either.
        raise LoadError(f"ELF machine {machine} is not this host's ({platform.machine()})")
    if machine not in (EM_X86_64, EM_AARCH64):
        raise LoadError(f"ELF machine {machine} is not supported by Tack's loader", well_formed=True)
    shoff, = struct.unpack_from("<Q", obj, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    shstr_off = sections[shstrndx][4]

    def cstr(off):
        return obj[off:obj.index(b"\0", off)].decode()

    names = [cstr(shstr_off + s[0]) for s in sections]
    page = _PAGE

    # Lay out the allocated sections: executable ones first, each group page-aligned.
    placed = {}
    cursor = 0
    groups = ([], [], [])            # text, read-only, writable
    for i, (s, name) in enumerate(zip(sections, names)):
        flags, size, align = s[2], s[5], max(s[8], 1)
        if not flags & SHF_ALLOC or name.startswith(_SKIP) or size == 0:
            continue
        g = 0 if flags & SHF_EXECINSTR else 2 if flags & SHF_WRITE else 1
        groups[g].append((i, size, align))
    bounds = []
    for group in groups:
        start = cursor
        for i, size, align in group:
            cursor = (cursor + align - 1) // align * align
            placed[i] = cursor
            cursor += size
        cursor = (cursor + page - 1) // page * page
        bounds.append((start, cursor))
    total = max(cursor, page)
    mmap, mprotect, munmap = _libc_handle()
    base = mmap(None, total, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise LoadError(f"mmap of {total} bytes failed (errno {_errno()})")
    try:
        for i, off in placed.items():                 # the mapping is zero-filled: .bss is ready
            s = sections[i]
            if s[1] != SHT_NOBITS:
                if s[4] + s[5] > len(obj):
                    raise LoadError(f"section {names[i]!r} runs past the end of the object")
                ctypes.memmove(base + off, obj[s[4]:s[4] + s[5]], s[5])

        # Symbols.
        symtab = next((s for s in sections if s[1] == SHT_SYMTAB), None)
        if symtab is None:
            raise LoadError("object has no symbol table")
        strtab_off = sections[symtab[6]][4]
        symbols, defined = [], {}
        for k in range(symtab[5] // 24):
            st_name, st_info, _, st_shndx, st_value, _ = struct.unpack_from("<IBBHQQ", obj, symtab[4] + k * 24)
            name = cstr(strtab_off + st_name) if st_name else ""
            if st_shndx == 0:
                addr = None                          # undefined: resolved on first use
            elif st_shndx in placed:
                addr = base + placed[st_shndx] + st_value
            elif st_shndx == 0xFFF1:                 # SHN_ABS
                addr = st_value
            else:
                addr = 0                             # a skipped section
            symbols.append((name, addr))
            if name and addr and (st_info & 0xF) in (1, 2):   # OBJECT or FUNC
                defined[name] = addr

        # Relocations.
        for s, name in zip(sections, names):
            if s[1] != SHT_RELA or s[7] not in placed:
                continue
            target = placed[s[7]]
            target_size = sections[s[7]][5]
            for k in range(s[5] // 24):
                r_offset, r_info, r_addend = struct.unpack_from("<QQq", obj, s[4] + k * 24)
                if r_offset + 8 > target_size:
                    raise LoadError(f"relocation at {r_offset} lies outside its section")
                sym_name, sym_addr = symbols[r_info >> 32]
                if sym_addr is None:
                    sym_addr = _resolve_external(sym_name)
                    symbols[r_info >> 32] = (sym_name, sym_addr)
                _relocate(base + target + r_offset, machine, r_info & 0xFFFFFFFF, sym_addr + r_addend)

        for (start, end), prot in zip(bounds, (_PROT_READ | _PROT_EXEC, _PROT_READ, _PROT_READ | _PROT_WRITE)):
            if end > start and mprotect(base + start, end - start, prot) != 0:
                raise LoadError(f"mprotect failed (errno {_errno()})")
        if machine == EM_AARCH64:
            _clear_icache(base, bounds[0][1])
    except BaseException:
        munmap(base, total)                   # nothing of a failed load stays mapped
        raise
    return LoadedObject(base, total, defined)


def _relocate(address, machine, rtype, value):
    """Write a relocated ``value`` at ``address`` (little-endian hosts only, as the loader is)."""
    value &= 0xFFFFFFFFFFFFFFFF
    if machine == EM_X86_64 and rtype == R_X86_64_64 or machine == EM_AARCH64 and rtype == R_AARCH64_ABS64:
        ctypes.c_uint64.from_address(address).value = value
    elif machine == EM_AARCH64 and rtype in _AARCH64_MOVW:
        insn = ctypes.c_uint32.from_address(address)
        imm16 = (value >> _AARCH64_MOVW[rtype]) & 0xFFFF
        insn.value = (insn.value & ~(0xFFFF << 5)) | (imm16 << 5)
    else:
        # Tack never emits other relocations: such an object is damaged, and must
        # not reach LLVM's loader either, which aborts the process on it.
        raise LoadError(f"relocation type {rtype} is not supported by Tack's loader")


def _clear_icache(start, length):
    try:
        fn = ctypes.pythonapi["__clear_cache"]
    except AttributeError:
        return
    fn(ctypes.c_void_p(start), ctypes.c_void_p(start + length))


# A kernel's entry point is ``void entry(void *slots, int64_t start, int64_t end)``.  ctypes
# built a function-pointer type that passes its arguments in the same registers when it was
# imported: memmove's, ``void *(void *, void *, size_t)`` (with 64-bit pointers; the grid's
# bounds are never negative, and the return value is ignored).  Reusing it spares building a
# new ctypes type, a tenth of a millisecond, in every process that runs a cached kernel.
if ctypes.sizeof(ctypes.c_void_p) == ctypes.sizeof(ctypes.c_size_t) == 8:
    ENTRY_TYPE = type(ctypes.memmove)
else:
    ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def load_object(obj: bytes, entry: str):
    """A ctypes function for ``entry`` in object code ``obj`` built for this host.

    This loader first (no llvmlite import: this is the warm path); llvmlite's
    MCJIT only for a well-formed object of a kind this loader does not read.
    """
    try:
        addr = load(obj).address(entry)
    except LoadError as e:
        if not e.well_formed:
            raise
        from .backends.cpu import load_mcjit
        addr = load_mcjit(obj, entry)
    if not addr:
        raise LoadError(f"entry point {entry} not found in object code")
    return ENTRY_TYPE(addr)
