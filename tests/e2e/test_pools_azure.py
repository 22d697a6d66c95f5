"""The `azure` node-pool provider (VM Scale Sets REST) against
vmss_replay.py, which answers in Azure's recorded formats and records
what kiln sent: queued work grows the scale set (PATCH sku.capacity, the
async operation followed, the new VM joins under its computer name), an
idle node's instance is deleted, a 429 is retried after its Retry-After,
Azure's 403 shows as the pool's last error, and both token paths
(managed identity through IMDS, service principal through Entra ID)."""
import json
import os
import subprocess

import pytest

from conftest import KILN, Server, job_yaml, wait_for, kill_processes_under
from vmss_replay import API, ID, ScaleSetApi

POOL = "az Standard_NC48ads_A100_v4 2xA100-80GB min=0 max=2 provider=azure"


@pytest.fixture
def api():
    a = ScaleSetApi()
    yield a
    a.close()


def start(tmp_path, pool, env=None):
    s = Server(tmp_path / "home", gpus=None, env=env, extra=[
        "--health-interval", "0", "--sim-node", "base 1xT4-16GB",
        "--pool", pool])
    s.home.mkdir()
    s.start()
    return s


def stop(s):
    s.stop()
    kill_processes_under(s.home)


def pools(s):
    r = s.request("GET", "/v1/pools")
    assert r.status_code == 200, r.text
    return {p["name"]: p for p in r.json()["pools"]}


def zone_of(s, node):
    nodes = s.request("GET", "/v1/nodes").json()["nodes"]
    return next(n["labels"].get("zone") for n in nodes if n["name"] == node)


def a100_job(name, flag):
    return job_yaml(name, ["/bin/sh", "-c",
                           f"while [ ! -e {flag} ]; do sleep 0.1; done"],
                    resources={"gpus": 2, "gpu_model": ["A100"]})


def test_managed_identity_scale_up_after_429_then_idle_delete(tmp_path, api):
    api.mi_client_id = "5c1f0e2a-user-assigned"
    # Throttled once: kiln waits what Retry-After says and asks again.
    api.fail[("PATCH", "vmss")] = [
        (429, {"error": {"code": "TooManyRequests",
                         "message": "The request is being throttled."}},
         [("Retry-After", "1")])]
    s = start(tmp_path, f"{POOL} vmss={ID} azure-arm-url={api.url} "
                        f"azure-imds-url={api.url} "
                        f"azure-client-id={api.mi_client_id} "
                        "scale-down-delay=1s")
    try:
        assert pools(s)["az"]["provider"] == "azure"
        flag = tmp_path / "done"
        job = s.submit(a100_job("big", flag))
        s.wait_state(job, "running")
        node = s.job(job)["attempts_detail"][-1]["tasks"][0]["node"]
        assert node == "kilnaz000000"
        assert zone_of(s, node) == "1"

        assert api.problems == []
        tokens = api.calls("GET", "token")
        assert len(tokens) == 1, "the token is cached"
        assert tokens[0]["headers"]["Metadata"] == "true"
        patches = api.calls("PATCH", "vmss")
        assert len(patches) == 2  # the 429, then the one that went through
        assert [json.loads(p["body"]) for p in patches] == \
            [{"sku": {"capacity": 1}}] * 2
        for r in api.calls():
            if r["path"].startswith("/subscriptions/"):
                assert r["headers"]["Authorization"] == f"Bearer {api.token}"
                assert r["query"]["api-version"] == [API]
        # Listed first (nothing to adopt), read, patched, polled, listed.
        kinds = [(r["method"], api.kind(r["path"])) for r in api.calls()
                 if api.kind(r["path"]) != "token"]
        assert kinds == [("GET", "vms"), ("GET", "vmss"), ("PATCH", "vmss"),
                         ("PATCH", "vmss"), ("GET", "operation"),
                         ("GET", "operation"), ("GET", "vms")], kinds

        # Done and idle past 1 s: its instance is deleted, the node goes.
        flag.write_text("")
        s.wait_state(job, "succeeded")
        wait_for(lambda: pools(s)["az"]["current"] == 0, timeout=30,
                 what="the idle node deleted")
        deletes = api.calls("POST", "delete")
        assert [json.loads(d["body"]) for d in deletes] == \
            [{"instanceIds": ["0"]}]
        # Followed through Location (202, then 200).
        assert len([r for r in api.calls("GET", "operation")
                    if r["query"].get("monitor") == ["true"]]) == 2
        assert api.vms == []
        names = [n["name"] for n in s.request("GET", "/v1/nodes")
                 .json()["nodes"]]
        assert names == ["base"]
        assert pools(s)["az"]["last_error"] is None
    finally:
        stop(s)


