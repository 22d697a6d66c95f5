"""The example model server (examples/serve/serve.py) on its own, without a
kiln server: it serves the model that examples/train/train.py wrote (a
5-step run of the tiny test configuration, about a second), in OpenAI's
shapes, streamed and not, with usage counts and an x-kiln-score header."""
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import requests

from conftest import wait_for

PYTHON = "/usr/bin/python3"
ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train" / "train.py"
SERVE = ROOT / "examples" / "serve" / "serve.py"
TINY = ["--steps", "5", "--checkpoint-every", "100", "--batch", "4",
        "--context", "32", "--dim", "32", "--layers", "1", "--heads", "2"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("trained")
    out = base / "outputs"
    r = subprocess.run([PYTHON, str(TRAIN), *TINY], cwd=base, timeout=60,
                       env=clean_env(KILN_OUTPUT_DIR=str(out),
                                     KILN_CHECKPOINT_DIR=str(base / "ckpt")),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


class ModelServer:
    def __init__(self, model_dir, log_path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [PYTHON, str(SERVE)], stdout=log, stderr=subprocess.STDOUT,
                env=clean_env(KILN_PORT=str(self.port),
                              KILN_MODEL_DIR=str(model_dir)))

    def ready(self):
        assert self.proc.poll() is None, self.log_path.read_text()
        try:
            return requests.get(self.url + "/health", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    srv = ModelServer(model_dir, tmp_path_factory.mktemp("serve") / "serve.log")
    try:
        wait_for(srv.ready, timeout=30, what="serve.py /health")
        yield srv
    finally:
        assert srv.stop() == 0, srv.log_path.read_text()


def vocab(model_dir):
    return json.loads((model_dir / "model.json").read_text())["vocab"]


def post(server, path, body):
    return requests.post(server.url + path, json=body, timeout=30)


def test_health_and_models(server):
    r = requests.get(server.url + "/health", timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "ready"
    models = requests.get(server.url + "/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["tiny-gpt"]


def test_completion_shape_usage_and_score(server, model_dir):
    prompt = "The licence \u00e9"  # the last character is not in the vocabulary
    r = post(server, "/v1/completions",
             {"model": "chat", "prompt": prompt, "max_tokens": 12, "seed": 7})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == "chat"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert len(choice["text"]) == 12
    assert set(choice["text"]) <= set(vocab(model_dir))
    prompt_tokens = sum(ch in vocab(model_dir) for ch in prompt)
    assert prompt_tokens == len(prompt) - 1
    assert body["usage"] == {"prompt_tokens": prompt_tokens,
                             "completion_tokens": 12,
                             "total_tokens": prompt_tokens + 12}
    score = float(r.headers["x-kiln-score"])
    assert score < 0  # a mean log probability

    # The same seed gives the same text; another seed, another one.
    again = post(server, "/v1/completions",
                 {"prompt": prompt, "max_tokens": 12, "seed": 7}).json()
    assert again["choices"][0]["text"] == choice["text"]
    other = post(server, "/v1/completions",
                 {"prompt": prompt, "max_tokens": 12, "seed": 8}).json()
    assert other["choices"][0]["text"] != choice["text"]


def test_stop_sequence_ends_early(server):
    greedy = post(server, "/v1/completions",
                  {"prompt": "GNU", "max_tokens": 30, "temperature": 0}).json()
    text = greedy["choices"][0]["text"]
    cut = text[5:7]  # two characters from the middle
    r = post(server, "/v1/completions", {"prompt": "GNU", "max_tokens": 30,
                                         "temperature": 0, "stop": [cut]}).json()
    assert r["choices"][0]["text"] == text[:text.index(cut)]
    assert r["choices"][0]["finish_reason"] == "stop"


def test_chat_completion(server):
    r = post(server, "/v1/chat/completions",
             {"model": "chat", "max_tokens": 5, "seed": 1,
              "messages": [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": "Hello"}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"]) == 5
    # "system: Be brief.\nuser: Hello\nassistant: " in vocabulary characters
    assert body["usage"]["prompt_tokens"] == len("system: Be brief.\nuser: Hello\nassistant: ")
    assert body["usage"]["completion_tokens"] == 5
    assert "x-kiln-score" in r.headers


def read_chunked(server, path, body):
    """The HTTP chunks of one streamed answer, as sent, over a raw socket."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
        f = s.makefile("rb")
        status = f.readline()
        headers = {}
        for line in iter(f.readline, b"\r\n"):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        chunks = []
        while True:
            size = int(f.readline().strip(), 16)
            chunk = f.read(size)
            assert f.read(2) == b"\r\n"
            if size == 0:
                break
            chunks.append(chunk)
    return status, headers, chunks


def events(chunks):
    out = []
    for chunk in chunks:
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n"), chunk
        out.append(chunk[6:-2].decode())
    return out


def test_streamed_completion_arrives_in_chunks(server):
    body = {"prompt": "Copyright", "max_tokens": 20, "seed": 3}
    reply = post(server, "/v1/completions", body)
    whole = reply.json()
    status, headers, chunks = read_chunked(server, "/v1/completions",
                                           dict(body, stream=True))
    assert b" 200 " in status
    assert headers["content-type"] == "text/event-stream"
    assert headers["transfer-encoding"] == "chunked"
    data = events(chunks)
    assert data[-1] == "[DONE]"
    parsed = [json.loads(d) for d in data[:-1]]
    pieces = [p["choices"][0]["text"] for p in parsed if p["choices"]
              and p["choices"][0]["finish_reason"] is None]
    # One chunk per token, and together the same text as unstreamed.
    assert len(pieces) == 20
    assert "".join(pieces) == whole["choices"][0]["text"]
    finals = [p for p in parsed if p["choices"] and p["choices"][0]["finish_reason"]]
    assert [f["choices"][0]["finish_reason"] for f in finals] == ["length"]
    assert parsed[-1]["choices"] == []
    assert parsed[-1]["usage"] == whole["usage"]
    # A header cannot follow a streamed body: the score rides in the last chunk.
    assert parsed[-1]["kiln_score"] == pytest.approx(
        float(reply.headers["x-kiln-score"]), abs=1e-5)


def test_streamed_chat_and_keep_alive(server):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
            "seed": 4, "stream": True}
    status, headers, chunks = read_chunked(server, "/v1/chat/completions", body)
    data = events(chunks)
    parsed = [json.loads(d) for d in data[:-1]]
    assert all(p["object"] == "chat.completion.chunk" for p in parsed)
    assert parsed[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [p["choices"][0]["delta"]["content"] for p in parsed[1:]
               if p["choices"] and "content" in p["choices"][0]["delta"]]
    assert len(content) == 6
    assert parsed[-1]["usage"]["completion_tokens"] == 6
    assert parsed[-1]["usage"]["prompt_tokens"] == len("user: hi\nassistant: ")

    # Answers keep the connection open: a pool of two requests uses one.
    with requests.Session() as s:
        for _ in range(2):
            r = s.post(server.url + "/v1/completions",
                       json={"prompt": "a", "max_tokens": 1}, timeout=10)
            assert r.status_code == 200
            assert r.headers.get("connection", "").lower() != "close"
        assert len(s.get_adapter(server.url).poolmanager.pools) == 1


@pytest.mark.parametrize("path,body,status,param", [
    ("/v1/completions", {"prompt": "a", "max_tokens": 100000}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": True}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("/v1/completions", {"prompt": "a", "temperature": 9}, 400, "temperature"),
    ("/v1/completions", {"prompt": "a", "n": 2}, 400, "n"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages[0]"),
    ("/v1/embeddings", {"input": "a"}, 404, None),
])
def test_bad_requests_get_openai_errors(server, path, body, status, param):
    r = post(server, path, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
    assert r.json()["error"]["message"]


def test_not_json_and_oversized(server):
    r = requests.post(server.url + "/v1/completions", data=b"{nope", timeout=10)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    # Refused on its Content-Length alone, before any of it is read.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % ((1 << 20) + 1))
        assert b" 413 " in s.makefile("rb").readline()


def test_missing_model_is_a_clear_error(tmp_path):
    srv = ModelServer(tmp_path, tmp_path / "serve.log")
    try:
        code = srv.proc.wait(timeout=30)
    finally:
        srv.stop()
    log = (tmp_path / "serve.log").read_text()
    assert code == 2, log
    assert f"cannot load the model: {tmp_path}/model.json" in log
