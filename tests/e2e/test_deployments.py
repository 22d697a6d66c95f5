"""Deployments end to end: replicas of a real (tiny) HTTP model server run
as jobs under a real kiln server; probes, restarts with backoff, scaling,
rollouts, undeploy, gateway keys and the gateway's configuration, roles,
and re-adoption after a server restart."""
import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import requests

from conftest import Server, wait_for, kill_processes_under

MODEL_SERVER = Path(__file__).resolve().parent / "fixtures" / "model_server.py"


def deployment_yaml(name, replicas=2, control=None, extra=""):
    env = {"READY_DELAY_S": "0.3"}
    if control:
        env["CONTROL_DIR"] = str(control)
    return (f"kind: Deployment\nname: {name}\nmodel: /tmp\n"
            f"command: [\"/usr/bin/python3\", \"{MODEL_SERVER}\"]\n"
            f"env: {json.dumps(env)}\nreplicas: {replicas}\n"
            "readiness: {path: /health, period_s: 0.1}\n"
            "liveness: {path: /live, period_s: 0.1, failure_threshold: 2}\n"
            "backoff: 200ms\nbackoff_max: 2s\n" + extra)


@pytest.fixture
def zoned(tmp_path):
    s = Server(tmp_path / "home", extra=["--node-labels", "zone=zone-1"])
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    kill_processes_under(s.home)


def deploy(server, text, token="admin", status=(200, 201)):
    r = server.request("POST", "/v1/deployments", token=token, data=text,
                       params={"file": "d.yaml"})
    assert r.status_code in status, r.text
    return r.json()


def config(server, token="admin"):
    r = server.request("GET", "/v1/gateway/config", token=token)
    assert r.status_code == 200, r.text
    return r.json()


def ready_replicas(server, name):
    for d in config(server)["deployments"]:
        if d["name"] == name:
            return {r["replica"]: r for r in d["replicas"] if r["ready"]}
    return {}


def wait_ready(server, name, n, timeout=30):
    return wait_for(lambda: (lambda r: r if len(r) == n else None)(
        ready_replicas(server, name)), timeout=timeout,
        what=f"{n} ready replicas of {name}")


def detail(server, name):
    r = server.request("GET", f"/v1/deployments/{name}")
    assert r.status_code == 200, r.text
    return r.json()["deployment"]


