"""Slow work an API request waits for runs off the server's event loop:
while it is in progress, other calls are answered.

Each test sends the slow request on its own connection and reads its
answer only at the end; a fast call counts only when its answer arrived
while the slow connection had still received nothing, and while the slow
work was seen in progress (its temporary files exist, or, for the audit
verify, its answer proves the fast call came after the log was read). A
server whose loop blocked would answer the slow request first: its bytes
would already be on the slow connection. No timing thresholds."""
import glob
import hashlib
import hmac
import json
import os
import select
import socket
import sqlite3
import urllib.parse

import requests

from conftest import Server, azurite_env, job_yaml, wait_for

BIG = 200 * 1024 * 1024


class OpenRequest:
    """A request sent on its own connection, its answer read on demand."""

    def __init__(self, server, method, path, body=b""):
        url = urllib.parse.urlsplit(server.url)
        self.sock = socket.create_connection((url.hostname, url.port))
        head = (f"{method} {path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                f"Authorization: Bearer {server.admin_token}\r\n"
                f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n")
        self.sock.sendall(head.encode() + body)

    def answered(self):
        """Any byte of the answer has arrived."""
        return bool(select.select([self.sock], [], [], 0)[0])

    def response(self):
        self.sock.settimeout(300)
        data = b""
        while chunk := self.sock.recv(1 << 16):
            data += chunk
        self.sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), json.loads(body)


def served_during(slow, fast, working):
    """Call fast() whenever working() says the slow work is in progress,
    until slow is answered; True when one fast answer came while slow
    still had none."""
    while not slow.answered():
        if working() and fast() and not slow.answered():
            return True
    return False


def requests_session(server):
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {server.admin_token}"
    return http


def nodes_answer(server):
    return server.request("GET", "/v1/nodes").status_code == 200


