"""Phase-level admission: one gate per phase (builder, executor, plugin, scan).

Bounds how many tasks are in each phase at once, independently of the slot
count, so a burst of submissions cannot run 50 builders or 50 scans together.

A ``PhaseGate`` is a FIFO counting semaphore with a synchronous ``try_enter``:
the phase driver runs a task's phases inline (no asyncio Task) while their gate
has room and nobody waits, and only a task that must wait gets a Task. A
synchronous entry never overtakes a waiter."""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass


class PhaseGate:
    __slots__ = ("capacity", "_free", "_waiters")

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"a phase gate needs capacity > 0, got {capacity}")
        self.capacity = capacity
        self._free = capacity
        self._waiters: deque[asyncio.Future] = deque()

    @property
    def in_use(self) -> int:
        return self.capacity - self._free

    def try_enter(self) -> bool:
        """Enter now if there is room and nobody waits; False otherwise (nothing changes)."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def enter(self) -> None:
        if self.try_enter():
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()         # granted, then cancelled before it ran: pass the room on
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        """Leave; the room goes to the oldest waiter, if any."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)   # the room passes on: _free stays as it is
                return
        if self._free >= self.capacity:
            raise RuntimeError("PhaseGate released more often than entered")
        self._free += 1

    async def __aenter__(self) -> None:
        await self.enter()

    async def __aexit__(self, *exc) -> None:
        self.release()


@dataclass(slots=True)
class Admission:
    builder: PhaseGate
    executor: PhaseGate
    plugin: PhaseGate
    scan: PhaseGate

    @classmethod
    def from_config(cls, cfg) -> "Admission":
        """`cfg`: blockx.core.config.AdmissionConfig."""
        return cls(PhaseGate(cfg.builder_slots), PhaseGate(cfg.executor_task_slots),
                   PhaseGate(cfg.plugin_slots), PhaseGate(cfg.scan_slots))
