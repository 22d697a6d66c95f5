"""The cost ledger end to end: simulated nodes priced from a fixture
catalog (on demand, spot, a reserved MIG node, and one whose size is
unknown), jobs that run whole, share a GPU, use a MIG slice, get preempted
after a checkpoint and fail; then GET /v1/cost and `kiln cost` by every
dimension in table, JSON and CSV, checked against arithmetic done here on
the timestamps the server recorded (?detail=1), and the --chart SVG parsed
as XML."""
import csv
import io
import json
import subprocess
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime, timezone

import pytest

from conftest import KILN, Server, job_yaml, wait_for, kill_processes_under

# Prices scaled so that the test's second or so of GPU time is dollars and
# a millisecond is cents. Test_G2: 2 GPUs, $72,000/h on demand ($10 per
# GPU-second), $18,000/h spot ($2.50). Test_G1: 1 GPU, $25,200/h 1-year
# reserved ($7 per GPU-second).
CATALOG = (
    "family,size,gpu_model,gpu_count,gpu_mem_per_gpu_gb,vcpus,ram_gib,"
    "infiniband,payg_linux_usd_hr,spot_usd_hr,ri_1y_usd_hr,ri_3y_usd_hr\n"
    "NC_TEST,Test_G2,NVIDIA H100 80GB,2,80,48,440,no,72000,18000,54000,36000\n"
    "NC_TEST,Test_G1,NVIDIA A100 80GB,1,80,24,220,no,36000,9000,25200,18000\n")

SIM_NODES = [
    "--sim-node", "od 2xH100-80GB sku=Test_G2 pricing=on_demand",
    "--sim-node", "sp 2xH100-80GB sku=Test_G2 pricing=spot",
    "--sim-node", "mg 1xA100-80GB:mig sku=Test_G1 pricing=reserved_1y",
    "--sim-node", "unk 1xH100-80GB sku=Nope_X",
]
MS_PER_DAY = 86400000

COMMIT = ('d="$KILN_CHECKPOINT_DIR/step-1"; mkdir -p "$d.tmp"; '
          'echo one > "$d.tmp/state"; mv "$d.tmp" "$d"; ')


@pytest.fixture
def priced(tmp_path):
    cat = tmp_path / "catalog.csv"
    cat.write_text(CATALOG)
    s = Server(tmp_path / "home", gpus=None,
               extra=SIM_NODES + ["--catalog", str(cat),
                                  "--health-interval", "0"])
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    kill_processes_under(s.home)


def on(node):
    return {"selector": {"sku": "Test_G2", "pricing": node}} \
        if node in ("on_demand", "spot") else {"selector": node}


def run_jobs(s, tmp_path):
    """The scripted timeline; returns {name: job id}."""
    alice = s.create_token("alice", "user")
    bob = s.create_token("bob", "user")
    ids = {}
    ids["whole"] = s.submit(job_yaml(
        "whole", ["/bin/true"], resources={"gpus": 1},
        placement=on("on_demand")), token=alice)
    # Two halves of one GPU, both held until both run.
    gate = tmp_path / "halves"
    hold = f"touch {gate}.$KILN_JOB_ID; until [ $(ls {gate}.* | wc -l) = 2 ]; " \
           "do sleep 0.05; done"
    for n in ("half1", "half2"):
        ids[n] = s.submit(job_yaml(n, ["/bin/sh", "-c", hold],
                                   resources={"gpus": 0.5},
                                   placement=on("on_demand")), token=bob)
    ids["fails"] = s.submit(job_yaml(
        "fails", ["/bin/sh", "-c", "exit 3"], resources={"gpus": 1},
        retries=0, placement=on("on_demand")), token=bob)
    ids["slice"] = s.submit(job_yaml(
        "slice", ["/bin/true"], resources={"gpus": "mig:1g.10gb"},
        placement={"selector": {"sku": "Test_G1"}}), token=alice)
    ids["unpriced"] = s.submit(job_yaml(
        "unpriced", ["/bin/true"], resources={"gpus": 1},
        placement={"selector": {"sku": "Nope_X"}}), token=bob)
    # Checkpoints, is preempted, resumes and ends.
    ready = tmp_path / "ckpt-ready"
    script = ('if [ -n "$KILN_RESUME_FROM" ]; then exit 0; fi; ' + COMMIT +
              f'touch {ready}; sleep 300 & wait')
    ids["preempted"] = s.submit(job_yaml(
        "preempted", ["/bin/sh", "-c", script], resources={"gpus": 2},
        preemptible=True, checkpoint={"grace": "5s"},
        placement=on("spot")), token=alice)
    wait_for(lambda: ready.exists(), what="the checkpoint")
    synced = (s.home / "blobs" / str(ids["preempted"]) / "checkpoints" /
              "step-1" / "MANIFEST.json")
    wait_for(lambda: synced.exists(), what="the checkpoint synced")
    r = s.request("POST", f"/v1/jobs/{ids['preempted']}/evict",
                  params={"grace": "2s"})
    assert r.status_code == 200, r.text
    for name, jid in ids.items():
        s.wait_state(jid, "failed" if name == "fails" else "succeeded")
    return ids


