"""Submits share the store's commits (group commit) and keep its promise:
a job is on disk before its submit is answered, so a server killed with
SIGKILL in the middle of a burst of concurrent submits loses none that
it acknowledged. Submits with an Idempotency-Key share commits too, with
their keys: after the kill each acknowledged key replays its first
answer, byte for byte, and creates nothing."""
import threading
import uuid

import requests

from conftest import Server, job_yaml, kill_processes_under

CLIENTS = 8


SPEC = job_yaml("burst", ["/bin/true"], resources={"gpus": 8})


def burst(server, stop, acked, errors, keys=None):
    """Submit until told to stop; record the ids acknowledged (201), and
    with keys (a dict) each acknowledged key with its answer's bytes."""
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    url = server.url + "/v1/jobs"
    with requests.Session() as http:
        while not stop.is_set():
            key = uuid.uuid4().hex
            if keys is not None:
                headers["Idempotency-Key"] = key
            try:
                r = http.post(url, data=SPEC, headers=headers,
                              params={"file": "burst.yaml", "hold": "1"},
                              timeout=30)
            except requests.RequestException:
                return  # the server is gone: what it said stands
            if r.status_code == 201:
                acked.append(r.json()["job"]["id"])
                if keys is not None:
                    keys[key] = r.content
            else:
                errors.append(r.text)


def kill_during_burst(home, keys=None):
    """Start a server on home, kill it -9 while 8 clients submit, and
    start it again: (the restarted server, the ids acknowledged)."""
    server = Server(home).start()
    stop, acked, errors = threading.Event(), [], []
    clients = [threading.Thread(target=burst,
                                args=(server, stop, acked, errors, keys))
               for _ in range(CLIENTS)]
    try:
        for c in clients:
            c.start()
        # Killed while the clients are still submitting.
        while len(acked) < 300 and not errors:
            threading.Event().wait(0.02)
        server.kill9()
        stop.set()
        for c in clients:
            c.join(timeout=60)
        assert not errors, errors[:3]
        return Server(home).start(), list(acked)
    finally:
        stop.set()
        if server.proc and server.proc.poll() is None:
            server.kill9()


def test_kill_during_a_burst_of_submits_loses_no_acknowledged_job(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    server = None
    try:
        server, seen = kill_during_burst(home)
        missing = [i for i in seen
                   if server.request("GET", f"/v1/jobs/{i}").status_code
                   != 200]
        assert not missing, f"{len(missing)} of {len(seen)} lost"
        assert len(set(seen)) == len(seen)
        # Each came back queued, once, as it was when acknowledged.
        listed = server.request("GET", "/v1/jobs",
                                params={"limit": 100000}).json()["jobs"]
        queued = {j["id"] for j in listed if j["state"] == "queued"}
        assert set(seen) <= queued
        server.stop()
    finally:
        if server and server.proc and server.proc.poll() is None:
            server.kill9()
        kill_processes_under(home)


def test_kill_during_a_keyed_burst_replays_every_acknowledged_key(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    keys = {}
    server = None
    try:
        server, seen = kill_during_burst(home, keys)
        assert len(keys) == len(seen)
        before = server.request("GET", "/v1/jobs",
                                params={"limit": 100000}).json()["jobs"]
        assert set(seen) <= {j["id"] for j in before}
        for key, first in keys.items():
            r = server.request("POST", "/v1/jobs", data=SPEC,
                               headers={"Idempotency-Key": key},
                               params={"file": "burst.yaml", "hold": "1"})
            assert r.status_code == 201, r.text
            assert r.content == first
        after = server.request("GET", "/v1/jobs",
                               params={"limit": 100000}).json()["jobs"]
        assert len(after) == len(before)
        server.stop()
    finally:
        if server and server.proc and server.proc.poll() is None:
            server.kill9()
        kill_processes_under(home)


def test_concurrent_submits_each_get_their_own_answer(server):
    """Answers sent after a shared commit go to the right clients: each
    id answered is the job that client submitted."""
    names, lock = {}, threading.Lock()

    def submit(k):
        spec = job_yaml(f"c{k}", ["/bin/true"], resources={"gpus": 8})
        for n in range(20):
            r = server.request("POST", "/v1/jobs", data=spec,
                               params={"file": "c.yaml", "hold": "1"})
            assert r.status_code == 201, r.text
            with lock:
                names[r.json()["job"]["id"]] = f"c{k}"

    threads = [threading.Thread(target=submit, args=(k,))
               for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(names) == CLIENTS * 20
    for jid, name in names.items():
        assert server.job(jid)["name"] == name
    # A refused submit in a group leaves the others whole.
    r = server.request("POST", "/v1/jobs", data="name: [",
                       params={"file": "bad.yaml"})
    assert r.status_code == 400
