"""kiln logs --all/--tail, -f on a queued job, and submit --follow."""
import datetime
import os
import re
import subprocess
import time

from conftest import KILN, job_yaml, wait_for

COUNT = 'for i in 1 2 3 4 5; do echo "line $i"; done'


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_submit_follow_streams_every_rank_and_exits_with_the_job(server,
                                                                 tmp_path):
    # Only the last rank fails, once the others have ended: a failing
    # rank would stop the gang's others mid-way.
    spec = write(tmp_path, "j.yaml", job_yaml("j", [
        "/bin/sh", "-c",
        COUNT + '; if [ "$RANK" = 2 ]; then sleep 2; exit 3; fi'], tasks=3))
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


STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


def stamped(line):
    """A --timestamps line's time (epoch seconds) and text."""
    assert STAMP.match(line), line
    when = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
    return when.replace(tzinfo=datetime.timezone.utc).timestamp(), line[25:]


def test_logs_since_and_timestamps(server, tmp_path):
    # "new" comes in two pieces, 4 s after "old"; the job then waits, so
    # --since is asked while the gap is still ahead of the window.
    gate = tmp_path / "go"
    jid = server.submit(job_yaml("t", [
        "/bin/sh", "-c",
        "echo old; sleep 4; printf ne; sleep 0.2; echo w; "
        f"while [ ! -e {gate} ]; do sleep 0.05; done"]))
    wait_for(lambda: "new\n" in server.cli("logs", str(jid)).stdout,
             what="the second line")
    r = server.cli("logs", str(jid), "--since", "3s", check=True)
    assert r.stdout == "new\n"
    r = server.cli("logs", str(jid), "--timestamps", check=True)
    (t_old, old), (t_new, new) = map(stamped, r.stdout.splitlines())
    assert (old, new) == ("old", "new")
    # A line's time is its first piece's; the sleep bounds it below only.
    assert t_new - t_old >= 4.0
    assert abs(t_new - time.time()) < 600
    r = server.cli("logs", str(jid), "--all", "--timestamps", "--tail", "1",
                   check=True)
    assert r.stdout.startswith("[rank 0] ") and r.stdout.endswith(" new\n")
    assert stamped(r.stdout[len("[rank 0] "):])[0] == t_new
    gate.write_text("")
    server.wait_state(jid, "succeeded")
    # Both windows at once: the later start of --since and --tail.
    r = server.cli("logs", str(jid), "--since", "1h", "--tail", "1",
                   check=True)
    assert r.stdout == "new\n"
    r = server.cli("logs", str(jid), "-f", "--since", "1h", "--timestamps",
                   check=True)
    assert [stamped(ln)[1] for ln in r.stdout.splitlines()] == ["old", "new"]
    r = server.cli("logs", str(jid), "--since", "0s", check=True)
    assert r.stdout == ""
    # The log itself holds only the task's bytes.
    assert server.logs(jid) == "old\nnew\n"


def test_logs_since_refuses_what_is_not_a_duration(server):
    jid = server.submit(job_yaml("j", ["/bin/echo", "hi"]))
    server.wait_state(jid, "succeeded")
    r = server.cli("logs", str(jid), "--since", "5")
    assert r.returncode == 2 and "--since" in r.stderr
    r = server.request("GET", f"/v1/jobs/{jid}/logs", params={"since": "5"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "since"
    r = server.request("GET", f"/v1/jobs/{jid}/logs",
                       params={"timestamps": "2"})
    assert r.status_code == 400 and "timestamps" in r.text


def test_logs_without_line_times_says_so(server):
    # A log whose times are gone (as under an executor that keeps none):
    # asked for times, the answer names the flag rather than guessing.
    jid = server.submit(job_yaml("j", ["/bin/echo", "hi"]))
    server.wait_state(jid, "succeeded")
    (server.home / "tasks" / str(jid) / "1" / "0" / "output.times").unlink()
    assert server.cli("logs", str(jid), check=True).stdout == "hi\n"
    r = server.cli("logs", str(jid), "--timestamps")
    assert r.returncode != 0 and "timestamps" in r.stderr
    r = server.request("GET", f"/v1/jobs/{jid}/logs", params={"since": "1h"})
    assert r.status_code == 409 and r.json()["error"]["field"] == "since"
    # Nor is a link to another file followed for them.
    times = server.home / "tasks" / str(jid) / "1" / "0" / "output.times"
    times.symlink_to(server.home / "admin.token")
    r = server.request("GET", f"/v1/jobs/{jid}/logs",
                       params={"timestamps": "1"})
    assert r.status_code == 409 and "link" in r.text
    assert server.admin_token not in r.text
