"""How a node chooses its CPU site bundles without archspec (``backends.cpu_choice``): the same
answer as archspec's ancestor rule for every microarchitecture it knows, never a bundle that
needs a feature the host lacks, and ``bundles status`` agreeing with the runtime.

Hosts are made up (cpuinfo's fields for a CPU of each microarchitecture); archspec's expected
answer is its own ``detect.host`` run on that same made-up information, then
``tack.archs.cpu_candidates``."""

import io
import itertools
import os
import subprocess
import sys

import archspec.cpu
import archspec.cpu.detect as detect
import pytest

import tack.cache
from tack import aot, archs
from tack.backends import cpu_choice, cpu_levels, cpu_runtime
from tack.backends.arch_names import cpu_site_facts
from tack.cache import bundle
from tack.cache.bundle import SiteBundleStore
from tack.site import build

from .made_up import host_for, served_by, write_site_bundle

FAMILIES = ("x86_64", "aarch64")


def family_targets(family):
    return [t for t in archspec.cpu.TARGETS.values() if t.family.name == family]


def archspec_answer(host: dict, monkeypatch) -> list:
    """archspec's candidates for a made-up host: its own detection (``detect.host``'s code, on
    the partial microarchitecture its cpuinfo reader would make of these fields), then
    ``tack.archs.cpu_candidates``."""
    family = host["machine"]
    if family == "x86_64":
        info = detect.partial_uarch(vendor=host.get("vendor_id", "generic"),
                                    features=set(host["flags"].split()))
    else:
        info = detect.partial_uarch(vendor=detect._canonicalize_aarch64_vendor(host),
                                    features=set(host["Features"].split()),
                                    cpu_part=host.get("CPU part", ""))
    with monkeypatch.context() as m:
        m.setattr(detect, "_machine", lambda: family)
        m.setattr(detect, "detected_info", lambda: info)
        name = detect.host.__wrapped__().name          # host() without its per-process cache
    return archs.cpu_candidates(name)


def made_up_hosts(family):
    """For each microarchitecture: a host with its own vendor (each common one for a generic
    level), features and CPU part; the same less one of its features (three ways); and with
    features of a newer CPU added."""
    for t in family_targets(family):
        vendors = [t.vendor] if t.vendor != "generic" else (
            ["generic", "GenuineIntel", "AuthenticAMD"] if family == "x86_64" else ["generic", "ARM"])
        feats = sorted(t.features - {"sse3"})
        variants = [((), ())] + [((f,), ()) for f in feats[:3]] + [((), ("avx512f", "sve", "sve2"))]
        for vendor, (drop, add) in itertools.product(vendors, variants):
            yield f"{t.name}/{vendor}/-{','.join(drop)}/+{','.join(add)}", host_for(t.name, vendor, drop, add)


def family_offers(family, llvm="llvmlite-made-up"):
    """Every microarchitecture of ``family`` offered as a bundle: [(name, arch, key)] and their
    headers by name, as ``bundles build`` writes them."""
    offers, headers = [], {}
    for t in family_targets(family):
        key = cpu_runtime.arch_key(t.name, llvm)
        name = bundle.site_bundle_name(f"cpu:{t.name}", key, family)
        offers.append((name, t.name, key))
        headers[name] = dict(aot.requirements(f"cpu:{t.name}"), arch=f"cpu:{t.name}", target_key=key)
    return offers, headers


@pytest.mark.parametrize("family", FAMILIES)
def test_choice_equals_archspecs_rule_for_every_microarchitecture(family, monkeypatch):
    """On made-up hosts of every microarchitecture archspec knows in the family, the table's host
    and its ancestors, in order, are archspec's; and with a bundle for every microarchitecture,
    ``choose`` returns exactly those bundles, most specific first."""
    offers, headers = family_offers(family)
    table = cpu_choice.parse_table(next(iter(headers.values()))["cpu_table"])
    assert table.order == [t.name for t in family_targets(family)]
    assert all(table.features(t.name) == t.features for t in family_targets(family))
    hosts = list(made_up_hosts(family))
    assert len(hosts) >= 4 * len(family_targets(family))
    differ = []
    for label, host in hosts:
        want = archspec_answer(host, monkeypatch)
        got = list(table.candidates(cpu_choice.host_facts(host)))
        chosen = [arch for arch, _, _ in cpu_choice.choose(host, offers, headers.get, lambda: 1 / 0)]
        if got != want or chosen != [f"cpu:{a}" for a in want]:
            differ.append((label, want, got, chosen))
    assert differ == []


