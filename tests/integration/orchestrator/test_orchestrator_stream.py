"""Streaming production through the orchestrator (rangeScan with streamBuild on):
batches are committed under the credit window, BatchSettled returns a credit,
StopCallProduction (FAST_FAIL) stops the producer, outputs keep row order."""
from __future__ import annotations

import orjson

from blockx.core.types import FunctionCall, SubmitTaskRequest, TaskState
from blockx.protocol import messages as m

from .harness import outputs, settle, until


def _tweak(rows: int, window: int):
    def tweak(cfg):
        cfg.stream_build.batch_max_rows = rows
        cfg.stream_build.max_outstanding_batches = window
    return tweak


def _submit_range(h, task_id: str, start: int, stop: int, **kw):
    payload = orjson.dumps({"functionId": "echo", "start": start, "stop": stop})
    return h.orch.submit_task(SubmitTaskRequest(task_id=task_id,
                                                function_call=FunctionCall("rangeScan", payload), **kw))


async def test_stream_batches_follow_the_credit_window(make_harness):
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true"}, tweak=_tweak(2, 1), capacity=8)
    f = h.fake
    _submit_range(h, "s", 0, 5)
    await h.executed(2)
    await settle()
    # One outstanding batch: batch 1 waits for batch 0 to settle.
    assert [s.call_id for s in f.executes] == ["s/0.0", "s/0.1"]
    assert [s.payload["args"] for s in f.executes] == [[0], [1]]
    f.complete("s/0.1", 1)
    await settle()
    assert len(f.executes) == 2
    f.complete("s/0.0", 0)
    await h.executed(4)
    assert [s.call_id for s in f.executes[2:]] == ["s/1.0", "s/1.1"]
    f.deliver("exec-1", [f.completed("s/1.0", 2), f.completed("s/1.1", 3)])
    await h.executed(5)
    assert f.executes[4].call_id == "s/2.0"
    f.complete("s/2.0", 4)
    res = await h.terminal("s")
    assert res.state == TaskState.SUCCEEDED
    assert outputs(res) == [0, 1, 2, 3, 4]
    assert res.result.statistic.call_count == 5
    await settle()
    assert not ("s" in h.disp.tasks)


async def test_fast_fail_stops_stream_production(make_harness):
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true"}, tweak=_tweak(2, 2), capacity=8)
    f = h.fake
    _submit_range(h, "s", 0, 100)
    await h.executed(4)
    await settle()
    assert [s.call_id for s in f.executes] == ["s/0.0", "s/0.1", "s/1.0", "s/1.1"]
    rt = h.orch._runtimes["s"]
    producer = rt.producer
    assert producer is not None and not producer.done()
    f.fail("s/0.0", m.USER_ERROR, False, "bad row")
    await until(lambda: producer.done(), what="producer stopped")
    f.deliver("exec-1", [f.completed("s/0.1", 1), f.completed("s/1.0", 2), f.completed("s/1.1", 3)])
    res = await h.terminal("s")
    assert res.state == TaskState.FAILED
    assert res.result.failure_code == "CALL_FAILED"
    assert "bad row" in res.result.failure_message
    assert outputs(res) == []
    await settle()
    assert len(f.executes) == 4                  # nothing produced after the stop


async def test_task_deadline_stops_the_producer_and_cancels_calls(make_harness):
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true"}, tweak=_tweak(2, 1))
    f = h.fake
    _submit_range(h, "s", 0, 100, task_timeout_ms=1000)
    await h.executed(2)
    producer = h.orch._runtimes["s"].producer
    h.clock.advance(1000)
    h.orch.tick()
    assert h.orch.get_task_result("s").result.failure_code == "TIMED_OUT"
    await until(lambda: len(f.cancels) == 2 and producer.done(), what="cancels + producer stop")
    assert sorted(c.call_id for c in f.cancels) == ["s/0.0", "s/0.1"]
    await settle()
    assert len(f.executes) == 2
    assert not ("s" in h.disp.tasks)
