"""Shared by the Kubernetes tests: the fixtures, the bearer token the
replay servers accept, a kubeconfig for them, and JobApi, a local server
that answers kiln's Job, Service, Pod and log requests with the recorded
objects of tests/fixtures/kube/executor (see the README there) and
records every request, so tests check exactly what kiln sent.

JobApi keeps the objects a real API server would hold: a POSTed Job is
stored and gets one pod per index (pod-running.json, renamed for it);
the test then swaps in other recorded pods and Jobs (set_pod, set_job) to
play what the kubelet and the Job controller would do. An Indexed Job
gets pods for its first `parallelism` indexes; the test starts the
others with set_pod, as the controller would once slots free. A DELETE
removes the Job and its pods, as the garbage collector does once the
pods have terminated; a pod's DELETE leaves it as pod-deleted.json (the
kubelet's SIGTERM ended it; it still holds the Job's finalizer), which
the Job controller counts as its index's failure.

It also keeps apps/v1 Deployments the way the API server does for what
kiln sends: a POST stores the object (metadata.generation 1, a
resourceVersion); a PUT must carry the current resourceVersion (409
Conflict otherwise) and replaces it; a merge PATCH (RFC 7386) merges into
it; either bumps generation when the spec changed. The test plays the
Deployment controller and kubelet with set_deployment (a recorded
status) and set_deployment_pods (recorded pods). A node is read from
tests/fixtures/kube/nodes.json. List GETs honour
labelSelector's `key=value` and `key` terms, as the API server does.

Secrets: a POST stores one (409 when it exists), a PUT replaces it;
stringData is kept as sent (the kubelet would hand its values to a pod's
envFrom).

A GET asking to upgrade to a WebSocket (pods/exec, pods/attach,
pods/portforward) is served by kube_ws_replay.py after the same token
check."""
import copy
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import kube_ws_replay

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "kube"
TOKEN = "kiln-test-token-3f9a"
INDEX = "batch.kubernetes.io/job-completion-index"


def write_kubeconfig(path, port, token=TOKEN, namespace="ml"):
    path.write_text(f"""apiVersion: v1
kind: Config
current-context: test
clusters:
- name: replay
  cluster:
    server: http://127.0.0.1:{port}
contexts:
- name: test
  context: {{cluster: replay, user: kiln, namespace: {namespace}}}
users:
- name: kiln
  user:
    token: {token}
""")
    return path


def recorded(name):
    return json.loads((FIXTURES / "executor" / name).read_text())


