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

What it checks, before it maps anything: the ELF header (64-bit,
little-endian, relocatable, this host's machine, 64-byte section headers
all inside the object, the section-name table in range); every section
(its bytes inside the object unless it is ``NOBITS``, its alignment a power
of two of at most a page, the mapping at most 1 GiB in all, so no size can
wrap); every name (inside its string table and NUL-terminated); the symbol
table (linked to a string table, each symbol's section in range and its
value inside that section); and every relocation section (linked to the
symbol table, applying to a section in range) and relocation (its symbol in
range, the bytes it patches inside its section).  The image is then built
in Python memory and copied into the mapping by one write, which checks it
stays inside the mapping.  Only an object that passed all of this may be
declared ``well_formed`` and handed to LLVM (a supported layout for another
machine); a Mach-O object goes to LLVM only on macOS, and only with its
header, load commands, sections, relocations and symbol table inside its
bytes.  Anything else is refused: LLVM aborts the process on malformed input.

A process whose kernels all come from the cache imports it and nothing else
of the compiler: it imports no other part of Tack, and the fallback to
MCJIT is the caller's (``load_object``'s ``fallback``), so the loader sits
below both halves of the CPU backend.
"""

import ctypes
import os
import platform
import struct
import sys

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 0, 2, 3, 4, 8, 9
SHN_UNDEF, SHN_LORESERVE, SHN_ABS = 0, 0xFF00, 0xFFF1
STT_OBJECT, STT_FUNC = 1, 2
EM_X86_64, EM_AARCH64 = 62, 183
R_X86_64_64 = 1
R_AARCH64_ABS64 = 257
_AARCH64_MOVW = {263: 0, 264: 0, 265: 16, 266: 16, 267: 32, 268: 32, 269: 48}  # G0, G0_NC, ... G3
# Bytes each supported relocation patches, by machine.
_WIDTH = {EM_X86_64: {R_X86_64_64: 8},
          EM_AARCH64: {R_AARCH64_ABS64: 8, **{r: 4 for r in _AARCH64_MOVW}}}
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20       # Linux values; the loader runs on Linux only
_PAGE = 4096
# A kernel's code and constants take kilobytes; the cap keeps a damaged size from asking for
# the whole address space (or wrapping the size_t that mmap takes).
_MAX_TOTAL = 1 << 30
_SKIP = (b".eh_frame", b".note", b".comment", b".llvm")
_SECTION = struct.Struct("<IIQQQQIIQQ")     # name, type, flags, addr, offset, size, link, info, align, entsize
_SYMBOL = struct.Struct("<IBBHQQ")          # name, info, other, shndx, value, size
_RELA = struct.Struct("<QQq")               # offset, info, addend

_libc = None


class LoadError(Exception):
    """This object cannot be loaded by Tack's own loader.

    ``well_formed`` is True when the object is a valid one this loader does
    not handle (another machine, a relocation it lacks): LLVM's own loader
    may take it.  Bytes that are not a well-formed object must never reach
    LLVM, which would crash the process on them.  ``resource`` is True when
    the process could not map memory for it (``mmap`` or ``mprotect`` refused:
    out of memory or address space, a policy against executable memory): not
    the object's fault, so a cache entry holding it is kept.
    """

    def __init__(self, message, well_formed=False, resource=False):
        super().__init__(message)
        self.well_formed = well_formed
        self.resource = resource


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


def _strerror() -> str:
    """The calling thread's errno as the system says it, and its number."""
    code = _errno()
    return f"{os.strerror(code)}, errno {code}"


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


def load(obj: bytes) -> LoadedObject:
    """Map an ELF64 relocatable object and apply its relocations."""
    try:
        return _load(obj)
    except LoadError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError, OverflowError) as e:
        # Every check below is explicit; this only keeps a check missed from becoming a crash.
        raise LoadError(f"malformed ELF object ({type(e).__name__}: {e})") from None


