"""kiln on Kubernetes without a cluster: `kiln render` output checked field
by field, and `kiln kube-scheduler` against a local server that replays
Kubernetes API responses (tests/fixtures/kube, see its README.md), checks
each request kiln sends and records the bindings it posts."""
import base64
import json
import os
import signal
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from conftest import KILN, wait_for
from kube_replay import FIXTURES, ROOT, TOKEN
N0 = "aks-gpunc-12345678-vmss000000"
N2 = "aks-gpunc-12345678-vmss000002"


def render(*args, input=None):
    return subprocess.run([KILN, "render", *args], capture_output=True,
                          text=True, input=input, timeout=30)


def render_docs(spec, *extra):
    """Render spec (text) both ways; the YAML must load to the JSON."""
    y = render("-", "--executor", "kubernetes", "--image", "img:1", *extra,
               input=spec)
    assert y.returncode == 0, y.stderr
    j = render("-", "--executor", "kubernetes", "--image", "img:1", *extra,
               "-o", "json", input=spec)
    assert j.returncode == 0, j.stderr
    docs = json.loads(j.stdout)
    assert list(yaml.safe_load_all(y.stdout)) == docs
    return docs


def pod_spec(doc):
    return doc["spec"]["template"]["spec"]


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in container["env"]}


def test_render_gang_job():
    docs = render_docs(
        "kind: Job\nname: train_big\ncommand: [python, train.py]\n"
        "tasks: 4\nretries: 2\ntimeout: 90m\npreemptible: true\n"
        "resources: {gpus: 8, gpu_model: H100-80GB, cpus: 16, memory: 64Gi}\n"
        "checkpoint: {every: 10m, grace: 45s, signal: SIGUSR1}\n"
        "placement: {spread: zone, selector: {pool: train}}\n")
    job, svc = docs
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["metadata"]["name"] == "train-big"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimit"] == 2
    assert spec["activeDeadlineSeconds"] == 5400
    assert spec["template"]["metadata"]["annotations"] == {
        "kiln.dev/gang-size": "4"}
    pod = pod_spec(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == "train-big"
    assert pod["terminationGracePeriodSeconds"] == 45
    assert "schedulerName" not in pod
    assert pod["nodeSelector"] == {"pool": "train"}
    assert {"key": "sku", "operator": "Equal", "value": "gpu",
            "effect": "NoSchedule"} in pod["tolerations"]
    assert {"key": "kubernetes.azure.com/scalesetpriority",
            "operator": "Equal", "value": "spot",
            "effect": "NoSchedule"} in pod["tolerations"]
    term = pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert term == [{"key": "nvidia.com/gpu.product", "operator": "In",
                     "values": ["NVIDIA-H100-80GB-HBM3"]}]
    spread = pod["topologySpreadConstraints"][0]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["labelSelector"] == {
        "matchLabels": {"kiln.dev/job": "train-big"}}
    (c,) = pod["containers"]
    # The task runs under the shim: kiln from the initContainer, through
    # its own loader and libraries, so the task's image needs neither.
    assert c["image"] == "img:1" and c["command"] == [
        "/kiln/lib/ld.so", "--library-path", "/kiln/lib", "/kiln/bin/kiln",
        "shim", "--kube", "--", "python", "train.py"]
    # Never root, nothing to gain, no capabilities; under the shim the
    # root file system is read-only, with kiln's directories and /tmp.
    locked = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
              "allowPrivilegeEscalation": False,
              "readOnlyRootFilesystem": True,
              "capabilities": {"drop": ["ALL"]},
              "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["initContainers"] == [{
        "name": "kiln-shim", "image": "img:1",
        "command": ["kiln", "shim", "--install", "/kiln"],
        "volumeMounts": [{"name": "kiln", "mountPath": "/kiln"}],
        "securityContext": locked}]
    assert c["securityContext"] == locked
    assert pod["volumes"] == [{"name": "kiln", "emptyDir": {}},
                              {"name": "tmp", "emptyDir": {}}]
    assert c["volumeMounts"] == [{"name": "kiln", "mountPath": "/kiln"},
                                 {"name": "tmp", "mountPath": "/tmp"}]
    # Limits equal to requests: what the spec asked for, no more.
    assert c["resources"] == {
        "requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"},
        "limits": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}}
    assert c["lifecycle"]["preStop"]["exec"]["command"][2].startswith(
        "kill -s USR1 1;")
    env = env_of(c)
    assert env["WORLD_SIZE"] == "4"
    assert env["RANK"] == {"fieldRef": {"fieldPath": "metadata.annotations"
                                        "['batch.kubernetes.io/"
                                        "job-completion-index']"}}
    assert env["MASTER_ADDR"] == "train-big-0.train-big"
    assert env["MASTER_PORT"] == "29500"
    assert {k: env[k] for k in env if k.startswith("KILN_") and
            k not in ("KILN_JOB",)} == {
        "KILN_TASK_DIR": "/kiln/task",
        "KILN_CHECKPOINT_DIR": "/kiln/checkpoints",
        "KILN_INPUT_DIR": "/kiln/inputs",
        "KILN_OUTPUT_DIR": "/kiln/outputs",
        "KILN_TERMINATION_LOG": "/dev/termination-log",
        "KILN_CHECKPOINT_SIGNAL": "SIGUSR1",
        "KILN_CHECKPOINT_GRACE_MS": "45000"}
    # No store given: nothing to sync with, no Secret to read.
    assert "envFrom" not in c
    assert (svc["kind"], svc["spec"]["clusterIP"]) == ("Service", "None")
    # With a store and a kiln image: the store in env, its credentials
    # from the Secret kiln writes (optional: a store that needs none).
    job = render_docs(
        "kind: Job\nname: spot\ncommand: [python, train.py]\n"
        "preemptible: true\n", "--shim-image", "reg/kiln:0.1",
        "--store", "https://acct.blob.core.windows.net/ckpt")[0]
    pod = pod_spec(job)
    assert pod["initContainers"][0]["image"] == "reg/kiln:0.1"
    c = pod["containers"][0]
    env = env_of(c)
    assert env["KILN_STORE"] == "https://acct.blob.core.windows.net/ckpt"
    assert env["KILN_OUTPUT_STORE"] == env["KILN_STORE"]
    assert env["KILN_CHECKPOINT_KEEP"] == "3"
    # Kubernetes' own default grace without a checkpoint section.
    assert env["KILN_CHECKPOINT_GRACE_MS"] == "30000"
    assert env["KILN_CHECKPOINT_SIGNAL"] == "SIGTERM"
    assert c["envFrom"] == [{"secretRef": {
        "name": "kiln-store-credentials", "optional": True}}]
    # A job that neither is preemptible nor checkpoints syncs no
    # checkpoints; its outputs still go to the store.
    job = render_docs("kind: Job\nname: plain\ncommand: [x]\n",
                      "--store", "file:///data/ckpt")[0]
    env = env_of(pod_spec(job)["containers"][0])
    assert "KILN_STORE" not in env and "KILN_CHECKPOINT_KEEP" not in env
    assert env["KILN_OUTPUT_STORE"] == "file:///data/ckpt"
    assert svc["spec"]["selector"] == {"kiln.dev/job": "train-big"}


