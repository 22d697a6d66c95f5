"""The API server under hostile clients: no body is read for a caller
without a token, slow or half-sent heads are cut off, connections are
capped in all and per client address, running out of descriptors does not
spin, followers are capped per token, and one server holds a home."""
import fcntl
import hashlib
import os
import resource
import subprocess
import time
from pathlib import Path

import pytest
import requests

from conftest import KILN, Server, wait_for
from test_gateway_front import (connect, connect_from, read_until_closed,
                                rss_with_bodies_held)


@pytest.fixture
def hostile_servers(tmp_path):
    """Servers with one simulated GPU and the flags given, stopped after."""
    made = []

    def make(*extra):
        s = Server(tmp_path / f"home{len(made)}", gpus="1xH100-80GB",
                   extra=extra)
        s.home.mkdir()
        made.append(s)
        return s.start()
    yield make
    for s in made:
        s.stop()


def whoami(s, timeout=30):
    return requests.get(s.url + "/v1/whoami", timeout=timeout,
                        headers={"Authorization": f"Bearer {s.admin_token}"})


def test_half_sent_heads_do_not_stop_an_authorised_client(hostile_servers):
    s = hostile_servers("--head-timeout", "1s")
    # Few descriptors: without a bound on head time, the half-sent heads
    # would hold all of them and nobody else would be served.
    resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (128, 128))
    conns = []
    try:
        for _ in range(300):
            c = connect(s.url, timeout=5)
            c.sendall(b"GET /v1/whoami HTTP/1.1\r\nHost: x\r\n")
            conns.append(c)
        t0 = time.monotonic()
        r = whoami(s, timeout=20)
        assert r.status_code == 200, r.text
        assert time.monotonic() - t0 < 15
    finally:
        for c in conns:
            c.close()


def test_no_token_gets_401_before_the_body(hostile_servers):
    s = hostile_servers()
    # 4 MiB announced, none of it sent: the answer comes anyway.
    with connect(s.url) as c:
        c.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 4194304\r\n\r\n")
        got = read_until_closed(c)
    assert got.startswith(b"HTTP/1.1 401 "), got
    assert b"unauthenticated" in got
    assert whoami(s).status_code == 200
    head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: 4194305\r\n\r\n")
    body = b"x" * (4 * 1024 * 1024)
    # 60 at once: a server that read bodies before the token check would
    # hold 240 MiB.
    before, after = rss_with_bodies_held(s.url, s.proc.pid, head, body, 60)
    assert after - before < 64 * 1024, (before, after)
    assert whoami(s).status_code == 200


def test_heads_are_bounded(hostile_servers):
    s = hostile_servers()
    auth = f"Authorization: Bearer {s.admin_token}\r\n".encode()
    with connect(s.url) as c:
        c.sendall(b"GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth +
                  b"X-Big: " + b"a" * (32 * 1024) + b"\r\n\r\n")
        assert read_until_closed(c).startswith(b"HTTP/1.1 431 ")
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(300))
    with connect(s.url) as c:
        c.sendall(b"GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + auth + fields +
                  b"\r\n")
        got = read_until_closed(c)
    assert got.startswith(b"HTTP/1.1 431 "), got[:200]
    assert whoami(s).status_code == 200


def test_connections_are_capped_per_client_address(hostile_servers):
    s = hostile_servers("--max-connections-per-client", "3")
    held = [connect_from(s.url, "127.0.0.1") for _ in range(3)]
    try:
        with connect_from(s.url, "127.0.0.1") as c:
            got = read_until_closed(c)
        assert got.startswith(b"HTTP/1.1 503 "), got
        assert b"unavailable" in got
        # Another address is served meanwhile.
        with connect_from(s.url, "127.0.0.2") as c:
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                      b"Connection: close\r\n\r\n")
            assert read_until_closed(c).startswith(b"HTTP/1.1 200 ")
    finally:
        for c in held:
            c.close()
    wait_for(lambda: whoami(s).status_code == 200, what="a connection slot")


def test_out_of_descriptors_does_not_spin(hostile_servers):
    s = hostile_servers()
    resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (64, 64))
    size_before = s.log.stat().st_size
    conns = []
    try:
        for _ in range(150):
            conns.append(connect(s.url, timeout=5))
        time.sleep(1.5)  # past the limit all the while
        cpu_before = Path(f"/proc/{s.proc.pid}/stat").read_text().split()
        time.sleep(1.0)
        cpu_after = Path(f"/proc/{s.proc.pid}/stat").read_text().split()
    finally:
        for c in conns:
            c.close()
    # utime + stime in clock ticks (100 a second): well under a busy loop.
    ticks = (int(cpu_after[13]) + int(cpu_after[14]) -
             int(cpu_before[13]) - int(cpu_before[14]))
    assert ticks < 50, ticks
    added = s.log.read_bytes()[size_before:]
    assert len(added) < 16 * 1024, added[-2000:]
    assert b"cannot accept connections" in added
    wait_for(lambda: whoami(s, timeout=10).status_code == 200,
             what="the server answering again")


