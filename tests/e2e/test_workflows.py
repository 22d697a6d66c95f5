"""Workflow runs: steps run as real jobs in the order their needs give,
parallel branches overlap, each failure policy, a `when` on a metric,
retry of a failed run, cancel, and a server killed mid-run."""
import hashlib
import json
import subprocess

from conftest import wait_for


def write_workflow(tmp_path, text, files=None, name="wf.yaml"):
    d = tmp_path / "wf"
    d.mkdir(exist_ok=True)
    for rel, body in (files or {}).items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
    path = d / name
    path.write_text(text)
    return path


def run(server, path, *flags):
    res = server.cli("workflow", "run", str(path), *flags)
    assert res.returncode == 0, res.stderr
    return int(res.stdout.strip())


def get(server, run_id):
    r = server.request("GET", f"/v1/workflows/{run_id}")
    assert r.status_code == 200, r.text
    return r.json()["workflow"]


def wait_run(server, run_id, states=("succeeded", "failed", "cancelled"),
             timeout=30.0):
    if isinstance(states, str):
        states = (states,)
    return wait_for(lambda: (lambda w: w if w["state"] in states else None)(
        get(server, run_id)), timeout=timeout,
        what=f"workflow run {run_id} to reach {states}")


def steps(w):
    return {s["name"]: s for s in w["steps"]}


def sh(script):
    return json.dumps(["/bin/sh", "-c", script])


def wait_step(server, run_id, name, state):
    return wait_for(lambda: steps(get(server, run_id))[name]["state"] == state,
                    what=f"step {name} of run {run_id} to be {state}")


def test_dag_order_parallel_branches_digest_and_revision(server, tmp_path):
    bar = tmp_path / "bar"
    # Each branch waits until the other has started: they must overlap.
    left = f"touch {bar}.left; while [ ! -e {bar}.right ]; do sleep 0.02; done"
    right = f"touch {bar}.right; while [ ! -e {bar}.left ]; do sleep 0.02; done"
    text = (
        "kind: Workflow\nname: dag\nsteps:\n"
        "  - name: prep\n    job: jobs/prep.yaml\n"
        f"  - name: left\n    needs: [prep]\n    job: {{command: {sh(left)}}}\n"
        f"  - name: right\n    needs: [prep]\n    job: {{command: {sh(right)}}}\n"
        "  - name: join\n    needs: [left, right]\n"
        "    job: {command: [\"/bin/true\"]}\n")
    path = write_workflow(tmp_path, text, {
        "jobs/prep.yaml": "kind: Job\nname: prep\ncommand: [/bin/true]\n"})
    git = ["git", "-C", str(path.parent)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["-c", "user.email=t@t", "-c", "user.name=t",
                          "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()

    rid = run(server, path)
    w = wait_run(server, rid)
    assert w["state"] == "succeeded", w
    assert w["digest"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert w["revision"] == head
    assert w["order"] == ["prep", "left", "right", "join"]
    s = steps(w)
    assert all(x["state"] == "succeeded" and x["attempts"] == 1
               for x in s.values())
    assert s["join"]["needs"] == ["left", "right"]
    # Each step ran as its own job, after what it needs.
    jobs = {n: server.job(x["job"]) for n, x in s.items()}
    assert jobs["prep"]["name"] == "prep" and jobs["left"]["name"] == "left"
    for n in ("left", "right"):
        assert jobs[n]["started_at_ms"] >= jobs["prep"]["ended_at_ms"]
    assert jobs["left"]["started_at_ms"] < jobs["right"]["ended_at_ms"]
    assert jobs["right"]["started_at_ms"] < jobs["left"]["ended_at_ms"]
    assert jobs["join"]["started_at_ms"] >= max(jobs["left"]["ended_at_ms"],
                                                jobs["right"]["ended_at_ms"])

    shown = server.cli("workflow", "show", str(rid), check=True).stdout
    assert "revision:  " + head in shown
    assert any(line.split()[:3] == ["join", "succeeded", "left,right"]
               for line in shown.splitlines()), shown
    listed = server.cli("workflow", "ls", check=True).stdout
    assert any(line.split()[:4] == [str(rid), "dag", "succeeded", "4/4"]
               for line in listed.splitlines()), listed
