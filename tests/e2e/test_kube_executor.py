"""`kiln server --executor kubernetes` against JobApi (kube_replay.py), a
local server answering with the recorded Kubernetes objects of
tests/fixtures/kube/executor: the exact Job kiln POSTs, the task states it
reads from Jobs and pods, retries, cancel, a spot eviction, logs, a
restart that adopts instead of submitting again, and API errors."""
import threading

import pytest

from conftest import Server, job_yaml, wait_for
from kube_replay import JobApi, write_kubeconfig

NS = "ml"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"


@pytest.fixture
def api():
    a = JobApi(NS)
    yield a
    a.close()


# The replay server answers at once: a tenth of a second between list
# passes (the flag's least) lets a test see each change it plays sooner
# than the default second would.
POLL = ["--kube-poll-interval", "100ms"]


def start_server(tmp_path, api_port, *extra, token=None, env=None):
    config = tmp_path / "kubeconfig"
    if token:
        write_kubeconfig(config, api_port, token=token)
    else:
        write_kubeconfig(config, api_port)
    s = Server(tmp_path / "home", gpus="8xH100-80GB",
               extra=["--executor", "kubernetes", "--kubeconfig", str(config),
                      "--kube-namespace", NS, "--image", "ghcr.io/me/train:1.4",
                      *POLL, *extra], env=env)
    s.home.mkdir(exist_ok=True)
    return s.start()


@pytest.fixture
def kserver(tmp_path, api):
    s = start_server(tmp_path, api.port)
    yield s
    s.stop()


def posted(api, name):
    jobs = [r for r in api.sent("POST", "/jobs")
            if r["body"]["metadata"]["name"] == name]
    return jobs[0]["body"] if jobs else None


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in container["env"]}


def test_gang_succeeds(kserver, api):
    jid = kserver.submit(job_yaml(
        "train", ["python", "train.py"], tasks=2, retries=2,
        resources={"gpus": 1, "gpu_model": "H100-80GB"},
        checkpoint={"every": "10m", "grace": "30s", "signal": "SIGUSR1"}))
    name = f"kiln-{jid}-1"
    job = wait_for(lambda: posted(api, name), what="the Job's POST")
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"]["namespace"] == NS
    assert job["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "kiln", "kiln.dev/job": name,
        "kiln.dev/job-id": str(jid), "kiln.dev/attempt": "1"}
    assert job["metadata"]["annotations"] == {"kiln.dev/name": "train"}
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2
    # kiln retries whole attempts itself.
    assert spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["labels"]["kiln.dev/job-id"] == \
        str(jid)
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == name
    # The namespace's service-account token stays out of the task.
    assert pod["automountServiceAccountToken"] is False
    assert {"key": "sku", "operator": "Equal", "value": "gpu",
            "effect": "NoSchedule"} in pod["tolerations"]
    affinity = pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]
    assert affinity["key"] == "nvidia.com/gpu.product"
    (c,) = pod["containers"]
    assert c["image"] == "ghcr.io/me/train:1.4"
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert c["lifecycle"]["preStop"]["exec"]["command"][2].startswith(
        "kill -s USR1 1;")
    env = env_of(c)
    assert env["WORLD_SIZE"] == "2"
    assert env["RANK"] == {"fieldRef": {"fieldPath": "metadata.annotations"
                                        "['batch.kubernetes.io/"
                                        "job-completion-index']"}}
    assert env["MASTER_ADDR"] == f"{name}-0.{name}"
    assert env["KILN_JOB_ID"] == str(jid) and env["KILN_ATTEMPT"] == "1"
    # The gang's headless Service, owned by the Job: posted once the
    # Job's answer gives its uid, so after the Job's POST.
    (svc,) = wait_for(lambda: [r["body"] for r in
                               api.sent("POST", "/services")],
                      what="the Service's POST")
    assert svc["metadata"]["name"] == name
    assert svc["metadata"]["ownerReferences"] == [{
        "apiVersion": "batch/v1", "kind": "Job", "name": name,
        "uid": f"uid-{name}"}]
    kserver.wait_state(jid, "running")
    api.set_pod(name, 0, "pod-running.json", log="step 1\n")
    wait_for(lambda: "step 1" in kserver.logs(jid, task=0),
             what="rank 0's log while it runs")
    # A follower reads on from its offset as the fetched log grows.
    followed = []
    follower = threading.Thread(target=lambda: followed.append(
        kserver.request("GET", f"/v1/jobs/{jid}/logs",
                        params={"task": 0, "follow": 1}).text))
    follower.start()
    api.set_pod(name, 0, "pod-succeeded.json", log="step 1\nstep 2\ndone 0\n")
    api.set_pod(name, 1, "pod-succeeded.json", log="done 1\n")
    api.set_job(name, "job-complete.json")
    done = kserver.wait_state(jid, ("succeeded", "failed"))
    assert done["state"] == "succeeded", done
    assert kserver.logs(jid, task=0) == "step 1\nstep 2\ndone 0\n"
    follower.join(timeout=30)
    assert followed == ["step 1\nstep 2\ndone 0\n"]
    assert kserver.logs(jid, task=1) == "done 1\n"
    # Nothing deleted: the TTL cleans up; one POST per attempt.
    assert not api.sent("DELETE")
    assert len(api.sent("POST", "/jobs")) == 1
    logs = api.sent("GET", "/log")
    assert logs[0]["query"]["container"] == ["task"]
    lists = [r for r in api.sent("GET", "/jobs") + api.sent("GET", "/pods")]
    assert all(r["query"]["labelSelector"] ==
               ["app.kubernetes.io/managed-by=kiln"] for r in lists)


