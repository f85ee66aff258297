"""Subfunction calls: the SubcallBinder with the lifecycle over it (refusals,
binding beside the parent, parking and unparking, cached answers, subtree
cancellation), then through the whole core (validation, binding to the
parent's executor, results back to the parent, cache, and subtree
cancellation)."""
import orjson
import pytest

from blockx.core.dispatch.records import DONE, RUNNING
from blockx.core.dispatch.commands import BindCall, CancelCallCmd, CompleteCallFromCache, SubcallDone
from blockx.core.dispatch.types import ExecutorSnapshot, SubcallRejected
from blockx.core.dispatch.commands import (
    ArmCallRetry, BindCall, CancelCallCmd, CompleteCallFromCache, DispatchCallCmd, SubcallDone)
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import SubcallRejected

from tests.unit.core.dispatch.parts import Parts
from tests.unit.core.dispatch.harness import Harness, of_type, spec


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


def _running(**cfg):
    cfg.setdefault("default_retry_jitter_percent", 0)
    h = Harness(DispatcherConfig(**cfg), executors=("a", "b"), contexts=10)
    h.submit("t", [spec("f", 1)])
    return h, h.live["t/0"].executor_id


def test_subcall_is_bound_to_the_parent_executor_and_dispatched_with_its_budget():
    h, eid = _running()
    h.core.lifecycle.handle_call_waiting("t/0", 1, 0)
    child, cmds = h.subcall("t/0", "g", 2, budget=1234, request_id="req-1")
    assert child == "t/0/sub-1"
    assert cmds[0] == BindCall(child, eid, "t", True, "t/0")
    assert cmds[1] == DispatchCallCmd(child, eid, "t", "g", "d0", "main", b"[2]", 1234, 1, "t/0")
    assert h.core.executors.view(eid).local_inflight == 2
    assert h.core.tasks.inflight("t") == 1    # not in the admission window
    cmds = h.complete(child, output=b"42", budget_used_ms=17)
    done = of_type(cmds, SubcallDone)
    assert done == [SubcallDone(child, "t/0", eid, "req-1", True, b"42", "", "", False, 17, 1, "")]
    assert h.core.tasks.call_state("t/0") == "RUNNING"   # the harness resumed it


def test_subcall_ids_come_from_a_dispatcher_wide_counter():
    h, _ = _running()
    h.submit("u", [spec("f", 9)])
    a, _ = h.subcall("t/0", "g", 1)
    b, _ = h.subcall("u/0", "g", 1)
    c, _ = h.subcall(a, "k", 1)
    assert (a, b, c) == ("t/0/sub-1", "u/0/sub-2", "t/0/sub-1/sub-3")


def test_subcall_failure_resumes_the_parent_with_subcall_failed():
    h, eid = _running()
    child, _ = h.subcall("t/0", "g", 1)
    cmds = h.fail(child, "IO_ERROR", True, "backend down")
    done = of_type(cmds, SubcallDone)[0]
    assert not done.ok and done.error_kind == "SUBCALL_FAILED" and done.retryable
    assert done.child_error_kind == "IO_ERROR" and "backend down" in done.error_message
    assert of_type(cmds, ArmCallRetry) == []          # MaxAttempts = 1
    assert h.core.tasks.call_state("t/0") == "RUNNING"


def test_subcalls_never_count_as_roots():
    h, _ = _running()
    child, _ = h.subcall("t/0", "g", 1)
    h.complete(child, output=b"sub")
    h.complete("t/0", output=b"root")
    c = h.converged["t"]
    assert c.outputs == [b"root"] and c.call_count == 1


def test_subcall_bypasses_the_executor_filters():
    h = Harness(DispatcherConfig(executor_max_inflight=1), executors=("a",), contexts=1)
    h.submit("t", [spec("f", 1)])
    child, cmds = h.subcall("t/0", "g", 1)
    assert of_type(cmds, BindCall)[0].executor_id == "a"
    assert h.core.executors.view("a").local_inflight == 2


