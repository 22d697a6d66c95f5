"""Interactive sessions on tasks that run under a real single-node Slurm
(scripts/slurm-up.sh): `kiln run -it` on a terminal the shim holds on the
Slurm node, detach and attach, `kiln exec` beside the task and `kiln
port-forward` to a port it listens on, all reached through `srun
--overlap` into the job's allocation; and the boundary: another user's
token is refused, a port the task does not hold is refused on the node,
and the task cannot reach the session socket or the node file the
server's srun relies on."""
import os
import socket

import pytest
import requests

from conftest import job_yaml, wait_for
from test_interactive import (drain, expect, set_size, spawn, start_shell,
                              wait_exit)
from test_port_forward import (HTTP_TASK, Forward, free_port, listening,
                               upgrade)
from test_slurm import slurm_env, sserver, submit  # noqa: F401 (fixtures)

RES = {"cpus": 1, "memory": "64Mi"}


def test_run_it_detach_and_attach(sserver):
    """A shell on a Slurm task's terminal: output, the window's size,
    detach (the task runs on), attach (what it printed last comes back)
    and the exit status as the job's."""
    pid, fd, job_id = start_shell(sserver)
    os.write(fd, b"echo answer-$((6*7)) job=$SLURM_JOB_ID\r")
    seen = expect(fd, "answer-42")
    set_size(fd, 40, 132)
    os.write(fd, b"stty size\r")
    expect(fd, "40 132")
    os.write(fd, b"\x10\x11")
    expect(fd, f"kiln attach {job_id}")
    assert wait_exit(pid) == 0
    drain(fd)
    assert sserver.job(job_id)["state"] == "running"
    # The shell runs in the Slurm job the attempt submitted.
    slurm_id = (sserver.home / "tasks" / str(job_id) / "1.slurm" /
                "sbatch.out").read_text().split(";")[0].strip()
    assert f"job={slurm_id}".encode() in seen

    pid, fd = spawn(sserver, "attach", str(job_id))
    expect(fd, "answer-42")  # replayed
    os.write(fd, b"exit 3\r")
    assert wait_exit(pid) == 3
    drain(fd)
    job = sserver.wait_state(job_id, ("failed", "succeeded"), timeout=60)
    assert job["state"] == "failed" and job["exit_code"] == 3, job


def test_exec_beside_a_slurm_task(sserver, tmp_path):
    """exec runs in the task's allocation and sandbox: the same Slurm job,
    GPUs and user; stdout and stderr apart; the exit code back."""
    marker = tmp_path / "env"
    jid = submit(sserver, "kiln-exec",
                 ["sh", "-c", "echo $SLURM_JOB_ID $CUDA_VISIBLE_DEVICES "
                              f"> {marker}; sleep 300"],
                 resources=dict(RES, gpus=2))
    sserver.wait_state(jid, "running", timeout=60)
    wait_for(lambda: marker.exists() and marker.read_text().strip(),
             what="the task's environment")
    res = sserver.cli("exec", str(jid), "--", "sh", "-c",
                      "echo $SLURM_JOB_ID $CUDA_VISIBLE_DEVICES; id -un; "
                      "echo oops >&2; exit 7")
    assert res.returncode == 7, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == marker.read_text().strip()
    assert lines[1] == "kiln-task"
    assert res.stderr.strip() == "oops"
    # On a terminal of its own, with the client's size.
    pid, fd = spawn(sserver, "exec", str(jid), "-it", "--", "sh", "-c",
                    "stty size; tty", rows=33, cols=101)
    seen = expect(fd, "33 101")
    assert wait_exit(pid) == 0
    seen += drain(fd)
    assert b"not a tty" not in seen
    sserver.cli("cancel", str(jid), check=True)
    sserver.wait_state(jid, "cancelled", timeout=60)


