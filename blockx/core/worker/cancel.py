"""CancelTask: the rules of cancelling a task, and the result it ends with.

Rules:
- Only the task's owner or an admin may cancel it (``core.owners``): for another
  identity the task does not exist, NotFound with the very message of an unknown
  id (a different answer would tell that the id is in use). An unknown id, or the
  tombstone of a reservation that lapsed before SubmitTask, is NotFound.
- A terminal task is not changed: the answer is its snapshot (applied False).
- A submitted task converges FAILED / ``CANCELLED`` (not retryable) in the
  phase it is in: queued for activation or an admission gate, in its Builder,
  its Calls (in-flight calls get CancelCall, subcall subtrees included, through
  the dispatcher's cancel_task), or its plugin (cancelled: a writer rolls back and
  writes nothing, unless its COMMIT was already sent). The terminal path of the adapter does that work; the core frees the
  slot in the same call. A timer of the task already due at ``now`` wins, as for
  every task event (the deadline passed first: TIMED_OUT).
- A bare reservation (RequestTaskSlot, no SubmitTask yet) is cancelled too: its
  slot is freed and the id holds the FAILED / CANCELLED result for
  resultRetentionMs, so a late SubmitTask of it answers with that result
  instead of running the task.
- ``reason`` is free text of at most MAX_CANCEL_REASON_CHARS characters; it goes
  into the failure message with the canceller's name.
"""
from __future__ import annotations

from blockx.core import failure_codes as fc
from blockx.core.errors import InvalidArgumentError
from blockx.core.owners import Caller
from blockx.core.types import TaskResult, TaskState, TaskStatistic

MAX_CANCEL_REASON_CHARS = 1024


def check_reason(reason: str) -> str:
    if not isinstance(reason, str):
        raise InvalidArgumentError("reason must be a string")
    if len(reason) > MAX_CANCEL_REASON_CHARS:
        raise InvalidArgumentError(
            f"reason is {len(reason)} characters; the limit is {MAX_CANCEL_REASON_CHARS}: shorten it")
    return reason.strip()


def cancel_message(reason: str, caller: Caller | None) -> str:
    who = f"by {caller.name!r}" if caller is not None else "through CancelTask"
    return f"the task was cancelled {who}: {reason}" if reason else f"the task was cancelled {who}"


def reservation_result(message: str, now: int) -> TaskResult:
    """The result of a reservation cancelled before SubmitTask (it never ran)."""
    return TaskResult(TaskState.FAILED, fc.CANCELLED, message, False,
                      statistic=TaskStatistic(0, now))


__all__ = ["MAX_CANCEL_REASON_CHARS", "cancel_message", "check_reason", "reservation_result"]
