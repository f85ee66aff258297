"""The orchestrator's tick and clocks: the wedge backstop, snapshot sync and the
stall filter, WatchTasks publishing (SubscriptionManager) including an expired
reservation, Watch-disconnect grace, readiness, drain and TaskStatistic timing
from the injected wall clock."""
from __future__ import annotations

import asyncio
import types

import pytest

from blockx.adapters.subscriptions import GONE
from blockx.core.errors import NotFoundError, UnavailableError
from blockx.core.types import TaskState

from .harness import WALL0, outputs, settle, until

# ---- wedge backstop ------------------------------------------------------------------


async def test_wedge_check_kills_an_executor_whose_scheduler_stalled(make_harness):
    # CALL_DEADLINE_MS 1000 -> SchedulerStallTimeoutMs derived as 1000 + 5000.
    h = await make_harness(executors=("exec-1", "exec-2"), env={"CALL_DEADLINE_MS": "1000"})
    assert h.orch.stall_timeout_ms == 6000
    f = h.fake
    wedged = f.executors["exec-1"]
    wedged.running_call_id = "t/0"
    wedged.last_scheduler_active_at_ms = h.clock.mono()
    idle = f.executors["exec-2"]                 # stale scheduler but no running call
    idle.last_scheduler_active_at_ms = h.clock.mono() - 100_000

    h.orch.tick()
    h.clock.advance(6000)                        # exactly the threshold: not yet
    h.orch.tick()
    assert f.killed == []
    assert h.metrics.executor_wedge_kills == 0
    h.clock.advance(1)
    h.orch.tick()
    assert f.killed == ["exec-1"]
    assert h.metrics.executor_wedge_kills == 1
    # The killed process's connection drops; the next tick finds nothing left to kill.
    f.lose("exec-1", "connection closed")
    h.orch.tick()
    assert f.killed == ["exec-1"]


async def test_wedge_check_uses_the_pool_and_counts_only_real_kills(make_harness):
    h = await make_harness(env={"CALL_DEADLINE_MS": "1000"})
    f = h.fake
    ex = f.executors["exec-1"]
    ex.running_call_id = "t/9"
    ex.last_scheduler_active_at_ms = h.clock.mono() - 6001
    pool_kills: list = []
    h.orch.pool = types.SimpleNamespace(kill_executor=lambda eid: pool_kills.append(eid) or False)
    assert h.orch.check_wedged_executors() == []          # the pool could not kill it
    assert pool_kills == ["exec-1"] and f.killed == []
    assert h.metrics.executor_wedge_kills == 0
    h.orch.pool = types.SimpleNamespace(kill_executor=lambda eid: pool_kills.append(eid) or True)
    assert h.orch.check_wedged_executors() == ["exec-1"]
    assert h.metrics.executor_wedge_kills == 1


async def test_wedge_backstop_stays_on_with_an_unlimited_budget(make_harness):
    # callDeadlineMs=0 (unlimited budget) derives a 5,000 ms stall timeout
    # rather than switching the backstop off.
    h = await make_harness(env={"CALL_DEADLINE_MS": "0"})
    assert h.orch.stall_timeout_ms == 5000
    ex = h.fake.executors["exec-1"]
    ex.running_call_id = "t/0"
    ex.last_scheduler_active_at_ms = h.clock.mono() - 4_000
    h.orch.tick()
    assert h.fake.killed == []                   # not yet past 5 s
    ex.last_scheduler_active_at_ms = h.clock.mono() - 5_001
    h.orch.tick()
    assert h.fake.killed == ["exec-1"]
    assert h.metrics.executor_wedge_kills == 1


