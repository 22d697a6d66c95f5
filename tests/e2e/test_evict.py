"""Eviction: kiln evict, node drain and cordon; preempted attempts requeue
without using a retry and come back first."""
import os

from conftest import job_yaml, wait_for


def test_evict_requeues_without_using_a_retry(server, tmp_path):
    runs = tmp_path / "runs"
    script = f"echo run >> {runs}; trap 'echo got-signal; exit 143' USR1; " \
             f"if [ $KILN_ATTEMPT = 2 ]; then exit 0; fi; sleep 300 & wait"
    spec = job_yaml("evictee", ["/bin/sh", "-c", script], preemptible=True,
                    retries=0, checkpoint={"signal": "SIGUSR1", "grace": "5s"})
    jid = server.submit(spec)
    server.wait_state(jid, "running")
    wait_for(lambda: runs.exists(), what="the first run")
    r = server.request("POST", f"/v1/jobs/{jid}/evict", params={"reason": "test"})
    assert r.status_code == 200, r.text
    job = server.wait_state(jid, "succeeded")
    a = job["attempts_detail"]
    assert [x["state"] for x in a] == ["preempted", "succeeded"]
    assert "evicted by admin: test" in a[0]["reason"]
    assert job["retries_used"] == 0
    # The checkpoint signal (USR1) reached the task, not SIGTERM.
    assert "got-signal" in server.logs(jid, attempt=1)
    assert a[0]["exit_code"] == 143
    # No checkpoint was synced: all of the first attempt is lost work.
    assert a[0]["useful_task_ms"] == 0 and a[0]["lost_task_ms"] > 0
    # A succeeded attempt loses only its restore time (one task here).
    assert a[1]["lost_task_ms"] == a[1]["restore_ms"]
    g = job["goodput"]
    lost_ms = sum(x["lost_task_ms"] for x in a)
    assert abs(g["lost_task_seconds"] - lost_ms / 1000) < 1e-9
    assert 0 <= g["percent"] < 100
    r = server.cli("show", str(jid), check=True)
    assert "goodput" in r.stdout


def test_evict_escalates_to_kill_after_grace(server):
    # Only the first attempt ignores SIGTERM: the cancel at the end
    # need not wait out the second one's grace.
    spec = job_yaml("stubborn", ["/bin/sh", "-c",
                                 "if [ $KILN_ATTEMPT = 1 ]; then trap '' TERM; "
                                 "fi; echo ready; sleep 300 & wait"],
                    preemptible=True)
    jid = server.submit(spec)
    wait_for(lambda: server.job(jid)["state"] == "running" and
             "ready" in server.logs(jid), what="the task to be ready")
    r = server.request("POST", f"/v1/jobs/{jid}/evict", params={"grace": "200ms"})
    assert r.status_code == 200, r.text
    job = wait_for(lambda: (lambda j: j if len(j["attempts_detail"]) >= 2 or
                            j["attempts_detail"][0]["state"] == "preempted" else None)(
        server.job(jid)), what="the preempted attempt")
    assert job["attempts_detail"][0]["state"] == "preempted"
    assert job["attempts_detail"][0]["signal"] == 9
    server.request("POST", f"/v1/jobs/{jid}/cancel")
    server.wait_state(jid, "cancelled")


def test_evict_refuses_non_preemptible_and_queued(server):
    jid = server.submit(job_yaml("steady", ["/bin/sleep", "300"]))
    server.wait_state(jid, "running")
    r = server.request("POST", f"/v1/jobs/{jid}/evict")
    assert r.status_code == 409
    assert "not preemptible" in r.json()["error"]["message"]
    q = server.submit(job_yaml("waits", ["/bin/true"], preemptible=True,
                               resources={"gpus": 8}))
    r = server.request("POST", f"/v1/jobs/{q}/evict")
    assert r.status_code == 409
    server.request("POST", f"/v1/jobs/{jid}/cancel")


