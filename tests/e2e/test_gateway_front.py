"""kiln gateway's HTTP front under hostile clients: a caller without a key
cannot make it read or keep a body, slow heads and bodies are cut off, and
/metrics tells a caller without a key nothing."""
import resource
import socket
import subprocess
import time
from pathlib import Path

import requests

from conftest import KILN, wait_for
from test_gateway import (METRICS_KEY, deployment, gateways, home,  # noqa
                          key, routes, upstreams)

CHAT = "/v1/chat/completions"


def connect(url, timeout=10):
    host, port = url[len("http://"):].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def read_until_closed(s, limit_s=10):
    """What the peer sends until it closes (or resets) the connection."""
    got = b""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            piece = s.recv(65536)
        except ConnectionResetError:
            break
        if not piece:
            break
        got += piece
    return got


def vm_rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def rss_with_bodies_held(url, pid, head, body, n):
    """pid's VmRSS (KiB) before and at most while n connections at once
    each send head and body, with one byte of the body still owed, so a
    server that kept bodies would hold them all."""
    before = vm_rss_kib(pid)
    conns = []
    try:
        for _ in range(n):
            s = connect(url, timeout=5)
            conns.append(s)
            try:
                s.sendall(head + body)
            except OSError:
                pass  # refused and closed before all of it went
        # What the kernel still buffers may be read yet: watch a while.
        after = 0
        for _ in range(20):
            after = max(after, vm_rss_kib(pid))
            time.sleep(0.1)
    finally:
        for s in conns:
            s.close()
    return before, after


def one_chat(home, gateways, upstreams, args=()):
    chat = upstreams("chat")
    return gateways(home, routes([deployment("chat", [chat])],
                                 [key("app1", "sk-one", ["chat"])]),
                    args=args)


def test_no_key_gets_401_before_the_body(home, gateways, upstreams):
    g = one_chat(home, gateways, upstreams)
    with connect(g.url) as s:
        # A 100 MB body announced, none of it sent: the answer comes anyway.
        s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n"
                  "Content-Type: application/json\r\n"
                  "Content-Length: 100000000\r\n\r\n".encode())
        got = read_until_closed(s)
    assert got.startswith(b"HTTP/1.1 401 "), got
    assert b"Connection: close" in got and b"invalid_api_key" in got
    # A wrong key the same.
    with connect(g.url) as s:
        s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n"
                  "Authorization: Bearer sk-wrong\r\n"
                  "Content-Length: 100000000\r\n\r\n".encode())
        assert read_until_closed(s).startswith(b"HTTP/1.1 401 ")
    # A key lets the body in, sent in two pieces.
    with connect(g.url) as s:
        body = b'{"model": "chat", "messages": []}'
        s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n"
                  "Authorization: Bearer sk-one\r\nConnection: close\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:5])
        time.sleep(0.2)
        s.sendall(body[5:])
        assert read_until_closed(s).startswith(b"HTTP/1.1 200 ")


def test_keyless_bodies_do_not_grow_memory(home, gateways, upstreams):
    # Bodies of 1 MiB are within the limit here: only the key check
    # stops them.
    g = one_chat(home, gateways, upstreams, args=["--max-body", "2Mi"])
    body = b"x" * (1024 * 1024)
    head = (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {len(body) + 1}\r\n\r\n").encode()
    assert g.call("sk-one", "chat").status_code == 200
    before, after = rss_with_bodies_held(g.url, g.proc.pid, head, body, 300)
    assert after - before < 64 * 1024, (before, after)
    assert g.call("sk-one", "chat").status_code == 200


def test_slow_heads_and_bodies_are_cut_off(home, gateways, upstreams):
    g = one_chat(home, gateways, upstreams,
                 args=["--head-timeout", "1s", "--body-timeout", "1s"])
    # A connection that sends nothing.
    with connect(g.url) as s:
        t0 = time.monotonic()
        assert read_until_closed(s) == b""
        assert time.monotonic() - t0 < 5
    # Slowloris: a byte of the head every 0.4 s, each within the body
    # timeout, but the head as a whole is late.
    head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    with connect(g.url) as s:
        t0 = time.monotonic()
        closed = False
        for b in head[:-1]:
            try:
                s.sendall(bytes([b]))
            except OSError:
                closed = True
                break
            time.sleep(0.4)
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed = True
                    break
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed = True
                break
            finally:
                s.setblocking(True)
        assert closed and time.monotonic() - t0 < 5
    # A keyed body that stops halfway.
    with connect(g.url) as s:
        s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n"
                  "Authorization: Bearer sk-one\r\n"
                  "Content-Length: 100\r\n\r\n{\"model\"".encode())
        t0 = time.monotonic()
        assert read_until_closed(s) == b""
        assert time.monotonic() - t0 < 5
    # A head in time is served.
    assert g.call("sk-one", "chat").status_code == 200