def test_every_target_is_its_own_hosts_choice_where_archspec_says_so(monkeypatch):
    """The check above can fail: for most made-up hosts archspec names the target itself, so the
    comparison covers deep trees, not only the generic levels."""
    own = sum(archspec_answer(host_for(t.name), monkeypatch)[0] == t.name
              for f in FAMILIES for t in family_targets(f))
    assert own >= 0.75 * sum(len(family_targets(f)) for f in FAMILIES)


def test_a_table_is_small_parsed_once_and_refuses_what_it_cannot_read():
    """A family's table is a few kilobytes, parsed once per distinct text; malformed text is a
    TableError naming what is wrong, never another exception."""
    text = aot.requirements("cpu:x86_64_v3")["cpu_table"]
    assert len(text) < 8192
    assert cpu_choice.parse_table(text) is cpu_choice.parse_table(text)
    assert text.startswith(cpu_choice.TABLE_FORMAT + "|")
    for bad in ("", "3|x86_64|||", "2|x86_64||", "2|x86_64|||a/b",
                # a format-1 table (features as changes from the first parent's)
                "1|x86_64||x86_64/generic////",
                "2|x86_64||avx|x86_64/generic/////",                        # six fields
                "2|x86_64||avx|x86_64/generic///0|x86_64/generic///0",      # a name twice
                "2|x86_64||avx|zen/AMD//x86_64_v9/1",                       # parent after it
                "2|x86_64||avx|x86_64/generic///0|x86_64_v2/generic//x86_64/2",  # a bit too many
                "2|x86_64||avx|x86_64/generic///-1", "2|x86_64||avx|x86_64/generic///zz",
                "2|x86_64||avx|x86_64/generic///",                          # no mask
                "2|x86_64||avx avx|x86_64/generic///0",                     # a feature twice
                "2|x86_64||avx|x86_64_v2/generic///0",                      # no root
                "2|aarch64|0x41||aarch64/generic///0"):                     # conversion without =

        with pytest.raises(cpu_choice.TableError):
            cpu_choice.parse_table(bad)
    with pytest.raises(cpu_choice.TableError):
        cpu_choice.header_fields(dict(cpu_site_facts("x86_64"), vendor="a|b"))


@pytest.fixture
def site(tmp_path):
    d = tmp_path / "site"
    d.mkdir()
    return d


def site_store(site, host=None):
    """The cache's store of ``site``, asking the CPU runtime's choice (for ``host``: made up)."""
    return SiteBundleStore(tack.cache.new_stats(), lambda m: None, str(site),
                           lambda names, header, defer=None: cpu_runtime.site_bundles(names, header, host=host, defer=defer))


def test_a_bundle_needing_a_feature_the_host_lacks_is_never_used(site):
    """Through the real store and real bundle files: a host without AVX-512 is served by the
    x86_64_v3 bundle, never the x86_64_v4 one beside it; a host with AVX-512 by x86_64_v4's."""
    for arch in ("x86_64_v4", "x86_64_v3", "x86_64"):
        write_site_bundle(site, arch)
    no_avx512 = host_for("x86_64_v3", "GenuineIntel")
    assert not any(f.startswith("avx512") for f in no_avx512["flags"].split())
    assert served_by(site_store(site, no_avx512)) == "x86_64_v3"
    assert served_by(site_store(site, host_for("x86_64_v4", "GenuineIntel"))) == "x86_64_v4"
    assert served_by(site_store(site, host_for("x86_64_v4", "GenuineIntel", drop=("avx512bw",)))) == "x86_64_v3"


