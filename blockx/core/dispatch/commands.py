"""Commands the DispatcherCore returns to the adapter that drives it, all of them.

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

import cython

__all__ = [
    "BindCall", "UnbindCall", "CancelCallCmd", "DispatchCallCmd", "ArmCallRetry",
    "CompleteCallFromCache", "SubcallDone", "BatchSettled", "StopCallProduction",
    "ConvergeTaskCalls", "DispatchCommand", "new_bind_call", "new_unbind_call", "new_dispatch_call",
]


# The three commands of every call are made once or twice per call, in the
# compiled dispatch loop: compiled they are cdef classes (commands.pxd) the loop
# builds in C (new_* below, no argument tuple). They carry only strings, bytes,
# ints and bools, so they can never be part of a reference cycle and stay out of
# the cyclic GC (no_gc): millions of them per minute then cost the collector
# nothing. Plain records like the others: positional or keyword construction,
# equality by type and fields, unhashable, a dataclass-style repr.


@cython.final
@cython.no_gc
@cython.freelist(64)
@cython.cclass
class BindCall:
    if not cython.compiled:
        __slots__ = ("call_id", "executor_id", "task_id", "is_subcall", "parent_call_id")

    def __init__(self, call_id, executor_id, task_id, is_subcall, parent_call_id):
        self.call_id = call_id
        self.executor_id = executor_id
        self.task_id = task_id
        self.is_subcall = is_subcall
        self.parent_call_id = parent_call_id

    def _fields(self):
        return (self.call_id, self.executor_id, self.task_id, self.is_subcall, self.parent_call_id)

    def __eq__(self, other):
        if type(other) is not BindCall:
            return NotImplemented
        return self._fields() == cython.cast(BindCall, other)._fields()

    def __ne__(self, other):
        if type(other) is not BindCall:
            return NotImplemented
        return self._fields() != cython.cast(BindCall, other)._fields()

    __hash__ = None  # type: ignore[assignment]  # unhashable, like the dataclasses

    def __repr__(self):
        return (f"BindCall(call_id={self.call_id!r}, executor_id={self.executor_id!r}, "
                f"task_id={self.task_id!r}, is_subcall={self.is_subcall!r}, "
                f"parent_call_id={self.parent_call_id!r})")


@cython.final
@cython.no_gc
@cython.freelist(64)
@cython.cclass
class UnbindCall:
    if not cython.compiled:
        __slots__ = ("call_id", "executor_id")

    def __init__(self, call_id, executor_id):
        self.call_id = call_id
        self.executor_id = executor_id

    def _fields(self):
        return (self.call_id, self.executor_id)

    def __eq__(self, other):
        if type(other) is not UnbindCall:
            return NotImplemented
        return self._fields() == cython.cast(UnbindCall, other)._fields()

    def __ne__(self, other):
        if type(other) is not UnbindCall:
            return NotImplemented
        return self._fields() != cython.cast(UnbindCall, other)._fields()

    __hash__ = None  # type: ignore[assignment]  # unhashable, like the dataclasses

    def __repr__(self):
        return f"UnbindCall(call_id={self.call_id!r}, executor_id={self.executor_id!r})"


@cython.final
@cython.no_gc
@cython.freelist(64)
@cython.cclass
class DispatchCallCmd:
    if not cython.compiled:
        __slots__ = ("call_id", "executor_id", "task_id", "function_id", "digest",
                     "entry_selector", "args_json", "budget_ms", "attempt_seq", "parent_call_id")

    def __init__(self, call_id, executor_id, task_id, function_id, digest, entry_selector,
                 args_json, budget_ms, attempt_seq, parent_call_id):
        self.call_id = call_id
        self.executor_id = executor_id
        self.task_id = task_id
        self.function_id = function_id
        self.digest = digest
        self.entry_selector = entry_selector
        self.args_json = args_json
        self.budget_ms = budget_ms          # 0 = unlimited
        self.attempt_seq = attempt_seq
        self.parent_call_id = parent_call_id    # "" for root calls

    def _fields(self):
        return (self.call_id, self.executor_id, self.task_id, self.function_id, self.digest,
                self.entry_selector, self.args_json, self.budget_ms, self.attempt_seq,
                self.parent_call_id)

    def __eq__(self, other):
        if type(other) is not DispatchCallCmd:
            return NotImplemented
        return self._fields() == cython.cast(DispatchCallCmd, other)._fields()

    def __ne__(self, other):
        if type(other) is not DispatchCallCmd:
            return NotImplemented
        return self._fields() != cython.cast(DispatchCallCmd, other)._fields()

    __hash__ = None  # type: ignore[assignment]  # unhashable, like the dataclasses

    def __repr__(self):
        return (f"DispatchCallCmd(call_id={self.call_id!r}, executor_id={self.executor_id!r}, "
                f"task_id={self.task_id!r}, function_id={self.function_id!r}, "
                f"digest={self.digest!r}, entry_selector={self.entry_selector!r}, "
                f"args_json={self.args_json!r}, budget_ms={self.budget_ms!r}, "
                f"attempt_seq={self.attempt_seq!r}, parent_call_id={self.parent_call_id!r})")


# The constructors the compiled dispatch loop calls in C (cpdef in commands.pxd):
# the record without __init__'s argument tuple. Interpreted, plain functions.

def new_bind_call(call_id, executor_id, task_id, is_subcall, parent_call_id):
    c: BindCall = BindCall.__new__(BindCall)
    c.call_id = call_id
    c.executor_id = executor_id
    c.task_id = task_id
    c.is_subcall = is_subcall
    c.parent_call_id = parent_call_id
    return c


def new_unbind_call(call_id, executor_id):
    c: UnbindCall = UnbindCall.__new__(UnbindCall)
    c.call_id = call_id
    c.executor_id = executor_id
    return c


def new_dispatch_call(call_id, executor_id, task_id, function_id, digest, entry_selector,
                      args_json, budget_ms, attempt_seq, parent_call_id):
    c: DispatchCallCmd = DispatchCallCmd.__new__(DispatchCallCmd)
    c.call_id = call_id
    c.executor_id = executor_id
    c.task_id = task_id
    c.function_id = function_id
    c.digest = digest
    c.entry_selector = entry_selector
    c.args_json = args_json
    c.budget_ms = budget_ms
    c.attempt_seq = attempt_seq
    c.parent_call_id = parent_call_id
    return c


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
