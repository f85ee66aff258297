"""WorkerCore's task timers: ``TaskTimers``, the deadline and Watch-grace timers
of submitted tasks, on the lazily invalidated heaps of blockx.core.timer_heap.

Rules of ``TaskTimers``: a task's timers are judged by the timeline, never by
the order events arrive: ``first_due`` names the earliest due timer of one task
(TIMED_OUT wins ties, then SLOT_LOST, then WATCH_DISCONNECTED), and every task
event applies it before anything else. The heaps hold the TaskContext itself;
a converged task (phase TERMINAL) or a cancelled grace (its
``watch_disconnect_deadline_ms`` cleared, or a newer ``watch_seq``) is stale.
Slot leases belong to the slot table (they are invalidated by slot generation),
retained results to the task index (their FIFO is checked against the index).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from blockx.core import failure_codes as fc
from blockx.core.timer_heap import TimerHeap
from blockx.core.types import TaskContext, TaskPhase

if TYPE_CHECKING:       # TaskTimers reads slot leases; core.worker.slots does not import this module
    from blockx.core.worker.slots import SlotTable

_PREPARING = TaskPhase.PREPARING
_TERMINAL = TaskPhase.TERMINAL

# (instant, failure code, message, retryable) of the earliest due timer of a task
DueFailure = tuple[int, str, str, bool]


def _deadline_live(at_ms: int, ctx: TaskContext, token: Any) -> bool:
    return ctx.phase is not _TERMINAL


def _watch_live(at_ms: int, ctx: TaskContext, seq: Any) -> bool:
    return (ctx.phase is not _TERMINAL and ctx.watch_seq == seq
            and ctx.watch_disconnect_deadline_ms is not None)


class TaskTimers:
    __slots__ = ("grace_ms", "_slots", "_deadlines", "_watch_grace", "_watch_seq")

    def __init__(self, watch_disconnect_grace_ms: int, slots: SlotTable) -> None:
        self.grace_ms = watch_disconnect_grace_ms
        self._slots = slots             # read only: the lease of a PREPARING task's slot
        self._deadlines = TimerHeap(_deadline_live)
        self._watch_grace = TimerHeap(_watch_live)
        self._watch_seq = 0

    def arm_deadline(self, ctx: TaskContext, live_bound: int) -> None:
        """``live_bound``: how many tasks are active (bounds the live timers)."""
        self._deadlines.push(ctx.deadline_ms, ctx, None, live_bound)

    def start_watch_grace(self, ctx: TaskContext, now: int, live_bound: int) -> None:
        """The last Watch stream of the task left: it fails unless one attaches within
        the grace. No grace configured means watching is optional."""
        grace = self.grace_ms
        if grace > 0:
            self._watch_seq = seq = self._watch_seq + 1
            ctx.watch_seq = seq
            ctx.watch_disconnect_deadline_ms = now + grace
            self._watch_grace.push(now + grace, ctx, seq, live_bound)

    def timed_out(self, now: int) -> list[str]:
        return [ctx.task_id for ctx in self._deadlines.due(now)]

    def watch_expired(self, now: int) -> list[str]:
        return [ctx.task_id for ctx in self._watch_grace.due(now)]

    def earliest(self) -> int | None:
        a = self._deadlines.earliest()
        b = self._watch_grace.earliest()
        return b if a is None or (b is not None and b < a) else a

    def first_due(self, ctx: TaskContext, now: int) -> DueFailure | None:
        """The earliest due timer of the task. Its slot's lease counts only while the
        task is PREPARING (activation makes the lease irrelevant)."""
        best: DueFailure | None = None
        d = ctx.deadline_ms
        if now >= d:
            best = (d, fc.TIMED_OUT,
                    f"task exceeded its timeout of {d - ctx.accepted_at_ms} ms (accepted at "
                    f"{ctx.accepted_at_ms} ms, deadline {d} ms) during phase {ctx.phase.name}", True)
        if ctx.phase is _PREPARING:
            lease = self._slots.slots[ctx.slot_index].lease_expires_at_ms
            if now >= lease and (best is None or lease < best[0]):
                best = (lease, fc.SLOT_LOST,
                        f"the lease of {ctx.slot_id} expired at {lease} ms before the task was "
                        "activated (activation took longer than the slot TTL)", False)
        w = ctx.watch_disconnect_deadline_ms
        if w is not None and now >= w and (best is None or w < best[0]):
            best = (w, fc.WATCH_DISCONNECTED,
                    "every WatchTasks stream of the task disconnected and none reattached within "
                    f"watchDisconnectGraceMs ({self.grace_ms} ms)", False)
        return best