def test_recorded_features_are_checked_even_where_the_tree_allows(site):
    """A bundle whose header records a feature this host lacks is not used even for an arch the
    table makes a candidate (the safety check): the next bundle serves."""
    req = aot.requirements("cpu:x86_64_v2")
    write_site_bundle(site, "x86_64_v2", requires=dict(req, cpu_features=req["cpu_features"] + " avx512f"))
    write_site_bundle(site, "x86_64")
    host = host_for("x86_64_v3", "AuthenticAMD")
    why = {}
    names = sorted(os.listdir(site))
    store = site_store(site, host)
    assert served_by(store) == "x86_64"
    cpu_runtime.site_bundles(names, store.header, host=host, why=why)
    assert [v for k, v in why.items() if "x86_64_v2" in k] == ["it needs CPU features this node lacks: avx512f"]


def test_the_store_opens_candidates_in_order_and_skips_others(site):
    """With bundles for x86_64_v2, x86_64_v3, zen3 and icelake, a made-up zen2 node opens
    x86_64_v3's then x86_64_v2's, and never zen3's (newer) or icelake's (unrelated); of those
    two it reads at most one header, the one the family's table is read from."""
    for arch in ("x86_64_v2", "x86_64_v3", "zen3", "icelake"):
        write_site_bundle(site, arch)
    store = site_store(site, host_for("zen2"))
    store._open()
    assert [os.path.basename(s.path).split("-")[3] for s in store.stores] == ["x86_64_v3", "x86_64_v2"]
    unused_read = [n for n, b in store._read.items() if "zen3" in n or "icelake" in n]
    assert len(unused_read) <= 1


def test_other_llvm_other_machine_and_damaged_bundles_are_ignored(site):
    """A bundle named for another LLVM's key, one for another machine, a damaged one and a
    malformed CPU table: none is used, none raises, and the good bundle still serves."""
    host = host_for("x86_64_v3", "GenuineIntel")
    write_site_bundle(site, "x86_64_v2", llvm="llvmlite-0.0.1")
    write_site_bundle(site, "neoverse_n1")                       # aarch64
    (site / bundle.site_bundle_name("cpu:x86_64_v3", cpu_runtime.arch_key("x86_64_v3"), "x86_64")
     ).write_bytes(b"TACKBDL1 not really")
    write_site_bundle(site, "haswell", requires=dict(aot.requirements("cpu:haswell"), cpu_table="2|x86_64|||"))
    write_site_bundle(site, "x86_64")
    said = []
    store = SiteBundleStore(tack.cache.new_stats(), said.append, str(site),
                            lambda names, header, defer=None: cpu_runtime.site_bundles(names, header, host=host, defer=defer))
    assert served_by(store) == "x86_64"
    assert len(said) == 1 and "x86_64_v3" in said[0]            # the damaged one, said once


def test_a_bundle_without_the_cpu_fields_falls_back_to_archspec(site):
    """A bundle whose header records no CPU fields (made before them) is chosen by archspec's
    rule for this host (imported then), as before."""
    here = cpu_runtime.host_arch()
    ancestor = (archs.cpu_candidates(here) + [here])[1]
    if cpu_choice.host_facts(cpu_runtime.host_cpu_identity()) is None:
        pytest.skip("this host gives no cpuinfo features")
    write_site_bundle(site, ancestor, requires={})
    write_site_bundle(site, "icelake" if here != "icelake" else "zen3", requires={})
    store = site_store(site)
    assert served_by(store) == ancestor


def test_a_host_without_cpuinfo_features_asks_archspec(site):
    """Where the host gives no cpuinfo feature line (macOS: LLVM's features instead), archspec's
    answer for this host is used, by name, without reading headers."""
    here = cpu_runtime.host_arch()
    order = archs.cpu_candidates(here)
    for arch in order[-2:]:
        write_site_bundle(site, arch)
    host = {"machine": cpu_runtime.platform.machine(), "llvm cpu": "made-up", "llvm features": "+x"}
    names = sorted(os.listdir(site))
    read = []
    got = cpu_runtime.site_bundles(names, lambda n: read.append(n), host=host)
    assert [a for a, _, _ in got] == [f"cpu:{a}" for a in order[-2:]] and read == []


