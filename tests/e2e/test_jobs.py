"""Jobs end to end: gangs, queueing, retries, cancel, timeout, logs."""
import os
import re
import subprocess

from conftest import job_yaml, wait_for


def env_line(log, name):
    m = re.search(rf"^{name}=(.*)$", log, re.M)
    assert m, f"{name} missing from:\n{log}"
    return m.group(1)


def attempts_told(job):
    """Each attempt's outcome, for an assertion's message: what ended it
    says why a count or a state is not the one expected."""
    return [(a["number"], a["state"], a["exit_code"], a["signal"],
             a["reason"], a["started_at_ms"], a["ended_at_ms"])
            for a in job["attempts_detail"]]


PRINT_ENV = ["/bin/sh", "-c",
             "for v in RANK LOCAL_RANK WORLD_SIZE CUDA_VISIBLE_DEVICES "
             "NVIDIA_VISIBLE_DEVICES MASTER_ADDR MASTER_PORT KILN_JOB_ID "
             "KILN_ATTEMPT KILN_TASK_DIR; do eval echo $v=\\$$v; done"]


def test_gang_gets_ranks_and_disjoint_devices(server):
    jid = server.submit(job_yaml("gang", PRINT_ENV, tasks=2,
                                 resources={"gpus": 2}))
    job = server.wait_state(jid, "succeeded")
    assert job["exit_code"] == 0
    logs = [server.logs(jid, task=t) for t in (0, 1)]
    assert [env_line(l, "RANK") for l in logs] == ["0", "1"]
    assert [env_line(l, "WORLD_SIZE") for l in logs] == ["2", "2"]
    devs = [set(env_line(l, "CUDA_VISIBLE_DEVICES").split(",")) for l in logs]
    assert all(len(d) == 2 for d in devs)
    assert not devs[0] & devs[1]
    assert env_line(logs[0], "MASTER_PORT") == env_line(logs[1], "MASTER_PORT")
    assert int(env_line(logs[0], "MASTER_PORT")) > 0
    assert env_line(logs[0], "MASTER_ADDR") == "127.0.0.1"
    assert env_line(logs[0], "KILN_JOB_ID") == str(jid)
    assert env_line(logs[0], "KILN_ATTEMPT") == "1"
    assert os.path.isdir(env_line(logs[1], "KILN_TASK_DIR"))
    detail = job["attempts_detail"]
    assert len(detail) == 1 and len(detail[0]["tasks"]) == 2


def test_cpu_only_job_sees_no_gpu(server):
    jid = server.submit(job_yaml("cpu", PRINT_ENV))
    server.wait_state(jid, "succeeded")
    assert env_line(server.logs(jid), "CUDA_VISIBLE_DEVICES") == ""


def test_a_path_id_that_is_no_id_is_refused_naming_it(server):
    # 20 digits overflow 64 bits: no id at all, not the largest one.
    routes = ["GET /v1/jobs/{}", "POST /v1/jobs/{}/cancel",
              "POST /v1/jobs/{}/evict", "GET /v1/jobs/{}/logs",
              "GET /v1/workflows/{}", "POST /v1/workflows/{}/cancel"]
    for route in routes:
        method, path = route.split()
        for bad in ("0", "-3", "12x", "99999999999999999999"):
            r = server.request(method, path.format(bad))
            assert r.status_code == 400, (route, bad, r.text)
            err = r.json()["error"]
            assert err["field"] == "id", (route, bad, err)
            assert bad in err["message"], (route, bad, err)


def test_too_big_job_stays_queued_with_reason(server):
    jid = server.submit(job_yaml("huge", ["/bin/true"], resources={"gpus": 8}))
    job = wait_for(lambda: (lambda j: j if j["reason"] else None)(server.job(jid)),
                   what="a queue reason")
    assert job["state"] == "queued"
    assert "can never fit" in job["reason"]
    assert "8 GPUs" in job["reason"]
    # It does not block smaller jobs behind it.
    small = server.submit(job_yaml("small", ["/bin/true"], resources={"gpus": 1}))
    server.wait_state(small, "succeeded")
    assert server.job(jid)["state"] == "queued"


def test_busy_cluster_queues_then_runs(server):
    blocker = server.submit(job_yaml("blocker", ["/bin/sh", "-c", "sleep 30"],
                                     resources={"gpus": 4}))
    server.wait_state(blocker, "running")
    waiting = server.submit(job_yaml("waiting", ["/bin/true"],
                                     resources={"gpus": 1}))
    job = wait_for(lambda: (lambda j: j if j["reason"] else None)(server.job(waiting)),
                   what="a queue reason")
    assert job["state"] == "queued"
    assert "can never fit" not in job["reason"]
    r = server.request("POST", f"/v1/jobs/{blocker}/cancel")
    assert r.status_code == 200, r.text
    server.wait_state(waiting, "succeeded")


def test_failing_job_is_retried_exactly_retries_times(server):
    jid = server.submit(job_yaml("flaky", ["/bin/sh", "-c", "exit 3"],
                                 retries=2, backoff="100ms"))
    job = server.wait_state(jid, "failed")
    told = attempts_told(job)
    assert job["attempts"] == 3, told
    assert job["retries_used"] == 2, told
    assert job["exit_code"] == 3, told
    states = [a["state"] for a in job["attempts_detail"]]
    assert states == ["failed", "failed", "failed"], told
    assert all(a["exit_code"] == 3 for a in job["attempts_detail"]), told
    assert "exit code 3" in job["reason"]
    # Backoff doubles: the third attempt starts at least 100+200 ms after the first ends.
    a = job["attempts_detail"]
    assert a[1]["started_at_ms"] - a[0]["ended_at_ms"] >= 100, told
    assert a[2]["started_at_ms"] - a[1]["ended_at_ms"] >= 200, told


