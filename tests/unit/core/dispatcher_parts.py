"""The DispatcherCore's parts built standalone, for the tests of each part."""
from __future__ import annotations

from blockx._fast import load
from blockx.core.dispatcher import wire_dispatch_loop
from blockx.core.dispatcher_calls import RUNNING, CallContext, CallTable
from blockx.core.dispatcher_config import DispatcherConfig
from blockx.core.dispatcher_fairness import TaskScheduler
from blockx.core.dispatcher_select import ExecutorTable
from blockx.core.dispatcher_subcalls import SubcallBinder
from blockx.core.dispatcher_tasks import TaskTable
from blockx.core.dispatcher_types import ExecutorSnapshot


class Parts:
    def __init__(self, config: DispatcherConfig | None = None, max_output: int = 0,
                 executors=("e1",), binder=SubcallBinder) -> None:
        cfg = config or DispatcherConfig()
        self.cache_key = load("cachekey").cache_key
        self.calls = CallTable()
        self.exec = ExecutorTable(load("scoring"), cfg, lambda: 0.0)
        self.sched = TaskScheduler(False, 1, cfg.task_max_inflight_calls)
        self.tasks = TaskTable(self.calls, self.exec, self.sched, load("readyqueue").ReadyQueue,
                               max_output)
        self.subcalls = binder(self.calls, self.tasks, self.exec, self.cache_key,
                                      cfg.max_subcall_depth)
        self.tasks.subcalls = self.subcalls
        self.loop = wire_dispatch_loop(self.calls, self.tasks, self.sched, self.exec, self.subcalls,
                                       cfg.call_deadline_ms, max_output)
        self.exec.update([ExecutorSnapshot(e, True, 0, 8) for e in executors])

    def task(self, task_id: str, n: int, fast_fail: bool = True):
        """A one-shot task with n roots f(0) .. f(n-1), committed."""
        ctxs = [CallContext(f"{task_id}/{i}", "f", "d", "main", b"[%d]" % i,
                            self.cache_key("f", "d", b"[%d]" % i), i, 0) for i in range(n)]
        task = self.tasks.new(task_id, fast_fail, (3, 10, 0), "", False)
        self.tasks.register(task, ctxs, 0)
        return task, ctxs

    def run(self, ctx: CallContext, executor_id: str = "e1") -> None:
        """What DispatcherCore.dispatch + handle_executor_bound do to a root."""
        ctx.task.ready.pop()
        ctx.state = RUNNING
        ctx.attempt_count += 1
        ctx.bound = True
        self.exec.bind(self.exec.records[executor_id], ctx)
        ctx.task.inflight += 1
        ctx.task.instance.inflight += 1
