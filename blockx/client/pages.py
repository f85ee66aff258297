"""Every output of a task, page by page.

A Worker sends a result in pages of at most its resultPageBytes: a terminal
update or a reply carries the outputs that fit, with ``outputs_total``,
``outputs_offset`` and ``outputs_truncated`` (more follow). ``pages_after``
walks the rest with GetTaskResult's ``outputs_offset``: a page that carries no
output although more follow (that output alone is over the page budget) is asked
again with ``outputs_limit=1``, which the Worker answers with that one output as
long as it fits one gRPC message. Every page must continue where the last one
ended and count the same total, so no output is missed or repeated; anything
else (say, the task's result was purged and the id reused meanwhile) raises
``PagingError``.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from blockx.client.errors import BlockxError
from blockx.worker.v1 import worker_pb2 as pb

# (task_id, offset, limit or None) -> that page's TaskResult, None when the task has none
GetPage = Callable[[str, int, "int | None"], Awaitable["pb.TaskResult | None"]]


class PagingError(BlockxError):
    """The pages of a result did not join up (module docstring)."""
    code = grpc.StatusCode.ABORTED


def next_offset(r: pb.TaskResult) -> int:
    return r.outputs_offset + len(r.outputs)


async def pages_after(get_page: GetPage, task_id: str, page: pb.TaskResult) -> AsyncIterator[pb.TaskResult]:
    """The pages of ``task_id``'s result that follow ``page`` (one already in hand), in order."""
    total = page.outputs_total
    r: pb.TaskResult | None = page
    while r is not None and r.outputs_truncated:
        offset = next_offset(r)
        r = await get_page(task_id, offset, None)
        if r is not None and not r.outputs and r.outputs_truncated:
            r = await get_page(task_id, offset, 1)       # one output over the page budget: ask for it alone
        if r is None:
            raise PagingError(f"task {task_id!r} has no result any more at output {offset} of {total}")
        if r.outputs_offset != offset or r.outputs_total != total or (r.outputs_truncated and not r.outputs):
            raise PagingError(f"the page of task {task_id!r} at output {offset} does not continue its result "
                              f"(offset {r.outputs_offset}, {len(r.outputs)} outputs of {r.outputs_total}; "
                              f"expected offset {offset} of {total})")
        yield r


async def all_pages(get_page: GetPage, task_id: str) -> AsyncIterator[pb.TaskResult]:
    """Every page of ``task_id``'s result from the first; nothing when it has no result yet."""
    first = await get_page(task_id, 0, None)
    if first is None:
        return
    yield first
    async for r in pages_after(get_page, task_id, first):
        yield r