async def test_stalled_executor_is_not_selected_for_new_calls(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"), env={"CALL_DEADLINE_MS": "1000"})
    f = h.fake
    ex = f.executors["exec-1"]                   # exec-1 would win the tie on its id
    ex.running_call_id = "other/0"
    ex.last_scheduler_active_at_ms = h.clock.mono() - 6001
    f.kill_result = False
    h.orch.tick()                                # snapshot sync carries the stall
    assert h.disp.executors.filter_reasons(h.clock.mono())["exec-1"] == "stalled"
    h.submit("t", [("add", [1, 2])])
    sent = (await h.executed(1))[0]
    assert sent.executor_id == "exec-2"
    f.complete("t/0", 3)
    assert outputs(await h.terminal("t")) == [3]


# ---- executors, readiness ------------------------------------------------------------


async def test_first_healthy_executor_makes_the_worker_ready(make_harness):
    h = await make_harness(executors=())
    ready: list = []
    h.orch._on_ready = lambda: ready.append(h.core.ready)
    assert not h.core.ready
    h.submit("t", [("add", [1, 2])])             # accepted, but nowhere to run yet
    await settle()
    assert h.fake.executes == []
    assert h.disp.tasks.ready_count("t") == 1
    h.fake.attach("exec-7")
    assert ready == [True]
    assert h.metrics.executors_healthy == 1
    sent = (await h.executed(1))[0]
    assert sent.executor_id == "exec-7"
    h.fake.attach("exec-8")
    assert ready == [True]                       # only the first one
    h.fake.complete("t/0", 3)
    assert outputs(await h.terminal("t")) == [3]


# ---- WatchTasks subscriptions -----------------------------------------------------------


def _drain(sub) -> list:
    out = []
    while not sub.queue.empty():
        out.append(sub.queue.get_nowait())
    return out


async def test_watchers_get_submit_and_terminal_updates(make_harness):
    h = await make_harness()
    f = h.fake
    snap = h.orch.request_task_slot("w", 5000)
    assert snap.state == TaskState.ALLOCATED
    sub = h.orch.subscriptions.attach(["w"])
    other = h.orch.subscriptions.attach(["unrelated"])
    h.submit("w", [("add", [1, 2])], slot_id=snap.slot_id)
    [running] = _drain(sub)
    assert (running.task_id, running.slot_id, running.state) == ("w", snap.slot_id, TaskState.RUNNING)
    await h.executed(1)
    f.complete("w/0", 3)
    await h.terminal("w")
    [done] = _drain(sub)
    assert done.task_id == "w"
    assert done.state == TaskState.SUCCEEDED and done.is_terminal
    assert [bytes(o) for o in done.result.outputs] == [b"3"]
    assert _drain(other) == []
    assert h.orch.subscriptions.watched("w")


async def test_watchers_of_an_expired_reservation_learn_it_is_gone(make_harness):
    h = await make_harness()
    h.orch.request_task_slot("gone", 1000)
    h.orch.request_task_slot("kept", 1000)
    sub = h.orch.subscriptions.attach(["gone"])
    h.clock.advance(999)
    h.orch.tick()
    assert _drain(sub) == []
    h.submit("kept", [("add", [1, 1])])          # submitted in time: activated, not gone
    await h.executed(1)
    h.clock.advance(1)
    h.orch.tick()
    assert _drain(sub) == [(GONE, "gone")]
    with pytest.raises(NotFoundError):
        h.orch.get_task_result("gone")
    assert h.state("kept") == TaskState.RUNNING


async def test_watch_disconnect_grace_fails_the_task_and_cancels_its_calls(make_harness):
    h = await make_harness(env={"WATCH_DISCONNECT_GRACE_MS": "1000"})
    f = h.fake
    h.submit("t", [("add", [1, 2])])
    sub = h.orch.subscriptions.attach(["t"])
    await h.executed(1)
    h.orch.subscriptions.detach(sub, disconnected=True)
    h.clock.advance(999)
    h.orch.tick()
    assert h.state("t") == TaskState.RUNNING
    h.clock.advance(1)
    h.orch.tick()
    res = h.orch.get_task_result("t")
    assert (res.state, res.result.failure_code, res.result.retryable) == (
        TaskState.FAILED, "WATCH_DISCONNECTED", False)
    await until(lambda: f.cancels, what="CancelCall")
    assert [(c.call_id, c.attempt_seq) for c in f.cancels] == [("t/0", 1)]


async def test_reattaching_within_grace_keeps_the_task(make_harness):
    h = await make_harness(env={"WATCH_DISCONNECT_GRACE_MS": "1000"})
    h.submit("t", [("add", [1, 2])])
    sub = h.orch.subscriptions.attach(["t"])
    await h.executed(1)
    h.orch.subscriptions.detach(sub, disconnected=True)
    h.clock.advance(500)
    sub2 = h.orch.subscriptions.attach(["t"])
    h.clock.advance(5000)
    h.orch.tick()
    assert h.state("t") == TaskState.RUNNING
    h.fake.complete("t/0", 3)
    await h.terminal("t")
    assert [s.state for s in _drain(sub2)] == [TaskState.SUCCEEDED]


# ---- statistics, drain -----------------------------------------------------------------


async def test_task_statistic_uses_the_injected_wall_clock(make_harness):
    h = await make_harness()
    h.submit("t", [("add", [1, 2])])
    await h.executed(1)
    h.clock.advance(250)
    h.fake.complete("t/0", 3)
    res = await h.terminal("t")
    st = res.result.statistic
    assert (st.accepted_at_ms, st.finished_at_ms, st.calls_ms) == (WALL0, WALL0 + 250, 250)
    assert (st.builder_ms, st.plugin_ms) == (0, 0)


async def test_drain_refuses_new_reservations_and_waits_for_running_tasks(make_harness):
    h = await make_harness()
    h.submit("t", [("add", [1, 2])])
    await h.executed(1)
    h.orch.set_draining()
    with pytest.raises(UnavailableError):
        h.orch.request_task_slot("late", 1000)
    assert await h.orch.wait_drain(0.02) is False
    waiter = asyncio.ensure_future(h.orch.wait_drain(5.0))
    await settle()
    assert not waiter.done()
    h.fake.complete("t/0", 3)
    assert await asyncio.wait_for(waiter, 2.0) is True
    assert h.core.active_task_count() == 0
