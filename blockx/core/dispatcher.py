"""DispatcherCore: the Worker-global, Sans-IO call scheduler (spec "Call
execution subsystem"), a thin facade over parts that each own their state.

Rules: single writer (the adapter's dispatch actor); every input is a method
call carrying ``now`` (int ms); every output is a list of commands
(``dispatcher_commands``) that the adapter executes in order, feeding results
back as events. The core never reads a clock, sleeps, or picks a random number
(retry jitter and the start of a sampled executor scan come from the injected
``rand``). Command lists never alias core state.

Driving it (the adapter's loop):
  1. register work: ``prepare_call_phase`` (pure, may run off-actor) then
     ``commit_call_phase``; or ``commit_call_stream`` + per batch
     ``prepare_call_batch`` / ``commit_call_batch`` + ``production_done``;
  2. feed events: ``handle_executor_bound`` / ``handle_bind_failed`` (right
     after executing a BindCall), ``handle_call_waiting``, ``handle_call_resumed``,
     ``handle_call_completed``, ``handle_call_failed``, ``handle_retry_ready``,
     ``handle_executor_snapshot_updated``, ``handle_executor_lost``,
     ``add_subcall``, ``cancel_task`` / ``remove_task``;
  3. after each event or batch of events run the epilogue: ``dispatch(now)``
     (admit as much as possible) then ``flush_dirty_tasks(now)`` (stop / drain /
     settle / converge); ``epilogue(now)`` does both. Handlers never admit new
     work themselves, so a chunk of completions costs one epilogue.
See ``dispatcher_commands`` for what each command asks of the adapter.

Parts (each file opens with its own rules):
  CallTable (dispatcher_calls)      calls by id; CallContext, the per-call state
  TaskTable (dispatcher_tasks)      TaskCalls per task, batches, the dirty set,
                                    terminal accounting, flush/settle/converge
  CallIntake (dispatcher_intake)    prepare/commit of call phases and batches
  RetryScheduler (dispatcher_retry) backoff, ArmCallRetry, retry timers' flag
  SubcallBinder (dispatcher_subcalls) subcall checks, bind beside the parent,
                                    parking, subtree cancellation
  ExecutorTable (dispatcher_select) executor views, Filter -> Score
  TaskScheduler (dispatcher_fairness) which task admits next (instance fairness)
  DispatchLoop (blockx/_fast/dispatchloop, compiled; twin dispatchloop_py)
                                    the per-call steps over those parts: admission
                                    (``dispatch``), bound, completion and the
                                    terminal accounting (``TaskTable.set_terminal``);
                                    it also holds the per-call records (CallContext,
                                    TaskCalls, Batch, InstanceState, ExecutorRecord)
                                    and the TaskScheduler so it reads them in C
The facade's ``dispatch`` / ``handle_executor_bound`` / ``handle_call_completed``
are the loop's bound methods (set in ``__init__``), so the hot path goes through
no Python frame of the facade; a failed attempt, retries, subcalls and teardown
stay in the facade and its parts.

Call ids: roots of a one-shot call phase are ``f"{task_id}/{index}"``; roots
of a streaming batch ``f"{task_id}/{batch_idx}.{row}"``; subcalls
``f"{parent_call_id}/sub-{n}"`` with ``n`` from the SubcallBinder's counter.
The last path segment tells the forms apart, so ids are unique across tasks.

Theory of operation (spec semantics kept): per-task ReadyQueue, admission
window (``task_max_inflight_calls`` root calls RUNNING/WAITING), CallCache of
successful outputs and Singleflight (a second call with the key of an in-flight
root waits for it) keyed by ``cachekey.cache_key``; Filter -> Score executor
selection; retries ``base * 2^(attempt-1)`` + jitter via ArmCallRetry; stale
events dropped (DONE ignores everything late; a failure for a READY call that
already ran, or with a different attempt seq, is stale); FAST_FAIL stops
dispatching on the first final root failure and drain-cancels the rest once
nothing is in flight; DONE is entered only in ``TaskTable.set_terminal``.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Iterable

from blockx._fast import load
from blockx.core.dispatcher_calls import DONE, READY, RUNNING, WAITING, CallContext, CallTable
from blockx.core.dispatcher_commands import (
    BindCall, CompleteCallFromCache, DispatchCallCmd, SubcallDone, UnbindCall)
from blockx.core.dispatcher_config import DispatcherConfig
from blockx.core.dispatcher_fairness import TaskScheduler
from blockx.core.dispatcher_intake import CallIntake, PreparedCalls
from blockx.core.dispatcher_retry import RetryScheduler
from blockx.core.dispatcher_select import ExecutorTable
from blockx.core.dispatcher_subcalls import SubcallBinder
from blockx.core.dispatcher_tasks import TaskTable
from blockx.core.dispatcher_types import (
    CALL_FAILED, ERR_EXECUTOR_LOST, ERR_SUBCALL_FAILED, FAST_FAIL, ExecutorSnapshot, RetryPolicy,
    SubcallRejected)

__all__ = ["DispatcherCore", "wire_dispatch_loop"]

_by_depth = attrgetter("depth")
_loop_module = load("dispatchloop")


def wire_dispatch_loop(calls: CallTable, tasks: TaskTable, sched: TaskScheduler, ex: ExecutorTable,
                       subcalls: SubcallBinder, deadline_ms: int, max_output_bytes: int) -> Any:
    """The per-call steps (admission, bound, completion, terminal accounting) over
    the given parts, compiled in blockx/_fast/dispatchloop (twin: dispatchloop_py);
    the TaskTable's set_terminal runs in it from now on."""
    loop = _loop_module.DispatchLoop(
        calls.by_id, tasks, sched, ex, subcalls, deadline_ms, max_output_bytes,
        {"BindCall": BindCall, "UnbindCall": UnbindCall, "DispatchCallCmd": DispatchCallCmd,
         "CompleteCallFromCache": CompleteCallFromCache, "SubcallDone": SubcallDone},
        {"CALL_FAILED": CALL_FAILED, "ERR_SUBCALL_FAILED": ERR_SUBCALL_FAILED})
    tasks.loop = loop
    return loop


