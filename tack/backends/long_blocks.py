"""Cut very long basic blocks of optimized LLVM IR before instruction selection.

LLVM's instruction selection (one SelectionDAG per basic block) and its machine
scheduler (one region per block) are superlinear in a block's length when one
value has many uses in it: ``ScheduleDAGMILive::collectVRegUses`` scans a
register's uses in the region for each use, and the DAG scheduler's
Sethi-Ullman numbering is likewise quadratic there.  Straight-line kernels
make such blocks: the middle end turns each small ``if`` into a ``select`` and
merges everything into the grid loop's body, so a 20,000-statement kernel is
one block of about 40,000 instructions, with a constant used by thousands of
them; emitting it took 2.4 s against 0.25 s for a quarter of it.

``cut(text, limit)`` splits every block of more than ``limit`` instructions
into pieces of ``limit`` joined by unconditional branches, which changes
nothing the code does.  ``CodeGenPrepare`` would merge them straight back
(``eliminateFallThrough``), except for a block whose address is taken: every
new block's ``blockaddress`` is listed in one named metadata node
(``!tack.cuts``), which keeps them apart up to instruction selection and
emits nothing.  The machine passes after register allocation merge the
fall-through blocks again (in the cases measured the object code is byte for
byte the same as without the cut, only much sooner made).

It works on the text LLVM prints (llvmlite has no API to edit a parsed
module): labels at the start of a line, instructions indented by two spaces.
A function it is not sure of (one that takes a block's address already) is
left whole.  The successors' ``phi`` nodes name the last piece, the block's
new end, as their predecessor.
"""

from __future__ import annotations

import re

_LABEL = re.compile(r'("(?:[^"\\]|\\.)*"|[-a-zA-Z$._][-a-zA-Z$._0-9]*|[0-9]+):')
_FUNC = re.compile(r'@("(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)\(')
_MDNUM = re.compile(r"^!(\d+) = ", re.M)
PREFIX = "tack.cut."


def _is_inst(line: str) -> bool:
    """An instruction's first line: two spaces in, not a continuation (a switch's cases and
    closing bracket, a landingpad's clauses) nor a debug record or comment."""
    return len(line) > 2 and line[0] == line[1] == " " and line[2] not in " ]#;"


def cut(text: str, limit: int) -> tuple[str, int]:
    """``text`` (a module's IR) with every basic block of more than ``limit`` instructions cut
    into pieces of at most ``limit`` (and the branch to the next): -> (new text, number of
    cuts).  The text is returned as it is when no block is that long."""
    lines = text.split("\n")
    out: list[str] = []
    pinned: list[str] = []          # blockaddress(...) of every new block
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not (line.startswith("define ") and line.rstrip().endswith("{")):
            out.append(line)
            i += 1
            continue
        j = i + 1
        while j < n and lines[j] != "}":
            j += 1
        out.extend(_cut_function(lines[i:j + 1], limit, pinned))
        i = j + 1
    if not pinned:
        return text, 0
    md = max((int(m) for m in _MDNUM.findall(text)), default=-1) + 1
    out.append(f"!tack.cuts = !{{!{md}}}")
    out.append(f"!{md} = !{{{', '.join(pinned)}}}")
    out.append("")
    return "\n".join(out), len(pinned)


def _cut_function(fl: list[str], limit: int, pinned: list[str]) -> list[str]:
    body = fl[1:-1]
    fm = _FUNC.search(fl[0])
    if fm is None or any("blockaddress" in line for line in body):
        return fl
    fname = fm.group(1)
    starts = [k for k, line in enumerate(body) if _LABEL.match(line)]
    if not starts:
        return fl
    res = [fl[0]] + body[:starts[0]]          # an unnamed entry block is left whole
    renames: dict[str, str] = {}
    for s, e in zip(starts, starts[1:] + [len(body)]):
        block = body[s:e]
        insts = [k for k, line in enumerate(block) if _is_inst(line)]
        if len(insts) <= limit:
            res.extend(block)
            continue
        last_inst = insts[-1]
        name = _LABEL.match(block[0]).group(1)
        new_name = None
        count = 0
        prev_ok = False                 # may the block end after the previous line?
        res.append(block[0])
        for k in range(1, len(block)):
            line = block[k]
            inst = _is_inst(line)
            if inst and count >= limit and prev_ok and k != last_inst:
                new_name = f"{PREFIX}{len(pinned) + 1}"
                pinned.append(f"ptr blockaddress(@{fname}, %{new_name})")
                res.append(f"  br label %{new_name}")
                res.append(f"{new_name}:")
                count = 0
            if inst:
                count += 1
                prev_ok = " = phi " not in line and "musttail " not in line \
                    and " landingpad " not in line
            elif line.startswith("  ") and not line.startswith("   "):
                prev_ok = False         # a switch's closing bracket, a debug record
            res.append(line)
        if new_name is not None:
            renames[name] = new_name
    if renames:                         # successors' phis: the block now ends in its last piece
        pat = re.compile(r"(, %)(" + "|".join(re.escape(k) for k in renames) + r")( \])")
        for k, line in enumerate(res):
            if " = phi " in line:
                res[k] = pat.sub(lambda m: m.group(1) + renames[m.group(2)] + m.group(3), line)
    res.append(fl[-1])
    return res
