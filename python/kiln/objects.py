"""The API's objects as dataclasses, with the fields of the OpenAPI
document's schemas (docs/openapi.json). Each keeps the whole answer in
`raw`, so a field the server adds later is still there to read."""
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T", bound="Object")

TERMINAL_JOB_STATES = ("succeeded", "failed", "cancelled")
TERMINAL_RUN_STATES = ("succeeded", "failed", "cancelled")


def _nested(cls: Type["Object"], many: bool = False) -> Any:
    """A field holding another object (or a list of them)."""
    return field(default=None, metadata={"of": cls, "many": many})


@dataclass
class Object:
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls: Type[T], data: Dict[str, Any]) -> T:
        values: Dict[str, Any] = {"raw": data}
        for f in fields(cls):
            if f.name == "raw" or f.name not in data:
                continue
            value = data[f.name]
            of = f.metadata.get("of")
            if of is not None and value is not None:
                value = ([of.from_json(v) for v in value]
                         if f.metadata["many"] else of.from_json(value))
            values[f.name] = value
        return cls(**values)


@dataclass
class Task(Object):
    rank: int = 0
    node: Optional[str] = None
    devices: List[int] = field(default_factory=list)
    state: str = ""
    exit_code: int = -1
    signal: int = 0
    started_at_ms: int = 0
    ended_at_ms: int = 0


@dataclass
class Attempt(Object):
    number: int = 0
    state: str = ""
    started_at_ms: int = 0
    ended_at_ms: int = 0
    exit_code: int = -1
    signal: int = 0
    reason: Optional[str] = None
    checkpoint: Optional[str] = None
    tasks: Optional[List[Task]] = _nested(Task, many=True)


@dataclass
class Output(Object):
    name: str = ""
    size: int = 0
    sha256: str = ""
    url: str = ""


@dataclass
class Job(Object):
    id: int = 0
    name: str = ""
    owner: str = ""
    state: str = ""
    priority: int = 0
    tasks: int = 1
    preemptible: bool = False
    submitted_at_ms: int = 0
    started_at_ms: int = 0
    ended_at_ms: int = 0
    attempts: int = 0
    retries: int = 0
    retries_used: int = 0
    cancel_requested: bool = False
    reason: Optional[str] = None
    exit_code: int = -1
    spec: Optional[Dict[str, Any]] = None
    outputs: Optional[List[Output]] = _nested(Output, many=True)
    attempts_detail: Optional[List[Attempt]] = _nested(Attempt, many=True)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_JOB_STATES


@dataclass
class Node(Object):
    name: str = ""
    state: str = ""
    reason: Optional[str] = None
    simulated: bool = False
    labels: Dict[str, str] = field(default_factory=dict)
    cpus: float = 0.0
    memory_bytes: int = 0
    devices: List[Dict[str, Any]] = field(default_factory=list)


@dataclass
class Alert(Object):
    id: int = 0
    rule: str = ""
    severity: str = ""
    state: str = ""
    labels: Dict[str, Any] = field(default_factory=dict)
    summary: Optional[str] = None
    value: Optional[float] = None


@dataclass
class Event(Object):
    seq: int = 0
    time_ms: int = 0
    type: str = ""


@dataclass
class Replica(Object):
    replica: int = 0
    job: Optional[int] = None
    state: str = ""
    ready: bool = False
    address: Optional[str] = None


@dataclass
class Deployment(Object):
    name: str = ""
    owner: str = ""
    model: str = ""
    replicas_wanted: int = 0
    replicas_ready: int = 0
    generation: int = 0
    fallback: Optional[str] = None
    replicas: Optional[List[Replica]] = _nested(Replica, many=True)
    # What the gateways reported over the last 5 minutes, or None.
    traffic: Optional[Dict[str, Any]] = None


@dataclass
class Key(Object):
    name: str = ""
    deployments: List[str] = field(default_factory=list)
    rpm: int = 0
    tpm: int = 0


@dataclass
class ModelSummary(Object):
    name: str = ""
    versions: int = 0
    latest: Optional[int] = None
    aliases: Dict[str, int] = field(default_factory=dict)


@dataclass
class ModelVersion(Object):
    name: str = ""
    version: int = 0
    manifest: Optional[Dict[str, Any]] = None
    trusted: bool = False
    store: Optional[str] = None
    aliases: Optional[List[str]] = None
    signatures: Optional[List[Dict[str, Any]]] = None


@dataclass
class AliasMove(Object):
    name: str = ""
    alias: str = ""
    version: int = 0


@dataclass
class Step(Object):
    name: str = ""
    state: str = ""
    job: Optional[int] = None
    reason: Optional[str] = None
    metrics: Optional[Dict[str, Any]] = None


@dataclass
class WorkflowRun(Object):
    id: int = 0
    name: str = ""
    owner: str = ""
    state: str = ""
    reason: Optional[str] = None
    steps_total: int = 0
    steps: Optional[List[Step]] = _nested(Step, many=True)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_RUN_STATES
