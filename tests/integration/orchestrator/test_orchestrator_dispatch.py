"""Dispatch path of the Orchestrator (Go: orchestrator_dispatch_test): a callList
task is built, its calls are bound and sent as ExecuteCall, completions come
back (in any order, in one chunk) and the task converges with its outputs in
call-list order."""
from __future__ import annotations

from blockx.core.types import TaskState

from .harness import outputs, settle, until


async def test_call_list_execute_payload_and_ordered_outputs(make_harness):
    h = await make_harness(env={"CALL_DEADLINE_MS": "2500"})
    snap = h.submit("t1", [("add", [1, 2]), ("echo", [{"b": 1, "a": [True, None]}]), ("add", [3, 4])])
    assert snap.state == TaskState.RUNNING
    assert h.metrics.tasks_submitted == 1

    sent = await h.executed(3)
    assert [s.call_id for s in sent] == ["t1/0", "t1/1", "t1/2"]
    assert {s.executor_id for s in sent} == {"exec-1"}
    assert sent[0].payload == {
        "taskId": "t1", "functionId": "add", "functionCodeDigest": h.digest("add"),
        "entrySelector": "main", "args": [1, 2], "parentCallId": "", "callBudgetMs": 2500,
        "attemptSeq": 1,
    }
    # args leave the builder canonical (sorted keys) and are spliced verbatim
    assert sent[1].payload["args"] == [{"a": [True, None], "b": 1}]
    assert sent[1].payload["functionCodeDigest"] == h.digest("echo")
    assert h.fake.trace[:2] == [("bind", "t1/0", "exec-1"), ("execute", "t1/0", "exec-1", 1)]
    assert h.metrics.calls_dispatched == 3
    assert h.disp.tasks.call_state("t1/0") == "RUNNING"

    # Completions arrive out of order and in one chunk.
    f = h.fake
    f.deliver("exec-1", [f.completed("t1/2", 7), f.completed("t1/0", 3),
                         f.completed("t1/1", {"a": [True, None], "b": 1})])
    res = await h.terminal("t1")
    assert res.state == TaskState.SUCCEEDED
    assert res.result.failure_code == ""
    assert outputs(res) == [3, {"a": [True, None], "b": 1}, 7]
    st = res.result.statistic
    assert (st.call_count, st.calls_failed, st.call_retries, st.cache_hits) == (3, 0, 0, 0)
    assert h.metrics.calls_completed == 3
    assert h.metrics.tasks_terminal[("SUCCEEDED", "")] == 1
    # Every reservation was given back; the dispatcher and the runtime forgot the task.
    assert [t for t in f.trace if t[0] == "unbind"] == [
        ("unbind", "t1/2", "exec-1"), ("unbind", "t1/0", "exec-1"), ("unbind", "t1/1", "exec-1")]
    assert f.live_reservations() == {}
    await settle()
    assert not ("t1" in h.disp.tasks)
    assert "t1" not in h.orch._runtimes
    assert f.cancels == []


async def test_outputs_follow_call_list_order_across_separate_chunks(make_harness):
    h = await make_harness(capacity=8)
    h.submit("t2", [("add", [i, i]) for i in range(5)])
    await h.executed(5)
    for cid, out in (("t2/3", 6), ("t2/1", 2), ("t2/4", 8), ("t2/0", 0)):
        h.fake.complete(cid, out)
    await settle()
    assert h.state("t2") == TaskState.RUNNING   # one call still running
    h.fake.complete("t2/2", 4)
    res = await h.terminal("t2")
    assert outputs(res) == [0, 2, 4, 6, 8]


async def test_identical_calls_are_dispatched_once(make_harness):
    """Singleflight: a second call with the same (function, digest, args) waits
    for the first and shares its output; only one ExecuteCall goes out."""
    h = await make_harness()
    h.submit("t3", [("add", [1, 1]), ("add", [1, 1]), ("add", [2, 2])])
    await h.executed(2)
    await settle()
    assert [s.call_id for s in h.fake.executes] == ["t3/0", "t3/2"]
    h.fake.deliver("exec-1", [h.fake.completed("t3/0", 2), h.fake.completed("t3/2", 4)])
    res = await h.terminal("t3")
    assert outputs(res) == [2, 2, 4]
    assert res.result.statistic.cache_hits == 1
    assert h.metrics.calls_dispatched == 2


async def test_calls_spread_over_executors_within_capacity(make_harness):
    """Filter -> Score over the fake snapshots: two executors with 2 contexts
    each take 4 calls; the fifth waits until a context frees."""
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=2)
    h.submit("t4", [("add", [i, 0]) for i in range(5)])
    await h.executed(4)
    await settle()
    assert len(h.fake.executes) == 4
    per = {}
    for s in h.fake.executes:
        per[s.executor_id] = per.get(s.executor_id, 0) + 1
    assert per == {"exec-1": 2, "exec-2": 2}
    first = h.fake.executes[0]
    h.fake.complete(first.call_id, 0)
    await h.executed(5)
    assert h.fake.executes[4].call_id == "t4/4"
    assert h.fake.executes[4].executor_id == first.executor_id
    for s in h.fake.executes[1:]:
        h.fake.complete(s.call_id, int(s.call_id[-1]))
    res = await h.terminal("t4")
    assert outputs(res) == [0, 1, 2, 3, 4]


async def test_unknown_function_fails_the_calls_phase_before_dispatch(make_harness):
    h = await make_harness()
    h.submit("t5", [("add", [1, 2]), ("nope", [])])
    res = await h.terminal("t5")
    assert res.state == TaskState.FAILED
    assert res.result.failure_code == "CALL_FAILED"
    assert "'nope' not found" in res.result.failure_message
    assert h.fake.executes == []
    await until(lambda: not ("t5" in h.disp.tasks), what="dispatcher forgot t5")

