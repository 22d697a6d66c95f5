#!/usr/bin/env bash
# A two-node Slurm cluster on this one machine, for kiln's multi-node test:
# each slurmd runs in its own network namespace (kn1, kn2) with its own
# address on a bridge, so Slurm sees two hosts, srun crosses a real (virtual)
# network between them, and a gang of two lands one rank per node.
#
#   scripts/slurm-2node.sh up     prints the slurm.conf path on its last line
#   scripts/slurm-2node.sh down   stops the daemons, removes the namespaces
#
# A cluster of its own (ClusterName=kiln2, controller port 6827, state under
# $KILN_SLURM2_DIR), separate from scripts/slurm-up.sh's single node, which
# it needs only for munge: run slurm-up.sh first. The file system is shared
# (one machine), as a multi-node kiln needs. Needs root, ip(8) and
# namespaces. Idempotent.
set -euo pipefail

dir=${KILN_SLURM2_DIR:-/var/lib/kiln-slurm2}
ctld_port=${KILN_SLURM2_CTLD_PORT:-6827}
bridge=kn-br0
net=10.77.0
host_ip=$net.1
# Bounded waits, in seconds.
idle_wait_s=60
term_wait_s=10

log() { echo "slurm-2node: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
conf="$dir/slurm.conf"

daemon_pid() {
  local name=$1 pidfile=$2 pid
  [ -r "$pidfile" ] || return 1
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  echo "$pid"
}

stop_daemon() {
  local pid
  pid=$(daemon_pid "$1" "$2") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((term_wait_s * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

down() {
  for n in kn1 kn2; do
    stop_daemon slurmd "$dir/run/slurmd.$n.pid"
  done
  stop_daemon slurmctld "$dir/run/slurmctld.pid"
  for n in kn1 kn2; do
    ip netns del "$n" 2>/dev/null || true
    # A namespace outlives its name while a process still runs in it, and
    # keeps its veth pair: delete the host end, which takes both.
    ip link del "$n-h" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

up() {
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 ||
    die "munged is not running: run scripts/slurm-up.sh first"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run"
  chmod 0755 "$dir" "$dir/log"

  # The bridge, with the controller's address on the host side.
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$host_ip/24" dev "$bridge"
  fi
  ip link set "$bridge" up
  local i=0 n
  for n in kn1 kn2; do
    i=$((i + 1))
    if ! ip netns list | grep -qw "$n"; then
      ip netns add "$n"
      ip link add "$n-h" type veth peer name "$n-n"
      ip link set "$n-n" netns "$n"
      ip link set "$n-h" master "$bridge" up
      ip -n "$n" addr add "$net.1$i/24" dev "$n-n"
      ip -n "$n" link set "$n-n" up
      ip -n "$n" link set lo up
    fi
  done

  local new_conf
  new_conf=$(cat <<EOF
# Written by scripts/slurm-2node.sh; edits are overwritten.
ClusterName=kiln2
SlurmctldHost=$(hostname -s)($host_ip)
SlurmctldPort=$ctld_port
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=30
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MinJobAge=2
KillWait=5
InactiveLimit=0
NodeName=kn1 NodeAddr=$net.11 CPUs=1 RealMemory=1024 State=UNKNOWN
NodeName=kn2 NodeAddr=$net.12 CPUs=1 RealMemory=1024 State=UNKNOWN
PartitionName=kiln2 Nodes=kn[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
)
  if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$new_conf" ]; then
    printf '%s\n' "$new_conf" > "$conf"
    for n in kn1 kn2; do stop_daemon slurmd "$dir/run/slurmd.$n.pid"; done
    stop_daemon slurmctld "$dir/run/slurmctld.pid"
  fi
  daemon_pid slurmctld "$dir/run/slurmctld.pid" >/dev/null ||
    slurmctld -f "$conf" || die "slurmctld failed to start"
  for n in kn1 kn2; do
    mkdir -p "$dir/spool/$n"
    daemon_pid slurmd "$dir/run/slurmd.$n.pid" >/dev/null ||
      nsenter --net="/run/netns/$n" slurmd -f "$conf" -N "$n" ||
      die "slurmd $n failed to start (see $dir/log/slurmd.$n.log)"
  done

  export SLURM_CONF="$conf"
  local deadline=$((SECONDS + idle_wait_s)) states=""
  while [ $SECONDS -lt $deadline ]; do
    states=$(timeout 10 sinfo -h -N -o '%N=%T' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    case "$states" in
      "kn1=idle kn2=idle ") break ;;
      # A drain or down left in the saved state by an earlier run (a test
      # that failed a health check, a killed slurmd): this cluster is the
      # tests' own, so put its nodes back in service.
      *drain*|*down*)
        scontrol update nodename=kn1,kn2 state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  [ "$states" = "kn1=idle kn2=idle " ] ||
    die "nodes are '${states:-unknown}' after ${idle_wait_s}s, not idle"
  log "nodes kn1 and kn2 are idle"
  echo "$conf"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
