"""CallWaiting for function code and IO as the orchestrator serves them.

function_code: answered from the task's pinned code epoch, no dispatcher state
change. io: the call goes WAITING, the task's IO scope serves the request
(devstub), the ResumeCall goes out and only then is the call RUNNING again; a
ResumeCall that cannot be sent fails the attempt (RESUME_SEND_FAILED, retryable)."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from blockx.adapters.executor.errors import ExecutorGone
from blockx.core.types import TaskState

from .harness import outputs, settle, sha256_hex, spy_dispatcher, until

ADD_V2 = "def main(a, b):\n    # v2: same behaviour, new digest\n    return b + a\n"


def _record_waits(h) -> list:
    seen: list = []

    def recording(name):
        def wrap(orig):
            def wrapped(call_id, *a, **kw):
                seen.append((name, call_id))
                return orig(call_id, *a, **kw)
            return wrapped
        return wrap

    spy_dispatcher(h.disp, {("lifecycle", n): recording(n)
                            for n in ("handle_call_waiting", "handle_call_resumed")})
    return seen


# ---- function code -----------------------------------------------------------------


async def test_function_code_wait_is_answered_without_a_state_change(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("add", [1, 2])])
    sent = (await h.executed(1))[0]
    seen = _record_waits(h)
    f.wait_code("t/0", "code-1", "add", sent.payload["functionCodeDigest"])
    assert h.disp.tasks.call_state("t/0") == "RUNNING"
    await until(lambda: f.resumes, what="function code resume")
    await settle()
    [r] = f.resumes
    assert (r.executor_id, r.call_id, r.request_id, r.sidecar) == ("exec-1", "t/0", "code-1", None)
    assert r.payload == {"resumeKind": "function_code", "budgetUsedMs": 0,
                         "result": {"source": h.functions["add"], "functionCodeDigest": h.digest("add")}}
    assert seen == []                    # neither WAITING nor a resume event
    assert h.disp.tasks.call_state("t/0") == "RUNNING"
    f.complete("t/0", 3)
    assert outputs(await h.terminal("t")) == [3]


async def test_function_code_comes_from_the_tasks_pinned_epoch(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("old", [("add", [1, 2])])
    old = (await h.executed(1))[0]
    assert old.payload["functionCodeDigest"] == h.digest("add")
    # The function is edited while "old" runs; a new task pins the new epoch.
    with open(h.functions_dir + "/add.py", "w") as fh:
        fh.write(ADD_V2)
    h.clock.advance(1000)                 # past the directory's rescan interval
    h.submit("new", [("add", [1, 2])])
    new = (await h.executed(2))[1]
    assert new.payload["functionCodeDigest"] == sha256_hex(ADD_V2) != h.digest("add")

    f.wait_code("old/0", "c-old", "add", old.payload["functionCodeDigest"])
    f.wait_code("new/0", "c-new", "add", new.payload["functionCodeDigest"])
    await until(lambda: len(f.resumes) == 2, what="two function code resumes")
    by_req = {r.request_id: r.payload["result"] for r in f.resumes}
    assert by_req["c-old"] == {"source": h.functions["add"], "functionCodeDigest": h.digest("add")}
    assert by_req["c-new"] == {"source": ADD_V2, "functionCodeDigest": sha256_hex(ADD_V2)}
    f.deliver("exec-1", [f.completed("old/0", 3), f.completed("new/0", 3)])
    assert outputs(await h.terminal("old")) == [3]
    assert outputs(await h.terminal("new")) == [3]


async def test_unknown_function_code_digest_gets_an_error_resume(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("add", [1, 2])])
    await h.executed(1)
    f.wait_code("t/0", "code-x", "add", "0" * 64)
    await until(lambda: f.resumes, what="error resume")
    [r] = f.resumes
    assert r.request_id == "code-x"
    assert r.payload["resumeKind"] == "function_code"
    assert "result" not in r.payload
    err = r.payload["error"]
    assert (err["errorKind"], err["retryable"]) == ("FUNCTION_NOT_FOUND", False)
    assert "0000000000000000" in err["errorMessage"] and "'add'" in err["errorMessage"]
    assert h.disp.tasks.call_state("t/0") == "RUNNING"


async def test_function_code_outside_the_tasks_epoch_is_refused(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("old", [("add", [1, 2])])
    await h.executed(1)
    with open(h.functions_dir + "/add.py", "w") as fh:
        fh.write(ADD_V2)
    h.clock.advance(1000)
    h.submit("new", [("add", [1, 2])])
    await h.executed(2)
    f.wait_code("old/0", "c", "add", sha256_hex(ADD_V2))   # a digest of epoch 2
    await until(lambda: f.resumes, what="resume")
    assert f.resumes[0].payload.get("error", {}).get("errorKind") == "FUNCTION_NOT_FOUND"


# ---- IO ------------------------------------------------------------------------------


async def test_io_wait_is_served_by_the_task_scope_then_resumed(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("echo", [1])])
    await h.executed(1)
    seen = _record_waits(h)
    f.resume_gate = asyncio.Event()       # hold the ResumeCall "in the socket"
    request = {"op": "echo", "payload": {"k": [1, 2, 3]}}
    f.wait_io("t/0", "io-1", request)
    assert h.disp.tasks.call_state("t/0") == "WAITING"
    await settle()
    assert h.disp.tasks.call_state("t/0") == "WAITING"   # not resumed before the frame is flushed
    assert seen == [("handle_call_waiting", "t/0")]
    f.resume_gate.set()
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING", what="resumed")
    assert seen == [("handle_call_waiting", "t/0"), ("handle_call_resumed", "t/0")]
    [r] = f.resumes
    assert (r.executor_id, r.call_id, r.request_id, r.sidecar) == ("exec-1", "t/0", "io-1", None)
    assert r.payload == {"resumeKind": "io", "result": request, "budgetUsedMs": 0}
    f.complete("t/0", "done")
    assert outputs(await h.terminal("t")) == ["done"]


async def test_io_binary_body_travels_in_the_sidecar(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("echo", [1])])
    await h.executed(1)
    f.wait_io("t/0", "io-1", {"op": "upper"}, sidecar=b"blob\x00data")
    await until(lambda: f.resumes, what="resume")
    [r] = f.resumes
    assert r.payload["result"] == {"op": "upper", "bytes": 9}
    assert r.sidecar == b"BLOB\x00DATA"


async def test_identical_io_requests_of_a_task_are_served_once(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("a", [("echo", [1]), ("echo", [2])])
    h.submit("b", [("echo", [3])])
    await h.executed(3)
    for cid, rid in (("a/0", "r0"), ("a/1", "r1"), ("b/0", "r2")):
        f.wait_io(cid, rid, {"op": "count"})
    await until(lambda: len(f.resumes) == 3, what="three resumes")
    counts = {r.request_id: r.payload["result"]["count"] for r in f.resumes}
    # one backend request per task: a/1 shares a/0's answer; task b has its own cache
    assert counts["r0"] == counts["r1"] != counts["r2"]
    assert sorted(counts.values()) == [1, 1, 2]


@pytest.mark.parametrize("request_, backend, kind, retryable, text", [
    ({"op": "fail", "message": "db down", "retryable": True}, "devstub", "IO_ERROR", True, "db down"),
    ({"op": "fail", "message": "bad query"}, "devstub", "IO_ERROR", False, "bad query"),
    ({"op": "echo"}, "blockdb", "IO_ERROR", False, "unknown IO backend 'blockdb'"),
])
async def test_io_failures_are_resumed_as_errors(make_harness, request_, backend, kind, retryable, text):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("echo", [1])])
    await h.executed(1)
    f.wait_io("t/0", "io-1", request_, backend=backend)
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING" and f.resumes, what="error resume")
    [r] = f.resumes
    assert r.payload["resumeKind"] == "io" and "result" not in r.payload
    err = r.payload["error"]
    assert (err["errorKind"], err["retryable"]) == (kind, retryable)
    assert text in err["errorMessage"]
    assert h.state("t") == TaskState.RUNNING    # the call decides what to do with it


async def test_failed_io_resume_send_fails_the_attempt_retryably(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=1)
    f = h.fake
    h.submit("t", [("echo", [1])], backoff_ms=150)
    first = (await h.executed(1))[0]
    assert first.executor_id == "exec-1"
    f.resume_faults.append(ExecutorGone("exec-1", "connection closed before the frame was written"))
    f.wait_io("t/0", "io-1", {"op": "echo"})
    await until(lambda: h.disp.tasks.call_state("t/0") != "WAITING", what="resume failure fed back")
    assert f.resumes == []
    assert h.disp.tasks.call_state("t/0") == "READY"
    assert ("unbind", "t/0", "exec-1") in f.trace
    assert h.metrics.calls_retried == 1
    retry = (await h.executed(2))[1]
    assert (retry.call_id, retry.payload["attemptSeq"]) == ("t/0", 2)
    f.complete("t/0", 1)
    res = await h.terminal("t")
    assert outputs(res) == [1]
    assert res.result.statistic.call_retries == 1


async def test_failed_io_resume_of_a_final_attempt_fails_the_task(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("echo", [1])], max_attempts=1)
    await h.executed(1)
    f.resume_faults.append(ExecutorGone("exec-1"))
    f.wait_io("t/0", "io-1", {"op": "echo"})
    res = await h.terminal("t")
    assert res.result.failure_code == "CALL_FAILED"
    assert res.result.retryable is True
    assert "RESUME_SEND_FAILED: ResumeCall to exec-1 not sent" in res.result.failure_message


async def test_io_wait_of_an_ended_task_gets_an_error_resume(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("echo", [1])], timeout_ms=1000)
    await h.executed(1)
    h.clock.advance(1000)
    h.orch.tick()
    assert h.orch.get_task_result("t").result.failure_code == "TIMED_OUT"
    f.wait_io("t/0", "late", {"op": "echo"})        # the executor had not seen CancelCall yet
    await until(lambda: f.resumes, what="error resume")
    [r] = f.resumes
    assert r.request_id == "late"
    assert r.payload["error"]["errorKind"] == "IO_ERROR"
    assert "no open IO scope" in r.payload["error"]["errorMessage"]


async def test_stale_io_resume_does_not_touch_the_new_attempt(make_harness):
    """An IO wait of attempt 1 whose executor is lost meanwhile: its resume
    fails to send, which is a stale failure for the call's attempt 2."""
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=1)
    f = h.fake
    h.submit("t", [("echo", [1])], backoff_ms=1)
    await h.executed(1)
    f.resume_gate = asyncio.Event()
    f.resume_faults.append(ExecutorGone("exec-1"))
    f.wait_io("t/0", "io-1", {"op": "echo"})
    f.lose("exec-1")
    retry = (await h.executed(2))[1]
    assert (retry.executor_id, retry.payload["attemptSeq"]) == ("exec-2", 2)
    f.resume_gate.set()                   # attempt 1's resume now fails
    await settle()
    assert h.disp.tasks.call_state("t/0") == "RUNNING"
    assert h.disp.tasks.call_attempts("t/0") == 2
    f.complete("t/0", orjson.loads(b'{"ok": true}'))
    res = await h.terminal("t")
    assert outputs(res) == [{"ok": True}]
    assert res.result.statistic.call_retries == 1


