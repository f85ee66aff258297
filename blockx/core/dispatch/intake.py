"""The CallIntake: how a task's calls enter the dispatcher, as one-shot call
phases (prepare, then commit) or streaming batches (open the stream, then
prepare and commit each batch), and the batch credit window.

Rules:
- ``prepare_*`` has no side effects on the core (it reads only the config and
  the cachekey function), so the adapter may run it off the actor; it validates
  the input and packs it into its compact queued form (a CallBlock: per call a
  function index and a slice of one args buffer; see tasks), so the
  caller's call list is not kept. ``commit_*`` queues the prepared calls in the
  core and must run on the actor. A call's id and cache key are made when it is
  admitted.
- A one-shot phase is one batch (index 0) that never emits BatchSettled.
- Streaming: the producer commits batches 0, 1, 2, ... in order and may hold at
  most ``max_outstanding_batches`` committed-but-unsettled batches. A batch
  settles once all its roots are DONE; BatchSettled returns its credit and the
  core forgets its calls (outputs are kept by root index). The producer holds a
  semaphore of ``max_outstanding_batches`` credits: acquire one before building
  a batch, release it on BatchSettled. ``batch_credits`` reports the window.
- Every committed batch gets exactly one BatchSettled, including a batch
  committed after the task stopped producing (it is discarded at once).
  ``production_done`` says no batch follows; convergence waits for it.
- The intake validates and builds; the TaskCallTable owns what is committed (the
  per-task credit counters live in TaskCalls), so the intake keeps no state of
  its own beyond its configuration.
Call ids: roots of a one-shot call phase are ``f"{task_id}/{index}"``, roots
of a streaming batch ``f"{task_id}/{batch_idx}.{row}"``.
"""
from __future__ import annotations

from typing import Any, Iterable

from blockx.core.dispatch.commands import BatchSettled
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.retry import resolve_retry
from blockx.core.dispatch.tasks import TaskCallTable
from blockx.core.dispatch.types import CONTINUE, FAST_FAIL, POLICIES, RetryPolicy

from blockx.core.dispatch.records import CallBlock, make_block


class PreparedCalls:
    """Result of prepare_call_phase / prepare_call_batch: the validated calls in
    their compact queued form (a CallBlock), not yet visible to the core."""

    __slots__ = ("task_id", "streaming", "batch_idx", "policy", "retry", "instance_id",
                 "calls", "count", "committed")

    def __init__(self, task_id: str, streaming: bool, batch_idx: int, policy: str,
                 retry: tuple[int, int, int], instance_id: str, calls: Any) -> None:
        self.task_id = task_id
        self.streaming = streaming
        self.batch_idx = batch_idx
        self.policy = policy
        self.retry = retry              # (max_attempts, base_backoff_ms, jitter_percent), resolved
        self.instance_id = instance_id
        self.calls = calls              # CallBlock; None once committed (the task owns it)
        self.count = len(calls)
        self.committed = False

    def __len__(self) -> int:
        return self.count


