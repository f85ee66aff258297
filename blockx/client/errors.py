"""The Worker's status codes as typed exceptions, each carrying its message.

A refused request (on a session or a unary RPC) raises the exception of its
code: ``NoSlot`` (RESOURCE_EXHAUSTED), ``Unavailable``, ``InvalidArgument``,
``InvalidSlot`` (FAILED_PRECONDITION), ``NotFound``, ``SlotUncertain`` (ABORTED),
``AlreadyExists`` (another identity's task id), ``Unauthenticated``, ``PermissionDenied``;
``trace()`` raises ``TracingOff`` (FAILED_PRECONDITION) on a worker that records no traces.
A session that broke (the Worker went away, or ended it) raises
``SessionBroken`` for every request still waiting and every later one.

``TaskFailed`` is not a refusal: the Worker ran the task and it FAILED.
``TaskOutcome.result()`` raises it for callers who want exceptions; its str()
is the failure with the remote traceback and the failed frame's locals, the way
Python prints an exception that was raised here.
"""
from __future__ import annotations

import grpc


class BlockxError(Exception):
    """A request the Worker refused, or could not answer."""
    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class InvalidArgument(BlockxError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NoSlot(BlockxError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(BlockxError):
    code = grpc.StatusCode.UNAVAILABLE


class InvalidSlot(BlockxError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class NotFound(BlockxError):
    code = grpc.StatusCode.NOT_FOUND


class SlotUncertain(BlockxError):
    code = grpc.StatusCode.ABORTED


class AlreadyExists(BlockxError):
    """The task id belongs to another identity on that worker: choose another id."""
    code = grpc.StatusCode.ALREADY_EXISTS


class Unauthenticated(BlockxError):
    """No credentials, or credentials the worker does not accept (--token / BLOCKX_TOKEN)."""
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(BlockxError):
    """The identity may not make this request (GetWorkerStatus needs admin)."""
    code = grpc.StatusCode.PERMISSION_DENIED


class TracingOff(BlockxError):
    """GetTaskTrace on a worker that records no traces (TRACE_ENABLED=false).
    Its own class, not InvalidSlot: the same status code, a different remedy."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class SessionBroken(Unavailable):
    """The session's stream ended: nothing more will arrive on it. ``code`` is the
    status the stream ended with (UNAVAILABLE when the Worker went away)."""


class TaskFailed(Exception):
    """A task that ended FAILED, raised by ``TaskOutcome.result()``. ``outcome`` is
    the TaskOutcome (its failure_code, failure_message, failure_traceback, ...);
    ``remote_traceback`` is the traceback of the user's code in the call that
    failed the task ("" when no user code failed, e.g. a timeout)."""

    def __init__(self, outcome) -> None:
        super().__init__(outcome.task_id, outcome.failure_code, outcome.failure_message)
        self.outcome = outcome
        self.task_id = outcome.task_id
        self.failure_code = outcome.failure_code
        self.failure_message = outcome.failure_message
        self.retryable = outcome.retryable
        self.call_id = outcome.failure_call_id
        self.remote_traceback = outcome.failure_traceback
        self.local_vars = dict(outcome.failure_locals)

    def __str__(self) -> str:
        head = f"task {self.task_id} failed: {self.failure_code}: {self.failure_message}"
        return head + failure_details(self.call_id, self.remote_traceback, self.local_vars,
                                      self.outcome.worker)


def failure_details(call_id: str, traceback: str, local_vars: dict, worker: str = "") -> str:
    """The remote traceback and locals under a failure line ("" when there are none),
    as TaskFailed and the CLI print them."""
    if not traceback and not local_vars:
        return ""
    where = f"call {call_id}" + (f" on {worker}" if worker else "")
    out = f"\n\nRemote traceback ({where}):\n" + traceback.rstrip("\n")
    if local_vars:
        width = min(max(map(len, local_vars)), 24)
        out += "\n\nLocal variables of the innermost user frame:\n" + "\n".join(
            f"  {name:<{width}} = {value}" for name, value in local_vars.items())
    return out


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, NoSlot, Unavailable, InvalidSlot, NotFound, SlotUncertain,
                                      AlreadyExists, Unauthenticated, PermissionDenied)}
_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def error_for(code: grpc.StatusCode | int, message: str) -> BlockxError:
    """The exception for a status code (a grpc.StatusCode or its number)."""
    if isinstance(code, int):
        code = _BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN)
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else BlockxError(message, code)


def from_rpc_error(exc: grpc.RpcError) -> BlockxError:
    return error_for(exc.code(), exc.details() or "")
