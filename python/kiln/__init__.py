"""A typed client for the kiln API: kiln.Client() finds the server and
token as the CLI does. docs/python.md shows it in use."""
from .client import Client
from .errors import (Conflict, DigestMismatch, InsufficientStorage,
                     InvalidArgument, JobFailed, KilnError, LimitExceeded,
                     NotFound, PermissionDenied, TooLarge, Unauthenticated,
                     Unavailable, WorkflowFailed)
from .objects import (Alert, AliasMove, Attempt, Deployment, Event, Job, Key,
                      ModelSummary, ModelVersion, Node, Output, Replica, Step,
                      Task, WorkflowRun)

__all__ = [
    "Client", "KilnError", "InvalidArgument", "Unauthenticated",
    "PermissionDenied", "NotFound", "Conflict", "TooLarge", "LimitExceeded",
    "Unavailable", "InsufficientStorage", "JobFailed", "WorkflowFailed",
    "DigestMismatch", "Job", "Attempt", "Task", "Output", "Node", "Alert",
    "Event", "Deployment", "Replica", "Key", "ModelSummary", "ModelVersion",
    "AliasMove", "WorkflowRun", "Step",
]
