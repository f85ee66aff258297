"""Timer-driven events and scans of WorkerCore: slot lease expiry, task
deadlines, Watch grace, result retention.

Rules: the scans (``expired_slots``, ``timed_out_tasks``,
``watch_disconnected_tasks``) only report; the ``handle_*`` methods mutate, and
re-check the timeline themselves (a scan result that went stale in between is
dropped with ``applied=False``). ``purge_expired_results`` deletes retained
results in FIFO order, O(number purged). ``next_deadline()`` lets the adapter arm
one timer for the earliest instant instead of polling; ``tick(now)`` is the
whole "scan, then feed every hit to its handler" loop in one call.
"""
from __future__ import annotations

from .types import Command, LeaseExpiredResult, PhaseTransitionResult, SlotState
from .worker_state import WorkerState


class WorkerTimers(WorkerState):
    __slots__ = ()

    # ---- timer events -------------------------------------------------------------

    def handle_task_timed_out(self, task_id: str, now: int) -> PhaseTransitionResult:
        """Converge the task if its deadline (or an earlier timer of it) is due."""
        return self._handle_timer_event(task_id, now)

    def handle_watch_disconnected(self, task_id: str, now: int) -> PhaseTransitionResult:
        """Converge the task if its Watch grace (or an earlier timer of it) is due."""
        return self._handle_timer_event(task_id, now)

    def _handle_timer_event(self, task_id: str, now: int) -> PhaseTransitionResult:
        ctx = self._tasks.get(task_id)
        due = self._due_failure(ctx, now) if ctx is not None else None
        if due is None:
            return PhaseTransitionResult(self._maybe_snapshot(task_id), [], False)
        assert ctx is not None
        return PhaseTransitionResult(*self._converge_due(ctx, due, now))

    def handle_slot_lease_expired(self, slot_id: str, now: int) -> LeaseExpiredResult:
        """Reclaim an ALLOCATED slot whose lease is due. A bare reservation becomes a
        tombstone (snapshot None); a submitted, not yet activated task converges
        FAILED/SLOT_LOST. A slot that is FREE, RUNNING, re-allocated or not yet due
        is left alone (applied=False)."""
        slot = self._slots.parse(slot_id)
        if slot.state is not SlotState.ALLOCATED or now < slot.lease_expires_at_ms:
            return LeaseExpiredResult(None, [], False)
        assert slot.task_id is not None
        entry = self._index[slot.task_id]
        ctx = entry.ctx
        if ctx is None:
            self._tombstone(entry, slot, now)
            return LeaseExpiredResult(None, [], True)
        due = self._due_failure(ctx, now)
        assert due is not None
        return LeaseExpiredResult(*self._converge_due(ctx, due, now))

    def handle_watch_attached(self, task_id: str, now: int) -> bool:
        """First WatchTasks stream for the task attached (one call per attached stream).
        Cancels a running Watch grace. False for an unknown or terminal task."""
        entry = self._index.get(task_id)
        if entry is None or entry.result is not None:
            return False
        target = entry.ctx if entry.ctx is not None else entry
        target.watch_attached += 1
        target.watch_ever_attached = True
        if entry.ctx is not None:
            entry.ctx.watch_disconnect_deadline_ms = None
        return True

    def handle_watch_detached(self, task_id: str, now: int) -> bool:
        """A stream watching the task went away. When the last one leaves a submitted
        task and watchDisconnectGraceMs > 0, the grace timer starts. False for an
        unknown or terminal task or an unbalanced detach."""
        entry = self._index.get(task_id)
        if entry is None or entry.result is not None:
            return False
        ctx = entry.ctx
        target = ctx if ctx is not None else entry
        if target.watch_attached <= 0:
            return False
        target.watch_attached -= 1
        grace = self.config.watch_disconnect_grace_ms
        if ctx is not None and ctx.watch_attached == 0 and grace > 0:
            self._watch_seq += 1
            ctx.watch_seq = self._watch_seq
            ctx.watch_disconnect_deadline_ms = now + grace
            self._watch_timers.push(now + grace, ctx, self._watch_seq, len(self._tasks))
        return True

    # ---- timer scans -----------------------------------------------------------------

    def expired_slots(self, now: int) -> list[str]:
        """Slot ids whose lease is due; feed each to handle_slot_lease_expired."""
        return self._slots.expired(now)

    def timed_out_tasks(self, now: int) -> list[str]:
        """Task ids whose deadline is due; feed each to handle_task_timed_out."""
        return [ctx.task_id for ctx in self._deadlines.due(now)]

    def watch_disconnected_tasks(self, now: int) -> list[str]:
        """Task ids whose Watch grace ran out; feed each to handle_watch_disconnected."""
        return [ctx.task_id for ctx in self._watch_timers.due(now)]

    def purge_expired_results(self, now: int) -> list[str]:
        """Forget terminal results (and expired-reservation tombstones) whose retention
        ended; returns their task ids. O(number purged)."""
        q = self._retention
        index = self._index
        purged = []
        while q and q[0][0] <= now:
            _, task_id, entry = q.popleft()
            if index.get(task_id) is entry:
                del index[task_id]
                purged.append(task_id)
        return purged

    def next_deadline(self) -> int | None:
        """Earliest instant at which a scan (or purge) would return something; None if
        no timer is armed. May be <= now when something is due but not yet handled."""
        best = self._slots.earliest_lease()
        for t in (self._deadlines.earliest(), self._watch_timers.earliest(),
                  self._retention_head()):
            if t is not None and (best is None or t < best):
                best = t
        return best

    def tick(self, now: int) -> list[Command]:
        """Run every scan and feed it to its handler: lease expiry, task deadlines, Watch
        grace, then result purge. Returns the commands to execute (ConvergeTask)."""
        out: list[Command] = []
        for slot_id in self.expired_slots(now):
            out.extend(self.handle_slot_lease_expired(slot_id, now).commands)
        for task_id in self.timed_out_tasks(now):
            out.extend(self.handle_task_timed_out(task_id, now).commands)
        for task_id in self.watch_disconnected_tasks(now):
            out.extend(self.handle_watch_disconnected(task_id, now).commands)
        self.purge_expired_results(now)
        return out
