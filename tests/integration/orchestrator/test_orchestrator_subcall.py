"""Subfunction calls through the orchestrator (Go: orchestrator_subcall_test):
CallWaiting(subcall) -> the child is bound beside its parent (BindSubcall) and
sent with parentCallId and the granted budget -> its result resumes the parent
(ResumeCall resumeKind=subcall); rejections answer the parent with an error;
a failed parent attempt cancels its subtree."""
from __future__ import annotations

import asyncio

import pytest

from blockx.adapters.executor.errors import BindError, ExecutorGone
from blockx.core.types import TaskState
from blockx.protocol import messages as m

from .harness import outputs, settle, until


async def _parent_running(h, task_id="t", args=(4,), **submit):
    h.submit(task_id, [("parent", list(args))], **submit)
    return (await h.executed(1))[0]


async def test_subcall_runs_beside_its_parent_and_resumes_it(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"), env={"CALL_DEADLINE_MS": "3000"})
    f = h.fake
    parent = await _parent_running(h)
    assert parent.payload["callBudgetMs"] == 3000
    pe = parent.executor_id
    f.wait_subcall("t/0", "sub-req-1", "child", [4], granted_budget_ms=700, ancestry=["t/0"])
    assert h.disp.tasks.call_state("t/0") == "WAITING"
    child = (await h.executed(2))[1]
    assert (child.call_id, child.executor_id) == ("t/0/sub-1", pe)
    assert child.payload == {
        "taskId": "t", "functionId": "child", "functionCodeDigest": h.digest("child"),
        "entrySelector": "main", "args": [4], "parentCallId": "t/0", "callBudgetMs": 700,
        "attemptSeq": 1,
    }
    assert ("bind_subcall", "t/0/sub-1", "t/0", pe) in f.trace
    assert not [t for t in f.trace if t[:2] == ("bind", "t/0/sub-1")]

    f.complete("t/0/sub-1", 40, budget_used_ms=5)
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING", what="parent resumed")
    [r] = f.resumes
    assert (r.executor_id, r.call_id, r.request_id, r.sidecar) == (pe, "t/0", "sub-req-1", None)
    assert r.payload == {"resumeKind": "subcall", "result": 40, "budgetUsedMs": 5}
    assert ("unbind", "t/0/sub-1", pe) in f.trace

    f.complete("t/0", 40)
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED
    assert outputs(res) == [40]                      # subcalls never join the outputs
    assert res.result.statistic.call_count == 1
    assert h.metrics.calls_dispatched == 2
    assert f.live_reservations() == {}


async def test_failed_child_resumes_the_parent_with_its_error(make_harness):
    h = await make_harness()
    f = h.fake
    await _parent_running(h)
    f.wait_subcall("t/0", "r1", "child", [4])
    await h.executed(2)
    f.fail("t/0/sub-1", m.IO_ERROR, True, "db down")
    await until(lambda: f.resumes, what="error resume")
    [r] = f.resumes
    assert r.payload["resumeKind"] == "subcall" and "result" not in r.payload
    err = r.payload["error"]
    assert err["errorKind"] == "SUBCALL_FAILED"
    assert err["retryable"] is True                  # the child's retryable
    assert err["childErrorKind"] == "IO_ERROR"
    assert err["errorMessage"] == "subcall child (t/0/sub-1) failed: IO_ERROR: db down"
    await settle()
    assert len(f.executes) == 2                      # a subcall gets one attempt
    assert h.disp.tasks.call_state("t/0") == "RUNNING"


@pytest.mark.parametrize("case", ["unknown_function", "depth", "cycle"])
async def test_rejected_subcall_gets_an_error_resume(make_harness, case):
    h = await make_harness(tweak=lambda cfg: setattr(cfg.dispatcher, "max_subcall_depth", 2))
    f = h.fake
    await _parent_running(h)
    if case == "unknown_function":
        waiter = "t/0"
        f.wait_subcall("t/0", "r1", "nope", [1])
        kind, message = "FUNCTION_NOT_FOUND", "function 'nope' not found in code epoch 1"
    elif case == "cycle":
        waiter = "t/0"
        f.wait_subcall("t/0", "r1", "parent", [4])
        kind, message = "SUBCALL_FAILED", "already running as ancestor t/0"
    else:
        f.wait_subcall("t/0", "r0", "child", [4])
        await h.executed(2)
        waiter = "t/0/sub-1"
        f.wait_subcall(waiter, "r1", "add", [1, 2], ancestry=["t/0", waiter])
        kind, message = "SUBCALL_FAILED", "subcall add would be at depth 2: its ancestry of 2 calls must be shorter than maxSubcallDepth 2"
    await until(lambda: f.resumes_for(waiter), what="rejection resume")
    [r] = f.resumes_for(waiter)
    assert r.request_id == "r1"
    assert r.payload["resumeKind"] == "subcall"
    err = r.payload["error"]
    assert (err["errorKind"], err["retryable"]) == (kind, False)
    assert message in err["errorMessage"]
    assert not err["errorMessage"].startswith("SubcallRejected(")
    await settle()
    assert len(f.executes) == (2 if case == "depth" else 1)      # nothing was dispatched for it
    assert h.disp.tasks.call_state(waiter) == "RUNNING"
    assert h.disp.subcalls.parked_ids() == []


async def test_stale_subcall_request_from_another_executor_is_dropped(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"))
    f = h.fake
    parent = await _parent_running(h)
    other = "exec-2" if parent.executor_id == "exec-1" else "exec-1"
    env = m.call_waiting_subcall("t/0", "r1", "t", 1, "child", [4], 1000, ["t/0"])
    f.deliver(other, [env])
    await settle()
    assert f.resumes == []
    assert len(f.executes) == 1
    f.complete("t/0", 40)
    assert outputs(await h.terminal("t")) == [40]


async def test_parent_attempt_failure_cancels_the_running_child(make_harness):
    h = await make_harness()
    f = h.fake
    await _parent_running(h, backoff_ms=150)
    f.wait_subcall("t/0", "r1", "child", [4])
    await h.executed(2)
    f.fail("t/0", m.EXECUTOR_LOST, True, "parent attempt broke")
    await until(lambda: f.cancels, what="CancelCall for the child")
    [c] = f.cancels
    assert (c.executor_id, c.call_id, c.attempt_seq) == ("exec-1", "t/0/sub-1", 1)
    assert c.reason == "parent call attempt failed"
    assert f.trace.index(("mark_draining", "t/0/sub-1", "exec-1")) < f.trace.index(
        ("cancel", "t/0/sub-1", "exec-1", 1))
    assert f.live_reservations() == {"exec-1": ["t/0/sub-1"]}     # draining until its last frame
    retry = (await h.executed(3))[2]
    assert (retry.call_id, retry.payload["attemptSeq"]) == ("t/0", 2)
    # The cancelled child's late completion frees its context and resumes nobody.
    f.complete("t/0/sub-1", 40)
    await settle()
    assert f.resumes == []
    assert f.live_reservations() == {"exec-1": ["t/0"]}
    f.complete("t/0", 41)
    assert outputs(await h.terminal("t")) == [41]


async def test_failed_subcall_resume_fails_the_parent_attempt(make_harness):
    h = await make_harness()
    f = h.fake
    await _parent_running(h, backoff_ms=1)
    f.wait_subcall("t/0", "r1", "child", [4])
    await h.executed(2)
    f.resume_faults.append(ExecutorGone("exec-1"))
    f.complete("t/0/sub-1", 40)
    retry = (await h.executed(3))[2]
    assert (retry.call_id, retry.payload["attemptSeq"]) == ("t/0", 2)
    assert f.resumes == []
    f.complete("t/0", 40)
    res = await h.terminal("t")
    assert outputs(res) == [40]
    assert res.result.statistic.call_retries == 1


async def test_repeated_subcall_is_answered_from_the_task_cache(make_harness):
    h = await make_harness()
    f = h.fake
    await _parent_running(h)
    f.wait_subcall("t/0", "r1", "child", [4])
    await h.executed(2)
    f.complete("t/0/sub-1", 40)
    await until(lambda: len(f.resumes) == 1, what="first resume")
    f.wait_subcall("t/0", "r2", "child", [4])
    await until(lambda: len(f.resumes) == 2, what="cached resume")
    assert f.resumes[1].request_id == "r2"
    assert f.resumes[1].payload == {"resumeKind": "subcall", "result": 40, "budgetUsedMs": 0}
    assert len(f.executes) == 2
    assert h.metrics.call_cache_hits == 1


async def test_subcall_whose_bind_fails_is_parked_until_the_next_snapshot(make_harness):
    h = await make_harness()
    f = h.fake
    await _parent_running(h)
    f.bind_subcall_faults.append(BindError("parent draining", reason="parent_draining"))
    f.wait_subcall("t/0", "r1", "child", [4])
    await settle()
    assert h.disp.subcalls.parked_ids() == ["t/0/sub-1"]
    assert len(f.executes) == 1
    h.orch.tick()                         # snapshot sync retries parked subcalls
    child = (await h.executed(2))[1]
    assert (child.call_id, child.payload["attemptSeq"], child.payload["parentCallId"]) == (
        "t/0/sub-1", 1, "t/0")
    assert h.disp.subcalls.parked_ids() == []
    f.complete("t/0/sub-1", 40)
    await until(lambda: f.resumes, what="resume")
    f.complete("t/0", 40)
    assert outputs(await h.terminal("t")) == [40]


async def test_task_deadline_cancels_parent_and_child(make_harness):
    h = await make_harness()
    f = h.fake
    await _parent_running(h, timeout_ms=2000)
    f.wait_subcall("t/0", "r1", "child", [4])
    await h.executed(2)
    h.clock.advance(2000)
    h.orch.tick()
    assert h.orch.get_task_result("t").result.failure_code == "TIMED_OUT"
    await until(lambda: len(f.cancels) == 2, what="two CancelCalls")
    assert sorted((c.call_id, c.attempt_seq) for c in f.cancels) == [("t/0", 1), ("t/0/sub-1", 1)]
    await asyncio.sleep(0)
    assert not ("t" in h.disp.tasks)
    assert h.disp.tasks.call_state("t/0/sub-1") is None


async def test_subcall_request_and_parent_failure_in_one_chunk(make_harness):
    """Commands of a chunk run after all its frames were handled: the child's
    BindSubcall meets a parent whose reservation the terminal frame already
    released, so the (already cancelled) child is never sent."""
    h = await make_harness()
    f = h.fake
    await _parent_running(h, backoff_ms=1)
    f.deliver("exec-1", [
        m.call_waiting_subcall("t/0", "r1", "t", 1, "child", [4], 1000, ["t/0"]),
        f.failed("t/0", m.EXECUTOR_LOST, True),
    ])
    assert ("bind_subcall", "t/0/sub-1", "t/0", "exec-1") in f.trace
    retry = (await h.executed(2))[1]
    assert (retry.call_id, retry.payload["attemptSeq"]) == ("t/0", 2)
    assert [s.call_id for s in f.executes] == ["t/0", "t/0"]
    assert h.disp.tasks.call_state("t/0/sub-1") in (None, "DONE")
    assert h.disp.subcalls.parked_ids() == []
    f.complete("t/0", 40)
    assert outputs(await h.terminal("t")) == [40]
    assert f.live_reservations() == {}


async def test_executor_lost_under_a_waiting_parent_cancels_the_child(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=1)
    f = h.fake
    parent = await _parent_running(h, backoff_ms=1)
    assert parent.executor_id == "exec-1"
    f.wait_subcall("t/0", "r1", "child", [4])
    await h.executed(2)
    f.lose("exec-1")
    assert h.disp.tasks.call_state("t/0/sub-1") == "DONE"      # cancelled with the parent's attempt
    retry = (await h.executed(3))[2]
    assert (retry.call_id, retry.executor_id, retry.payload["attemptSeq"]) == ("t/0", "exec-2", 2)
    await settle()
    # The child's CancelCall was attempted best effort and had nowhere to go.
    assert ("cancel", "t/0/sub-1", "exec-1", 1) in f.trace
    assert f.cancels == []
    assert f.handler_errors == []
    f.wait_subcall("t/0", "r2", "child", [4])
    child = (await h.executed(4))[3]
    assert (child.call_id, child.executor_id, child.payload["parentCallId"]) == (
        "t/0/sub-2", "exec-2", "t/0")
    f.complete("t/0/sub-2", 40)
    await until(lambda: f.resumes, what="resume on exec-2")
    assert (f.resumes[0].executor_id, f.resumes[0].request_id) == ("exec-2", "r2")
    f.complete("t/0", 40)
    assert outputs(await h.terminal("t")) == [40]


async def test_a_child_result_resumes_the_parent_by_callback_without_a_task(make_harness):
    h = await make_harness(executors=("exec-1",))
    f = h.fake
    await _parent_running(h)
    f.wait_subcall("t/0", "sub-req-1", "child", [4], ancestry=["t/0"])
    await h.executed(2)
    tasks_before = asyncio.all_tasks()
    f.complete("t/0/sub-1", 40)
    # queued while the child's completion was handled: no Task in between
    assert [(r.call_id, r.request_id, r.payload["result"]) for r in f.resumes] == [("t/0", "sub-req-1", 40)]
    assert asyncio.all_tasks() == tasks_before
    assert h.disp.tasks.call_state("t/0") == "WAITING"           # until the frame is flushed
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING", what="parent resumed after the flush")
    f.complete("t/0", 40)
    assert outputs(await h.terminal("t")) == [40]


async def test_a_child_result_with_the_outbox_full_still_resumes_the_parent(make_harness):
    h = await make_harness(executors=("exec-1",))
    f = h.fake
    await _parent_running(h)
    f.wait_subcall("t/0", "sub-req-1", "child", [4], ancestry=["t/0"])
    await h.executed(2)
    f.resume_outbox_full = True
    f.complete("t/0/sub-1", 40)
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING", what="parent resumed")
    assert [t[0] for t in f.trace if t[0].startswith("resume")] == ["resume_refused", "resume"]
    f.complete("t/0", 40)
    assert outputs(await h.terminal("t")) == [40]


async def test_a_long_read_is_answered_a_slice_at_a_time(make_harness):
    """Five parents' subcall waits arrive in one read; with slices of 2 the children
    of the first two are sent and written before the next waits are applied, the
    last slice's with the loop's flush. Then the children's completions, in one
    read, resume their parents the same way; nothing is lost or reordered."""
    h = await make_harness(executors=("exec-1",), capacity=8)
    h.orch.executor_events.answer_slice = 2
    f = h.fake
    h.submit("t", [("parent", [i]) for i in range(5)])
    parents = await h.executed(5)
    f.trace.clear()
    waits = [m.call_waiting_subcall(p.call_id, f"r{i}", "t", 1, "child", [i], 1000, [p.call_id])
             for i, p in enumerate(parents)]
    f.deliver("exec-1", waits)
    children = (await h.executed(10))[5:]
    steps = [t[0] if t[0] == "flush" else (t[0], t[1]) for t in f.trace if t[0] in ("execute", "flush")]
    assert steps == [("execute", "t/0/sub-1"), ("execute", "t/1/sub-2"), "flush",
                     ("execute", "t/2/sub-3"), ("execute", "t/3/sub-4"), "flush",
                     ("execute", "t/4/sub-5")]
    f.trace.clear()
    f.deliver("exec-1", [f.completed(c.call_id, 10 * i) for i, c in enumerate(children)])
    await until(lambda: len(f.resumes) == 5, what="five resumes")
    steps = [t[0] if t[0] == "flush" else (t[0], t[1]) for t in f.trace if t[0] in ("resume", "flush")]
    assert steps == [("resume", "t/0"), ("resume", "t/1"), "flush", ("resume", "t/2"), ("resume", "t/3"),
                     "flush", ("resume", "t/4")]
    assert [(r.call_id, r.payload["result"]) for r in f.resumes] == [(f"t/{i}", 10 * i) for i in range(5)]
    await until(lambda: all(h.disp.tasks.call_state(f"t/{i}") == "RUNNING" for i in range(5)),
                what="parents resumed")


async def test_answer_slice_zero_applies_a_read_whole(make_harness):
    h = await make_harness(executors=("exec-1",), capacity=8)
    h.orch.executor_events.answer_slice = 0
    f = h.fake
    h.submit("t", [("parent", [i]) for i in range(5)])
    parents = await h.executed(5)
    f.deliver("exec-1", [m.call_waiting_subcall(p.call_id, f"r{i}", "t", 1, "child", [i], 1000, [p.call_id])
                         for i, p in enumerate(parents)])
    await h.executed(10)
    assert not [t for t in f.trace if t[0] == "flush"]


def test_answer_slice_must_be_a_non_negative_int():
    from blockx.adapters.executor_events import ExecutorEvents

    class Actor:
        disp = adapter = metrics = traces = None

    for bad in (-1, 1.5, "16", None):
        with pytest.raises(ValueError, match="answer_slice"):
            ExecutorEvents(actor=Actor(), runtimes={}, canonical_args=bytes, on_attached=print,
                           snapshots=list, answer_slice=bad)
