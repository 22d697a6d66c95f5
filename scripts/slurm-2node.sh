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
#
# Several such clusters can run at once (two test sets, say), each with its
# own KILN_SLURM2_NAME (cluster), KILN_SLURM2_NODES (the prefix of the node,
# namespace and bridge names: PREFIX1, PREFIX2, PREFIX-br0), KILN_SLURM2_NET
# (the first three octets of the bridge's /24), KILN_SLURM2_CTLD_PORT and
# KILN_SLURM2_DIR.
#
# Node names resolve inside the namespaces: each slurmd runs in a mount
# namespace of its own with /etc/netns/NS/hosts over /etc/hosts (as
# `ip netns exec` would, which also hides the cgroup file system slurmd
# needs), for it and all it starts. That file names both nodes, and this machine's hostname as
# the node's own address, so a rank finds MASTER_ADDR by the node's name and
# gloo binds the node's address rather than falling back to loopback.
#
# The cluster also has what the sharing, MIG and preemption tests ask of
# Slurm: on each node one whole GPU split into 100 shards and two MIG
# instances of type 1g.10gb (fake device files, as scripts/slurm-up.sh), and
# two partitions, PREFIX (default, priority tier 1, preempted by requeue
# with a grace) and PREFIX-high (tier 10), under preempt/partition_prio.
#
# With KILN_SLURM2_ACCT_PORT set, the cluster has accounting: a MariaDB of
# its own (datadir, socket and pid file under $dir/acct, listening on
# 127.0.0.1 at that port + 1) behind a slurmdbd on that port, both started
# here and stopped by `down`, no system service; gres/gpu and gres/shard
# are accounted TRES, so sacct's AllocTRES names the GPUs a job held.
set -euo pipefail

dir=${KILN_SLURM2_DIR:-/var/lib/kiln-slurm2}
ctld_port=${KILN_SLURM2_CTLD_PORT:-6827}
cluster=${KILN_SLURM2_NAME:-kiln2}
prefix=${KILN_SLURM2_NODES:-kn}
net=${KILN_SLURM2_NET:-10.77.0}
# A preempted job's time to checkpoint, in seconds (partition GraceTime).
preempt_grace_s=${KILN_SLURM2_PREEMPT_GRACE:-30}
acct_port=${KILN_SLURM2_ACCT_PORT:-}
bridge=$prefix-br0
nodes=("${prefix}1" "${prefix}2")
host_ip=$net.1
acct=$dir/acct
# Bounded waits, in seconds.
idle_wait_s=60
term_wait_s=10
kill_wait_s=5

