"""Per-connection reservation table: which calls occupy a context on one executor.

Rules (the adapter's transport truth, the lifecycle of a reservation):
- Bind reserves a call id; one reservation per call id per connection. A retry of
  the same call can bind again only after the previous attempt's reservation was
  released, so a late terminal frame can never free a newer attempt's context.
- send_execute_call records the attempt it dispatched (dispatchedAttempts). A
  terminal frame releases the reservation only when its attemptSeq equals that
  attempt; a frame of an older attempt (the call was unbound and re-bound while
  the executor still ran the old one) leaves the newer reservation alone.
- unbind releases a live reservation; it is idempotent and leaves a draining one
  alone: a cancelled call keeps its context until the executor's terminal frame
  proves it stopped running.
- mark_draining on a call whose ExecuteCall never went out releases it at once:
  no terminal frame will ever come for it.
- A connection era ends with the connection: the table is simply dropped.

Plain dicts and a set: every operation is O(1) and runs on the event loop only.
The table is a hot path (several steps per call): compiled in
blockx/_fast/reservations.pyx, with its pure-Python twin reservations_py.py."""
from __future__ import annotations

from blockx._fast import load

_impl = load("reservations")
Reservations = _impl.Reservations
NOT_DISPATCHED = _impl.NOT_DISPATCHED
