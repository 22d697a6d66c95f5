"""MIG end to end on a simulated A100-80GB in MIG mode: jobs asking for a
MIG slice get a synthetic MIG device id, seven 1g.10gb instances fill the
GPU, the eighth waits with a reason, and a restart rebuilds the instances
from the task rows."""
import re

import pytest

from conftest import Server, job_yaml, wait_for

HOLD = ["/bin/sh", "-c",
        "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; "
        "echo KILN_MIG_PROFILE=$KILN_MIG_PROFILE; i=0; "
        "while [ ! -e \"$KILN_TASK_DIR/../../../../../go\" ] && [ $i -lt 600 ]; "
        "do sleep 0.1; i=$((i+1)); done"]


@pytest.fixture
def mig_server(tmp_path):
    s = Server(tmp_path / "home", gpus="1xA100-80GB:mig,1xH100-80GB")
    s.home.mkdir()
    s.start()
    yield s
    (s.home.parent / "go").write_text("")
    if s.proc.poll() is None:
        for j in s.request("GET", "/v1/jobs").json()["jobs"]:
            if j["state"] in ("queued", "running"):
                s.request("POST", f"/v1/jobs/{j['id']}/cancel")
        wait_for(lambda: all(j["state"] not in ("running",) for j in
                             s.request("GET", "/v1/jobs").json()["jobs"]),
                 what="tasks to end")
    s.stop()


def visible(server, jid):
    log = wait_for(lambda: (lambda l: l if "KILN_MIG_PROFILE" in l else None)(
        server.logs(jid)), what=f"job {jid} to start")
    return re.search(r"^CUDA_VISIBLE_DEVICES=(.*)$", log, re.M).group(1)


def mig_device(server):
    nodes = server.request("GET", "/v1/nodes").json()["nodes"]
    return next(d for d in nodes[0]["devices"] if d["mig"])


def test_seven_slices_fill_an_a100_and_survive_a_restart(mig_server):
    s = mig_server
    jobs = [s.submit(job_yaml(f"slice{i}", HOLD,
                              resources={"gpus": "mig:1g.10gb"}))
            for i in range(7)]
    ids = [visible(s, j) for j in jobs]
    uuid = mig_device(s)["uuid"]
    assert all(i.startswith(f"MIG-sim-{uuid}-1g.10gb-") for i in ids)
    assert len(set(ids)) == 7
    assert mig_device(s)["mig_slices_used"] == 7
    eighth = s.submit(job_yaml("slice7", HOLD,
                               resources={"gpus": "mig:1g.10gb"}))
    job = wait_for(lambda: (lambda j: j if j["reason"] else None)(
        s.job(eighth)), what="a queue reason")
    assert job["state"] == "queued"
    assert "needs a MIG 1g.10gb instance per task; most free on one node is 0 such instances" in job["reason"]
    # kiln nodes lists the instances.
    out = s.cli("nodes", check=True).stdout
    assert "A100-80GB (MIG)" in out
    assert out.count("MIG 1g.10gb@") == 7

    # After a restart the instances are rebuilt from the task rows: the
    # eighth still waits and the allocations are the same.
    before = sorted((a["job"], a["mig_start"])
                    for a in mig_device(s)["allocations"])
    s.stop()
    s.start()
    assert sorted((a["job"], a["mig_start"])
                  for a in mig_device(s)["allocations"]) == before
    assert s.job(eighth)["state"] == "queued"
    # A whole-GPU job still gets the other GPU, never the MIG one.
    whole = s.submit(job_yaml("whole", HOLD, resources={"gpus": 1}))
    assert visible(s, whole) == "1"
    # When one slice ends, the eighth takes its place.
    s.request("POST", f"/v1/jobs/{jobs[0]}/cancel")
    s.wait_state(eighth, "running")
    assert visible(s, eighth) == ids[0]


def test_bad_mig_table_stops_the_server(tmp_path):
    bad = tmp_path / "mig.csv"
    bad.write_text("model,nothing\n")
    s = Server(tmp_path / "home", gpus="1xA100-80GB:mig",
               extra=["--mig-profiles", str(bad)])
    s.home.mkdir()
    with pytest.raises(AssertionError):
        s.start()
    assert "mig.csv:1:" in s.log.read_text()
