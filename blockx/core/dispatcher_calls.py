"""The calls the dispatcher knows: one CallContext per call for its whole life
(spec DispatchCallContext), indexed by call id in the CallTable.

Rules and theory of operation:
- A call's state is READY, RUNNING, WAITING or DONE. DONE is terminal and only
  ``TaskTable.set_terminal`` enters it (``TaskTable.cancel`` drops a task's
  calls wholesale). RUNNING starts when the core emits BindCall (``bound``
  turns true on handle_executor_bound); a retry reuses the same context and
  call id and only increments ``attempt_count`` (the attempt seq the executor
  echoes), so late frames of an older attempt are told apart by that number.
- A READY call is in exactly one place: its task's ready queue, the waiter
  list of a singleflight leader (``leader`` set), the retry timer
  (``retry_armed``), or, for subcalls, the SubcallBinder's parking
  (``parked``).
- The CallTable holds a call from commit until its batch settles (or its task
  is cancelled): a late frame for a call no longer in the table is ignored.
  ``by_id`` is never rebound, so the facade may keep a direct reference to it
  for its per-call lookups.
CallContext is a plain ``__slots__`` class rather than a dataclass: one is
created per call on the hot path and only the core touches it.
"""
from __future__ import annotations

from typing import Any, Iterable

READY = 0
RUNNING = 1
WAITING = 2
DONE = 3
STATE_NAMES = ("READY", "RUNNING", "WAITING", "DONE")


class CallContext:
    __slots__ = (
        "call_id", "task", "index", "batch_idx", "function_id", "digest", "entry_selector",
        "args_json", "key", "state", "executor_id", "exec", "bound", "attempt_count",
        "budget_ms", "parent", "depth", "request_id", "children", "waiters", "leader",
        "retry_armed", "parked", "ok", "output", "error_kind", "error_message",
        "retryable", "budget_used_ms",
    )

    def __init__(self, call_id: str, function_id: str, digest: str, entry_selector: str,
                 args_json: bytes, key: bytes, index: int, batch_idx: int) -> None:
        self.call_id = call_id
        self.task: Any = None           # TaskCalls, set at commit
        self.index = index              # position among the task's roots; -1 for subcalls
        self.batch_idx = batch_idx
        self.function_id = function_id
        self.digest = digest
        self.entry_selector = entry_selector
        self.args_json = args_json
        self.key = key
        self.state = READY
        self.executor_id = ""
        self.exec: Any = None           # ExecutorRecord while bound (counted in local_inflight)
        self.bound = False
        self.attempt_count = 0
        self.budget_ms = 0
        self.parent: CallContext | None = None
        self.depth = 0
        self.request_id = ""
        self.children: dict[str, CallContext] | None = None   # active subcalls
        self.waiters: list[CallContext] | None = None         # singleflight waiters (leader only)
        self.leader: CallContext | None = None                # set on a waiter
        self.retry_armed = False
        self.parked = False
        self.ok = False
        self.output: bytes | None = None
        self.error_kind = ""
        self.error_message = ""
        self.retryable = False
        self.budget_used_ms = 0

    def __repr__(self) -> str:
        return (f"<CallContext {self.call_id} {STATE_NAMES[self.state]} "
                f"attempt={self.attempt_count} executor={self.executor_id!r}>")


class CallTable:
    __slots__ = ("by_id",)

    def __init__(self) -> None:
        self.by_id: dict[str, CallContext] = {}

    def add(self, ctx: CallContext) -> None:
        self.by_id[ctx.call_id] = ctx

    def add_all(self, calls: Iterable[CallContext]) -> None:
        by_id = self.by_id
        for ctx in calls:
            by_id[ctx.call_id] = ctx

    def forget(self, calls: Iterable[CallContext]) -> None:
        """Drop settled (or cancelled) calls: later frames for them are stale."""
        pop = self.by_id.pop
        for ctx in calls:
            pop(ctx.call_id, None)

    def state_name(self, call_id: str) -> str | None:
        ctx = self.by_id.get(call_id)
        return None if ctx is None else STATE_NAMES[ctx.state]

    def attempts(self, call_id: str) -> int | None:
        ctx = self.by_id.get(call_id)
        return None if ctx is None else ctx.attempt_count

    def __len__(self) -> int:
        return len(self.by_id)
