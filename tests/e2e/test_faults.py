"""Faults with real processes: executor killed mid-call, a wedged executor, a
stopped (silent) executor, and garbage written to the executor socket."""
import os
import pathlib
import signal
import socket
import struct
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.e2e.spawn_modes import SPAWN_MODES, spawn_env
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e


def _wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _metric(w, name):
    for line in w.metrics_text().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_executor_killed_mid_call_is_restarted_and_the_call_retried(start_worker, executor_tmp):
    w = start_worker({"CALL_RETRY_BASE_BACKOFF_MS": "5"})
    marker = executor_tmp / "crash.pid"
    w.submit_calls("t-crash", [("crash_once", [str(marker)])], retry=(3, 5, 0))
    pid = int(_wait_for(lambda: marker.exists() and marker.read_text(), 15, "the first attempt to start"))
    os.kill(pid, signal.SIGKILL)
    res = w.wait_terminal("t-crash", timeout=30)
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    assert outputs(res) == ["recovered"] and res.statistic.call_retries >= 1
    # The pool replaced the dead executor: two healthy executors again, and it runs calls.
    _wait_for(lambda: _metric(w, "blockx_executors_healthy") == 2, 15, "the executor to be restarted")
    assert _metric(w, "blockx_executor_restarts_total") >= 1
    w.submit_calls("t-after-crash", [("add", [1, 1])] * 4)
    assert w.wait_terminal("t-after-crash").state == pb.TASK_STATE_SUCCEEDED
    # The killed attempt counts as a failed call: every dispatched call ended one way.
    text = w.metrics_text()
    failed = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("blockx_calls_failed_total{"))
    assert 'blockx_calls_failed_total{error_kind="EXECUTOR_LOST"} 1.0' in text
    assert _metric(w, "blockx_calls_dispatched_total") == _metric(w, "blockx_calls_completed_total") + failed


@pytest.mark.parametrize("mode", SPAWN_MODES)
def test_wedged_executor_is_killed(start_worker, mode):
    # An unlimited call budget (the executor would otherwise stop the spin itself)
    # and an explicit 2 s scheduler stall timeout. In every spawn mode: a sandboxed
    # executor's kill goes through bwrap or runc.
    w = start_worker({"CALL_DEADLINE_MS": "0", "SCHEDULER_STALL_TIMEOUT_MS": "2000", **spawn_env(mode)})
    w.submit_calls("t-wedge", [("spin", [60])], retry=(1, 5, 0))
    res = w.wait_terminal("t-wedge", timeout=40)
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED"
    assert "(function spin) failed after 1 attempt(s): EXECUTOR_LOST: " in res.failure_message, res.failure_message
    assert _metric(w, "blockx_executor_wedge_kills_total") == 1
    _wait_for(lambda: _metric(w, "blockx_executors_healthy") == 2, 15, "the wedged executor to be replaced")
    w.submit_calls("t-after-wedge", [("add", [2, 2])])
    assert outputs(w.wait_terminal("t-after-wedge")) == [4]


def test_silent_executor_is_declared_lost_by_heartbeat_timeout(start_worker):
    w = start_worker({"CALL_DEADLINE_MS": "0"})
    # Ready means one healthy executor: exec-0 must have attached before it is
    # stopped, or there is no heartbeat of it to miss.
    _wait_for(lambda: _metric(w, "blockx_executors_healthy") == 2, 20, "both executors to attach")
    pid = None
    for line in w.lines:
        if "executor exec-0 started (pid" in line:
            pid = int(line.split("(pid ")[1].split(")")[0])
    assert pid, "no exec-0 pid in the log"
    os.kill(pid, signal.SIGSTOP)
    try:
        _wait_for(lambda: _metric(w, "blockx_executor_heartbeat_timeouts_total") >= 1, 30,
                  "a heartbeat timeout")
        # Tasks still run on the remaining executor meanwhile.
        w.submit_calls("t-during-stop", [("add", [3, 3])] * 3)
        assert outputs(w.wait_terminal("t-during-stop")) == [6, 6, 6]
    finally:
        os.kill(pid, signal.SIGCONT)
    _wait_for(lambda: _metric(w, "blockx_executors_healthy") == 2, 20, "the executor to come back")


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x05hello",                       # not JSON
    struct.pack(">I", 64 * 1024 * 1024) + b"{}",     # over the 16 MiB frame limit
    b"\x00\x00\x00\x02[]",                           # not an object
    b"\x00\x00\x00\x10" + b'{"payload":{}}  ',       # no messageType
    b"BXB1" * 10,                                    # length prefix of ~1.1 GB
])
def test_malformed_frames_close_one_connection_not_the_worker(worker, garbage):
    path = worker.env["EXECUTOR_SOCKET_PATH"]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall(garbage)
    assert s.recv(1) == b"", "the worker should close a connection that sent a malformed frame"
    s.close()
    worker.submit_calls(f"t-after-garbage-{garbage[:6].hex()}", [("add", [5, 5])])
    assert outputs(worker.wait_terminal(f"t-after-garbage-{garbage[:6].hex()}")) == [10]


def test_socket_permissions(worker):
    path = pathlib.Path(worker.env["EXECUTOR_SOCKET_PATH"])
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
