"""The API server's pods/exec, pods/attach and pods/portforward
subresources for JobApi (kube_replay.py), as the recorded wire format
has them: a GET upgraded to a WebSocket (RFC 6455) with the subprotocol
v5.channel.k8s.io or v4.channel.k8s.io (exec, attach) or
portforward.k8s.io (portforward), every client frame masked, one channel
byte before each message's data.

exec/attach: channel 0 stdin, 1 stdout, 2 stderr, 3 the v1 Status that
ends it (Success, or Failure/NonZeroExitCode with the exit code as an
ExitCode cause), 4 a terminal's size {"Width":..,"Height":..}, 255 (v5
only) a channel closed. Where the kubelet would run the command in the
pod's container, this runs it here: with tty=true under a real
pseudo-terminal (so `stty size` shows the sizes sent on channel 4 and
Ctrl-C interrupts the foreground child, not the shell), else with pipes
for stdout and stderr. attach runs the command of the Job's container
(as kiln rendered it), standing for the container's first process: the
first attach starts it and later ones find it again, as a detached
terminal leaves it running.

portforward: the port (little-endian) opens channel 0 (data) and 1
(error), then bytes flow on channel 0 to the real local server the test
mapped the pod's port to (JobApi.pod_ports); a refused connection is a
message on channel 1.

A test may make the API server hostile (JobApi.ws_hostile): "masked"
sends a masked frame after the upgrade, "oversize" a frame whose length
claims a terabyte. Nothing here was checked against a real cluster; the
formats follow the Kubernetes sources cited in src/kube/session.c."""
import base64
import fcntl
import hashlib
import json
import os
import pty
import select
import signal
import socket
import struct
import subprocess
import termios
import threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
SESSION_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
PORT_PROTOCOL = "portforward.k8s.io"


def read_exact(f, n):
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(f):
    """A client's frame: (opcode, payload); a client's must be masked."""
    b0, b1 = read_exact(f, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack(">H", read_exact(f, 2))[0]
    elif n == 127:
        n = struct.unpack(">Q", read_exact(f, 8))[0]
    if not b1 & 0x80:
        raise ValueError("unmasked client frame")
    if not b0 & 0x80:
        raise ValueError("fragmented client frame (kiln never sends one)")
    mask = read_exact(f, 4)
    data = bytes(c ^ mask[i % 4] for i, c in enumerate(read_exact(f, n)))
    return b0 & 0x0F, data


def channel_frames(f):
    """The client's binary frames as (channel, body) until it closes;
    other frames (pings, empty ones) are passed over."""
    while True:
        opcode, data = read_frame(f)
        if opcode == 0x8:
            return
        if opcode == 0x2 and data:
            yield data[0], data[1:]


def frame(opcode, data, masked=False):
    n = len(data)
    head = bytes([0x80 | opcode])
    m = 0x80 if masked else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack(">H", n)
    else:
        head += bytes([m | 127]) + struct.pack(">Q", n)
    if masked:
        mask = b"\x01\x02\x03\x04"
        return head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(data))
    return head + data


class Conn:
    def __init__(self, handler):
        self.rfile = handler.rfile
        self.sock = handler.connection
        self.lock = threading.Lock()

    def send(self, channel, data=b""):
        with self.lock:
            self.sock.sendall(frame(0x2, bytes([channel]) + data))

    def close(self):
        with self.lock:
            try:
                self.sock.sendall(frame(0x8, b"\x03\xe8"))
            except OSError:
                pass


def status_for(code):
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: "
                       f"error executing command [...], exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode",
                                    "message": str(code)}]}}


