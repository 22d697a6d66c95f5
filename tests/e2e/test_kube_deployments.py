"""Deployments under `kiln server --executor kubernetes` against JobApi
(kube_replay.py) answering with the recorded objects of
tests/fixtures/kube/executor: the exact Deployment and Service kiln POSTs,
status through a rollout (1/2 ready, then 2/2), the scale PATCH and its
Content-Type, an update's PUT, the gateway's configuration, delete, a
restart that finds the Deployment again by label, API errors, and
`kiln rollout restart` as the restartedAt PATCH kubectl sends."""
import re

import pytest

from conftest import wait_for
from kube_replay import JobApi
from test_kube_executor import NS, start_server

DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
SERVICE_DNS = f"chat.{NS}.svc.cluster.local:80"


@pytest.fixture
def api():
    a = JobApi(NS)
    yield a
    a.close()


def chat_yaml(replicas=2, env="v1"):
    return ("kind: Deployment\nname: chat\nmodel: /models/chat\n"
            "command: [python, serve.py]\n"
            f"env: {{VERSION: {env}}}\nreplicas: {replicas}\n"
            "resources: {gpus: 1, gpu_model: H100-80GB}\n"
            "placement:\n  selector: {agentpool: gpunc}\n"
            "  tolerations: [{key: dedicated, value: inference, "
            "effect: NoSchedule}]\n"
            "spread: zone\n"
            "readiness: {path: /health, period_s: 5}\n")


def deploy(s, text, status=(200, 201)):
    r = s.request("POST", "/v1/deployments", data=text,
                  params={"file": "chat.yaml"})
    assert r.status_code in status, r.text
    return r.json()


def show(s, name="chat"):
    r = s.request("GET", f"/v1/deployments/{name}")
    assert r.status_code == 200, r.text
    return r.json()["deployment"]


def writes(api):
    """The requests that change something: what kiln sent, in order."""
    with api.lock:
        return [r for r in api.requests if r["method"] != "GET"]


