#!/usr/bin/env bash
# Stops the single-node Slurm cluster that scripts/slurm-up.sh started:
# slurmd and slurmctld together, then munged, but munged only when
# slurm-up.sh started it (the marker munged.ours in the state directory
# holds its pid).
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

. "$(dirname "${BASH_SOURCE[0]}")/daemons.sh"

status=0
stop_daemons "$term_wait_s" "$kill_wait_s" "slurmd:$dir/run/slurmd.pid" \
  "slurmctld:$dir/run/slurmctld.pid" || status=1
munged=$(daemon_pid munged /run/munge/munged.pid) || munged=""
if [ "$keep_munge" -eq 0 ] && [ -n "$munged" ] &&
   [ "$(cat "$dir/munged.ours" 2>/dev/null)" = "$munged" ]; then
  stop_daemons "$term_wait_s" "$kill_wait_s" munged:/run/munge/munged.pid ||
    status=1
fi
[ -n "$munged" ] && kill -0 "$munged" 2>/dev/null || rm -f "$dir/munged.ours"
exit "$status"
