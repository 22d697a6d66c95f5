"""Interactive sessions on the Kubernetes executor: `kiln exec`,
`kiln run -it` / `kiln attach` and `kiln port-forward` reach a job's pod
through the API server's pods/exec, pods/attach and pods/portforward
subresources, here JobApi with kube_ws_replay.py speaking their recorded
WebSocket format (no API server can run here). The replay runs an
exec's command, or the container's first process for attach, as local
processes, so the terminal checks are real: prompt, output, the size
`stty size` sees after a resize, Ctrl-C ending a child and not the
shell, the exit status. Then who may, and an API server that breaks the
protocol ending its session only."""
import base64
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from conftest import KILN, Server, job_yaml, wait_for
from kube_replay import JobApi, TOKEN
from test_interactive import (DATA, SHELL, drain, exec_path, expect,
                              frames, server_rss, set_size, spawn, upgrade,
                              wait_exit)
from test_kube import make_cert
from test_kube_executor import start_server
from test_port_forward import Forward

NS = "ml"


@pytest.fixture
def api():
    a = JobApi(NS)
    yield a
    a.close()


@pytest.fixture
def kserver(tmp_path, api):
    s = start_server(tmp_path, api.port)
    yield s
    s.stop()


def running(kserver, command=("sleep", "300"), token="admin", **fields):
    jid = kserver.submit(job_yaml("busy", list(command), **fields),
                         token=token)
    kserver.wait_state(jid, "running")
    return jid


def upgrades(api, op):
    return [r for r in api.requests
            if r["method"] == "GET" and r["path"].endswith("/" + op)]


def test_exec_runs_in_the_pod(kserver, api):
    """exec asks the pod's task container for the command, with the
    cluster's token and both subprotocols; stdout and stderr come apart
    and the exit code comes back from the error channel's Status."""
    jid = running(kserver)
    res = kserver.cli("exec", str(jid), "--", "sh", "-c",
                      "echo out-$((6*7)) $KILN_POD; echo err >&2; exit 7")
    assert res.returncode == 7, res.stderr
    assert res.stdout == f"out-42 kiln-{jid}-1-0-x7k2p\n"
    assert res.stderr.strip() == "err"
    (req,) = upgrades(api, "exec")
    assert req["path"] == f"/api/v1/namespaces/{NS}/pods/kiln-{jid}-1-0-" \
                          "x7k2p/exec"
    q = req["query"]
    assert q["command"] == ["sh", "-c", "echo out-$((6*7)) $KILN_POD; "
                                        "echo err >&2; exit 7"]
    assert q["container"] == ["task"]
    assert (q["stdin"], q["stdout"], q["stderr"], q["tty"]) == \
        (["true"], ["true"], ["true"], ["false"])
    assert req["auth"] == f"Bearer {TOKEN}"
    assert req["protocols"] == "v5.channel.k8s.io,v4.channel.k8s.io"
    # stdin with -i; its end is v5's close of channel 0.
    res = kserver.cli("exec", str(jid), "-i", "--", "tr", "a-z", "A-Z",
                      input="shout\n")
    assert res.returncode == 0 and res.stdout == "SHOUT\n", res.stderr
    assert api.ws_sessions[-1]["stdin_closed"]
    # Success is exit 0; an API server that speaks only v4 works too.
    api.ws_protocols = ("v4.channel.k8s.io",)
    res = kserver.cli("exec", str(jid), "--", "echo", "v4")
    assert res.returncode == 0 and res.stdout == "v4\n", res.stderr
    # Audited with the command line, as on other executors.
    audit = kserver.request("GET", "/v1/audit",
                            params={"action": "job.exec"}).json()["audit"]
    assert any("tr a-z A-Z" in (e.get("detail") or "") for e in audit)