def test_status_and_the_runtime_choose_the_same_bundles(site):
    """``bundles status`` and a launch's store choose the same bundles, in the same order, on
    this host: its own microarchitecture, an ancestor, and an unrelated and a newer one."""
    here = cpu_runtime.host_arch()
    order = archs.cpu_candidates(here)
    archs_built = {order[0], order[-1], "icelake" if here != "icelake" else "zen3", "zen5", "x86_64_v4"}
    family = archspec.cpu.TARGETS[here].family.name
    for arch in sorted(a for a in archs_built if archspec.cpu.TARGETS[a].family.name == family):
        write_site_bundle(site, arch)
    if family != "x86_64":
        write_site_bundle(site, order[-1])
    text = io.StringIO()
    build.bundles_status(str(site), out=text)
    last = text.getvalue().splitlines()[-1]
    assert last.startswith("this node looks first in: ")
    store = site_store(site)
    store._open()
    assert last[len("this node looks first in: "):].split(", ") == [os.path.basename(s.path) for s in store.stores]
    assert len(store.stores) >= 1


def test_without_archspec_old_bundles_are_skipped_and_new_ones_serve(site):
    """Where archspec cannot answer (not installed) a bundle without the CPU fields is not used,
    the ones with them still are; with only old ones, the choice raises archspec's error (the
    store says it once)."""
    host = host_for("x86_64_v3", "GenuineIntel")
    old = write_site_bundle(site, "x86_64_v2", requires={})
    new = write_site_bundle(site, "x86_64")

    def no_archspec():
        raise ImportError("No module named 'archspec'", name="archspec")
    headers = {n: bundle.read(str(site / n), allow_root=True).meta for n in (old, new)}
    offers = [(n, headers[n]["arch"][4:], headers[n]["target_key"]) for n in (old, new)]
    why = {}
    got = cpu_choice.choose(host, offers, headers.get, no_archspec, why)
    assert [n for _, _, n in got] == [new] and "archspec cannot answer" in why[old]
    with pytest.raises(ImportError):
        cpu_choice.choose(host, offers[:1], headers.get, no_archspec)


def _roots_and_levels(family):
    """The targets ``choose`` decides from their features alone: the family's root, and on
    x86_64 every generic level."""
    return [t for t in family_targets(family)
            if not t.parents or (family == "x86_64" and t.vendor == "generic")]


@pytest.mark.parametrize("family", FAMILIES)
def test_roots_and_generic_levels_are_chosen_by_features_as_archspec_would(family, monkeypatch):
    """With bundles for the family's root and (x86_64) each generic level, on made-up hosts of
    every microarchitecture: ``choose`` returns archspec's candidates among them, in its order,
    says the same reasons as the whole table's rule, and parses no table."""
    offers, headers = family_offers(family)
    quick = {t.name for t in _roots_and_levels(family)}
    assert quick >= ({"x86_64", "x86_64_v2", "x86_64_v3", "x86_64_v4"} if family == "x86_64" else {"aarch64"})
    offers = [o for o in offers if o[1] in quick]
    parsed = []
    real_parse = cpu_choice.parse_table
    monkeypatch.setattr(cpu_choice, "parse_table", lambda text: parsed.append(text) or real_parse(text))
    differ, fewer = [], 0
    for label, host in made_up_hosts(family):
        want = [a for a in archspec_answer(host, monkeypatch) if a in quick]
        why, before, read = {}, len(parsed), []
        chosen = [arch for arch, _, _ in cpu_choice.choose(host, offers, lambda n: read.append(n) or headers[n],
                                                           lambda: 1 / 0, why)]
        if len(parsed) != before:
            differ.append((label, "parsed the table"))
        with monkeypatch.context() as m:                # the whole table's rule, for its reasons
            m.setattr(cpu_levels, "generic_levels", lambda text, fam: None)
            why_full, read_full = {}, []
            full = [arch for arch, _, _ in cpu_choice.choose(host, offers,
                                                             lambda n: read_full.append(n) or headers[n],
                                                             lambda: 1 / 0, why_full)]
        if chosen != [f"cpu:{a}" for a in want] or full != chosen or why != why_full:
            differ.append((label, want, chosen, full, why, why_full))
        # The headers read: the table's one, then those of the levels this node has, as the whole
        # rule reads (a node without AVX2 reads neither x86_64_v3's nor x86_64_v4's).
        if sorted(read) != sorted(read_full):
            differ.append((label, "read", read, read_full))
        fewer += len(read) < len(offers)
    # the forced runs did parse, and some node read fewer headers than offered (x86_64: the check can fail)
    assert differ == [] and parsed and (fewer or len(offers) == 1)


