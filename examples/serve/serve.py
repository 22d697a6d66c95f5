"""An OpenAI-compatible server for the tiny GPT that examples/train/train.py
trains: POST /v1/completions and /v1/chat/completions (streamed or not),
GET /v1/models and GET /health.

It is kiln's example model server for a Deployment: kiln starts it with
KILN_PORT (where to listen) and KILN_MODEL_DIR (the training job's outputs:
final_weights.bin and model.json). It listens first and loads the model
after, so /health answers 503 while loading and 200 once the model is in
memory, which is what a readiness probe wants to see.

The model's definition is imported from examples/train/train.py, so the
server and the trainer cannot disagree about it. Tokens are characters of
the training vocabulary; characters outside it are dropped from prompts.

Every non-streamed answer carries an x-kiln-score header: the mean log
probability (natural log) the model gave the tokens it produced, which
kiln's gateway feeds to its anomaly detector. A streamed answer cannot
send a header after its body has begun, so its last data chunk (the one
with usage) carries the same number as "kiln_score".

Only the standard library and Debian's python3-torch; run it with
/usr/bin/python3.
"""
import argparse
import importlib.util
import json
import math
import os
import secrets
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

try:
    import torch
except ImportError as exc:
    sys.exit(f"serve.py: PyTorch is not importable ({exc}); install Debian's "
             "python3-torch (scripts/install-deps.sh) and run /usr/bin/python3")

HERE = Path(__file__).resolve().parent
TRAIN_PY = HERE.parent / "train" / "train.py"

# Bounds on what a client can ask for, so that one request cannot hold the
# server for minutes or make it buffer without limit.
MAX_BODY_BYTES = 1 << 20
MAX_TOKENS_LIMIT = 1024
DEFAULT_MAX_TOKENS = 16
MAX_STOP_SEQUENCES = 4


class BadRequest(Exception):
    """The client's request is wrong; the message names the field."""

    def __init__(self, message, param=None, status=400):
        super().__init__(message)
        self.param = param
        self.status = status


def load_train_module():
    spec = importlib.util.spec_from_file_location("tiny_gpt_train", TRAIN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Model:
    """The trained model and its vocabulary, ready to generate."""

    def __init__(self, model_dir, name):
        model_dir = Path(model_dir)
        card_path = model_dir / "model.json"
        weights_path = model_dir / "final_weights.bin"
        try:
            card = json.loads(card_path.read_text())
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"{card_path}: {exc}") from exc
        if card.get("architecture") != "tiny-gpt":
            raise RuntimeError(f"{card_path}: architecture is "
                               f"{card.get('architecture')!r}, not 'tiny-gpt'")
        for key in ("context", "dim", "layers", "heads"):
            if not isinstance(card.get(key), int) or card[key] < 1:
                raise RuntimeError(f"{card_path}: {key} must be a positive integer")
        if not isinstance(card.get("vocab"), str) or not card["vocab"]:
            raise RuntimeError(f"{card_path}: vocab must be a non-empty string")
        self.name = name
        self.vocab = card["vocab"]
        self.index = {ch: i for i, ch in enumerate(self.vocab)}
        self.context = card["context"]
        args = SimpleNamespace(dropout=0.0, **{k: card[k] for k in
                                               ("context", "dim", "layers", "heads")})
        self.net = load_train_module().TinyGPT(len(self.vocab), args)
        self.net.eval()
        self._load_weights(weights_path)

    def _load_weights(self, path):
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise RuntimeError(f"{path}: {exc}") from exc
        state = self.net.state_dict()
        want = sum(t.numel() for t in state.values()) * 4
        if len(raw) != want:
            raise RuntimeError(f"{path}: {len(raw)} bytes, but model.json "
                               f"describes {want} (float32 weights)")
        flat = torch.frombuffer(bytearray(raw), dtype=torch.float32)
        offset = 0
        for key, tensor in state.items():
            n = tensor.numel()
            state[key] = flat[offset:offset + n].view_as(tensor).clone()
            offset += n
        self.net.load_state_dict(state)

    def encode(self, text):
        return [self.index[ch] for ch in text if ch in self.index]

    def generate(self, prompt_ids, max_tokens, temperature, seed):
        """Yield (character, log probability) for each new token."""
        generator = torch.Generator()
        generator.manual_seed(seed if seed is not None else secrets.randbits(63))
        # An empty prompt still needs one token to condition on.
        ids = list(prompt_ids) or [self.index.get("\n", 0)]
        with torch.no_grad():
            for _ in range(max_tokens):
                window = torch.tensor([ids[-self.context:]])
                logits = self.net(window)[0, -1]
                logp = torch.log_softmax(logits, dim=-1)
                if temperature == 0:
                    token = int(torch.argmax(logits))
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                ids.append(token)
                yield self.vocab[token], float(logp[token])


