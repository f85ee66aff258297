"""The end of a drain, against a real worker with real executors: what a worker
reports while draining, the tasks still running at the drain timeout (their
watchers get a terminal update), and the order of the forced phase."""
import signal
import threading
import time

import grpc
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.support import auth

pytestmark = pytest.mark.e2e


def _until(cond, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _status(w) -> pb.WorkerStatus:
    return w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10)


def _watch_in_thread(port: int, task_id: str):
    got: list = []

    def run():
        ch = auth.channel(f"127.0.0.1:{port}")
        try:
            for upd in pb_grpc.WorkerServiceStub(ch).WatchTasks(pb.WatchTasksRequest(task_ids=[task_id]),
                                                                 timeout=60):
                got.append(upd)
            got.append("ended OK")
        except grpc.RpcError as err:
            got.append(err)
        finally:
            ch.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, got


def test_a_draining_worker_reports_not_ready(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "20000"})
    _until(lambda: _status(w).ready, "the worker to be ready")
    w.submit_calls("sd-ready", [("sleep_ms", [3000])])
    _until(lambda: w.result("sd-ready").state == pb.TASK_STATE_RUNNING, "the task to run")
    w.signal(signal.SIGTERM)
    _until(lambda: _status(w).draining, "the worker to drain")
    st = _status(w)
    assert (st.ready, st.draining) == (False, True)
    assert w.wait_exit(30) == 0


def test_tasks_running_at_the_drain_timeout_end_with_a_terminal_update(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "1000"})
    w.submit_calls("sd-slow", [("sleep_ms", [30000])])
    t, updates = _watch_in_thread(w.port, "sd-slow")
    _until(lambda: updates, "the watch's current state")
    assert not isinstance(updates[0], grpc.RpcError), updates[0]
    assert updates[0].state == pb.TASK_STATE_RUNNING, updates[0]
    w.signal(signal.SIGTERM)
    assert w.wait_exit(20) == 0
    t.join(10)
    assert updates[-1] == "ended OK", updates          # the stream ended after its terminal update
    terminal = [u for u in updates[:-1] if u.is_terminal]
    assert len(terminal) == 1, updates
    res = terminal[0].result
    assert terminal[0].state == res.state == pb.TASK_STATE_FAILED
    assert (res.failure_code, res.retryable) == ("WORKER_SHUTDOWN", True)
    assert "shut down before the task finished" in res.failure_message
    assert w.find_event("shutdown_step", step="tasks_ended", unfinished_tasks=1)
    assert w.find_event("task_finished", task_id="sd-slow", failure_code="WORKER_SHUTDOWN")


def test_the_forced_phase_closes_the_io_scopes_before_the_watch_streams(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "500"})
    w.submit_calls("sd-order", [("sleep_ms", [30000])])
    _until(lambda: w.result("sd-order").state == pb.TASK_STATE_RUNNING, "the task to run")
    w.signal(signal.SIGTERM)
    assert w.wait_exit(20) == 0
    steps = [e["step"] for e in w.events_named("shutdown_step")]
    assert steps == ["tasks_ended", "executor_pool_stopped", "executor_adapter_closed",
                     "io_scopes_closed", "watch_streams_closed"]
