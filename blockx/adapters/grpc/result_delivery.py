"""A result too large for one gRPC message: only that delivery fails.

grpc refuses to send a message over the server's send limit
(``grpcMaxMessageBytes``); left to itself it fails the whole RPC, so one huge
message would end a TaskSession or a WatchTasks stream and every other task on
it. Results go out in pages of at most resultPageBytes
(blockx.adapters.grpc.result_pages), well under that limit; the one message that can
still be over it is a GetTaskResult page that asked for an output by count
(``outputs_limit``) when that output alone is larger than one message.
``ResultDelivery`` measures that reply before it is written and refuses it
with RESOURCE_EXHAUSTED and ``message()``, which names the size, the limit and
the setting; on a session that is a SessionError for that request only.
RESULT_TOO_LARGE flags a page that had to leave plugin details out (see
result_pages).

The check is cheap where it runs: the sizes of the outputs are summed
(``result_bytes``, a len() each) and only a result within ``ENVELOPE_BYTES`` of
the limit is measured exactly (``ByteSize``). The result itself stays on the
Worker, unchanged, for resultRetentionMs.
"""
from __future__ import annotations

RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
SETTING = "grpcMaxMessageBytes (WORKER_GRPC_MAX_MESSAGE_BYTES)"
# What result_bytes leaves out (ids, statistic, names, the framing of a session
# event and its batch) stays under this, so a smaller sum always fits.
ENVELOPE_BYTES = 16 * 1024
WRAP_BYTES = 64                     # SessionEventBatch > SessionEvent tags, lengths and request_id


def result_bytes(snap) -> int:
    """The bulk of ``snap``'s result in bytes: its outputs, failure message,
    failure traceback and locals, and plugin results (0 without a result)."""
    r = snap.result
    if r is None:
        return 0
    n = sum(map(len, r.outputs)) + len(r.failure_message)
    if r.failure_call_id:              # a traceback and locals (a name is at most 64, plus framing)
        n += len(r.failure_traceback) + sum(len(value) + 80 for _name, value in r.failure_locals)
    for p in r.plugin_results:
        n += len(p.details) + len(p.message)
    return n


class ResultDelivery:
    __slots__ = ("max_bytes", "_fits")

    def __init__(self, max_message_bytes: int) -> None:
        self.max_bytes = max_message_bytes
        self._fits = max_message_bytes - ENVELOPE_BYTES   # a bulk at most this always fits

    @property
    def fits_bytes(self) -> int:
        """A result bulk (``result_bytes``) up to this always fits in one message."""
        return self._fits

    def oversize(self, msg, bulk: int) -> int:
        """0 when ``msg`` (whose result bulk is ``bulk`` bytes) fits in one message,
        else its size in bytes."""
        if bulk <= self._fits:
            return 0
        n = msg.ByteSize() + WRAP_BYTES
        return n if n > self.max_bytes else 0

    def message(self, task_id: str, size: int) -> str:
        return (f"the result of task {task_id!r} is {size} bytes, over the limit of {self.max_bytes} bytes "
                f"of one gRPC message ({SETTING}), so it cannot be delivered; the task itself is unaffected "
                f"and its result stays on the worker for resultRetentionMs. Raise {SETTING} on the worker "
                "(and the client's receive limit), or have the task return less (e.g. write large outputs "
                "with a ResultHandler)")
