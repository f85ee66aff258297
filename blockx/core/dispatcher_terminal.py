"""Terminal accounting: the single point where a call becomes DONE (spec
setCallTerminal), the task-level consequences (outputs, cache, singleflight
waiters, batch settle counts, FAST_FAIL stop, the output cap) and whole-subtree
cancellation (spec finalizeSubcallSubtree).

Rules: ``_set_terminal`` is idempotent (a DONE call is never re-accounted), and
it is the only code that moves a call to DONE except ``cancel_task``, which
drops the task's state wholesale. It marks the task dirty; convergence itself
happens only in the flush epilogue. A root's result resolves its singleflight
waiters with the same result; a subcall's result resumes its parent
(SubcallDone) unless it was cancelled.
"""
from __future__ import annotations

from typing import Any

from blockx.core.dispatcher_commands import CancelCallCmd, SubcallDone
from blockx.core.dispatcher_state import DONE, RUNNING, WAITING, CallContext
from blockx.core.dispatcher_types import (
    CALL_FAILED, ERR_CANCELLED, ERR_SUBCALL_FAILED, OUTPUT_BYTES_EXCEEDED)


class TerminalMixin:
    _dirty: list[Any]
    _pending_bind: dict[str, CallContext]
    _max_output: int

    def _set_terminal(self, ctx: CallContext, ok: bool, output: bytes | None, kind: str,
                      message: str, retryable: bool, budget_used_ms: int, counted: bool,
                      out: list, notify: bool = True) -> None:
        """The single accounting point for DONE (spec setCallTerminal); idempotent.

        ``counted``: a real failure (calls_failed, FAST_FAIL) rather than a drain
        or cancellation. ``notify``: a subcall resumes its parent (SubcallDone)."""
        if ctx.state == DONE:
            return
        ctx.state = DONE
        ctx.output = output
        ctx.budget_used_ms = budget_used_ms
        ctx.retry_armed = False
        if ok:
            ctx.ok = True
        else:
            ctx.error_kind = kind
            ctx.error_message = message
            ctx.retryable = retryable
        if ctx.parked:
            ctx.parked = False
            self._pending_bind.pop(ctx.call_id, None)
        if ctx.children:
            self._cancel_subtree(ctx, "parent call ended", out)
        task = ctx.task
        parent = ctx.parent
        if parent is not None:
            siblings = parent.children
            if siblings:
                siblings.pop(ctx.call_id, None)
            if ok:
                task.cache[ctx.key] = output
            if notify and (parent.state == RUNNING or parent.state == WAITING):
                if ok:
                    out.append(SubcallDone(ctx.call_id, parent.call_id, parent.executor_id,
                                           ctx.request_id, True, output, "", "", False,
                                           budget_used_ms, parent.attempt_count, ""))
                else:
                    out.append(SubcallDone(
                        ctx.call_id, parent.call_id, parent.executor_id, ctx.request_id, False,
                        None, ERR_SUBCALL_FAILED,
                        f"subcall {ctx.function_id} ({ctx.call_id}) failed: {kind}: {message}",
                        retryable, budget_used_ms, parent.attempt_count, kind))
            return
        del task.pending[ctx.call_id]
        key = ctx.key
        if ok:
            task.succeeded += 1
            task.cache[key] = output
            if not task.discard_outputs:
                task.outputs[ctx.index] = output
                task.output_bytes += len(output)
                if self._max_output and task.output_bytes > self._max_output:
                    self._output_exceeded(task)
        elif counted:
            task.calls_failed += 1
            task.failures_retryable = task.failures_retryable and retryable
            if not task.first_failure:
                task.first_failure = (f"call {ctx.call_id} (function {ctx.function_id}) failed "
                                      f"after {ctx.attempt_count} attempt(s): {kind}: {message}")
            if task.fast_fail and not task.failure_code:
                task.failure_code = CALL_FAILED
                task.failure_message = task.first_failure
                task.failure_retryable = retryable
                self._stop(task, "call failed")
        if task.flights.get(key) is ctx:
            del task.flights[key]
        waiters = ctx.waiters
        if waiters:
            ctx.waiters = None
            for w in waiters:
                self._set_terminal(w, ok, output, kind, message, retryable, 0, counted, out)
        batch = task.batches[ctx.batch_idx]
        batch.remaining -= 1
        if batch.remaining == 0:
            task.settle_ready.append(batch)
        if not task.dirty:
            task.dirty = True
            self._dirty.append(task)

    def _output_exceeded(self, task: Any) -> None:
        if not task.failure_code:
            task.failure_code = OUTPUT_BYTES_EXCEEDED
            task.failure_message = (f"collected outputs reached {task.output_bytes} bytes, over "
                                    f"maxCollectedOutputBytes ({self._max_output}); outputs discarded")
            task.failure_retryable = False
        task.discard_outputs = True
        task.outputs = []
        self._stop(task, "output bytes exceeded")

    def _stop(self, task: Any, reason: str) -> None:
        """markStopDispatching: nothing more is admitted; the flush drains."""
        if not task.stop_dispatching:
            task.stop_dispatching = True
            task.stop_reason = reason
        self._mark_dirty(task)

    def _mark_dirty(self, task: Any) -> None:
        if not task.dirty:
            task.dirty = True
            self._dirty.append(task)

    def _cancel_subtree(self, parent: CallContext, reason: str, out: list) -> None:
        """finalizeSubcallSubtree: cancel every active descendant of parent."""
        children = parent.children
        if not children:
            return
        parent.children = None
        for child in list(children.values()):
            if child.state == DONE:
                continue
            st = child.state
            if st == RUNNING or st == WAITING:
                out.append(CancelCallCmd(child.call_id, child.executor_id, reason,
                                         child.attempt_count))
                self._release(child)
            self._set_terminal(child, False, None, ERR_CANCELLED, reason, False, 0, False, out,
                               notify=False)
