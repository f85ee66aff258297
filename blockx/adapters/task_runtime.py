"""The adapter-side runtime record of one activated task.

It holds what only the adapter can hold (the pinned function view, the IO
scope, the asyncio task running the phases, the future the Calls phase waits
on, the streaming producer) and none of the slot / phase truth, which stays in
WorkerCore and DispatcherCore."""
from __future__ import annotations

import asyncio
from typing import Any


class TaskRuntime:
    __slots__ = ("task_id", "instance_id", "deadline_ms", "view", "io_scope", "runner",
                 "calls_done", "on_calls_done", "gate", "calls_started", "producer", "credits", "stream",
                 "sink", "ended")

    def __init__(self, task_id: str, instance_id: str, deadline_ms: int) -> None:
        self.task_id = task_id
        self.instance_id = instance_id
        self.deadline_ms = deadline_ms
        self.view: Any = None                 # plugins.function_code.FunctionView (pinned epoch)
        self.io_scope: Any = None             # plugins.io TaskIOScope
        self.runner: asyncio.Task | None = None
        self.calls_done: asyncio.Future | None = None   # resolved with the ConvergeTaskCalls command
        self.on_calls_done: Any = None        # (rt, ConvergeTaskCalls) -> None while a Calls phase runs
        self.gate: Any = None                 # the admission gate the running Calls phase holds
        self.calls_started = 0.0              # perf_counter at the Calls phase's start
        self.producer: asyncio.Task | None = None       # streaming build producer
        self.credits: asyncio.Semaphore | None = None   # streaming batch credit window
        self.stream: Any = None
        self.sink: Any = None                 # writer_stream.StreamedWrite: the writer consuming settled batches
        self.ended = False