def follow(s, token):
    return requests.get(s.url + "/v1/events", params={"follow": 1},
                        headers={"Authorization": f"Bearer {token}"},
                        stream=True, timeout=10)


def test_follow_streams_are_capped_per_token(hostile_servers):
    s = hostile_servers("--max-follows-per-token", "2")
    viewer = s.create_token("watcher", "viewer")
    held = [follow(s, viewer) for _ in range(2)]
    try:
        assert all(r.status_code == 200 for r in held)
        r = follow(s, viewer)
        assert r.status_code == 429, r.text
        err = r.json()["error"]
        assert err["code"] == "limit_exceeded"
        assert "at most 2 per token" in err["message"]
        # Log follows count too.
        r = s.request("GET", "/v1/jobs/1/logs", token=viewer,
                      params={"follow": 1})
        assert r.status_code == 429, r.text
        # Viewers never lock the admin out.
        admin = follow(s, s.admin_token)
        assert admin.status_code == 200
        admin.close()
    finally:
        for r in held:
            r.close()
    wait_for(lambda: (lambda r: r.close() or r.status_code == 200)(
        follow(s, viewer)), what="a stream slot back")


def blob_part(s, data, digest, offset, final):
    return s.request("POST", f"/v1/model-blobs/{digest}", data=data,
                     params={"upload": "u1", "offset": offset,
                             "final": int(final)})


def test_second_server_on_a_home_is_refused(hostile_servers):
    s = hostile_servers()
    blob = b"weights" * 1000
    digest = hashlib.sha256(blob).hexdigest()
    r = blob_part(s, blob[:100], digest, 0, False)
    assert r.status_code == 200, r.text
    staged = sorted((s.home / "registry" / "uploads").iterdir())
    assert staged
    env = dict(os.environ, KILN_HOME=str(s.home))
    second = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                             "--gpus", "1xH100-80GB"], env=env,
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 1, second.stderr
    assert (f"another kiln server (pid {s.proc.pid}) holds KILN_HOME"
            in second.stderr), second.stderr
    # The first is untouched: its staged upload is there and finishes.
    assert sorted((s.home / "registry" / "uploads").iterdir()) == staged
    assert (s.home / "server.url").read_text().strip() == s.url
    r = blob_part(s, blob[100:], digest, 100, True)
    assert r.status_code in (200, 201), r.text
    assert whoami(s).status_code == 200


def signer_key(tmp_path, kind):
    """A signer's key file that cannot sign, and the reason expected."""
    key = tmp_path / "release"
    if kind == "missing":
        return key, "No such file or directory"
    if kind == "directory":
        key.mkdir(mode=0o700)
        return key, "is a directory owned by uid"
    subprocess.run([KILN, "model", "keygen", "--out", str(key)], check=True,
                   capture_output=True)
    if kind == "short":
        key.write_bytes(key.read_bytes()[:40])
        return key, "not a PEM private key"
    if kind == "empty":
        key.write_bytes(b"")
        return key, "not a PEM private key"
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-out",
                    str(key)], check=True, capture_output=True)
    key.chmod(0o600)
    return key, "not an Ed25519 key"


@pytest.mark.parametrize("kind", ["missing", "directory", "short", "empty",
                                  "rsa"])
