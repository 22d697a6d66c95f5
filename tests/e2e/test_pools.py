"""Node pools and the autoscaler with the sim provider (kiln server --pool):
a burst grows a pool by what fits and its jobs run, preemptible work goes
to the spot pool, idle nodes go after the pool's delay and min is kept."""
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from conftest import KILN, Server, job_yaml, wait_for, kill_processes_under
from test_gateway import Gateway

POOLS = ["--pool", "gpu Standard_NC24ads_A100_v4 1xA100-80GB max=3 "
                   "scale-down-delay=1s zones=a,b team=ml",
         "--pool", "cheap Standard_NC24ads_A100_v4 1xA100-80GB spot min=0 "
                   "max=2 scale-down-delay=1s"]


@pytest.fixture
def pooled(tmp_path):
    s = Server(tmp_path / "home", gpus=None,
               extra=POOLS + ["--health-interval", "0"])
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    kill_processes_under(s.home)


def pools(server):
    r = server.request("GET", "/v1/pools")
    assert r.status_code == 200, r.text
    return {p["name"]: p for p in r.json()["pools"]}


def node_names(server):
    r = server.request("GET", "/v1/nodes")
    assert r.status_code == 200, r.text
    return sorted(n["name"] for n in r.json()["nodes"])


def waiting_job(name, flag, preemptible=False):
    script = f'while [ ! -e {flag} ]; do sleep 0.1; done'
    return job_yaml(name, ["/bin/sh", "-c", script],
                    resources={"gpus": 1}, preemptible=preemptible)


def test_burst_scales_up_spot_for_preemptible_idle_nodes_go(pooled, tmp_path):
    start = pools(pooled)
    # min 1 by default for a GPU pool; min=0 starts none.
    assert start["gpu"]["current"] == 1 and start["cheap"]["current"] == 0
    assert start["gpu"]["pricing"] == "on_demand"
    assert start["cheap"]["pricing"] == "spot"
    assert node_names(pooled) == ["gpu-1"]
    labels = pooled.request("GET", "/v1/nodes").json()["nodes"][0]["labels"]
    assert labels == {"pool": "gpu", "sku": "Standard_NC24ads_A100_v4",
                      "pricing": "on_demand", "zone": "a", "team": "ml"}

    flag = tmp_path / "done"
    ids = [pooled.submit(waiting_job(f"burst{i}", flag)) for i in range(3)]
    for job_id in ids:
        pooled.wait_state(job_id, "running")
    now = pools(pooled)
    # Three 1-GPU jobs on 1-GPU nodes: the on-demand pool grew by two,
    # not the cheaper spot pool (the jobs are not preemptible).
    assert now["gpu"]["current"] == 3, now
    assert now["cheap"]["current"] == 0, now
    assert now["gpu"]["last_decision"]["why"].startswith("+"), now
    nodes = {pooled.job(i)["attempts_detail"][-1]["tasks"][0]["node"]
             for i in ids}
    assert nodes == {"gpu-1", "gpu-2", "gpu-3"}

    # A preemptible job goes to the spot pool.
    spot_id = pooled.submit(waiting_job("spotty", flag, preemptible=True))
    pooled.wait_state(spot_id, "running")
    assert pooled.job(spot_id)["attempts_detail"][-1]["tasks"][0]["node"] \
        == "cheap-1"
    assert "preemptible" in pools(pooled)["cheap"]["last_decision"]["why"]

    # A 2-GPU job fits no pool's node: it is named, nothing grows.
    big = pooled.submit(job_yaml("big", ["/bin/true"],
                                 resources={"gpus": 2}))
    blocked = wait_for(
        lambda: pooled.request("GET", "/v1/pools").json()["blocked"],
        what="a blocked job")
    assert f"job {big} " in blocked
    pooled.request("POST", f"/v1/jobs/{big}/cancel")

    out = pooled.cli("pools", check=True).stdout
    assert "pool gpu: Standard_NC24ads_A100_v4 x 1xA100-80GB" in out
    assert "3 up" in out and "gpu-3" in out

    flag.write_text("")
    for job_id in ids + [spot_id]:
        pooled.wait_state(job_id, "succeeded")
    # Idle longer than 1 s: gone, down to min (1 and 0).
    wait_for(lambda: (lambda p: p["gpu"]["current"] == 1
                      and p["cheap"]["current"] == 0)(pools(pooled)),
             what="idle nodes to be removed")
    after = pools(pooled)
    assert "min 1" in after["gpu"]["last_decision"]["why"]
    assert len(node_names(pooled)) == 1
    audit = pooled.request("GET", "/v1/audit").json()
    actions = {a["action"] for a in audit["audit"]}
    assert {"pool.scale_up", "pool.scale_down", "node.remove"} <= actions

    # The cost ledger still prices the removed nodes' time.
    cost = pooled.request("GET", "/v1/cost", params={"by": "node"})
    assert cost.status_code == 200, cost.text
    assert "gpu-2" in cost.text


