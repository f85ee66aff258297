"""SubcallBinder on its own: refusals, binding beside the parent, parking and
unparking, cached answers, subtree cancellation."""
import orjson
import pytest

from blockx.core.dispatch.calls import DONE, RUNNING
from blockx.core.dispatch.commands import BindCall, CancelCallCmd, CompleteCallFromCache, SubcallDone
from blockx.core.dispatch.types import ExecutorSnapshot, SubcallRejected

from tests.unit.core.dispatcher_parts import Parts


def _add(p, parent, fn="g", arg=1, executor="e1", request_id="r"):
    return p.lifecycle.add_subcall(parent.call_id, executor, request_id, fn, "d",
                                   orjson.dumps([arg]), 50, 0, "main")


def test_a_parent_that_is_not_running_refuses_as_stale():
    p = Parts()
    _, (a,) = p.task("t", 1)
    res, cmds = _add(p, a)
    assert isinstance(res, SubcallRejected) and res.stale and cmds == []
    assert res.reason == "PARENT_NOT_ACTIVE"


def test_a_child_binds_beside_its_parent_without_selection():
    p = Parts(executors=("e1", "e2"))
    _, (a,) = p.task("t", 1)
    p.run(a, "e2")
    res, cmds = _add(p, a, executor="e1")              # not where the parent runs
    assert (res.reason, res.stale, cmds) == ("EXECUTOR_MISMATCH", True, [])
    child_id, cmds = _add(p, a, executor="e2")
    assert child_id == "t/0/sub-1"
    assert cmds == [BindCall(child_id, "e2", "t", True, "t/0")]
    child = p.calls.by_id[child_id]
    assert (child.state, child.depth, child.budget_ms, child.attempt_count) == (RUNNING, 1, 50, 1)
    assert p.exec.view("e2").local_inflight == 2 and a.children == {child_id: child}
    assert _add(p, a, arg=2, executor="e2")[0] == "t/0/sub-2"   # the counter is binder-wide


def test_a_child_of_an_unhealthy_executor_parks_until_a_snapshot_frees_it():
    p = Parts()
    _, (a,) = p.task("t", 1)
    p.run(a)
    p.exec.view("e1").healthy = False
    child_id, cmds = _add(p, a)
    child = p.calls.by_id[child_id]
    assert cmds == [] and child.parked and list(p.subcalls.parked) == [child_id]
    out: list = []
    p.subcalls.retry_parked(out)
    assert out == [] and child.parked                   # still unhealthy
    p.exec.update([ExecutorSnapshot("e1", True, 0, 8)])
    p.subcalls.retry_parked(out)
    assert out == [BindCall(child_id, "e1", "t", True, "t/0")]
    assert not child.parked and p.subcalls.parked == {}


def test_a_cached_result_answers_at_once():
    p = Parts()
    task, (a,) = p.task("t", 1)
    p.run(a)
    key = p.cache_key("g", "d", orjson.dumps([1]))
    task.cache[key] = b"10"
    child_id, cmds = _add(p, a, request_id="r7")
    assert cmds == [CompleteCallFromCache(child_id, "t", True, "t/0"),
                    SubcallDone(child_id, "t/0", "e1", "r7", True, b"10", "", "", False, 0, 1, "")]
    assert p.calls.by_id[child_id].state == DONE and task.cache_hits == 1


def test_a_cycle_and_a_too_deep_child_are_refused():
    p = Parts()
    _, (a,) = p.task("t", 1)                            # a is f(0)
    p.run(a)
    res, _ = _add(p, a, fn="f", arg=0)
    assert res.reason == "CYCLE" and not res.stale
    child_id, _ = _add(p, a)
    child = p.calls.by_id[child_id]
    child.bound = True
    child.depth = 6                                     # a depth-7 grandchild: ancestry of 7 < 8
    ok, _ = _add(p, child, arg=3)
    assert isinstance(ok, str)
    child.depth = 7                                     # a depth-8 grandchild: ancestry of 8 is not < 8
    res, _ = _add(p, child, arg=4)
    assert res.reason == "DEPTH_EXCEEDED"


def test_cancel_subtree_cancels_running_children_quietly():
    p = Parts()
    _, (a,) = p.task("t", 1)
    p.run(a)
    running_id, _ = _add(p, a, arg=1)
    p.exec.view("e1").healthy = False
    parked_id, _ = _add(p, a, arg=2)
    out: list = []
    p.lifecycle.cancel_subtree(a, "parent call ended", out)
    assert out == [CancelCallCmd(running_id, "e1", "parent call ended", 1)]   # no SubcallDone
    running, parked = p.calls.by_id[running_id], p.calls.by_id[parked_id]
    assert (running.state, running.error_kind, parked.state) == (DONE, "CANCELLED", DONE)
    assert p.subcalls.parked == {} and a.children is None
    assert p.exec.view("e1").local_inflight == 1        # only the parent
