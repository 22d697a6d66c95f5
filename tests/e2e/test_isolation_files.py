"""Files a task writes are hostile input to the server: a job (with a
`user` token) replaces its output.log, its status.json or a checkpoint
file with a FIFO, a link to the server's admin.token or a device. The API
keeps answering while the logs are asked for, the answer is a clear error
or empty, nothing the server answers or stores holds the token, and the
event feed records the refusal.

These servers run --unisolated: the sandbox mounts the shim's own files
read-only, so a sandboxed task cannot replace output.log at all, and the
point here is the second line of defence, the server's own reading (which
is all there is for task directories the server shares with Slurm nodes or
reads back from pods). The task may still be unable to make some of these
(a device node, say); it then leaves what it could, and the test still
asserts that nothing leaked."""
import subprocess
import threading
import time

import pytest
import requests

from conftest import Server, job_yaml, wait_for, kill_processes_under

# Replace $KILN_TASK_DIR/$1 with what $2 names, then tell the test.
REPLACE = (
    'replace() { f="$KILN_TASK_DIR/$1"; rm -f "$f"; case "$2" in '
    'fifo) mkfifo "$f" ;; '
    'token) ln -s "$SERVER_HOME/admin.token" "$f" ;; '
    'device) mknod "$f" c 1 5 2>/dev/null || ln -s /dev/zero "$f" ;; '
    'esac; }; ')


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "home", extra=["--unisolated"])
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    kill_processes_under(s.home)


def spec(name, script, **fields):
    return job_yaml(name, ["/bin/sh", "-c", script], **fields)


def get(server, path, token="admin", timeout=5, **kw):
    token = server.admin_token if token == "admin" else token
    return requests.get(server.url + path, timeout=timeout,
                        headers={"Authorization": f"Bearer {token}"}, **kw)


def events(server):
    return get(server, "/v1/events").text


def assert_no_token(server, *texts):
    token = server.admin_token
    for t in texts:
        assert token not in t


def assert_store_clean(server):
    """No blob in the file store holds the token's bytes."""
    token = server.admin_token.encode()
    blobs = server.home / "blobs"
    for p in blobs.rglob("*") if blobs.exists() else ():
        if p.is_file() and not p.is_symlink():
            assert token not in p.read_bytes(), p


def healthz_fast(server):
    """The loop answers /healthz and a job listing within a second."""
    for path in ("/healthz", "/v1/jobs"):
        t0 = time.monotonic()
        r = get(server, path)
        assert r.status_code == 200, r.text
        assert time.monotonic() - t0 < 1.0, f"{path} took too long"


def start_job(server, token, tmp_path, name, script, **fields):
    ready = tmp_path / f"{name}.ready"
    script = script.replace("$READY", str(ready))
    jid = server.submit(spec(name, script, env={
        "SERVER_HOME": str(server.home)}, **fields), token=token)
    wait_for(ready.exists, timeout=30, what=f"{name} to replace its file")
    return jid


@pytest.mark.parametrize("kind", ["fifo", "token", "device"])
def test_output_log_replaced(server, tmp_path, kind):
    user = server.create_token("u1", "user")
    jid = start_job(server, user, tmp_path, f"log-{kind}",
                    REPLACE + f'replace output.log {kind}; touch $READY; '
                    'sleep 60')
    result = {}

    def ask():
        r = get(server, f"/v1/jobs/{jid}/logs", token=user, timeout=20)
        result["r"] = r

    asker = threading.Thread(target=ask)
    asker.start()
    healthz_fast(server)
    asker.join(timeout=20)
    assert not asker.is_alive(), "the logs request never answered"
    r = result["r"]
    assert_no_token(server, r.text)
    assert r.status_code == 403 or r.text == "", r.text
    if r.status_code == 403:
        assert "output.log is " in r.json()["error"]["message"]
        assert "task.file_refused" in events(server)
    # Asked again: the same answer, and the feed says it once.
    again = get(server, f"/v1/jobs/{jid}/logs", token=user)
    assert (again.status_code, again.text) == (r.status_code, r.text)
    if r.status_code == 403:
        assert events(server).count("task.file_refused") == 1
    healthz_fast(server)
    server.request("POST", f"/v1/jobs/{jid}/cancel", token=user)
    server.wait_state(jid, ("cancelled", "failed"))
    assert_no_token(server, events(server),
                    server.request("GET", f"/v1/jobs/{jid}").text)
    assert_store_clean(server)


@pytest.mark.parametrize("kind", ["fifo", "token"])
def test_status_json_replaced(server, tmp_path, kind):
    user = server.create_token("u1", "user")
    jid = start_job(server, user, tmp_path, f"status-{kind}",
                    REPLACE + f'replace status.json {kind}; touch $READY; '
                    'sleep 2; echo done')
    # The server polls status.json while the task runs: it must not block.
    healthz_fast(server)
    job = server.wait_state(jid, ("succeeded", "failed"), timeout=30)
    healthz_fast(server)
    assert job["state"] == "succeeded", job
    feed = events(server)
    if (server.home / "tasks").exists():
        assert "task.file_refused" in feed and "status.json" in feed
    assert_no_token(server, feed, server.request("GET", f"/v1/jobs/{jid}").text,
                    server.logs(jid))
    assert_store_clean(server)


def test_checkpoint_file_linked_to_token(server, tmp_path):
    user = server.create_token("u1", "user")
    script = (
        'd="$KILN_CHECKPOINT_DIR"; mkdir -p "$d/step-1.tmp"; '
        'echo ok > "$d/step-1.tmp/state"; '
        'ln -s "$SERVER_HOME/admin.token" "$d/step-1.tmp/weights"; '
        'mv "$d/step-1.tmp" "$d/step-1"; '
        'mkdir -p "$d/step-2.tmp"; echo two > "$d/step-2.tmp/state"; '
        'mv "$d/step-2.tmp" "$d/step-2"; '
        # A checkpoint that is itself a link to the server's home.
        'ln -s "$SERVER_HOME" "$d/step-3"; '
        'touch $READY; sleep 60')
    jid = start_job(server, user, tmp_path, "ckpt-link", script,
                    checkpoint={"keep": 5})
    manifest = (server.home / "blobs" / str(jid) / "checkpoints" / "step-2"
                / "MANIFEST.json")
    wait_for(manifest.exists, timeout=30, what="step-2 synced")
    wait_for(lambda: "task.file_refused" in events(server), timeout=30,
             what="the refusal in the event feed")
    feed = events(server)
    assert "weights is a symbolic link" in feed
    # The checkpoint holding the link is refused whole, not uploaded.
    assert not (server.home / "blobs" / str(jid) / "checkpoints" / "step-1"
                / "MANIFEST.json").exists()
    assert not (server.home / "blobs" / str(jid) / "checkpoints" / "step-3"
                / "MANIFEST.json").exists()
    healthz_fast(server)
    server.request("POST", f"/v1/jobs/{jid}/cancel", token=user)
    job = server.wait_state(jid, ("cancelled", "failed"))
    assert_no_token(server, events(server), str(job))
    assert_store_clean(server)
