"""The stores behind one protocol: each is a ``Store``, each reads what the user's directory wrote, and misses say why."""

import os
import platform
import shutil
import stat
import time

import pytest

import tack.cache
from tack.cache import bundle, bundle_write, entry, keys, protocol, stores, stores_write

HOST = "a" * 64                 # made-up target keys: the caller names them, the cache never does
OTHER = "b" * 64
ARCH_KEY = "c" * 64
META = {"dep": [], "site": [], "entry": "k_main", "kernel": "kmod.k_main"}


def variant_key(target_key):
    return keys.digest("variant", ("test", "stores"), ("target", target_key))


def settings(directory, mode="write"):
    return tack.cache.Settings(str(directory), mode, None, {})


def disk(directory, mode="write", warn=None):
    return stores.DiskCache(settings(directory, mode), tack.cache.new_stats(), warn or (lambda m: None))


@pytest.fixture
def written(tmp_path):
    """A user's directory holding one variant for each of two targets, HOST's and ARCH_KEY's, and a
    bundle of each (one packed for this host, one built for an arch, in a site directory)."""
    d = disk(tmp_path / "cache")
    for tk in (HOST, ARCH_KEY):
        assert stores_write.store(d, entry.KIND_VARIANT, variant_key(tk), dict(META, target_key=tk),
                                  f"code for {tk[0]}".encode())
    site = tmp_path / "site"
    site.mkdir()
    for tk, name in ((HOST, bundle.bundle_name(HOST)), (ARCH_KEY, bundle.site_bundle_name("cpu:zen2", ARCH_KEY))):
        data = (tmp_path / "cache" / keys.tack_version_id() / "variants" / variant_key(tk)[:2]
                / (variant_key(tk) + ".tvar")).read_bytes()
        (site / name).write_bytes(bundle_write.pack([(entry.KIND_VARIANT, variant_key(tk), data)],
                                              {"tack": keys.tack_version_id(), "target_key": tk}))
    return tmp_path / "cache", site


def every_store(cache, site):
    """One store of each kind, each able to serve HOST's variant or ARCH_KEY's."""
    st, warn = tack.cache.new_stats(), (lambda m: None)
    return {
        "disk": disk(cache),
        "bundle": bundle.BundleStore(st, warn, str(site / bundle.bundle_name(HOST)), target_key=HOST),
        "packed": stores.PackedBundles(st, warn, str(site), HOST),
        "site": bundle.SiteBundleStore(st, warn, str(site),
                                       lambda names, header, defer=None: bundle.named_candidates([("cpu:zen2", ARCH_KEY)], names)),
        "session": stores.open_session(settings(cache), st, warn, HOST, lambda names, header, defer=None: [],
                                       sites=[str(site)]),
    }


class TestProtocol:
    def test_every_store_is_a_store(self, written):
        """The user's directory, a bundle, a site's bundle directory and a session all satisfy ``Store``."""
        for name, store in every_store(*written).items():
            assert isinstance(store, protocol.Store), name

    def test_something_else_is_not(self):
        """An object without the protocol's members is not a ``Store``."""
        assert not isinstance(object(), protocol.Store)
        assert not isinstance(tack.cache.Settings("/x", "write", None, {}), protocol.Store)

    def test_every_store_reads_a_variant_for_the_targets_it_serves(self, written):
        """Each store finds a variant by the key function: the user's directory for each target the
        caller names in turn, a bundle for its own target."""
        found = {}
        for name, store in every_store(*written).items():
            got, why = store.read(entry.KIND_VARIANT, variant_key, "variant", targets=[OTHER, HOST])
            assert got is not None and why == "", (name, why)
            found[name] = got.payload
        assert found == {"disk": b"code for a", "bundle": b"code for a", "packed": b"code for a",
                         "site": b"code for c", "session": b"code for a"}

    def test_every_store_misses_with_the_reason_missing(self, written):
        """A key no store holds: every store answers (None, "missing")."""
        for name, store in every_store(*written).items():
            assert store.read(entry.KIND_VARIANT, "0" * 64, "variant") == (None, entry.MISSING), name

    def test_only_the_users_directory_is_written(self, written):
        """``writable``: the user's directory (and a session through it) is written; a bundle
        never.  Storing (``stores_write``) goes to a session's user's directory, and a session
        without one stores nothing."""
        cache, site = written
        for name, store in every_store(cache, site).items():
            assert store.writable is (name in ("disk", "session")), name
        st, warn = tack.cache.new_stats(), (lambda m: None)
        session = stores.open_session(settings(cache), st, warn, HOST, lambda names, header, defer=None: [])
        lowered = keys.digest("lowered", ("test", "stores"))
        assert stores_write.store_lowered(session, lowered, {"dep": []}, b"x")
        found, why = session.read(entry.KIND_LOWERED, lowered, "lowered")
        assert why == "" and found.payload == b"x" and found.source == "cache directory"
        bundles_only = stores.open_session(settings(cache, "bundle"), st, warn, HOST, lambda names, header, defer=None: [])
        assert bundles_only.disk is None and not bundles_only.writable
        assert not stores_write.store_lowered(bundles_only, "2" * 64, {"dep": []}, b"y")
        assert not (cache / keys.tack_version_id() / "lowered" / "22").exists()

    def test_a_warm_lookup_defines_no_writing(self, written):
        """The read side names none of the write side: a bundle store or the user's directory
        has no ``write``, ``touch`` or ``discard`` (``stores_write`` has them, for a process that
        stores)."""
        for name, store in every_store(*written).items():
            for method in ("write", "touch", "discard"):
                assert not hasattr(store, method), (name, method)


