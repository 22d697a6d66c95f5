"""End-to-end tests for `kiln sim`: a tiny trace whose answer is worked
out by hand, invariants on a small slice of the openb default trace
(tests/fixtures/openb-small), determinism, and clear errors. No server."""
import csv
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import KILN

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "openb-small"
POLICIES = ["random", "dot-product", "gpu-clustering", "gpu-packing",
            "best-fit", "fgd", "kiln"]


def sim(*args, timeout=60):
    return subprocess.run([KILN, "sim", *args], capture_output=True,
                          text=True, timeout=timeout)


def read_curves(path):
    curves = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            curves.setdefault(row["policy"], {})[int(row["arrived_pct"])] = row
    return curves


def tiny_trace(tmp_path):
    """Two nodes of 5 GPUs and 15 CPUs; 52 pods of a quarter GPU and one
    CPU each, i.e. 130 % of the GPUs. CPU runs out after 30 pods (7.5 of
    10 GPUs), whatever the order or the policy. Pod i (1-based) brings
    arrived = 2.5 i %, so 90, 95, 100, 110 and 130 % are pods 36, 38, 40,
    44 and 52, all after the 30th: 25 % of the GPUs stay unallocated. The
    only typical shape cannot fit a node without CPU, so all idle GPU is
    fragmented: 25 % too. With exactly 130 % the resampling adds nothing
    (13000 + 250 > 1.3 x 10000)."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                     "n0,15000,65536,5,T4\n"
                     "n1,15000,65536,5,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                    + "".join(f"p{i:02d},1000,1024,1,250,\n"
                              for i in range(52)))
    return nodes, pods


def test_tiny_trace_by_hand(tmp_path):
    nodes, pods = tiny_trace(tmp_path)
    out = tmp_path / "curves.csv"
    r = sim("--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-3",
            "--csv", str(out))
    assert r.returncode == 0, r.stderr
    curves = read_curves(out)
    assert sorted(curves) == sorted(POLICIES)
    for policy, curve in curves.items():
        for x in (90, 95, 100, 110, 130):
            assert float(curve[x]["unallocated_mean"]) == \
                pytest.approx(25.0), (policy, x)
            assert float(curve[x]["unallocated_sd"]) == 0.0
            assert float(curve[x]["frag_mean"]) == \
                pytest.approx(25.0), (policy, x)
        # Before the CPU runs out everything fits: pod 20 is 50 % arrived.
        assert float(curve[50]["unallocated_mean"]) == pytest.approx(50.0)
        if policy != "fgd":
            # Paired against fgd: the same every seed.
            assert curve[100]["baseline"] == "fgd"
            assert float(curve[100]["diff_mean"]) == 0.0
    for policy in POLICIES:
        line = next(l for l in r.stdout.splitlines()
                    if l.split() and l.split()[0] == policy)
        assert line.split()[1:6] == ["25.00±0.00"] * 5
    # Speed: 30 of the 52 pods are placed per seed, and the rate says so.
    speed = r.stdout.split("Speed")[1]
    line = next(l for l in speed.splitlines()
                if l.split() and l.split()[0] == "kiln")
    offered, placed, seconds, placed_s, offered_s = line.split()[1:6]
    assert (offered, placed) == ("156", "90")
    if float(seconds) > 0:
        assert float(placed_s) < float(offered_s)


def test_small_openb_invariants_and_determinism(tmp_path):
    args = ["--nodes", str(FIXTURE / "nodes.csv"),
            "--pods", str(FIXTURE / "pods.csv"), "--seeds", "42-51"]
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    r = sim(*args, "--csv", str(first))
    assert r.returncode == 0, r.stderr
    assert "41 nodes, 188 GPUs, 327 pods" in r.stderr
    r = sim(*args, "--csv", str(second))
    assert r.returncode == 0, r.stderr
    # Every policy but random is a function of the seed; random draws
    # from its own seeded stream, so it repeats as well.
    assert first.read_text() == second.read_text()
    curves = read_curves(first)
    for policy, curve in curves.items():
        assert len(curve) == 131
        for x, row in curve.items():
            if not row["unallocated_mean"]:
                continue
            u = float(row["unallocated_mean"])
            lo, hi = float(row["unallocated_min"]), float(row["unallocated_max"])
            # Nothing can be allocated beyond what has arrived, nor beyond
            # capacity. Bins are rounded, and an empty bin borrows its
            # neighbours' events, hence the 1.5-point slack.
            assert max(0.0, 100.0 - x - 1.5) - 1e-9 <= lo <= u <= hi <= 100
            assert float(row["frag_mean"]) <= u + 1e-9
            assert 1 <= int(row["seeds"]) <= 10
    # Below 50 % arrived every pod of this slice fits, for every policy.
    for policy in POLICIES:
        for x in (10, 25, 40):
            assert float(curves[policy][x]["unallocated_mean"]) == \
                pytest.approx(100.0 - x, abs=0.6)


def test_five_column_pod_list(tmp_path):
    """A pod list with only name, cpu_milli, memory_mib, num_gpu and
    gpu_milli replays as one with every column whose gpu_spec is empty."""
    rows = list(csv.DictReader(open(FIXTURE / "pods.csv", newline="")))
    five = tmp_path / "five.csv"
    spec_free = tmp_path / "full.csv"
    cols = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"]
    with open(five, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows([[r[c] for c in cols] for r in rows])
    with open(spec_free, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols + ["gpu_spec", "qos"])
        w.writerows([[r[c] for c in cols] + ["", r["qos"]] for r in rows])
    outs = []
    for pods in (five, spec_free):
        out = tmp_path / (pods.stem + ".out.csv")
        r = sim("--nodes", str(FIXTURE / "nodes.csv"), "--pods", str(pods),
                "--seeds", "1-3", "--policy", "fgd,kiln", "--csv", str(out))
        assert r.returncode == 0, r.stderr
        outs.append(out.read_text())
    assert outs[0] == outs[1]
    r = sim("--nodes", str(FIXTURE / "nodes.csv"), "--pods", str(five),
            "--departures")
    assert r.returncode == 1
    assert "creation_time and deletion_time" in r.stderr


def test_departures(tmp_path):
    """The replay in time on the small slice: the same figures twice,
    one CSV row per policy and seed, and kiln paired against fgd."""
    args = ["--nodes", str(FIXTURE / "nodes.csv"),
            "--pods", str(FIXTURE / "pods.csv"), "--departures",
            "--load", "200", "--policy", "fgd,kiln,best-fit",
            "--seeds", "1-3"]
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    r = sim(*args, "--csv", str(first))
    assert r.returncode == 0, r.stderr
    assert "arrivals x200 as dense as recorded" in r.stdout
    assert "Against fgd, paired by seed" in r.stdout
    assert sim(*args, "--csv", str(second)).returncode == 0
    assert first.read_text() == second.read_text()
    rows = list(csv.DictReader(open(first, newline="")))
    assert [(x["policy"], x["seed"]) for x in rows] == \
        [(p, s) for p in ("fgd", "kiln", "best-fit") for s in "123"]
    for x in rows:
        assert float(x["gpu_never_placed"]) <= float(x["never_placed"])
        assert float(x["stranded_gpu_hours"]) >= 0
        assert float(x["gpu_wait_p50_s"]) <= float(x["gpu_wait_p99_s"])


def test_flag_errors(tmp_path):
    nodes, pods = tiny_trace(tmp_path)
    base = ["--nodes", str(nodes), "--pods", str(pods)]
    r = sim(*base, "--load", "2")
    assert r.returncode == 2 and "--load: only with --departures" in r.stderr
    r = sim(*base, "--departures", "--plot", str(tmp_path / "x.png"))
    assert r.returncode == 2 and "--departures" in r.stderr
    r = sim("--nodes", str(FIXTURE / "nodes.csv"),
            "--pods", str(FIXTURE / "pods.csv"), "--departures",
            "--load", "-1")
    assert r.returncode == 2 and "--load" in r.stderr
    r = sim(*base, "--policy", "fgd,kiln", "--baseline", "best-fit")
    assert r.returncode == 2 and "--baseline" in r.stderr
    r = sim(*base, "--policy", "fgd,kiln", "--baseline", "kiln",
            "--seeds", "1-2")
    assert r.returncode == 0 and "Against kiln, paired by seed" in r.stdout


def test_plot(tmp_path):
    if not shutil.which("gnuplot"):
        pytest.skip("gnuplot is not installed (Debian: gnuplot-nox)")
    nodes, pods = tiny_trace(tmp_path)
    png = tmp_path / "fig.png"
    r = sim("--nodes", str(nodes), "--pods", str(pods), "--seeds", "1",
            "--policy", "fgd,best-fit", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_errors(tmp_path):
    nodes, pods = tiny_trace(tmp_path)
    r = sim("--nodes", str(tmp_path / "missing.csv"), "--pods", str(pods))
    assert r.returncode == 1
    assert "missing.csv" in r.stderr and "clusterdata" in r.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                   "p0,1000,1024,1,250,\n"
                   "p1,lots,1024,1,250,\n")
    r = sim("--nodes", str(nodes), "--pods", str(bad))
    assert r.returncode == 1
    assert f"{bad}:3:4: cpu_milli" in r.stderr
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                   "p0,1000,1024,2,500,\n")
    r = sim("--nodes", str(nodes), "--pods", str(bad))
    assert r.returncode == 1
    assert f"{bad}:2:16:" in r.stderr and "1000" in r.stderr
    r = sim("--nodes", str(nodes), "--pods", str(pods), "--policy", "fdg")
    assert r.returncode == 2 and "did you mean 'fgd'" in r.stderr
    r = sim("--nodes", str(nodes), "--pods", str(pods), "--seeds", "9-3")
    assert r.returncode == 2
    r = sim("--pods", str(pods))
    assert r.returncode == 2


def test_from_history_replays_the_servers_ended_jobs(tmp_path):
    """Each task of an ended job is one pod with the job's shape; a share
    is one GPU at 500 milli; a gpu_model constraint becomes the exact
    models it accepts; a node with two GPU models is one node per model;
    MIG jobs and jobs not yet ended are left out."""
    from conftest import Server, job_yaml
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, gpus="2xH100-80GB,2xA100-80GB:mig").start()
    try:
        shapes = [{"gpus": 1}, {"gpus": 2, "cpus": 1, "memory": "1536Mi"},
                  {"gpus": 0.5}, {"cpus": 0.25}, {"gpus": "mig:1g.10gb"}]
        for i, res in enumerate(shapes):
            s.wait_state(s.submit(job_yaml(f"j{i}", ["/bin/true"],
                                           resources=res)), "succeeded")
        gang = s.submit(job_yaml("gang", ["/bin/true"], tasks=2,
                                 resources={"gpus": 1, "gpu_model": ["H100"]}))
        s.wait_state(gang, "succeeded")
        running = s.submit(job_yaml("running", ["/bin/sleep", "60"]))
        trace = tmp_path / "trace"
        r = s.cli("sim", "--from-history", "--save-trace", str(trace),
                  "--policy", "best-fit,fgd", "--seeds", "1-2")
        assert r.returncode == 0, r.stderr
        assert ("history: 6 ended jobs, 6 pods (one per task), "
                "1 MIG job left out") in r.stderr
        with open(trace / "pods.csv", newline="") as f:
            pods = [(p["name"], p["cpu_milli"], p["memory_mib"], p["num_gpu"],
                     p["gpu_milli"], p["gpu_spec"]) for p in csv.DictReader(f)]
        assert pods == [
            ("job-1-0", "0", "0", "1", "1000", ""),
            ("job-2-0", "1000", "1536", "2", "1000", ""),
            ("job-3-0", "0", "0", "1", "500", ""),
            ("job-4-0", "250", "0", "0", "0", ""),
            (f"job-{gang}-0", "0", "0", "1", "1000", "H100-80GB"),
            (f"job-{gang}-1", "0", "0", "1", "1000", "H100-80GB")]
        with open(trace / "nodes.csv", newline="") as f:
            nodes = list(csv.DictReader(f))
        # The MIG GPUs are not in the trace: one H100 node is left.
        assert [(n["gpu"], n["model"]) for n in nodes] == [("2", "H100-80GB")]
        assert "1 nodes, 2 GPUs, 6 pods; 2 policies x 2 seeds" in r.stderr
        assert "best-fit" in r.stdout and "fgd" in r.stdout

        # Each pod carries its job's times, so the history replays in
        # time through autoscaled pools too.
        with open(trace / "pods.csv", newline="") as f:
            for p in csv.DictReader(f):
                assert int(p["creation_time"]) <= int(p["scheduled_time"]) \
                    <= int(p["deletion_time"])
                assert p["preemptible"] == "false"
        r = s.cli("sim", "--from-history", "--autoscale",
                  "a Standard_NC96ads_A100_v4 4xA100-80GB min=0 max=2",
                  "-o", "json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["pods"] == 6 and out["never_fit"] == 0
        assert out["autoscaled"]["total"]["pods"] == 6

        r = s.cli("sim", "--from-history", "--pods", "x.csv")
        assert r.returncode == 2 and "--from-history and --pods" in r.stderr
        # A job's task outlives its server by design: end it first.
        s.cli("cancel", str(running), check=True)
        s.wait_state(running, "cancelled")
    finally:
        s.stop()
