"""Which CPU site bundles this node may run, where its features alone decide: the run-time
rule a warm process runs (``backends.cpu_choice`` holds the whole rule, and the build-time half).

Two kinds of bundle need no detection, and are what an install most often ships: a family's
root (``x86_64``, ``aarch64``: every node of the family descends from it), and archspec's generic
x86-64 levels (``x86_64_v2``, ``_v3``, ``_v4``).  Those levels are a chain, each holding the
features of the one before, and the only generic x86-64 targets: the deepest level whose
features a node has is the microarchitecture archspec detects for it or an ancestor of it, and
so is every level below; a level whose features it lacks is neither.  So a level is among the
node's candidates exactly when the node has its features, the deeper first: where every bundle
offered is such a level or a root, ``by_features`` decides from the headers' features and the
table's rows for those levels alone (``generic_levels``: checked to form that chain), the same
answer and the same reasons as ``cpu_choice.choose``'s whole rule, without parsing the table or
running the detection.  Otherwise it answers None, and the caller asks the whole rule
(``cpu_runtime.site_bundles``, which the cache and ``bundles status`` both call, and
``cpu_choice.choose``, which tries this rule first too).

Kept apart from ``cpu_choice`` so that a node served by such bundles (the common install)
defines none of the detection table's parsing and rule: its import is a third of that module's.
Imports nothing but ``itertools``.
"""

from itertools import compress

TABLE_FORMAT = "2"                            # 1: features as changes from the first parent's
RULE_FAMILIES = ("x86_64", "aarch64")         # the families whose host detection is replicated


HOST_FIELDS = ("machine", "vendor_id", "flags", "CPU implementer", "Features", "CPU part")


def host_facts(host: dict):
    """The cpuinfo facts of ``host`` (``cpu_identity.host_cpu_identity()``'s dict) the table rule
    reads, or None where it cannot apply: no cpuinfo feature line (macOS, Windows: LLVM's
    instead) or a family without a rule here.  An empty line is archspec's empty set too."""
    machine = host.get("machine")
    if machine not in RULE_FAMILIES or ("flags" if machine == "x86_64" else "Features") not in host:
        return None
    return {k: host[k] for k in HOST_FIELDS if k in host}


_HEX = "0123456789abcdef"
_BIT_BYTES = bytes.maketrans(b"01", b"\x00\x01")


def _named_bits(names: list, mask: int) -> list:
    """The names whose bits are set in ``mask`` (bit i: ``names[i]``), in order; picked by C
    loops (``itertools.compress`` over the mask's binary digits), not a shift per name."""
    return list(compress(names, bin(mask)[:1:-1].encode().translate(_BIT_BYTES)))


def generic_levels(text: str, family: str):
    """{name: (depth, required features)} of the targets of table ``text`` that a node's
    features alone decide (see the module's docstring): the family's root, and on x86_64 every
    generic target, if they form a chain from the root, each one's features holding those of
    the one before; None where the table is not such (malformed, another format or family, or
    generic x86-64 targets not in a chain): the whole table's rule then decides.  Reads the
    generic rows alone (no ``Table``)."""
    parts = text.split("|")
    if len(parts) < 5 or parts[0] != TABLE_FORMAT or parts[1] != family or family not in RULE_FAMILIES:
        return None
    names = parts[3].split()
    levels, before, held = {}, "", 0
    for row in parts[4:]:
        if "/generic/" not in row:
            continue
        fields = row.split("/")
        if len(fields) != 5 or fields[1] != "generic":
            return None
        name, _, _, parents, mask = fields
        if parents != before or not mask or mask.strip(_HEX):
            return None                         # not the next link of the chain
        m = int(mask, 16)
        if m >> len(names) or held & ~m:
            return None                         # features not the table's, or fewer than before
        levels[name] = (len(levels), _named_bits(names, m))
        if family != "x86_64":
            break                               # aarch64: its root alone (archspec's rule never
        before, held = name, m                  # takes a generic Arm level above it)
    return levels or None


