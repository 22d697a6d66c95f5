# Sourced by the Slurm cluster scripts: finding and stopping the daemons
# they started by their pid files. The caller defines log().

# Prints the pid in pidfile if that process is alive and named name (pids
# are reused after a crash or a reboot).
daemon_pid() {
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
  for _ in $(seq $((limit * 20))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  ! kill -0 "$pid" 2>/dev/null
}

# stop_daemons TERM_WAIT KILL_WAIT NAME:PIDFILE...: SIGTERM to each daemon
# at once, then a wait for each of up to TERM_WAIT seconds, then SIGKILL
# and up to KILL_WAIT seconds more. A Slurm daemon takes a second or two
# to shut down, so stopping them together costs the slowest one's time
# rather than the sum. Fails if one is still alive.
stop_daemons() {
  local term_wait=$1 kill_wait=$2 spec name pid i status=0
  local pids=() names=()
  shift 2
  for spec in "$@"; do
    name=${spec%%:*}
    pid=$(daemon_pid "$name" "${spec#*:}") || { log "$name is not running"; continue; }
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
    names+=("$name")
  done
  for i in "${!pids[@]}"; do
    wait_gone "${pids[$i]}" "$term_wait" && continue
    log "${names[$i]} did not exit within ${term_wait}s: killing it"
    kill -KILL "${pids[$i]}" 2>/dev/null || true
    wait_gone "${pids[$i]}" "$kill_wait" && continue
    log "${names[$i]} (pid ${pids[$i]}) is still alive"
    status=1
  done
  return "$status"
}
