"""kiln gateway end to end: a real gateway in front of small Python model
servers (threaded http.server answering OpenAI-shaped JSON with usage,
streaming SSE on demand, killable), with its routes from a --routes file or
from a stand-in for the server's GET /v1/gateway/config."""
import hashlib
import http.server
import json
import os
import signal
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pytest
import requests

from conftest import KILN, START_POLL_S, wait_for

TOKENS_PER_ANSWER = 10


class Upstream:
    """An OpenAI-compatible model server on a loopback port. Every answer
    reports usage.total_tokens = TOKENS_PER_ANSWER. With stream: true it
    sends one SSE chunk, waits for release (a threading.Event) and then
    sends the rest, the last data chunk carrying usage. hold makes it wait
    for release before answering anything."""

    def __init__(self, name, port=0, http10=False, lengths=None):
        self.name = name
        self.port = port
        self.http10 = http10
        # Content-Length fields to send as they are, in place of the
        # answer's true length (a replica that frames its answer wrong).
        self.lengths = lengths
        self.release = threading.Event()
        self.hold = False
        self.calls = 0
        self.server = None
        self.conns = set()
        self.lock = threading.Lock()

    def start(self):
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0" if self.http10 else "HTTP/1.1"

            def setup(self):
                super().setup()
                with upstream.lock:
                    upstream.conns.add(self.connection)

            def finish(self):
                with upstream.lock:
                    upstream.conns.discard(self.connection)
                super().finish()

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(
                    int(self.headers["Content-Length"])))
                with upstream.lock:
                    upstream.calls += 1
                if upstream.hold:
                    upstream.release.wait(30)
                usage = {"prompt_tokens": 4, "completion_tokens": 6,
                         "total_tokens": TOKENS_PER_ANSWER}
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()

                    def chunk(data):
                        raw = f"data: {json.dumps(data)}\n\n".encode() \
                            if not isinstance(data, str) else data.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                        self.wfile.flush()
                    chunk({"served_by": upstream.name,
                           "choices": [{"delta": {"content": "first"}}]})
                    upstream.release.wait(30)
                    chunk({"choices": [{"delta": {"content": " last"}}],
                           "usage": usage})
                    chunk("data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return
                answer = json.dumps({
                    "object": "chat.completion", "model": body.get("model"),
                    "served_by": upstream.name, "path": self.path,
                    "choices": [{"message": {"role": "assistant",
                                             "content": "hi"}}],
                    "usage": usage}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("x-kiln-score", "0.5")
                if upstream.lengths is not None:
                    for value in upstream.lengths:
                        self.send_header("Content-Length", value)
                elif not upstream.http10:  # 1.0: the body ends at the close
                    self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def kill(self):
        """Stop listening and cut every open connection, kept-alive ones
        included, as a dying process would."""
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            for c in list(self.conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"


def key_hash(secret):
    return hashlib.sha256(secret.encode()).hexdigest()


# Every route table here has a key for reading /metrics, which the
# gateway shows only to a caller with a key; it reaches no deployment.
METRICS_KEY = "sk-metrics"


def routes(deployments, keys, generation=1):
    return {"generation": generation, "deployments": deployments,
            "keys": keys + [key("metrics", METRICS_KEY, [])]}


def deployment(name, upstreams, fallback=None, rpm=0, tpm=0):
    return {"name": name, "model": f"/models/{name}", "fallback": fallback,
            "limits": {"rpm": rpm, "tpm": tpm},
            "replicas": [{"replica": i, "address": u.address,
                          "zone": "zone-1", "ready": True}
                         for i, u in enumerate(upstreams)]}


def key(name, secret, deployments, **limits):
    return dict({"name": name, "hash": key_hash(secret),
                 "deployments": deployments, "rpm": 0, "tpm": 0,
                 "quota_day": 0, "quota_month": 0}, **limits)


class Gateway:
    def __init__(self, home, args):
        self.home = Path(home)
        self.args = list(args)
        self.proc = None
        self.url = None
        self.log = self.home / "gateway.log"
        self.metrics_key = METRICS_KEY

    def start(self):
        url_file = self.home / "gateway" / "gateway.url"
        if url_file.exists():
            url_file.unlink()
        env = dict(os.environ, KILN_HOME=str(self.home))
        env.pop("KILN_SERVER", None)
        env.pop("KILN_TOKEN", None)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [KILN, "gateway", "--listen", "127.0.0.1:0", *self.args],
                env=env, stdout=log, stderr=log)
        wait_for(lambda: url_file.exists() and url_file.read_text().strip()
                 or self.proc.poll() is not None, interval=START_POLL_S,
                 what="gateway.url")
        assert self.proc.poll() is None, self.log.read_text()
        self.url = url_file.read_text().strip()
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(timeout=10)
            assert rc == 0, f"gateway exited {rc}:\n" + \
                self.log.read_text()[-4000:]

    def call(self, secret, model, path="/v1/chat/completions", **kw):
        body = kw.pop("json", {"model": model, "messages": [
            {"role": "user", "content": "hello"}]})
        headers = kw.pop("headers", {})
        if secret is not None:
            headers["Authorization"] = f"Bearer {secret}"
        return requests.post(self.url + path, json=body, headers=headers,
                             timeout=30, **kw)

    def metric(self, name, **labels):
        r = requests.get(self.url + "/metrics", timeout=10, headers={
            "Authorization": f"Bearer {self.metrics_key}"})
        assert r.status_code == 200, r.text
        text = r.text
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for line in text.splitlines():
            if line.startswith(f"{name}{{{want}}} "):
                return float(line.split()[-1])
        return 0.0

    def access_lines(self):
        return [json.loads(line) for line in self.log.read_text().splitlines()
                if line.startswith("{")]


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def gateways():
    started = []

    def start(home, routes_doc=None, args=()):
        extra = list(args)
        if routes_doc is not None:
            path = Path(home) / "routes-file.json"
            path.write_text(json.dumps(routes_doc))
            extra = ["--routes", str(path)] + extra
        g = Gateway(home, extra).start()
        started.append(g)
        return g
    yield start
    for g in started:
        g.stop()


@pytest.fixture
def upstreams():
    made = []

    def make(name, port=0, http10=False, lengths=None):
        u = Upstream(name, port, http10, lengths).start()
        made.append(u)
        return u
    yield make
    for u in made:
        u.release.set()
        if u.server:
            try:
                u.kill()
            except OSError:
                pass


def openai_error(r, status, code=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["message"]
    if code:
        assert err["code"] == code, err
    return err


def test_keys_reach_only_their_deployments(home, gateways, upstreams):
    chat, embed = upstreams("chat"), upstreams("embed")
    g = gateways(home, routes(
        [deployment("chat", [chat]), deployment("embed", [embed])],
        [key("app1", "sk-one", ["chat"]), key("app2", "sk-two", ["embed"])]))

    r = g.call("sk-one", "chat")
    assert r.status_code == 200, r.text
    assert r.json()["served_by"] == "chat"
    assert r.json()["path"] == "/v1/chat/completions"
    assert r.headers["x-kiln-score"] == "0.5"
    r = g.call("sk-two", "embed", path="/v1/embeddings",
               json={"model": "embed", "input": "x"})
    assert r.status_code == 200 and r.json()["path"] == "/v1/embeddings"

    # A key does not reach another key's deployment, nor unknown ones.
    openai_error(g.call("sk-one", "embed"), 404, "model_not_found")
    openai_error(g.call("sk-two", "chat"), 404, "model_not_found")
    openai_error(g.call("sk-one", "nope"), 404, "model_not_found")
    openai_error(g.call(None, "chat"), 401, "invalid_api_key")
    openai_error(g.call("sk-three", "chat"), 401, "invalid_api_key")

    models = requests.get(g.url + "/v1/models", timeout=10,
                          headers={"Authorization": "Bearer sk-one"}).json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["chat"]
    assert models["data"][0]["object"] == "model"
    openai_error(requests.get(g.url + "/v1/models", timeout=10), 401)

    assert chat.calls == 1 and embed.calls == 1
    assert g.metric("kiln_gateway_requests_total", deployment="chat",
                    code="200") == 1
    assert g.metric("kiln_gateway_tokens_total", deployment="chat") == \
        TOKENS_PER_ANSWER
    line = [a for a in g.access_lines() if a["status"] == 200][0]
    assert line["key"] == "app1" and line["deployment"] == "chat"
    assert line["replica"] == chat.address and line["tokens"] == 10
    assert line["output_tokens"] == 6 and line["score"] == 0.5
    assert line["latency_ms"] >= 0


def test_bad_requests_get_clean_4xx(home, gateways, upstreams):
    chat = upstreams("chat")
    g = gateways(home, routes([deployment("chat", [chat])],
                              [key("app1", "sk-one", ["chat"])]),
                 args=["--max-body", "64Ki"])
    auth = {"Authorization": "Bearer sk-one",
            "Content-Type": "application/json"}
    url = g.url + "/v1/chat/completions"

    err = openai_error(requests.post(url, data=b"{\"model\": \"chat\",",
                                     headers=auth, timeout=10), 400,
                       "invalid_json")
    assert "not valid JSON" in err["message"]
    assert "1:18" in err["message"]  # line:column where it is cut
    openai_error(requests.post(url, data=b"[1, 2]", headers=auth, timeout=10),
                 400, "invalid_json")
    openai_error(requests.post(url, data=b'{"model": "chat"} x', headers=auth,
                               timeout=10), 400, "invalid_json")
    err = openai_error(requests.post(url, data=b'{"model": 7}', headers=auth,
                                     timeout=10), 400, "missing_model")
    assert err["param"] == "model"
    # The body's top-level "model", unescaped, last one counting; a nested
    # "model" is not it.
    raw = (b'{"messages": [{"model": "nope"}], "model": "nope",\n'
           b' "mod\\u0065l": "ch\\u0061t"}')
    assert requests.post(url, data=raw, headers=auth,
                         timeout=10).status_code == 200
    assert chat.calls == 1
    err = openai_error(requests.post(url, data=b'{"model": "ch\\"at"}',
                                     headers=auth, timeout=10), 404,
                       "model_not_found")
    assert "ch\"at" in err["message"]
    err = openai_error(g.call("sk-one", None, json={"messages": []}), 400)
    assert err["param"] == "model"
    big = json.dumps({"model": "chat", "pad": "x" * (65 * 1024)})
    openai_error(requests.post(url, data=big, headers=auth, timeout=10), 413,
                 "request_too_large")
    r = requests.post(url, data=b"{}", timeout=10,
                      headers=dict(auth, **{"X-Pad": "y" * (64 * 1024)}))
    openai_error(r, 431, "headers_too_large")
    openai_error(requests.get(url, headers=auth, timeout=10), 405)
    openai_error(requests.get(g.url + "/v2/nothing", timeout=10), 404)
    assert chat.calls == 1
    # The gateway still answers after all that.
    assert g.call("sk-one", "chat").status_code == 200


def raw_exchange(url, data, until=b"", timeout=10):
    """Send bytes on one connection; read until the peer closes or the
    answer holds until."""
    host, port = url[len("http://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        while not (until and until in got):
            piece = s.recv(65536)
            if not piece:
                break
            got += piece
        return got


def test_http_details_on_the_wire(home, gateways, upstreams):
    chat = upstreams("chat")
    g = gateways(home, routes([deployment("chat", [chat])],
                              [key("app1", "sk-one", ["chat"])]))
    body = json.dumps({"model": "chat", "messages": []}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
           b"Authorization: Bearer sk-one\r\nContent-Length: %d\r\n\r\n%s"
           % (len(body), body))

    # Two requests in one write: two answers, in order, on one connection.
    got = raw_exchange(g.url, req + req.replace(b"HTTP/1.1\r\n",
                                                b"HTTP/1.1\r\nConnection: "
                                                b"close\r\n", 1))
    assert got.count(b"HTTP/1.1 200 OK") == 2
    assert got.count(b'"served_by": "chat"') == 2
    assert b"Connection: close" in got

    # HTTP/1.0 without keep-alive: one answer, then the gateway closes.
    got = raw_exchange(g.url, req.replace(b"HTTP/1.1", b"HTTP/1.0", 1))
    assert got.startswith(b"HTTP/1.1 200 OK") and b"served_by" in got

    # Expect: 100-continue is answered before the body is sent.
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer sk-one\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body))
    host, port = g.url[len("http://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head)
        assert s.recv(64).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        got = b""
        while piece := s.recv(65536):
            got += piece
    assert b"HTTP/1.1 200 OK" in got

    # A request trickling in a few bytes a write: the end of its head
    # ("\r\n\r\n") is found across reads, the body after it.
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        closing = req.replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: "
                              b"close\r\n", 1)
        for i in range(0, len(closing), 3):
            s.sendall(closing[i:i + 3])
        got = b""
        while piece := s.recv(65536):
            got += piece
    assert got.startswith(b"HTTP/1.1 200 OK") and b"served_by" in got

    # Chunked request bodies are refused cleanly.
    got = raw_exchange(g.url, b"POST /v1/chat/completions HTTP/1.1\r\n"
                       b"Host: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"2\r\n{}\r\n0\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 411 ")
    # Not HTTP at all.
    assert raw_exchange(g.url, b"HELLO\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert chat.calls == 5


def test_a_client_leaving_mid_stream_harms_nothing(home, gateways, upstreams):
    chat = upstreams("chat")
    g = gateways(home, routes([deployment("chat", [chat])],
                              [key("app1", "sk-one", ["chat"])]))
    body = json.dumps({"model": "chat", "stream": True}).encode()
    got = raw_exchange(g.url, b"POST /v1/chat/completions HTTP/1.1\r\n"
                       b"Host: x\r\nAuthorization: Bearer sk-one\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body),
                       until=b"first")
    assert b"first" in got  # and the connection is closed here
    chat.release.set()
    wait_for(lambda: any(a.get("status") == 200 for a in g.access_lines()),
             what="the abandoned stream logged")
    assert g.call("sk-one", "chat").json()["served_by"] == "chat"


def test_a_stream_the_model_server_breaks_off_reaches_the_client_broken(
        home, gateways, upstreams):
    """The upstream dies after its first chunk: the client gets that chunk
    and then the connection closes without chunked encoding's last chunk,
    so no client mistakes the cut answer for a whole one."""
    chat = upstreams("chat")
    g = gateways(home, routes([deployment("chat", [chat])],
                              [key("app1", "sk-one", ["chat"])]))
    body = json.dumps({"model": "chat", "stream": True}).encode()
    host, port = g.url[len("http://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Authorization: Bearer sk-one\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while b"first" not in got:
            got += s.recv(65536)
        chat.kill()
        while True:
            piece = s.recv(65536)
            if not piece:
                break
            got += piece
    assert b"Transfer-Encoding: chunked" in got
    assert not got.endswith(b"0\r\n\r\n") and b"[DONE]" not in got
    line = wait_for(lambda: [a for a in g.access_lines() if a.get("status")],
                    what="the broken stream logged")[-1]
    assert line["deployment"] == "chat"


def test_rate_limits_and_quotas_count_exactly(home, gateways, upstreams):
    chat = upstreams("chat")
    g = gateways(home, routes(
        [deployment("chat", [chat])],
        [key("limited", "sk-rpm", ["chat"], rpm=3),
         key("quota", "sk-quota", ["chat"], quota_day=25),
         key("free", "sk-free", ["chat"])]),
        # Two workers share the counters: each new connection may land
        # on either listener.
        args=["--workers", "2"])

    remaining = []
    for _ in range(3):
        r = g.call("sk-rpm", "chat")
        assert r.status_code == 200, r.text
        assert r.headers["x-ratelimit-limit-requests"] == "3"
        remaining.append(r.headers["x-ratelimit-remaining-requests"])
    assert remaining == ["2", "1", "0"]
    r = g.call("sk-rpm", "chat")
    err = openai_error(r, 429, "rate_limit_exceeded")
    assert int(r.headers["Retry-After"]) >= 1
    assert r.headers["x-ratelimit-limit-requests"] == "3"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert "rpm" in err["message"]

    # Quotas count tokens: 10 per answer against 25 a day lets 3 through.
    for _ in range(3):
        assert g.call("sk-quota", "chat").status_code == 200
    r = g.call("sk-quota", "chat")
    openai_error(r, 429, "insufficient_quota")
    assert 1 <= int(r.headers["Retry-After"]) <= 86400

    # Other keys are not touched by those limits.
    for _ in range(5):
        assert g.call("sk-free", "chat").status_code == 200
    assert chat.calls == 3 + 3 + 5
    assert g.metric("kiln_gateway_rate_limited_total", deployment="chat") == 2


def test_deployment_limits_are_shared_and_tpm_counts_usage(home, gateways,
                                                           upstreams):
    chat = upstreams("chat")
    g = gateways(home, routes([deployment("chat", [chat], tpm=25)],
                              [key("a", "sk-a", ["chat"]),
                               key("b", "sk-b", ["chat"])]))
    # 25 tokens a minute for the deployment: 25 -> 15 -> 5 -> -5.
    assert g.call("sk-a", "chat").headers["x-ratelimit-remaining-tokens"] == "15"
    assert g.call("sk-b", "chat").status_code == 200
    assert g.call("sk-a", "chat").status_code == 200
    r = g.call("sk-b", "chat")
    openai_error(r, 429, "rate_limit_exceeded")
    assert r.headers["x-ratelimit-remaining-tokens"] == "0"
    assert int(r.headers["Retry-After"]) >= 1


def test_counters_survive_a_restart(home, gateways, upstreams):
    chat = upstreams("chat")
    doc = routes([deployment("chat", [chat])],
                 [key("quota", "sk-quota", ["chat"], quota_day=25)])
    g = gateways(home, doc)
    assert g.call("sk-quota", "chat").status_code == 200
    assert g.call("sk-quota", "chat").status_code == 200
    g.stop()
    counters = home / "gateway" / "counters.json"
    assert stat.S_IMODE(counters.stat().st_mode) == 0o600
    g = gateways(home, doc)
    # 20 of 25 used before the restart: one more answer, then the quota.
    assert g.call("sk-quota", "chat").status_code == 200
    openai_error(g.call("sk-quota", "chat"), 429, "insufficient_quota")


def test_fallback_when_primary_is_down_and_back(home, gateways, upstreams):
    primary, second, small = upstreams("p0"), upstreams("p1"), \
        upstreams("small")
    g = gateways(home, routes(
        [deployment("chat", [primary, second], fallback="chat-small"),
         deployment("chat-small", [small])],
        [key("app1", "sk-one", ["chat"])]),
        args=["--breaker-failures", "2", "--breaker-cooldown", "100ms"])
    r = g.call("sk-one", "chat")
    assert r.status_code == 200 and "x-kiln-fallback" not in r.headers

    # Both primaries down: answered by the fallback, and said so.
    primary.kill()
    second.kill()
    for _ in range(4):
        r = g.call("sk-one", "chat")
        assert r.status_code == 200, r.text
        assert r.headers["x-kiln-fallback"] == "chat-small"
        assert r.json()["served_by"] == "small"
    assert g.metric("kiln_gateway_fallbacks_total", deployment="chat") == 4
    assert g.metric("kiln_gateway_upstream_errors_total",
                    deployment="chat") >= 2

    # One comes back on its port: traffic returns to the primary.
    back = upstreams("p0-again", port=primary.port)
    r = wait_for(lambda: (lambda r: r if "x-kiln-fallback" not in r.headers
                          else None)(g.call("sk-one", "chat")),
                 what="traffic back on the primary")
    assert r.json()["served_by"] == "p0-again"
    assert back.calls >= 1


def test_an_http10_upstream_without_length_is_read_to_its_close(
        home, gateways, upstreams):
    old = upstreams("old", http10=True)
    g = gateways(home, routes([deployment("chat", [old])],
                              [key("app1", "sk-one", ["chat"])]))
    for i in range(3):
        r = g.call("sk-one", "chat")
        assert r.status_code == 200, r.text
        assert r.json()["served_by"] == "old"
    assert g.metric("kiln_gateway_tokens_total", deployment="chat") == \
        3 * TOKENS_PER_ANSWER


@pytest.mark.parametrize("lengths", [["-5"], ["12abc"], ["+12"], ["1e3"],
                                     ["12, 12"], ["12", "12"],
                                     ["99999999999999999999"], [""]])
def test_an_answer_framed_two_ways_is_refused(home, gateways, upstreams,
                                              lengths):
    """A replica runs a user's code: a Content-Length that is not one run
    of digits, or that comes twice, could make the gateway read the
    answer's end where the replica did not put it (and the next answer on
    that connection from the body of this one). The gateway refuses it."""
    bad = upstreams("bad", lengths=lengths)
    g = gateways(home, routes([deployment("chat", [bad])],
                              [key("app1", "sk-one", ["chat"])]))
    openai_error(g.call("sk-one", "chat"), 502)


def test_one_dead_replica_is_retried_on_another(home, gateways, upstreams):
    dead, alive = upstreams("dead"), upstreams("alive")
    g = gateways(home, routes([deployment("chat", [dead, alive])],
                              [key("app1", "sk-one", ["chat"])]))
    dead.kill()
    for _ in range(4):
        r = g.call("sk-one", "chat")
        assert r.status_code == 200, r.text
        assert r.json()["served_by"] == "alive"
        assert "x-kiln-fallback" not in r.headers


def test_replicas_in_the_gateways_zone_come_first(home, gateways, upstreams):
    near, far = upstreams("near"), upstreams("far")
    dep = deployment("chat", [far, near])
    dep["replicas"][0]["zone"] = "zone-1"
    dep["replicas"][1]["zone"] = "zone-2"
    g = gateways(home, routes([dep], [key("app1", "sk-one", ["chat"])]),
                 args=["--zone", "zone-2"])
    for _ in range(4):
        assert g.call("sk-one", "chat").json()["served_by"] == "near"
    # Without its zone's replica the other zone serves.
    near.kill()
    assert g.call("sk-one", "chat").json()["served_by"] == "far"
    assert far.calls == 1


def test_no_healthy_replica_and_no_fallback_is_503(home, gateways, upstreams):
    chat = upstreams("chat")
    dep = deployment("chat", [chat])
    dep["replicas"][0]["ready"] = False
    g = gateways(home, routes([dep], [key("app1", "sk-one", ["chat"])]))
    openai_error(g.call("sk-one", "chat"), 503, "no_healthy_replica")
    assert chat.calls == 0


def test_stream_arrives_incrementally(home, gateways, upstreams):
    chat = upstreams("chat")
    g = gateways(home, routes([deployment("chat", [chat])],
                              [key("app1", "sk-one", ["chat"],
                                   quota_day=15)]))
    r = g.call("sk-one", "chat", stream=True,
               json={"model": "chat", "stream": True, "messages": []})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    lines = r.iter_lines()
    first = next(line for line in lines if line)
    # The upstream is still waiting to send the rest: this chunk came
    # through on its own.
    assert not chat.release.is_set()
    assert json.loads(first[len(b"data: "):])["served_by"] == "chat"
    chat.release.set()
    rest = [line for line in lines if line]
    assert rest[-1] == b"data: [DONE]"
    # Usage from the final chunk is counted.
    wait_for(lambda: g.metric("kiln_gateway_tokens_total",
                              deployment="chat") == TOKENS_PER_ANSWER,
             what="streamed tokens counted")
    # ... against the quota too: 10 of 15 used, one more answer fits.
    assert g.call("sk-one", "chat").status_code == 200
    openai_error(g.call("sk-one", "chat"), 429, "insufficient_quota")


def test_upstream_timeout_is_504(home, gateways, upstreams):
    chat = upstreams("chat")
    chat.hold = True
    g = gateways(home, routes([deployment("chat", [chat])],
                              [key("app1", "sk-one", ["chat"])]),
                 args=["--upstream-timeout", "300ms"])
    openai_error(g.call("sk-one", "chat"), 504, "upstream_timeout")


class ConfigServer:
    """Stands in for the kiln server's GET /v1/gateway/config (built in
    parallel on another branch): the same document, behind a bearer
    token."""

    def __init__(self, token, doc):
        self.token = token
        self.doc = doc
        cfg = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.headers.get("Authorization") != f"Bearer {cfg.token}":
                    self.send_response(401)
                    self.end_headers()
                    return
                body = cfg.doc if isinstance(cfg.doc, bytes) else \
                    json.dumps(cfg.doc).encode()
                self.send_response(200 if self.path == "/v1/gateway/config"
                                   else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kill(self):
        self.server.shutdown()
        self.server.server_close()


def test_serves_the_saved_routes_while_the_server_is_down(home, gateways,
                                                          upstreams):
    chat, other = upstreams("chat"), upstreams("other")
    cfg = ConfigServer("admin-secret", routes(
        [deployment("chat", [chat])], [key("app1", "sk-one", ["chat"])]))
    args = ["--server", cfg.url, "--token", "admin-secret", "--refresh",
            "100ms"]
    g = gateways(home, args=args)
    assert g.call("sk-one", "chat").json()["served_by"] == "chat"
    saved = home / "gateway" / "routes.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads(saved.read_text())["generation"] == 1

    # A new table is picked up; a malformed one is ignored.
    cfg.doc = routes([deployment("chat", [other])],
                     [key("app1", "sk-one", ["chat"])], generation=2)
    wait_for(lambda: g.call("sk-one", "chat").json()["served_by"] == "other",
             what="the new table")
    cfg.doc = b'{"generation": 3, "deployments": [{"name": 7}], "keys": []}'
    wait_for(lambda: "deployments[0].name" in g.log.read_text(),
             what="the bad table reported")
    assert g.call("sk-one", "chat").json()["served_by"] == "other"

    # The server goes away: the gateway serves on, and after a restart
    # from the copy on disk.
    cfg.kill()
    assert g.call("sk-one", "chat").status_code == 200
    g.stop()
    g = gateways(home, args=args)
    r = g.call("sk-one", "chat")
    assert r.status_code == 200 and r.json()["served_by"] == "other"
    assert "serving the saved routes" in g.log.read_text()


def test_bad_routes_file_is_refused_naming_the_field(home, upstreams):
    chat = upstreams("chat")
    doc = routes([deployment("chat", [chat], fallback="missing")], [])
    path = home / "r.json"
    path.write_text(json.dumps(doc))
    res = subprocess.run([KILN, "gateway", "--listen", "127.0.0.1:0",
                          "--routes", str(path)], capture_output=True,
                         text=True, timeout=30,
                         env=dict(os.environ, KILN_HOME=str(home)))
    assert res.returncode == 1
    assert "deployments[0].fallback" in res.stderr
    assert "missing" in res.stderr
