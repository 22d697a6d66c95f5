"""The Python client (python/kiln) against a real server on loopback:
every method at least once, logs followed while a job runs, waiting on a
job that fails, an eviction and its resume, a model pushed and pulled
with its digests checked, and error answers as the right exceptions.
The package is type-checked with mypy --strict."""
import dataclasses
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit
from pathlib import Path

import pytest

from conftest import KILN, wait_for

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kiln  # noqa: E402

MODEL_SERVER = Path(__file__).resolve().parent / "fixtures" / "model_server.py"


@pytest.fixture
def client(server, monkeypatch):
    monkeypatch.setenv("KILN_HOME", str(server.home))
    monkeypatch.delenv("KILN_SERVER", raising=False)
    monkeypatch.delenv("KILN_TOKEN", raising=False)
    return kiln.Client(timeout=30)


def sh(script, **fields):
    return {"kind": "Job", "name": fields.pop("name", "py"),
            "command": ["/bin/sh", "-c", script], **fields}


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_mypy_strict_is_clean():
    if not any((Path(p) / "requests-stubs").is_dir() for p in sys.path):
        pytest.skip("requests' type stubs (python3-typeshed, "
                    "scripts/install-deps.sh) are not installed")
    res = subprocess.run([sys.executable, "-m", "mypy", "--strict", "kiln"],
                         cwd=REPO / "python", capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_installs_with_pip(tmp_path):
    """pip install ./python: the package, typed (py.typed), importable.
    Built from a copy, so the checkout gets no build directories."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "python", src,
                    ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation",
         "--no-deps", "--no-index", "--target", str(tmp_path / "site"),
         str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "kiln" / "py.typed").exists()
    res = subprocess.run(
        [sys.executable, "-c", "import kiln; print(kiln.__file__)"],
        env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")),
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.stdout.startswith(str(tmp_path / "site")), res.stderr


def test_dataclasses_name_only_fields_the_document_has():
    """Each typed result's fields are properties of its schema in the
    OpenAPI document, so the client and the API cannot drift apart."""
    doc = json.loads(subprocess.run([KILN, "openapi"], capture_output=True,
                                    text=True, check=True).stdout)
    schemas = doc["components"]["schemas"]
    schema_of = {kiln.ModelVersion: "Model"}
    for cls in (kiln.Job, kiln.Attempt, kiln.Task, kiln.Output, kiln.Node,
                kiln.Alert, kiln.Event, kiln.Deployment, kiln.Replica,
                kiln.Key, kiln.ModelSummary, kiln.ModelVersion,
                kiln.AliasMove, kiln.WorkflowRun, kiln.Step):
        props = schemas[schema_of.get(cls, cls.__name__)]["properties"]
        for f in dataclasses.fields(cls):
            assert f.name == "raw" or f.name in props, (cls.__name__, f.name)


def test_finds_server_and_token_as_the_cli_does(server, client, monkeypatch):
    assert client.whoami() == {"name": "admin", "role": "admin"}
    assert client.health()["ok"] is True
    monkeypatch.setenv("KILN_TOKEN", server.create_token("v", "viewer"))
    assert kiln.Client().whoami()["role"] == "viewer"
    monkeypatch.setenv("KILN_HOME", str(server.home / "nowhere"))
    with pytest.raises(kiln.InvalidArgument) as e:
        kiln.Client()
    assert e.value.field == "server"
    with pytest.raises(kiln.InvalidArgument) as e:
        kiln.Client(server="127.0.0.1:1")
    assert e.value.field == "server"


def test_jobs_submit_follow_wait_outputs_and_events(client, tmp_path):
    gate = tmp_path / "gate"
    script = (f"echo one; while [ ! -e {gate} ]; do sleep 0.05; done; "
              "echo two; echo weights > $KILN_OUTPUT_DIR/w.bin")
    job = client.jobs.submit(sh(script, name="follow-me"))
    assert isinstance(job, kiln.Job) and job.state in ("queued", "running")
    lines = client.jobs.logs(job.id, follow=True)
    assert next(lines) == "one"
    # The first line came while the task still waited on the gate.
    assert client.jobs.get(job.id).state == "running"
    gate.touch()
    assert list(lines) == ["two"]
    done = client.jobs.wait(job.id, timeout=120)
    assert done.state == "succeeded" and done.exit_code == 0
    assert done.attempts_detail[0].tasks[0].state == "exited"
    assert list(client.jobs.logs(job.id)) == ["one", "two"]
    assert list(client.jobs.logs(job.id, tail=1)) == ["two"]
    wait_for(lambda: client.jobs.outputs(job.id), what="outputs recorded")
    [out] = client.jobs.outputs(job.id)
    assert out.name == "w.bin"
    [got] = client.jobs.download(job.id, tmp_path / "out")
    assert got.read_text() == "weights\n" and sha256(got) == out.sha256

    spec = tmp_path / "spec.yaml"
    spec.write_text("kind: Job\nname: from-file\ncommand: [/bin/true]\n")
    other = client.jobs.submit(spec, name="renamed", priority=3,
                               env={"K": "v"})
    assert (other.name, other.priority) == ("renamed", 3)
    assert client.jobs.get(other.id).spec["env"]["K"] == "v"
    with pytest.raises(kiln.InvalidArgument) as e:
        client.jobs.submit(spec, command=["/bin/false"])
    assert e.value.field.startswith("overrides")
    client.jobs.wait(other.id, timeout=120)
    assert [j.id for j in client.jobs.list(name="renamed")] == [other.id]
    assert job.id in [j.id for j in client.jobs.list(state="succeeded")]
    states = [e.raw.get("state") for e in client.events()
              if e.type == "job.state" and e.raw.get("job") == job.id]
    assert "running" in states and states[-1] == "succeeded"


def test_events_follow_sees_a_new_job(client):
    """The follower is in place when events() returns: a job that has
    come and gone before the first read is still seen."""
    stream = client.events(since=10**9, follow=True)
    job = client.jobs.submit(sh("true", name="seen"))
    client.jobs.wait(job.id, timeout=120)
    seen = []
    reader = threading.Thread(target=lambda: seen.append(next(
        e for e in stream if e.type == "job.state"
        and e.raw.get("job") == job.id)), daemon=True)
    reader.start()
    reader.join(60)
    assert seen, "the stream missed the job's events"
    assert seen[0].seq > 0
    stream.close()


def test_wait_on_a_failing_job_raises_with_the_reason(client):
    job = client.jobs.submit(sh("echo bad >&2; exit 3", name="doomed"))
    with pytest.raises(kiln.JobFailed) as e:
        client.jobs.wait(job.id, timeout=120)
    assert e.value.job.state == "failed"
    assert "exit code 3" in str(e.value)
    slow = client.jobs.submit(sh("sleep 300", name="slow"))
    with pytest.raises(TimeoutError):
        client.jobs.wait(slow.id, timeout=0.3)
    assert client.jobs.cancel(slow.id).cancel_requested
    with pytest.raises(kiln.JobFailed):
        client.jobs.wait(slow.id, timeout=120)


def test_eviction_and_resume_through_the_client(client):
    script = ("trap 'exit 143' USR1; "
              "if [ $KILN_ATTEMPT = 2 ]; then echo resumed; exit 0; fi; "
              "echo first; sleep 300 & wait")
    job = client.jobs.submit(sh(script, name="evictee", preemptible=True,
                                checkpoint={"signal": "SIGUSR1",
                                            "grace": "5s"}))
    lines = client.jobs.logs(job.id, follow=True)  # waits for the start
    assert next(lines) == "first"
    lines.close()
    client.jobs.evict(job.id, reason="make room")
    done = client.jobs.wait(job.id, timeout=120)
    assert [a.state for a in done.attempts_detail] == ["preempted",
                                                       "succeeded"]
    assert "make room" in done.attempts_detail[0].reason
    assert list(client.jobs.logs(job.id, attempt=2)) == ["resumed"]


class AnswerDropper:
    """A loopback proxy to the server that passes its first request on
    but closes the client's connection once the answer starts, without
    passing it: the server did the work, the client saw the connection
    break. Later connections are relayed whole."""

    def __init__(self, url):
        target = urlsplit(url)
        self.upstream = (target.hostname, target.port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            server = socket.create_connection(self.upstream)
            drop = self.connections == 1
            threading.Thread(target=self.pipe, args=(client, server, False),
                             daemon=True).start()
            threading.Thread(target=self.pipe, args=(server, client, drop),
                             daemon=True).start()

    @staticmethod
    def pipe(src, dst, drop):
        try:
            while True:
                data = src.recv(65536)
                if not data or drop:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.listener.close()


def test_a_create_is_sent_again_with_its_idempotency_key(server, client):
    """The first answer is lost to a broken connection: the client sends
    the submit again with the same Idempotency-Key and gets the job the
    first one made; no second job exists."""
    proxy = AnswerDropper(server.url)
    try:
        through = kiln.Client(server=proxy.url, token=server.admin_token,
                              timeout=10)
        job = through.jobs.submit(sh("true", name="once"))
    finally:
        proxy.close()
    assert proxy.connections == 2
    assert [j.id for j in client.jobs.list(name="once")] == [job.id]
    proxy = AnswerDropper(server.url)
    try:
        no_retry = kiln.Client(server=proxy.url, token=server.admin_token,
                               timeout=10, retries=0)
        with pytest.raises(kiln.Unavailable) as e:
            no_retry.jobs.submit(sh("true", name="twice"))
    finally:
        proxy.close()
    assert e.value.field == "server"
    # That one was made, its answer lost: retries=0 did not send it again.
    assert len(client.jobs.list(name="twice")) == 1


def test_errors_are_exceptions_naming_code_and_field(server, client):
    with pytest.raises(kiln.NotFound) as e:
        client.jobs.get(9999)
    assert e.value.status == 404 and e.value.code == "not_found"
    with pytest.raises(kiln.InvalidArgument) as e:
        client.jobs.submit("kind: Job\nname: x\ncommand: [a]\ntasks: -1\n")
    assert e.value.field == "tasks"
    running = client.jobs.submit(sh("sleep 300", name="steady"))
    wait_for(lambda: client.jobs.get(running.id).state == "running",
             what="running")
    with pytest.raises(kiln.Conflict):
        client.jobs.evict(running.id)
    huge = sh("true", name="huge", tasks=1024)
    with pytest.raises(kiln.Conflict) as e:
        client.jobs.submit(huge)
    assert e.value.field == "resources"
    held = client.jobs.submit(huge, hold=True)
    assert held.state == "queued"
    client.jobs.cancel(held.id)
    client.jobs.cancel(running.id)
    viewer = kiln.Client(token=server.create_token("peek", "viewer"))
    with pytest.raises(kiln.PermissionDenied) as e:
        viewer.jobs.submit(sh("true"))
    assert e.value.status == 403
    with pytest.raises(kiln.Unauthenticated):
        kiln.Client(token="kiln_" + "A" * 43).jobs.list()


def test_model_push_pull_sign_promote(server, client, tmp_path):
    model = tmp_path / "m"
    (model / "weights").mkdir(parents=True)
    (model / "config.json").write_text('{"layers": 2}')
    (model / "weights" / "w.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    seen = []
    v = client.models.push("gpt", model, alias="staging",
                           progress=lambda sent, total: seen.append(
                               (sent, total)))
    assert (v.name, v.version) == ("gpt", 1)
    assert seen[-1][0] == seen[-1][1] > 3 * 1024 * 1024 and len(seen) >= 4
    seen.clear()
    assert client.models.push("gpt", model).version == 2 and not seen
    [summary] = client.models.list()
    assert (summary.name, summary.latest) == ("gpt", 2)
    assert summary.aliases == {"staging": 1}

    with pytest.raises(kiln.KilnError) as e:
        client.models.pull("gpt@1", tmp_path / "out")
    assert e.value.field == "signatures"
    key = tmp_path / "ops"
    server.cli("model", "keygen", "--out", str(key), check=True)
    trusted = server.home / "keys" / "trusted"
    trusted.mkdir(parents=True, exist_ok=True)
    (trusted / "ops.pub").write_bytes(Path(f"{key}.pub").read_bytes())
    server.cli("model", "sign", "gpt@1", "--key", str(key), check=True)
    assert client.models.verify("gpt@1").trusted
    client.models.pull("gpt@staging", tmp_path / "out")
    for f in ("config.json", "weights/w.bin"):
        assert sha256(tmp_path / "out" / f) == sha256(model / f)

    sig = client.models.get("gpt@1").signatures[0]
    with pytest.raises(kiln.InvalidArgument):
        client.models.sign("gpt@2", sig["public_key"], sig["signature"])
    moved = client.models.promote("gpt@2", "staging")
    assert (moved.version, moved.raw["from"]) == (2, 1)
    assert client.models.rollback("gpt", "staging").version == 1
    assert client.models.lineage("gpt@1")["version"] == 1

    blob = server.home / "blobs" / "sha256" / sha256(model / "weights/w.bin")
    data = bytearray(blob.read_bytes())
    data[1000] ^= 1
    blob.write_bytes(bytes(data))
    with pytest.raises(kiln.DigestMismatch) as e:
        client.models.pull("gpt@1", tmp_path / "again")
    assert e.value.field == "weights/w.bin"
    assert not (tmp_path / "again").exists()
    with pytest.raises(kiln.DigestMismatch):
        client.models.verify("gpt@1")


def test_model_from_a_job(client):
    job = client.jobs.submit(sh("echo w > $KILN_OUTPUT_DIR/w.bin",
                                name="train"))
    client.jobs.wait(job.id, timeout=120)
    wait_for(lambda: client.jobs.outputs(job.id), what="outputs")
    v = client.models.from_job("tiny", job.id, alias="prod")
    assert v.version == 1 and v.manifest["lineage"]["job"] == job.id


def test_deployments_and_keys(client, tmp_path):
    spec = (f"kind: Deployment\nname: chat\nmodel: {tmp_path}\n"
            f"command: [\"/usr/bin/python3\", \"{MODEL_SERVER}\"]\n"
            "replicas: 1\nreadiness: {path: /health, period_s: 0.1}\n")
    d = client.deployments.create(spec)
    assert (d.name, d.replicas_wanted) == ("chat", 1)
    ready = client.deployments.wait_ready("chat", timeout=120)
    assert ready.replicas[0].ready and ready.replicas[0].address
    assert [x.name for x in client.deployments.list()] == ["chat"]
    assert client.deployments.scale("chat", 2).replicas_wanted == 2
    assert client.deployments.restart("chat").generation > d.generation
    key, secret = client.keys.create("app", ["chat"], rpm=60)
    assert secret.startswith("kgw_") and key.rpm == 60
    assert [k.name for k in client.keys.list()] == ["app"]
    client.keys.revoke("app")
    assert client.keys.list() == []
    client.deployments.delete("chat")
    with pytest.raises(kiln.NotFound):
        client.deployments.get("chat")


def test_workflows_run_wait_cancel_retry(client, tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "prep.yaml").write_text(
        "kind: Job\nname: prep\ncommand: [/bin/true]\n")
    wf = tmp_path / "w.yaml"
    wf.write_text("kind: Workflow\nname: pipe\nsteps:\n"
                  "  - name: prep\n    job: jobs/prep.yaml\n"
                  "  - name: after\n    needs: [prep]\n"
                  "    job: {command: [/bin/true]}\n")
    run = client.workflows.run(wf)
    done = client.workflows.wait(run.id, timeout=120)
    assert [s.state for s in done.steps] == ["succeeded", "succeeded"]
    assert [r.id for r in client.workflows.list()] == [run.id]

    gate = tmp_path / "gate"
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Workflow\nname: flaky\nsteps:\n"
                   "  - name: try\n    job: {command: [/bin/sh, -c, "
                   f"\"test -e {gate}\"]}}\n")
    failing = client.workflows.run(bad)
    with pytest.raises(kiln.WorkflowFailed) as e:
        client.workflows.wait(failing.id, timeout=120)
    assert e.value.run.state == "failed"
    gate.touch()
    client.workflows.retry(failing.id)
    assert client.workflows.wait(failing.id, timeout=120).state == "succeeded"

    slow = tmp_path / "slow.yaml"
    slow.write_text("kind: Workflow\nname: slow\nsteps:\n"
                    "  - name: wait\n    job: {command: [/bin/sleep, '300']}\n")
    long_run = client.workflows.run(slow)
    assert client.workflows.cancel(long_run.id).state == "cancelled"
    with pytest.raises(kiln.Conflict):
        client.workflows.cancel(long_run.id)


def test_nodes_alerts_cost_and_the_document(client):
    [node] = client.nodes()
    assert node.state == "ready" and len(node.devices) == 4
    assert isinstance(client.alerts(), list)
    assert client.alerts(all=True) == client.alerts(all=True)
    assert client.cost(by="user")["by"] == "user"
    assert "skus" in client.cost(report="reservations")
    assert "jobs" in client.cost(report="rightsize")
    with pytest.raises(kiln.InvalidArgument) as e:
        client.cost(by="planet")
    assert e.value.field == "by"
    doc = client.openapi()
    assert doc["openapi"] == "3.1.0" and "/v1/jobs" in doc["paths"]
