"""CancelTask on the wire: the request decoded, the core's answer encoded.

The decision is WorkerCore's (``handle_cancel_task``); the orchestrator runs the
ConvergeTask it returns through the task terminal path (calls cancelled through
the dispatcher, runner and writer cancelled, IO scope closed, watchers told).
The unary RPC and the TaskSession ``cancel`` op share these two functions."""
from __future__ import annotations

from blockx.adapters.wire import result_to_pb
from blockx.core.types import CancelTaskResult
from blockx.worker.v1 import worker_pb2 as pb


def cancel(orch, request: pb.CancelTaskRequest, caller) -> CancelTaskResult:
    """Cancel ``request.task_id`` as ``caller``; raises WorkerError (NotFound, PermissionDenied, ...)."""
    return orch.cancel_task(request.task_id, request.reason, caller)


def cancel_response(res: CancelTaskResult) -> pb.CancelTaskResponse:
    snap = res.snapshot
    assert snap is not None, "an unknown task raises NotFound before any answer"
    resp = pb.CancelTaskResponse(task_id=snap.task_id, cancelled=res.applied)
    resp.state = int(snap.state)  # type: ignore[assignment]  # the proto enum's wrapper takes its int
    if snap.result is not None:
        resp.result.CopyFrom(result_to_pb(snap.result))
    return resp
