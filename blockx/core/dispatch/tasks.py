"""The dispatcher's tasks: one TaskCalls record per task, one Batch per
committed batch, and the TaskCallTable that owns them, the dirty set and the steps
of the convergence epilogue (the flush). Everything that decides when a task's
call phase is finished lives here; how each call's result reaches its task
(terminal accounting) is the CallLifecycle's.

Rules and theory of operation:
- Every change that can decide whether a task is finished marks the task
  dirty; convergence happens only in the flush (``CallLifecycle.flush`` runs
  the steps below, the drain's cancellations included), so a chunk of
  completions costs one flush. Per dirty task, in this order:
    1. StopCallProduction, once, if the task stopped dispatching while its
       stream producer was still open (FAST_FAIL failure, output cap);
    2. drain: a stopped task with nothing in flight cancels every remaining
       root (ready, backing off, or waiting on a singleflight leader) as
       CANCELLED; those are not counted in calls_failed;
    3. BatchSettled for each batch whose roots are all DONE (streaming only),
       in batch order; the CallTable forgets the batch's calls. A task opened
       with hand_over gives the batch's outputs away with its BatchSettled
       (a writer consumes them as the task runs): its outputs, their CallCache
       entries and their bytes under maxCollectedOutputBytes are dropped, so
       the core holds the outputs of unsettled batches only, and a later
       batch reuses the settled one's output slots (roots are indexed into
       them), so the outputs list stays as long as the credit window's batches;
    4. ConvergeTaskCalls, once, when every committed root is DONE and the
       producer is done (or the task stopped). ``ok`` is false when a failure
       was recorded (FAST_FAIL's first final root failure, or
       OUTPUT_BYTES_EXCEEDED); ``outputs`` are then empty. Under CONTINUE failed
       roots are skipped, but a phase in which every root failed fails with
       CALL_FAILED (retryable only if every failure was).
- The admission window counts roots RUNNING/WAITING (``inflight``); ``release``
  undoes a bind's accounting and wakes the task in the TaskScheduler when it
  regains room.
- A committed call list is queued compactly (a CallBlock in ``TaskCalls.blocks``,
  counted in ``TaskCalls.queued``): a root gets its CallRecord, call id and
  cache key only when it is admitted (``take_call``), and from then on lives in
  ``TaskCalls.pending`` until DONE. Contexts in the ready queue (retries, a call
  put back when no executor could take it) go before the blocks. A root not yet
  DONE is therefore in ``pending`` or counted in ``queued``; the drain gives the
  never-admitted ones their context to cancel them like any other root.
- Every admitted call (roots and the subcalls that inherit their batch) is
  listed in its Batch so a settled batch frees all of them at once; the Batch
  counts its roots from the start, admitted or not.
- A task stays registered after converging (late events for it are ignored)
  until the lifecycle's ``cancel_task`` / ``remove_task`` takes it out
  (``remove``, then ``forget`` once its calls are cancelled).
"""
from __future__ import annotations

from typing import Any

from blockx.core.dispatch.calls import CallTable
from blockx.core.dispatch.commands import BatchSettled, ConvergeTaskCalls, StopCallProduction
from blockx.core.dispatch.records import Batch, CallRecord, TaskCalls, link_calls
from blockx.core.dispatch.types import CALL_FAILED, OUTPUT_BYTES_EXCEEDED

_idx = lambda b: b.idx  # noqa: E731


