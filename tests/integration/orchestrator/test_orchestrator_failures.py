"""Call failures, retries, failure policies, executor loss and the task deadline
as the orchestrator executes them: ArmCallRetry timers, re-dispatch with the next
attemptSeq, FAST_FAIL / CONTINUE convergence, EXECUTOR_LOST retries elsewhere,
and the terminal path (CancelCall for in-flight calls, runtime dropped)."""
from __future__ import annotations

import asyncio

from blockx.core.types import TaskState
from blockx.protocol import messages as m

from .harness import outputs, settle, until


async def test_retryable_call_failure_is_redispatched_after_the_backoff(make_harness):
    h = await make_harness()
    f = h.fake
    loop = asyncio.get_running_loop()
    h.submit("t", [("add", [1, 2]), ("add", [3, 4])], backoff_ms=150)
    await h.executed(2)
    f.fail("t/0", m.IO_ERROR, True, "backend hiccup")
    t_fail = loop.time()
    assert h.disp.tasks.call_state("t/0") == "READY"
    assert h.metrics.calls_retried == 1
    assert h.metrics.calls_failed[m.IO_ERROR] == 1
    await settle()
    assert len(f.executes) == 2          # still backing off
    await h.executed(3)
    assert loop.time() - t_fail >= 0.150 - 0.002
    retry = f.executes[2]
    assert (retry.call_id, retry.executor_id) == ("t/0", "exec-1")
    assert retry.payload == {**f.executes[0].payload, "attemptSeq": 2}
    # A late frame of the failed attempt changes nothing.
    f.deliver("exec-1", [f.completed("t/0", 999, attempt=1), f.failed("t/0", attempt=1)])
    assert h.disp.tasks.call_state("t/0") == "RUNNING"
    f.deliver("exec-1", [f.completed("t/0", 3), f.completed("t/1", 7)])
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED
    assert outputs(res) == [3, 7]
    st = res.result.statistic
    assert (st.call_count, st.calls_failed, st.call_retries) == (2, 0, 1)


async def test_retries_exhausted_fail_the_task_with_the_last_error(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("add", [1, 2])], max_attempts=2, backoff_ms=1)
    await h.executed(1)
    f.fail("t/0", m.IO_ERROR, True, "first")
    await h.executed(2)
    assert f.executes[1].payload["attemptSeq"] == 2
    f.fail("t/0", m.IO_ERROR, True, "second")
    res = await h.terminal("t")
    assert res.state == TaskState.FAILED
    assert res.result.failure_code == "CALL_FAILED"
    assert res.result.retryable is True
    assert res.result.failure_message == (
        "call t/0 (function add) failed after 2 attempt(s): IO_ERROR: second")
    assert outputs(res) == []
    st = res.result.statistic
    assert (st.calls_failed, st.call_retries) == (1, 1)
    assert h.metrics.calls_failed[m.IO_ERROR] == 2
    assert h.metrics.tasks_terminal[("FAILED", "CALL_FAILED")] == 1


async def test_fast_fail_stops_dispatching_and_drains_the_queue(make_harness):
    """FAST_FAIL: the first final root failure stops dispatching; calls
    already in flight run to their end (no CancelCall), queued ones are cancelled
    once nothing is in flight, and the task fails without outputs."""
    h = await make_harness(capacity=2)
    f = h.fake
    h.submit("t", [("add", [1, 0]), ("add", [2, 0]), ("add", [3, 0]), ("add", [4, 0])])
    await h.executed(2)
    f.fail("t/0", m.USER_ERROR, False, "ZeroDivisionError: division by zero")
    await settle()
    assert [s.call_id for s in f.executes] == ["t/0", "t/1"]   # t/2, t/3 never dispatched
    assert h.disp.tasks.call_state("t/1") == "RUNNING"
    assert f.cancels == [] and not [t for t in f.trace if t[0] == "mark_draining"]
    assert h.state("t") == TaskState.RUNNING
    f.complete("t/1", 2)
    res = await h.terminal("t")
    assert res.state == TaskState.FAILED
    assert res.result.failure_code == "CALL_FAILED"
    assert res.result.retryable is False
    assert res.result.failure_message == ("call t/0 (function add) failed after 1 attempt(s): "
                                          "USER_ERROR: ZeroDivisionError: division by zero")
    assert outputs(res) == []
    st = res.result.statistic
    assert (st.call_count, st.calls_failed, st.call_retries) == (4, 1, 0)
    await settle()
    assert f.cancels == []
    assert [s.call_id for s in f.executes] == ["t/0", "t/1"]
    assert f.live_reservations() == {}