@pytest.mark.parametrize("spec,words", [
    ("gpu", "want \"NAME SKU GPUS"),
    ("g@ SKU 1xA100-80GB", "name:"),
    ("gpu SKU 1xA100-80GB min=3 max=2", "max:"),
    ("gpu SKU 1xA100-80GB min=x", "min:"),
    ("gpu SKU 1xA100-80GB scale-down-delay=soon", "scale-down-delay:"),
    ("gpu SKU A100", "GPUS:"),
    ("gpu SKU 1xA100-80GB pool=x", "label pool="),
    ("gpu SKU 1xA100-80GB min=0", "no node"),
])
def test_bad_pool_is_refused_naming_the_field(tmp_path, spec, words):
    home = tmp_path / "home"
    res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                          "--home", str(home), "--pool", spec],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert words in res.stderr, res.stderr


FIXTURE = Path(__file__).resolve().parent / "fixtures" / "pool_provider.sh"


def test_command_provider_provisions_without_overshoot_and_deletes(tmp_path):
    gate, protect = tmp_path / "gate", tmp_path / "protect"
    log = tmp_path / "calls.log"
    env = dict(os.environ, POOL_FIXTURE_LOG=str(log),
               POOL_FIXTURE_GATE=str(gate), POOL_FIXTURE_PROTECT=str(protect))
    s = Server(tmp_path / "home", gpus=None, env=env, extra=[
        "--health-interval", "0", "--sim-node", "base 1xT4-16GB",
        "--pool", f"cmd Standard_NC48ads_A100_v4 2xA100-80GB min=0 max=3 "
                  f"provider=command command={FIXTURE} scale-down-delay=1s"])
    s.home.mkdir()
    s.start()
    try:
        flag = tmp_path / "done"
        script = f'while [ ! -e {flag} ]; do sleep 0.1; done'
        spec = job_yaml("a100", ["/bin/sh", "-c", script],
                        resources={"gpus": 1, "gpu_model": ["A100"]})
        first = s.submit(spec)
        # The script runs and waits at the gate: one node provisioning.
        wait_for(lambda: pools(s)["cmd"]["provisioning"] == 1,
                 what="a node being provisioned")
        p = pools(s)["cmd"]
        assert p["provider"] == "command"
        assert p["current"] == 0 and p["desired"] == 1
        # A second job fits the node that is coming: nothing more asked.
        second = s.submit(spec)
        wait_for(lambda: s.job(second)["reason"], what="job 2 to wait")
        gate.write_text("")
        for job_id in (first, second):
            s.wait_state(job_id, "running")
            assert s.job(job_id)["attempts_detail"][-1]["tasks"][0]["node"] \
                == "cmd-1"
        calls = log.read_text().splitlines()
        assert calls == ["scale-up cmd 1 cmd-1 sku=Standard_NC48ads_A100_v4 "
                         "pricing=on_demand gpus=2xA100-80GB"], calls

        # Idle: the provider is asked to delete it; a failure leaves the
        # node in the pool, named in the decision and the audit log.
        protect.write_text("")
        flag.write_text("")
        wait_for(lambda: "protected" in ((pools(s)["cmd"]["last_error"]
                                          or {}).get("why", "")),
                 what="the failed delete")
        assert "-1: idle" in pools(s)["cmd"]["last_decision"]["why"]
        assert [n["name"] for n in pools(s)["cmd"]["nodes"]] == ["cmd-1"]
        audit = s.request("GET", "/v1/audit").json()["audit"]
        assert any(a["action"] == "node.remove" and a["outcome"] == "failed"
                   for a in audit)
        protect.unlink()
        wait_for(lambda: pools(s)["cmd"]["current"] == 0,
                 what="the idle node deleted")
        assert "delete cmd cmd-1" in log.read_text()
        assert node_names(s) == ["base"]
    finally:
        s.stop()
        kill_processes_under(s.home)