def _entry_bytes(cache, tk):
    return (cache / keys.tack_version_id() / "variants" / variant_key(tk)[:2]
            / (variant_key(tk) + ".tvar")).read_bytes()


class TestTargets:
    def test_packed_bundles_open_one_bundle_per_target_in_the_callers_order(self, written):
        """``PackedBundles``: for each of the caller's targets, best first, the bundle ``pack`` made
        for it (a GPU device's driver-built code beside its portable code); a bundle whose entry
        is damaged is passed over for the next target's, saying why if none serves; without
        targets (a lowered kernel's lookup), the session's own target's."""
        cache, site = written
        pack = lambda tk, data: bundle_write.pack(                          # noqa: E731
            [(entry.KIND_VARIANT, variant_key(tk), data)], {"tack": keys.tack_version_id(), "target_key": tk})
        (site / bundle.bundle_name(ARCH_KEY)).write_bytes(pack(ARCH_KEY, _entry_bytes(cache, ARCH_KEY)))
        p = stores.PackedBundles(tack.cache.new_stats(), lambda m: None, str(site), HOST)
        read = lambda targets: p.read(entry.KIND_VARIANT, variant_key, "variant", targets)  # noqa: E731
        assert read([ARCH_KEY, HOST])[0].payload == b"code for c"
        assert read([OTHER, HOST])[0].payload == b"code for a"
        assert read([OTHER]) == (None, entry.MISSING)
        assert p.read(entry.KIND_VARIANT, variant_key(HOST), "variant")[0].payload == b"code for a"
        damaged = bytearray(_entry_bytes(cache, ARCH_KEY))
        damaged[-1] ^= 0xFF                                                 # its payload's last byte
        (site / bundle.bundle_name(ARCH_KEY)).write_bytes(pack(ARCH_KEY, bytes(damaged)))
        p = stores.PackedBundles(tack.cache.new_stats(), lambda m: None, str(site), HOST)
        got, why = read([ARCH_KEY, HOST])
        assert got.payload == b"code for a" and why == ""
        got, why = read([ARCH_KEY])
        assert got is None and "damaged" in why, why

    def test_users_directory_tries_the_callers_targets_in_order(self, written):
        """The first of the caller's targets with an entry wins; a target it does not name is never tried."""
        d = disk(written[0])
        got, _ = d.read(entry.KIND_VARIANT, variant_key, "variant", targets=[ARCH_KEY, HOST])
        assert got.payload == b"code for c"
        assert d.read(entry.KIND_VARIANT, variant_key, "variant", targets=[OTHER]) == (None, entry.MISSING)
        assert d.read(entry.KIND_VARIANT, variant_key, "variant") == (None, entry.MISSING)

    def test_site_bundles_are_asked_once_and_only_when_reached(self, written):
        """A session asks the caller's ``site_bundles`` only when a lookup reaches the site
        directory, and once however many lookups follow, with the directory's bundle names."""
        cache, site = written
        asked = []

        def site_bundles(names, header, defer=None):
            asked.append(sorted(names))
            return bundle.named_candidates([("cpu:zen2", ARCH_KEY)], names)
        s = stores.open_session(settings(cache), tack.cache.new_stats(), lambda m: None, HOST, site_bundles,
                                sites=[str(site)])
        assert s.read(entry.KIND_VARIANT, variant_key, "variant", targets=[HOST])[0] is not None
        assert asked == []                      # found in the user's directory first
        for _ in range(3):
            got, _ = s.read(entry.KIND_VARIANT, lambda tk: variant_key(tk) if tk == ARCH_KEY else "0" * 64,
                            "variant", targets=[HOST])
            assert got.payload == b"code for c"
        assert asked == [sorted(os.listdir(site))]

    def test_a_bundle_read_for_its_header_is_served_without_reading_it_again(self, written):
        """A bundle whose header the caller's ``site_bundles`` read is served from that read (the
        same open bundle, not opened again); with lazy reads, what is read is its header, its index
        table, the index blocks and the entries looked up, never more than the file."""
        cache, site = written
        name = bundle.site_bundle_name("cpu:zen2", ARCH_KEY)
        st = tack.cache.new_stats()

        def site_bundles(names, header, defer=None):
            assert header(name)["target_key"] == ARCH_KEY and header(name) is header(name)
            return [("cpu:zen2", ARCH_KEY, name)]
        store = bundle.SiteBundleStore(st, lambda m: None, str(site), site_bundles)
        sizes = []
        for _ in range(2):
            got, _ = store.read(entry.KIND_VARIANT, variant_key, "variant")
            assert got.payload == b"code for c"
            sizes.append(st["bytes_read"])
        assert store.stores[0].bundle is store._read[name]
        assert 0 < sizes[0] <= os.path.getsize(site / name)       # header, one index block, one entry
        assert st["bytes_read"] == store.stores[0].bundle.bytes_read
        assert sizes[1] - sizes[0] < sizes[0]                      # the entry again, not the header

    def test_an_unreadable_bundle_has_no_header_and_is_said_once(self, written):
        """``header(name)`` of a damaged bundle is None, with one warning naming it."""
        cache, site = written
        (site / "bundle-x86_64-cpu-zen3-000000000000").write_bytes(b"TACKBDL1 damaged")
        said = []
        store = bundle.SiteBundleStore(tack.cache.new_stats(), said.append, str(site), lambda n, h, defer=None: [])
        assert store.header("bundle-x86_64-cpu-zen3-000000000000") is None
        assert store.header("bundle-x86_64-cpu-zen3-000000000000") is None
        assert len(said) == 1 and "bundle-x86_64-cpu-zen3-000000000000" in said[0]