class JobApi:
    def __init__(self, namespace="ml", tls=None):
        """tls: (certificate, key) files to serve HTTPS with."""
        self.ns = namespace
        self.requests = []
        self.jobs = {}      # name -> Job
        self.pods = {}      # name -> {index: Pod}
        self.logs = {}      # pod name -> text
        self.fail = {}      # (method, kind) -> HTTP status to answer
        self.deployments = {}  # name -> Deployment
        self.services = {}     # name -> Service
        self.secrets = {}      # name -> Secret
        self.dpods = {}        # Deployment name -> [Pod]
        self.version = 51000   # resourceVersion counter
        # A Condition, so that a test can wait for kiln's POST of a Job:
        # kiln counts a task running once it sends the Job, not once the
        # API server has answered.
        self.lock = threading.Condition()
        kube_ws_replay.setup(self)
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status, body, text=False):
                data = body.encode() if text else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if text
                                 else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def handle_any(self):
                if kube_ws_replay.is_upgrade(self):
                    return self.handle_upgrade()
                length = int(self.headers.get("Content-Length", 0) or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                url = urlsplit(self.path)
                req = {"method": self.command, "path": url.path,
                       "query": parse_qs(url.query),
                       "auth": self.headers.get("Authorization"),
                       "content_type": self.headers.get("Content-Type"),
                       "body": body}
                with api.lock:
                    api.requests.append(req)
                    if req["auth"] != f"Bearer {TOKEN}":
                        return self.reply(401, recorded("status-401.json"))
                    status, answer, text = api.answer(req)
                self.reply(status, answer, text)

            def handle_upgrade(self):
                url = urlsplit(self.path)
                req = {"method": self.command, "path": url.path,
                       "query": parse_qs(url.query),
                       "auth": self.headers.get("Authorization"),
                       "protocols": self.headers.get(
                           "Sec-WebSocket-Protocol"),
                       "content_type": None, "body": None}
                with api.lock:
                    api.requests.append(req)
                self.close_connection = True
                if req["auth"] != f"Bearer {TOKEN}":
                    return self.reply(401, recorded("status-401.json"))
                if api.ws_refuse:  # (status, fixture): RBAC's answer
                    return self.reply(api.ws_refuse[0],
                                      recorded(api.ws_refuse[1]))
                kube_ws_replay.serve(api, self, req)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket,
                                                server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        kube_ws_replay.stop(self)
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    # ---- what the API server holds ----

    def answer(self, req):
        m, path = req["method"], req["path"]
        jobs = f"/apis/batch/v1/namespaces/{self.ns}/jobs"
        pods = f"/api/v1/namespaces/{self.ns}/pods"
        services = f"/api/v1/namespaces/{self.ns}/services"
        deployments = f"/apis/apps/v1/namespaces/{self.ns}/deployments"
        secrets = f"/api/v1/namespaces/{self.ns}/secrets"
        kind = ("jobs" if path.startswith(jobs) else
                "deployments" if path.startswith(deployments) else
                "nodes" if path.startswith("/api/v1/nodes/") else
                "log" if path.endswith("/log") else
                "pods" if path.startswith(pods) else
                "services" if path.startswith(services) else
                "secrets" if path.startswith(secrets) else None)
        if (m, kind) in self.fail:
            # An HTTP status (its status-N.json), or (status, fixture).
            code = self.fail[(m, kind)]
            if isinstance(code, tuple):
                return code[0], recorded(code[1]), False
            return code, recorded(f"status-{code}.json"), False
        selector = req["query"].get("labelSelector", [""])[0]
        if kind == "deployments":
            return self.deployment_call(req, path[len(deployments):])
        if m == "GET" and kind == "nodes":
            name = path.rsplit("/", 1)[1]
            nodes = json.loads((FIXTURES / "nodes.json").read_text())
            for node in nodes["items"]:
                if node["metadata"]["name"] == name:
                    return 200, node, False
            return 404, recorded("status-404.json"), False
        if m == "POST" and path == jobs:
            return self.create_job(req["body"])
        if m == "POST" and path == secrets:
            name = req["body"]["metadata"]["name"]
            if name in self.secrets:
                return 409, recorded("status-409.json"), False
            self.secrets[name] = copy.deepcopy(req["body"])
            return 201, self.secrets[name], False
        if m == "PUT" and path.startswith(secrets + "/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.secrets:
                return 404, recorded("status-404.json"), False
            self.secrets[name] = copy.deepcopy(req["body"])
            return 200, self.secrets[name], False
        if m == "POST" and path == services:
            name = req["body"]["metadata"]["name"]
            if name in self.services or any(
                    r["method"] == "POST" and r["path"] == services and
                    r["body"]["metadata"]["name"] == name
                    for r in self.requests[:-1]):
                return 409, recorded("status-409.json"), False
            svc = copy.deepcopy(req["body"])
            svc["metadata"]["uid"] = "7a3c1e52-9d4b-4f60-b1a2-3c4d5e6f7a8b"
            svc["spec"]["clusterIP"] = "10.0.143.27"
            self.services[name] = svc
            return 201, svc, False
        if m == "GET" and path.startswith(services + "/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.services:
                return 404, recorded("status-404.json"), False
            return 200, self.services[name], False
        if m == "DELETE" and path.startswith(services + "/"):
            name = path.rsplit("/", 1)[1]
            if self.services.pop(name, None) is None:
                return 404, recorded("status-404.json"), False
            return 200, recorded("status-success.json"), False
        if m == "GET" and path == jobs:
            return 200, {"kind": "JobList", "apiVersion": "batch/v1",
                         "metadata": {"resourceVersion": "48300"},
                         "items": selected(self.jobs.values(),
                                           selector)}, False
        if m == "GET" and path == pods:
            items = [p for by in self.pods.values() for p in by.values()]
            items += [p for by in self.dpods.values() for p in by]
            return 200, {"kind": "PodList", "apiVersion": "v1",
                         "metadata": {"resourceVersion": "48300"},
                         "items": selected(items, selector)}, False
        if m == "DELETE" and kind == "pods":
            name = path.rsplit("/", 1)[1]
            for job, by in self.pods.items():
                for index, pod in by.items():
                    if pod["metadata"]["name"] == name:
                        by[index] = self.pod(job, index, "pod-deleted.json")
                        return 200, by[index], False
            return 404, recorded("status-404.json"), False
        if m == "GET" and kind == "log":
            name = path.split("/")[-2]
            if name not in self.logs:
                return 404, recorded("status-404.json"), False
            return 200, self.logs[name], True
        if path.startswith(jobs + "/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.jobs:
                return 404, recorded("status-404.json"), False
            job = self.jobs[name]
            if m == "DELETE":
                deleted = copy.deepcopy(job)
                deleted["metadata"]["deletionTimestamp"] = \
                    "2026-12-03T04:02:00Z"
                deleted["metadata"]["finalizers"] = ["foregroundDeletion"]
                del self.jobs[name]
                self.pods.pop(name, None)
                return 200, deleted, False
            return 200, job, False
        return 404, recorded("status-404.json"), False

    def deployment_call(self, req, rest):
        m, body = req["method"], req["body"]
        if rest == "" and m == "GET":
            return 200, {"kind": "DeploymentList", "apiVersion": "apps/v1",
                         "metadata": {"resourceVersion": str(self.version)},
                         "items": selected(self.deployments.values(),
                                           req["query"].get(
                                               "labelSelector", [""])[0])
                         }, False
        if rest == "" and m == "POST":
            name = body["metadata"]["name"]
            if name in self.deployments:
                return 409, recorded("status-409.json"), False
            d = copy.deepcopy(body)
            self.version += 1
            d["metadata"].update({
                "uid": "3b0c5d2e-8f41-4a6b-9c7d-1e2f3a4b5c6d",
                "resourceVersion": str(self.version), "generation": 1,
                "creationTimestamp": "2026-12-03T04:10:00Z"})
            d["status"] = {}
            self.deployments[name] = d
            return 201, d, False
        name = rest.lstrip("/")
        if name not in self.deployments:
            return 404, recorded("status-404.json"), False
        d = self.deployments[name]
        if m == "GET":
            return 200, d, False
        if m == "DELETE":
            del self.deployments[name]
            self.dpods.pop(name, None)
            return 200, recorded("status-success.json"), False
        if m == "PUT":
            if body["metadata"].get("resourceVersion") != \
                    d["metadata"]["resourceVersion"]:
                return 409, recorded("status-409-conflict.json"), False
            new = copy.deepcopy(body)
            new["metadata"].update({k: d["metadata"][k] for k in (
                "uid", "generation", "creationTimestamp")})
            new["status"] = d["status"]
        elif m == "PATCH":
            if req["content_type"] != "application/merge-patch+json":
                return 415, recorded("status-415.json"), False
            new = merge_patch(copy.deepcopy(d), body)
        else:
            return 405, recorded("status-404.json"), False
        if new["spec"] != d["spec"]:
            new["metadata"]["generation"] = d["metadata"]["generation"] + 1
        self.version += 1
        new["metadata"]["resourceVersion"] = str(self.version)
        self.deployments[name] = new
        return 200, new, False

    def set_deployment(self, name, fixture):
        """Play the Deployment controller: the recorded status."""
        with self.lock:
            d = self.deployments[name]
            d["status"] = recorded(fixture)["status"]
            d["status"]["observedGeneration"] = d["metadata"]["generation"]

    def set_deployment_pods(self, name, fixtures):
        """Play the ReplicaSet controller and kubelets: recorded pods,
        renamed and labelled from the Deployment's template."""
        with self.lock:
            labels = self.deployments[name]["spec"]["template"][
                "metadata"]["labels"]
            pods = []
            for i, fixture in enumerate(fixtures):
                pod = recorded(fixture)
                pod["metadata"]["name"] = f"{name}-7d4b9c6f5d-{i}x7k2"
                pod["metadata"]["labels"] = dict(
                    labels, **{"pod-template-hash": "7d4b9c6f5d"})
                pods.append(pod)
            self.dpods[name] = pods

    def create_job(self, body):
        name = body["metadata"]["name"]
        if name in self.jobs:
            return 409, recorded("status-409.json"), False
        job = recorded("job-active.json")
        job["metadata"]["name"] = name
        job["metadata"]["labels"] = body["metadata"]["labels"]
        job["metadata"]["uid"] = f"uid-{name}"
        job["spec"] = copy.deepcopy(body["spec"])
        job["status"]["active"] = body["spec"]["parallelism"]
        self.jobs[name] = job
        self.pods[name] = {}
        for index in range(min(body["spec"]["completions"],
                               body["spec"]["parallelism"])):
            self.pods[name][index] = self.pod(name, index, "pod-running.json")
        self.lock.notify_all()
        return 201, job, False

    def pod(self, job, index, fixture):
        """A recorded pod as pod index of Job job."""
        pod = recorded(fixture)
        meta = pod["metadata"]
        meta["name"] = f"{job}-{index}-x7k2p"
        meta.setdefault("annotations", {})
        template = self.jobs[job]["spec"]["template"]["metadata"]
        meta["labels"] = dict(template["labels"], **{
            "batch.kubernetes.io/job-name": job, "job-name": job})
        if self.jobs[job]["spec"].get("completionMode") == "Indexed":
            meta["labels"][INDEX] = str(index)
            meta["annotations"][INDEX] = str(index)
        else:
            meta["annotations"].pop(INDEX, None)
        meta["ownerReferences"][0]["name"] = job
        return pod

    def set_pod(self, job, index, fixture, log=None, message=None):
        """message: the task container's termination message, as the
        kubelet copies it from its terminationMessagePath."""
        with self.lock:
            if not self.lock.wait_for(lambda: job in self.jobs, timeout=60):
                raise AssertionError(f"kiln never posted the Job {job}")
            self.pods[job][index] = self.pod(job, index, fixture)
            if message is not None:
                (c,) = self.pods[job][index]["status"]["containerStatuses"]
                c["state"]["terminated"]["message"] = message
            if log is not None:
                self.logs[f"{job}-{index}-x7k2p"] = log

    def set_job(self, job, fixture):
        with self.lock:
            done = recorded(fixture)
            done["metadata"] = self.jobs[job]["metadata"]
            done["spec"] = self.jobs[job]["spec"]
            self.jobs[job] = done

    def sent(self, method, path_end=""):
        with self.lock:
            return [r for r in self.requests if r["method"] == method
                    and r["path"].endswith(path_end)]


def selected(items, selector):
    """The items a labelSelector of `key=value` and `key` terms picks."""
    out = []
    for item in items:
        labels = item["metadata"].get("labels", {})
        ok = True
        for term in filter(None, selector.split(",")):
            key, _, value = term.partition("=")
            if key not in labels or ("=" in term and labels[key] != value):
                ok = False
        if ok:
            out.append(item)
    return out


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch, as the API server applies
    application/merge-patch+json."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target