# ------------------------------------------------------------ request shape

def field(body, name, kinds, default=None):
    value = body.get(name, default)
    if value is None:
        return default
    # bool is an int in Python, but true is no max_tokens.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise BadRequest(f"'{name}' must be {kinds[0].__name__}", name)
    return value


def sampling(body):
    max_tokens = field(body, "max_tokens", (int,), DEFAULT_MAX_TOKENS)
    if not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise BadRequest(f"'max_tokens' must be between 1 and {MAX_TOKENS_LIMIT}",
                         "max_tokens")
    temperature = float(field(body, "temperature", (int, float), 1.0))
    if not 0.0 <= temperature <= 2.0:
        raise BadRequest("'temperature' must be between 0 and 2", "temperature")
    seed = field(body, "seed", (int,))
    if field(body, "n", (int,), 1) != 1:
        raise BadRequest("only 'n': 1 is supported", "n")
    stop = field(body, "stop", (str, list), [])
    if isinstance(stop, str):
        stop = [stop]
    if len(stop) > MAX_STOP_SEQUENCES or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest(f"'stop' must be a string or up to {MAX_STOP_SEQUENCES} "
                         "non-empty strings", "stop")
    stream = field(body, "stream", (bool,), False)
    return SimpleNamespace(max_tokens=max_tokens, temperature=temperature,
                           seed=seed, stop=stop, stream=stream)


def completion_prompt(body):
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string (or a list of one string)",
                         "prompt")
    return prompt


