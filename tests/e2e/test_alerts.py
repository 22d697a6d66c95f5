"""Alerts and health gating as a user sees them: a scripted exporter on
loopback whose values the test changes, a server scraping it with a rules
file, the alert firing and resolving in `kiln alerts`, in the event stream
and at a webhook stub; and the server's own health checks making the node
unhealthy (and ready again) on fixture trees."""
import json
import os
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from conftest import KILN, Server, job_yaml, wait_for

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"

RULES = """\
rules:
  - name: GpuHot
    expr: test_gpu_temp{gpu=~"0|1"}
    op: ">"
    value: 80
    for: 1s
    severity: critical
    summary: "GPU {{ $labels.gpu }} on {{ $labels.instance }} at {{ $value }}C"
  - name: FbNearlyFull
    expr: test_fb_used / (test_fb_used + test_fb_free)
    op: ">"
    value: 0.95
    summary: "GPU {{ $labels.gpu }} framebuffer {{ $value }} used"
"""


class Loopback:
    """A tiny HTTP server on a free loopback port, in a thread."""

    def __init__(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def exporter():
    """Serves /metrics from a dict the test changes between scrapes."""
    values = {'test_gpu_temp{gpu="0"}': 50, 'test_gpu_temp{gpu="2"}': 99,
              'test_fb_used{gpu="0"}': 10, 'test_fb_free{gpu="0"}': 90}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = "# HELP test_gpu_temp GPU temperature.\n" \
                   "# TYPE test_gpu_temp gauge\n"
            body += "".join(f"{k} {v}\n" for k, v in list(values.items()))
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    srv = Loopback(Handler)
    srv.values = values
    yield srv
    srv.close()


@pytest.fixture
def webhook():
    """Records every JSON body POSTed to it; fails the first POST with 503
    so the server's retry is exercised."""
    got = []
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            data = self.rfile.read(int(self.headers["Content-Length"]))
            calls.append(data)
            if len(calls) == 1:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            got.append(json.loads(data))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = Loopback(Handler)
    srv.got = got
    srv.calls = calls
    yield srv
    srv.close()


def start_server(tmp_path, extra, env=None):
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=extra, env=env)
    return s.start()


class Follower:
    """Reads GET /v1/events?follow=1 line by line in a thread."""

    def __init__(self, server):
        self.lines = []
        self.resp = requests.get(server.url + "/v1/events",
                                 params={"follow": 1}, stream=True,
                                 headers={"Authorization":
                                          f"Bearer {server.admin_token}"},
                                 timeout=60)
        assert self.resp.status_code == 200
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            for line in self.resp.iter_lines():
                if line:
                    self.lines.append(json.loads(line))
        except (requests.exceptions.ConnectionError,
                requests.exceptions.ChunkedEncodingError, AttributeError):
            pass  # the server went away at the end of the test

    def find(self, type_, **fields):
        for e in self.lines:
            if e["type"] == type_ and all(
                    (e.get("alert") or e).get(k) == v for k, v in fields.items()):
                return e
        return None


def alerts(server, *args):
    r = server.cli("alerts", "-o", "json", *args, check=True)
    return json.loads(r.stdout)["alerts"]


