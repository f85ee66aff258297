"""Runaway calls: a call that computes past its budget without ever
yielding is stopped by the executor's budget preemption, on by default; the
executor survives and serves the other calls it holds. The wedge backstop
(stall timeout, 5.2 s here) is not what stops it."""
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.e2e.spawn_modes import SPAWN_MODES, spawn_env
from tests.e2e.test_faults import _metric


@pytest.mark.parametrize("mode", SPAWN_MODES)
def test_a_spinning_call_fails_on_its_budget_and_its_executor_carries_on(start_worker, mode):
    w = start_worker({"CALL_DEADLINE_MS": "200", **spawn_env(mode)}, executors=1)
    t0 = time.monotonic()
    w.submit_calls("t-spin", [("spin_forever", [])], retry=(1, 5, 0))
    w.submit_calls("t-others", [("add", [i, 1]) for i in range(5)])
    res = w.wait_terminal("t-spin", timeout=20)
    elapsed = time.monotonic() - t0
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED", res
    assert "BUDGET_EXCEEDED" in res.failure_message and "budget of 200 ms" in res.failure_message, \
        res.failure_message
    assert elapsed < 3.0, f"the spin took {elapsed:.2f} s to stop (the backstop is at 5.2 s)"
    others = w.wait_terminal("t-others", timeout=10)
    assert others.state == pb.TASK_STATE_SUCCEEDED, others.failure_message
    assert [int(o) for o in others.outputs] == [1, 2, 3, 4, 5]
    # The executor was not killed: no wedge kill, no restart.
    assert _metric(w, "blockx_executor_wedge_kills_total") == 0
    assert _metric(w, "blockx_executor_restarts_total") == 0


def test_an_idle_executor_past_the_stall_timeout_is_not_stalled(start_worker):
    # The Filter step drops an executor whose scheduler stalled past the timeout,
    # running a call or not. An idle scheduler still wakes on every idle poll, so
    # a Worker left idle longer than the timeout (5.2 s here) keeps dispatching.
    w = start_worker({"CALL_DEADLINE_MS": "200"}, executors=1)
    w.submit_calls("t-before", [("add", [1, 1])])
    assert w.wait_terminal("t-before", timeout=10).state == pb.TASK_STATE_SUCCEEDED
    time.sleep(6.5)
    t0 = time.monotonic()
    w.submit_calls("t-after", [("add", [2, 1])])
    res = w.wait_terminal("t-after", timeout=10)
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    assert [int(o) for o in res.outputs] == [3]
    assert time.monotonic() - t0 < 3.0
    assert _metric(w, "blockx_executor_wedge_kills_total") == 0
