"""TimerHeap: timers that are invalidated lazily instead of removed.

Every timer the core cares about (slot lease, task deadline, Watch
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
"""
from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Any, Callable

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
