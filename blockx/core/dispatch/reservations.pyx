# cython: language_level=3, boundscheck=False, wraparound=False
"""Reservations, compiled (twin: reservations_py.py, which states the rules).

Same code as the twin; what compiling buys: the adapter's per-call steps (reserve,
check and record the dispatch, release on the terminal frame, unbind) are C
method calls on a dict and a set instead of a Python frame each."""

cimport cython

NOT_DISPATCHED = -1  # reserved, ExecuteCall not sent yet
cdef object _NOT_DISPATCHED = NOT_DISPATCHED


@cython.final
cdef class Reservations:
    cdef dict _attempts     # call id -> dispatched attemptSeq (NOT_DISPATCHED until sent)
    cdef set _draining

    def __cinit__(self):
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
        cdef dict attempts = self._attempts
        if call_id in attempts or len(attempts) >= capacity:
            return False
        attempts[call_id] = _NOT_DISPATCHED
        return True

    def try_reserve_child(self, call_id, parent_call_id):
        """Reserve a subcall beside its parent, without a capacity check, when
        the call holds no reservation here and its parent holds a live one (the
        subcall bind's checks folded into one step); False leaves the table
        unchanged."""
        cdef dict attempts = self._attempts
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
