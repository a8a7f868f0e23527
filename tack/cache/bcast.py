"""``load_bundle(comm)``: rank 0 reads the bundles, every rank gets their bytes: this host's
CPU bundle, and the bundles ``pack`` made for GPU kinds in the same directory.

Rank 0 reads the whole file in one go (``bundle.read(..., whole=True)``): the job pays one
open and one read of it, however many ranks use it; the other ranks look entries up in
the bytes they received, each entry checked by its own checksum when used.  Where the ranks'
CPUs differ (a job over two kinds of node), the ranks are split by CPU, and the lowest rank
of each kind reads and broadcasts that kind's bundle to its own.

The bytes go through mpi4py's buffer interface (``Bcast`` of a byte buffer,
in chunks well under MPI's 2**31-element count limit), never pickled.  A
status (entry count, byte length, how many GPU bundles follow) is broadcast
first, then each GPU bundle's length, so every rank makes the same collective
calls whatever happened on rank 0.
"""

from __future__ import annotations

import os
import time

import numpy as np

from . import bundle, log
from .keys import tack_version_id

CHUNK = 1 << 30


def load_and_broadcast(comm, settings, host_key, gpu_bundles, sites, share, said):
    """-> (this host's Bundle or None, [the GPU kinds' packed Bundles], the site bundles or None),
    the same on every rank; rank 0 warns why when it can use no bundle at all.

    ``host_key()``: this host's CPU target key, which names its bundle (None: no CPU bundle is
    read, ``load_bundle``'s ``kinds`` leaving the CPU out); ``gpu_bundles(names)``:
    of the directory's file names, the GPU kinds' packed bundles (``host.gpu_packed_bundles``);
    both asked on rank 0 only.  A GPU bundle rank 0 cannot use (damaged, another Tack's, not the
    user's own) is left out, and rank 0 warns why, naming it.  ``sites``: (a function giving the
    site directories, ``stores.site_dirs``; the runtime's ``site_bundles``), asked on rank 0
    only: the site bundles this node's CPU uses there, read by rank 0 and broadcast
    (``_site_bundles``), given back as {directory: (the bundle packed for this host there or
    None, [(``cpu:arch``, target key, Bundle)] most specific first)}; None where not asked, or
    where rank 0 could not choose (every rank then reads the directories itself, as without
    ``load_bundle``).  ``share``: where a node runs several ranks, its ranks read one copy of
    each bundle of ``_NodeShare.MIN_BYTES`` or more in the node's shared memory (``_NodeShare``);
    False: each rank its own copy of each.  ``said``: a list that rank 0's warnings are added to
    (``deferred_warn_once``), for the caller to give once every collective call is made
    (``give_deferred``): a warning raised as an error between two of them (``python -W
    error``) left the other ranks in a broadcast rank 0 never made."""
    if comm is not None and host_key is not None:
        group, mine = _same_cpu_group(comm, host_key)
        if group is not None:                   # nodes of other CPUs: each group its own bundle
            try:
                # a rank that could not tell its key asks again, to say why (not bundle_name(None)'s
                # TypeError)
                return load_and_broadcast(group, settings, host_key if mine is None else lambda: mine,
                                          gpu_bundles, sites, share, said)
            finally:
                group.Free()
    rank = 0 if comm is None else comm.Get_rank()
    node = _NodeShare(comm) if comm is not None and share and hasattr(comm, "Split_type") else None
    try:
        return _load_and_broadcast(comm, node, rank, settings, host_key, gpu_bundles, sites, said)
    finally:
        if node is not None:
            node.done()


def _off_by(settings) -> str:
    """What turned the cache off, as a message names it: ``configure(mode="off")``, or the variable
    that set the mode (TACK_CACHE_MPI under MPI where it is set; it said TACK_CACHE=off always)."""
    if settings.sources.get("mode") == "configure":
        return 'configure(mode="off")'
    from . import _mode_variable, mpi_launch
    return f"{_mode_variable(os.environ, mpi_launch() is not None)}=off"