def test_bad_timeouts_are_named():
    r = subprocess.run([KILN, "gateway", "--head-timeout", "soon"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--head-timeout" in r.stderr
    r = subprocess.run([KILN, "gateway", "--body-timeout", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--body-timeout" in r.stderr


def test_metrics_need_a_key(home, gateways, upstreams):
    g = one_chat(home, gateways, upstreams)
    assert g.call("sk-one", "chat").status_code == 200
    r = requests.get(g.url + "/metrics", timeout=10)
    assert r.status_code == 401
    assert "chat" not in r.text and "app1" not in r.text
    r = requests.get(g.url + "/metrics", timeout=10,
                     headers={"Authorization": "Bearer sk-wrong"})
    assert r.status_code == 401 and "chat" not in r.text
    r = requests.get(g.url + "/metrics", timeout=10,
                     headers={"Authorization": f"Bearer {METRICS_KEY}"})
    assert r.status_code == 200 and 'deployment="chat"' in r.text


def connect_from(url, source):
    host, port = url[len("http://"):].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10,
                                    source_address=(source, 0))


def test_connection_caps(home, gateways, upstreams):
    g = one_chat(home, gateways, upstreams,
                 args=["--max-connections", "6",
                       "--max-connections-per-client", "3"])
    held = []
    try:
        for source in ("127.0.0.1", "127.0.0.2"):
            held += [connect_from(g.url, source) for _ in range(3)]
        # A fourth from one address: over the per-client cap.
        with connect_from(g.url, "127.0.0.1") as s:
            got = read_until_closed(s)
        assert got.startswith(b"HTTP/1.1 503 "), got
        assert b"too_many_connections" in got
        # A first from a third address: over the global cap.
        with connect_from(g.url, "127.0.0.3") as s:
            assert read_until_closed(s).startswith(b"HTTP/1.1 503 ")
        # The held ones are served.
        s = held.pop()
        s.sendall(f"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
                  "Authorization: Bearer sk-one\r\n"
                  "Connection: close\r\n\r\n".encode())
        assert read_until_closed(s).startswith(b"HTTP/1.1 200 ")
        s.close()
    finally:
        for s in held:
            s.close()
    # Closed ones make room again.
    wait_for(lambda: requests.get(
        g.url + "/v1/models", timeout=10,
        headers={"Authorization": "Bearer sk-one"}).status_code == 200,
        what="a connection slot")


def test_out_of_descriptors_does_not_spin(home, gateways, upstreams):
    g = one_chat(home, gateways, upstreams)
    resource.prlimit(g.proc.pid, resource.RLIMIT_NOFILE, (64, 64))

    def log_lines():
        return [line for line in g.log.read_text().splitlines()
                if not line.startswith("{")]
    before = len(log_lines())
    conns = []
    try:
        for _ in range(100):
            conns.append(connect(g.url, timeout=5))
        time.sleep(1.5)  # past the limit all the while
        cpu_before = Path(f"/proc/{g.proc.pid}/stat").read_text().split()
        time.sleep(1.0)
        cpu_after = Path(f"/proc/{g.proc.pid}/stat").read_text().split()
    finally:
        for s in conns:
            s.close()
    # utime + stime in clock ticks (100 a second): well under a busy loop.
    ticks = (int(cpu_after[13]) + int(cpu_after[14]) -
             int(cpu_before[13]) - int(cpu_before[14]))
    assert ticks < 50, ticks
    added = log_lines()[before:]
    assert 1 <= len(added) <= 6, added
    assert any("cannot accept connections" in line for line in added)
    wait_for(lambda: requests.get(
        g.url + "/v1/models", timeout=10,
        headers={"Authorization": "Bearer sk-one"}).status_code == 200,
        what="the gateway answering again")
