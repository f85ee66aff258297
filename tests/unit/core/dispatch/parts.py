"""The DispatcherCore's parts built standalone, for the tests of each part."""
from __future__ import annotations

from blockx._fast import load
from blockx.core.dispatch.records import RUNNING, CallRecord
from blockx.core.dispatch.calls import CallTable
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.executors import ExecutorTable
from blockx.core.dispatch.fairness import TaskScheduler
from blockx.core.dispatch.lifecycle import CallLifecycle
from blockx.core.dispatch.retry import RetryScheduler
from blockx.core.dispatch.subcalls import SubcallBinder
from blockx.core.dispatch.tasks import TaskCallTable
from blockx.core.dispatch.types import ExecutorSnapshot


class Parts:
    """The parts in the DispatcherCore's order, each given only what was built before it."""

    def __init__(self, config: DispatcherConfig | None = None, max_output: int = 0,
                 executors=("e1",)) -> None:
        cfg = config or DispatcherConfig()
        self.cache_key = load("cachekey").cache_key
        self.calls = CallTable()
        self.sched = TaskScheduler(False, 1, cfg.task_max_inflight_calls)
        self.exec = ExecutorTable(load("scoring"), cfg, lambda: 0.0)
        self.tasks = TaskCallTable(self.calls, self.exec, self.sched, load("readyqueue").ReadyQueue,
                               max_output)
        self.subcalls = SubcallBinder(self.calls, self.exec, cfg.max_subcall_depth)
        self.retry = RetryScheduler(lambda: 0.0, cfg.max_backoff_ms)
        self.lifecycle = CallLifecycle(self.calls.by_id, self.tasks, self.sched, self.exec,
                                       self.subcalls, self.retry, cfg.call_deadline_ms, max_output)
        self.exec.update([ExecutorSnapshot(e, True, 0, 8) for e in executors])

    def task(self, task_id: str, n: int, fast_fail: bool = True):
        """A one-shot task with n roots f(0) .. f(n-1), committed."""
        ctxs = [CallRecord(f"{task_id}/{i}", "f", "d", "main", b"[%d]" % i,
                            self.cache_key("f", "d", b"[%d]" % i), i, 0) for i in range(n)]
        task = self.tasks.new(task_id, fast_fail, (3, 10, 0), "", False)
        self.tasks.register(task, ctxs, 0)
        return task, ctxs

    def run(self, ctx: CallRecord, executor_id: str = "e1") -> None:
        """What CallLifecycle.dispatch + handle_executor_bound do to a root."""
        ctx.task.ready.pop()
        ctx.state = RUNNING
        ctx.attempt_count += 1
        ctx.bound = True
        self.exec.records[executor_id].bind(ctx)
        ctx.task.inflight += 1
        ctx.task.instance.inflight += 1
