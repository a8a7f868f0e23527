#!/usr/bin/env bash
# A real single-node Slurm (Debian's slurm-wlm 22.05 and munge) and the tests that need one
# (tests/slurm: srun steps, an sbatch job, the Slurm walk-through of docs/deploy.md).
#
#   ci/slurm-check.sh [SCRATCH [PYTEST ARGS...]]     (default: tests/slurm)
#
# As root, with no systemd: munged, slurmctld and slurmd are started by hand, and every piece of
# their state lives under SCRATCH/slurm (slurm.conf, spool and state-save directories, logs, pid
# files, the munge key and socket), made afresh at each run; nothing under /etc or /var is used.
# ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no cgroups).  The node is the one
# `slurmd -C` describes (its name and memory), declared with at least 4 CPUs so that the tests'
# 4-rank step runs on a 2-core machine (SlurmdParameters=config_overrides: slurmd reports what
# slurm.conf says rather than draining a node with fewer cores).  The ports are free ones picked
# at each run.  MPI steps use `srun --mpi=pmi2`: PyPI's MPICH (built without PMIx) talks PMI-1
# over PMI_FD to Slurm's pmi2 plugin.  (Debian's mpi/pmix plugin, which `srun --mpi=list` lists,
# does not load without libpmix's development link: slurmd logs that at start, harmlessly.)
# Every daemon is stopped at the end, on failure too; one a killed run left behind is stopped at
# the next start.  .ci/run calls this after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/lib.sh
scratch_dir slurm-check "${1:-}"
shift || true
[ $# -gt 0 ] || set -- tests/slurm
PY="${PYTHON:-python3}"
[ "$(id -u)" -eq 0 ] || { echo "slurm-check: run as root (slurmd starts job steps as root here)" >&2; exit 1; }

step "apt: slurm-wlm munge" apt_install slurm-wlm munge || exit 1
# What the tests import: this checkout's Tack (first on the path), mpi4py and PyPI's MPICH.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c 'import mpi4py, numpy, llvmlite, pytest' 2>/dev/null || ! command -v mpichversion >/dev/null; then
  step "pip install mpi4py mpich" "$PY" -m pip install --quiet mpi4py mpich || exit 1
fi

# -- the cluster's state, under SCRATCH/slurm ------------------------------------------------------
D="$S/slurm"
export SLURM_CONF="$D/etc/slurm.conf"
MUNGE_SOCKET="$D/munge-run/munge.socket"
FIGURES="$S/slurm-figures.txt"

# free_ports N: N TCP ports nothing listens on now.
free_ports() {
  "$PY" - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
}

write_conf() {
  local facts node mem cpus ctld_port d_port
  facts="$(slurmd -C | head -1)"                       # NodeName=... CPUs=... RealMemory=...
  node="$(sed -n 's/.*NodeName=\([^ ]*\).*/\1/p' <<<"$facts")"
  mem="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$facts")"
  cpus="$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$facts")"
  [ -n "$node" ] && [ -n "$mem" ] && [ -n "$cpus" ] || { echo "slurmd -C said: $facts" >&2; return 1; }
  [ "$cpus" -ge 4 ] || cpus=4
  read -r ctld_port d_port <<<"$(free_ports 2)"
  NODE="$node"
  : >"$D/etc/plugstack.conf"                           # no SPANK plugins (not /etc/slurm's)
  cat >"$SLURM_CONF" <<EOF
# Written by ci/slurm-check.sh: a single-node cluster, all of its state under $D.
ClusterName=tackci
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$D/spool/ctld
SlurmdSpoolDir=$D/spool/d
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
PlugStackConfig=$D/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
# From slurmd -C: $facts
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

