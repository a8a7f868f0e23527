"""Process-wide settings: ``tack.config.debug``, ``.timing``, ``.num_threads``.

Each defaults from its environment variable (TACK_DEBUG, TACK_TIMING,
TACK_NUM_THREADS; the thread count then from OMP_NUM_THREADS, or the cores this
process may use, shared among an MPI launch's ranks on the node), read the first
time it is asked for, and can be set from Python at any time; a change applies
to the next launch.  The MPI launch a process is part of is ``detect``'s: the
cache's mode and the thread count ask it.
"""

import os
import types

from .errors import warn

#: The words an on/off setting takes (any case), the one vocabulary of every TACK_ switch.
TRUE_WORDS = frozenset(("1", "true", "yes", "on"))
FALSE_WORDS = frozenset(("0", "false", "no", "off"))


def _env_flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in TRUE_WORDS:
        return True
    if raw and raw not in FALSE_WORDS:
        warn(f"tack: {name}={raw!r} is not a boolean (use 1 or 0); using 0", stacklevel=3)
    return False


MAX_THREADS = 65536


def _env_threads() -> int:
    """``num_threads`` where Python set none: TACK_NUM_THREADS; else OMP_NUM_THREADS, as a job
    script sets it for every OpenMP code and BLAS of the job (its first number: ``4,2`` nests);
    else the cores this process may use (its affinity), shared out under an MPI launch among
    the ranks its launcher started on this node (``threads_under_launch``)."""
    raw = os.environ.get("TACK_NUM_THREADS", "").strip()
    n = _threads_value(raw)
    if n is not None:
        return n
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = max(cores or 1, 1)
    # OpenMP's variable, not Tack's: a value OpenMP would not take either is passed over in
    # silence (the job's OpenMP runtime says so), as where it is unset
    default = _threads_value(os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip())
    if default is None:
        launch = detect()
        machine = os.cpu_count() or cores
        if getattr(launch, "local", None) and launch.local > 1:     # (read only where shared)
            machine = job_cores(machine)
        default = threads_under_launch(cores, machine, launch)
    if raw:
        shown = raw if len(raw) <= 32 else raw[:24] + "..."
        warn(f"tack: TACK_NUM_THREADS={shown!r} is not an integer from 1 to {MAX_THREADS}; "
             f"using {default}", stacklevel=3)
    return default


def _threads_value(raw: str):
    """``raw`` as a thread count from 1 to MAX_THREADS, or None."""
    n = _count(raw)
    return n if n is not None and 0 < n <= MAX_THREADS else None


