"""The server can be killed at any moment without losing an accepted job or
a running task."""
import os
import stat

from conftest import job_yaml, wait_for


def test_kill9_while_task_runs_then_restart_records_real_exit(server, tmp_path):
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done; exit 7"
    jid = server.submit(job_yaml("survivor", ["/bin/sh", "-c", script],
                                 resources={"gpus": 1}))
    server.wait_state(jid, "running")
    server.kill9()
    # The task keeps running without a server, then ends while it is down.
    go.touch()
    task_dir = server.home / "tasks" / str(jid) / "1" / "0"
    wait_for(lambda: (task_dir / "status.json").exists(),
             what="the shim to record the exit")
    server.start()
    job = server.wait_state(jid, "failed")
    assert job["exit_code"] == 7
    assert job["attempts_detail"][0]["exit_code"] == 7


def test_kill9_then_restart_readopts_a_running_task(server, tmp_path):
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done; echo finished"
    jid = server.submit(job_yaml("adopted", ["/bin/sh", "-c", script],
                                 resources={"gpus": 2}))
    server.wait_state(jid, "running")
    server.kill9()
    server.start()
    job = server.job(jid)
    assert job["state"] == "running"
    # Its devices are still taken after the restart.
    nodes = server.request("GET", "/v1/nodes").json()["nodes"]
    used = [d for d in nodes[0]["devices"] if d["allocations"]]
    assert len(used) == 2 and used[0]["allocations"][0]["job"] == jid
    go.touch()
    job = server.wait_state(jid, "succeeded")
    assert server.logs(jid) == "finished\n"


def test_queued_jobs_survive_a_crash(server):
    ids = [server.submit(job_yaml(f"q{i}", ["/bin/true"], resources={"gpus": 8}))
           for i in range(3)]
    server.kill9()
    server.start()
    for jid in ids:
        assert server.job(jid)["state"] == "queued"


def test_cancel_sent_while_server_down_is_not_needed_to_finish(server, tmp_path):
    # A job accepted just before the crash still runs after restart.
    jid = server.submit(job_yaml("late", ["/bin/true"]))
    server.kill9()
    server.start()
    server.wait_state(jid, "succeeded")


def test_home_files_are_private(server):
    token = server.home / "admin.token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE((server.home / "kiln.db").stat().st_mode) == 0o600
    assert stat.S_IMODE(server.home.stat().st_mode) == 0o700
    # Only the hash of the token is stored.
    secret = server.admin_token.encode()
    for name in os.listdir(server.home):
        path = server.home / name
        if path.is_file() and name != "admin.token":
            assert secret not in path.read_bytes(), name