def listener_pid(port):
    """The host pid of the process listening on port (a sandboxed
    replica's own pid is its pid namespace's), or None."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":
                sockets.add(f"socket:[{f[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in sockets
                   for fd in os.listdir(f"/proc/{pid}/fd")):
                return int(pid)
        except OSError:
            pass
    return None


def ask(address):
    answer = requests.get(f"http://{address}/", timeout=5).json()
    answer["pid"] = listener_pid(int(address.rsplit(":", 1)[1]))
    return answer


def pid_or_none(address):
    """A replica the rollout stops between two looks refuses: None."""
    try:
        return ask(address)["pid"]
    except requests.ConnectionError:
        return None


def test_replicas_ready_answer_and_restart(zoned, tmp_path):
    control = tmp_path / "ctl"
    control.mkdir()
    doc = deploy(zoned, deployment_yaml("chat", control=control))
    assert doc["deployment"]["replicas_wanted"] == 2
    reps = wait_ready(zoned, "chat", 2)
    # The contract with the gateway: exactly these fields.
    cfg = config(zoned)
    assert set(cfg) == {"generation", "deployments", "keys"}
    dep = cfg["deployments"][0]
    assert set(dep) == {"name", "model", "fallback", "limits", "replicas"}
    assert dep["fallback"] is None and dep["limits"] == {"rpm": 0, "tpm": 0}
    assert set(dep["replicas"][0]) == {"replica", "address", "zone", "ready"}
    answers = {i: ask(r["address"]) for i, r in reps.items()}
    assert {a["port"] for a in answers.values()} == {
        int(r["address"].split(":")[1]) for r in reps.values()}
    assert all(a["model_dir"] == "/tmp" for a in answers.values())
    assert all(r["zone"] == "zone-1" for r in reps.values())
    d = detail(zoned, "chat")
    assert [r["state"] for r in d["replicas"]] == ["ready", "ready"]
    # Liveness waits for readiness: a slow start is not a death.
    assert [r["restarts"] for r in d["replicas"]] == [0, 0]
    assert all(r["node"] and r["zone"] == "zone-1" for r in d["replicas"])

    # A replica's process killed: restarted after backoff, ready again.
    gen = config(zoned)["generation"]
    os.kill(answers[0]["pid"], signal.SIGKILL)
    wait_for(lambda: detail(zoned, "chat")["replicas"][0]["restarts"] == 1,
             what="replica 0 restarted")
    reps = wait_ready(zoned, "chat", 2)
    assert ask(reps[0]["address"])["pid"] != answers[0]["pid"]
    assert ask(reps[1]["address"])["pid"] == answers[1]["pid"]
    assert config(zoned)["generation"] > gen
    job = zoned.job(detail(zoned, "chat")["replicas"][0]["job"])
    assert job["attempts"] == 2 and job["state"] == "running"

    # Liveness failing twice in a row restarts that replica only.
    victim = reps[1]
    port = victim["address"].split(":")[1]
    (control / f"sick-{port}").write_text("")
    wait_for(lambda: detail(zoned, "chat")["replicas"][1]["restarts"] == 1,
             what="replica 1 restarted by liveness")
    (control / f"sick-{port}").unlink()
    reps = wait_ready(zoned, "chat", 2)
    assert ask(reps[1]["address"])["pid"] != answers[1]["pid"]
    attempts = zoned.job(detail(zoned, "chat")["replicas"][1]["job"])
    assert attempts["attempts"] == 2

    # Undeploy: both processes stop, the config forgets it.
    pids = [ask(r["address"])["pid"] for r in reps.values()]
    r = zoned.request("DELETE", "/v1/deployments/chat")
    assert r.status_code == 200, r.text
    assert config(zoned)["deployments"] == []
    wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in pids),
             what="replicas stopped")
    assert zoned.request("GET", "/v1/deployments/chat").status_code == 404
    # Each shim records the end once its task's cgroup is gone, which can
    # be a moment after the processes themselves.
    for job_id in (1, 2):
        zoned.wait_state(job_id, "cancelled")


def test_scale_and_rollout_restart(server):
    deploy(server, deployment_yaml("chat", replicas=1))
    wait_ready(server, "chat", 1)
    r = server.request("POST", "/v1/deployments/chat/scale",
                       json={"replicas": 3})
    assert r.status_code == 200, r.text
    reps = wait_ready(server, "chat", 3)
    pids = {i: ask(x["address"])["pid"] for i, x in reps.items()}
    r = server.request("POST", "/v1/deployments/chat/scale",
                       json={"replicas": 2})
    assert r.status_code == 200, r.text
    wait_for(lambda: not Path(f"/proc/{pids[2]}").exists(),
             what="replica 2 stopped")
    assert set(ready_replicas(server, "chat")) == {0, 1}
    assert len(detail(server, "chat")["replicas"]) == 2
    bad = server.request("POST", "/v1/deployments/chat/scale",
                         json={"replicas": -1})
    assert bad.status_code == 400

    # Rollout restart: one at a time, never with no replica ready.
    r = server.request("POST", "/v1/deployments/chat/restart")
    assert r.status_code == 200, r.text
    seen_ready = []

    def rolled():
        ready = ready_replicas(server, "chat")
        seen_ready.append(len(ready))
        now = {i: pid_or_none(x["address"]) for i, x in ready.items()}
        d = detail(server, "chat")
        return (d["rollout"] is None and len(now) == 2 and
                all(now[i] not in (None, pids[i]) for i in (0, 1)))
    wait_for(rolled, timeout=40, what="rollout done")
    assert min(seen_ready) >= 1
    events = server.request("GET", "/v1/events").text.splitlines()
    assert any('"deployment.rollout"' in e and '"done"' in e for e in events)


def test_keys_and_roles(server):
    user = server.create_token("alice", "user")
    other = server.create_token("bob", "user")
    viewer = server.create_token("vera", "viewer")
    operator = server.create_token("olga", "operator")
    deploy(server, deployment_yaml("chat", replicas=0), token=user)
    # Another user may not change alice's deployment; the refusal is audited.
    r = server.request("POST", "/v1/deployments/chat/scale", token=other,
                       json={"replicas": 1})
    assert r.status_code == 403, r.text
    r = server.request("POST", "/v1/deployments", token=viewer,
                       data=deployment_yaml("x"))
    assert r.status_code == 403
    r = server.request("GET", "/v1/deployments", token=viewer)
    assert r.status_code == 200 and r.json()["deployments"][0]["owner"] == "alice"
    # Keys and the gateway config are an operator's.
    for token in (user, viewer):
        assert server.request("POST", "/v1/keys", token=token,
                              json={"name": "k", "deployments": ["chat"]}
                              ).status_code == 403
        assert server.request("GET", "/v1/gateway/config",
                              token=token).status_code == 403
    r = server.request("POST", "/v1/keys", token=operator, json={
        "name": "app1", "deployments": ["chat"], "rpm": 600, "tpm": 100000,
        "quota_day": 1000000})
    assert r.status_code == 201, r.text
    secret = r.json()["secret"]
    assert secret.startswith("kgw_") and len(secret) == 47
    assert "hash" not in r.json()["key"]
    dup = server.request("POST", "/v1/keys", token=operator,
                         json={"name": "app1", "deployments": ["chat"]})
    assert dup.status_code == 409
    bad = server.request("POST", "/v1/keys", token=operator,
                         json={"name": "b", "deployments": ["chat"],
                               "rpm": -5})
    assert bad.status_code == 400 and "rpm" in bad.text
    bad = server.request("POST", "/v1/keys", token=operator,
                         json={"name": "b", "deployments": ["Chat Bot"]})
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "deployments"
    listed = server.request("GET", "/v1/keys", token=operator).json()["keys"]
    assert [k["name"] for k in listed] == ["app1"]
    assert secret not in json.dumps(listed) and "hash" not in listed[0]
    keys = config(server, token=operator)["keys"]
    assert keys == [{"name": "app1",
                     "hash": hashlib.sha256(secret.encode()).hexdigest(),
                     "deployments": ["chat"], "rpm": 600, "tpm": 100000,
                     "quota_day": 1000000, "quota_month": 0}]
    gen = config(server)["generation"]
    assert server.request("DELETE", "/v1/keys/app1",
                          token=operator).status_code == 200
    after = config(server)
    assert after["keys"] == [] and after["generation"] > gen
    assert server.request("DELETE", "/v1/keys/app1",
                          token=operator).status_code == 404
    # A revoked key's name may be taken again, by a new secret.
    again = server.request("POST", "/v1/keys", token=operator,
                           json={"name": "app1", "deployments": ["chat"]})
    assert again.status_code == 201, again.text
    fresh = again.json()["secret"]
    assert fresh != secret
    assert [k["hash"] for k in config(server)["keys"]] == [
        hashlib.sha256(fresh.encode()).hexdigest()]
    audit = server.request("GET", "/v1/audit").json()["audit"]
    actions = {(a["action"], a["outcome"]) for a in audit}
    assert {("deployment.create", "ok"), ("deployment.scale", "denied"),
            ("key.create", "ok"), ("key.revoke", "ok")} <= actions


def test_gateway_alert_recorded_and_streamed(server):
    alert = {"deployment": "chat", "signal": "latency_ms", "value": 950.0,
             "low": 80.0, "high": 240.0, "window_s": 60,
             "started_at_ms": 1700000000000}
    r = server.request("POST", "/v1/gateway/alerts", json=alert)
    assert r.status_code == 202, r.text
    assert server.request("POST", "/v1/gateway/alerts",
                          json={"deployment": "chat"}).status_code == 400
    listed = server.request("GET", "/v1/alerts").json()["alerts"]
    assert listed[0]["state"] == "firing"
    assert listed[0]["labels"]["deployment"] == "chat"
    assert listed[0]["value"] == 950.0
    events = server.request("GET", "/v1/events").text
    assert '"alert.firing"' in events and "latency_ms" in events
    r = server.request("POST", "/v1/gateway/alerts",
                       json=dict(alert, state="resolved"))
    assert r.status_code == 202
    listed = server.request("GET", "/v1/alerts").json()["alerts"]
    assert listed[0]["state"] == "resolved"
    audit = server.request("GET", "/v1/audit",
                           params={"action": "gateway."}).json()["audit"]
    assert [a["object"] for a in audit] == ["deployment/chat"] * 2
    r = server.cli("alerts", "--all", check=True)
    assert "gateway_anomaly_latency_ms" in r.stdout


def test_deployment_survives_server_restart(server):
    deploy(server, deployment_yaml("chat"))
    reps = wait_ready(server, "chat", 2)
    pids = {i: ask(r["address"])["pid"] for i, r in reps.items()}
    jobs = [r["job"] for r in detail(server, "chat")["replicas"]]
    server.stop()
    server.start()
    again = wait_ready(server, "chat", 2)
    assert {i: ask(r["address"])["pid"] for i, r in again.items()} == pids
    assert [r["job"] for r in detail(server, "chat")["replicas"]] == jobs
    listed = server.request("GET", "/v1/jobs").json()["jobs"]
    assert len(listed) == 2, "replicas were duplicated"
    server.request("DELETE", "/v1/deployments/chat")
    wait_for(lambda: not any(Path(f"/proc/{p}").exists()
                             for p in pids.values()), what="stopped")


def test_bad_spec_and_model_job(server):
    r = server.request("POST", "/v1/deployments", params={"file": "d.yaml"},
                       data="kind: Deployment\nname: chat\nmodel: /m\n"
                            "command: [x]\nreplica: 2\n")
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith(
        'd.yaml:5:1: unknown field "replica" in deployment')
    r = server.request("POST", "/v1/deployments", data=(
        "kind: Deployment\nname: chat\nmodel: job:99\ncommand: [x]\n"))
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "model: job 99 not found"
    # A succeeded job's outputs are the model directory.
    job = server.submit("kind: Job\nname: train\ncommand: [\"/bin/sh\", "
                        "\"-c\", \"echo w > $KILN_OUTPUT_DIR/weights.bin\"]\n"
                        "checkpoint: {every: 1h}\n")
    server.wait_state(job, "succeeded")
    wait_for(lambda: server.job(job)["outputs"], what="outputs recorded")
    doc = deploy(server, "kind: Deployment\nname: chat\n"
                 f"model: job:{job}\ncommand: [x]\nreplicas: 0\n")
    model_dir = doc["deployment"]["model_dir"]
    assert (Path(model_dir) / "weights.bin").read_text() == "w\n"


def test_model_path_inside_the_home_is_refused(server, tmp_path):
    """A replica's model directory is shown to it read-only through the
    sandbox, so a path into the server's home (other jobs' blobs, the
    tokens) is refused, also when reached through a link."""
    user = server.create_token("dep-user", "user")
    link = tmp_path / "innocent"
    link.symlink_to(server.home / "blobs")
    for model in (str(server.home), str(server.home / "blobs"), str(link)):
        r = server.request("POST", "/v1/deployments", token=user, data=(
            f"kind: Deployment\nname: peek\nmodel: {model}\n"
            "command: [x]\nreplicas: 0\n"))
        assert r.status_code == 403, r.text
        err = r.json()["error"]
        assert err["field"] == "model" and "inside the server's home" in \
            err["message"]
    # Not made yet, it is checked as far as it exists.
    later = link / "not-trained-yet" / "model"
    r = server.request("POST", "/v1/deployments", token=user, data=(
        f"kind: Deployment\nname: peek\nmodel: {later}\n"
        "command: [x]\nreplicas: 0\n"))
    assert r.status_code == 403, r.text
    fine = tmp_path / "to-be-trained"
    r = server.request("POST", "/v1/deployments", token=user, data=(
        f"kind: Deployment\nname: later\nmodel: {fine}\n"
        "command: [x]\nreplicas: 0\n"))
    assert r.status_code in (200, 201), r.text
    assert r.json()["deployment"]["model_dir"] == str(fine.resolve())


def test_cli(server, tmp_path):
    spec = tmp_path / "chat.yaml"
    spec.write_text(deployment_yaml("chat", replicas=1))
    r = server.cli("validate", str(spec))
    assert r.returncode == 0 and "deployment chat of /tmp, 1 replica" in r.stdout
    r = server.cli("deploy", str(spec), check=True)
    assert "deployment chat: generation 1, 1 replica wanted" in r.stdout
    wait_ready(server, "chat", 1)
    r = server.cli("deployments", check=True)
    assert r.stdout.splitlines()[1].split()[:2] == ["chat", "1/1"]
    r = server.cli("scale", "chat", "2", check=True)
    wait_ready(server, "chat", 2)
    r = server.cli("deployments", "chat", check=True)
    states = [line.split()[1] for line in r.stdout.splitlines()
              if line[:1].isdigit()]
    assert states == ["ready", "ready"]
    assert server.cli("scale", "chat", "lots").returncode == 2
    r = server.cli("rollout", "restart", "chat", check=True)
    assert "rolling restart started" in r.stdout
    wait_for(lambda: detail(server, "chat")["rollout"] is None, timeout=40,
             what="rollout done")
    r = server.cli("key", "create", "--name", "app1", "--deployments",
                   "chat,chat-small", "--rpm", "600", "--tpm", "100000",
                   "--quota-day", "1000000", check=True)
    secret = r.stdout.strip()
    assert secret.startswith("kgw_") and "not be shown again" in r.stderr
    r = server.cli("key", "ls", check=True)
    row = r.stdout.splitlines()[1].split()
    assert row[:6] == ["app1", "chat,chat-small", "600", "100000", "1000000",
                       "-"]
    assert secret not in r.stdout
    server.cli("key", "revoke", "app1", check=True)
    assert len(server.cli("key", "ls", check=True).stdout.splitlines()) == 1
    r = server.cli("undeploy", "chat", check=True)
    assert "deleted" in r.stdout
    r = server.cli("deployments", check=True)
    assert len(r.stdout.splitlines()) == 1
    for cmd in ("deploy", "deployments", "scale", "undeploy", "rollout",
                "key"):
        assert server.cli(cmd, "--help").returncode == 0


def test_redeploy_scales_or_rolls(server):
    doc = deploy(server, deployment_yaml("chat", replicas=1))
    assert doc["deployment"]["generation"] == 1
    reps = wait_ready(server, "chat", 1)
    first = ask(reps[0]["address"])["pid"]
    # Only the count changed: no rollout, replica 0 keeps running.
    doc = deploy(server, deployment_yaml("chat", replicas=2))
    assert doc["deployment"]["rollout"] is None
    assert doc["deployment"]["generation"] == 2
    reps = wait_ready(server, "chat", 2)
    assert ask(reps[0]["address"])["pid"] == first
    # A changed spec reaches every replica, one at a time.
    doc = deploy(server, deployment_yaml("chat", replicas=2,
                                         extra="priority: 5\n"))
    assert doc["deployment"]["rollout"] == {"next_replica": 0}

    def rolled():
        d = detail(server, "chat")
        return d["rollout"] is None and d["replicas_ready"] == 2 and d
    d = wait_for(rolled, timeout=40, what="rollout of the new spec")
    for r in d["replicas"]:
        assert server.job(r["job"])["priority"] == 5


def test_rollout_resumes_after_server_restart(server, tmp_path):
    control = tmp_path / "ctl"
    control.mkdir()
    deploy(server, deployment_yaml("chat", control=control))
    wait_ready(server, "chat", 2)
    old = [r["job"] for r in detail(server, "chat")["replicas"]]
    # New replicas start held (not ready): the rollout stops at replica 0.
    (control / "hold").write_text("")
    assert server.request("POST", "/v1/deployments/chat/restart"
                          ).status_code == 200
    replaced = wait_for(lambda: (lambda d: d["replicas"][0]["job"]
                                 if d["replicas"][0]["job"] != old[0]
                                 and d["replicas"][0]["state"] == "starting"
                                 else None)(detail(server, "chat")),
                        what="replica 0 replaced and held")
    server.stop()
    server.start()
    d = detail(server, "chat")
    assert d["rollout"] == {"next_replica": 0}
    assert [r["job"] for r in d["replicas"]] == [replaced, old[1]]
    (control / "hold").unlink()
    d = wait_for(lambda: (lambda d: d if d["rollout"] is None and
                          d["replicas_ready"] == 2 else None)(
        detail(server, "chat")), timeout=40, what="rollout resumed and done")
    # Replica 0 was replaced once, not again after the restart.
    assert d["replicas"][0]["job"] == replaced
    assert d["replicas"][1]["job"] not in (old[1], replaced)
    server.request("DELETE", "/v1/deployments/chat")
