"""The phase runner around the Calls phase: builder lookup and failures, the
plugin, phase admission, empty call lists and idempotent submission."""
from __future__ import annotations

import orjson

from blockx.core.types import FunctionCall, ResultHandler, SubmitTaskRequest, TaskState
from blockx.plugins.writers.devtest import outputs_digest

from .harness import outputs, settle


async def test_writer_plugin_receives_the_outputs(make_harness):
    h = await make_harness()
    h.submit("t", [("add", [1, 2]), ("add", [3, 4])],
             result_handler=ResultHandler("test", orjson.dumps({"expectCount": 2})))
    await h.executed(2)
    h.fake.deliver("exec-1", [h.fake.completed("t/1", 7), h.fake.completed("t/0", 3)])
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED
    [pr] = res.result.plugin_results
    assert (pr.plugin, pr.ok, pr.message) == ("test", True, "2 output(s)")
    assert orjson.loads(pr.details) == {"count": 2, "digest": outputs_digest([b"3", b"7"])}


async def test_failing_writer_plugin_fails_the_task(make_harness):
    h = await make_harness()
    h.submit("t", [("add", [1, 2])],
             result_handler=ResultHandler("test", orjson.dumps({"fail": True, "message": "sink down"})))
    await h.executed(1)
    h.fake.complete("t/0", 3)
    res = await h.terminal("t")
    assert (res.state, res.result.failure_code, res.result.failure_message) == (
        TaskState.FAILED, "PLUGIN_FAILED", "sink down")
    assert outputs(res) == [3]          # the calls did succeed
    assert [(p.plugin, p.ok) for p in res.result.plugin_results] == [("test", False)]


async def test_unknown_writer_plugin(make_harness):
    h = await make_harness()
    h.submit("t", [("add", [1, 2])], result_handler=ResultHandler("kafka"))
    await h.executed(1)
    h.fake.complete("t/0", 3)
    res = await h.terminal("t")
    assert res.result.failure_code == "PLUGIN_FAILED"
    assert "no writer plugin named 'kafka'" in res.result.failure_message


async def test_unknown_builder_and_bad_payload_fail_before_any_dispatch(make_harness):
    h = await make_harness()
    h.orch.submit_task(SubmitTaskRequest(task_id="nb", function_call=FunctionCall("tableScan", b"{}")))
    h.orch.submit_task(SubmitTaskRequest(task_id="bp", function_call=FunctionCall("callList", b'{"calls": 5}')))
    nb = await h.terminal("nb")
    bp = await h.terminal("bp")
    assert nb.result.failure_code == "BUILDER_NOT_FOUND"
    assert "no call builder named 'tableScan'" in nb.result.failure_message
    assert bp.result.failure_code == "BUILDER_FAILED"
    assert '"calls" must be an array' in bp.result.failure_message
    await settle()
    assert h.fake.executes == [] and h.fake.trace == []
    assert h.metrics.tasks_terminal[("FAILED", "BUILDER_NOT_FOUND")] == 1
    assert h.orch._runtimes == {}


async def test_empty_call_list_succeeds_without_dispatch(make_harness):
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true"})
    h.submit("empty", [])
    h.orch.submit_task(SubmitTaskRequest(task_id="stream", function_call=FunctionCall(
        "rangeScan", orjson.dumps({"functionId": "echo", "start": 3, "stop": 3}))))
    for tid in ("empty", "stream"):
        res = await h.terminal(tid)
        assert (res.state, outputs(res), res.result.statistic.call_count) == (TaskState.SUCCEEDED, [], 0)
    assert h.fake.executes == []


async def test_executor_phase_admission_holds_the_second_task(make_harness):
    h = await make_harness(env={"EXECUTOR_TASK_SLOTS": "1"})
    h.submit("a", [("add", [1, 0])])
    h.submit("b", [("add", [2, 0])])
    await h.executed(1)
    await settle()
    assert [s.call_id for s in h.fake.executes] == ["a/0"]
    assert not ("b" in h.disp.tasks)          # b waits for executorSem before registering
    h.fake.complete("a/0", 1)
    await h.executed(2)
    assert h.fake.executes[1].call_id == "b/0"
    h.fake.complete("b/0", 2)
    assert outputs(await h.terminal("b")) == [2]


async def test_repeated_submit_is_idempotent(make_harness):
    h = await make_harness()
    first = h.submit("t", [("add", [1, 2])])
    again = h.submit("t", [("add", [1, 2])])
    assert (first.state, again.state) == (TaskState.RUNNING, TaskState.RUNNING)
    await h.executed(1)
    await settle()
    assert len(h.fake.executes) == 1
    assert h.metrics.tasks_submitted == 1
    h.fake.complete("t/0", 3)
    done = await h.terminal("t")
    after = h.submit("t", [("add", [1, 2])])
    assert after.state == TaskState.SUCCEEDED and outputs(after) == outputs(done) == [3]
    await settle()
    assert len(h.fake.executes) == 1


async def test_the_builders_calls_are_not_kept_once_the_dispatcher_queued_them(make_harness):
    h = await make_harness()
    h.submit("q", [("add", [i, 0]) for i in range(3)])
    await h.executed(1)
    ctx = h.core.get_task_context("q")
    # The core's record keeps the builder outcome for the task's life; the dispatcher
    # holds the queued calls in its own compact form, so the builder's list is empty.
    assert ctx.builder_outcome.calls == []
    assert h.disp.tasks.progress("q") == (3, 0, 0, 0)
    await h.executed(3)
    for i in (2, 0, 1):
        h.fake.complete(f"q/{i}", i)
    assert outputs(await h.terminal("q")) == [0, 1, 2]
