"""The server lends its store credentials to no one (docs/security.md,
"Stores and credentials"): a job's checkpoint store or input at a host the
server was not configured with gets no credential (a loopback listener
here records every request line, header and query), a named store from
the config file works end to end on Azurite with its own credential and
nothing from AZURE_STORAGE_*, file:// outside the allowed directories is
refused naming the field, and a store's redirect is not followed."""
import http.server
import json
import os
import threading

import pytest

from conftest import (AZURITE_ACCOUNT, AZURITE_KEY, KILN, Server,
                      azurite_env, job_yaml, wait_for)

COMMIT = ('ck() { d="$KILN_CHECKPOINT_DIR/$1"; mkdir -p "$d.tmp"; '
          'echo "$2" > "$d.tmp/state"; mv "$d.tmp" "$d"; }; ')


class Listener:
    """A loopback HTTP server that records each request and answers with
    status (and Location, when redirecting)."""

    def __init__(self, status=403, location=None):
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                outer.requests.append({"line": self.requestline,
                                       "headers": dict(self.headers)})
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = handle_any

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def assert_no_credential(self):
        for r in self.requests:
            text = r["line"] + json.dumps(r["headers"])
            assert "sig=" not in text, r
            assert "authorization" not in (k.lower() for k in r["headers"]), r
            assert AZURITE_KEY[:20] not in text, r


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def write_config(path, text, mode=0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


def start(tmp_path, config, env=None, extra=()):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cfg = write_config(tmp_path / "server.yaml", config)
    return Server(home, env=env, extra=["--config", str(cfg), *extra]).start()


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AZURE_STORAGE_")}
    env.update(extra)
    return env


def conn_string(endpoint):
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};")


def test_a_store_at_a_users_host_gets_no_credential(azurite, tmp_path,
                                                    listener):
    # The server holds real credentials: Azurite's key in AZURE_STORAGE_*
    # (its default store) and a named store's.
    env = azurite_env(azurite)
    env["KILN_TEST_CKPT_CRED"] = conn_string(azurite)
    config = ("allow-unconfigured-stores: true\n"
              "stores:\n"
              f"  - {{name: ckpt, url: {azurite}/deputy-ckpt, "
              "credential: {env: KILN_TEST_CKPT_CRED}}\n")
    server = start(tmp_path, config, env=env,
                   extra=["--blob-store", f"{azurite}/deputy-default"])
    try:
        store = f"{listener.url}/{AZURITE_ACCOUNT}/deputy-ckpt"
        script = COMMIT + "ck step-000001 one; sleep 2"
        jid = server.submit(job_yaml(
            "deputy", ["/bin/sh", "-c", script], checkpoint={"store": store},
            inputs=[f"{listener.url}/{AZURITE_ACCOUNT}/data/in.bin"]))
        wait_for(lambda: any("in.bin" in r["line"] for r in listener.requests),
                 what="the input's fetch at the listener")
        server.wait_state(jid, ("failed", "succeeded"))
        # The input could not be fetched (the listener refuses), so the
        # task never ran; a second job's checkpoint reaches it.
        jid = server.submit(job_yaml("deputy2", ["/bin/sh", "-c", script],
                                     checkpoint={"store": store}))
        wait_for(lambda: any("/deputy-ckpt/" in r["line"]
                             for r in listener.requests),
                 what="the checkpoint's sync at the listener")
        server.wait_state(jid, ("failed", "succeeded"))
        assert listener.requests
        listener.assert_no_credential()
    finally:
        server.stop()

    # Without the option, such a URL is refused when the job arrives.
    config = config.replace("allow-unconfigured-stores: true\n", "")
    server = start(tmp_path, config, env=env,
                   extra=["--blob-store", f"{azurite}/deputy-default"])
    try:
        r = server.request("POST", "/v1/jobs", data=job_yaml(
            "no", ["true"], checkpoint={"store": store}))
        assert r.status_code == 403, r.text
        err = r.json()["error"]
        assert err["field"] == "checkpoint.store"
        assert "in none of the server's stores" in err["message"]
        r = server.request("POST", "/v1/jobs", data=job_yaml(
            "no", ["true"], inputs=[f"{listener.url}/a/b/c.bin"]))
        assert r.status_code == 403 and r.json()["error"]["field"] == "inputs[0]"
        # A URL that only looks like the configured store's host.
        host = azurite.split("//")[1].split("/")[0]
        r = server.request("POST", "/v1/jobs", data=job_yaml(
            "no", ["true"], checkpoint={
                "store": f"http://{host}@127.0.0.1:{listener.port}/"
                         f"{AZURITE_ACCOUNT}/deputy-ckpt"}))
        assert r.status_code == 400, r.text
    finally:
        server.stop()
    listener.assert_no_credential()


