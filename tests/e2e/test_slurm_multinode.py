"""Training across the two nodes of the namespace cluster (scripts/
slurm-2node.sh) under the Slurm executor: the 2-task tiny GPT runs one rank
per node with DistributedDataParallel over gloo across the bridge, is
evicted once, resumes on both nodes, and ends with the same
final_weights.bin as an uninterrupted run on one machine."""
import json
import shutil
from pathlib import Path

from conftest import wait_for
from slurm_cluster import (NET, NODES, slurm_server,  # noqa: F401 (fixture)
                           slurmb_env)

REPO = Path(__file__).resolve().parents[2]
# Paced so that the attempt is still running when the test has seen its
# first checkpoint synced and evicts it (unpaced, it takes about a second).
TINY = ["--steps", "60", "--checkpoint-every", "5", "--step-sleep", "0.15",
        "--batch", "4", "--context", "32", "--dim", "32", "--layers", "1",
        "--heads", "2"]
# Each rank prints where it runs and which address gloo bound.
WHERE = ("import os, socket; print('WHERE', os.environ.get('SLURMD_NODENAME'),"
         " os.environ['RANK'], os.environ['MASTER_ADDR'],"
         " socket.gethostbyname(socket.gethostname()), flush=True)")


def spec(name):
    command = ("/usr/bin/python3 -c \"$WHERE\" && exec /usr/bin/python3 "
               "train.py " + " ".join(TINY))
    return "\n".join([
        "kind: Job", f"name: {name}",
        f"command: {json.dumps(['/bin/sh', '-c', command])}",
        "tasks: 2", "preemptible: true", "resources: {cpus: 1}",
        "checkpoint: {keep: 2, grace: 20s, signal: SIGTERM}",
        f'env: {{OMP_NUM_THREADS: "1", WHERE: {json.dumps(WHERE)}}}', ""])


def submit(server, tmp_path, name):
    work = tmp_path / name
    shutil.copytree(REPO / "examples" / "train", work,
                    ignore=shutil.ignore_patterns("checkpoints", "outputs",
                                                  "__pycache__"))
    work.chmod(0o777)
    (work / "job.yaml").write_text(spec(name))
    r = server.request("POST", "/v1/jobs", data=spec(name),
                       params={"file": "job.yaml",
                               "path": str(work / "job.yaml")})
    assert r.status_code == 201, r.text
    if hasattr(server, "names"):
        server.names.append(name)
    return r.json()["job"]["id"]


def final_sha(server, jid):
    job = server.wait_state(jid, ("succeeded", "failed"), timeout=300)
    assert job["state"] == "succeeded", (job["reason"], [
        server.logs(jid, task=t["rank"], attempt=a["number"])[-1500:]
        for a in job["attempts_detail"] for t in a["tasks"]])
    outs = {o["name"]: o for o in job["outputs"]}
    return outs["final_weights.bin"]["sha256"], job


def synced(server, jid):
    d = server.home / "blobs" / str(jid) / "checkpoints"
    return sorted(p.name for p in d.iterdir()
                  if (p / "MANIFEST.json").exists()) if d.exists() else []


def test_tiny_gpt_across_two_nodes_evicted_matches_one_machine(
        tmp_path, server, slurmb_env):
    # The uninterrupted reference: the same two ranks on this machine.
    reference = submit(server, tmp_path, "one-machine")
    s = slurm_server(tmp_path / "slurm", slurmb_env)
    try:
        jid = submit(s, tmp_path / "slurm", "two-nodes")
        wait_for(lambda: s.job(jid)["state"] == "running" and synced(s, jid),
                 timeout=180, interval=0.2, what="a checkpoint in attempt 1")
        r = s.request("POST", f"/v1/jobs/{jid}/evict")
        assert r.status_code == 200, r.text
        got, job = final_sha(s, jid)
        assert [a["state"] for a in job["attempts_detail"]] == \
            ["preempted", "succeeded"], job
        for attempt in (1, 2):
            for rank, node in enumerate(NODES):
                log = s.logs(jid, task=rank, attempt=attempt)
                where = next(l for l in log.splitlines()
                             if l.startswith("WHERE "))
                # One rank per node; rank 0's node is the rendezvous, by a
                # name that resolves there; gloo bound the node's own
                # bridge address, not loopback.
                ip = f"{NET}.1{rank + 1}"
                assert where == f"WHERE {node} {rank} {NODES[0]} {ip}", log
        assert "resuming from checkpoint" in s.logs(jid, attempt=2)
        want, _ = final_sha(server, reference)
        assert got == want
    finally:
        s.stop()