log() { echo "slurm-2node: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
conf="$dir/slurm.conf"

. "$(dirname "${BASH_SOURCE[0]}")/daemons.sh"

# slurmctld and both slurmd, together.
stop_slurm() {
  local n daemons=("slurmctld:$dir/run/slurmctld.pid")
  for n in "${nodes[@]}"; do
    daemons+=("slurmd:$dir/run/slurmd.$n.pid")
  done
  stop_daemons "$term_wait_s" "$kill_wait_s" "${daemons[@]}"
}

down() {
  local n status=0
  # slurmctld reports to slurmdbd as it stops, and slurmdbd writes to
  # MariaDB: those two go after it, together.
  stop_slurm || status=1
  stop_daemons "$term_wait_s" "$kill_wait_s" "slurmdbd:$dir/run/slurmdbd.pid" \
    "mariadbd:$acct/run/mariadbd.pid" || status=1
  for n in "${nodes[@]}"; do
    ip netns del "$n" 2>/dev/null || true
    # A namespace outlives its name while a process still runs in it, and
    # keeps its veth pair: delete the host end, which takes both.
    ip link del "$n-h" 2>/dev/null || true
    rm -rf "/etc/netns/$n"
  done
  ip link del "$bridge" 2>/dev/null || true
  return "$status"
}

# MariaDB and slurmdbd for accounting, when asked for (see above).
acct_up() {
  local db_port=$((acct_port + 1)) sock=$acct/run/mysql.sock
  mkdir -p "$acct/db" "$acct/run"
  chown mysql:mysql "$acct/db" "$acct/run"
  if [ ! -d "$acct/db/mysql" ]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$acct/db" \
      --auth-root-authentication-method=socket --skip-test-db \
      > "$dir/log/mariadb-install.log" 2>&1 ||
      die "mariadb-install-db failed (see $dir/log/mariadb-install.log)"
  fi
  if ! daemon_pid mariadbd "$acct/run/mariadbd.pid" >/dev/null; then
    mariadbd --no-defaults --user=mysql --datadir="$acct/db" \
      --socket="$sock" --port="$db_port" --bind-address=127.0.0.1 \
      --pid-file="$acct/run/mariadbd.pid" --log-error="$dir/log/mariadbd.log" \
      --skip-name-resolve --innodb-buffer-pool-size=16M \
      </dev/null >/dev/null 2>&1 &
  fi
  local deadline=$((SECONDS + idle_wait_s))
  until mariadb --no-defaults --socket="$sock" -u root -e "SELECT 1" \
          >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] ||
      die "mariadbd did not answer (see $dir/log/mariadbd.log)"
    sleep 0.2
  done
  mariadb --no-defaults --socket="$sock" -u root -e \
    "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'kiln';
     GRANT ALL ON \`${cluster}_acct\`.* TO 'slurm'@'127.0.0.1';" ||
    die "cannot make the slurm database user"
  # slurmdbd refuses a configuration others may read (it has a password).
  (umask 077 && cat > "$dir/slurmdbd.conf" <<EOF
# Written by scripts/slurm-2node.sh; edits are overwritten.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$acct_port
SlurmUser=root
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=kiln
StorageLoc=${cluster}_acct
EOF
  )
  if ! daemon_pid slurmdbd "$dir/run/slurmdbd.pid" >/dev/null; then
    # slurmdbd.conf is read from slurm.conf's directory.
    SLURM_CONF=$conf slurmdbd ||
      die "slurmdbd failed to start (see $dir/log/slurmdbd.log)"
  fi
  deadline=$((SECONDS + idle_wait_s))
  until SLURM_CONF=$conf sacctmgr -n list cluster >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] ||
      die "slurmdbd did not answer (see $dir/log/slurmdbd.log)"
    sleep 0.2
  done
  SLURM_CONF=$conf sacctmgr -n list cluster format=cluster -P |
    grep -qx "$cluster" ||
    SLURM_CONF=$conf sacctmgr -i add cluster "$cluster" >/dev/null ||
    die "sacctmgr could not add cluster $cluster"
}

# /etc/netns/NS/hosts for node number $1: both nodes by name, and this
# machine's hostname as that node's address.
write_hosts() {
  local i=$1 n=${nodes[$(($1 - 1))]} j
  mkdir -p "/etc/netns/$n"
  {
    echo "127.0.0.1 localhost"
    echo "$net.1$i $n $(hostname) $(hostname -s)"
    for j in 1 2; do
      [ "$j" -eq "$i" ] || echo "$net.1$j ${nodes[$((j - 1))]}"
    done
  } > "/etc/netns/$n/hosts.tmp"
  mv "/etc/netns/$n/hosts.tmp" "/etc/netns/$n/hosts"
}

up() {
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 ||
    die "munged is not running: run scripts/slurm-up.sh first"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/dev"
  chmod 0755 "$dir" "$dir/log"
  # Fake GPUs with the numbers of /dev/null (see scripts/slurm-up.sh):
  # nvidia0 whole or in shards, nvidia1 and nvidia2 MIG instances.
  local f
  for f in nvidia0 nvidia1 nvidia2; do
    if [ ! -c "$dir/dev/$f" ]; then
      rm -f "$dir/dev/$f"
      mknod "$dir/dev/$f" c 1 3
    fi
  done

  # The bridge, with the controller's address on the host side.
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$host_ip/24" dev "$bridge"
  fi
  ip link set "$bridge" up
  local i=0 n
  for n in "${nodes[@]}"; do
    i=$((i + 1))
    write_hosts "$i"
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

  local accounting="AccountingStorageType=accounting_storage/none"
  if [ -n "$acct_port" ]; then
    accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$acct_port
AccountingStorageTRES=gres/gpu,gres/shard"
  fi
  local new_conf
  new_conf=$(cat <<EOF
# Written by scripts/slurm-2node.sh; edits are overwritten.
ClusterName=$cluster
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
$accounting
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu,shard
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
# preempt_send_user_signal: a preempted job gets its --signal (kiln's
# checkpoint signal, to the batch shell) at once, not SIGTERM to its tasks.
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,preempt_send_user_signal
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
MinJobAge=2
KillWait=5
InactiveLimit=0
NodeName=${nodes[0]} NodeAddr=$net.11 CPUs=1 RealMemory=1024 Gres=gpu:h100:1,gpu:1g.10gb:2,shard:100 State=UNKNOWN
NodeName=${nodes[1]} NodeAddr=$net.12 CPUs=1 RealMemory=1024 Gres=gpu:h100:1,gpu:1g.10gb:2,shard:100 State=UNKNOWN
PartitionName=$prefix Nodes=${nodes[0]},${nodes[1]} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=$preempt_grace_s
PartitionName=$prefix-high Nodes=${nodes[0]},${nodes[1]} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
EOF
)
  local new_gres
  new_gres=$(cat <<EOF
Name=gpu Type=h100 File=$dir/dev/nvidia0
Name=gpu Type=1g.10gb File=$dir/dev/nvidia[1-2]
Name=shard Count=100 File=$dir/dev/nvidia0
EOF
)
  if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$new_conf" ] ||
     [ ! -f "$dir/gres.conf" ] || [ "$(cat "$dir/gres.conf")" != "$new_gres" ]; then
    printf '%s\n' "$new_conf" > "$conf"
    printf '%s\n' "$new_gres" > "$dir/gres.conf"
    stop_slurm
  fi
  [ -z "$acct_port" ] || acct_up
  daemon_pid slurmctld "$dir/run/slurmctld.pid" >/dev/null ||
    slurmctld -f "$conf" || die "slurmctld failed to start"
  for n in "${nodes[@]}"; do
    mkdir -p "$dir/spool/$n"
    daemon_pid slurmd "$dir/run/slurmd.$n.pid" >/dev/null ||
      nsenter --net="/run/netns/$n" unshare --mount --propagation slave \
        sh -c 'mount --bind "$1" /etc/hosts && exec slurmd -f "$2" -N "$3"' \
        sh "/etc/netns/$n/hosts" "$conf" "$n" ||
      die "slurmd $n failed to start (see $dir/log/slurmd.$n.log)"
  done

  export SLURM_CONF="$conf"
  local deadline=$((SECONDS + idle_wait_s)) states=""
  local idle="${nodes[0]}=idle ${nodes[1]}=idle "
  while [ $SECONDS -lt $deadline ]; do
    states=$(timeout 10 sinfo -h -N -o '%N=%T' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    case "$states" in
      "$idle") break ;;
      # A drain or down left in the saved state by an earlier run (a test
      # that failed a health check, a killed slurmd): this cluster is the
      # tests' own, so put its nodes back in service.
      *drain*|*down*)
        scontrol update nodename="${nodes[0]},${nodes[1]}" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  [ "$states" = "$idle" ] ||
    die "nodes are '${states:-unknown}' after ${idle_wait_s}s, not idle"
  log "nodes ${nodes[0]} and ${nodes[1]} are idle"
  echo "$conf"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
