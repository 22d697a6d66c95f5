"""A full disk never loses or invents a task's exit: the shim records it in
place, the server keeps it until the store takes it (the job stays
running, saying why), every write through the API answers 507, and all
goes on by itself once there is room again."""
import errno
import hashlib
import json
import os
import subprocess

import pytest

from conftest import KILN, Server, job_yaml, wait_for

WAITING = "exit of rank 0 recorded on the node; waiting for disk space to store it"


def fill(path):
    """Write path until the file system refuses another byte."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 1):
            block = b"\0" * chunk
            while True:
                try:
                    f.write(block)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break


def mount_tmpfs(path, size):
    """A new directory path with a tmpfs of size on it (skip without)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(mode=0o700)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o",
                          f"size={size},mode=0700", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    return path


def end_all(server, home):
    """Kill a server a failed test left running, and its home's shims."""
    if server.proc and server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait(timeout=10)
    subprocess.run(["pkill", "-KILL", "-f", f"shim --dir {home}"],
                   check=False)


@pytest.fixture
def small_home(tmp_path):
    home = mount_tmpfs(tmp_path / "home", "24m")
    try:
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


def test_full_disk_keeps_the_exit_and_the_outputs(small_home, tmp_path):
    written, go = tmp_path / "written", tmp_path / "go"
    script = ('echo hello; echo "the weights" > "$KILN_OUTPUT_DIR/result.txt"; '
              f'touch {written}; while [ ! -e {go} ]; do sleep 0.05; done; '
              'exit 0')
    server = Server(small_home)
    server.log = tmp_path / "server.log"  # not on the disk that fills
    filler = small_home / "filler"
    try:
        server.start()
        jid = server.submit(job_yaml("fills", ["/bin/sh", "-c", script]))
        server.wait_state(jid, "running")
        wait_for(written.exists, what="the task to write its output")
        fill(filler)
        go.touch()
        # The task has ended; its exit waits on the node, not lost.
        job = wait_for(lambda: (lambda j: j if j["reason"] == WAITING
                                else None)(server.job(jid)),
                       what="the job to wait for disk space")
        assert job["state"] == "running"
        r = server.request("POST", "/v1/jobs", params={"file": "job.yaml"},
                           data=job_yaml("refused", ["/bin/true"]))
        assert r.status_code == 507, r.text
        err = r.json()["error"]
        assert err["code"] == "insufficient_storage"
        assert "no space left" in err["message"]
        r = server.request("POST", "/v1/tokens",
                           json={"name": "late", "role": "user"})
        assert r.status_code == 507, r.text
        assert server.job(jid)["state"] == "running"

        filler.unlink()
        job = server.wait_state(jid, ("succeeded", "failed"), timeout=60)
        assert job["state"] == "succeeded", job["reason"]
        assert job["exit_code"] == 0
        outs = {o["name"]: o for o in job["outputs"]}
        assert set(outs) == {"result.txt"}
        assert outs["result.txt"]["sha256"] == \
            hashlib.sha256(b"the weights\n").hexdigest()
        stored = small_home / "blobs" / str(jid) / "outputs" / "result.txt"
        assert stored.read_bytes() == b"the weights\n"
        assert server.logs(jid) == "hello\n"
        # Writes are taken again without a restart.
        server.submit(job_yaml("after", ["/bin/true"]))
        server.stop()
    finally:
        end_all(server, small_home)




def test_a_full_disk_keeps_reads_and_refuses_backups_with_507(small_home,
                                                               tmp_path):
    """Recording a token's last use is a write: on a full disk it is left
    for later, and the request goes on (a read, here). A backup whose
    staging copy the disk refuses answers 507, and works once there is
    room."""
    server = Server(small_home)
    server.log = tmp_path / "server.log"
    filler = small_home / "filler"
    try:
        server.start()
        token = server.create_token("reader", "viewer")
        fill(filler)
        r = server.request("GET", "/v1/whoami", token=token)
        assert r.status_code == 200, r.text
        assert r.json()["name"] == "reader"
        r = server.request("POST", "/v1/backups", json={})
        assert r.status_code == 507, r.text
        assert r.json()["error"]["code"] == "insufficient_storage"
        filler.unlink()
        r = server.request("POST", "/v1/backups", json={})
        assert r.status_code in (201, 202), r.text
        server.stop()
    finally:
        end_all(server, small_home)