def probe_order(offers, meta_of) -> list:
    """The offers in the order both rules try their headers for the family's table: a header
    read already first (``meta_of.held``), then from the last offer (names sort by level, so
    that is the deepest level's header: the one a node with its features serves from, whose
    header it reads anyway).  One order for a job and ``bundles status``, so that where two
    bundles' tables disagree (a faulty writer) both judge by the same one."""
    held = meta_of.held
    return sorted(offers[::-1], key=lambda o: o[0] not in held)


def host_features(facts) -> set:
    """The host's cpuinfo features, with archspec's ``sse3`` where ``ssse3`` is listed."""
    features = set((facts.get("flags") or facts.get("Features") or "").split())
    if "ssse3" in features:
        features.add("sse3")
    return features


def header_reader(header, why: dict):
    """``header`` (name -> a bundle's header fields, or None when it cannot be read) asked once
    for each name; an unreadable one's reason put in ``why``.  ``meta_of.held``: the names read
    ({name: fields}).  ``header`` itself where it is such a reader, filling ``why``."""
    if getattr(header, "why", None) is why:
        return header
    metas = {}

    def meta_of(name):
        if name not in metas:
            metas[name] = header(name)
            if metas[name] is None:
                why[name] = ("its header was refused (damaged, unreadable or another Tack's: "
                             "the warning naming the bundle says which)")
        return metas[name]
    meta_of.held, meta_of.why = metas, why
    return meta_of


def by_features(facts, offers, meta_of, why, later=None):
    """``cpu_choice.choose``'s answer where every bundle offered is its family's root or a generic x86-64
    level, from the table's generic rows (``generic_levels``) and the features: the first
    readable header in ``probe_order`` names the levels (the one header the whole rule reads for
    its table too), then only the headers of the levels this node has are read, each checked
    against its own table.  None where any other bundle is offered (seen before any other header is read) or
    a header is not as this rule needs it: the whole rule then, with no reason said here.

    The table is read in ``probe_order``, as the whole rule reads it.

    ``later``: a list where a lookup may check headers itself (``cpu_runtime.site_bundles``'
    ``defer``): a level this node
    has whose header is not read yet is answered in its place unread, its offer appended to
    ``later``: the lookup that reaches it checks its header by this same rule (``check_later``)."""
    tables, levels = {}, None

    def levels_of(text):
        if text not in tables:
            tables[text] = generic_levels(text, facts["machine"])
        return tables[text]

    for name, _, _ in probe_order(offers, meta_of):        # the family's levels
        meta = meta_of(name)
        if meta is not None:
            text = meta.get("cpu_table")
            levels = levels_of(text) if text else None
            break
    if not levels or any(arch not in levels for _, arch, _ in offers):
        return None                             # another target: the whole rule
    have = host_features(facts)
    mine, chosen, unread = {}, [], []
    for name, arch, key in offers:
        if not have.issuperset(levels[arch][1]):
            mine[name] = f"cpu:{arch} is neither this node's microarchitecture nor an ancestor of it"
            continue                            # its header never read, as the whole rule
        if later is not None and name not in meta_of.held:
            unread.append((name, arch, key))    # checked by the lookup that reaches it
            chosen.append((-levels[arch][0], name, arch, key))
            continue
        meta = meta_of(name)
        if meta is None:
            continue                            # unreadable: said, and left out by both rules
        text = meta.get("cpu_table")
        if not text or meta.get("arch") != f"cpu:{arch}" or meta.get("target_key") != key \
                or meta.get("cpu_vendor") != "generic" or meta.get("cpu_family") != facts["machine"]:
            return None
        got = (levels_of(text) or {}).get(arch)
        if not got or meta.get("cpu_rank") != str(got[0]):
            return None
        depth, needs = got
        if not have.issuperset(needs):
            mine[name] = f"cpu:{arch} is neither this node's microarchitecture nor an ancestor of it"
            continue
        missing = set(meta.get("cpu_features", "").split()) - have
        if missing:
            mine[name] = f"it needs CPU features this node lacks: {', '.join(sorted(missing))}"
            continue
        chosen.append((-depth, name, arch, key))
    why.update(mine)
    if later is not None:
        later.extend(unread)
    return ordered(chosen)


def ordered(rows) -> list:
    return [(f"cpu:{arch}", key, name) for _, name, arch, key in sorted(rows)]
