"""A task whose Calls phase converges moves on once the dispatch actor's run ends
(DispatchActor.after_run), in the same call stack: the read that completes its
last call also ends the task and queues its watchers' terminal update, instead of
leaving that to the next loop iteration (a lone task waited for one more
iteration of the loop, whatever else it held). The actor's batch and epilogue
stay its own: the callback runs after them, with the actor no longer running."""
from __future__ import annotations

import logging

from blockx.adapters.subscriptions import Subscription
from blockx.core.types import TaskState

from .harness import outputs, settle, spy_dispatcher


async def test_the_read_that_completes_the_last_call_ends_its_task_before_it_returns(make_harness):
    h = await make_harness()
    sub = h.orch.subscriptions.attach(["r"], Subscription())
    h.submit("r", [("add", [1, 2])])
    await h.executed(1)
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
    def spy_epilogue(epilogue):
        def wrapped(now):
            order.append(("epilogue", actor.running))
            return epilogue(now)
        return wrapped
    spy_dispatcher(h.disp, {("lifecycle", "epilogue"): spy_epilogue})

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