def test_a_start_refused_by_a_full_disk_requeues_the_job(small_home,
                                                          tmp_path):
    """The tasks' disk (its own file system here, so the store still takes
    writes) is full when a job starts: it cannot write its task's files,
    and the job goes back to the queue waiting for disk space instead of
    failing, then runs once there is room."""
    ran = tmp_path / "ran"
    tasks = mount_tmpfs(small_home / "tasks", "1m")
    server = Server(small_home)
    server.log = tmp_path / "server.log"
    filler = tasks / "filler"
    try:
        fill(filler)
        server.start()
        jid = server.submit(job_yaml("requeued",
                                     ["/bin/sh", "-c", f"echo run >> {ran}"]))
        job = wait_for(lambda: (lambda j: j if "waiting for disk space" in
                                (j["reason"] or "") else None)(
                                    server.job(jid)), timeout=60,
                       what="the job to wait for disk space")
        assert job["state"] in ("queued", "running"), job
        assert job["retries_used"] == 0
        filler.unlink()
        job = server.wait_state(jid, ("succeeded", "failed"), timeout=60)
        assert job["state"] == "succeeded", job["reason"]
        assert ran.read_text() == "run\n"
        server.stop()
    finally:
        end_all(server, small_home)
        subprocess.run(["umount", "-l", str(tasks)], check=False)


def job_events(server):
    """The job.state events in the feed, as dicts with their job id."""
    lines = server.request("GET", "/v1/events").text.splitlines()
    found = []
    for line in lines:
        e = json.loads(line)
        if e.get("type") == "job.state":
            found.append(dict(e.get("data", e)))
    return found


def test_a_keyed_submit_the_disk_refuses_leaves_nothing(small_home,
                                                        tmp_path):
    """A submit with an Idempotency-Key whose commit a full disk refuses
    answers 507 and leaves no trace: no job, no key, no event, nothing
    queued. Its retry once there is room makes the job, which runs
    once."""
    ran = tmp_path / "ran"
    spec = job_yaml("keyed", ["/bin/sh", "-c", f"echo run >> {ran}"])
    server = Server(small_home)
    server.log = tmp_path / "server.log"
    filler = small_home / "filler"

    def submit():
        return server.request("POST", "/v1/jobs", data=spec,
                              params={"file": "job.yaml"},
                              headers={"Idempotency-Key": "full-1"})
    try:
        server.start()
        fill(filler)
        r = submit()
        assert r.status_code == 507, r.text
        assert job_events(server) == []
        assert server.request("GET", "/v1/jobs").json()["jobs"] == []
        filler.unlink()
        r = submit()
        assert r.status_code == 201, r.text
        jid = r.json()["job"]["id"]
        job = server.wait_state(jid, ("succeeded", "failed"), timeout=60)
        assert job["state"] == "succeeded", job["reason"]
        assert submit().json()["job"]["id"] == jid
        # Another job after it: the id of the refused one was never used.
        other = server.submit(job_yaml("after", ["/bin/true"]))
        server.wait_state(other, ("succeeded", "failed"), timeout=60)
        assert ran.read_text() == "run\n"
        queued = [e["job"] for e in job_events(server)
                  if e["state"] == "queued"]
        assert sorted(queued) == sorted({jid, other})
        server.stop()
    finally:
        end_all(server, small_home)


def test_a_server_that_cannot_open_its_store_says_why(small_home, tmp_path):
    """A home whose disk is full when the server starts: it exits 1 with a
    message naming the full disk, and starts once there is room."""
    server = Server(small_home)
    server.log = tmp_path / "server.log"
    filler = small_home / "filler"
    try:
        server.start()
        server.stop()
        fill(filler)
        res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0"],
                             env=dict(os.environ, KILN_HOME=str(small_home)),
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 1, res.stderr
        assert "kiln.db: no space left on its disk" in res.stderr, res.stderr
        filler.unlink()
        server.start()
        server.stop()
    finally:
        end_all(server, small_home)


def test_a_new_store_on_a_full_disk_says_why(small_home, tmp_path):
    """A home with room for the server's lock but not for a new store: the
    server exits 1 naming the store's file and the full disk, and starts
    once there is room."""
    filler = small_home / "filler"
    server = Server(small_home)
    server.log = tmp_path / "server.log"
    try:
        fill(filler)
        os.truncate(filler, filler.stat().st_size - 4096)
        res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0"],
                             env=dict(os.environ, KILN_HOME=str(small_home)),
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 1, res.stderr
        assert (f"{small_home}/kiln.db: no space left on its disk"
                in res.stderr), res.stderr
        filler.unlink()
        server.start()
        server.stop()
    finally:
        end_all(server, small_home)


def test_a_store_it_may_not_write_is_named(tmp_path):
    """A store file on a read-only mount: the server exits 1 naming the
    file and the reason, not a crash, and starts once it may write."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    server = Server(home)
    server.log = tmp_path / "server.log"
    db = home / "kiln.db"
    mounted = False
    try:
        server.start()
        server.stop()
        subprocess.run(["mount", "--bind", str(db), str(db)], check=True)
        mounted = True
        subprocess.run(["mount", "-o", "remount,bind,ro", str(db)],
                       check=True)
        res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0"],
                             env=dict(os.environ, KILN_HOME=str(home)),
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 1, res.stderr
        assert f"{db}: Read-only file system" in res.stderr, res.stderr
        subprocess.run(["umount", str(db)], check=True)
        mounted = False
        server.start()
        server.stop()
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(db)], check=False)
        end_all(server, home)