def _load(obj: bytes) -> LoadedObject:
    machine = _check_header(obj)
    sections = _section_headers(obj)
    names = _section_names(obj, sections)
    symtab = _symbol_table(sections)
    symbols = _symbols(obj, sections, symtab)
    placed, bounds, total = _layout(sections, names)
    relocations = _relocations(obj, sections, symtab, len(symbols), machine, placed)
    if machine not in _WIDTH:
        # Checked as far as a machine-independent reading goes: LLVM may have it.
        raise LoadError(f"ELF machine {machine} is not supported by Tack's loader", well_formed=True)
    fixups = _fixups(relocations, symbols, sections, placed)
    image = _image(obj, sections, placed)
    return _map(image, total, bounds, fixups, machine, _defined(symbols, placed))


# -- checks: nothing is mapped or written until all of them pass --------------

def _check_header(obj) -> int:
    """-> the ELF machine of a 64-bit little-endian relocatable object for this host."""
    if obj[:4] in _MACHO_MAGIC:
        _check_macho(obj)
    if sys.platform.startswith("win") or obj[:4] != b"\x7fELF":
        raise LoadError("not an ELF object")
    if len(obj) < 64:
        raise LoadError("ELF header is truncated")
    if obj[4] != 2 or obj[5] != 1:
        raise LoadError("only 64-bit little-endian ELF objects are supported")
    e_type, machine = struct.unpack_from("<HH", obj, 16)
    if e_type != 1:
        raise LoadError("not a relocatable object")
    if machine != _HOST_MACHINE.get(platform.machine()):
        # Never code for this host: damaged, or another node's; LLVM must not see it either.
        raise LoadError(f"ELF machine {machine} is not this host's ({platform.machine()})")
    return machine


def _section_headers(obj) -> list:
    """The section headers, each inside the object with its bytes, alignment and size checked."""
    shoff, = struct.unpack_from("<Q", obj, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 58)
    if shentsize != _SECTION.size:
        raise LoadError(f"section header size {shentsize}, not {_SECTION.size}")
    # shnum 0 and indices from SHN_LORESERVE up mean extended numbering, which LLVM never needs here.
    if not 0 < shnum < SHN_LORESERVE or not shstrndx < shnum:
        raise LoadError(f"section count {shnum} or name table index {shstrndx} out of range")
    if shoff < 64 or shoff + shnum * _SECTION.size > len(obj):
        raise LoadError("section headers lie outside the object")
    sections = list(_SECTION.iter_unpack(obj[shoff:shoff + shnum * _SECTION.size]))
    if sections[0][1] != SHT_NULL:
        raise LoadError("section 0 is not the null section")
    for i, s in enumerate(sections):
        _check_section(obj, i, s)
    return sections


def _check_section(obj, i, s):
    stype, flags, offset, size, align = s[1], s[2], s[4], s[5], s[8]
    if stype not in (SHT_NULL, SHT_NOBITS) and offset + size > len(obj):
        raise LoadError(f"section {i} runs past the end of the object")
    # Groups start on a page, so a page is the most alignment the layout can honour.
    if align & (align - 1) or align > _PAGE:
        raise LoadError(f"section {i} has alignment {align}, not a power of two of at most {_PAGE}")
    if flags & SHF_ALLOC and size > _MAX_TOTAL:
        raise LoadError(f"section {i} is {size} bytes, more than the loader maps")


def _cstr(obj, table, off, what) -> bytes:
    """The NUL-terminated string at ``off`` in string table section ``table``."""
    if table[1] != SHT_STRTAB or off >= table[5]:
        raise LoadError(f"{what}'s name lies outside its string table")
    start = table[4] + off
    stop = obj.find(b"\0", start, table[4] + table[5])
    if stop < 0:
        raise LoadError(f"{what}'s name is not terminated inside its string table")
    return obj[start:stop]


def _section_names(obj, sections) -> list:
    table = sections[struct.unpack_from("<H", obj, 62)[0]]
    return [_cstr(obj, table, s[0], f"section {i}") for i, s in enumerate(sections)]


