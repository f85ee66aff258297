"""The SDK user function code calls while it runs on a BlockX executor.

    from blockx_executor import sdk

    def main(address):
        balance = sdk.io("devstub", {"op": "balance", "address": address})
        header, raw = sdk.io_bytes("blockdb", {"op": "get"}, body=key_bytes)
        total = sdk.call("sum", 1, 2)          # a subcall, run by the Worker
        sdk.sleep(50)                          # milliseconds
        return {"balance": balance, "total": total}

Each function suspends only the calling call (its greenlet): the executor runs
other calls meanwhile and resumes this one when the Worker answers. Every call
has a budget (ExecuteCall.callBudgetMs, 0 = unlimited) counting its CPU, IO,
subcall and sleep time (never time queued in the executor); when it runs out,
or the Worker cancels the call, the wait in progress or the next SDK call raises
`BudgetExceeded` / `CallCancelled` (with --budget-preempt-ms set, code computing
without yielding is interrupted with `BudgetExceeded` as well). Those derive from
BaseException so that `except Exception:` in user code does not swallow them;
let them propagate (the call reports the abort whatever the code does next).

Do not block the executor: use sdk.sleep() rather than time.sleep(), and sdk.io()
rather than network access (the executor reaches nothing but the Worker). SDK
functions work only in the call's own greenlet, not from threads it starts.

IO shape: `io()` returns the backend's JSON result. A backend that answers with a
binary body (BXB1 sidecar, e.g. BlockDB protobuf) is read with `io_bytes()`, which
returns `(result, body)` with `body` None when the answer carried no binary part;
`io()` raises `IOCallError` rather than silently dropping such a body.

Failures the Worker reports come back as exceptions: `IOCallError` for an IO
(`error_kind` as the backend reported it, e.g. IO_ERROR; `RpcError`, with the
node's `code` and `rpc_message`, for a JSON-RPC error of the rpc backend) and `SubcallError`
(`error_kind` SUBCALL_FAILED, `child_error_kind` the child's own kind,
`child_traceback` the child's traceback as text). Left
uncaught they fail the call with that error_kind and retryable flag (an
SDKError subclass of your own may set its error_kind too). Any other exception
fails the call as USER_ERROR, retryable only when the exception has a truthy
`retryable` attribute.

This module imports nothing heavy: only greenlet and orjson."""

from __future__ import annotations

from typing import Any

import orjson
from greenlet import getcurrent

from .jsonenc import OUTPUT_OPTIONS, dumps_io_request

_dumps = orjson.dumps

__all__ = [
    "io", "io_bytes", "call", "sleep", "context",
    "CallContext", "SDKError", "IOCallError", "RpcError", "SubcallError",
    "CallAborted", "BudgetExceeded", "CallCancelled",
]


_MAX_SLEEP_MS = 7 * 24 * 3600 * 1000


class SDKError(Exception):
    """A failure the Worker reported for an SDK request."""

    error_kind = "USER_ERROR"

    def __init__(self, message: str, *, error_kind: str | None = None, retryable: bool = False):
        super().__init__(message)
        if error_kind:
            self.error_kind = error_kind
        self.retryable = bool(retryable)
        self.message = message


class IOCallError(SDKError):
    """An IO request failed; `error_kind` and `retryable` come from the backend."""

    error_kind = "IO_ERROR"

    def __init__(self, message: str, *, backend: str, error_kind: str | None = None,
                 retryable: bool = False):
        super().__init__(message, error_kind=error_kind, retryable=retryable)
        self.backend = backend


class RpcError(IOCallError):
    """A JSON-RPC node answered with an error object (the rpc backend): `code`
    (e.g. -32601 method not found), `rpc_message` and `data` (None when absent)
    are the node's. An IOCallError, so `except sdk.IOCallError` catches it too."""

    error_kind = "RPC_ERROR"

    def __init__(self, message: str, *, backend: str, code: int, rpc_message: str, data: Any = None,
                 retryable: bool = False):
        super().__init__(message, backend=backend, retryable=retryable)
        self.code = code
        self.rpc_message = rpc_message
        self.data = data


