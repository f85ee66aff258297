"""Errors the executor adapter raises to its caller (the orchestrator).

`retryable` follows the project convention: True when the same operation may
succeed later or on another executor without any change by the caller.
`OutboxFull` is re-exported from the codec's errors so callers need one import."""

from __future__ import annotations

from blockx._fast.errors import OutboxClosed, OutboxFull

__all__ = [
    "ExecutorAdapterError", "BindError", "ExecutorGone", "CallNotBound",
    "SocketPathError", "OutboxFull", "OutboxClosed",
]


class ExecutorAdapterError(Exception):
    retryable = True


class BindError(ExecutorAdapterError):
    """A call could not take a reservation on the executor (unknown or lost
    executor, parent reservation missing or draining, no free context, or the
    call still holds a reservation there). The dispatcher retries the bind
    later without consuming an attempt."""

    def __init__(self, message: str, *, call_id: str = "", executor_id: str = "", reason: str = ""):
        super().__init__(message)
        self.call_id = call_id
        self.executor_id = executor_id
        self.reason = reason


class ExecutorGone(ExecutorAdapterError, ConnectionError):
    """The executor is not attached (never was, or its connection is lost);
    nothing was sent."""

    def __init__(self, executor_id: str, reason: str = "not attached"):
        super().__init__(f"executor {executor_id!r} is gone: {reason}")
        self.executor_id = executor_id
        self.reason = reason


class CallNotBound(ExecutorAdapterError):
    """send_execute_call for a call without a live reservation on that executor
    (never bound, unbound meanwhile, or cancelled before its ExecuteCall went
    out). Nothing was sent; the reservation, if it was draining, is released."""

    retryable = False

    def __init__(self, call_id: str, executor_id: str, why: str):
        super().__init__(f"call {call_id!r} is not bound to executor {executor_id!r}: {why}")
        self.call_id = call_id
        self.executor_id = executor_id


class SocketPathError(OSError):
    """The socket path or its directory is unusable or unsafe (clear message)."""
