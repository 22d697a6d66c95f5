"""A full disk never loses or invents a task's exit: the shim records it in
place, the server keeps it until the store takes it (the job stays
running, saying why), every write through the API answers 507, and all
goes on by itself once there is room again."""
import errno
import hashlib
import os
import subprocess

import pytest

from conftest import Server, job_yaml, wait_for

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
        if server.proc and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)
        subprocess.run(["pkill", "-KILL", "-f",
                        f"kiln shim --dir {small_home}"], check=False)


def end_shims(home):
    subprocess.run(["pkill", "-KILL", "-f", f"kiln shim --dir {home}"],
                   check=False)


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
        if server.proc and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)


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
                                    server.job(jid)),
                       what="the job to wait for disk space")
        assert job["state"] in ("queued", "running"), job
        assert job["retries_used"] == 0
        filler.unlink()
        job = server.wait_state(jid, ("succeeded", "failed"), timeout=60)
        assert job["state"] == "succeeded", job["reason"]
        assert ran.read_text() == "run\n"
        server.stop()
    finally:
        if server.proc and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)
        end_shims(small_home)
        subprocess.run(["umount", "-l", str(tasks)], check=False)
