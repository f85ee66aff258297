"""Subcall singleflight end to end: a real Worker and its executors. Two root
calls of one task ask for the same slow subcall at once; its body runs once
(it appends a line to a file: one line) and both parents get its outcome, an
output or, when the one run fails, that failure (a failure is never cached, so
a second run would show as a second line)."""
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e

CONTINUE = pb.CALL_FAILURE_POLICY_CONTINUE


def _parents(tmp, fail):
    path = str(tmp / "runs.txt")
    marks = [str(tmp / "asked-0"), str(tmp / "asked-1")]
    return path, [("sf_parent", [m, path, marks, fail]) for m in marks]


def _lines(path):
    with open(path) as f:
        return f.read().splitlines()


def test_two_parents_asking_one_slow_subcall_at_once_run_its_body_once(worker, executor_tmp):
    path, calls = _parents(executor_tmp, False)
    worker.submit_calls("t-sf-ok", calls, policy=CONTINUE)
    res = worker.wait_terminal("t-sf-ok")
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    assert outputs(res) == [{"out": "once"}, {"out": "once"}]
    assert _lines(path) == ["ran"]
    assert res.statistic.cache_hits == 1 and res.statistic.call_count == 2


def test_when_the_one_run_fails_both_parents_get_its_failure(worker, executor_tmp):
    path, calls = _parents(executor_tmp, True)
    worker.submit_calls("t-sf-fail", calls, policy=CONTINUE)
    res = worker.wait_terminal("t-sf-fail")
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    got = outputs(res)
    # the child's own kind (SubcallError used to read SUBCALL_FAILED), for the waiter as for the leader
    assert [g.get("error") for g in got] == ["USER_ERROR", "USER_ERROR"], got
    assert all("USER_ERROR: ValueError: sf_once failed on purpose" in g["message"] for g in got), got
    assert _lines(path) == ["ran"]