# ---- resumes by callback, without a Task each ----------------------------


async def test_a_synchronous_io_is_resumed_without_a_task(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("echo", [1])])
    await h.executed(1)
    seen = _record_waits(h)
    tasks_before = asyncio.all_tasks()
    f.wait_io("t/0", "io-1", {"op": "echo", "n": 1})
    # served and queued inside the frame's own handling: no Task ran in between
    assert [r.request_id for r in f.resumes] == ["io-1"]
    assert asyncio.all_tasks() == tasks_before
    assert h.disp.tasks.call_state("t/0") == "WAITING"    # resumed only once the frame is flushed
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING", what="resumed after the flush")
    assert seen == [("handle_call_waiting", "t/0"), ("handle_call_resumed", "t/0")]
    assert [t[0] for t in f.trace if t[0].startswith("resume")] == ["resume"]
    f.complete("t/0", "done")
    assert outputs(await h.terminal("t")) == ["done"]


async def test_an_io_that_must_await_still_resumes(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("echo", [1])])
    await h.executed(1)
    f.wait_io("t/0", "io-1", {"op": "sleep", "ms": 30})
    assert f.resumes == []                          # devstub "sleep" awaits
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING", what="resumed after the sleep")
    [r] = f.resumes
    assert r.payload == {"resumeKind": "io", "result": {"slept": 30}, "budgetUsedMs": 0}


