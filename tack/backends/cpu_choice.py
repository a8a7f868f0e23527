"""Which CPU site bundles this node may run, chosen without archspec: the run-time half of the rule.

A CPU site bundle's header (written at build time by ``header_fields``, from archspec's data:
``backends.arch_names.cpu_site_facts``) records what a node needs to run its code:

* ``cpu_family``, ``cpu_vendor``, ``cpu_rank``: the target's family (``x86_64``), vendor
  (``generic``, ``GenuineIntel``, ``ARM``...) and depth in archspec's tree (its number of
  ancestors);
* ``cpu_features``: the CPU features the target requires, by archspec's names, which are the
  names ``/proc/cpuinfo`` lists them by;
* ``cpu_table``: archspec's detection table of the family, compact: the family's feature names
  once, then for each microarchitecture its name, vendor, CPU part, parents and features (a bit
  mask over those names: reading a table is a split and an ``int`` a row), and on aarch64
  archspec's "CPU implementer" -> vendor conversions.

Features alone do not give archspec's answer (its generic Armv8/Armv9 levels list none, Ampere1
descends from Neoverse N1 of another vendor, siblings have nested feature sets), so a node runs
archspec's own host detection (``archspec.cpu.detect.host`` with the compatibility checks for
x86_64 and aarch64) over the table with the host's cpuinfo facts, and takes that
microarchitecture and its ancestors in ``tack.archs.cpu_candidates``'s order.  A bundle is used
when its arch is among those, its target key is this LLVM's, and every feature it records is
the host's (a check of its own).  ``choose`` is the whole rule; the CPU runtime's
``site_bundles``, which the cache and ``python -m tack.site bundles status`` both call, asks
it where ``cpu_levels`` cannot answer.

Where every bundle offered is its family's root or a generic x86-64 level (what an install most
often ships), the node's features alone decide: ``backends.cpu_levels`` (``by_features``), a
module of its own that a warm process imports instead of this one; ``choose`` tries it first
too, and otherwise parses the whole table and runs the detection.  The same answer, and the
same reasons, either way.

Imports nothing heavy (no archspec, no llvmlite, no NumPy); a table is parsed once per process
for each distinct text.  Where the host gives no cpuinfo features (macOS, Windows), a family
without a table rule (ppc64le), or bundles that record no table (made by a Tack before these
fields), the caller's ``ancestry()`` answers instead: archspec, imported then and only then.
"""

from .cpu_levels import (RULE_FAMILIES, TABLE_FORMAT, by_features, header_reader, host_facts,
                         host_features, ordered, probe_order)

__all__ = ["FIELDS", "RULE_FAMILIES", "TABLE_FORMAT", "Table", "TableError", "choose", "encode_table",
           "header_fields", "host_facts", "parse_table"]
FIELDS = ("cpu_family", "cpu_vendor", "cpu_rank", "cpu_features", "cpu_table")
_ATOM_BAD = set("|/,;=\t\n\\")


class TableError(ValueError):
    """A detection table or header field that is not one this Tack writes."""


# -- build time: the header fields ---------------------------------------------------

def header_fields(facts: dict) -> dict:
    """A CPU bundle's header fields from ``arch_names.cpu_site_facts(name)``'s plain data:
    ``{family, vendor, features, rank, targets: [(name, vendor, cpu_part, [parents],
    [features])] in archspec's order, arm_vendors: {code: vendor}}``."""
    return {"cpu_family": _atom(facts["family"]), "cpu_vendor": _atom(facts["vendor"], spaces=True),
            "cpu_rank": str(int(facts["rank"])),
            "cpu_features": " ".join(sorted(_atom(f) for f in facts["features"])),
            "cpu_table": encode_table(facts["family"], facts["targets"], facts.get("arm_vendors", {}))}


def encode_table(family: str, targets, arm_vendors: dict) -> str:
    """``2|family|code=vendor,...|feature feature ...|name/vendor/part/parent,.../mask|...``:
    the family's feature names once (sorted), then each target's features as a hexadecimal bit
    mask over them (bit i: the i-th name), so that reading a table is a split and an ``int`` per
    target.  TableError for a name that would not read back."""
    names = sorted({_atom(f) for *_, features in targets for f in features})
    bit = {f: 1 << i for i, f in enumerate(names)}
    seen, rows = set(), []
    for name, vendor, part, parents, features in targets:
        if parents and parents[0] not in seen:
            raise TableError(f"{name}'s parent {parents[0]} comes after it")
        seen.add(name)
        mask = 0
        for f in features:
            mask |= bit[f]
        rows.append("/".join([_atom(name), _atom(vendor, spaces=True), _atom(part),
                              ",".join(_atom(p) for p in parents), f"{mask:x}"]))
    conv = ",".join(f"{_atom(k)}={_atom(v, spaces=True)}" for k, v in sorted(arm_vendors.items()))
    return "|".join([TABLE_FORMAT, _atom(family), conv, " ".join(names)] + rows)


def _atom(text, spaces=False) -> str:
    text = str(text)
    if _ATOM_BAD & set(text) or (not spaces and " " in text) or text.startswith("-"):
        raise TableError(f"{text!r} cannot be written in a CPU table")
    return text


