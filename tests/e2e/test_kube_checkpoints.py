"""Checkpoints in pods under `kiln server --executor kubernetes`: the Job
kiln POSTs to JobApi (kube_replay.py) runs its task under `kiln shim
--kube`, and the Secret with the store's credentials comes first. Then
the pod is played by real processes: the initContainer's command (`kiln
shim --install` of this build) and the task container's exact command
and environment, taken from the manifest kiln sent, with the pod's
emptyDir mapped to a local directory and the server's own file:// store.
The task writes checkpoints the shim uploads; the checkpoint signal (what
the preStop hook sends PID 1) makes it write a last one, which the shim
syncs before it exits; the shim's termination message goes back in the
pod's status (as the kubelet would put it), so the attempt ends
preempted with that checkpoint counted; the next attempt's pod resumes
from it through KILN_RESUME_FROM. The same pods fetch the job's inputs
and upload its outputs, reported through the same message."""
import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import KILN, job_yaml, wait_for
from kube_replay import JobApi
from test_kube_executor import NS, posted, start_server

# The workload: a checkpoint every 5 steps (step-N.tmp renamed to
# step-N, the contract), a last one on SIGUSR1, then exit 0; resumed, it
# says from where and ends 3 steps later.
WORKLOAD = r'''
import os, signal, sys, time
ck = os.environ["KILN_CHECKPOINT_DIR"]
resume = os.environ.get("KILN_RESUME_FROM")
step = 0
last = 1 << 30
if resume:
    step = int(open(os.path.join(resume, "state")).read())
    last = step + 3
    print(f"resumed from {os.path.basename(resume)} at step {step}",
          flush=True)
stop = []
signal.signal(signal.SIGUSR1, lambda *a: stop.append(1))

def save(n):
    tmp = os.path.join(ck, f"step-{n:06d}.tmp")
    os.makedirs(tmp)
    with open(os.path.join(tmp, "state"), "w") as f:
        f.write(str(n))
    os.rename(tmp, os.path.join(ck, f"step-{n:06d}"))

while step < last:
    step += 1
    if stop:
        save(step)
        print(f"checkpointed step {step} on the signal", flush=True)
        sys.exit(0)
    if step % 5 == 0:
        save(step)
    time.sleep(0.05)
print(f"done at step {step}", flush=True)
'''

SECRET_ENV = {"AZURE_STORAGE_ACCOUNT": "kilntest",
              "AZURE_STORAGE_KEY": "c2VjcmV0LWtleS1mb3ItdGVzdHM="}


@pytest.fixture
def api():
    a = JobApi(NS)
    yield a
    a.close()