async def test_a_full_outbox_falls_back_to_the_awaiting_send_and_still_resumes(make_harness):
    h = await make_harness()
    f = h.fake
    h.submit("t", [("echo", [1])])
    await h.executed(1)
    f.resume_outbox_full = True
    f.wait_io("t/0", "io-1", {"op": "echo"})
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING", what="resumed through the awaiting path")
    assert [t[0] for t in f.trace if t[0].startswith("resume")] == ["resume_refused", "resume"]
    [r] = f.resumes
    assert r.request_id == "io-1" and r.payload["result"] == {"op": "echo"}
    f.complete("t/0", "done")
    assert outputs(await h.terminal("t")) == ["done"]


async def test_an_executor_gone_at_resume_time_yields_resume_send_failed(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=1)
    f = h.fake
    h.submit("t", [("echo", [1])], backoff_ms=1)
    await h.executed(1)
    f.resume_faults.append(ExecutorGone("exec-1", "connection closed"))
    f.wait_io("t/0", "io-1", {"op": "echo"})
    # the send failed synchronously; the failure is fed back through post
    await until(lambda: h.disp.tasks.call_state("t/0") != "WAITING", what="resume failure fed back")
    assert f.resumes == [] and h.metrics.calls_retried == 1
    assert any(k == "RESUME_SEND_FAILED" for k in _failed_kinds(h))
    retry = (await h.executed(2))[1]
    assert retry.payload["attemptSeq"] == 2
    f.complete("t/0", 1)
    assert outputs(await h.terminal("t")) == [1]