def test_preempted_job_goes_ahead_of_newer_jobs(server, tmp_path):
    order = tmp_path / "order"
    spec_a = job_yaml("first", ["/bin/sh", "-c",
                                f"echo first-$KILN_ATTEMPT >> {order}; sleep 300"],
                      preemptible=True, resources={"gpus": 4})
    a = server.submit(spec_a)
    wait_for(lambda: order.exists() and "first-1" in order.read_text(),
             what="the first attempt")
    b = server.submit(job_yaml("second", ["/bin/sh", "-c", f"echo second >> {order}"],
                               resources={"gpus": 4}))
    server.request("POST", f"/v1/jobs/{a}/evict", params={"grace": "100ms"})
    # a was submitted first, so its second attempt runs before b.
    wait_for(lambda: order.exists() and "first-2" in order.read_text(),
             what="the resumed attempt")
    assert order.read_text().split() == ["first-1", "first-2"]
    assert server.job(b)["state"] == "queued"
    server.request("POST", f"/v1/jobs/{a}/cancel")
    server.wait_state(b, "succeeded")


def test_drain_evicts_preemptible_and_keeps_the_rest(server):
    pre = server.submit(job_yaml("spot", ["/bin/sleep", "300"], preemptible=True,
                                 resources={"gpus": 1}))
    steady = server.submit(job_yaml("steady", ["/bin/sleep", "300"],
                                    resources={"gpus": 1}))
    server.wait_state(pre, "running")
    server.wait_state(steady, "running")
    node = server.request("GET", "/v1/nodes").json()["nodes"][0]["name"]
    r = server.cli("drain", node, "--reason", "maintenance", check=True)
    assert "draining" in r.stdout
    job = wait_for(lambda: (lambda j: j if j["attempts_detail"][0]["state"] ==
                            "preempted" else None)(server.job(pre)),
                   what="the preemptible job to be evicted")
    assert job["state"] == "queued"
    assert "no schedulable node" in wait_for(lambda: server.job(pre)["reason"] and
                                             "no schedulable" in server.job(pre)["reason"]
                                             and server.job(pre)["reason"])
    assert server.job(steady)["state"] == "running"
    nodes = server.request("GET", "/v1/nodes").json()["nodes"]
    assert nodes[0]["state"] == "draining"
    assert "maintenance" in nodes[0]["reason"]
    # The drain outlives a restart.
    server.stop()
    server.start()
    assert server.request("GET", "/v1/nodes").json()["nodes"][0]["state"] == "draining"
    server.cli("uncordon", node, check=True)
    server.wait_state(pre, "running")
    for jid in (pre, steady):
        server.request("POST", f"/v1/jobs/{jid}/cancel")


def test_cordon_needs_operator(server):
    user = server.create_token("u", "user")
    node = server.request("GET", "/v1/nodes").json()["nodes"][0]["name"]
    r = server.request("POST", f"/v1/nodes/{node}/cordon", token=user)
    assert r.status_code == 403
    r = server.request("POST", "/v1/nodes/elsewhere/cordon")
    assert r.status_code == 404
    r = server.request("POST", f"/v1/nodes/{node}/cordon")
    assert r.status_code == 200 and r.json()["node"]["state"] == "cordoned"
    jid = server.submit(job_yaml("waits", ["/bin/true"]))
    wait_for(lambda: server.job(jid)["reason"], what="a queue reason")
    assert server.job(jid)["state"] == "queued"
    server.request("POST", f"/v1/nodes/{node}/uncordon")
    server.wait_state(jid, "succeeded")