class DispatcherCore:
    def __init__(self, config: DispatcherConfig, rand: Callable[[], float], *,
                 readyqueue: Any = None, scoring: Any = None, cachekey: Any = None) -> None:
        """``readyqueue`` / ``scoring`` / ``cachekey`` override the hot-path
        modules (default: ``blockx._fast.load(name)``), for parity tests."""
        config.validate()
        if not callable(rand):
            raise TypeError("rand must be a callable returning a float in [0, 1)")
        self.config = config
        cache_key = (cachekey or load("cachekey")).cache_key
        self._exec = ExecutorTable(scoring or load("scoring"), config, rand)
        self._sched = TaskScheduler(config.instance_fairness, config.effective_fairness_quantum,
                                    config.task_max_inflight_calls)
        self._calls = CallTable()
        self._by_id = self._calls.by_id      # never rebound: the per-call lookups use it
        self._tasks = TaskTable(self._calls, self._exec, self._sched,
                                (readyqueue or load("readyqueue")).ReadyQueue,
                                config.max_collected_output_bytes)
        self._subcalls = SubcallBinder(self._calls, self._tasks, self._exec, cache_key,
                                       config.max_subcall_depth)
        self._tasks.subcalls = self._subcalls
        self._retry = RetryScheduler(rand, config.max_backoff_ms)
        self._intake = CallIntake(config, self._tasks, cache_key)
        self._deadline = config.call_deadline_ms
        self._loop = wire_dispatch_loop(self._calls, self._tasks, self._sched, self._exec,
                                        self._subcalls, self._deadline,
                                        config.max_collected_output_bytes)
        # The per-call entry points, without a facade frame (same signatures as the methods).
        self.dispatch = self._loop.dispatch
        self.handle_executor_bound = self._loop.executor_bound
        self.handle_call_completed = self._loop.call_completed
        self.handle_call_waiting = self._loop.call_waiting
        self.handle_call_resumed = self._loop.call_resumed
        self.add_subcall = self._subcalls.add

    # --- registering calls (CallIntake) ----------------------------------------------------

    def prepare_call_phase(self, task_id: str, calls: Iterable, policy: str = FAST_FAIL,
                           retry: RetryPolicy | tuple | None = None,
                           instance_id: str = "") -> PreparedCalls:
        """Build the call contexts of a one-shot call list. No side effects, so
        it may run off the actor."""
        return self._intake.prepare_call_phase(task_id, calls, policy, retry, instance_id)

    def prepare_packed_call_phase(self, task_id: str, fns: list, fidx: Any, args: bytes, offs: Any,
                                  policy: str = FAST_FAIL, retry: RetryPolicy | tuple | None = None,
                                  instance_id: str = "") -> PreparedCalls:
        """prepare_call_phase for a call list already packed (CallIntake documents
        the arrays): they become the queue without a per-call pass."""
        return self._intake.prepare_packed_call_phase(task_id, fns, fidx, args, offs, policy, retry,
                                                      instance_id)

    def commit_call_phase(self, prepared: PreparedCalls, now: int) -> list:
        return self._intake.commit_call_phase(prepared, now)

    def commit_call_stream(self, task_id: str, policy: str = FAST_FAIL,
                           retry: RetryPolicy | tuple | None = None, instance_id: str = "",
                           now: int = 0, hand_over: bool = False) -> list:
        """Open a streaming call phase; batches follow via commit_call_batch.
        ``hand_over``: each BatchSettled carries the batch's outputs, and the core
        keeps none of them (nor their cache entries) once the batch settled."""
        return self._intake.commit_call_stream(task_id, policy, retry, instance_id, now, hand_over)

    def prepare_call_batch(self, task_id: str, batch_idx: int, calls: Iterable) -> PreparedCalls:
        """Build the call contexts of one streaming batch. No side effects."""
        return self._intake.prepare_call_batch(task_id, batch_idx, calls)

    def commit_call_batch(self, prepared: PreparedCalls, now: int) -> list:
        return self._intake.commit_call_batch(prepared, now)

    def production_done(self, task_id: str, now: int) -> list:
        """The stream producer will commit no more batches."""
        return self._intake.production_done(task_id, now)

    def batch_credits(self, task_id: str) -> int:
        """Batches the producer may still commit before one settles."""
        return self._intake.batch_credits(task_id)

    def add_subcall(self, parent_call_id: str, requesting_executor_id: str, request_id: str,
                    function_id: str, digest: str, args_json: bytes, granted_budget_ms: int,
                    now: int, entry_selector: str = "main") -> tuple[str | SubcallRejected, list]:
        """Register a subcall of ``parent_call_id``.

        Returns ``(child_call_id, commands)``, or ``(SubcallRejected, [])`` when
        the request is refused. ``args_json`` must be canonical
        (cachekey.canonical_args_json) so the cache and cycle checks see equal
        arguments as equal bytes."""
        return self._subcalls.add(parent_call_id, requesting_executor_id, request_id, function_id,
                                  digest, args_json, granted_budget_ms, now, entry_selector)

    # --- admission ---------------------------------------------------------------------

    def dispatch(self, now: int) -> list:
        """TryDispatchNext until nothing more can be admitted: per task picked by
        the TaskScheduler, pop a READY root; a CallCache hit completes it at once,
        a root whose key is in flight joins that leader (singleflight); else
        select an executor (Filter -> Score) and emit BindCall, joining the
        consecutive ready roots with the same key. (The DispatchLoop's step; the
        instance attribute set in __init__ calls it without this frame.)"""
        return self._loop.dispatch(now)

    def flush_dirty_tasks(self, now: int) -> list:
        """Stop / drain / settle / converge every task changed since the last flush."""
        return self._tasks.flush()

    def epilogue(self, now: int) -> list:
        """dispatch(now) then flush_dirty_tasks(now): run after every event batch."""
        out = self.dispatch(now)
        out.extend(self.flush_dirty_tasks(now))
        return out

    # --- binding -----------------------------------------------------------------------

    def handle_executor_bound(self, call_id: str, now: int, executor_id: str = "") -> list:
        """The adapter reserved a context for call_id: send it (DispatchCallCmd).

        With ``executor_id`` given, a bind the core no longer wants (the call
        was cancelled meanwhile) is answered with UnbindCall so the reservation
        is not leaked."""
        return self._loop.executor_bound(call_id, now, executor_id)

    def handle_bind_failed(self, call_id: str, now: int) -> list:
        """The adapter could not reserve the context. A root is re-queued at
        once (ArmCallRetry(now, is_retry=False)) without consuming an attempt;
        a subcall is parked."""
        ctx = self._by_id.get(call_id)
        if ctx is None or ctx.state != RUNNING or ctx.bound:
            return []
        out: list = []
        self._bind_failed(ctx, now, out)
        return out

    def _bind_failed(self, ctx: CallContext, now: int, out: list) -> None:
        rec = ctx.exec
        self._tasks.release(ctx)
        rec.view.healthy = False  # until the next snapshot says otherwise
        ctx.attempt_count -= 1
        ctx.state = READY
        if ctx.parent is not None:
            self._subcalls.park(ctx)
        else:
            self._retry.requeue(ctx, now, out)

    # --- execution events ----------------------------------------------------------------

    def handle_call_waiting(self, call_id: str, attempt_seq: int, now: int) -> list:
        """A CallWaiting (io / subcall) of the current, bound attempt: RUNNING -> WAITING."""
        return self._loop.call_waiting(call_id, attempt_seq, now)

    def handle_call_resumed(self, call_id: str, now: int) -> list:
        """Its ResumeCall was written: WAITING -> RUNNING."""
        return self._loop.call_resumed(call_id, now)

    def handle_call_completed(self, call_id: str, attempt_seq: int, output_json: bytes,
                              budget_used_ms: int, now: int) -> list:
        """A CallCompleted frame. Accepted (the current, bound attempt): the
        commands start with UnbindCall(call_id). Stale or duplicated: []."""
        return self._loop.call_completed(call_id, attempt_seq, output_json, budget_used_ms, now)

    def handle_call_failed(self, call_id: str, attempt_seq: int, error_kind: str, retryable: bool,
                           message: str, now: int, budget_used_ms: int = 0) -> list:
        """A CallFailed frame (or a failure the adapter synthesized). Accepted:
        the commands start with UnbindCall(call_id). Stale or duplicated: []."""
        ctx = self._by_id.get(call_id)
        if ctx is None:
            return []
        st = ctx.state
        # Stale: DONE; READY (backing off, or rolled back); another attempt; not yet bound.
        if (st != RUNNING and st != WAITING) or not ctx.bound or ctx.attempt_count != attempt_seq:
            return []
        rec = ctx.exec
        out: list = [UnbindCall(call_id, ctx.executor_id)]
        self._exec.note_completion(rec)
        self._tasks.release(ctx)
        if ctx.children:
            self._subcalls.cancel_subtree(ctx, "parent call attempt failed", out)
        self._attempt_failed(ctx, error_kind, bool(retryable), message, budget_used_ms, now, out)
        return out

    def _attempt_failed(self, ctx: CallContext, kind: str, retryable: bool, message: str,
                        budget_used_ms: int, now: int, out: list) -> None:
        if self._retry.may_retry(ctx, retryable):
            self._retry.retry(ctx, now, out)
        else:
            self._tasks.set_terminal(ctx, False, None, kind, message, retryable, budget_used_ms,
                                     True, out)

    def handle_retry_ready(self, call_id: str, now: int) -> list:
        ctx = self._by_id.get(call_id)
        if ctx is None or not self._retry.fire(ctx):
            return []
        task = ctx.task
        task.ready.push_front(ctx)
        self._sched.wake(task)
        if task.stop_dispatching:
            self._tasks.mark_dirty(task)
        return []

    # --- executors -----------------------------------------------------------------------

    def handle_executor_snapshot_updated(self, snapshots: Iterable[ExecutorSnapshot],
                                         now: int) -> list:
        """Refresh executor views; retry parked subcalls."""
        self._exec.update(snapshots)
        out: list = []
        self._subcalls.retry_parked(out)
        return out

    def handle_executor_lost(self, executor_id: str, now: int, detail: str = "") -> list:
        """Transport lost: every call bound there fails retryably (EXECUTOR_LOST);
        an unconfirmed bind is rolled back instead. Parents go first so their
        subtrees are cancelled rather than failed one by one. `detail` (e.g. the
        sandbox limit that killed it) is appended to the calls' message."""
        rec = self._exec.records.get(executor_id)
        if rec is None:
            return []
        rec.view.healthy = False
        out: list = []
        message = f"executor {executor_id} lost" + (f": {detail}" if detail else "")
        for ctx in sorted(rec.calls.values(), key=_by_depth):
            if ctx.exec is not rec:
                continue  # released by an ancestor's subtree cancellation
            if not ctx.bound:
                self._bind_failed(ctx, now, out)
                continue
            out.append(UnbindCall(ctx.call_id, executor_id))
            self._tasks.release(ctx)
            if ctx.children:
                self._subcalls.cancel_subtree(ctx, message, out)
            self._attempt_failed(ctx, ERR_EXECUTOR_LOST, True, message, 0, now, out)
        return out

    # --- teardown ------------------------------------------------------------------------

    def cancel_task(self, task_id: str, reason: str, now: int) -> list:
        """The task ended (terminal elsewhere: timeout, watch loss, shutdown).

        Every call still in flight is cancelled (CancelCallCmd), including whole
        subcall subtrees, and the task's state is dropped. No ConvergeTaskCalls
        follows. Unknown tasks are ignored."""
        return self._tasks.cancel(task_id, reason)

    def remove_task(self, task_id: str) -> list:
        """Forget a task (normally after it converged, when nothing is in flight;
        anything still in flight is cancelled as by cancel_task)."""
        return self.cancel_task(task_id, "task removed", 0)

    # --- introspection (tests, metrics, debugging; read-only) ------------------------------

    def call_state(self, call_id: str) -> str | None:
        state = self._calls.state_name(call_id)
        if state is None and self._tasks.is_queued(call_id):
            return "READY"          # queued compactly, never admitted
        return state

    def call_attempts(self, call_id: str) -> int | None:
        attempts = self._calls.attempts(call_id)
        if attempts is None and self._tasks.is_queued(call_id):
            return 0
        return attempts

    def has_task(self, task_id: str) -> bool:
        return task_id in self._tasks

    def task_inflight(self, task_id: str) -> int:
        return self._tasks.inflight(task_id)

    def task_ready(self, task_id: str) -> int:
        return self._tasks.ready_count(task_id)

    # ---- progress (issue 15 part 2): read-only, from TaskCalls' own counters ----
    def task_progress(self, task_id: str) -> tuple[int, int, int, int] | None:
        """``(total, done, failed, retried)`` of a task's root calls, None for a task
        the dispatcher does not hold. ``total`` is 0 while a streaming producer may
        still commit batches; ``done`` counts roots that reached DONE (succeeded,
        failed or drained); ``failed`` the counted failures; ``retried`` the retry
        attempts armed."""
        t = self._tasks.by_id.get(task_id)
        if t is None:
            return None
        total = t.total
        return (0 if t.production_open else total, total - len(t.pending) - t.queued, t.calls_failed, t.call_retries)
    # ---- end progress ----

    def executor_view(self, executor_id: str) -> Any:
        """The live view (read it, do not change it)."""
        return self._exec.view(executor_id)

    def executor_calls(self, executor_id: str) -> list[str]:
        return self._exec.call_ids(executor_id)

    def filter_reasons(self, now: int) -> dict[str, str]:
        return self._exec.filter_reasons(now)

    def instance_inflight(self) -> dict[str, int]:
        return self._sched.instance_inflight()

    def pending_bind_subcalls(self) -> list[str]:
        return list(self._subcalls.parked)

    @property
    def call_count(self) -> int:
        """Call contexts held (roots and subcalls not yet settled)."""
        return len(self._calls)

    @property
    def queued_call_count(self) -> int:
        """Roots READY and waiting for an executor, across tasks (memory
        diagnostics; O(tasks), never on the hot path)."""
        return sum(len(t.ready) + t.queued for t in self._tasks.by_id.values())

    @property
    def task_count(self) -> int:
        return len(self._tasks)
