"""Several simulated nodes in one server (kiln server --sim-node): jobs are
placed, accounted, cordoned, drained and re-adopted per node, and a
deployment's replicas spread over the nodes' zones."""
import json
import subprocess
from pathlib import Path

import pytest

from conftest import KILN, Server, job_yaml, wait_for, kill_processes_under
from test_scheduled_events import Imds

MODEL_SERVER = Path(__file__).resolve().parent / "fixtures" / "model_server.py"
SIM_NODES = ["--sim-node", "na 2xH100-80GB zone=a fault_domain=0",
             "--sim-node", "nb 2xH100-80GB zone=b fault_domain=1",
             "--sim-node", "nc 2xH100-80GB zone=c fault_domain=0"]


@pytest.fixture
def multi(tmp_path):
    s = Server(tmp_path / "home", gpus=None, extra=SIM_NODES)
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    kill_processes_under(s.home)


def nodes(server):
    r = server.request("GET", "/v1/nodes")
    assert r.status_code == 200, r.text
    return {n["name"]: n for n in r.json()["nodes"]}


def task(server, job_id):
    """The running attempt's only task, once it is running."""
    job = server.wait_state(job_id, "running")
    return job["attempts_detail"][-1]["tasks"][0]


def allocated(server):
    return {name: [d["allocated_milli"] for d in n["devices"]]
            for name, n in nodes(server).items()}


def gpu_job(name, gpus, preemptible=False):
    script = 'echo "visible=$CUDA_VISIBLE_DEVICES"; exec sleep 300'
    return job_yaml(name, ["/bin/sh", "-c", script],
                    resources={"gpus": gpus}, preemptible=preemptible)


def test_jobs_are_placed_cordoned_drained_and_readopted_per_node(multi):
    listed = nodes(multi)
    assert sorted(listed) == ["na", "nb", "nc"]
    assert listed["nb"]["labels"] == {"zone": "b", "fault_domain": "1"}
    assert all(n["simulated"] and len(n["devices"]) == 2
               for n in listed.values())

    # A 2-GPU job fills one node: its task says which, and sees its GPUs.
    a = multi.submit(gpu_job("a", 2, preemptible=True))
    ta = task(multi, a)
    assert ta["node"] == "na" and ta["devices"] == [0, 1]
    wait_for(lambda: "visible=0,1" in multi.logs(a), what="a's devices")
    assert allocated(multi) == {"na": [1000, 1000], "nb": [0, 0],
                                "nc": [0, 0]}

    # A cordoned node gets no new work; the next job goes to nc.
    multi.cli("cordon", "nb", check=True)
    b = multi.submit(gpu_job("b", 2, preemptible=True))
    assert task(multi, b)["node"] == "nc"
    c = multi.submit(gpu_job("c", 1))
    wait_for(lambda: "no schedulable node" in (multi.job(c)["reason"] or "")
             or multi.job(c)["reason"], what="c's queue reason")
    assert multi.job(c)["state"] == "queued"
    multi.cli("uncordon", "nb", check=True)
    tc = task(multi, c)
    assert tc["node"] == "nb" and tc["devices"] == [0]

    # Draining nc evicts its preemptible job only; a on na keeps running.
    r = multi.cli("drain", "nc", "--reason", "maintenance", check=True)
    assert "draining" in r.stdout
    wait_for(lambda: multi.job(b)["attempts_detail"][0]["state"] ==
             "preempted", what="b to be evicted")
    assert multi.job(b)["state"] == "queued"
    assert multi.job(a)["state"] == "running"
    assert multi.job(c)["state"] == "running"
    states = {n: v["state"] for n, v in nodes(multi).items()}
    assert states == {"na": "ready", "nb": "ready", "nc": "draining"}
    assert allocated(multi) == {"na": [1000, 1000], "nb": [1000, 0],
                                "nc": [0, 0]}

    # kiln nodes shows every node with its labels and fragmentation.
    out = multi.cli("nodes", check=True).stdout
    for name, zone in (("na", "a"), ("nb", "b"), ("nc", "c")):
        assert f"node {name}:" in out
        assert f"zone={zone}" in out
    assert out.count("fragmentation") >= 3, out

    # A crash: the running tasks come back on their own nodes, the
    # allocations and the drain with them.
    multi.kill9()
    multi.start()
    assert multi.job(a)["state"] == "running"
    assert len(multi.job(a)["attempts_detail"]) == 1
    assert task(multi, a)["node"] == "na"
    assert task(multi, c)["node"] == "nb"
    assert allocated(multi) == {"na": [1000, 1000], "nb": [1000, 0],
                                "nc": [0, 0]}
    assert nodes(multi)["nc"]["state"] == "draining"
    # nc is draining and nb has one GPU free: b waits.
    assert multi.job(b)["state"] == "queued"
    multi.cli("uncordon", "nc", check=True)
    assert task(multi, b)["node"] == "nc"
    for jid in (a, b, c):
        multi.request("POST", f"/v1/jobs/{jid}/cancel")
    for jid in (a, b, c):
        multi.wait_state(jid, ("cancelled", "failed"))


