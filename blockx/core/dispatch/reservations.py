"""Per-connection reservation table: which calls occupy a context on one executor.

Rules (the adapter's transport truth about reservations):
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
The table is a hot path (several steps per call): one source in Cython's
pure-Python mode, compiled with reservations.pxd (the adapter's per-call steps
are then C method calls on a dict and a set instead of a Python frame each) and
interpreted under BLOCKX_NO_EXTENSIONS=1."""


import cython

NOT_DISPATCHED = -1  # reserved, ExecuteCall not sent yet
_NOT_DISPATCHED = cython.declare(object, NOT_DISPATCHED)   # a C global when compiled


@cython.final
@cython.cclass
class Reservations:
    if not cython.compiled:
        __slots__ = ("_attempts", "_draining")

    def __init__(self):
        # call id -> dispatched attemptSeq (NOT_DISPATCHED until sent)
        self._attempts = {}
        self._draining = set()

    def __len__(self):
        return len(self._attempts)

    def __contains__(self, call_id):
        return call_id in self._attempts

    @property
    def draining_count(self):
        return len(self._draining)

    def try_reserve(self, call_id, capacity):
        """Reserve when the call holds no reservation here and fewer than
        ``capacity`` contexts are reserved (the bind's checks folded into one
        step for the per-call path); False leaves the table unchanged."""
        attempts: dict = self._attempts
        if call_id in attempts or len(attempts) >= capacity:
            return False
        attempts[call_id] = _NOT_DISPATCHED
        return True

    def try_reserve_child(self, call_id, parent_call_id):
        """Reserve a subcall beside its parent, without a capacity check, when
        the call holds no reservation here and its parent holds a live one (the
        subcall bind's checks folded into one step); False leaves the table
        unchanged."""
        attempts: dict = self._attempts
        if call_id in attempts or parent_call_id not in attempts or parent_call_id in self._draining:
            return False
        attempts[call_id] = _NOT_DISPATCHED
        return True

    def is_draining(self, call_id):
        return call_id in self._draining

    def attempt_of(self, call_id):
        """The dispatched attemptSeq, NOT_DISPATCHED, or None when not reserved."""
        return self._attempts.get(call_id)

    def record_dispatch(self, call_id, attempt_seq):
        self._attempts[call_id] = attempt_seq

    def release_on_terminal(self, call_id, attempt_seq):
        """A CallCompleted / CallFailed arrived; True when it freed the reservation."""
        dispatched = self._attempts.get(call_id)
        if dispatched is None or dispatched != attempt_seq:
            # No reservation, or an older attempt's frame (the call was unbound
            # and bound again; the new attempt is not dispatched or has another
            # attemptSeq): the newer reservation stays.
            return False
        del self._attempts[call_id]
        self._draining.discard(call_id)
        return True

    def unbind(self, call_id):
        if call_id in self._draining or call_id not in self._attempts:
            return False
        del self._attempts[call_id]
        return True

    def mark_draining(self, call_id):
        """True when the reservation now drains; False when there was none or it
        was released at once because its ExecuteCall never went out."""
        dispatched = self._attempts.get(call_id)
        if dispatched is None:
            return False
        if dispatched == _NOT_DISPATCHED:
            del self._attempts[call_id]
            self._draining.discard(call_id)
            return False
        self._draining.add(call_id)
        return True

    def release(self, call_id):
        """Unconditional release (a send that never reached the executor)."""
        self._attempts.pop(call_id, None)
        self._draining.discard(call_id)

    def clear(self):
        self._attempts.clear()
        self._draining.clear()
