"""kiln port-forward: a local port carried to a port a job's task listens
on, through the API; owners and operators only; a client that floods a
forwarded port (or never reads) does not slow another user's session."""
import json
import os
import socket
import subprocess
import threading
import time

import pytest
import requests

from conftest import KILN, Server, kill_processes_under, wait_for

# Serves its task directory's index.html on 127.0.0.1:PORT.
HTTP_TASK = (
    "import http.server, os, functools\n"
    "d = os.environ['KILN_TASK_DIR']\n"
    "open(os.path.join(d, 'index.html'), 'w').write(os.environ['MSG'])\n"
    "h = functools.partial(http.server.SimpleHTTPRequestHandler,"
    " directory=d)\n"
    "http.server.ThreadingHTTPServer(('127.0.0.1', int(os.environ['PORT'])),"
    " h).serve_forever()\n")

# On PORT: reads and drops everything; on PORT+1: writes without end.
FLOOD_TASK = (
    "import os, socket, threading\n"
    "p = int(os.environ['PORT'])\n"
    "def serve(port, fn):\n"
    "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET,"
    " socket.SO_REUSEADDR, 1)\n"
    "    s.bind(('127.0.0.1', port)); s.listen(8)\n"
    "    while True:\n"
    "        c, _ = s.accept()\n"
    "        threading.Thread(target=fn, args=(c,), daemon=True).start()\n"
    "def sink(c):\n"
    "    while c.recv(1 << 16):\n"
    "        pass\n"
    "def source(c):\n"
    "    b = b'x' * (1 << 16)\n"
    "    try:\n"
    "        while True:\n"
    "            c.sendall(b)\n"
    "    except OSError:\n"
    "        pass\n"
    "threading.Thread(target=serve, args=(p + 1, source), daemon=True)"
    ".start()\n"
    "serve(p, sink)\n")


def free_port(n=1):
    """A free port on loopback with n - 1 free ones after it."""
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port + n > 65535:
            continue
        ok = True
        for k in range(1, n):
            t = socket.socket()
            try:
                t.bind(("127.0.0.1", port + k))
            except OSError:
                ok = False
            t.close()
        if ok:
            return port