def test_a_damaged_header_of_a_level_the_node_lacks_changes_no_choice():
    """A site's x86_64_v4 bundle whose header cannot be read, on a node without AVX-512: both
    rules try the last-listed header first for the table (``probe_order``), so that header is
    read (and its store warns of it), once; the table comes from the next, the node's levels are
    chosen as before, and the reason given for x86_64_v4 is that the node is not of its level."""
    offers, headers = family_offers("x86_64")
    offers = [o for o in offers if o[1] in ("x86_64", "x86_64_v2", "x86_64_v3", "x86_64_v4")]
    v4 = next(n for n, a, _ in offers if a == "x86_64_v4")
    read, why = [], {}

    def header(name):
        read.append(name)
        return None if name == v4 else headers[name]
    host = host_for("haswell")
    chosen = [a for a, _, _ in cpu_choice.choose(host, offers, header, lambda: 1 / 0, why)]
    assert chosen == ["cpu:x86_64_v3", "cpu:x86_64_v2", "cpu:x86_64"]
    assert read.count(v4) == 1 and why == {v4: "cpu:x86_64_v4 is neither this node's microarchitecture "
                                                "nor an ancestor of it"}


def test_a_refused_header_is_not_said_to_be_unreadable():
    """A header the store refused (another Tack's, say, which its warning names) was logged as
    "its header cannot be read", right after the warning that had read it: the reason now says
    it was refused and that the warning says why."""
    offers, headers = family_offers("x86_64")
    offers = [o for o in offers if o[1] in ("x86_64", "x86_64_v2", "x86_64_v3", "x86_64_v4")]
    v4 = next(n for n, a, _ in offers if a == "x86_64_v4")
    why = {}
    chosen = cpu_choice.choose(host_for("icelake"), offers,
                               lambda name: None if name == v4 else headers[name], lambda: 1 / 0, why)
    assert [a for a, _, _ in chosen] == ["cpu:x86_64_v3", "cpu:x86_64_v2", "cpu:x86_64"]
    assert why == {v4: "its header was refused (damaged, unreadable or another Tack's: the "
                       "warning naming the bundle says which)"}


def test_beside_a_specific_target_the_feature_rule_reads_one_header_before_giving_up(monkeypatch):
    """With bundles for the levels and zen3, the feature rule reads the first header (the table
    the whole rule reads too) and gives up: no header is read for it alone."""
    offers, headers = family_offers("x86_64")
    offers = [o for o in offers if o[1] in ("x86_64", "x86_64_v2", "x86_64_v3", "x86_64_v4", "zen3")]
    host = host_for("zen3", "AuthenticAMD")
    counts = {}
    for label in ("features", "whole"):
        read = []
        with monkeypatch.context() as m:
            if label == "whole":
                m.setattr(cpu_levels, "generic_levels", lambda text, fam: None)
            got = cpu_choice.choose(host, offers, lambda n: read.append(n) or headers[n], lambda: 1 / 0)
        counts[label] = (sorted(read), [a for a, _, _ in got])
    assert counts["features"] == counts["whole"]
    assert counts["whole"][1] == ["cpu:zen3", "cpu:x86_64_v3", "cpu:x86_64_v2", "cpu:x86_64"]


def test_a_bundle_for_a_specific_microarchitecture_takes_the_whole_tables_rule(monkeypatch):
    """Beside the generic levels, a bundle for zen3 (a specific target): the table is parsed and
    detection run, and the answer is still archspec's."""
    offers, headers = family_offers("x86_64")
    offers = [o for o in offers if o[1] in ("x86_64_v3", "zen3", "x86_64")]
    parsed = []
    real_parse = cpu_choice.parse_table
    monkeypatch.setattr(cpu_choice, "parse_table", lambda text: parsed.append(text) or real_parse(text))
    host = host_for("zen3", "AuthenticAMD")
    chosen = [a for a, _, _ in cpu_choice.choose(host, offers, headers.get, lambda: 1 / 0)]
    assert chosen == ["cpu:zen3", "cpu:x86_64_v3", "cpu:x86_64"] and parsed


