"""The API's contract, checked on every answer the e2e tests get: each
answer a kiln server gives (through requests, to a URL conftest's Server
registered with watch()) is validated against the OpenAPI document the
binary under test describes (`kiln openapi`): the documented schema of
its operation and status, else the Error shape. Violations are collected
and reported at the end of the session, which then fails.

Streams (stream=True) are not read here: that would take their bytes
from the test. An ndjson answer is checked line by line; other bodies
that are not JSON are checked for their documented content type only."""
import json
import re
import subprocess
import threading
from urllib.parse import urlsplit

import requests
from jsonschema import Draft202012Validator, RefResolver

_lock = threading.Lock()
_bases = set()
_state = {"doc": None, "ops": None, "checked": 0}
# Per thread: one resolver for the document, and a validator per schema.
_local = threading.local()
VIOLATIONS = {}  # (method, path template, status, problem) -> example URL


def watch(base_url):
    """Check every later answer from this kiln server."""
    with _lock:
        _bases.add(base_url.rstrip("/"))


def unwatch(base_url):
    """The server stopped: its port may next serve something else (a
    gateway, a model server) whose answers are not the API's."""
    with _lock:
        _bases.discard(base_url.rstrip("/"))


def _load(kiln):
    if _state["doc"] is None:
        out = subprocess.run([kiln, "openapi"], capture_output=True,
                             text=True, check=True, timeout=30).stdout
        doc = json.loads(out)
        ops = []
        for template, item in doc["paths"].items():
            pattern = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+",
                                   re.escape(template)) + "$"
            ops.append((template.count("{"), template, re.compile(pattern),
                        item))
        ops.sort(key=lambda o: o[0])  # a literal segment wins, as in api.c
        _state["doc"], _state["ops"] = doc, ops
    return _state["doc"], _state["ops"]


def _validator(schema):
    """The validator of schema (an object of the loaded document), made
    once per thread. A resolver finds a reference's target by searching
    the whole document once and keeping what it found, so one is kept
    rather than made for each answer, which searched again every time.
    Not shared between threads: a resolver keeps a stack of scopes while
    it validates."""
    if getattr(_local, "doc", None) is not _state["doc"]:
        _local.doc = _state["doc"]
        _local.resolver = RefResolver("", _state["doc"])
        _local.validators = {}
    validator = _local.validators.get(id(schema))
    if validator is None:
        validator = Draft202012Validator(schema, resolver=_local.resolver)
        _local.validators[id(schema)] = validator
    return validator


def _schema_of(responses, status):
    answer = responses.get(str(status)) or responses.get("default") or {}
    return answer.get("content", {})


def _problem(content, response):
    """What is wrong with response against the documented content, or
    None."""
    ctype = response.headers.get("Content-Type", "").split(";")[0].strip()
    if not content:
        return None
    if ctype not in content:
        return f"content type {ctype!r}, documented {sorted(content)}"
    if ctype not in ("application/json", "application/x-ndjson"):
        return None
    try:
        bodies = ([json.loads(response.content)] if ctype == "application/json"
                  else [json.loads(line) for line in
                        response.content.splitlines() if line.strip()])
    except ValueError as e:
        return f"not JSON: {e}"
    validator = _validator(content[ctype]["schema"])
    for body in bodies:  # an ndjson answer's schema is each line's
        error = next(iter(sorted(validator.iter_errors(body),
                                 key=lambda e: list(e.path))), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            return f"{where or '(the body)'}: {error.message[:200]}"
    return None


def _is_console(path):
    """The web console's page and files: served beside the API, not part
    of it (docs/console.md)."""
    return path == "/" or path.startswith("/ui/")


def answer_problem(kiln, method, response):
    """(the path template, what breaks the document in one answer or
    None); (None, None) for the console's files."""
    path = urlsplit(response.url).path
    if _is_console(path):
        return None, None
    _, ops = _load(kiln)
    for _, template, pattern, item in ops:
        if pattern.match(path) and method.lower() in item:
            responses = item[method.lower()]["responses"]
            break
    else:
        template, responses = "(no route)", {}
        if response.status_code < 400:
            return template, ("an answer from a route the document does "
                              "not have")
        responses = {"default": {"content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Error"}}}}}
    return template, _problem(_schema_of(responses, response.status_code),
                              response)


def check(kiln, method, response):
    """Validate one answer; a problem is recorded, never raised, so a
    test's own assertions are what it sees."""
    template, problem = answer_problem(kiln, method, response)
    if template is None:
        return
    _state["checked"] += 1
    if problem:
        _record(method, template, response.status_code, problem,
                response.url)


def _record(method, template, status, problem, url):
    with _lock:
        VIOLATIONS.setdefault((method, template, status, problem), url)


def install(kiln):
    """Wrap requests' send so that answers from watched servers are
    checked."""
    send = requests.Session.send

    def checked_send(self, request, **kw):
        response = send(self, request, **kw)
        if not kw.get("stream") and any(
                request.url.startswith(b + "/") for b in _bases):
            try:
                check(kiln, request.method, response)
            except Exception as e:  # the check's own failure, not the test's
                _record(request.method, "(check)", response.status_code,
                        f"could not be checked: {e!r}", request.url)
        return response

    requests.Session.send = checked_send


def violations():
    """The violations as plain lists, which pass between processes."""
    with _lock:
        return [[list(key), url] for key, url in VIOLATIONS.items()]


def merge(found):
    """Adds what violations() returned in another process."""
    for key, url in found:
        _record(*key, url)


def report(session):
    """At the session's end: list the violations and fail the run."""
    if not VIOLATIONS:
        return
    lines = [f"{len(VIOLATIONS)} API answers break the OpenAPI document "
             f"(kiln openapi; src/server/openapi_*.c):"]
    for (method, template, status, problem), url in sorted(
            VIOLATIONS.items()):
        lines.append(f"  {method} {template} {status}: {problem}  [{url}]")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line("\n" + "\n".join(lines), red=True)
    session.exitstatus = 1