def _symbol_table(sections) -> int:
    """The index of the symbol table, whose entries and string table link were checked."""
    i = next((i for i, s in enumerate(sections) if s[1] == SHT_SYMTAB), None)
    if i is None:
        raise LoadError("object has no symbol table")
    s = sections[i]
    if s[9] != _SYMBOL.size or s[5] % _SYMBOL.size:
        raise LoadError("symbol table entries are not 24 bytes")
    if not 0 < s[6] < len(sections) or sections[s[6]][1] != SHT_STRTAB:
        raise LoadError("symbol table is not linked to a string table")
    return i


def _symbols(obj, sections, symtab) -> list:
    """[(name, section index, value)] of every symbol, each name, section and value checked."""
    s = sections[symtab]
    strtab = sections[s[6]]
    symbols = []
    for k, (st_name, st_info, _, shndx, value, _) in enumerate(_SYMBOL.iter_unpack(obj[s[4]:s[4] + s[5]])):
        name = _cstr(obj, strtab, st_name, f"symbol {k}") if st_name else b""
        if shndx != SHN_UNDEF and shndx != SHN_ABS:
            if shndx >= len(sections):
                raise LoadError(f"symbol {k} lies in section {shndx}, which does not exist")
            if value > sections[shndx][5]:
                raise LoadError(f"symbol {k} lies past the end of its section")
        symbols.append((name, shndx, value, st_info & 0xF))
    return symbols


def _relocations(obj, sections, symtab, nsyms, machine, placed) -> list:
    """[(offset in the mapping, type, symbol index, addend)] of the relocations to apply.

    Every relocation section is checked (LLVM may be handed the object), and those of sections
    the loader maps must be of the types it knows.
    """
    todo = []
    for i, s in enumerate(sections):
        if s[1] == SHT_REL and s[7] in placed:
            raise LoadError(f"section {i} has REL relocations, which Tack's objects never do")
        if s[1] != SHT_RELA:
            continue
        if s[6] != symtab or not 0 < s[7] < len(sections) or s[9] != _RELA.size or s[5] % _RELA.size:
            raise LoadError(f"relocation section {i} has a bad symbol table, target or entry size")
        target = sections[s[7]]
        applied = s[7] in placed and machine in _WIDTH
        if applied and target[1] == SHT_NOBITS:
            raise LoadError(f"relocation section {i} applies to a section without contents")
        for r_offset, r_info, addend in _RELA.iter_unpack(obj[s[4]:s[4] + s[5]]):
            rtype, sym = r_info & 0xFFFFFFFF, r_info >> 32
            width = _WIDTH[machine].get(rtype) if applied else 1
            if width is None:
                # Tack never emits other relocations: such an object is damaged, and must
                # not reach LLVM's loader either, which aborts the process on it.
                raise LoadError(f"relocation type {rtype} is not supported by Tack's loader")
            if r_offset + width > target[5] or sym >= nsyms:
                raise LoadError(f"relocation at {r_offset} lies outside its section, or its symbol {sym} does not exist")
            if applied:
                todo.append((placed[s[7]] + r_offset, rtype, sym, addend))
    return todo


# -- layout, image and mapping ------------------------------------------------

def _layout(sections, names):
    """-> ({section: offset in the mapping}, [(start, end)] of text, read-only, writable, total size).

    Executable sections first, then read-only, then writable ones, each group page-aligned
    (so each gets its own protection).  Sizes were bounded, so the total cannot wrap.
    """
    groups = ([], [], [])
    for i, (s, name) in enumerate(zip(sections, names)):
        if s[2] & SHF_ALLOC and s[1] != SHT_NULL and not name.startswith(_SKIP):
            groups[0 if s[2] & SHF_EXECINSTR else 2 if s[2] & SHF_WRITE else 1].append(i)
    placed, bounds, cursor = {}, [], 0
    for group in groups:
        start = cursor
        for i in group:
            align = max(sections[i][8], 1)
            placed[i] = cursor = (cursor + align - 1) // align * align
            cursor += sections[i][5]
            if cursor > _MAX_TOTAL:
                raise LoadError(f"the object's sections need more than {_MAX_TOTAL} bytes")
        cursor = (cursor + _PAGE - 1) // _PAGE * _PAGE
        bounds.append((start, cursor))
    return placed, bounds, max(cursor, _PAGE)


