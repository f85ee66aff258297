"""The operator's verbs and metrics on a real Worker: `blockx cancel`, `blockx
tasks`, `blockx health` (its exit codes against a ready, a draining and an
unreachable worker), and the latency histograms and queued-calls gauge on
/metrics after real tasks."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb

pytestmark = pytest.mark.e2e


def blockx(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockx", *args], capture_output=True, text=True, timeout=timeout)


def _until(pred, what: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_blockx_cancel_and_blockx_tasks(start_worker):
    w = start_worker({"TASK_SLOTS": "4", "RESULT_RETENTION_MS": "60000", "CALL_DEADLINE_MS": "60000"})
    addr = f"127.0.0.1:{w.port}"
    w.submit_calls("cli-slow", [("sleep_ms", [20_000])] * 2, instance_id="inst")
    w.submit_calls("cli-done", [("add", [1, 2])])
    assert w.wait_terminal("cli-done").state == pb.TASK_STATE_SUCCEEDED
    _until(lambda: w.result("cli-slow").state == pb.TASK_STATE_RUNNING and w.stub.ListTasks(
        pb.ListTasksRequest(phases=["CALLS"]), timeout=5).tasks, "cli-slow to run its calls")

    p = blockx("tasks", "--addr", addr)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["TASK", "STATE", "PHASE", "AGE", "CALLS", "OWNER", "INSTANCE", "FAILURE"]
    rows = {ln.split()[0]: ln.split() for ln in lines[1:]}
    assert rows["cli-slow"][1:3] == ["RUNNING", "CALLS"] and rows["cli-slow"][4:7] == ["0/2", "admin", "inst"]
    assert rows["cli-done"][1:3] == ["SUCCEEDED", "TERMINAL"] and rows["cli-done"][4] == "1/1"

    p = blockx("tasks", "--addr", addr, "--state", "running", "--json", "--compact")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [t["taskId"] for t in out["tasks"]] == ["cli-slow"] and out["nextPageToken"] == ""
    assert out["tasks"][0]["callsTotal"] == 2 and out["tasks"][0]["instanceId"] == "inst"

    p = blockx("tasks", "--addr", addr, "--page-size", "1", "--json")
    first = json.loads(p.stdout)
    assert len(first["tasks"]) == 1 and first["nextPageToken"]
    p = blockx("tasks", "--addr", addr, "--page-size", "1", "--all", "--json")
    assert [t["taskId"] for t in json.loads(p.stdout)["tasks"]] == ["cli-done", "cli-slow"]

    p = blockx("cancel", "cli-slow", "--addr", addr, "--reason", "from the CLI", "--compact")
    assert p.returncode == 0, (p.stdout, p.stderr)
    out = json.loads(p.stdout)
    assert out["cancelled"] is True and out["state"] == "FAILED"
    assert out["result"]["failureCode"] == "CANCELLED"
    assert out["result"]["failureMessage"] == "the task was cancelled by 'admin': from the CLI"
    again = blockx("cancel", "cli-slow", "--addr", addr, "--compact")
    assert again.returncode == 3 and json.loads(again.stdout)["cancelled"] is False   # already FAILED
    done = blockx("cancel", "cli-done", "--addr", addr, "--compact")
    assert done.returncode == 0 and json.loads(done.stdout)["state"] == "SUCCEEDED"
    missing = blockx("cancel", "nope", "--addr", addr)
    assert missing.returncode == 1 and missing.stderr.startswith("error: NOT_FOUND: task 'nope' is not known")
    bad = blockx("tasks", "--addr", addr, "--page-token", "forged")
    assert bad.returncode == 1 and "page_token is not a token this worker issued" in bad.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_blockx_health_exit_codes_ready_draining_unreachable(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "20000"})
    addr = f"127.0.0.1:{w.port}"
    p = blockx("health", "--addr", addr, "--token", "")
    assert (p.returncode, p.stdout.strip()) == (0, f"{addr}: SERVING"), p.stderr
    p = blockx("health", "--addr", addr, "--service", "blockx.worker.v1.WorkerService")
    assert p.returncode == 0, p.stderr
    p = blockx("health", "--addr", addr, "--service", "no.such.Service")
    assert p.returncode == 1 and "SERVICE_UNKNOWN" in p.stdout
    # draining: the worker still answers, NOT_SERVING, while a task holds the drain open
    w.submit_calls("hold", [("sleep_ms", [4_000])])
    _until(lambda: w.result("hold").state == pb.TASK_STATE_RUNNING, "the task to run")
    w.signal(signal.SIGTERM)
    _until(lambda: w.find_event("drain_started") or w.health() != 1, "the drain to start")
    p = blockx("health", "--addr", addr)
    assert (p.returncode, p.stdout.strip()) == (1, f"{addr}: NOT_SERVING"), (p.stdout, p.stderr)
    assert w.wait_exit(30) == 0
    p = blockx("health", "--addr", addr, "--rpc-timeout", "1")
    assert p.returncode == 2 and p.stderr.startswith("error: "), p
    p = blockx("health", "--addr", f"127.0.0.1:{_free_port()}", "--rpc-timeout", "1")
    assert p.returncode == 2
    p = blockx("health", "--bogus")
    assert p.returncode == 2


def _metric(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{want}}} not exported")


def test_latency_histograms_and_the_queued_gauge_after_tasks(start_worker):
    w = start_worker({"TASK_SLOTS": "4", "EXECUTOR_COUNT": "1"})
    w.submit_calls("m1", [("sleep_ms", [120]), ("add", [1, 2])])
    assert w.wait_terminal("m1").state == pb.TASK_STATE_SUCCEEDED
    w.submit_calls("m2", [("deep", [2])])
    assert w.wait_terminal("m2").state == pb.TASK_STATE_SUCCEEDED
    text = w.metrics_text()
    # per function: the sleep took at least 100 ms, add far less; deep ran as root and as subcalls
    assert _metric(text, "blockx_call_duration_seconds_count", function="sleep_ms") == 1
    assert _metric(text, "blockx_call_duration_seconds_bucket", function="sleep_ms", le="0.1") == 0
    assert _metric(text, "blockx_call_duration_seconds_sum", function="sleep_ms") >= 0.1
    assert _metric(text, "blockx_call_duration_seconds_count", function="add") == 1
    assert _metric(text, "blockx_call_duration_seconds_count", function="deep") == 3
    # end to end per task, by state
    assert _metric(text, "blockx_task_duration_seconds_count", state="SUCCEEDED") == 2
    assert _metric(text, "blockx_task_duration_seconds_sum", state="SUCCEEDED") >= 0.1
    # unary RPCs per method (the harness submitted over SubmitTask; WatchTasks is a stream: not timed)
    assert _metric(text, "blockx_grpc_request_duration_seconds_count", method="SubmitTask") == 2
    assert "blockx_grpc_request_duration_seconds_count{method=\"WatchTasks\"}" not in text
    assert _metric(text, "blockx_calls_queued") == 0
    # queued calls: more than the one executor's in-flight cap (executorMaxInflight, 128) wait
    w.submit_calls("m3", [("sleep_ms", [3_000 + i]) for i in range(300)])   # distinct: no singleflight
    _until(lambda: _metric(w.metrics_text(), "blockx_calls_queued") > 0, "the queued gauge to show the backlog")
    w.stub.CancelTask(pb.CancelTaskRequest(task_id="m3"), timeout=5)
    _until(lambda: _metric(w.metrics_text(), "blockx_calls_queued") == 0, "the backlog to go with the task")