def upgrade(handler, protocols):
    """Answer 101 with the first of protocols the client offered, or
    400; returns the chosen one or None."""
    offered = [p.strip() for p in
               handler.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    chosen = next((p for p in protocols if p in offered), None)
    key = handler.headers.get("Sec-WebSocket-Key", "")
    if (chosen is None or handler.headers.get("Sec-WebSocket-Version") != "13"
            or handler.headers.get("Upgrade", "").lower() != "websocket"):
        body = json.dumps({"kind": "Status", "apiVersion": "v1",
                           "status": "Failure", "code": 400,
                           "message": "no supported subprotocol"}).encode()
        handler.send_response(400)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return None
    accept = base64.b64encode(
        hashlib.sha1((key + GUID).encode()).digest()).decode()
    handler.send_response_only(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept)
    handler.send_header("Sec-WebSocket-Protocol", chosen)
    handler.end_headers()
    handler.wfile.flush()
    return chosen


def serve(api, handler, req):
    """Serve an upgraded GET on .../pods/NAME/{exec,attach,portforward}."""
    handler.close_connection = True
    parts = req["path"].split("/")
    op, pod = parts[-1], parts[-2]
    q = req["query"]
    if op == "portforward":
        if upgrade(handler, (PORT_PROTOCOL,)):
            forward(api, Conn(handler), int(q["ports"][0]))
        return
    chosen = upgrade(handler, api.ws_protocols)
    if not chosen:
        return
    conn = Conn(handler)
    if api.ws_hostile == "masked":
        conn.sock.sendall(frame(0x2, b"\x01boo", masked=True))
    elif api.ws_hostile == "oversize":
        conn.sock.sendall(b"\x82\x7f" + struct.pack(">Q", 1 << 40) + b"x")
    if api.ws_hostile:
        try:
            read_frame(conn.rfile)  # what kiln answers (a close)
        except (EOFError, ValueError, OSError):
            pass
        return
    tty = q.get("tty") == ["true"]
    if op == "exec":
        argv = q["command"]
    else:  # the container's command, as kiln rendered it in the Job
        job = api.jobs[pod.rsplit("-", 2)[0]]
        (container,) = job["spec"]["template"]["spec"]["containers"]
        argv = container["command"]
    run(api, conn, argv, tty, chosen == "v5.channel.k8s.io", pod,
        op == "attach")


def default_signals():
    """A container's first process starts with every signal at its
    default, whatever the runtime's own were: a test suite started in the
    background (SIGINT and SIGQUIT ignored) must not make Ctrl-C in a pod
    do nothing."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def spawn(argv, tty, pod):
    """The command as the container would run it: (pid, stdin fd,
    {fd: channel}, Popen or None, pty master or None)."""
    env = {"PATH": os.environ["PATH"], "PS1": "$ ", "HOME": "/tmp",
           "TERM": "xterm", "KILN_POD": pod}
    if tty:
        pid, master = pty.fork()
        if pid == 0:
            try:
                default_signals()
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        return pid, master, {master: 1}, None, master
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, preexec_fn=default_signals)
    return (proc.pid, proc.stdin.fileno(),
            {proc.stdout.fileno(): 1, proc.stderr.fileno(): 2}, proc, None)


def run(api, conn, argv, tty, v5, pod, attach):
    """Relay one exec (its own process) or attach (the pod's first
    process, started by the first attach and kept across detaches)."""
    with api.lock:
        if attach and pod in api.containers:
            pid, stdin_fd, outs, proc, master = api.containers[pod]
        else:
            pid, stdin_fd, outs, proc, master = spawn(argv, tty, pod)
            if attach:
                api.containers[pod] = (pid, stdin_fd, outs, proc, master)
        record = {"pod": pod, "argv": argv, "tty": tty, "attach": attach,
                  "resizes": [], "v5": v5, "stdin_closed": False}
        api.ws_sessions.append(record)
    outs = dict(outs)
    gone_r, gone_w = os.pipe()

    def from_client():
        try:
            for ch, body in channel_frames(conn.rfile):
                if ch == 0:
                    os.write(stdin_fd, body)
                elif ch == 4 and master is not None:
                    size = json.loads(body)
                    record["resizes"].append((size["Height"], size["Width"]))
                    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack(
                        "HHHH", size["Height"], size["Width"], 0, 0))
                elif ch == 255 and v5 and body == b"\x00":
                    record["stdin_closed"] = True
                    if proc:
                        proc.stdin.close()
        except (EOFError, ValueError, OSError):
            pass
        try:  # (the relay may have ended first and closed its end)
            os.write(gone_w, b"x")
        except OSError:
            pass
        os.close(gone_w)

    threading.Thread(target=from_client, daemon=True).start()
    client_gone = False
    while outs and not client_gone:
        ready, _, _ = select.select(list(outs) + [gone_r], [], [])
        for fd in ready:
            if fd == gone_r:
                client_gone = True
                break
            try:
                data = os.read(fd, 32768)
            except OSError:  # a pty's EIO once the shell is gone
                data = b""
            if not data:
                del outs[fd]
                continue
            conn.send(outs[fd], data)
    os.close(gone_r)
    if client_gone:
        if not attach:  # an exec's process goes with its connection
            os.kill(pid, signal.SIGKILL)
            reap(pid, proc, master)
        return
    code = reap(pid, proc, master)
    with api.lock:
        api.containers.pop(pod, None)
    record["exit"] = code
    conn.send(3, json.dumps(status_for(code)).encode())
    conn.close()


def reap(pid, proc, master):
    if proc:
        code = proc.wait()
    else:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        os.close(master)
    return code if code >= 0 else 128 - code


def forward(api, conn, port):
    prefix = struct.pack("<H", port)
    conn.send(0, prefix)
    conn.send(1, prefix)
    target = api.pod_ports.get(port)
    try:
        s = socket.create_connection(("127.0.0.1", target), timeout=5)
    except (OSError, TypeError):
        conn.send(1, f"error forwarding port {port} to pod: dial tcp4 "
                     f"127.0.0.1:{port}: connect: connection refused"
                  .encode())
        conn.close()
        return
    with api.lock:
        api.ws_forwards.append(port)

    def from_client():
        try:
            for ch, body in channel_frames(conn.rfile):
                if ch == 0:
                    s.sendall(body)
        except (EOFError, ValueError, OSError):
            pass
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=from_client, daemon=True).start()
    try:
        while True:
            data = s.recv(32768)
            if not data:
                break
            conn.send(0, data)
    except OSError:
        pass
    s.close()
    conn.close()


def is_upgrade(handler):
    return handler.headers.get("Upgrade", "").lower() == "websocket"


def setup(api):
    """The state JobApi keeps for these subresources."""
    api.ws_protocols = SESSION_PROTOCOLS
    api.ws_hostile = None
    api.ws_refuse = None
    api.ws_sessions = []
    api.ws_forwards = []
    api.pod_ports = {}
    api.containers = {}  # pod -> its attached first process


def stop(api):
    """Kill the pods' first processes still running."""
    with api.lock:
        left = list(api.containers.values())
        api.containers.clear()
    for pid, _, _, proc, master in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reap(pid, proc, master)
