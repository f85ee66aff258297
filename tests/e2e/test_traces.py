"""Task traces end to end: a real Worker with real executors records each task's
timeline; GetTaskTrace, `WorkerClient.trace` and `blockx trace` return it in the
Chrome trace-event format, bounded, for resultRetentionMs after the task ends."""
import json
import os
import subprocess
import sys
import time

import grpc
import pytest

from blockx.client import InvalidArgument, InvalidSlot, NotFound, TracingOff, connect
from blockx.worker.v1 import worker_pb2 as pb
from tests.support.trace_check import inside, validate
from tests.support.worker import ROOT

pytestmark = pytest.mark.e2e


def trace_of(w, task_id: str) -> pb.TaskTrace:
    return w.stub.GetTaskTrace(pb.GetTaskTraceRequest(task_id=task_id), timeout=10)


def test_a_task_with_a_retry_subcalls_and_io_has_each_event_in_order_on_its_lane(start_worker, executor_tmp):
    w = start_worker({"RESULT_RETENTION_MS": "60000", "IO_DEVSTUB_ENABLED": "true"})
    flag = str(executor_tmp / "flaky-count")
    with connect(f"127.0.0.1:{w.port}") as c:
        out = c.submit(calls=[("sum_squares", [3]), ("echo_io", [{"k": 1}]), ("flaky", [flag, 1])],
                       task_id="t-traced")
        assert out.state == "SUCCEEDED" and out.outputs[0] == 5 and out.outputs[2] == 2
        tr = c.trace("t-traced")
    assert tr.complete and not tr.sampled and tr.events_dropped == 0 and tr.state == "SUCCEEDED"
    doc = tr.chrome_trace()
    xs, names = validate(doc)
    phase_lane = [e for e in xs if names[e["tid"]] == "worker: task phases"]
    assert [e["name"] for e in phase_lane] == ["task t-traced", "activation", "builder callList", "calls", "plugin"]
    starts = [e["ts"] for e in phase_lane[1:]]
    assert starts == sorted(starts)
    calls_phase = phase_lane[3]

    def span(call_id, attempt=1):
        return next(e for e in xs if e["args"].get("callId") == call_id and e["args"].get("attempt") == attempt)

    root, echo, flaky1, flaky2 = span("t-traced/0"), span("t-traced/1"), span("t-traced/2"), span("t-traced/2", 2)
    for e in (root, echo, flaky1, flaky2):
        assert names[e["tid"]].startswith("exec-") and e["args"]["executor"] in names[e["tid"]]
        assert calls_phase["ts"] <= e["ts"] and e["ts"] + e["dur"] <= calls_phase["ts"] + calls_phase["dur"]
    assert (root["name"], echo["name"], flaky1["name"]) == ("sum_squares", "echo_io", "flaky")
    # subcalls: three squares, in order, each inside its parent's span
    subs = sorted((e for e in xs if e["cat"] == "subcall"), key=lambda e: e["ts"])
    assert [e["args"]["callId"] for e in subs] == [f"t-traced/0/sub-{i}" for i in (1, 2, 3)]
    for s in subs:
        assert s["name"] == "square" and s["args"]["parentCallId"] == "t-traced/0" and s["args"]["outcome"] == "ok"
        if s["args"]["executor"] == root["args"]["executor"]:
            assert inside(s, root)
        else:                       # dispatched to another executor: a flow arrow from its parent
            assert any(f["ph"] == "f" and f["tid"] == s["tid"] and f["ts"] == s["ts"] for f in doc["traceEvents"])
    # IO: echo_io makes four devstub requests, each a span inside its call
    ios = sorted((e for e in xs if e["cat"] == "io" and e["args"]["callId"] == "t-traced/1"), key=lambda e: e["ts"])
    assert len(ios) == 4 and all(inside(io, echo) and io["args"]["ok"] for io in ios)
    # the retry: attempt 1 failed, an instant with its reason and backoff, then attempt 2 succeeded
    assert flaky1["args"]["outcome"] == "USER_ERROR" and flaky2["args"]["outcome"] == "ok"
    retry = [e for e in doc["traceEvents"] if e["ph"] == "i" and e["name"] == "retry"]
    assert len(retry) == 1 and retry[0]["tid"] == flaky1["tid"]
    # the default policy: base 10 ms, jitter floor(10 * 5% * r) == 0 for every r in [0, 1)
    assert retry[0]["args"]["reason"] == "USER_ERROR" and retry[0]["args"]["backoffMs"] == 10
    assert flaky1["ts"] + flaky1["dur"] == retry[0]["ts"] <= flaky2["ts"]
    queued = next(e for e in doc["traceEvents"] if e["name"] == "calls queued")
    assert queued["args"]["count"] == 3 and queued["ts"] <= min(root["ts"], echo["ts"], flaky1["ts"])