def test_stop_with_a_terminal_attached(tmp_path):
    """A server stopped while a terminal is attached through the API
    server ends its session bridges before it exits: a bridge still
    sending at the exit would use OpenSSL after its cleanup (a crash, or
    a stop that hangs). Several rounds, as the race is a matter of
    timing."""
    for i in range(3):
        api, home = JobApi(NS), tmp_path / f"round{i}"
        home.mkdir()
        server = start_server(home, api.port)
        try:
            pid, fd = spawn(server, "run", "-it", "--", *SHELL)
            expect(fd, "$ ")
            os.write(fd, b"sh -c 'echo started-$((1+1)); exec sleep 300'\r")
            expect(fd, "started-2")
            os.write(fd, b"\x03echo typed-while-stopping\r")
        finally:
            server.stop()  # exits 0, everything freed under ASan
            api.close()
        assert "still running at the stop" not in server.log.read_text()
        assert wait_exit(pid) != 0  # the client saw its session end
        drain(fd)


def test_exec_output_comes_whole(kserver, api):
    """Bulk output, many windows of credit and many WebSocket messages,
    arrives whole and in order, then the exit status."""
    jid = running(kserver)
    want = "".join(f"{i}\n" for i in range(1, 400001))
    for _ in range(2):
        res = kserver.cli("exec", str(jid), "--", "seq", "400000")
        assert res.returncode == 0, res.stderr
        assert len(res.stdout) == len(want) and res.stdout == want


def test_flooding_pod_does_not_stall_others(kserver, api):
    """A pod flooding an exec's output to a client that reads nothing
    holds back that session only: another user's session completes, and
    the server's memory does not grow with the flood."""
    alice = kserver.create_token("alice", "user")
    bob = kserver.create_token("bob", "user")
    flood_job = running(kserver, token=alice)
    other_job = running(kserver, token=bob)
    sock, _ = upgrade(kserver, exec_path(flood_job, ["yes", "x" * 200]),
                      token=alice)
    assert sock
    rss_before = server_rss(kserver)
    assert any(f[0] == DATA for f in frames(sock, until=DATA))
    # From now on nothing more is read.
    for _ in range(3):
        res = kserver.cli("exec", str(other_job), "--", "echo", "quick",
                          token=bob)
        assert res.returncode == 0 and res.stdout == "quick\n", res.stderr
    assert server_rss(kserver) - rss_before < 64 * 1024 * 1024
    sock.close()


def test_run_it_and_attach_through_a_terminal(kserver, api):
    """run -it: the pod's container gets a terminal and runs the command
    itself; attach reaches it; the window's size, Ctrl-C and the exit
    status pass through; a detach leaves it for the next attach."""
    pid, fd = spawn(kserver, "run", "-it", "--", *SHELL)
    seen = expect(fd, "$ ")
    jid = int(seen.split(b"kiln: job ", 1)[1].split()[0])
    (job,) = [r["body"] for r in api.sent("POST", "/jobs")]
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert c["stdin"] is True and c["tty"] is True
    assert c["command"] == SHELL  # no shim between it and its terminal
    os.write(fd, b"echo answer-$((6*7))\r")
    expect(fd, "answer-42")
    set_size(fd, 40, 132)
    os.write(fd, b"stty size\r")
    expect(fd, "40 132")
    assert (40, 132) in api.ws_sessions[-1]["resizes"]
    os.write(fd, b"sh -c 'echo started-$((1+1)); exec sleep 300'; "
                 b"echo not-$((1+1))\r")
    expect(fd, "started-2")
    os.write(fd, b"\x03")
    # Typed on after the prompt is back, as a person would: keys sent
    # with the interrupt may be discarded with the line it cut.
    seen = expect(fd, "$ ")
    os.write(fd, b"KEPT=kept-$((2+2))\r")
    os.write(fd, b"echo alive-$((1+1))\r")
    seen += expect(fd, "alive-2")
    assert b"not-2" not in seen
    # Detach: the pod's shell runs on, and attach finds it again.
    os.write(fd, b"\x10\x11")
    expect(fd, f"kiln attach {jid}")
    assert wait_exit(pid) == 0
    drain(fd)
    pid, fd = spawn(kserver, "attach", str(jid))
    os.write(fd, b"echo $KEPT\r")
    expect(fd, "kept-4")
    (req,) = upgrades(api, "attach")[-1:]
    assert req["query"]["tty"] == ["true"] and \
        req["query"]["container"] == ["task"]
    os.write(fd, b"exit 3\r")
    assert wait_exit(pid) == 3
    drain(fd)


