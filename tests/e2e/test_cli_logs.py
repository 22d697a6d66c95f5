"""kiln logs --all/--tail, -f on a queued job, and submit --follow."""
import os
import subprocess

from conftest import KILN, job_yaml

COUNT = 'for i in 1 2 3 4 5; do echo "line $i"; done'


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_submit_follow_streams_every_rank_and_exits_with_the_job(server,
                                                                 tmp_path):
    spec = write(tmp_path, "j.yaml",
                 job_yaml("j", ["/bin/sh", "-c", COUNT + "; exit 3"], tasks=3))
    r = server.cli("submit", "--follow", spec)
    assert r.returncode == 3, r.stderr
    lines = r.stdout.splitlines()
    jid = int(lines[0])
    for rank in range(3):
        assert [ln for ln in lines if ln.startswith(f"[rank {rank}] ")] == [
            f"[rank {rank}] line {i}" for i in range(1, 6)]
    assert f"job {jid}: failed" in r.stderr
    ok = write(tmp_path, "ok.yaml", job_yaml("ok", ["/bin/echo", "hi"]))
    r = server.cli("submit", "-f", ok)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == ["[rank 0] hi"]


def test_logs_tail_and_all(server):
    jid = server.submit(job_yaml("j", ["/bin/sh", "-c", COUNT], tasks=2))
    server.wait_state(jid, "succeeded")
    r = server.cli("logs", str(jid), "--tail", "2", check=True)
    assert r.stdout == "line 4\nline 5\n"
    r = server.cli("logs", str(jid), "--tail", "0", check=True)
    assert r.stdout == ""
    r = server.cli("logs", str(jid), "--tail", "99", check=True)
    assert r.stdout.count("\n") == 5
    r = server.cli("logs", str(jid), "--all", "--tail", "1", check=True)
    assert r.stdout == "[rank 0] line 5\n[rank 1] line 5\n"
    r = server.request("GET", f"/v1/jobs/{jid}/logs",
                       params={"tail": "-1"})
    assert r.status_code == 400 and "tail" in r.text


def test_logs_follow_waits_for_a_queued_job(server, tmp_path):
    # The first job holds every GPU until told; the second waits for them.
    gate = tmp_path / "go"
    first = server.submit(job_yaml(
        "first", ["/bin/sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"],
        resources={"gpus": 4}))
    server.wait_state(first, "running")
    second = server.submit(job_yaml("second", ["/bin/echo", "started"],
                                    resources={"gpus": 4}))
    env = dict(os.environ, KILN_HOME=str(server.home))
    follower = subprocess.Popen([KILN, "logs", "-f", str(second)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        # Said once the CLI has seen the job queued; only then may it run.
        said = follower.stderr.readline()
        assert "queued; waiting for it to start" in said
        assert server.job(second)["state"] == "queued"
        gate.write_text("")
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    assert out == "started\n"


def test_logs_follow_of_a_job_cancelled_while_queued(server):
    jid = server.submit(job_yaml("big", ["/bin/true"], resources={"gpus": 8}))
    server.request("POST", f"/v1/jobs/{jid}/cancel")
    r = server.cli("logs", "-f", str(jid))
    assert r.returncode == 1
    assert "without starting" in r.stderr
