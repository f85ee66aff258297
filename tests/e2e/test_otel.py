"""OpenTelemetry export end to end: a real `blockx serve` whose
OTEL_EXPORTER_OTLP_ENDPOINT points at a real OTLP/gRPC receiver the test runs;
the spans that arrive carry the profile's service name and the caller's trace."""
import asyncio
import json
import subprocess
import sys
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.session import RawSession, submit
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@pytest.fixture
def receiver():
    r = OtlpReceiver().start()
    yield r
    r.stop()


def _export_env(receiver, **extra):
    # a short batch delay, so the spans arrive while the test waits
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100", **extra}


def _task_span(spans, task_id, service):
    found = [s for s in spans if s.name == "task" and s.attributes.get("blockx.task.id") == task_id
             and s.resource.get("service.name") == service]
    return found[0] if found else None


def _wait_task(receiver, task_id, *, service="blockx-worker", phases=("builder", "calls")):
    """The task's span (exported by ``service``) once it and its phase spans arrived,
    and those phase spans."""
    def arrived(spans):
        t = _task_span(spans, task_id, service)
        return t is not None and {s.name for s in spans if s.parent_span_id == t.span_id} >= set(phases)
    spans = receiver.wait_for(arrived)
    task = _task_span(spans, task_id, service)
    return task, [s for s in spans if s.parent_span_id == task.span_id]


def test_a_real_worker_exports_the_task_span_under_the_callers_trace(start_worker, receiver):
    w = start_worker(_export_env(receiver))
    w.stub.SubmitTask(pb.SubmitTaskRequest(task=_task("t-otel", [("add", [20, 22])])), timeout=10,
                      metadata=(("traceparent", TRACEPARENT), ("tracestate", "team=billing")))
    assert outputs(w.wait_terminal("t-otel")) == [42]
    task, phases = _wait_task(receiver, "t-otel")
    assert task.resource["service.name"] == "blockx-worker"        # the block profile's service
    assert (task.trace_id, task.parent_span_id) == (TRACE_ID, CALLER_SPAN)
    assert task.attributes["blockx.task.state"] == "SUCCEEDED" and task.status_code == 0
    assert sorted(s.name for s in phases) == ["builder", "calls"]      # no result handler: no writer
    assert all(s.trace_id == TRACE_ID for s in phases)
    assert w.find_event("otel_export", service="blockx-worker") is not None


def test_a_malformed_traceparent_is_a_new_root_and_no_error(start_worker, receiver):
    w = start_worker(_export_env(receiver))
    w.stub.SubmitTask(pb.SubmitTaskRequest(task=_task("t-bad", [("add", [1, 1])])), timeout=10,
                      metadata=(("traceparent", "00-not-a-trace-context-01"), ("tracestate", "a=b")))
    assert outputs(w.wait_terminal("t-bad")) == [2]
    task, _ = _wait_task(receiver, "t-bad")
    assert task.parent_span_id == "" and task.trace_id != TRACE_ID


def test_a_failed_task_is_exported_with_an_error_status(start_worker, receiver):
    w = start_worker(_export_env(receiver))
    w.stub.SubmitTask(pb.SubmitTaskRequest(task=_task("t-fail", [("fail_kind", ["NOPE"])])), timeout=10,
                      metadata=(("traceparent", TRACEPARENT),))
    res = w.wait_terminal("t-fail")
    task, phases = _wait_task(receiver, "t-fail", phases=("builder", "calls"))
    assert task.status_code == 2 and task.status_message.startswith(res.failure_code + ": ")
    assert [s.status_code for s in phases if s.name == "calls"] == [2]


def test_session_metadata_parents_every_task_submitted_in_it(start_worker, receiver):
    w = start_worker(_export_env(receiver, OTEL_SERVICE_NAME="billing-workers"))

    async def run():
        s = RawSession(w.port, extra_metadata=(("traceparent", TRACEPARENT),))
        await s.send(submit(1, "s-1", [("add", [1, 2])]), submit(2, "s-2", [("add", [3, 4])]))
        ended = set()
        while ended != {"s-1", "s-2"}:
            ev = await s.next_event()
            if ev.WhichOneof("event") == "update" and ev.update.is_terminal:
                ended.add(ev.update.task_id)
        await s.close()
    asyncio.run(run())
    for tid in ("s-1", "s-2"):
        task, _ = _wait_task(receiver, tid, service="billing-workers")
        assert (task.trace_id, task.parent_span_id) == (TRACE_ID, CALLER_SPAN)
        assert task.resource["service.name"] == "billing-workers"     # OTEL_SERVICE_NAME overrides


@pytest.mark.parametrize("primary_exports", [True, False], ids=["primary-exports", "primary-silent"])
def test_the_shadow_copy_carries_the_trace_to_its_target(start_worker, receiver, primary_exports):
    target = start_worker(_export_env(receiver, OTEL_SERVICE_NAME="shadow-target"))
    primary = start_worker({"SHADOW_SUBMIT_TARGET_ADDR": f"127.0.0.1:{target.port}",
                            "SHADOW_SUBMIT_SAMPLE_RATE": "1.0",
                            **(_export_env(receiver) if primary_exports else {})})
    primary.stub.SubmitTask(pb.SubmitTaskRequest(task=_task("t-sh", [("add", [2, 3])])), timeout=10,
                            metadata=(("traceparent", TRACEPARENT),))
    assert outputs(primary.wait_terminal("t-sh")) == [5]
    shadow, _ = _wait_task(receiver, "t-sh", service="shadow-target")
    assert shadow.trace_id == TRACE_ID
    if primary_exports:       # a child of the primary's task span
        primary_task, _ = _wait_task(receiver, "t-sh")
        assert shadow.parent_span_id == primary_task.span_id and primary_task.parent_span_id == CALLER_SPAN
    else:                     # the caller's context, passed on as it came
        assert shadow.parent_span_id == CALLER_SPAN
        time.sleep(0.5)
        assert [s.resource["service.name"] for s in receiver.spans if s.name == "task"] == ["shadow-target"]


def test_without_an_endpoint_the_worker_imports_no_opentelemetry():
    code = ("import asyncio, sys\n"
            "from blockx.app import run\n"
            "from blockx.app.config import load_config\n"
            "from blockx.app.profile import BLOCK\n"
            "assert asyncio.run(run.task_spans(load_config(BLOCK, env={}), BLOCK, env={})) is None\n"
            "import blockx.adapters.grpc.server, blockx.adapters.orchestrator, blockx.adapters.shadow\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr


def _task(task_id, calls):
    payload = json.dumps({"calls": [{"functionId": f, "args": a} for f, a in calls]}).encode()
    return pb.Task(task_id=task_id, function_call=pb.FunctionCallConfig(type="callList", payload=payload))


def test_the_spans_still_held_are_exported_when_the_worker_stops(start_worker, receiver):
    # a batch delay far beyond the test: only the stop's flush can deliver them
    w = start_worker(_export_env(receiver, OTEL_BSP_SCHEDULE_DELAY="600000"))
    w.stub.SubmitTask(pb.SubmitTaskRequest(task=_task("t-stop", [("add", [1, 2])])), timeout=10,
                      metadata=(("traceparent", TRACEPARENT),))
    assert outputs(w.wait_terminal("t-stop")) == [3]
    time.sleep(0.5)
    assert _task_span(receiver.spans, "t-stop", "blockx-worker") is None
    assert w.stop() == 0
    task, phases = _wait_task(receiver, "t-stop")
    assert task.trace_id == TRACE_ID
