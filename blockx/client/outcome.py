"""What the client returns: a task's outcome, a watched task's update, a slot lease.

Outputs are decoded from their JSON bytes; ``raw`` keeps the protobuf message for
callers (like the CLI) that need every field as the Worker sent it. A result
comes in pages (blockx.client.pages): ``outputs`` holds the ones the message
carried, ``outputs_total`` how many the task has, and ``outputs_truncated`` says
the rest are still on the Worker (``WorkerClient.complete`` or ``all_outputs=True``
fetch them). A failed task's outcome says where it failed: ``failure_call_id``,
``failure_traceback`` (the user's code, subcalls' tracebacks chained in) and
``failure_locals`` (name -> repr of the innermost user frame's locals); its
``result()`` raises ``TaskFailed`` whose str() shows them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import json

from blockx.worker.v1 import worker_pb2 as pb

TERMINAL_STATES = ("SUCCEEDED", "FAILED")


def state_name(value: int) -> str:
    """``pb.TASK_STATE_SUCCEEDED`` -> ``"SUCCEEDED"``."""
    try:
        return pb.TaskState.Name(value).removeprefix("TASK_STATE_")
    except ValueError:
        return str(value)


def decode_output(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def statistic_dict(s: pb.TaskStatistic) -> dict[str, int]:
    return {"accepted_at_ms": s.accepted_at_ms, "finished_at_ms": s.finished_at_ms,
            "builder_ms": s.builder_ms, "calls_ms": s.calls_ms, "plugin_ms": s.plugin_ms,
            "call_count": s.call_count, "calls_failed": s.calls_failed,
            "call_retries": s.call_retries, "cache_hits": s.cache_hits}


@dataclass(slots=True)
class TaskOutcome:
    """A task as the Worker last reported it; final when ``state`` is terminal."""
    task_id: str
    state: str
    outputs: list = field(default_factory=list)
    failure_code: str = ""
    failure_message: str = ""
    retryable: bool = False
    statistic: dict = field(default_factory=dict)
    worker: str = ""
    attempts: int = 1
    plugin_results: list = field(default_factory=list)
    raw: Any = field(default=None, repr=False)     # the pb message this outcome was read from
    outputs_total: int = 0                         # the task's outputs, of which ``outputs`` holds a page
    outputs_truncated: bool = False                # more outputs are on the Worker than ``outputs`` holds
    outputs_written: int = 0                       # outputs a streaming writer consumed as their batches settled
    failure_call_id: str = ""                      # the call that failed the task (CALL_FAILED)
    failure_traceback: str = ""                    # its traceback in the user's code ("" if none ran)
    failure_locals: dict = field(default_factory=dict)   # its innermost user frame's locals, as repr strings

    def result(self) -> list:
        """The outputs when the task SUCCEEDED (those this outcome holds: ask with
        ``all_outputs=True`` for every page); raises ``TaskFailed`` when it FAILED,
        with the remote traceback in its message."""
        if self.state == "SUCCEEDED":
            return self.outputs
        if self.state == "FAILED":
            from blockx.client.errors import TaskFailed

            raise TaskFailed(self)
        raise RuntimeError(f"task {self.task_id} is {self.state}, not finished: wait for it "
                           "(submit() waits unless wait=False; or watch() it)")

    @property
    def ok(self) -> bool:
        """Succeeded, with its whole result (RESULT_TOO_LARGE: the task succeeded but
        the Worker left its plugin details out of the pages, over its page budget;
        ``outputs_truncated`` alone is not a failure: the other pages are on the Worker)."""
        return self.state == "SUCCEEDED" and self.failure_code != "RESULT_TOO_LARGE"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_pb(cls, task_id: str, state: int, result: pb.TaskResult | None, worker: str,
                raw: Any = None) -> "TaskOutcome":
        if result is None:
            return cls(task_id, state_name(state), worker=worker, raw=raw)
        outputs = [decode_output(o) for o in result.outputs]
        return cls(task_id, state_name(state), outputs, result.failure_code,
                   result.failure_message, result.retryable, statistic_dict(result.statistic), worker,
                   plugin_results=[(p.plugin, p.ok, p.message) for p in result.plugin_results], raw=raw,
                   outputs_total=max(result.outputs_total, len(outputs)),
                   outputs_truncated=result.outputs_truncated, outputs_written=result.outputs_written,
                   failure_call_id=result.failure_call_id, failure_traceback=result.failure_traceback,
                   failure_locals={v.name: v.value for v in result.failure_locals})


@dataclass(slots=True)
class TaskUpdate:
    """One update of a watched task: a new state, or (same state) new progress;
    ``outcome`` is set on the terminal one, ``progress`` whenever the Worker sent
    the task's call counts (from its Calls phase on, and on the terminal update)."""
    task_id: str
    state: str
    is_terminal: bool
    outcome: TaskOutcome | None
    raw: Any = field(default=None, repr=False)     # the pb.TaskUpdate
    progress: "TaskProgress | None" = None

    @classmethod
    def from_pb(cls, upd: pb.TaskUpdate, worker: str) -> "TaskUpdate":
        outcome = None
        if upd.is_terminal:
            outcome = TaskOutcome.from_pb(upd.task_id, upd.state,
                                          upd.result if upd.HasField("result") else None, worker, upd)
        progress = TaskProgress.from_pb(upd.progress) if upd.HasField("progress") else None
        return cls(upd.task_id, state_name(upd.state), upd.is_terminal, outcome, upd, progress)


@dataclass(slots=True, frozen=True)
class TaskProgress:
    """Root calls of a task: ``total`` is 0 while a streaming builder still produces;
    ``done`` counts finished roots (succeeded, failed or cancelled), ``failed`` the
    failed ones among them, ``retried`` the retry attempts."""
    total: int
    done: int
    failed: int
    retried: int

    @property
    def fraction(self) -> float | None:
        """done / total, None while the total is unknown."""
        return self.done / self.total if self.total else None

    @classmethod
    def from_pb(cls, p: pb.TaskProgress) -> "TaskProgress":
        return cls(p.calls_total, p.calls_done, p.calls_failed, p.calls_retried)


@dataclass(slots=True)
class SlotLease:
    """A reserved task slot: submit the task with ``slot_id`` before the lease ends."""
    task_id: str
    slot_id: str
    state: str
    worker: str
    raw: Any = field(default=None, repr=False)
