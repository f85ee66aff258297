"""The calls the dispatcher knows: one CallRecord per call for its whole life,
indexed by call id in the CallTable.

Rules and theory of operation:
- A call's state is READY, RUNNING, WAITING or DONE. DONE is terminal and only
  ``CallLifecycle.set_terminal`` enters it (``CallLifecycle.cancel_task`` drops
  a task's calls wholesale); every state change is the lifecycle's
  (blockx/core/dispatch/lifecycle.py states the events). RUNNING starts when the core emits BindCall (``bound``
  turns true on handle_executor_bound); a retry reuses the same context and
  call id and only increments ``attempt_count`` (the attempt seq the executor
  echoes), so late frames of an older attempt are told apart by that number.
- A READY call is in exactly one place: its task's ready queue, the waiter
  list of a singleflight leader (``leader`` set; a subcall waiter is also listed
  under its parent), the retry timer
  (``retry_armed``), or, for subcalls, the SubcallBinder's parking
  (``parked``).
- A root gets its context when it is admitted (``take_call`` makes it from the
  task's compact queue, see tasks); the CallTable holds a call from
  then until its batch settles (or its task is cancelled): a frame for a call
  not in the table (never admitted, or forgotten) is ignored.
  ``by_id`` is never rebound, so the facade may keep a direct reference to it
  for its per-call lookups.
CallRecord is created per call on the hot path and only the core touches it:
it is a compiled cdef class (blockx/core/dispatch/dispatchloop.py, Cython's pure-Python
mode; interpreted, a plain ``__slots__`` class), built one at a time by ``take_call`` as roots are admitted
(``make_calls`` builds a whole list of them, for tests and tools).
"""
from __future__ import annotations

from typing import Iterable


from blockx.core.dispatch import dispatchloop as _loop
# The state constants and CallRecord live in the hot module (blockx/core/dispatch/dispatchloop:
# a cdef class compiled, a __slots__ class interpreted); the core re-exports them.
READY: int = _loop.READY
RUNNING: int = _loop.RUNNING
WAITING: int = _loop.WAITING
DONE: int = _loop.DONE
STATE_NAMES: tuple = _loop.STATE_NAMES
CallRecord = _loop.CallRecord
make_calls = _loop.make_calls


class CallTable:
    __slots__ = ("by_id",)

    def __init__(self) -> None:
        self.by_id: dict[str, CallRecord] = {}

    def add(self, ctx: CallRecord) -> None:
        self.by_id[ctx.call_id] = ctx

    def add_all(self, calls: Iterable[CallRecord]) -> None:
        by_id = self.by_id
        for ctx in calls:
            by_id[ctx.call_id] = ctx

    def forget(self, calls: list) -> None:
        """Drop settled (or cancelled) calls: later frames for them are stale."""
        _loop.unlink_calls(calls, self.by_id)

    def state_name(self, call_id: str) -> str | None:
        ctx = self.by_id.get(call_id)
        return None if ctx is None else STATE_NAMES[ctx.state]

    def attempts(self, call_id: str) -> int | None:
        ctx = self.by_id.get(call_id)
        return None if ctx is None else ctx.attempt_count

    def __len__(self) -> int:
        return len(self.by_id)
