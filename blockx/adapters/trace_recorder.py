"""Task traces: a bounded timeline of what the Worker did for each task.

Rules. Recording sits on the path of every call, so an event is one small tuple
appended to its task's list: an int kind, an int timestamp and references to
strings that already exist (call ids, executor ids, failure kinds). No dicts, no
formatting, no clock read per event: calls are stamped with ``now_us``, which the
dispatch actor's clock refreshes once per event batch (``stamping(mono)`` wraps
that clock); the rare events born outside the actor (phases, IO resumes, executor
loss) read the clock themselves. Formatting happens only when a trace is asked
for (trace_export.py turns a ``TaskTrace`` into the Chrome trace-event format).

Bound. A task records at most ``max_events`` events. When it reaches the cap its
calls are sampled: a call (with its subcalls, retries and waits) is kept when the
hash of its root call id is a multiple of ``sample_every`` (k); each time the cap
is reached again k doubles and the recorded events of calls that leave the sample
are dropped, so the trace stays a uniform sample of the task's calls and says so
(``sampled``, ``dropped``). Task-level events (phases, the task's start and end)
are always kept; the other task-level events (queue commits, executor losses)
are dropped past the cap and counted in ``truncated``.

Lifetime. A trace lives from the task's activation to the purge of its retained
result: the Orchestrator calls ``forget_purged`` after the core's timers, and a
trace is dropped once the core no longer knows its task (resultRetentionMs after
the end), so the store never holds more traces than the core holds tasks.

Event tuples, by kind (index 0) and time in us (index 1):

- TASK_START ``(k, t)``; TASK_END ``(k, t, state, failure_code, failure_message, plugin_results)``
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
from typing import Callable

TASK_START, TASK_END, PHASE, QUEUED, SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY, LOST = range(11)
# Events that belong to a call (index 2 is its call id): these are sampled.
CALL_KINDS = frozenset((SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY))
# Always kept, whatever the cap: at most a handful per task.
PINNED_KINDS = frozenset((TASK_START, TASK_END, PHASE))
# Room kept under the cap for the pinned events.
PINNED_RESERVE = 8
DEFAULT_MAX_EVENTS = 10_000
MIN_MAX_EVENTS = 100

_monotonic_ns = time.monotonic_ns


class TaskTrace:
    """One task's events, bounded. Owned by the TraceStore; read by trace_export."""

    __slots__ = ("task_id", "events", "limit", "sample_every", "dropped", "truncated", "ended",
                 "_root_from")

    def __init__(self, task_id: str, max_events: int) -> None:
        self.task_id = task_id
        self.events: list[tuple] = []
        self.limit = max_events - PINNED_RESERVE   # room for call and queue events
        self.sample_every = 1                      # k: a power of two; 1 = every call
        self.dropped = 0                           # events not kept (sampling or the cap)
        self.truncated = 0                         # of those, task-level events past the cap
        self.ended = False
        self._root_from = len(task_id) + 1         # root call ids are "<task_id>/<index>"

    @property
    def sampled(self) -> bool:
        return self.sample_every > 1

    def root_of(self, call_id: str) -> str:
        """The root call of ``call_id`` ("<task>/<i>" for "<task>/<i>/sub-1/sub-2")."""
        i = call_id.find("/", self._root_from)
        return call_id if i < 0 else call_id[:i]

    def keeps(self, call_id: str) -> bool:
        """Is ``call_id`` (with its whole call tree) in the sample?"""
        return not (hash(self.root_of(call_id)) & (self.sample_every - 1))

    def add_call_event(self, ev: tuple) -> None:
        """A call's event (index 2 is its call id): kept when the call is in the sample.
        (``keeps`` inlined: this runs for every call once the cap is reached.)"""
        k = self.sample_every
        if k != 1:
            cid = ev[2]
            i = cid.find("/", self._root_from)
            if hash(cid if i < 0 else cid[:i]) & (k - 1):
                self.dropped += 1
                return
        events = self.events
        events.append(ev)
        if len(events) >= self.limit:
            self._compact()

    def add_task_event(self, ev: tuple) -> None:
        if ev[0] in PINNED_KINDS:
            self.events.append(ev)
            return
        if len(self.events) >= self.limit:
            self._compact()
            if len(self.events) >= self.limit:
                self.dropped += 1
                self.truncated += 1
                return
        self.events.append(ev)

    def _compact(self) -> None:
        """The cap is reached: double k until at most half the cap remains (or no
        call event is left to drop), dropping the events of calls out of the sample."""
        events = self.events
        target = self.limit // 2
        while len(events) > target:
            before = len(events)
            self.sample_every *= 2
            keeps = self.keeps
            events = [ev for ev in events if ev[0] not in CALL_KINDS or keeps(ev[2])]
            self.dropped += before - len(events)
            if not any(ev[0] in CALL_KINDS for ev in events):
                break
        self.events = events


