"""The dispatch actor's invariants (Go: actor_invariants_test): DispatcherCore is
mutated only by the actor, events posted while a command batch executes run
after it (no re-entrant mutation), a chunk of executor frames is one batch with
one epilogue, and one failing event does not stop the actor."""
from __future__ import annotations

import logging

from blockx.core.types import TaskState

from .harness import outputs, settle, spy_dispatcher, until


def _spy(h, trace: list) -> None:
    """Record the dispatcher's completion handler and epilogue in order."""
    def spy_completed(completed):
        def handle_call_completed(call_id, *a, **kw):
            trace.append(("completed", call_id))
            return completed(call_id, *a, **kw)
        return handle_call_completed

    def spy_epilogue(epilogue):
        def wrapped(now):
            cmds = epilogue(now)
            trace.append(("epilogue", [type(c).__name__ for c in cmds]))
            return cmds
        return wrapped

    spy_dispatcher(h.disp, {("lifecycle", "handle_call_completed"): spy_completed,
                            ("lifecycle", "epilogue"): spy_epilogue})


async def test_event_posted_from_inside_a_command_runs_after_the_batch(make_harness):
    h = await make_harness(capacity=2)
    f = h.fake
    seen_states: list = []

    def on_bind(call_id, executor_id):
        # An adapter callback that posts while the actor executes BindCall.
        def later(now):
            f.trace.append(("posted", call_id))
            seen_states.append((h.disp.tasks.call_state("t/0"), h.disp.tasks.call_state("t/1")))
            return []
        h.orch.post(later)
        # Not run re-entrantly: nothing of it happened yet.
        assert ("posted", call_id) not in f.trace

    f.on_bind = on_bind
    h.submit("t", [("add", [1, 0]), ("add", [2, 0])])
    await h.executed(2)
    assert f.trace[-6:] == [
        ("bind", "t/0", "exec-1"), ("execute", "t/0", "exec-1", 1),
        ("bind", "t/1", "exec-1"), ("execute", "t/1", "exec-1", 1),
        ("posted", "t/0"), ("posted", "t/1"),
    ]
    # The posted events saw the whole batch applied: both calls bound and sent.
    assert seen_states == [("RUNNING", "RUNNING"), ("RUNNING", "RUNNING")]
    f.on_bind = None
    f.deliver("exec-1", [f.completed("t/0", 1), f.completed("t/1", 2)])
    assert outputs(await h.terminal("t")) == [1, 2]


async def test_events_posted_by_events_run_in_fifo_order_after_them(make_harness):
    h = await make_harness()
    order: list = []

    def a(now):
        order.append("a")
        h.orch.post(lambda n: order.append("c") or [])
        order.append("a-end")
        return []

    def b(now):
        order.append("b")
        return []

    h.orch.post(a)
    assert order == ["a", "a-end", "c"]
    order.clear()

    def outer(now):
        h.orch.post(a)
        h.orch.post(b)
        order.append("outer")
        return []

    h.orch.post(outer)
    assert order == ["outer", "a", "a-end", "b", "c"]


async def test_a_chunk_of_frames_is_one_batch_with_one_epilogue(make_harness):
    h = await make_harness()
    h.submit("t", [("add", [i, 0]) for i in range(3)])
    await h.executed(3)
    trace: list = []
    _spy(h, trace)
    f = h.fake
    f.deliver("exec-1", [f.completed("t/1", 1), f.completed("t/2", 2), f.completed("t/0", 0)])
    # Every handler of the chunk ran before the (single) epilogue, which then
    # loops only until quiescent. The task's terminal path follows once that run
    # has ended (DispatchActor.after_run), in a run of its own: its dispatcher
    # cancel and that run's epilogue, with no frame handled in it.
    assert trace == [("completed", "t/1"), ("completed", "t/2"), ("completed", "t/0"),
                     ("epilogue", ["ConvergeTaskCalls"]), ("epilogue", []), ("epilogue", [])]
    assert outputs(await h.terminal("t")) == [0, 1, 2]


