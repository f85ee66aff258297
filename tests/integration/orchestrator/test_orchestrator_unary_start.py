"""A unary SubmitTask starts its task inside the RPC (SUBMIT_LINGER_MS off, the
default): activation, the Builder and the first dispatch run before SubmitTask
returns, after the accepted snapshot was published, so the ExecuteCall leaves
with the next outbox flush while gRPC sends the answer, instead of one loop
iteration later (make bench (l): that hop was most of a lone unary task's
activation span). A session's submit still starts in the next iteration: its
follow watch attaches after submit_task returns, and must see the terminal update."""
from __future__ import annotations

import logging

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


async def test_the_read_that_completes_the_last_call_ends_its_task_before_it_returns(make_harness):
    """The terminal path runs once the actor's run ends (after_run), not a loop
    iteration later: the watcher's terminal update is queued by the same read."""
    h = await make_harness()
    sub = h.orch.subscriptions.attach(["r"], Subscription())
    h.orch.submit_task(_req("r"), unary=True)
    h.fake.complete("r/0", 3)                     # delivered through the adapter's callback, no await
    assert h.orch.get_task_result("r").state is TaskState.SUCCEEDED
    assert not h.orch.actor.running
    seen = []
    while not sub.queue.empty():
        seen.append(sub.queue.get_nowait())
    assert seen[-1].state is TaskState.SUCCEEDED and outputs(seen[-1]) == [3]


async def test_after_run_runs_after_the_epilogue_and_a_failing_callback_does_not_stop_the_rest(make_harness, caplog):
    h = await make_harness()
    actor = h.orch.actor
    order: list = []
    epilogue = h.disp.epilogue

    def spy_epilogue(now):
        order.append(("epilogue", actor.running))
        return epilogue(now)
    h.disp.epilogue = spy_epilogue

    def bad():
        raise RuntimeError("after-run broke")

    def event(now):
        actor.after_run(bad)
        actor.after_run(lambda: order.append(("after", actor.running)))
        order.append(("event", actor.running))
        return []
    with caplog.at_level(logging.ERROR, logger="blockx.dispatch"):
        h.orch.post(event)
    assert order[0] == ("event", True) and ("epilogue", True) in order
    assert order[-1] == ("after", False)         # the run had ended, in the same call stack
    assert any("after-run callback failed" in r.getMessage() for r in caplog.records)
    later: list = []
    actor.after_run(later.append, 1)             # outside a run: the next loop iteration
    assert later == []
    await settle()
    assert later == [1]
