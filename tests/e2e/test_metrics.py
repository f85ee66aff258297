"""/metrics of a real worker moves by the right amounts."""
import re
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb

pytestmark = pytest.mark.e2e


def _samples(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def _sum(samples, prefix):
    return sum(v for k, v in samples.items() if k == prefix or k.startswith(prefix + "{"))


def test_counters_move_by_the_right_amounts(start_worker):
    w = start_worker()
    # Ready means one healthy executor; the second may attach a moment later (a
    # race that failed this test about one run in five on a loaded machine).
    deadline = time.monotonic() + 15
    while _samples(w.metrics_text()).get("blockx_executors_healthy") != 2:
        assert time.monotonic() < deadline, "the second executor never attached"
        time.sleep(0.02)
    before = _samples(w.metrics_text())
    n = 12
    ids = [f"m-{i}" for i in range(n)]
    for i, tid in enumerate(ids):
        calls = [("add", [i, 1]), ("add1", [i])] if i % 4 else [("fail", ["x"])]
        w.submit_calls(tid, calls)
    results = {}
    for upd in w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids), timeout=30):
        if upd.is_terminal:
            results[upd.task_id] = upd.result
    assert len(results) == n
    deadline = time.monotonic() + 5
    while True:  # the last terminal update may reach us before its counter is bumped
        after = _samples(w.metrics_text())
        if _sum(after, "blockx_tasks_terminal_total") - _sum(before, "blockx_tasks_terminal_total") == n:
            break
        assert time.monotonic() < deadline, "the terminal counter never reached the task count"
        time.sleep(0.02)
    failed_tasks = sum(1 for r in results.values() if r.state == pb.TASK_STATE_FAILED)
    assert failed_tasks == 3
    d = lambda name: _sum(after, name) - _sum(before, name)  # noqa: E731
    assert d("blockx_tasks_submitted_total") == n
    assert d("blockx_tasks_terminal_total") == n
    assert after.get('blockx_tasks_terminal_total{failure_code="CALL_FAILED",state="FAILED"}', 0) - \
        before.get('blockx_tasks_terminal_total{failure_code="CALL_FAILED",state="FAILED"}', 0) == 3
    assert d("blockx_calls_dispatched_total") == 9 * 2 + 3
    assert d("blockx_calls_dispatched_total") == d("blockx_calls_completed_total") + d("blockx_calls_failed_total")
    assert d('blockx_calls_failed_total{error_kind="USER_ERROR"}') == 3
    assert after["blockx_executors_healthy"] == 2
    assert d('blockx_grpc_requests_total{code="OK",method="SubmitTask"}') == n
    assert _sum(after, "blockx_slots") == 50
    text = w.metrics_text()
    for name in ("blockx_task_phase_duration_seconds_bucket", "blockx_uds_frames_total",
                 "blockx_uds_bytes_total", "blockx_outbox_depth", "blockx_etcd_registration_state",
                 "blockx_executor_restarts_total", "blockx_call_cache_hits_total"):
        assert re.search(rf"^{name}", text, re.M), name
