"""Bind and ExecuteCall send failures (Go: orchestrator_send_failure_test).

- a failed bind is retried without consuming an attempt;
- OutboxFull / ExecutorGone / OutboxClosed on ExecuteCall fail the attempt
  retryably (the reservation is released, the call retried after backoff);
- FrameTooLarge is final (the same args never fit);
- CallNotBound means a stale attempt: nothing is fed back."""
from __future__ import annotations

import asyncio

import pytest

from blockx._fast.errors import FrameTooLarge, OutboxClosed, OutboxFull
from blockx.adapters.executor.errors import BindError, CallNotBound, ExecutorGone
from blockx.core.types import TaskState

from .harness import outputs, settle, until


def _ops(trace, *kinds):
    return [t for t in trace if t[0] in kinds]


async def test_bind_failure_is_retried_without_consuming_an_attempt(make_harness):
    h = await make_harness()
    f = h.fake
    f.bind_faults.append(BindError("no free context", call_id="t/0", executor_id="exec-1",
                                   reason="no_context"))
    h.submit("t", [("add", [1, 2])])
    # The failed bind re-queues the call at once, but the executor view stays
    # unhealthy until the next snapshot sync, so nothing is sent yet.
    await until(lambda: h.disp.tasks.call_state("t/0") == "READY" and h.disp.tasks.ready_count("t") == 1,
                what="call re-queued after the failed bind")
    await settle()
    assert f.executes == []
    assert h.disp.tasks.call_attempts("t/0") == 0
    assert _ops(f.trace, "bind", "execute", "unbind") == [("bind", "t/0", "exec-1")]

    h.orch.tick()  # snapshot sync: exec-1 is healthy again
    sent = await h.executed(1)
    assert sent[0].payload["attemptSeq"] == 1
    assert _ops(f.trace, "bind", "execute") == [
        ("bind", "t/0", "exec-1"), ("bind", "t/0", "exec-1"), ("execute", "t/0", "exec-1", 1)]
    f.complete("t/0", 3)
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED
    assert outputs(res) == [3]
    assert res.result.statistic.call_retries == 0
    assert h.metrics.calls_dispatched == 1