async def test_an_executor_lost_before_the_flush_fails_the_waiting_attempt(make_harness):
    h = await make_harness(executors=("exec-1", "exec-2"), capacity=1)
    f = h.fake
    h.submit("t", [("echo", [1])], backoff_ms=1)
    first = (await h.executed(1))[0]
    f.wait_io("t/0", "io-1", {"op": "echo"})
    assert [r.request_id for r in f.resumes] == ["io-1"]     # queued, not flushed yet
    f.lose(first.executor_id)                                # the outbox closes first
    retry = (await h.executed(2))[1]
    assert retry.payload["attemptSeq"] == 2 and retry.executor_id != first.executor_id
    await settle()
    # the loss reported by the same close is applied first: the attempt ends EXECUTOR_LOST
    # and the late RESUME_SEND_FAILED finds no current attempt
    assert _failed_kinds(h) == {"EXECUTOR_LOST": 1}
    f.complete("t/0", 1)
    assert outputs(await h.terminal("t")) == [1]


def _failed_kinds(h) -> dict:
    return {k: v for k, v in h.metrics.calls_failed.items() if v}


async def test_a_wait_in_the_name_of_another_task_is_refused(make_harness):
    """A call may only wait in the name of its own task: user code that names
    another running task gets none of its code, IO or subcalls."""
    from blockx.protocol import messages as m
    h = await make_harness()
    f = h.fake
    h.submit("mine", [("add", [1, 2])])
    h.submit("theirs", [("echo", ["private"])])
    mine, theirs = await h.executed(2)
    seen = _record_waits(h)
    forged = [m.call_waiting_function_code("mine/0", "c1", "theirs", 1, "echo",
                                           theirs.payload["functionCodeDigest"]),
              m.call_waiting_io("mine/0", "io1", "theirs", 1, "devstub", {"k": 1}),
              m.call_waiting_subcall("mine/0", "s1", "theirs", 1, "echo", [1], 1000, ["mine/0"])]
    f.deliver(mine.executor_id, [(env, None) if i == 1 else env for i, env in enumerate(forged)])
    await settle()
    assert f.resumes == [] and seen == []
    assert h.disp.tasks.call_state("mine/0") == "RUNNING"
    f.complete("mine/0", 3)
    f.complete("theirs/0", "private")
    assert outputs(await h.terminal("mine")) == [3]


