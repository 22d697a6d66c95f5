"""Job arrays under `kiln server --executor kubernetes`, against JobApi
(kube_replay.py) and the recorded objects of tests/fixtures/kube/executor:
the elements started together are one Indexed Job, each element's state,
exit code and log come from its own pod, a failed element is retried
alone, one element's cancel deletes only its pod, the array's the Job,
and a restarted server adopts the Job without posting it again. No real
API server runs here: these are the recorded formats."""
import json
import os
import subprocess

from conftest import KILN, job_yaml, wait_for
# api and kserver: the same server and JobApi as the executor's tests.
from test_kube_executor import (api, env_of, kserver,  # noqa: F401
                                posted, restart, start_server)

NS = "ml"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
PODS = f"/api/v1/namespaces/{NS}/pods"
INDEX_FIELD = {"fieldRef": {"fieldPath": "metadata.annotations['batch."
                            "kubernetes.io/job-completion-index']"}}


def elements(server, array_id):
    r = server.request("GET", "/v1/jobs", params={"array": array_id})
    assert r.status_code == 200, r.text
    return {e["array"]["index"]: e for e in r.json()["jobs"]}


def pod_name(job, index):
    return f"{job}-{index}-x7k2p"


def started(server, api, spec, n):
    """Submit array spec of n elements; its id and Job's name once the Job
    is posted and every element runs."""
    aid = server.submit(spec)
    name = f"kiln-{aid}-1"
    wait_for(lambda: posted(api, name), what="the array's POST")
    for k in range(n):
        server.wait_state(aid + k, "running")
    return aid, name


def shim_as_element(tmp_path, env, index):
    """`kiln shim --kube` as the pod of completion index would run it,
    with the run's variables as posted: the task prints what it sees."""
    run = {k: v for k, v in env.items() if isinstance(v, str)}
    shim_env = dict(os.environ)
    shim_env.update(run, KILN_COMPLETION_INDEX=str(index),
                    KILN_TASK_DIR=str(tmp_path / f"pod-{index}"))
    for k in ("KILN_CHECKPOINT_DIR", "KILN_STORE", "KILN_OUTPUT_DIR",
              "KILN_OUTPUT_STORE", "KILN_INPUTS", "KILN_TERMINATION_LOG",
              "KILN_INPUT_DIR", "KILN_REQUIRES"):
        shim_env.pop(k, None)
    return subprocess.run(
        [KILN, "shim", "--kube", "--", "/bin/sh", "-c",
         "echo job=$KILN_JOB_ID index=$KILN_ARRAY_INDEX "
         "slurm=$SLURM_ARRAY_TASK_ID array=$KILN_ARRAY_JOB_ID "
         "count=$KILN_ARRAY_COUNT"],
        env=shim_env, capture_output=True, text=True, timeout=60)