def test_render_job_array_as_an_indexed_job():
    (job,) = render_docs("kind: Job\nname: sweep\ncommand: [x]\n"
                         "retries: 2\narray: {count: 100, parallel: 10}\n")
    spec = {k: v for k, v in job["spec"].items() if k != "template"}
    assert spec == {"completionMode": "Indexed", "completions": 100,
                    "parallelism": 10, "backoffLimitPerIndex": 2}
    env = env_of(pod_spec(job)["containers"][0])
    index = {"fieldRef": {"fieldPath": "metadata.annotations["
                          "'batch.kubernetes.io/job-completion-index']"}}
    assert env["KILN_ARRAY_INDEX"] == index
    assert env["SLURM_ARRAY_TASK_ID"] == index
    assert (env["KILN_ARRAY_COUNT"], env["SLURM_ARRAY_TASK_MIN"],
            env["SLURM_ARRAY_TASK_MAX"]) == ("100", "0", "99")
    assert env["RANK"] == "0"
    # No limit: every element at once.
    (job,) = render_docs("kind: Job\nname: all\ncommand: [x]\n"
                         "array: 0-4\n")
    assert job["spec"]["parallelism"] == 5
    for spec, why in (("array: 1-4\n", "numbers its elements from 0"),
                      ("array: 0-4\ntasks: 2\n", "an array of gangs")):
        r = render("-", "--executor", "kubernetes", "--image", "i",
                   input="kind: Job\nname: x\ncommand: [x]\n" + spec)
        assert r.returncode == 1 and why in r.stderr, r.stderr


