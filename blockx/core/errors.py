"""Submission-layer errors raised by WorkerCore.

Rules: a ``WorkerError`` is only ever raised *before* a task is accepted (bad
input, no capacity, draining, a slot that is not the caller's, an unknown task).
Once SubmitTask accepted a task, every later failure converges into the task's
``TaskResult`` instead (see ``failure_codes``). Raising leaves the core
unchanged, except where a handler documents an exact-time lease reclamation it
applied first.

``code`` is one of the ``CODES``; the gRPC adapter maps it with
``GRPC_STATUS_NAME`` (the names of ``grpc.StatusCode`` members, so this module
does not import grpc). Messages name the offending field and value and say what
to do, because they travel verbatim to the client.
"""
from __future__ import annotations

from typing import ClassVar, Final

INVALID_ARGUMENT: Final = "InvalidArgument"
NO_SLOT: Final = "NoSlot"
UNAVAILABLE: Final = "Unavailable"
INVALID_SLOT: Final = "InvalidSlot"
NOT_FOUND: Final = "NotFound"
SLOT_UNCERTAIN: Final = "SlotUncertain"
ALREADY_EXISTS: Final = "AlreadyExists"
PERMISSION_DENIED: Final = "PermissionDenied"

CODES: Final = (INVALID_ARGUMENT, NO_SLOT, UNAVAILABLE, INVALID_SLOT, NOT_FOUND, SLOT_UNCERTAIN, ALREADY_EXISTS,
                PERMISSION_DENIED)

# WorkerError.code -> grpc.StatusCode member name (what the gRPC handlers answer).
GRPC_STATUS_NAME: Final = {
    INVALID_ARGUMENT: "INVALID_ARGUMENT",
    NO_SLOT: "RESOURCE_EXHAUSTED",
    UNAVAILABLE: "UNAVAILABLE",
    INVALID_SLOT: "FAILED_PRECONDITION",
    NOT_FOUND: "NOT_FOUND",
    SLOT_UNCERTAIN: "ABORTED",
    ALREADY_EXISTS: "ALREADY_EXISTS",
    PERMISSION_DENIED: "PERMISSION_DENIED",
}


class WorkerError(Exception):
    """A request the core refused. ``code`` is one of ``CODES``."""

    code: str

    def __init__(self, code: str, message: str) -> None:
        if code not in GRPC_STATUS_NAME:
            raise ValueError(f"unknown WorkerError code {code!r}; expected one of {', '.join(CODES)}")
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def grpc_status_name(self) -> str:
        return GRPC_STATUS_NAME[self.code]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class _Coded(WorkerError):
    CODE: ClassVar[str]

    def __init__(self, message: str) -> None:
        super().__init__(self.CODE, message)


class InvalidArgumentError(_Coded):
    """The request is malformed; resending it unchanged fails again."""
    CODE = INVALID_ARGUMENT


class NoSlotError(_Coded):
    """Every task slot is reserved or running; retry later or on another worker."""
    CODE = NO_SLOT


class ShareExceededError(NoSlotError):
    """The caller's identity holds its whole share of the worker (core.worker.shares);
    ``identity`` and ``share`` ("slots" or "queued_call_bytes") say which, for metrics."""

    def __init__(self, message: str, identity: str, share: str) -> None:
        super().__init__(message)
        self.identity = identity
        self.share = share


class UnavailableError(_Coded):
    """The worker is draining and takes no new tasks; use another worker."""
    CODE = UNAVAILABLE


class InvalidSlotError(_Coded):
    """The named slot is not reserved for this task."""
    CODE = INVALID_SLOT


class NotFoundError(_Coded):
    """The task is unknown here (never submitted, or its result was purged)."""
    CODE = NOT_FOUND


class SlotUncertainError(_Coded):
    """The task's slot reservation expired and was reclaimed; request a new slot."""
    CODE = SLOT_UNCERTAIN


class AlreadyExistsError(_Coded):
    """The task id belongs to another identity on this worker; choose another id."""
    CODE = ALREADY_EXISTS


class PermissionDeniedError(_Coded):
    """The caller may see the task but not act on it (CancelTask of another's task)."""
    CODE = PERMISSION_DENIED


BY_CODE: Final = {cls.CODE: cls for cls in (
    InvalidArgumentError, NoSlotError, UnavailableError, InvalidSlotError, NotFoundError,
    SlotUncertainError, AlreadyExistsError, PermissionDeniedError)}