def test_failure_retries_then_fails(kserver, api):
    jid = kserver.submit(job_yaml("flaky", ["python", "step.py"], retries=1,
                                  backoff="1s"))
    for attempt in (1, 2):
        name = f"kiln-{jid}-{attempt}"
        wait_for(lambda: posted(api, name), what=f"attempt {attempt}")
        # One task: no index, no gang, no Service.
        assert "completionMode" not in posted(api, name)["spec"]
        api.set_pod(name, 0, "pod-failed.json", log="boom\n")
        api.set_job(name, "job-failed.json")
    job = kserver.wait_state(jid, "failed")
    assert job["exit_code"] == 3
    assert "exit code 3" in job["reason"] and "after 1 retry" in \
        job["reason"], job
    assert not api.sent("POST", "/services")
    assert kserver.logs(jid, task=0, attempt=1) == "boom\n"


def test_oom_and_timeout_reasons(kserver, api):
    oom = kserver.submit(job_yaml("oom", ["x"]))
    wait_for(lambda: posted(api, f"kiln-{oom}-1"), what="the OOM job")
    api.set_pod(f"kiln-{oom}-1", 0, "pod-oomkilled.json")
    job = kserver.wait_state(oom, "failed")
    assert "OOMKilled, exit code 137" in job["reason"], job
    slow = kserver.submit(job_yaml("slow", ["x"], timeout="1m"))
    name = f"kiln-{slow}-1"
    wait_for(lambda: posted(api, name), what="the slow job")
    assert posted(api, name)["spec"]["activeDeadlineSeconds"] == 60
    api.set_pod(name, 0, "pod-deadline.json")
    api.set_job(name, "job-deadline.json")
    job = kserver.wait_state(slow, "failed")
    assert job["reason"].startswith("timeout"), job


