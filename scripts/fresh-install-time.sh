#!/usr/bin/env bash
# How long a fresh Debian 12 machine takes to run its first kiln job from
# the package: a minimal bookworm root made from Debian's mirror
# (mmdebstrap, else debootstrap), then in it, timed step by step:
#   apt     apt-get install of the .deb, its Depends fetched from the mirror
#   start   kiln server started from /etc/kiln/server.yaml as the unit
#           starts it (no systemd in a chroot: run directly, as root, the
#           state in /var/lib/kiln), until it has written server.url
#   job     kiln submit --wait of a one-line job, then its logs read
# Each run starts from a new root, so nothing is cached between runs.
# Prints each run's seconds and the mean and standard deviation of each
# step, and of apt + start + job (the package file at hand to a first
# job; making the root, "bootstrap", is shown apart: a rented VM comes
# with it).
#
# Needs root, Debian's mirror, and mmdebstrap or debootstrap
# (scripts/install-deps.sh bench). Not part of `make test`.
# Usage: scripts/fresh-install-time.sh [DEB] [RUNS]
#        (default build-deb/kiln_*_amd64.deb, made by `make deb`; 3 runs)
set -euo pipefail
cd "$(dirname "$0")/.."

built=(build-deb/kiln_*_amd64.deb)
deb=${1:-${built[0]}}
runs=${2:-3}
mirror=${KILN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ ! -f "$deb" ]; then
  echo "fresh-install-time: no package; run make deb or give DEB" >&2
  exit 2
fi
[ "$(id -u)" -eq 0 ] || { echo "fresh-install-time: needs root" >&2; exit 2; }
if command -v mmdebstrap >/dev/null; then
  bootstrap() { mmdebstrap --quiet --variant=minbase bookworm "$1" "$mirror"; }
elif command -v debootstrap >/dev/null; then
  bootstrap() { debootstrap --variant=minbase bookworm "$1" "$mirror" >/dev/null; }
else
  echo "fresh-install-time: needs mmdebstrap or debootstrap" \
    "(scripts/install-deps.sh bench)" >&2
  exit 2
fi
deb=$(realpath "$deb")

root=""
cleanup() {
  if [ -n "$root" ]; then
    # The server (and any task) runs under the private mount namespace
    # below and is ended there; what is left is the directory.
    rm -rf --one-file-system "$root"
  fi
}
trap cleanup EXIT

now() { date +%s.%N; }

# One run: sets result to the step times in seconds, "bootstrap apt start
# job".
one_run() {
  local t0 t1 steps a b c d
  root=$(mktemp -d /var/tmp/kiln-fresh.XXXXXX)
  t0=$(now)
  bootstrap "$root" >&2
  t1=$(now)
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  cp "$deb" "$root/tmp/kiln.deb"
  # Mounts made in a private namespace go away with it; the server is
  # ended when the inside script ends, however it ends.
  unshare --mount --propagation private bash -s "$root" >"$root.log" 2>&1 <<'INSIDE' || { cat "$root.log" >&2; rm -f "$root.log"; return 1; }
set -euo pipefail
root=$1
server=""
trap '[ -z "$server" ] || { kill "$server"; wait "$server"; } || true' EXIT
# A machine's root is a mount point, which the task sandbox makes
# private; a bootstrapped directory is not one until bound onto itself.
mount --bind "$root" "$root"
for fs in proc sys dev; do mount --rbind "/$fs" "$root/$fs"; done
mount -t tmpfs tmpfs "$root/run"
now() { date +%s.%N; }
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root KILN_HOME=/var/lib/kiln "$@"; }
a=$(now)
in_root sh -c 'apt-get update -qq &&
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends /tmp/kiln.deb' >/dev/null
b=$(now)
# A simple command, not in_root: chroot and env exec in turn, so $! is
# the server itself and the trap above ends it (a function run in the
# background is a subshell whose kill leaves the server running).
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  KILN_HOME=/var/lib/kiln kiln server --config /etc/kiln/server.yaml \
  --listen 127.0.0.1:0 --gpus 1xH100-80GB --health-interval 0 \
  >"$root/tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 600); do
  [ -s "$root/var/lib/kiln/server.url" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.05
done
[ -s "$root/var/lib/kiln/server.url" ] || { cat "$root/tmp/server.log"; exit 1; }
c=$(now)
printf 'kind: Job\nname: first\ncommand: [/bin/sh, -c, "echo first-job-ok"]\n' \
  >"$root/tmp/job.yaml"
id=$(in_root kiln submit /tmp/job.yaml --wait)
in_root kiln logs "$id" | grep -q first-job-ok
d=$(now)
echo "STEPS $a $b $c $d"
INSIDE
  steps=$(grep '^STEPS' "$root.log")
  rm -f "$root.log"
  read -r _ a b c d <<<"$steps"
  cleanup
  root=""
  result=$(awk -v t0="$t0" -v t1="$t1" -v a="$a" -v b="$b" -v c="$c" \
    -v d="$d" 'BEGIN { printf "%.2f %.2f %.2f %.2f", t1 - t0, b - a,
                       c - b, d - c }')
}

results=()
for i in $(seq "$runs"); do
  one_run
  results+=("$result")
  read -r boot apt start job <<<"$result"
  echo "run $i: bootstrap ${boot}s apt ${apt}s start ${start}s job ${job}s" \
    "(package to first job $(awk -v a="$apt" -v s="$start" -v j="$job" \
    'BEGIN { printf "%.2f", a + s + j }')s)"
done
printf '%s\n' "${results[@]}" | awk '
  { for (k = 1; k <= 4; k++) { s[k] += $k; q[k] += $k * $k }
    t = $2 + $3 + $4; s[5] += t; q[5] += t * t; n++ }
  END {
    split("bootstrap apt start job package-to-first-job", name, " ")
    for (k = 1; k <= 5; k++) {
      m = s[k] / n
      v = n > 1 ? (q[k] - n * m * m) / (n - 1) : 0
      printf "%-22s mean %7.2f s  sd %6.2f s  (%d runs)\n", name[k], m,
        sqrt(v > 0 ? v : 0), n
    }
  }'