def _fixups(relocations, symbols, sections, placed) -> list:
    """[(offset, type, value, relative)]: write ``value`` (plus the mapping's base if ``relative``)."""
    resolved = {}
    fixups = []
    for at, rtype, sym, addend in relocations:
        name, shndx, value, _ = symbols[sym]
        if shndx == SHN_UNDEF:
            if sym not in resolved:
                resolved[sym] = _resolve_external(name)
            fixups.append((at, rtype, resolved[sym] + addend, False))
        elif shndx == SHN_ABS:
            fixups.append((at, rtype, value + addend, False))
        elif shndx in placed:
            fixups.append((at, rtype, placed[shndx] + value + addend, True))
        else:
            raise LoadError(f"a relocation refers to symbol {sym}, in a section that is not loaded")
    return fixups


def _defined(symbols, placed) -> dict:
    """{name: offset in the mapping} of the functions and data objects the object defines."""
    defined = {}
    for name, shndx, value, kind in symbols:
        if name and shndx in placed and kind in (STT_OBJECT, STT_FUNC):
            defined[_text(name)] = placed[shndx] + value
    return defined


def _image(obj, sections, placed) -> bytearray:
    """The mapping's contents up to the end of the last section with bytes (the rest is zeros)."""
    ends = [placed[i] + sections[i][5] for i in placed if sections[i][1] != SHT_NOBITS]
    image = bytearray(max(ends, default=0))
    view = memoryview(image)             # a slice of a view keeps its size (a bytearray's would grow)
    for i, at in placed.items():
        s = sections[i]
        if s[1] != SHT_NOBITS:
            view[at:at + s[5]] = obj[s[4]:s[4] + s[5]]
    return image


