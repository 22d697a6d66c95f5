#!/usr/bin/env bash
# The demo behind `make demo`: a server on embedded defaults in a temporary
# KILN_HOME with two simulated GPU nodes in two zones; the hello job; the
# pipeline of examples/pipeline (prepare data, train the 2-task tiny GPT,
# evicted mid-run and resuming from its checkpoint, evaluate on held-out
# text, register and sign the version with lineage, roll the "chat"
# deployment to it); that version served with 2 replicas spread over the
# zones and called through `kiln gateway`
# with a key, a 429 and a fallback shown; a failing job that is retried;
# the listings; then a clean stop. Usage: scripts/demo.sh KILN_BIN
set -euo pipefail

kiln=${1:?usage: scripts/demo.sh PATH/TO/kiln}
root=$(cd "$(dirname "$0")/.." && pwd)
export KILN_HOME
KILN_HOME=$(mktemp -d /tmp/kiln-demo.XXXXXX)
# The examples run from a copy that the tasks' user (kiln-task when the
# server runs as root) can read, outside the home (hidden from tasks) and
# outside /tmp (private to each task): wherever this checkout lies.
ex=$(mktemp -d /var/tmp/kiln-demo-examples.XXXXXX)
chmod 0755 "$ex"
cp -r "$root/examples/hello" "$root/examples/pipeline" "$root/examples/train" \
  "$root/examples/serve" "$root/examples/retry" "$ex/"
unset KILN_SERVER KILN_TOKEN
server_pid=
gateway_pid=

stop() {
  for pid in "$gateway_pid" "$server_pid"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      wait "$pid" 2>/dev/null || true
    fi
  done
  # Tasks outlive a server by design; the demo's must not outlive it.
  pkill -KILL -f "shim --dir $KILN_HOME" 2>/dev/null || true
  rm -rf "$KILN_HOME" "$ex"
}
trap stop EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step "kiln model keygen --out release.pem   (the key the register step signs with, held by the server as the signer release; its public half trusted)"
"$kiln" model keygen --out "$KILN_HOME/release.pem" >/dev/null
mkdir -p "$KILN_HOME/keys/trusted"
cp "$KILN_HOME/release.pem.pub" "$KILN_HOME/keys/trusted/"
# The server reads server.yaml in its home: the signer the pipeline names.
printf 'signers:\n  - name: release\n    key-file: %s\n    roles: [admin]\n' \
  "$KILN_HOME/release.pem" > "$KILN_HOME/server.yaml"
chmod 0600 "$KILN_HOME/server.yaml"

step "kiln server --sim-node \"gpu-a 2xH100-80GB zone=zone-1\" --sim-node \"gpu-b 2xH100-80GB zone=zone-2\" --listen 127.0.0.1:0   (KILN_HOME=$KILN_HOME)"
"$kiln" server --sim-node "gpu-a 2xH100-80GB zone=zone-1" \
  --sim-node "gpu-b 2xH100-80GB zone=zone-2" --listen 127.0.0.1:0 \
  2>"$KILN_HOME/server.log" &
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
hello=$("$kiln" submit "$ex/hello/job.yaml" --wait)
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

# ---- the pipeline: prepare -> train (evicted once) -> evaluate -> register -> deploy ----
# chat is declared before any model exists: no replica, a model to come.
serve="$ex/serve"
sed -e "s|^model: job:1 .*|model: not-trained-yet|" -e "s/^replicas: 2$/replicas: 0/" \
    "$root/examples/serve/chat.yaml" > "$serve/chat.yaml"
step "kiln deploy chat.yaml   (no replica yet: the pipeline's deploy step gives it a model)"
"$kiln" deploy "$serve/chat.yaml"

step "kiln workflow run examples/pipeline/pipeline.yaml"
run=$("$kiln" workflow run "$ex/pipeline/pipeline.yaml")
echo "workflow run $run"
# Prints a field of run $1's JSON.
run_field() {
  "$kiln" workflow show "$1" -o json | /usr/bin/python3 -c \
    "import json,sys; w=json.load(sys.stdin)['workflow']; s={x['name']: x for x in w['steps']}; print($2)"
}
train_started() { [ "$(run_field "$run" "s['train']['job'] or ''")" != "" ]; }
wait_until 60 "the train step's job" train_started
gpt=$(run_field "$run" "s['train']['job']")
echo "train step: job $gpt (2 tasks, DDP over gloo, preemptible)"
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

