#!/usr/bin/env bash
# Brings up a single-node Slurm cluster on loopback for kiln's Slurm tests and
# for the Slurm side of bench/dispatch (the peer kiln is measured against).
#
# Everything Slurm writes lives under one state directory ($KILN_SLURM_DIR,
# default /var/lib/kiln-slurm): slurm.conf, gres.conf, fake GPU device nodes,
# controller state, slurmd spool, logs and pid files. Nothing under /etc/slurm
# is touched and nothing is exported; the last line printed is the path of the
# slurm.conf, so a caller does:  export SLURM_CONF=$(scripts/slurm-up.sh | tail -1)
#
# Idempotent: packages are installed only when missing, the munge key is made
# only when absent, daemons already running are left alone. If the generated
# slurm.conf differs from the one the running daemons read, they are
# restarted so that the cluster always matches this script.
#
# The configuration is the fastest one measured on these machines for many
# short jobs (see /work/shared/notes/environment.md and bench/slurm/README.md):
# 64 advertised CPUs, batch_sched_delay=0, no accounting database, no cgroups.
# Needs root.
set -euo pipefail

dir=${KILN_SLURM_DIR:-/var/lib/kiln-slurm}
# Another cluster beside the default one (its own state directory, ports
# and name) lets two test runs use Slurm at the same time.
cluster=${KILN_SLURM_CLUSTER:-kiln}
# Lines added to slurm.conf (a HealthCheckProgram, say), and words added to
# the node's line (Feature=...).
extra_conf=${KILN_SLURM_EXTRA_CONF:-}
node_extra=${KILN_SLURM_NODE_EXTRA:-}
ctld_port=${KILN_SLURM_CTLD_PORT:-6817}
slurmd_port=${KILN_SLURM_SLURMD_PORT:-6818}
# Seconds a job credential stays valid; also how long a requeued job waits
# before it may start again (Slurm's default is 120). Short keeps requeue
# tests fast, yet long enough for a launch on a busy two-core machine.
cred_expire=${KILN_SLURM_CRED_EXPIRE:-30}
# Bounded waits, in seconds.
idle_wait_s=60
munge_wait_s=10

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
conf="$dir/slurm.conf"

log() { echo "slurm-up: $*" >&2; }
die() { log "$*"; exit 1; }
. "$here/daemons.sh"

if [ "$(id -u)" -ne 0 ]; then
  die "must run as root (slurmctld and slurmd run as root here)"
fi

# --- packages -------------------------------------------------------------

missing=()
for p in slurm-wlm munge; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    missing+=("$p")
  fi
