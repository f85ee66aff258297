"""Subfunction calls (spec AddSubcallJSON / TryBindSubcallToParent).

Rules:
- A subcall is requested by a running call (its parent) through the executor
  the parent is bound to. Requests are validated here: the parent must be
  RUNNING/WAITING and bound, the requesting executor must be that executor
  (a late request from an old attempt is refused), the child's depth (a root's
  child has depth 1) must not exceed ``max_subcall_depth``, and the child's
  cache key must differ from every ancestor's (a call that would wait on an
  identical call up its own chain can never finish).
- The child gets its own CallContext with MaxAttempts = 1, the budget the
  parent granted, and the parent's batch; it is never counted in the task's
  TotalCount / outputs nor in the admission window, but it does occupy a
  context on the executor (local_inflight).
- It is always bound to the parent's executor, bypassing Filter -> Score. If
  the parent is not bound or its executor is unhealthy, the child is parked in
  PendingBindSubcalls and retried when the parent is bound and on every
  executor snapshot update.
- A cached result (the task's CallCache) answers at once: CompleteCallFromCache
  then SubcallDone, no executor involved.
- The result travels back as SubcallDone (the adapter's ResumeCall to the
  parent); when the parent ends or one of its attempts fails, the whole subtree
  is cancelled (``DispatcherCore._cancel_subtree``).
"""
from __future__ import annotations

from typing import Any

from blockx.core.dispatcher_commands import BindCall, CompleteCallFromCache
from blockx.core.dispatcher_state import READY, RUNNING, WAITING, CallContext
from blockx.core.dispatcher_types import (
    REJECT_CYCLE, REJECT_DEPTH_EXCEEDED, REJECT_EXECUTOR_MISMATCH, REJECT_INVALID_BUDGET,
    REJECT_PARENT_NOT_ACTIVE, SubcallRejected)


class SubcallMixin:
    _calls: dict[str, CallContext]
    _pending_bind: dict[str, CallContext]
    _subcall_seq: int
    config: Any

    def add_subcall(self, parent_call_id: str, requesting_executor_id: str, request_id: str,
                    function_id: str, digest: str, args_json: bytes, granted_budget_ms: int,
                    now: int, entry_selector: str = "main") -> tuple[str | SubcallRejected, list]:
        """Register a subcall of ``parent_call_id``.

        Returns ``(child_call_id, commands)``, or ``(SubcallRejected, [])`` when
        the request is refused. ``args_json`` must be canonical
        (cachekey.canonical_args_json) so the cache and cycle checks see equal
        arguments as equal bytes."""
        if type(function_id) is not str or not function_id:
            raise TypeError(f"subcall function_id must be a non-empty str, got {function_id!r}")
        if type(digest) is not str:
            raise TypeError(f"subcall digest must be a str, got {digest!r}")
        if type(args_json) is not bytes:
            raise TypeError(f"subcall args_json must be bytes (canonical JSON), "
                            f"got {type(args_json).__name__}")
        parent = self._calls.get(parent_call_id)
        if parent is None or (parent.state != RUNNING and parent.state != WAITING) or not parent.bound:
            return SubcallRejected(
                REJECT_PARENT_NOT_ACTIVE,
                f"parent call {parent_call_id} is not running (finished, retried or unknown)",
                stale=True), []
        if parent.executor_id != requesting_executor_id:
            return SubcallRejected(
                REJECT_EXECUTOR_MISMATCH,
                f"subcall request for {parent_call_id} came from executor {requesting_executor_id!r}"
                f" but the call runs on {parent.executor_id!r}", stale=True), []
        if type(granted_budget_ms) is not int or granted_budget_ms < 0:
            return SubcallRejected(
                REJECT_INVALID_BUDGET,
                f"grantedBudgetMs must be an integer >= 0 (0 = unlimited), got {granted_budget_ms!r}"
            ), []
        depth = parent.depth + 1
        limit = self.config.max_subcall_depth
        if depth > limit:
            return SubcallRejected(
                REJECT_DEPTH_EXCEEDED,
                f"subcall {function_id} would be at depth {depth}, over maxSubcallDepth {limit}"), []
        key = self._cache_key(function_id, digest, args_json)  # type: ignore[attr-defined]
        a: CallContext | None = parent
        while a is not None:
            if a.key == key:
                return SubcallRejected(
                    REJECT_CYCLE,
                    f"subcall {function_id} with these arguments is already running as ancestor "
                    f"{a.call_id}: the call would wait on itself"), []
            a = a.parent
        self._subcall_seq += 1
        child_id = f"{parent_call_id}/sub-{self._subcall_seq}"
        task = parent.task
        child = CallContext(child_id, function_id, digest, entry_selector or "main", args_json, key,
                            -1, parent.batch_idx)
        child.task = task
        child.parent = parent
        child.depth = depth
        child.request_id = request_id
        child.budget_ms = granted_budget_ms
        self._calls[child_id] = child
        task.batches[parent.batch_idx].calls.append(child)
        out: list = []
        cached = task.cache.get(key)
        if cached is not None:
            task.cache_hits += 1
            out.append(CompleteCallFromCache(child_id, task.task_id, True, parent_call_id))
            self._set_terminal(child, True, cached, "", "", False, 0, True, out)  # type: ignore[attr-defined]
            return child_id, out
        children = parent.children
        if children is None:
            parent.children = {child_id: child}
        else:
            children[child_id] = child
        self._try_bind_subcall(child, out)
        return child_id, out

    def _try_bind_subcall(self, child: CallContext, out: list) -> bool:
        """Bind child to its parent's executor, or park it."""
        parent = child.parent
        rec = parent.exec
        pst = parent.state
        if (child.state == READY and (pst == RUNNING or pst == WAITING) and parent.bound
                and rec is not None and rec.view.healthy):
            if child.parked:
                child.parked = False
                self._pending_bind.pop(child.call_id, None)
            child.state = RUNNING
            child.attempt_count += 1
            child.bound = False
            self._exec.bind(rec, child)  # type: ignore[attr-defined]
            out.append(BindCall(child.call_id, child.executor_id, child.task.task_id, True,
                                parent.call_id))
            return True
        if not child.parked:
            child.parked = True
            self._pending_bind[child.call_id] = child
        return False

    def _retry_parked(self, out: list) -> None:
        for child in list(self._pending_bind.values()):
            if child.parked and child.state == READY:
                self._try_bind_subcall(child, out)
