"""Subcall singleflight through the whole core (harness.py): a subcall whose key
is in flight in its task (a running root, or another subcall) waits on that
call and completes from it (CompleteCallFromCache, then SubcallDone, counted in
cache_hits); the leader's failure, retry, cancellation and the waiter's own
parent ending never leave a waiter hanging nor give it a result that is not
the function's; a join that would close a wait cycle runs on its own."""
from blockx.core.dispatch.records import DONE, READY
from blockx.core.dispatch.commands import (
    BindCall, CancelCallCmd, CompleteCallFromCache, DispatchCallCmd, SubcallDone)
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import RetryPolicy

from tests.unit.core.dispatch.harness import Harness, of_type, spec


def _two_parents(*roots, retry=None, policy="FAST_FAIL"):
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0), executors=("a", "b"),
                contexts=10)
    h.submit("t", list(roots) or [spec("f", 1), spec("f", 2)], policy=policy, retry=retry)
    return h


def _runs_of(h, fn):
    return [c.call_id for c in h.log if type(c) is DispatchCallCmd and c.function_id == fn]


def _state(h, call_id):
    return h.core.calls.by_id[call_id].state


def test_two_parents_asking_one_subcall_run_it_once_and_both_get_its_output():
    h = _two_parents()
    lead, cmds = h.subcall("t/0", "g", 7, request_id="r1")
    assert of_type(cmds, BindCall) == [BindCall(lead, h.live["t/0"].executor_id, "t", True, "t/0")]
    waiter, cmds = h.subcall("t/1", "g", 7, request_id="r2")
    assert cmds == [] and _state(h, waiter) == READY and waiter not in h.live
    cmds = h.complete(lead, output=b"70", budget_used_ms=12)
    e0, e1 = h.live["t/0"].executor_id, h.live["t/1"].executor_id
    assert of_type(cmds, SubcallDone) == [
        SubcallDone(lead, "t/0", e0, "r1", True, b"70", "", "", False, 12, 1, ""),
        SubcallDone(waiter, "t/1", e1, "r2", True, b"70", "", "", False, 0, 1, "")]
    assert of_type(cmds, CompleteCallFromCache) == [CompleteCallFromCache(waiter, "t", True, "t/1")]
    assert _runs_of(h, "g") == [lead]
    h.complete("t/0")
    h.complete("t/1")
    assert h.converged["t"].ok and h.converged["t"].cache_hits == 1


def test_a_subcall_waits_on_a_running_root_with_its_key():
    h = _two_parents(spec("f", 1), spec("g", 7))
    waiter, cmds = h.subcall("t/0", "g", 7, request_id="r1")
    assert cmds == [] and _state(h, waiter) == READY
    cmds = h.complete("t/1", output=b"g7")
    assert of_type(cmds, CompleteCallFromCache) == [CompleteCallFromCache(waiter, "t", True, "t/0")]
    assert [(d.child_call_id, d.ok, d.output_json) for d in of_type(cmds, SubcallDone)] == [
        (waiter, True, b"g7")]
    assert _runs_of(h, "g") == ["t/1"]
    h.complete("t/0", output=b"f1")
    c = h.converged["t"]
    assert c.outputs == [b"f1", b"g7"] and c.cache_hits == 1


def test_the_leaders_failure_of_the_function_reaches_every_waiter_without_a_second_run():
    h = _two_parents()
    lead, _ = h.subcall("t/0", "g", 7)
    waiter, _ = h.subcall("t/1", "g", 7)
    cmds = h.fail(lead, "USER_ERROR", False, "boom")
    done = of_type(cmds, SubcallDone)
    assert [(d.child_call_id, d.parent_call_id, d.ok, d.error_kind, d.child_error_kind, d.retryable)
            for d in done] == [(lead, "t/0", False, "SUBCALL_FAILED", "USER_ERROR", False),
                               (waiter, "t/1", False, "SUBCALL_FAILED", "USER_ERROR", False)]
    assert all("USER_ERROR: boom" in d.error_message for d in done)
    assert f"({waiter})" in done[1].error_message
    assert of_type(cmds, CompleteCallFromCache) == [CompleteCallFromCache(waiter, "t", True, "t/1")]
    assert _runs_of(h, "g") == [lead] and of_type(cmds, BindCall) == []


def test_a_retryable_failure_of_the_leader_hands_the_waiter_its_own_attempt():
    h = _two_parents()
    lead, _ = h.subcall("t/0", "g", 7)
    waiter, _ = h.subcall("t/1", "g", 7, request_id="r2")
    cmds = h.fail(lead, "IO_ERROR", True, "backend down")
    assert [(d.child_call_id, d.ok, d.retryable) for d in of_type(cmds, SubcallDone)] == [
        (lead, False, True)]                        # only the leader's own parent hears of it
    e1 = h.live["t/1"].executor_id
    assert of_type(cmds, BindCall) == [BindCall(waiter, e1, "t", True, "t/1")]
    assert of_type(cmds, CompleteCallFromCache) == []
    cmds = h.complete(waiter, output=b"70")
    assert of_type(cmds, SubcallDone) == [
        SubcallDone(waiter, "t/1", e1, "r2", True, b"70", "", "", False, 0, 1, "")]
    h.complete("t/0")
    h.complete("t/1")
    assert h.converged["t"].cache_hits == 0         # nobody completed from another call


