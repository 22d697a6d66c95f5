"""Tokens, roles and the audit trail."""
from conftest import job_yaml


def test_healthz_needs_no_token(server):
    r = server.request("GET", "/healthz", token=None)
    assert r.status_code == 200 and r.json()["ok"] is True


def test_no_token_is_401(server):
    for method, path in [("GET", "/v1/jobs"), ("POST", "/v1/jobs"),
                         ("GET", "/v1/nodes"), ("GET", "/v1/audit")]:
        r = server.request(method, path, token=None)
        assert r.status_code == 401, (method, path)
        assert r.json()["error"]["code"] == "unauthenticated"
    r = server.request("GET", "/v1/jobs", token="kiln_not-a-real-token")
    assert r.status_code == 401


def test_viewer_cannot_submit(server):
    viewer = server.create_token("val", "viewer")
    r = server.request("POST", "/v1/jobs", token=viewer,
                       data=job_yaml("nope", ["/bin/true"]))
    assert r.status_code == 403
    err = r.json()["error"]
    assert err["code"] == "permission_denied"
    assert "viewer" in err["message"]
    assert server.request("GET", "/v1/jobs", token=viewer).status_code == 200


def test_user_cancels_only_own_jobs(server):
    alice = server.create_token("alice", "user")
    bob = server.create_token("bob", "user")
    op = server.create_token("olga", "operator")
    spec = job_yaml("mine", ["/bin/true"], resources={"gpus": 8})
    a_job = server.submit(spec, token=alice)
    assert server.job(a_job)["owner"] == "alice"
    r = server.request("POST", f"/v1/jobs/{a_job}/cancel", token=bob)
    assert r.status_code == 403
    b_job = server.submit(spec, token=bob)
    assert server.request("POST", f"/v1/jobs/{b_job}/cancel",
                          token=bob).status_code == 200
    assert server.request("POST", f"/v1/jobs/{a_job}/cancel",
                          token=op).status_code == 200


def test_only_admin_manages_tokens(server):
    user = server.create_token("u1", "user")
    r = server.request("POST", "/v1/tokens", token=user,
                       json={"name": "x", "role": "admin"})
    assert r.status_code == 403
    r = server.request("GET", "/v1/tokens", token=user)
    assert r.status_code == 403
    r = server.request("POST", "/v1/tokens", json={"name": "bad name", "role": "user"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "name"
    r = server.request("POST", "/v1/tokens", json={"name": "ok", "role": "root"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "role"
    r = server.request("POST", "/v1/tokens", json={"name": "u1", "role": "user"})
    assert r.status_code == 409


def test_revoked_token_stops_working(server):
    t = server.create_token("temp", "viewer")
    assert server.request("GET", "/v1/whoami", token=t).json() == {
        "name": "temp", "role": "viewer"}
    r = server.request("DELETE", "/v1/tokens/temp")
    assert r.status_code == 200
    assert server.request("GET", "/v1/whoami", token=t).status_code == 401
    names = [t["name"] for t in server.request("GET", "/v1/tokens").json()["tokens"]]
    assert "temp" in names  # kept, marked revoked
    assert server.request("DELETE", "/v1/tokens/temp").status_code == 404


def test_audit_shows_who_did_what(server):
    alice = server.create_token("alice", "user")
    viewer = server.create_token("vic", "viewer")
    jid = server.submit(job_yaml("audited", ["/bin/true"], resources={"gpus": 8}),
                        token=alice)
    server.request("POST", f"/v1/jobs/{jid}/cancel", token=alice)
    server.request("POST", "/v1/jobs", token=viewer,
                   data=job_yaml("denied", ["/bin/true"]))
    rows = server.request("GET", "/v1/audit").json()["audit"]
    seen = [(r["actor"], r["action"], r["object"], r["outcome"]) for r in rows]
    assert ("alice", "job.submit", f"job/{jid}", "ok") in seen
    assert ("alice", "job.cancel", f"job/{jid}", "ok") in seen
    assert ("admin", "token.create", "token/alice", "ok") in seen
    assert ("vic", "job.submit", "POST /v1/jobs", "denied") in seen
    # Newest first, and filters work.
    assert rows[0]["id"] > rows[-1]["id"]
    only = server.request("GET", "/v1/audit", params={"actor": "alice"}).json()["audit"]
    assert {r["actor"] for r in only} == {"alice"}
    only = server.request("GET", "/v1/audit", params={"action": "token."}).json()["audit"]
    assert only and all(r["action"].startswith("token.") for r in only)


def test_errors_are_json_with_field(server):
    bad = "kind: Job\nname: x\ncommand: [\"/bin/true\"]\nresources:\n  gpus: lots\n"
    r = server.request("POST", "/v1/jobs", data=bad, params={"file": "job.yaml"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "invalid_argument"
    assert err["field"] == "resources.gpus"
    assert err["message"].startswith("job.yaml:5:")
    r = server.request("GET", "/v1/jobs/999")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = server.request("GET", "/v1/nope")
    assert r.status_code == 404
    r = server.request("POST", "/v1/jobs", data=b"x" * (2 * 1024 * 1024))
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "too_large"
    # Nothing bad was stored.
    assert server.request("GET", "/v1/jobs").json()["jobs"] == []
