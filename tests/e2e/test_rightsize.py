"""Per-task usage, efficiency and right-size advice end to end: a real
process that holds ~200 MiB and spins one core half of the time (10 ms
on, 10 ms off) while asking for 4 CPUs (or all of a smaller machine's:
the node has this machine's cores) and 4 GiB, and a task on a simulated GPU that declares 8 GiB of GPU
memory at 25% utilisation (the simulated device model's usage file).
The server samples them every 200 ms; the tests stop the jobs once
enough samples are in, then check GET /v1/cost and /v1/cost/rightsize
and `kiln cost --rightsize` against what the processes did."""
import csv
import io
import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import KILN, Server, job_yaml, wait_for, kill_processes_under

MIB = 1 << 20
GIB = 1 << 30
MIN_SAMPLES = 10  # KN_RIGHTSIZE_MIN_SAMPLES
CPUS = min(4, os.cpu_count())

# Hold 200 MiB (bytes written, so resident), keep one core busy half of
# the time until told to stop, then say how much CPU it used.
SPIN = (
    "import os, time\n"
    "ballast = b'x' * (200 << 20)\n"
    "stop = os.environ['STOP']\n"
    "t0, c0 = time.time(), time.process_time()\n"
    "while not os.path.exists(stop):\n"
    "    t = time.time() + 0.01\n"
    "    while time.time() < t:\n"
    "        pass\n"
    "    time.sleep(0.01)\n"
    "print('cores', (time.process_time() - c0) / (time.time() - t0))\n")

# Declare simulated GPU use, then wait to be told to stop.
SIM_GPU = (
    "import os, time\n"
    "p = os.environ['KILN_SIM_GPU_USAGE']\n"
    "with open(p + '.tmp', 'w') as f:\n"
    "    f.write('memory_bytes %d\\nutilization 0.25\\n' % (8 << 30))\n"
    "os.rename(p + '.tmp', p)\n"
    "stop = os.environ['STOP']\n"
    "while not os.path.exists(stop):\n"
    "    time.sleep(0.05)\n")


def rightsize(s):
    r = s.request("GET", "/v1/cost/rightsize")
    assert r.status_code == 200, r.text
    return {j["name"]: j for j in r.json()["jobs"]}


def samples_of(s, name, resource):
    job = rightsize(s).get(name)
    for r in (job or {}).get("resources", []):
        if r["resource"] == resource:
            return r["samples"]
    return 0


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    home = tmp_path_factory.mktemp("rightsize") / "home"
    home.mkdir()
    # spin takes all of this machine's CPUs (on a 2-core machine); the
    # GPU task beside it names none, which would count the default CPU
    # and wait for spin to end: it counts nothing here.
    s = Server(home, gpus="1xH100-80GB",
               extra=["--usage-interval", "200ms",
                      "--default-task-cpus", "0"]).start()
    # Where the tasks look for their stop: one their user can reach.
    gate = Path(tempfile.mkdtemp(prefix="kiln-rightsize-"))
    gate.chmod(0o755)
    try:
        spin = s.submit(job_yaml("spin", ["/usr/bin/python3", "-c", SPIN],
                                 resources={"cpus": CPUS, "memory": "4Gi"},
                                 env={"STOP": str(gate / "stop")}))
        gpu = s.submit(job_yaml("simgpu", ["/usr/bin/python3", "-c", SIM_GPU],
                                resources={"gpus": 1},
                                env={"STOP": str(gate / "stop")}))
        # A CPU sample needs two ticks; wait for enough of each.
        wait_for(lambda: samples_of(s, "spin", "cpu") >= MIN_SAMPLES + 2,
                 timeout=60, what="CPU samples of the spinning job")
        wait_for(lambda: samples_of(s, "simgpu", "gpu_memory")
                 >= MIN_SAMPLES + 2, timeout=60, what="simulated GPU samples")
        (gate / "stop").write_text("")
        s.wait_state(spin, "succeeded", timeout=30)
        s.wait_state(gpu, "succeeded", timeout=30)
        yield s, spin, gpu
    finally:
        s.stop()
        kill_processes_under(home)
        shutil.rmtree(gate)


