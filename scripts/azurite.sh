#!/usr/bin/env bash
# Azurite (the Azure Storage emulator, from npm) for kiln's Blob tests.
#
#   azurite.sh install          install once into the cache directory
#   azurite.sh start STATE_DIR  start the blob service on a free loopback
#                               port; prints its endpoint
#                               (http://127.0.0.1:PORT/devstoreaccount1);
#                               STATE_DIR receives azurite.pid and azurite.log
#   azurite.sh stop STATE_DIR   stop the one started there
#
# The cache directory is $KILN_AZURITE_DIR, else /var/cache/kiln-azurite when
# it exists or can be created, else build/azurite in the repository (ignored
# by git). Azurite runs in memory, on 127.0.0.1 only, telemetry off.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)

cache_dir() {
  if [ -n "${KILN_AZURITE_DIR:-}" ]; then
    echo "$KILN_AZURITE_DIR"
  elif mkdir -p /var/cache/kiln-azurite 2>/dev/null && [ -w /var/cache/kiln-azurite ]; then
    echo /var/cache/kiln-azurite
  else
    echo "$repo/build/azurite"
  fi
}

install() {
  local dir
  dir=$(cache_dir)
  mkdir -p "$dir"
  # Test workers running at once may all start Azurite: one installs it,
  # the others wait for it.
  {
    flock 9
    [ -x "$dir/node_modules/.bin/azurite-blob" ] || install_into "$dir"
  } 9>"$dir/.install.lock"
  echo "$dir"
}

install_into() {
  local dir=$1
  if ! command -v npm >/dev/null; then
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >&2
  fi
  # npm 11 refuses --prefix into a folder without a package.json.
  [ -f "$dir/package.json" ] || echo '{"name":"kiln-azurite","private":true}' >"$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error azurite >&2
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start() {
  local state=$1 dir port pid deadline
  dir=$(install)
  mkdir -p "$state"
  port=$(free_port)
  setsid "$dir/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" \
    --inMemoryPersistence --skipApiVersionCheck --loose --disableTelemetry \
    >"$state/azurite.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$state/azurite.pid"
  # Startup takes 2-12 s on a loaded 2-core machine; give it a minute.
  deadline=$((SECONDS + 60))
  until curl -s -o /dev/null "http://127.0.0.1:$port/devstoreaccount1?comp=list"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "azurite.sh: azurite exited; log:" >&2
      cat "$state/azurite.log" >&2
      exit 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "azurite.sh: no answer on port $port after 60 s" >&2
      kill "$pid" 2>/dev/null || true
      exit 1
    fi
    sleep 0.2
  done
  echo "http://127.0.0.1:$port/devstoreaccount1"
}

stop() {
  local state=$1 pid
  [ -f "$state/azurite.pid" ] || return 0
  pid=$(cat "$state/azurite.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$state/azurite.pid"
}

case "${1:-}" in
  install) install ;;
  start) [ $# -eq 2 ] || { echo "usage: $0 start STATE_DIR" >&2; exit 2; }; start "$2" ;;
  stop) [ $# -eq 2 ] || { echo "usage: $0 stop STATE_DIR" >&2; exit 2; }; stop "$2" ;;
  *) echo "usage: $0 install | start STATE_DIR | stop STATE_DIR" >&2; exit 2 ;;
esac