def test_generic_levels_refuses_a_table_that_is_not_a_chain():
    """``generic_levels`` answers only for a chain of generic levels from the root, each holding
    the features before it: a table whose levels branch, lose a feature, name a feature it does
    not list, or are of another family or format gives None (the whole table's rule then)."""
    text = aot.requirements("cpu:x86_64_v3")["cpu_table"]
    got = cpu_levels.generic_levels(text, "x86_64")
    assert [(n, d) for n, (d, _) in got.items()] == [("x86_64", 0), ("x86_64_v2", 1), ("x86_64_v3", 2),
                                                     ("x86_64_v4", 3)]
    assert set(got["x86_64_v3"][1]) == archspec.cpu.TARGETS["x86_64_v3"].features
    parts = text.split("|")
    rows = {r.split("/")[0]: i for i, r in enumerate(parts) if r.count("/") == 4}

    def edited(name, field, value):
        p = list(parts)
        f = p[rows[name]].split("/")
        f[field] = value
        p[rows[name]] = "/".join(f)
        return "|".join(p)
    v2_mask = parts[rows["x86_64_v2"]].split("/")[4]
    assert cpu_levels.generic_levels(edited("x86_64_v3", 3, "x86_64"), "x86_64") is None      # branches
    assert cpu_levels.generic_levels(edited("x86_64_v3", 4, "1"), "x86_64") is None           # loses features
    assert cpu_levels.generic_levels(edited("x86_64_v2", 4, "f" * len(v2_mask) * 2), "x86_64") is None
    assert cpu_levels.generic_levels(edited("x86_64_v2", 4, "xyz"), "x86_64") is None
    assert cpu_levels.generic_levels(text, "aarch64") is None
    assert cpu_levels.generic_levels("9" + text[1:], "x86_64") is None
    arm = cpu_levels.generic_levels(aot.requirements("cpu:aarch64")["cpu_table"], "aarch64")
    assert list(arm) == ["aarch64"]


def test_a_site_bundle_hit_on_a_generic_level_parses_no_table(site):
    """Through the real store and bundle files, on this host: the x86_64_v3 (or aarch64) bundle
    serves and no CPU table is parsed in the process."""
    here = cpu_runtime.host_cpu_identity()
    if cpu_choice.host_facts(here) is None:
        pytest.skip("this host gives no cpuinfo features")
    family = here["machine"]
    arch = "x86_64" if family == "x86_64" else "aarch64"
    write_site_bundle(site, arch)
    before = dict(cpu_choice._tables)
    assert served_by(site_store(site)) == arch
    assert cpu_choice._tables == before


def test_of_three_levels_a_node_reads_the_header_of_the_one_it_serves_from_alone(site):
    """A site shipping x86_64_v2, _v3 and _v4 (conda's levels), on a node with AVX-512: the
    store reads x86_64_v4's header alone (the table and that level's check) and serves from it;
    the other two, which it would look in next, are not opened.  Checked eagerly (``bundles
    status``), the choice is the same bundles in the same order, every header read."""
    names = sorted(write_site_bundle(site, a) for a in ("x86_64_v2", "x86_64_v3", "x86_64_v4"))
    host = host_for("x86_64_v4", "GenuineIntel")
    store = site_store(site, host)
    assert served_by(store) == "x86_64_v4"
    v4 = next(n for n in names if "x86_64_v4" in n)
    assert list(store._read) == [v4]
    assert [os.path.basename(s.path) for s in store.stores] == [names[2], names[1], names[0]]
    assert [s.bundle is None for s in store.stores] == [False, True, True]
    read = []
    eager = cpu_runtime.site_bundles(names, lambda n: read.append(n) or store.header(n), host=host)
    assert [n for _, _, n in eager] == [names[2], names[1], names[0]] and sorted(read) == names