def test_a_signer_key_that_cannot_sign_stops_the_server(tmp_path, kind):
    home = tmp_path / "home"
    home.mkdir()
    key, why = signer_key(tmp_path, kind)
    conf = tmp_path / "server.yaml"
    conf.write_text(f"signers:\n  - name: release\n    key-file: {key}\n"
                    "    roles: [admin]\n")
    conf.chmod(0o600)
    res = subprocess.run([KILN, "server", "--home", str(home), "--listen",
                          "127.0.0.1:0", "--config", str(conf)],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1, res.stderr
    assert f"signer release: {key}" in res.stderr, res.stderr
    assert why in res.stderr, res.stderr
    assert not (home / "server.url").exists()


def test_restore_target_held_is_refused(tmp_path):
    home = tmp_path / "restored"
    home.mkdir()
    lock = open(home / "server.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write(f"{os.getpid()} server\n")
        lock.flush()
        r = subprocess.run([KILN, "backup", "restore", "b1", "--home",
                            str(home), "--from", f"file://{tmp_path}/store"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, r.stderr
        assert f"another kiln server (pid {os.getpid()}) holds" in r.stderr
        assert sorted(p.name for p in home.iterdir()) == ["server.lock"]
    finally:
        lock.close()


def test_second_gateway_on_a_home_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    routes = home / "routes.json"
    routes.write_text('{"generation": 1, "deployments": [], "keys": []}')
    env = dict(os.environ, KILN_HOME=str(home))
    env.pop("KILN_SERVER", None)
    env.pop("KILN_TOKEN", None)
    args = [KILN, "gateway", "--listen", "127.0.0.1:0", "--routes",
            str(routes)]
    with open(home / "gateway.log", "ab") as log:
        first = subprocess.Popen(args, env=env, stdout=log, stderr=log)
    try:
        url = home / "gateway" / "gateway.url"
        wait_for(lambda: url.exists() or first.poll() is not None,
                 what="gateway.url")
        assert first.poll() is None
        second = subprocess.run(args, env=env, capture_output=True,
                                text=True, timeout=30)
        assert second.returncode == 1, second.stderr
        assert f"another kiln gateway (pid {first.pid}) holds" in \
            second.stderr
        assert first.poll() is None
    finally:
        first.terminate()
        first.wait(timeout=10)



def test_store_sas_is_never_shown(azurite, tmp_path):
    """A job names its checkpoint store by a URL that carries a SAS: the
    job's answer (first and replayed for its Idempotency-Key), its
    outputs, the event feed (listed and followed), the audit log and the
    server's log show the store without the query, and outputs[].url is
    the store's URL less the query, then the blob's path."""
    from conftest import azurite_env, job_yaml

    sig = "SeCrEtSiGnAtUrE"
    store = f"{azurite}/hostile-sas"
    s = Server(tmp_path / "home", gpus="1xH100-80GB", env=azurite_env(azurite),
               extra=["--blob-store", store])
    s.home.mkdir()
    s.start()
    try:
        script = 'echo done > "$KILN_OUTPUT_DIR/result.txt"'
        spec = job_yaml("sas", ["/bin/sh", "-c", script],
                        checkpoint={"store": f"{store}?sv=2023&sig={sig}"})
        answers = []
        for _ in range(2):  # the second is the stored answer, replayed
            r = s.request("POST", "/v1/jobs", data=spec,
                          params={"file": "job.yaml"},
                          headers={"Idempotency-Key": "sas-1"})
            assert r.status_code == 201, r.text
            answers.append(r.text)
        jid = r.json()["job"]["id"]
        job = s.wait_state(jid, ("succeeded", "failed"), timeout=60)
        assert job["state"] == "succeeded", job["reason"]
        [out] = job["outputs"]
        assert out["url"] == f"{store}/{jid}/outputs/result.txt"
        for path in ("/v1/jobs", f"/v1/jobs/{jid}", "/v1/events",
                     "/v1/audit"):
            r = s.request("GET", path)
            answers.append(path + " " + r.text)
        with s.request("GET", "/v1/events", params={"follow": 1},
                       stream=True) as r:
            got = b""
            for chunk in r.iter_content(None):
                got += chunk
                if b"succeeded" in got:
                    break
            answers.append(got.decode())
        answers.append(s.log.read_text())
        shown = "\n".join(answers)
        assert "hostile-sas" in shown
        assert "sig=" not in shown and sig not in shown
    finally:
        s.stop()


def test_the_leftover_check_reads_pid_files(tmp_path):
    """A daemon that names nothing of the run in its command line,
    environment or directory (as slurmd or Azurite's node do) is still
    found at the end of the run through the pid file it wrote."""
    from conftest import processes_in_pid_files, processes_under

    pid_file = tmp_path / "state" / "daemon.pid"
    pid_file.parent.mkdir()
    subprocess.run(["/bin/sh", "-c", f"cd / && exec env -i setsid sleep 300 "
                    f"</dev/null >/dev/null 2>&1 & echo $! > {pid_file}"],
                   check=True, cwd="/")
    pid = int(pid_file.read_text())
    try:
        # Until its exec the forked shell still shows the pid file's path.
        wait_for(lambda: Path(f"/proc/{pid}/cmdline").read_bytes()
                 .startswith(b"sleep"), what="the daemon to start")
        assert pid not in [p for p, _ in processes_under(tmp_path)]
        found = processes_in_pid_files(tmp_path)
        assert [p for p, _ in found] == [pid], found
        assert str(pid_file) in found[0][1]
    finally:
        os.kill(pid, 9)
        wait_for(lambda: not processes_in_pid_files(tmp_path),
                 what="the daemon to end")