def overlap(a0, a1, b0, b1):
    return max(0, min(a1, b1) - max(a0, b0))


def day_of(ms):
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d")


def day_pieces(start, end):
    """[start, end) cut at UTC midnights: [(day, ms), ...]."""
    out = []
    while start < end:
        stop = min(end, (start // MS_PER_DAY + 1) * MS_PER_DAY)
        out.append((day_of(start), stop - start))
        start = stop
    return out


def expected(detail, by):
    """Dollars per key and in total, from the recorded timeline alone."""
    since, until = detail["since_ms"], detail["until_ms"]
    price = {n["name"]: n["gpu_usd_hr"] or 0.0 for n in detail["nodes"]}
    gpus = {n["name"]: n["gpus"] for n in detail["nodes"]}
    rows = defaultdict(lambda: defaultdict(float))
    total = defaultdict(float)

    def add(key, part, node, gpu_share, start, end):
        start, end = max(start, since), min(end, until)
        for day, ms in day_pieces(start, end):
            usd = gpu_share * ms / 3600000 * price[node]
            k = day if by == "day" else key
            if k is not None:
                rows[k][part] += usd
            total[part] += usd

    allocs = detail["allocations"]
    for a in allocs:
        share = a["n_devices"] * a["milli_per_device"] / 1000
        end = a["end_ms"] or until
        key = {"job": str(a["job"]), "user": a["user"],
               "deployment": a["deployment"] or "", "node": a["node"],
               "day": None}[by]
        add(key, "cost", a["node"], share, a["start_ms"], end)
        if a["lost"]:
            start = max(a["start_ms"], a["checkpoint_ms"])
            add(key, "lost", a["node"], share, start, end)
    for iv in detail["intervals"]:
        node, end = iv["node"], iv["end_ms"] or until
        part = "unhealthy" if iv["state"] == "unhealthy" else "idle"
        key = node if by == "node" else None
        # Idle: the node's GPUs less what allocations held, piece by day.
        for day, _ in day_pieces(max(iv["start_ms"], since), min(end, until)):
            d0 = max(iv["start_ms"], since,
                     int(datetime.strptime(day, "%Y-%m-%d").replace(
                         tzinfo=timezone.utc).timestamp() * 1000))
            d1 = min(end, until, d0 - d0 % MS_PER_DAY + MS_PER_DAY)
            held = sum(a["n_devices"] * a["milli_per_device"] / 1000 *
                       overlap(a["start_ms"], a["end_ms"] or until, d0, d1)
                       for a in allocs if a["node"] == node)
            gpu_ms = gpus[node] * (d1 - d0) - held
            usd = gpu_ms / 3600000 * price[node]
            k = day if by == "day" else key
            if k is not None:
                rows[k][part] += usd
            total[part] += usd
    return rows, total


def same(got, want):
    """Equal to the cent (both sides sum the same milliseconds; the
    tolerance is far below a cent, far above float rounding)."""
    return abs(got - want) < 0.001


def cost(s, **params):
    r = s.request("GET", "/v1/cost", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def iso(ms):
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def test_cost_ledger_by_every_dimension(priced, tmp_path):
    s = priced
    t0 = int(time.time()) * 1000 - 1000  # whole seconds: the CLI's --since
    ids = run_jobs(s, tmp_path)
    until = int(time.time()) * 1000 + 2000
    window = {"since": t0, "until": until}

    detail = cost(s, by="node", detail=1, **window)
    nodes = {n["name"]: n for n in detail["nodes"]}
    assert nodes["od"]["gpu_usd_hr"] == 36000 and nodes["od"]["pricing"] == "on_demand"
    assert nodes["sp"]["gpu_usd_hr"] == 9000 and nodes["sp"]["pricing"] == "spot"
    assert nodes["mg"]["gpu_usd_hr"] == 25200
    assert nodes["unk"]["gpu_usd_hr"] is None and not nodes["unk"]["priced"]
    assert detail["unpriced_nodes"] == ["unk"]
    allocs = {a["job"]: a for a in detail["allocations"] if a["attempt"] == 1}
    # What was recorded: shares, a MIG slice's fraction (1 of 7 compute
    # slices), the preempted attempt's checkpoint, the failed attempt.
    assert allocs[ids["half1"]]["milli_per_device"] == 500
    assert allocs[ids["slice"]]["milli_per_device"] == 143
    assert allocs[ids["slice"]]["node"] == "mg"
    pre = allocs[ids["preempted"]]
    assert pre["lost"] and pre["node"] == "sp" and pre["n_devices"] == 2
    assert pre["start_ms"] < pre["checkpoint_ms"] < pre["end_ms"]
    assert allocs[ids["fails"]]["lost"] and allocs[ids["fails"]]["checkpoint_ms"] == 0
    assert not allocs[ids["whole"]]["lost"]
    assert allocs[ids["preempted"]]["user"] == "alice"
    assert {iv["node"] for iv in detail["intervals"]} == {"od", "sp", "mg", "unk"}

    for by in ("job", "user", "deployment", "node", "day"):
        api = cost(s, by=by, **window)
        rows, total = expected(detail, by)
        got = {r["key"]: r for r in api["rows"]}
        assert set(got) == set(rows), by
        for key, want in rows.items():
            assert same(got[key]["cost_usd"], want["cost"]), (by, key)
            assert same(got[key]["lost_cost_usd"], want["lost"]), (by, key)
            assert same(got[key]["idle_cost_usd"], want["idle"]), (by, key)
        t = api["total"]
        assert same(t["cost_usd"], total["cost"]), by
        assert same(t["lost_cost_usd"], total["lost"]), by
        assert same(t["idle_cost_usd"], total["idle"]), by
        assert same(t["total_cost_usd"],
                    total["cost"] + total["idle"] + total["unhealthy"]), by
        assert same(sum(r["cost_usd"] for r in api["rows"]), t["cost_usd"])
        # Cents at these prices: a millisecond or a share wrong shows.
        assert t["cost_usd"] > 0.1 and t["lost_cost_usd"] > 0.01
        # No task asked for CPU or memory or declared simulated GPU use.
        assert t["efficiency"] is None

        # The CLI: json is the server's answer, csv its numbers, table its
        # keys and total to the cent.
        args = ["cost", "--by", by, "--since", iso(t0), "--until", iso(until)]
        j = s.cli(*args, "-o", "json", check=True)
        assert json.loads(j.stdout)["rows"] == api["rows"]
        c = s.cli(*args, "-o", "csv", check=True)
        lines = list(csv.DictReader(io.StringIO(c.stdout)))
        assert [x[by] for x in lines] == [r["key"] for r in api["rows"]] + ["total"]
        for line, r in zip(lines, api["rows"] + [t]):
            assert abs(float(line["cost_usd"]) - r["cost_usd"]) < 1e-5
            assert line["unpriced"] == ("true" if r["unpriced"] else "false")
        tab = s.cli(*args, check=True).stdout
        assert tab.splitlines()[0].startswith(by.upper())
        assert f"${t['total_cost_usd']:.2f}*" in tab  # unk is unpriced

    by_node = {r["key"]: r for r in cost(s, by="node", **window)["rows"]}
    assert by_node["unk"]["unpriced"] and by_node["unk"]["cost_usd"] == 0
    assert by_node["unk"]["gpu_seconds"] > 0
    assert not by_node["od"]["unpriced"]
    by_job = {r["key"]: r for r in cost(s, by="job", **window)["rows"]}
    # Lost work: the preempted attempt after its checkpoint, all of the
    # failed one; goodput below 1 for both, 1 for the others.
    assert 0 < by_job[str(ids["preempted"])]["goodput"] < 1
    assert by_job[str(ids["fails"])]["goodput"] == 0
    assert by_job[str(ids["whole"])]["goodput"] == 1
    table = s.cli("cost", "--by", "node", "--since", iso(t0), "--until",
                  iso(until), check=True).stdout
    assert "unpriced: no size or price in the catalog for node unk" in table

    check_reservations(s, ids, detail, window)

    chart = tmp_path / "cost.svg"
    s.cli("cost", "--since", iso(t0), "--until", iso(until), "--chart",
          str(chart), check=True)
    root = ET.parse(chart).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    days = cost(s, by="day", **window)["rows"]
    bars = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(b.startswith(days[0]["key"] + " useful $") for b in bars if b)


def check_reservations(s, ids, detail, window):
    r = s.request("GET", "/v1/cost/reservations", params=window)
    assert r.status_code == 200, r.text
    adv = r.json()
    skus = {x["sku"]: x for x in adv["skus"]}
    assert set(skus) == {"Test_G2", "Test_G1", "Nope_X"}
    g2 = skus["Test_G2"]
    assert sorted(g2["nodes"]) == ["od", "sp"]
    # Break-even: reserved over on-demand price, from the fixture.
    assert g2["break_even_1y"] == 54000 / 72000
    assert g2["break_even_3y"] == 36000 / 72000
    # Utilisation: busy over up GPU time of od and sp, from the record.
    since, until = window["since"], window["until"]
    busy = sum(a["n_devices"] * a["milli_per_device"] / 1000 *
               overlap(a["start_ms"], a["end_ms"] or until, since, until)
               for a in detail["allocations"] if a["node"] in ("od", "sp"))
    up = sum(2 * overlap(iv["start_ms"], iv["end_ms"] or until, since, until)
             for iv in detail["intervals"] if iv["node"] in ("od", "sp"))
    assert abs(g2["utilisation"] - busy / up) < 1e-6
    assert g2["pays_off_1y"] == (busy / up >= 0.75)
    assert skus["Nope_X"]["on_demand_usd_hr"] is None
    assert not skus["Nope_X"]["pays_off_1y"]
    spot = {x["job"]: x for x in adv["spot_candidates"]}
    assert set(spot) == {ids["preempted"]}  # preemptible and checkpointing
    pre = [a for a in detail["allocations"] if a["job"] == ids["preempted"]]
    assert spot[ids["preempted"]]["on_spot"]
    assert spot[ids["preempted"]]["longest_unsaved_ms"] == max(
        a["end_ms"] - max(a["start_ms"], a["checkpoint_ms"]) for a in pre)
    assert spot[ids["preempted"]]["checkpoint_every_ms"] == 600000
    out = s.cli("cost", "--reservations", "--since", iso(since), "--until",
                iso(until), check=True).stdout
    assert "Test_G2" in out and "75.0%" in out and "50.0%" in out
    assert "no on-demand price" in out
    assert "Safe to move to spot" in out and "preempted" in out


def test_cost_errors_and_access(priced):
    s = priced
    r = s.request("GET", "/v1/cost", params={"by": "team"})
    assert r.status_code == 400 and "by" in r.json()["error"]["message"]
    r = s.request("GET", "/v1/cost", params={"since": 10, "until": 5})
    assert r.status_code == 400
    assert s.request("GET", "/v1/cost", token=None).status_code == 401
    viewer = s.create_token("watcher", "viewer")
    assert s.request("GET", "/v1/cost", token=viewer).status_code == 200
    res = s.cli("cost", "--by", "team")
    assert res.returncode == 2 and "--by" in res.stderr
    res = s.cli("cost", "--since", "yesterday")
    assert res.returncode == 2 and "--since" in res.stderr
    res = s.cli("cost", "-o", "xml")
    assert res.returncode == 2 and "csv" in res.stderr
    res = s.cli("cost", "-o", "yaml")
    assert res.returncode == 0, res.stderr
    res = s.cli("cost", "--reservations", "-o", "csv")
    assert res.returncode == 2 and "--reservations" in res.stderr


def test_bad_pricing_label_or_catalog_is_refused(tmp_path):
    s = Server(tmp_path / "home", gpus=None,
               extra=["--sim-node", "x 1xH100-80GB sku=Test_G2 pricing=cheap"])
    s.home.mkdir()
    with pytest.raises(AssertionError) as e:
        s.start()
    assert "pricing" in str(e.value) and "cheap" in str(e.value)
    bad = tmp_path / "bad.csv"
    bad.write_text(CATALOG.replace(",72000,", ",lots,"))
    s = Server(tmp_path / "home2", extra=["--catalog", str(bad)])
    s.home.mkdir()
    with pytest.raises(AssertionError) as e:
        s.start()
    assert f"{bad}:2:" in str(e.value) and "payg_linux_usd_hr" in str(e.value)
    res = subprocess.run([KILN, "server", "--node-pricing", "cheap"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "--node-pricing" in res.stderr


def test_local_node_priced_by_flags(tmp_path):
    cat = tmp_path / "catalog.csv"
    cat.write_text(CATALOG)
    s = Server(tmp_path / "home", gpus="2xH100-80GB",
               extra=["--node-name", "me", "--node-sku", "Test_G2",
                      "--node-pricing", "spot", "--catalog", str(cat),
                      "--health-interval", "0"])
    s.home.mkdir()
    s.start()
    try:
        jid = s.submit(job_yaml("one", ["/bin/true"], resources={"gpus": 1}))
        s.wait_state(jid, "succeeded")
        c = cost(s, by="node", detail=1)
        assert c["nodes"] == [{"name": "me", "sku": "Test_G2",
                               "pricing": "spot", "gpus": 2,
                               "gpu_usd_hr": 9000.0, "priced": True}]
        assert c["unpriced_nodes"] == []
        a = c["allocations"][0]
        assert a["job"] == jid and a["node"] == "me"
        row = c["rows"][0]
        assert same(row["cost_usd"],
                    (a["end_ms"] - a["start_ms"]) / 3600000 * 9000)
        assert not row["unpriced"]
    finally:
        s.stop()


def test_deployment_replicas_keep_their_deployment(tmp_path):
    """A replica restarted by a rollout runs as a new job; the old job's
    GPU time stays the deployment's."""
    from test_deployments import deploy, deployment_yaml, detail, wait_ready
    cat = tmp_path / "catalog.csv"
    cat.write_text(CATALOG)
    s = Server(tmp_path / "home", gpus="2xH100-80GB",
               extra=["--node-sku", "Test_G2", "--catalog", str(cat),
                      "--health-interval", "0"])
    s.home.mkdir()
    s.start()
    try:
        deploy(s, deployment_yaml("chat", replicas=1,
                                  extra="resources: {gpus: 1}\n"))
        first = detail(s, "chat")["replicas"][0]["job"]
        wait_ready(s, "chat", 1)
        r = s.request("POST", "/v1/deployments/chat/restart")
        assert r.status_code == 200, r.text
        wait_for(lambda: detail(s, "chat")["rollout"] is None and
                 detail(s, "chat")["replicas"][0]["job"] != first,
                 timeout=40, what="rollout done")
        wait_ready(s, "chat", 1)
        second = detail(s, "chat")["replicas"][0]["job"]
        until = int(time.time() * 1000) + 1000
        c = cost(s, by="deployment", detail=1, since=0, until=until)
        mine = [a for a in c["allocations"] if a["deployment"] == "chat"]
        assert {a["job"] for a in mine} >= {first, second}
        want = sum((min(a["end_ms"] or until, until) - a["start_ms"]) /
                   3600000 * 36000 for a in mine)
        rows = {x["key"]: x for x in c["rows"]}
        assert same(rows["chat"]["cost_usd"], want) and want > 0
        assert s.request("DELETE", "/v1/deployments/chat").status_code == 200
    finally:
        s.stop()
        kill_processes_under(s.home)
