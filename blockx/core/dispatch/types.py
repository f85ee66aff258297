"""Inputs of the DispatcherCore: call specs, retry policy, executor snapshots,
subcall rejections, and the string constants shared with the adapter.

Rules: these are plain records built by the adapter (or the call builders) and
read by the core; the core never keeps a reference it later mutates, except
``ExecutorSnapshot`` values which it copies into its own executor views.
Error-kind strings match the UDS protocol's ``errorKind`` values; they are
repeated here (not imported from blockx.protocol) because the core sits below
the protocol layer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

from blockx.core.failure_codes import CALL_FAILED, OUTPUT_BYTES_EXCEEDED

__all__ = [
    "FAST_FAIL", "CONTINUE", "POLICIES", "CALL_FAILED", "OUTPUT_BYTES_EXCEEDED",
    "ERR_CANCELLED", "ERR_EXECUTOR_LOST", "ERR_SUBCALL_FAILED",
    "REJECT_PARENT_NOT_ACTIVE", "REJECT_EXECUTOR_MISMATCH", "REJECT_DEPTH_EXCEEDED",
    "REJECT_CYCLE", "REJECT_INVALID_BUDGET",
    "PinnedCall", "RetryPolicy", "ExecutorSnapshot", "SubcallRejected",
]

# Call failure policy of a task (proto CallFailurePolicy; UNSPECIFIED = FAST_FAIL).
FAST_FAIL: Final = "FAST_FAIL"
CONTINUE: Final = "CONTINUE"
POLICIES: Final = frozenset({FAST_FAIL, CONTINUE})

# UDS errorKind values the dispatcher itself produces.
ERR_CANCELLED: Final = "CANCELLED"
ERR_EXECUTOR_LOST: Final = "EXECUTOR_LOST"
ERR_SUBCALL_FAILED: Final = "SUBCALL_FAILED"

# SubcallRejected.reason values.
REJECT_PARENT_NOT_ACTIVE: Final = "PARENT_NOT_ACTIVE"    # parent unknown, done, or not bound yet
REJECT_EXECUTOR_MISMATCH: Final = "EXECUTOR_MISMATCH"    # request from an executor the parent is not bound to
REJECT_DEPTH_EXCEEDED: Final = "DEPTH_EXCEEDED"          # child depth >= max_subcall_depth
REJECT_CYCLE: Final = "CYCLE"                            # child's cache key equals an ancestor's
REJECT_INVALID_BUDGET: Final = "INVALID_BUDGET"          # granted_budget_ms < 0


class PinnedCall(NamedTuple):
    """One call of a call list, pinned to its function code (``digest``).
    ``args_json`` is the canonical JSON array
    (cachekey.canonical_args_json); ``digest`` the pinned function code digest.
    Plain 4-tuples in this order are accepted everywhere a PinnedCall is."""

    function_id: str
    digest: str
    args_json: bytes
    entry_selector: str = "main"


@dataclass(slots=True, frozen=True)
class RetryPolicy:
    """A task's CallRetryPolicy. 0 for max_attempts / base_backoff_ms means "use
    the dispatcher default"; jitter_percent is taken as given (0 = no jitter)."""

    max_attempts: int = 0
    base_backoff_ms: int = 0
    jitter_percent: int = 0


@dataclass(slots=True)
class ExecutorSnapshot:
    """The adapter's view of one attached executor.

    ``runnable_count`` is the raw heartbeat value; the dispatcher compensates it
    with the completions it saw since that heartbeat (``heartbeat_seq`` tells a
    new heartbeat from a repeated one). ``usable_contexts`` is the number of
    calls the executor can host for the dispatcher: its context capacity minus
    reservations the dispatcher no longer counts (draining cancelled calls). The
    dispatcher's headroom is ``usable_contexts - local_inflight``."""

    executor_id: str
    healthy: bool = True
    runnable_count: int = 0
    usable_contexts: int = 0
    memory_bytes: int = 0
    last_scheduler_active_at_ms: int = 0
    running_call_id: str = ""
    heartbeat_seq: int = 0


@dataclass(slots=True)
class SubcallRejected:
    """add_subcall refused the request. The adapter answers the parent's
    CallWaiting with ResumeCall(error={errorKind: error_kind, errorMessage:
    message, retryable: retryable}); when ``stale`` is true the request came
    from an attempt that is no longer current and the adapter may drop it."""

    reason: str
    message: str
    error_kind: str = ERR_SUBCALL_FAILED
    retryable: bool = False
    stale: bool = False