def task_job(s, token, name, script, port, msg="hi"):
    spec = "\n".join([
        "kind: Job", f"name: {name}",
        f"command: {json.dumps(['/usr/bin/python3', '-c', script])}",
        f"env: {json.dumps({'PORT': str(port), 'MSG': msg})}"]) + "\n"
    jid = s.submit(spec, token=token)
    s.wait_state(jid, "running")
    return jid


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Forward:
    """`kiln port-forward` running in the background."""

    def __init__(self, s, token, job, remote):
        env = dict(os.environ, KILN_HOME=str(s.home), KILN_TOKEN=token)
        env.pop("KILN_SERVER", None)
        self.proc = subprocess.Popen(
            [KILN, "port-forward", str(job), f"0:{remote}"], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("forwarding 127.0.0.1:"), (
            line + self.proc.stderr.read())
        self.port = int(line.split()[1].split(":")[1])

    def url(self, path="/index.html"):
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        return self.proc.stderr.read()


def upgrade(s, token, job, port):
    """A raw upgraded connection: (status line, socket)."""
    host, p = s.url.split("//")[1].split(":")
    sock = socket.create_connection((host, int(p)), timeout=10)
    sock.sendall((f"GET /v1/jobs/{job}/port-forward?port={port} HTTP/1.1\r\n"
                  f"Host: {host}\r\nAuthorization: Bearer {token}\r\n"
                  "Connection: Upgrade\r\nUpgrade: kiln-port-forward\r\n"
                  "\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head.split(b"\r\n")[0].decode(), sock


@pytest.fixture
def s(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    srv = Server(home, gpus="").start()
    yield srv
    srv.stop()
    kill_processes_under(home)


def test_http_server_in_a_task_answers_through_the_local_port(s):
    alice = s.create_token("alice", "user")
    port = free_port()
    jid = task_job(s, alice, "web", HTTP_TASK, port, msg="hello from the task")
    wait_for(lambda: listening(port), what="the task's server")
    fwd = Forward(s, alice, jid, port)
    try:
        for _ in range(3):  # a connection each
            r = requests.get(fwd.url(), timeout=10)
            assert r.status_code == 200 and r.text == "hello from the task"
        with requests.Session() as keep:  # one kept open
            for _ in range(3):
                assert keep.get(fwd.url(), timeout=10).text == (
                    "hello from the task")
    finally:
        fwd.stop()
    audit = s.request("GET", "/v1/audit").json()["audit"]
    opened = [a for a in audit if a["action"] == "job.port_forward"]
    assert opened and all(a["outcome"] == "ok" and a["actor"] == "alice"
                          for a in opened)
    assert opened[0]["detail"] == f"task 0 port {port}"


def test_viewer_and_other_user_refused_operator_allowed(s):
    alice = s.create_token("alice", "user")
    bob = s.create_token("bob", "user")
    vera = s.create_token("vera", "viewer")
    olga = s.create_token("olga", "operator")
    port = free_port()
    jid = task_job(s, alice, "web", HTTP_TASK, port)
    wait_for(lambda: listening(port), what="the task's server")
    status, sock = upgrade(s, vera, jid, port)
    sock.close()
    assert " 403 " in status, status
    status, sock = upgrade(s, bob, jid, port)
    sock.close()
    assert " 403 " in status, status
    status, sock = upgrade(s, olga, jid, port)
    try:
        assert " 101 " in status, status
        sock.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
        got = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
        assert got.startswith(b"HTTP/1.0 200") and got.endswith(b"hi")
    finally:
        sock.close()
    # Not upgraded, a closed port, a bad port: refused with why.
    r = s.request("GET", f"/v1/jobs/{jid}/port-forward",
                  params={"port": port}, token=alice)
    assert r.status_code == 400 and r.json()["error"]["field"] == "Upgrade"
    status, sock = upgrade(s, alice, jid, free_port())
    sock.close()
    assert " 409 " in status, status
    # A port something else on the machine listens on (this test, as a
    # host service would) is not the task's: refused, never connected.
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(1)
    try:
        status, sock = upgrade(s, alice, jid, other.getsockname()[1])
        sock.close()
        assert " 409 " in status, status
        other.settimeout(0.5)
        with pytest.raises(socket.timeout):
            other.accept()
    finally:
        other.close()
    status, sock = upgrade(s, alice, jid, 0)
    sock.close()
    assert " 400 " in status, status
    # The CLI of another user: the local connection closes, stderr says why.
    fwd = Forward(s, bob, jid, port)
    try:
        with pytest.raises(requests.ConnectionError):
            requests.get(fwd.url(), timeout=10)
    finally:
        err = fwd.stop()
    assert "permission_denied" in err and "belongs to alice" in err, err
    audit = s.request("GET", "/v1/audit").json()["audit"]
    denied = [a for a in audit if a["action"] == "job.port_forward"
              and a["outcome"] == "denied"]
    assert {a["actor"] for a in denied} >= {"bob", "vera"}, denied


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_flooding_client_leaves_another_users_session_responsive(s):
    alice = s.create_token("alice", "user")
    bob = s.create_token("bob", "user")
    flood_port = free_port(2)
    web_port = free_port()
    flood = task_job(s, alice, "flood", FLOOD_TASK, flood_port)
    web = task_job(s, bob, "web", HTTP_TASK, web_port, msg="bob's")
    wait_for(lambda: listening(flood_port + 1) and listening(web_port),
             what="the tasks' servers")
    fwd = Forward(s, bob, web, web_port)
    assert requests.get(fwd.url(), timeout=10).text == "bob's"
    rss_before = rss_kib(s.proc.pid)

    stop = threading.Event()
    sent = [0]

    def push():
        status, sock = upgrade(s, alice, flood, flood_port)
        assert " 101 " in status
        block = b"y" * (1 << 16)
        try:
            while not stop.is_set():
                sock.sendall(block)
                sent[0] += len(block)
        finally:
            sock.close()

    # Alice floods a sink and, on another connection, never reads what
    # her task floods back.
    pusher = threading.Thread(target=push)
    pusher.start()
    status, idle_reader = upgrade(s, alice, flood, flood_port + 1)
    assert " 101 " in status
    # Bob is answered again and again while the flood flows, however fast
    # the machine moves either: a loop stalled by the flood would answer
    # him only once it ends, and it never ends while the pusher runs.
    answers = 0
    hang_guard = time.monotonic() + 180
    try:
        while sent[0] < 50 << 20 or answers < 20:
            assert pusher.is_alive(), "the flood stopped"
            assert time.monotonic() < hang_guard, (sent[0], answers)
            r = requests.get(fwd.url(), timeout=10)
            assert r.text == "bob's"
            h = s.request("GET", "/healthz")
            assert h.status_code == 200
            answers += 1
            time.sleep(0.1)
    finally:
        stop.set()
        pusher.join(timeout=30)
        idle_reader.close()
        fwd.stop()
    # What the server holds for the reader that never reads is bounded.
    assert rss_kib(s.proc.pid) - rss_before < 64 << 10


# Keeps the task's simulated GPU busy until the file GATE exists, then
# idle: a dev environment that does not sit idle while it starts, so a
# test can open its session first and then give it a short idle_timeout.
BUSY_UNTIL_GATE = (
    "import os, threading, time\n"
    "def use(u):\n"
    "    p = os.environ['KILN_SIM_GPU_USAGE']\n"
    "    with open(p + '.tmp', 'w') as f:\n"
    "        f.write('memory_bytes 1000\\nutilization %s\\n' % u)\n"
    "    os.rename(p + '.tmp', p)\n"
    "def idle_at_gate():\n"
    "    while not os.path.exists(os.environ['GATE']):\n"
    "        time.sleep(0.1)\n"
    "    use(0.0)\n"
    "use(0.9)\n"
    "threading.Thread(target=idle_at_gate, daemon=True).start()\n")
# The task's first sample must come within it (Python's start, about a
# second on a loaded machine), and it is waited out twice per test.
IDLE_S = 3


def busy_devenv(gate, script, **env):
    """A dev environment with one GPU that runs script (Python) after
    BUSY_UNTIL_GATE, with idle_timeout IDLE_S."""
    return "\n".join([
        "kind: DevEnvironment", "name: box",
        f"command: {json.dumps(['/usr/bin/python3', '-c', BUSY_UNTIL_GATE + script])}",
        "resources: {gpus: 1}",
        f"env: {json.dumps(dict(env, GATE=str(gate)))}",
        f"idle_timeout: {IDLE_S}s"]) + "\n"


def stays_up_while_a_session_is_open(s, jid, gate):
    """Idle from the gate on, with a session open: it must outlast its
    idle_timeout, the warning's lead (a fifth of it) and a tick."""
    gate.write_text("")
    time.sleep(IDLE_S * 1.2 + 2)
    assert s.job(jid)["state"] == "running", s.job(jid)


def test_open_forward_keeps_a_dev_environment_up(gpu_server, tmp_path):
    """A forward is a session: an idle dev environment with one open is
    not stopped; once it closes, the idle timeout runs again."""
    s, gate = gpu_server, tmp_path / "idle"
    alice = s.create_token("alice", "user")
    port = free_port()
    jid = s.submit(busy_devenv(gate, HTTP_TASK, PORT=str(port), MSG="dev"),
                   token=alice)
    s.wait_state(jid, "running")
    wait_for(lambda: listening(port), what="the environment's server")
    status, sock = upgrade(s, alice, jid, port)
    assert " 101 " in status, status
    try:
        stays_up_while_a_session_is_open(s, jid, gate)
    finally:
        sock.close()
    job = s.wait_state(jid, ("cancelled", "failed", "succeeded"), timeout=40)
    assert job["reason"].startswith(f"stopped: idle for {IDLE_S}s"), job


def test_exec_session_keeps_a_dev_environment_up(gpu_server, tmp_path):
    """kiln exec -it is a session too: while its shell is open the idle
    environment stays; when it exits the idle timeout runs again."""
    from test_interactive import drain, expect, spawn, wait_exit
    s, gate = gpu_server, tmp_path / "idle"
    alice = s.create_token("alice", "user")
    jid = s.submit(busy_devenv(gate, "time.sleep(3600)\n"), token=alice)
    s.wait_state(jid, "running")
    pid, fd = spawn(s, "exec", "-it", str(jid), "--", "bash", "--norc",
                    "--noprofile", "-i", token=alice)
    expect(fd, "$ ")
    os.write(fd, b"echo home=$HOME\r")
    expect(fd, f"home.{jid}.1")
    stays_up_while_a_session_is_open(s, jid, gate)
    os.write(fd, b"exit\r")
    assert wait_exit(pid) == 0
    drain(fd)
    job = s.wait_state(jid, ("cancelled", "failed", "succeeded"), timeout=40)
    assert job["reason"].startswith(f"stopped: idle for {IDLE_S}s"), job


def test_attach_with_a_port(s):
    """kiln attach --port forwards while the terminal is attached."""
    from test_interactive import drain, expect, spawn, wait_exit
    port = free_port()
    pid, fd = spawn(s, "run", "-it", "--", "bash", "--norc", "--noprofile",
                    "-i")
    seen = expect(fd, "$ ")
    jid = int(seen.split(b"kiln: job ", 1)[1].split()[0])
    os.write(fd, (f"cd $KILN_TASK_DIR && echo attached > index.html && "
                  f"python3 -m http.server {port} --bind 127.0.0.1 "
                  ">/dev/null 2>&1 &\r").encode())
    wait_for(lambda: listening(port), what="the task's server")
    os.write(fd, b"\x10\x11")
    assert wait_exit(pid) == 0
    drain(fd)
    pid, fd = spawn(s, "attach", "--port", f"0:{port}", str(jid))
    seen = expect(fd, f"to job {jid} task 0 port {port}")
    local = int(seen.split(b"forwarding 127.0.0.1:", 1)[1].split()[0])
    r = requests.get(f"http://127.0.0.1:{local}/index.html", timeout=10)
    assert r.text == "attached\n"
    os.write(fd, b"kill %1; exit\r")
    assert wait_exit(pid) == 0
    drain(fd)
    s.wait_state(jid, ("succeeded", "failed"), timeout=30)