def _load_and_broadcast(comm, share, rank, settings, host_key, gpu_bundles, sites, said):
    from . import deferred_warn_once

    data, status, loaded = b"", [0, -1], None   # status: (byte length, entry count); -1: not usable
    others, site_rows = [], None
    if rank == 0:
        if settings.mode == "off":
            reason = f"the cache is off ({_off_by(settings)})"
        elif host_key is None:
            reason = "no kind of code asked for has a bundle in " + settings.directory
        else:
            try:
                path = os.path.join(settings.directory, bundle.bundle_name(host_key()))
                loaded = bundle.read(path, tack_version=tack_version_id(), whole=True)
                data, status, reason = loaded.data, [len(loaded.data), len(loaded)], None
                cut = bundle.cut_short(loaded, "bundle")
                if cut is not None:
                    deferred_warn_once(said)(cut)
                foreign = bundle.named_for_another_target(path, loaded.meta)
                if foreign is not None:
                    loaded.close()
                    data, status, reason, loaded = b"", [0, -1], foreign, None
            except bundle.BundleError as e:
                reason = str(e)
            except Exception as e:              # noqa: BLE001 - rank 0 must still reach the Bcast
                loaded, reason = None, f"{type(e).__name__}: {e}"
        if settings.mode != "off":
            others, refused = _gpu_bundles(settings.directory, gpu_bundles)
            for why in refused:
                deferred_warn_once(said)(f"not using a bundle: {why}; its kernels compile as without a cache")
        if sites is not None and host_key is not None and settings.mode != "off":
            site_rows = _site_bundles(sites, host_key, deferred_warn_once(said))
        if reason is not None and not others and not (site_rows and site_rows[2]):
            then = "kernels compile as without a cache"
            looked = []
            if settings.mode in ("write", "read"):
                # Not bundle mode: each kernel is looked up in the directory's own entries, as
                # without load_bundle (they may well serve every kernel), not "compile".
                looked.append(f"the entries of {settings.directory}")
            if comm is None and host_key is not None and settings.mode != "off":
                # Alone, the site bundles are not read here but opened as lookups need them: they
                # may well serve every kernel (a new user on a site install), not "compile".
                from .stores import site_dirs
                lazy = site_dirs()
                if lazy:
                    looked.append(f"the site bundles of {os.pathsep.join(lazy)}")
            if looked:
                then = (f"kernels are looked up in {' and '.join(looked)} as they are needed, "
                        "and compile where none serves them")
            if host_key is None and settings.mode != "off":
                # the CPU not asked for (kinds=["cuda"]): its kernels are served as without
                # load_bundle (each rank its own bundle in bundle mode), not compiled
                then = ("the kinds asked for compile as without a cache; the CPU's kernels, not "
                        "asked for, are served as without load_bundle")
            deferred_warn_once(said)(f"not using a bundle: {reason}; {then}")
    if comm is None:
        return loaded, others, _sites_by_dir(site_rows)

    head = np.array(status + [len(others)], dtype=np.int64)
    comm.Bcast(head, root=0)
    nbytes, count, n_others = int(head[0]), int(head[1]), int(head[2])
    if count >= 0:
        loaded = _bcast_bundle(comm, share, rank, nbytes, data, loaded, said)
    got = []
    for i in range(n_others):                   # every rank makes the same calls, in order
        mine = others[i] if rank == 0 else None
        size = np.array([len(mine.data) if mine else 0], dtype=np.int64)
        comm.Bcast(size, root=0)
        b = _bcast_bundle(comm, share, rank, int(size[0]), mine.data if mine else b"", mine, said)
        if b is not None:
            got.append(b)
    if sites is None:
        return loaded, got, None
    # The site bundles: which (pickled: directories, names and keys, a few hundred bytes; None if
    # rank 0 could not choose), then each one's bytes, as the GPU bundles' above.
    which = None
    if rank == 0 and site_rows is not None:
        which = (site_rows[0], site_rows[1], [row[:3] for row in site_rows[2]])
    which = comm.bcast(which, root=0)
    if which is None:
        return loaded, got, None
    directories, chosen_in, rows = which
    placed = []
    for i, (where, arch, tk) in enumerate(rows):
        mine = site_rows[2][i][3] if rank == 0 else None
        size = np.array([len(mine.data)], dtype=np.int64) if mine else np.zeros(1, dtype=np.int64)
        comm.Bcast(size, root=0)
        b = _bcast_bundle(comm, share, rank, int(size[0]), mine.data if mine else b"", mine, said)
        if b is not None:
            placed.append((where, arch, tk, b))
    return loaded, got, _sites_by_dir((directories, chosen_in, placed))


