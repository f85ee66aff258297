"""Fair shares: how much of the Worker one identity may hold at once.

Rules:
- An identity (a task's owner, core.owners) holds at most ``slot_cap`` task
  slots, reserved or running: maxSlotsPerIdentity, 0 meaning half of taskSlots
  (at least 1). A reservation past it (RequestTaskSlot, or a SubmitTask that
  reserves inline) is refused NoSlot (RESOURCE_EXHAUSTED), naming the share and
  its setting, so the rest of the slots stay free for the other identities.
- The payload bytes of an identity's submitted tasks that have not ended sum to
  at most ``bytes_cap`` (maxQueuedCallBytesPerIdentity): a task's calls are
  built from its payload, and they are queued until they run, so this bounds
  what one identity's call lists cost the Worker. A SubmitTask past it is
  refused the same way, before it reserves anything. One task's payload is
  bounded by maxPayloadBytes, which may not exceed this share.
- Admin and the unrestricted caller (a Worker without authentication) are not
  held to a share: they are the operator. taskSlots bounds them as everyone.
- The counts are the slot table's (core.worker.slots ``held`` and
  ``held_bytes``): the shares only compare them with the caps.
"""
from __future__ import annotations

from blockx.core.errors import ShareExceededError
from blockx.core.owners import Caller
from blockx.core.worker.slots import SlotTable

SLOTS = "slots"
QUEUED_CALL_BYTES = "queued_call_bytes"


def slot_cap(task_slots: int, max_slots_per_identity: int) -> int:
    """The slots one identity may hold: the setting, or half the slots (at least 1) for 0."""
    if max_slots_per_identity > 0:
        return min(max_slots_per_identity, task_slots)
    return max(1, task_slots // 2)


class Shares:
    __slots__ = ("slot_cap", "bytes_cap")

    def __init__(self, task_slots: int, max_slots_per_identity: int, max_queued_call_bytes_per_identity: int) -> None:
        self.slot_cap = slot_cap(task_slots, max_slots_per_identity)
        self.bytes_cap = max_queued_call_bytes_per_identity

    def check_slot(self, slots: SlotTable, caller: Caller | None) -> None:
        """Raise ShareExceededError when ``caller`` may not reserve one more slot."""
        if caller is None or caller.admin:
            return
        held = slots.held(caller.name)
        if held >= self.slot_cap:
            raise ShareExceededError(
                f"identity {caller.name!r} holds {held} of this worker's {slots.size} task slots, its share "
                f"(maxSlotsPerIdentity, MAX_SLOTS_PER_IDENTITY: {self.slot_cap}; by default half the slots): "
                "the other slots are kept for other identities; wait for one of its tasks to end (or cancel "
                "a reservation), or submit to another worker", caller.name, SLOTS)

    def check_bytes(self, slots: SlotTable, caller: Caller | None, nbytes: int) -> None:
        """Raise ShareExceededError when a task of ``nbytes`` payload would take ``caller``
        past its share of queued call bytes."""
        if caller is None or caller.admin:
            return
        held = slots.held_bytes(caller.name)
        if held + nbytes > self.bytes_cap:
            raise ShareExceededError(
                f"identity {caller.name!r} has {held} bytes of call payloads in tasks that have not ended, and "
                f"this task's {nbytes} bytes would pass its share (maxQueuedCallBytesPerIdentity, "
                f"MAX_QUEUED_CALL_BYTES_PER_IDENTITY: {self.bytes_cap} bytes): wait for some of its tasks to "
                "end, or submit to another worker", caller.name, QUEUED_CALL_BYTES)


__all__ = ["QUEUED_CALL_BYTES", "SLOTS", "Shares", "slot_cap"]
