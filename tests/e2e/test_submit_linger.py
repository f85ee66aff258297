"""submitLingerMs end to end (SUBMIT_LINGER_MS): a real Worker, real executors.
While a task runs, unary tasks submitted close together wait the linger and then
start together, and all succeed; one of them cancelled while it waits ends
FAILED (CANCELLED) without its call ever running, and the others still run; a task
submitted with nothing else running starts at once; and off (the default),
nothing waits."""
from __future__ import annotations

import os
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e

LINGER_MS = 600


def _elapsed_ms(res: pb.TaskResult) -> int:
    return res.statistic.finished_at_ms - res.statistic.accepted_at_ms


def _slow(w, tid, marker, ms=3_000):
    w.submit_calls(tid, [("mark_after", [str(marker), ms, tid])])


def _wait_file(path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_tasks_submitted_while_another_runs_wait_the_linger_and_all_succeed(start_worker, executor_tmp):
    w = start_worker({"SUBMIT_LINGER_MS": str(LINGER_MS)})
    alone = "alone"
    w.submit_calls(alone, [("echo", [1])])
    res = w.wait_terminal(alone)
    assert res.state == pb.TASK_STATE_SUCCEEDED and _elapsed_ms(res) < LINGER_MS   # nothing else ran
    _slow(w, "slow", executor_tmp / "slow")
    _wait_file(f"{executor_tmp / 'slow'}.started")
    # The primer starts the batch or is the fresh start the next ones fall within: either way the
    # batch is released a whole linger after the primer (or later), never before.
    w.submit_calls("primer", [("echo", ["p"])])
    ids = [f"near-{i}" for i in range(5)]
    for i, tid in enumerate(ids):
        w.submit_calls(tid, [("echo", [i])])
    primer = w.wait_terminal("primer")
    assert primer.state == pb.TASK_STATE_SUCCEEDED
    for i, tid in enumerate(ids):
        res = w.wait_terminal(tid)
        assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
        assert outputs(res) == [i]
        assert res.statistic.finished_at_ms >= primer.statistic.accepted_at_ms + LINGER_MS - 5
    assert w.wait_terminal("slow").state == pb.TASK_STATE_SUCCEEDED


def test_a_task_cancelled_while_it_waits_never_runs_and_the_others_do(start_worker, executor_tmp):
    w = start_worker({"SUBMIT_LINGER_MS": str(LINGER_MS)})
    _slow(w, "slow", executor_tmp / "slow")
    _wait_file(f"{executor_tmp / 'slow'}.started")
    w.submit_calls("primer", [("echo", ["p"])])              # a fresh start: the next one is held
    _slow(w, "held", executor_tmp / "held", ms=10)
    w.submit_calls("after", [("echo", ["x"])])
    resp = w.stub.CancelTask(pb.CancelTaskRequest(task_id="held", reason="changed my mind"), timeout=10)
    assert resp.task_id == "held"
    res = w.wait_terminal("held")
    assert (res.state, res.failure_code) == (pb.TASK_STATE_FAILED, "CANCELLED"), res.failure_message
    after = w.wait_terminal("after")
    assert after.state == pb.TASK_STATE_SUCCEEDED and outputs(after) == ["x"]
    assert w.wait_terminal("primer").state == pb.TASK_STATE_SUCCEEDED
    time.sleep(0.3)
    assert not os.path.exists(f"{executor_tmp / 'held'}.started")    # its call never reached an executor
    assert w.wait_terminal("slow").state == pb.TASK_STATE_SUCCEEDED


def test_off_by_default_nothing_waits(start_worker, executor_tmp):
    w = start_worker()
    _slow(w, "slow", executor_tmp / "slow")
    _wait_file(f"{executor_tmp / 'slow'}.started")
    for i in range(3):
        w.submit_calls(f"t{i}", [("echo", [i])])
    for i in range(3):
        res = w.wait_terminal(f"t{i}")
        assert res.state == pb.TASK_STATE_SUCCEEDED and _elapsed_ms(res) < LINGER_MS