def big_file(path, size=BIG):
    """Random bytes (not sparse: every byte is really read and hashed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(size // (8 << 20)):
            chunk = os.urandom(8 << 20)
            digest.update(chunk)
            f.write(chunk)
    return digest.hexdigest()


# ---- GET /v1/audit/verify ----

def extend_chain(home, rows):
    """Append rows to the audit log, chained as the store chains them
    (HMAC-SHA256 under audit.key over the previous hash, id, time and
    length-prefixed fields): a long log that verifies."""
    key = bytes.fromhex((home / "audit.key").read_text()[:64])
    db = sqlite3.connect(home / "kiln.db")
    last_id, prev = db.execute(
        "SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()

    def field(v):
        b = v.encode()
        return len(b).to_bytes(4, "big") + b

    batch = []
    for i in range(last_id + 1, last_id + 1 + rows):
        fields = ("filler", "admin", "test.fill", f"row/{i}", "ok", "")
        msg = (bytes.fromhex(prev) + i.to_bytes(8, "big") +
               (1_700_000_000_000 + i).to_bytes(8, "big") +
               b"".join(field(v) for v in fields))
        h = hmac.new(key, msg, hashlib.sha256).hexdigest()
        batch.append((i, 1_700_000_000_000 + i, *fields, prev, h))
        prev = h
    db.executemany("INSERT INTO audit (id, time_ms, actor, role, action,"
                   " object, outcome, detail, prev_hash, hash)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", batch)
    db.commit()
    db.close()


def test_audit_verify_runs_off_the_loop(tmp_path):
    s = Server(tmp_path / "home")
    s.home.mkdir()
    s.start()
    s.stop()
    extend_chain(s.home, 300_000)
    s.start()
    try:
        slow = OpenRequest(s, "GET", "/v1/audit/verify")
        made = []  # tokens created while the verify had no answer
        while not slow.answered():
            name = f"fast{len(made)}"
            r = s.request("POST", "/v1/tokens",
                          json={"name": name, "role": "viewer"})
            assert r.status_code == 201, r.text
            if not slow.answered():
                made.append(name)
        status, doc = slow.response()
        assert status == 200 and doc["ok"], doc
        assert doc["rows"] > 300_000
        # A token whose audit row is past the head the verify read was
        # created after the verify had started, and answered before it
        # ended.
        r = s.request("GET", "/v1/audit",
                      params={"action": "token.create", "limit": 10000})
        ids = [a["id"] for a in r.json()["audit"]
               if a["object"] in {f"token/{n}" for n in made}]
        assert ids and max(ids) > doc["head"]["id"], (ids, doc["head"])
    finally:
        s.stop()


# ---- an upload's copy into the store ----

def test_upload_is_stored_off_the_loop(azurite, tmp_path):
    """A file store takes a finished upload by a link (nothing to copy);
    any other store gets a copy of every byte, made by a worker while the
    loop goes on answering."""
    home = tmp_path / "home"
    home.mkdir()
    server = Server(home, extra=["--blob-store", f"{azurite}/offload"],
                    env=azurite_env(azurite)).start()
    try:
        data = os.urandom(BIG)
        digest = hashlib.sha256(data).hexdigest()
        part = 1 << 20
        path = f"/v1/model-blobs/{digest}"
        with requests_session(server) as http:
            for off in range(0, len(data) - part, part):
                r = http.post(server.url + path, data=data[off:off + part],
                              params={"offset": off, "upload": "u1"})
                assert r.status_code == 200, r.text
        last = len(data) - part
        slow = OpenRequest(server, "POST",
                           f"{path}?offset={last}&final=1&upload=u1",
                           data[last:])
        assert served_during(slow, lambda: nodes_answer(server),
                             lambda: True)
        status, doc = slow.response()
        assert status == 201, doc
        assert (doc["received"], doc["stored"]) == (BIG, True)
    finally:
        server.stop()


# ---- push --from-job, a deploy's model check and copy, a followed alias ----

def trusted_key(server, path):
    server.cli("model", "keygen", "--out", str(path), check=True)
    trusted = server.home / "keys" / "trusted"
    trusted.mkdir(parents=True, exist_ok=True)
    (trusted / f"{path.name}.pub").write_bytes(
        path.with_name(f"{path.name}.pub").read_bytes())
    return path


def deployed_version(server, name):
    r = server.request("GET", f"/v1/deployments/{name}")
    assert r.status_code == 200, r.text
    return r.json()["deployment"]["model_version"]


def test_registry_copies_run_off_the_loop(server, tmp_path):
    weights = tmp_path / "weights.bin"
    digest = big_file(weights)
    job = server.submit(job_yaml("train", [
        "sh", "-c", f"mkdir -p $KILN_OUTPUT_DIR && cp {weights} "
        "$KILN_OUTPUT_DIR/w.bin"]))
    server.wait_state(job, "succeeded", timeout=120)
    nodes = lambda: nodes_answer(server)  # noqa: E731

    # push --from-job: the outputs' copy into the registry.
    slow = OpenRequest(server, "POST", "/v1/models/big/from-job",
                       json.dumps({"job": job, "alias": "prod"}).encode())
    staged = str(server.home / "registry" / "uploads" / f"job-{job}.*")
    assert served_during(slow, nodes, lambda: glob.glob(staged))
    status, doc = slow.response()
    assert status == 201, doc
    assert doc["version"] == 1
    assert [(f["path"], f["sha256"]) for f in doc["manifest"]["files"]] == [
        ("w.bin", digest)]

    key = trusted_key(server, tmp_path / "ops")
    server.cli("model", "sign", "big@1", "--key", str(key), check=True)

    # A deploy: the check of every file and the copy replicas read.
    spec = "kind: Deployment\nname: chat\nmodel: big@prod\ncommand: [x]\n" \
           "replicas: 0\n"
    slow = OpenRequest(server, "POST", "/v1/deployments", spec.encode())
    copies = server.home / "registry" / "models" / "big"
    assert served_during(slow, nodes,
                         lambda: glob.glob(str(copies / "1.partial-*")))
    status, doc = slow.response()
    assert status == 201, doc
    assert doc["deployment"]["model_version"] == 1
    assert hashlib.sha256((copies / "1" / "w.bin").read_bytes()
                          ).hexdigest() == digest

    # A promote moving the alias is answered at once; the deployment's
    # check and copy of the new version run after it, while others are
    # served; then it rolls.
    r = server.request("POST", "/v1/models/big/from-job", json={"job": job})
    assert r.status_code == 201 and r.json()["version"] == 2, r.text
    server.cli("model", "sign", "big@2", "--key", str(key), check=True)
    r = server.request("POST", "/v1/models/big@2/promote",
                       json={"alias": "prod"})
    assert r.status_code == 200, r.text
    copying = lambda: glob.glob(str(copies / "2.partial-*"))  # noqa: E731
    meanwhile = []

    def rolled():
        if copying() and nodes() and copying():
            meanwhile.append(True)
        return deployed_version(server, "chat") == 2
    wait_for(rolled, timeout=120, interval=0.01, what="chat rolled to big@2")
    assert meanwhile
    assert hashlib.sha256((copies / "2" / "w.bin").read_bytes()
                          ).hexdigest() == digest


# ---- a re-validation run's model check and copy ----

def test_revalidation_check_runs_off_the_loop(server, tmp_path):
    weights = tmp_path / "weights.bin"
    big_file(weights)
    job = server.submit(job_yaml("train", [
        "sh", "-c", f"mkdir -p $KILN_OUTPUT_DIR && cp {weights} "
        "$KILN_OUTPUT_DIR/w.bin"]))
    server.wait_state(job, "succeeded", timeout=120)
    r = server.request("POST", "/v1/models/big/from-job",
                       json={"job": job, "alias": "prod"})
    assert r.status_code == 201, r.text
    key = trusted_key(server, tmp_path / "ops")
    server.cli("model", "sign", "big@1", "--key", str(key), check=True)
    r = server.request("POST", "/v1/models/big/revalidation", json={
        "alias": "prod", "every": "1h", "filename": "eval.yaml",
        "job": "kind: Job\nname: big-eval\ncommand: [\"true\"]\n",
        "thresholds": {"max": {"loss": 1}}})
    assert r.status_code == 200, r.text

    # The run's answer (its job) waits for the check and copy of big@1,
    # which run on a worker while other calls are answered.
    slow = OpenRequest(server, "POST", "/v1/models/big/revalidation/run",
                       json.dumps({"alias": "prod"}).encode())
    copies = server.home / "registry" / "models" / "big"
    assert served_during(slow, lambda: nodes_answer(server),
                         lambda: glob.glob(str(copies / "1.partial-*")))
    status, doc = slow.response()
    assert status == 202, doc
    assert doc["version"] == 1
    server.wait_state(doc["job"], "succeeded", timeout=60)


# ---- a workflow's register step ----

def test_register_step_copies_off_the_loop(server, tmp_path):
    from test_workflows import get, run, sh, steps, wait_run, \
        write_workflow
    weights = tmp_path / "weights.bin"
    digest = big_file(weights)
    text = ("kind: Workflow\nname: big\nsteps:\n"
            "  - name: train\n    job: {command: " +
            sh(f"mkdir -p $KILN_OUTPUT_DIR && cp {weights} "
               "$KILN_OUTPUT_DIR/w.bin") + "}\n"
            "  - name: register\n    needs: [train]\n"
            "    register: {from: train, model: big, alias: prod}\n")
    rid = run(server, write_workflow(tmp_path, text))
    staged = str(server.home / "registry" / "uploads" / "job-*")
    copying = lambda: glob.glob(staged)  # noqa: E731
    meanwhile = []

    def done():
        w = get(server, rid)
        if copying() and steps(w)["register"]["state"] == "running" and \
                copying():
            meanwhile.append(True)
        return w["state"] not in ("queued", "running")
    wait_for(done, timeout=120, interval=0.01, what="the run ended")
    # The step was seen running, answered while its copy was in progress.
    assert meanwhile
    w = wait_run(server, rid)
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    assert steps(w)["register"]["metrics"] == {"version": 1}
    r = server.request("GET", "/v1/models/big@1").json()
    assert [f["sha256"] for f in r["manifest"]["files"]] == [digest]
