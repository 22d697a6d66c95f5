"""A root server's Slurm jobs run as the task's Unix user, not root, and
get none of the server's secrets: neither in their environment nor in the
batch script. Real slurm-wlm, brought up as in test_slurm.py."""
import os
import pwd
import subprocess

import pytest

from conftest import Server, job_yaml
from test_slurm import slurm_env, squeue_ids, wait_for  # noqa: F401

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