def test_a_level_left_unread_is_checked_when_a_lookup_reaches_it(site, caplog):
    """The levels whose headers the choice left unread are checked by the same rule when a
    lookup first opens them: an x86_64_v3 bundle whose header needs a feature the node lacks is
    passed over, said only in the log (as the choice says it), and x86_64_v2's serves; its
    reason is the one the eager choice gives.  ``load_bundle``'s rank 0 checks them too."""
    import logging

    from tack.cache import bcast
    req = aot.requirements("cpu:x86_64_v3")
    write_site_bundle(site, "x86_64_v4", empty=True)        # read for the table, and misses
    v3 = write_site_bundle(site, "x86_64_v3", requires=dict(req, cpu_features=req["cpu_features"] + " amx_tile"))
    write_site_bundle(site, "x86_64_v2")
    host = host_for("x86_64_v4", "GenuineIntel")
    assert "amx_tile" not in host["flags"].split()
    said = []
    store = SiteBundleStore(tack.cache.new_stats(), said.append, str(site),
                            lambda names, header, defer=None: cpu_runtime.site_bundles(
                                names, header, host=host, defer=defer))
    with caplog.at_level(logging.DEBUG, logger="tack.cache"):
        assert served_by(store) == "x86_64_v2"
    assert said == []
    reason = "it needs CPU features this node lacks: amx_tile"
    assert any(v3 in r.getMessage() and reason in r.getMessage() for r in caplog.records)
    why = {}
    cpu_runtime.site_bundles(sorted(os.listdir(site)), store.header, host=host, why=why)
    assert why == {v3: reason}
    rows = bcast._site_bundles_in(str(site), "no-packed-bundle-key", lambda names, header, defer=None:
                                  cpu_runtime.site_bundles(names, header, host=host, defer=defer),
                                  said.append, tack.cache.new_stats())
    assert [arch for _, arch, _, _ in rows] == ["cpu:x86_64_v4", "cpu:x86_64_v2"] and said == []


def test_a_chosen_bundle_replaced_in_place_is_checked_again(site):
    """The bundle whose header the choice read (x86_64_v4, the table's too) was opened again,
    unchecked, when a file was copied over it mid-job: one whose header needs a feature this
    node lacks then served.  Every chosen bundle's store now checks a file replacing it by the
    same rule: the lookup goes on to x86_64_v3's."""
    import shutil
    names = {a: write_site_bundle(site, a) for a in ("x86_64_v3", "x86_64_v4")}
    host = host_for("x86_64_v4", "GenuineIntel")
    store = site_store(site, host)
    assert served_by(store) == "x86_64_v4" and store.stores[0].check is not None
    lying = site.parent / "lying"
    lying.mkdir()
    req = aot.requirements("cpu:x86_64_v4")
    write_site_bundle(lying, "x86_64_v4", requires=dict(req, cpu_features=req["cpu_features"] + " amx_tile"))
    shutil.copyfile(lying / names["x86_64_v4"], site / names["x86_64_v4"])      # cp over it, in place
    assert served_by(store) == "x86_64_v3"


def test_a_job_and_status_judge_levels_by_the_same_table(site, monkeypatch):
    """Where two level bundles' tables disagree (a faulty writer: x86_64_v4's table says
    x86_64_v3 needs a feature this node lacks; x86_64_v2's does not), a job took its table from
    the last-listed header and ``bundles status`` from the first: status listed x86_64_v3 first,
    the job never used it.  Both now read the table in one order (``probe_order``), so they
    name the same bundles in the same order."""
    for arch in ("x86_64_v2", "x86_64_v3"):
        write_site_bundle(site, arch)
    req = aot.requirements("cpu:x86_64_v4")
    text = req["cpu_table"]
    parts = text.split("|")
    names = parts[3].split()
    bit = 1 << len(names)                       # one more feature, "amx_tile", needed by v3 and v4
    rows = []
    for row in parts[4:]:
        f = row.split("/")
        if f[0] in ("x86_64_v3", "x86_64_v4"):
            f[4] = f"{int(f[4], 16) | bit:x}"
        rows.append("/".join(f))
    lied = "|".join(parts[:3] + [" ".join(names + ["zzz_amx_tile"])] + rows)
    write_site_bundle(site, "x86_64_v4", requires=dict(req, cpu_table=lied))
    host = host_for("x86_64_v4", "GenuineIntel")
    store = site_store(site, host)
    store._open()
    job = [os.path.basename(s.path) for s in store.stores]
    monkeypatch.setattr(cpu_runtime, "host_cpu_identity", lambda: host)     # status's node: the same
    paths = [str(site / n) for n in sorted(os.listdir(site))]
    status, _ = build.choice(paths, {p: bundle.read(p, allow_root=True) for p in paths})
    assert job == [n for _, _, n in status] and len(job) == 1 and "x86_64_v2" in job[0]