def test_higher_priority_job_preempts_lower_preemptible(server, tmp_path):
    low = server.submit(job_yaml("low", ["/bin/sh", "-c",
                                         "if [ $KILN_ATTEMPT = 1 ]; then sleep 300; fi"],
                                 preemptible=True, priority=1,
                                 resources={"gpus": 3}))
    steady = server.submit(job_yaml("steady", ["/bin/sleep", "300"], priority=0,
                                    resources={"gpus": 1}))
    server.wait_state(low, "running")
    server.wait_state(steady, "running")
    go = tmp_path / "go"
    high = server.submit(job_yaml("high", ["/bin/sh", "-c",
                                           f"while [ ! -e {go} ]; do sleep 0.05; done"],
                                  priority=100, resources={"gpus": 2}))
    server.wait_state(high, "running")
    job = server.job(low)
    # The preempted job waits behind the one it made room for.
    assert server.job(low)["state"] == "queued"
    assert job["state"] == "queued"
    assert job["attempts_detail"][0]["state"] == "preempted"
    assert f"preempted for job {high} (priority 100)" in job["attempts_detail"][0]["reason"]
    # The non-preemptible job was not touched, though its priority is lower.
    assert server.job(steady)["state"] == "running"
    go.touch()
    server.wait_state(high, "succeeded")
    server.wait_state(low, "succeeded")
    assert server.job(low)["retries_used"] == 0
    server.request("POST", f"/v1/jobs/{steady}/cancel")


def test_no_preemption_of_higher_or_equal_priority(server):
    a = server.submit(job_yaml("a", ["/bin/sleep", "300"], preemptible=True,
                               priority=50, resources={"gpus": 4}))
    server.wait_state(a, "running")
    b = server.submit(job_yaml("b", ["/bin/true"], priority=50,
                               resources={"gpus": 1}))
    wait_for(lambda: server.job(b)["reason"], what="a queue reason")
    assert server.job(a)["state"] == "running"
    assert server.job(b)["state"] == "queued"
    server.request("POST", f"/v1/jobs/{a}/cancel")
    server.wait_state(b, "succeeded")


def test_alike_queued_jobs_each_say_why_they_wait(server):
    """A turn tries a shape that found no room once; the jobs that ask
    for the same still each get the reason, and start in turn."""
    blocker = server.submit(job_yaml("blocker", ["/bin/sleep", "300"],
                                     resources={"gpus": 4}))
    server.wait_state(blocker, "running")
    alike = [server.submit(job_yaml(f"alike-{i}", ["/bin/true"],
                                    resources={"gpus": 2}))
             for i in range(3)]
    reasons = wait_for(lambda: (lambda r: r if all(r) else None)(
        [server.job(j)["reason"] for j in alike]), what="three reasons")
    assert len(set(reasons)) == 1, reasons
    assert "GPU" in reasons[0]
    server.request("POST", f"/v1/jobs/{blocker}/cancel")
    for j in alike:
        server.wait_state(j, "succeeded")


def test_health_report_marks_node_unhealthy_and_back(server):
    node = server.request("GET", "/v1/nodes").json()["nodes"][0]["name"]
    r = server.request("POST", f"/v1/nodes/{node}/health",
                       json={"healthy": False, "reason": "gpu: 1 of 8 GPUs missing"})
    assert r.status_code == 200, r.text
    n = server.request("GET", "/v1/nodes").json()["nodes"][0]
    assert n["state"] == "unhealthy"
    assert "1 of 8 GPUs missing" in n["reason"]
    jid = server.submit(job_yaml("waits", ["/bin/true"]))
    wait_for(lambda: server.job(jid)["reason"], what="a queue reason")
    assert server.job(jid)["state"] == "queued"
    assert server.request("POST", f"/v1/nodes/{node}/health",
                          json={"healthy": "yes"}).status_code == 400
    r = server.request("POST", f"/v1/nodes/{node}/health", json={"healthy": True})
    assert r.json()["node"]["state"] == "ready"
    server.wait_state(jid, "succeeded")
    rows = server.request("GET", "/v1/audit", params={"action": "node."}).json()["audit"]
    assert [x["action"] for x in rows][:2] == ["node.uncordon", "node.health"]


