"""Idempotent creates: a request sent again with the same Idempotency-Key
gets the first answer and never makes a second object, across kill -9 of
the server; the CLI sends a key and retries once when the answer is lost."""
import hashlib
import os
import socket
import threading
import time
import uuid

import requests

from conftest import Server, job_yaml, wait_for


def post_job(server, name, key, token="admin", command=("true",)):
    return server.request("POST", "/v1/jobs", token=token,
                          data=job_yaml(name, list(command)),
                          params={"file": "job.yaml"},
                          headers={"Idempotency-Key": key})


def jobs_named(server, name):
    r = server.request("GET", "/v1/jobs", params={"name": name})
    assert r.status_code == 200, r.text
    return r.json()["jobs"]


def test_retry_with_the_same_key_returns_the_first_job(server):
    first = post_job(server, "once", "key-1")
    assert first.status_code == 201, first.text
    again = post_job(server, "once", "key-1")
    assert again.status_code == 201, again.text
    assert again.json()["job"]["id"] == first.json()["job"]["id"]
    assert set(again.json()["job"]) == set(first.json()["job"])
    assert len(jobs_named(server, "once")) == 1
    # A key belongs to its caller: another token's same key is its own.
    other = server.create_token("bob", "user")
    theirs = post_job(server, "once", "key-1", token=other)
    assert theirs.status_code == 201, theirs.text
    assert theirs.json()["job"]["id"] != first.json()["job"]["id"]
    # Without a key, every submit is a new job.
    plain = server.request("POST", "/v1/jobs", data=job_yaml("once", ["true"]))
    assert plain.status_code == 201
    assert len(jobs_named(server, "once")) == 3


def test_same_key_with_another_body_is_a_conflict(server):
    assert post_job(server, "a", "key-2").status_code == 201
    r = post_job(server, "b", "key-2")
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "conflict"
    assert "Idempotency-Key" in err["message"]
    assert jobs_named(server, "b") == []
    bad = post_job(server, "c", "has space")
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "Idempotency-Key"


def test_a_refused_create_leaves_the_key_unused(server):
    bad = server.request("POST", "/v1/jobs", data="kind: Job\nname: x\n",
                         headers={"Idempotency-Key": "key-3"})
    assert bad.status_code == 400
    good = post_job(server, "fixed", "key-3")
    assert good.status_code == 201, good.text


def test_deployment_retry_returns_the_first_answer(server, tmp_path):
    spec = ("kind: Deployment\nname: web\nmodel: /tmp\nreplicas: 0\n"
            "command: [\"sleep\", \"600\"]\n")
    headers = {"Idempotency-Key": "deploy-1"}
    first = server.request("POST", "/v1/deployments", data=spec,
                           headers=headers)
    assert first.status_code == 201, first.text
    again = server.request("POST", "/v1/deployments", data=spec,
                           headers=headers)
    # A second apply without the key would be generation 2 (200).
    assert again.status_code == 201, again.text
    assert again.json() == first.json()
    assert server.request("DELETE", "/v1/deployments/web").status_code == 200


class DropFirstAnswer:
    """A loopback proxy in front of the server that forwards the first
    request but resets the connection instead of passing the answer back
    (the answer lost on the way), then forwards everything. It records
    each request's Idempotency-Key."""

    def __init__(self, upstream):
        host, port = upstream.rsplit("//", 1)[1].split(":")
        self.upstream = (host, int(port))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.keys = []
        self.dropped = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def read_request(self, conn):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            if name.strip().lower() == b"idempotency-key":
                self.keys.append(value.strip().decode())
        while len(body) < length:
            body += conn.recv(65536)
        return head + b"\r\n\r\n" + body

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                request = self.read_request(conn)
                with socket.create_connection(self.upstream) as up:
                    up.sendall(request)
                    up.shutdown(socket.SHUT_WR)
                    answer = b""
                    while chunk := up.recv(65536):
                        answer += chunk
                if not self.dropped:
                    self.dropped = True
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    continue
                conn.sendall(answer)

    def close(self):
        self.sock.close()


