"""A task result too large for one gRPC message: only that delivery fails.

grpc refuses to send a message over the server's send limit
(``grpcMaxMessageBytes``); left to itself it fails the whole RPC, so one huge
result would end a TaskSession or a WatchTasks stream and every other task on
it. ``ResultDelivery`` checks a reply or an update before it is written:

- a reply (GetTaskResult, SubmitTask, RequestTaskSlot, and their session ops)
  that would not fit is refused with RESOURCE_EXHAUSTED and ``message()``, which
  names the size, the limit and the setting; on a session that is a
  SessionError for that request only;
- an update (WatchTasks, a session's watch) that would not fit is delivered
  without its outputs and plugin details (``without_outputs``), flagged with
  failure_code RESULT_TOO_LARGE and the same message in failure_message; the
  task's state is the one it reached, and the stream goes on.

The check is cheap where it runs on every reply: the sizes of the outputs are
summed (``result_bytes``, a len() each) and only a result within
``ENVELOPE_BYTES`` of the limit is measured exactly (``ByteSize``). The result
itself stays on the Worker, unchanged, for resultRetentionMs.
"""
from __future__ import annotations

from blockx.worker.v1 import worker_pb2 as pb

RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
SETTING = "grpcMaxMessageBytes (WORKER_GRPC_MAX_MESSAGE_BYTES)"
# What result_bytes leaves out (ids, statistic, names, the framing of a session
# event and its batch) stays under this, so a smaller sum always fits.
ENVELOPE_BYTES = 16 * 1024
WRAP_BYTES = 64                     # SessionEventBatch > SessionEvent tags, lengths and request_id
_KEPT_MESSAGE_CHARS = 1024          # of a plugin message, on an update that lost its outputs


def result_bytes(snap) -> int:
    """The bulk of ``snap``'s result in bytes: its outputs, failure message and
    plugin results (0 without a result)."""
    r = snap.result
    if r is None:
        return 0
    n = sum(map(len, r.outputs)) + len(r.failure_message)
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

    def fit_update(self, upd: pb.TaskUpdate, snap) -> pb.TaskUpdate:
        """``upd``, or (when it would not fit) a copy without its outputs, flagged."""
        if snap.result is None:
            return upd
        bulk = result_bytes(snap)
        if bulk <= self._fits:
            return upd
        n = self.oversize(upd, bulk)
        return self.without_outputs(upd, n) if n else upd

    def without_outputs(self, upd: pb.TaskUpdate, size: int) -> pb.TaskUpdate:
        """A copy of ``upd`` (never changed: it is shared by every subscriber) whose
        result keeps its state, statistic and plugin verdicts but no outputs and
        no plugin details; failure_code RESULT_TOO_LARGE says why."""
        r = upd.result
        msg = self.message(upd.task_id, size)
        if r.failure_code:
            msg += (f". The task's own failure was {r.failure_code}: "
                    f"{r.failure_message[:_KEPT_MESSAGE_CHARS]}")
        out = pb.TaskUpdate(task_id=upd.task_id, state=upd.state, is_terminal=upd.is_terminal)
        if upd.HasField("progress"):
            out.progress.CopyFrom(upd.progress)
        res = out.result
        res.state = r.state
        res.retryable = r.retryable
        res.failure_code = RESULT_TOO_LARGE
        res.failure_message = msg
        res.statistic.CopyFrom(r.statistic)
        for p in r.plugin_results:
            res.plugin_results.add(plugin=p.plugin[:_KEPT_MESSAGE_CHARS], ok=p.ok,
                                   message=p.message[:_KEPT_MESSAGE_CHARS])
        return out
