"""WorkerCore's timers: the lazily invalidated ``TimerHeap``, and ``TaskTimers``,
the deadline and Watch-grace timers of submitted tasks.

Theory: every timer the core cares about (slot lease, task deadline, Watch
grace) is an instant that can later become irrelevant (task finished, slot
re-allocated, stream reattached). Removing entries from a heap is O(n), so they
are invalidated lazily instead: each entry carries a ``token`` and a ``live``
predicate decides whether it still matters. Stale entries are dropped when they
reach the top, and the heap is rebuilt once it holds more than twice the live
bound (+64), which keeps memory proportional to live timers and the cost
amortised O(log n) per push even at thousands of tasks per second with
5-minute deadlines.

``due(now)`` does not consume anything: the scans are queries, the ``handle_*``
methods are the mutations. A due entry keeps being reported until its handler
made it stale, so a lost tick can never lose a timer.

Rules of ``TaskTimers``: a task's timers are judged by the timeline, never by
the order events arrive: ``first_due`` names the earliest due timer of one task
(TIMED_OUT wins ties, then SLOT_LOST, then WATCH_DISCONNECTED), and every task
event applies it before anything else. The heaps hold the TaskContext itself;
a converged task (phase TERMINAL) or a cancelled grace (its
``watch_disconnect_deadline_ms`` cleared, or a newer ``watch_seq``) is stale.
Slot leases belong to the slot table (they are invalidated by slot generation),
retained results to the task table (their FIFO is checked against the index).
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Any, Callable

from . import failure_codes as fc
from .types import TaskContext, TaskPhase

if TYPE_CHECKING:       # worker_slots builds its lease timers on TimerHeap
    from .worker_slots import SlotTable

# live(at_ms, item, token) -> bool
Live = Callable[[int, Any, Any], bool]

_COMPACT_SLACK = 64


class TimerHeap:
    __slots__ = ("_heap", "_seq", "_live")

    def __init__(self, live: Live) -> None:
        self._heap: list[tuple[int, int, Any, Any]] = []
        self._seq = 0
        self._live = live

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, at_ms: int, item: Any, token: Any, live_bound: int) -> None:
        """Arm a timer. ``live_bound`` is an upper bound on live entries (for compaction)."""
        heap = self._heap
        if len(heap) > 2 * live_bound + _COMPACT_SLACK:
            live = self._live
            heap = self._heap = [e for e in heap if live(e[0], e[2], e[3])]
            heapify(heap)
        self._seq += 1
        heappush(heap, (at_ms, self._seq, item, token))

    def _drop_stale_top(self) -> None:
        heap, live = self._heap, self._live
        while heap:
            e = heap[0]
            if live(e[0], e[2], e[3]):
                return
            heappop(heap)

    def earliest(self) -> int | None:
        """The earliest live instant, or None."""
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def due(self, now: int) -> list[Any]:
        """Items of live entries with at_ms <= now, earliest first (ties: arming order)."""
        self._drop_stale_top()
        heap, live = self._heap, self._live
        n = len(heap)
        if not n or heap[0][0] > now:
            return []
        found = []
        stack = [0]
        # Heap order means a subtree whose root is in the future holds nothing due.
        while stack:
            i = stack.pop()
            e = heap[i]
            if e[0] > now:
                continue
            if live(e[0], e[2], e[3]):
                found.append(e)
            c = 2 * i + 1
            if c < n:
                stack.append(c)
                if c + 1 < n:
                    stack.append(c + 1)
        found.sort(key=_order)
        return [e[2] for e in found]


def _order(e: tuple[int, int, Any, Any]) -> tuple[int, int]:
    return (e[0], e[1])


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