def test_a_named_store_saves_and_resumes_on_azurite(azurite, tmp_path):
    # Nothing in the environment: the named store's own credential only.
    cred = write_config(tmp_path / "ckpt.cred", conn_string(azurite) + "\n")
    container = f"named-{tmp_path.name[-10:].lower().replace('_', '-')}"
    config = ("stores:\n"
              f"  - {{name: ckpt-named, url: {azurite}/{container}, "
              f"credential: {{file: {cred}}}}}\n")
    server = start(tmp_path, config, env=clean_env())
    try:
        script = COMMIT + (
            'if [ "$KILN_ATTEMPT" = 1 ]; then ck step-000001 one; exit 1; fi; '
            'echo "resumed with $(cat $KILN_RESUME_FROM/state)"')
        jid = server.submit(job_yaml("named", ["/bin/sh", "-c", script],
                                     retries=1, backoff="1s",
                                     checkpoint={"store": "ckpt-named"}))
        job = server.wait_state(jid, ("succeeded", "failed"), timeout=60)
        assert job["state"] == "succeeded", server.logs(jid, attempt=2)
        assert "resumed with one" in server.logs(jid, attempt=2)
        # The checkpoint is in the named store's container.
        import subprocess
        listing = subprocess.run(
            [KILN, "blob", "ls", f"{azurite}/{container}", f"{jid}/"],
            env=clean_env(AZURE_STORAGE_CONNECTION_STRING=conn_string(azurite)),
            capture_output=True, text=True, timeout=60)
        assert f"{jid}/checkpoints/step-000001/MANIFEST.json" in listing.stdout
        # An unknown name is refused naming the field.
        r = server.request("POST", "/v1/jobs", data=job_yaml(
            "no", ["true"], checkpoint={"store": "ckpt-nowhere"}))
        assert r.status_code == 400, r.text
        assert r.json()["error"]["field"] == "checkpoint.store"
        assert 'no store is named "ckpt-nowhere"' in r.json()["error"]["message"]
    finally:
        server.stop()

    # A credential file others may read is refused at start.
    cred.chmod(0o644)
    home = tmp_path / "home"
    s = Server(home, env=clean_env(),
               extra=["--config", str(tmp_path / "server.yaml")])
    with pytest.raises(AssertionError):
        s.start()
    s.stop()
    log = (home / "server.log").read_text()
    assert f"{cred} has mode 0644" in log and "chmod 600" in log


def test_file_urls_outside_the_allowed_roots_are_refused(server, tmp_path):
    # conftest allows the test's own directory; nothing else.
    outside = "/var/tmp/kiln-deputy-outside"
    link = tmp_path / "escape"
    link.symlink_to("/etc")
    cases = [
        ({"checkpoint": {"store": f"file://{outside}"}}, "checkpoint.store"),
        ({"inputs": ["file:///etc/passwd"]}, "inputs[0]"),
        ({"inputs": [f"file://{link}/passwd"]}, "inputs[0]"),
        ({"checkpoint": {"store": f"file://{tmp_path}/../../etc"}},
         "checkpoint.store"),
    ]
    for fields, field in cases:
        r = server.request("POST", "/v1/jobs",
                           data=job_yaml("f", ["true"], **fields))
        assert r.status_code in (400, 403), (fields, r.text)
        assert r.json()["error"]["field"] == field, r.text
    # A backup's target is the same: a store, or an allowed directory.
    r = server.request("POST", "/v1/backups", json={"to": f"file://{outside}"})
    assert r.status_code == 403 and r.json()["error"]["field"] == "to", r.text
    r = server.request("POST", "/v1/backups",
                       json={"to": "http://127.0.0.1:9/acct/backups"})
    assert r.status_code == 403 and r.json()["error"]["field"] == "to", r.text
    assert not os.path.exists(outside)
    # Inside the allowed directory it is taken.
    (tmp_path / "in.txt").write_text("x\n")
    jid = server.submit(job_yaml("ok", ["cat", "/dev/null"],
                                 inputs=[f"file://{tmp_path}/in.txt"],
                                 checkpoint={"store": f"file://{tmp_path}/st"}))
    assert server.wait_state(jid, ("succeeded", "failed"))["state"] == "succeeded"


def test_a_stores_redirect_is_not_followed(tmp_path):
    elsewhere = Listener(status=201)
    store = Listener(status=307, location=(
        f"{elsewhere.url}/{AZURITE_ACCOUNT}/redirected/x"))
    sas = "sv=2023-11-03&sr=c&sp=racwdl&sig=DeputySeCrEt"
    config = ("stores:\n"
              f"  - {{name: bouncy, url: {store.url}/{AZURITE_ACCOUNT}/ckpt, "
              "credential: {env: KILN_TEST_BOUNCY_SAS}}\n")
    server = start(tmp_path, config,
                   env=clean_env(KILN_TEST_BOUNCY_SAS=sas))
    try:
        script = COMMIT + "ck step-000001 one; sleep 1"
        jid = server.submit(job_yaml("bouncy", ["/bin/sh", "-c", script],
                                     checkpoint={"store": "bouncy"}))
        wait_for(lambda: any("sig=DeputySeCrEt" in r["line"]
                             for r in store.requests),
                 what="the signed upload at the store")
        server.wait_state(jid, ("succeeded", "failed"))
        wait_for(lambda: "checkpoint sync failed" in server.log.read_text(),
                 what="the sync to fail on the redirect")
        assert elsewhere.requests == []
        assert "DeputySeCrEt" not in server.log.read_text()
    finally:
        server.stop()
        store.close()
        elsewhere.close()