class TestReasons:
    def test_an_untrusted_directory_is_the_reason_returned(self, tmp_path):
        """A directory writable by others: the read returns why, and the store keeps no reason of its own."""
        root = tmp_path / "shared"
        root.mkdir()
        os.chmod(root, 0o777)
        said = []
        d = disk(root, warn=said.append)
        got, why = d.read(entry.KIND_LOWERED, "2" * 64, "lowered")
        assert got is None and why.startswith("untrusted: ") and "writable by" in why
        assert len(said) == 1
        assert not hasattr(d, "why")

    def test_a_damaged_entry_is_the_reason_returned(self, written):
        """A truncated entry: (None, "damaged (...); ignored"), counted, and removed."""
        cache, _ = written
        d = disk(cache)
        path = entry.entry_path(d.version_dir, entry.KIND_VARIANT, variant_key(HOST))
        with open(path, "r+b") as f:
            f.truncate(entry.HEAD.size + 3)
        got, why = d.read(entry.KIND_VARIANT, variant_key(HOST), "variant")
        assert got is None and why.startswith("damaged (") and why.endswith("; ignored")
        assert d.stats["damaged"] == 1 and not os.path.exists(path)

    def test_a_session_returns_the_reason_of_the_store_that_had_one(self, tmp_path):
        """In a chain of stores, a miss in the user's directory for a reason other than 'missing'
        is the reason the session gives, though the bundles after it just missed."""
        root = tmp_path / "shared"
        root.mkdir()
        os.chmod(root, 0o777)
        site = tmp_path / "site"
        site.mkdir()
        s = stores.open_session(settings(root), tack.cache.new_stats(), lambda m: None, HOST, lambda: [],
                                sites=[str(site)])
        got, why = s.read(entry.KIND_VARIANT, variant_key, "variant", targets=[HOST])
        assert got is None and why.startswith("untrusted: ")
        assert not hasattr(s, "why")


