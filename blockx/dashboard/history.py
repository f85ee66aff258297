"""WorkerHistory: the recent tasks/s and calls/s of one worker, for the fleet page's
sparklines.

Each GetWorkerStatus read is compared with the one before it (deltas of the
cumulative counters over the worker's own clock, as `blockx top` computes them),
and the pair of rates is kept in a ring of ``points`` (at one read a second, the
last few minutes). Pure: the worker's now_ms is the only clock."""
from __future__ import annotations

from collections import deque

DEFAULT_POINTS = 180


class WorkerHistory:
    __slots__ = ("tasks", "calls", "_last")

    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        self.tasks: deque[float] = deque(maxlen=points)
        self.calls: deque[float] = deque(maxlen=points)
        self._last = None             # the previous pb.WorkerStatus

    def add(self, status) -> tuple[float, float] | None:
        """Record one read; the rates since the previous read (None for the first,
        or when the worker restarted: its counters went back)."""
        prev, self._last = self._last, status
        if prev is not None and status.started_at_ms != prev.started_at_ms:
            prev = None
        r = rates_between(prev, status)
        if r is not None:
            self.tasks.append(round(r[0], 3))
            self.calls.append(round(r[1], 3))
        return r

    @property
    def rates(self) -> tuple[float, float] | None:
        if not self.tasks:
            return None
        return self.tasks[-1], self.calls[-1]


def rates_between(prev, cur) -> tuple[float, float] | None:
    """(tasks finished/s, call attempts finished/s) between two reads; None without a
    previous read or when the worker's clock did not move."""
    if prev is None:
        return None
    dt = (cur.now_ms - prev.now_ms) / 1000.0
    if dt <= 0:
        return None
    a, b = prev.counters, cur.counters
    tasks = (b.tasks_succeeded + b.tasks_failed) - (a.tasks_succeeded + a.tasks_failed)
    calls = (b.calls_completed + b.calls_failed) - (a.calls_completed + a.calls_failed)
    return max(0, tasks) / dt, max(0, calls) / dt