def deployment_yaml(name, spread):
    env = {"READY_DELAY_S": "0.1"}
    return (f"kind: Deployment\nname: {name}\nmodel: /tmp\n"
            f"command: [\"/usr/bin/python3\", \"{MODEL_SERVER}\"]\n"
            f"env: {json.dumps(env)}\nreplicas: 3\n"
            "resources: {gpus: 1}\n" + (f"spread: {spread}\n" if spread else "")
            + "readiness: {path: /health, period_s: 0.1}\n")


def replica_zones(server, name):
    r = server.request("GET", f"/v1/deployments/{name}")
    assert r.status_code == 200, r.text
    reps = r.json()["deployment"]["replicas"]
    if not all(rep["ready"] for rep in reps):
        return None
    return reps


def deploy_ready(server, name, spread):
    r = server.request("POST", "/v1/deployments", params={"file": "d.yaml"},
                       data=deployment_yaml(name, spread))
    assert r.status_code in (200, 201), r.text
    return wait_for(lambda: replica_zones(server, name), timeout=30,
                    what=f"3 ready replicas of {name}")


def test_deployment_replicas_spread_over_zones(multi):
    # Without spread, replicas pack: two of them share a node.
    reps = deploy_ready(multi, "packed", None)
    assert len({rep["node"] for rep in reps}) < 3
    assert multi.request("DELETE", "/v1/deployments/packed"
                         ).status_code in (200, 202, 204)
    wait_for(lambda: all(m == 0 for devs in allocated(multi).values()
                         for m in devs), what="the packed replicas to stop")
    # With spread: zone, one replica per zone.
    reps = deploy_ready(multi, "chat", "zone")
    assert sorted(rep["zone"] for rep in reps) == ["a", "b", "c"]
    assert sorted(rep["node"] for rep in reps) == ["na", "nb", "nc"]
    cfg = multi.request("GET", "/v1/gateway/config").json()
    dep = [d for d in cfg["deployments"] if d["name"] == "chat"][0]
    assert sorted(rep["zone"] for rep in dep["replicas"]) == ["a", "b", "c"]
    # Re-adopted after a crash, each replica is still where it ran.
    where = {rep["job"]: rep["node"] for rep in reps}
    multi.kill9()
    multi.start()
    reps = wait_for(lambda: replica_zones(multi, "chat"), timeout=30,
                    what="the replicas after the restart")
    assert {rep["job"]: rep["node"] for rep in reps} == where
    assert [rep["restarts"] for rep in reps] == [0, 0, 0]
    assert multi.request("DELETE", "/v1/deployments/chat"
                         ).status_code in (200, 202, 204)


def test_scheduled_event_cordons_every_node(tmp_path):
    """The event is about this VM, which every simulated node runs on."""
    imds = Imds(not_before_s=20)
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, gpus=None, extra=SIM_NODES + [
        "--azure-events-url", imds.url, "--azure-vm-name", "kiln-spot-vm"])
    try:
        s.start()
        wait_for(lambda: imds.acks, what="the acknowledgement")
        states = {n["name"]: n["state"]
                  for n in s.request("GET", "/v1/nodes").json()["nodes"]}
        assert states == {"na": "cordoned", "nb": "cordoned",
                          "nc": "cordoned"}
    finally:
        s.stop()
        imds.close()


def test_sim_node_usage_errors(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"KILN_HOME": str(home), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([KILN, "server", "--gpus", "2xH100-80GB",
                          "--sim-node", "na 2xH100-80GB"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert "--sim-node" in res.stderr and "--gpus" in res.stderr
    assert "--node-labels" in res.stderr
    res = subprocess.run([KILN, "server", "--executor", "slurm",
                          "--sim-node", "na 2xH100-80GB"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "--executor local" in res.stderr
    res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                          "--sim-node", "na 2xH100-80GB",
                          "--sim-node", "nb 2xBOGUS"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert "--sim-node nb" in res.stderr, res.stderr
    res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                          "--sim-node", "na 2xH100-80GB zone"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert "zone" in res.stderr and "KEY=VALUE" in res.stderr, res.stderr


@pytest.mark.parametrize("policy,node", [(None, "na"), ("best-fit", "nb")])
def test_server_policy_picks_the_node(tmp_path, policy, node):
    """`kiln server --policy`: a half-GPU share on an idle 2-GPU node and
    an idle 1-GPU node. Best fit takes the 1-GPU node (least GPU left);
    kiln, the default, scores both the same for a workload of such shares
    and keeps the single GPU whole by node order."""
    extra = ["--sim-node", "na 2xH100-80GB", "--sim-node", "nb 1xH100-80GB"]
    if policy:
        extra += ["--policy", policy]
    s = Server(tmp_path / "home", gpus=None, extra=extra)
    s.home.mkdir()
    s.start()
    try:
        job = s.submit(job_yaml("half", ["/bin/sh", "-c", "exec sleep 300"],
                                resources={"gpus": 0.5}))
        placed = task(s, job)
        assert placed["node"] == node and placed["devices"] == [0]
        s.cli("cancel", str(job), check=True)
    finally:
        s.stop()
        kill_processes_under(s.home)


def test_server_refuses_an_unknown_policy(tmp_path):
    r = subprocess.run([KILN, "server", "--home", str(tmp_path / "h"),
                        "--listen", "127.0.0.1:0", "--gpus", "1xT4-16GB",
                        "--policy", "tightest"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert '--policy: "tightest" is not one of random, dot-product' in r.stderr
    assert "fgd, kiln" in r.stderr
