"""CancelTask on the wire: the request decoded, the core's answer encoded.

The decision is WorkerCore's (``handle_cancel_task``); the orchestrator runs the
ConvergeTask it returns through the task terminal path (calls cancelled through
the dispatcher, runner and plugin cancelled, IO scope closed, watchers told).
The unary RPC and the TaskSession ``cancel`` op share these two functions."""
from __future__ import annotations

from blockx.adapters.grpc.result_pages import ResultPages
from blockx.core.types import CancelTaskResult
from blockx.worker.v1 import worker_pb2 as pb

from typing import TYPE_CHECKING

if TYPE_CHECKING:     # a back-pointer: the Orchestrator is built first and hands itself in; it imports nothing of this module
    from blockx.adapters.orchestrator import Orchestrator
    from blockx.core.owners import Caller


def cancel(orch: Orchestrator, request: pb.CancelTaskRequest, caller: Caller | None) -> CancelTaskResult:
    """Cancel ``request.task_id`` as ``caller``; raises WorkerError (NotFound for an unknown task and for
    another identity's, InvalidArgument, ...)."""
    return orch.cancel_task(request.task_id, request.reason, caller)


def cancel_response(res: CancelTaskResult, pages: ResultPages) -> tuple[pb.CancelTaskResponse, int]:
    """(the answer, its approximate result bytes): the task's state and, once it
    is terminal, the first page of its result, cut by ``pages`` as GetTaskResult's
    first page is, so no answer is over the page budget."""
    snap = res.snapshot
    assert snap is not None, "an unknown task raises NotFound before any answer"
    page, size = pages.reply(snap, "result")
    resp = pb.CancelTaskResponse(task_id=snap.task_id, state=page.state, cancelled=res.applied)
    if page.HasField("result"):
        resp.result.CopyFrom(page.result)
    return resp, size
