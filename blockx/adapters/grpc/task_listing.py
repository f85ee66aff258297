"""ListTasks on the wire: the filter decoded, the core's page encoded.

WorkerCore decides which tasks the caller sees and in which order
(core.worker.listing); the call counts of a task whose Calls phase runs are the
dispatcher's (``task_progress``, read on this loop), every other count is the
core's."""
from __future__ import annotations

from blockx.core.errors import InvalidArgumentError
from blockx.core.types import TaskState
from blockx.core.worker.listing import TaskListFilter, TaskListPage
from blockx.worker.v1 import worker_pb2 as pb

from typing import TYPE_CHECKING

if TYPE_CHECKING:     # a back-pointer: the Orchestrator is built first and hands itself in; it imports nothing of this module
    from blockx.adapters.orchestrator import Orchestrator
    from blockx.core.owners import Caller

_STATES = {int(s): s for s in TaskState}


def filter_from_pb(req: pb.ListTasksRequest) -> TaskListFilter:
    states = []
    for n in req.states:
        s = _STATES.get(n)
        if s is None:
            raise InvalidArgumentError(
                f"states holds {n}, which is no task state: use TASK_STATE_ALLOCATED, TASK_STATE_RUNNING, "
                "TASK_STATE_SUCCEEDED or TASK_STATE_FAILED")
        states.append(s)
    return TaskListFilter(tuple(states), tuple(req.phases), req.instance_id, req.page_size, req.page_token)


def list_response(page: TaskListPage, task_progress) -> pb.ListTasksResponse:
    """``task_progress``: DispatcherCore.task_progress (total, done, failed, retried) or None."""
    out = pb.ListTasksResponse(next_page_token=page.next_page_token)
    add = out.tasks.add
    for t in page.tasks:
        total, done = t.calls_total, t.calls_done
        if total is None:
            p = task_progress(t.task_id)
            total, done = (p[0], p[1]) if p is not None else (0, 0)
        add(task_id=t.task_id, state=int(t.state), phase=t.phase, owner=t.owner, instance_id=t.instance_id,
            slot_id=t.slot_id, created_at_ms=t.created_at_ms, finished_at_ms=t.finished_at_ms, age_ms=t.age_ms,
            calls_total=total, calls_done=done, failure_code=t.failure_code)
    return out


def list_tasks(orch: Orchestrator, req: pb.ListTasksRequest, caller: Caller | None) -> pb.ListTasksResponse:
    """Raises WorkerError (InvalidArgument) for a filter or page token that cannot be served."""
    page = orch.list_tasks(filter_from_pb(req), caller)
    return list_response(page, orch.disp.tasks.progress)