def test_a_bundle_without_a_table_needing_a_feature_the_node_lacks_is_not_used(site):
    """A bundle whose header records no CPU table (archspec's rule by name then) was used though
    its ``cpu_features`` named one this node lacks: those features are checked in that rule too."""
    req = aot.requirements("cpu:x86_64_v3")
    no_table = {k: v for k, v in req.items() if k != "cpu_table"}
    v3 = write_site_bundle(site, "x86_64_v3", requires=dict(no_table, cpu_features=req["cpu_features"] + " amx_tile"))
    write_site_bundle(site, "x86_64")
    host = host_for("x86_64_v4", "GenuineIntel")
    why = {}
    got = cpu_choice.choose(host, [(v3, "x86_64_v3", cpu_runtime.arch_key("x86_64_v3"))],
                            lambda n: bundle.read(str(site / n), allow_root=True).meta,
                            lambda: ["x86_64_v4", "x86_64_v3", "x86_64_v2", "x86_64"], why)
    assert got == [] and why == {v3: "it needs CPU features this node lacks: amx_tile"}



def test_a_host_without_cpuinfo_features_serves_from_a_deferred_choice(site):
    """On a host whose cpuinfo lists no features (macOS, Windows, ppc64le: archspec's rule by
    name), the checks a job's choice hands its stores (``defer``) ran the feature rule on no
    facts, failed, and refused every bundle, said only in the log: every kernel compiled.  The
    check takes archspec's rule there too, and the bundle serves."""
    here = cpu_runtime.host_arch()
    order = archs.cpu_candidates(here)
    write_site_bundle(site, order[-1])
    host = {"machine": cpu_runtime.platform.machine(), "llvm cpu": "made-up", "llvm features": "+x"}
    said = []
    store = SiteBundleStore(tack.cache.new_stats(), said.append, str(site),
                            lambda names, header, defer=None: cpu_runtime.site_bundles(
                                names, header, defer, host=host))
    assert served_by(store) == order[-1] and said == []


def test_a_header_check_that_fails_is_a_warning_and_the_next_bundle_serves(site):
    """Where the choice's check of a header fails (archspec's rule raising, say), the bundle is
    not used, and that is said as a warning naming it: no verdict on the bundle, so not the
    log-only line of one this node does not use; the next bundle serves."""
    v3 = write_site_bundle(site, "x86_64_v3")
    write_site_bundle(site, "x86_64_v2")
    host = host_for("x86_64_v3", "GenuineIntel")
    said = []

    def choice(names, header, defer=None):
        got = cpu_runtime.site_bundles(names, header, defer, host=host)
        defer[v3] = lambda meta: 1 / 0              # the rule failing when the store opens it
        return got
    store = SiteBundleStore(tack.cache.new_stats(), said.append, str(site), choice)
    store._open()
    store.stores[0].bundle = None                   # (as one the choice left unread)
    assert served_by(store) == "x86_64_v2"
    assert len(said) == 1 and v3 in said[0] and "cannot be checked against this node (ZeroDivisionError" in said[0]


def test_the_host_is_named_alike_where_encoding_warnings_are_errors():
    """archspec reads /proc/cpuinfo without naming an encoding: under ``-X warn_default_encoding``
    and ``-W error::EncodingWarning`` its detection failed, and ``pack`` named this node's bundle
    for the family (``cpu:x86_64``)."""
    code = "from tack.archs import host_cpu; print(host_cpu())"
    names = [subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                            check=True, timeout=120).stdout.strip()
             for flags in ([], ["-X", "warn_default_encoding", "-W", "error::EncodingWarning"])]
    assert names[0] and names[1] == names[0]
