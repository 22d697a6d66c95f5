#!/usr/bin/env bash
# Installs every Debian package kiln needs to build, test and run its demo.
# Idempotent: packages already present are skipped, and apt-get update runs
# only when something is missing. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential meson ninja-build pkg-config clang
  libevent-dev libjansson-dev libfyaml-dev libsqlite3-dev libssl-dev
  libcurl4-openssl-dev libcmocka-dev
  python3 python3-pytest python3-requests
  sqlite3 procps
  gnuplot-nox
  prometheus
  python3-torch
  libopenmpi-dev openmpi-bin
  wrk nginx
  iproute2
  # tests/e2e/test_kube.py: PyYAML reads rendered manifests back; the
  # openssl tool makes the replayed API server's certificate
  python3-yaml openssl
  # running: useradd makes the task user below; tests/e2e/test_isolation.py
  # starts an unprivileged server with setpriv (util-linux)
  passwd util-linux
  # tests/e2e/test_gateway_framing.py: an independent HTTP/1.1 parser to
  # compare the gateway's framing with
  python3-h11
  # tests/e2e/test_openapi.py and the contract check: JSON Schema 2020-12;
  # tests/e2e/test_python_client.py type-checks python/kiln with mypy
  # (typeshed has the stubs of requests) and installs it with pip
  python3-jsonschema python3-mypy python3-typeshed python3-pip
  python3-setuptools
  # benchmarks (bench/sim/bound.py): glpsol solves the packing bound's
  # linear program
  glpk-utils
)

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi

# Running: tasks of a server started as root run as this user
# (docs/security.md). No home, no login shell, no password.
ensure_task_user() {
  if ! getent passwd kiln-task >/dev/null; then
    echo "install-deps: creating the task user kiln-task"
    $sudo useradd --system --no-create-home --shell /usr/sbin/nologin kiln-task
  fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  ensure_task_user
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
ensure_task_user
