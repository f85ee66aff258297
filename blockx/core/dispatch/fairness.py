"""Which task gets the next admission, with or without instance fairness.

Theory of operation:
- Tasks are grouped by instance (the Task's ``instance_id``). Without instance
  fairness every task shares one group. Each group keeps a ring (deque) of
  tasks that may have work; the head is served and rotated to the back after
  each bind, so tasks of a group take turns call by call.
- A task is in its ring when it may be dispatchable (``in_ring``); the core
  wakes it when it gains ready calls or in-flight room. Tasks that turn out not
  to be dispatchable (no ready call, window full, stopped) are dropped from the
  ring lazily when they reach the head, so every step is O(1) amortised.
- With instance fairness the next group is the one with the fewest root calls
  in flight (max-min fairness: the least-served instance catches up), ties to
  the one served least recently, then the smaller instance id. A group keeps
  the turn for ``quantum`` consecutive binds (0/1 = re-select per call, capped
  at 1024): a larger quantum trades fairness granularity for fewer selections.
"""
from __future__ import annotations



# A fairness group's record; kept in the hot module dispatchloop (a cdef class
# compiled, a __slots__ class interpreted) because the per-call loop updates its
# in-flight count.
from blockx.core.dispatch import dispatchloop as _loop
InstanceState = _loop.InstanceState


# The scheduler runs once per admission, so it lives in the hot module with the
# per-call loop (compiled cdef class; twin: the Python class); the rules above are its.
TaskScheduler = _loop.TaskScheduler
