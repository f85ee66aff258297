"""Orchestrator: bridges WorkerCore and DispatcherCore to the world.

Everything runs on one event loop, so WorkerCore needs no lock: gRPC handlers
call it synchronously, phase runners call it between awaits, and the tick calls
it every 500 ms. DispatcherCore is only touched by the dispatch actor. The
Orchestrator composes the parts that own their state:

- ``DispatchActor`` (dispatch_actor.py): the event queue, command execution,
  retry timers and background sends: the only code that mutates DispatcherCore;
- ``ExecutorEvents`` (executor_events.py): the executor adapter's handler,
  frames into dispatcher events, and the waits (function code, IO, subcalls);
- ``TaskPhases`` (task_phases.py): activation and Builder -> Calls -> Plugin;
- ``SubscriptionManager`` (subscriptions.py): WatchTasks / session fan-out;
- ``ProgressTicker`` (progress_ticker.py): TaskProgress on watched tasks' updates;

and itself owns ``_runtimes`` (the adapter-only record of each task between
activation and terminal: pinned code view, IO scope, runner; the parts read it),
the core's timers, and the task terminal path. It keeps no copy of slot, phase
or call truth.

Clocks: WorkerCore runs on wall-clock ms (its timestamps are shown to clients in
TaskStatistic and heartbeats); DispatcherCore and the executor adapter run on
monotonic ms (retry backoff, heartbeat timeouts, stall detection).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from blockx._fast import load
from blockx.adapters.dispatch_actor import DispatchActor
from blockx.adapters.executor_events import ExecutorEvents
from blockx.adapters.progress_ticker import FinalSnapshot, ProgressTicker
from blockx.adapters.start_coalescer import StartCoalescer
from blockx.adapters.subscriptions import SubscriptionManager
from blockx.adapters.task_phases import TaskPhases
from blockx.adapters.task_runtime import TaskRuntime
from blockx.log_event import log_event
from blockx.core.dispatch.types import ExecutorSnapshot
from blockx.core.types import ConvergeTask, PrepareTaskActivation, SubmitTaskRequest, TaskSnapshot

log = logging.getLogger("blockx.orchestrator")
_canonical = load("cachekey").canonical_args_json


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _log_task_finished(fields: dict) -> None:
    log_event(log, "task_finished", **fields)


class Orchestrator:
    def __init__(self, *, core, disp, adapter, fcode, builders: dict, plugins: dict, io_factory,
                 admission, stream_cfg, metrics, pool=None, shadow=None, stall_timeout_ms: int = 10_000,
                 phase_io_timeout_ms: int = 10_000, on_ready: Callable[[], Any] | None = None,
                 wall: Callable[[], int] = wall_ms, mono: Callable[[], int] = mono_ms, audit=None,
                 traces=None, spans=None, writer_stream=None, submit_linger_ms: int = 0) -> None:
        self.core = core
        self.disp = disp
        self.adapter = adapter
        self.pool = pool
        self.fcode = fcode
        self.metrics = metrics
        self.shadow = shadow
        self.stall_timeout_ms = stall_timeout_ms
        self._on_ready = on_ready
        self._wall = wall
        self._mono = mono
        self._loop = asyncio.get_running_loop()
        self._runtimes: dict[str, TaskRuntime] = {}
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._drained: asyncio.Event = asyncio.Event()
        self.subscriptions = SubscriptionManager(self._watch_first_attach, self._watch_last_detach)
        self.progress = ProgressTicker(disp=disp, core=core, subscriptions=self.subscriptions)
        # Task traces (trace_recorder.py), None when off: the actor's clock read
        # per event batch also stamps the trace clock.
        self.traces = traces
        # OpenTelemetry spans (otel_spans.py), None when export is off; the caller's
        # trace context is read from the metadata only when something uses it.
        self.spans = spans
        self.wants_trace_context = spans is not None or shadow is not None
        self.actor = DispatchActor(disp=disp, adapter=adapter, metrics=metrics, runtimes=self._runtimes,
                                   mono=mono if traces is None else traces.stamping(mono),
                                   on_calls_converged=self._on_calls_converged, audit=audit, traces=traces,
                                   call_spans=spans if spans is not None and spans.call_spans else None)
        self.phases = TaskPhases(
            core=core, disp=disp, actor=self.actor, runtimes=self._runtimes, fcode=fcode, builders=builders,
            plugins=plugins, io_factory=io_factory, admission=admission, stream_cfg=stream_cfg, metrics=metrics,
            phase_io_timeout_ms=phase_io_timeout_ms, wall=wall, on_converge=self._on_task_terminal,
            traces=traces, spans=spans, writer_stream=writer_stream)
        self.executor_events = ExecutorEvents(
            actor=self.actor, runtimes=self._runtimes, canonical_args=_canonical,
            on_attached=self._on_executor_attached, snapshots=self._core_snapshots,
            limit_kill_reason=getattr(pool, "limit_kill_reason", lambda executor_id: None))
        self.post = self.actor.post
        # Unary SubmitTasks that arrive close together start together (start_coalescer.py)
        self._starts = StartCoalescer(self._loop, submit_linger_ms, self.phases.drive)
        adapter.handler = self.executor_events
        metrics.slots_fn = self.slot_counts

    # ---- RPC entry points (synchronous, on the loop) ------------------------------

    def request_task_slot(self, task_id: str, ttl_ms: int, caller=None) -> TaskSnapshot:
        res = self.core.handle_request_task_slot(task_id, ttl_ms, self._wall(), caller)
        snap = res.snapshot
        self.subscriptions.publish(snap)
        return snap

    def submit_task(self, req: SubmitTaskRequest, *, shadow: bool = False, raw_request=None,
                    caller=None, trace_context=None, unary: bool = False) -> TaskSnapshot:
        """``trace_context``: the caller's checked W3C metadata (trace_context.py), or None.
        ``unary``: the unary SubmitTask RPC, whose start may linger to go with others
        (start_coalescer.py); a session's tasks arrive in batches and start at once."""
        res = self.core.handle_submit_task(req, self._wall(), caller)
        accepted = False
        for cmd in res.commands:
            if type(cmd) is PrepareTaskActivation:
                accepted = True
                self._start_task(cmd, trace_context, unary)
            elif type(cmd) is ConvergeTask:
                self._on_task_terminal(cmd)
        snap = res.snapshot
        if accepted:
            self.metrics.tasks_submitted += 1
            self.subscriptions.publish(snap)
            if self.shadow is not None and raw_request is not None and not shadow:
                # the copy carries the trace on: the task span when spans are exported, else the caller's
                self.shadow.maybe_forward(raw_request, trace_context if self.spans is None
                                          else self.spans.trace_context(snap.task_id))
        return snap

    def start_accepted(self) -> None:
        """Start now the tasks accepted so far in this loop iteration that are not
        held (StartCoalescer.start_now): a TaskSession calls it once its request
        batch is handled, so its tasks start before its reader asks gRPC for the
        next batch rather than in the next iteration, behind that read. A unary
        SubmitTask does not: its answer goes first."""
        self._starts.start_now()

    def get_task_result(self, task_id: str, caller=None) -> TaskSnapshot:
        """``caller`` (blockx.core.owners.Caller, None: unrestricted): whose view."""
        return self.core.handle_get_task_result(task_id, caller).snapshot

    def cancel_task(self, task_id: str, reason: str, caller=None):
        """CancelTask: the core decides (CancelTaskResult); a ConvergeTask runs the
        task terminal path below, which cancels whatever of the task still runs."""
        res = self.core.handle_cancel_task(task_id, reason, self._wall(), caller)
        for cmd in res.commands:
            if type(cmd) is ConvergeTask:
                self._on_task_terminal(cmd)
        return res

    def list_tasks(self, query, caller=None):
        """ListTasks: the core's page of the caller's tasks (blockx.core.worker.listing)."""
        return self.core.list_tasks(query, self._wall(), caller)

    def _watch_first_attach(self, task_id: str) -> None:
        self.core.handle_watch_attached(task_id, self._wall())
        self.progress.wake()

    def _watch_last_detach(self, task_id: str, disconnected: bool) -> None:
        # Both the normal end and a broken stream count as "the last watcher left":
        # the core arms the grace only for tasks that are still running, and a detach
        # it refuses (a terminal or unknown task) moves no deadline.
        if self.core.handle_watch_detached(task_id, self._wall()):
            self._arm_deadline_timer()

    # ---- task lifecycle ----------------------------------------------------------

    def _start_task(self, cmd: PrepareTaskActivation, trace_context=None, unary: bool = False) -> None:
        rt = TaskRuntime(cmd.task_id, cmd.instance_id, cmd.deadline_ms)
        self._runtimes[cmd.task_id] = rt
        if self.traces is not None: self.traces.task_started(cmd.task_id)  # trace hook
        if self.spans is not None: self.spans.task_started(cmd.task_id, cmd.instance_id, trace_context)  # span hook
        if unary:
            self._starts.start(rt, cmd, len(self._runtimes) > 1)
        else:
            self._starts.start_soon(rt, cmd)
        self._arm_deadline_timer()

    def _on_task_terminal(self, cmd: ConvergeTask) -> None:
        tid = cmd.task_id
        state = cmd.state.name                   # an enum's name is a property: read it once
        final = self.progress.final(tid)         # before the dispatcher forgets the task
        rt = self._runtimes.pop(tid, None)
        if rt is not None:
            rt.ended = True
            if rt.sink is not None:
                rt.sink.abort()                  # nothing streamed becomes visible (a no-op once committed)
            # In-flight calls (and their subcall subtrees) get CancelCall; the
            # dispatcher forgets the task.
            self.post(lambda n: self.disp.lifecycle.cancel_task(tid, f"task {state}", now=n))
            self.phases.end(rt)
        res = cmd.result
        if self.traces is not None: self.traces.task_ended(tid, state, res)  # trace hook
        if self.spans is not None: self.spans.task_ended(tid, state, res)  # span hook
        st = res.statistic
        self.metrics.task_terminal(state, res.failure_code)
        if st.accepted_at_ms:                    # a reservation cancelled before SubmitTask never ran
            self.metrics.observe_task(state, max(0, st.finished_at_ms - st.accepted_at_ms) / 1000.0)
        fields = dict(task_id=tid, state=state, failure_code=res.failure_code,
                      failure_message=res.failure_message, retryable=res.retryable,
                      accepted_at_ms=st.accepted_at_ms, finished_at_ms=st.finished_at_ms,
                      builder_ms=st.builder_ms, calls_ms=st.calls_ms, plugin_ms=st.plugin_ms,
                      call_count=st.call_count, calls_failed=st.calls_failed,
                      call_retries=st.call_retries, cache_hits=st.cache_hits)
        self.subscriptions.publish(FinalSnapshot(tid, cmd.slot_id, cmd.state, res, final))
        # The line is written in the next callback, after the watchers the publish woke
        # (their wake-ups were queued first): making it (~60-75 us measured under load)
        # no longer delays the terminal update of the task it reports. Its fields were
        # read above, at the end itself.
        self._loop.call_soon(_log_task_finished, fields)
        if not self._runtimes and self.core.active_task_count() == 0:
            self._drained.set()

    # ---- timers ------------------------------------------------------------------

    def tick(self) -> None:
        """The 500 ms tick: core timers, snapshot sync, wedge backstop, heartbeat timeouts."""
        self._core_timers()
        self.metrics.calls_queued = self._queued_calls()
        self._sync_snapshots()
        self.check_wedged_executors()
        lost = self.adapter.check_heartbeat_timeouts(self._mono())
        if lost:
            self.metrics.executor_heartbeat_timeouts += len(lost)

    def _queued_calls(self) -> int:
        """Root calls of running tasks that are neither finished nor in flight: queued,
        ready for an executor, or waiting out a retry backoff (the dispatcher's counts)."""
        disp = self.disp
        n = 0
        for tid in self._runtimes:
            p = disp.tasks.progress(tid)
            if p is not None and p[0]:
                n += max(0, p[0] - p[1] - disp.tasks.inflight(tid))
        return n

    def _core_timers(self) -> None:
        core = self.core
        now = self._wall()
        lapsing = self._lapsing_reservations(now) if len(self.subscriptions) else ()
        for cmd in core.tick(now):
            if type(cmd) is ConvergeTask:
                self._on_task_terminal(cmd)
        if self.traces is not None: self.traces.forget_purged(core.get_index_entry)  # trace hook: with the result
        for tid in lapsing:
            entry = core.get_index_entry(tid)
            if entry is None or entry.lease_lost_at_ms >= 0:
                # A reservation that expired before SubmitTask: its watchers learn it is gone.
                self.subscriptions.publish_gone(tid)
        self._arm_deadline_timer()

    def _lapsing_reservations(self, now: int) -> list[str]:
        expired = set(self.core.expired_slots(now))
        if not expired:
            return []
        return [s.task_id for s in self.core.slots if s.slot_id in expired and s.task_id
                and self.subscriptions.watched(s.task_id)]

    def _arm_deadline_timer(self) -> None:
        """Arm one precise timer for the core's next deadline when it falls before the next tick."""
        nd = self.core.next_deadline()
        if nd is None:
            return
        delay = (nd - self._wall()) / 1000.0
        if delay >= 0.5:
            return
        h = self._deadline_timer
        if h is not None and not h.cancelled() and h.when() <= self._loop.time() + max(delay, 0):
            return
        if h is not None:
            h.cancel()
        self._deadline_timer = self._loop.call_later(max(delay, 0.0) + 0.001, self._core_timers)

    def _core_snapshots(self) -> list:
        return [ExecutorSnapshot(
            executor_id=s.executor_id, healthy=s.healthy, runnable_count=s.runnable_count,
            usable_contexts=s.usable_contexts, heartbeat_seq=s.heartbeat_seq,
            running_call_id=s.running_call_id, last_scheduler_active_at_ms=s.last_scheduler_active_at_ms,
            memory_bytes=s.memory_bytes) for s in self.adapter.snapshots()]

    def _sync_snapshots(self) -> None:
        snaps = self._core_snapshots()
        healthy = sum(1 for s in snaps if s.healthy)
        self.metrics.executors_healthy = healthy
        self.post(lambda n: self.disp.lifecycle.handle_executor_snapshot_updated(snaps, now=n))

    def _on_calls_converged(self, cmd) -> None:
        self.phases.calls_converged(cmd)

    def _on_executor_attached(self, executor_id: str) -> None:
        self._sync_snapshots()
        self._on_first_healthy_executor()

    def _on_first_healthy_executor(self) -> None:
        if not self.core.ready and self.adapter.healthy_count() > 0:
            self.core.set_ready(True)
            if self._on_ready is not None:
                self._on_ready()

    def check_wedged_executors(self) -> list[str]:
        """The wedge backstop: an executor still heartbeating whose scheduler has not
        run for longer than SchedulerStallTimeoutMs while it reports a running call
        is hard-killed so the pool manager can replace it."""
        killed: list[str] = []
        if self.stall_timeout_ms <= 0:      # only an Orchestrator built without one (the config always derives one)
            return killed
        now = self._mono()
        for s in self.adapter.snapshots():
            if (s.healthy and s.running_call_id and s.last_scheduler_active_at_ms
                    and now - s.last_scheduler_active_at_ms > self.stall_timeout_ms):
                log.error("executor %s wedged: call %s has held its scheduler for %d ms; killing it",
                          s.executor_id, s.running_call_id, now - s.last_scheduler_active_at_ms)
                ok = self.pool.kill_executor(s.executor_id) if self.pool is not None else \
                    self.adapter.kill_executor(s.executor_id)
                if ok:
                    self.metrics.executor_wedge_kills += 1
                    killed.append(s.executor_id)
        return killed

    # ---- status, drain -----------------------------------------------------------

    def slot_counts(self) -> dict[str, int]:
        """The slot table by state, read from the core at /metrics scrape time
        (no copy is kept up to date on the task path)."""
        hb = self.core.derive_heartbeat(0)
        return {"free": hb["freeSlots"], "allocated": hb["reservedSlots"], "running": hb["runningTasks"]}

    def set_draining(self) -> None:
        self.core.set_draining(True)

    async def wait_drain(self, timeout_s: float) -> bool:
        """Until no task is active, or the timeout. True when drained."""
        deadline = self._loop.time() + timeout_s
        while self.core.active_task_count() > 0 or self._runtimes:
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return False
            self._drained.clear()
            try:
                await asyncio.wait_for(self._drained.wait(), min(remaining, 0.5))
            except asyncio.TimeoutError:
                self._core_timers()
        return True

    def end_unfinished_tasks(self) -> int:
        """Shutdown phase 2: every task the drain left running converges FAILED /
        WORKER_SHUTDOWN through the terminal path (its calls are cancelled, its IO
        scope closed, its watchers get the terminal update while their streams
        are still open). Returns how many there were."""
        cmds = self.core.handle_shutdown(self._wall())
        for cmd in cmds:
            self._on_task_terminal(cmd)
        return len(cmds)

    async def close(self) -> None:
        """Stop the runners, the actor and the timers; the Watch streams stay open
        until close_watches (after the IO scopes, in the shutdown order)."""
        for rt in list(self._runtimes.values()):
            if rt.runner is not None:
                rt.runner.cancel()
        self._starts.close()
        self.actor.close()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self.progress.close()

    def close_watches(self) -> None:
        """End every WatchTasks stream and TaskSession, after what they have queued."""
        self.subscriptions.close_all()
