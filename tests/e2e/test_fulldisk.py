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


@pytest.fixture
def small_home(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700",
                          "tmpfs", str(home)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
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
