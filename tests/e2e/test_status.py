"""GetWorkerStatus against a real worker with real executors:
what it reports at rest and under work, and a SIGKILLed executor seen as not
healthy, then restarted."""
from __future__ import annotations

import os
import signal
import time

import pytest

from blockx.client import connect
from blockx.worker.v1 import worker_pb2 as pb

pytestmark = pytest.mark.e2e


def _status(w) -> pb.WorkerStatus:
    return w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10)


def _wait(w, pred, timeout=20.0, what=""):
    deadline = time.monotonic() + timeout
    st = _status(w)
    while not pred(st):
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {st}"
        time.sleep(0.05)
        st = _status(w)
    return st


def test_status_reports_slots_executors_and_counters(start_worker):
    w = start_worker({"TASK_SLOTS": "7"}, executors=2)
    st = _wait(w, lambda s: sum(e.healthy for e in s.executors) == 2, what="two healthy executors")
    assert st.ready and not st.draining
    assert (st.slots.total, st.slots.free, st.slots.reserved, st.slots.running) == (7, 7, 0, 0)
    assert dict(st.tasks_by_phase) == {"PREPARING": 0, "BUILDER": 0, "CALLS": 0, "PLUGIN": 0}
    assert st.worker_addr.endswith(f":{w.port}") and st.etcd_state == "disabled"
    assert st.code_epoch >= 1 and st.uptime_ms >= 0 and st.started_at_ms <= st.now_ms
    assert [e.executor_id for e in st.executors] == ["exec-0", "exec-1"]
    for e in st.executors:
        assert e.state == "HEALTHY" and e.pid > 0 and e.pid != w.proc.pid
        assert e.rss_bytes > 1_000_000 and e.capacity > 0
        assert 0 <= e.last_heartbeat_age_ms < 5_000 and e.restarts == 0
        assert e.cpu_user_seconds + e.cpu_system_seconds > 0
    # Work moves the cumulative counters; a running task shows in its phase.
    w.submit_calls("st-1", [("sleep_ms", [600])])
    running = _wait(w, lambda s: s.tasks_by_phase["CALLS"] == 1, what="a task in CALLS")
    assert running.slots.running == 1 and running.slots.free == 6
    assert w.wait_terminal("st-1").state == pb.TASK_STATE_SUCCEEDED
    w.submit_calls("st-2", [("fail", ["no"])])
    assert w.wait_terminal("st-2").state == pb.TASK_STATE_FAILED
    after = _wait(w, lambda s: s.counters.tasks_failed == 1, what="the failed task counted")
    c = after.counters
    assert (c.tasks_submitted, c.tasks_succeeded, c.tasks_failed) == (2, 1, 1)
    assert c.calls_completed >= 1 and c.calls_failed >= 1 and c.calls_dispatched >= 2
    assert sum(after.tasks_by_phase.values()) == 0 and after.slots.free == 7
    assert dict(c.tasks_failed_by_code) == {w.result("st-2").result.failure_code: 1}
    # The client library reads the same.
    with connect(f"127.0.0.1:{w.port}") as client:
        assert client.status().counters.tasks_submitted == 2


def test_status_reflects_a_killed_executor(start_worker):
    w = start_worker(executors=2)          # the pool restarts an executor after 1 s (the default)
    st = _wait(w, lambda s: sum(e.healthy for e in s.executors) == 2, what="two healthy executors")
    victim = st.executors[0]
    os.kill(victim.pid, signal.SIGKILL)
    down = _wait(w, lambda s: not s.executors[0].healthy, what="exec-0 seen as not healthy")
    e0 = down.executors[0]
    assert e0.executor_id == victim.executor_id and e0.state != "HEALTHY" and e0.last_heartbeat_age_ms == -1
    assert down.executors[1].healthy                      # its sibling is untouched
    back = _wait(w, lambda s: s.executors[0].healthy and s.executors[0].restarts == 1,
                 what="exec-0 restarted and attached again")
    assert back.executors[0].pid not in (0, victim.pid)
    assert back.counters.executor_restarts == 1