class Pod:
    """One pod of a posted Job, run here: its emptyDir is root/VOLUME,
    its termination message file root/termination-log."""

    def __init__(self, api, job, root):
        self.root = root
        spec = job["spec"]["template"]["spec"]
        (self.init,) = spec["initContainers"]
        (self.c,) = spec["containers"]
        self.mounts = {m["mountPath"]: root / m["name"]
                       for m in self.c["volumeMounts"]}
        # The initContainer fills kiln's emptyDir; the task also gets
        # /tmp, its root file system being read-only.
        assert {m["mountPath"]: root / m["name"]
                for m in self.init["volumeMounts"]} == {
                    "/kiln": self.mounts["/kiln"]}
        assert set(self.mounts) == {"/kiln", "/tmp"}
        assert [v["name"] for v in spec["volumes"]] == ["kiln", "tmp"]
        # Run here, the pod's /tmp is this machine's (the test's files).
        del self.mounts["/tmp"]
        self.end_log = root / "termination-log"
        self.secrets = api.secrets

    def local(self, path):
        if path == "/dev/termination-log":
            return str(self.end_log)
        for mount, d in self.mounts.items():
            if path == mount or path.startswith(mount + "/"):
                return str(d) + path[len(mount):]
        return path

    def start(self, **env_override):
        for d in self.mounts.values():
            d.mkdir(parents=True)
        # The initContainer: its image's kiln is this build.
        install = [KILN if a == "kiln" else self.local(a)
                   for a in self.init["command"]]
        subprocess.run(install, check=True, timeout=60)
        env = {"PATH": os.environ["PATH"]}
        for e in self.c["env"]:
            env[e["name"]] = self.local(e["value"])
        for ref in self.c.get("envFrom", []):
            name = ref["secretRef"]["name"]
            if name in self.secrets:
                env.update(self.secrets[name]["stringData"])
            else:
                assert ref["secretRef"]["optional"]
        env.update(env_override)
        self.env = env
        self.log = open(self.root / "container.log", "wb")
        self.proc = subprocess.Popen(
            [self.local(a) for a in self.c["command"]], env=env,
            cwd=self.root, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def wait(self):
        rc = self.proc.wait(timeout=120)
        self.log.close()
        return rc

    def output(self):
        return (self.root / "container.log").read_text()


def synced(store, jid):
    d = store / str(jid) / "checkpoints"
    if not d.exists():
        return []
    return sorted(p.name for p in d.iterdir()
                  if (p / "MANIFEST.json").exists())


def test_pod_checkpoints_and_resume(tmp_path, api):
    workload = tmp_path / "workload.py"
    workload.write_text(WORKLOAD)
    s = start_server(tmp_path, api.port, "--kube-shim-image",
                     "reg/kiln:0.1", env=dict(os.environ, **SECRET_ENV))
    store = s.home / "blobs"
    try:
        jid = s.submit(job_yaml(
            "spot", [sys.executable, str(workload)], preemptible=True,
            retries=0, checkpoint={"every": "1m", "grace": "20s",
                                   "signal": "SIGUSR1", "keep": 2}))
        first = f"kiln-{jid}-1"
        job = wait_for(lambda: posted(api, first), what="attempt 1's POST")
        # The Secret came first, with the server's store credentials;
        # the manifest only names it.
        (secret,) = api.sent("POST", "/secrets")
        assert api.requests.index(secret) < api.requests.index(
            api.sent("POST", "/jobs")[0])
        assert secret["body"] == {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "kiln-store-credentials", "namespace": NS,
                         "labels": {"app.kubernetes.io/managed-by":
                                    "kiln"}},
            "stringData": SECRET_ENV}
        assert SECRET_ENV["AZURE_STORAGE_KEY"] not in json.dumps(job)
        c = job["spec"]["template"]["spec"]["containers"][0]
        assert c["envFrom"] == [{"secretRef": {
            "name": "kiln-store-credentials", "optional": True}}]
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env["KILN_STORE"] == f"file://{store}"
        assert env["KILN_CHECKPOINT_KEEP"] == "2"
        assert env["KILN_CHECKPOINT_SIGNAL"] == "SIGUSR1"
        assert env["KILN_CHECKPOINT_GRACE_MS"] == "20000"
        assert job["spec"]["template"]["spec"]["initContainers"][0][
            "image"] == "reg/kiln:0.1"

        # Attempt 1's pod: checkpoints reach the store while it runs.
        pod = Pod(api, job, tmp_path / "pod1").start()
        wait_for(lambda: synced(store, jid) or pod.proc.poll() is not None,
                 what="a checkpoint synced from the pod")
        assert pod.proc.poll() is None, pod.output()
        # The preStop hook: the checkpoint signal to PID 1, the shim.
        pod.proc.send_signal(signal.SIGUSR1)
        assert pod.wait() == 0, pod.output()
        out = pod.output()
        assert "checkpointed step" in out, out
        last = max(p.name for p in
                   (pod.root / "kiln" / "checkpoints").iterdir())
        report = json.loads(pod.end_log.read_text())
        assert report["checkpoint"] == last, (report, out)
        assert f"kiln: checkpoint {last} synced" in out
        # Retention: the newest two.
        assert synced(store, jid)[-1] == last
        assert len(synced(store, jid)) <= 2
        assert "resumed" not in out and "restored" not in report

        # The API reports the eviction with the kubelet's copy of the
        # termination message; the attempt ends preempted, counted up
        # to that checkpoint, and attempt 2 is submitted.
        api.set_pod(first, 0, "pod-disrupted-ended.json", log=out,
                    message=pod.end_log.read_text())
        second = f"kiln-{jid}-2"
        job2 = wait_for(lambda: posted(api, second),
                        what="attempt 2's POST")
        (a1,) = [a for a in s.job(jid)["attempts_detail"]
                 if a["number"] == 1]
        assert a1["state"] == "preempted", a1
        assert a1["checkpoint"] == last
        assert a1["checkpoint_at_ms"] == report["checkpoint_at_ms"]
        ran = a1["ended_at_ms"] - a1["started_at_ms"]
        kept = min(max(report["checkpoint_at_ms"] - a1["started_at_ms"] -
                       a1["restore_ms"], 0), ran)
        assert a1["useful_task_ms"] == kept > 0
        assert a1["lost_task_ms"] == ran - kept
        # The Secret is written once per server start.
        assert len(api.sent("POST", "/secrets")) == 1

        # Attempt 2's pod, a fresh emptyDir: restored and resumed.
        pod2 = Pod(api, job2, tmp_path / "pod2").start()
        assert pod2.env["KILN_ATTEMPT"] == "2"
        assert pod2.wait() == 0, pod2.output()
        out2 = pod2.output()
        step = int(last.split("-")[1])
        assert f"kiln: resuming from checkpoint {last}" in out2, out2
        assert f"resumed from {last} at step {step}" in out2, out2
        assert f"done at step {step + 3}" in out2
        report2 = json.loads(pod2.end_log.read_text())
        assert report2["restored"] == last and report2["restore_ms"] >= 0
        api.set_pod(second, 0, "pod-succeeded.json", log=out2,
                    message=pod2.end_log.read_text())
        api.set_job(second, "job-complete.json")
        done = s.wait_state(jid, ("succeeded", "failed"))
        assert done["state"] == "succeeded", done
        assert "resumed from" in s.logs(jid, task=0, attempt=2)
    finally:
        s.stop()


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# Writes two outputs, one of them the input it was given.
OUTPUTS = ('cp "$KILN_INPUT_DIR/train.txt" "$KILN_OUTPUT_DIR/weights.bin" && '
           'mkdir "$KILN_OUTPUT_DIR/eval" && '
           'echo \'{"loss": 0.5}\' > "$KILN_OUTPUT_DIR/eval/metrics.json"')


