"""DispatcherCore: the Worker-global, Sans-IO call scheduler. It builds the
dispatcher's parts in dependency order and exposes them; it owns no state and
runs no logic of its own.

Rules: single writer (the adapter's dispatch actor); every input is a method
call carrying ``now`` (int ms); every output is a list of commands
(``commands``) that the adapter executes in order, feeding results back as
events. The core never reads a clock, sleeps, or picks a random number (retry
jitter and the start of a sampled executor scan come from the injected
``rand``). Command lists never alias core state.

Driving it (the adapter's loop):
  1. register work through the CallIntake (``intake``): ``prepare_call_phase`` (pure, may
     run off-actor) then ``commit_call_phase``; or ``commit_call_stream`` + per
     batch ``prepare_call_batch`` / ``commit_call_batch`` + ``production_done``;
  2. feed events to the CallLifecycle (``lifecycle``): ``handle_executor_bound`` /
     ``handle_bind_failed`` (right after executing a BindCall),
     ``handle_call_waiting``, ``handle_call_resumed``, ``handle_call_completed``,
     ``handle_call_failed``, ``handle_retry_ready``,
     ``handle_executor_snapshot_updated``, ``handle_executor_lost``,
     ``add_subcall``, ``cancel_task`` / ``remove_task``;
  3. after each event or batch of events run ``epilogue(now)``: ``dispatch``
     (admit as much as possible) then ``flush`` (stop / drain /
     settle / converge). Handlers never admit new work themselves, so a chunk of
     completions costs one epilogue.
Each name is its part's own method, called on the part (``disp.lifecycle.
handle_call_completed(...)``, ``disp.tasks.call_state(...)``): one name per event,
no alias layer, no frame of this class on any path.

Parts, in the order they are built (each takes only parts built before it):
  calls      CallTable: calls by id (records holds the CallRecord and its states)
  scheduler  TaskScheduler (fairness): which task admits next
  executors  ExecutorTable: executor views and records, Filter -> Score
  tasks      TaskCallTable: TaskCalls per task, batches, the dirty set, the
             flush's stop / settle / converge steps
  subcalls   SubcallBinder: subcall checks, binding beside the parent, parking
  retry      RetryScheduler: backoff with jitter, ArmCallRetry
  intake     CallIntake: prepare/commit of call phases and stream batches
  lifecycle  CallLifecycle: every call event, terminal accounting, the drain,
             cancellation of subtrees and tasks

Call ids: roots of a one-shot call phase are ``f"{task_id}/{index}"``; roots
of a streaming batch ``f"{task_id}/{batch_idx}.{row}"``; subcalls
``f"{parent_call_id}/sub-{n}"`` with ``n`` from the SubcallBinder's counter.
The last path segment tells the forms apart, so ids are unique across tasks.

Theory of operation: per-task ReadyQueue, admission window
(``task_max_inflight_calls`` root calls RUNNING/WAITING), a per-task cache of
successful outputs and singleflight (a second root with the key of an
in-flight root waits for it; a subcall with the key of an in-flight root or
subcall of its task waits for it, unless that would close a cycle; see
subcalls) keyed by ``cachekey.cache_key``; Filter -> Score
executor selection; retries ``base * 2^(attempt-1)`` + jitter via
ArmCallRetry; stale events dropped; FAST_FAIL stops dispatching on the first
final root failure and drain-cancels the rest once nothing is in flight; DONE
is entered only in ``CallLifecycle.set_terminal``.
"""
from __future__ import annotations

from typing import Any, Callable

from blockx._fast import load
from blockx.core.dispatch.records import DONE, READY, RUNNING, STATE_NAMES, WAITING
from blockx.core.dispatch.calls import CallTable
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.executors import ExecutorTable
from blockx.core.dispatch.fairness import TaskScheduler
from blockx.core.dispatch.intake import CallIntake
from blockx.core.dispatch.lifecycle import CallLifecycle
from blockx.core.dispatch.retry import RetryScheduler
from blockx.core.dispatch.subcalls import SubcallBinder
from blockx.core.dispatch.tasks import TaskCallTable

__all__ = ["DispatcherCore", "StateInvariantError"]


class StateInvariantError(AssertionError):
    """validate_state found the dispatcher's records disagreeing (a dispatcher bug)."""


