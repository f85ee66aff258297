"""Graceful shutdown: SIGTERM drains in-flight tasks, refuses new ones, and exits 0."""
import signal
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.support import auth

pytestmark = pytest.mark.e2e


def _watch_in_thread(w, task_id):
    got = []

    def run():
        ch = auth.channel(f"127.0.0.1:{w.port}")
        try:
            for upd in pb_grpc.WorkerServiceStub(ch).WatchTasks(pb.WatchTasksRequest(task_ids=[task_id]),
                                                                 timeout=30):
                got.append(upd)
        except grpc.RpcError as err:
            got.append(err)
        finally:
            ch.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, got


def _until(cond, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _draining(w) -> bool:
    # Health goes NOT_SERVING right after the orchestrator is set draining.
    return w.health() == health_pb2.HealthCheckResponse.NOT_SERVING


def _running(w, task_id: str) -> bool:
    return w.result(task_id).state == pb.TASK_STATE_RUNNING


def test_sigterm_drains_in_flight_tasks(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "20000"})
    w.submit_calls("drain-1", [("sleep_ms", [2500])])
    t, updates = _watch_in_thread(w, "drain-1")
    _until(lambda: updates, "the watch to deliver the current state")
    t0 = time.monotonic()
    w.signal(signal.SIGTERM)
    _until(lambda: _draining(w), "the worker to start draining")
    # New work is refused while draining, in-flight work stays queryable.
    with pytest.raises(grpc.RpcError) as ei:
        w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="drain-new"), timeout=5)
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE and "drain" in ei.value.details().lower()
    with pytest.raises(grpc.RpcError) as ei:
        w.submit_calls("drain-new-2", [("add", [1, 1])])
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    assert w.health() == health_pb2.HealthCheckResponse.NOT_SERVING
    assert w.result("drain-1").state == pb.TASK_STATE_RUNNING
    # The task finishes, its watcher gets the terminal update, the process exits 0.
    assert w.wait_exit(30) == 0
    elapsed = time.monotonic() - t0
    t.join(5)
    terminal = [u for u in updates if not isinstance(u, Exception) and u.is_terminal]
    assert terminal and terminal[0].result.state == pb.TASK_STATE_SUCCEEDED, updates
    assert terminal[0].result.outputs == [b"2500"]
    assert elapsed >= 2.0, "the worker exited before its in-flight task finished"
    assert w.find_event("drain_finished", drained=True)


def test_drain_timeout_forces_shutdown(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "1000"})
    w.submit_calls("drain-slow", [("sleep_ms", [30000])])
    _until(lambda: _running(w, "drain-slow"), "the task to run")
    t0 = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait_exit(20) == 0
    assert time.monotonic() - t0 < 1.0 + 5.0 + 1.0
    assert w.find_event("drain_finished", drained=False)


def test_second_signal_forces_shutdown(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "60000"})
    w.submit_calls("drain-slow-2", [("sleep_ms", [30000])])
    _until(lambda: _running(w, "drain-slow-2"), "the task to run")
    w.signal(signal.SIGTERM)
    _until(lambda: _draining(w), "the worker to start draining")
    assert w.proc.poll() is None, "still draining"
    t0 = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait_exit(20) == 0
    assert time.monotonic() - t0 < 7.0
    assert w.find_event("shutdown_forced")
