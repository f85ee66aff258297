"""Call metrics count what the dispatcher accepted, not what arrived.

A CallCompleted / CallFailed frame counts in blockx_calls_completed_total /
blockx_calls_failed_total only when DispatcherCore accepts it for the current
attempt: a duplicated frame, or a late frame of an attempt that was already
retried, counts nothing. blockx_calls_retried_total counts the retries the core
armed (the same number as the task statistic's call_retries), whatever the
backoff; a re-arm after a failed bind is not a retry."""
from __future__ import annotations

import asyncio

import pytest

from blockx.adapters.executor.errors import BindError, ExecutorGone
from blockx.core.types import TaskState
from blockx.protocol import messages as m

from .harness import outputs, settle


@pytest.mark.parametrize("same_chunk", [True, False], ids=["same-chunk", "later-chunk"])
async def test_a_duplicated_completion_counts_once(make_harness, same_chunk):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("add", [1, 2])])
    await h.executed(1)
    frame = f.completed("t/0", 3)
    f.deliver("exec-1", [frame, frame] if same_chunk else [frame])
    res = await h.terminal("t")
    if not same_chunk:
        f.deliver("exec-1", [frame])      # after the task converged
    assert outputs(res) == [3]
    assert (h.metrics.calls_dispatched, h.metrics.calls_completed) == (1, 1)


async def test_a_duplicated_final_failure_counts_once(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("add", [1, 0])])
    await h.executed(1)
    frame = f.failed("t/0", m.USER_ERROR, False, "ZeroDivisionError")
    f.deliver("exec-1", [frame, frame])
    res = await h.terminal("t")
    assert res.state == TaskState.FAILED
    assert h.metrics.calls_failed[m.USER_ERROR] == 1
    assert sum(h.metrics.calls_failed.values()) == 1


async def test_late_frames_of_a_retried_attempt_count_nothing(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("add", [1, 2])], backoff_ms=1)
    await h.executed(1)
    f.fail("t/0", m.IO_ERROR, True, "hiccup")
    await h.executed(2)
    assert h.metrics.calls_failed[m.IO_ERROR] == 1
    # Attempt 1 already failed; its late frames are stale.
    f.deliver("exec-1", [f.failed("t/0", m.IO_ERROR, True, attempt=1),
                         f.completed("t/0", 999, attempt=1)])
    assert h.metrics.calls_failed[m.IO_ERROR] == 1
    assert h.metrics.calls_completed == 0
    f.complete("t/0", 3)
    res = await h.terminal("t")
    assert outputs(res) == [3]
    assert (h.metrics.calls_dispatched, h.metrics.calls_completed) == (2, 1)
    assert sum(h.metrics.calls_failed.values()) == 1


async def test_a_retry_without_backoff_is_counted(make_harness):
    """With a zero base backoff the retry fires at once; it is still a retry."""
    def no_backoff(cfg):
        cfg.worker.default_base_backoff_ms = 0
        cfg.dispatcher.base_backoff_ms = 0

    h = await make_harness(tweak=no_backoff)
    f = h.fake
    h.submit("t", [("add", [1, 2])], backoff_ms=0)
    await h.executed(1)
    f.fail("t/0", m.IO_ERROR, True, "hiccup")
    sent = await h.executed(2)
    assert sent[1].payload["attemptSeq"] == 2
    f.complete("t/0", 3)
    res = await h.terminal("t")
    assert res.result.statistic.call_retries == 1
    assert h.metrics.calls_retried == 1


async def test_a_failed_bind_is_not_a_retry_even_with_backoff(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"))
    h.fake.bind_faults.append(BindError("gone", executor_id="exec-1", reason="executor_unknown"))
    h.submit("t", [("add", [1, 2])], backoff_ms=50)
    await h.executed(1)
    h.fake.complete("t/0", 3)
    res = await h.terminal("t")
    assert res.result.statistic.call_retries == 0
    assert h.metrics.calls_retried == 0


async def test_a_stale_resume_send_failure_counts_nothing(make_harness):
    """Attempt 1 waits on IO; its executor is lost (counted once, as
    EXECUTOR_LOST) before the ResumeCall fails to send. That send failure is
    stale for the call's attempt 2 and must not count a second failure."""
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=1)
    f = h.fake
    h.submit("t", [("echo", [1])], backoff_ms=1)
    await h.executed(1)
    f.resume_gate = asyncio.Event()
    f.resume_faults.append(ExecutorGone("exec-1"))
    f.wait_io("t/0", "io-1", {"op": "echo"})
    f.lose("exec-1")
    await h.executed(2)
    f.resume_gate.set()                   # attempt 1's resume now fails: stale
    await settle()
    assert h.disp.tasks.call_attempts("t/0") == 2
    f.complete("t/0", 5)
    assert outputs(await h.terminal("t")) == [5]
    assert dict(h.metrics.calls_failed) == {m.EXECUTOR_LOST: 1}
    assert (h.metrics.calls_dispatched, h.metrics.calls_completed) == (2, 1)
