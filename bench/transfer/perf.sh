#!/bin/bash
# Where the CPU goes in a transfer of one 1 GiB file: a push by
# descriptor (the server profiled), a pull, cp + sync, and against a
# fresh Azurite a kiln ckpt upload and restore and a curl GET; wall and
# CPU seconds from /usr/bin/time, profiles from `perf record` of the kiln
# processes, Azurite's own CPU from /proc. Needs perf (root or
# perf_event_paranoid <= 1). Usage: bench/transfer/perf.sh [KILN]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
K=$(realpath "${1:-$ROOT/build/src/cmd/kiln}")
W=$(mktemp -d /var/tmp/kiln-perf-XXXXXX)
SPID=
cleanup() {
	[ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" || true
	[ -f "$W/az/azurite.pid" ] && bash "$ROOT/scripts/azurite.sh" stop "$W/az" >/dev/null 2>&1 || true
	rm -rf "$W"
}
trap cleanup EXIT
cd "$W"
mkdir -p set home az
head -c $((1024 * 1024 * 1024)) /dev/urandom >set/part.bin
sync
export KILN_HOME=$W/home
T="/usr/bin/time -f %e_s_wall_%U_s_user_%S_s_sys"
"$K" server --listen 127.0.0.1:0 --gpus 1xH100-80GB \
	--upload-max-staged 64Gi >/dev/null 2>home/server.log &
SPID=$!
while [ ! -f home/server.url ]; do sleep 0.1; done
"$K" model keygen --out "$W/key" >/dev/null
mkdir -p home/keys/trusted && cp "$W/key.pub" home/keys/trusted/
echo "== push by descriptor (the server profiled)"
perf record -q -F 499 -g -p "$SPID" -o perf-push.data 2>/dev/null &
PP=$!
sleep 0.5
XDG_CACHE_HOME=$W/cache $T "$K" model push set --name m -o json 2>&1 | tail -1
kill -INT "$PP"; wait "$PP" || true
"$K" model sign m@1 --key "$W/key" >/dev/null
echo "== pull"
perf record -q -F 499 -g -o perf-pull.data -- $T "$K" model pull m@1 pulled
sync
echo "== cp + sync"
$T sh -c "cp -r set cp && sync -f cp"
EP=$(bash "$ROOT/scripts/azurite.sh" start "$W/az" | tail -1)
export AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=$EP;"
"$K" blob put "$EP/bench" warm /etc/hostname >/dev/null
echo "== kiln ckpt upload (Azurite)"
perf record -q -F 499 -g -o perf-up.data -- $T "$K" ckpt upload "$EP/bench" 1 set
echo "== kiln ckpt restore (Azurite)"
perf record -q -F 499 -g -o perf-down.data -- $T "$K" ckpt restore "$EP/bench" 1 out
SAS=$(cd "$ROOT/bench/ckpt" && /usr/bin/python3 -c 'import run; print(run.sas("bench"))')
echo "== curl -o (Azurite)"
$T curl -sS --fail -H "x-ms-version: 2023-11-03" \
	"$EP/bench/1/checkpoints/set/part.bin?$SAS" -o "$W/curl.out"
echo "== Azurite's CPU seconds (user, system) for all of the above"
awk -v hz="$(getconf CLK_TCK)" '{print $14 / hz, $15 / hz}' \
	"/proc/$(cat "$W/az/azurite.pid")/stat"
for d in push pull up down; do
	echo "== $d: samples at 499 Hz, by library, top symbols"
	perf report -i "perf-$d.data" --stdio -n --no-children --sort dso -g none 2>/dev/null |
		grep -E "^# Samples|^ +[0-9]" | head -6
	perf report -i "perf-$d.data" --stdio --no-children --sort sym -g none 2>/dev/null |
		grep -E "^ +[0-9]" | head -6
done