class TestSessionAsksTheRuntimeOnce:
    """``tack.cache.session`` calls the runtime's ``host_key`` only when it makes the kind's
    session: not for each later kernel, and not at all with the cache off."""

    def test_host_key_is_asked_once_per_kind(self, monkeypatch):
        asked = []

        def host_key():
            asked.append(1)
            return HOST
        first = tack.cache.session("cpu", host_key, lambda: [])
        assert tack.cache.session("cpu", host_key, lambda: []) is first
        assert first.host_key == HOST and len(asked) == 1
        tack.cache.session("opencl", host_key, lambda: [])
        assert len(asked) == 2

    def test_cache_off_asks_nothing(self, monkeypatch):
        monkeypatch.setenv("TACK_CACHE", "off")
        tack.cache._reset_for_tests()

        def host_key():
            raise AssertionError("host_key asked with the cache off")
        assert tack.cache.session("cpu", host_key, lambda: []) is None


def test_named_candidates_keep_the_candidates_order_and_skip_what_is_absent():
    """A runtime that knows its candidates (a GPU's) gets those of them whose bundle is in the
    directory, in its own order; a candidate that names no file (an AMD target id with features)
    is skipped, not an error."""
    a, b = ("cuda:sm_90", "1" * 64), ("cuda:sm_80", "2" * 64)
    names = [bundle.site_bundle_name(*b), bundle.site_bundle_name(*a), "bundle-x86_64-cpu-zen2-333333333333"]
    got = bundle.named_candidates([a, ("rocm:gfx90a:xnack-", "4" * 64), b, ("cuda:sm_70", "5" * 64)], names)
    assert got == [(a[0], a[1], names[1]), (b[0], b[1], names[0])]


@pytest.mark.parametrize("arch", ["cuda:sm_90", "rocm:gfx90a", "level_zero:dg2", "spirv:generic",
                                  "metal:apple", "cpu:x86_64_v3"])
def test_a_runtime_finds_the_site_bundle_the_build_names(arch, tmp_path):
    """The file ``bundles build`` writes for a target (``aot.bundle_path``: the toolchain
    target's ``machine_name``) is the one a runtime's ``named_candidates`` looks for: each GPU
    kind names its bundles by its code's machine (nvptx64, amdgcn, spirv64, metal), the
    registry's (``arch_names.Kind.machine``), never this host's."""
    from tack import aot, archs
    from tack.backends import toolchain
    from tack.backends.arch_names import bundle_machine
    kind, name = archs.resolve(arch)
    target = toolchain(kind).target(arch)
    path = aot.bundle_path(target, str(tmp_path))
    assert target.machine_name == bundle_machine(kind)
    got = bundle.named_candidates([(arch, target.key)], [os.path.basename(path)])
    assert got == [(arch, target.key, os.path.basename(path))]
    if kind != "cpu":
        assert os.path.basename(path).startswith(f"bundle-{target.machine_name}-{kind}-")
        assert target.machine_name != platform.machine()


def test_site_bundle_arch_reads_back_site_bundle_name():
    """``site_bundle_arch`` gives back the arch and key prefix ``site_bundle_name`` wrote, for
    its kind and machine only."""
    name = bundle.site_bundle_name("cpu:armv8.1a", "6" * 64, "aarch64")
    assert bundle.site_bundle_arch(name, "cpu", "aarch64") == ("armv8.1a", "6" * 12)
    assert bundle.site_bundle_arch(name, "cpu", "x86_64") is None
    assert bundle.site_bundle_arch(name, "cuda", "aarch64") is None
    for other in (bundle.bundle_name("7" * 64, "aarch64"), "bundle-aarch64-cpu--666666666666",
                  "bundle-aarch64-cpu-zen2-6666", name + ".tmp.1a2b"):
        assert bundle.site_bundle_arch(other, "cpu", "aarch64") is None, other