def _site_bundles(sites, host_key, warn_once):
    """Rank 0: (the site directories, those it chose in, [(directory, ``cpu:arch`` or None for the
    bundle packed for this host there, target key, Bundle read whole)]) of the site bundles this
    node's CPU uses, in the order a lookup tries them (``stores.open_session``'s: each
    directory's packed bundle, then the ones built for its architecture, most specific first, as
    ``bundle.SiteBundleStore`` chooses them).  A directory where the choice fails (no archspec
    where it is needed...) is left out: every rank reads that one itself.  None when not asked
    (``sites[0]()`` is None) or when this host has no key."""
    from . import new_stats
    try:
        directories, site_bundles = sites[0](), sites[1]
        if directories is None:
            return None
        key = host_key()
    except Exception as e:                      # noqa: BLE001 - rank 0 must still reach the Bcast
        log.debug("load_bundle: no site bundles chosen (%s: %s)", type(e).__name__, e)
        return None
    chosen_in, out = [], []
    for d in directories:
        try:
            out += _site_bundles_in(d, key, site_bundles, warn_once, new_stats())
        except Exception as e:                  # noqa: BLE001 - this directory read by each rank
            log.debug("load_bundle: site bundles in %s not chosen on rank 0 (%s: %s); each rank "
                      "reads them", d, type(e).__name__, e)
            continue
        chosen_in.append(d)
    return list(directories), chosen_in, out


def _site_bundles_in(d, key, site_bundles, warn_once, stats) -> list:
    """``_site_bundles``' rows for the site directory ``d``, each bundle read whole."""
    out = []
    chooser = bundle.SiteBundleStore(stats, warn_once, d, site_bundles)
    name = bundle.bundle_name(key)
    path = os.path.join(d, name)
    if chooser.holds(name):             # listed once: the choice below lists no more
        try:
            out.append((d, None, key, bundle.read(path, allow_root=True, tack_version=tack_version_id(),
                                                  whole=True)))
        except bundle.BundleError as e:
            warn_once(bundle.not_using_site(e, path))
    try:
        found, checks, read = chooser.candidates()
        for arch, tk, path in found:
            t0 = time.perf_counter()
            b = chooser.opened(path)            # its header read for the choice: the rest now
            try:
                if b is None:
                    b = bundle.read(path, allow_root=True, tack_version=tack_version_id(), whole=True)
                else:
                    b.data                      # noqa: B018 - read whole, on the same descriptor
            except (bundle.BundleError, OSError) as e:
                warn_once(bundle.not_using_site(e, path))
                continue
            name = os.path.basename(path)
            if name not in read and name in checks and \
                    bundle.refused_by_check(checks[name], b, path, warn_once, "load_bundle: "):
                b.close()                               # a header the choice left unread, refused
                continue
            b.read_seconds += time.perf_counter() - t0
            cut = bundle.cut_short(b, "site bundle")
            if cut is not None:
                warn_once(cut)
            out.append((d, arch, tk, b))
    finally:
        for b in chooser._read.values():        # read whole above or let go: no descriptor kept
            if b is not None:
                b.close()
    return out


def _sites_by_dir(found):
    """(directories, those chosen in, [(directory, arch or None, target key, Bundle)]) ->
    {directory: (packed Bundle or None, [(arch, target key, Bundle)])} in the directories'
    order: for one rank 0 chose in, what it chose (nothing too: no rank goes there); for one it
    could not, (None, None): each rank reads it itself.  None stays None."""
    if found is None:
        return None
    directories, chosen_in, rows = found
    out = {d: [None, [] if d in chosen_in else None] for d in directories}
    for d, arch, tk, b in rows:
        if arch is None:
            out[d][0] = b
        else:
            out[d][1].append((arch, tk, b))
    return {d: (packed, chosen) for d, (packed, chosen) in out.items()}


