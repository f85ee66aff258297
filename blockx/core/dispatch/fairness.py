"""TaskScheduler: which task gets the next admission, with or without instance
fairness.

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

The scheduler runs once per admission: one source in Cython's pure-Python mode,
compiled with fairness.pxd (the dispatch loop calls next_task / served / wake
in C) and interpreted under BLOCKX_NO_EXTENSIONS=1. Its groups' records
(InstanceState) and the tasks (TaskCalls) are records' (the per-call loop
updates their counts).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import cython

if TYPE_CHECKING:
    # Compiled, fairness.pxd cimports these (C types of the annotations).
    from blockx.core.dispatch.records import InstanceState, TaskCalls

if not cython.compiled:
    # Compiled, fairness.pxd cimports these: the record as a type, ready_len in C.
    from blockx.core.dispatch.records import InstanceState

    def ready_len(q):
        return len(q)

__all__ = ["TaskScheduler"]


@cython.final
@cython.cclass
class TaskScheduler:
    if not cython.compiled:
        __slots__ = ("_fair", "_quantum", "_window", "_instances", "_single", "_current", "_left",
                     "_seq")

    def __init__(self, fair, quantum: cython.Py_ssize_t, window: cython.Py_ssize_t):
        self._fair = fair
        self._quantum = quantum
        self._window = window
        self._instances: dict[str, InstanceState] = {}
        self._single = InstanceState("")
        self._current = None
        self._left = 0
        self._seq = 0

    def attach(self, instance_id):
        """The group a new task joins."""
        inst: InstanceState
        if not self._fair:
            inst = self._single
        else:
            inst = self._instances.get(instance_id)
            if inst is None:
                inst = self._instances[instance_id] = InstanceState(instance_id)
        inst.tasks += 1
        return inst

    def detach(self, task: TaskCalls):
        inst: InstanceState = task.instance
        if task.in_ring:
            task.in_ring = False
            try:
                inst.ring.remove(task)
            except ValueError:
                pass
        inst.tasks -= 1
        if self._fair and inst.tasks <= 0:
            self._instances.pop(inst.instance_id, None)
            if self._current is inst:
                self._current = None

    def wake(self, task):
        if not task.in_ring and not task.removed:
            task.in_ring = True
            task.instance.ring.append(task)
        return None

    def next_task(self):
        """The task to admit from next, or None when no task can take a call."""
        window: cython.Py_ssize_t = self._window
        t: TaskCalls
        inst: InstanceState
        if not self._fair:
            ring = self._single.ring
            while ring:
                t = ring[0]
                if (ready_len(t.ready) or t.queued) and not t.stop_dispatching and t.inflight < window:
                    return t
                ring.popleft()
                t.in_ring = False
            return None
        while True:
            inst = self._current
            if inst is None or self._left <= 0 or not inst.ring:
                inst = self._pick()
                if inst is None:
                    return None
                self._current = inst
                self._left = self._quantum
            ring = inst.ring
            while ring:
                t = ring[0]
                if (ready_len(t.ready) or t.queued) and not t.stop_dispatching and t.inflight < window:
                    return t
                ring.popleft()
                t.in_ring = False

    def _pick(self):
        best: InstanceState = None
        inst: InstanceState
        for i in self._instances.values():
            inst = i
            if not inst.ring:
                continue
            if (best is None or inst.inflight < best.inflight
                    or (inst.inflight == best.inflight
                        and (inst.last_served < best.last_served
                             or (inst.last_served == best.last_served
                                 and inst.instance_id < best.instance_id)))):
                best = inst
        return best

    def served(self, task):
        """task (the ring head) just got a bind: rotate it and spend quantum."""
        inst: InstanceState = task.instance
        self._seq += 1
        inst.last_served = self._seq
        ring = inst.ring
        if len(ring) > 1 and ring[0] is task:
            ring.rotate(-1)
        self._left -= 1
        return None

    def unserved(self):
        """No executor could take the picked instance's call. A turn that has
        not served a bind yet is void: the next round re-selects by the
        then-current in-flight counts. A turn already under way continues."""
        if self._left >= self._quantum:
            self._current = None

    def instance_inflight(self):
        """instance_id -> root calls in flight (fair mode; for tests/metrics)."""
        if not self._fair:
            return {"": self._single.inflight}
        return {i.instance_id: i.inflight for i in self._instances.values()}

