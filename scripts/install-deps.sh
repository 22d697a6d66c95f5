#!/usr/bin/env bash
# Installs the Debian packages kiln needs for one purpose:
#
#   install-deps.sh run     what the kiln binary links (the .deb's Depends)
#                           and the task user a root server runs tasks as
#   install-deps.sh build   compilers, Meson and the -dev packages
#   install-deps.sh test    build, plus what the unit and end-to-end tests
#                           drive (pytest, PyTorch, nginx, Prometheus,
#                           GLPK, ...)
#   install-deps.sh demo    build, plus what `make demo` runs (PyTorch)
#   install-deps.sh bench   build, plus the benchmarks' tools (wrk, nginx,
#                           Open MPI, GLPK, gnuplot)
#   install-deps.sh deb     build, plus what builds and checks the package
#   install-deps.sh fuzz    build, plus clang for the libFuzzer harnesses
#
# Several may be given; none means build. Idempotent: packages already
# present are skipped, and apt-get update runs only when something is
# missing. Needs root (or sudo).
set -euo pipefail

# The shared libraries the binary links; keep in step with debian/control.
run_packages=(
  libevent-2.1-7 libevent-pthreads-2.1-7 libevent-openssl-2.1-7 libjansson4 libfyaml0
  libsqlite3-0 libssl3 libcurl4
  # useradd makes the task user below
  passwd
)

build_packages=(
  build-essential meson ninja-build pkg-config
  libevent-dev libjansson-dev libfyaml-dev libsqlite3-dev libssl-dev
  libcurl4-openssl-dev libcmocka-dev
  passwd
)

test_packages=(
  python3 python3-pytest python3-requests
  # `make e2e E2E_WORKERS=2` runs the end-to-end tests on two workers
  python3-pytest-xdist
  sqlite3 procps iproute2
  # tests/e2e/test_kube.py: PyYAML reads rendered manifests back; the
  # openssl tool makes the replayed API server's certificate
  python3-yaml openssl
  # tests/e2e/test_isolation.py starts an unprivileged server with setpriv
  # and traces a shim's file system calls with strace
  util-linux strace
  # tests/e2e/test_gateway_framing.py: an independent HTTP/1.1 parser and
  # a reference proxy to compare the gateway's framing with
  python3-h11 nginx
  # tests/e2e/test_sim.py draws its figure; tests/e2e/test_sim_bound.py
  # solves the packing bound's linear program with glpsol
  gnuplot-nox glpk-utils
  # tests/e2e/test_exporter.py checks the exposition with promtool;
  # tests/e2e/test_dashboards.py runs prometheus against kiln and
  # promtool on the rules
  prometheus
  # tests/e2e/test_train_example.py and test_slurm.py train a model
  python3-torch
  # tests/e2e/test_bench.py runs the collective benchmark under mpirun
  libopenmpi-dev openmpi-bin
  # tests/e2e/test_install.py checks the units and the package
  systemd dpkg-dev
  # tests/e2e/test_openapi.py and the contract check: JSON Schema 2020-12;
  # tests/e2e/test_python_client.py type-checks python/kiln with mypy
  # (typeshed has the stubs of requests) and installs it with pip
  python3-jsonschema python3-mypy python3-typeshed python3-pip
  python3-setuptools
  # tests/e2e/conftest.py preloads libeatmydata into what the tests start
  libeatmydata1
  # tests/e2e/test_console.py drives the web console in a headless browser
  chromium chromium-driver python3-selenium
  # tests/e2e/test_slurm*.py: a real Slurm (scripts/slurm-up.sh and
  # slurm-2node.sh), whose accounting test runs slurmdbd on a MariaDB of
  # its own; ip(8) and nsenter/unshare make the two-node cluster
  slurm-wlm munge slurmdbd mariadb-server mariadb-client iproute2
)

demo_packages=(
  python3 python3-yaml python3-requests python3-torch
)

bench_packages=(
  python3 python3-requests
  wrk nginx
  libopenmpi-dev openmpi-bin
  # bench/sim/bound.py: glpsol solves the packing bound's linear program
  glpk-utils gnuplot-nox
  openssl
  # scripts/fresh-install-time.sh: a fresh Debian 12 root from the mirror
  mmdebstrap
)

deb_packages=(
  debhelper dpkg-dev fakeroot
  # systemd-analyze verifies the units
  systemd
)

fuzz_packages=(clang)

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

want=()
for purpose in "${@:-build}"; do
  case "$purpose" in
    run) want+=("${run_packages[@]}") ;;
    build) want+=("${build_packages[@]}") ;;
    test) want+=("${build_packages[@]}" "${test_packages[@]}") ;;
    demo) want+=("${build_packages[@]}" "${demo_packages[@]}") ;;
    bench) want+=("${build_packages[@]}" "${bench_packages[@]}") ;;
    deb) want+=("${build_packages[@]}" "${deb_packages[@]}") ;;
    fuzz) want+=("${build_packages[@]}" "${fuzz_packages[@]}") ;;
    *)
      echo "install-deps: unknown purpose '$purpose' (run, build, test, demo, bench, deb or fuzz)" >&2
      exit 2
      ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    case " ${missing[*]-} " in
      *" $p "*) ;;
      *) missing+=("$p") ;;
    esac
  fi
done

if [ ${#missing[@]} -ne 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
ensure_task_user