def test_a_leader_cancelled_with_its_parent_hands_over_to_the_next_waiter():
    h = _two_parents(spec("f", 1), spec("f", 2), spec("f", 3))
    lead, _ = h.subcall("t/0", "g", 7)
    second, _ = h.subcall("t/1", "g", 7)
    third, _ = h.subcall("t/2", "g", 7)
    cmds = h.complete("t/0")                        # the leader's parent ends first
    assert [c.call_id for c in of_type(cmds, CancelCallCmd)] == [lead]
    assert of_type(cmds, BindCall) == [BindCall(second, h.live["t/1"].executor_id, "t", True, "t/1")]
    assert of_type(cmds, SubcallDone) == [] and _state(h, third) == READY
    cmds = h.complete(second, output=b"70")
    assert [(d.child_call_id, d.parent_call_id, d.output_json)
            for d in of_type(cmds, SubcallDone)] == [(second, "t/1", b"70"), (third, "t/2", b"70")]
    assert _runs_of(h, "g") == [lead, second]
    h.complete("t/1")
    h.complete("t/2")
    assert h.converged["t"].cache_hits == 1         # third only


def test_a_waiter_whose_parent_ends_leaves_its_leader():
    h = _two_parents()
    lead, _ = h.subcall("t/0", "g", 7)
    waiter, _ = h.subcall("t/1", "g", 7)
    cmds = h.complete("t/1")
    assert _state(h, waiter) == DONE and of_type(cmds, SubcallDone) == []
    assert of_type(cmds, CancelCallCmd) == []       # it never ran
    assert h.core.calls.by_id[lead].waiters in (None, [])
    cmds = h.complete(lead, output=b"70")
    assert [d.child_call_id for d in of_type(cmds, SubcallDone)] == [lead]
    assert of_type(cmds, CompleteCallFromCache) == []


def test_a_waiter_whose_parent_attempt_fails_is_cancelled_and_the_retry_asks_again():
    h = _two_parents(retry=RetryPolicy(3, 10, 0))
    lead, _ = h.subcall("t/0", "g", 7)
    waiter, _ = h.subcall("t/1", "g", 7)
    h.fail("t/1", "RESUME_SEND_FAILED", True)
    assert _state(h, waiter) == DONE
    h.advance(10)
    again, cmds = h.subcall("t/1", "g", 7, request_id="r3")
    assert cmds == []                               # the new attempt's request waits again
    cmds = h.complete(lead, output=b"70")
    assert [(d.child_call_id, d.request_id, d.parent_attempt_seq)
            for d in of_type(cmds, SubcallDone)] == [(lead, "r", 1), (again, "r3", 2)]


def test_cancelling_the_task_takes_leader_and_waiters_without_binding_anyone():
    h = _two_parents(spec("f", 1), spec("f", 2), spec("g", 9))
    lead, _ = h.subcall("t/0", "g", 7)
    waiter, _ = h.subcall("t/1", "g", 7)
    on_root, _ = h.subcall("t/0", "g", 9)           # waits on the root t/2
    cmds = h.core.lifecycle.cancel_task("t", "deadline", h.now)
    assert of_type(cmds, BindCall) == [] and of_type(cmds, SubcallDone) == []
    assert sorted(c.call_id for c in cmds) == sorted(["t/0", "t/1", "t/2", lead])
    h.run(cmds)
    assert h.core.call_count == 0 and not h.bound
    assert h.core.executors.view("a").local_inflight == 0 == h.core.executors.view("b").local_inflight


def test_a_root_leader_backing_off_hands_its_subcall_waiters_over_and_is_not_joined():
    h = _two_parents(spec("f", 1), spec("g", 7), spec("f", 3), retry=RetryPolicy(3, 10, 0))
    waiter, _ = h.subcall("t/0", "g", 7)
    cmds = h.fail("t/1", "EXECUTOR_LOST", True)     # the root leader backs off
    e0 = h.live["t/0"].executor_id
    assert of_type(cmds, BindCall) == [BindCall(waiter, e0, "t", True, "t/0")]
    alone, cmds = h.subcall("t/2", "g", 7)          # a backing-off root is not waited on
    assert of_type(cmds, BindCall) == [BindCall(alone, h.live["t/2"].executor_id, "t", True, "t/2")]
    cmds = h.complete(waiter, output=b"w")
    assert [(d.child_call_id, d.output_json) for d in of_type(cmds, SubcallDone)] == [(waiter, b"w")]
    cmds = h.advance(10)                            # the retried root: answered from the cache
    assert of_type(cmds, CompleteCallFromCache) == [CompleteCallFromCache("t/1", "t", False, "")]