show_logs() {
  local f
  for f in "$D"/log/*.log; do echo "--- $f (last 40 lines)"; tail -n 40 "$f"; done >&2
}

# wait_idle: until sinfo shows the node idle (60 s at most; the logs on failure).
wait_idle() {
  local i state=""
  for i in $(seq 120); do
    state="$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)"
    [ "$state" = "idle" ] && { sinfo; return 0; }
    sleep 0.5
  done
  echo "slurm-check: node $NODE is '${state:-unreachable}' after 60 s, not idle" >&2
  show_logs
  return 1
}

# searchable_by_all DIR: DIR and every directory above it may be searched by anyone.
searchable_by_all() {
  local d="$1" perm
  while :; do
    perm="$(stat -c %A "$d")" || return 1
    [[ "${perm:3:1}${perm:6:1}${perm:9:1}" =~ ^[xst]{3}$ ]] || { echo "$d ($perm)"; return 1; }
    [ "$d" != / ] || return 0
    d="$(dirname "$d")"
  done
}

start_slurm() {
  local force=() blocked
  dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none || return 1
  chmod 0400 "$D/munge/munge.key" || return 1
  # munged refuses a socket other users could not reach (a directory above it not searchable by
  # all: mktemp -d makes 0700 ones).  Every client of this cluster is root, so there --force makes
  # that refusal a warning in munged's log; the directories are left as they are.
  if ! blocked="$(searchable_by_all "$D/munge-run")"; then
    echo "slurm-check: $blocked is not searchable by all: munged --force (every client is root)"
    force=(--force)
  fi
  munged "${force[@]}" --socket="$MUNGE_SOCKET" --key-file="$D/munge/munge.key" \
    --seed-file="$D/munge/munged.seed" --log-file="$D/log/munged.log" \
    --pid-file="$D/munge-run/munged.pid" || { show_logs; return 1; }
  munge -S "$MUNGE_SOCKET" -n | unmunge -S "$MUNGE_SOCKET" >/dev/null || { show_logs; return 1; }
  write_conf || return 1
  slurmctld || { show_logs; return 1; }
  slurmd || { show_logs; return 1; }
  wait_idle
}

# ours PID NAME: PID is a NAME process of this cluster (its command line or environment names $D),
# not another that took the number of one that exited.
ours() {
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] || return 1
  cat "/proc/$1/cmdline" "/proc/$1/environ" 2>/dev/null | tr '\0' '\n' | grep -qF -- "$D/"
}

# stop PID NAME: end that process of ours, waiting until it is gone (15 s, then SIGKILL).
stop() {
  local i
  ours "$1" "$2" || return 0
  kill "$1" 2>/dev/null || return 0
  for i in $(seq 60); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.25; done
  echo "slurm-check: $2 ($1) did not stop in 15 s: killed" >&2
  kill -9 "$1" 2>/dev/null || true
}

# stop_slurm: cancel what is left of the jobs, then stop each daemon of this cluster (by the pid
# in its pid file) and any job step it left (slurmstepd with this cluster's SLURM_CONF).
stop_slurm() {
  local ids name pid i
  if [ -f "$D/run/slurmctld.pid" ] && [ -f "$SLURM_CONF" ]; then
    ids="$(squeue -h -o %i 2>/dev/null || true)"
    if [ -n "$ids" ]; then
      echo "slurm-check: cancelling jobs left: $ids"
      # shellcheck disable=SC2086
      scancel $ids 2>/dev/null || true
      for i in $(seq 60); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    fi
  fi
  for name in slurmd:run/slurmd.pid slurmctld:run/slurmctld.pid munged:munge-run/munged.pid; do
    [ -f "$D/${name#*:}" ] && stop "$(cat "$D/${name#*:}")" "${name%%:*}"
  done
  for pid in $(pgrep -x slurmstepd || true); do
    ours "$pid" slurmstepd && { echo "slurm-check: a job step was left: $pid" >&2; stop "$pid" slurmstepd; }
  done
  return 0
}

# A run killed before its trap ran may have left daemons here: stop them, then start afresh.
if compgen -G "$D/run/*.pid" >/dev/null || [ -f "$D/munge-run/munged.pid" ]; then
  echo "slurm-check: stopping what a previous run left in $D"
  stop_slurm
fi
at_exit stop_slurm
rm -rf "$D"
mkdir -p "$D"/{etc,log,run,spool/ctld,spool/d}
install -d -m 0700 "$D/munge"            # the key and the PRNG seed: private
install -d -m 0755 "$D/munge-run"        # the socket's directory: munged wants it searchable by all
: >"$FIGURES"

VERSION="$(slurmd -V)"
echo "Slurm: $VERSION (Debian $(dpkg-query -W -f='${Version}' slurm-wlm)), munge $(dpkg-query -W -f='${Version}' munge)" | tee -a "$FIGURES"
t0=$EPOCHREALTIME
step "slurm: start munged, slurmctld, slurmd (node idle)" start_slurm || exit 1
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "Slurm start (munged, slurmctld, slurmd, node idle): %.1f s\n", b-a}' | tee -a "$FIGURES"
srun --mpi=list 2>&1 | tr '\n' ' ' | sed 's/\t//g; s/ *$/\n/' | tee -a "$FIGURES"

# The tests, which fail rather than skip if they find no Slurm (TACK_REQUIRE_SLURM); each srun
# and sbatch they run is timed into TACK_SLURM_TIMES.
export TACK_REQUIRE_SLURM=1 TACK_SLURM_TIMES="$S/slurm-steps.txt"
: >"$TACK_SLURM_TIMES"
rc=0
step "slurm: tests/slurm (pytest)" "$PY" -m pytest -v -p no:cacheprovider --durations=0 "$@" || rc=$?
[ "$rc" -ne 5 ] || echo "slurm-check: pytest collected no tests" >&2

echo; echo "=== figures ==="
cat "$FIGURES"
echo "each Slurm step, as the tests timed it:"
sed 's/^/  /' "$TACK_SLURM_TIMES"
exit "$rc"
