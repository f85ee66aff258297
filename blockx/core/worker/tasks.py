"""The task index: every task id WorkerCore knows, and what it knows of it.

Rules:
- One ``TaskIndexEntry`` per known task id, in one of four forms: a bare
  reservation (slot held, no context), a submitted task (context, slot held), a
  retained terminal result, or the tombstone of a reservation whose lease ran
  out before SubmitTask (kept so a late SubmitTask naming that slot can be told
  SlotUncertain rather than InvalidSlot).
- ``active`` holds exactly the contexts of submitted, non-terminal tasks, and
  ``entry.ctx`` is that same object: ``admit`` puts a context in, ``retire`` is
  the only way out, so the two can never disagree.
- Results and tombstones are kept for ``resultRetentionMs``. Both are appended
  with ``now + retention``, so the FIFO stays sorted by purge instant and
  purging is O(number purged). A FIFO item whose entry was replaced since (a
  tombstone re-reserved) is stale and skipped: identity with the index decides.
- Watch streams are counted on the entry until SubmitTask, then on the context;
  a terminal task accepts no more attach or detach.
- Each entry records its ``owner`` (the identity that reserved it); who may use
  it is ``core.owners``' rule, applied by WorkerCore.

The table knows nothing of slot states or timers: WorkerCore frees the slot in
the same call that retires or tombstones an entry.
"""
from __future__ import annotations

from collections import deque

from blockx.core.types import SlotEntry, TaskContext, TaskIndexEntry, TaskPhase, TaskResult, TaskState

_TERMINAL = TaskPhase.TERMINAL
_ALLOCATED = TaskState.ALLOCATED
_RUNNING = TaskState.RUNNING


class TaskIndex:
    __slots__ = ("entry", "context", "active", "_index", "_retention", "_retention_ms")

    def __init__(self, result_retention_ms: int) -> None:
        self._index: dict[str, TaskIndexEntry] = {}
        self.active: dict[str, TaskContext] = {}
        # (purge_at_ms, task_id, entry), sorted by purge_at_ms (see the rules above)
        self._retention: deque[tuple[int, str, TaskIndexEntry]] = deque()
        self._retention_ms = result_retention_ms
        # entry(task_id) / context(task_id): lookups on the hot path, without a Python frame
        self.entry = self._index.get
        self.context = self.active.get

    # ---- transitions ------------------------------------------------------------

    def reserve(self, task_id: str, slot: SlotEntry,
                previous: TaskIndexEntry | None, owner: str = "") -> TaskIndexEntry:
        """A new reservation of ``slot`` by ``owner``; ``previous`` is the tombstone it replaces."""
        entry = TaskIndexEntry(task_id, _ALLOCATED, slot.slot_id, slot.index, owner=owner)
        if previous is not None:    # keep the Watch streams of the replaced tombstone
            entry.watch_attached = previous.watch_attached
            entry.watch_ever_attached = previous.watch_ever_attached
        self._index[task_id] = entry
        return entry

    def admit(self, entry: TaskIndexEntry, ctx: TaskContext) -> int:
        """The reservation becomes a submitted task; returns the number of active tasks."""
        ctx.watch_attached = entry.watch_attached
        ctx.watch_ever_attached = entry.watch_ever_attached
        entry.ctx = ctx
        entry.state = _RUNNING
        entry.instance_id = ctx.instance_id
        active = self.active
        active[ctx.task_id] = ctx
        return len(active)

    def retire(self, ctx: TaskContext, result: TaskResult, now: int) -> None:
        """The task is terminal: keep its result for the retention window."""
        ctx.phase = _TERMINAL
        ctx.watch_disconnect_deadline_ms = None
        task_id = ctx.task_id
        entry = self._index[task_id]
        entry.slot_index = -1
        entry.ctx = None
        entry.result = result
        entry.state = result.state
        entry.retained_until_ms = until = now + self._retention_ms
        del self.active[task_id]
        self._retention.append((until, task_id, entry))

    def cancel_reservation(self, entry: TaskIndexEntry, result: TaskResult, now: int) -> None:
        """A bare reservation was cancelled before SubmitTask: it becomes a retained
        terminal result (a later SubmitTask of the id answers with it)."""
        entry.slot_index = -1
        entry.result = result
        entry.state = result.state
        entry.retained_until_ms = until = now + self._retention_ms
        self._retention.append((until, entry.task_id, entry))

    def tombstone(self, entry: TaskIndexEntry, lease_lost_at_ms: int, now: int) -> None:
        """The bare reservation lost its slot at ``lease_lost_at_ms``."""
        entry.lease_lost_at_ms = lease_lost_at_ms
        entry.slot_index = -1
        entry.retained_until_ms = until = now + self._retention_ms
        self._retention.append((until, entry.task_id, entry))

    def purge(self, now: int) -> list[str]:
        """Forget the results and tombstones whose retention ended; their task ids."""
        q = self._retention
        index = self._index
        purged = []
        while q and q[0][0] <= now:
            _, task_id, entry = q.popleft()
            if index.get(task_id) is entry:
                del index[task_id]
                purged.append(task_id)
        return purged

    def entries(self):
        """Every entry (read only; ListTasks walks it)."""
        return self._index.values()

    def retained_result_count(self) -> int:
        """Terminal results kept for the retention window (memory diagnostics; O(ids))."""
        return sum(1 for e in self._index.values() if e.result is not None)

    def next_purge(self) -> int | None:
        """The instant of the next purge that forgets something, or None."""
        q, index = self._retention, self._index
        while q:
            _, task_id, entry = q[0]
            if index.get(task_id) is entry:
                return q[0][0]
            q.popleft()
        return None

    # ---- Watch streams -------------------------------------------------------------

    def attach_watch(self, task_id: str) -> bool:
        """One more stream watches the task; cancels a running Watch grace. False for an
        unknown or terminal task."""
        entry = self._index.get(task_id)
        if entry is None or entry.result is not None:
            return False
        ctx = entry.ctx
        target = ctx if ctx is not None else entry
        target.watch_attached += 1
        target.watch_ever_attached = True
        if ctx is not None:
            ctx.watch_disconnect_deadline_ms = None
        return True

    def detach_watch(self, task_id: str) -> bool:
        """One stream stopped watching the task. False for an unknown or terminal task or
        an unbalanced detach."""
        entry = self._index.get(task_id)
        if entry is None or entry.result is not None:
            return False
        target = entry.ctx if entry.ctx is not None else entry
        if target.watch_attached <= 0:
            return False
        target.watch_attached -= 1
        return True
