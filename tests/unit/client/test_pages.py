"""blockx.client.pages over the Worker's own page cut (ResultPages): every output
once, in order, an output over the budget asked for alone, and pages that do
not join up refused."""
import pytest

from blockx.adapters.grpc.result_pages import ResultPages
from blockx.client.pages import PagingError, all_pages, pages_after
from blockx.core.types import TaskResult, TaskSnapshot, TaskState
from blockx.worker.v1 import worker_pb2 as pb

BUDGET, MAX = 16 * 1024, 256 * 1024


def source(outputs, asked=None):
    pages = ResultPages(BUDGET, MAX)
    snap = TaskSnapshot("t", "slot-0", TaskState.SUCCEEDED, TaskResult(TaskState.SUCCEEDED, outputs=list(outputs)))

    async def get_page(task_id, offset, limit):
        if asked is not None:
            asked.append((offset, limit))
        return pages.reply(snap, "result", offset, limit)[0].result
    return get_page


async def collect(agen):
    return [p async for p in agen]


async def test_every_output_once_in_order_and_one_over_the_budget_alone():
    outs = [str(i).encode() for i in range(5000)] + [b"x" * (BUDGET * 2)] + [b"end"]
    asked = []
    pages = await collect(all_pages(source(outs, asked), "t"))
    assert [o for p in pages for o in p.outputs] == outs
    big = outs.index(b"x" * (BUDGET * 2))
    assert (big, None) in asked and (big, 1) in asked          # nothing fit: asked again by count
    assert all(limit is None for offset, limit in asked if offset != big)
    assert not pages[-1].outputs_truncated


async def test_a_result_that_fits_is_one_page_and_no_request_more():
    asked = []
    first = await source([b"1", b"2"], asked)("t", 0, None)
    assert await collect(pages_after(source([b"1"], asked), "t", first)) == []
    assert asked == [(0, None)]


async def test_a_task_without_a_result_has_no_pages():
    async def none(task_id, offset, limit):
        return None
    assert await collect(all_pages(none, "t")) == []
    with pytest.raises(PagingError, match="has no result any more at output 2 of 9"):
        await collect(pages_after(none, "t", pb.TaskResult(outputs=[b"a", b"b"], outputs_total=9,
                                                           outputs_truncated=True)))


@pytest.mark.parametrize("bad", [
    pb.TaskResult(outputs=[b"c"], outputs_offset=3, outputs_total=9, outputs_truncated=True),   # a gap
    pb.TaskResult(outputs=[b"c"], outputs_offset=2, outputs_total=8, outputs_truncated=True),   # another total
    pb.TaskResult(outputs=[], outputs_offset=2, outputs_total=9, outputs_truncated=True),       # no progress
])
async def test_pages_that_do_not_join_up_are_refused(bad):
    async def get(task_id, offset, limit):
        return bad
    first = pb.TaskResult(outputs=[b"a", b"b"], outputs_total=9, outputs_truncated=True)
    with pytest.raises(PagingError, match="does not continue its result"):
        await collect(pages_after(get, "t", first))
