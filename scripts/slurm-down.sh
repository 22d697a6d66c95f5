#!/usr/bin/env bash
# Stops the single-node Slurm cluster that scripts/slurm-up.sh started:
# slurmd, then slurmctld, then munged, but munged only when slurm-up.sh
# started it (the marker munged.ours in the state directory says so).
# --keep-munge leaves munged running whoever started it (slurm-up.sh uses it
# to restart Slurm after a configuration change).
#
# Each daemon gets SIGTERM and a bounded wait, then SIGKILL. The state
# directory is kept, so a later slurm-up.sh is fast. Needs root.
set -euo pipefail

dir=${KILN_SLURM_DIR:-/var/lib/kiln-slurm}
term_wait_s=20
kill_wait_s=5

keep_munge=0
for arg in "$@"; do
  case "$arg" in
    --keep-munge) keep_munge=1 ;;
    *) echo "usage: $0 [--keep-munge]" >&2; exit 2 ;;
  esac
done

log() { echo "slurm-down: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  log "must run as root"
  exit 1
fi

# Prints the pid in pidfile if that process is alive and named name.
live_pid() {
  local name=$1 pidfile=$2 pid
  [ -r "$pidfile" ] || return 1
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  echo "$pid"
}

# Waits up to $2 seconds for process $1 to exit.
wait_gone() {
  local pid=$1 limit=$2
  for _ in $(seq $((limit * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  ! kill -0 "$pid" 2>/dev/null
}

stop() {
  local name=$1 pidfile=$2 pid
  pid=$(live_pid "$name" "$pidfile") || { log "$name is not running"; return 0; }
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$pid" "$term_wait_s" && return 0
  log "$name did not exit within ${term_wait_s}s: killing it"
  kill -KILL "$pid" 2>/dev/null || true
  wait_gone "$pid" "$kill_wait_s" && return 0
  log "$name (pid $pid) is still alive"
  return 1
}

status=0
stop slurmd "$dir/run/slurmd.pid" || status=1
stop slurmctld "$dir/run/slurmctld.pid" || status=1
if [ "$keep_munge" -eq 0 ] && [ -e "$dir/munged.ours" ]; then
  if stop munged /run/munge/munged.pid; then
    rm -f "$dir/munged.ours"
  else
    status=1
  fi
fi
exit "$status"