def test_jobs_behind_a_preempting_job_wait_for_it(server, tmp_path):
    # The victim takes its time to stop, so the wait can be seen; its
    # second attempt, cancelled at the end, does not.
    low = server.submit(job_yaml("slow-to-stop", ["/bin/sh", "-c",
                                                  "trap '[ $KILN_ATTEMPT = 1 ] && "
                                                  "sleep 2; exit 143' TERM; "
                                                  "echo up; sleep 300 & wait"],
                                 preemptible=True, priority=1,
                                 resources={"gpus": 4}))
    wait_for(lambda: "up" in server.logs(low), what="the victim")
    high = server.submit(job_yaml("high", ["/bin/true"], priority=100,
                                  resources={"gpus": 4}))
    small = server.submit(job_yaml("small", ["/bin/true"], priority=0,
                                   resources={"gpus": 1}))
    reason = wait_for(lambda: (lambda r: r if r and "waiting behind" in r else None)(
        server.job(small)["reason"]), what="the small job's reason")
    assert f"waiting behind job {high}" in reason
    assert "being preempted" in server.job(high)["reason"] or \
        "preempted jobs to stop" in server.job(high)["reason"]
    server.wait_state(high, "succeeded")
    # The preempted job, of higher priority than small, resumes first.
    server.wait_state(low, "running")
    assert server.job(small)["state"] == "queued"
    server.request("POST", f"/v1/jobs/{low}/cancel")
    server.wait_state(small, "succeeded")


def test_a_cpu_job_behind_a_preempting_job_starts_beside_it(server, tmp_path):
    """The preempting job is promised the GPUs it waits for, not the
    whole machine: a CPU-only job behind it starts while the victim is
    still stopping, and a GPU job behind it does not take the promise."""
    stop = tmp_path / "stop"
    low = server.submit(job_yaml("stops-when-told", ["/bin/sh", "-c",
                                                     f"trap 'while [ ! -e {stop} ]; "
                                                     "do sleep 0.05; done; exit 143' TERM; "
                                                     "echo up; sleep 300 & wait"],
                                 preemptible=True, priority=1,
                                 resources={"gpus": 4},
                                 # No SIGKILL before the test says stop.
                                 checkpoint={"grace": "10m"}))
    wait_for(lambda: "up" in server.logs(low), what="the victim")
    high = server.submit(job_yaml("high", ["/bin/true"], priority=100,
                                  resources={"gpus": 2}))
    gpu = server.submit(job_yaml("gpu", ["/bin/true"], priority=0,
                                 resources={"gpus": 2}))
    cpu = server.submit(job_yaml("cpu", ["/bin/true"], priority=0,
                                 resources={"gpus": 0}))
    server.wait_state(cpu, "succeeded")
    # The victim has not stopped: the promise still holds its GPUs.
    assert server.job(high)["state"] == "queued"
    assert server.job(low)["state"] == "running"
    assert f"waiting behind job {high}" in server.job(gpu)["reason"]
    stop.touch()
    server.wait_state(high, "succeeded")
    server.request("POST", f"/v1/jobs/{low}/cancel")
    server.wait_state(gpu, "succeeded")


def test_evicting_another_users_job_is_refused_and_audited(server):
    alice = server.create_token("alice", "user")
    bob = server.create_token("bob", "user")
    jid = server.submit(job_yaml("hers", ["/bin/sleep", "300"], preemptible=True),
                        token=alice)
    server.wait_state(jid, "running")
    r = server.request("POST", f"/v1/jobs/{jid}/evict", token=bob)
    assert r.status_code == 403
    rows = server.request("GET", "/v1/audit", params={"actor": "bob"}).json()["audit"]
    assert ("job.evict", f"job/{jid}", "denied") in [
        (x["action"], x["object"], x["outcome"]) for x in rows]
    assert server.job(jid)["state"] == "running"
    server.request("POST", f"/v1/jobs/{jid}/cancel")
