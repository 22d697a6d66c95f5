"""A root server's Slurm jobs run as the task's Unix user, not root, and
get none of the server's secrets: neither in their environment nor in the
batch script. Real slurm-wlm, brought up as in test_slurm.py."""
import os
import pwd
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import Server, job_yaml, wait_for
from test_slurm import slurm_env, squeue_ids  # noqa: F401

SECRETS = {
    "AZURE_STORAGE_KEY": "fake-azure-key-0f3c9d",
    "AZURE_STORAGE_SAS_TOKEN": "sv=fake-sas-7a1b2c",
    "AWS_SECRET_ACCESS_KEY": "fake-aws-secret-5e6f",
    "KILN_WEBHOOK_SECRET": "fake-webhook-secret-9d8c",
}


@pytest.fixture(scope="module")
def task_user():
    """The account a root server runs Slurm tasks as when none is named."""
    try:
        pwd.getpwnam("kiln-task")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", "kiln-task"], check=True)
    return "kiln-task"


def test_slurm_job_runs_as_the_task_user_without_server_secrets(
        tmp_path, slurm_env, task_user):  # noqa: F811
    env = dict(slurm_env, **SECRETS)
    s = Server(tmp_path / "home", gpus="8xH100-80GB",
               extra=["--executor", "slurm"], env=env)
    s.home.mkdir()
    s.start()
    name = "kiln-isolation"
    try:
        jid = s.submit(job_yaml(name, ["/bin/sh", "-c",
                                       "echo USER=$(id -un); env"],
                                resources={"cpus": 1, "memory": "64Mi"}))
        job = s.wait_state(jid, ("succeeded", "failed"), timeout=60)
        log = s.logs(jid)
        assert job["state"] == "succeeded", (job, log)
        assert f"USER={task_user}" in log, log
        for value in SECRETS.values():
            assert value not in log
        for key in SECRETS:
            assert f"{key}=" not in log
        # Nothing the job was submitted with holds a secret either.
        attempt = s.home / "tasks" / str(jid) / "1"
        script = (attempt / "slurm.sh").read_text()
        for value in SECRETS.values():
            assert value not in script
        for path in attempt.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                for value in SECRETS.values():
                    assert value.encode() not in data, path
        # The task's user could write its directory: output.log is its.
        owner = (attempt / "0" / "output.log").stat().st_uid
        assert owner == pwd.getpwnam(task_user).pw_uid
    finally:
        s.stop()
        subprocess.run(["scancel", "-n", name], env=slurm_env, timeout=30)
        wait_for(lambda: not squeue_ids(slurm_env, name), timeout=30,
                 what="the Slurm job to leave the queue")


def live_marked(mark):
    """Live (not zombie) processes whose environment holds mark."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if mark.encode() not in (d / "environ").read_bytes().split(b"\0"):
                continue
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(d.name))
    return found


def test_slurm_task_dies_with_its_shim_and_sees_no_other_process(
        tmp_path, slurm_env, task_user):  # noqa: F811
    """Under Slurm the task runs as pid 2 of its own pid namespace: it
    cannot reach the server or its shim, and a shim killed outright takes
    the task and everything it started with it, a daemonized grandchild
    that Slurm's process tracking would lose included."""
    tmp_path.chmod(0o1777)
    s = Server(tmp_path / "home", gpus="8xH100-80GB",
               extra=["--executor", "slurm"], env=slurm_env)
    s.home.mkdir()
    s.start()
    name = "kiln-iso-pidns"
    mark = f"E2E_PIDNS_MARK={uuid.uuid4().hex}"
    script = (
        f"echo pid=$$; kill -0 {s.proc.pid} && echo seen-server; "
        "kill -STOP $(cut -d' ' -f1 \"$KILN_TASK_DIR/shim.pid\") && "
        "echo stopped-shim; echo procs=$(ls /proc | grep -c '^[0-9]'); "
        "sleep 300 & (sleep 301 &); echo ready; wait")
    try:
        jid = s.submit(job_yaml(name, ["/bin/sh", "-c", script],
                                env={mark.split("=")[0]: mark.split("=")[1]},
                                resources={"cpus": 1, "memory": "64Mi"}))
        wait_for(lambda: "ready" in s.logs(jid), timeout=60,
                 what="the task to start")
        log = s.logs(jid)
        assert "pid=2" in log, log
        assert "seen-server" not in log and "stopped-shim" not in log, log
        assert int(log.split("procs=")[1].split()[0]) < 10, log
        tasks = live_marked(mark)
        assert len(tasks) >= 3, tasks  # sh and both sleeps
        task = s.home / "tasks" / str(jid) / "1" / "0"
        shim = int((task / "shim.pid").read_text().split()[0])
        os.kill(shim, signal.SIGKILL)
        wait_for(lambda: not live_marked(mark), timeout=30,
                 what="the task to die with its shim")
        job = s.wait_state(jid, ("failed", "succeeded"), timeout=60)
        assert job["state"] == "failed"
    finally:
        for pid in live_marked(mark):
            os.kill(pid, signal.SIGKILL)
        s.stop()
        subprocess.run(["scancel", "-n", name], env=slurm_env, timeout=30)
        wait_for(lambda: not squeue_ids(slurm_env, name), timeout=30,
                 what="the Slurm job to leave the queue")


def test_slurm_owner_map_picks_the_unix_user(tmp_path, slurm_env,
                                             task_user):  # noqa: F811
    """--task-user-map holds under Slurm too: a mapped owner's job runs as
    its Unix user, an unmapped one's as the default task user."""
    tmp_path.chmod(0o1777)
    user_map = tmp_path / "users.map"
    user_map.write_text("alice: nobody\n")
    s = Server(tmp_path / "home", gpus="8xH100-80GB",
               extra=["--executor", "slurm", "--task-user-map",
                      str(user_map)], env=slurm_env)
    s.home.mkdir()
    s.start()
    names = ["kiln-iso-alice", "kiln-iso-bob"]
    try:
        for owner, name, want in (("alice", names[0], "nobody"),
                                  ("bob", names[1], task_user)):
            token = s.create_token(owner, "user")
            jid = s.submit(job_yaml(name, ["/bin/sh", "-c", "id -un"],
                                    resources={"cpus": 1,
                                               "memory": "64Mi"}),
                           token=token)
            job = s.wait_state(jid, ("succeeded", "failed"), timeout=60)
            assert job["state"] == "succeeded", (job, s.logs(jid))
            assert s.logs(jid).strip() == want
    finally:
        s.stop()
        for name in names:
            subprocess.run(["scancel", "-n", name], env=slurm_env,
                           timeout=30)
        for name in names:
            wait_for(lambda: not squeue_ids(slurm_env, name), timeout=30,
                     what="the Slurm job to leave the queue")