def test_tty_refuses_what_needs_the_shim(kserver):
    """A terminal's task has no shim in its pod: a checkpoint section is
    refused by name rather than silently not synced."""
    r = kserver.request("POST", "/v1/jobs", data=job_yaml(
        "t", ["bash"], tty=True,
        checkpoint={"every": "10m", "grace": "30s"}),
        params={"file": "job.yaml"})
    assert r.status_code == 400, r.text
    assert "checkpoint: a job with a terminal" in r.text


class Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"hello from the pod {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_port_forward_answers_through_the_local_port(kserver, api):
    """port-forward asks portforward.k8s.io for the port and carries an
    HTTP exchange with the pod's server; a port nobody listens on in the
    pod ends the connection, not the forward."""
    web = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    api.pod_ports[8888] = web.server_address[1]
    jid = running(kserver)
    try:
        fwd = Forward(kserver, kserver.admin_token, jid, 8888)
        try:
            r = requests.get(fwd.url("/lab"), timeout=20)
            assert r.status_code == 200
            assert r.text == "hello from the pod /lab"
            r = requests.get(fwd.url("/again"), timeout=20)
            assert r.text == "hello from the pod /again"
        finally:
            fwd.stop()
        reqs = upgrades(api, "portforward")
        assert len(reqs) >= 2
        assert reqs[0]["query"]["ports"] == ["8888"]
        assert reqs[0]["protocols"] == "portforward.k8s.io"
        assert api.ws_forwards.count(8888) == len(reqs)
        fwd = Forward(kserver, kserver.admin_token, jid, 9999)
        try:
            s = socket.create_connection(("127.0.0.1", fwd.port),
                                         timeout=20)
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert s.recv(100) == b""
            s.close()
        finally:
            fwd.stop()
    finally:
        web.shutdown()
        web.server_close()


def test_sessions_refused_to_viewers_and_other_users(kserver, api):
    """The owner and operators only: a viewer and another user are
    refused before anything reaches the API server."""
    alice = kserver.create_token("alice", "user")
    bob = kserver.create_token("bob", "user")
    viewer = kserver.create_token("watcher", "viewer")
    jid = running(kserver, token=alice)
    for token in (viewer, bob):
        res = kserver.cli("exec", str(jid), "--", "true", token=token)
        assert res.returncode == 1 and "permission_denied" in res.stderr
    res = kserver.cli("attach", str(jid), token=bob)
    assert res.returncode == 1 and "permission_denied" in res.stderr
    r = kserver.request("GET", f"/v1/jobs/{jid}/port-forward",
                        params={"port": 8888}, token=bob,
                        headers={"Connection": "Upgrade",
                                 "Upgrade": "kiln-port-forward"})
    assert r.status_code == 403
    assert not upgrades(api, "exec") and not upgrades(api, "attach") and \
        not upgrades(api, "portforward")
    res = kserver.cli("exec", str(jid), "--", "echo", "mine", token=alice)
    assert res.returncode == 0 and res.stdout == "mine\n", res.stderr