class CallIntake:
    __slots__ = ("config", "_tasks")

    def __init__(self, config: DispatcherConfig, tasks: TaskCallTable) -> None:
        self.config = config
        self._tasks = tasks

    # --- one-shot ----------------------------------------------------------------------

    def prepare_call_phase(self, task_id: str, calls: Iterable, policy: str = FAST_FAIL,
                           retry: RetryPolicy | tuple | None = None,
                           instance_id: str = "") -> PreparedCalls:
        """Validate and pack a one-shot call list. No side effects."""
        policy = _check_task(task_id, policy, instance_id)
        resolved = resolve_retry(retry, self.config)
        block = self._pack(task_id, f"{task_id}/", calls, 0)
        return PreparedCalls(task_id, False, 0, policy, resolved, instance_id, block)

    def prepare_packed_call_phase(self, task_id: str, fns: list, fidx: Any, args: bytes, offs: Any,
                                  policy: str = FAST_FAIL, retry: RetryPolicy | tuple | None = None,
                                  instance_id: str = "") -> PreparedCalls:
        """A one-shot call list already packed (the callList builder's form, its
        function ids resolved): ``fns`` the distinct (function_id, digest,
        entry_selector), ``fidx`` array('I') per call an index into fns, ``args``
        the concatenated canonical args and ``offs`` array('q') of len(fidx) + 1
        offsets into it. The arrays become the queue as they are (no per-call
        pass); they are checked whole. No side effects."""
        policy = _check_task(task_id, policy, instance_id)
        resolved = resolve_retry(retry, self.config)
        if type(fns) is not list:
            raise ValueError(f"task {task_id}: fns must be a list of (function_id, digest, "
                             f"entry_selector), got {type(fns).__name__}")
        table: list[tuple[str, str, str]] = []
        for fn in fns:
            table.append(_check_function(task_id, len(table), fn))
        if type(args) is not bytes:
            raise ValueError(f"task {task_id}: args must be bytes, got {type(args).__name__}")
        try:
            block = CallBlock(f"{task_id}/", 0, table, fidx, args, offs)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"task {task_id}: packed call list: {exc}") from None
        return PreparedCalls(task_id, False, 0, policy, resolved, instance_id, block)

    def commit_call_phase(self, prepared: PreparedCalls, now: int) -> list:
        if prepared.streaming:
            raise ValueError(f"task {prepared.task_id}: a prepared batch goes to commit_call_batch")
        if prepared.committed:
            raise ValueError(f"task {prepared.task_id}: call phase already committed")
        task = self._tasks.new(prepared.task_id, prepared.policy == FAST_FAIL, prepared.retry,
                               prepared.instance_id, False)
        prepared.committed = True
        calls, prepared.calls = prepared.calls, None
        self._tasks.register_block(task, calls, 0)
        return []

    # --- streaming ---------------------------------------------------------------------

    def commit_call_stream(self, task_id: str, policy: str = FAST_FAIL,
                           retry: RetryPolicy | tuple | None = None, instance_id: str = "",
                           now: int = 0, hand_over: bool = False) -> list:
        """Open a streaming call phase; batches follow via commit_call_batch.
        ``hand_over``: each BatchSettled carries the batch's outputs, and the core
        keeps none of them (nor their cache entries) once the batch settled."""
        policy = _check_task(task_id, policy, instance_id)
        resolved = resolve_retry(retry, self.config)
        self._tasks.new(task_id, policy == FAST_FAIL, resolved, instance_id, True, hand_over)
        return []

    def prepare_call_batch(self, task_id: str, batch_idx: int, calls: Iterable) -> PreparedCalls:
        """Validate and pack one streaming batch. No side effects."""
        if type(task_id) is not str or not task_id:
            raise ValueError(f"task_id must be a non-empty str, got {task_id!r}")
        if type(batch_idx) is not int or batch_idx < 0:
            raise ValueError(f"task {task_id}: batch_idx must be an integer >= 0, got {batch_idx!r}")
        block = self._pack(task_id, f"{task_id}/{batch_idx}.", calls, batch_idx)
        cfg = self.config
        if len(block) > cfg.batch_max_rows:
            raise ValueError(f"task {task_id}: batch {batch_idx} has {len(block)} calls, over "
                             f"batchMaxRows {cfg.batch_max_rows}")
        size = len(block.args)
        if size > cfg.batch_max_args_bytes:
            raise ValueError(f"task {task_id}: batch {batch_idx} carries {size} bytes of args, over "
                             f"batchMaxArgsBytes {cfg.batch_max_args_bytes}")
        return PreparedCalls(task_id, True, batch_idx, "", (0, 0, 0), "", block)

    def commit_call_batch(self, prepared: PreparedCalls, now: int) -> list:
        if not prepared.streaming:
            raise ValueError(f"task {prepared.task_id}: a one-shot call list goes to commit_call_phase")
        if prepared.committed:
            raise ValueError(f"task {prepared.task_id}: batch {prepared.batch_idx} already committed")
        task = self._tasks.by_id.get(prepared.task_id)
        if task is None:
            prepared.committed = True
            return []  # the task ended; its producer is being stopped
        if not task.streaming:
            raise ValueError(f"task {task.task_id} has a one-shot call phase, not a stream")
        idx = prepared.batch_idx
        if task.stop_dispatching or task.converged:
            prepared.committed = True
            return [BatchSettled(task.task_id, idx)]  # discarded: the task stopped
        if not task.production_open:
            raise ValueError(f"task {task.task_id}: batch {idx} committed after production_done")
        if idx != task.next_batch_idx:
            raise ValueError(f"task {task.task_id}: batch {idx} committed out of order; "
                             f"expected batch {task.next_batch_idx}")
        window = self.config.max_outstanding_batches
        if task.unsettled >= window:
            raise ValueError(f"task {task.task_id}: batch {idx} exceeds the credit window of "
                             f"{window} unsettled batches; wait for BatchSettled")
        prepared.committed = True
        calls, prepared.calls = prepared.calls, None
        self._tasks.register_block(task, calls, idx)
        return []

    def production_done(self, task_id: str, now: int) -> list:
        """The stream producer will commit no more batches."""
        task = self._tasks.by_id.get(task_id)
        if task is None:
            return []
        if not task.streaming:
            raise ValueError(f"task {task_id} has a one-shot call phase, not a stream")
        task.production_open = False
        self._tasks.mark_dirty(task)
        return []

    def batch_credits(self, task_id: str) -> int:
        """Batches the producer may still commit before one settles."""
        task = self._tasks.by_id.get(task_id)
        if task is None or not task.streaming or not task.production_open:
            return 0
        return max(self.config.max_outstanding_batches - task.unsettled, 0)

    # --- shared ------------------------------------------------------------------------

    def _pack(self, task_id: str, prefix: str, calls: Iterable, batch_idx: int) -> Any:
        return make_block(task_id, prefix, calls, batch_idx)


def _check_function(task_id: str, j: int, fn: Any) -> tuple[str, str, str]:
    """One entry of a packed list's function table, entry selector defaulted."""
    if (type(fn) is not tuple or len(fn) != 3 or type(fn[0]) is not str or not fn[0]
            or type(fn[1]) is not str or type(fn[2]) is not str):
        raise ValueError(f"task {task_id}: function {j} must be (function_id, digest, "
                         f"entry_selector) with a non-empty function_id, got {fn!r}")
    return (fn[0], fn[1], fn[2] or "main")


def _check_task(task_id: Any, policy: Any, instance_id: Any) -> str:
    if type(task_id) is not str or not task_id:
        raise ValueError(f"task_id must be a non-empty str, got {task_id!r}")
    if policy in ("", None, "UNSPECIFIED", "CALL_FAILURE_POLICY_UNSPECIFIED",
                  "CALL_FAILURE_POLICY_FAST_FAIL"):
        policy = FAST_FAIL
    elif policy == "CALL_FAILURE_POLICY_CONTINUE":
        policy = CONTINUE
    if policy not in POLICIES:
        raise ValueError(f"task {task_id}: call failure policy must be FAST_FAIL or CONTINUE, "
                         f"got {policy!r}")
    if type(instance_id) is not str:
        raise ValueError(f"task {task_id}: instance_id must be a str, got {instance_id!r}")
    return policy