done
munge_alive() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
# Whether munged was up before this script did anything (the package's own
# init script may start it during installation): decides who owns it.
munge_was_running=0
if [ ${#missing[@]} -eq 0 ] && munge_alive; then
  munge_was_running=1
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# --- munge ----------------------------------------------------------------

# Directories the init system would normally create (tmpfiles for /run).
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating /etc/munge/munge.key"
  mungekey --create --keyfile=/etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

mkdir -p "$dir"
if ! munge_alive; then
  log "starting munged"
  runuser -u munge -- munged
  for _ in $(seq $((munge_wait_s * 10))); do
    munge_alive && break
    sleep 0.1
  done
  munge_alive || die "munged did not answer within ${munge_wait_s}s"
fi
if [ "$munge_was_running" -eq 0 ]; then
  # slurm-down.sh stops munged only when this marker names it: a marker
  # left from a munged since restarted by someone else names another pid.
  daemon_pid munged /run/munge/munged.pid > "$dir/munged.ours" ||
    rm -f "$dir/munged.ours"
fi

# --- configuration --------------------------------------------------------

node=$(hostname -s)
mem_kib=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
real_memory=$((mem_kib * 9 / 10 / 1024))

mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/dev"
chmod 0755 "$dir" "$dir/log"
# Fake GPUs: Slurm requires character devices for gres File=; these have the
# numbers of /dev/null, so opening one is harmless.
for i in 0 1 2 3 4 5 6 7; do
  f="$dir/dev/nvidia$i"
  if [ ! -c "$f" ]; then
    rm -f "$f"
    mknod "$f" c 1 3
  fi
done

new_conf=$(cat <<EOF
# Written by scripts/slurm-up.sh; edits are overwritten.
ClusterName=$cluster
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=$cred_expire
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in the sandbox: track processes through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd: completion records go to a text file instead.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SelectType=select/cons_tres
# Schedule CPUs only; with memory as a resource a job without --mem would
# take the whole node and jobs would run one at a time.
SelectTypeParameters=CR_CPU
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
# Lets the node advertise the 64 CPUs below on a two-core machine.
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
# Launch batch jobs as soon as they are scheduled, and let the main scheduler
# run on every event (the high-throughput settings from Slurm's guide).
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000
# Forget finished jobs quickly (2 s is the smallest value Slurm recommends),
# and hold enough records for large benchmark runs and job arrays.
MinJobAge=2
MaxJobCount=100000
MaxArraySize=100001
KillWait=5
InactiveLimit=0
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=64 Sockets=1 CoresPerSocket=64 ThreadsPerCore=1 RealMemory=$real_memory Gres=gpu:8 State=UNKNOWN${node_extra:+ $node_extra}
PartitionName=kiln Nodes=$node Default=YES MaxTime=INFINITE State=UP
$extra_conf
EOF
)
new_gres="Name=gpu File=$dir/dev/nvidia[0-7]"

changed=0
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$new_conf" ]; then
  printf '%s\n' "$new_conf" > "$conf.tmp"
  mv "$conf.tmp" "$conf"
  changed=1
fi
if [ ! -f "$dir/gres.conf" ] || [ "$(cat "$dir/gres.conf")" != "$new_gres" ]; then
  printf '%s\n' "$new_gres" > "$dir/gres.conf.tmp"
  mv "$dir/gres.conf.tmp" "$dir/gres.conf"
  changed=1
fi

# --- daemons --------------------------------------------------------------

if [ "$changed" -eq 1 ] && { daemon_pid slurmctld "$dir/run/slurmctld.pid" >/dev/null ||
                             daemon_pid slurmd "$dir/run/slurmd.pid" >/dev/null; }; then
  log "configuration changed: restarting slurmctld and slurmd"
  "$here/slurm-down.sh" --keep-munge >&2
fi

tail_logs() {
  local f
  for f in "$dir/log/slurmctld.log" "$dir/log/slurmd.log"; do
    [ -f "$f" ] || continue
    log "--- last lines of $f"
    tail -n 20 "$f" >&2
  done
}

if ! daemon_pid slurmctld "$dir/run/slurmctld.pid" >/dev/null; then
  log "starting slurmctld"
  slurmctld -f "$conf" || { tail_logs; die "slurmctld failed to start"; }
fi
if ! daemon_pid slurmd "$dir/run/slurmd.pid" >/dev/null; then
  log "starting slurmd"
  slurmd -f "$conf" || { tail_logs; die "slurmd failed to start"; }
fi

# Wait until the node is schedulable. A node left down or drained by an
# earlier run is resumed once.
export SLURM_CONF="$conf"
resumed=0
deadline=$((SECONDS + idle_wait_s))
state=""
while [ $SECONDS -lt $deadline ]; do
  state=$(timeout 10 sinfo -h -N -n "$node" -o '%T' 2>/dev/null | head -n 1 || true)
  case "$state" in
    idle|mixed|allocated|completing) break ;;
    down*|drain*|fail*)
      if [ "$resumed" -eq 0 ]; then
        log "node is $state: resuming it"
        timeout 10 scontrol update NodeName="$node" State=RESUME >&2 || true
        resumed=1
      fi ;;
  esac
  sleep 0.5
done
case "$state" in
  idle|mixed|allocated|completing) ;;
  *) tail_logs; die "node $node is '${state:-unknown}' after ${idle_wait_s}s, not idle" ;;
esac

log "node $node is $state ($(sinfo -V))"
echo "$conf"
