"""Issue 3's acceptance test: the 2-task tiny GPT evicted twice finishes,
and its final_weights.bin has the same sha256 as an uninterrupted run's."""
import shutil
from pathlib import Path

from conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
TINY = ["--steps", "40", "--checkpoint-every", "5", "--batch", "4",
        "--context", "32", "--dim", "32", "--layers", "1", "--heads", "2"]


def spec(name):
    import json
    return "\n".join([
        "kind: Job", f"name: {name}",
        f"command: {json.dumps(['/usr/bin/python3', 'train.py'] + TINY)}",
        "tasks: 2", "preemptible: true",
        "checkpoint: {keep: 2, grace: 20s, signal: SIGTERM}",
        'env: {OMP_NUM_THREADS: "1"}', ""])


def submit(server, tmp_path, name):
    # The spec lives beside train.py so the tasks start there.
    work = tmp_path / name
    shutil.copytree(REPO / "examples" / "train", work,
                    ignore=shutil.ignore_patterns("checkpoints", "outputs",
                                                  "__pycache__"))
    (work / "job.yaml").write_text(spec(name))
    r = server.request("POST", "/v1/jobs", data=spec(name),
                       params={"file": "job.yaml",
                               "path": str(work / "job.yaml")})
    assert r.status_code == 201, r.text
    return r.json()["job"]["id"]


def synced(server, jid):
    d = server.home / "blobs" / str(jid) / "checkpoints"
    if not d.exists():
        return []
    return sorted(p.name for p in d.iterdir() if (p / "MANIFEST.json").exists())


def final_sha(server, jid):
    job = server.wait_state(jid, ("succeeded", "failed"), timeout=300)
    assert job["state"] == "succeeded", job["reason"]
    outs = {o["name"]: o for o in job["outputs"]}
    return outs["final_weights.bin"]["sha256"], job


def test_evicted_twice_matches_uninterrupted(server, tmp_path):
    clean = submit(server, tmp_path, "clean")
    want, _ = final_sha(server, clean)

    jid = submit(server, tmp_path, "evicted")
    for n in (1, 2):
        # Let it sync a checkpoint in this attempt, then evict it.
        before = max(synced(server, jid), default="")
        wait_for(lambda: server.job(jid)["state"] == "running" and
                 server.job(jid)["attempts"] == n and
                 max(synced(server, jid), default="") > before,
                 timeout=180, what=f"a new checkpoint in attempt {n}")
        r = server.request("POST", f"/v1/jobs/{jid}/evict")
        assert r.status_code == 200, r.text
        wait_for(lambda: len(server.job(jid)["attempts_detail"]) >= n and
                 server.job(jid)["attempts_detail"][n - 1]["state"] == "preempted",
                 timeout=120, what=f"attempt {n} to be preempted")
    got, job = final_sha(server, jid)
    states = [a["state"] for a in job["attempts_detail"]]
    assert states == ["preempted", "preempted", "succeeded"]
    assert got == want
    assert job["attempts_detail"][2]["restore_ms"] >= 0
    assert "resuming from checkpoint" in server.logs(jid, attempt=3)
    assert 0 < job["goodput"]["percent"] <= 100
