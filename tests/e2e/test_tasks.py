"""Tasks end to end: submit, watch, result, retention, deadlines, builders, policies, retries."""
import json
import time

import grpc
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e

CONTINUE = pb.CALL_FAILURE_POLICY_CONTINUE


def test_submit_watch_and_result(worker):
    r = worker.submit_calls("t-basic", [("add", [1, 2]), ("add1", [41]), ("square", [7])])
    assert r.task_id == "t-basic" and r.state == pb.TASK_STATE_RUNNING  # the calls run after the reply
    updates = list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-basic"]), timeout=20))
    assert updates[-1].is_terminal and all(not u.is_terminal for u in updates[:-1])
    res = updates[-1].result
    assert res.state == pb.TASK_STATE_SUCCEEDED
    assert outputs(res) == [3, 42, 49]
    st = res.statistic
    assert st.call_count == 3 and st.calls_failed == 0 and st.finished_at_ms >= st.accepted_at_ms > 0
    got = worker.result("t-basic")
    assert got.state == pb.TASK_STATE_SUCCEEDED and outputs(got.result) == [3, 42, 49]
    # Idempotent resubmission returns the terminal snapshot without re-running.
    again = worker.submit_calls("t-basic", [("add", [100, 100])])
    assert again.state == pb.TASK_STATE_SUCCEEDED and outputs(again.result) == [3, 42, 49]


def test_one_watch_stream_carries_many_tasks(worker):
    ids = [f"t-many-{i}" for i in range(20)]
    for i, tid in enumerate(ids):
        worker.submit_calls(tid, [("add", [i, i])])
    terminal = {}
    for upd in worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids), timeout=30):
        if upd.is_terminal:
            terminal[upd.task_id] = upd.result
    assert sorted(terminal) == sorted(ids)
    for i, tid in enumerate(ids):
        assert outputs(terminal[tid]) == [2 * i]


def test_watch_of_unknown_task_is_not_found(worker):
    with pytest.raises(grpc.RpcError) as ei:
        list(worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["nobody"]), timeout=5))
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND


def test_result_retention_then_not_found(start_worker):
    w = start_worker({"RESULT_RETENTION_MS": "700", "MAX_TASK_TIMEOUT_MS": "600",
                      "TASK_DEADLINE_MS": "600", "FUNCTION_SNAPSHOT_RETENTION_MS": "600"})
    w.submit_calls("t-ret", [("add", [1, 1])])
    assert w.wait_terminal("t-ret").state == pb.TASK_STATE_SUCCEEDED
    assert w.result("t-ret").state == pb.TASK_STATE_SUCCEEDED
    deadline = time.monotonic() + 5
    while True:
        try:
            w.result("t-ret")
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.NOT_FOUND
            break
        assert time.monotonic() < deadline, "result was never purged"
        time.sleep(0.1)


def test_deadline_times_out_retryable(worker):
    worker.submit_calls("t-deadline", [("sleep_ms", [10_000])], timeout_ms=800)
    t0 = time.monotonic()
    res = worker.wait_terminal("t-deadline")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "TIMED_OUT" and res.retryable
    assert time.monotonic() - t0 < 5


def test_unknown_builder(worker):
    worker.submit("t-nobuilder", "noSuchBuilder", {"x": 1})
    res = worker.wait_terminal("t-nobuilder")
    assert res.failure_code == "BUILDER_NOT_FOUND" and "noSuchBuilder" in res.failure_message


def test_bad_builder_payload(worker):
    worker.submit("t-badpayload", "callList", {"calls": "nope"})
    res = worker.wait_terminal("t-badpayload")
    assert res.failure_code == "BUILDER_FAILED" and "calls" in res.failure_message


def test_unknown_function_fails_the_calls(worker):
    worker.submit_calls("t-nofunc", [("no_such_function", [])])
    res = worker.wait_terminal("t-nofunc")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED"
    assert "no_such_function" in res.failure_message


def test_fast_fail_policy(worker):
    worker.submit_calls("t-ff", [("add", [1, 1]), ("fail", ["bad input"]), ("add", [2, 2])])
    res = worker.wait_terminal("t-ff")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED"
    assert "bad input" in res.failure_message and not res.retryable
    assert res.outputs == []


def test_continue_policy_keeps_successful_outputs(worker):
    worker.submit_calls("t-cont", [("add", [1, 1]), ("fail", ["x"]), ("add", [2, 2])], policy=CONTINUE)
    res = worker.wait_terminal("t-cont")
    assert res.statistic.calls_failed == 1 and res.statistic.call_count == 3
    assert outputs(res) == [2, 4]


def test_retries_until_success(worker, executor_tmp):
    counter = str(executor_tmp / "flaky.count")
    worker.submit_calls("t-retry", [("flaky", [counter, 2])], retry=(3, 5, 0))
    res = worker.wait_terminal("t-retry")
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    assert outputs(res) == [3] and res.statistic.call_retries == 2


def test_retries_exhausted(worker, executor_tmp):
    counter = str(executor_tmp / "flaky2.count")
    worker.submit_calls("t-retry-x", [("flaky", [counter, 5])], retry=(2, 5, 0))
    res = worker.wait_terminal("t-retry-x")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED"
    assert "attempt 2 fails" in res.failure_message


def test_subcalls(worker):
    worker.submit_calls("t-sub", [("sum_squares", [10]), ("deep", [5])])
    res = worker.wait_terminal("t-sub")
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    assert outputs(res) == [285, 5]
    assert res.statistic.call_count == 2     # subcalls never count as root calls


def test_subcall_depth_limit(worker):
    worker.submit_calls("t-deep", [("deep", [20])])
    res = worker.wait_terminal("t-deep")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED"


