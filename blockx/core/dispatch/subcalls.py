"""Subfunction calls: the SubcallBinder validates requests, makes the child's
context, binds children beside their parent and parks those that cannot bind
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
"""
from __future__ import annotations

# The binder runs for every subcall: one source (subcallbind.py, Cython's pure-Python
# mode), compiled by the build and interpreted under BLOCKX_NO_EXTENSIONS=1.
from blockx.core.dispatch.subcallbind import SubcallBinder

__all__ = ["SubcallBinder"]