def test_array_is_one_indexed_job(kserver, api, tmp_path):
    aid = kserver.submit(job_yaml("sweep", ["python", "sweep.py"],
                                  array="0-4%2", timeout="1h"))
    name = f"kiln-{aid}-1"
    job = wait_for(lambda: posted(api, name), what="the array's POST")
    assert job["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kiln", "kiln.dev/job": name,
        "kiln.dev/job-id": str(aid), "kiln.dev/attempt": "1",
        "kiln.dev/array-id": str(aid)}
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == 5 and spec["parallelism"] == 2
    # Each index fails alone and kiln decides its retry.
    assert spec["backoffLimitPerIndex"] == 0 and "backoffLimit" not in spec
    # The timeout is each element's pod's, not the whole run's.
    assert "activeDeadlineSeconds" not in spec
    pod = spec["template"]["spec"]
    assert pod["activeDeadlineSeconds"] == 3600
    # Nothing wider than a single Job's pod.
    assert pod["automountServiceAccountToken"] is False
    assert spec["template"]["metadata"]["labels"]["kiln.dev/array-id"] == \
        str(aid)
    (c,) = pod["containers"]
    env = env_of(c)
    assert env["KILN_COMPLETION_INDEX"] == INDEX_FIELD
    assert (env["KILN_ARRAY_RUN_INDEX"], env["KILN_ARRAY_RUN_JOB_ID"],
            env["KILN_ARRAY_RUN_SIZE"]) == ("0", str(aid), "5")
    for own in ("KILN_JOB_ID", "KILN_ARRAY_INDEX", "SLURM_ARRAY_TASK_ID"):
        assert own not in env
    assert env["KILN_ARRAY_JOB_ID"] == str(aid)
    assert env["KILN_ARRAY_COUNT"] == "5" and env["KILN_ATTEMPT"] == "1"
    # The pod's shim gives the task the element's own variables.
    r = shim_as_element(tmp_path, env, 3)
    assert r.returncode == 0, r.stderr
    # A pod's task writes to the pod's log: the shim's stdout.
    assert r.stdout.strip() == (f"job={aid + 3} index=3 slurm=3 array={aid} "
                           "count=5")
    for bad in ("5", "-1", "99999999999999999999", "3x"):
        r = shim_as_element(tmp_path, env, bad)
        assert r.returncode == 2 and "KILN_COMPLETION_INDEX" in r.stderr, \
            r.stderr

    for k in range(5):
        kserver.wait_state(aid + k, "running")
    # Kubernetes holds the parallel limit: two pods first.
    assert sorted(api.pods[name]) == [0, 1]
    for k in range(5):
        if k == 1:
            api.set_pod(name, k, "pod-failed.json", log="element 1 broke\n")
        else:
            api.set_pod(name, k, "pod-succeeded.json",
                        log=f"element {k} done\n")
    api.set_job(name, "job-array-failed-indexes.json")
    for k in range(5):
        kserver.wait_state(aid + k, ("succeeded", "failed"))
    els = elements(kserver, aid)
    assert els[1]["state"] == "failed" and els[1]["exit_code"] == 3
    assert all(els[k]["state"] == "succeeded" and els[k]["exit_code"] == 0
               for k in (0, 2, 3, 4))
    for k in range(5):
        want = "element 1 broke\n" if k == 1 else f"element {k} done\n"
        assert kserver.logs(aid + k) == want
    assert len(api.sent("POST", "/jobs")) == 1
    assert not api.sent("DELETE")
    # A list pass is two requests, whatever the number of elements.
    lists = api.sent("GET", "/jobs") + api.sent("GET", "/pods")
    assert all(r["query"]["labelSelector"] ==
               ["app.kubernetes.io/managed-by=kiln"] for r in lists)

    listed = json.loads(kserver.cli("ls", "-o", "json", check=True).stdout)
    (row,) = [j for j in listed["jobs"] if j["id"] == aid]
    assert row["array"]["counts"] == {"succeeded": 4, "failed": 1}
    show = kserver.cli("show", str(aid), check=True).stdout
    assert "5 elements, indexes 0-4" in show
    assert any(line.split()[:3] == ["1", str(aid + 1), "failed"]
               for line in show.splitlines())


