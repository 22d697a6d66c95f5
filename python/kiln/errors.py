"""The API's errors as exceptions: each carries the answer's code, the
field to blame (None when no single one is), its message and the HTTP
status."""
from typing import Any, Dict, Optional, Type


class KilnError(Exception):
    """An error answer, or a refusal the client makes itself."""

    code = "internal"

    def __init__(self, message: str, field: Optional[str] = None,
                 status: int = 0, code: Optional[str] = None) -> None:
        self.message = message
        self.field = field
        self.status = status
        if code is not None:
            self.code = code
        where = f"{field}: " if field else ""
        super().__init__(f"{where}{message} ({self.code})")


class InvalidArgument(KilnError):
    code = "invalid_argument"


class Unauthenticated(KilnError):
    code = "unauthenticated"


class PermissionDenied(KilnError):
    code = "permission_denied"


class NotFound(KilnError):
    code = "not_found"


class Conflict(KilnError):
    code = "conflict"


class TooLarge(KilnError):
    code = "too_large"


class LimitExceeded(KilnError):
    code = "limit_exceeded"


class Unavailable(KilnError):
    code = "unavailable"


class InsufficientStorage(KilnError):
    code = "insufficient_storage"


class JobFailed(KilnError):
    """wait() on a job that ended without succeeding; job is the Job."""

    code = "job_failed"

    def __init__(self, job: Any) -> None:
        self.job = job
        super().__init__(f"job {job.id} ({job.name}) {job.state}: "
                         f"{job.reason}", field="state")


class WorkflowFailed(KilnError):
    """wait() on a workflow run that failed or was cancelled."""

    code = "workflow_failed"

    def __init__(self, run: Any) -> None:
        self.run = run
        super().__init__(f"workflow run {run.id} ({run.name}) {run.state}: "
                         f"{run.reason}", field="state")


class DigestMismatch(KilnError):
    """Downloaded bytes that do not hash to the digest the server gave."""

    code = "digest_mismatch"


ERRORS: Dict[str, Type[KilnError]] = {
    c.code: c for c in (InvalidArgument, Unauthenticated, PermissionDenied,
                        NotFound, Conflict, TooLarge, LimitExceeded,
                        Unavailable, InsufficientStorage)
}


def from_answer(status: int, body: Any) -> KilnError:
    """The exception for an error answer (its JSON body, or text)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return KilnError(f"HTTP {status}: {str(body)[:200]}", status=status)
    code = str(error.get("code", "internal"))
    cls = ERRORS.get(code, KilnError)
    field = error.get("field")
    return cls(str(error.get("message", "")),
               field=field if isinstance(field, str) else None,
               status=status, code=code)