def _same_cpu_group(comm, host_key):
    """-> (group, this rank's host key).  Where the ranks' CPUs differ (a job over nodes of two
    kinds), ``group`` is a communicator of the ranks whose CPU (host key) is this rank's, whose
    lowest rank reads that CPU's bundle; None where every rank's is rank 0's (one broadcast of
    rank 0's key and one sum: the usual case costs two small collectives).  A rank that cannot
    tell its key (None) counts as one of its own kind."""
    try:
        mine = host_key()
    except Exception as e:                      # noqa: BLE001 - every rank must reach the calls
        log.debug("load_bundle: no host key (%s: %s)", type(e).__name__, e)
        mine = None
    first = comm.bcast(mine if comm.Get_rank() == 0 else None, root=0)
    if comm.allreduce(int(mine != first)) == 0:
        return None, mine
    keys = comm.allgather(mine)
    kinds = list(dict.fromkeys(keys))           # in the order of each kind's lowest rank
    return comm.Split(kinds.index(mine), comm.Get_rank()), mine


def _gpu_bundles(directory, gpu_bundles) -> tuple:
    """Rank 0: ([the directory's GPU packed bundles it can use, each read whole], [why each
    other one is not used])."""
    try:
        names = gpu_bundles(os.listdir(directory))
    except Exception as e:                      # noqa: BLE001 - no directory, no GPU kinds known
        log.debug("load_bundle: no GPU bundles (%s: %s)", type(e).__name__, e)
        return [], []
    out, refused = [], []
    for name in names:
        path = os.path.join(directory, name)
        try:
            b = bundle.read(path, tack_version=tack_version_id(), whole=True)
            foreign = bundle.named_for_another_target(path, b.meta)
            if foreign is not None:
                b.close()
                refused.append(foreign)
                continue
            out.append(b)
        except bundle.BundleError as e:         # its message names the file
            refused.append(str(e))
        except Exception as e:                  # noqa: BLE001 - that one is left out, said
            refused.append(f"{path}: {type(e).__name__}: {e}")
    return out, refused


def _bcast_bundle(comm, share, rank, nbytes, data, loaded, said=None):
    """One bundle's bytes from rank 0 to every rank: rank 0's Bundle there, one made of the bytes
    elsewhere (None if they cannot be one: they cannot differ from rank 0's; safe anyway): in
    the node's shared memory where ``share`` (a ``_NodeShare``) is given, else a copy per rank.
    ``said``: where rank 0's warnings go (``deferred_warn_once``)."""
    if share is not None:
        return share.bundle(rank, nbytes, data, loaded, said)
    return _copied(comm, lambda chunk: comm.Bcast(chunk, root=0), rank, nbytes, data, loaded, said)


def _copied(comm, send, rank, nbytes, data, loaded, said=None):
    """``_bcast_bundle`` with a copy on each rank: ``send(chunk)`` broadcasts each chunk of a
    buffer from rank 0 (the bytes it read, sent in place) to every rank of ``comm``.  Each rank
    holds one copy of the bundle, at its peak too: the buffer it receives into is the one its
    Bundle serves from (a copy of it, and rank 0's copy of what it read, each held the bundle
    twice while it was made: 634 MB for a 301 MB bundle).

    Every rank first says whether it could make its buffer (one sum over ``comm``): a rank out
    of memory for it left the others waiting in a broadcast it never joined, until the job's
    time ran out.  Then none is sent: rank 0 keeps its own bundle and the others have none, as
    when rank 0 cannot read it (their kernels compile), and rank 0 warns how many ranks had no
    room.  ``comm`` None: no such sum (a node whose window failed, whose ranks' copies come
    through its lowest rank, as the other nodes' lowest ranks' windows do: ``_NodeShare.bundle``)."""
    try:
        buf = memoryview(data) if rank == 0 else bytearray(nbytes)
    except MemoryError:
        if comm is None:
            raise
        buf = None
    if comm is not None:
        short = comm.allreduce(int(buf is None))
        if short:
            log.debug("load_bundle: %d bytes not broadcast (%s); not served from the broadcast", nbytes,
                      "no memory for them here" if buf is None else "another rank had no memory for them")
            if rank == 0 and said is not None:
                from . import deferred_warn_once
                deferred_warn_once(said)(
                    f"load_bundle: {short} of {comm.Get_size()} ranks had no memory for a copy of "
                    f"{getattr(loaded, 'path', 'a bundle')} ({nbytes} bytes); it is not broadcast: rank "
                    "0 serves from it, the other ranks' kernels it holds compile as without a cache")
            return loaded if rank == 0 else None
    view = memoryview(buf)
    for start in range(0, nbytes, CHUNK):
        send(view[start:start + CHUNK])
    if rank == 0:
        return loaded
    try:
        return bundle.Bundle(buf, "<broadcast from rank 0>")
    except (bundle.BundleError, MemoryError):       # as unusable, on this rank alone
        return None