def test_a_stopped_task_never_strands_a_subcall_on_a_root_that_will_not_run_again():
    # t/1 (the leader) backs off, then t/2 fails finally: FAST_FAIL stops the task
    # and t/1 never runs again; the waiter of t/0 must still end.
    h = _two_parents(spec("f", 1), spec("g", 7), spec("p", 0), retry=RetryPolicy(3, 10, 0))
    waiter, _ = h.subcall("t/0", "g", 7)
    h.fail("t/1", "EXECUTOR_LOST", True)
    h.fail("t/2", "USER_ERROR", False, "poison")
    assert waiter in h.live
    cmds = h.complete(waiter, output=b"w")
    assert [d.child_call_id for d in of_type(cmds, SubcallDone)] == [waiter]
    h.complete("t/0")
    h.advance(10)
    assert not h.converged["t"].ok and not h.live


def test_the_leaders_executor_lost_hands_over_to_a_waiter_elsewhere():
    h = _two_parents()
    e0, e1 = h.live["t/0"].executor_id, h.live["t/1"].executor_id
    assert e0 != e1
    lead, _ = h.subcall("t/0", "g", 7)
    waiter, _ = h.subcall("t/1", "g", 7)
    cmds = h.lose(e0)
    assert of_type(cmds, BindCall)[0] == BindCall(waiter, e1, "t", True, "t/1")
    assert h.live[waiter].executor_id == e1
    cmds = h.complete(waiter, output=b"70")
    assert [(d.child_call_id, d.ok) for d in of_type(cmds, SubcallDone)] == [(waiter, True)]


def test_a_join_that_would_close_a_wait_cycle_runs_on_its_own():
    # t/0 = f(0) waits (through its subcall) on t/1 = g(0); t/1 asking for f(0)
    # must not wait on t/0: it runs, as without singleflight.
    h = _two_parents(spec("f", 0), spec("g", 0))
    waiter, cmds = h.subcall("t/0", "g", 0)
    assert cmds == []
    alone, cmds = h.subcall("t/1", "f", 0)
    assert of_type(cmds, BindCall) == [BindCall(alone, h.live["t/1"].executor_id, "t", True, "t/1")]
    # One level further: t/1's child asks for g(0) of its own ancestor: a cycle, refused.
    res, _ = h.subcall(alone, "g", 0)
    assert res.reason == "CYCLE"
    cmds = h.complete(alone, output=b"f0")
    assert [d.child_call_id for d in of_type(cmds, SubcallDone)] == [alone]
    cmds = h.complete("t/1", output=b"g0")
    assert [(d.child_call_id, d.output_json) for d in of_type(cmds, SubcallDone)] == [(waiter, b"g0")]


def test_a_cycle_through_a_subcall_leader_is_seen_too():
    # a = f(1) -> s(1) leads; b = f(2) -> s(2) leads. s(1) asks for s(2): waits
    # on b's child. Then s(2) asking for s(1) would wait on its waiter's parent.
    h = _two_parents()
    s1, _ = h.subcall("t/0", "s", 1)
    s2, _ = h.subcall("t/1", "s", 2)
    w, cmds = h.subcall(s1, "s", 2)
    assert cmds == []
    alone, cmds = h.subcall(s2, "s", 1)
    assert [b.call_id for b in of_type(cmds, BindCall)] == [alone]


def test_a_root_never_waits_on_a_subcall_leader():
    h = Harness(DispatcherConfig(), executors=("a",), contexts=10)
    h.feed(h.core.intake.commit_call_stream("s", "FAST_FAIL", None, "", h.now))
    h.feed(h.core.intake.commit_call_batch(h.core.intake.prepare_call_batch("s", 0, [spec("f", 1)]), h.now))
    lead, _ = h.subcall("s/0.0", "g", 7)
    cmds = h.feed(h.core.intake.commit_call_batch(h.core.intake.prepare_call_batch("s", 1, [spec("g", 7)]), h.now))
    assert [b.call_id for b in of_type(cmds, BindCall)] == ["s/1.0"]
    later, cmds = h.subcall("s/0.0", "g", 7, request_id="r2")   # now waits on the root
    assert cmds == []
    cmds = h.complete(lead, output=b"sub")
    assert [d.child_call_id for d in of_type(cmds, SubcallDone)] == [lead]
    cmds = h.complete("s/1.0", output=b"root")
    assert [(d.child_call_id, d.output_json) for d in of_type(cmds, SubcallDone)] == [(later, b"root")]
