"""The DispatcherCore's internal records: one CallContext per call for its whole
life (spec DispatchCallContext), one TaskState per task (TaskDispatchState),
one Batch per committed batch, and the PreparedCalls handed from prepare_* to
commit_*.

Theory of operation:
- A call's state is READY, RUNNING, WAITING or DONE; DONE is terminal and only
  ``DispatcherCore._set_terminal`` enters it. RUNNING starts when the core emits
  BindCall (``bound`` turns true on handle_executor_bound); a retry reuses the
  same context and call id and only increments ``attempt_count`` (the attempt
  seq the executor echoes).
- A READY call is in exactly one place: the task's ready queue, the waiter list
  of a singleflight leader (``leader`` set), the retry timer (``retry_armed``),
  or, for subcalls, the pending-bind set (``parked``).
- Roots live in ``TaskState.pending`` until DONE; every call (roots and the
  subcalls that inherit their batch) is listed in its Batch so a settled batch
  frees all of them at once.
These are plain ``__slots__`` classes rather than dataclasses: they are created
per call on the hot path and only the core touches them.
"""
from __future__ import annotations

from typing import Any

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
        self.task: Any = None           # TaskState, set at commit
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

    @property
    def is_subcall(self) -> bool:
        return self.parent is not None

    def __repr__(self) -> str:
        return (f"<CallContext {self.call_id} {STATE_NAMES[self.state]} "
                f"attempt={self.attempt_count} executor={self.executor_id!r}>")


class Batch:
    __slots__ = ("idx", "calls", "remaining")

    def __init__(self, idx: int, calls: list[CallContext]) -> None:
        self.idx = idx
        self.calls = calls          # roots of the batch, then subcalls as they are added
        self.remaining = len(calls)  # roots not yet DONE


class TaskState:
    __slots__ = (
        "task_id", "fast_fail", "max_attempts", "base_backoff_ms", "jitter_percent",
        "instance", "streaming", "ready", "inflight", "pending", "total", "outputs",
        "output_bytes", "cache", "flights", "batches", "settle_ready", "next_batch_idx",
        "unsettled", "production_open", "stop_dispatching", "stop_reason", "stop_sent",
        "failure_code", "failure_message", "failure_retryable", "discard_outputs",
        "converged", "removed", "in_ring", "dirty", "succeeded", "calls_failed", "call_retries",
        "cache_hits", "first_failure", "failures_retryable",
    )

    def __init__(self, task_id: str, fast_fail: bool, max_attempts: int, base_backoff_ms: int,
                 jitter_percent: int, instance: Any, streaming: bool, ready: Any) -> None:
        self.task_id = task_id
        self.fast_fail = fast_fail
        self.max_attempts = max_attempts
        self.base_backoff_ms = base_backoff_ms
        self.jitter_percent = jitter_percent
        self.instance = instance                 # InstanceState (fairness bucket)
        self.streaming = streaming
        self.ready = ready                       # ReadyQueue of READY roots
        self.inflight = 0                        # roots RUNNING or WAITING
        self.pending: dict[str, CallContext] = {}  # roots not yet DONE
        self.total = 0                           # roots committed (TotalCount)
        self.outputs: list[bytes | None] = []    # by root index; None = no output
        self.output_bytes = 0
        self.cache: dict[bytes, bytes] = {}      # CallCache: key -> successful output
        self.flights: dict[bytes, CallContext] = {}  # Singleflight: key -> leader root
        self.batches: dict[int, Batch] = {}
        self.settle_ready: list[Batch] = []      # batches whose roots are all DONE
        self.next_batch_idx = 0
        self.unsettled = 0                       # committed batches not yet settled
        self.production_open = streaming         # producer may still commit batches
        self.stop_dispatching = False
        self.stop_reason = ""
        self.stop_sent = False
        self.failure_code = ""
        self.failure_message = ""
        self.failure_retryable = False
        self.discard_outputs = False
        self.converged = False
        self.removed = False
        self.in_ring = False
        self.dirty = False
        self.succeeded = 0                       # roots DONE with an output
        self.calls_failed = 0                    # roots that failed (not drained / cancelled)
        self.call_retries = 0
        self.cache_hits = 0
        self.first_failure = ""                  # description of the first root failure
        self.failures_retryable = True           # every root failure so far was retryable


class PreparedCalls:
    """Result of prepare_call_phase / prepare_call_batch: call contexts with
    ids and cache keys computed, not yet visible to the core."""

    __slots__ = ("task_id", "streaming", "batch_idx", "policy", "retry", "instance_id",
                 "calls", "committed")

    def __init__(self, task_id: str, streaming: bool, batch_idx: int, policy: str,
                 retry: tuple[int, int, int], instance_id: str, calls: list[CallContext]) -> None:
        self.task_id = task_id
        self.streaming = streaming
        self.batch_idx = batch_idx
        self.policy = policy
        self.retry = retry              # (max_attempts, base_backoff_ms, jitter_percent), resolved
        self.instance_id = instance_id
        self.calls = calls
        self.committed = False

    def __len__(self) -> int:
        return len(self.calls)


Prepared = PreparedCalls  # the name the spec / adapter brief uses