@pytest.mark.parametrize("depth_limit", [2, 3])
def test_depth_limit(depth_limit):
    # The rule is len(ancestry) < maxSubcallDepth, the ancestry being the
    # requesting call and its ancestors: a child at depth d has d of them.
    h, _ = _running(max_subcall_depth=depth_limit)
    parent = "t/0"
    for depth in range(1, depth_limit):
        parent, _ = h.subcall(parent, f"g{depth}", depth)
        assert isinstance(parent, str)
    res, cmds = h.subcall(parent, "deep", 0)
    assert isinstance(res, SubcallRejected) and res.reason == "DEPTH_EXCEEDED" and cmds == []
    assert res.message == (f"subcall deep would be at depth {depth_limit}: its ancestry of {depth_limit} "
                           f"calls must be shorter than maxSubcallDepth {depth_limit} "
                           "(dispatcher.maxSubcallDepth raises it)")
    assert not res.retryable and not res.stale and res.error_kind == "SUBCALL_FAILED"


def test_the_default_depth_admits_seven_levels_and_refuses_the_eighth():
    h, eid = _running()
    assert h.core.config.max_subcall_depth == 8
    parent = "t/0"
    for depth in range(1, 8):
        parent, cmds = h.subcall(parent, f"g{depth}", depth)
        assert isinstance(parent, str), (depth, parent)
        assert of_type(cmds, BindCall)[0].executor_id == eid
    assert parent == "t/0" + "".join(f"/sub-{n}" for n in range(1, 8))
    res, cmds = h.subcall(parent, "g8", 8)
    assert isinstance(res, SubcallRejected) and res.reason == "DEPTH_EXCEEDED" and cmds == []
    assert "would be at depth 8: its ancestry of 8 calls" in res.message
    assert h.core.executors.view(eid).local_inflight == 8     # the root and its 7 subcalls, no more


@pytest.mark.parametrize("depth_limit", [0, 1])
def test_zero_and_one_depth_disable_subcalls(depth_limit):
    h, _ = _running(max_subcall_depth=depth_limit)
    res, _ = h.subcall("t/0", "g", 1)
    assert res.reason == "DEPTH_EXCEEDED"


def test_cycle_with_an_ancestor_is_rejected():
    h, _ = _running()
    child, _ = h.subcall("t/0", "g", 1)
    res, _ = h.subcall(child, "f", 1)          # same key as the root t/0
    assert res.reason == "CYCLE" and "ancestor t/0" in res.message
    res, _ = h.subcall(child, "g", 1)          # same key as the parent itself
    assert res.reason == "CYCLE"
    ok, _ = h.subcall(child, "f", 2)           # other arguments are fine
    assert isinstance(ok, str)


def test_request_from_another_executor_is_rejected_as_stale():
    h, eid = _running()
    other = "b" if eid == "a" else "a"
    res, cmds = h.subcall("t/0", "g", 1, executor=other)
    assert res.reason == "EXECUTOR_MISMATCH" and res.stale and cmds == []


@pytest.mark.parametrize("setup", ["unknown", "done", "backing_off", "unbound"])
def test_parent_must_be_active(setup):
    h, eid = _running()
    parent = "t/0"
    if setup == "unknown":
        parent = "nope/0"
    elif setup == "done":
        h.submit("u", [spec("x", 1), spec("x", 2)], policy="CONTINUE")
        h.complete("u/0")
        parent = "u/0"
    elif setup == "backing_off":
        h.fail("t/0", "EXECUTOR_LOST", True)
    elif setup == "unbound":
        p = h.core.intake.prepare_call_phase("v", [spec("z", 1)])
        h.core.intake.commit_call_phase(p, 0)
        h.core.lifecycle.dispatch(0)
        parent = "v/0"
    res, cmds = h.core.lifecycle.add_subcall(parent, eid, "r", "g", "d0", b"[1]", 10, h.now)
    assert isinstance(res, SubcallRejected) and res.reason == "PARENT_NOT_ACTIVE" and res.stale


def test_negative_budget_is_rejected():
    h, eid = _running()
    res, _ = h.core.lifecycle.add_subcall("t/0", eid, "r", "g", "d0", b"[1]", -5, 0)
    assert res.reason == "INVALID_BUDGET"


def test_malformed_subcall_arguments_raise():
    h, eid = _running()
    with pytest.raises(TypeError, match="args_json must be bytes"):
        h.core.lifecycle.add_subcall("t/0", eid, "r", "g", "d0", "[1]", 5, 0)
    with pytest.raises(TypeError, match="function_id must be a non-empty str"):
        h.core.lifecycle.add_subcall("t/0", eid, "r", "", "d0", b"[1]", 5, 0)


