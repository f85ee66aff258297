"""CallTable: the calls the dispatcher holds, one CallRecord (records) per
call for its whole life, indexed by call id.

Rules and theory of operation:
- A root is in the table from its admission (``take_call``) until its batch
  settles (or its task is cancelled); a subcall from its request. A frame for
  a call not in the table (never admitted, or forgotten) is ignored.
- ``by_id`` is never rebound, so the lifecycle and the SubcallBinder keep a
  direct reference to it for their per-call lookups.
- The records' states and their rules are records' (blockx/core/dispatch/records.py).
"""
from __future__ import annotations

from typing import Iterable


from blockx.core.dispatch.records import STATE_NAMES, CallRecord, unlink_calls

__all__ = ["CallTable"]


class CallTable:
    __slots__ = ("by_id",)

    def __init__(self) -> None:
        self.by_id: dict[str, CallRecord] = {}

    def add(self, call: CallRecord) -> None:
        self.by_id[call.call_id] = call

    def add_all(self, calls: Iterable[CallRecord]) -> None:
        by_id = self.by_id
        for call in calls:
            by_id[call.call_id] = call

    def forget(self, calls: list) -> None:
        """Drop settled (or cancelled) calls: later frames for them are stale."""
        unlink_calls(calls, self.by_id)

    def state_name(self, call_id: str) -> str | None:
        call = self.by_id.get(call_id)
        return None if call is None else STATE_NAMES[call.state]

    def attempts(self, call_id: str) -> int | None:
        call = self.by_id.get(call_id)
        return None if call is None else call.attempt_count

    def __len__(self) -> int:
        return len(self.by_id)
