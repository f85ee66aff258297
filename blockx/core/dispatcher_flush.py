"""The convergence epilogue (spec FlushDirtyTasks) and task teardown.

Rules: every entry point that can change whether a task is finished marks it
dirty; convergence happens only here. Per dirty task, in this order:
  1. StopCallProduction, once, if the task stopped dispatching while its
     stream producer was still open (FAST_FAIL failure, output cap);
  2. drain: a stopped task with nothing in flight cancels every remaining root
     (ready, backing off, or waiting on a singleflight leader) as CANCELLED;
     those are not counted in calls_failed;
  3. BatchSettled for each batch whose roots are all DONE (streaming only), in
     batch order; the batch's call contexts are forgotten;
  4. ConvergeTaskCalls, once, when every committed root is DONE and the
     producer is done (or the task stopped). ``ok`` is false when a failure was
     recorded (FAST_FAIL's first final root failure, or OUTPUT_BYTES_EXCEEDED);
     ``outputs`` are then empty. Under CONTINUE failed roots are skipped, but
     a phase in which every root failed fails with CALL_FAILED (retryable
     only if every failure was).
The task stays registered after converging (late events for it are ignored)
until ``remove_task`` / ``cancel_task``.
"""
from __future__ import annotations

from typing import Any

from blockx.core.dispatcher_commands import (
    BatchSettled, CancelCallCmd, ConvergeTaskCalls, StopCallProduction)
from blockx.core.dispatcher_state import DONE, RUNNING, WAITING
from blockx.core.dispatcher_types import CALL_FAILED, ERR_CANCELLED

_idx = lambda b: b.idx  # noqa: E731


class FlushMixin:
    _tasks: dict[str, Any]
    _dirty: list[Any]

    def flush_dirty_tasks(self, now: int) -> list:
        out: list = []
        while self._dirty:
            dirty = self._dirty
            self._dirty = []
            for task in dirty:
                task.dirty = False
                if not task.removed:
                    self._flush_task(task, out)
        return out

    def _flush_task(self, task: Any, out: list) -> None:
        if task.stop_dispatching:
            if task.production_open and not task.stop_sent:
                task.stop_sent = True
                out.append(StopCallProduction(task.task_id, task.stop_reason))
            if task.inflight == 0 and task.pending:
                self._drain(task, out)
        if task.settle_ready:
            self._settle(task, out)
        if (not task.converged and not task.pending
                and (not task.production_open or task.stop_dispatching)):
            self._converge(task, out)

    def _drain(self, task: Any, out: list) -> None:
        """drainCancelledCalls: nothing is in flight, so cancel what is left."""
        task.ready.clear()
        reason = f"task stopped dispatching: {task.stop_reason}"
        for ctx in list(task.pending.values()):
            if ctx.state != DONE:
                self._set_terminal(ctx, False, None, ERR_CANCELLED, reason,  # type: ignore[attr-defined]
                                   False, 0, False, out)

    def _settle(self, task: Any, out: list) -> None:
        batches = task.settle_ready
        task.settle_ready = []
        if len(batches) > 1:
            batches.sort(key=_idx)
        calls_map = self._calls  # type: ignore[attr-defined]
        streaming = task.streaming
        for b in batches:
            for c in b.calls:
                calls_map.pop(c.call_id, None)
            task.batches.pop(b.idx, None)
            task.unsettled -= 1
            if streaming:
                out.append(BatchSettled(task.task_id, b.idx))

    def _converge(self, task: Any, out: list) -> None:
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

    # --- teardown ----------------------------------------------------------------------

    def cancel_task(self, task_id: str, reason: str, now: int) -> list:
        """The task ended (terminal elsewhere: timeout, watch loss, shutdown).

        Every call still in flight is cancelled (CancelCallCmd), including whole
        subcall subtrees, and the task's state is dropped. No ConvergeTaskCalls
        follows. Unknown tasks are ignored."""
        task = self._tasks.pop(task_id, None)
        if task is None:
            return []
        task.removed = True
        out: list = []
        if task.streaming and task.production_open and not task.stop_sent and not task.converged:
            task.stop_sent = True
            out.append(StopCallProduction(task_id, reason))
        for ctx in list(task.pending.values()):
            st = ctx.state
            if st == RUNNING or st == WAITING:
                out.append(CancelCallCmd(ctx.call_id, ctx.executor_id, reason, ctx.attempt_count))
                self._release(ctx)  # type: ignore[attr-defined]
            if ctx.children:
                self._cancel_subtree(ctx, reason, out)  # type: ignore[attr-defined]
            ctx.state = DONE
            ctx.retry_armed = False
        task.pending.clear()
        calls_map = self._calls  # type: ignore[attr-defined]
        pending_bind = self._pending_bind  # type: ignore[attr-defined]
        for b in task.batches.values():
            for c in b.calls:
                calls_map.pop(c.call_id, None)
                if c.parked:
                    c.parked = False
                    pending_bind.pop(c.call_id, None)
        task.batches.clear()
        task.ready.clear()
        self._sched.detach(task)  # type: ignore[attr-defined]
        return out

    def remove_task(self, task_id: str) -> list:
        """Forget a task (normally after it converged, when nothing is in flight;
        anything still in flight is cancelled as by cancel_task)."""
        return self.cancel_task(task_id, "task removed", 0)