def test_cached_result_resumes_the_parent_at_once():
    h, eid = _running()
    first, _ = h.subcall("t/0", "g", 7, request_id="r1")
    h.complete(first, output=b"77")
    second, cmds = h.subcall("t/0", "g", 7, request_id="r2")
    assert cmds[0] == CompleteCallFromCache(second, "t", True, "t/0")
    assert cmds[1] == SubcallDone(second, "t/0", eid, "r2", True, b"77", "", "", False, 0, 1, "")
    assert of_type(cmds, BindCall) == []
    assert h.core.tasks.call_state(second) == "DONE"


def test_subcall_result_feeds_the_task_cache_for_later_roots():
    h = Harness(DispatcherConfig(task_max_inflight_calls=1), contexts=10)
    h.submit("t", [spec("f", 1), spec("g", 5)])
    child, _ = h.subcall("t/0", "g", 5)
    h.complete(child, output=b"g5")
    h.complete("t/0", output=b"f1")
    assert h.converged["t"].outputs == [b"f1", b"g5"]
    assert [c.call_id for c in h.cache_hits] == ["t/1"]


def test_subcall_is_parked_while_the_parent_executor_is_unhealthy():
    h, eid = _running()
    h.set_executor(eid, healthy=False)
    child, cmds = h.subcall("t/0", "g", 1)
    assert of_type(cmds, BindCall) == [] and h.core.subcalls.parked_ids() == [child]
    assert h.core.tasks.call_state(child) == "READY"
    h.set_executor(eid, healthy=True)
    assert h.core.subcalls.parked_ids() == [] and h.live[child].executor_id == eid


def test_bind_failure_parks_the_subcall_until_the_next_snapshot():
    h, eid = _running()
    h.fail_binds.add(eid)
    child, cmds = h.subcall("t/0", "g", 1)
    assert of_type(cmds, ArmCallRetry) == [] and h.core.subcalls.parked_ids() == [child]
    assert h.core.tasks.call_attempts(child) == 0
    h.fail_binds.clear()
    h.sync()
    assert h.live[child].attempt_seq == 1 and h.live[child].executor_id == eid


def test_parent_completion_cancels_the_whole_subtree():
    h, eid = _running()
    child, _ = h.subcall("t/0", "g", 1)
    grand, _ = h.subcall(child, "k", 1)
    h.set_executor(eid, healthy=False)
    parked, _ = h.subcall(grand, "m", 1)
    cmds = h.complete("t/0")
    cancels = of_type(cmds, CancelCallCmd)
    assert [(c.call_id, c.executor_id, c.attempt_seq) for c in cancels] == [
        (child, eid, 1), (grand, eid, 1)]
    assert h.core.subcalls.parked_ids() == []
    assert h.core.executors.view(eid).local_inflight == 0
    assert of_type(cmds, SubcallDone) == []
    assert h.converged["t"].ok


def test_a_failed_parent_attempt_cancels_its_subtree_and_late_child_results_are_ignored():
    h, eid = _running()
    child, _ = h.subcall("t/0", "g", 1)
    cmds = h.fail("t/0", "RESUME_SEND_FAILED", True)
    assert [c.call_id for c in of_type(cmds, CancelCallCmd)] == [child]
    assert h.core.tasks.call_state(child) == "DONE"
    assert h.core.lifecycle.handle_call_completed(child, 1, b"late", 0, h.now) == []
    h.advance(10)
    assert h.attempt("t/0") == 2
    # The retried parent starts a fresh subtree.
    child2, _ = h.subcall("t/0", "g", 1)
    assert child2 == "t/0/sub-2"


def test_cancel_task_cancels_subtrees():
    h, eid = _running()
    child, _ = h.subcall("t/0", "g", 1)
    cmds = h.core.lifecycle.cancel_task("t", "deadline", h.now)
    assert sorted(c.call_id for c in cmds) == sorted(["t/0", child])
    assert all(type(c) is CancelCallCmd and c.reason == "deadline" for c in cmds)
    assert h.core.call_count == 0 and h.core.executors.view(eid).local_inflight == 0


def test_child_completing_after_its_parent_failed_finally_is_ignored():
    h, eid = _running()
    child, _ = h.subcall("t/0", "g", 1)
    h.fail("t/0", "USER_ERROR", False)
    assert h.core.lifecycle.handle_call_completed(child, 1, b"x", 0, h.now) == []
    assert not h.converged["t"].ok
