"""Placement: which Worker gets the next task (power of two choices on free slots).

Theory of operation. A heartbeat says how many slots a worker had free when it
was written; between two heartbeats this client may already have sent it many
tasks. So the estimate is ``freeSlots - (in-flight now - in-flight when that
heartbeat was read)``: tasks sent since the heartbeat count against it, tasks
finished since count for it, and a burst spreads instead of piling onto one
stale value. Two distinct candidates are drawn at random among the placeable
workers (ready, not draining, not excluded, not marked down) and the one with the
larger estimate wins (ties: fewer in flight). Random pairs rather than the global
best keep many clients from all herding onto the same worker.

A worker this client failed to reach (or whose session broke) is marked down
until the registry shows a newer value of its key (a heartbeat written after the
failure) or ``down_for_s`` has passed, whichever comes first: a SIGKILLed worker
keeps its key until its lease expires, and must not be tried again meanwhile.

Pure bookkeeping: no IO, no clock (``now`` is passed in), randomness injected.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable

from blockx.client.registry import WorkerInfo

DEFAULT_DOWN_FOR_S = 5.0


class Placement:
    def __init__(self, rand: Callable[[], float] = random.random, *, down_for_s: float = DEFAULT_DOWN_FOR_S) -> None:
        self._rand = rand
        self.down_for_s = down_for_s
        self.inflight: dict[str, int] = {}
        self._at_heartbeat: dict[str, tuple[int, int]] = {}   # addr -> (revision, in-flight when read)
        self._down: dict[str, tuple[int, float]] = {}          # addr -> (revision at failure, until)

    # ---- what the client tells it -------------------------------------------------------

    def started(self, addr: str) -> None:
        self.inflight[addr] = self.inflight.get(addr, 0) + 1

    def finished(self, addr: str) -> None:
        n = self.inflight.get(addr, 0) - 1
        if n > 0:
            self.inflight[addr] = n
        else:
            self.inflight.pop(addr, None)

    def mark_down(self, addr: str, revision: int, now: float) -> None:
        self._down[addr] = (revision, now + self.down_for_s)

    def forget(self, addr: str) -> None:
        """The worker left the registry."""
        self._at_heartbeat.pop(addr, None)
        self._down.pop(addr, None)

    # ---- the decision -------------------------------------------------------------------

    def is_down(self, info: WorkerInfo, now: float) -> bool:
        d = self._down.get(info.addr)
        if d is None:
            return False
        if info.revision > d[0] or now >= d[1]:
            del self._down[info.addr]
            return False
        return True

    def estimate(self, info: WorkerInfo) -> int:
        """Slots this worker probably has free now."""
        now_inflight = self.inflight.get(info.addr, 0)
        seen = self._at_heartbeat.get(info.addr)
        if seen is None or seen[0] != info.revision:
            # First time this heartbeat is used: remember how much was in flight then.
            seen = (info.revision, now_inflight)
            self._at_heartbeat[info.addr] = seen
        return info.free_slots - (now_inflight - seen[1])

    def candidates(self, workers: Iterable[WorkerInfo], now: float,
                   exclude: Collection[str] = ()) -> list[WorkerInfo]:
        return [w for w in workers if w.placeable and w.addr not in exclude and not self.is_down(w, now)]

    def choose(self, workers: Iterable[WorkerInfo], now: float, exclude: Collection[str] = ()) -> WorkerInfo | None:
        cands = self.candidates(workers, now, exclude)
        n = len(cands)
        if n == 0:
            return None
        if n == 1:
            return cands[0]
        i = int(self._rand() * n) % n
        j = int(self._rand() * (n - 1)) % (n - 1)
        if j >= i:
            j += 1
        a, b = cands[i], cands[j]
        ea, eb = self.estimate(a), self.estimate(b)
        if ea != eb:
            return a if ea > eb else b
        return a if self.inflight.get(a.addr, 0) <= self.inflight.get(b.addr, 0) else b
