"""kiln.Client: the HTTP API (docs/api.md, docs/openapi.json) as typed
Python calls. Every request has a timeout; creates the API makes
idempotent carry an Idempotency-Key and are sent again with the same key
when the connection fails, as reads are; errors raise KilnError
subclasses naming the API's code and field."""
import hashlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import (Any, Callable, Dict, Generator, Iterator, List, Mapping,
                    Optional, Tuple, TypeVar, Union)
from urllib.parse import quote, unquote, urlsplit

import requests

from .errors import (DigestMismatch, InvalidArgument, JobFailed, KilnError,
                     Unavailable, WorkflowFailed, from_answer)
from .objects import (Alert, AliasMove, Deployment, Event, Job, Key,
                      ModelSummary, ModelVersion, Node, Output, WorkflowRun)

Spec = Union[str, "os.PathLike[str]", Mapping[str, Any]]
Progress = Callable[[int, int], None]
PART_BYTES = 1 << 20  # the server's cap on one upload part


def _home() -> Path:
    return Path(os.environ.get("KILN_HOME") or Path.home() / ".kiln")


def _read_trimmed(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _copy_checked(src: Path, dest: Path, sha256: str, what: str) -> None:
    """Copy src to dest, hashing as it goes; DigestMismatch (and no
    dest) when the bytes do not hash to sha256."""
    h = hashlib.sha256()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as f, open(dest, "wb") as out:
        for block in iter(lambda: f.read(4 << 20), b""):
            h.update(block)
            out.write(block)
    if h.hexdigest() != sha256:
        dest.unlink()
        raise DigestMismatch(f"{what} hashes to {h.hexdigest()}, the "
                             f"server says {sha256}", field=what)


def _local_path(url: str, what: str) -> Path:
    parts = urlsplit(url)
    if parts.scheme != "file":
        raise InvalidArgument(f"{url}: only file:// stores are read by "
                              f"this client", field=what)
    return Path(unquote(parts.path))


class Client:
    """A kiln server. server and token default as the CLI's do:
    $KILN_SERVER, $KILN_TOKEN, then $KILN_HOME/server.url and
    admin.token (KILN_HOME defaults to ~/.kiln). timeout is each
    request's, in seconds; retries how many times a read or an
    idempotent create is sent again after a broken connection. An
    https:// server's certificate is verified against the system's CAs,
    or ca (a PEM file; default $KILN_CA); client_cert is a (cert, key)
    pair of PEM files to show (default $KILN_CLIENT_CERT and
    $KILN_CLIENT_KEY)."""

    def __init__(self, server: Optional[str] = None,
                 token: Optional[str] = None, timeout: float = 30.0,
                 retries: int = 2, ca: Optional[str] = None,
                 client_cert: Optional[Tuple[str, str]] = None) -> None:
        home = _home()
        found = (server or os.environ.get("KILN_SERVER") or
                 _read_trimmed(home / "server.url"))
        if not found:
            raise InvalidArgument("no server: pass server=, set KILN_SERVER "
                                  "or start one with `kiln server`",
                                  field="server")
        if not found.startswith(("http://", "https://")):
            raise InvalidArgument(f"{found}: must start with http:// or "
                                  f"https://", field="server")
        self.server = found.rstrip("/")
        self.token = (token or os.environ.get("KILN_TOKEN") or
                      _read_trimmed(home / "admin.token"))
        self.timeout = timeout
        self.retries = retries
        self.http = requests.Session()
        # Given with every request: requests lets $REQUESTS_CA_BUNDLE
        # override a session's own verify.
        self.verify: Union[bool, str] = ca or os.environ.get("KILN_CA") or True
        cert = os.environ.get("KILN_CLIENT_CERT")
        if client_cert is None and cert:
            client_cert = (cert, os.environ.get("KILN_CLIENT_KEY") or cert)
        if client_cert:
            self.http.cert = client_cert
        self.jobs = Jobs(self)
        self.deployments = Deployments(self)
        self.keys = Keys(self)
        self.models = Models(self)
        self.workflows = Workflows(self)

    # ---- transport ----

    def request(self, method: str, path: str, *,
                params: Optional[Mapping[str, Any]] = None,
                body: Any = None, data: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None,
                idempotent: bool = False, stream: bool = False,
                timeout: Any = None) -> requests.Response:
        """One call; raises the KilnError of an error answer. idempotent:
        a create that takes an Idempotency-Key (reads are retried
        anyway)."""
        headers = dict(headers or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if idempotent:
            headers["Idempotency-Key"] = uuid.uuid4().hex
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        tries = 1 + (self.retries if method == "GET" or idempotent else 0)
        for attempt in range(tries):
            try:
                r = self.http.request(
                    method, self.server + path, params=params, data=data,
                    headers=headers, stream=stream, verify=self.verify,
                    timeout=self.timeout if timeout is None else timeout)
                break
            except requests.exceptions.SSLError as e:
                # Not a broken connection: sending again changes nothing.
                raise Unavailable(f"{self.server}: {e} (the server's "
                                  f"certificate is not trusted or does "
                                  f"not name this host: pass ca= or set "
                                  f"KILN_CA to its CA's PEM file)",
                                  field="server") from e
            except (requests.ConnectionError, requests.Timeout) as e:
                if attempt + 1 == tries:
                    raise Unavailable(f"{self.server}: {e}",
                                      field="server") from e
                time.sleep(0.2 * (attempt + 1))
        if r.status_code >= 400:
            try:
                answer: Any = r.json()
            except ValueError:
                answer = r.text
            raise from_answer(r.status_code, answer)
        return r

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """request() and the answer's JSON."""
        return self.request(method, path, **kw).json()

    def _lines(self, path: str, params: Dict[str, Any],
               follow: bool) -> "Lines":
        """The answer's lines. The request is made here, not at the first
        line read, so a follower sees everything that happens after this
        call returns (a job submitted next, say)."""
        # A follower may wait long between lines: only connecting is
        # timed, and the server ends the stream.
        r = self.request("GET", path, params=params, stream=True,
                         timeout=(self.timeout, None) if follow else None)
        return _response_lines(r)

    # ---- the server ----

    def health(self) -> Dict[str, Any]:
        return dict(self.call("GET", "/healthz"))

    def whoami(self) -> Dict[str, Any]:
        return dict(self.call("GET", "/v1/whoami"))

    def openapi(self) -> Dict[str, Any]:
        return dict(self.call("GET", "/v1/openapi.json"))

    def nodes(self) -> List[Node]:
        return [Node.from_json(n) for n in self.call("GET", "/v1/nodes")["nodes"]]

    def alerts(self, all: bool = False) -> List[Alert]:
        answer = self.call("GET", "/v1/alerts",
                           params={"all": 1} if all else None)
        return [Alert.from_json(a) for a in answer["alerts"]]

    def events(self, since: int = 0, follow: bool = False) -> Iterator[Event]:
        """The event log after seq `since`; with follow, a live stream
        that ends only when the server closes it."""
        params = {"since": since, "follow": int(follow)}
        return _events_of(self._lines("/v1/events", params, follow))

    def cost(self, by: str = "job", since_ms: Optional[int] = None,
             until_ms: Optional[int] = None,
             report: Optional[str] = None) -> Dict[str, Any]:
        """What GPU time cost by job, user, deployment, node or day; or
        with report="reservations" or "rightsize" that report
        (docs/cost.md)."""
        params: Dict[str, Any] = {} if report else {"by": by}
        if since_ms is not None:
            params["since"] = since_ms
        if until_ms is not None:
            params["until"] = until_ms
        path = f"/v1/cost/{quote(report)}" if report else "/v1/cost"
        return dict(self.call("GET", path, params=params))


Lines = Generator[str, None, None]


def _response_lines(r: requests.Response) -> Lines:
    pending = b""
    try:
        for chunk in r.iter_content(chunk_size=None):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode(errors="replace")
        if pending:
            yield pending.decode(errors="replace")
    finally:
        r.close()


def _events_of(lines: Lines) -> Iterator[Event]:
    try:
        for line in lines:
            if line.strip():
                yield Event.from_json(json.loads(line))
    finally:
        lines.close()


def _spec_body(spec: Spec) -> Tuple[bytes, Dict[str, str]]:
    """A spec (text, a file's path or a dict) as the body and query of a
    create: file= names it in messages, path= anchors relative paths."""
    if isinstance(spec, Mapping):
        return json.dumps(dict(spec)).encode(), {}
    if isinstance(spec, os.PathLike) or (
            "\n" not in spec and os.path.isfile(spec)):
        path = Path(spec).resolve()
        return path.read_bytes(), {"file": path.name, "path": str(path)}
    return str(spec).encode(), {}


Ended = TypeVar("Ended", Job, WorkflowRun)


def _poll(get: Callable[[], Ended], timeout: Optional[float],
          interval: float, what: str) -> Ended:
    """get() until what it returns is done; TimeoutError after timeout
    seconds (None: no limit)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        obj = get()
        if obj.done:
            return obj
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{what} still {obj.state} after {timeout}s")
        time.sleep(interval)


class Jobs:
    def __init__(self, client: Client) -> None:
        self.c = client

    def submit(self, spec: Spec, hold: bool = False,
               **overrides: Any) -> Job:
        """Submit a job: YAML or JSON text, a spec file's path, or a
        dict. overrides are the server's submit-time ones (name=, env=,
        gpus=, tasks=, priority=, preemptible=), checked as the same
        fields of the file. hold queues a job no node could ever hold
        (else Conflict)."""
        data, params = _spec_body(spec)
        if overrides:
            params["overrides"] = json.dumps(overrides)
        if hold:
            params["hold"] = "1"
        answer = self.c.call("POST", "/v1/jobs", data=data, params=params,
                             idempotent=True)
        return Job.from_json(answer["job"])

    def get(self, job_id: int) -> Job:
        return Job.from_json(self.c.call("GET", f"/v1/jobs/{job_id}")["job"])

    def list(self, state: Optional[str] = None, owner: Optional[str] = None,
             name: Optional[str] = None,
             limit: Optional[int] = None) -> List[Job]:
        params = {k: v for k, v in (("state", state), ("owner", owner),
                                    ("name", name), ("limit", limit))
                  if v is not None}
        return [Job.from_json(j)
                for j in self.c.call("GET", "/v1/jobs", params=params)["jobs"]]

    def wait(self, job_id: int, timeout: Optional[float] = None,
             interval: float = 0.2) -> Job:
        """The job once it has ended; JobFailed (with the reason) unless
        it succeeded, TimeoutError after timeout seconds."""
        job = _poll(lambda: self.get(job_id), timeout, interval,
                    f"job {job_id}")
        if job.state != "succeeded":
            raise JobFailed(job)
        return job

    def cancel(self, job_id: int) -> Job:
        return Job.from_json(
            self.c.call("POST", f"/v1/jobs/{job_id}/cancel")["job"])

    def evict(self, job_id: int, grace: Optional[str] = None,
              reason: Optional[str] = None) -> Job:
        """Preempt a running preemptible job; it is queued again and
        resumes from its checkpoint."""
        params = {k: v for k, v in (("grace", grace), ("reason", reason))
                  if v is not None}
        return Job.from_json(self.c.call(
            "POST", f"/v1/jobs/{job_id}/evict", params=params)["job"])

    def logs(self, job_id: int, task: int = 0, attempt: Optional[int] = None,
             follow: bool = False, tail: Optional[int] = None
             ) -> Iterator[str]:
        """A task's output, line by line (tail: its last lines only);
        with follow, until the task has ended and its log is drained,
        waiting first for a queued job to start (nothing when it ends
        without starting)."""
        params: Dict[str, Any] = {"task": task, "follow": int(follow)}
        if attempt is not None:
            params["attempt"] = attempt
        if tail is not None:
            params["tail"] = tail
        if follow:
            while True:
                job = self.get(job_id)
                if job.attempts or job.done:
                    break
                time.sleep(0.2)
            if not job.attempts:
                return iter(())
        return self.c._lines(f"/v1/jobs/{job_id}/logs", params, follow)

    def outputs(self, job_id: int) -> List[Output]:
        return list(self.get(job_id).outputs or [])

    def download(self, job_id: int, dest: Union[str, "os.PathLike[str]"]
                 ) -> List[Path]:
        """Copy a succeeded job's outputs (from a file:// store) into
        dest, each checked against its sha256."""
        written = []
        for out in self.outputs(job_id):
            target = Path(dest) / out.name
            _copy_checked(_local_path(out.url, "url"), target, out.sha256,
                          out.name)
            written.append(target)
        return written


class Deployments:
    def __init__(self, client: Client) -> None:
        self.c = client

    def create(self, spec: Spec) -> Deployment:
        """Create a deployment, or update the one of the same name."""
        data, params = _spec_body(spec)
        answer = self.c.call("POST", "/v1/deployments", data=data,
                             params=params, idempotent=True)
        return Deployment.from_json(answer["deployment"])

    def get(self, name: str) -> Deployment:
        return Deployment.from_json(self.c.call(
            "GET", f"/v1/deployments/{quote(name)}")["deployment"])

    def list(self) -> List[Deployment]:
        return [Deployment.from_json(d) for d in
                self.c.call("GET", "/v1/deployments")["deployments"]]

    def scale(self, name: str, replicas: int) -> Deployment:
        return Deployment.from_json(self.c.call(
            "POST", f"/v1/deployments/{quote(name)}/scale",
            body={"replicas": replicas})["deployment"])

    def restart(self, name: str) -> Deployment:
        return Deployment.from_json(self.c.call(
            "POST", f"/v1/deployments/{quote(name)}/restart")["deployment"])

    def delete(self, name: str) -> None:
        self.c.call("DELETE", f"/v1/deployments/{quote(name)}")

    def wait_ready(self, name: str, timeout: float = 120.0) -> Deployment:
        """The deployment once every wanted replica is ready."""
        deadline = time.monotonic() + timeout
        while True:
            d = self.get(name)
            if d.replicas_wanted and d.replicas_ready >= d.replicas_wanted:
                return d
            if time.monotonic() > deadline:
                raise TimeoutError(f"deployment {name}: {d.replicas_ready} "
                                   f"of {d.replicas_wanted} ready after "
                                   f"{timeout}s")
            time.sleep(0.2)


class Keys:
    def __init__(self, client: Client) -> None:
        self.c = client

    def create(self, name: str, deployments: List[str], rpm: int = 0,
               tpm: int = 0, quota_day: int = 0,
               quota_month: int = 0) -> Tuple[Key, str]:
        """A gateway key and its secret (shown only this once)."""
        answer = self.c.call("POST", "/v1/keys", body={
            "name": name, "deployments": deployments, "rpm": rpm,
            "tpm": tpm, "quota_day": quota_day, "quota_month": quota_month})
        return Key.from_json(answer["key"]), str(answer["secret"])

    def list(self) -> List[Key]:
        return [Key.from_json(k) for k in self.c.call("GET", "/v1/keys")["keys"]]

    def revoke(self, name: str) -> None:
        self.c.call("DELETE", f"/v1/keys/{quote(name)}")


class Models:
    def __init__(self, client: Client) -> None:
        self.c = client

    def list(self) -> List[ModelSummary]:
        return [ModelSummary.from_json(m)
                for m in self.c.call("GET", "/v1/models")["models"]]

    def get(self, ref: str, purpose: str = "read") -> ModelVersion:
        """NAME@VERSION or NAME@ALIAS: the version, its manifest and
        signatures; NAME alone: the model's versions in raw."""
        return ModelVersion.from_json(self.c.call(
            "GET", f"/v1/models/{quote(ref)}", params={"purpose": purpose}))

    def push(self, name: str, directory: Union[str, "os.PathLike[str]"],
             alias: Optional[str] = None,
             progress: Optional[Progress] = None) -> ModelVersion:
        """Register a directory as a new version: the blobs the store
        lacks are uploaded in parts (progress(bytes_sent, bytes_total)),
        then the version is made from their digests."""
        root = Path(directory)
        files = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            files.append({"path": path.relative_to(root).as_posix(),
                          "sha256": _sha256_file(path),
                          "size": path.stat().st_size, "local": path})
        missing = set(self.c.call("POST", "/v1/model-blobs/missing", body={
            "digests": sorted({str(f["sha256"]) for f in files})})["missing"])
        todo = {str(f["sha256"]): f for f in files if f["sha256"] in missing}
        total = sum(int(str(f["size"])) for f in todo.values())
        sent = 0
        for digest, f in todo.items():
            sent = self._upload(digest, Path(str(f["local"])), sent, total,
                                progress)
        body: Dict[str, Any] = {"files": [
            {k: f[k] for k in ("path", "sha256", "size")} for f in files]}
        if alias:
            body["alias"] = alias
        return ModelVersion.from_json(self.c.call(
            "POST", f"/v1/models/{quote(name)}/versions", body=body,
            idempotent=True))

    def _upload(self, digest: str, path: Path, sent: int, total: int,
                progress: Optional[Progress]) -> int:
        upload, offset = uuid.uuid4().hex[:32], 0
        size = path.stat().st_size
        with open(path, "rb") as f:
            while True:
                part = f.read(PART_BYTES)
                final = offset + len(part) >= size
                params = {"upload": upload, "offset": offset}
                if final:
                    params["final"] = 1
                self.c.request("POST", f"/v1/model-blobs/{digest}",
                               params=params, data=part)
                offset += len(part)
                sent += len(part)
                if progress:
                    progress(sent, total)
                if final:
                    return sent

    def pull(self, ref: str, dest: Union[str, "os.PathLike[str]"],
             trusted_only: bool = True) -> ModelVersion:
        """Copy a version's files from the registry's (file://) store
        into dest, a new directory, each checked against its digest.
        trusted_only refuses a version no key the server trusts signed."""
        v = self.get(ref, purpose="pull")
        if trusted_only and not v.trusted:
            raise KilnError(f"{ref} is not signed by a key the server "
                            f"trusts", field="signatures",
                            code="permission_denied")
        store = _local_path(str(v.store), "store")
        target = Path(dest)
        target.mkdir(parents=True)
        try:
            for f in (v.manifest or {}).get("files", []):
                _copy_checked(store / "sha256" / f["sha256"],
                              target / f["path"], f["sha256"], f["path"])
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return v

    def verify(self, ref: str) -> ModelVersion:
        """The version if it is signed by a trusted key and every blob in
        the store matches its digest; else KilnError naming what."""
        v = self.get(ref, purpose="verify")
        if not v.trusted:
            raise KilnError(f"{ref} is not signed by a key the server "
                            f"trusts", field="signatures",
                            code="permission_denied")
        store = _local_path(str(v.store), "store")
        for f in (v.manifest or {}).get("files", []):
            if _sha256_file(store / "sha256" / f["sha256"]) != f["sha256"]:
                raise DigestMismatch(f"file {f['path']} does not match its "
                                     f"digest", field=f["path"])
        return v

    def sign(self, ref: str, public_key: str, signature: str
             ) -> Dict[str, Any]:
        """Attach an Ed25519 signature (base64) of the version's canonical
        manifest; the server keeps it only if it verifies."""
        return dict(self.c.call("POST", f"/v1/models/{quote(ref)}/signatures",
                                body={"public_key": public_key,
                                      "signature": signature}))

    def promote(self, ref: str, alias: str) -> AliasMove:
        return AliasMove.from_json(self.c.call(
            "POST", f"/v1/models/{quote(ref)}/promote", body={"alias": alias}))

    def rollback(self, name: str, alias: str) -> AliasMove:
        return AliasMove.from_json(self.c.call(
            "POST", f"/v1/models/{quote(name)}/rollback",
            body={"alias": alias}))

    def from_job(self, name: str, job_id: int,
                 alias: Optional[str] = None) -> ModelVersion:
        body: Dict[str, Any] = {"job": job_id}
        if alias:
            body["alias"] = alias
        return ModelVersion.from_json(self.c.call(
            "POST", f"/v1/models/{quote(name)}/from-job", body=body))

    def lineage(self, ref: str) -> Dict[str, Any]:
        return dict(self.c.call("GET", f"/v1/models/{quote(ref)}/lineage"))


class Workflows:
    def __init__(self, client: Client) -> None:
        self.c = client

    def run(self, path: Union[str, "os.PathLike[str]"],
            files: Optional[Mapping[str, str]] = None) -> WorkflowRun:
        """Run the workflow file at path; the job files it names are read
        beside it (or given in files, keyed as the workflow names them)."""
        wf = Path(path).resolve()
        text = wf.read_text()
        sent = dict(files or {})
        if files is None:
            for name in _job_files(text):
                candidate = wf.parent / name
                if candidate.is_file():
                    sent[name] = candidate.read_text()
        answer = self.c.call("POST", "/v1/workflows", idempotent=True, body={
            "spec": text, "filename": wf.name, "path": str(wf),
            "files": sent,
            "digest": hashlib.sha256(text.encode()).hexdigest()})
        return WorkflowRun.from_json(answer["workflow"])

    def get(self, run_id: int) -> WorkflowRun:
        return WorkflowRun.from_json(
            self.c.call("GET", f"/v1/workflows/{run_id}")["workflow"])

    def list(self) -> List[WorkflowRun]:
        return [WorkflowRun.from_json(w)
                for w in self.c.call("GET", "/v1/workflows")["workflows"]]

    def cancel(self, run_id: int) -> WorkflowRun:
        return WorkflowRun.from_json(
            self.c.call("POST", f"/v1/workflows/{run_id}/cancel")["workflow"])

    def retry(self, run_id: int) -> WorkflowRun:
        return WorkflowRun.from_json(
            self.c.call("POST", f"/v1/workflows/{run_id}/retry")["workflow"])

    def wait(self, run_id: int, timeout: Optional[float] = None,
             interval: float = 0.2) -> WorkflowRun:
        """The run once it succeeded; WorkflowFailed when it failed or
        was cancelled, TimeoutError after timeout seconds."""
        run = _poll(lambda: self.get(run_id), timeout, interval,
                    f"workflow run {run_id}")
        if run.state != "succeeded":
            raise WorkflowFailed(run)
        return run


def _job_files(text: str) -> List[str]:
    """The job files a workflow names (`job: FILE` lines), found without
    a YAML parser: the server parses the workflow and names any file
    that was not sent."""
    names = []
    for line in text.splitlines():
        key, _, value = line.strip().lstrip("- ").partition(":")
        value = value.split("#", 1)[0].strip().strip("'\"")
        if key.strip() == "job" and value:
            names.append(value)
    return names
