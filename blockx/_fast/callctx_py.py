"""A call's per-call state in the dispatcher (spec DispatchCallContext) and the
loop that builds a batch of them; pure-Python twin of callctx.pyx (test oracle
and benchmark baseline).

Rules: CallContext is plain state owned by the DispatcherCore's parts (see
blockx/core/dispatcher_calls.py for its life cycle); it holds strings, bytes,
ints and references to other core records, never anything that does IO.
``make_calls`` validates one call list and builds its contexts; it has no side
effects, so the core may run it off its actor. Both implementations raise the
same errors with the same messages.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

READY = 0
RUNNING = 1
WAITING = 2
DONE = 3
STATE_NAMES = ("READY", "RUNNING", "WAITING", "DONE")

__all__ = ["CallContext", "make_calls", "READY", "RUNNING", "WAITING", "DONE", "STATE_NAMES"]


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


def make_calls(task_id: str, prefix: str, calls: Iterable, batch_idx: int,
               cache_key: Callable[[str, str, bytes], bytes]) -> list:
    """The contexts of one call list: ids ``prefix + str(i)``, cache keys by
    ``cache_key``. Each spec is (function_id, digest, args_json, entry_selector)
    with canonical args_json bytes; an invalid spec raises ValueError naming it."""
    out: list[CallContext] = []
    append = out.append
    for i, spec in enumerate(calls):
        try:
            function_id, digest, args_json, entry_selector = spec
        except (TypeError, ValueError):
            raise ValueError(f"task {task_id}: call {i} must be (function_id, digest, args_json, "
                             f"entry_selector), got {spec!r}") from None
        if type(function_id) is not str or not function_id:
            raise ValueError(f"task {task_id}: call {i} needs a non-empty function_id, "
                             f"got {function_id!r}")
        if type(digest) is not str:
            raise ValueError(f"task {task_id}: call {i} digest must be a str, got {digest!r}")
        if type(args_json) is not bytes:
            raise ValueError(f"task {task_id}: call {i} args_json must be canonical JSON bytes, "
                             f"got {type(args_json).__name__}")
        if type(entry_selector) is not str:
            raise ValueError(f"task {task_id}: call {i} entry_selector must be a str, "
                             f"got {entry_selector!r}")
        append(CallContext(f"{prefix}{i}", function_id, digest, entry_selector or "main",
                           args_json, cache_key(function_id, digest, args_json), i, batch_idx))
    return out