async def test_a_wait_in_the_name_of_a_task_whose_id_prefixes_its_own_is_refused(make_harness):
    """Task ids may hold "/": the calls of task "theirs/0" are "theirs/0/<n>", which
    start with "theirs/" too. Such a call still waits only in the name of its own
    task, never of the task "theirs" (maybe another identity's)."""
    from blockx.protocol import messages as m
    h = await make_harness()
    f = h.fake
    h.submit("theirs", [("echo", ["private"])])
    h.submit("theirs/0", [("add", [1, 2])])
    first, second = await h.executed(2)
    theirs, mine = (first, second) if first.call_id == "theirs/0" else (second, first)
    assert mine.call_id == "theirs/0/0"
    seen = _record_waits(h)
    forged = [m.call_waiting_function_code("theirs/0/0", "c1", "theirs", 1, "echo",
                                           theirs.payload["functionCodeDigest"]),
              m.call_waiting_io("theirs/0/0", "io1", "theirs", 1, "devstub", {"k": 1}),
              m.call_waiting_subcall("theirs/0/0", "s1", "theirs", 1, "echo", [1], 1000, ["theirs/0/0"])]
    f.deliver(mine.executor_id, [(env, None) if i == 1 else env for i, env in enumerate(forged)])
    await settle()
    assert f.resumes == [] and seen == []
    assert h.disp.tasks.call_state("theirs/0/0") == "RUNNING"
    f.complete("theirs/0/0", 3)
    f.complete("theirs/0", "private")
    assert outputs(await h.terminal("theirs/0")) == [3]


async def test_a_completion_naming_another_task_is_recorded_only_in_its_own_trace(make_harness):
    """A CallCompleted carries a taskId of the executor's choosing: the trace that
    records it is the call's own task's, never the one the payload names."""
    from blockx.adapters.telemetry.trace_recorder import DONE, TraceStore
    from blockx.protocol import messages as m
    traces = TraceStore(1000)
    h = await make_harness(traces=traces)
    f = h.fake
    h.submit("mine", [("add", [1, 2])])
    h.submit("theirs", [("echo", ["private"])])
    mine, theirs = sorted(await h.executed(2), key=lambda s: s.call_id)
    forged = m.call_completed("mine/0", "theirs", mine.attempt, 3, 1)
    f.deliver(mine.executor_id, [forged])
    assert outputs(await h.terminal("mine")) == [3]             # the call's own completion still counts
    f.complete("theirs/0", "private")
    await h.terminal("theirs")
    theirs_done = [e for e in traces.get("theirs").events if e[0] == DONE]
    assert [e[2] for e in theirs_done] == ["theirs/0"], theirs_done
