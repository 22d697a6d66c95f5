"""End-to-end tests for `kiln sim --autoscale`: the small openb slice
(tests/fixtures/openb-small, which has creation, deletion and scheduled
times) through two priced pools, checked for consistency between the
JSON's fields and against the catalog's prices; a hand-made burst; and
clear errors. No server."""
import csv
import json
import subprocess
from pathlib import Path

import pytest

from conftest import KILN

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "openb-small"
POOLS = ("a100 Standard_NC24ads_A100_v4 1xA100-80GB min=0 max=40; "
         "big Standard_ND96asr_v4 8xA100-40GB min=0 max=4 spot "
         "scale-down-delay=5m")


def sim(*args, timeout=60):
    return subprocess.run([KILN, "sim", *args], capture_output=True,
                          text=True, timeout=timeout)


def catalog_price(sku, column):
    with open(ROOT / "data" / "azure-gpu-skus.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["size"] == sku:
                return float(row[column])
    raise KeyError(sku)


def check_run(run, pods):
    pools, total = run["pools"], run["total"]
    assert run["span_hours"] > 0
    for p in pools:
        assert p["cost_usd"] == pytest.approx(
            p["node_hours"] * p["usd_per_node_hour"], rel=1e-9)
        gpus = 1 if p["name"] == "a100" else 8
        assert p["gpu_hours"] == pytest.approx(p["node_hours"] * gpus)
        assert 0 <= p["gpu_hours_used"] <= p["gpu_hours"] + 1e-9
        if p["gpu_hours"]:
            assert p["gpu_utilization"] == pytest.approx(
                p["gpu_hours_used"] / p["gpu_hours"])
        assert p["peak_nodes"] <= p["max"]
        if p["pods"]:
            w = p["wait_s"]
            assert 0 <= w["p50"] <= w["p95"] <= w["max"]
    for key in ("node_hours", "cost_usd", "gpu_hours", "gpu_hours_used",
                "nodes_added", "nodes_removed", "pods"):
        assert total[key] == pytest.approx(sum(p[key] for p in pools)), key
    assert total["peak_nodes"] <= sum(p["peak_nodes"] for p in pools)
    assert total["pods"] + run["never_fit"] == pods


def test_openb_small_json_is_consistent():
    with open(FIXTURE / "pods.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ran = sum(1 for r in rows if r["scheduled_time"] != "")
    r = sim("--autoscale", POOLS, "--pods", str(FIXTURE / "pods.csv"),
            "--provision-delay", "3m", "--policy", "fgd", "-o", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["policy"] == "fgd"
    assert out["provision_delay_s"] == 180
    assert out["pods"] == ran
    assert out["unscheduled"] == len(rows) - ran
    auto, fixed = out["autoscaled"], out["fixed"]
    check_run(auto, ran)
    check_run(fixed, ran)
    a100, big = auto["pools"]
    assert (a100["sku"], a100["spot"], a100["min"], a100["max"]) == \
        ("Standard_NC24ads_A100_v4", False, 0, 40)
    assert a100["usd_per_node_hour"] == pytest.approx(
        catalog_price("Standard_NC24ads_A100_v4", "payg_linux_usd_hr"))
    assert big["usd_per_node_hour"] == pytest.approx(
        catalog_price("Standard_ND96asr_v4", "spot_usd_hr"))
    # The fixed cluster holds every pool at max the whole time and never
    # scales; the trace is bursty, so it costs more than autoscaling.
    for p in fixed["pools"]:
        assert p["peak_nodes"] == p["max"]
        assert p["nodes_added"] == p["nodes_removed"] == 0
        assert p["node_hours"] == pytest.approx(p["max"] *
                                                fixed["span_hours"])
    assert auto["total"]["nodes_added"] > 0
    assert auto["total"]["nodes_removed"] > 0
    assert fixed["total"]["cost_usd"] >= auto["total"]["cost_usd"]
    # The same replay twice is the same answer.
    again = sim("--autoscale", POOLS, "--pods", str(FIXTURE / "pods.csv"),
                "--provision-delay", "3m", "--policy", "fgd", "-o", "json")
    assert json.loads(again.stdout) == out


def test_burst_table(tmp_path):
    """Eight 1-GPU pods for an hour at t=0 and nothing else: the pool
    grows from 0 to 8 nodes, each asked for at 0 and billed to the end at
    1h03m (3 min provisioning), $ = 8 x 1.05 h x the on-demand price."""
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,"
                    "creation_time,deletion_time\n"
                    + "".join(f"p{i},1000,1024,1,1000,0,3600\n"
                              for i in range(8)))
    pool_file = tmp_path / "pools.txt"
    pool_file.write_text("# one pool\n"
                         "a100 Standard_NC24ads_A100_v4 1xA100-80GB "
                         "min=0 max=8\n")
    r = sim("--autoscale", f"@{pool_file}", "--pods", str(pods),
            "--provision-delay", "3m", "-o", "json")
    assert r.returncode == 0, r.stderr
    auto = json.loads(r.stdout)["autoscaled"]
    price = catalog_price("Standard_NC24ads_A100_v4", "payg_linux_usd_hr")
    assert auto["span_hours"] == pytest.approx(1.05)
    assert auto["total"]["node_hours"] == pytest.approx(8 * 1.05)
    assert auto["total"]["cost_usd"] == pytest.approx(8 * 1.05 * price)
    assert auto["total"]["peak_nodes"] == 8
    assert auto["total"]["wait_s"]["max"] == pytest.approx(180)
    r = sim("--autoscale", f"@{pool_file}", "--pods", str(pods),
            "--provision-delay", "3m")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Autoscaled, ")
    assert "Fixed at each pool's max" in r.stdout
    line = next(l for l in r.stdout.splitlines() if l.split()[:1] == ["a100"])
    assert line.split()[3] == "8.4"          # node-hours
    assert line.split()[6:8] == ["3m0s", "3m0s"]  # wait p50, p95


def test_errors(tmp_path):
    openb = FIXTURE / "pods.csv"
    r = sim("--autoscale", "a100 Standard_NC24ads_A100_v4", "--pods",
            str(openb))
    assert r.returncode == 2
    assert 'pool "a100 Standard_NC24ads_A100_v4": want "NAME SKU GPUS' \
        in r.stderr
    r = sim("--autoscale", "a Standard_NC24ads_A100_v4 1xA100-80GB min=x",
            "--pods", str(openb))
    assert r.returncode == 2 and 'min: "x" is not a number' in r.stderr
    pool_file = tmp_path / "pools.txt"
    pool_file.write_text("a Standard_NC24ads_A100_v4 1xA100-80GB\n\n"
                         "a Standard_NC24ads_A100_v4 2xA100-80GB\n")
    r = sim("--autoscale", f"@{pool_file}", "--pods", str(openb))
    assert r.returncode == 2 and "pool a is given twice" in r.stderr
    pool_file.write_text("a Standard_NC24ads_A100_v4 1xA100-80GB\n\n"
                         "b Standard_NC24ads_A100_v4 1xA100-80GB bogus\n")
    r = sim("--autoscale", f"@{pool_file}", "--pods", str(openb))
    assert r.returncode == 2 and f"{pool_file}:3: pool \"b " in r.stderr
    # A long path keeps its line number.
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    long_file = deep / "pools.txt"
    long_file.write_text(pool_file.read_text())
    r = sim("--autoscale", f"@{long_file}", "--pods", str(openb))
    assert r.returncode == 2 and f"{long_file}:3: pool \"b " in r.stderr
    # A packing trace has no times: the file and the column are named.
    untimed = tmp_path / "untimed.csv"
    untimed.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,"
                       "gpu_spec\np0,1000,1024,1,250,\n")
    r = sim("--autoscale", "a Standard_NC24ads_A100_v4 1xA100-80GB",
            "--pods", str(untimed))
    assert r.returncode == 1
    assert f"{untimed}:1:1: no column 'creation_time'" in r.stderr
    r = sim("--autoscale", "a Standard_NC24ads_A100_v4 1xA100-80GB",
            "--pods", str(openb), "--nodes", str(FIXTURE / "nodes.csv"))
    assert r.returncode == 2 and "--nodes: not with --autoscale" in r.stderr
    r = sim("--autoscale", "a Standard_NC24ads_A100_v4 1xA100-80GB",
            "--pods", str(openb), "--policy", "fgd,kiln")
    assert r.returncode == 2 and "--autoscale takes one" in r.stderr
    r = sim("--nodes", str(FIXTURE / "nodes.csv"), "--pods", str(openb),
            "--provision-delay", "3m")
    assert r.returncode == 2 and "only with --autoscale" in r.stderr
    r = sim("--autoscale", "a Standard_NC24ads_A100_v4 1xA100-80GB",
            "--pods", str(openb), "--provision-delay", "soon")
    assert r.returncode == 2 and '--provision-delay: "soon"' in r.stderr
    # A size the catalog lacks: replayed, its cost unknown.
    r = sim("--autoscale", "a Standard_Nothing 1xA100-80GB max=50",
            "--pods", str(openb), "-o", "json")
    assert r.returncode == 0, r.stderr
    assert "Standard_Nothing is not in the catalog" in r.stderr
    out = json.loads(r.stdout)
    assert out["autoscaled"]["total"]["cost_usd"] is None
    assert out["autoscaled"]["pools"][0]["usd_per_node_hour"] is None
