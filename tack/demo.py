"""``python -m tack.demo``: contour a 21^3 field on the CPU and show where the time goes.

Builds a field (by default the distance from an off-centre point, contoured
at 0.5, so no grid value lies exactly on the level), runs
``tack.kernels.contour.contour`` twice, and prints the triangle count, the
first-call time broken down stage by stage (Tack's lazy imports, finding, reading and
checking the cache entry, loading its code, starting threads, launching; a compile's
stages when there is no entry) with the rest of the call (NumPy between the kernels), so the
lines add up to the first call; the second-call time, and
where the kernel cache lives (a second run of the demo starts warm).
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

FIELDS = ("sphere", "torus", "waves")


#: Bytes per point a contour of the demo's field allocates at its peak (the demo, or ``bundles
#: check``'s child): its work arrays (32: ``contour._scratch``, which only pages near the surface
#: touch) and the float32 field (4), plus some room (measured 36.1, n = 150 to 300;
#: ``make_field`` peaks at 12 before).  Counted whole, as ``ulimit -v`` counts them.
CHECK_BYTES_PER_POINT = 40


def available_memory(proc="/proc", cgroups="/sys/fs/cgroup"):
    """Bytes a new process of this one's may take without swapping or being killed: the least of
    Linux's ``MemAvailable``, the room left under each memory limit of this process's cgroups
    (v2 ``memory.max`` less ``memory.current``, v1 ``memory.limit_in_bytes`` less
    ``memory.usage_in_bytes``, at its own level and every level above: a Slurm job's ``--mem``,
    a container's limit) and its address-space limit (``ulimit -v``, which a child inherits);
    the physical memory where ``MemAvailable`` is not known (``sysconf``); None where nothing is."""
    found = []
    try:
        with open(os.path.join(proc, "meminfo"), "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, ValueError, OSError):
            pass
    found += _cgroup_room(proc, cgroups)
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and soft >= 0:
            found.append(soft)
    except (ImportError, OSError, ValueError, AttributeError):
        pass
    return min(found) if found else None


# v1 writes "no limit" as a page-rounded 2**63 - 1; anything past 2**60 bytes is none
_NO_LIMIT = 1 << 60


def _cgroup_room(proc, cgroups) -> list:
    """[bytes left under each memory limit of this process's cgroups, from its own level up]."""
    try:
        with open(os.path.join(proc, "self", "cgroup"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":                   # v2: "0::/path"
            roots = [cgroups, os.path.join(cgroups, "unified")]
            files = ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            roots = [os.path.join(cgroups, "memory")]
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        for root in roots:
            root = os.path.normpath(root)
            # the process's own level, where this mount shows it (in a container the mount's
            # root is the container's own cgroup, and the path the host's: the root is it then)
            here = os.path.normpath(os.path.join(root, path.lstrip("/")))
            if not os.path.isdir(here):
                here = root
            if not os.path.isfile(os.path.join(root, "cgroup.procs")):
                continue                        # no such hierarchy mounted here
            while True:                         # its level, then each one above, to the mount's
                room = _room(here, files)
                if room is not None:
                    out.append(room)
                if here == root:
                    break
                here = os.path.dirname(here)
            break
    return out


def _room(where, files):
    """Bytes left under the limit in ``where`` (a cgroup directory), or None if it has none."""
    try:
        with open(os.path.join(where, files[0]), "rb") as f:
            limit = f.read().strip()
        if limit == b"max":
            return None
        limit = int(limit)
        if limit >= _NO_LIMIT:
            return None
        with open(os.path.join(where, files[1]), "rb") as f:
            used = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return max(limit - used, 0)


def size_problem(n: int, hint: str):
    """Why a ``n``^3 field cannot be contoured here (None where it can), ending with ``hint``:
    more points than the contour takes (``contour.MAX_POINTS``: its ids are int32), or more
    memory than is available to a new process here (``available_memory``); each names the
    memory it would need.  The demo and ``bundles check`` refuse such a size before anything
    runs (the demo's field was allocated first: a raw MemoryError)."""
    from .cache import format_size
    from .kernels.contour import MAX_POINTS
    need = CHECK_BYTES_PER_POINT * n ** 3
    limit = round(MAX_POINTS ** (1 / 3))
    while limit ** 3 > MAX_POINTS:
        limit -= 1
    if n ** 3 > MAX_POINTS:
        return (f"a {n}^3 field is more than the contour takes (at most {MAX_POINTS} points, "
                f"{limit}^3: its ids are int32), and contouring it would need about "
                f"{format_size(need)} of memory; {hint}")
    avail = available_memory()
    if avail is not None and need > avail:
        return (f"contouring a {n}^3 field would need about {format_size(need)} of memory, more "
                f"than is available here ({format_size(avail)}: the least of the host's available "
                f"memory, its cgroups' limits and ulimit -v); {hint}")
    return None


def make_field(kind: str, n: int) -> np.ndarray:
    """A float32 (n, n, n) field whose 0.5 level set is a closed surface.

    Computed in float64 from each axis's coordinates broadcast against the others (one (n, n, n)
    float64 array at a time, about 12 bytes a point at the peak with the float32 result), not
    from every point's three coordinates: the same operations on the same values, in the same
    order, so the same field, in a fifth of the memory."""
    x, y, z = (a / (n - 1) for a in np.indices((n, n, n), dtype=np.float64, sparse=True))
    if kind == "sphere":
        f = (x - 0.47) ** 2 + (y - 0.52) ** 2           # (n, n, 1)
        f = f + (z - 0.49) ** 2                         # (n, n, n)
        np.sqrt(f, out=f)
        f /= 0.35                                       # 0.5 at radius 0.175
    elif kind == "torus":
        x, y, z = x - 0.49, y - 0.51, z - 0.5
        ring = np.sqrt(x ** 2 + y ** 2) - 0.28          # (n, n, 1)
        f = ring ** 2 + z ** 2
        np.sqrt(f, out=f)
        f /= 0.2                                        # tube radius 0.1
    elif kind == "waves":
        x, y, z = 2 * np.pi * x, 2 * np.pi * y, 2 * np.pi * z
        f = np.sin(2 * x) * np.cos(3 * y) + np.sin(2.5 * z + 0.3)
        f *= 0.25
        f += 0.5
    else:
        raise ValueError(f"unknown field {kind!r}; choose from {', '.join(FIELDS)}")
    return np.ascontiguousarray(f, dtype=np.float32)


def main(argv=None) -> int:
    import argparse                     # here: make_field is imported by warm processes too
    ap = argparse.ArgumentParser(
        prog="python -m tack.demo",
        description="Contour a 3-D field with Tack's marching cubes on the CPU and show where the "
                    "time goes: the first call stage by stage, the second call, and the kernel "
                    "cache (a second run of the demo starts warm).")
    ap.add_argument("--field", choices=FIELDS, default="sphere",
                    help="the field to contour: a sphere, a torus, or waves of sines "
                         "(default sphere)")
    ap.add_argument("--size", type=int, default=21, help="points along each axis (default 21)")
    ap.add_argument("--level", type=float, default=0.5,
                    help="the value whose level set is contoured; each field is 0.5 on a closed "
                         "surface (default 0.5)")
    args = ap.parse_args(argv)
    if args.size < 2:
        ap.error("--size must be at least 2")
    if not math.isfinite(args.level):
        ap.error(f"--level must be a finite number, not {args.level}")

    import tack                         # loaded already: python -m tack.demo runs inside it
    from tack._shadowed import message
    shadowed = message()
    if shadowed is not None:            # a folder named tack, not Tack: say so, not AttributeError
        print(f"python -m tack.demo: error: {shadowed}", file=sys.stderr)
        return 1
    problem = size_problem(args.size, "give a smaller --size")
    if problem is not None:             # before the field is made (a MemoryError otherwise)
        ap.error(f"--size {args.size}: {problem}")
    field = make_field(args.field, args.size)
    t0 = time.perf_counter()
    from tack.kernels import contour as mc
    t_import = time.perf_counter() - t0

    t0 = time.perf_counter()
    verts, faces = mc.contour(field, args.level)
    first = time.perf_counter() - t0
    stages = {}
    for kern in (mc.classify, mc.emit):
        for stage, secs in kern.timings.items():
            stages[stage] = stages.get(stage, 0.0) + secs
    t0 = time.perf_counter()
    mc.contour(field, args.level)
    second = time.perf_counter() - t0

    n = args.size
    print(f"tack {tack.__version__}: contour of a {n}x{n}x{n} {args.field} field at level {args.level}")
    print(f"  {len(faces)} triangles, {len(verts)} vertices")
    print(f"  import the contour module: {t_import * 1e3:.1f} ms")
    print(f"  first call:   {first * 1e3:8.1f} ms")
    for stage, secs in stages.items():
        print(f"    {stage:<11} {secs * 1e3:8.1f} ms")
    # The contour's own work between its kernels (NumPy: a prefix sum, allocating the output)
    # and Python's: the first call less its kernels' stages, so the lines above add up.
    print(f"    {'rest':<11} {(first - sum(stages.values())) * 1e3:8.1f} ms  (NumPy and Python "
          "between the kernels)")
    print(f"  second call:  {second * 1e3:8.3f} ms")
    import tack.cache
    s = tack.cache.settings()
    st = tack.cache.stats()
    hits = st["hits"]["variant"]
    state = "off" if s.mode == "off" else f"{s.mode} mode, {s.directory}"
    where = ", ".join(f"{n} from the {src}" for src, n in sorted(st["variants_from"].items()))
    print(f"  cache: {state} ({hits} of 2 kernels loaded this run{': ' + where if where else ''})")
    if s.mode != "off":
        if hits == 2:
            print("         this run started warm; TACK_CACHE=off to time a cold compile")
        elif s.mode == "write" and st["bytes_written"]:
            print("         run again to start warm; TACK_CACHE=off to time a cold compile")
        elif s.mode == "write":             # a cache refused (writable by others...): warned
            print("         nothing was stored (the warning above says why): a next run "
                  "compiles again")
        else:
            print(f"         {s.mode} mode stores nothing: a next run compiles again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