def chat_prompt(body):
    """The conversation as the text the model continues: one "role: text"
    line per message, then "assistant: "."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", "messages")
    lines = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) \
                or not isinstance(m.get("content"), str):
            raise BadRequest(f"'messages[{i}]' must have string 'role' and "
                             "'content'", f"messages[{i}]")
        lines.append(f"{m['role']}: {m['content']}\n")
    return "".join(lines) + "assistant: "


def held_back(text, stops):
    """How many characters at the end of text could begin a stop sequence."""
    longest = max((len(s) - 1 for s in stops), default=0)
    for k in range(min(len(text), longest), 0, -1):
        if any(s.startswith(text[-k:]) for s in stops):
            return k
    return 0


class Generation:
    """One request's output as it is produced: the text, the token count,
    the score, and why it ended."""

    def __init__(self, model, prompt, opts):
        self.prompt_ids = model.encode(prompt)
        self.opts = opts
        self.tokens = 0
        self.logprob_sum = 0.0
        self.text = ""
        self.finish_reason = "length"
        self._steps = model.generate(self.prompt_ids, opts.max_tokens,
                                     opts.temperature, opts.seed)

    def pieces(self):
        """Yield the new text piece by piece; a stop sequence is held back
        until it can no longer be the start of one, and never sent."""
        held = ""
        for ch, logprob in self._steps:
            self.tokens += 1
            self.logprob_sum += logprob
            held += ch
            hit = min((held.find(s) for s in self.opts.stop if s in held),
                      default=-1)
            if hit >= 0:
                self.finish_reason = "stop"
                held = held[:hit]
                break
            keep = held_back(held, self.opts.stop)
            out, held = (held[:-keep], held[-keep:]) if keep else (held, "")
            if out:
                self.text += out
                yield out
        if held:
            self.text += held
            yield held

    def usage(self):
        return {"prompt_tokens": len(self.prompt_ids),
                "completion_tokens": self.tokens,
                "total_tokens": len(self.prompt_ids) + self.tokens}

    def score(self):
        return self.logprob_sum / self.tokens if self.tokens else 0.0


# ------------------------------------------------------------------- server

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the gateway pools connections
    server_version = "kiln-tiny-gpt/1"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            super().log_message(fmt, *args)

    # -- replies

    def send_json(self, status, obj, headers=()):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status, message, param=None, kind="invalid_request_error"):
        self.send_json(status, {"error": {"message": message, "type": kind,
                                          "param": param, "code": None}})

    def send_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def send_event(self, obj):
        self.send_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    # -- routes

    def do_GET(self):
        model = self.server.model
        if self.path == "/health":
            if model is None:
                self.send_json(503, {"status": "loading"})
            else:
                self.send_json(200, {"status": "ready", "model": model.name})
        elif self.path == "/v1/models":
            data = [] if model is None else [
                {"id": model.name, "object": "model", "created": self.server.started,
                 "owned_by": "kiln"}]
            self.send_json(200, {"object": "list", "data": data})
        else:
            self.send_error_json(404, f"no route for GET {self.path}", kind="not_found")

    def do_POST(self):
        routes = {"/v1/completions": self.completions,
                  "/v1/chat/completions": self.chat_completions}
        handler = routes.get(self.path)
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            self.send_error_json(411, "a Content-Length header is required")
            return
        if length > MAX_BODY_BYTES or length < 0:
            self.close_connection = True
            self.send_error_json(413, f"the body is over {MAX_BODY_BYTES} bytes")
            return
        raw = self.rfile.read(length)
        if handler is None:
            self.send_error_json(404, f"no route for POST {self.path}", kind="not_found")
            return
        if self.server.model is None:
            self.send_error_json(503, "the model is still loading", kind="unavailable")
            return
        try:
            body = json.loads(raw)
        except ValueError as exc:
            self.send_error_json(400, f"the body is not JSON: {exc}")
            return
        try:
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            handler(body)
        except BadRequest as exc:
            self.send_error_json(exc.status, str(exc), exc.param)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left mid-answer

    def completions(self, body):
        prompt = completion_prompt(body)
        self.answer(body, prompt, "cmpl", "text_completion",
                    lambda text, fin: {"text": text, "index": 0,
                                       "logprobs": None, "finish_reason": fin},
                    None)

    def chat_completions(self, body):
        prompt = chat_prompt(body)
        self.answer(body, prompt, "chatcmpl", "chat.completion",
                    lambda text, fin: {"index": 0,
                                       "message": {"role": "assistant", "content": text},
                                       "finish_reason": fin},
                    lambda text, fin: {"index": 0,
                                       "delta": {"content": text} if text is not None else {},
                                       "finish_reason": fin})

    def answer(self, body, prompt, id_prefix, obj, choice, chat_delta):
        opts = sampling(body)
        gen = Generation(self.server.model, prompt, opts)
        head = {"id": f"{id_prefix}-{secrets.token_hex(12)}",
                "created": int(time.time()),
                "model": body.get("model") if isinstance(body.get("model"), str)
                else self.server.model.name}
        if not opts.stream:
            for _ in gen.pieces():
                pass
            self.send_json(200, dict(head, object=obj,
                                     choices=[choice(gen.text, gen.finish_reason)],
                                     usage=gen.usage()),
                           [("x-kiln-score", f"{gen.score():.6f}")])
            return
        chunk_obj = obj + ".chunk" if chat_delta else obj
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if chat_delta:
            self.send_event(dict(head, object=chunk_obj, choices=[
                {"index": 0, "delta": {"role": "assistant", "content": ""},
                 "finish_reason": None}]))
        delta = chat_delta or (lambda text, fin: choice(text or "", fin))
        for piece in gen.pieces():
            self.send_event(dict(head, object=chunk_obj, choices=[delta(piece, None)]))
        self.send_event(dict(head, object=chunk_obj,
                             choices=[delta(None, gen.finish_reason)]))
        self.send_event(dict(head, object=chunk_obj, choices=[], usage=gen.usage(),
                             kiln_score=round(gen.score(), 6)))
        self.send_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, verbose):
        super().__init__(address, Handler)
        self.model = None
        self.verbose = verbose
        self.started = int(time.time())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1)")
    p.add_argument("--name", default=os.environ.get("KILN_DEPLOYMENT", "tiny-gpt"),
                   help="model name in answers and /v1/models "
                        "(default $KILN_DEPLOYMENT, else tiny-gpt)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    args = p.parse_args(argv)
    port_text, model_dir = os.environ.get("KILN_PORT"), os.environ.get("KILN_MODEL_DIR")
    if not port_text or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        print(f"serve.py: KILN_PORT must be a port number, got {port_text!r}",
              file=sys.stderr)
        return 2
    if not model_dir:
        print("serve.py: KILN_MODEL_DIR must name the training job's outputs "
              "directory", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)

    try:
        server = Server((args.host, int(port_text)), args.verbose)
    except OSError as exc:
        print(f"serve.py: cannot listen on {args.host}:{port_text}: {exc}",
              file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    status = 0
    try:
        server.model = Model(model_dir, args.name)
        params = sum(t.numel() for t in server.model.net.parameters())
        print(f"serve.py: {server.model.name} ({params} parameters) ready on "
              f"http://{args.host}:{port_text}", flush=True)
        stop.wait()
    except RuntimeError as exc:
        print(f"serve.py: cannot load the model: {exc}", file=sys.stderr)
        status = 2
    server.shutdown()
    server.server_close()
    return status


if __name__ == "__main__":
    sys.exit(main())