async def test_fast_fail_retryable_failure_after_stop_is_not_retried(make_harness):
    """Once a task stopped dispatching, a retryable failure of another in-flight
    call is final too (no new attempt is admitted)."""
    h = await make_harness(capacity=2)
    f = h.fake
    h.submit("t", [("add", [1, 0]), ("add", [2, 0])], backoff_ms=1)
    await h.executed(2)
    f.fail("t/0", m.USER_ERROR, False)
    f.fail("t/1", m.EXECUTOR_LOST, True)
    res = await h.terminal("t")
    assert res.result.failure_code == "CALL_FAILED"
    assert res.result.statistic.call_retries == 0
    await asyncio.sleep(0.005)
    assert len(f.executes) == 2
    assert h.metrics.calls_retried == 0


async def test_continue_policy_skips_failed_calls(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("add", [1, 0]), ("add", [2, 0]), ("add", [3, 0])], policy="CONTINUE",
             max_attempts=2, backoff_ms=1)
    await h.executed(3)
    f.fail("t/1", m.USER_ERROR, False)          # final at once
    f.fail("t/2", m.IO_ERROR, True)             # retried ...
    await h.executed(4)
    f.fail("t/2", m.IO_ERROR, True)             # ... and exhausted
    f.complete("t/0", 1)
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED
    assert res.result.failure_code == ""
    assert outputs(res) == [1]
    st = res.result.statistic
    assert (st.call_count, st.calls_failed, st.call_retries) == (3, 2, 1)
    assert f.cancels == []


async def test_executor_lost_retries_in_flight_calls_on_another_executor(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=2)
    f = h.fake
    h.submit("t", [("add", [i, 0]) for i in range(4)], backoff_ms=1)
    await h.executed(4)
    on1 = sorted(s.call_id for s in f.executes if s.executor_id == "exec-1")
    on2 = sorted(s.call_id for s in f.executes if s.executor_id == "exec-2")
    assert len(on1) == len(on2) == 2
    # exec-2 finishes one call, freeing a context there.
    f.complete(on2[0], int(on2[0][-1]))
    f.lose("exec-1", "connection reset")
    for cid in on1:
        assert h.disp.tasks.call_state(cid) == "READY"
    assert h.metrics.calls_retried == 2
    # Two contexts on exec-2 (one busy): the lost calls go there as attempt 2,
    # one after the other.
    await h.executed(5)
    first_retry = f.executes[4]
    assert (first_retry.executor_id, first_retry.payload["attemptSeq"]) == ("exec-2", 2)
    assert first_retry.call_id in on1
    f.complete(first_retry.call_id, int(first_retry.call_id[-1]))
    await h.executed(6)
    second = f.executes[5]
    assert (second.executor_id, second.payload["attemptSeq"]) == ("exec-2", 2)
    assert {first_retry.call_id, second.call_id} == set(on1)
    f.deliver("exec-2", [f.completed(second.call_id, int(second.call_id[-1])),
                         f.completed(on2[1], int(on2[1][-1]))])
    res = await h.terminal("t")
    assert outputs(res) == [0, 1, 2, 3]
    assert res.result.statistic.call_retries == 2
    assert h.disp.executors.view("exec-1") is None


