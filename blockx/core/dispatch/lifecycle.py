"""CallLifecycle: every call event of the dispatcher, and the one place a call
becomes DONE. Everything that changes a call's state lives here (the records
only hold it; the SubcallBinder starts a subcall's attempt beside its parent).

Events (each takes ``now`` and returns the adapter's commands, in order; the
adapter's dispatch actor calls them by these names, on ``DispatcherCore.lifecycle``):
  dispatch                admit as much as possible (TaskScheduler -> a READY
                          root; cached result / singleflight join / Filter ->
                          Score -> BindCall, joining consecutive ready roots
                          with its key)
  handle_executor_bound   the adapter reserved the seat: DispatchCallCmd, and
                          the parked children of a parent follow it
  handle_bind_failed      no reservation: a root is re-queued at once
                          (ArmCallRetry, is_retry false, no attempt used), a
                          subcall parked
  handle_call_waiting     RUNNING -> WAITING (io, subcall) of the current attempt
  handle_call_resumed     WAITING -> RUNNING once its ResumeCall was written
  add_subcall             a running call asks for a subcall (SubcallBinder
                          checks it; the task's cache may answer it at once, or
                          it waits on the task's in-flight call with its key)
  handle_call_completed   UnbindCall, then terminal accounting
  handle_call_failed      UnbindCall, the subtree cancelled, then a retry
                          (RetryScheduler) or terminal accounting
  handle_retry_ready      a retry timer fired: back to the front of the task's queue
  handle_executor_snapshot_updated
                          executor views refreshed; parked subcalls retried
  handle_executor_lost    every call bound there fails retryably
                          (EXECUTOR_LOST), parents first; an unconfirmed bind
                          is rolled back
  cancel_task             the task ended elsewhere: in-flight calls cancelled
                          (CancelCallCmd), whole subtrees included; state dropped
  flush / epilogue        the TaskCallTable's stop / drain / settle / converge
                          of every dirty task (the drain's cancellations end
                          here); ``epilogue`` = dispatch then flush, run after
                          each batch of events (handlers never admit work)

Rules and theory of operation:
- A call's state is READY, RUNNING, WAITING or DONE (blockx/core/dispatch/records).
  RUNNING starts when BindCall is emitted (``bound`` turns true on
  handle_executor_bound); a retry reuses the seat and call id and only increments
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

The class runs once or more per call: one source in Cython's pure-Python mode,
compiled with lifecycle.pxd (it reads and writes the records' fields in C and
calls its hot collaborators in C: the ready queue's accessors, the executor
scoring's select_index, the per-call commands' new_*, the scheduler's methods)
and interpreted under BLOCKX_NO_EXTENSIONS=1, where the same names are bound to
those modules' Python functions. Values that come from executor frames or the
config (budgets, retryable, attempts policy) stay Python objects in both forms,
so they accept exactly the same values.
"""
from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

import cython

if TYPE_CHECKING:
    # Compiled, lifecycle.pxd cimports these (C types of the annotations).
    from blockx.core.dispatch.fairness import TaskScheduler
    from blockx.core.dispatch.records import CallRecord

from blockx.core.dispatch.commands import CancelCallCmd, CompleteCallFromCache, SubcallDone
from blockx.core.dispatch.types import (
    CALL_FAILED, ERR_CANCELLED, ERR_EXECUTOR_LOST, ERR_SUBCALL_FAILED, SubcallRejected)

if not cython.compiled:
    # Compiled, lifecycle.pxd cimports these names from the records and the hot paths.
    from blockx._fast import load
    from blockx.core.dispatch.commands import new_bind_call, new_dispatch_call, new_unbind_call
    # (The records' Python names: the same in both of their forms.)
    from blockx.core.dispatch.records import (
        DONE as _DONE, READY as _READY, RUNNING as _RUNNING, WAITING as _WAITING, join as _join,
        take_call as _take, checked_set_state as set_state)

    select_index = load("scoring").select_executor

    def ready_len(q):
        return len(q)

    def ready_peek(q):
        return q.peek()

    def ready_pop(q):
        return q.pop()

    def ready_push(q, item):
        q.push(item)

    def ready_push_front(q, item):
        q.push_front(item)

