"""Task trace buffers, the per-call part (twin of tracebuf.pyx; the recorder and
store around them: blockx/adapters/trace_recorder.py).

``TaskTrace`` is one task's bounded event list; ``CallRecorder`` holds the two
hooks that run for every call (ExecuteCall sent, CallCompleted / CallFailed
accepted), which is why they are a hot path. An event is a tuple: kind, time
(us), then references to existing strings and ints; a call's events carry its
call id at index 2 and are sampled past the cap (see trace_recorder.py)."""
from __future__ import annotations

TASK_START, TASK_END, PHASE, QUEUED, SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY, LOST = range(11)
# Events that belong to a call (index 2 is its call id): these are sampled.
CALL_KINDS = frozenset((SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY))
# Always kept, whatever the cap: at most a handful per task.
PINNED_KINDS = frozenset((TASK_START, TASK_END, PHASE))
# Room kept under the cap for the pinned events.
PINNED_RESERVE = 8


class TaskTrace:
    """One task's events, bounded. Owned by the TraceStore; read by trace_export."""

    __slots__ = ("task_id", "events", "limit", "sample_every", "dropped", "truncated", "ended", "_root_from")

    def __init__(self, task_id: str, max_events: int) -> None:
        self.task_id = task_id
        self.events: list = []
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
        """A call's event (index 2 is its call id): kept when the call is in the sample."""
        if self.sample_every != 1 and not self.keeps(ev[2]):
            self.dropped += 1
            return
        events = self.events
        events.append(ev)
        if len(events) >= self.limit:
            self.compact()

    def add_task_event(self, ev: tuple) -> None:
        if ev[0] in PINNED_KINDS:
            self.events.append(ev)
            return
        if len(self.events) >= self.limit:
            self.compact()
            if len(self.events) >= self.limit:
                self.dropped += 1
                self.truncated += 1
                return
        self.events.append(ev)

    def compact(self) -> None:
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


class CallRecorder:
    """The per-call hooks over the store's ``tasks`` (task id -> TaskTrace).
    ``now_us`` is the trace clock, stamped once per dispatch-actor batch."""

    __slots__ = ("tasks", "now_us")

    def __init__(self, tasks: dict) -> None:
        self.tasks = tasks
        self.now_us = 0

    def call_sent(self, cmd) -> None:
        """The dispatch actor sent ExecuteCall for a DispatchCallCmd."""
        tr = self.tasks.get(cmd.task_id)
        if tr is None:
            return
        call_id = cmd.call_id
        if tr.sample_every != 1 and not tr.keeps(call_id):
            tr.dropped += 1
            return
        events = tr.events
        events.append((SENT, self.now_us, call_id, cmd.executor_id, cmd.attempt_seq, cmd.parent_call_id,
                       cmd.function_id))
        if len(events) >= tr.limit:
            tr.compact()

    def call_done(self, p: dict, call_id: str, executor_id: str, error_kind: str) -> None:
        """An accepted CallCompleted (error_kind "") or CallFailed frame, ``p`` its payload."""
        task_id = p.get("taskId")
        if type(task_id) is not str:
            return
        tr = self.tasks.get(task_id)
        if tr is None:
            return
        if tr.sample_every != 1 and not tr.keeps(call_id):
            tr.dropped += 1
            return
        events = tr.events
        events.append((DONE, self.now_us, call_id, executor_id, p.get("attemptSeq"), error_kind,
                       p.get("budgetUsedMs", 0)))
        if len(events) >= tr.limit:
            tr.compact()