class TraceStore:
    """Every live task's trace, by task id, plus the hooks the adapters call.

    The hooks are cheap no-ops for a task without a trace (not activated, or
    already forgotten). A Worker with tracing off has no TraceStore at all: its
    hooks are guarded by ``if traces is not None``."""

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS, clock_ns: Callable[[], int] = _monotonic_ns) -> None:
        if max_events < MIN_MAX_EVENTS:
            raise ValueError(f"max_events must be >= {MIN_MAX_EVENTS}, got {max_events}")
        self.max_events = max_events
        self._clock_ns = clock_ns
        self.now_us = clock_ns() // 1000          # refreshed once per dispatch-actor batch
        self._tasks: dict[str, TaskTrace] = {}
        self._ended: deque[TaskTrace] = deque()    # ended tasks' traces, in end order (retention is FIFO)

    # ---- clock -------------------------------------------------------------------

    def stamping(self, mono_ms: Callable[[], int]) -> Callable[[], int]:
        """Wrap the dispatch actor's ms clock so that each read (one per event batch)
        also stamps ``now_us`` for the call events of that batch."""
        clock_ns = self._clock_ns

        def mono() -> int:
            self.now_us = clock_ns() // 1000
            return mono_ms()
        return mono

    def _now(self) -> int:
        t = self.now_us = self._clock_ns() // 1000
        return t

    # ---- lookup and lifetime ---------------------------------------------------------

    def get(self, task_id: str) -> TaskTrace | None:
        return self._tasks.get(task_id)

    def __len__(self) -> int:
        return len(self._tasks)

    def now(self) -> int:
        """The trace clock now (us), for the export of a running task."""
        return self._clock_ns() // 1000

    def task_started(self, task_id: str) -> None:
        tr = TaskTrace(task_id, self.max_events)
        tr.events.append((TASK_START, self._now()))
        self._tasks[task_id] = tr

    def task_ended(self, task_id: str, state: str, result) -> None:
        tr = self._tasks.get(task_id)
        if tr is None or tr.ended:
            return
        tr.ended = True
        tr.events.append((TASK_END, self._now(), state, result.failure_code, result.failure_message,
                          tuple(result.plugin_results)))
        self._ended.append(tr)

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
        return n

    def _task_of_call(self, call_id: str) -> TaskTrace | None:
        """The trace of the task a call id belongs to ("<task_id>/..."; a task id may
        itself hold "/", so each prefix is tried, shortest first)."""
        tasks = self._tasks
        i = call_id.find("/")
        while i > 0:
            tr = tasks.get(call_id[:i])
            if tr is not None:
                return tr
            i = call_id.find("/", i + 1)
        return None

    # ---- hooks: task phases (task_phases.py, orchestrator.py) ----------------------------

    def phase_started(self, cmd) -> None:
        """A Start*Phase command of the core (StartBuilderPhase, StartCallPhase, StartWriterPhase)."""
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

    # ---- hooks: calls (dispatch_actor.py, executor_events.py) ------------------------------

    # call_sent and call_done run for every call: TaskTrace.add_call_event is
    # inlined, so that a call out of the sample costs no tuple and no extra call.

    def call_sent(self, cmd) -> None:
        """The dispatch actor sent ExecuteCall for a DispatchCallCmd."""
        tr = self._tasks.get(cmd.task_id)
        if tr is None:
            return
        call_id = cmd.call_id
        k = tr.sample_every
        if k != 1:
            i = call_id.find("/", tr._root_from)
            if hash(call_id if i < 0 else call_id[:i]) & (k - 1):
                tr.dropped += 1
                return
        events = tr.events
        events.append((SENT, self.now_us, call_id, cmd.executor_id, cmd.attempt_seq, cmd.parent_call_id,
                       cmd.function_id))
        if len(events) >= tr.limit:
            tr._compact()

    def call_done(self, p: dict, call_id: str, executor_id: str, error_kind: str) -> None:
        """An accepted CallCompleted (error_kind "") or CallFailed frame, ``p`` its payload."""
        tr = self._tasks.get(p.get("taskId"))
        if tr is None:
            return
        k = tr.sample_every
        if k != 1:
            i = call_id.find("/", tr._root_from)
            if hash(call_id if i < 0 else call_id[:i]) & (k - 1):
                tr.dropped += 1
                return
        events = tr.events
        events.append((DONE, self.now_us, call_id, executor_id, p["attemptSeq"], error_kind, p.get("budgetUsedMs", 0)))
        if len(events) >= tr.limit:
            tr._compact()

    def call_retry(self, cmd, now_ms: int) -> None:
        """An ArmCallRetry: the call's next attempt waits ``fire_at_ms - now`` ms."""
        call_id = cmd.call_id
        tr = self._task_of_call(call_id)
        if tr is not None:
            tr.add_call_event((RETRY, self.now_us, call_id, max(0, cmd.fire_at_ms - now_ms), cmd.is_retry))

    def io_wait(self, p: dict, call_id: str, attempt: int) -> None:
        """A CallWaiting(waitKind=io) frame, ``p`` its payload."""
        tr = self._tasks.get(p.get("taskId"))
        if tr is not None:
            tr.add_call_event((IO_WAIT, self.now_us, call_id, attempt, p.get("backend", "")))

    def io_done(self, task_id: str, call_id: str, ok: bool) -> None:
        tr = self._tasks.get(task_id)
        if tr is not None:
            tr.add_call_event((IO_DONE, self._now(), call_id, ok))

    def subcall(self, task_id: str, parent_call_id: str, child_call_id: str) -> None:
        tr = self._tasks.get(task_id)
        if tr is not None:
            tr.add_call_event((SUBCALL, self.now_us, parent_call_id, child_call_id))

    def executor_lost(self, executor_id: str, reason: str) -> None:
        """Every running task learns it: attempts still open on it end here."""
        t = self._now()
        for tr in self._tasks.values():
            if not tr.ended:
                tr.add_task_event((LOST, t, executor_id, reason))
