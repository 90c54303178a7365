#!/usr/bin/env bash
# Stop the one-node SLURM cluster that slurm_up.sh DIR started: cancel its jobs, then stop
# slurmd, slurmctld and munged by the pid files in DIR (SIGTERM, SIGKILL after 10 s).
set -uo pipefail

DIR=${1:?usage: slurm_down.sh DIR}
[ -d "$DIR" ] || exit 0
if [ -f "$DIR/slurm.conf" ] && command -v scancel >/dev/null 2>&1; then
  SLURM_CONF="$DIR/slurm.conf" timeout 10 scancel --full --quiet --partition=debug 2>/dev/null
fi

stop_pidfile() {
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file" 2>/dev/null) || return 0
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
}

stop_pidfile "$DIR/slurmd.pid"
stop_pidfile "$DIR/slurmctld.pid"
stop_pidfile "$DIR/munge/munged.pid"
exit 0
