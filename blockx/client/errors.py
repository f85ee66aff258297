"""The Worker's status codes as typed exceptions, each carrying its message.

A refused request (on a session or a unary RPC) raises the exception of its
code: ``NoSlot`` (RESOURCE_EXHAUSTED), ``Unavailable``, ``InvalidArgument``,
``InvalidSlot`` (FAILED_PRECONDITION), ``NotFound``, ``SlotUncertain`` (ABORTED),
``AlreadyExists`` (another identity's task id), ``Unauthenticated``, ``PermissionDenied``;
``trace()`` raises ``TracingOff`` (FAILED_PRECONDITION) on a worker that records no traces.
A session that broke (the Worker went away, or ended it) raises
``SessionBroken`` for every request still waiting and every later one.
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
