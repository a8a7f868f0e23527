"""Structure-aware fuzzing of tack/backends/cpu_loader.py, run as a child process by test_loader_fuzz.py.

Real kernels' objects are mutated a field at a time (header, section, symbol and relocation
fields, plus truncations and bit flips), one to three mutations a case.  Every case must end
in a LoadError or a correct load, and no write may leave the mapping.  The loader's mmap,
munmap and its one write are instrumented (wrapped, still doing the real calls) to check that.
A crash kills this process, not pytest: the parent reports it with the last case, saved in
``argv[1]`` before each load.

Prints one JSON line of counts.  ``python -m tests.backends.loader_fuzz LAST_CASE_PATH N``.
"""

import collections
import ctypes
import json
import struct
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tack.backends import cpu_loader as loader
from tack.compiler import lower
from tests.backends.elf_util import Elf
from tests.backends.test_loader import call, compile_object, expected

counts = collections.Counter()
maps, unmaps, writes, protects = [], [], [], []


def instrument():
    """Record every mmap, mprotect, munmap and write the loader makes (the real calls still happen)."""
    mmap, mprotect, munmap = loader._libc_handle()

    def recording_mmap(addr, size, *rest):
        base = mmap(addr, size, *rest)
        if base not in (None, ctypes.c_void_p(-1).value):       # a failed mmap maps nothing
            maps.append((base, size))
        return base

    def recording_mprotect(address, size, prot):
        protects.append((address, size, prot))
        return mprotect(address, size, prot)

    def recording_munmap(base, size):
        unmaps.append((base, size))
        return munmap(base, size)

    real_write = loader._write

    def recording_write(base, total, address, data):
        writes.append((address, len(data)))
        return real_write(base, total, address, data)

    loader._libc = (recording_mmap, recording_mprotect, recording_munmap)
    loader._write = recording_write
    return munmap


class Subject:
    """A real object, what loading it must give (relative to the base), and how to run it."""

    def __init__(self, data, entry, run):
        self.data, self.entry, self.run = data, entry, run
        self.fields = Elf(data).fields()
        e = loader
        sections = e._section_headers(data)
        names = e._section_names(data, sections)
        symtab = e._symbol_table(sections)
        symbols = e._symbols(data, sections, symtab)
        self.placed, self.bounds, self.total = e._layout(sections, names)
        relocations = e._relocations(data, sections, symtab, len(symbols), e._check_header(data), self.placed)
        self.fixups = e._fixups(relocations, symbols, sections, self.placed)
        self.image = bytes(e._image(data, sections, self.placed))
        self.defined = e._defined(symbols, self.placed)

    def memory_at(self, base):
        """The mapping's bytes when this object is loaded at ``base``."""
        image = bytearray(self.image)
        machine = struct.unpack_from("<H", self.data, 18)[0]
        for at, rtype, value, relative in self.fixups:
            loader._relocate(image, at, machine, rtype, value + base if relative else value)
        return bytes(image) + bytes(self.total - len(image))

    def protections_at(self, base):
        """The mprotect calls loading this object at ``base`` makes: code, constants, data."""
        prots = (loader._PROT_READ | loader._PROT_EXEC, loader._PROT_READ, loader._PROT_READ | loader._PROT_WRITE)
        return [(base + start, end - start, prot) for (start, end), prot in zip(self.bounds, prots) if end > start]


def run_mathy(entry):
    fn = loader.ENTRY_TYPE(entry)
    x, y = np.linspace(0.1, 1.2, 64), np.zeros(64)
    call(fn, x, y)
    return np.allclose(y, expected(x), rtol=1e-6)


def run_bounds(entry):
    fn = loader.ENTRY_TYPE(entry)
    out = np.zeros(1, dtype=np.int64)
    fn(struct.pack("<Qqqq", out.ctypes.data, 1000, 1, 1), 999, 1000)
    return out[0] == 999