def test_load_bundle_takes_the_gpu_kinds_packed_bundles_and_nothing_else():
    """``host.gpu_packed_bundles``: of a directory's names, the bundles ``pack`` made for a GPU
    kind's code (its machine, a 16-digit key), which ``load_bundle`` broadcasts beside this
    host's; never the CPU's, a site bundle (kind, arch and a 12-digit key), a temporary file or
    another file."""
    from tack.cache.host import gpu_packed_bundles
    key = "0123456789abcdef"
    names = [bundle.bundle_name(key * 4, m) for m in ("spirv64", "nvptx64", "amdgcn", "metal")]
    others = [bundle.bundle_name(key * 4), bundle.site_bundle_name("cuda:sm_90", key * 4),
              bundle.bundle_name(key * 4, "spirv64") + ".tmp.12.ab", "bundle-spirv64-" + "x" * 16,
              "bundle-spirv64-" + key[:12], "notes.txt"]
    assert gpu_packed_bundles(others + names) == sorted(names)


def test_load_bundle_kinds_are_the_registrys():
    """``host.known_kinds``: ``load_bundle``'s ``kinds`` (None: every kind; one name or several),
    checked against the arch registry; an unknown one is a ValueError naming it and the kinds
    there are.  ``machines_of``: the GPU kinds' code machines (the CPU has none of its own)."""
    from tack.backends.arch_names import KINDS
    from tack.cache.host import known_kinds, machines_of
    assert known_kinds() == frozenset(KINDS)
    assert known_kinds("cpu") == known_kinds(["cpu"]) == {"cpu"}
    assert known_kinds(("cuda", "spirv")) == {"cuda", "spirv"}
    with pytest.raises(ValueError, match="unknown kind 'hip'.*cpu, cuda, rocm"):
        known_kinds(["cpu", "hip"])
    assert machines_of({"cpu"}) == frozenset()
    assert machines_of({"cuda", "spirv", "level_zero"}) == {"nvptx64", "spirv64"}


def test_a_directory_made_after_the_lookup_is_used_but_never_tagged(tmp_path, monkeypatch):
    """A lookup finds no cache directory; as the first store makes it, someone else (the user,
    another process) has just made it: the store uses it, once trusted, and writes no
    CACHEDIR.TAG into a directory Tack did not make (it did, before). Where Tack makes it, it
    is tagged."""
    theirs = disk(tmp_path / "theirs")
    assert theirs.read(entry.KIND_LOWERED, "3" * 64, "lowered") == (None, entry.MISSING)
    real_mkdir = os.mkdir

    def made_first(path, *args, **kwargs):          # the other process wins the race
        if str(path) == str(tmp_path / "theirs"):
            real_mkdir(path, 0o700)
        return real_mkdir(path, *args, **kwargs)
    monkeypatch.setattr(os, "mkdir", made_first)
    assert stores_write.store(theirs, entry.KIND_LOWERED, "3" * 64, {"dep": []}, b"x")
    assert not (tmp_path / "theirs" / "CACHEDIR.TAG").exists()
    ours = disk(tmp_path / "ours")
    assert ours.read(entry.KIND_LOWERED, "3" * 64, "lowered") == (None, entry.MISSING)
    assert stores_write.store(ours, entry.KIND_LOWERED, "3" * 64, {"dep": []}, b"x")
    assert (tmp_path / "ours" / "CACHEDIR.TAG").exists()
    assert ours.read(entry.KIND_LOWERED, "3" * 64, "lowered")[0].payload == b"x"


def test_the_first_store_makes_no_directory_writable_by_others_whatever_the_umask(tmp_path):
    """Under ``umask 000`` the first store makes the cache directory and the missing ones above it
    (``~/.cache`` on a new account) none writable by others, and then uses it: ``os.makedirs``
    made those above 0777, and the parents' check refused the cache it had just made."""
    root = tmp_path / "home" / ".cache" / "tack"
    warns = []
    old = os.umask(0)
    try:
        stored = stores_write.store(disk(root, warn=warns.append), entry.KIND_VARIANT, variant_key(HOST),
                                    dict(META, target_key=HOST), b"code")
    finally:
        os.umask(old)
    assert stored and warns == []
    for above in (tmp_path / "home", tmp_path / "home" / ".cache"):
        assert stat.S_IMODE(above.stat().st_mode) == 0o755
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    found, _ = disk(root).read(entry.KIND_VARIANT, variant_key(HOST), "variant")
    assert found is not None and found.payload == b"code"