def test_cli_retries_a_lost_answer_with_the_same_key(server, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(job_yaml("cli-once", ["true"]))
    proxy = DropFirstAnswer(server.url)
    try:
        res = server.cli("submit", str(spec), "--server", proxy.url,
                         token=server.admin_token)
    finally:
        proxy.close()
    assert res.returncode == 0, res.stderr
    assert proxy.dropped
    assert len(proxy.keys) == 2 and proxy.keys[0] == proxy.keys[1], proxy.keys
    assert len(jobs_named(server, "cli-once")) == 1
    # The next command sends a key of its own.
    res = server.cli("submit", str(spec), token=server.admin_token)
    assert res.returncode == 0, res.stderr
    assert len(jobs_named(server, "cli-once")) == 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_concurrent_submits_survive_kill9_exactly_once(tmp_path):
    """Submits from 8 client threads, each retried with its key until
    answered, while the server is killed -9 twice and restarted on the
    same home and port: every job is stored exactly once. The jobs ask
    for a GPU model no node has, held (hold=1) so they queue, and none
    runs. KILN_IDEMPOTENCY_SUBMITS
    sets the number of submits (default 600, run at 2,000 for
    docs/benchmarks.md): on a shared 2-core machine each submit into a
    long queue costs more (the scheduler's pass grows with the queue),
    and 600 keeps the test within a minute; the kills still land while
    hundreds of requests are in flight. The clients give up on an answer
    after 0.3 s and send again, as a client behind a flaky network does:
    the first request is often still in the server's hands, so without
    the key it would make a second job."""
    n_threads = 8
    per_thread = -(-int(os.environ.get("KILN_IDEMPOTENCY_SUBMITS", "600"))
                   // n_threads)
    total = n_threads * per_thread
    slack = max(1.0, total / 600)  # deadlines grow with the count
    port = free_port()
    srv = Server(tmp_path / "home",
                 extra=["--listen", f"127.0.0.1:{port}",
                        "--max-queued-jobs-per-user", str(total)])
    srv.home.mkdir()
    srv.start()
    url = srv.url
    token = srv.admin_token
    acked = {}
    lock = threading.Lock()
    errors = []

    def client(t):
        session = requests.Session()
        for i in range(per_thread):
            name = f"idem-{t}-{i}"
            key = uuid.uuid4().hex
            spec = job_yaml(name, ["true"],
                            resources={"gpus": 1, "gpu_model": ["B200"]})
            deadline = time.monotonic() + 60 * slack
            while True:
                try:
                    r = session.post(url + "/v1/jobs?hold=1", data=spec,
                                     headers={"Authorization":
                                              f"Bearer {token}",
                                              "Idempotency-Key": key},
                                     timeout=(5, 0.3))
                except requests.RequestException:
                    session = requests.Session()
                    if time.monotonic() > deadline:
                        errors.append(f"{name}: no answer in time")
                        return
                    time.sleep(0.05)
                    continue
                if r.status_code != 201:
                    errors.append(f"{name}: {r.status_code} {r.text}")
                    return
                with lock:
                    acked[name] = r.json()["job"]["id"]
                break

    threads = [threading.Thread(target=client, args=(t,))
               for t in range(n_threads)]
    try:
        for th in threads:
            th.start()
        for fraction in (3, 3 * 2):
            wait_for(lambda: len(acked) >= total * fraction // 9,
                     timeout=60 * slack, what="acknowledged submits")
            srv.kill9()
            srv.start()
            assert srv.url == url
        for th in threads:
            th.join(timeout=120 * slack)
        assert not errors, errors[:5]
        assert len(acked) == total
        r = srv.request("GET", "/v1/jobs", params={"limit": 100000})
        names = [j["name"] for j in r.json()["jobs"]]
        print(f"submits {total}: acknowledged {len(acked)}, stored "
              f"{len(names)}, duplicates {len(names) - len(set(names))}")
        assert len(names) == total
        assert set(names) == set(acked)
        by_id = {j["id"]: j["name"] for j in r.json()["jobs"]}
        assert all(by_id[i] == n for n, i in acked.items())
    finally:
        srv.stop()


def test_workflow_run_retry_returns_the_first_run(server):
    """A workflow run sent again with its key is the first run; its steps'
    jobs, submitted inside the key's transaction, run once."""
    spec = ("kind: Workflow\nname: keyed\nsteps:\n"
            "  - {name: a, job: {command: [/bin/true]}}\n"
            "  - {name: b, needs: [a], job: {command: [/bin/true]}}\n")
    body = {"spec": spec, "filename": "w.yaml"}
    ids = []
    for _ in range(2):
        r = server.request("POST", "/v1/workflows", json=body,
                           headers={"Idempotency-Key": "wf-1"})
        assert r.status_code == 201, r.text
        ids.append(r.json()["workflow"]["id"])
    assert ids[0] == ids[1]
    done = wait_for(lambda: (lambda w: w if w["state"] in
                             ("succeeded", "failed") else None)(
        server.request("GET", f"/v1/workflows/{ids[0]}").json()["workflow"]),
        what="the run to end")
    assert done["state"] == "succeeded", done
    runs = server.request("GET", "/v1/workflows").json()["workflows"]
    assert [w["id"] for w in runs] == [ids[0]]
    jobs = server.request("GET", "/v1/jobs").json()["jobs"]
    assert sorted(j["state"] for j in jobs) == ["succeeded", "succeeded"]


def test_model_version_retry_returns_the_first_version(server):
    """A model version pushed again with its key is the first version,
    not a second one."""
    data = b"weights" * 100
    digest = hashlib.sha256(data).hexdigest()
    r = server.request("POST", f"/v1/model-blobs/{digest}",
                       params={"upload": "u", "offset": 0, "final": 1},
                       data=data)
    assert r.status_code == 201, r.text
    files = [{"path": "w.bin", "sha256": digest, "size": len(data)}]
    answers = []
    for _ in range(2):
        r = server.request("POST", "/v1/models/keyed/versions",
                           json={"files": files},
                           headers={"Idempotency-Key": "model-1"})
        assert r.status_code == 201, r.text
        answers.append(r.json())
    assert answers[0] == answers[1]
    [model] = [m for m in server.request("GET", "/v1/models").json()["models"]
               if m["name"] == "keyed"]
    assert model["versions"] == 1
