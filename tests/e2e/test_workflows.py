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
    def reached():
        step = steps(get(server, run_id))[name]
        if step["state"] != state and step["state"] not in (
                "pending", "running"):
            raise AssertionError(f"step {name}: {step}")
        return step["state"] == state
    return wait_for(reached, what=f"step {name} of run {run_id} to be {state}")


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
    events = [json.loads(line) for line in
              server.request("GET", "/v1/events").text.splitlines()]
    assert [e["step"] for e in events if e["type"] == "workflow.step" and
            e["state"] == "running"][:1] == ["prep"]
    assert any(e["type"] == "workflow.state" and e["run"] == rid and
               e["state"] == "succeeded" for e in events)
    as_json = json.loads(server.cli("workflow", "show", str(rid), "-o",
                                    "json", check=True).stdout)
    assert as_json["workflow"]["steps"] == w["steps"]
    listed = server.cli("workflow", "ls", check=True).stdout
    assert any(line.split()[:4] == [str(rid), "dag", "succeeded", "4/4"]
               for line in listed.splitlines()), listed


def test_on_failure_stop_lets_running_steps_finish_and_starts_nothing(
        server, tmp_path):
    release = tmp_path / "release"
    text = (
        "kind: Workflow\nname: stops\nsteps:\n"
        f"  - name: bad\n    job: {{command: {sh('exit 3')}}}\n"
        "  - name: slow\n"
        f"    job: {{command: {sh(f'while [ ! -e {release} ]; do sleep 0.02; done')}}}\n"
        "  - name: after_bad\n    needs: [bad]\n    job: {command: [/bin/true]}\n"
        "  - name: after_slow\n    needs: [slow]\n    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    wait_step(server, rid, "bad", "failed")
    # The failure is known while slow still runs: it finishes, nothing new
    # starts after it.
    assert steps(get(server, rid))["slow"]["state"] == "running"
    release.touch()
    w = wait_run(server, rid)
    s = steps(w)
    assert w["state"] == "failed"
    assert w["reason"].startswith("step bad failed: job ")
    assert "exit" in s["bad"]["reason"]
    assert s["slow"]["state"] == "succeeded"
    assert s["after_bad"]["state"] == "skipped"
    assert s["after_bad"]["reason"] == "need bad failed"
    assert s["after_slow"]["state"] == "skipped"
    assert s["after_slow"]["job"] is None
    assert s["after_slow"]["reason"] == ("not started: step bad failed and "
                                         "its on_failure stops the run")


def test_on_failure_continue_skips_only_what_needs_the_failed_step(
        server, tmp_path):
    text = (
        "kind: Workflow\nname: goes-on\non_failure: continue\nsteps:\n"
        f"  - name: bad\n    job: {{command: {sh('exit 1')}}}\n"
        "  - name: child\n    needs: [bad]\n    job: {command: [/bin/true]}\n"
        "  - name: grandchild\n    needs: [child]\n"
        "    job: {command: [/bin/true]}\n"
        "  - name: other\n    job: {command: [/bin/true]}\n"
        "  - name: after_other\n    needs: [other]\n"
        "    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    w = wait_run(server, rid)
    s = steps(w)
    assert w["state"] == "failed"
    assert s["bad"]["state"] == "failed"
    assert (s["child"]["state"], s["child"]["reason"]) == (
        "skipped", "need bad failed")
    assert (s["grandchild"]["state"], s["grandchild"]["reason"]) == (
        "skipped", "need child was skipped")
    assert s["other"]["state"] == "succeeded"
    assert s["after_other"]["state"] == "succeeded"


def test_on_failure_retry_submits_new_jobs_and_counts_attempts(
        server, tmp_path):
    count = tmp_path / "count"
    # Fails twice, then succeeds on its third job.
    flaky = (f"n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); "
             f"echo $n > {count}; [ $n -ge 3 ]")
    text = (
        "kind: Workflow\nname: retries\nsteps:\n"
        "  - name: flaky\n    on_failure: retry\n    retries: 2\n"
        f"    job: {{command: {sh(flaky)}}}\n"
        "  - name: hopeless\n    on_failure: retry\n    retries: 1\n"
        f"    job: {{command: {sh('exit 9')}}}\n")
    rid = run(server, write_workflow(tmp_path, text))
    w = wait_run(server, rid)
    s = steps(w)
    assert w["state"] == "failed"
    assert (s["flaky"]["state"], s["flaky"]["attempts"]) == ("succeeded", 3)
    assert (s["hopeless"]["state"], s["hopeless"]["attempts"]) == ("failed", 2)
    assert s["hopeless"]["retries"] == 1
    # A new job each time: the step's jobs are all there, in order.
    jobs = server.request("GET", "/v1/jobs").json()["jobs"]
    flaky_jobs = [j for j in jobs if j["name"] == "flaky"]
    assert [j["state"] for j in flaky_jobs] == ["failed", "failed",
                                                "succeeded"]
    assert flaky_jobs[-1]["id"] == s["flaky"]["job"]
    assert len([j for j in jobs if j["name"] == "hopeless"]) == 2


def test_when_on_a_metric_skips_a_step_and_the_run_succeeds(server, tmp_path):
    metrics = ('mkdir -p "$KILN_OUTPUT_DIR" && '
               'echo \'{"loss": 2.5, "note": "x"}\' > "$KILN_OUTPUT_DIR/metrics.json"')
    text = (
        "kind: Workflow\nname: gated\nsteps:\n"
        f"  - name: evaluate\n    job: {{command: {sh(metrics)}}}\n"
        "  - name: publish\n    needs: [evaluate]\n"
        "    when: \"evaluate.metrics.loss < 1.8\"\n"
        "    job: {command: [/bin/true]}\n"
        "  - name: announce\n    needs: [publish]\n"
        "    job: {command: [/bin/true]}\n"
        "  - name: report\n    needs: [evaluate]\n"
        "    when: [\"evaluate.metrics.loss >= 2\", "
        "\"evaluate.outcome == succeeded\"]\n"
        "    job: {command: [/bin/true]}\n"
        "  - name: needs_accuracy\n    needs: [evaluate]\n"
        "    when: \"evaluate.metrics.accuracy > 0.5\"\n"
        "    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    w = wait_run(server, rid)
    s = steps(w)
    assert w["state"] == "succeeded", w
    assert s["evaluate"]["metrics"] == {"loss": 2.5}
    assert s["publish"]["state"] == "skipped"
    assert s["publish"]["skipped_by_condition"] is True
    assert s["publish"]["job"] is None
    assert s["publish"]["reason"] == ("when: evaluate.metrics.loss < 1.8 is "
                                      "false (loss = 2.5)")
    assert (s["announce"]["state"], s["announce"]["reason"]) == (
        "skipped", "need publish was skipped")
    assert s["report"]["state"] == "succeeded"
    assert s["needs_accuracy"]["state"] == "skipped"
    assert "left no metric accuracy" in s["needs_accuracy"]["reason"]


def test_retry_of_a_failed_run_reuses_finished_steps(server, tmp_path):
    fixed = tmp_path / "fixed"
    text = (
        "kind: Workflow\nname: again\nsteps:\n"
        "  - name: prepare\n    job: {command: [/bin/true]}\n"
        "  - name: train\n    needs: [prepare]\n"
        f"    job: {{command: {sh(f'test -e {fixed}')}}}\n"
        "  - name: evaluate\n    needs: [train]\n"
        "    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    first = steps(wait_run(server, rid))
    assert first["train"]["state"] == "failed"
    assert first["evaluate"]["state"] == "skipped"
    fixed.touch()
    res = server.cli("workflow", "retry", str(rid))
    assert res.returncode == 0, res.stderr
    w = wait_run(server, rid, "succeeded")
    s = steps(w)
    assert s["prepare"]["job"] == first["prepare"]["job"]
    assert s["prepare"]["attempts"] == 1
    assert s["train"]["job"] != first["train"]["job"]
    assert s["evaluate"]["state"] == "succeeded"
    prepare_jobs = [j for j in server.request("GET", "/v1/jobs").json()["jobs"]
                    if j["name"] == "prepare"]
    assert len(prepare_jobs) == 1
    # Only a failed or cancelled run is retried.
    res = server.cli("workflow", "retry", str(rid))
    assert res.returncode == 1
    assert "is succeeded; only a failed or cancelled run" in res.stderr
    audit = server.request("GET", "/v1/audit").json()["audit"]
    assert any(e["action"] == "workflow.retry" and
               e["object"] == f"workflow/{rid}" for e in audit)


def test_kill9_mid_run_then_restart_finishes_the_run_once(server, tmp_path):
    go = tmp_path / "go"
    text = (
        "kind: Workflow\nname: survives\nsteps:\n"
        "  - name: first\n    job: {command: [/bin/true]}\n"
        "  - name: middle\n    needs: [first]\n"
        f"    job: {{command: {sh(f'while [ ! -e {go} ]; do sleep 0.02; done')}}}\n"
        "  - name: last\n    needs: [middle]\n    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    wait_step(server, rid, "middle", "running")
    middle_job = steps(get(server, rid))["middle"]["job"]
    server.wait_state(middle_job, "running")
    server.kill9()
    go.touch()  # middle ends while the server is down
    task_dir = server.home / "tasks" / str(middle_job) / "1" / "0"
    wait_for(lambda: (task_dir / "status.json").exists(),
             what="the shim to record the exit")
    server.start()
    w = wait_run(server, rid)
    s = steps(w)
    assert w["state"] == "succeeded", w
    assert s["middle"]["job"] == middle_job
    assert all(x["attempts"] == 1 for x in s.values())
    names = sorted(j["name"] for j in
                   server.request("GET", "/v1/jobs").json()["jobs"])
    assert names == ["first", "last", "middle"]


def test_kill9_with_a_step_queued_then_restart(server, tmp_path):
    # A step waits for GPUs that are taken: its job is queued across the
    # crash and starts once they are free.
    go = tmp_path / "go"
    hog = server.submit(
        "kind: Job\nname: hog\n"
        f"command: {sh(f'while [ ! -e {go} ]; do sleep 0.02; done')}\n"
        "resources: {gpus: 4}\n")
    server.wait_state(hog, "running")
    text = ("kind: Workflow\nname: waits\nsteps:\n"
            "  - name: gpu\n    job: {command: [/bin/true], "
            "resources: {gpus: 2}}\n"
            "  - name: after\n    needs: [gpu]\n    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    gpu_job = steps(get(server, rid))["gpu"]["job"]
    assert server.job(gpu_job)["state"] == "queued"
    server.kill9()
    server.start()
    go.touch()
    w = wait_run(server, rid)
    assert w["state"] == "succeeded"
    assert steps(w)["gpu"]["job"] == gpu_job
    assert len([j for j in server.request("GET", "/v1/jobs").json()["jobs"]
                if j["name"] == "gpu"]) == 1


def test_cancel_stops_running_steps_and_wait_reports_it(server, tmp_path):
    # Two branches want every GPU: one runs, the other's job is queued.
    text = ("kind: Workflow\nname: long\nsteps:\n"
            "  - name: sleeper\n    job: {command: [/bin/sleep, \"60\"], "
            "resources: {gpus: 4}}\n"
            "  - name: waiter\n    job: {command: [/bin/true], "
            "resources: {gpus: 4}}\n"
            "  - name: after\n    needs: [sleeper]\n"
            "    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    wait_step(server, rid, "sleeper", "running")
    job = steps(get(server, rid))["sleeper"]["job"]
    server.wait_state(job, "running")
    queued = steps(get(server, rid))["waiter"]["job"]
    assert server.job(queued)["state"] == "queued"
    viewer = server.create_token("viewer1", "viewer")
    other = server.create_token("other", "user")
    res = server.cli("workflow", "cancel", str(rid), token=other)
    assert res.returncode == 1
    assert "belongs to admin; a user may change only its own runs" in res.stderr
    res = server.cli("workflow", "cancel", str(rid), token=viewer)
    assert res.returncode == 1 and "permission_denied" in res.stderr
    res = server.cli("workflow", "cancel", str(rid))
    assert res.returncode == 0, res.stderr
    w = get(server, rid)
    assert w["state"] == "cancelled" and w["reason"] == "cancelled by admin"
    s = steps(w)
    assert s["sleeper"]["state"] == "cancelled"
    assert s["after"]["state"] == "cancelled"
    assert s["waiter"]["state"] == "cancelled"
    assert server.job(queued)["state"] == "cancelled"
    server.wait_state(job, "cancelled")
    # Cancelled twice: a conflict.
    res = server.cli("workflow", "cancel", str(rid))
    assert res.returncode == 1 and "has already cancelled" in res.stderr


def test_run_wait_exit_status(server, tmp_path):
    ok = write_workflow(tmp_path, "kind: Workflow\nname: ok\nsteps:\n"
                        "  - {name: a, job: {command: [/bin/true]}}\n",
                        name="ok.yaml")
    res = server.cli("workflow", "run", str(ok), "--wait")
    assert res.returncode == 0, res.stderr
    assert "succeeded" in res.stderr
    bad = write_workflow(tmp_path, "kind: Workflow\nname: bad\nsteps:\n"
                         "  - {name: a, job: {command: [/bin/false]}}\n",
                         name="bad.yaml")
    res = server.cli("workflow", "run", str(bad), "--wait")
    assert res.returncode == 4, res.stderr
    assert "step a failed" in res.stderr


def test_bad_runs_are_refused_naming_the_place(server, tmp_path):
    dep = write_workflow(tmp_path, (
        "kind: Workflow\nname: dep\nsteps:\n"
        "  - {name: a, job: {command: [/bin/true]}}\n"
        "  - {name: r, needs: [a], register: {from: a, model: m}}\n"
        "  - {name: roll, needs: [r], deploy: {deployment: d, from: r}}\n"),
        name="dep.yaml")
    res = server.cli("workflow", "run", str(dep))
    assert res.returncode == 1
    assert ("dep.yaml: steps[2] (roll): deploy: no deployment named d"
            in res.stderr), res.stderr
    broken = write_workflow(tmp_path, (
        "kind: Workflow\nname: broken\nsteps:\n"
        "  - {name: a, job: jobs/a.yaml}\n"),
        {"jobs/a.yaml": "kind: Job\nname: a\ncommand: [x]\ntasks: zero\n"},
        name="broken.yaml")
    res = server.cli("workflow", "run", str(broken))
    assert res.returncode == 1
    assert "jobs/a.yaml:4:8: tasks:" in res.stderr, res.stderr
    # Through the API: a job file not sent, a digest that does not match.
    spec = "kind: Workflow\nname: api\nsteps:\n  - {name: a, job: a.yaml}\n"
    r = server.request("POST", "/v1/workflows",
                       json={"spec": spec, "filename": "w.yaml"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "w.yaml: steps[0].job: a.yaml was not sent with the workflow "
        "(files[\"a.yaml\"])")
    r = server.request("POST", "/v1/workflows",
                       json={"spec": spec, "filename": "w.yaml",
                             "files": {"a.yaml": "kind: Job\nname: a\n"
                                                 "command: [/bin/true]\n"},
                             "digest": "0" * 64})
    assert r.status_code == 400 and "digest" in r.json()["error"]["message"]
    viewer = server.create_token("v", "viewer")
    r = server.request("POST", "/v1/workflows", token=viewer,
                       json={"spec": spec, "filename": "w.yaml"})
    assert r.status_code == 403
    assert server.request("GET", "/v1/workflows", token=viewer).status_code == 200
    assert server.request("GET", "/v1/workflows/99").status_code == 404


def test_outputs_pass_to_later_steps_by_url_and_digest(server, tmp_path):
    gate = tmp_path / "gate"
    make = ('mkdir -p "$KILN_OUTPUT_DIR/sub" && echo weights > '
            '"$KILN_OUTPUT_DIR/w.bin" && echo vocab > "$KILN_OUTPUT_DIR/sub/v.txt"')
    use = ('cat "$KILN_INPUT_DIR/make/w.bin" "$KILN_INPUT_DIR/make/sub/v.txt"; '
           'echo "$KILN_INPUTS"')
    text = (
        "kind: Workflow\nname: passes\nsteps:\n"
        f"  - name: make\n    job: {{command: {sh(make)}}}\n"
        "  - name: use\n    needs: [make]\n"
        "    inputs: [make.outputs/w.bin, make.outputs/sub/v.txt, /data/x]\n"
        "    job: jobs/use.yaml\n"
        f"  - name: gate\n    needs: [make]\n"
        f"    job: {{command: {sh(f'while [ ! -e {gate} ]; do sleep 0.02; done')}}}\n"
        "  - name: late\n    needs: [gate]\n    inputs: [make.outputs/w.bin]\n"
        "    job: {command: [/bin/true]}\n")
    path = write_workflow(tmp_path, text, {
        "jobs/use.yaml": f"kind: Job\nname: use\ncommand: {sh(use)}\n"})
    rid = run(server, path)
    wait_step(server, rid, "use", "succeeded")
    s = steps(get(server, rid))
    made = server.job(s["make"]["job"])
    outputs = {o["name"]: o for o in made["outputs"]}
    weights = outputs["w.bin"]
    assert weights["sha256"] == hashlib.sha256(b"weights\n").hexdigest()
    log = server.logs(s["use"]["job"])
    lines = log.splitlines()
    assert "weights" in lines and "vocab" in lines
    inputs = json.loads(lines[-1])
    assert inputs[0] == {
        "name": "make/w.bin", "input": "make.outputs/w.bin",
        "url": weights["url"], "store": weights["url"][:-len(
            f"/{made['id']}/outputs/w.bin")],
        "blob": f"{made['id']}/outputs/w.bin", "sha256": weights["sha256"],
        "size": 8}
    assert inputs[2] == {"name": "/data/x", "url": "/data/x"}
    assert f"kiln: input make/w.bin fetched (sha256 {weights['sha256']})" in log

    # A blob changed in the store after the manifest: the consumer fails,
    # naming the file, and its command never runs.
    assert weights["url"].startswith("file://")
    blob = weights["url"][len("file://"):]
    with open(blob, "w") as f:
        f.write("tampered\n")
    gate.touch()
    w = wait_run(server, rid)
    late = steps(w)["late"]
    assert w["state"] == "failed"
    assert late["state"] == "failed"
    assert "input make/w.bin: sha256 mismatch" in late["reason"], late
    log = server.logs(late["job"])
    assert "kiln: input make/w.bin: its sha256 is " in log
    assert "not " + weights["sha256"] in log


def test_an_input_the_producer_did_not_leave_fails_the_step(server, tmp_path):
    text = ("kind: Workflow\nname: missing\nsteps:\n"
            "  - {name: make, job: {command: [/bin/true]}}\n"
            "  - name: use\n    needs: [make]\n"
            "    inputs: [make.outputs/nothing.bin]\n"
            "    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    w = wait_run(server, rid)
    use = steps(w)["use"]
    assert (w["state"], use["state"], use["job"]) == ("failed", "failed", None)
    assert use["reason"] == (
        f"cannot start: input make.outputs/nothing.bin: job "
        f"{steps(w)['make']['job']} of step make left no output nothing.bin")


def test_unmet_prerequisite_fails_fast_without_using_a_retry(server, tmp_path):
    text = (
        "kind: Workflow\nname: prereq\non_failure: continue\n"
        "requires: {commands: [sh], python_modules: [json]}\nsteps:\n"
        "  - name: ready\n"
        "    requires: {commands: [sh, \"true\"], python_modules: [json, os.path],\n"
        f"               scratch: {{path: {tmp_path}, free: 1Ki}}, store: true,\n"
        "               gpus: {count: 1}}\n"
        "    job: {command: [/bin/true], resources: {gpus: 1}}\n"
        "  - name: inherits\n    job: {command: [/bin/true]}\n"
        "  - name: no_tool\n    on_failure: retry\n    retries: 2\n"
        "    requires: {commands: [kiln-no-such-tool]}\n"
        "    job: {command: [/bin/true], retries: 3}\n"
        "  - name: no_module\n"
        "    requires: {python_modules: [kiln_no_such_module]}\n"
        "    job: {command: [/bin/true]}\n"
        "  - name: no_space\n"
        f"    requires: {{scratch: {{path: {tmp_path}, free: 1000000Ti}}}}\n"
        "    job: {command: [/bin/true]}\n"
        "  - name: few_gpus\n    requires: {gpus: {count: 2}}\n"
        "    job: {command: [/bin/true], resources: {gpus: 1}}\n"
        "  - name: right_model\n    requires: {gpus: {model: H100, count: 1}}\n"
        "    job: {command: [/bin/true], resources: {gpus: 1}}\n"
        "  - name: wrong_model\n    requires: {gpus: {model: A100, count: 1}}\n"
        "    job: {command: [/bin/true], resources: {gpus: 1}}\n"
        "  - name: new_driver\n    requires: {driver: \"999999.1\"}\n"
        "    job: {command: [/bin/true]}\n"
        "  - name: new_cuda\n    requires: {cuda: \"999.0\"}\n"
        "    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    w = wait_run(server, rid)
    s = steps(w)
    assert w["state"] == "failed"
    assert s["ready"]["state"] == "succeeded"
    assert s["inherits"]["state"] == "succeeded"
    tool = s["no_tool"]
    assert (tool["state"], tool["attempts"]) == ("failed", 1)
    assert ("rank 0: prerequisite: command kiln-no-such-tool is not on PATH"
            in tool["reason"]), tool
    job = server.job(tool["job"])
    assert (job["attempts"], job["retries_used"]) == (1, 0)
    assert "kiln: prerequisite: command kiln-no-such-tool" in server.logs(
        tool["job"])
    assert ("prerequisite: python3 cannot import kiln_no_such_module"
            in s["no_module"]["reason"])
    assert "prerequisite: scratch " in s["no_space"]["reason"]
    assert "free, needs 976.6 PiB" in server.logs(s["no_space"]["job"])
    assert ("prerequisite: 2 GPUs needed, the task has 1"
            in s["few_gpus"]["reason"])
    assert s["right_model"]["state"] == "succeeded"
    assert ("prerequisite: GPU model A100 needed, the task has H100-80GB"
            in s["wrong_model"]["reason"])
    # Simulated GPUs have no driver to ask: the check fails, saying so
    # (on a node with one, this driver is newer than any).
    assert "prerequisite: driver 999999.1 needed" in s["new_driver"]["reason"]
    assert "prerequisite: cuda 999.0 needed" in s["new_cuda"]["reason"]


def test_driver_and_cuda_versions_compare_part_by_part(tmp_path):
    # This machine has no NVIDIA driver: the server (and so each task's
    # shim) finds a stand-in nvidia-smi first on its PATH.
    from conftest import Server
    import os
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --query-gpu=driver_version ]; then echo 535.104.05; '
        "exit 0; fi\n"
        "echo '| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   "
        "CUDA Version: 12.2     |'\n")
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    server = Server(tmp_path / "home", env=env)
    server.home.mkdir()
    server.start()
    try:
        text = (
            "kind: Workflow\nname: versions\non_failure: continue\nsteps:\n"
            "  - {name: old_driver, requires: {driver: \"535.104\"},\n"
            "     job: {command: [/bin/true]}}\n"
            "  - {name: newer_driver, requires: {driver: \"535.129\"},\n"
            "     job: {command: [/bin/true]}}\n"
            "  - {name: same_cuda, requires: {cuda: \"12.2\"},\n"
            "     job: {command: [/bin/true]}}\n"
            "  - {name: later_cuda, requires: {cuda: \"12.10\"},\n"
            "     job: {command: [/bin/true]}}\n")
        rid = run(server, write_workflow(tmp_path, text))
        s = steps(wait_run(server, rid))
        assert s["old_driver"]["state"] == "succeeded"
        assert s["same_cuda"]["state"] == "succeeded"
        assert ("prerequisite: driver 535.129 needed, the node has "
                "535.104.05" in s["newer_driver"]["reason"])
        assert ("prerequisite: cuda 12.10 needed, the node has 12.2"
                in s["later_cuda"]["reason"])
    finally:
        server.stop()
