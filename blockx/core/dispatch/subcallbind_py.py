"""SubcallBinder, pure-Python twin of subcallbind.pyx (the rules and theory of
operation are in blockx/core/dispatch/subcalls.py, which loads one of the two)."""
from __future__ import annotations

from typing import Any

from blockx._fast import load
from blockx.core.dispatch.calls import READY, RUNNING, WAITING, CallRecord, CallTable
from blockx.core.dispatch.commands import BindCall
from blockx.core.dispatch.types import (
    REJECT_CYCLE, REJECT_DEPTH_EXCEEDED, REJECT_EXECUTOR_MISMATCH,
    REJECT_INVALID_BUDGET, REJECT_PARENT_NOT_ACTIVE, SubcallRejected)


class SubcallBinder:
    __slots__ = ("parked", "_seq", "_calls", "_exec", "_cache_key", "_max_depth")

    def __init__(self, calls: CallTable, executors: Any, max_depth: int) -> None:
        self.parked: dict[str, CallRecord] = {}   # subcalls waiting to bind, all tasks
        self._seq = 0
        self._calls = calls
        self._exec = executors
        self._cache_key = load("cachekey").cache_key
        self._max_depth = max_depth

    def new_child(self, parent_call_id: str, requesting_executor_id: str, request_id: str,
                  function_id: str, digest: str, args_json: bytes, granted_budget_ms: int,
                  entry_selector: str = "main") -> CallRecord | SubcallRejected:
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
        parent = self._calls.by_id.get(parent_call_id)
        if parent is None or (parent.state != RUNNING and parent.state != WAITING) or not parent.bound:
            return SubcallRejected(
                REJECT_PARENT_NOT_ACTIVE,
                f"parent call {parent_call_id} is not running (finished, retried or unknown)",
                stale=True)
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
        depth = parent.depth + 1
        limit = self._max_depth
        if depth >= limit:
            return SubcallRejected(
                REJECT_DEPTH_EXCEEDED,
                f"subcall {function_id} would be at depth {depth}: its ancestry of {depth} calls must "
                f"be shorter than maxSubcallDepth {limit} (dispatcher.maxSubcallDepth raises it)")
        key = self._cache_key(function_id, digest, args_json)
        a: CallRecord | None = parent
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
        child = CallRecord(child_id, function_id, digest, entry_selector or "main", args_json, key,
                            -1, parent.batch_idx)
        child.task = task
        child.parent = parent
        child.depth = depth
        child.request_id = request_id
        child.budget_ms = granted_budget_ms
        self._calls.add(child)
        task.batches[parent.batch_idx].calls.append(child)
        return child

    def attach(self, child: CallRecord, out: list) -> None:
        """A new child the cache did not answer: list it under its parent and
        bind it beside the parent, or park it."""
        parent = child.parent
        children = parent.children
        if children is None:
            parent.children = {child.call_id: child}
        else:
            children[child.call_id] = child
        self.try_bind(child, out)

    def try_bind(self, child: CallRecord, out: list) -> bool:
        """Bind child to its parent's executor, or park it."""
        parent = child.parent
        rec = parent.exec
        pst = parent.state
        if (child.state == READY and (pst == RUNNING or pst == WAITING) and parent.bound
                and rec is not None and rec.view.healthy):
            if child.parked:
                self.unpark(child)
            child.state = RUNNING
            child.attempt_count += 1
            child.bound = False
            self._exec.bind(rec, child)
            out.append(BindCall(child.call_id, child.executor_id, child.task.task_id, True,
                                parent.call_id))
            return True
        self.park(child)
        return False

    def bind_children(self, parent: CallRecord, out: list) -> None:
        """The parent was just bound: its parked children may follow it."""
        for child in list(parent.children.values()):
            if child.parked:
                self.try_bind(child, out)

    def retry_parked(self, out: list) -> None:
        """Executor views changed: try every parked child again."""
        if self.parked:
            for child in list(self.parked.values()):
                if child.parked and child.state == READY:
                    self.try_bind(child, out)

    def park(self, child: CallRecord) -> None:
        if not child.parked:
            child.parked = True
            self.parked[child.call_id] = child

    def unpark(self, child: CallRecord) -> None:
        child.parked = False
        self.parked.pop(child.call_id, None)

    def parked_ids(self):
        """Ids of the subcalls parked, waiting to bind (introspection)."""
        return list(self.parked)