def test_failed_element_is_retried_alone(kserver, api):
    aid = kserver.submit(job_yaml("flaky", ["python", "step.py"],
                                  array="0-2", retries=1, backoff="1s"))
    name = f"kiln-{aid}-1"
    wait_for(lambda: posted(api, name), what="the array's POST")
    kserver.wait_state(aid + 1, "running")
    api.set_pod(name, 1, "pod-failed.json", log="boom\n")
    retry = f"kiln-{aid + 1}-2"
    job = wait_for(lambda: posted(api, retry), what="element 1's retry")
    # A run of one, its index set explicitly: the element's own.
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 1
    assert spec["backoffLimitPerIndex"] == 0
    assert job["metadata"]["labels"]["kiln.dev/array-id"] == str(aid)
    assert job["metadata"]["labels"]["kiln.dev/job-id"] == str(aid + 1)
    env = env_of(spec["template"]["spec"]["containers"][0])
    assert (env["KILN_ARRAY_RUN_INDEX"], env["KILN_ARRAY_RUN_JOB_ID"],
            env["KILN_ARRAY_RUN_SIZE"], env["KILN_ATTEMPT"]) == \
        ("1", str(aid + 1), "1", "2")
    api.set_pod(retry, 0, "pod-succeeded.json", log="fine\n")
    for k in (0, 2):
        api.set_pod(name, k, "pod-succeeded.json")
    for k in range(3):
        assert kserver.wait_state(aid + k, ("succeeded", "failed"))[
            "state"] == "succeeded"
    assert kserver.logs(aid + 1, attempt=1) == "boom\n"
    assert kserver.logs(aid + 1) == "fine\n"
    # The other elements were never posted again.
    assert sorted(r["body"]["metadata"]["name"]
                  for r in api.sent("POST", "/jobs")) == sorted([name, retry])


def test_cancel_one_element_deletes_only_its_pod(kserver, api):
    aid, name = started(kserver, api, job_yaml(
        "long", ["sleep", "1000"], array="0-4%3",
        checkpoint={"every": "5m", "grace": "45s"}), 5)
    kserver.cli("cancel", f"{aid}[1]", check=True)
    (delete,) = wait_for(lambda: api.sent("DELETE"), what="the pod's DELETE")
    assert delete["path"] == f"{PODS}/{pod_name(name, 1)}"
    assert delete["body"] == {"kind": "DeleteOptions", "apiVersion": "v1",
                              "gracePeriodSeconds": 45}
    assert kserver.wait_state(aid + 1, "cancelled")
    # Index 4 waits for the parallel limit: no pod to delete yet, so it
    # ends at once, and its pod goes when Kubernetes creates it.
    kserver.cli("cancel", f"{aid}[4]", check=True)
    kserver.wait_state(aid + 4, "cancelled")
    assert len(api.sent("DELETE")) == 1
    api.set_pod(name, 4, "pod-running.json")
    wait_for(lambda: any(r["path"] == f"{PODS}/{pod_name(name, 4)}"
                         for r in api.sent("DELETE")),
             what="the late pod's DELETE")
    assert name in api.jobs
    assert not api.sent("DELETE", f"/jobs/{name}")
    for k in (0, 2, 3):
        assert kserver.job(aid + k)["state"] == "running"
        api.set_pod(name, k, "pod-succeeded.json", log=f"{k}\n")
    for k in (0, 2, 3):
        assert kserver.wait_state(aid + k, ("succeeded", "failed"))[
            "state"] == "succeeded"
    assert kserver.logs(aid + 2) == "2\n"


def test_cancel_of_the_array_deletes_its_job(kserver, api):
    aid, name = started(kserver, api,
                        job_yaml("all", ["sleep", "1000"], array="0-3"), 4)
    kserver.cli("cancel", str(aid), check=True)
    for k in range(4):
        kserver.wait_state(aid + k, "cancelled")
    (delete,) = api.sent("DELETE")
    assert delete["path"] == f"{JOBS}/{name}"
    assert delete["body"]["propagationPolicy"] == "Foreground"


def test_restart_adopts_the_arrays_job(tmp_path, api):
    s = start_server(tmp_path, api.port)
    try:
        aid, name = started(s, api, job_yaml("adopt", ["python", "sweep.py"],
                                             array="0-2"), 3)
        # Each other element points to its run's attempt directory.
        pointer = s.home / "tasks" / str(aid + 2) / "1" / "kube-array-run"
        assert pointer.read_text() == str(s.home / "tasks" / str(aid) / "1")
        restart(s, api)
        for k in range(3):
            assert s.job(aid + k)["state"] == "running"
            api.set_pod(name, k, "pod-succeeded.json", log=f"{k}\n")
        for k in range(3):
            assert s.wait_state(aid + k, ("succeeded", "failed"))[
                "state"] == "succeeded"
            assert s.logs(aid + k) == f"{k}\n"
        assert len(api.sent("POST", "/jobs")) == 1
    finally:
        s.stop()


