#!/usr/bin/env bash
# For a machine with an NVIDIA GPU and driver: NVML inventory, one exporter
# scrape checked by promtool, health, health --perf (memory bandwidth and
# GEMM through CUDA and cuBLAS, which must be installed), and tune in
# dry-run. Prints what it
# sees; record the output in docs/telemetry.md. UNTESTED: no GPU machine
# was available when this was written.
#
#   tests/gpu/run.sh [path/to/kiln]
set -uo pipefail
KILN=${1:-build/src/cmd/kiln}
tmp=$(mktemp -d)
trap 'kill "$exp_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

echo "== nvidia-smi"
nvidia-smi --query-gpu=index,name,uuid,memory.total,clocks.applications.graphics,clocks.max.sm --format=csv || true

echo "== kiln exporter: one scrape"
"$KILN" exporter --listen 127.0.0.1:0 2>"$tmp/exporter.log" &
exp_pid=$!
for _ in $(seq 100); do
  port=$(grep -o '127.0.0.1:[0-9]*/metrics' "$tmp/exporter.log" | cut -d: -f2 | cut -d/ -f1)
  [ -n "$port" ] && break
  sleep 0.1
done
cat "$tmp/exporter.log"
curl -s "http://127.0.0.1:$port/metrics" >"$tmp/metrics.txt"
grep -E '^DCGM_FI_DEV_(GPU_UTIL|FB_USED|GPU_TEMP|POWER_USAGE|SM_CLOCK|PCIE_LINK_WIDTH|XID_ERRORS)\{' "$tmp/metrics.txt"
grep -c '^DCGM_FI_DEV_NVLINK_LINK_STATUS{' "$tmp/metrics.txt" | sed 's/^/NVLink series: /'
if command -v promtool >/dev/null; then
  promtool check metrics <"$tmp/metrics.txt" 2>&1 | grep -v -E "snake_case|_total\" suffix" || true
fi

echo "== kiln health --json"
"$KILN" health --json --dir /tmp ${KILN_SKU:+--sku "$KILN_SKU"}
echo "exit $?"

echo "== kiln health --perf --json (GPU memory bandwidth and GEMM; UNTESTED)"
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,power.draw --format=csv || true
"$KILN" health --perf --json ${KILN_SKU:+--sku "$KILN_SKU"} |
  python3 -c 'import json,sys; [print(c["name"], c["status"], c["message"], sep="\t") for c in json.load(sys.stdin)["checks"] if c["name"] in ("gpu_mem_bandwidth", "gpu_gemm")]'
echo "exit ${PIPESTATUS[0]}"

echo "== kiln tune gpu --dry-run"
"$KILN" tune gpu --dry-run
echo "exit $?"
