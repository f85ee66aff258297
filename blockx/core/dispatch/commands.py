"""Commands the DispatcherCore returns to the adapter that drives it.

Rules: a command is a fact the adapter must act on, in list order; it never
carries a reference into core state (only strings, ints and bytes), so the
adapter may execute it after the core moved on. What the adapter does with each,
and which event it feeds back:

- ``BindCall``: reserve a context synchronously (``Bind``, or ``BindSubcall``
  when ``is_subcall``), then feed ``handle_executor_bound(call_id, now,
  executor_id)`` on success or ``handle_bind_failed(call_id, now)`` on failure,
  before executing the next command.
- ``UnbindCall`` first: the answer to an accepted CallCompleted / CallFailed
  always starts with ``UnbindCall`` for that call; a stale or duplicated frame
  is answered with no command at all, so the adapter counts accepted frames
  by that (``handle_call_completed`` / ``handle_call_failed`` document it).
- ``DispatchCallCmd``: send ExecuteCall (non-blocking; a full outbox paces it
  rather than refusing it). A send failure (the executor is gone) is fed back as
  ``handle_call_failed(call_id, attempt_seq, "EXECUTOR_LOST", True, ...)``.
- ``UnbindCall``: release the reservation (idempotent with the release the
  adapter already did on the executor's terminal frame).
- ``CancelCallCmd``: mark the reservation draining and send CancelCall best
  effort; the executor's terminal frame releases it. Nothing is fed back (the
  dispatcher already forgot the call; late frames for it are ignored).
- ``ArmCallRetry``: start a timer; at ``fire_at_ms`` feed
  ``handle_retry_ready(call_id, now)``. ``fire_at_ms`` may equal now.
  ``is_retry`` is true when an attempt failed retryably (a retry, counted in
  the task's call_retries); false when a failed bind re-queues the call (no
  attempt consumed).
- ``CompleteCallFromCache``: informational (metrics); the core already
  recorded the cached result.
- ``SubcallDone``: send ResumeCall(resumeKind="subcall", requestId=request_id)
  to ``parent_executor_id`` for ``parent_call_id`` with ``output_json`` as the
  result or ``{errorKind, errorMessage, retryable}`` as the error, and
  ``budget_used_ms``; once flushed feed ``handle_call_resumed(parent_call_id,
  now)``; if the send fails feed ``handle_call_failed(parent_call_id,
  parent_attempt_seq, "RESUME_SEND_FAILED", True, ...)``.
- ``BatchSettled``: return one credit to the task's stream producer (with
  hand_over, the batch's outputs go with it, for a writer that streams).
- ``StopCallProduction``: stop the task's stream producer (no more batches).
- ``ConvergeTaskCalls``: the call phase ended; hand the outcome to WorkerCore
  (``HandleTaskPhaseFinished(PhaseCalls)``). Sent once per task.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

# The three commands of every call (BindCall, DispatchCallCmd, UnbindCall) are
# built in the compiled dispatch loop, so they live in callcmds (one source in
# Cython's pure-Python mode; compiled they are cdef classes the loop makes in C):
#   BindCall(call_id, executor_id, task_id, is_subcall, parent_call_id)
#   UnbindCall(call_id, executor_id)
#   DispatchCallCmd(call_id, executor_id, task_id, function_id, digest, entry_selector,
#                   args_json, budget_ms (0 = unlimited), attempt_seq,
#                   parent_call_id ("" for root calls))
from blockx.core.dispatch.callcmds import BindCall, DispatchCallCmd, UnbindCall

__all__ = [
    "BindCall", "UnbindCall", "CancelCallCmd", "DispatchCallCmd", "ArmCallRetry",
    "CompleteCallFromCache", "SubcallDone", "BatchSettled", "StopCallProduction",
    "ConvergeTaskCalls", "DispatchCommand",
]


@dataclass(slots=True)
class CancelCallCmd:
    call_id: str
    executor_id: str
    reason: str
    attempt_seq: int


@dataclass(slots=True)
class ArmCallRetry:
    call_id: str
    fire_at_ms: int
    is_retry: bool          # False: a failed bind re-queues the call (no attempt used)


@dataclass(slots=True)
class CompleteCallFromCache:
    call_id: str
    task_id: str
    is_subcall: bool
    parent_call_id: str


@dataclass(slots=True)
class SubcallDone:
    child_call_id: str
    parent_call_id: str
    parent_executor_id: str
    request_id: str
    ok: bool
    output_json: bytes | None
    error_kind: str          # "SUBCALL_FAILED" when not ok
    error_message: str
    retryable: bool          # the child's retryable
    budget_used_ms: int
    parent_attempt_seq: int = 0
    child_error_kind: str = ""   # the child's own errorKind (diagnostics)


@dataclass(slots=True)
class BatchSettled:
    task_id: str
    batch_idx: int
    # With hand_over (commit_call_stream): the batch's successful root outputs, in
    # call order, which the dispatcher no longer keeps; None otherwise.
    outputs: list | None = None


@dataclass(slots=True)
class StopCallProduction:
    task_id: str
    reason: str


@dataclass(slots=True)
class ConvergeTaskCalls:
    task_id: str
    ok: bool
    failure_code: str
    failure_message: str
    retryable: bool
    outputs: list[bytes] = field(default_factory=list)  # successful roots, call-list order
    call_count: int = 0
    calls_failed: int = 0
    call_retries: int = 0
    cache_hits: int = 0


DispatchCommand = Union[BindCall, UnbindCall, CancelCallCmd, DispatchCallCmd, ArmCallRetry,
                        CompleteCallFromCache, SubcallDone, BatchSettled, StopCallProduction,
                        ConvergeTaskCalls]