# The node-shared windows made so far: kept for the life of the process (MPI frees them at
# MPI_Finalize); their bundles ask ``MPI.Is_finalized()`` before each read of them.
_windows = []


class _NodeShare:
    """One copy of each bundle per node: an MPI-3 shared-memory window (``Win.Allocate_shared``
    over the ranks of a node, ``COMM_TYPE_SHARED``) that the node's lowest rank receives the
    bytes into (broadcast among the nodes' lowest ranks, rank 0 first) and the node's other
    ranks read in place.

    For a bundle of at least ``MIN_BYTES`` only: a window costs a node about 2 MiB (MPI's shared
    segments) and each bundle about a millisecond, more than copies of a small bundle do; a
    smaller one goes to each rank as a copy (``_copied``).  The node's communicator is made at
    the first bundle that size (every rank sees the same sizes, so all ranks make the same
    calls), and kept where some node runs more than one rank; otherwise, with
    ``load_bundle(share=False)``, an MPI without shared memory, or too little room in
    ``/dev/shm``, each rank holds its own copy."""

    MIN_BYTES = 4 << 20

    def __init__(self, comm):
        self.comm = comm
        self.ready = None               # the node's communicator made (None: not asked yet)
        self.node = self.leaders = None
        self.leader = False
        self.windows = 0                # made over the node's communicator

    def _setup(self) -> bool:
        comm = self.comm
        try:
            from mpi4py import MPI
            node = self.node_comm(MPI, comm)
        except Exception as e:                  # noqa: BLE001 - no MPI-3 shared memory
            log.debug("load_bundle: no shared memory (%s: %s); a copy per rank", type(e).__name__, e)
            return False
        # Worth it where some node runs several ranks; every rank takes part in the answer.
        if comm.allreduce(node.Get_size(), op=MPI.MAX) == 1:
            node.Free()
            return False
        self.MPI, self.node, self.leader = MPI, node, node.Get_rank() == 0
        if node.Get_size() < comm.Get_size():  # more than one node (the same answer on every rank)
            self.leaders = comm.Split(0 if self.leader else MPI.UNDEFINED, comm.Get_rank())
        return True

    @staticmethod
    def node_comm(MPI, comm):
        """The ranks of ``comm`` that share this rank's memory (its node), by rank."""
        return comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())

    def done(self):
        """Free the communicator of the nodes' lowest ranks, and the node's where no window was
        made over it (each window keeps it)."""
        if self.leaders is not None and self.leaders != self.MPI.COMM_NULL:
            self.leaders.Free()
        if self.node is not None and not self.windows:
            self.node.Free()

    def _to_leaders(self, chunk):
        if self.leaders is not None and self.leader:
            self.leaders.Bcast(chunk, root=0)

    def bundle(self, rank, nbytes, data, loaded, said=None):
        if nbytes >= self.MIN_BYTES and self.ready is None:
            self.ready = self._setup()
        if nbytes < self.MIN_BYTES or not self.ready:
            return _copied(self.comm, lambda chunk: self.comm.Bcast(chunk, root=0), rank, nbytes, data,
                           loaded, said)
        MPI = self.MPI
        # Room for it where the node's shared memory lives: a window past what /dev/shm holds
        # would fault (SIGBUS) on its first write rather than fail to allocate.
        # (MPICH and Intel MPI keep it there; where /dev/shm is not, nothing is known of it.)
        room = _shm_room() if self.leader else -1
        win, why = None, None
        if self.node.allreduce(int(room < 0 or room >= 2 * nbytes), op=MPI.MIN):
            try:
                win = _allocate_shared(MPI, nbytes if self.leader else 0, self.node)
                buf, _ = win.Shared_query(0)
                view = memoryview(buf)[:nbytes]
            except Exception as e:              # noqa: BLE001 - the node agrees below
                win, why = None, f"{type(e).__name__}: {e}"
        else:
            why = "it does not fit in /dev/shm"
        # Made on every rank of the node, or a copy for each: the other nodes' lowest ranks
        # broadcast the same chunks either way.
        if not self.node.allreduce(int(win is not None), op=MPI.MIN):
            log.debug("load_bundle: %d bytes not shared on this node (%s); a copy per rank",
                      nbytes, why or "another rank of the node could not make the window")

            def send(chunk):                    # to the nodes' lowest ranks, then to each node
                self._to_leaders(chunk)
                self.node.Bcast(chunk, root=0)
            return _copied(None, send, rank, nbytes, data, loaded)
        _windows.append(win)
        self.windows += 1
        win.Fence()
        if self.leader:
            if rank == 0:
                view[:] = data
            for start in range(0, nbytes, CHUNK):
                self._to_leaders(view[start:start + CHUNK])
        win.Fence()
        live = _live(MPI)
        if rank == 0:                   # its own copy let go: served from the node's, as the others
            if loaded is not None:
                loaded.serve_from(view, live)
            return loaded
        try:
            return bundle.Bundle(view, "<broadcast from rank 0, shared on this node>", _live=live)
        except bundle.BundleError:
            return None