def test_service_principal_and_a_403_shown_as_the_last_error(tmp_path, api):
    secret = "s3cr3t~kiln.Az_Q8"
    api.client_secret = secret
    api.fail[("PATCH", "vmss")] = [
        (403, {"error": {
            "code": "AuthorizationFailed",
            "message": "The client 'app-1' with object id 'f1e2' does not "
                       "have authorization to perform action "
                       "'Microsoft.Compute/virtualMachineScaleSets/write' "
                       f"over scope '{ID}' or the scope is invalid."}},
         [])]
    env = dict(os.environ, AZURE_TENANT_ID=api.tenant,
               AZURE_CLIENT_ID=api.client_id, AZURE_CLIENT_SECRET=secret)
    s = start(tmp_path, f"{POOL} vmss={ID} azure-arm-url={api.url} "
                        f"azure-login-url={api.url} "
                        "azure-identity=service-principal", env=env)
    try:
        job = s.submit(a100_job("big", tmp_path / "never"))
        wait_for(lambda: pools(s)["az"]["last_error"], timeout=30,
                 what="the failed scale-up")
        why = pools(s)["az"]["last_error"]["why"]
        assert "HTTP 403 AuthorizationFailed: The client 'app-1'" in why, why
        out = s.cli("pools", check=True).stdout
        assert "last provider error: scale-up az:" in out
        assert "AuthorizationFailed" in out
        # The failed node stays counted for the cool-down: no retry storm.
        assert pools(s)["az"]["provisioning"] == 1
        assert len(api.calls("PATCH", "vmss")) == 1
        assert s.job(job)["state"] == "queued"

        assert api.problems == []
        logins = api.calls("POST", "token")
        assert len(logins) == 1
        assert logins[0]["path"] == f"/{api.tenant}/oauth2/v2.0/token"
        for text in (out, s.log.read_text(),
                     s.request("GET", "/v1/pools").text,
                     s.request("GET", "/v1/audit").text):
            assert secret not in text
            assert api.token not in text
    finally:
        stop(s)


def test_vms_already_there_join_first_and_survive_a_restart(tmp_path, api):
    api.add_vm(zone="2")
    pool = (f"{POOL.replace('min=0', 'min=1')} vmss={ID} "
            f"azure-arm-url={api.url} azure-imds-url={api.url}")
    s = start(tmp_path, pool)
    try:
        # min=1: the first round asks for one; the VM there is taken.
        wait_for(lambda: pools(s)["az"]["current"] == 1,
                 what="the scale set's VM to join")
        assert [n["name"] for n in pools(s)["az"]["nodes"]] == \
            ["kilnaz000000"]
        assert api.calls("PATCH", "vmss") == []
        assert zone_of(s, "kilnaz000000") == "2"
        s.stop()
        s.start()
        # The node comes back from the store, as kiln's, with its VM's
        # zone, and takes work: nothing is asked of Azure for it.
        assert [n["name"] for n in pools(s)["az"]["nodes"]] == \
            ["kilnaz000000"]
        assert zone_of(s, "kilnaz000000") == "2"
        flag = tmp_path / "done"
        flag.write_text("")
        job = s.submit(a100_job("after", flag))
        s.wait_state(job, "succeeded")
        assert s.job(job)["attempts_detail"][-1]["tasks"][0]["node"] == \
            "kilnaz000000"
        assert pools(s)["az"]["provisioning"] == 0
        assert api.calls("PATCH", "vmss") == []
        assert len(api.vms) == 1
    finally:
        stop(s)


def test_stop_while_an_operation_runs(tmp_path, api):
    api.hold = True
    s = start(tmp_path, f"{POOL} vmss={ID} azure-arm-url={api.url} "
                        f"azure-imds-url={api.url}")
    try:
        s.submit(a100_job("big", tmp_path / "never"))
        wait_for(lambda: len(api.calls("GET", "operation")) >= 2,
                 what="the scale-up's operation polled")
        assert pools(s)["az"]["provisioning"] == 1
    finally:
        # The worker gives the call up: a clean, prompt exit 0.
        stop(s)


@pytest.mark.parametrize("options,env,words", [
    ("provider=azure", {}, "vmss: provider=azure needs vmss="),
    ("provider=azure vmss=/subscriptions/s/resourceGroups/r", {},
     "vmss: \"/subscriptions/s/resourceGroups/r\" is not"),
    (f"provider=azure vmss={ID} azure-identity=cli", {},
     "azure-identity: \"cli\" is not managed or service-principal"),
    (f"provider=azure vmss={ID} azure-identity=service-principal",
     {"AZURE_TENANT_ID": "t", "AZURE_CLIENT_ID": "c"},
     "needs $AZURE_CLIENT_SECRET"),
    (f"provider=azure vmss={ID} zones=1,2", {}, "zones: an azure pool's"),
    (f"vmss={ID}", {}, "need provider=azure"),
    (f"provider=azure vmss={ID} azure-tenant=t", {}, "azure-tenant: not one"),
])
def test_bad_azure_pool_is_refused_naming_the_option(tmp_path, options, env,
                                                     words):
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("AZURE_")}
    res = subprocess.run(
        [KILN, "server", "--listen", "127.0.0.1:0", "--home",
         str(tmp_path / "home"), "--sim-node", "base 1xT4-16GB", "--pool",
         f"az Standard_NC48ads_A100_v4 2xA100-80GB {options}"],
        env=dict(clean, **env), capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert words in res.stderr, res.stderr
    assert "Secret" not in res.stderr