def test_exec_waits_for_the_pod_to_run(kserver, api):
    """A task runs for kiln from its Job's submission; a session opened
    while its pod is still pending waits for the pod to run, and one
    whose pod ended says so."""
    jid = running(kserver)
    name = f"kiln-{jid}-1"
    api.set_pod(name, 0, "pod-serving-unschedulable.json")
    lists = len(api.sent("GET", "/pods"))
    env = dict(os.environ, KILN_HOME=str(kserver.home))
    env.pop("KILN_SERVER", None)
    env.pop("KILN_TOKEN", None)
    proc = subprocess.Popen([KILN, "exec", str(jid), "--", "echo", "late"],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # The session has looked at the pending pod at least twice.
        wait_for(lambda: sum(1 for r in api.sent("GET", "/pods")
                             if "kiln.dev/job=" + name in
                             r["query"].get("labelSelector", [""])[0])
                 >= 2, what="the session looking for its pod")
        assert proc.poll() is None
        api.set_pod(name, 0, "pod-running.json")
        out, errs = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and out == "late\n", errs
    assert len(api.sent("GET", "/pods")) > lists
    api.set_pod(name, 0, "pod-failed.json")
    res = kserver.cli("exec", str(jid), "--", "true")
    # The session's own look, or the server's if it saw the end first.
    assert res.returncode != 0 and ("pod kiln-" in res.stderr and
                                    "is not running (it ended)" in
                                    res.stderr or "not running" in
                                    res.stderr), res.stderr


def test_cluster_refusal_is_shown(kserver, api):
    """The cluster's own refusal (RBAC without pods/exec) reaches the
    user with the API server's message."""
    jid = running(kserver)
    api.ws_refuse = (403, "status-403-exec.json")
    res = kserver.cli("exec", str(jid), "--", "true")
    assert res.returncode != 0
    assert "the API server refused GET" in res.stderr, res.stderr
    assert "HTTP 403" in res.stderr
    assert 'cannot create resource \\"pods/exec\\"' in res.stderr or \
        'cannot create resource "pods/exec"' in res.stderr, res.stderr


@pytest.mark.parametrize("hostile", ["masked", "oversize"])
def test_a_broken_api_server_ends_its_session_only(kserver, api, hostile):
    """A masked frame or one claiming a terabyte from the API server ends
    that session with the reason; the server and later sessions go on."""
    jid = running(kserver)
    api.ws_hostile = hostile
    res = kserver.cli("exec", str(jid), "--", "echo", "hi")
    assert res.returncode != 0
    assert "WebSocket frame from the server" in res.stderr, res.stderr
    assert ("masked" if hostile == "masked" else "over") in res.stderr
    api.ws_hostile = None
    res = kserver.cli("exec", str(jid), "--", "echo", "still")
    assert res.returncode == 0 and res.stdout == "still\n", res.stderr
    assert kserver.request("GET", "/v1/jobs").status_code == 200


def test_sessions_over_tls(tmp_path):
    """Over https:// the session's own connection trusts the kubeconfig's
    certificate-authority-data, names the host it checks, and sends the
    token, as every other call does."""
    key, cert = make_cert(tmp_path, "api")
    api = JobApi(NS, tls=(str(cert), str(key)))
    config = tmp_path / "kubeconfig"
    config.write_text(f"""apiVersion: v1
kind: Config
current-context: test
clusters:
- name: tls
  cluster:
    server: https://127.0.0.1:{api.port}
    certificate-authority-data: {base64.b64encode(cert.read_bytes()).decode()}
contexts:
- name: test
  context: {{cluster: tls, user: kiln, namespace: {NS}}}
users:
- name: kiln
  user:
    token: {TOKEN}
""")
    s = Server(tmp_path / "home", gpus="8xH100-80GB",
               extra=["--executor", "kubernetes", "--kubeconfig", str(config),
                      "--kube-namespace", NS, "--image", "ghcr.io/me/t:1"])
    s.home.mkdir()
    s.start()
    web = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    api.pod_ports[8080] = web.server_address[1]
    try:
        jid = running(s)
        res = s.cli("exec", str(jid), "--", "sh", "-c",
                    "echo tls-$((1+1)); exit 4")
        assert res.returncode == 4 and res.stdout == "tls-2\n", res.stderr
        fwd = Forward(s, s.admin_token, jid, 8080)
        try:
            assert requests.get(fwd.url("/x"), timeout=20).text == \
                "hello from the pod /x"
        finally:
            fwd.stop()
        assert all(r["auth"] == f"Bearer {TOKEN}" for r in api.requests)
    finally:
        web.shutdown()
        web.server_close()
        s.stop()
        api.close()