def test_retry_succeeds_on_second_attempt(server, tmp_path):
    marker = tmp_path / "marker"
    script = f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; exit 1"
    jid = server.submit(job_yaml("second-time", ["/bin/sh", "-c", script],
                                 retries=3, backoff="50ms"))
    job = server.wait_state(jid, "succeeded")
    assert job["attempts"] == 2, [
        (a["state"], a.get("reason"), server.logs(jid, attempt=a["number"]))
        for a in job["attempts_detail"]]


def pgid_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def host_pids(*cmdlines):
    """Host pids of the processes running exactly these command lines
    (a task's own pids are its pid namespace's)."""
    wanted = {"\0".join(c) + "\0" for c in cmdlines}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if open(f"/proc/{entry}/cmdline").read() in wanted:
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_cancel_ends_whole_process_group(server, tmp_path):
    pids = tmp_path / "pids"
    # Durations no other test uses, to find these sleeps from outside.
    script = (f"sleep 300.417 & echo $! >> {pids}; "
              f"(sleep 301.417 & echo $! >> {pids}; wait) & "
              f"echo $$ >> {pids}; wait")
    jid = server.submit(job_yaml("sleepers", ["/bin/sh", "-c", script]))
    server.wait_state(jid, "running")
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) >= 3,
             what="the task's children")
    procs = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(
        host_pids(["sleep", "300.417"], ["sleep", "301.417"])),
        what="the sleeps")
    pgid = os.getpgid(procs[-1])
    assert all(os.getpgid(p) == pgid for p in procs)
    r = server.request("POST", f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 200, r.text
    job = server.wait_state(jid, "cancelled")
    assert job["attempts_detail"][0]["state"] == "cancelled"
    wait_for(lambda: not pgid_alive(pgid), what="the process group to end")
    # A finished job cannot be cancelled again.
    r = server.request("POST", f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "conflict"


def test_cancel_queued_job(server):
    jid = server.submit(job_yaml("never", ["/bin/true"], resources={"gpus": 8}))
    r = server.request("POST", f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 200
    assert r.json()["job"]["state"] == "cancelled"
    assert server.job(jid)["attempts"] == 0


def test_cancel_kills_after_grace_when_term_is_ignored(tmp_path):
    from conftest import Server
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=["--kill-grace", "300ms"]).start()
    try:
        jid = s.submit(job_yaml("stubborn", ["/bin/sh", "-c",
                                             "trap '' TERM; echo ready; sleep 300 & wait"]))
        wait_for(lambda: "ready" in s.logs(jid), what="the trap to be set")
        s.request("POST", f"/v1/jobs/{jid}/cancel")
        job = s.wait_state(jid, "cancelled", timeout=10)
        assert job["attempts_detail"][0]["signal"] == 9
    finally:
        s.stop()


def test_timeout_ends_the_job_without_retry(server):
    jid = server.submit(job_yaml("slow", ["/bin/sleep", "30"], timeout="300ms",
                                 retries=2))
    job = server.wait_state(jid, "failed")
    told = attempts_told(job)
    assert job["attempts"] == 1, told
    assert "timeout" in job["reason"], told
    assert job["attempts_detail"][0]["signal"] == 15, told


def test_gang_member_failure_stops_the_rest(server):
    script = "if [ $RANK = 1 ]; then exit 5; fi; sleep 300"
    jid = server.submit(job_yaml("gang-fail", ["/bin/sh", "-c", script], tasks=2))
    job = server.wait_state(jid, "failed")
    assert job["exit_code"] == 5
    assert "rank 1: exit code 5" in job["reason"]


def test_logs_follow_streams_until_the_task_ends(server):
    jid = server.submit(job_yaml("talker", ["/bin/sh", "-c",
                                            "for i in 1 2 3; do echo line $i; sleep 0.2; done"]))
    server.wait_state(jid, "running")
    r = server.request("GET", f"/v1/jobs/{jid}/logs",
                       params={"follow": 1}, stream=True)
    assert r.status_code == 200
    body = b"".join(r.iter_content(chunk_size=None)).decode()
    assert body == "line 1\nline 2\nline 3\n"
    r = server.request("GET", f"/v1/jobs/{jid}/logs", params={"offset": 7})
    assert r.text == "line 2\nline 3\n"
    # Past the end there is nothing, not the log from its start again.
    for offset in (21, 22, 10**9):
        r = server.request("GET", f"/v1/jobs/{jid}/logs",
                           params={"offset": offset})
        assert r.status_code == 200 and r.text == "", offset


def test_bad_command_fails_with_127(server):
    jid = server.submit(job_yaml("missing", ["/nonexistent/binary"]))
    job = server.wait_state(jid, "failed")
    assert job["exit_code"] == 127
    assert "nonexistent" in server.logs(jid)


def test_workdir_defaults_to_the_spec_directory(server, tmp_path):
    spec_dir = tmp_path / "project"
    spec_dir.mkdir()
    (spec_dir / "data.txt").write_text("payload\n")
    spec = job_yaml("cwd", ["/bin/cat", "data.txt"])
    r = server.request("POST", "/v1/jobs", data=spec,
                       params={"file": str(spec_dir / "job.yaml")})
    assert r.status_code == 201, r.text
    jid = r.json()["job"]["id"]
    server.wait_state(jid, "succeeded")
    assert server.logs(jid) == "payload\n"