MODEL_SERVER = Path(__file__).resolve().parent / "fixtures" / "model_server.py"
HEALTH_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def serving(server, name):
    """Each ready replica's address, from the server."""
    dep = server.request("GET", f"/v1/deployments/{name}").json()["deployment"]
    return [rep["address"] for rep in dep["replicas"]
            if rep.get("ready") and rep.get("address")]


def test_rolling_drain_keeps_a_deployment_serving_and_stops_at_bad_health(
        tmp_path):
    root = tmp_path / "root"
    shutil.copytree(HEALTH_FIXTURES / "node-basic", root)
    log = tmp_path / "patched"
    env = dict(os.environ, KILN_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    env.pop("KILN_SKU", None)
    s = Server(tmp_path / "home", gpus=None, env=env, extra=[
        "--health-interval", "0", "--health-root", str(root),
        "--pool", "web Standard_NC24ads_A100_v4 1xA100-80GB min=3 max=3 "
                  "scale-down-delay=1h"])
    s.home.mkdir()
    s.start()
    try:
        r = s.request("POST", "/v1/deployments", params={"file": "d.yaml"},
                      data=(f"kind: Deployment\nname: chat\nmodel: /tmp\n"
                            f"command: [\"/usr/bin/python3\", \"{MODEL_SERVER}\"]\n"
                            "env: {READY_DELAY_S: \"0.1\"}\nreplicas: 2\n"
                            "resources: {gpus: 1}\n"
                            "readiness: {path: /health, period_s: 0.1}\n"))
        assert r.status_code in (200, 201), r.text
        wait_for(lambda: len(serving(s, "chat")) == 2, timeout=30,
                 what="2 ready replicas")
        # The replicas hold two nodes: the third is free for a move.
        free = ({"web-1", "web-2", "web-3"} - {
            rep["node"] for rep in s.request(
                "GET", "/v1/deployments/chat").json()["deployment"]["replicas"]})
        assert len(free) == 1
        # web-2's patch breaks the machine: its health checks fail after.
        patch = (f'echo "$KILN_POOL $KILN_NODE" >> {log}; '
                 f'if [ "$KILN_NODE" = web-2 ]; then cp '
                 f'{HEALTH_FIXTURES}/node-faulty/dev/kmsg {root}/dev/kmsg; fi')
        res = s.cli("drain", "--rolling", "web", "--command", patch,
                    "--no-wait", check=True)
        assert "rolling maintenance of pool web started (3 nodes)" in res.stdout

        # Throughout, some ready replica answers.
        answered = 0
        while True:
            rolling = s.request("GET", "/v1/pools/web/rolling").json()["rolling"]
            ok = 0
            for addr in serving(s, "chat"):
                try:
                    if requests.get(f"http://{addr}/", timeout=2).ok:
                        ok += 1
                except requests.ConnectionError:
                    pass
            assert ok >= 1, rolling
            answered += 1
            if rolling["state"] != "running":
                break
        assert answered > 1
        assert rolling["state"] == "failed", rolling
        assert rolling["node"] == "web-2" and rolling["done"] == ["web-1"]
        assert "web-2 failed its health checks" in rolling["error"]
        assert "kernel_xid" in rolling["error"]
        assert log.read_text().splitlines() == ["web web-1", "web web-2"]
        nodes = {n["name"]: n for n in
                 s.request("GET", "/v1/nodes").json()["nodes"]}
        assert nodes["web-1"]["state"] == "ready"
        assert nodes["web-2"]["state"] == "draining"
        assert nodes["web-3"]["state"] == "ready"
        # No replica is left on the broken node; both serve.
        reps = s.request("GET", "/v1/deployments/chat").json()["deployment"][
            "replicas"]
        assert "web-2" not in {rep["node"] for rep in reps}
        wait_for(lambda: len(serving(s, "chat")) == 2, timeout=30,
                 what="2 ready replicas after the drain")
        out = s.cli("pools", check=True).stdout
        assert "rolling: failed" in out
        audit = s.request("GET", "/v1/audit").json()["audit"]
        assert any(a["action"] == "pool.rolling.end" and
                   a["outcome"] == "failed" for a in audit)
        # A second one may start once this one is over; a bad body is named.
        bad = s.request("POST", "/v1/pools/web/rolling", json={})
        assert bad.status_code == 400 and "command" in bad.text
        s.request("DELETE", "/v1/deployments/chat")
    finally:
        s.stop()
        kill_processes_under(s.home)


def one_replica(name):
    return (f"kind: Deployment\nname: {name}\nmodel: /tmp\n"
            f"command: [\"/usr/bin/python3\", \"{MODEL_SERVER}\"]\n"
            "env: {READY_DELAY_S: \"0.1\"}\nreplicas: 1\n"
            "resources: {gpus: 1}\n"
            "readiness: {path: /health, period_s: 0.1}\n")


def replicas(server, name):
    return server.request("GET", f"/v1/deployments/{name}").json()[
        "deployment"]["replicas"]


def active_jobs(server):
    jobs = server.request("GET", "/v1/jobs").json()["jobs"]
    return [j for j in jobs if j["state"] in ("queued", "running")]


class Caller(threading.Thread):
    """Calls the deployment through the gateway until told to stop,
    keeping every answer's replica job and every failure."""

    def __init__(self, gateway, secret, model):
        super().__init__(daemon=True)
        self.gateway, self.secret, self.model = gateway, secret, model
        self.jobs, self.failures = [], []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                r = self.gateway.call(self.secret, self.model)
                if r.status_code == 200:
                    self.jobs.append(r.json()["kiln_replica"]["job"])
                else:
                    self.failures.append(f"{r.status_code} {r.text}")
            except requests.RequestException as e:
                self.failures.append(repr(e))


def test_rolling_drain_surges_so_one_replica_never_stops_answering(tmp_path):
    s = Server(tmp_path / "home", gpus=None, extra=[
        "--health-interval", "0", "--pool",
        "web Standard_NC24ads_A100_v4 1xA100-80GB min=2 max=2 "
        "scale-down-delay=1h"])
    s.home.mkdir()
    s.start()
    gateway = Gateway(s.home, ["--refresh", "200ms"])
    caller = None
    try:
        r = s.request("POST", "/v1/deployments", params={"file": "d.yaml"},
                      data=one_replica("chat"))
        assert r.status_code in (200, 201), r.text
        wait_for(lambda: len(serving(s, "chat")) == 1, timeout=30,
                 what="the replica ready")
        (first,) = replicas(s, "chat")
        res = s.cli("key", "create", "--name", "app", "--deployments",
                    "chat", check=True)
        secret = res.stdout.strip().split()[-1]
        gateway.start()
        wait_for(lambda: gateway.call(secret, "chat").status_code == 200,
                 what="the gateway to route chat")
        caller = Caller(gateway, secret, "chat")
        caller.start()
        wait_for(lambda: caller.jobs, what="a first answer")

        res = s.cli("drain", "--rolling", "web", "--command", "true",
                    check=True, timeout=120)
        assert "pool web: every node maintained" in res.stdout
        caller.done.set()
        caller.join(timeout=60)
        # Every call was answered, first by the replica there was, last
        # by the one that replaced it (twice: each node had its turn).
        assert caller.failures == []
        (last,) = replicas(s, "chat")
        assert caller.jobs[0] == str(first["job"])
        assert caller.jobs[-1] == str(last["job"])
        assert last["job"] != first["job"] and last["ready"]
        # The count is the spec's again: one replica, one job.
        assert [j["id"] for j in active_jobs(s)] == [last["job"]]
        rolling = s.request("GET", "/v1/pools/web/rolling").json()["rolling"]
        assert rolling["state"] == "succeeded", rolling
        assert rolling["waiting"] is None and rolling["surge_timeout_s"] == 600
        s.request("DELETE", "/v1/deployments/chat")
    finally:
        if caller:
            caller.done.set()
        gateway.stop()
        s.stop()
        kill_processes_under(s.home)


def test_a_surge_with_no_room_waits_visibly_then_times_out(tmp_path):
    s = Server(tmp_path / "home", gpus=None, extra=[
        "--health-interval", "0", "--pool",
        "solo Standard_NC24ads_A100_v4 1xA100-80GB min=1 max=1 "
        "scale-down-delay=1h"])
    s.home.mkdir()
    s.start()
    try:
        r = s.request("POST", "/v1/deployments", params={"file": "d.yaml"},
                      data=one_replica("chat"))
        assert r.status_code in (200, 201), r.text
        wait_for(lambda: len(serving(s, "chat")) == 1, timeout=30,
                 what="the replica ready")
        (first,) = replicas(s, "chat")
        # No node and no pool can hold a second replica: the rolling waits
        # and says on what, in its state and in `kiln pools`.
        s.cli("drain", "--rolling", "solo", "--command", "true",
              "--surge-timeout", "1h", "--no-wait", check=True)
        rolling = wait_for(lambda: (lambda r: r if r["waiting"] else None)(
            s.request("GET", "/v1/pools/solo/rolling").json()["rolling"]),
            what="the rolling to wait on its surge replica")
        assert rolling["state"] == "running" and rolling["node"] == "solo-1"
        assert rolling["surge_timeout_s"] == 3600
        assert "surge replica of deployment chat" in rolling["waiting"]
        assert "queued" in rolling["waiting"], rolling
        out = s.cli("pools", check=True).stdout
        assert "waiting: the surge replica of deployment chat" in out
        # Deleting the deployment ends the wait: nothing is left to move.
        s.request("DELETE", "/v1/deployments/chat")
        wait_for(lambda: s.request("GET", "/v1/pools/solo/rolling").json()[
            "rolling"]["state"] == "succeeded", what="the rolling to end")
        assert active_jobs(s) == []

        # Again, with a short --surge-timeout: that node fails, it stays
        # cordoned, the old replica serves on, and no surge job is left.
        r = s.request("POST", "/v1/deployments", params={"file": "d.yaml"},
                      data=one_replica("chat"))
        assert r.status_code in (200, 201), r.text
        wait_for(lambda: len(serving(s, "chat")) == 1, timeout=30,
                 what="the replica ready again")
        (first,) = replicas(s, "chat")
        res = s.cli("drain", "--rolling", "solo", "--command", "true",
                    "--surge-timeout", "1s", timeout=120)
        assert res.returncode == 1, res.stdout + res.stderr
        assert "node solo-1: no surge replica served within " \
               "--surge-timeout 1s" in res.stdout
        assert "stays cordoned" in res.stdout
        assert "solo-1: moving replicas: the surge replica of deployment " \
               "chat" in res.stdout
        nodes = {n["name"]: n["state"] for n in
                 s.request("GET", "/v1/nodes").json()["nodes"]}
        assert nodes["solo-1"] == "cordoned"
        (still,) = replicas(s, "chat")
        assert still["job"] == first["job"] and still["ready"]
        assert [j["id"] for j in active_jobs(s)] == [first["job"]]
        bad = s.request("POST", "/v1/pools/solo/rolling",
                        json={"command": "true", "surge_timeout_s": 0})
        assert bad.status_code == 400 and "surge_timeout_s" in bad.text
        s.request("DELETE", "/v1/deployments/chat")
    finally:
        s.stop()
        kill_processes_under(s.home)


def test_pool_nodes_and_their_tasks_survive_a_restart(tmp_path):
    s = Server(tmp_path / "home", gpus=None, extra=[
        "--health-interval", "0", "--pool",
        "gpu Standard_NC24ads_A100_v4 1xA100-80GB max=3 scale-down-delay=1h"])
    s.home.mkdir()
    s.start()
    try:
        flag = tmp_path / "done"
        ids = [s.submit(waiting_job(f"long{i}", flag)) for i in range(2)]
        where = {}
        for job_id in ids:
            s.wait_state(job_id, "running")
            where[job_id] = s.job(job_id)["attempts_detail"][-1]["tasks"][0][
                "node"]
        assert sorted(where.values()) == ["gpu-1", "gpu-2"]
        s.request("POST", "/v1/nodes/gpu-2/cordon")
        s.kill9()
        s.start()
        # Both nodes come back (gpu-2 still cordoned), each task where it
        # ran; the next node is gpu-3, not a second gpu-2.
        p = pools(s)["gpu"]
        assert {n["name"]: n["state"] for n in p["nodes"]} == {
            "gpu-1": "ready", "gpu-2": "cordoned"}
        for job_id in ids:
            job = s.job(job_id)
            assert job["state"] == "running"
            assert job["attempts_detail"][-1]["tasks"][0]["node"] == \
                where[job_id]
        third = s.submit(waiting_job("third", flag))
        s.wait_state(third, "running")
        assert s.job(third)["attempts_detail"][-1]["tasks"][0]["node"] == \
            "gpu-3"
        flag.write_text("")
        for job_id in ids + [third]:
            s.wait_state(job_id, "succeeded")
    finally:
        s.stop()
        kill_processes_under(s.home)
