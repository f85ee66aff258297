"""Read-only introspection of the DispatcherCore for tests, metrics and
debugging. Nothing here is on a hot path or mutates state; views returned are
the live objects (read them, do not change them)."""
from __future__ import annotations

from typing import Any

from blockx.core.dispatcher_state import STATE_NAMES


class InspectMixin:
    _calls: dict[str, Any]
    _tasks: dict[str, Any]
    _pending_bind: dict[str, Any]

    def call_state(self, call_id: str) -> str | None:
        ctx = self._calls.get(call_id)
        return None if ctx is None else STATE_NAMES[ctx.state]

    def call_attempts(self, call_id: str) -> int | None:
        ctx = self._calls.get(call_id)
        return None if ctx is None else ctx.attempt_count

    def has_task(self, task_id: str) -> bool:
        return task_id in self._tasks

    def task_inflight(self, task_id: str) -> int:
        t = self._tasks.get(task_id)
        return 0 if t is None else t.inflight

    def task_ready(self, task_id: str) -> int:
        t = self._tasks.get(task_id)
        return 0 if t is None else len(t.ready)

    def executor_view(self, executor_id: str) -> Any:
        rec = self._exec.records.get(executor_id)
        return None if rec is None else rec.view

    def executor_calls(self, executor_id: str) -> list[str]:
        rec = self._exec.records.get(executor_id)
        return [] if rec is None else list(rec.calls)

    def filter_reasons(self, now: int) -> dict[str, str]:
        return self._exec.filter_reasons(now)

    def instance_inflight(self) -> dict[str, int]:
        return self._sched.instance_inflight()

    def pending_bind_subcalls(self) -> list[str]:
        return list(self._pending_bind)

    @property
    def call_count(self) -> int:
        """Call contexts held (roots and subcalls not yet settled)."""
        return len(self._calls)

    @property
    def task_count(self) -> int:
        return len(self._tasks)
