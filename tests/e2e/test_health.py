"""kiln health and kiln tune as a user runs them: NHC-style output and exit
codes on the fixture trees and recorded NVML answers, --json, --drain's
call to the server (a stand-in HTTP server records it), and tune without
a GPU and in dry-run."""
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from conftest import KILN

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
FAKE_NVML = Path(KILN).resolve().parents[2] / "src" / "telemetry" / "libfake-nvml.so"
FAKE_CUDA = Path(KILN).resolve().parents[2] / "src" / "health" / "libfake-cuda.so"


def kiln(*args, nvml=None, env_extra=None):
    env = dict(os.environ, KILN_HOME="/nonexistent-kiln-home")
    env.pop("KILN_SKU", None)
    if nvml:
        env["KILN_NVML_LIBRARY"] = str(FAKE_NVML)
        env["KILN_FAKE_NVML"] = str(FIXTURES / "nvml" / nvml)
    else:
        env["KILN_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
    env.update(env_extra or {})
    return subprocess.run([KILN, *args], env=env, capture_output=True,
                          text=True, timeout=60)


def health(root, *args, **kw):
    return kiln("health", "--root", str(FIXTURES / root), "--sku", "Test_2xH100",
                "--sku-file", str(FIXTURES / "skus.csv"), *args, **kw)


def test_healthy_node_is_silent_and_exits_0():
    r = health("node-basic", nvml="h100x2.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""


def test_faulty_node_prints_nhc_lines_and_exits_1():
    r = health("node-faulty", nvml="h100x2-faulty.json")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert all(line.startswith("ERROR:  kiln:  Health check failed:  ") for line in lines)
    failed = {line.split("  ")[3].split(":")[0] for line in lines}
    assert failed == {"gpu_ecc", "gpu_retired_pages", "gpu_throttle", "gpu_pcie",
                      "gpu_nvlink", "kernel_xid", "machine_check", "infiniband",
                      "memory"}


def test_json_lists_every_check():
    r = kiln("health", "--root", str(FIXTURES / "node-basic"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["healthy"] is True and doc["failed"] == 0
    status = {c["name"]: c["status"] for c in doc["checks"]}
    assert len(status) == 11
    assert status["gpu_ecc"] == "skip" and status["memory"] == "skip"
    assert status["infiniband"] == "pass" and status["disk_free"] == "skip"
    r = health("node-faulty", "--json", nvml="h100x2-faulty.json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["healthy"] is False and doc["failed"] == 9


def cuda_env(copy_ms, gemm_ms, cudart=None):
    """The stand-in CUDA runtime and cuBLAS with one H100 whose copies of
    1 GiB take copy_ms and whose 8192^3 GEMMs take gemm_ms."""
    dev = {"name": "NVIDIA H100 80GB HBM3", "memory": 80 << 30, "cc": 9,
           "copy_ms": copy_ms, "gemm_ms": gemm_ms}
    return {"KILN_CUDART_LIBRARY": cudart or str(FAKE_CUDA),
            "KILN_CUBLAS_LIBRARY": str(FAKE_CUDA),
            "KILN_FAKE_CUDA": json.dumps({"devices": [dev]})}


def test_perf_passes_at_the_expected_figures():
    # 2 * 1 GiB per 0.7 ms: 3068 GB/s of 3350; 2 * 8192^3 per 1.25 ms:
    # 879.6 TFLOP/s of 989.
    r = health("node-basic", "--perf", nvml="h100x2.json",
               env_extra=cuda_env(0.7, 1.25))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""
    r = health("node-basic", "--perf", "--json", nvml="h100x2.json",
               env_extra=cuda_env(0.7, 1.25))
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert len(checks) == 13
    assert checks["gpu_mem_bandwidth"]["status"] == "pass"
    assert "3068 GB/s copying 1024 MiB, 92% of H100-80GB's 3350" in \
        checks["gpu_mem_bandwidth"]["message"]
    assert checks["gpu_gemm"]["status"] == "pass"
    assert "879.6 TFLOP/s on 8192^3 bf16 GEMM" in checks["gpu_gemm"]["message"]


def test_perf_fails_below_the_fraction():
    # 1432 GB/s is 43% of 3350 and 366.5 TFLOP/s 37% of 989.
    r = health("node-basic", "--perf", nvml="h100x2.json",
               env_extra=cuda_env(1.5, 3.0))
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert [line.split("  ")[3].split(":")[0] for line in lines] == \
        ["gpu_mem_bandwidth", "gpu_gemm"]
    assert "1432 GB/s copying 1024 MiB, below 70% of H100-80GB's 3350 GB/s" in lines[0]
    # At 0.4 the bandwidth passes and the GEMM still fails.
    r = health("node-basic", "--perf", "--perf-fraction", "0.4",
               nvml="h100x2.json", env_extra=cuda_env(1.5, 3.0))
    assert r.returncode == 1
    assert r.stdout.startswith("ERROR:  kiln:  Health check failed:  gpu_gemm: ")
    assert len(r.stdout.splitlines()) == 1
    r = health("node-basic", "--perf", "--perf-fraction", "1.5")
    assert r.returncode == 2 and "--perf-fraction" in r.stderr


def test_perf_skips_without_cuda_or_gpu():
    r = health("node-basic", "--perf", "--json", nvml="h100x2.json",
               env_extra=cuda_env(1, 1, cudart="/nonexistent/libcudart.so.12"))
    assert r.returncode == 0, r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    for name in ("gpu_mem_bandwidth", "gpu_gemm"):
        assert checks[name]["status"] == "skip"
        assert checks[name]["message"].startswith("no CUDA runtime: cannot load")
    env = cuda_env(1, 1)
    env["KILN_FAKE_CUDA"] = '{"devices": []}'
    r = health("node-basic", "--perf", "--json", nvml="h100x2.json",
               env_extra=env)
    assert r.returncode == 0, r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["gpu_gemm"]["status"] == "skip"
    assert checks["gpu_gemm"]["message"].startswith("no GPU")


def test_unknown_sku_is_a_usage_error():
    r = kiln("health", "--sku", "Standard_ND96isr_H100_v4")
    assert r.returncode == 2
    assert 'did you mean "Standard_ND96isr_H100_v5"' in r.stderr


class Recorder(BaseHTTPRequestHandler):
    calls = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Recorder.calls.append((self.path, self.headers.get("Authorization"),
                               json.loads(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok":true}')

    def log_message(self, *args):
        pass


def test_drain_reports_to_the_server():
    srv = HTTPServer(("127.0.0.1", 0), Recorder)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        env = {"KILN_SERVER": url, "KILN_TOKEN": "tok", "PATH": "/usr/bin:/bin"}
        r = health("node-faulty", "--drain", "--node-name", "gpu-7",
                   nvml="h100x2-faulty.json", env_extra=env)
        assert r.returncode == 1
        r2 = health("node-basic", "--drain", "--node-name", "gpu-7",
                    nvml="h100x2.json", env_extra=env)
        assert r2.returncode == 0, r2.stderr
    finally:
        srv.shutdown()
    (p1, auth, b1), (p2, _, b2) = Recorder.calls[-2:]
    assert p1 == p2 == "/v1/nodes/gpu-7/health"
    assert auth == "Bearer tok"
    assert b1["healthy"] is False and b1["reason"].startswith("gpu_ecc: GPU 0")
    assert b2 == {"healthy": True, "reason": "all checks passed"}


def test_drain_without_server_exits_3():
    r = health("node-basic", "--drain", "--node-name", "n", nvml="h100x2.json",
               env_extra={"KILN_SERVER": "http://127.0.0.1:9"})
    assert r.returncode == 3


def test_tune_without_gpu_says_so():
    r = kiln("tune", "gpu")
    assert r.returncode == 0
    assert "no GPU to tune" in r.stderr


def test_tune_dry_run_and_refusal():
    r = kiln("tune", "gpu", "--dry-run", nvml="h100x2.json")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()[1:]
    assert len(rows) == 2 and "1755/2619" in rows[0] and "1980/2619" in rows[0]
    assert "(dry run)" in rows[0]
    r = kiln("tune", "gpu", nvml="t4-minimal.json")
    assert r.returncode == 1
    assert "application clocks" in r.stderr
    r = kiln("tune", "cpu")
    assert r.returncode == 2


def test_drain_against_a_real_server_gates_scheduling(server):
    from conftest import job_yaml, wait_for
    node = server.request("GET", "/v1/nodes").json()["nodes"][0]["name"]
    env = {"KILN_SERVER": server.url, "KILN_TOKEN": server.admin_token,
           "PATH": "/usr/bin:/bin"}
    r = health("node-faulty", "--drain", "--node-name", node,
               nvml="h100x2-faulty.json", env_extra=env)
    assert r.returncode == 1
    n = server.request("GET", "/v1/nodes").json()["nodes"][0]
    assert n["state"] == "unhealthy" and "gpu_ecc" in n["reason"]
    assert "gpu_ecc" in server.cli("nodes", check=True).stdout
    jid = server.submit(job_yaml("gated", ["/bin/true"]))
    wait_for(lambda: server.job(jid)["reason"], what="a queue reason")
    assert server.job(jid)["state"] == "queued"
    r = health("node-basic", "--drain", "--node-name", node,
               nvml="h100x2.json", env_extra=env)
    assert r.returncode == 0, r.stderr
    server.wait_state(jid, "succeeded")