def test_the_cap_holds_for_a_100k_call_task(start_worker):
    w = start_worker({"RESULT_RETENTION_MS": "60000", "TRACE_MAX_EVENTS_PER_TASK": "10000"})
    w.submit_calls("t-big", [("add1", [i]) for i in range(100_000)], rpc_timeout=60)
    assert w.wait_terminal("t-big", timeout=120).state == pb.TASK_STATE_SUCCEEDED
    tr = trace_of(w, "t-big")
    assert tr.complete and tr.sampled and tr.sample_every > 1 and tr.max_events == 10_000
    assert 0 < tr.events_recorded <= 10_000 and tr.events_dropped > 0
    assert tr.events_recorded + tr.events_dropped >= 200_000      # every call was sent and finished
    doc = json.loads(tr.chrome_trace_json)
    xs, _names = validate(doc)
    calls = [e for e in xs if e["cat"] == "call"]
    assert 0 < len(calls) <= 5_000 and all(e["args"]["outcome"] == "ok" for e in calls)
    assert doc["otherData"]["sampled"] is True and doc["otherData"]["eventsDropped"] == tr.events_dropped


def test_the_trace_stays_for_the_retention_and_goes_with_the_result(start_worker):
    w = start_worker({"RESULT_RETENTION_MS": "1500", "MAX_TASK_TIMEOUT_MS": "1000",
                      "TASK_DEADLINE_MS": "1000", "FUNCTION_SNAPSHOT_RETENTION_MS": "1000"})
    w.submit_calls("t-ret", [("sleep_ms", [300])])
    running = trace_of(w, "t-ret")                  # while it runs
    assert not running.complete and running.state == pb.TASK_STATE_RUNNING
    assert w.wait_terminal("t-ret").state == pb.TASK_STATE_SUCCEEDED
    ended = time.monotonic()
    done = trace_of(w, "t-ret")
    assert done.complete and done.state == pb.TASK_STATE_SUCCEEDED
    seen_within = 0.0
    deadline = ended + 10
    while True:
        try:
            trace_of(w, "t-ret")
            seen_within = time.monotonic() - ended
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.NOT_FOUND
            break
        assert time.monotonic() < deadline, "the trace was never dropped"
        time.sleep(0.1)
    assert seen_within >= 1.0, "the trace went before its task's result retention (1.5 s)"
    with pytest.raises(grpc.RpcError) as ei:
        w.result("t-ret")                            # gone together with the result
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND


def test_unknown_empty_and_tracing_off_are_refused_with_their_codes(start_worker):
    w = start_worker()
    with pytest.raises(grpc.RpcError) as ei:
        trace_of(w, "never-submitted")
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND and "never-submitted" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        trace_of(w, "")
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "task_id is required" in ei.value.details()
    w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="t-reserved"), timeout=10)
    with pytest.raises(grpc.RpcError) as ei:
        trace_of(w, "t-reserved")
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND and "not submitted yet" in ei.value.details()
    with connect(f"127.0.0.1:{w.port}") as c:
        with pytest.raises(NotFound):
            c.trace("never-submitted")
        with pytest.raises(InvalidArgument):
            c.trace("")

    off = start_worker({"TRACE_ENABLED": "false"})
    off.submit_calls("t-off", [("add", [1, 2])])
    assert off.wait_terminal("t-off").state == pb.TASK_STATE_SUCCEEDED
    with pytest.raises(grpc.RpcError) as ei:
        trace_of(off, "t-off")
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "TRACE_ENABLED=true" in ei.value.details()
    with connect(f"127.0.0.1:{off.port}") as c, pytest.raises(TracingOff, match="TRACE_ENABLED=true") as te:
        c.trace("t-off")
    assert not isinstance(te.value, InvalidSlot)     # same code, another remedy: not a slot problem


def test_blockx_trace_writes_a_file_that_parses(start_worker, tmp_path):
    w = start_worker()
    w.submit_calls("t-cli", [("sum_squares", [4])])
    assert w.wait_terminal("t-cli").state == pb.TASK_STATE_SUCCEEDED
    out = tmp_path / "trace.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(out, "wb") as fh:
        p = subprocess.run([sys.executable, "-m", "blockx", "trace", "t-cli", "--worker", f"127.0.0.1:{w.port}"],
                           stdout=fh, stderr=subprocess.PIPE, env=env, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert b"trace of task t-cli" in p.stderr and b"complete" in p.stderr
    xs, names = validate(json.loads(out.read_text()))
    assert sum(1 for e in xs if e["cat"] == "subcall") == 4 and "worker: task phases" in names.values()
    p = subprocess.run([sys.executable, "-m", "blockx", "trace", "nope", "--worker", f"127.0.0.1:{w.port}"],
                       capture_output=True, env=env, timeout=60)
    assert p.returncode == 1 and b"NOT_FOUND" in p.stderr and p.stdout == b""