async def test_separate_chunks_each_get_their_own_epilogue(make_harness):
    h = await make_harness()
    h.submit("t", [("add", [i, 0]) for i in range(2)])
    await h.executed(2)
    trace: list = []
    _spy(h, trace)
    h.fake.complete("t/0", 0)
    h.fake.complete("t/1", 1)
    assert trace == [("completed", "t/0"), ("epilogue", []),
                     ("completed", "t/1"), ("epilogue", ["ConvergeTaskCalls"]), ("epilogue", []),
                     ("epilogue", [])]      # the terminal path's own run, after that one (after_run)
    await h.terminal("t")


async def test_a_failing_event_is_logged_and_the_actor_keeps_going(make_harness, caplog):
    h = await make_harness()
    ran: list = []

    def bad(now):
        raise RuntimeError("event bug")

    with caplog.at_level(logging.ERROR, logger="blockx.dispatch"):
        h.orch.post(bad)
        h.orch.post(lambda n: ran.append(n) or [])
    assert ran == [h.clock.mono()]
    assert any("dispatch event failed" in r.getMessage() for r in caplog.records)
    # The actor still dispatches and converges tasks afterwards.
    h.submit("t", [("add", [1, 1])])
    await h.executed(1)
    h.fake.complete("t/0", 2)
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED


async def test_malformed_frames_are_dropped_without_disturbing_the_batch(make_harness):
    # Defence in depth: the real adapter validates every inbound frame first.
    h = await make_harness()
    h.submit("t", [("add", [1, 1]), ("add", [2, 2])])
    await h.executed(2)
    f = h.fake
    no_attempt = f.completed("t/0", 2)
    del no_attempt["payload"]["attemptSeq"]
    f.deliver("exec-1", [
        {"messageType": "CallCompleted", "callId": "t/0", "requestId": "", "payload": None},
        no_attempt,
        {"messageType": "Heartbeat", "callId": "", "requestId": "", "payload": {}},
        {"messageType": "CallWaiting", "callId": "t/0", "requestId": "r",
         "payload": {"taskId": "t", "attemptSeq": 1, "waitKind": "teleport"}},
        f.completed("t/1", 4),
    ])
    assert f.handler_errors == []
    await settle()
    assert h.disp.tasks.call_state("t/0") == "RUNNING"
    assert h.state("t") == TaskState.RUNNING
    f.complete("t/0", 2)
    assert outputs(await h.terminal("t")) == [2, 4]


async def test_the_dispatcher_is_only_touched_on_the_actor(make_harness):
    """Every DispatcherCore mutator runs while the actor is draining its queue:
    phase starts, frames, snapshot syncs, retry timers and terminal cleanup all
    go through post()."""
    h = await make_harness()
    outside: list = []
    def outside_of_a_step(name):
        def wrap(orig):
            def wrapped(*a, **kw):
                if not h.orch.actor.running:
                    outside.append(name)
                return orig(*a, **kw)
            return wrapped
        return wrap

    wraps = {("intake", "commit_call_phase"): outside_of_a_step("commit_call_phase")}
    for name in ("handle_executor_bound", "handle_bind_failed",
                 "handle_call_waiting", "handle_call_resumed", "handle_call_completed",
                 "handle_call_failed", "handle_retry_ready", "handle_executor_snapshot_updated",
                 "handle_executor_lost", "add_subcall", "cancel_task", "epilogue", "dispatch",
                 "flush"):
        wraps[("lifecycle", name)] = outside_of_a_step(name)
    spy_dispatcher(h.disp, wraps)

    f = h.fake
    f.attach("exec-2")
    h.submit("t", [("add", [1, 1]), ("add", [2, 2]), ("add", [3, 3])], backoff_ms=1)
    await h.executed(3)
    f.fail(h.fake.executes[0].call_id, "EXECUTOR_LOST", True)
    await until(lambda: len(f.executes) == 4, what="retry")
    f.wait_io("t/1", "r1", {"op": "echo"})
    await until(lambda: len(f.resumes) == 1, what="io resume")
    h.orch.tick()
    f.deliver(f.last_execute("t/0").executor_id, [f.completed("t/0", 2)])
    f.complete("t/1", 4)
    f.complete("t/2", 6)
    assert outputs(await h.terminal("t")) == [2, 4, 6]
    await settle()
    assert outside == []