def subjects():
    import tack
    from tack.backends.cpu import host_target
    from tack.codegen import generate
    from tack.argtypes import typeof_arg
    from tack.specialize import specialize

    @tack.kernel
    def bounds(out):
        i = tack.tid()
        out[0] = i

    target = host_target()
    out = np.zeros(1, dtype=np.int64)
    gen = generate(specialize(lower(bounds, {}, False), (typeof_arg("bounds", "out", out),), 1),
                   target, "tack_fuzz_bounds")
    mathy, entry = compile_object()
    return [Subject(mathy, entry, run_mathy),
            Subject(target.emit_object(target.optimize(gen.module)), gen.entry, run_bounds)]


def values(fmt, old, size):
    """Values for a field: boundary cases, small steps from the old value, anything."""
    top = (1 << 8 * struct.calcsize(fmt)) - 1
    special = [0, 1, 2, 3, 7, 8, 16, 24, 63, 64, 65, 4095, 4096, 4097, size, size - 1, 1 << 30, (1 << 30) + 1,
               1 << 31, 1 << 32, 1 << 63, top, top - 7, top - 4095, 0xFF00, 0xFFF1, 0xFFF2]
    return st.one_of(st.sampled_from(sorted({v & top for v in special})),
                     st.integers(-70, 70).map(lambda d: (old + d) & top),
                     st.integers(0, top))


@st.composite
def cases(draw, subjects):
    k = draw(st.integers(0, len(subjects) - 1))
    s = subjects[k]
    e = Elf(s.data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["field"] * 8 + ["truncate", "flip"]))
        if kind == "field":
            at, fmt, _ = draw(st.sampled_from(s.fields))
            if at + struct.calcsize(fmt) <= len(e.data):
                e.put(at, fmt, draw(values(fmt, e.get(at, fmt), len(s.data))))
        elif kind == "truncate":
            del e.data[draw(st.integers(0, len(e.data))):]
        elif e.data:
            pos = draw(st.integers(0, len(e.data) - 1))
            e.data[pos] ^= 1 << draw(st.integers(0, 7))
    return k, bytes(e.data)


def check(subjects, k, data, last_case, munmap):
    with open(last_case, "wb") as f:           # what the parent reports if this case crashes
        f.write(data)
    maps.clear(), unmaps.clear(), writes.clear(), protects.clear()
    try:
        obj = loader.load(data)
    except loader.LoadError as e:
        assert not e.well_formed, f"a damaged object would go to LLVM: {e}"
        assert sorted(maps) == sorted(unmaps), "a failed load left memory mapped"
        assert all(any(b <= a and a + n <= b + size for b, size in maps) for a, n in writes)
        counts["LoadError"] += 1
        return
    try:
        check_loaded(subjects[k], obj, data)
    finally:
        munmap(obj.base, obj.size)


def check_loaded(s, obj, data):
    assert maps == [(obj.base, obj.size)] and not unmaps
    for address, n in writes:
        assert obj.base <= address and address + n <= obj.base + obj.size, "a write left the mapping"
    for name, address in obj.symbols.items():
        assert obj.base <= address < obj.base + obj.size, f"symbol {name} lies outside the mapping"
    memory = ctypes.string_at(obj.base, obj.size)
    same = (memory == s.memory_at(obj.base) and protects == s.protections_at(obj.base)
            and obj.symbols == {n: obj.base + off for n, off in s.defined.items()})
    assert same or data != s.data, "the unmutated object loaded differently"
    if same:
        # Loaded exactly as the real object (bytes, protections, symbols): run it on real data.
        assert s.run(obj.address(s.entry)), "the loaded kernel computed wrong results"
        counts["loaded and ran correctly"] += 1
    else:
        # A mutation the loader cannot tell from real contents (a code byte, an addend, a flag
        # making code data): only the cache's checksum catches these.  Running it could crash
        # for that reason alone; what is checked is that the load stayed inside its mapping.
        counts["loaded with changed contents"] += 1


def main(last_case, n):
    munmap = instrument()
    subs = subjects()

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(cases(subs))
    def fuzz(case):
        counts["cases"] += 1
        check(subs, *case, last_case, munmap)

    for k, s in enumerate(subs):                # the real objects themselves load and run
        check(subs, k, s.data, last_case, munmap)
    assert counts["loaded and ran correctly"] == len(subs)
    counts.clear()
    fuzz()
    print(json.dumps(dict(counts)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
