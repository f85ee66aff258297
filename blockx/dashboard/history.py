"""WorkerHistory: the recent tasks/s and calls/s of one worker, for the fleet page's
sparklines.

Each GetWorkerStatus read is compared with the one before it (the rates of
blockx.cli.top, deltas of the cumulative counters over the worker's own clock),
and the pair of rates is kept in a ring of ``points`` (at one read a second, the
last few minutes). Pure: the worker's now_ms is the only clock."""
from __future__ import annotations

from collections import deque

from blockx.cli.top import Rates

DEFAULT_POINTS = 180


class WorkerHistory:
    __slots__ = ("tasks", "calls", "_last")

    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        self.tasks: deque[float] = deque(maxlen=points)
        self.calls: deque[float] = deque(maxlen=points)
        self._last = None             # the previous pb.WorkerStatus

    def add(self, status) -> Rates | None:
        """Record one read; the rates since the previous read (None for the first,
        or when the worker restarted: its counters went back)."""
        prev, self._last = self._last, status
        if prev is not None and status.started_at_ms != prev.started_at_ms:
            prev = None
        r = Rates.between(prev, status)
        if r is not None:
            self.tasks.append(round(r.tasks_finished, 3))
            self.calls.append(round(r.calls, 3))
        return r

    @property
    def rates(self) -> tuple[float, float] | None:
        if not self.tasks:
            return None
        return self.tasks[-1], self.calls[-1]
