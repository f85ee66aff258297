"""Subfunction calls: the SubcallBinder validates requests, makes the child's
call record, binds children beside their parent and parks those that cannot bind
yet. Answering a child from the cache, ending it and cancelling a subtree are
call events: the CallLifecycle's (``add_subcall``, ``cancel_subtree``).

Rules and theory of operation:
- A subcall is requested by a running call (its parent) through the executor
  the parent is bound to. The parent must be RUNNING/WAITING and bound, the
  requesting executor must be that executor (a late request from an old
  attempt is refused as stale), the child's ancestry (the requesting call and
  its ancestors: a root's child has depth 1 and an ancestry of 1) must be shorter
  than ``max_subcall_depth``, so the deepest child has depth
  ``max_subcall_depth - 1``, and the child's cache key must differ
  from every ancestor's (a call that would wait on an identical call up its own
  chain can never finish).
- The child gets its own CallRecord with MaxAttempts = 1, the budget the
  parent granted, and the parent's batch; it is never counted in the task's
  TotalCount / outputs nor in the admission window, but it does occupy a
  context on the executor (local_inflight).
- It is always bound to the parent's executor, bypassing Filter -> Score. If
  the parent is not bound yet or its executor is unhealthy, the child is
  parked (``parked``, owned here) and retried when the parent is
  bound and on every executor snapshot update.
- A cached result (the task's CallCache) answers at once: CompleteCallFromCache
  then SubcallDone, no executor involved.
- Singleflight (the task's, as for roots): a child whose key is in flight in
  its task (a root RUNNING / WAITING, or another subcall not yet DONE) waits
  on that leader instead of binding (READY with ``leader`` set, listed under
  its parent, counted in cache_hits) and ends with the leader's result:
  CompleteCallFromCache then SubcallDone. A child whose key is not in flight
  leads it. A root backing off is not waited on (its task may stop dispatching
  before it runs again), and a join that would close a cycle is refused: when
  the leader already waits (through its subtree, and the leaders its subtree's
  waiters wait on) on one of the child's ancestors, the child runs on its own,
  as it would without singleflight. Roots do not wait on subcall leaders.
- A leader's result reaches its subcall waiters when the function gave one (an
  output; a final root failure; a subcall failure that is not retryable). A
  leader that ends without one (cancelled with its parent, its task drained, a
  retryable failure of a subcall's one attempt) or a root leader that goes back
  to READY (a retry, a failed bind) hands its subcall waiters over: a result
  cached meanwhile answers them, else the first whose parent still runs leads
  in its place and binds beside its own parent (no longer a cache hit), the
  others wait on it. A waiter whose parent ends is cancelled with that subtree
  and leaves its leader's list; a cancelled task takes all of its calls at once.
- When the parent ends or one of its attempts fails, its whole subtree is
  cancelled (``cancel_subtree``) without resuming it.
Subcall ids are ``f"{parent_call_id}/sub-{n}"`` with ``n`` from this binder's
counter, so they are unique across tasks.

The binder runs for every subcall: one source in Cython's pure-Python mode,
compiled with subcalls.pxd (the records' fields of parent and child read and
written as C struct members, the cache key built through cachekey's C entry
point, BindCall through the commands' C constructor) and interpreted under
BLOCKX_NO_EXTENSIONS=1, where the same names are those modules' Python
functions (bound below).
"""
from __future__ import annotations

import cython

from blockx.core.dispatch.types import (
    REJECT_CYCLE, REJECT_DEPTH_EXCEEDED, REJECT_EXECUTOR_MISMATCH,
    REJECT_INVALID_BUDGET, REJECT_PARENT_NOT_ACTIVE, SubcallRejected)

if not cython.compiled:
    # Compiled, subcalls.pxd cimports these: the records as types, the states as C
    # constants, cache_key_c, new_bind_call and set_state as C functions.
    from blockx._fast import load
    from blockx.core.dispatch.commands import new_bind_call
    from blockx.core.dispatch.records import (
        READY, RUNNING, WAITING, CallRecord, TaskCalls, checked_set_state as set_state)
    cache_key_c = load("cachekey").cache_key

__all__ = ["SubcallBinder"]


def _waits_on(leader: CallRecord, child: CallRecord):
    # Joining makes child's ancestors wait on leader: refused when leader already
    # waits on one of them (a cycle nothing would ever end). The edges are a
    # call's active children and, for a subcall that waits, its leader; the walk
    # covers what leader waits on, so it costs only when a subcall joins a flight.
    n: CallRecord
    ancestors: set = set()
    a = child.parent
    while a is not None:
        ancestors.add(a)
        n = a
        a = n.parent
    seen: set = set()
    stack: list = [leader]
    while stack:
        n = stack.pop()
        if n in ancestors:
            return True
        if n in seen:
            continue
        seen.add(n)
        if n.children:
            stack.extend(n.children.values())
        if n.leader is not None:
            stack.append(n.leader)
    return False


