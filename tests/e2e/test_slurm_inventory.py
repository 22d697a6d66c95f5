"""Under --executor slurm, with no --gpus, kiln's nodes are Slurm's
(sinfo --json, scontrol show partition -o), on a real single-node
slurm-wlm (slurm_own.py: 8 untyped GPUs in gres.conf, features fast and
ib, partitions kiln and small, small limited to 4 CPUs a node and 30
minutes): the listing shows Slurm's state and reason and follows a job,
a job no partition could ever run is refused at submission naming the
partition's limits, and cordon, drain and uncordon are scontrol updates,
audited."""
import json
import subprocess

import pytest

from conftest import KILN, Server, job_yaml, wait_for
from slurm_own import NODE, node_state, own_slurm, slurm  # noqa: F401


@pytest.fixture
def inv_server(tmp_path, own_slurm):  # noqa: F811
    # Tasks run as the unprivileged kiln-task user under a root server.
    tmp_path.chmod(0o1777)
    # The server's own node has a name Slurm does not know: Slurm's
    # node replaces it.
    s = Server(tmp_path / "home", gpus=None,
               extra=["--executor", "slurm", "--slurm-partitions",
                      "pool:small=small", "--node-name", "kiln-own"],
               env=own_slurm)
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    subprocess.run(["scancel", "--name", "kiln-inv"], env=own_slurm,
                   timeout=30)
    subprocess.run(["scontrol", "update", f"NodeName={NODE}",
                    "State=RESUME"], env=own_slurm, capture_output=True,
                   timeout=30)


def the_node(s):
    nodes = s.request("GET", "/v1/nodes").json()["nodes"]
    return next(n for n in nodes if n["name"] == NODE)


def test_nodes_are_slurms_and_follow_a_job(inv_server, own_slurm):
    names = [n["name"] for n in
             inv_server.request("GET", "/v1/nodes").json()["nodes"]]
    assert names == [NODE]
    node = the_node(inv_server)
    assert node["device_source"] == "slurm"
    assert [d["model"] for d in node["devices"]] == ["gpu"] * 8
    assert node["cpus"] == 64.0
    assert node["labels"] == {"slurm_partitions": "kiln,small",
                              "slurm_features": "fast,ib"}
    sl = node["slurm"]
    assert sl["state"] == "idle" and sl["schedulable"], sl
    assert sl["partitions"] == "kiln,small" and sl["features"] == "fast,ib"
    assert sl["gres"] == [{"name": "gpu", "type": "", "count": 8, "used": 0,
                           "mig": False}]
    # A GPU job with no capacity declared anywhere: Slurm's GPUs serve.
    jid = inv_server.submit(job_yaml("kiln-inv", ["sleep", "30"],
                                     resources={"gpus": 2}), hold=False)
    wait_for(lambda: the_node(inv_server)["slurm"]["gres"][0]["used"] == 2,
             timeout=30, what="Slurm's GPUs in use in the listing")
    assert the_node(inv_server)["slurm"]["state"] == "mixed"
    out = inv_server.cli("nodes", check=True).stdout
    assert f"node {NODE}: ready" in out
    assert "slurm: mixed; partitions kiln,small; features fast,ib; " \
        "gres gpu:8 (2 used)" in out, out
    inv_server.request("POST", f"/v1/jobs/{jid}/cancel")
    wait_for(lambda: the_node(inv_server)["slurm"]["state"] == "idle",
             timeout=40, what="the node idle again")


def refusal(s, name, **fields):
    r = s.request("POST", "/v1/jobs", params={"file": f"{name}.yaml"},
                  data=job_yaml("kiln-inv", ["true"], **fields))
    assert r.status_code == 409, r.text
    return r.json()["error"]["message"]


def test_a_job_no_partition_could_run_is_refused(inv_server):
    msg = refusal(inv_server, "gang", tasks=2, resources={"gpus": 8})
    assert msg.startswith("gang.yaml: can never fit in Slurm partition "
                          "kiln: needs 2 tasks x (8 GPUs, 1 CPU) but it "
                          "holds at most 1 (1 node, the largest with 8 "
                          "GPUs, 0 shards, 64 CPUs"), msg
    small = {"selector": {"pool": "small"}}
    msg = refusal(inv_server, "wide", resources={"cpus": 8},
                  placement=small)
    assert "partition small: needs 1 task x (8 CPUs)" in msg
    assert "MaxNodes=1; MaxCPUsPerNode=4" in msg, msg
    msg = refusal(inv_server, "long", timeout="1h", placement=small)
    assert "partition small: its MaxTime is 30 min, the job's limit 61 " \
        "min" in msg, msg
    # Within the limits, the same partition takes it.
    jid = inv_server.submit(job_yaml("kiln-inv", ["/bin/sh", "-c",
                                     "echo partition=$SLURM_JOB_PARTITION"],
                                     resources={"cpus": 4}, timeout="10m",
                                     placement=small), hold=False)
    job = inv_server.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    assert "partition=small" in inv_server.logs(jid)


def test_cordon_drain_uncordon_are_scontrol_updates(inv_server, own_slurm):
    inv_server.cli("cordon", NODE, "--reason", "disk swap", check=True)
    wait_for(lambda: node_state(own_slurm).startswith("drained|"),
             timeout=30, what="Slurm to drain the node")
    assert node_state(own_slurm) == \
        "drained|kiln: cordoned by admin: disk swap"
    wait_for(lambda: the_node(inv_server)["slurm"]["state"] == "drained",
             timeout=30, what="the listing to show Slurm's drain")
    node = the_node(inv_server)
    assert node["state"] == "cordoned"
    assert node["slurm"]["reason"] == "kiln: cordoned by admin: disk swap"
    # The event stream says so too, for `kiln nodes -w`.
    events = [json.loads(line) for line in
              inv_server.request("GET", "/v1/events").text.splitlines()]
    assert {"type": "node.slurm", "node": NODE, "state": "drained",
            "reason": "kiln: cordoned by admin: disk swap"}.items() <= \
        next(e for e in events if e["type"] == "node.slurm").items(), events
    # kiln's cordon of a Slurm node outlives a restart, as of its own.
    inv_server.stop()
    inv_server.start()
    assert the_node(inv_server)["state"] == "cordoned"
    inv_server.cli("uncordon", NODE, check=True)
    wait_for(lambda: node_state(own_slurm).startswith("idle|"), timeout=30,
             what="Slurm to resume the node")
    inv_server.cli("drain", NODE, "--reason", "kernel update", check=True)
    wait_for(lambda: node_state(own_slurm).startswith("drained|"),
             timeout=30, what="Slurm to drain the node")
    assert "kernel update" in node_state(own_slurm)
    inv_server.cli("uncordon", NODE, check=True)
    wait_for(lambda: node_state(own_slurm).startswith("idle|"), timeout=30,
             what="Slurm to resume the node")
    audit = inv_server.request("GET", "/v1/audit",
                               params={"limit": 20}).json()["audit"]
    details = [(a["action"], a["detail"]) for a in audit
               if a["object"] == f"node/{NODE}"]
    assert ("node.cordon", "cordoned by admin: disk swap; slurm: "
            "State=DRAIN") in details, details
    assert sum(d[0] == "node.uncordon" and d[1].endswith("State=RESUME")
               for d in details) == 2, details
    # A node Slurm does not have is kiln's 404 as before.
    r = inv_server.request("POST", "/v1/nodes/nosuchnode/cordon")
    assert r.status_code == 404