async def test_bind_failure_moves_the_call_to_another_executor(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"))
    f = h.fake
    f.bind_faults.append(BindError("executor gone", executor_id="exec-1", reason="executor_unknown"))
    h.submit("t", [("add", [1, 2])])
    sent = await h.executed(1)
    assert (sent[0].executor_id, sent[0].payload["attemptSeq"]) == ("exec-2", 1)
    assert _ops(f.trace, "bind") == [("bind", "t/0", "exec-1"), ("bind", "t/0", "exec-2")]
    f.complete("t/0", 3)
    assert outputs(await h.terminal("t")) == [3]


async def test_a_failed_bind_is_not_counted_as_a_retry(make_harness):
    """blockx_calls_retried counts attempts re-queued after a retryable failure;
    the immediate re-arm after a failed bind consumed no attempt."""
    h = await make_harness(executors=("exec-1", "exec-2"))
    h.fake.bind_faults.append(BindError("gone", executor_id="exec-1", reason="executor_unknown"))
    h.submit("t", [("add", [1, 2])])
    await h.executed(1)
    h.fake.complete("t/0", 3)
    res = await h.terminal("t")
    assert res.result.statistic.call_retries == 0
    assert h.metrics.calls_retried == res.result.statistic.call_retries


@pytest.mark.parametrize("exc, kind", [
    (OutboxFull("outbox full (256 frames)"), "OUTBOX_FULL"),
    (ExecutorGone("exec-1", "connection lost"), "EXECUTOR_LOST"),
    (OutboxClosed("outbox closed"), "EXECUTOR_LOST"),
])
async def test_retryable_send_failure_releases_and_retries_the_call(make_harness, exc, kind):
    h = await make_harness()
    f = h.fake
    f.execute_faults.append(exc)
    h.submit("t", [("add", [1, 2])], backoff_ms=150)
    await until(lambda: ("execute", "t/0", "exec-1", 1) in f.trace, what="first send")
    # The attempt failed: reservation released, call backing off.
    assert _ops(f.trace, "bind", "execute", "unbind") == [
        ("bind", "t/0", "exec-1"), ("execute", "t/0", "exec-1", 1), ("unbind", "t/0", "exec-1")]
    assert h.disp.tasks.call_state("t/0") == "READY"
    assert h.metrics.calls_retried == 1
    assert h.metrics.calls_dispatched == 0

    sent = await h.executed(1)
    # after the backoff (base 150 ms, 2^0, no jitter; loop time has ms resolution)
    assert f.execute_times[1] - f.execute_times[0] >= 0.150 - 0.002
    assert (sent[0].executor_id, sent[0].payload["attemptSeq"]) == ("exec-1", 2)
    assert h.metrics.calls_dispatched == 1
    f.complete("t/0", 3)
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED
    assert outputs(res) == [3]
    assert res.result.statistic.call_retries == 1
    assert f.live_reservations() == {}


async def test_send_failures_exhausting_attempts_fail_the_task_retryably(make_harness):
    h = await make_harness()
    f = h.fake
    f.execute_faults.extend([OutboxFull("full"), OutboxFull("still full")])
    h.submit("t", [("add", [1, 2])], max_attempts=2, backoff_ms=1)
    res = await h.terminal("t")
    assert res.state == TaskState.FAILED
    assert res.result.failure_code == "CALL_FAILED"
    assert res.result.retryable is True
    assert "after 2 attempt(s): OUTBOX_FULL" in res.result.failure_message
    assert _ops(f.trace, "execute") == [("execute", "t/0", "exec-1", 1), ("execute", "t/0", "exec-1", 2)]
    assert f.executes == []
    assert f.live_reservations() == {}


async def test_frame_too_large_is_a_final_failure(make_harness):
    h = await make_harness()
    f = h.fake
    f.execute_faults.append(FrameTooLarge("frame of 17000000 bytes exceeds 16777216"))
    h.submit("t", [("echo", ["x" * 64])], backoff_ms=1)
    res = await h.terminal("t")
    assert res.state == TaskState.FAILED
    assert res.result.failure_code == "CALL_FAILED"
    assert res.result.retryable is False
    assert "after 1 attempt(s): ARGS_TOO_LARGE" in res.result.failure_message
    assert "do not fit in one frame" in res.result.failure_message
    assert res.result.statistic.calls_failed == 1
    assert res.result.statistic.call_retries == 0
    await settle()
    assert _ops(f.trace, "bind", "execute", "unbind") == [
        ("bind", "t/0", "exec-1"), ("execute", "t/0", "exec-1", 1), ("unbind", "t/0", "exec-1")]
    assert h.metrics.calls_retried == 0
    assert h.metrics.calls_dispatched == 0
    assert f.live_reservations() == {}


async def test_frame_too_large_under_continue_keeps_the_other_outputs(make_harness):
    h = await make_harness()
    f = h.fake
    f.execute_faults.extend([None, FrameTooLarge("too big")])
    h.submit("t", [("add", [1, 1]), ("echo", ["big"]), ("add", [2, 2])], policy="CONTINUE")
    await until(lambda: len(f.executes) == 2, what="the two other calls")
    assert [s.call_id for s in f.executes] == ["t/0", "t/2"]
    f.deliver("exec-1", [f.completed("t/0", 2), f.completed("t/2", 4)])
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED
    assert outputs(res) == [2, 4]
    assert res.result.statistic.calls_failed == 1


async def test_call_not_bound_is_skipped_without_feeding_a_failure(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"))
    f = h.fake
    f.execute_faults.append(CallNotBound("t/0", "exec-1", "it was cancelled and is draining"))
    h.submit("t", [("add", [1, 2])], backoff_ms=1)
    await until(lambda: ("execute", "t/0", "exec-1", 1) in f.trace, what="the skipped send")
    await asyncio.sleep(0.01)   # well past the 1 ms backoff: no retry was armed
    await settle()
    assert _ops(f.trace, "bind", "execute", "unbind") == [
        ("bind", "t/0", "exec-1"), ("execute", "t/0", "exec-1", 1)]
    assert h.disp.tasks.call_state("t/0") == "RUNNING"
    assert h.disp.tasks.call_attempts("t/0") == 1
    assert h.metrics.calls_dispatched == 0
    assert h.metrics.calls_retried == 0
    assert h.state("t") == TaskState.RUNNING
    # The attempt is accounted to exec-1: its loss retries the call elsewhere.
    f.lose("exec-1")
    sent = await h.executed(1)
    assert (sent[0].executor_id, sent[0].payload["attemptSeq"]) == ("exec-2", 2)
    f.complete("t/0", 3)
    assert outputs(await h.terminal("t")) == [3]


async def test_unexpected_send_error_fails_the_call_instead_of_stranding_it(make_harness):
    h = await make_harness(capacity=1)
    f = h.fake
    h.submit("t", [("add", [1, 1]), ("add", [2, 2])], max_attempts=1)
    await h.executed(1)
    f.execute_faults.append(TypeError("Type is not JSON serializable: set"))
    f.complete("t/0", 2)          # frees the context: the epilogue dispatches t/1
    res = await h.terminal("t", timeout=1.0)
    assert res.state == TaskState.FAILED
    assert res.result.failure_code == "CALL_FAILED"
