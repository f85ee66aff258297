"""A unary SubmitTask starts its task inside the RPC (SUBMIT_LINGER_MS off, the
default): activation, the Builder and the first dispatch run before SubmitTask
returns, after the accepted snapshot was published, so the ExecuteCall leaves
with the next outbox flush while gRPC sends the answer, instead of one loop
iteration later (make bench (l): that hop was most of a lone unary task's
activation span). A session's submit still starts in the next iteration: its
follow watch attaches after submit_task returns, and must see the terminal update."""
from __future__ import annotations

from blockx.adapters.subscriptions import Subscription
from blockx.core.types import FunctionCall, SubmitTaskRequest, TaskState

from .harness import outputs, settle


def _req(task_id: str, builder: str = "callList", payload: bytes = b'{"calls":[{"functionId":"add","args":[1,2]}]}'):
    return SubmitTaskRequest(task_id=task_id, function_call=FunctionCall(builder, payload))


async def test_a_unary_submit_sends_the_execute_call_before_it_returns(make_harness):
    h = await make_harness()
    snap = h.orch.submit_task(_req("u"), unary=True)
    assert not snap.state.is_terminal
    assert [s.call_id for s in h.fake.executes] == ["u/0"]      # no await in between
    h.fake.complete("u/0", 3)
    res = await h.terminal("u")
    assert (res.state, outputs(res)) == (TaskState.SUCCEEDED, [3])


async def test_a_session_submit_still_starts_in_the_next_iteration(make_harness):
    h = await make_harness()
    h.orch.submit_task(_req("s"))
    assert h.fake.executes == []
    await settle()
    assert [s.call_id for s in h.fake.executes] == ["s/0"]


async def test_a_watcher_sees_the_accepted_state_before_an_end_inside_the_submit(make_harness):
    h = await make_harness()
    sub = h.orch.subscriptions.attach(["nb"], Subscription())
    snap = h.orch.submit_task(_req("nb", builder="tableScan", payload=b"{}"), unary=True)
    assert not snap.state.is_terminal                # the answer shows the task accepted
    seen = []
    while not sub.queue.empty():
        seen.append(sub.queue.get_nowait())
    assert [s.state.is_terminal for s in seen] == [False, True]
    assert seen[-1].result.failure_code == "BUILDER_NOT_FOUND"
    assert h.orch.get_task_result("nb").state.is_terminal


async def test_a_start_that_raises_is_logged_and_the_submit_still_answers(make_harness, caplog):
    h = await make_harness()

    def broken(rt, cmd):
        raise RuntimeError("drive broke")
    h.orch._starts._drive = broken
    snap = h.orch.submit_task(_req("x"), unary=True)
    assert snap.task_id == "x" and not snap.state.is_terminal
    assert any("starting task x failed" in r.getMessage() for r in caplog.records)
