"""One call (one attempt of an ExecuteCall) and the greenlet that runs it.

States: PENDING (queued until a context frees) -> CODE_WAIT (its function code
is being fetched) -> READY (runnable) <-> RUNNING <-> WAITING (io / subcall /
sleep) -> DONE. The greenlet exists from the first time the call runs.

Two sides touch a Call, never at once (one OS thread):
- The scheduler (main greenlet) switches into it, charges the budget, parks it
  on a wait and resumes it with `(ok, value, sidecar)` or ABORT.
- The SDK, running inside the call's greenlet, calls wait_io / wait_subcall /
  wait_sleep, which switch back to the scheduler with a request tuple.

Budget: used_ns grows by the wall time of every RUNNING slice and of io / sleep
waits, and by the child's reported budgetUsedMs for a subcall; never by time in
PENDING / CODE_WAIT / READY (queueing). `abort` holds (exception class, message)
once the scheduler decided the call must stop (budget, cancel); the SDK then
raises a fresh instance at the current and every later wait, and the scheduler
reports that outcome whatever the user code did with the exception."""

from __future__ import annotations

import time

import orjson

from .code_cache import FunctionCode, FunctionNotFound
from .failure import (
    clip, error_kind_of, local_vars_of, message_of, retryable_of, stack_of, MAX_MESSAGE, MAX_STACK,
)
from .jsonenc import OUTPUT_OPTIONS
from .sdk import BudgetExceeded, IOCallError, RpcError, SubcallError

PENDING, CODE_WAIT, READY, RUNNING, WAITING, DONE = range(6)
STATE_NAMES = ("PENDING", "CODE_WAIT", "READY", "RUNNING", "WAITING", "DONE")

ABORT = ("abort",)  # resume value: the SDK raises call.abort

# Frame room kept for the envelope around an IO request or subcall args.
ENVELOPE_ROOM = 64 * 1024

_monotonic_ns = time.monotonic_ns
_dumps = orjson.dumps


def subcall_error(function_id: str, value: dict) -> SubcallError:
    """The SubcallError a failed subcall raises in its parent. The Worker's error is
    hostile input: each field is type-checked and bounded. When the child ran and
    failed, the Worker names it in errorMessage ("subcall f (id) failed: KIND: ...")
    and sends the child's own kind (childErrorKind) and traceback (childErrorStack):
    the message is used as it came, said once. A subcall the Worker refused before
    it ran (an unknown function, too deep) has no child kind: its errorKind is the
    reason, and the message says which subcall."""
    kind = value.get("errorKind")
    kind = kind[:64] if isinstance(kind, str) and kind else "SUBCALL_FAILED"
    message = value.get("errorMessage")
    message = message if isinstance(message, str) else ""
    child_kind = value.get("childErrorKind")
    if isinstance(child_kind, str) and child_kind:
        child_kind = child_kind[:64]
        text = message or f"subcall {function_id!r} failed: {child_kind}"
    elif kind == "SUBCALL_FAILED" and message.startswith("subcall "):
        child_kind = kind       # the Worker refused it and its message says which subcall and why
        text = message
    else:
        child_kind = kind
        text = f"subcall {function_id!r} failed: {kind}: {message}" if message else \
            f"subcall {function_id!r} failed: {kind}"
    child_tb = value.get("childErrorStack")
    child_tb = clip(child_tb, MAX_STACK) if isinstance(child_tb, str) else ""
    return SubcallError(clip(text, MAX_MESSAGE), function_id=function_id, child_error_kind=child_kind,
                        retryable=value.get("retryable") is True, child_traceback=child_tb)


def failed_outcome(kind: str, retryable: bool, message: str, stack: str = "", local_vars=None):
    """A call's outcome when it failed: what the scheduler sends as CallFailed."""
    return ("failed", kind, retryable, message, stack, local_vars or {})


