"""OpenTelemetry spans of tasks through the Orchestrator, read back from the SDK's
in-memory exporter: the task span's parent is the caller's traceparent, the
phases are its children, calls get spans only when sampled, and a failed task's
span says so."""
from zlib import crc32

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, DEFAULT_ON
from opentelemetry.trace import SpanKind, StatusCode

from blockx.adapters.telemetry.otel_replay import SpanReplay
from blockx.adapters.telemetry.otel_spans import TaskSpans
from blockx.adapters.telemetry.trace_context import incoming
from blockx.core.types import ResultHandler, TaskState

from .harness import until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def _spans(rate: float = 0.0, sampler=DEFAULT_ON):
    """TaskSpans whose records the SDK replays in process into an in-memory exporter
    (what the exporter process does in front of the OTLP exporter)."""
    exporter = InMemorySpanExporter()
    replay = SpanReplay(SimpleSpanProcessor(exporter), Resource.create({"service.name": "test"}), sampler)
    return TaskSpans(replay, call_span_rate=rate), exporter


def _by_name(exporter) -> dict:
    out: dict = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


async def test_the_task_span_is_the_callers_child_and_its_phases_are_its_children(make_harness):
    spans, exporter = _spans()
    h = await make_harness(spans=spans)
    tc = incoming([("traceparent", TRACEPARENT), ("tracestate", "vendor=abc")])
    h.submit("t", [("add", [1, 2]), ("add", [3, 4])], trace_context=tc,
             result_handler=ResultHandler("test", orjson.dumps({"expectCount": 2})))
    await h.executed(2)
    h.fake.complete("t/0", 3)
    h.fake.complete("t/1", 7)
    assert (await h.terminal("t")).state == TaskState.SUCCEEDED
    got = _by_name(exporter)
    [task] = got["task"]
    assert task.kind == SpanKind.SERVER
    assert format(task.context.trace_id, "032x") == TRACE_ID
    assert task.parent is not None and format(task.parent.span_id, "016x") == PARENT_ID
    assert task.parent.is_remote
    assert dict(task.context.trace_state) == {"vendor": "abc"}
    assert task.attributes["blockx.task.id"] == "t" and task.attributes["blockx.task.state"] == "SUCCEEDED"
    assert task.attributes["blockx.task.call_count"] == 2
    assert task.status.status_code == StatusCode.UNSET
    phases = [s for s in exporter.get_finished_spans() if s.name in ("builder", "calls", "writer")]
    assert [s.name for s in sorted(phases, key=lambda s: s.start_time)] == ["builder", "calls", "writer"]
    for s in phases:
        assert s.parent.span_id == task.context.span_id and s.context.trace_id == task.context.trace_id
        assert task.start_time <= s.start_time <= s.end_time <= task.end_time
    assert got["builder"][0].attributes["blockx.builder"] == "callList"
    assert got["writer"][0].attributes["blockx.writer"] == "test"
    assert "call add" not in got                 # otelCallSpanRate 0: no call spans
    assert h.orch.actor.call_spans is None       # ... and no call hook at all
    assert len(spans) == 0                       # nothing kept after the end


async def test_a_task_without_a_result_handler_has_no_writer_span(make_harness):
    spans, exporter = _spans()
    h = await make_harness(spans=spans)
    h.submit("t", [("add", [1, 2])])
    await h.executed(1)
    h.fake.complete("t/0", 3)
    await h.terminal("t")
    [task] = _by_name(exporter)["task"]
    phases = sorted((s for s in exporter.get_finished_spans() if s.parent is not None
                     and s.parent.span_id == task.context.span_id), key=lambda s: s.start_time)
    assert [s.name for s in phases] == ["builder", "calls"]
    assert phases[-1].end_time == task.end_time


async def test_without_a_traceparent_the_task_span_is_a_new_root(make_harness):
    spans, exporter = _spans()
    h = await make_harness(spans=spans)
    for tid, tc in (("a", None), ("b", incoming([("traceparent", "00-" + "0" * 32 + "-" + PARENT_ID + "-01")]))):
        h.submit(tid, [("add", [1, 2])], trace_context=tc)
        await until(lambda: any(s.call_id == f"{tid}/0" for s in h.fake.executes))
        h.fake.complete(f"{tid}/0", 3)
        await h.terminal(tid)
    a, b = _by_name(exporter)["task"]
    assert a.parent is None and b.parent is None
    assert a.context.trace_id != b.context.trace_id