def test_array_of_gangs_is_refused(kserver):
    r = kserver.request("POST", "/v1/jobs", data=job_yaml(
        "gangs", ["x"], tasks=2, array="0-3"), params={"file": "job.yaml"})
    assert r.status_code == 400, r.text
    assert "array of gangs" in r.text


def test_a_large_array_is_one_post_and_two_lists(kserver, api):
    aid = kserver.submit(job_yaml("wide", ["x"], array="0-999%10"))
    name = f"kiln-{aid}-1"
    job = wait_for(lambda: posted(api, name), what="the array's POST")
    assert job["spec"]["completions"] == 1000
    assert job["spec"]["parallelism"] == 10
    kserver.wait_state(aid + 999, "running")
    seen = len(api.requests)
    wait_for(lambda: len(api.sent("GET", "/jobs")) >= 3,
             what="list passes")
    # Every request after the POST is a list or a running pod's log:
    # none per element.
    with api.lock:
        later = api.requests[seen:]
    assert len(api.sent("POST", "/jobs")) == 1
    assert all(r["method"] == "GET" and
               (r["path"] in (JOBS, PODS) or r["path"].endswith("/log"))
               for r in later), later
    jobs_lists = [r for r in later if r["path"] == JOBS]
    pods_lists = [r for r in later if r["path"] == PODS]
    assert abs(len(jobs_lists) - len(pods_lists)) <= 1


def test_evict_one_element_requeues_it_alone(kserver, api):
    aid, name = started(kserver, api, job_yaml(
        "spot", ["python", "train.py"], array="0-2", preemptible=True,
        checkpoint={"every": "5m", "grace": "20s"}), 3)
    kserver.cli("evict", f"{aid}[2]", "--grace", "5s", check=True)
    (delete,) = wait_for(lambda: api.sent("DELETE"), what="the pod's DELETE")
    assert delete["path"] == f"{PODS}/{pod_name(name, 2)}"
    assert delete["body"]["gracePeriodSeconds"] == 5
    # Back in the queue and started again: a run of one, its index 2.
    again = f"kiln-{aid + 2}-2"
    job = wait_for(lambda: posted(api, again), what="element 2 again")
    env = env_of(job["spec"]["template"]["spec"]["containers"][0])
    assert (env["KILN_ARRAY_RUN_INDEX"], env["KILN_ARRAY_RUN_JOB_ID"]) == \
        ("2", str(aid + 2))
    assert name in api.jobs and len(api.sent("DELETE")) == 1
    for k in (0, 1):
        assert kserver.job(aid + k)["state"] == "running"


def test_a_stop_outlives_a_restart(tmp_path, api):
    """An element cancelled before Kubernetes created its pod: after a
    restart the server still deletes that pod when it appears."""
    s = start_server(tmp_path, api.port)
    try:
        aid, name = started(s, api, job_yaml("late", ["sleep", "1000"],
                                             array="0-2%2"), 3)
        assert sorted(api.pods[name]) == [0, 1]
        s.cli("cancel", f"{aid}[2]", check=True)
        s.wait_state(aid + 2, "cancelled")
        restart(s, api)
        api.set_pod(name, 2, "pod-running.json")
        wait_for(lambda: any(r["path"] == f"{PODS}/{pod_name(name, 2)}"
                             for r in api.sent("DELETE")),
                 what="the late pod's DELETE after the restart")
        assert not api.sent("DELETE", f"/jobs/{name}")
        for k in (0, 1):
            assert s.job(aid + k)["state"] == "running"
        assert len(api.sent("POST", "/jobs")) == 1
    finally:
        s.stop()
