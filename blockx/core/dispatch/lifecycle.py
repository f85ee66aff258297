"""CallLifecycle: every call event of the dispatcher, and the one place a call
becomes DONE. Everything that changes a call's state lives here (the records
only hold it; the SubcallBinder starts a subcall's attempt beside its parent).

Events (each takes ``now`` and returns the adapter's commands, in order):
  dispatch           admit as much as possible (TaskScheduler -> a READY root;
                     cached result / singleflight join / Filter -> Score ->
                     BindCall, joining consecutive ready roots with its key)
  executor_bound     the adapter reserved the context: DispatchCallCmd, and the
                     parked children of a parent follow it
  bind_failed        no reservation: a root is re-queued at once (ArmCallRetry,
                     is_retry false, no attempt used), a subcall parked
  call_waiting       RUNNING -> WAITING (io, subcall) of the current attempt
  call_resumed       WAITING -> RUNNING once its ResumeCall was written
  add_subcall        a running call asks for a subcall (SubcallBinder checks
                     it; the task's cache may answer it at once, or it waits on
                     the task's in-flight call with its key)
  call_completed     UnbindCall, then terminal accounting
  call_failed        UnbindCall, the subtree cancelled, then a retry
                     (RetryScheduler) or terminal accounting
  retry_ready        a retry timer fired: back to the front of the task's queue
  executor_snapshot  executor views refreshed; parked subcalls retried
  executor_lost      every call bound there fails retryably (EXECUTOR_LOST),
                     parents first; an unconfirmed bind is rolled back
  cancel_task        the task ended elsewhere: in-flight calls cancelled
                     (CancelCallCmd), whole subtrees included; state dropped
  flush / epilogue   the TaskCallTable's stop / drain / settle / converge of every
                     dirty task (the drain's cancellations end here);
                     ``epilogue`` = dispatch then flush, run after each batch of
                     events (handlers never admit work themselves)

Rules and theory of operation:
- A call's state is READY, RUNNING, WAITING or DONE (blockx/core/dispatch/calls).
  RUNNING starts when BindCall is emitted (``bound`` turns true on
  executor_bound); a retry reuses the context and call id and only increments
  ``attempt_count`` (the attempt seq the executor echoes), so a frame of an
  older attempt is told apart by that number and ignored.
- Stale events change nothing and return []: a frame for a call not in the call
  table, a DONE call, a READY call (backing off, rolled back), another attempt,
  or a call not bound yet. The answer to an accepted CallCompleted / CallFailed
  always starts with UnbindCall, so the adapter counts accepted frames by that.
- ``set_terminal`` is the single accounting point for DONE and idempotent (a
  DONE call is never re-accounted); only ``cancel_task`` bypasses it, by
  dropping a task's state wholesale. A root's result resolves its singleflight
  waiters with the same result, fills the task's cache and outputs (or trips
  the output cap), counts a failure (FAST_FAIL stops the task on the first
  final root failure), settles its batch and marks the task dirty. A subcall's
  result fills the cache and resumes its parent (SubcallDone) unless it was
  cancelled, and resolves its subcall waiters (CompleteCallFromCache, then
  SubcallDone) or hands them over when it carries no result of the function
  (rules in blockx/core/dispatch/subcalls.py). Ending a call cancels its subtree.
- A failed attempt is retried when it is retryable, a root, has attempts left
  and its task still dispatches; the call is READY with ``retry_armed`` until
  ``retry_ready`` hands it back, once.
- Built last, over the parts built before it; none of them refers back to it.

The class runs once or more per call, so it is compiled with the records it
reads: one source, blockx/core/dispatch/dispatchloop.py in Cython's pure-Python
mode (with dispatchloop.pxd), compiled by the build and interpreted under
BLOCKX_NO_EXTENSIONS=1.
"""
from __future__ import annotations

from blockx.core.dispatch.dispatchloop import CallLifecycle

__all__ = ["CallLifecycle"]
