"""Task traces: a bounded timeline of what the Worker did for each task.

Rules. Recording sits on the path of every call, so an event is one row of
int64 in its task's buffer (blockx/_fast/tracebuf, compiled, with a twin): no
Python object per event, no dicts, no formatting, and no clock read per event:
calls are stamped with ``now_us``, which the dispatch actor's clock refreshes
once per event batch (``stamping(mono)`` wraps that clock); the rare events born
outside the actor (phases, IO resumes, executor loss) read the clock themselves.
Formatting happens only when a trace is asked for (trace_export.py turns a
``TraceBuffer`` into the Chrome trace-event format).

Bound. A task records at most ``max_events`` events. When it reaches the cap its
calls are sampled: a call (with its subcalls, retries and waits) is kept when
its root call's index is a multiple of ``sample_every`` (k: every k-th call);
each time the cap is reached again k doubles and the recorded events of calls
that leave the sample are dropped, so the trace stays an even sample of the
task's calls and says so (``sampled``, ``dropped``). Task-level events (phases,
the task's start and end) are always kept; the other task-level events (queue
commits, executor losses) are dropped past the cap and counted in ``truncated``.

Lifetime. A trace lives from the task's activation to the purge of its retained
result: the Orchestrator calls ``forget_purged`` after the core's timers, and a
trace is dropped once the core no longer knows its task (resultRetentionMs after
the end), so the store never holds more traces than the core holds tasks. Ended
traces also share a budget, ``retained_max_events`` (TRACE_RETAINED_MAX_EVENTS):
each counts its events, at least RETAINED_FLOOR_EVENTS for its fixed overhead
(~2 KB), and past the budget the oldest ended traces are evicted first (counted
in ``evicted``) - otherwise thousands of short tasks a second, retained for the
default 300 s, would hold gigabytes. A running task's trace is never evicted.

Events as ``TraceBuffer.events`` decodes them, by kind (index 0) and time in us (index 1):

- TASK_START ``(k, t)``; TASK_END ``(k, t, state, failure_code, failure_message, plugin_results)``,
  and after a call failed the task ``(..., failure_call_id, failure_traceback, failure_locals)``
  (the traceback cut to TRACE_TRACEBACK_CHARS, the locals as the result bounds them)
- PHASE ``(k, t, name, detail)``: a phase starts ("builder", "calls", "plugin");
  it ends where the next one starts, or at TASK_END
- QUEUED ``(k, t, count, batch)``: calls committed to the dispatcher (batch -1: one-shot)
- SENT ``(k, t, call_id, executor_id, attempt, parent_call_id, function_id)``: ExecuteCall sent
- DONE ``(k, t, call_id, executor_id, attempt, error_kind, budget_used_ms)``: "" = ok
- IO_WAIT ``(k, t, call_id, attempt, backend)``; IO_DONE ``(k, t, call_id, ok)``
- SUBCALL ``(k, t, parent_call_id, child_call_id)``: a call asked for a subcall
- RETRY ``(k, t, call_id, backoff_ms, is_retry)``: the next attempt is armed
- LOST ``(k, t, executor_id, reason)``: an executor went away
"""
from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Callable

from blockx._fast import load
from blockx.adapters.call_failures import clip
from blockx.core.call_ids import task_id_of_call
from blockx.core.config_rules import Rule

# The per-call part is a hot path (blockx/_fast/tracebuf.pyx, twin tracebuf_py.py).
_tb = load("tracebuf")
if TYPE_CHECKING:           # both forms have the same API (tracebuf.pyi is the twin's)
    from blockx._fast.tracebuf_py import CallRecorder, TraceBuffer
else:
    TraceBuffer = _tb.TraceBuffer
    CallRecorder = _tb.CallRecorder
