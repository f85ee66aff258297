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
- Subcalls never join a singleflight nor lead one (they only read the cache):
  a subcall waiting on an unrelated root that itself waits on a subcall could
  deadlock across calls, bounded only by budgets.
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