run_done() { case "$(run_field "$run" "w['state']")" in succeeded|failed|cancelled) return 0;; esac; return 1; }
wait_until 600 "the pipeline to finish" run_done
step "kiln show $gpt"
"$kiln" show "$gpt"
step "kiln workflow show $run"
"$kiln" workflow show "$run"
step "kiln model lineage tiny-gpt@prod"
"$kiln" model lineage tiny-gpt@prod

# ---- serving the model the pipeline registered and deployed ----
# The fallback: one replica of the same version under another name.
sed -e "s/^name: chat$/name: chat-small/" -e "s/^replicas: 0$/replicas: 1/" \
    -e "s/^model: .*/model: tiny-gpt@prod/" \
    -e "/^fallback:/d" -e "/^spread:/d" "$serve/chat.yaml" > "$serve/chat-small.yaml"
step "kiln deploy chat-small.yaml; kiln scale chat 2   (chat: model tiny-gpt@1 from the pipeline, spread: zone, fallback: chat-small)"
"$kiln" deploy "$serve/chat-small.yaml"
"$kiln" scale chat 2
ready() { # ready NAME N: N replicas of NAME answer their readiness probe
  [ "$("$kiln" deployments "$1" -o json | /usr/bin/python3 -c \
    "import json,sys; d=json.load(sys.stdin)['deployment']; print(sum(r['ready'] for r in d['replicas']))")" = "$2" ]
}
wait_until 120 "2 ready replicas of chat" ready chat 2
wait_until 120 "1 ready replica of chat-small" ready chat-small 1
step "kiln deployments chat   (one replica per zone)"
"$kiln" deployments chat

step "kiln key create --name demo --deployments chat,chat-small; kiln key create --name tight --deployments chat --rpm 2"
key=$("$kiln" key create --name demo --deployments chat,chat-small)
tight=$("$kiln" key create --name tight --deployments chat --rpm 2)
echo "demo key: ${key:0:8}... (shown once; the server keeps its sha256)"

step "kiln gateway --listen 127.0.0.1:0 --refresh 500ms &"
"$kiln" gateway --listen 127.0.0.1:0 --refresh 500ms 2>"$KILN_HOME/gateway.log" &
gateway_pid=$!
wait_until 30 "the gateway" test -s "$KILN_HOME/gateway/gateway.url"
gw=$(cat "$KILN_HOME/gateway/gateway.url")
echo "gateway on $gw"
complete() { # complete KEY: one completion of "chat"; prints status and headers to $KILN_HOME/h
  curl -s -o "$KILN_HOME/body" -D "$KILN_HOME/h" -w '%{http_code}' "$gw/v1/completions" \
    -H "Authorization: Bearer $1" -H "Content-Type: application/json" \
    -d '{"model": "chat", "prompt": "The program ", "max_tokens": 48, "temperature": 0.8, "seed": 7}'
}
routed() { [ "$(complete "$key")" = 200 ]; }
wait_until 30 "the gateway to route chat" routed
step "curl \$gw/v1/completions -H 'Authorization: Bearer <demo key>' -d '{\"model\": \"chat\", \"prompt\": \"The program \", ...}'"
/usr/bin/python3 -c "import json; a=json.load(open('$KILN_HOME/body')); print(repr(a['choices'][0]['text'])); print('usage:', a['usage'])"
grep -i '^x-ratelimit\|^x-kiln' "$KILN_HOME/h" || true

step "three calls with the 'tight' key (--rpm 2)"
for i in 1 2 3; do
  code=$(complete "$tight")
  echo "call $i: HTTP $code $(grep -i '^retry-after' "$KILN_HOME/h" | tr -d '\r')"
done

step "kiln scale chat 0   (no replica of chat: its fallback answers)"
"$kiln" scale chat 0
fell_back() { complete "$key" >/dev/null; grep -qi '^x-kiln-fallback' "$KILN_HOME/h"; }
wait_until 60 "the fallback" fell_back
echo "HTTP 200 with $(grep -i '^x-kiln-fallback' "$KILN_HOME/h" | tr -d '\r')"
"$kiln" scale chat 2

step "kiln undeploy chat; kiln undeploy chat-small"
"$kiln" undeploy chat
"$kiln" undeploy chat-small
kill -TERM "$gateway_pid"
wait "$gateway_pid" || true
gateway_pid=

step "kiln submit examples/retry/job.yaml --wait   (fails on purpose; retried twice)"
set +e
failing=$("$kiln" submit "$ex/retry/job.yaml" --wait)
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