def test_cancel_deletes_with_grace(kserver, api):
    jid = kserver.submit(job_yaml("long", ["sleep", "1000"],
                                  checkpoint={"every": "5m", "grace": "45s"}))
    name = f"kiln-{jid}-1"
    wait_for(lambda: posted(api, name), what="the Job's POST")
    kserver.wait_state(jid, "running")
    r = kserver.request("POST", f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 200, r.text
    (delete,) = wait_for(lambda: api.sent("DELETE"), what="the DELETE")
    assert delete["path"] == f"{JOBS}/{name}"
    assert delete["body"] == {"kind": "DeleteOptions", "apiVersion": "v1",
                              "propagationPolicy": "Foreground",
                              "gracePeriodSeconds": 45}
    job = kserver.wait_state(jid, "cancelled")
    assert "cancelled by" in job["reason"]


def test_spot_eviction_requeues(kserver, api):
    jid = kserver.submit(job_yaml("spot", ["python", "train.py"],
                                  preemptible=True, retries=0,
                                  checkpoint={"every": "5m", "grace": "20s"}))
    first = f"kiln-{jid}-1"
    wait_for(lambda: posted(api, first), what="the first attempt")
    assert {"key": "kubernetes.azure.com/scalesetpriority",
            "operator": "Equal", "value": "spot", "effect": "NoSchedule"} \
        in posted(api, first)["spec"]["template"]["spec"]["tolerations"]
    kserver.wait_state(jid, "running")
    api.set_pod(first, 0, "pod-disrupted.json")
    # The attempt ends preempted, its Job is deleted, a new one submitted
    # without using a retry (retries: 0).
    second = f"kiln-{jid}-2"
    wait_for(lambda: posted(api, second), what="the second attempt")
    (delete,) = api.sent("DELETE")
    assert delete["path"] == f"{JOBS}/{first}"
    attempts = kserver.job(jid)["attempts_detail"]
    assert attempts[0]["state"] == "preempted", attempts
    assert "DeletionByTaintManager" in attempts[0]["reason"]
    api.set_pod(second, 0, "pod-succeeded.json")
    api.set_job(second, "job-complete.json")
    assert kserver.wait_state(jid, ("succeeded", "failed"))["state"] == \
        "succeeded"


def restart(s, api):
    """Stop and start s, back once its executor lists Jobs again."""
    s.stop()
    seen = len(api.requests)
    s.start()
    wait_for(lambda: any(r["method"] == "GET" and r["path"].endswith("/jobs")
                         for r in api.requests[seen:]),
             what="a list after the restart")


def test_restart_adopts_without_posting(tmp_path, api):
    s = start_server(tmp_path, api.port)
    try:
        jid = s.submit(job_yaml("adopt", ["python", "train.py"], tasks=2))
        name = f"kiln-{jid}-1"
        wait_for(lambda: posted(api, name), what="the Job's POST")
        s.wait_state(jid, "running")
        # Following again: lists after the restart, no second POST.
        restart(s, api)
        assert s.job(jid)["state"] == "running"
        api.set_pod(name, 0, "pod-succeeded.json")
        api.set_pod(name, 1, "pod-succeeded.json")
        api.set_job(name, "job-complete.json")
        assert s.wait_state(jid, ("succeeded", "failed"))["state"] == \
            "succeeded"
        assert len(api.sent("POST", "/jobs")) == 1
        assert len(api.sent("POST", "/services")) == 1
    finally:
        s.stop()


def test_restart_before_submit_recorded(tmp_path, api):
    """A crash between the API's accepting the Job and kiln's recording it
    (kube-submitted): the next start posts again, takes the 409s for the
    Job and its Service as "already there", and follows it."""
    s = start_server(tmp_path, api.port)
    try:
        jid = s.submit(job_yaml("twice", ["x"], tasks=2))
        name = f"kiln-{jid}-1"
        marker = s.home / "tasks" / str(jid) / "1" / "kube-submitted"
        wait_for(marker.exists, what="kube-submitted")
        assert marker.read_text() == f"uid-{name}"
        s.kill9()
        marker.unlink()
        s.start()
        wait_for(lambda: len(api.sent("POST", "/jobs")) == 2,
                 what="the second POST")
        wait_for(lambda: len(api.sent("GET", f"/jobs/{name}")) == 1,
                 what="the Job read back after its 409")
        wait_for(marker.exists, what="kube-submitted again")
        assert s.job(jid)["state"] == "running"
        api.set_job(name, "job-complete.json")
        with api.lock:
            api.pods[name].clear()
        assert s.wait_state(jid, ("succeeded", "failed"))["state"] == \
            "succeeded"
    finally:
        s.stop()


def test_api_errors(tmp_path, api):
    s = start_server(tmp_path, api.port)
    try:
        api.fail[("POST", "jobs")] = 403
        jid = s.submit(job_yaml("denied", ["x"]))
        job = s.wait_state(jid, "failed")
        assert "cannot submit to Kubernetes: HTTP 403: jobs.batch is " \
            "forbidden" in job["reason"], job
        del api.fail[("POST", "jobs")]
        # A failing list is logged and retried; the job keeps running.
        jid = s.submit(job_yaml("flaky-api", ["x"]))
        name = f"kiln-{jid}-1"
        wait_for(lambda: posted(api, name), what="the POST")
        api.fail[("GET", "pods")] = 500
        api.set_pod(name, 0, "pod-succeeded.json")
        wait_for(lambda: "HTTP 500: Internal error occurred" in
                 s.log.read_text(), what="the list's error in the log")
        assert s.job(jid)["state"] == "running"
        del api.fail[("GET", "pods")]
        assert s.wait_state(jid, ("succeeded", "failed"))["state"] == \
            "succeeded"
        # A spec the cluster cannot take is refused at submit.
        r = s.request("POST", "/v1/jobs", data=job_yaml(
            "amd", ["x"], resources={"gpus": 1, "gpu_model": "MI300X"}))
        assert r.status_code == 400
        assert "no nvidia.com/gpu.product label is known for MI300X" in \
            r.json()["error"]["message"]
    finally:
        s.stop()


def test_unauthorized_and_refused(tmp_path, api):
    s = start_server(tmp_path, api.port, token="wrong-token")
    try:
        jid = s.submit(job_yaml("nope", ["x"]))
        job = s.wait_state(jid, "failed")
        assert "cannot submit to Kubernetes: HTTP 401: Unauthorized" in \
            job["reason"], job
    finally:
        s.stop()
    api.close()
    # Nothing listens there now.
    s = start_server(tmp_path, api.port)
    try:
        jid = s.submit(job_yaml("refused", ["x"]))
        job = s.wait_state(jid, "failed")
        assert "cannot submit to Kubernetes" in job["reason"]
        assert "onnect" in job["reason"], job
    finally:
        s.stop()


def test_server_flags(tmp_path):
    bad = tmp_path / "config"
    bad.write_text("current-context: x\ncontexts: []\n")
    s = Server(tmp_path / "home", extra=["--executor", "kubernetes",
                                         "--kubeconfig", str(bad)])
    s.home.mkdir()
    r = s.cli("server", "--listen", "127.0.0.1:0", "--executor",
              "kubernetes", "--kubeconfig", str(bad))
    assert r.returncode == 1 and 'no context named "x"' in r.stderr
    r = s.cli("server", "--kube-namespace", "ml")
    assert r.returncode == 2 and "need --executor kubernetes" in r.stderr
    r = s.cli("server", "--kube-poll-interval", "2s")
    assert r.returncode == 2 and "need --executor kubernetes" in r.stderr
    for bad in ("50ms", "2m", "1x"):
        r = s.cli("server", "--executor", "kubernetes",
                  "--kube-poll-interval", bad)
        assert r.returncode == 2 and "kube-poll-interval" in r.stderr, \
            (bad, r.stderr)
    r = s.cli("server", "--help")
    assert "--executor local|slurm|kubernetes" in r.stdout


def test_dev_environment_stops_idle_and_keeps_no_home(kserver, api):
    """A dev environment's pod: its name in KILN_DEVENV, $HOME the pod's
    writable /tmp (no home is restored or saved: the server cannot reach
    a pod's files), stopped when no session is attached for its
    idle_timeout, its Job deleted."""
    jid = kserver.submit("kind: DevEnvironment\nname: box\n"
                         "resources: {gpus: 1}\nidle_timeout: 3s\n",
                         filename="box.yaml")
    name = f"kiln-{jid}-1"
    job = wait_for(lambda: posted(api, name), what="the Job's POST")
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert c["command"][-2:] == ["sleep", "infinity"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    env = env_of(c)
    assert env["KILN_DEVENV"] == "box" and env["HOME"] == "/tmp"
    assert "KILN_DEVENV_HOME" not in env
    kserver.wait_state(jid, "running")
    api.set_pod(name, 0, "pod-running.json")
    done = kserver.wait_state(jid, ("cancelled", "failed", "succeeded"),
                              timeout=60)
    assert done["state"] == "cancelled", done
    assert done["reason"].startswith("stopped: idle for 3s"), done["reason"]
    (delete,) = wait_for(lambda: api.sent("DELETE"), what="the DELETE")
    assert delete["path"] == f"{JOBS}/{name}"
    events = kserver.request("GET", "/v1/events").text
    assert "devenv.idle_warning" in events
    assert "devenv.home_saved" not in events
    assert "devenv.home_refused" not in events
    rows = kserver.request("GET", "/v1/cost").json()["devenvs"]["rows"]
    assert [r["stopped_for"] for r in rows if r["job"] == jid] == ["idle"]
