"""The slot table: WorkerCore's single source of truth for capacity.

Rules:
- ``task_slots`` slots named ``slot-0`` .. ``slot-{task_slots-1}`` (0-based, like
  the Go original's slice index). A well-formed ``slot-N`` outside the pool is
  InvalidSlot (leased on another worker); any other string is InvalidArgument.
- FREE -> ALLOCATED (reservation, with a lease) -> RUNNING (task activated, lease
  no longer matters) -> FREE (task converged). ALLOCATED -> FREE on lease expiry.
- Allocation is "first FREE slot in index order" (what a linear scan finds), done
  with a min-heap of free indices: same answer, O(log n) instead of O(n).
- ``free_capacity = task_slots - (ALLOCATED + RUNNING)``; the two counters are
  kept exact so capacity and the heartbeat are O(1).
- Leases live in a lazily invalidated TimerHeap keyed by slot generation, so a
  lease armed for an earlier reservation of the same slot can never fire.
- Each slot that is not FREE records its ``owner`` (the identity that reserved
  it) and, once a task is submitted into it, that task's payload bytes
  (``charge``). Per owner, ``held`` counts the slots and ``held_bytes`` sums
  those bytes; both change only in allocate / charge / release, so they are
  always exactly what the slots say (core.worker.shares reads them).

The table knows nothing of tasks beyond the owning task id; WorkerCore keeps the
task index consistent with it inside the same method call.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import Any

from blockx.core.errors import InvalidArgumentError, InvalidSlotError
from blockx.core.types import SlotEntry, SlotState
from blockx.core.timer_heap import TimerHeap

_FREE = SlotState.FREE
_ALLOCATED = SlotState.ALLOCATED
_RUNNING = SlotState.RUNNING


def _is_slot_n(slot_id: str) -> bool:
    """`slot-N` with N a canonical non-negative decimal (no sign, no leading zero)."""
    n = slot_id[5:]
    return (slot_id.startswith("slot-") and n.isdigit() and n.isascii()
            and (n == "0" or n[0] != "0"))


def _lease_live(at_ms: int, slot: SlotEntry, generation: Any) -> bool:
    return slot.state is _ALLOCATED and slot.generation == generation


class SlotTable:
    __slots__ = ("slots", "size", "allocated", "running", "_by_id", "_free", "_leases", "_held", "_held_bytes")

    def __init__(self, task_slots: int) -> None:
        if task_slots <= 0:
            raise ValueError(f"task_slots must be > 0, got {task_slots}")
        self.size = task_slots
        self.slots: list[SlotEntry] = [SlotEntry(i, f"slot-{i}") for i in range(task_slots)]
        self._by_id: dict[str, int] = {s.slot_id: s.index for s in self.slots}
        self._free: list[int] = list(range(task_slots))   # sorted, hence a valid min-heap
        self.allocated = 0
        self.running = 0
        self._leases = TimerHeap(_lease_live)
        self._held: dict[str, int] = {}         # owner -> slots ALLOCATED or RUNNING (no zero entries)
        self._held_bytes: dict[str, int] = {}   # owner -> queued_bytes of those slots (no zero entries)

    # ---- lookups ----------------------------------------------------------

    @property
    def free_capacity(self) -> int:
        return self.size - self.allocated - self.running

    def parse(self, slot_id: str) -> SlotEntry:
        """The slot named ``slot_id``; InvalidArgument if it is not a slot of this worker."""
        i = self._by_id.get(slot_id)
        if i is None:
            if _is_slot_n(slot_id):
                # Well formed, but leased elsewhere (or from a bigger pool): the
                # caller talks to the wrong worker, a precondition failure.
                raise InvalidSlotError(
                    f"{slot_id} is not a slot of this worker, which has slot-0 .. slot-{self.size - 1}; "
                    "it was probably leased on another worker: lease a slot on this worker with "
                    "RequestTaskSlot, or omit slot_id to reserve one inline")
            raise InvalidArgumentError(
                f"slot_id {slot_id!r} is not a slot of this worker (expected slot-0 .. "
                f"slot-{self.size - 1}, as returned by RequestTaskSlot); "
                "omit slot_id to reserve a slot inline")
        return self.slots[i]

    def held(self, owner: str) -> int:
        """Slots ``owner`` holds (ALLOCATED or RUNNING)."""
        return self._held.get(owner, 0)

    def held_bytes(self, owner: str) -> int:
        """The payload bytes of the tasks submitted into ``owner``'s slots."""
        return self._held_bytes.get(owner, 0)

    def holders(self) -> dict[str, tuple[int, int]]:
        """owner -> (slots, bytes) for every owner holding a slot (a copy; metrics)."""
        hb = self._held_bytes
        return {o: (n, hb.get(o, 0)) for o, n in self._held.items()}

    # ---- transitions --------------------------------------------------------

    def allocate(self, task_id: str, lease_expires_at_ms: int, owner: str = "") -> SlotEntry:
        """FREE -> ALLOCATED for the lowest free index, held by ``owner``. Caller checked
        free_capacity (and the owner's share, core.worker.shares)."""
        slot = self.slots[heappop(self._free)]
        slot.state = _ALLOCATED
        slot.task_id = task_id
        slot.owner = owner
        held = self._held
        held[owner] = held.get(owner, 0) + 1
        slot.lease_expires_at_ms = lease_expires_at_ms
        slot.generation += 1
        self.allocated += 1
        self._leases.push(lease_expires_at_ms, slot, slot.generation, self.size)
        return slot

    def charge(self, slot: SlotEntry, nbytes: int) -> None:
        """The task submitted into ``slot`` holds ``nbytes`` of its owner's share until release."""
        if nbytes > 0:
            slot.queued_bytes = nbytes
            hb = self._held_bytes
            hb[slot.owner] = hb.get(slot.owner, 0) + nbytes

    def activate(self, slot: SlotEntry) -> None:
        """ALLOCATED -> RUNNING: the lease stops mattering (its timer goes stale)."""
        slot.state = _RUNNING
        self.allocated -= 1
        self.running += 1

    def release(self, slot: SlotEntry) -> None:
        """ALLOCATED or RUNNING -> FREE."""
        if slot.state is _ALLOCATED:
            self.allocated -= 1
        elif slot.state is _RUNNING:
            self.running -= 1
        else:
            raise AssertionError(f"{slot.slot_id} released while FREE")
        owner = slot.owner
        held = self._held
        n = held[owner] - 1
        if n:
            held[owner] = n
        else:
            del held[owner]
        if slot.queued_bytes:
            hb = self._held_bytes
            b = hb[owner] - slot.queued_bytes
            if b:
                hb[owner] = b
            else:
                del hb[owner]
            slot.queued_bytes = 0
        slot.owner = ""
        slot.state = _FREE
        slot.task_id = None
        slot.lease_expires_at_ms = 0
        heappush(self._free, slot.index)

    # ---- timers -------------------------------------------------------------

    def expired(self, now: int) -> list[str]:
        """Ids of ALLOCATED slots whose lease is due (lease_expires_at_ms <= now)."""
        return [s.slot_id for s in self._leases.due(now)]

    def earliest_lease(self) -> int | None:
        return self._leases.earliest()
