#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, everything under one folder:
#   tests/cluster/slurm_up.sh DIR     start munged, slurmctld and slurmd (prints the env to use)
#   tests/cluster/slurm_down.sh DIR   stop them (by the pid files in DIR)
#
# Needs Debian's `slurm-wlm` and `munge` packages and root (slurmd runs jobs as their owner).
# Nothing system-wide is used or changed: a fresh munge key and socket, a generated slurm.conf
# (this machine's cores from nproc, its memory from /proc/meminfo, free TCP ports), state, spool
# and logs all live in DIR. No cgroups (proctrack/linuxproc, task/none) and no accounting
# database (no slurmdbd): finished jobs are logged to DIR/jobcomp.txt, and DIR/bin/sacct answers
# the job-state query submitit makes from `scontrol show job` (sacct_from_scontrol.py).
#
# Clients (sbatch, squeue, scancel, srun) find the cluster through SLURM_CONF=DIR/slurm.conf;
# put DIR/bin first on PATH for the sacct wrapper. The last lines printed are those two exports.
set -euo pipefail

DIR=${1:?usage: slurm_up.sh DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "slurm_up.sh: must run as root (slurmd starts jobs as their owner)" >&2
  exit 2
fi
for exe in munged mungekey slurmctld slurmd sinfo scontrol python3; do
  command -v "$exe" >/dev/null 2>&1 || {
    echo "slurm_up.sh: '$exe' not found; apt-get install slurm-wlm munge" >&2
    exit 3
  }
done

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool" "$DIR/bin"
chmod 0700 "$DIR/munge"

# --- munge: a key of our own, a socket of our own ---------------------------------------------
[ -f "$DIR/munge/munge.key" ] || mungekey --create --keyfile="$DIR/munge/munge.key"
chmod 0400 "$DIR/munge/munge.key"
SOCKET="$DIR/munge/munge.socket"
munged --force --socket="$SOCKET" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
  --seed-file="$DIR/munge/munged.seed" --num-threads=2
for _ in $(seq 50); do [ -S "$SOCKET" ] && break; sleep 0.1; done
[ -S "$SOCKET" ] || { echo "munged did not start:"; cat "$DIR/munge/munged.log"; exit 1; } >&2

# --- slurm.conf --------------------------------------------------------------------------------
NODE=$(hostname -s)
# nproc obeys OMP_NUM_THREADS (tests set it to 1): count the cores without it
CPUS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
MEM_MB=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
# leave the rest of the machine some memory: jobs may ask for at most 90% of it
REAL_MB=$((MEM_MB * 9 / 10))
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
cat >"$DIR/slurm.conf" <<EOF
ClusterName=graphssl-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$SOCKET
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.txt
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=1024
ReturnToService=2
# a cancelled or timed-out job gets SIGTERM, then SIGKILL this many seconds later
KillWait=5
# keep finished jobs visible to scontrol/squeue for a while
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REAL_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

# sacct without an accounting database: answer submitit's job-state query from scontrol
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cat >"$DIR/bin/sacct" <<EOF
#!/bin/sh
export SLURM_CONF="$DIR/slurm.conf"
exec python3 "$HERE/sacct_from_scontrol.py" "\$@"
EOF
chmod +x "$DIR/bin/sacct"

export SLURM_CONF="$DIR/slurm.conf"
# -i: ignore saved state from an earlier start (fresh cluster every time)
slurmctld -i
# the cluster shares the machine's cores with the test session that started it: its jobs
# (PropagatePrioProcess=0, the default: they inherit slurmd's priority) run at a lower priority,
# so a job left training into its time limit does not slow the tests running beside it
nice -n 10 slurmd -N "$NODE"

# wait until the node accepts jobs
for _ in $(seq 150); do
  state=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
  case "$state" in idle | mix | alloc) break ;; esac
  sleep 0.2
done
case "$state" in
  idle | mix | alloc) ;;
  *)
    echo "slurm_up.sh: node $NODE is '$state', not idle, after 30 s" >&2
    tail -n 30 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
    exit 1
    ;;
esac
echo "SLURM up: node $NODE, $CPUS CPUs, ${REAL_MB} MB, partition debug" >&2
echo "export SLURM_CONF=$DIR/slurm.conf"
echo "export PATH=$DIR/bin:\$PATH"