async def test_heartbeat_timeout_on_tick_loses_the_executor(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=1)
    f = h.fake
    h.submit("t", [("add", [1, 0])], backoff_ms=1)
    sent = await h.executed(1)
    assert sent[0].executor_id == "exec-1"
    f.heartbeat_timeouts.append("exec-1")
    h.orch.tick()
    assert h.metrics.executor_heartbeat_timeouts == 1
    retry = (await h.executed(2))[1]
    assert (retry.executor_id, retry.payload["attemptSeq"]) == ("exec-2", 2)
    f.complete("t/0", 1)
    assert outputs(await h.terminal("t")) == [1]


async def test_task_deadline_during_calls_cancels_in_flight_calls(make_harness):
    h = await make_harness(capacity=2)
    f = h.fake
    h.submit("t", [("add", [1, 0]), ("add", [2, 0]), ("add", [3, 0])], timeout_ms=1000)
    await h.executed(2)
    f.complete("t/0", 1)            # t/0 done, t/1 and t/2 in flight
    await h.executed(3)
    f.wait_io("t/2", "r1", {"op": "sleep", "ms": 60000})   # t/2 WAITING on a slow IO
    await settle()
    assert h.disp.tasks.call_state("t/2") == "WAITING"
    rt = h.orch._runtimes["t"]
    scope = rt.io_scope

    h.clock.advance(999)
    h.orch.tick()
    assert h.state("t") == TaskState.RUNNING
    h.clock.advance(1)
    h.orch.tick()
    res = h.orch.get_task_result("t")
    assert res.state == TaskState.FAILED
    assert res.result.failure_code == "TIMED_OUT"
    assert res.result.retryable is True
    assert "during phase CALLS" in res.result.failure_message
    assert outputs(res) == []
    assert h.metrics.tasks_terminal[("FAILED", "TIMED_OUT")] == 1

    await until(lambda: len(f.cancels) == 2, what="CancelCall for both in-flight calls")
    assert sorted((c.call_id, c.executor_id, c.attempt_seq) for c in f.cancels) == [
        ("t/1", "exec-1", 1), ("t/2", "exec-1", 1)]
    assert {c.reason for c in f.cancels} == {"task FAILED"}
    # Each reservation is marked draining before its CancelCall goes out.
    for c in ("t/1", "t/2"):
        i = f.trace.index(("mark_draining", c, "exec-1"))
        assert f.trace.index(("cancel", c, "exec-1", 1)) > i
    assert f.live_reservations() == {"exec-1": ["t/1", "t/2"]}   # until their terminal frames
    # Runtime dropped, dispatcher forgot the task, the IO scope is closed.
    assert "t" not in h.orch._runtimes
    assert not ("t" in h.disp.tasks)
    await settle()
    assert scope.closed
    # The pending IO of t/2 was cancelled with the scope and answered with an error.
    [r] = f.resumes_for("t/2")
    assert r.request_id == "r1"
    assert r.payload["resumeKind"] == "io"
    assert r.payload["error"]["errorKind"] == "IO_ERROR"
    assert "cancelled because the task finished" in r.payload["error"]["errorMessage"]
    # The executor's late terminal frames release the contexts and change nothing.
    f.deliver("exec-1", [f.completed("t/1", 2), f.failed("t/2", m.CANCELLED)])
    assert f.live_reservations() == {}
    assert h.orch.get_task_result("t").result.failure_code == "TIMED_OUT"
    assert h.core.active_task_count() == 0


async def test_task_deadline_while_a_retry_is_armed(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("add", [1, 0])], timeout_ms=500, backoff_ms=30)
    await h.executed(1)
    f.fail("t/0", m.IO_ERROR, True)
    h.clock.advance(500)
    h.orch.tick()
    assert h.orch.get_task_result("t").result.failure_code == "TIMED_OUT"
    await asyncio.sleep(0.05)          # the armed retry fires into a forgotten task
    await settle()
    assert len(f.executes) == 1
    assert f.cancels == []              # nothing was in flight
    assert not ("t" in h.disp.tasks)