_by_depth = attrgetter("depth")

__all__ = ["CallLifecycle"]


@cython.final
@cython.cclass
class CallLifecycle:
    """Every call event of the dispatcher, and the one place a call becomes DONE.

    Built last, over the parts built before it (the call table's ``by_id``, the
    TaskCallTable, the TaskScheduler, the ExecutorTable, the SubcallBinder and the
    RetryScheduler); none of them holds a reference back to it. Each event takes
    ``now`` and returns the commands for the adapter, in order. The rules each
    event follows are stated in blockx/core/dispatch/lifecycle.py."""

    if not cython.compiled:
        __slots__ = ("by_id", "tasks", "sched", "ex", "subcalls", "retry", "deadline",
                     "max_output", "on_terminal")

    def __init__(self, by_id: dict, tasks, sched: TaskScheduler, ex, subcalls, retry, deadline,
                 max_output):
        self.by_id = by_id
        self.tasks = tasks
        self.sched = sched
        self.ex = ex
        self.subcalls = subcalls
        self.retry = retry
        self.deadline = deadline
        self.max_output = max_output
        # Called with each context as it enters DONE, before its accounting (tests
        # count transitions with it); None in production.
        self.on_terminal = None

    # --- admission ---------------------------------------------------------------------

    def dispatch(self, now):
        """Admit until nothing more can be: per task the TaskScheduler picks, pop
        a READY root; a cached result completes it at once, a root whose key is
        in flight joins that leader (singleflight); else select an executor
        (Filter -> Score) and emit BindCall, joining the consecutive ready roots
        with the same key."""
        out: list = []
        call: CallRecord
        nxt: CallRecord
        lead: CallRecord
        task: TaskCalls
        rec: ExecutorRecord
        view: ExecutorView
        ready: ReadyQueue
        i: cython.Py_ssize_t
        sched: TaskScheduler = self.sched
        ex = self.ex
        views: list = ex.views          # mutated in place only by snapshot events
        recs: list = ex.recs
        sample, max_runnable, max_inflight, mem, stall = ex.select_params()
        # Sampling: each decision's scan starts at a random view (the core's rand).
        sample_start = ex.sample_start if sample > 0 else None
        c_now: cython.longlong = now
        c_run: cython.longlong = max_runnable
        c_inf: cython.longlong = max_inflight
        c_mem: cython.longlong = mem
        c_stall: cython.longlong = stall
        c_sample: cython.Py_ssize_t = sample
        start: cython.Py_ssize_t = 0
        deadline = self.deadline
        by_id: dict = self.by_id
        while True:
            t = sched.next_task()
            if t is None:
                break
            task = t
            ready = task.ready
            call = ready_pop(ready) if ready_len(ready) else _take(task, by_id)
            if call.state != _READY:
                continue
            key = call.key
            cached = task.cache.get(key)
            if cached is not None:
                task.cache_hits += 1
                out.append(CompleteCallFromCache(call.call_id, task.task_id, False, ""))
                self._set_terminal(call, True, cached, "", "", False, 0, True, out, True)
                continue
            leader = task.flights.get(key)
            # call itself leads while retrying; a root never waits on a subcall
            # (a subcall leader gives no attempts of its own to the roots' policy).
            if leader is not None and leader is not call:
                lead = leader
                if lead.parent is None:
                    _join(lead, call)
                    continue
            if not views:
                i = -1
            else:
                if sample_start is not None:
                    start = sample_start(len(views))
                i = select_index(views, c_now, c_sample, c_run, c_inf, c_mem, c_stall, start)
            if i < 0:
                ready_push_front(ready, call)
                sched.unserved()
                break
            rec = recs[i]
            set_state(call, _RUNNING)
            call.attempt_count += 1
            call.bound = False
            call.budget_ms = deadline
            rec.bind(call)
            eid = call.executor_id
            task.inflight += 1
            task.instance.inflight += 1
            task.flights[key] = call
            out.append(new_bind_call(call.call_id, eid, task.task_id, False, ""))
            while True:
                if ready_len(ready):
                    nxt = ready_peek(ready)
                elif task.queued:
                    nxt = _take(task, by_id)
                    ready_push(ready, nxt)
                else:
                    break
                if nxt.key != key:
                    break
                ready_pop(ready)
                if nxt.state == _READY:
                    _join(call, nxt)
            sched.served(task)
        return out

    # --- binding -----------------------------------------------------------------------

    def handle_executor_bound(self, call_id, now, executor_id=""):
        """The adapter reserved a context for call_id: send it (DispatchCallCmd).
        With ``executor_id`` given, a bind the core no longer wants (the call was
        cancelled meanwhile) is answered with UnbindCall so the reservation is
        not leaked."""
        call: CallRecord
        c = self.by_id.get(call_id)
        if c is None:
            if executor_id:
                return [new_unbind_call(call_id, executor_id)]
            return []
        call = c
        if (call.state != _RUNNING or call.bound
                or (executor_id and call.executor_id != executor_id)):
            if executor_id and (call.state == _READY or call.state == _DONE
                                or call.executor_id != executor_id):
                return [new_unbind_call(call_id, executor_id)]
            return []
        call.bound = True
        parent = call.parent
        parent_id = parent.call_id if parent is not None else ""
        task: TaskCalls = call.task
        out: list = [new_dispatch_call(call_id, call.executor_id, task.task_id, call.function_id,
                                       call.digest, call.entry_selector, call.args_json,
                                       call.budget_ms, call.attempt_count, parent_id)]
        if call.children:
            self.subcalls.bind_children(call, out)
        return out

    def handle_bind_failed(self, call_id, now):
        """The adapter could not reserve the context. A root is re-queued at once
        (ArmCallRetry(now, is_retry=False)) without consuming an attempt; a
        subcall is parked."""
        call: CallRecord
        c = self.by_id.get(call_id)
        if c is None:
            return []
        call = c
        if call.state != _RUNNING or call.bound:
            return []
        out: list = []
        self._bind_failed(call, now, out)
        return out

    def _bind_failed(self, call, now, out):
        rec = call.exec
        self.tasks.release(call)
        rec.view.healthy = False  # until the next snapshot says otherwise
        call.attempt_count -= 1
        set_state(call, _READY)
        if call.parent is not None:
            self.subcalls.park(call)
        else:
            call.retry_armed = True
            self.retry.requeue(call, now, out)
            if call.waiters:
                self._release_subcall_waiters(call, out)
        return 0

    # --- waits ----------------------------------------------------------------------------

    def handle_call_waiting(self, call_id, attempt_seq, now):
        """A CallWaiting (io / subcall) of the current, bound attempt: RUNNING -> WAITING."""
        call: CallRecord
        c = self.by_id.get(call_id)
        if c is not None:
            call = c
            if call.state == _RUNNING and call.bound and call.attempt_count == attempt_seq:
                set_state(call, _WAITING)
        return []

    def handle_call_resumed(self, call_id, now):
        """Its ResumeCall was written: WAITING -> RUNNING."""
        call: CallRecord
        c = self.by_id.get(call_id)
        if c is not None:
            call = c
            if call.state == _WAITING:
                set_state(call, _RUNNING)
        return []

    # --- subcalls ---------------------------------------------------------------------------

    def add_subcall(self, parent_call_id, requesting_executor_id, request_id, function_id,
                    digest, args_json, granted_budget_ms, now=0, entry_selector="main"):
        """Register a subcall of ``parent_call_id``: ``(child_call_id, commands)``,
        or ``(SubcallRejected, [])`` when the SubcallBinder refuses it. A result
        in the task's cache answers it at once (CompleteCallFromCache, then
        SubcallDone); a call of the task with its key in flight makes it wait
        (no command: the leader's end answers it the same way); otherwise it
        leads its key and binds beside its parent or is parked.
        ``args_json`` must be canonical (cachekey.canonical_args_json)."""
        child: CallRecord
        task: TaskCalls
        c = self.subcalls.new_child(parent_call_id, requesting_executor_id, request_id,
                                    function_id, digest, args_json, granted_budget_ms,
                                    entry_selector)
        if type(c) is SubcallRejected:
            return c, []
        child = c
        out: list = []
        task = child.task
        cached = task.cache.get(child.key)
        if cached is not None:
            task.cache_hits += 1
            out.append(CompleteCallFromCache(child.call_id, task.task_id, True, parent_call_id))
            self._set_terminal(child, True, cached, "", "", False, 0, True, out, True)
            return child.call_id, out
        self.subcalls.attach(child, out)
        return child.call_id, out

    def cancel_subtree(self, parent: CallRecord, reason, out: list):
        """Cancel every active descendant of parent, without resuming it."""
        self._cancel_subtree(parent, reason, out)

    def _cancel_subtree(self, parent, reason, out):
        child: CallRecord
        st: cython.int
        children = parent.children
        if not children:
            return 0
        parent.children = None
        tasks = self.tasks
        for c in list(children.values()):
            child = c
            st = child.state
            if st == _DONE:
                continue
            if st == _RUNNING or st == _WAITING:
                out.append(CancelCallCmd(child.call_id, child.executor_id, reason,
                                         child.attempt_count))
                tasks.release(child)
            self._set_terminal(child, False, None, ERR_CANCELLED, reason, False, 0, False, out,
                               False)
        return 0

    # --- completion and failure --------------------------------------------------------------

    def handle_call_completed(self, call_id, attempt_seq, output_json, budget_used_ms, now):
        """A CallCompleted frame. Accepted (the current, bound attempt): the
        commands start with UnbindCall(call_id). Stale or duplicated: []."""
        call: CallRecord
        rec: ExecutorRecord
        view: ExecutorView
        task: TaskCalls
        c = self.by_id.get(call_id)
        if c is None:
            return []
        call = c
        st: cython.int = call.state
        if (st != _RUNNING and st != _WAITING) or not call.bound or call.attempt_count != attempt_seq:
            return []
        if type(output_json) is not bytes:
            output_json = bytes(output_json)
        rec = call.exec
        out: list = [new_unbind_call(call_id, call.executor_id)]
        rec.completions += 1
        view = rec.view
        if view.runnable > 0:
            view.runnable -= 1
        tasks = self.tasks
        if rec.attached:
            # TaskCallTable.release inlined for the common case (an attached executor):
            # ExecutorTable.unbind, and for a root the task window's accounting.
            call.exec = None
            view.local_inflight -= 1
            del rec.calls[call_id]
            if call.parent is None:
                task = call.task
                task.inflight -= 1
                task.instance.inflight -= 1
                if (ready_len(task.ready) or task.queued) and not task.in_ring:
                    self.sched.wake(task)
                if task.stop_dispatching:
                    tasks.mark_dirty(task)
        else:
            tasks.release(call)
        self._set_terminal(call, True, output_json, "", "", False, budget_used_ms, True, out, True)
        return out

    def handle_call_failed(self, call_id, attempt_seq, error_kind, retryable, message, now,
                    budget_used_ms=0):
        """A CallFailed frame (or a failure the adapter synthesized). Accepted:
        the commands start with UnbindCall(call_id). Stale or duplicated: []."""
        call: CallRecord
        c = self.by_id.get(call_id)
        if c is None:
            return []
        call = c
        st: cython.int = call.state
        # Stale: DONE; READY (backing off, or rolled back); another attempt; not yet bound.
        if (st != _RUNNING and st != _WAITING) or not call.bound or call.attempt_count != attempt_seq:
            return []
        out: list = [new_unbind_call(call_id, call.executor_id)]
        self.ex.note_completion(call.exec)
        self.tasks.release(call)
        if call.children:
            self._cancel_subtree(call, "parent call attempt failed", out)
        self._attempt_failed(call, error_kind, bool(retryable), message, budget_used_ms, now, out)
        return out

    def _attempt_failed(self, call, kind, retryable, message, budget_used_ms, now, out):
        if self.retry.may_retry(call, retryable):
            set_state(call, _READY)
            call.bound = False
            call.retry_armed = True
            self.retry.arm(call, now, out)
            if call.waiters:
                self._release_subcall_waiters(call, out)
        else:
            self._set_terminal(call, False, None, kind, message, retryable, budget_used_ms, True,
                               out, True)
        return 0

    def handle_retry_ready(self, call_id, now):
        """A retry timer (ArmCallRetry) fired: the call goes back to the front of
        its task's queue, unless it no longer waits for that timer."""
        call: CallRecord
        task: TaskCalls
        c = self.by_id.get(call_id)
        if c is None:
            return []
        call = c
        if call.state != _READY or not call.retry_armed:
            return []
        call.retry_armed = False
        task = call.task
        ready_push_front(task.ready, call)
        self.sched.wake(task)
        if task.stop_dispatching:
            self.tasks.mark_dirty(task)
        return []

    # --- executors -----------------------------------------------------------------------

    def handle_executor_snapshot_updated(self, snapshots, now):
        """Refresh executor views; retry parked subcalls."""
        self.ex.update(snapshots)
        out: list = []
        self.subcalls.retry_parked(out)
        return out

    def handle_executor_lost(self, executor_id, now, detail=""):
        """Transport lost: every call bound there fails retryably (EXECUTOR_LOST);
        an unconfirmed bind is rolled back instead. Parents go first so their
        subtrees are cancelled rather than failed one by one. ``detail`` (e.g. the
        sandbox limit that killed it) is appended to the calls' message."""
        rec: ExecutorRecord
        call: CallRecord
        r = self.ex.records.get(executor_id)
        if r is None:
            return []
        rec = r
        rec.view.healthy = False
        out: list = []
        message = f"executor {executor_id} lost" + (f": {detail}" if detail else "")
        for c in sorted(rec.calls.values(), key=_by_depth):
            call = c
            if call.exec is not rec:
                continue  # released by an ancestor's subtree cancellation
            if not call.bound:
                self._bind_failed(call, now, out)
                continue
            out.append(new_unbind_call(call.call_id, executor_id))
            self.tasks.release(call)
            if call.children:
                self._cancel_subtree(call, message, out)
            self._attempt_failed(call, ERR_EXECUTOR_LOST, True, message, 0, now, out)
        return out

    # --- the epilogue ---------------------------------------------------------------------

    def flush(self, now=0):
        """Stop / drain / settle / converge every task changed since the last
        flush (the TaskCallTable's steps; the drain's cancellations end here)."""
        out: list = []
        tasks = self.tasks
        while True:
            dirty = tasks.take_dirty()
            if not dirty:
                return out
            for task in dirty:
                if tasks.stop_production(task, out):
                    self._drain(task, out)
                tasks.settle_and_converge(task, out)

    def _drain(self, task, out):
        """Nothing is in flight in a stopped task: cancel what is left."""
        call: CallRecord
        task.ready.clear()
        reason = f"task stopped dispatching: {task.stop_reason}"
        for c in list(task.pending.values()):
            call = c
            if call.state != _DONE:
                self._set_terminal(call, False, None, ERR_CANCELLED, reason, False, 0, False, out,
                                   True)
        by_id: dict = self.by_id
        while task.queued:
            self._set_terminal(_take(task, by_id), False, None, ERR_CANCELLED, reason, False, 0,
                               False, out, True)
        return 0

    def epilogue(self, now):
        """dispatch(now) then flush(now): run after every event batch."""
        out: list = self.dispatch(now)
        out.extend(self.flush(now))
        return out

    # --- teardown ------------------------------------------------------------------------

    def cancel_task(self, task_id, reason, now):
        """The task ended (terminal elsewhere: timeout, watch loss, shutdown).
        Every call still in flight is cancelled (CancelCallCmd), including whole
        subcall subtrees, and the task's state is dropped. No ConvergeTaskCalls
        follows. Unknown tasks are ignored."""
        task: TaskCalls
        call: CallRecord
        st: cython.int
        tasks = self.tasks
        out: list = []
        t = tasks.remove(task_id, reason, out)
        if t is None:
            return out
        task = t
        for c in list(task.pending.values()):
            call = c
            st = call.state
            if st == _RUNNING or st == _WAITING:
                out.append(CancelCallCmd(call.call_id, call.executor_id, reason, call.attempt_count))
                tasks.release(call)
            if call.children:
                self._cancel_subtree(call, reason, out)
            set_state(call, _DONE)
            call.retry_armed = False
        task.pending.clear()
        unpark = self.subcalls.unpark
        b: Batch
        for bb in task.batches.values():
            b = bb
            for c in b.calls:
                call = c
                if call.parked:
                    unpark(c)
        tasks.forget(task)
        return out

    def remove_task(self, task_id):
        """Forget a task (normally after it converged, when nothing is in flight;
        anything still in flight is cancelled as by cancel_task)."""
        return self.cancel_task(task_id, "task removed", 0)

    # --- terminal accounting ---------------------------------------------------------------

    def set_terminal(self, call: CallRecord, ok, output, kind, message, retryable, budget_used_ms,
                     counted, out: list, notify=True):
        """The single accounting point for DONE; idempotent. ``counted``: a real
        failure (calls_failed, FAST_FAIL) rather than a drain or cancellation.
        ``notify``: a subcall resumes its parent (SubcallDone)."""
        self._set_terminal(call, ok, output, kind, message, retryable, budget_used_ms, counted,
                           out, notify)

    @cython.boundscheck(True)
    @cython.wraparound(True)
    def _set_terminal(self, call, ok, output, kind, message, retryable, budget_used_ms, counted,
                      out, notify):
        task: TaskCalls
        parent: CallRecord
        w: CallRecord
        batch: Batch
        if call.state == _DONE:
            return 0
        if self.on_terminal is not None:
            self.on_terminal(call)
        set_state(call, _DONE)
        call.output = output
        call.budget_used_ms = budget_used_ms
        call.retry_armed = False
        if ok:
            call.ok = True
        else:
            call.error_kind = kind
            call.error_message = message
            call.retryable = retryable
        if call.parked:
            self.subcalls.unpark(call)
        if call.children:
            self._cancel_subtree(call, "parent call ended", out)
        task = call.task
        if call.parent is not None:
            parent = call.parent
            siblings = parent.children
            if siblings:
                siblings.pop(call.call_id, None)
            if ok:
                task.cache[call.key] = output
            if notify and (parent.state == _RUNNING or parent.state == _WAITING):
                if ok:
                    out.append(SubcallDone(call.call_id, parent.call_id, parent.executor_id,
                                           call.request_id, True, output, "", "", False,
                                           budget_used_ms, parent.attempt_count, ""))
                else:
                    out.append(SubcallDone(
                        call.call_id, parent.call_id, parent.executor_id, call.request_id, False,
                        None, ERR_SUBCALL_FAILED,
                        f"subcall {call.function_id} ({call.call_id}) failed: {kind}: {message}",
                        retryable, budget_used_ms, parent.attempt_count, kind))
            if call.leader is not None:
                # A waiter that ends first (its parent ended): its leader forgets it.
                w = call.leader
                call.leader = None
                if w.waiters:
                    try:
                        w.waiters.remove(call)
                    except ValueError:
                        pass
            key = call.key
            if task.flights.get(key) is call:
                del task.flights[key]
            if call.waiters:
                self._settle_waiters(call, ok, output, kind, message, retryable, counted, out)
            return 0
        del task.pending[call.call_id]
        key = call.key
        if ok:
            task.succeeded += 1
            task.cache[key] = output
            if not task.discard_outputs:
                task.outputs[call.index] = output
                task.output_bytes += len(output)
                if self.max_output and task.output_bytes > self.max_output:
                    self.tasks.output_exceeded(task)
        elif counted:
            task.calls_failed += 1
            task.failures_retryable = task.failures_retryable and retryable
            if not task.first_failure:
                task.first_failure = (f"call {call.call_id} (function {call.function_id}) failed "
                                      f"after {call.attempt_count} attempt(s): {kind}: {message}")
            if task.fast_fail and not task.failure_code:
                task.failure_code = CALL_FAILED
                task.failure_message = task.first_failure
                task.failure_retryable = retryable
                self.tasks.stop(task, "call failed")
        if task.flights.get(key) is call:
            del task.flights[key]
        if call.waiters:
            self._settle_waiters(call, ok, output, kind, message, retryable, counted, out)
        batch = task.batches[call.batch_idx]
        batch.remaining -= 1
        if batch.remaining == 0:
            task.settle_ready.append(batch)
        if not task.dirty:
            self.tasks.mark_dirty(task)
        return 0

    # --- singleflight -----------------------------------------------------------------------

    def _settle_waiters(self, call, ok, output, kind, message, retryable, counted, out):
        """call, a leader, is DONE: its waiters end with its result. Roots wait on
        roots only and take any result, as ever. A subcall waiter takes a result
        the function gave (an output; a final root failure; a subcall's failure
        that is not retryable); when the leader ended without one (cancelled with
        its parent or its task's drain, or a retryable failure of its one
        attempt), the subcall waiters are handed over instead (``_hand_off``)."""
        w: CallRecord
        task: TaskCalls = call.task
        waiters: list = call.waiters
        call.waiters = None
        deliver: cython.bint = ok or (counted and (call.parent is None or not retryable))
        moved: list = None
        for ww in waiters:
            w = ww
            if w.parent is None:
                self._set_terminal(w, ok, output, kind, message, retryable, 0, counted, out, True)
            elif deliver:
                w.leader = None
                if w.state != _DONE:
                    out.append(CompleteCallFromCache(w.call_id, task.task_id, True,
                                                     w.parent.call_id))
                    self._set_terminal(w, ok, output, kind, message, retryable, 0, counted, out,
                                       True)
            else:
                if moved is None:
                    moved = []
                moved.append(w)
        if moved is not None:
            self._hand_off(call, moved, out)
        return 0

    def _release_subcall_waiters(self, call, out):
        """A root leader went back to READY (a retry, a failed bind): its root
        waiters stay, its subcall waiters do not wait on a call that may not run
        again (its task may stop dispatching meanwhile)."""
        w: CallRecord
        stay: list = []
        moved: list = []
        for ww in call.waiters:
            w = ww
            if w.parent is None:
                stay.append(w)
            else:
                moved.append(w)
        if moved:
            call.waiters = stay if stay else None
            self._hand_off(call, moved, out)
        return 0

    def _hand_off(self, leader, moved, out):
        """Subcall waiters whose leader will not answer them: a result cached
        meanwhile answers them; else the first whose parent still runs leads in
        its place (it binds beside its own parent, and no longer counts as a
        cache hit) and the others wait on it. A waiter whose parent is ending is
        left to that parent's subtree cancellation, as is every waiter of a
        task being cancelled."""
        w: CallRecord
        p: CallRecord
        first: CallRecord = None
        task: TaskCalls = leader.task
        for ww in moved:
            w = ww
            w.leader = None
        if task.removed:
            return 0
        key = leader.key
        cached = task.cache.get(key)
        for ww in moved:
            w = ww
            if w.state == _DONE:
                continue
            p = w.parent
            siblings = p.children
            if (p.state != _RUNNING and p.state != _WAITING) or not siblings \
                    or w.call_id not in siblings:
                continue
            if cached is not None:
                out.append(CompleteCallFromCache(w.call_id, task.task_id, True, p.call_id))
                self._set_terminal(w, True, cached, "", "", False, 0, True, out, True)
            elif first is None:
                first = w
                task.cache_hits -= 1
            else:
                w.leader = first
                if first.waiters is None:
                    first.waiters = [w]
                else:
                    first.waiters.append(w)
        if first is not None:
            if task.flights.get(key) is None:
                task.flights[key] = first
            self.subcalls.try_bind(first, out)
        return 0