def test_session_boundary_under_slurm(sserver):
    """Only the job's owner and operators get a session; the task itself
    sees neither the session socket nor the node file beside its
    directory, so it can neither talk to its shim as the server does nor
    send the server's srun to another node; a node file forged outside
    the task gets no session."""
    alice = sserver.create_token("alice", "user")
    bob = sserver.create_token("bob", "user")
    viewer = sserver.create_token("watcher", "viewer")
    attempt = sserver.home / "tasks"
    probe = (f"d={attempt}/$KILN_JOB_ID/1; "
             "for f in 0.sock 0.node; do "
             "if [ -e $d/$f ]; then echo $f:seen; else echo $f:hidden; fi; "
             "done; echo evil > $d/0.node 2>/dev/null && echo wrote; ")
    sserver.names.append("kiln-boundary")
    jid = sserver.submit(job_yaml("kiln-boundary",
                                  ["sh", "-c", probe + "sleep 300"],
                                  resources=RES), token=alice)
    sserver.wait_state(jid, "running", timeout=60)
    node_file = attempt / str(jid) / "1" / "0.node"
    wait_for(lambda: (attempt / str(jid) / "1" / "0.sock").exists(),
             what="the shim's session socket")
    assert node_file.read_text().strip()
    for token, why in ((bob, "belongs to alice"), (viewer, "")):
        res = sserver.cli("exec", str(jid), "--", "true", token=token)
        assert res.returncode == 1 and "permission_denied" in res.stderr
        assert why in res.stderr
        res = sserver.cli("attach", str(jid), token=token)
        assert res.returncode == 1 and "permission_denied" in res.stderr
    # What the task saw from inside its sandbox: neither file, and what
    # it wrote in their place went to its own view, not the server's.
    wait_for(lambda: "0.node:" in sserver.logs(jid),
             what="the task's probe")
    log = sserver.logs(jid)
    assert "0.sock:hidden" in log and "0.node:hidden" in log, log
    assert node_file.read_text().strip() not in ("", "evil")
    res = sserver.cli("exec", str(jid), "--", "echo", "mine", token=alice)
    assert res.returncode == 0 and res.stdout == "mine\n", res.stderr
    # A node file forged by the job's user outside the task: an option
    # never reaches srun's argv; a node outside the allocation gets no
    # step. Either way no session, and the real one works again after.
    real = node_file.read_text()
    node_file.write_text("--help\n")
    res = sserver.cli("exec", str(jid), "--", "true", token=alice)
    assert res.returncode != 0 and "not a node name" in res.stderr, res
    node_file.write_text("nowhere\n")
    res = sserver.cli("exec", str(jid), "--", "echo", "there", token=alice)
    assert res.returncode != 0 and "there" not in res.stdout, res
    node_file.write_text(real)
    res = sserver.cli("exec", str(jid), "--", "echo", "back", token=alice)
    assert res.returncode == 0 and res.stdout == "back\n", res.stderr
    # And from an exec, which is no more than the task.
    res = sserver.cli("exec", str(jid), "--", "sh", "-c",
                      f"ls {attempt}/{jid}/1 2>&1; echo done", token=alice)
    assert "0.sock" not in res.stdout and "done" in res.stdout, res
    sserver.cli("cancel", str(jid), check=True)
    sserver.wait_state(jid, "cancelled", timeout=60)


def test_port_forward_to_a_slurm_task(sserver):
    """A web server in a Slurm task answers through the local port; the
    node's bridge refuses a port the task does not hold (another
    process's listener is never connected to), and another user gets
    403."""
    alice = sserver.create_token("alice", "user")
    bob = sserver.create_token("bob", "user")
    port = free_port()
    sserver.names.append("kiln-web")
    jid = sserver.submit(job_yaml(
        "kiln-web", ["/usr/bin/python3", "-c", HTTP_TASK], resources=RES,
        env={"PORT": str(port), "MSG": "hello from slurm"}), token=alice)
    sserver.wait_state(jid, "running", timeout=60)
    wait_for(lambda: listening(port), what="the task's server")
    fwd = Forward(sserver, alice, jid, port)
    try:
        for _ in range(2):
            r = requests.get(fwd.url(), timeout=30)
            assert r.status_code == 200 and r.text == "hello from slurm"
    finally:
        fwd.stop()
    status, sock = upgrade(sserver, alice, jid, free_port())
    sock.close()
    assert " 409 " in status, status
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(1)
    try:
        status, sock = upgrade(sserver, alice, jid, other.getsockname()[1])
        sock.close()
        assert " 409 " in status, status
        other.settimeout(0.5)
        with pytest.raises(socket.timeout):
            other.accept()
    finally:
        other.close()
    status, sock = upgrade(sserver, bob, jid, port)
    sock.close()
    assert " 403 " in status, status
    audit = sserver.request("GET", "/v1/audit").json()["audit"]
    opened = [a for a in audit if a["action"] == "job.port_forward"]
    assert any(a["outcome"] == "ok" and a["actor"] == "alice"
               for a in opened), opened
    sserver.cli("cancel", str(jid), check=True)
    sserver.wait_state(jid, "cancelled", timeout=60)