class TaskCallTable:
    """Tasks by id, the dirty set and the steps of the flush epilogue."""

    def __init__(self, calls: CallTable, executors: Any, scheduler: Any, ready_queue: Any,
                 max_output_bytes: int) -> None:
        self.by_id: dict[str, TaskCalls] = {}
        self._dirty: list[TaskCalls] = []
        self._calls = calls
        self._exec = executors
        self._sched = scheduler
        self._ReadyQueue = ready_queue
        self._max_output = max_output_bytes
        # Streaming tasks whose outputs leave with BatchSettled: their output slots
        self._hand_over: dict[str, _OutputSlots] = {}

    # --- registration ------------------------------------------------------------------

    def new(self, task_id: str, fast_fail: bool, retry: tuple[int, int, int], instance_id: str,
            streaming: bool, hand_over: bool = False) -> TaskCalls:
        if task_id in self.by_id:
            raise ValueError(f"task {task_id} already has a call phase in the dispatcher")
        if hand_over and streaming:
            self._hand_over[task_id] = _OutputSlots()
        max_attempts, base, jitter = retry
        task = TaskCalls(task_id, fast_fail, max_attempts, base, jitter,
                         self._sched.attach(instance_id), streaming, self._ReadyQueue())
        self.by_id[task_id] = task
        return task

    def register_block(self, task: TaskCalls, block: Any, batch_idx: int) -> None:
        """Queue a committed call list (a CallBlock) in its task, compactly."""
        n = len(block)
        grow = n
        slots = self._hand_over.get(task.task_id) if self._hand_over else None
        if slots is None:
            offset = task.total
        else:   # a handed-over batch's outputs leave at its settle: its slots serve a later batch
            offset = slots.take(batch_idx, n, len(task.outputs))
            grow = max(0, offset + n - len(task.outputs))
        batch = Batch(batch_idx, [])
        batch.remaining = n
        block.base = offset
        block.batch = batch
        if n:
            task.blocks.append(block)
            task.queued += n
        self._add_batch(task, batch, n, grow)

    def register(self, task: TaskCalls, calls: list[CallRecord], batch_idx: int) -> None:
        """Link a batch of ready-made contexts into its task and queue them (the
        intake queues call lists compactly with ``register_block``)."""
        offset = task.total
        if offset:
            for call in calls:
                call.index += offset
        link_calls(task, calls, self._calls.by_id)
        self._add_batch(task, Batch(batch_idx, calls), len(calls))

    def _add_batch(self, task: TaskCalls, batch: Batch, n: int, grow: int | None = None) -> None:
        """The task's side of a new batch of n calls (queued or linked by the
        caller): room for their outputs (``grow`` more slots; n unless slots are
        reused), the batch on the settle and credit accounting, and a turn in
        the scheduler."""
        task.total += n
        task.outputs.extend([None] * (n if grow is None else grow))
        task.batches[batch.idx] = batch
        task.unsettled += 1
        task.next_batch_idx = batch.idx + 1
        if n == 0:
            task.settle_ready.append(batch)
        self.mark_dirty(task)
        if n:
            self._sched.wake(task)

    # --- window and stop -----------------------------------------------------------------

    def mark_dirty(self, task: TaskCalls) -> None:
        if not task.dirty:
            task.dirty = True
            self._dirty.append(task)

    def stop(self, task: TaskCalls, reason: str) -> None:
        """markStopDispatching: nothing more is admitted; the flush drains."""
        if not task.stop_dispatching:
            task.stop_dispatching = True
            task.stop_reason = reason
        self.mark_dirty(task)

    def release(self, call: CallRecord) -> None:
        """Undo a bind's accounting (executor local_inflight, task window)."""
        self._exec.unbind(call)
        if call.parent is None:
            task = call.task
            assert task is not None     # a root is linked to its task from its admission
            task.inflight -= 1
            task.instance.inflight -= 1
            if (task.ready or task.queued) and not task.in_ring:
                self._sched.wake(task)
            if task.stop_dispatching:
                self.mark_dirty(task)

    # --- limits ---------------------------------------------------------------------------

    def output_exceeded(self, task: TaskCalls) -> None:
        if not task.failure_code:
            task.failure_code = OUTPUT_BYTES_EXCEEDED
            task.failure_message = (f"collected outputs reached {task.output_bytes} bytes, over "
                                    f"maxCollectedOutputBytes ({self._max_output}); outputs discarded")
            task.failure_retryable = False
        task.discard_outputs = True
        task.outputs = []
        self.stop(task, "output bytes exceeded")

    # --- the flush epilogue (run by CallLifecycle.flush) -------------------------------------

    def take_dirty(self) -> list:
        """The tasks changed since the last call, no longer marked dirty (a
        removed task is left out)."""
        dirty = self._dirty
        if not dirty:
            return dirty
        self._dirty = []
        out = []
        for task in dirty:
            task.dirty = False
            if not task.removed:
                out.append(task)
        return out

    def stop_production(self, task: TaskCalls, out: list) -> bool:
        """Step 1 for a stopped task (StopCallProduction, once); True when step 2
        (the drain) is due: nothing in flight and roots left."""
        if not task.stop_dispatching:
            return False
        if task.production_open and not task.stop_sent:
            task.stop_sent = True
            out.append(StopCallProduction(task.task_id, task.stop_reason))
        return task.inflight == 0 and bool(task.pending or task.queued)

    def settle_and_converge(self, task: TaskCalls, out: list) -> None:
        """Steps 3 and 4: BatchSettled for settled batches, ConvergeTaskCalls once."""
        if task.settle_ready:
            self._settle(task, out)
        if (not task.converged and not task.pending and not task.queued
                and (not task.production_open or task.stop_dispatching)):
            self._converge(task, out)

    def _settle(self, task: TaskCalls, out: list) -> None:
        batches = task.settle_ready
        task.settle_ready = []
        if len(batches) > 1:
            batches.sort(key=_idx)
        forget = self._calls.forget
        streaming = task.streaming
        slots = self._hand_over.get(task.task_id) if streaming and self._hand_over else None
        for b in batches:
            outputs = None
            if slots is not None:
                outputs = _take_outputs(task, b)
                slots.release(b.idx)
            forget(b.calls)
            task.batches.pop(b.idx, None)
            task.unsettled -= 1
            if streaming:
                out.append(BatchSettled(task.task_id, b.idx, outputs))

    def _converge(self, task: TaskCalls, out: list) -> None:
        task.converged = True
        if not task.failure_code and task.calls_failed and not task.succeeded:
            # CONTINUE skips failed roots, but a phase where every root failed
            # produced nothing: that is a failed task, not an empty success.
            task.failure_code = CALL_FAILED
            task.failure_message = f"all {task.total} calls failed; first: {task.first_failure}"
            task.failure_retryable = task.failures_retryable
        ok = not task.failure_code
        outputs = [o for o in task.outputs if o is not None] if ok else []
        task.outputs = []
        out.append(ConvergeTaskCalls(task.task_id, ok, task.failure_code, task.failure_message,
                                     task.failure_retryable, outputs, task.total,
                                     task.calls_failed, task.call_retries, task.cache_hits))

    # --- teardown (the per-task part of CallLifecycle.cancel_task) -----------------------

    def remove(self, task_id: str, reason: str, out: list) -> TaskCalls | None:
        """Take a task out of the table (None if unknown): it is ``removed`` from
        now on, and its open stream producer is told to stop, once."""
        task = self.by_id.pop(task_id, None)
        if task is None:
            return None
        task.removed = True
        self._hand_over.pop(task_id, None)
        if task.streaming and task.production_open and not task.stop_sent and not task.converged:
            task.stop_sent = True
            out.append(StopCallProduction(task_id, reason))
        return task

    def forget(self, task: TaskCalls) -> None:
        """A removed task whose calls the lifecycle cancelled: its batches' calls
        leave the call table, its queues empty, it leaves the scheduler."""
        for b in task.batches.values():
            self._calls.forget(b.calls)
        task.batches.clear()
        task.ready.clear()
        task.blocks.clear()
        task.queued = 0
        self._sched.detach(task)

    # --- introspection ---------------------------------------------------------------------

    def inflight(self, task_id: str) -> int:
        t = self.by_id.get(task_id)
        return 0 if t is None else t.inflight

    def is_queued(self, call_id: str) -> bool:
        """Whether call_id names a root queued in a CallBlock and never admitted
        (introspection; O(blocks of its task))."""
        task = self.by_id.get(call_id.rpartition("/")[0])
        if task is None:
            return False
        for block in task.blocks:
            prefix = block.prefix
            if call_id.startswith(prefix):
                row = call_id[len(prefix):]
                if row.isdigit() and block.pos <= int(row) < block.n and str(int(row)) == row:
                    return True
        return False

    def call_state(self, call_id: str) -> str | None:
        """A call's state name; READY for a root queued compactly, never admitted;
        None for a call the dispatcher does not hold."""
        state = self._calls.state_name(call_id)
        if state is None and self.is_queued(call_id):
            return "READY"
        return state

    def call_attempts(self, call_id: str) -> int | None:
        attempts = self._calls.attempts(call_id)
        if attempts is None and self.is_queued(call_id):
            return 0
        return attempts

    def progress(self, task_id: str) -> tuple[int, int, int, int] | None:
        """``(total, done, failed, retried)`` of a task's root calls, None for a task
        the dispatcher does not hold. ``total`` is 0 while a streaming producer may
        still commit batches; ``done`` counts roots that reached DONE (succeeded,
        failed or drained); ``failed`` the counted failures; ``retried`` the retry
        attempts armed."""
        t = self.by_id.get(task_id)
        if t is None:
            return None
        total = t.total
        return (0 if t.production_open else total, total - len(t.pending) - t.queued,
                t.calls_failed, t.call_retries)

    def queued_count(self) -> int:
        """Roots READY and waiting for an executor, across tasks (O(tasks))."""
        return sum(len(t.ready) + t.queued for t in self.by_id.values())

    def ready_count(self, task_id: str) -> int:
        t = self.by_id.get(task_id)
        return 0 if t is None else len(t.ready) + t.queued

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.by_id

    def __len__(self) -> int:
        return len(self.by_id)