class DispatcherCore:
    def __init__(self, config: DispatcherConfig, rand: Callable[[], float]) -> None:
        config.validate()
        if not callable(rand):
            raise TypeError("rand must be a callable returning a float in [0, 1)")
        self.config = config
        self.calls = calls = CallTable()
        self.scheduler = sched = TaskScheduler(config.instance_fairness,
                                               config.effective_fairness_quantum,
                                               config.task_max_inflight_calls)
        self.executors = ex = ExecutorTable(load("scoring"), config, rand)
        self.tasks = tasks = TaskCallTable(calls, ex, sched, load("readyqueue").ReadyQueue,
                                       config.max_collected_output_bytes)
        self.subcalls = subcalls = SubcallBinder(calls, ex, config.max_subcall_depth)
        self.retry = retry = RetryScheduler(rand, config.max_backoff_ms)
        self.intake = intake = CallIntake(config, tasks)
        self.lifecycle = life = CallLifecycle(calls.by_id, tasks, sched, ex, subcalls, retry,
                                              config.call_deadline_ms,
                                              config.max_collected_output_bytes)

    @property
    def call_count(self) -> int:
        """Call contexts held (roots and subcalls not yet settled)."""
        return len(self.calls)

    @property
    def queued_call_count(self) -> int:
        """Roots READY and waiting for an executor, across tasks (memory
        diagnostics; O(tasks), never on the hot path)."""
        return self.tasks.queued_count()

    @property
    def task_count(self) -> int:
        return len(self.tasks)

    def validate_state(self) -> None:
        """Check the invariants the parts keep between them; raise
        StateInvariantError naming every one that fails. O(calls + tasks): for
        the hypothesis machines after every step, and the dispatch actor after
        each batch under BLOCKX_VALIDATE_STATE=1, never on the hot path."""
        bad: list[str] = []
        active = (RUNNING, WAITING)
        by_id = self.calls.by_id
        for cid, call in by_id.items():
            where = f"call {cid} ({STATE_NAMES[call.state] if 0 <= call.state < 4 else call.state})"
            if call.call_id != cid or call.state not in (READY, RUNNING, WAITING, DONE):
                bad.append(f"{where}: filed under another id or in no state")
                continue
            if call.state in active:
                rec = call.exec
                if rec is None or rec.calls.get(cid) is not call:
                    bad.append(f"{where}: not held by its executor's record")
                elif call.executor_id != rec.view.executor_id:
                    bad.append(f"{where}: executor_id {call.executor_id!r} but bound to "
                               f"{rec.view.executor_id!r}")
            elif call.exec is not None:
                bad.append(f"{where}: still holds an executor seat")
            if call.parked != (cid in self.subcalls.parked):
                bad.append(f"{where}: parked flag disagrees with the binder's parking")
            if call.parked and (call.state != READY or call.parent is None):
                bad.append(f"{where}: parked but not a READY subcall")
            if call.leader is not None and call.state != DONE and (call.state != READY or call not in (call.leader.waiters or ())):
                bad.append(f"{where}: waits on {call.leader.call_id} without being its READY waiter")
            if call.retry_armed and call.state != READY:
                bad.append(f"{where}: retry armed but not READY")
            if call.task is not None and call.task.removed and call.state != DONE:
                bad.append(f"{where}: its task was removed")
        for eid, rec in self.executors.records.items():
            if rec.view.local_inflight != len(rec.calls):
                bad.append(f"executor {eid}: local_inflight {rec.view.local_inflight} but "
                           f"{len(rec.calls)} calls bound")
            for cid, call in rec.calls.items():
                if call.exec is not rec or call.state not in active:
                    bad.append(f"executor {eid}: holds call {cid} that is not bound there")
        per_instance: dict[int, int] = {}
        for tid, task in self.tasks.by_id.items():
            inflight = 0
            for cid, call in task.pending.items():
                if call.state == DONE or call.parent is not None or call.task is not task:
                    bad.append(f"task {tid}: pending call {cid} is DONE, a subcall or another's")
                if call.state in active:
                    inflight += 1
            if inflight != task.inflight:
                bad.append(f"task {tid}: inflight {task.inflight} but {inflight} roots running")
            queued = sum(b.n - b.pos for b in task.blocks)
            if queued != task.queued:
                bad.append(f"task {tid}: queued {task.queued} but {queued} rows in its blocks")
            key = id(task.instance)
            per_instance[key] = per_instance.get(key, 0) + task.inflight
            for key_, leader in task.flights.items():
                if leader.state == DONE or leader.key != key_:
                    bad.append(f"task {tid}: flight {key_!r} led by {leader.call_id}, DONE or "
                               f"of another key")
        for key, n in per_instance.items():
            inst = next(t.instance for t in self.tasks.by_id.values() if id(t.instance) == key)
            if inst.inflight != n:
                bad.append(f"instance {inst.instance_id!r}: inflight {inst.inflight} but its tasks "
                           f"hold {n}")
        if bad:
            raise StateInvariantError("dispatcher state: " + "; ".join(bad))