def _allocate_shared(MPI, nbytes, node):
    """A window of ``nbytes`` on this rank over the node's ranks (collective over ``node``)."""
    return MPI.Win.Allocate_shared(nbytes, 1, comm=node)


def _live(MPI):
    """Whether a node-shared window's memory is still there: until MPI is finalized."""
    finalized = MPI.Is_finalized
    return lambda: not finalized()


def _shm_room() -> int:
    """Bytes free in /dev/shm, where MPI libraries keep a node's shared memory on Linux; -1 where
    there is none to ask."""
    try:
        st = os.statvfs("/dev/shm")
    except (OSError, AttributeError):
        return -1
    return st.f_bavail * st.f_frsize


def load_bundle(comm=None, kinds=None, share=True) -> int:
    """``tack.cache.load_bundle`` (documented there): the bundles read on rank 0 and broadcast,
    and the process's cache state (``tack.cache``'s, under its lock) told what they cover."""
    from .. import cache as c
    from .host import cpu_host_key, cpu_site_bundles, gpu_packed_bundles, known_kinds, machines_of
    _check_comm(comm)

    def read_settings():    # (configure() after it names load_bundle, not settings())
        return c._settings_in_use("tack.cache.load_bundle() was called")
    asked, share = _agreed_kinds(comm, kinds, known_kinds, share=share, prepare=read_settings)
    if not asked:                   # every rank alike: no collective call follows
        if comm is None or comm.Get_rank() == 0:
            c.warn_once_factory()("load_bundle: kinds names no kind of code (kinds=[]); no bundle "
                                  "read, kernels are served as without load_bundle")
        return 0
    with c._lock:                   # as session() reads it, making a session
        c._bundle_covers = c._bundle_covers | machines_of(asked) | (asked & {"cpu"})
    # Rank 0's warnings, given once every collective call is made: a warning raised as an error
    # (python -W error, a test's filterwarnings) between two of them left the other ranks in a
    # broadcast rank 0 never made, or matched with the job's own.
    said = []
    sites = None
    if "cpu" in asked and comm is not None:     # alone, a process opens its site bundles lazily
        from .stores import site_dirs
        # Asked on rank 0 only; every rank makes the same calls whatever its own state (None:
        # rank 0 has a session already, whose site bundles it opened itself: each rank does so).
        sites = (lambda: site_dirs(warn=c.deferred_warn_once(said)) if c._session is None else None,
                 cpu_site_bundles)
    loaded, gpu, got_sites = load_and_broadcast(comm, read_settings(), cpu_host_key if "cpu" in asked else None,
                                                lambda names: gpu_packed_bundles(names, asked), sites,
                                                share=share, said=said)
    site_bundles = [b for packed, chosen in (got_sites or {}).values()
                    for b in ([packed] if packed is not None else []) + [row[2] for row in chosen]]
    stats = c._get_stats()
    for b in ([loaded] if loaded is not None else []) + gpu + site_bundles:
        if b.bytes_read:                        # rank 0, which read the files
            c.count(stats, "bytes_read", b.bytes_read)
            c.count(stats, "load_seconds", b.read_seconds)
    # Under the lock session() makes a session under: a thread's first launch making the CPU's
    # meanwhile (after the broadcast, which is not under it: it waits for the other ranks) read
    # _loaded_bundle before this set it, and set _session after this looked: that session had
    # no bundle (and, as _bundle_covers said, would open none of its own).
    with c._lock:
        c._loaded_gpu.update((b.meta.get("target_key"), b) for b in gpu)
        if got_sites is not None and c._session is None:     # a session made already keeps its own
            c._loaded_sites = got_sites
        if loaded is not None:
            # Alone, this process read its own bundle: as bundle mode's, not a broadcast's
            c._loaded_bundle, c._loaded_label = loaded, "cache bundle" if comm is None else "broadcast bundle"
            if c._session:
                c._session.add_loaded(loaded, c._loaded_label)
    c.give_deferred(said)
    # the entries read: a bundle's whole, less those a cut lost (said, ``bundle.cut_short``)
    return ((loaded.present() if loaded is not None else 0) + sum(b.present() for b in gpu)
            + sum(b.present() for b in site_bundles))