@cython.final
@cython.cclass
class SubcallBinder:
    if not cython.compiled:
        __slots__ = ("parked", "_seq", "_by_id", "_exec", "_max_depth")

    def __init__(self, calls, executors, max_depth):
        self.parked = {}            # subcalls waiting to bind, all tasks
        self._seq = 0
        self._by_id = calls.by_id   # the CallTable's by_id (never rebound)
        self._exec = executors
        self._max_depth = max_depth

    def new_child(self, parent_call_id, requesting_executor_id, request_id, function_id, digest,
                  args_json, granted_budget_ms, entry_selector="main"):
        """Check a subcall request; on success the child's context, registered in
        the call table and its parent's batch (READY, not yet bound: the
        lifecycle answers it from the cache or calls ``attach``)."""
        if type(function_id) is not str or not function_id:
            raise TypeError(f"subcall function_id must be a non-empty str, got {function_id!r}")
        if type(digest) is not str:
            raise TypeError(f"subcall digest must be a str, got {digest!r}")
        if type(args_json) is not bytes:
            raise TypeError(f"subcall args_json must be bytes (canonical JSON), "
                            f"got {type(args_json).__name__}")
        p = self._by_id.get(parent_call_id)
        if p is None:
            return self._not_active(parent_call_id)
        parent: CallRecord = p
        if (parent.state != RUNNING and parent.state != WAITING) or not parent.bound:
            return self._not_active(parent_call_id)
        if parent.executor_id != requesting_executor_id:
            return SubcallRejected(
                REJECT_EXECUTOR_MISMATCH,
                f"subcall request for {parent_call_id} came from executor {requesting_executor_id!r}"
                f" but the call runs on {parent.executor_id!r}", stale=True)
        if type(granted_budget_ms) is not int or granted_budget_ms < 0:
            return SubcallRejected(
                REJECT_INVALID_BUDGET,
                f"grantedBudgetMs must be an integer >= 0 (0 = unlimited), got {granted_budget_ms!r}")
        # The child's ancestry (the requesting call and its ancestors, as the
        # executor sends it) holds `depth` calls: len(ancestry) < maxSubcallDepth.
        depth: cython.int = parent.depth + 1
        if depth >= self._max_depth:
            return SubcallRejected(
                REJECT_DEPTH_EXCEEDED,
                f"subcall {function_id} would be at depth {depth}: its ancestry of {depth} calls must "
                f"be shorter than maxSubcallDepth {self._max_depth} (dispatcher.maxSubcallDepth "
                f"raises it)")
        key = cache_key_c(function_id, digest, args_json)
        a: CallRecord = parent
        while a is not None:
            if a.key == key:
                return SubcallRejected(
                    REJECT_CYCLE,
                    f"subcall {function_id} with these arguments is already running as ancestor "
                    f"{a.call_id}: the call would wait on itself")
            a = a.parent
        self._seq += 1
        child_id = f"{parent_call_id}/sub-{self._seq}"
        task = parent.task
        child: CallRecord = CallRecord(child_id, function_id, digest, entry_selector or "main", args_json, key,
                           -1, parent.batch_idx)
        child.task = task
        child.parent = parent
        child.depth = depth
        child.request_id = request_id
        child.budget_ms = granted_budget_ms
        self._by_id[child_id] = child
        task.batches[parent.batch_idx].calls.append(child)
        return child

    def attach(self, child: CallRecord, out: list):
        """A new child the cache did not answer: list it under its parent, then
        wait on the task's in-flight call with its key (singleflight: True, no
        command), or lead its key and bind beside the parent, or park."""
        parent: CallRecord = cython.cast(CallRecord, child.parent)
        children = parent.children
        if children is None:
            parent.children = {child.call_id: child}
        else:
            siblings: dict = children
            siblings[child.call_id] = child
        task: TaskCalls = cython.cast(TaskCalls, child.task)
        flights: dict = task.flights
        key = child.key
        lead = flights.get(key)
        if lead is None:
            flights[key] = child
        else:
            leader: CallRecord = lead
            # A root leads while it runs: one backing off may never run again
            # (its task stops dispatching), so it is not waited on.
            if ((leader.parent is not None or leader.state == RUNNING
                 or leader.state == WAITING) and not _waits_on(leader, child)):
                child.leader = leader
                if leader.waiters is None:
                    leader.waiters = [child]
                else:
                    waiters: list = leader.waiters
                    waiters.append(child)
                task.cache_hits += 1
                return True
        self._try_bind(child, out)
        return False

    def _not_active(self, parent_call_id):
        return SubcallRejected(
            REJECT_PARENT_NOT_ACTIVE,
            f"parent call {parent_call_id} is not running (finished, retried or unknown)",
            stale=True)

    def try_bind(self, child: CallRecord, out: list):
        """Bind child to its parent's executor, or park it."""
        return self._try_bind(child, out)

    def _try_bind(self, child, out):
        parent: CallRecord = child.parent
        rec = parent.exec
        pst: cython.int = parent.state
        if (child.state == READY and (pst == RUNNING or pst == WAITING) and parent.bound
                and rec is not None and rec.view.healthy):
            if child.parked:
                self.unpark(child)
            set_state(child, RUNNING)
            child.attempt_count += 1
            child.bound = False
            xrec: ExecutorRecord = rec
            xrec.bind(child)
            out.append(new_bind_call(child.call_id, child.executor_id, child.task.task_id, True,
                                     parent.call_id))
            return True
        self.park(child)
        return False

    def bind_children(self, parent: CallRecord, out: list):
        """The parent was just bound: its parked children may follow it."""
        child: CallRecord
        for c in list(parent.children.values() if parent.children else ()):
            child = c
            if child.parked:
                self._try_bind(child, out)

    def retry_parked(self, out: list):
        """Executor views changed: try every parked child again."""
        child: CallRecord
        if self.parked:
            for c in list(self.parked.values()):
                child = c
                if child.parked and child.state == READY:
                    self._try_bind(child, out)

    def park(self, child: CallRecord):
        if not child.parked:
            child.parked = True
            self.parked[child.call_id] = child

    def unpark(self, child: CallRecord):
        child.parked = False
        self.parked.pop(child.call_id, None)

    def parked_ids(self):
        """Ids of the subcalls parked, waiting to bind (introspection)."""
        return list(self.parked)
