"""Task failure codes carried in ``TaskResult.failure_code``.

These strings are part of the public contract (clients match on them), so they
never change spelling. ``RETRYABLE`` says whether a client may resubmit the
task (on any worker) and expect a different outcome: only ``TIMED_OUT`` and
``WORKER_SHUTDOWN`` are retryable by default; a phase outcome may still carry its own ``retryable``
flag (e.g. a call that failed with a retryable error kind).

A failure message says each thing once: ``prefixed`` puts a prefix (a builder's
name, a phase) in front of a message unless the message already starts with it,
so a builder that names itself ("callList: calls[0].args is missing") is not
named twice by the phase that reports it.
"""
from __future__ import annotations

from typing import Final

ACTIVATION_FAILED: Final = "ACTIVATION_FAILED"          # epoch resolve / function-code pin failed
IO_SCOPE_FAILED: Final = "IO_SCOPE_FAILED"              # the task's IO scope could not be created
BUILDER_NOT_FOUND: Final = "BUILDER_NOT_FOUND"          # FunctionCallConfig.type is not registered
BUILDER_FAILED: Final = "BUILDER_FAILED"                # the call builder raised / rejected its payload
CALL_FAILED: Final = "CALL_FAILED"                      # a root call failed (FAST_FAIL) or all failed
PLUGIN_FAILED: Final = "PLUGIN_FAILED"                  # the task's plugin reported failure
TIMED_OUT: Final = "TIMED_OUT"                          # the task deadline passed
SLOT_LOST: Final = "SLOT_LOST"                          # the slot lease expired before activation
WATCH_DISCONNECTED: Final = "WATCH_DISCONNECTED"        # every Watch stream left and grace ran out
OUTPUT_BYTES_EXCEEDED: Final = "OUTPUT_BYTES_EXCEEDED"  # collected outputs passed maxCollectedOutputBytes
WORKER_SHUTDOWN: Final = "WORKER_SHUTDOWN"              # still running when the worker's drain ended
CANCELLED: Final = "CANCELLED"                          # CancelTask by its owner or an admin (not retryable)

ALL: Final = frozenset({
    ACTIVATION_FAILED, IO_SCOPE_FAILED, BUILDER_NOT_FOUND, BUILDER_FAILED, CALL_FAILED,
    PLUGIN_FAILED, TIMED_OUT, SLOT_LOST, WATCH_DISCONNECTED, OUTPUT_BYTES_EXCEEDED, WORKER_SHUTDOWN,
    CANCELLED,
})

# Default retryability of a code when the core itself produces the failure.
RETRYABLE: Final = frozenset({TIMED_OUT, WORKER_SHUTDOWN})


def is_retryable(code: str) -> bool:
    return code in RETRYABLE


def prefixed(prefix: str, message: str) -> str:
    """``"prefix: message"``, or ``message`` when it already starts with that prefix."""
    if not prefix or message.startswith(prefix + ":"):
        return message
    return f"{prefix}: {message}" if message else prefix