def _check_comm(comm) -> None:
    """TypeError, raised by every rank alike before any collective call, for a ``comm`` that is
    not an mpi4py intracommunicator: an intercommunicator's broadcasts and gathers go between its
    two groups (each group's rank 0 waited for the other's: the job hung)."""
    if comm is None:
        return
    if not all(hasattr(comm, name) for name in ("Get_rank", "allgather", "Bcast", "Is_inter")):
        raise TypeError(f"load_bundle: comm must be an mpi4py communicator (MPI.COMM_WORLD, or "
                        f"one made from it), not {type(comm).__name__}")
    if comm.Is_inter():
        raise TypeError("load_bundle: comm is an intercommunicator; give an intracommunicator "
                        "(one group's ranks, or inter.Merge())")


def _agreed_kinds(comm, kinds, known_kinds, share=True, prepare=None) -> tuple:
    """-> (the kinds of code ``load_bundle`` reads, whether to share): those ``kinds`` names
    (``host.known_kinds``), and under MPI those any rank named; shared only where every rank
    asked to share.  The ranks' collective calls depend on both (the CPU's group and site
    bundles; a node's window), so a rank asking for the CPU's code beside ranks asking only for
    a GPU's, or for share=False beside ranks sharing, made the ranks' calls differ: the job hung.
    One ``allgather`` makes them agree.  ``prepare()``: what else each rank does first that may
    fail (its settings).  A rank naming an unknown kind, or whose ``prepare`` failed (a bad
    setting warned of where warnings are errors), makes every rank raise: that rank its own
    exception, the others a ValueError (an unknown kind) or RuntimeError naming it and the rank."""
    try:
        mine, error = known_kinds(kinds), None
        if prepare is not None:
            prepare()
    except Exception as e:                      # noqa: BLE001 - every rank must reach the allgather
        if comm is None:
            raise
        mine, error = frozenset(), e
    share = bool(share)
    if comm is None:
        return mine, share
    why = None if error is None else (isinstance(error, ValueError), str(error)
                                      if isinstance(error, ValueError)
                                      else f"{type(error).__name__}: {error}")
    every = comm.allgather((sorted(mine), share, why))
    for rank, (_, _, failed) in enumerate(every):
        if failed is None:
            continue
        if error is not None:
            raise error
        value_error, text = failed
        if value_error:
            raise ValueError(f"{text} (on rank {rank})")
        raise RuntimeError(f"load_bundle failed on rank {rank}: {text}")
    return frozenset(k for named, _, _ in every for k in named), all(s for _, s, _ in every)