# -- run time: the table -----------------------------------------------------------------

class Table:
    """A parsed detection table: ``order`` (names in archspec's order), and per name its
    ``vendor``, ``part``, ``parents``, feature set (``features(name)``; kept as bit masks over the
    table's feature names, ``bits``, so a host's check is integer arithmetic), ``ancestors(name)``
    (archspec's order) and ``depth(name)``; ``arm_vendors``.  Parsing checks every row and link;
    the ancestries are worked out for the names a host asks about (a node needs one or two of a
    family's some thirty), once each."""

    __slots__ = ("family", "arm_vendors", "order", "vendor", "part", "parents", "mask", "bits",
                 "_ancestors", "_memo")

    def __init__(self, text: str):
        parts = text.split("|")
        if len(parts) < 5 or parts[0] != TABLE_FORMAT:
            raise TableError(f"not a CPU table of format {TABLE_FORMAT}")
        self.family = parts[1]
        self.arm_vendors = dict(kv.split("=", 1) for kv in parts[2].split(",")) if parts[2] else {}
        names = parts[3].split()
        bits = self.bits = {f: 1 << i for i, f in enumerate(names)}
        if len(bits) != len(names):
            raise TableError("the table names a feature twice")
        limit = 1 << len(names)
        self.order, self.vendor, self.part, self.parents, self.mask = [], {}, {}, {}, {}
        vendors, cpu_parts, links, mask = self.vendor, self.part, self.parents, self.mask
        for row in parts[4:]:
            name, vendor, part, parents, m = fields = row.split("/")
            if len(fields) != 5 or not name or name in mask:
                raise TableError(f"table row {row[:40]!r} is malformed")
            parents = tuple(parents.split(",")) if parents else ()
            for p in parents:                   # so every ancestry can be worked out later
                if p not in mask:
                    raise TableError(f"table row {name}: parent {p} not before it")
            m = int(m, 16)
            if not 0 <= m < limit:
                raise TableError(f"table row {name}: its features are not the table's")
            self.order.append(name)
            vendors[name], cpu_parts[name], links[name] = vendor, part, parents
            mask[name] = m
        if links.get(self.family, True):
            raise TableError(f"table of {self.family!r} lacks its root")
        self._ancestors = {self.family: ()}
        self._memo = {}

    def ancestors(self, name: str) -> tuple:
        """``name``'s ancestors in archspec's order (its first parent's line, then each other
        parent's ancestors not yet named)."""
        got = self._ancestors.get(name)
        if got is None:
            value = list(self.parents[name])
            for p in self.parents[name]:
                value.extend(a for a in self.ancestors(p) if a not in value)
            got = self._ancestors[name] = tuple(value)
        return got

    def depth(self, name: str) -> int:
        """``name``'s number of ancestors (archspec's rank of a target)."""
        return len(self.ancestors(name))

    def features(self, name: str) -> frozenset:
        """The features of ``name`` by the table (archspec's ``features``)."""
        m = self.mask[name]
        return frozenset(f for f, b in self.bits.items() if m & b)

    def host(self, facts: dict) -> str:
        """archspec's ``detect.host()`` over this table for a host whose cpuinfo fields are
        ``facts`` (``vendor_id``/``flags`` on x86_64; ``CPU implementer``/``Features``/``CPU
        part`` on aarch64): the microarchitecture's name."""
        family = self.family
        if family == "x86_64":
            vendor = facts.get("vendor_id", "generic")
            features = facts.get("flags", "").split()
            part = ""
        elif family == "aarch64":
            code = facts.get("CPU implementer")
            vendor = "generic" if code is None else self.arm_vendors.get(code, code)
            features = facts.get("Features", "").split()
            part = facts.get("CPU part", "")
        else:
            raise TableError(f"no host rule for the {family} family")
        if "ssse3" in features:         # as archspec's Microarchitecture adds it to every set
            features.append("sse3")
        bits = self.bits
        have = 0
        for f in bits.keys() & features:    # the host's features the table names
            have |= bits[f]
        lacking = ~have
        mask, tvendor = self.mask, self.vendor

        def compatible(t):
            if family == "aarch64" and tvendor[t] == "generic" and t != "aarch64":
                return False
            return tvendor[t] in (vendor, "generic") and not mask[t] & lacking

        candidates = [t for t in self.order if compatible(t)]
        if not candidates:
            return family               # archspec's generic_microarchitecture(family)

        def sorting(t):
            return self.depth(t), mask[t].bit_count()

        best_generic = max((t for t in candidates if tvendor[t] == "generic"), key=sorting,
                           default=None)
        if best_generic is None:        # archspec would fail here; its root is always generic
            return family
        if part != "" and any(part == self.part[t] for t in candidates):
            candidates = [t for t in candidates if self.part[t] == part]
        candidates = [t for t in candidates if best_generic in self.ancestors(t)]
        return max(candidates, key=sorting) if candidates else best_generic

    def candidates(self, facts: dict) -> tuple:
        """The host's microarchitecture, then each ancestor, deeper first, ties in archspec's
        order: ``tack.archs.cpu_candidates`` of ``host(facts)``, from the table."""
        key = tuple(sorted(facts.items()))
        got = self._memo.get(key)
        if got is None:
            name = self.host(facts)
            anc = self.ancestors(name)
            order = {a: i for i, a in enumerate(anc)}
            got = (name,) + tuple(sorted(anc, key=lambda a: (-self.depth(a), order[a])))
            self._memo[key] = got
        return got