def threads_under_launch(cores: int, machine: int, launch) -> int:
    """The default thread count of a process that may use ``cores`` cores (its affinity) of the
    ``machine`` cores its launch's ranks on this node share (``job_cores``), in ``launch``
    (``detect``'s, or None): with L of the launch's ranks on this node, at most
    ``machine // L``.  A launcher that binds each rank to its own cores (Open MPI's default,
    ``srun --cpu-bind``) leaves each its share in its affinity already; one that binds none
    (MPICH's ``mpiexec``) gave every rank every core, and each rank's threads, one a core,
    would have put L threads on each core."""
    local = getattr(launch, "local", None)
    if not local or local < 2:
        return cores
    return max(1, min(cores, machine // local))


def job_cores(machine: int, environ=None, root: str = "/") -> int:
    """The cores an MPI launch's ranks on this node share: the node's ``machine``, or fewer
    where the job is confined to fewer, as a shared node's scheduler confines it.  Every rank
    of ``mpiexec`` inside a Slurm job of 8 cores on a 64-core node may use those 8 (its affinity),
    and with 64 // 8 as the bound each of 8 ranks took 8 threads: 64 on 8 cores.  So the
    bound is taken from what confines them: the cpuset of the process's cgroup (Slurm's
    task/cgroup, PBS's and LSF's cgroups, a container's ``--cpuset-cpus``: ``_cgroup_cpus``)
    and Slurm's ``SLURM_CPUS_ON_NODE`` (the job's or step's CPUs on this node).  A launch
    confined otherwise (``taskset -c 0-7 mpiexec -n 8``) is not seen: bind its ranks, or set
    OMP_NUM_THREADS."""
    environ = os.environ if environ is None else environ
    n = machine
    for confined in (_cgroup_cpus(root), _count(environ.get("SLURM_CPUS_ON_NODE", ""))):
        if confined:
            n = min(n, confined)
    return max(n, 1)


def _cgroup_cpus(root: str = "/"):
    """How many CPUs the cpuset of this process's cgroup holds (the effective set: cgroup v2's
    ``cpuset.cpus.effective``, v1's ``cpuset.effective_cpus``, of its cgroup or the nearest
    parent that has one), or None where there is none to read."""
    try:
        with open(os.path.join(root, "proc/self/cgroup")) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    places = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if not path.startswith("/"):
            continue
        if controllers == "":                       # v2 (or the v2 half of a hybrid setup)
            places += [("sys/fs/cgroup", path, "cpuset.cpus.effective"),
                       ("sys/fs/cgroup/unified", path, "cpuset.cpus.effective")]
        elif "cpuset" in controllers.split(","):    # v1
            places.append(("sys/fs/cgroup/cpuset", path, "cpuset.effective_cpus"))
    for mount, path, name in places:
        while True:
            try:
                with open(os.path.join(root, mount, path.strip("/"), name)) as f:
                    return _cpu_list_count(f.read())
            except (OSError, UnicodeDecodeError):
                pass
            if path in ("/", ""):
                break
            path = path.rsplit("/", 1)[0] or "/"
    return None


def _cpu_list_count(text: str):
    """The CPUs of a kernel CPU list (``0-3,8-11``: 8), or None where it does not parse or is empty."""
    n = 0
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        a, b = _count(first), _count(last) if last else _count(first)
        if a is None or b is None or b < a:
            return None
        n += b - a + 1
    return n or None


# -- the MPI launch: recognized from the launcher's environment, without mpi4py --
#
# | Launcher | Rank | Size | Ranks on this node |
# |---|---|---|---|
# | Open MPI (mpirun, prterun) | OMPI_COMM_WORLD_RANK, or PMIX_RANK | OMPI_COMM_WORLD_SIZE | OMPI_COMM_WORLD_LOCAL_SIZE |
# | MVAPICH2 (mpirun_rsh) | MV2_COMM_WORLD_RANK | MV2_COMM_WORLD_SIZE | MV2_COMM_WORLD_LOCAL_SIZE |
# | Cray PALS | PALS_RANKID | PMI_SIZE | (not known) |
# | Cray ALPS (aprun) | ALPS_APP_PE | PMI_SIZE | (not known) |
# | MPICH and Intel MPI (Hydra) | PMI_RANK | PMI_SIZE | MPI_LOCALNRANKS |
# | Slurm (srun) | SLURM_PROCID | SLURM_STEP_NUM_TASKS | SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID |
#
# Where a launcher does not say how many ranks a node runs, but its ranks are the srun step's
# (``srun --mpi=pmi2``: PMI_RANK and PMI_SIZE, no MPI_LOCALNRANKS), Slurm's count says it.
#
# The first launcher whose rank and size are both set decides, and a launch of one
# task is not MPI: ``mpirun -n 1`` inside a Slurm allocation (an srun step's SLURM_
# variables still set) is one process, not a Slurm rank.  A Slurm batch script is not either: it has
# SLURM_PROCID=0 and SLURM_NTASKS, but SLURM_STEP_NUM_TASKS is set only inside
# an srun step, so a warm-up run on the script's own line stores entries as on
# a workstation.  The cache's mode under MPI and the default thread count ask ``detect``.

# (launcher, rank variables, size variables, variables of the ranks on this node), tried in order
LAUNCHERS = (
    ("Open MPI", ("OMPI_COMM_WORLD_RANK", "PMIX_RANK"), ("OMPI_COMM_WORLD_SIZE",),
     ("OMPI_COMM_WORLD_LOCAL_SIZE",)),
    ("MVAPICH2", ("MV2_COMM_WORLD_RANK",), ("MV2_COMM_WORLD_SIZE",), ("MV2_COMM_WORLD_LOCAL_SIZE",)),
    ("Cray PALS", ("PALS_RANKID",), ("PMI_SIZE",), ()),
    ("Cray ALPS", ("ALPS_APP_PE",), ("PMI_SIZE",), ()),
    ("MPICH/Intel MPI (Hydra)", ("PMI_RANK",), ("PMI_SIZE",), ("MPI_LOCALNRANKS",)),
    ("Slurm srun", ("SLURM_PROCID",), ("SLURM_STEP_NUM_TASKS",), ()),
)


def _int(environ, names):
    """The first of ``names`` set in ``environ`` to a whole number (no rank or size has more
    than 12 digits), or None."""
    for name in names:
        n = _count(environ.get(name, "").strip())
        if n is not None:
            return n
    return None


def slurm_tasks_here(environ):
    """The tasks of this srun step on this node: SLURM_STEP_TASKS_PER_NODE (``2(x3),1``: 2 on
    each of the first three nodes, 1 on the fourth) at this node's index, SLURM_NODEID; None
    where either is missing or malformed."""
    node = _int(environ, ("SLURM_NODEID",))
    if node is None:
        return None
    for part in environ.get("SLURM_STEP_TASKS_PER_NODE", "").split(","):
        count, _, times = part.strip().partition("(x")
        count = _count(count)
        repeat = _count(times[:-1]) if times.endswith(")") else (None if times else 1)
        if count is None or repeat is None:
            return None
        if node < repeat:
            return count
        node -= repeat
    return None


def _count(text: str):
    """``text`` as a whole number (digits only), or None."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else None


def detect(environ=None):
    """The MPI launch this process is part of (more than one task): ``.launcher``, ``.rank``,
    ``.size`` and ``.local`` (how many of its ranks run on this node; None where the launcher
    does not say); or None."""
    environ = os.environ if environ is None else environ
    for launcher, rank_vars, size_vars, local_vars in LAUNCHERS:
        rank = _int(environ, rank_vars)
        if rank is None:
            continue
        size = _int(environ, size_vars)
        if size is None:
            continue
        if size <= 1:       # this launcher started one task: not MPI, whatever an outer one set
            return None
        local = _int(environ, local_vars)
        if local is None and _int(environ, ("SLURM_STEP_NUM_TASKS",)) == size:
            # the srun step's own tasks (srun --mpi=pmi2 sets PMI_RANK, not MPI_LOCALNRANKS):
            # Slurm's count of them on this node
            local = slurm_tasks_here(environ)
        return types.SimpleNamespace(launcher=launcher, rank=rank, size=size, local=local)
    return None


def _flag_value(name: str, value) -> bool:
    """An on/off setting set from Python: a bool or an int (0 or 1, NumPy's too), or one of
    the words its environment variable takes (``"0"``, ``"off"``...: ``bool("0")`` would turn it
    on); ValueError for anything else."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return word in TRUE_WORDS
    elif not isinstance(value, float):
        try:
            if value in (0, 1):
                return bool(value)
        except (TypeError, ValueError):         # an array: its truth is ambiguous
            pass
    raise ValueError(f"tack.config.{name} must be True or False (or 1, 0, \"on\", \"off\"), "
                     f"not {value!r}")


class Config:
    """Settings read lazily from the environment, overridable from Python."""

    _sources = {"debug": lambda: _env_flag("TACK_DEBUG"),
                "timing": lambda: _env_flag("TACK_TIMING"),
                "num_threads": _env_threads}

    def __getattr__(self, name):
        # Called only while ``name`` is not yet an instance attribute: read the
        # environment once, then keep the value as a plain attribute (fast path).
        if name.startswith("_") or name not in self._sources:
            raise AttributeError(f"tack.config has no setting {name!r}")
        value = self._sources[name]()
        object.__setattr__(self, name, value)
        return value

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name not in self._sources:
            raise AttributeError(f"tack.config has no setting {name!r}; "
                                 f"known: {', '.join(sorted(self._sources))}")
        if name == "num_threads":
            # an integer of any kind (np.int64(2), as a launch's dim takes), kept as Python's
            import operator
            try:
                # (NumPy's bool is "bool_", or "bool" since NumPy 2, which some take as an index)
                n = None if type(value).__name__ in ("bool", "bool_") else operator.index(value)
            except TypeError:
                n = None
            if n is None or not 1 <= n <= MAX_THREADS:
                raise ValueError(f"tack.config.num_threads must be an int from 1 to {MAX_THREADS}, "
                                 f"not {value!r}")
            value = n
        if name in ("debug", "timing"):
            value = _flag_value(name, value)
        object.__setattr__(self, name, value)

    def reset(self):
        """Forget values set from Python; re-read the environment on next use."""
        for name in self._sources:
            self.__dict__.pop(name, None)


config = Config()
