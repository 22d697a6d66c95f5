#!/usr/bin/env bash
# CI: install the built package on this machine and use kiln from the
# installed files only: from an empty directory, with a clean environment
# (no KILN_DATA_DIR, no path into the checkout), the units verified, a
# server started from /etc/kiln/server.yaml and a job run through it.
# Needs root. Usage: scripts/deb-smoke.sh build-deb/kiln_VERSION_ARCH.deb
set -euo pipefail

deb=$(realpath "$1")
examples=$(realpath "$(dirname "$0")/../examples")
work=$(mktemp -d /var/tmp/kiln-smoke.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" >/dev/null
getent passwd kiln-task >/dev/null || { echo "smoke: no kiln-task user" >&2; exit 1; }
[ -x /usr/libexec/kiln/kiln-shim ] || { echo "smoke: no /usr/libexec/kiln/kiln-shim" >&2; exit 1; }
[ "$(stat -c %a /var/lib/kiln)" = 700 ] || { echo "smoke: /var/lib/kiln is not 0700" >&2; exit 1; }

man_check=--man=yes
command -v man >/dev/null || man_check=--man=no
systemd-analyze verify "$man_check" /lib/systemd/system/kiln-server.service \
  /lib/systemd/system/kiln-gateway.service /lib/systemd/system/kiln-exporter.service

cp -r "$examples/serve" "$work/serve"
chmod 755 "$work"
cd "$work"
kiln() { env -i PATH=/usr/bin:/bin HOME="$work" KILN_HOME="$work/home" /usr/bin/kiln "$@"; }
kiln advise --phase infer --preset llama-3-8b >/dev/null
kiln validate serve/chat.yaml
kiln render serve/chat.yaml --executor kubernetes --image registry.example/serve:1 >/dev/null
kiln sim --help >/dev/null
man -w kiln-server >/dev/null 2>&1 || [ "$man_check" = --man=no ]

# Not through the function: $! must be the server itself (env execs it),
# not a subshell whose end would leave the server running.
env -i PATH=/usr/bin:/bin HOME="$work" KILN_HOME="$work/home" /usr/bin/kiln \
  server --config /etc/kiln/server.yaml --listen 127.0.0.1:0 \
  --gpus 1xH100-80GB --health-interval 0 >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  [ -s "$work/home/server.url" ] && break
  sleep 0.1
done
[ -s "$work/home/server.url" ] || { cat "$work/server.log" >&2; exit 1; }
printf 'kind: Job\nname: smoke\ncommand: [/bin/sh, -c, "echo smoke-ok"]\n' > job.yaml
id=$(kiln submit job.yaml --wait)
kiln logs "$id" | grep -q smoke-ok
echo "smoke: the installed package ran job $id"