def test_render_share_mig_and_errors():
    (job,) = render_docs("kind: Job\nname: s\ncommand: [x]\n"
                         "resources: {gpus: 0.25, sharing: mps}\n")
    pod = pod_spec(job)
    assert pod["schedulerName"] == "kiln"
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        "kiln.dev/gpu-milli": "250", "kiln.dev/gpu-sharing": "mps"}
    c = pod["containers"][0]
    assert "limits" not in c["resources"]
    assert env_of(c)["NVIDIA_VISIBLE_DEVICES"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['kiln.dev/gpu']"}}
    assert "completionMode" not in job["spec"]
    (job,) = render_docs("kind: Job\nname: m\ncommand: [x]\n"
                         "resources: {gpus: 'mig:1g.10gb'}\n",
                         "--scheduler-name", "kiln", "-n", "ml")
    assert job["metadata"]["namespace"] == "ml"
    assert pod_spec(job)["schedulerName"] == "kiln"
    assert pod_spec(job)["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-1g.10gb": "1"}
    r = render("-", "--executor", "kubernetes", input="kind: Job\nname: x\n"
               "command: [x]\n")
    assert r.returncode == 1 and "--image" in r.stderr
    # A job's own image, unless --image overrides it.
    own = "kind: Job\nname: x\ncommand: [x]\nimage: reg/own:2\n"
    (job,) = json.loads(render("-", "--executor", "kubernetes", "-o", "json",
                               input=own).stdout)
    assert pod_spec(job)["containers"][0]["image"] == "reg/own:2"
    (job,) = json.loads(render("-", "--executor", "kubernetes", "-o", "json",
                               "--image", "reg/other:3", input=own).stdout)
    assert pod_spec(job)["containers"][0]["image"] == "reg/other:3"
    r = render("-", "--executor", "kubernetes", "--image", "i",
               input="kind: Job\nname: x\ncommand: [x]\n"
               "resources: {gpus: 1, gpu_model: MI300X}\n")
    assert r.returncode == 1
    assert "no nvidia.com/gpu.product label is known for MI300X" in r.stderr
    r = render("-", "--executor", "slurm", "--image", "i", input="")
    assert r.returncode == 2 and "only kubernetes" in r.stderr


def test_render_deployment_and_examples():
    docs = render_docs(
        "kind: Deployment\nname: chat\nmodel: /models/llama\n"
        "command: [serve]\nreplicas: 3\nresources: {gpus: 1}\n"
        "readiness: {path: /ready, period_s: 2, failure_threshold: 4}\n"
        "liveness: {path: /health}\n")
    dep, svc = docs
    assert (dep["apiVersion"], dep["kind"]) == ("apps/v1", "Deployment")
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["selector"]["matchLabels"] == {
        "kiln.dev/deployment": "chat"}
    assert dep["spec"]["template"]["metadata"]["labels"][
        "kiln.dev/deployment"] == "chat"
    c = pod_spec(dep)["containers"][0]
    assert env_of(c)["KILN_PORT"] == "8000"
    assert env_of(c)["KILN_MODEL"] == "/models/llama"
    assert c["ports"] == [{"name": "http", "containerPort": 8000}]
    assert c["readinessProbe"] == {
        "httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 2,
        "failureThreshold": 4, "initialDelaySeconds": 0}
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80,
                                     "targetPort": "http"}]
    for example in ["hello/job.yaml", "retry/job.yaml",
                    "train/tiny-gpt.yaml"]:
        docs = render_docs((ROOT / "examples" / example).read_text())
        assert docs[0]["kind"] == "Job"
        for d in docs:
            assert d["metadata"]["labels"][
                "app.kubernetes.io/managed-by"] == "kiln"