def _take_outputs(task: TaskCalls, batch: Batch) -> list:
    """The successful outputs of a settled batch's roots, in call order, taken
    out of the task (outputs, CallCache, collected bytes)."""
    roots = sorted((c for c in batch.calls if c.parent is None), key=_index)
    outputs = task.outputs
    keep = not task.discard_outputs       # discarded (output cap): nothing to hand over
    cache = task.cache
    taken = []
    size = 0
    for c in roots:
        if keep:
            o = outputs[c.index]
            if o is not None:
                outputs[c.index] = None
                taken.append(o)
                size += len(o)
        cache.pop(c.key, None)
    task.output_bytes -= size
    return taken


_index = lambda c: c.index  # noqa: E731


class _OutputSlots:
    """Which output slots of a handed-over task each unsettled batch uses; a settled
    batch's slots go to a later batch that fits in them."""

    __slots__ = ("by_batch", "free")

    def __init__(self) -> None:
        self.by_batch: dict[int, tuple[int, int]] = {}   # batch idx -> (first slot, slots)
        self.free: list[tuple[int, int]] = []

    def take(self, batch_idx: int, n: int, end: int) -> int:
        """The first slot of batch_idx's n outputs; ``end`` = slots so far (a new
        region starts there)."""
        free = self.free
        for j, (base, size) in enumerate(free):
            if size >= n:
                del free[j]
                self.by_batch[batch_idx] = (base, size)
                return base
        self.by_batch[batch_idx] = (end, n)
        return end

    def release(self, batch_idx: int) -> None:
        region = self.by_batch.pop(batch_idx, None)
        if region is not None and region[1]:
            self.free.append(region)