async def test_a_failed_task_has_an_error_status_on_the_task_and_the_phase_it_failed_in(make_harness):
    spans, exporter = _spans()
    h = await make_harness(spans=spans)
    h.submit("t", [("add", [1, 2])], trace_context=incoming([("traceparent", TRACEPARENT)]))
    await h.executed(1)
    h.fake.fail("t/0", "USER_ERROR", message="boom")
    res = await h.terminal("t")
    assert res.state == TaskState.FAILED
    got = _by_name(exporter)
    [task] = got["task"]
    assert task.status.status_code == StatusCode.ERROR
    assert task.status.description == f"{res.result.failure_code}: {res.result.failure_message}"
    assert task.attributes["blockx.task.state"] == "FAILED"
    assert task.attributes["blockx.task.failure_code"] == res.result.failure_code
    assert got["calls"][0].status.status_code == StatusCode.ERROR
    assert got["builder"][0].status.status_code == StatusCode.UNSET


async def test_call_spans_only_for_the_sampled_calls(make_harness):
    spans, exporter = _spans(rate=0.25)
    h = await make_harness(spans=spans)
    n = 200
    h.submit("t", [("add", [i, 1]) for i in range(n)], policy="CONTINUE")
    answered = 0
    while answered < n:                          # answer each call as it is sent
        await h.executed(answered + 1)
        for s in h.fake.executes[answered:]:
            if s.call_id == "t/7":
                h.fake.fail(s.call_id, "USER_ERROR")
            else:
                h.fake.complete(s.call_id, 1)
            answered += 1
    await h.terminal("t")
    got = _by_name(exporter)
    calls = got.get("call add", [])
    expected = {f"t/{i}" for i in range(n) if crc32(f"t/{i}".encode()) < int(0.25 * (1 << 32))}
    assert 0 < len(expected) < n
    assert {s.attributes["blockx.call.id"] for s in calls} == expected
    [phase] = got["calls"]
    for s in calls:
        assert s.parent.span_id == phase.context.span_id
        assert s.attributes["blockx.executor.id"] == "exec-1" and s.attributes["blockx.call.attempt"] == 1
        want = StatusCode.ERROR if s.attributes["blockx.call.id"] == "t/7" else StatusCode.UNSET
        assert s.status.status_code == want


async def test_no_call_spans_for_a_task_the_sampler_dropped(make_harness):
    spans, exporter = _spans(rate=1.0, sampler=ALWAYS_OFF)
    h = await make_harness(spans=spans)
    h.submit("t", [("add", [1, 2])], trace_context=incoming([("traceparent", TRACEPARENT)]))
    await h.executed(1)
    h.fake.complete("t/0", 3)
    await h.terminal("t")
    assert exporter.get_finished_spans() == ()
    assert spans.sink.dropped_by_sampler == 1 and spans._open_calls == {}


async def test_a_subcall_span_is_a_child_of_its_parent_calls_span(make_harness):
    spans, exporter = _spans(rate=1.0)
    h = await make_harness(spans=spans, executors=("exec-1", "exec-2"))
    h.submit("t", [("parent", [4])])
    await h.executed(1)
    h.fake.wait_subcall("t/0", "r1", "child", [4], ancestry=["t/0"])
    await h.executed(2)
    h.fake.complete("t/0/sub-1", 40)
    await until(lambda: h.disp.tasks.call_state("t/0") == "RUNNING")
    h.fake.complete("t/0", 40)
    await h.terminal("t")
    got = _by_name(exporter)
    [parent], [child] = got["call parent"], got["call child"]
    assert child.parent.span_id == parent.context.span_id
    assert parent.parent.span_id == got["calls"][0].context.span_id


async def test_a_call_still_open_when_its_task_ends_is_ended_with_it(make_harness):
    spans, exporter = _spans(rate=1.0)
    h = await make_harness(spans=spans)
    h.submit("t", [("add", [1, 2]), ("add", [3, 4])], timeout_ms=1000)
    await h.executed(2)
    h.fake.complete("t/0", 3)                    # t/1 never answers: the task's deadline ends it
    h.clock.advance(2000)
    h.orch.tick()
    res = await h.terminal("t")
    got = _by_name(exporter)
    by_id = {s.attributes["blockx.call.id"]: s for s in got["call add"]}
    assert set(by_id) == {"t/0", "t/1"}
    assert by_id["t/0"].status.status_code == StatusCode.UNSET
    assert by_id["t/1"].status.description == "cut short: the task ended FAILED"
    assert by_id["t/1"].end_time <= got["task"][0].end_time
    assert got["task"][0].attributes["blockx.task.failure_code"] == res.result.failure_code
    assert spans._open_calls == {}