_tables: dict = {}


def parse_table(text: str) -> Table:
    """The table ``text`` parsed (once per process for each distinct text); TableError if malformed."""
    t = _tables.get(text)
    if t is None:
        try:
            t = Table(text)
        except TableError:
            raise
        except (ValueError, KeyError, IndexError) as e:
            raise TableError(f"malformed CPU table ({type(e).__name__}: {e})") from None
        _tables[text] = t
    return t


# -- the choice --------------------------------------------------------------------------

def choose(host: dict, offers, header, ancestry, why=None) -> list:
    """The usable CPU site bundles among ``offers``, most specific first: [(``cpu:arch``, target
    key, name)].

    ``host``: this host's identity (``cpu_identity.host_cpu_identity()``, or a made-up one).
    ``offers``: [(name, arch, target key)]: the directory's CPU bundles for this machine whose
    name carries this LLVM's key for their arch.  ``header(name)``: that bundle's header fields,
    or None when it cannot be read (called only for the bundles the choice needs: one for the
    table, then those whose arch the table makes a candidate or does not know).
    ``ancestry()``: archspec's ``cpu_candidates`` of this host (imports archspec), asked only
    where the table rule cannot answer; if it fails for bundles without a table, they are not
    used, and its error is raised only when no other bundle is.  ``why``: a dict, filled with
    name -> why not used.
    """
    why = {} if why is None else why
    if not offers:
        return []
    facts = host_facts(host)
    if facts is None:                           # no cpuinfo features: archspec's rule, by name
        order = list(ancestry())
        for name, arch, _ in offers:
            if arch not in order:
                why[name] = f"cpu:{arch} is neither this node's microarchitecture nor an ancestor of it"
        return ordered([(order.index(a), n, a, k) for n, a, k in offers if a in order])
    meta_of = header_reader(header, why)
    quick = by_features(facts, offers, meta_of, why)
    if quick is not None:
        return quick

    probe = None
    for name, arch, _ in probe_order(offers, meta_of):    # the first readable table: the family's tree
        meta = meta_of(name)
        if meta and meta.get("cpu_table"):
            try:
                probe = parse_table(meta["cpu_table"])
                probe_list = probe.candidates(facts) if probe.family == facts["machine"] else ()
                break
            except TableError:
                probe = None
    chosen, fallback, failed = [], None, None
    for name, arch, key in offers:
        if probe is not None and arch in probe.vendor and arch not in probe_list:
            why[name] = f"cpu:{arch} is neither this node's microarchitecture nor an ancestor of it"
            continue
        meta = meta_of(name)
        if meta is None:
            continue
        if meta.get("arch") != f"cpu:{arch}" or meta.get("target_key") != key:
            why[name] = "its header names another arch or target than its file name"
            continue
        if not meta.get("cpu_table"):           # made by a Tack before these fields: archspec's rule
            missing = set(meta.get("cpu_features", "").split()) - host_features(facts)
            if missing:                         # (the features it does record, checked all the same)
                why[name] = f"it needs CPU features this node lacks: {', '.join(sorted(missing))}"
                continue
            if fallback is None:
                try:
                    fallback = list(ancestry())
                except Exception as e:          # noqa: BLE001 - no archspec: said if nothing else serves
                    failed, fallback = e, []
            if failed is not None:
                why[name] = f"its header records no CPU table, and archspec cannot answer ({failed})"
            elif arch in fallback:
                chosen.append((fallback.index(arch), name, arch, key))
            else:
                why[name] = f"cpu:{arch} is neither this node's microarchitecture nor an ancestor of it"
            continue
        try:
            table = parse_table(meta["cpu_table"])
            if meta.get("cpu_family") != facts["machine"] or table.family != facts["machine"]:
                why[name] = f"built for a {meta.get('cpu_family')} CPU, this node is {facts['machine']}"
                continue
            cands = table.candidates(facts)
            if arch not in table.vendor or str(table.depth(arch)) != meta.get("cpu_rank"):
                raise TableError(f"cpu:{arch} is not the table's")
        except TableError as e:
            why[name] = f"its CPU header is malformed ({e})"
            continue
        if arch not in cands:
            why[name] = f"cpu:{arch} is neither this node's microarchitecture nor an ancestor of it"
            continue
        missing = set(meta.get("cpu_features", "").split()) - host_features(facts)
        if missing:
            why[name] = f"it needs CPU features this node lacks: {', '.join(sorted(missing))}"
            continue
        chosen.append((cands.index(arch), name, arch, key))
    if failed is not None and not chosen:
        raise failed                            # the caller says why no site bundle serves
    return ordered(chosen)