def test_io_through_the_worker(start_worker):
    worker = start_worker({"IO_DEVSTUB_ENABLED": "true"})   # a production profile has it only when configured
    worker.submit_calls("t-io", [("echo_io", [{"k": 1}, "hello"])])
    res = worker.wait_terminal("t-io")
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    out = outputs(res)[0]
    assert json.dumps(out)  # a JSON object built from three IO round trips
    assert "HELLO" in json.dumps(out)


def test_writer_plugin_results(start_worker):
    worker = start_worker(profile="dev")  # the `test` writer is a dev stub
    worker.submit_calls("t-plugin", [("add", [1, 2])], result_handler=("test", {}))
    res = worker.wait_terminal("t-plugin")
    assert res.state == pb.TASK_STATE_SUCCEEDED
    assert [p.plugin for p in res.plugin_results] == ["test"] and res.plugin_results[0].ok
    worker.submit_calls("t-plugin-fail", [("add", [1, 2])],
                        result_handler=("test", {"fail": True, "message": "disk full"}))
    res = worker.wait_terminal("t-plugin-fail")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "PLUGIN_FAILED"
    assert "disk full" in res.failure_message


def test_output_cap(start_worker):
    w = start_worker({"MAX_COLLECTED_OUTPUT_BYTES": "1000"})
    w.submit_calls("t-cap", [("big", [400]), ("big", [400]), ("big", [400])])
    res = w.wait_terminal("t-cap")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "OUTPUT_BYTES_EXCEEDED"
    assert res.outputs == []


def test_streaming_range_scan(start_worker):
    w = start_worker({"STREAM_BUILD_ENABLED": "true"}, profile="dev")  # rangeScan is a dev stand-in
    w.submit("t-scan", "rangeScan", {"functionId": "add1", "start": 0, "stop": 20000})
    res = w.wait_terminal("t-scan", timeout=60)
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    assert res.statistic.call_count == 20000
    assert outputs(res) == list(range(1, 20001))


def test_watch_disconnect_grace_reclaims_the_task(start_worker):
    w = start_worker({"WATCH_DISCONNECT_GRACE_MS": "400"})
    w.submit_calls("t-grace", [("sleep_ms", [20_000])])
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-grace"]), timeout=30)
    first = next(stream)
    assert first.state == pb.TASK_STATE_RUNNING
    stream.cancel()                      # the only watcher goes away
    deadline = time.monotonic() + 5
    while True:
        got = w.result("t-grace")
        if got.state == pb.TASK_STATE_FAILED:
            break
        assert time.monotonic() < deadline, "the task was not reclaimed after the Watch grace"
        time.sleep(0.05)
    assert got.result.failure_code == "WATCH_DISCONNECTED" and not got.result.retryable


def test_watch_reattach_within_grace_keeps_the_task(start_worker):
    w = start_worker({"WATCH_DISCONNECT_GRACE_MS": "1500"})
    w.submit_calls("t-reattach", [("sleep_ms", [1200])])
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-reattach"]), timeout=30)
    next(stream)
    stream.cancel()
    time.sleep(0.3)
    res = w.wait_terminal("t-reattach")
    assert res.state == pb.TASK_STATE_SUCCEEDED


# What each production profile registers (builders, writers), as README.md lists them.
REGISTERED = {"block": ("bundleScan, callList, dbscan", "bundleWrite, tableUpserts"),
              "bundle": ("bundleScan, callList", "bundleWrite, tableUpserts")}


@pytest.mark.parametrize("profile", ["block", "bundle"])
def test_production_profiles_refuse_the_dev_stubs(start_worker, profile):
    # Defect: both production profiles registered the dev stubs, and the `test`
    # writer sleeps as long as a client asks (up to 600 s) holding a plugin slot.
    w = start_worker(profile=profile)
    for builder, payload in (("static", {"functionId": "add1", "args": [1]}),
                             ("payload", {"functionId": "echo", "k": 1}),
                             ("rangeScan", {"functionId": "square", "start": 0, "stop": 3})):
        w.submit(f"t-{profile}-{builder}", builder, payload)
        res = w.wait_terminal(f"t-{profile}-{builder}")
        assert (res.state, res.failure_code) == (pb.TASK_STATE_FAILED, "BUILDER_NOT_FOUND")
        assert res.failure_message == (f"no call builder named {builder!r} "
                                       f"(this worker's profile registers: {REGISTERED[profile][0]})")
    w.submit_calls(f"t-{profile}-writer", [("add", [1, 2])], result_handler=("test", {"sleepMs": 600_000}))
    res = w.wait_terminal(f"t-{profile}-writer")
    assert (res.state, res.failure_code) == (pb.TASK_STATE_FAILED, "PLUGIN_FAILED")
    assert res.failure_message == ("no writer plugin named 'test' "
                                   f"(this worker's profile registers: {REGISTERED[profile][1]})")


def test_dev_profile_runs_the_dev_stubs(start_worker):
    # dev = block + the dev stubs, with streaming build on so rangeScan streams.
    w = start_worker(profile="dev")
    w.submit("t-dev-scan", "rangeScan", {"functionId": "square", "start": 0, "stop": 100})
    res = w.wait_terminal("t-dev-scan")
    assert res.state == pb.TASK_STATE_SUCCEEDED and outputs(res) == [i * i for i in range(100)]
    w.submit("t-dev-static", "static", {"functionId": "add1", "count": 2, "args": [1]})
    res = w.wait_terminal("t-dev-static")
    assert res.state == pb.TASK_STATE_SUCCEEDED and outputs(res) == [2, 2]
    w.submit_calls("t-dev-writer", [("add", [1, 2])], result_handler=("log", {}))
    res = w.wait_terminal("t-dev-writer")
    assert res.state == pb.TASK_STATE_SUCCEEDED and [p.plugin for p in res.plugin_results] == ["log"]