class Call:
    __slots__ = (
        "scheduler", "call_id", "task_id", "function_id", "digest", "raw_digest", "entry",
        "args", "parent_call_id", "ancestry", "budget_ms", "budget_ns", "attempt_seq",
        "state", "greenlet", "code", "holds_context", "used_ns", "slice_start_ns",
        "wait_kind", "wait_start_ns", "request_id", "timer_token", "resume", "abort",
        "started_at_ms", "started_ns", "is_child", "wait_ancestry", "_lineage",
    )

    def __init__(self, scheduler, call_id: str, payload: dict, digest: str,
                 parent: Call | None):
        self.scheduler = scheduler
        self.call_id = call_id
        self.task_id = payload["taskId"]
        self.function_id = payload["functionId"]
        self.raw_digest = payload["functionCodeDigest"]
        self.digest = digest
        self.entry = payload["entrySelector"] or "main"
        self.args = payload["args"]
        self.parent_call_id = payload["parentCallId"]
        self.budget_ms = max(0, payload["callBudgetMs"])
        self.budget_ns = self.budget_ms * 1_000_000
        self.attempt_seq = payload["attemptSeq"]
        self.is_child = parent is not None
        if parent is not None:
            self.ancestry = parent.lineage()
        elif self.parent_call_id:
            self.ancestry = [self.parent_call_id]
        else:
            self.ancestry = []
        self.state = PENDING
        self.greenlet = None
        self.code: FunctionCode | None = None
        self.holds_context = False
        self.used_ns = 0
        self.slice_start_ns = 0
        self.wait_kind: str | None = None
        self.wait_start_ns = 0
        self.request_id = ""
        self.timer_token = 0
        self.resume = None
        self.abort: tuple[type, str] | None = None
        self.started_at_ms = 0
        self.started_ns = 0
        self.wait_ancestry: bytes | None = None   # lineage() as JSON, for its CallWaiting(subcall)s
        self._lineage: list[str] | None = None

    def lineage(self) -> list[str]:
        """Its ancestry and itself: the ancestry of each subcall it asks for. Made
        once and shared by those subcalls (nothing changes an ancestry list)."""
        lineage = self._lineage
        if lineage is None:
            lineage = self._lineage = self.ancestry + [self.call_id]
        return lineage

    def __repr__(self) -> str:
        return (f"<Call {self.call_id} attempt={self.attempt_seq} fn={self.function_id} "
                f"{STATE_NAMES[self.state]}>")

    # ---- budget ---------------------------------------------------------------
    def used_now_ns(self) -> int:
        if self.state == RUNNING:
            return self.used_ns + (_monotonic_ns() - self.slice_start_ns)
        return self.used_ns

    def remaining_budget_ms(self) -> int | None:
        if not self.budget_ns:
            return None
        return max(0, (self.budget_ns - self.used_now_ns()) // 1_000_000)

    def over_budget(self, used_ns: int | None = None) -> bool:
        used = self.used_ns if used_ns is None else used_ns
        return bool(self.budget_ns) and used > self.budget_ns

    def budget_message(self, used_ns: int | None = None) -> str:
        used = self.used_ns if used_ns is None else used_ns
        return (f"call {self.call_id} ({self.function_id}) exceeded its budget of "
                f"{self.budget_ms} ms (used {used // 1_000_000} ms of CPU, IO, subcall "
                f"and sleep time)")

    # ---- SDK side: runs inside this call's greenlet ----------------------------
    def _check(self) -> None:
        abort = self.abort
        if abort is None and self.budget_ns:
            used = self.used_now_ns()
            if used > self.budget_ns:
                abort = self.abort = (BudgetExceeded, self.budget_message(used))
        if abort is not None:
            raise abort[0](abort[1])

    def _suspend(self, request: tuple):
        value = self.scheduler.hub.switch(request)
        if self.abort is not None or self.budget_ns:    # _check's cases, without its frame
            self._check()
        return value

    def wait_io(self, backend: str, request_json: bytes, body: bytes | None):
        self._check()
        size = len(request_json) + (len(body) if body is not None else 0)
        limit = self.scheduler.max_frame_bytes - ENVELOPE_ROOM
        if size > limit:
            raise ValueError(f"IO request to {backend!r} is {size} bytes; a request and its "
                             f"body may be at most {limit} bytes")
        ok, value, sidecar = self._suspend(("io", backend, request_json, body))
        if not ok:
            rpc = value.get("rpcError")
            if rpc is not None:
                raise RpcError(f"IO request to backend {backend!r} failed: {value['errorMessage']}",
                               backend=backend, code=rpc.get("code"), rpc_message=rpc.get("message"),
                               data=rpc.get("data"), retryable=value["retryable"])
            # The kind is the call's own errorKind (error_kind): the message does not repeat it.
            raise IOCallError(
                f"IO request to backend {backend!r} failed: {value['errorMessage']}", backend=backend,
                error_kind=value["errorKind"], retryable=value["retryable"])
        return value, sidecar

    def wait_subcall(self, function_id: str, args_json: bytes):
        if self.abort is not None or self.budget_ns:    # _check's cases, without its frame
            self._check()
        limit = self.scheduler.max_frame_bytes - ENVELOPE_ROOM
        if len(args_json) > limit:
            raise ValueError(f"subcall {function_id!r} arguments are {len(args_json)} bytes "
                             f"of JSON; at most {limit} fit in a frame")
        if self.budget_ns:
            remaining = self.budget_ns - self.used_now_ns()
            granted = max(1, -(-remaining // 1_000_000))
        else:
            granted = 0
        # _suspend, unrolled on the per-subcall path.
        ok, value, _ = self.scheduler.hub.switch(("subcall", function_id, args_json, granted))
        if self.abort is not None or self.budget_ns:
            self._check()
        if not ok:
            raise subcall_error(function_id, value)
        return value

    def wait_sleep(self, ms: float) -> None:
        self._check()
        self._suspend(("sleep", ms))

    # ---- the greenlet body -------------------------------------------------------
    def run(self):
        """Run the user function; return an outcome tuple (never raises)."""
        try:
            fn = self.code.entry(self.entry)
            output = fn(*self.args)
        except FunctionNotFound as exc:
            return failed_outcome(exc.error_kind, False, clip(str(exc), MAX_MESSAGE))
        except BaseException as exc:  # noqa: B902 - every outcome must be reported
            try:
                return failed_outcome(error_kind_of(exc), retryable_of(exc), message_of(exc),
                               stack_of(exc), local_vars_of(exc))
            finally:
                del exc
        try:
            return ("ok", _dumps(output, option=OUTPUT_OPTIONS))    # output encoded as jsonenc says
        except TypeError as exc:
            return failed_outcome("OUTPUT_NOT_JSON", False, clip(
                f"output of {self.function_id!r} is not JSON-serialisable: {exc} "
                f"(got a {type(output).__name__})", MAX_MESSAGE))