TASK_START, TASK_END, PHASE, QUEUED, SENT, DONE = _tb.TASK_START, _tb.TASK_END, _tb.PHASE, _tb.QUEUED, _tb.SENT, _tb.DONE
IO_WAIT, IO_DONE, SUBCALL, RETRY, LOST = _tb.IO_WAIT, _tb.IO_DONE, _tb.SUBCALL, _tb.RETRY, _tb.LOST
CALL_KINDS, PINNED_KINDS, PINNED_RESERVE = _tb.CALL_KINDS, _tb.PINNED_KINDS, _tb.PINNED_RESERVE
DEFAULT_MAX_EVENTS = 10_000
TRACE_TRACEBACK_CHARS = 8 * 1024     # a failed task's traceback in its trace (the result has it whole)
MIN_MAX_EVENTS = 100
# An ended trace weighs at least this many events in the retained budget: its
# TraceBuffer, string table and buffer cost about 2 KB even for a one-call task,
# the size of ~32 event rows (64 bytes each).
RETAINED_FLOOR_EVENTS = 32
DEFAULT_RETAINED_MAX_EVENTS = 2_000_000     # ~128 MB of rows: ~60k short tasks or 200 full 10k-event traces
# The rules of the settings TraceStore takes (traceMaxEventsPerTask, traceRetainedMaxEvents).
TRACE_RULES = (Rule("trace_max_events_per_task", MIN_MAX_EVENTS, note="events kept per task trace"),
               Rule("trace_retained_max_events", RETAINED_FLOOR_EVENTS, note="one ended trace"))

_monotonic_ns = time.monotonic_ns


