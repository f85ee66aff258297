"""The adapter-side runtime record of one activated task.

It holds what only the adapter can hold (the pinned function view, the IO
scope, the asyncio task running the phases, the future the Calls phase waits
on, the streaming producer) and none of the slot / phase truth, which stays in
WorkerCore and DispatcherCore. TaskPhases sets these fields while the task's
phases run and takes them down when the task ends (TaskPhases.end)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from blockx.adapters.admission import PhaseGate
    from blockx.core.dispatch.commands import ConvergeTaskCalls
    from blockx.plugins.builder_api import AsyncCallStream, CallStream
    from blockx.plugins.function_code.view import FunctionView
    from blockx.plugins.io.scope import TaskIOScope


class TaskRuntime:
    __slots__ = ("task_id", "instance_id", "deadline_ms", "view", "io_scope", "runner",
                 "calls_done", "on_calls_done", "gate", "calls_started", "producer", "credits", "stream",
                 "sink", "ended", "failure", "child_stacks")

    def __init__(self, task_id: str, instance_id: str, deadline_ms: int) -> None:
        self.task_id = task_id
        self.instance_id = instance_id
        self.deadline_ms = deadline_ms
        self.view: FunctionView | None = None           # the pinned code epoch's view
        self.io_scope: TaskIOScope | None = None
        self.runner: asyncio.Task | None = None          # the phases, once one of them had to wait
        self.calls_done: asyncio.Future | None = None   # resolved with the ConvergeTaskCalls command
        # while a Calls phase runs: called with (this runtime, its ConvergeTaskCalls)
        self.on_calls_done: Callable[[TaskRuntime, ConvergeTaskCalls], None] | None = None
        self.gate: PhaseGate | None = None               # the admission gate the running Calls phase holds
        self.calls_started = 0.0                         # perf_counter at the Calls phase's start
        self.producer: asyncio.Task | None = None       # streaming build producer
        self.credits: asyncio.Semaphore | None = None   # streaming batch credit window
        self.stream: CallStream | AsyncCallStream | None = None   # the builder's stream, streaming build
        self.sink: Any = None                 # writer_stream.StreamedWrite: the writer consuming settled batches
        self.ended = False
        # blockx.adapters.call_failures: the traceback of the root call that failed
        # first, and failed subcalls' tracebacks on their way to their parents.
        self.failure: Any = None                         # call_failures.FailureDetail
        self.child_stacks: dict[str, str] | None = None