class SubcallError(SDKError):
    """A subcall failed; `retryable` is the child's, `child_error_kind` its kind."""

    error_kind = "SUBCALL_FAILED"

    def __init__(self, message: str, *, function_id: str, child_error_kind: str,
                 retryable: bool = False, child_traceback: str = ""):
        super().__init__(message, retryable=retryable)
        self.function_id = function_id
        self.child_error_kind = child_error_kind
        # The child's own traceback as the Worker relayed it (text, bounded): the
        # parent's traceback shows it first, as Python shows a `raise ... from` cause.
        self.child_traceback = child_traceback


class CallAborted(BaseException):
    """The executor stopped this call; raised at the call's current or next wait."""

    error_kind = "ABORTED"
    retryable = False


class BudgetExceeded(CallAborted):
    error_kind = "BUDGET_EXCEEDED"


class CallCancelled(CallAborted):
    error_kind = "CANCELLED"


class CallContext:
    """Read-only facts about the running call (for logs and budget-aware code)."""

    __slots__ = ("_call",)

    def __init__(self, call):
        self._call = call

    call_id = property(lambda self: self._call.call_id)
    task_id = property(lambda self: self._call.task_id)
    function_id = property(lambda self: self._call.function_id)
    attempt_seq = property(lambda self: self._call.attempt_seq)
    parent_call_id = property(lambda self: self._call.parent_call_id)
    budget_ms = property(lambda self: self._call.budget_ms, doc="0 = unlimited")

    def budget_remaining_ms(self) -> int | None:
        """Milliseconds left in the budget, None when unlimited."""
        return self._call.remaining_budget_ms()

    def __repr__(self) -> str:
        return f"CallContext(call_id={self.call_id!r}, task_id={self.task_id!r}, function_id={self.function_id!r})"


def _current():
    call = getattr(getcurrent(), "blockx_call", None)
    if call is None:
        raise RuntimeError(
            "blockx_executor.sdk must be called from a function running as a call on a "
            "BlockX executor (not at import time outside a call, nor from another thread "
            "or greenlet)")
    return call


def io(backend: str, request: Any, *, body: bytes | None = None) -> Any:
    """Send `request` (JSON-serialisable; `body` optional raw bytes) to IO backend
    `backend` through the Worker and return its JSON result."""
    result, raw = io_bytes(backend, request, body=body)
    if raw is not None:
        raise IOCallError(
            f"IO backend {backend!r} answered with a {len(raw)}-byte binary body; "
            "read it with sdk.io_bytes()", backend=backend, error_kind="IO_ERROR")
    return result


def io_bytes(backend: str, request: Any, *, body: bytes | None = None) -> tuple[Any, bytes | None]:
    """Like io(), returning `(result, body)`; `body` is the binary response body or None."""
    if not isinstance(backend, str) or not backend:
        raise TypeError("sdk.io backend must be a non-empty str")
    if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError(f"sdk.io body must be bytes, not {type(body).__name__}")
    call = _current()
    return call.wait_io(backend, dumps_io_request(request), None if body is None else bytes(body))


def call(function_id: str, *args: Any) -> Any:
    """Run function `function_id` with `args` as a subcall and return its output.
    The child gets what is left of this call's budget."""
    if not isinstance(function_id, str) or not function_id:
        raise TypeError("sdk.call function_id must be a non-empty str")
    # _current() unrolled and the args encoded as jsonenc says: this runs once per subcall.
    current = getattr(getcurrent(), "blockx_call", None)
    if current is None:
        current = _current()    # raises the explanation
    return current.wait_subcall(function_id, _dumps(list(args), option=OUTPUT_OPTIONS))


def sleep(ms: float) -> None:
    """Suspend this call for `ms` milliseconds (counts against the budget).
    sleep(0) just lets other runnable calls go first."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)):
        raise TypeError("sdk.sleep takes a number of milliseconds")
    if not 0 <= ms <= _MAX_SLEEP_MS:  # also rejects NaN
        raise ValueError(f"sdk.sleep milliseconds must be within 0..{_MAX_SLEEP_MS}, got {ms!r}")
    _current().wait_sleep(ms)


def context() -> CallContext:
    """The running call's ids and budget."""
    return CallContext(_current())