def test_cpu_and_memory_rightsize(sampled):
    s, spin, _ = sampled
    job = rightsize(s)["spin"]
    assert job["jobs"] == [spin] and job["tasks"] == 1
    res = {r["resource"]: r for r in job["resources"]}
    assert "gpu_memory" not in res  # it held no GPU

    # Memory: 200 MiB of ballast plus the interpreter, never above what
    # a Python process with it holds; asked 4 GiB.
    mem = res["memory"]
    assert mem["unit"] == "bytes" and mem["requested"] == 4 * GIB
    assert 200 * MIB <= mem["max"] < 400 * MIB
    assert mem["p50"] <= mem["p95"] <= mem["max"]
    assert 200 * MIB <= mem["p95"]
    # The rule: p95 x 1.15 rounded up to 64 MiB, suggested as it is below
    # 70% of the request.
    want = math.ceil(mem["p95"] * 1.15 / (64 * MIB)) * 64 * MIB
    assert mem["over"] is True and mem["suggested"] == want
    assert 230 * MIB <= mem["suggested"] <= 512 * MIB

    # CPU: one thread is at most one core (give or take clock ticks over
    # a sampling interval, and a sketch reads up to 5% high); this one
    # spins half of the time.
    cpu = res["cpu"]
    assert cpu["unit"] == "cores" and cpu["requested"] == CPUS
    assert cpu["samples"] >= 10
    assert 0 < cpu["p95"] <= 1.1 * 1.05
    want = max(0.1, math.ceil(round(cpu["p95"] * 1.15 / 0.1, 9)) * 0.1)
    assert cpu["over"] is True
    assert cpu["suggested"] == pytest.approx(want)
    assert cpu["suggested"] < CPUS * 0.7
    assert job["suggestions"] == 2

    # Efficiency: used over requested. The process measured its own
    # cores; the server's figure is the same process sampled.
    r = s.request("GET", "/v1/cost", params={"by": "job"})
    assert r.status_code == 200, r.text
    row = {x["key"]: x for x in r.json()["rows"]}[str(spin)]
    assert row["gpu_seconds"] == 0
    eff = row["efficiency_by_resource"]
    assert eff["gpu"] is None
    said = float(s.logs(spin).split("cores")[1])
    assert 0 < said <= 1
    assert 0 < eff["cpu"] <= 1.1 / CPUS
    assert eff["cpu"] == pytest.approx(said / CPUS, abs=0.1)
    assert 0 < eff["memory"] <= 400 * MIB / (4 * GIB)
    assert row["efficiency"] == pytest.approx((eff["cpu"] + eff["memory"]) / 2)
    assert row["efficiency"] < 1
    assert "used over requested" in r.json()["efficiency_source"]


def test_simulated_gpu_memory_rightsize(sampled):
    s, _, gpu = sampled
    job = rightsize(s)["simgpu"]
    res = {r["resource"]: r for r in job["resources"]}
    g = res["gpu_memory"]
    # Declared 8 GiB throughout: every percentile is exactly that.
    assert g["p50"] == g["p95"] == g["max"] == 8 * GIB
    node = s.request("GET", "/v1/nodes").json()["nodes"][0]
    device = node["devices"][0]["memory_bytes"]
    assert g["requested"] == device  # one whole simulated GPU
    assert g["over"] is True
    assert g["suggested"] == math.ceil(8 * 1.15) * GIB  # 10 GiB
    assert job["resources"] and g["suggested_gpus"] == \
        math.ceil(10 * GIB / device * 8) / 8

    # GPU efficiency: 25% of the GPU's time over one whole GPU held.
    r = s.request("GET", "/v1/cost", params={"by": "job"})
    row = {x["key"]: x for x in r.json()["rows"]}[str(gpu)]
    assert row["gpu_seconds"] > 0
    assert row["efficiency_by_resource"]["gpu"] == pytest.approx(0.25)
    assert row["efficiency"] == pytest.approx(0.25)


def test_rightsize_cli(sampled):
    s, _, _ = sampled
    res = s.cli("cost", "--rightsize", check=True)
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["JOB", "RESOURCE", "SAMPLES"]
    spin_mem = next(x for x in lines if x.split()[:2] == ["spin", "memory"])
    assert "4.0GiB" in spin_mem and "lower" in spin_mem
    assert any(x.split()[:2] == ["simgpu", "gpu_memory"] for x in lines)
    out = json.loads(s.cli("cost", "--rightsize", "-o", "json",
                           check=True).stdout)
    assert {j["name"] for j in out["jobs"]} >= {"spin", "simgpu"}
    assert out["rule"]["headroom"] == 1.15
    rows = list(csv.DictReader(io.StringIO(
        s.cli("cost", "--rightsize", "-o", "csv", check=True).stdout)))
    mem = next(r for r in rows if r["job"] == "spin" and
               r["resource"] == "memory")
    assert float(mem["requested"]) == 4 * GIB
    assert float(mem["suggested"]) < 4 * GIB
    assert mem["over"] == "true"
    # Usage errors name the flag.
    bad = s.cli("cost", "--rightsize", "--by", "node")
    assert bad.returncode == 2 and "--rightsize" in bad.stderr


def test_usage_interval_is_checked(tmp_path):
    res = subprocess.run([KILN, "server", "--home", str(tmp_path),
                          "--usage-interval", "5ms"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert "--usage-interval" in res.stderr and "100ms" in res.stderr
