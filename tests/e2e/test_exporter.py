"""kiln exporter end to end: a real process on a port-0 loopback listener,
scraped over HTTP, its output checked by Prometheus' own `promtool check
metrics` (the format's parser) against the fixture trees and the stand-in
NVML library answering from recorded JSON."""
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import requests

from conftest import KILN, wait_for

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
FAKE_NVML = Path(KILN).resolve().parents[2] / "src" / "telemetry" / "libfake-nvml.so"

# promtool also lints names. node_exporter's meminfo names and DCGM's field
# names, labels (UUID, modelName, Hostname) and counters without _total are
# theirs by design and dashboards depend on them, so those lints are
# expected for those families; any other problem, or a parse error, fails.
NAME_LINT = re.compile(
    r"^(node_memory_\w+ metric names should be written in 'snake_case' not "
    r"'camelCase'"
    r"|DCGM_FI_\w+ (metric|label) names should be written in 'snake_case' "
    r"not 'camelCase'"
    r"|DCGM_FI_\w+ counter metrics should have \"_total\" suffix)$")


class Exporter:
    def __init__(self, tmp_path, *args, nvml=None):
        self.log = tmp_path / "exporter.log"
        env = dict(os.environ)
        if nvml:
            env["KILN_NVML_LIBRARY"] = str(FAKE_NVML)
            env["KILN_FAKE_NVML"] = str(FIXTURES / "nvml" / nvml)
        else:
            env["KILN_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [KILN, "exporter", "--listen", "127.0.0.1:0", *args],
                env=env, stdout=log, stderr=log)
        text = wait_for(lambda: (m := re.search(r"http://127\.0\.0\.1:(\d+)/metrics",
                                               self.log.read_text()))
                        and m or self.proc.poll() is not None,
                        what="exporter to listen")
        assert self.proc.poll() is None, self.log.read_text()
        self.url = f"http://127.0.0.1:{text.group(1)}/metrics"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(timeout=10) == 0, self.log.read_text()


@pytest.fixture
def exporters(tmp_path):
    started = []

    def start(*args, nvml=None):
        e = Exporter(tmp_path, *args, nvml=nvml)
        started.append(e)
        return e
    yield start
    for e in started:
        e.stop()


def promtool_check(text):
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: scripts/install-deps.sh installs prometheus"
    res = subprocess.run([promtool, "check", "metrics"], input=text,
                         capture_output=True, text=True, timeout=30)
    problems = [line for line in (res.stdout + res.stderr).splitlines()
                if line.strip() and not NAME_LINT.match(line)]
    assert res.returncode in (0, 3) and not problems, "\n".join(problems)


def sample(text, prefix):
    for line in text.splitlines():
        if line.startswith(prefix):
            return line.rsplit(" ", 1)[1]
    raise AssertionError(f"no sample {prefix!r}")


def test_fixture_node_scrape_is_valid(exporters):
    e = exporters("--root", str(FIXTURES / "node-basic"))
    r = requests.get(e.url, timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    promtool_check(r.text)
    assert sample(r.text, "node_memory_MemAvailable_bytes ") == str(1900000000 * 1024)
    assert sample(r.text, 'node_network_receive_bytes_total{device="eth0"}') == "9876543210"
    assert sample(r.text, 'node_disk_written_bytes_total{device="sda"}') == str(1600000 * 512)
    assert 'mountpoint="/mnt/scratch"' in r.text
    assert "DCGM_" not in r.text


def test_this_machine_scrape_is_valid(exporters):
    e = exporters()
    r = requests.get(e.url, timeout=10)
    assert r.status_code == 200
    promtool_check(r.text)
    assert "node_cpu_seconds_total{" in r.text


def test_gpu_metrics_from_recorded_nvml(exporters):
    e = exporters("--root", str(FIXTURES / "node-basic"), "--hostname", "node-a",
                  nvml="h100x2.json")
    assert "2 GPUs, NVIDIA driver 550.54.15" in e.log.read_text()
    first = requests.get(e.url, timeout=10).text
    promtool_check(first)
    labels = ('{gpu="1",UUID="GPU-5a1c9e01-7b2d-4c3e-9f10-abcdef012341",'
              'pci_bus_id="00000000:19:00.0",device="nvidia1",'
              'modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"}')
    assert sample(first, "DCGM_FI_DEV_GPU_UTIL" + labels) == "87"
    assert sample(first, "DCGM_FI_DEV_FB_FREE" + labels) == str(40000000000 >> 20)
    assert sample(first, "DCGM_FI_DEV_SM_CLOCK" + labels) == "1980"
    assert sample(first, "DCGM_FI_DEV_PCIE_LINK_WIDTH" + labels) == "16"
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter" in first
    # The last XID is kept after the event has been drained.
    second = requests.get(e.url, timeout=10).text
    assert sample(second, "DCGM_FI_DEV_XID_ERRORS" + labels) == "13"
    assert sample(second, 'DCGM_FI_DEV_XID_ERRORS{gpu="0"') == "0"


def test_token_file_required_when_given(exporters, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    e = exporters("--root", str(FIXTURES / "node-basic"), "--token-file", str(token))
    assert requests.get(e.url, timeout=10).status_code == 401
    bad = {"Authorization": "Bearer s3cret-tokeN"}
    assert requests.get(e.url, headers=bad, timeout=10).status_code == 401
    good = {"Authorization": "Bearer s3cret-token"}
    r = requests.get(e.url, headers=good, timeout=10)
    assert r.status_code == 200 and "node_cpu_seconds_total" in r.text


def test_only_get_metrics(exporters):
    e = exporters("--root", str(FIXTURES / "node-basic"))
    assert requests.get(e.url.replace("/metrics", "/"), timeout=10).status_code == 404
    assert requests.post(e.url, timeout=10).status_code == 400


def test_bad_root_fails_at_start(tmp_path):
    res = subprocess.run([KILN, "exporter", "--listen", "127.0.0.1:0",
                          "--root", str(tmp_path / "nothing")],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert str(tmp_path / "nothing" / "proc" / "stat") in res.stderr
    res = subprocess.run([KILN, "exporter", "--listen", "nowhere"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "--listen" in res.stderr