def test_pod_fetches_inputs_and_uploads_outputs(tmp_path, api):
    s = start_server(tmp_path, api.port, "--kube-shim-image", "reg/kiln:0.1")
    store = s.home / "blobs"
    # Under the file:// store's directory, which pods mount: readable.
    data = store / "datasets" / "train.txt"
    data.parent.mkdir(parents=True)
    data.write_bytes(b"0 1 2 3\n")
    try:
        jid = s.submit(job_yaml("train", ["/bin/sh", "-c", OUTPUTS],
                                inputs=[f"file://{data}"]))
        name = f"kiln-{jid}-1"
        job = wait_for(lambda: posted(api, name), what="the POST")
        c = job["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env["KILN_INPUT_DIR"] == "/kiln/inputs"
        assert env["KILN_OUTPUT_DIR"] == "/kiln/outputs"
        assert env["KILN_OUTPUT_STORE"] == f"file://{store}"
        # Not a checkpointing job: nothing of that.
        assert "KILN_STORE" not in env
        assert c["envFrom"] == [{"secretRef": {
            "name": "kiln-store-credentials", "optional": True}}]
        assert json.loads(env["KILN_INPUTS"]) == [{
            "input": f"file://{data}", "name": "train.txt",
            "url": f"file://{data}", "store": f"file://{data.parent}",
            "blob": "train.txt"}]

        pod = Pod(api, job, tmp_path / "pod").start()
        assert pod.wait() == 0, pod.output()
        out = pod.output()
        assert "kiln: input train.txt fetched" in out, out
        assert "kiln: 2 outputs uploaded" in out, out
        report = json.loads(pod.end_log.read_text())
        assert report["inputs"] == [{"name": "train.txt",
                                     "sha256": sha256(data.read_bytes()),
                                     "size": 8}]
        manifest = store / str(jid) / "outputs" / "MANIFEST.json"
        assert report["outputs"] == {
            "files": 2, "bytes": 8 + 14,
            "manifest_sha256": sha256(manifest.read_bytes())}
        assert "reason" not in report

        api.set_pod(name, 0, "pod-succeeded.json", log=out,
                    message=pod.end_log.read_text())
        api.set_job(name, "job-complete.json")
        done = s.wait_state(jid, ("succeeded", "failed"))
        assert done["state"] == "succeeded", done
        shown = json.loads(s.cli("show", str(jid), "-o", "json",
                                 check=True).stdout)["job"]
        made = pod.root / "kiln" / "outputs"
        assert [(o["name"], o["sha256"], o["size"], o["url"])
                for o in shown["outputs"]] == [
            (p, sha256((made / p).read_bytes()), (made / p).stat().st_size,
             f"file://{store}/{jid}/outputs/{p}")
            for p in ("eval/metrics.json", "weights.bin")]
        assert shown["inputs"] == [{
            "input": f"file://{data}", "name": "train.txt",
            "url": f"file://{data}", "sha256": sha256(data.read_bytes()),
            "size": 8, "attempt": 1}]
    finally:
        s.stop()


def test_pod_upload_failure_and_changed_input(tmp_path, api):
    """A failed outputs' upload fails the attempt, with its reason; the
    inputs it fetched are recorded all the same, and the next attempt's
    pod gets their digests and refuses one that has changed since (not
    retried again)."""
    s = start_server(tmp_path, api.port)
    store = s.home / "blobs"
    data = store / "datasets" / "train.txt"
    data.parent.mkdir(parents=True)
    data.write_bytes(b"0 1 2 3\n")
    first_digest = sha256(data.read_bytes())
    try:
        jid = s.submit(job_yaml("train", ["/bin/sh", "-c", OUTPUTS],
                                inputs=[f"file://{data}"], retries=3,
                                backoff="1s"))
        first = f"kiln-{jid}-1"
        job = wait_for(lambda: posted(api, first), what="attempt 1's POST")
        # A store the pod cannot write to.
        pod = Pod(api, job, tmp_path / "pod1").start(
            KILN_OUTPUT_STORE="file:///proc/kiln-no-store")
        assert pod.wait() == 1, pod.output()
        report = json.loads(pod.end_log.read_text())
        assert report["reason"].startswith("outputs: upload failed: "), report
        assert report["inputs"][0]["sha256"] == first_digest
        assert "outputs" not in report
        api.set_pod(first, 0, "pod-failed.json", log=pod.output(),
                    message=pod.end_log.read_text())

        second = f"kiln-{jid}-2"
        job2 = wait_for(lambda: posted(api, second), what="attempt 2's POST")
        (a1,) = [a for a in s.job(jid)["attempts_detail"]
                 if a["number"] == 1]
        assert a1["state"] == "failed"
        assert "outputs: upload failed" in a1["reason"], a1
        assert s.job(jid)["inputs"][0]["sha256"] == first_digest
        env = {e["name"]: e["value"] for e in
               job2["spec"]["template"]["spec"]["containers"][0]["env"]}
        (given,) = json.loads(env["KILN_INPUTS"])
        assert (given["sha256"], given["size"], given["attempt"]) == \
            (first_digest, 8, 1)

        data.write_bytes(b"4 5 6 7\n")
        pod2 = Pod(api, job2, tmp_path / "pod2").start()
        assert pod2.wait() == 1, pod2.output()
        out2 = pod2.output()
        assert f"attempt 1 fetched it with sha256 {first_digest}" in out2
        report2 = json.loads(pod2.end_log.read_text())
        assert report2["reason"] == (
            f"input changed: train.txt is sha256:"
            f"{sha256(data.read_bytes())[:12]}, attempt 1 had "
            f"sha256:{first_digest[:12]}")
        assert "inputs" not in report2 and "outputs" not in report2
        api.set_pod(second, 0, "pod-failed.json", log=out2,
                    message=pod2.end_log.read_text())
        done = s.wait_state(jid, ("succeeded", "failed"))
        assert done["state"] == "failed"
        assert "input changed: train.txt" in done["reason"], done
        assert not posted(api, f"kiln-{jid}-3")
        # The first fetch's record stands.
        assert s.job(jid)["inputs"][0]["sha256"] == first_digest
    finally:
        s.stop()


def test_secret_exists_is_replaced(tmp_path, api):
    """Credentials rotate: a Secret already there is PUT over."""
    api.secrets["kiln-store-credentials"] = {"metadata": {
        "name": "kiln-store-credentials"}, "stringData": {"OLD": "x"}}
    s = start_server(tmp_path, api.port, env=dict(os.environ, **SECRET_ENV))
    try:
        (put,) = wait_for(lambda: api.sent("PUT", "/secrets/"
                                            "kiln-store-credentials"),
                          what="the PUT")
        assert put["body"]["stringData"] == SECRET_ENV
        assert api.secrets["kiln-store-credentials"]["stringData"] == \
            SECRET_ENV
    finally:
        s.stop()


def test_workflow_step_inputs_and_prerequisites_reach_the_pod(tmp_path, api):
    """A workflow under the kubernetes executor: the second step's pod gets
    the first step's output by store URL and digest (KILN_INPUTS) and its
    prerequisites (KILN_REQUIRES), and its shim checks and fetches them
    as a local task's would."""
    from test_workflows import get, run, steps, write_workflow
    s = start_server(tmp_path, api.port, "--kube-shim-image", "reg/kiln:0.1")
    store = s.home / "blobs"
    make = 'printf "0 1 2 3\\n" > "$KILN_OUTPUT_DIR/data.txt"'
    use = 'cmp "$KILN_INPUT_DIR/make/data.txt" - <<EOF\n0 1 2 3\nEOF'
    wf = write_workflow(tmp_path, (
        "kind: Workflow\nname: w\nsteps:\n"
        f"  - name: make\n    job: {{command: {json.dumps(['/bin/sh', '-c', make])}}}\n"
        "  - name: use\n    needs: [make]\n"
        "    inputs: [make.outputs/data.txt]\n"
        "    requires: {commands: [cmp]}\n"
        f"    job: {{command: {json.dumps(['/bin/sh', '-c', use])}}}\n"))
    try:
        rid = run(s, wf)

        def play(step, n):
            jid = wait_for(lambda: steps(get(s, rid))[step].get("job"),
                           what=f"step {step}'s job")
            name = f"kiln-{jid}-1"
            job = wait_for(lambda: posted(api, name), what="the POST")
            pod = Pod(api, job, tmp_path / f"pod{n}").start()
            assert pod.wait() == 0, pod.output()
            api.set_pod(name, 0, "pod-succeeded.json", log=pod.output(),
                        message=pod.end_log.read_text())
            api.set_job(name, "job-complete.json")
            return job, pod

        play("make", 1)
        job, pod = play("use", 2)
        env = {e["name"]: e["value"] for e in
               job["spec"]["template"]["spec"]["containers"][0]["env"]}
        data = b"0 1 2 3\n"
        (given,) = json.loads(env["KILN_INPUTS"])
        assert given["name"] == "make/data.txt"
        assert given["sha256"] == sha256(data) and given["size"] == len(data)
        assert given["url"].startswith(f"file://{store}/")
        assert json.loads(env["KILN_REQUIRES"])["commands"] == ["cmp"]
        out = pod.output()
        assert f"kiln: input make/data.txt fetched (sha256 {sha256(data)})" \
            in out, out
        w = wait_for(lambda: (lambda w: w if w["state"] != "running" else None)(
            get(s, rid)), what="the run to end")
        assert w["state"] == "succeeded", json.dumps(w["steps"])
    finally:
        s.stop()


def test_shim_stops_sending_ahead_while_the_store_fails(tmp_path):
    # The shim alone, as in a pod, with a store that cannot be written:
    # the first file sent ahead fails and the rest wait for the commit
    # (one message, not one per file); the commit's upload fails too.
    (tmp_path / "not-a-dir").write_text("")
    err = tmp_path / "shim.err"
    script = (
        'd="$KILN_CHECKPOINT_DIR/step-000001"; mkdir -p "$d.tmp"; '
        'echo a > "$d.tmp/a.bin"; n=0; '
        f'while ! grep -q "before its commit" {err}; do : >> "$d.tmp/a.bin"; '
        '  n=$((n+1)); [ $n -gt 1200 ] && exit 3; sleep 0.05; done; '
        'for f in b c d; do echo $f > "$d.tmp/$f.bin"; sleep 0.3; done; '
        'mv "$d.tmp" "$d"')
    env = dict(os.environ, KILN_TASK_DIR=str(tmp_path / "task"),
               KILN_CHECKPOINT_DIR=str(tmp_path / "ck"),
               KILN_STORE=f"file://{tmp_path}/not-a-dir/blobs",
               KILN_JOB_ID="5", KILN_ATTEMPT="1")
    for k in ("KILN_OUTPUT_DIR", "KILN_OUTPUT_STORE", "KILN_INPUTS",
              "KILN_TERMINATION_LOG", "RANK"):
        env.pop(k, None)
    with open(err, "w") as e:
        rc = subprocess.run([KILN, "shim", "--kube", "--", "/bin/sh", "-c",
                             script], env=env, stderr=e, timeout=120).returncode
    text = err.read_text()
    assert rc == 0, text
    assert text.count("before its commit") == 1, text
    assert "kiln: sending step-000001/a.bin before its commit" in text
    assert "kiln: checkpoint step-000001: sync failed" in text