def test_alert_fires_and_resolves_everywhere(tmp_path, exporter, webhook):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    server = start_server(tmp_path, [
        "--alert-rules", str(rules), "--scrape", exporter.url + "/metrics",
        "--scrape-interval", "200ms", "--no-local-metrics",
        "--alert-webhook", webhook.url + "/hook", "--health-interval", "0"])
    try:
        follower = Follower(server)
        instance = exporter.url[len("http://"):]
        # gpu 2 is hot but not selected; the framebuffer is 10% used.
        exporter.values['test_gpu_temp{gpu="0"}'] = 91
        firing = wait_for(lambda: [a for a in alerts(server)
                                   if a["state"] == "firing"],
                          what="GpuHot to fire")
        assert len(firing) == 1
        a = firing[0]
        assert a["rule"] == "GpuHot" and a["severity"] == "critical"
        assert a["labels"] == {"gpu": "0", "instance": instance}
        assert a["summary"] == f"GPU 0 on {instance} at 91C"
        assert a["value"] == 91
        # for: 1s held between the condition becoming true and firing.
        assert a["fired_at_ms"] - a["active_at_ms"] >= 1000
        table = server.cli("alerts", check=True).stdout
        assert "firing" in table and "GpuHot" in table and "91C" in table

        # A ratio of two metrics with the same labels.
        exporter.values['test_fb_used{gpu="0"}'] = 97
        exporter.values['test_fb_free{gpu="0"}'] = 3
        wait_for(lambda: any(a["rule"] == "FbNearlyFull" and
                             a["state"] == "firing" for a in alerts(server)),
                 what="FbNearlyFull to fire")

        exporter.values['test_gpu_temp{gpu="0"}'] = 40
        exporter.values['test_fb_used{gpu="0"}'] = 10
        exporter.values['test_fb_free{gpu="0"}'] = 90
        resolved = wait_for(lambda: (lambda rows: rows if len(rows) == 2 and all(
            r["state"] == "resolved" for r in rows) else None)(alerts(server)),
            what="both alerts to resolve")
        hot = next(r for r in resolved if r["rule"] == "GpuHot")
        assert hot["resolved_at_ms"] >= hot["fired_at_ms"]

        # The event stream saw both transitions, in order.
        fired = wait_for(lambda: follower.find("alert.firing", rule="GpuHot"),
                         what="alert.firing on the stream")
        gone = wait_for(lambda: follower.find("alert.resolved", rule="GpuHot"),
                        what="alert.resolved on the stream")
        assert fired["seq"] < gone["seq"]
        assert fired["alert"]["summary"] == f"GPU 0 on {instance} at 91C"
        # kiln events prints the same lines without following.
        printed = [json.loads(line) for line in
                   server.cli("events", check=True).stdout.splitlines()]
        assert [e["seq"] for e in printed if e["type"].startswith("alert.")] \
            == [e["seq"] for e in follower.lines
                if e["type"].startswith("alert.")]

        # The webhook got firing then resolved for each (the first POST
        # was refused with 503 and retried).
        wait_for(lambda: len(webhook.got) == 4, what="4 webhook deliveries")
        assert len(webhook.calls) == 5
        hot_hooks = [(h["status"], h["alert"]["rule"]) for h in webhook.got
                     if h["alert"]["rule"] == "GpuHot"]
        assert hot_hooks == [("firing", "GpuHot"), ("resolved", "GpuHot")]
        assert webhook.got[0]["alert"]["labels"]["gpu"] == "0"
    finally:
        server.stop()


def test_job_states_on_the_event_stream(server):
    follower = Follower(server)
    jid = server.submit(job_yaml("evented", ["/bin/true"]))
    server.wait_state(jid, "succeeded")
    wait_for(lambda: follower.find("job.state", job=jid, state="succeeded"),
             what="the job's end on the stream")
    states = [e["state"] for e in follower.lines
              if e["type"] == "job.state" and e["job"] == jid]
    assert states == ["queued", "running", "succeeded"]
    server.cli("cordon", server.request("GET", "/v1/nodes").json()
               ["nodes"][0]["name"], check=True)
    node = wait_for(lambda: follower.find("node.state", state="cordoned"),
                    what="the cordon on the stream")
    assert node["reason"].startswith("cordoned by admin")


def test_bad_rules_file_refuses_to_start(tmp_path):
    rules = tmp_path / "bad.yaml"
    rules.write_text("rules:\n  - name: x\n    expr: m{a=\"1\"\n    op: \">\"\n"
                     "    value: 1\n")
    home = tmp_path / "home"
    home.mkdir()
    r = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                        "--gpus", "1xH100-80GB", "--alert-rules", str(rules)],
                       env=dict(os.environ, KILN_HOME=str(home)),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert f"{rules}:3:18: rules[0].expr: expected ',' or '}}' in the " \
           "label matchers" in r.stderr