def test_lifecycle(tmp_path, api):
    s = start_server(tmp_path, api.port)
    try:
        created = deploy(s, chat_yaml())["deployment"]
        assert created["generation"] == 1
        post = wait_for(lambda: api.sent("POST", "/deployments"),
                        what="the Deployment's POST")[0]
        assert post["path"] == DEPLOYMENTS
        assert post["content_type"] == "application/json"
        d = post["body"]
        assert d["apiVersion"] == "apps/v1" and d["kind"] == "Deployment"
        assert d["metadata"] == {
            "name": "chat", "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "kiln",
                       "kiln.dev/deployment": "chat",
                       "kiln.dev/generation": "1"},
            "annotations": {"kiln.dev/name": "chat"}}
        assert d["spec"]["replicas"] == 2
        assert d["spec"]["selector"] == {
            "matchLabels": {"kiln.dev/deployment": "chat"}}
        assert d["spec"]["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
        tmpl = d["spec"]["template"]
        # The generation label is not on the template: a scale must not
        # roll the pods.
        assert tmpl["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "kiln",
            "kiln.dev/deployment": "chat"}
        pod = tmpl["spec"]
        # No service-account token for the server to call the API with.
        assert pod["automountServiceAccountToken"] is False
        assert pod["terminationGracePeriodSeconds"] == 30
        assert pod["nodeSelector"] == {"agentpool": "gpunc"}
        assert pod["tolerations"] == [
            {"key": "sku", "operator": "Equal", "value": "gpu",
             "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "inference",
             "effect": "NoSchedule"}]
        assert pod["topologySpreadConstraints"] == [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"kiln.dev/deployment":
                                              "chat"}}}]
        terms = pod["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["key"] == \
            "nvidia.com/gpu.product"
        (c,) = pod["containers"]
        assert c["image"] == "ghcr.io/me/train:1.4"
        assert c["command"] == ["python", "serve.py"]
        assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        assert c["lifecycle"] == {"preStop": {"exec": {
            "command": ["/bin/sh", "-c", "sleep 5"]}}}
        assert c["ports"] == [{"name": "http", "containerPort": 8000}]
        assert c["readinessProbe"]["httpGet"] == {"path": "/health",
                                                  "port": "http"}
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env["KILN_PORT"] == "8000" and env["VERSION"] == "v1"
        assert env["KILN_MODEL"] == "/models/chat"
        svc = wait_for(lambda: api.sent("POST", "/services"),
                       what="the Service's POST")[0]["body"]
        assert svc["metadata"]["name"] == "chat"
        assert svc["spec"] == {
            "selector": {"kiln.dev/deployment": "chat"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}

        # The controller has made the pods: one ready, one loading.
        api.set_deployment("chat", "deployment-progressing.json")
        api.set_deployment_pods("chat", ["pod-serving-ready.json",
                                         "pod-serving-loading.json"])
        got = wait_for(lambda: (lambda d: d if d["replicas_ready"] == 1
                                else None)(show(s)), what="1/2 ready")
        k = got["kubernetes"]
        assert k["deployment"] == "chat" and k["namespace"] == NS
        assert k["service"] == SERVICE_DNS
        assert (k["desired"], k["ready"], k["updated"], k["available"]) == \
            (2, 1, 2, 1)
        assert k["rollout"] == "progressing"
        assert k["reason"] == "MinimumReplicasUnavailable"
        assert k["error"] is None and k["synced"] is True
        r0, r1 = got["replicas"]
        assert r0["pod"] == "chat-7d4b9c6f5d-0x7k2" and r0["ready"]
        assert r0["state"] == "ready"
        assert r0["node"] == "aks-gpunc-12345678-vmss000001"
        # The node's topology.kubernetes.io/zone label, read once.
        assert r0["zone"] == "eastus-2" and r1["zone"] == "eastus-2"
        assert len(api.sent("GET", "/nodes/aks-gpunc-12345678-"
                                   "vmss000001")) == 1
        assert r1["state"] == "starting" and not r1["ready"]
        assert r1["reason"] == ("ContainersNotReady: containers with "
                                "unready status: [server]")
        cfg = s.request("GET", "/v1/gateway/config").json()
        (dep,) = cfg["deployments"]
        assert dep["replicas"] == [{"replica": 0, "address": SERVICE_DNS,
                                    "zone": "", "ready": True}]
        out = s.cli("deployments", "chat", check=True).stdout
        assert "Service " + SERVICE_DNS in out
        assert "1 ready, 2 updated, 1 available of 2; rollout progressing" \
            in out

        api.set_deployment("chat", "deployment-available.json")
        api.set_deployment_pods("chat", ["pod-serving-ready.json",
                                         "pod-serving-ready.json"])
        got = wait_for(lambda: (lambda d: d if d["replicas_ready"] == 2
                                else None)(show(s)), what="2/2 ready")
        assert got["kubernetes"]["rollout"] == "complete"
        cfg = s.request("GET", "/v1/gateway/config").json()
        assert [r["address"] for r in cfg["deployments"][0]["replicas"]] \
            == [SERVICE_DNS, SERVICE_DNS]

        # Scale: a merge PATCH of spec.replicas (and the label), no rollout.
        r = s.request("POST", "/v1/deployments/chat/scale",
                      json={"replicas": 3})
        assert r.status_code == 200, r.text
        patch = wait_for(lambda: api.sent("PATCH", "/deployments/chat"),
                         what="the scale PATCH")[0]
        assert patch["content_type"] == "application/merge-patch+json"
        assert patch["body"] == {
            "metadata": {"labels": {"kiln.dev/generation": "2"}},
            "spec": {"replicas": 3}}
        assert not api.sent("PUT")

        # A new spec: the whole Deployment PUT at the version read, so the
        # controller rolls it out one pod at a time.
        version = api.deployments["chat"]["metadata"]["resourceVersion"]
        deploy(s, chat_yaml(replicas=3, env="v2"))
        put = wait_for(lambda: api.sent("PUT", "/deployments/chat"),
                       what="the update's PUT")[0]
        assert put["content_type"] == "application/json"
        body = put["body"]
        assert body["metadata"]["resourceVersion"] == version
        assert body["metadata"]["labels"]["kiln.dev/generation"] == "3"
        assert body["spec"]["replicas"] == 3
        env = {e["name"]: e["value"] for e in
               body["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["VERSION"] == "v2"
        assert len(api.sent("POST", "/deployments")) == 1

        # The new ReplicaSet never became available.
        api.set_deployment("chat", "deployment-deadline.json")
        api.set_deployment_pods("chat", ["pod-serving-ready.json",
                                         "pod-serving-ready.json",
                                         "pod-serving-crashloop.json"])
        got = wait_for(lambda: (lambda d: d if d["kubernetes"]["rollout"] ==
                                "failed" else None)(show(s)),
                       what="the rollout's failure")
        assert got["kubernetes"]["reason"] == "ProgressDeadlineExceeded"
        assert "has timed out progressing" in got["kubernetes"]["message"]
        assert got["replicas"][2]["reason"].startswith(
            "CrashLoopBackOff: back-off 40s")
        assert got["replicas"][2]["restarts"] == 3
        s.stop()

        # A restart finds the Deployment by its labels: nothing written.
        before = len(writes(api))
        s.start()
        got = wait_for(lambda: (lambda d: d if d["kubernetes"]["synced"]
                                else None)(show(s)), what="re-adoption")
        assert got["replicas_ready"] == 2
        lists = api.sent("GET", "/deployments")
        assert lists[-1]["query"]["labelSelector"] == [
            "app.kubernetes.io/managed-by=kiln"]
        assert len(writes(api)) == before, writes(api)[before:]

        # Delete: both objects.
        r = s.request("DELETE", "/v1/deployments/chat")
        assert r.status_code == 200, r.text
        wait_for(lambda: "chat" not in api.deployments and
                 "chat" not in api.services, what="the DELETEs")
        (dd,) = api.sent("DELETE", "/deployments/chat")
        assert dd["body"]["propagationPolicy"] == "Background"
        assert api.sent("DELETE", "/services/chat")
    finally:
        s.stop()


def test_api_errors(tmp_path, api):
    s = start_server(tmp_path, api.port)
    try:
        # Refused by RBAC: the deployment is kept and the error shown.
        api.fail[("POST", "deployments")] = (
            403, "status-403-deployments.json")
        deploy(s, chat_yaml(replicas=1))
        got = wait_for(lambda: (lambda d: d if d["kubernetes"]["error"]
                                else None)(show(s)), what="the 403")
        assert got["kubernetes"]["error"] == (
            "POST deployment: HTTP 403 Forbidden: deployments.apps is "
            "forbidden: User \"system:serviceaccount:ml:kiln-server\" "
            "cannot create resource \"deployments\" in API group \"apps\" "
            "in the namespace \"ml\"")
        out = s.cli("deployments", "chat", check=True).stdout
        assert "error:       POST deployment: HTTP 403 Forbidden" in out
        # Invalid: the API's reason and message.
        api.fail[("POST", "deployments")] = 422
        wait_for(lambda: "HTTP 422 Invalid: Deployment.apps \"chat\" is "
                 "invalid" in (show(s)["kubernetes"]["error"] or ""),
                 what="the 422")
        # Fixed: tried again on the next turn, and the error clears.
        del api.fail[("POST", "deployments")]
        wait_for(lambda: show(s)["kubernetes"]["error"] is None and
                 "chat" in api.deployments, what="the retry")
        # Someone changed the object between kiln's read and its PUT.
        api.fail[("PUT", "deployments")] = 409
        deploy(s, chat_yaml(replicas=1, env="v2"))
        wait_for(lambda: "HTTP 409 AlreadyExists" in
                 (show(s)["kubernetes"]["error"] or ""), what="the 409")
        del api.fail[("PUT", "deployments")]
        wait_for(lambda: show(s)["kubernetes"]["synced"],
                 what="the PUT again")
        # A failing list: the status says so.
        api.fail[("GET", "deployments")] = 500
        wait_for(lambda: "HTTP 500 InternalError" in
                 (show(s)["kubernetes"]["error"] or ""), what="the 500")
        del api.fail[("GET", "deployments")]
        # What cannot render is refused before anything is stored.
        r = s.request("POST", "/v1/deployments", data=(
            "kind: Deployment\nname: amd\nmodel: /m\ncommand: [serve]\n"
            "resources: {gpus: 1, gpu_model: MI300X}\n"))
        assert r.status_code == 400
        assert "no nvidia.com/gpu.product label is known for MI300X" in \
            r.json()["error"]["message"]
        # kiln rollout restart is kubectl's: the pod template's
        # restartedAt annotation, merge-PATCHed; the Deployment rolls out.
        before = api.deployments["chat"]["metadata"]["generation"]
        r = s.cli("rollout", "restart", "chat")
        assert r.returncode == 0, r.stderr
        (patch,) = wait_for(lambda: [
            q for q in api.sent("PATCH", "/deployments/chat")
            if "template" in q["body"].get("spec", {})],
            what="the restart's PATCH")
        assert patch["content_type"] == "application/merge-patch+json"
        at = patch["body"]["spec"]["template"]["metadata"]["annotations"][
            "kubectl.kubernetes.io/restartedAt"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", at), at
        assert patch["body"] == {"spec": {"template": {"metadata": {
            "annotations": {"kubectl.kubernetes.io/restartedAt": at}}}}}
        d = api.deployments["chat"]
        assert d["metadata"]["generation"] == before + 1
        assert d["spec"]["template"]["metadata"]["annotations"][
            "kubectl.kubernetes.io/restartedAt"] == at
        # Sent once; the audit log has it.
        wait_for(lambda: show(s)["kubernetes"]["synced"], what="a turn")
        assert len([q for q in api.sent("PATCH", "/deployments/chat")
                    if "template" in q["body"].get("spec", {})]) == 1
        audit = s.request("GET", "/v1/audit", params={
            "action": "deployment.restart"}).json()["audit"]
        assert [a["object"] for a in audit] == ["deployment/chat"]
    finally:
        s.stop()


def test_deleted_while_stopped(tmp_path, api):
    """A Deployment labelled as kiln's that no kept deployment claims (its
    delete was asked just before a stop) is deleted after a restart."""
    s = start_server(tmp_path, api.port)
    try:
        deploy(s, chat_yaml(replicas=1))
        wait_for(lambda: "chat" in api.services, what="the creation")
        api.fail[("DELETE", "deployments")] = 500
        r = s.request("DELETE", "/v1/deployments/chat")
        assert r.status_code == 200, r.text
        wait_for(lambda: api.sent("DELETE", "/deployments/chat"),
                 what="the failed DELETE")
        s.stop()
        del api.fail[("DELETE", "deployments")]
        s.start()
        wait_for(lambda: "chat" not in api.deployments and
                 "chat" not in api.services, what="the sweep's DELETEs")
        assert s.request("GET", "/v1/deployments/chat").status_code == 404
    finally:
        s.stop()


def test_created_again_before_deleted(tmp_path, api):
    """Undeployed and deployed again while the old Deployment is still
    there (its DELETE failing): the new generation 1 is older than the old
    object's label, and the new spec is PUT whole, not patched."""
    s = start_server(tmp_path, api.port)
    try:
        deploy(s, chat_yaml(replicas=1))
        # Scaled once the Deployment exists: a scale that came before
        # kiln's first turn would be in its POST, with no PATCH at all.
        wait_for(lambda: api.sent("POST", "/deployments"),
                 what="the create")
        r = s.request("POST", "/v1/deployments/chat/scale",
                      json={"replicas": 2})
        assert r.status_code == 200, r.text
        wait_for(lambda: api.sent("PATCH", "/deployments/chat"),
                 what="the scale")
        api.fail[("DELETE", "deployments")] = 500
        assert s.request("DELETE", "/v1/deployments/chat").status_code == 200
        wait_for(lambda: api.sent("DELETE", "/deployments/chat"),
                 what="the failed DELETE")
        assert deploy(s, chat_yaml(replicas=1, env="v9"))[
            "deployment"]["generation"] == 1
        put = wait_for(lambda: api.sent("PUT", "/deployments/chat"),
                       what="the PUT")[0]["body"]
        assert put["metadata"]["labels"]["kiln.dev/generation"] == "1"
        assert put["spec"]["replicas"] == 1
        assert len(api.sent("PATCH")) == 1
        del api.fail[("DELETE", "deployments")]
        wait_for(lambda: show(s)["kubernetes"]["synced"], what="the sync")
        assert "chat" in api.deployments
    finally:
        s.stop()


def test_unauthorized_and_refused(tmp_path, api):
    s = start_server(tmp_path, api.port, token="wrong-token")
    try:
        deploy(s, chat_yaml(replicas=1))
        wait_for(lambda: "HTTP 401 Unauthorized: Unauthorized" in
                 (show(s)["kubernetes"]["error"] or ""), what="the 401")
    finally:
        s.stop()
    api.close()
    # Nothing listens there now: the transport error, retried each second.
    s = start_server(tmp_path, api.port)
    try:
        got = wait_for(lambda: (lambda d: d if d["kubernetes"]["error"]
                                else None)(show(s)), what="the refusal")
        assert "onnect" in got["kubernetes"]["error"], got
        assert got["replicas_ready"] == 0 and got["replicas"] == []
    finally:
        s.stop()


def test_mig_deployment(tmp_path, api):
    """A MIG slice is the device plugin's nvidia.com/mig-<profile>
    resource; the server's own --gpus need not have MIG (no kiln job is
    queued for a deployment here)."""
    s = start_server(tmp_path, api.port)
    try:
        deploy(s, "kind: Deployment\nname: small\nmodel: /m\n"
               "command: [serve]\nresources: {gpus: 'mig:1g.10gb'}\n")
        body = wait_for(lambda: api.sent("POST", "/deployments"),
                        what="the POST")[0]["body"]
        (c,) = body["spec"]["template"]["spec"]["containers"]
        assert c["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
        assert {"key": "sku", "operator": "Equal", "value": "gpu",
                "effect": "NoSchedule"} in \
            body["spec"]["template"]["spec"]["tolerations"]
        # Without RBAC on nodes the zone is not known; all else is.
        api.fail[("GET", "nodes")] = 403
        api.set_deployment("small", "deployment-available.json")
        api.set_deployment_pods("small", ["pod-serving-ready.json"])
        (r,) = wait_for(lambda: show(s, "small")["replicas"],
                        what="the replica")
        assert r["zone"] is None and r["state"] == "ready"
    finally:
        s.stop()