def test_a_users_strict_umask_is_kept_for_the_directories_above_the_cache(tmp_path):
    """Under ``umask 077`` the directories the first store makes above the cache (``~/.cache``)
    stay 0700, as the user asked: only a site's bundle directories, which every user's job
    enters, are opened to all whatever the umask (``trust_write.make_shared_dirs``)."""
    root = tmp_path / "home" / ".cache" / "tack"
    old = os.umask(0o077)
    try:
        stored = stores_write.store(disk(root), entry.KIND_VARIANT, variant_key(HOST),
                                    dict(META, target_key=HOST), b"code")
    finally:
        os.umask(old)
    assert stored
    for above in (tmp_path / "home", tmp_path / "home" / ".cache"):
        assert stat.S_IMODE(above.stat().st_mode) == 0o700
    assert stat.S_IMODE(root.stat().st_mode) == 0o700

def _damage_last_byte(path):
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        b = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([b[0] ^ 1]))


@pytest.mark.parametrize("mode", ["write", "read"])
def test_a_damaged_entry_last_used_long_ago_is_not_marked_used(tmp_path, mode):
    """A damaged entry not used for over an hour: the read marked it used before checking it, so
    a writing process then found it changed and kept it, looking fresh to the size limit; it is
    now removed (write) or left as it was (read), never marked."""
    root = tmp_path / "cache"
    key = variant_key(HOST)
    assert stores_write.store(disk(root), entry.KIND_VARIANT, key, dict(META, target_key=HOST), b"code" * 8)
    path = entry.entry_path(os.path.join(str(root), keys.tack_version_id()), entry.KIND_VARIANT, key)
    _damage_last_byte(path)
    old = time.time() - 7200
    os.utime(path, (old, old))
    found, why = disk(root, mode).read(entry.KIND_VARIANT, key, "variant")
    assert found is None and why.startswith("damaged")
    if mode == "write":
        assert not os.path.exists(path)
    else:
        assert abs(os.stat(path).st_mtime - old) < 1


class _Kernel:
    __qualname__ = "k_main"

    def py_func():                      # noqa: N805 - a kernel's Python function, read from the class
        pass


def test_an_unusable_entry_replaced_since_it_was_read_is_kept(tmp_path):
    """An entry found unusable after it was read (its code does not load) is removed only if it
    is still the file read: another process's entry stored in its place since is kept; the hit
    it had counted is taken back from ``hits`` and from ``variants_from`` alike."""
    root = tmp_path / "cache"
    key = variant_key(HOST)
    for replaced in (False, True):
        d = disk(root)
        assert stores_write.store(d, entry.KIND_VARIANT, key, dict(META, target_key=HOST), b"bad code")
        session = stores.Session(d.settings, d.stats, d.warn_once, HOST, [d], d)
        hit = session.find_variant(_Kernel, {}, _Keys(key), [HOST])
        assert hit is not None and session.stats["variants_from"] == {"cache directory": 1}
        if replaced:                    # another process stores a good entry there meanwhile
            assert stores_write.store(disk(root), entry.KIND_VARIANT, key, dict(META, target_key=HOST),
                                      b"good code")
        stores_write.unusable(session, _Kernel, "variant", hit.found, "does not load", counted_hit=True)
        assert session.stats["hits"]["variant"] == 0 and session.stats["variants_from"] == {}
        found, _ = disk(root).read(entry.KIND_VARIANT, key, "variant")
        assert (found.payload if found else None) == (b"good code" if replaced else None)


class _Keys:
    lowered = "0" * 64              # (a variant's lowered key: an alternate marks its own)

    def __init__(self, key):
        self.key = key

    def for_target(self, target_key):
        return self.key


def test_a_process_stores_again_after_its_cache_is_cleared_beside_it(tmp_path):
    """``python -m tack.cache clear`` while a long process (a notebook) runs: its next store makes
    the directory again, private and tagged, instead of failing for the rest of the process."""
    root = tmp_path / "cache"
    warns = []
    d = disk(root, warn=warns.append)
    assert stores_write.store(d, entry.KIND_VARIANT, variant_key(HOST), dict(META, target_key=HOST), b"one")
    shutil.rmtree(root)
    assert stores_write.store(d, entry.KIND_VARIANT, variant_key(OTHER), dict(META, target_key=OTHER), b"two")
    assert warns == [] and (root / "CACHEDIR.TAG").exists()
    found, _ = disk(root).read(entry.KIND_VARIANT, variant_key(OTHER), "variant")
    assert found is not None and found.payload == b"two"