def test_health_checks_gate_the_node(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "node-faulty", root)
    env = dict(os.environ, KILN_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    env.pop("KILN_SKU", None)
    server = start_server(tmp_path, [
        "--alert-rules", "", "--health-interval", "1s",
        "--health-root", str(root)], env=env)
    try:
        node = wait_for(lambda: (lambda n: n if n["state"] == "unhealthy"
                                 else None)(
            server.request("GET", "/v1/nodes").json()["nodes"][0]),
            what="the node to go unhealthy")
        assert node["reason"].startswith("health check failed: kernel_xid: ")
        out = server.cli("nodes", check=True).stdout
        assert "unhealthy" in out and "why: health check failed: kernel_xid" in out
        jid = server.submit(job_yaml("gated", ["/bin/true"]))
        wait_for(lambda: server.job(jid)["reason"], what="a queue reason")
        assert server.job(jid)["state"] == "queued"
        # Repaired: the next run passes and the node takes work again.
        shutil.rmtree(root)
        shutil.copytree(FIXTURES / "node-basic", root)
        server.wait_state(jid, "succeeded")
        n = server.request("GET", "/v1/nodes").json()["nodes"][0]
        assert n["state"] == "ready" and n["reason"] is None
        audit = server.request("GET", "/v1/audit",
                               params={"action": "node."}).json()["audit"]
        assert [(a["action"], a["actor"]) for a in reversed(audit)] == \
            [("node.health", "system"), ("node.uncordon", "system")]
    finally:
        server.stop()


def test_passing_checks_keep_an_outside_report(tmp_path):
    """A node reported unhealthy from outside stays so while the server's own
    checks pass: only a report that it is healthy brings it back."""
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "node-basic", root)
    env = dict(os.environ, KILN_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    env.pop("KILN_SKU", None)
    server = start_server(tmp_path, [
        "--alert-rules", "", "--health-interval", "1s",
        "--health-root", str(root)], env=env)
    try:
        node = server.request("GET", "/v1/nodes").json()["nodes"][0]["name"]
        r = server.request("POST", f"/v1/nodes/{node}/health",
                           json={"healthy": False, "reason": "nccl: bus 3 slow"})
        assert r.status_code == 200, r.text
        # Three passing runs go by.
        time.sleep(3.5)
        n = server.request("GET", "/v1/nodes").json()["nodes"][0]
        assert (n["state"], n["reason"]) == ("unhealthy",
                                             "reported by admin: nccl: bus 3 slow")
        r = server.request("POST", f"/v1/nodes/{node}/health",
                           json={"healthy": True})
        assert r.json()["node"]["state"] == "ready"
    finally:
        server.stop()


def test_server_raised_alert_reaches_the_webhook(tmp_path, webhook):
    """backup_failed is raised by the server, not by a rule: it goes to the
    webhook as rule alerts do, firing and then resolved."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    server = start_server(tmp_path, [
        "--backup-every", "200ms", "--backup-to", f"file://{blocker}/store",
        "--alert-webhook", webhook.url + "/hook", "--health-interval", "0"])
    try:
        def hooks(status):
            return [h for h in webhook.got if h["status"] == status
                    and h["alert"]["rule"] == "backup_failed"]
        (fired,) = wait_for(lambda: hooks("firing"),
                            what="backup_failed at the webhook")
        alert = fired["alert"]
        assert alert["severity"] == "critical"
        assert alert["labels"]["store"].startswith(f"file://{blocker}/store")
        assert "failed" in alert["summary"] and alert["fired_at_ms"] > 0
        # The store becomes writable: the next backup resolves it.
        blocker.unlink()
        blocker.mkdir()
        (resolved,) = wait_for(lambda: hooks("resolved"),
                               what="backup_failed resolved at the webhook")
        assert resolved["alert"]["fingerprint"] == alert["fingerprint"]
        assert "succeeded" in resolved["alert"]["summary"]
        assert len(hooks("firing")) == 1
    finally:
        server.stop()
