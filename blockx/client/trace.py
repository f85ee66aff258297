"""What ``WorkerClient.trace(task_id)`` returns: one task's trace, as the Worker recorded it.

``chrome_trace_json`` is the timeline in the Chrome trace-event format: write it
to a file (``write(path)``) and open it in https://ui.perfetto.dev or
chrome://tracing; ``events()`` parses it. The flags say how much of the task it
holds: ``complete`` (the task ended), ``sampled`` (the per-task event cap was
reached and about one call in ``sample_every`` is kept), ``truncated``
(task-level events were dropped at the cap), ``events_dropped``."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import json

from blockx.client.outcome import state_name
from blockx.worker.v1 import worker_pb2 as pb


@dataclass(slots=True)
class TaskTrace:
    task_id: str
    state: str
    complete: bool
    sampled: bool
    sample_every: int
    truncated: bool
    events_recorded: int
    events_dropped: int
    max_events: int
    chrome_trace_json: bytes
    worker: str = ""
    raw: pb.TaskTrace | None = field(default=None, repr=False)

    @classmethod
    def from_pb(cls, msg: pb.TaskTrace, worker: str = "") -> "TaskTrace":
        return cls(msg.task_id, state_name(msg.state), msg.complete, msg.sampled, msg.sample_every, msg.truncated,
                   msg.events_recorded, msg.events_dropped, msg.max_events, msg.chrome_trace_json, worker, msg)

    def chrome_trace(self) -> dict[str, Any]:
        """The parsed trace-event object ({"traceEvents": [...], "otherData": {...}})."""
        return json.loads(self.chrome_trace_json)

    def events(self) -> list[dict[str, Any]]:
        return self.chrome_trace()["traceEvents"]

    def write(self, path: str | os.PathLike) -> None:
        """Write the Chrome trace JSON to ``path`` (open it in Perfetto). A new file
        gets mode 0600: a trace names the task's functions and timings."""
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb") as fh:
            fh.write(self.chrome_trace_json)
