"""Reading and patching the fields of a real ELF object, and loading one in a child process (for the loader's tests)."""

import json
import struct
import subprocess
import sys

HEADER_FIELDS = {"e_type": (16, "<H"), "e_machine": (18, "<H"), "e_version": (20, "<I"), "e_entry": (24, "<Q"),
                 "e_shoff": (40, "<Q"), "e_flags": (48, "<I"), "e_ehsize": (52, "<H"),
                 "e_shentsize": (58, "<H"), "e_shnum": (60, "<H"), "e_shstrndx": (62, "<H")}
SECTION_FIELDS = {"name": (0, "<I"), "type": (4, "<I"), "flags": (8, "<Q"), "addr": (16, "<Q"),
                  "offset": (24, "<Q"), "size": (32, "<Q"), "link": (40, "<I"), "info": (44, "<I"),
                  "align": (48, "<Q"), "entsize": (56, "<Q")}
SYMBOL_FIELDS = {"name": (0, "<I"), "info": (4, "<B"), "other": (5, "<B"), "shndx": (6, "<H"),
                 "value": (8, "<Q"), "size": (16, "<Q")}
RELA_FIELDS = {"offset": (0, "<Q"), "info": (8, "<Q"), "addend": (16, "<Q")}


class Elf:
    """A mutable copy of an ELF64 object, with the file offset of each field it holds."""

    def __init__(self, data: bytes):
        self.data = bytearray(data)
        self.shoff, = struct.unpack_from("<Q", data, 40)
        self.shnum, = struct.unpack_from("<H", data, 60)

    def get(self, at, fmt):
        return struct.unpack_from(fmt, self.data, at)[0]

    def put(self, at, fmt, value):
        struct.pack_into(fmt, self.data, at, value & ((1 << 8 * struct.calcsize(fmt)) - 1))

    def section_at(self, i, field):
        return self.shoff + 64 * i + SECTION_FIELDS[field][0]

    def section(self, i, field):
        return self.get(self.section_at(i, field), SECTION_FIELDS[field][1])

    def set_section(self, i, field, value):
        self.put(self.section_at(i, field), SECTION_FIELDS[field][1], value)

    def name(self, i):
        table = self.get(62, "<H")
        start = self.section(table, "offset") + self.section(i, "name")
        return bytes(self.data[start:self.data.index(b"\0", start)]).decode()

    def index(self, name):
        return next(i for i in range(self.shnum) if self.name(i) == name)

    def of_type(self, stype):
        return [i for i in range(self.shnum) if self.section(i, "type") == stype]

    def entries(self, i):
        """File offsets of the 24-byte entries of section ``i`` (a symbol table or RELA section)."""
        off, size = self.section(i, "offset"), self.section(i, "size")
        return list(range(off, off + size - size % 24, 24))

    def fields(self):
        """[(file offset, struct format, label)] of every header, section, symbol and relocation field."""
        out = [(at, fmt, f"header.{f}") for f, (at, fmt) in HEADER_FIELDS.items()]
        for i in range(self.shnum):
            out += [(self.section_at(i, f), fmt, f"section{i}.{f}") for f, (_, fmt) in SECTION_FIELDS.items()]
            kind = {2: ("symbol", SYMBOL_FIELDS), 4: ("rela", RELA_FIELDS)}.get(self.section(i, "type"))
            if kind:
                for k, at in enumerate(self.entries(i)):
                    out += [(at + d, fmt, f"{kind[0]}{k}.{f}") for f, (d, fmt) in kind[1].items()]
        return out


CHILD = """
import json, sys
from tack.backends import cpu_loader as loader
data = sys.stdin.buffer.read()
try:
    obj = loader.load(data)
except loader.LoadError as e:
    print(json.dumps({"outcome": "LoadError", "message": str(e), "well_formed": e.well_formed}))
else:
    inside = all(obj.base <= a < obj.base + obj.size for a in obj.symbols.values())
    print(json.dumps({"outcome": "loaded", "symbols_inside": inside, "symbols": sorted(obj.symbols)}))
"""


def load_in_child(data: bytes) -> dict:
    """``tack.backends.cpu_loader.load(data)`` in a child process, so that a crash fails the test instead of ending pytest."""
    proc = subprocess.run([sys.executable, "-c", CHILD], input=bytes(data), capture_output=True)
    assert proc.returncode == 0, f"the loader's process died (status {proc.returncode}): {proc.stderr[-2000:]!r}"
    return json.loads(proc.stdout)