class ApiServer:
    """Replays recorded list and watch responses in a fixed script and
    records every request. A watch event with "after_binding" is held back
    until kiln has posted that pod's binding (the real API server reports
    a pod bound only after it was). The last watch stays open until
    close()."""

    def __init__(self, tls=None, client_ca=None):
        self.client_ca = client_ca
        self.requests = []
        self.bindings = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.closing = threading.Event()
        self.pod_lists = [FIXTURES / "pods.json",
                          FIXTURES / "pods-relist.json",
                          FIXTURES / "pods-relist-2.json"]
        # A file streams its events; a number is the HTTP status the
        # watch request gets instead.
        self.watches = [FIXTURES / "watch-1.jsonl",
                        FIXTURES / "watch-2.jsonl", 410]
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def record(self, body=None):
                url = urlsplit(self.path)
                entry = {"method": self.command, "path": url.path,
                         "query": parse_qs(url.query),
                         "auth": self.headers.get("Authorization"),
                         "body": body}
                with api.lock:
                    api.requests.append(entry)
                    api.changed.notify_all()
                return entry

            def authorized(self, req):
                # With client certificates the TLS handshake has checked
                # the certificate already; otherwise the bearer token.
                if api.client_ca:
                    return bool(self.connection.getpeercert())
                return req["auth"] == f"Bearer {TOKEN}"

            def do_GET(self):
                req = self.record()
                if not self.authorized(req):
                    return self.reply(401, {"kind": "Status", "code": 401})
                if req["path"] == "/api/v1/nodes":
                    return self.reply(200, json.loads(
                        (FIXTURES / "nodes.json").read_text()))
                if req["path"] != "/api/v1/pods":
                    return self.reply(404, {"kind": "Status", "code": 404})
                if "watch" not in req["query"]:
                    with api.lock:
                        src = api.pod_lists[0]
                        if len(api.pod_lists) > 1:
                            api.pod_lists.pop(0)
                    return self.reply(200, json.loads(src.read_text()))
                self.stream_watch()

            def stream_watch(self):
                with api.lock:
                    src = api.watches.pop(0) if api.watches else None
                if isinstance(src, int):
                    return self.reply(src, {
                        "kind": "Status", "apiVersion": "v1",
                        "metadata": {}, "status": "Failure",
                        "message": "too old resource version",
                        "reason": "Gone", "code": src})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                lines = src.read_text().splitlines() if src else []
                for line in lines:
                    event = json.loads(line)
                    wanted = event.pop("after_binding", None)
                    if wanted:
                        with api.lock:
                            ok = api.changed.wait_for(
                                lambda: wanted in api.bound_names(), 20)
                        if not ok:
                            return
                    self.chunk(json.dumps(event).encode() + b"\n")
                if src is None:
                    # The last watch: open until the test ends.
                    api.closing.wait(60)
                self.chunk(b"")

            def chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                req = self.record(body)
                if not self.authorized(req):
                    return self.reply(401, {"kind": "Status", "code": 401})
                with api.lock:
                    api.bindings.append((req["path"], body))
                    api.changed.notify_all()
                self.reply(201, json.loads(
                    (FIXTURES / "binding-created.json").read_text()))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            if client_ca:
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.load_verify_locations(client_ca)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket,
                                                server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def bound_names(self):
        return {"/".join(p.split("/")[4:7:2]) for p, _ in self.bindings}

    def close(self):
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def start_scheduler(*args, env=None):
    return subprocess.Popen([KILN, "kube-scheduler", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def binding(ns, name, node, gpu=None):
    meta = {"name": name, "namespace": ns}
    if gpu is not None:
        meta["annotations"] = {"kiln.dev/gpu": str(gpu)}
    return (f"/api/v1/namespaces/{ns}/pods/{name}/binding",
            {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
             "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


def test_scheduler_replay(tmp_path):
    api = ApiServer()
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
current-context: test
clusters:
- name: replay
  cluster:
    server: http://127.0.0.1:{api.port}
contexts:
- name: test
  context: {{cluster: replay, user: sched, namespace: ml}}
users:
- name: sched
  user:
    token: {TOKEN}
""")
    proc = start_scheduler("--kubeconfig", str(kubeconfig),
                           "--watch-timeout", "30")
    try:
        # The fourth watch follows the relist that HTTP 410 forced.
        wait_for(lambda: sum(r["query"].get("watch") == ["1"]
                             for r in api.requests) >= 4,
                 what="four watches")
    finally:
        err = stop(proc)
        api.close()
    assert all(r["auth"] == f"Bearer {TOKEN}" for r in api.requests)
    seq = [(r["method"], r["path"],
            r["query"].get("resourceVersion", [None])[0])
           for r in api.requests]
    watch = "/api/v1/pods"
    expected = [
        ("GET", "/api/v1/nodes", None), ("GET", watch, None),
        # train-d-0 (2 GPUs): only vmss000002 has two idle GPUs; cpu-e-0
        # tolerates no GPU taint and waits; other-f-0 is not ours.
        ("POST", "/api/v1/namespaces/ml/pods/train-d-0/binding", None),
        ("GET", watch, "48200"),
        # infer-g-0 (a half share) fills the half-used GPU 0 of vmss000000.
        ("POST", "/api/v1/namespaces/ml/pods/infer-g-0/binding", None),
        # The watch ended after a bookmark: nodes again, then resume there.
        ("GET", "/api/v1/nodes", None), ("GET", watch, "48350"),
        # 410 Expired: a full relist, then a watch from the new list.
        ("GET", "/api/v1/nodes", None), ("GET", watch, None),
        ("POST", "/api/v1/namespaces/ml/pods/infer-h-0/binding", None),
        # HTTP 410 Gone on the watch itself: a relist again, nothing new
        # to bind, a watch from that list.
        ("GET", watch, "48720"),
        ("GET", "/api/v1/nodes", None), ("GET", watch, None),
        ("GET", watch, "48900"),
    ]
    assert seq == expected, seq
    for r in api.requests:
        if r["query"].get("watch"):
            assert r["query"]["allowWatchBookmarks"] == ["true"]
            assert r["query"]["timeoutSeconds"] == ["30"]
    assert api.bindings == [
        binding("ml", "train-d-0", N2),
        binding("ml", "infer-g-0", N0, gpu=0),
        # GPU 0 of vmss000000 is full now; vmss000000 and vmss000001 each
        # have one idle GPU and hold work, a tie the node order breaks.
        binding("ml", "infer-h-0", N0, gpu=1),
    ]
    assert "ml/cpu-e-0: no node has room" in err
    assert "by taints" in err


def make_cert(tmp_path, name):
    """A self-signed certificate for 127.0.0.1: (key, cert) paths."""
    key, cert = tmp_path / f"{name}-key.pem", tmp_path / f"{name}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return key, cert


def test_scheduler_in_cluster_tls(tmp_path):
    """Service-account credentials over TLS: the CA and the token come from
    the account's directory; the token file is read per request."""
    key, cert = make_cert(tmp_path, "server")
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(TOKEN + "\n")
    (sa / "ca.crt").write_bytes(cert.read_bytes())
    api = ApiServer(tls=(str(cert), str(key)))
    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1",
               KUBERNETES_SERVICE_PORT=str(api.port))
    env.pop("KUBECONFIG", None)
    proc = start_scheduler("--service-account-dir", str(sa), env=env)
    try:
        wait_for(lambda: len(api.bindings) >= 1, what="a binding over TLS")
    finally:
        stop(proc)
        api.close()
    assert api.bindings[0] == binding("ml", "train-d-0", N2)


def test_scheduler_client_certificate(tmp_path):
    """A kubeconfig with embedded CA and client certificate data (base64 of
    PEM, as kubeadm and az aks get-credentials write them), no token: the
    server admits only the client certificate it trusts."""
    key, cert = make_cert(tmp_path, "server")
    ckey, ccert = make_cert(tmp_path, "client")
    api = ApiServer(tls=(str(cert), str(key)), client_ca=str(ccert))
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(f"""current-context: c
clusters:
- name: aks
  cluster:
    server: https://127.0.0.1:{api.port}
    certificate-authority-data: {b64(cert)}
contexts: [{{name: c, context: {{cluster: aks, user: admin}}}}]
users:
- name: admin
  user:
    client-certificate-data: {b64(ccert)}
    client-key-data: {b64(ckey)}
""")
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    proc = start_scheduler("--kubeconfig", str(kubeconfig), env=env)
    try:
        wait_for(lambda: len(api.bindings) >= 1,
                 what="a binding with a client certificate")
    finally:
        stop(proc)
        api.close()
    assert api.bindings[0] == binding("ml", "train-d-0", N2)
    assert all(r["auth"] is None for r in api.requests)


def test_scheduler_errors(tmp_path):
    env = dict(os.environ)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("KUBECONFIG", None)
    r = subprocess.run([KILN, "kube-scheduler"], capture_output=True,
                       text=True, env=env, timeout=30)
    assert r.returncode == 1 and "KUBERNETES_SERVICE_HOST" in r.stderr
    bad = tmp_path / "config"
    bad.write_text("current-context: x\ncontexts: []\n")
    r = subprocess.run([KILN, "kube-scheduler", "--kubeconfig", str(bad)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and 'no context named "x"' in r.stderr
    r = subprocess.run([KILN, "kube-scheduler", "--kubeconfig", str(bad),
                        "--policy", "nope"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--policy" in r.stderr


def test_render_locks_pods_down_and_holds_no_secret(monkeypatch):
    """Every rendered container runs as a fixed non-root uid without
    privileges; the server's store key never appears as a literal (the
    pod shim gets it from the Secret kiln writes)."""
    monkeypatch.setenv("AZURE_STORAGE_KEY", "c2VydmVyLXNlY3JldC1rZXk=")
    monkeypatch.setenv("KILN_TOKEN", "kiln_server_token_not_for_pods")
    job = "kind: Job\nname: j\ncommand: [x]\npreemptible: true\n"
    text = render("-", "--executor", "kubernetes", "--image", "img:1",
                  "--shim-image", "reg/kiln:0.1", "--store",
                  "https://acct.blob.core.windows.net/ckpt", "-o", "json",
                  input=job).stdout
    assert "c2VydmVyLXNlY3JldC1rZXk=" not in text
    assert "kiln_server_token_not_for_pods" not in text
    pod = pod_spec(json.loads(text)[0])
    assert pod["automountServiceAccountToken"] is False
    for c in pod["containers"] + pod["initContainers"]:
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["containers"][0]["securityContext"][
        "readOnlyRootFilesystem"] is True
    # A deployment's server writes where its image says: root stays
    # writable, the rest is as locked down.
    dep = render_docs("kind: Deployment\nname: chat\nmodel: /models/llama\n"
                      "command: [serve]\n")
    assert pod_spec(dep[0])["automountServiceAccountToken"] is False
    sc = pod_spec(dep[0])["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is False
    assert sc["runAsNonRoot"] is True and sc["capabilities"] == {
        "drop": ["ALL"]}
