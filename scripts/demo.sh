#!/usr/bin/env bash
# The demo behind `make demo`: a server on embedded defaults in a temporary
# KILN_HOME with simulated GPUs; the hello job; the 2-task tiny GPT,
# evicted mid-run, resuming from its checkpoint and finishing (its attempts
# and goodput shown); a failing job that is retried; the listings; then a
# clean stop. Usage: scripts/demo.sh KILN_BIN
set -euo pipefail

kiln=${1:?usage: scripts/demo.sh PATH/TO/kiln}
root=$(cd "$(dirname "$0")/.." && pwd)
export KILN_HOME
KILN_HOME=$(mktemp -d /tmp/kiln-demo.XXXXXX)
unset KILN_SERVER KILN_TOKEN
server_pid=

stop() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$KILN_HOME"
}
trap stop EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step "kiln server --gpus 4xH100-80GB --listen 127.0.0.1:0   (KILN_HOME=$KILN_HOME)"
"$kiln" server --gpus 4xH100-80GB --listen 127.0.0.1:0 2>"$KILN_HOME/server.log" &
server_pid=$!
for _ in $(seq 1 100); do
  [ -s "$KILN_HOME/server.url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$KILN_HOME/server.log"; exit 1; }
  sleep 0.1
done
[ -s "$KILN_HOME/server.url" ] || { echo "server did not start"; cat "$KILN_HOME/server.log"; exit 1; }
echo "listening on $(cat "$KILN_HOME/server.url")"

step "kiln nodes"
"$kiln" nodes

step "kiln submit examples/hello/job.yaml --wait"
hello=$("$kiln" submit "$root/examples/hello/job.yaml" --wait)
echo "job $hello"
for rank in 0 1; do
  step "kiln logs $hello --task $rank"
  "$kiln" logs "$hello" --task "$rank"
done

# Prints a field of job $1's JSON (python3 reads it; jq is not assumed).
job_field() {
  "$kiln" show "$1" -o json | /usr/bin/python3 -c \
    "import json,sys; j=json.load(sys.stdin)['job']; print($2)"
}

wait_until() { # wait_until SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 $((limit * 10))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for $what"; return 1
}

step "kiln submit examples/train/tiny-gpt.yaml   (2 tasks, DDP over gloo, preemptible)"
gpt=$("$kiln" submit "$root/examples/train/tiny-gpt.yaml")
echo "job $gpt"
synced() { ls "$KILN_HOME"/blobs/"$gpt"/checkpoints/*/MANIFEST.json; }
wait_until 300 "a first checkpoint in the store" synced
echo "checkpoints in the store: $(ls "$KILN_HOME/blobs/$gpt/checkpoints" | tr '\n' ' ')"

step "kiln evict $gpt   (as a spot eviction would)"
"$kiln" evict "$gpt"
resumed() { [ "$(job_field "$gpt" "j['attempts']")" = 2 ] && [ "$(job_field "$gpt" "j['state']")" = running ]; }
wait_until 120 "the job to resume" resumed
step "kiln logs $gpt --task 0 | head -3   (attempt 2)"
sleep 2
"$kiln" logs "$gpt" --task 0 | head -3

done_state() { case "$(job_field "$gpt" "j['state']")" in succeeded|failed|cancelled) return 0;; esac; return 1; }
wait_until 600 "the training to finish" done_state
step "kiln show $gpt"
"$kiln" show "$gpt"

step "kiln submit examples/retry/job.yaml --wait   (fails on purpose; retried twice)"
set +e
failing=$("$kiln" submit "$root/examples/retry/job.yaml" --wait)
status=$?
set -e
echo "job $failing: exit status $status (4 = the job failed)"

step "kiln ls"
"$kiln" ls

step "kiln show $failing"
"$kiln" show "$failing"

step "kiln audit"
"$kiln" audit

step "stopping the server"
kill -TERM "$server_pid"
wait "$server_pid" || true
server_pid=
echo "done"
