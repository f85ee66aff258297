"""The Chrome trace-event export: valid structure (every X event has ts/dur,
every lane is named, spans on a lane nest), phases on the Worker lane, attempts
on their executor's lanes, subcalls and IO waits inside their call, retries with
their reason."""
from __future__ import annotations

from blockx.adapters.telemetry.trace_export import PHASE_TID, chrome_trace
from blockx.adapters.telemetry.trace_recorder import TraceStore
from blockx.core.dispatch.commands import ArmCallRetry, DispatchCallCmd
from tests.support.trace_check import inside, validate
from blockx.core.types import (
    CallRetryPolicy, FunctionCall, PluginResult, ResultHandler, StartBuilderPhase, StartCallPhase,
    StartPluginPhase, TaskResult, TaskState,
)


class Clock:
    def __init__(self) -> None:
        self.ns = 5_000_000_000

    def __call__(self) -> int:
        return self.ns

    def at(self, us: int) -> None:
        self.ns = 5_000_000_000 + us * 1000


def sent(task_id, call_id, executor="exec-0", attempt=1, parent="", fn="f"):
    return DispatchCallCmd(call_id, executor, task_id, fn, "digest", "main", b"[]", 0, attempt, parent)


def done(store, clock, mono, us, call_id, executor, kind="", attempt=1, budget=0, task="t"):
    clock.at(us)
    mono()
    store.call_done({"taskId": task, "attemptSeq": attempt, "budgetUsedMs": budget}, call_id, executor, kind)


def send(store, clock, mono, us, *args, **kw):
    clock.at(us)
    mono()
    store.call_sent(sent(*args, **kw))


def build_task():
    clock = Clock()
    store = TraceStore(1000, clock_ns=clock)
    mono = store.stamping(lambda: 0)
    clock.at(0)
    store.task_started("t")
    clock.at(100)
    store.phase_started(StartBuilderPhase("t", "s", 1, FunctionCall("callList")))
    clock.at(200)
    store.phase_started(StartCallPhase("t", "s", 1, [], False, "FAST_FAIL", CallRetryPolicy(), "", 0))
    store.calls_queued("t", 2)
    send(store, clock, mono, 300, "t", "t/0", fn="sum_squares")
    store.call_sent(sent("t", "t/1", fn="flaky"))             # same batch: overlaps t/0 on exec-0
    clock.at(400)
    mono()
    store.subcall("t", "t/0", "t/0/sub-1")
    store.call_sent(sent("t", "t/0/sub-1", parent="t/0", fn="square"))
    clock.at(450)
    mono()
    store.io_wait({"taskId": "t", "backend": "devstub"}, "t/1", 1)
    clock.at(500)
    store.io_done("t", "t/1", True)
    done(store, clock, mono, 600, "t/0/sub-1", "exec-0")
    done(store, clock, mono, 700, "t/1", "exec-0", "USER_ERROR", budget=1)
    store.call_retry(ArmCallRetry("t/1", fire_at_ms=10, is_retry=True), 0)
    done(store, clock, mono, 800, "t/0", "exec-0")
    send(store, clock, mono, 10_700, "t", "t/1", "exec-1", attempt=2, fn="flaky")
    done(store, clock, mono, 10_900, "t/1", "exec-1", attempt=2)
    clock.at(11_000)
    store.phase_started(StartPluginPhase("t", "s", [], ResultHandler("log")))
    clock.at(11_500)
    store.task_ended("t", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED, plugin_results=[PluginResult("log", True,
                                                                                                  "wrote 2")]))
    return store, clock