def _map(image, total, bounds, fixups, machine, defined) -> LoadedObject:
    mmap, mprotect, munmap = _libc_handle()
    base = mmap(None, total, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise LoadError(f"mmap of {total} bytes failed ({_strerror()})", resource=True)
    try:
        for at, rtype, value, relative in fixups:
            _relocate(image, at, machine, rtype, value + base if relative else value)
        _write(base, total, base, image)     # the mapping is zero-filled: .bss is ready
        for (start, end), prot in zip(bounds, (_PROT_READ | _PROT_EXEC, _PROT_READ, _PROT_READ | _PROT_WRITE)):
            if end > start and mprotect(base + start, end - start, prot) != 0:
                raise LoadError(f"mprotect failed ({_strerror()})", resource=True)
        if machine == EM_AARCH64:
            _clear_icache(base, bounds[0][1])
    except BaseException:
        munmap(base, total)                   # nothing of a failed load stays mapped
        raise
    return LoadedObject(base, total, {name: base + off for name, off in defined.items()})


def _write(base, total, address, data):
    """The loader's only write to memory: ``data`` at ``address``, inside the mapping ``[base, base + total)``.

    The checks above already keep every write inside; this is the last line if one is missed.
    """
    if address < base or address + len(data) > base + total:
        raise LoadError(f"a write of {len(data)} bytes at {address:#x} would leave the mapping")
    ctypes.memmove(address, bytes(data), len(data))


def _relocate(image, at, machine, rtype, value):
    """Write a relocated ``value`` at offset ``at`` of ``image`` (little-endian, as the loader is)."""
    value &= 0xFFFFFFFFFFFFFFFF
    if machine == EM_X86_64 and rtype == R_X86_64_64 or machine == EM_AARCH64 and rtype == R_AARCH64_ABS64:
        struct.pack_into("<Q", image, at, value)
    elif machine == EM_AARCH64 and rtype in _AARCH64_MOVW:
        insn, = struct.unpack_from("<I", image, at)
        imm16 = (value >> _AARCH64_MOVW[rtype]) & 0xFFFF
        struct.pack_into("<I", image, at, (insn & ~(0xFFFF << 5)) | (imm16 << 5))
    else:
        raise LoadError(f"relocation type {rtype} is not supported by Tack's loader")


def _text(name: bytes) -> str:
    try:
        return name.decode()
    except UnicodeDecodeError:
        raise LoadError(f"symbol name {name!r} is not UTF-8") from None


# -- Mach-O (macOS only: MCJIT loads it) ----------------------------------------

_MACHO_MAGIC = (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf")
_MACHO_CPU = {"x86_64": 0x01000007, "arm64": 0x0100000C}
_LC_SEGMENT_64, _LC_SYMTAB = 0x19, 0x2


def _check_macho(obj):
    """Always raises: ``well_formed`` only for a Mach-O object of this macOS host whose load
    commands, sections, relocations and symbol table lie inside its bytes.  Tack never makes
    Mach-O elsewhere, so there it is damaged (or foreign) and LLVM must not see it."""
    if sys.platform != "darwin":
        raise LoadError("a Mach-O object, which Tack never makes on this system")
    _check_macho_layout(obj, _MACHO_CPU.get(platform.machine()))
    raise LoadError("a Mach-O object", well_formed=True)


def _check_macho_layout(obj, cpu):
    if obj[:4] != _MACHO_MAGIC[0] or len(obj) < 32:
        raise LoadError("not a little-endian 64-bit Mach-O object")
    _, cputype, _, filetype, ncmds, sizeofcmds, _, _ = struct.unpack_from("<8I", obj, 0)
    if cputype != cpu or filetype != 1 or 32 + sizeofcmds > len(obj):      # 1: MH_OBJECT
        raise LoadError("Mach-O object of another CPU or kind, or its load commands run past its end")
    at, end = 32, 32 + sizeofcmds
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", obj, at) if at + 8 <= end else (0, 0)
        if size < 8 or size % 8 or at + size > end:
            raise LoadError("Mach-O load command outside the load commands")
        if cmd == _LC_SEGMENT_64:
            _check_macho_segment(obj, at, size)
        elif cmd == _LC_SYMTAB:
            symoff, nsyms, stroff, strsize = struct.unpack_from("<4I", obj, at + 8)
            if size < 24 or symoff + nsyms * 16 > len(obj) or stroff + strsize > len(obj):
                raise LoadError("Mach-O symbol table outside the object")
        at += size


def _check_macho_segment(obj, at, size):
    if size < 72:
        raise LoadError("Mach-O segment command is truncated")
    fileoff, filesize, _, _, nsects = struct.unpack_from("<QQiiI", obj, at + 40)
    if fileoff + filesize > len(obj) or 72 + nsects * 80 > size:
        raise LoadError("Mach-O segment outside the object")
    for k in range(nsects):
        sect = at + 72 + k * 80                # section_64: two names, then addr, size, offset, ...
        ssize, offset, align, reloff, nreloc, flags = struct.unpack_from("<QIIIII", obj, sect + 40)
        zerofill = flags & 0xFF in (0x1, 0xC, 0x12)        # S_ZEROFILL, S_GB_ZEROFILL, S_THREAD_LOCAL_ZEROFILL
        if not zerofill and offset + ssize > len(obj) or align > 15 or reloff + nreloc * 8 > len(obj):
            raise LoadError("Mach-O section outside the object")


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


def load_object(obj: bytes, entry: str, fallback=None):
    """A ctypes function for ``entry`` in object code ``obj`` built for this host.

    This loader first (no llvmlite import: this is the warm path);
    ``fallback(obj, entry)`` -> an address (llvmlite's MCJIT, ``cpu.load_mcjit``) only for a
    well-formed object of a kind this loader does not read (without one, its LoadError).
    """
    try:
        addr = load(obj).address(entry)
    except LoadError as e:
        if not e.well_formed or fallback is None:
            raise
        addr = fallback(obj, entry)
    if not addr:
        raise LoadError(f"entry point {entry} not found in object code")
    return ENTRY_TYPE(addr)