class TraceStore:
    """Every live task's trace, by task id, plus the hooks the adapters call.

    The hooks are cheap no-ops for a task without a trace (not activated, or
    already forgotten). A Worker with tracing off has no TraceStore at all: its
    hooks are guarded by ``if traces is not None``."""

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS, clock_ns: Callable[[], int] = _monotonic_ns, *,
                 retained_max_events: int = DEFAULT_RETAINED_MAX_EVENTS) -> None:
        if max_events < MIN_MAX_EVENTS:
            raise ValueError(f"max_events must be >= {MIN_MAX_EVENTS}, got {max_events}")
        if retained_max_events < RETAINED_FLOOR_EVENTS:
            raise ValueError(f"retained_max_events must be >= {RETAINED_FLOOR_EVENTS} (one ended trace), "
                             f"got {retained_max_events}")
        self.max_events = max_events
        self.retained_max_events = retained_max_events
        self._clock_ns = clock_ns
        self._tasks: dict[str, TraceBuffer] = {}
        # ended tasks' traces with their weight in the budget, in end order
        # (retention and eviction are both FIFO)
        self._ended: deque[TraceBuffer] = deque()   # ended traces, oldest first (weight: tr.retained_weight)
        self.retained_events = 0        # the weights of the traces in _ended
        self.evicted = 0                # ended traces dropped to stay within the budget
        # The hooks every call (and every subcall) goes through, compiled: bound
        # straight to the recorder, so a hook is one call. Its now_us is the trace clock.
        calls = self._calls = CallRecorder(self._tasks)
        calls.now_us = clock_ns() // 1000
        self.call_sent = calls.call_sent          # (DispatchCallCmd) -> None
        self.call_done = calls.call_done          # (payload, call_id, executor_id, error_kind) -> None
        self.subcall = calls.subcall              # (task_id, parent_call_id, child_call_id) -> None

    # ---- clock -------------------------------------------------------------------

    def stamping(self, mono_ms: Callable[[], int]) -> Callable[[], int]:
        """Wrap the dispatch actor's ms clock so that each read (one per event batch)
        also stamps ``now_us`` for the call events of that batch."""
        clock_ns = self._clock_ns
        calls = self._calls

        def mono() -> int:
            calls.now_us = clock_ns() // 1000
            return mono_ms()
        return mono

    @property
    def now_us(self) -> int:
        """The trace clock as last stamped (us)."""
        return self._calls.now_us

    def _now(self) -> int:
        t = self._calls.now_us = self._clock_ns() // 1000
        return t

    # ---- lookup and lifetime ---------------------------------------------------------

    def get(self, task_id: str) -> TraceBuffer | None:
        return self._tasks.get(task_id)

    def __len__(self) -> int:
        return len(self._tasks)

    def now(self) -> int:
        """The trace clock now (us), for the export of a running task."""
        return self._clock_ns() // 1000

    def task_started(self, task_id: str) -> None:
        tr = TraceBuffer(task_id, self.max_events)
        tr.add_task_event((TASK_START, self._now()))
        self._tasks[task_id] = tr

    def task_ended(self, task_id: str, state: str, result) -> None:
        tr = self._tasks.get(task_id)
        if tr is None or tr.ended:
            return
        tr.ended = True
        ev: tuple = (TASK_END, self._now(), state, result.failure_code, result.failure_message,
                     tuple(result.plugin_results))
        call_id = getattr(result, "failure_call_id", "")
        if call_id:     # the call that failed the task: where, bounded (a trace holds many tasks)
            ev += (call_id, clip(result.failure_traceback, TRACE_TRACEBACK_CHARS),
                   tuple(result.failure_locals))
        tr.add_task_event(ev)
        tr.trim()
        weight = tr.retained_weight = max(len(tr), RETAINED_FLOOR_EVENTS)
        self._ended.append(tr)
        self.retained_events += weight
        if self.retained_events > self.retained_max_events:
            self._evict()

    def _evict(self) -> None:
        ended, tasks = self._ended, self._tasks
        while self.retained_events > self.retained_max_events and ended:
            tr = ended.popleft()
            self.retained_events -= tr.retained_weight
            if tasks.get(tr.task_id) is tr:
                del tasks[tr.task_id]
                self.evicted += 1

    def forget_purged(self, known: Callable[[str], object]) -> int:
        """Drop the traces of ended tasks the core has forgotten (``known(task_id)``
        is None: its retained result was purged). Results are purged in end order,
        so this stops at the first ended task still known. Returns how many went."""
        ended, tasks = self._ended, self._tasks
        n = 0
        while ended:
            tr = ended[0]
            tid = tr.task_id
            if tasks.get(tid) is tr:
                if known(tid) is not None:
                    break
                del tasks[tid]
                n += 1
            ended.popleft()
            self.retained_events -= tr.retained_weight
        return n

    def _task_of_call(self, call_id: str) -> TraceBuffer | None:
        """The trace of the task a call id belongs to (read exactly, never a guessed
        prefix: core.call_ids), so a task's events never land in another's trace."""
        tid = task_id_of_call(call_id)
        return None if tid is None else self._tasks.get(tid)

    # ---- hooks: task phases (task_phases.py, orchestrator.py) ----------------------------

    def phase_started(self, cmd) -> None:
        """A Start*Phase command of the core (StartBuilderPhase, StartCallPhase, StartPluginPhase)."""
        tr = self._tasks.get(cmd.task_id)
        if tr is None:
            return
        name = type(cmd).__name__
        if name == "StartBuilderPhase":
            ev = (PHASE, self._now(), "builder", cmd.function_call.type)
        elif name == "StartCallPhase":
            ev = (PHASE, self._now(), "calls", "streaming" if cmd.streaming else "")
        else:
            rh = cmd.result_handler
            ev = (PHASE, self._now(), "plugin", rh.type if rh is not None else "")
        tr.add_task_event(ev)

    def calls_queued(self, task_id: str, count: int, batch: int = -1) -> None:
        tr = self._tasks.get(task_id)
        if tr is not None:
            tr.add_task_event((QUEUED, self._now(), count, batch))
            if batch < 0:           # the whole call list: about two events a call
                tr.presample(2 * count)

    # ---- hooks: calls (dispatch_actor.py, executor_events.py) ------------------------------

    def call_retry(self, cmd, now_ms: int) -> None:
        """An ArmCallRetry: the call's next attempt waits ``fire_at_ms - now`` ms."""
        call_id = cmd.call_id
        tr = self._task_of_call(call_id)
        if tr is not None:
            tr.add_call_event((RETRY, self._calls.now_us, call_id, max(0, cmd.fire_at_ms - now_ms), cmd.is_retry))

    def _task(self, task_id) -> TraceBuffer | None:
        """The trace of ``task_id`` as an executor frame gave it (maybe not a string)."""
        return self._tasks.get(task_id) if type(task_id) is str else None

    def io_wait(self, p: dict, call_id: str, attempt: int) -> None:
        """A CallWaiting(waitKind=io) frame, ``p`` its payload."""
        tr = self._task(p.get("taskId"))
        if tr is not None and type(call_id) is str:
            tr.add_call_event((IO_WAIT, self._calls.now_us, call_id, attempt, p.get("backend", "")))

    def io_done(self, task_id: str, call_id: str, ok: bool) -> None:
        tr = self._task(task_id)
        if tr is not None and type(call_id) is str:
            tr.add_call_event((IO_DONE, self._now(), call_id, ok))

    def executor_lost(self, executor_id: str, reason: str) -> None:
        """Every running task learns it: attempts still open on it end here."""
        t = self._now()
        for tr in self._tasks.values():
            if not tr.ended:
                tr.add_task_event((LOST, t, executor_id, reason))