def test_a_task_with_a_retry_subcalls_and_io_exports_each_event_in_order_on_its_lane():
    store, clock = build_task()
    doc = chrome_trace(store.get("t"), clock() // 1000)
    xs, names = validate(doc)
    assert names[PHASE_TID] == "worker: task phases"
    phase_lane = [e for e in xs if e["tid"] == PHASE_TID]
    assert [e["name"] for e in phase_lane] == ["task t", "activation", "builder callList", "calls", "plugin"]
    task = phase_lane[0]
    assert task["ts"] == 0 and task["dur"] == 11_500 and task["args"]["state"] == "SUCCEEDED"
    for p in phase_lane[1:]:
        assert inside(p, task)
    assert [(p["ts"], p["dur"]) for p in phase_lane[1:]] == [(0, 100), (100, 100), (200, 10_800), (11_000, 500)]
    assert phase_lane[-1]["args"]["plugin"] == "log" and phase_lane[-1]["args"]["message"] == "wrote 2"

    calls = {(e["args"].get("callId"), e["args"].get("attempt"), e["cat"]): e for e in xs if e["tid"] != PHASE_TID}
    root = calls[("t/0", 1, "call")]
    sub = calls[("t/0/sub-1", 1, "subcall")]
    first = calls[("t/1", 1, "call")]
    second = calls[("t/1", 2, "call")]
    io = calls[("t/1", None, "io")]
    assert (root["ts"], root["dur"], root["name"]) == (300, 500, "sum_squares")
    assert names[root["tid"]] == "exec-0"
    assert inside(sub, root) and sub["args"]["parentCallId"] == "t/0" and sub["args"]["queuedUs"] == 0
    assert first["tid"] != root["tid"] and names[first["tid"]] == "exec-0 #2"   # overlapping: a second lane
    assert first["args"]["outcome"] == "USER_ERROR" and first["args"]["budgetUsedMs"] == 1
    assert first["args"]["queuedUs"] == 100                      # committed at 200, sent at 300
    assert inside(io, first) and (io["ts"], io["dur"]) == (450, 50) and io["name"] == "io devstub"
    assert names[second["tid"]] == "exec-1" and second["args"]["outcome"] == "ok"
    assert second["args"]["queuedUs"] == 0                       # sent when the 10 ms backoff ran out
    retry = [e for e in doc["traceEvents"] if e["ph"] == "i" and e["name"] == "retry"]
    assert len(retry) == 1 and retry[0]["tid"] == first["tid"] and retry[0]["ts"] == 700
    assert retry[0]["args"] == {"callId": "t/1", "reason": "USER_ERROR", "backoffMs": 10, "failedAttempt": 1}
    queued = [e for e in doc["traceEvents"] if e["name"] == "calls queued"]
    assert queued[0]["tid"] == PHASE_TID and queued[0]["args"] == {"count": 2}
    # the order in time: queued, sent, subcall, io, failure, retry, second attempt
    assert queued[0]["ts"] < root["ts"] <= sub["ts"] < io["ts"] < retry[0]["ts"] < second["ts"]
    other = doc["otherData"]
    assert other["taskId"] == "t" and other["complete"] and not other["sampled"] and other["eventsDropped"] == 0


def test_a_subcall_on_another_executor_gets_a_flow_arrow_from_its_parent():
    clock = Clock()
    store = TraceStore(1000, clock_ns=clock)
    mono = store.stamping(lambda: 0)
    clock.at(0)
    store.task_started("t")
    send(store, clock, mono, 10, "t", "t/0", "exec-0")
    send(store, clock, mono, 20, "t", "t/0/sub-1", "exec-1", parent="t/0")
    done(store, clock, mono, 30, "t/0/sub-1", "exec-1")
    done(store, clock, mono, 40, "t/0", "exec-0")
    doc = chrome_trace(store.get("t"), clock() // 1000)
    xs, names = validate(doc)
    parent = next(e for e in xs if e["args"].get("callId") == "t/0")
    child = next(e for e in xs if e["args"].get("callId") == "t/0/sub-1")
    assert names[child["tid"]] == "exec-1"
    s = next(e for e in doc["traceEvents"] if e["ph"] == "s")
    f = next(e for e in doc["traceEvents"] if e["ph"] == "f")
    assert s["id"] == f["id"] and s["tid"] == parent["tid"] and f["tid"] == child["tid"]
    assert parent["ts"] <= s["ts"] <= parent["ts"] + parent["dur"] and f["ts"] == child["ts"]


def test_a_running_task_shows_open_attempts_up_to_now_and_a_lost_executor_ends_its_attempts():
    clock = Clock()
    store = TraceStore(1000, clock_ns=clock)
    mono = store.stamping(lambda: 0)
    clock.at(0)
    store.task_started("t")
    send(store, clock, mono, 10, "t", "t/0", "exec-0")
    send(store, clock, mono, 10, "t", "t/1", "exec-1")
    clock.at(50)
    store.executor_lost("exec-1", "connection closed")
    clock.at(60)
    mono()
    store.call_retry(ArmCallRetry("t/1", fire_at_ms=5, is_retry=True), 0)
    doc = chrome_trace(store.get("t"), store.now())
    xs, _names = validate(doc)
    running = next(e for e in xs if e["args"].get("callId") == "t/0")
    lost = next(e for e in xs if e["args"].get("callId") == "t/1")
    assert running["args"]["state"] == "running" and running["ts"] + running["dur"] == 60
    assert lost["args"]["outcome"] == "EXECUTOR_LOST" and lost["ts"] + lost["dur"] == 50
    retry = next(e for e in doc["traceEvents"] if e["name"] == "retry")
    assert retry["args"]["reason"] == "EXECUTOR_LOST"
    assert any(e["name"] == "executor exec-1 lost" for e in doc["traceEvents"])
    assert doc["otherData"]["complete"] is False
    task = next(e for e in xs if e["name"] == "task t")
    assert task["args"]["state"] == "RUNNING"


def test_a_sampled_trace_says_so():
    store = TraceStore(100)
    store.task_started("t")
    for i in range(1000):
        store.call_sent(sent("t", f"t/{i}"))
        store.call_done({"taskId": "t", "attemptSeq": 1}, f"t/{i}", "exec-0", "")
    doc = chrome_trace(store.get("t"), store.now())
    validate(doc)
    other = doc["otherData"]
    assert other["sampled"] and other["sampleEvery"] > 1 and other["eventsDropped"] > 0
    assert other["eventsRecorded"] <= 100
