"""CallLifecycle, the call events, through the DispatcherCore and the fake
adapter: registration, admission, outputs, cache, singleflight, failure
policies, cancellation; what the core tells the adapter about a terminal frame
and a retry; stale events; executor loss.

Terminal frames: the adapter counts its call metrics from these answers, so
they must be exact: an accepted CallCompleted / CallFailed frame is answered
with commands that start with UnbindCall for that call; a stale or duplicated
one with no command at all. ArmCallRetry says whether it arms a retry (an
attempt failed retryably) or re-queues a call whose bind failed (no attempt
consumed).

Stale events: a failure for a READY call that already ran (backing off) or with
another attempt seq is dropped; DONE ignores every late terminal event; nothing
stale changes accounting.

Executor loss: every in-flight call on it fails retryably (EXECUTOR_LOST),
subtrees are cancelled, other executors are untouched."""
import pytest

from blockx.core.dispatch.commands import (
    ArmCallRetry, BindCall, CancelCallCmd, CompleteCallFromCache, DispatchCallCmd, UnbindCall)
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import PinnedCall, RetryPolicy
from blockx.core.dispatch.commands import ArmCallRetry, UnbindCall
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import RetryPolicy
from blockx.core.dispatch.commands import ArmCallRetry
from blockx.core.dispatch.commands import (
    ArmCallRetry, BindCall, CancelCallCmd, SubcallDone, UnbindCall)

from tests.unit.core.dispatch.harness import Harness, of_type, spec


def test_prepare_has_no_side_effects_and_commit_registers():
    h = Harness()
    p = h.core.intake.prepare_call_phase("t", [spec("f", 1), spec("g", 2)])
    assert len(p) == 2 and not ("t" in h.core.tasks) and h.core.tasks.call_state("t/0") is None
    assert h.core.intake.commit_call_phase(p, 0) == []
    assert h.core.tasks.call_state("t/0") == "READY" and h.core.tasks.ready_count("t") == 2
    with pytest.raises(ValueError, match="already committed"):
        h.core.intake.commit_call_phase(p, 0)


def test_bad_input_gets_a_clear_error():
    core = Harness().core
    with pytest.raises(ValueError, match="task_id must be a non-empty str"):
        core.intake.prepare_call_phase("", [])
    with pytest.raises(ValueError, match="FAST_FAIL or CONTINUE, got 'SOMETIMES'"):
        core.intake.prepare_call_phase("t", [], "SOMETIMES")
    with pytest.raises(ValueError, match="call 1 args_json must be canonical JSON bytes, got str"):
        core.intake.prepare_call_phase("t", [spec("f"), PinnedCall("f", "d", "[1]")])
    with pytest.raises(ValueError, match="call 0 needs a non-empty function_id"):
        core.intake.prepare_call_phase("t", [PinnedCall("", "d", b"[]")])
    with pytest.raises(ValueError, match=r"call 0 must be \(function_id, digest, args_json"):
        core.intake.prepare_call_phase("t", [("f", b"[]")])
    with pytest.raises(ValueError, match="max_attempts must be >= 0"):
        core.intake.prepare_call_phase("t", [], retry=RetryPolicy(-1, 0, 0))
    core.intake.commit_call_phase(core.intake.prepare_call_phase("t", []), 0)
    with pytest.raises(ValueError, match="task t already has a call phase"):
        core.intake.commit_call_phase(core.intake.prepare_call_phase("t", []), 0)


def test_unspecified_policy_means_fast_fail():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 2)], policy="CALL_FAILURE_POLICY_UNSPECIFIED")
    h.fail("t/0")
    h.complete("t/1")
    assert not h.converged["t"].ok


def test_empty_call_list_converges_at_once():
    h = Harness()
    h.submit("t", [])
    c = h.converged["t"]
    assert c.ok and c.outputs == [] and c.call_count == 0


def test_bind_then_dispatch_carries_the_call():
    h = Harness()
    cmds = h.submit("t", [PinnedCall("add", "sha", b"[1,2]", "entry")])
    bind, disp = cmds[0], cmds[1]
    assert bind == BindCall("t/0", "e1", "t", False, "")
    assert disp == DispatchCallCmd("t/0", "e1", "t", "add", "sha", "entry", b"[1,2]", 5000, 1, "")
    assert h.core.tasks.call_state("t/0") == "RUNNING"
    assert h.core.executors.view("e1").local_inflight == 1


def test_unlimited_budget_is_zero():
    h = Harness(DispatcherConfig(call_deadline_ms=0))
    h.submit("t", [spec("f", 1)])
    assert h.live["t/0"].budget_ms == 0


def test_outputs_follow_call_list_order_not_completion_order():
    h = Harness()
    h.submit("t", [spec("f", i) for i in range(4)])
    for cid in ["t/3", "t/1", "t/0", "t/2"]:
        h.complete(cid, output=cid.encode())
    assert h.converged["t"].outputs == [b"t/0", b"t/1", b"t/2", b"t/3"]
    assert h.converge_count["t"] == 1


def test_task_window_limits_inflight_and_refills_on_completion():
    h = Harness(DispatcherConfig(task_max_inflight_calls=2), contexts=100)
    h.submit("t", [spec("f", i) for i in range(5)])
    assert sorted(h.live) == ["t/0", "t/1"] and h.core.tasks.inflight("t") == 2
    h.complete("t/1")
    assert sorted(h.live) == ["t/0", "t/2"]


def test_executor_headroom_and_max_inflight_bound_admission():
    h = Harness(DispatcherConfig(executor_max_inflight=3), executors=("e1", "e2"), contexts=2)
    h.submit("t", [spec("f", i) for i in range(10)])
    # usable_contexts 2 per executor: headroom stops at 2 each.
    assert len(h.live) == 4
    h.set_executor("e1", usable_contexts=10)
    # e1 now limited by executor_max_inflight = 3.
    assert h.core.executors.view("e1").local_inflight == 3
    assert h.core.executors.view("e2").local_inflight == 2


def test_no_executor_means_nothing_is_admitted_until_one_appears():
    h = Harness(executors=())
    h.submit("t", [spec("f", 1)])
    assert h.live == {} and h.core.tasks.call_state("t/0") == "READY"
    h.set_executor("e9", usable_contexts=1)
    assert list(h.live) == ["t/0"] and h.live["t/0"].executor_id == "e9"


def test_tasks_take_turns_as_contexts_free_up():
    h = Harness(contexts=3)
    h.submit("a", [spec("f", i) for i in range(6)])
    h.submit("b", [spec("g", i) for i in range(3)])
    assert sorted(h.live) == ["a/0", "a/1", "a/2"]
    h.log.clear()
    for cid in ["a/0", "a/1", "a/2", "b/0"]:
        h.complete(cid)
    # a was at the ring's head when the executor filled up, then they alternate.
    assert [c.call_id for c in of_type(h.log, BindCall)] == ["a/3", "b/0", "a/4", "b/1"]


def test_round_robin_across_tasks_from_a_cold_start():
    h = Harness(executors=())
    h.submit("a", [spec("f", i) for i in range(3)])
    h.submit("b", [spec("g", i) for i in range(3)])
    h.set_executor("e1", usable_contexts=6)
    assert [c.call_id for c in of_type(h.log, BindCall)] == ["a/0", "b/0", "a/1", "b/1", "a/2", "b/2"]


def test_cache_hit_completes_without_an_executor():
    h = Harness(contexts=1)
    h.submit("t", [spec("f", 1), spec("g", 0), spec("f", 1)])
    h.complete("t/0", output=b"11")
    h.complete("t/1", output=b"0")
    hits = h.cache_hits
    assert hits == [CompleteCallFromCache("t/2", "t", False, "")]
    c = h.converged["t"]
    assert c.outputs == [b"11", b"0", b"11"] and c.cache_hits == 1
    assert [b.call_id for b in of_type(h.log, BindCall)] == ["t/0", "t/1"]


def test_consecutive_duplicates_join_the_leader_in_one_pass():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 1), spec("f", 1), spec("f", 2)])
    assert sorted(h.live) == ["t/0", "t/3"]
    assert h.core.tasks.call_state("t/1") == "READY"
    h.complete("t/3", output=b"2")
    h.complete("t/0", output=b"1")
    c = h.converged["t"]
    assert c.ok and c.outputs == [b"1", b"1", b"1", b"2"] and c.cache_hits == 2


def test_later_duplicate_waits_for_an_inflight_leader():
    h = Harness(DispatcherConfig(task_max_inflight_calls=2))
    h.submit("t", [spec("f", 1), spec("g", 1), spec("f", 1), spec("h", 1)])
    assert sorted(h.live) == ["t/0", "t/1"]
    h.complete("t/1")
    # t/2 joined t/0's flight, so t/3 got the free slot.
    assert sorted(h.live) == ["t/0", "t/3"]
    h.complete("t/0", output=b"x")
    h.complete("t/3")
    assert h.converged["t"].outputs[2] == b"x"


def test_waiters_share_the_leaders_final_failure():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 1), spec("g", 1)], policy="CONTINUE")
    h.fail("t/0", "USER_ERROR", False, "bad")
    h.complete("t/2", output=b"g")
    c = h.converged["t"]
    assert c.ok and c.outputs == [b"g"] and c.calls_failed == 2


def test_a_failed_key_is_not_cached_and_runs_again():
    h = Harness(DispatcherConfig(task_max_inflight_calls=1))
    h.submit("t", [spec("f", 1), spec("g", 1), spec("f", 1)], policy="CONTINUE")
    h.fail("t/0")
    h.complete("t/1")
    assert list(h.live) == ["t/2"]
    h.complete("t/2", output=b"ok")
    assert h.converged["t"].outputs == [b'{"r":[1]}', b"ok"]


def test_fast_fail_stops_dispatching_and_drains_once_inflight_reaches_zero():
    h = Harness(DispatcherConfig(task_max_inflight_calls=2))
    h.submit("t", [spec("f", i) for i in range(5)])
    h.fail("t/0", "USER_ERROR", False, "division by zero")
    assert list(h.live) == ["t/1"]          # nothing new admitted
    assert "t" not in h.converged           # t/1 still in flight
    h.complete("t/1")
    c = h.converged["t"]
    assert not c.ok and c.failure_code == "CALL_FAILED" and not c.retryable
    assert "t/0" in c.failure_message and "USER_ERROR: division by zero" in c.failure_message
    assert c.outputs == [] and c.call_count == 5 and c.calls_failed == 1
    assert h.core.tasks.call_state("t/4") is None  # forgotten once settled
    assert len(of_type(h.log, BindCall)) == 2


def test_queued_calls_get_a_context_only_when_admitted_and_are_still_counted():
    h = Harness(DispatcherConfig(task_max_inflight_calls=2))
    h.submit("t", [spec("f", i) for i in range(6)])
    # Two admitted, and t/2 made to compare its key with t/1's (it waits at the front).
    assert list(h.live) == ["t/0", "t/1"] and h.core.call_count == 3
    assert (h.core.queued_call_count, h.core.tasks.ready_count("t")) == (4, 4)
    assert (h.core.tasks.call_state("t/5"), h.core.tasks.call_attempts("t/5")) == ("READY", 0)
    assert h.core.tasks.call_state("t/6") is None and h.core.tasks.call_state("t/05") is None
    assert h.core.tasks.progress("t") == (6, 0, 0, 0)
    h.complete("t/0")
    assert list(h.live) == ["t/1", "t/2"] and h.core.tasks.progress("t") == (6, 1, 0, 0)
    h.fail("t/1", "USER_ERROR", False, "boom")
    h.complete("t/2")
    # FAST_FAIL drained the never-admitted t/3..t/5 as CANCELLED (not counted as failed).
    c = h.converged["t"]
    assert not c.ok and c.call_count == 6 and c.calls_failed == 1
    assert h.core.tasks.progress("t") == (6, 6, 1, 0) and h.core.queued_call_count == 0
    assert h.core.tasks.call_state("t/5") is None and h.core.call_count == 0


def test_fast_fail_does_not_retry_inflight_failures_after_the_stop():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 2)])
    h.fail("t/0", "USER_ERROR")
    cmds = h.fail("t/1", "EXECUTOR_LOST", True)
    assert of_type(cmds, ArmCallRetry) == []
    assert h.converged["t"].calls_failed == 2


def test_continue_skips_failed_roots():
    h = Harness()
    h.submit("t", [spec("f", i) for i in range(4)], policy="CONTINUE")
    h.fail("t/1", "USER_ERROR")
    h.fail("t/2", "BUDGET_EXCEEDED")
    h.complete("t/0", output=b"0")
    h.complete("t/3", output=b"3")
    c = h.converged["t"]
    assert c.ok and c.outputs == [b"0", b"3"] and c.calls_failed == 2 and c.failure_code == ""


def test_continue_fails_the_phase_when_every_root_failed():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 2)], policy="CONTINUE")
    h.fail("t/0", "BUDGET_EXCEEDED", False, "slow")
    h.fail("t/1", "USER_ERROR", False, "bad")
    c = h.converged["t"]
    assert not c.ok and c.failure_code == "CALL_FAILED" and not c.retryable
    assert c.failure_message.startswith("all 2 calls failed; first: call t/0")


def test_continue_all_failed_is_retryable_when_every_failure_was():
    h = Harness()
    h.submit("t", [spec("f", 1)], policy="CONTINUE", retry=RetryPolicy(1, 0, 0))
    h.fail("t/0", "EXECUTOR_LOST", True)
    assert h.converged["t"].retryable


def test_waiting_and_resumed_transitions():
    h = Harness()
    h.submit("t", [spec("f", 1)])
    h.core.lifecycle.handle_call_waiting("t/0", 2, 0)  # wrong attempt: ignored
    assert h.core.tasks.call_state("t/0") == "RUNNING"
    h.core.lifecycle.handle_call_waiting("t/0", 1, 0)
    assert h.core.tasks.call_state("t/0") == "WAITING"
    h.core.lifecycle.handle_call_resumed("t/0", 0)
    assert h.core.tasks.call_state("t/0") == "RUNNING"
    h.core.lifecycle.handle_call_waiting("t/0", 1, 0)
    h.complete("t/0")   # completing straight from WAITING is fine
    assert h.converged["t"].ok


def test_cancel_task_cancels_inflight_and_drops_state():
    h = Harness(DispatcherConfig(task_max_inflight_calls=2))
    h.submit("t", [spec("f", i) for i in range(4)])
    attempt = h.attempt("t/0")
    cmds = h.core.lifecycle.cancel_task("t", "task timed out", h.now)
    assert sorted((c.call_id, c.executor_id, c.reason, c.attempt_seq) for c in cmds) == [
        ("t/0", "e1", "task timed out", attempt), ("t/1", "e1", "task timed out", 1)]
    assert all(type(c) is CancelCallCmd for c in cmds)
    assert not ("t" in h.core.tasks) and h.core.call_count == 0
    assert h.core.executors.view("e1").local_inflight == 0
    # The executor's late frames are ignored; nothing converges.
    assert h.core.lifecycle.handle_call_completed("t/0", 1, b"1", 0, 0) == []
    assert h.core.lifecycle.handle_call_failed("t/1", 1, "CANCELLED", False, "", 0) == []
    assert h.epilogue() == [] and "t" not in h.converged
    assert h.core.lifecycle.cancel_task("t", "again", 0) == []


def test_remove_task_after_convergence():
    h = Harness()
    h.submit("t", [spec("f", 1)])
    h.complete("t/0")
    assert ("t" in h.core.tasks)
    assert h.core.lifecycle.remove_task("t") == []
    assert not ("t" in h.core.tasks) and h.core.task_count == 0


def test_a_bind_the_core_no_longer_wants_is_released():
    h = Harness()
    p = h.core.intake.prepare_call_phase("t", [spec("f", 1)])
    h.core.intake.commit_call_phase(p, 0)
    bind = h.core.lifecycle.dispatch(0)[0]
    h.core.lifecycle.cancel_task("t", "gone", 0)
    assert h.core.lifecycle.handle_executor_bound(bind.call_id, 0, "e1") == [UnbindCall("t/0", "e1")]
    assert h.core.lifecycle.handle_executor_bound(bind.call_id, 0) == []


def test_duplicate_bound_event_is_ignored():
    h = Harness()
    h.submit("t", [spec("f", 1)])
    assert h.core.lifecycle.handle_executor_bound("t/0", 0, "e1") == []
    assert h.core.tasks.call_state("t/0") == "RUNNING"


def test_bind_failure_retries_at_once_without_consuming_an_attempt():
    h = Harness(executors=("e1", "e2"))
    h.fail_binds.add("e1")
    h.set_executor("e2", usable_contexts=0)
    cmds = h.submit("t", [spec("f", 1)])
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 0, False)]
    assert h.core.executors.view("e1").healthy is False   # avoided until the next snapshot
    assert h.core.executors.view("e1").local_inflight == 0
    h.set_executor("e2", usable_contexts=4)
    h.advance(0)
    assert h.live["t/0"].executor_id == "e2" and h.live["t/0"].attempt_seq == 1


def test_epilogue_is_quiet_when_nothing_changed():
    h = Harness()
    h.submit("t", [spec("f", 1)])
    assert h.core.lifecycle.epilogue(h.now) == []


def test_an_accepted_completion_starts_with_unbind_and_a_duplicate_gets_nothing():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 2)])
    attempt = h.attempt("t/0")
    first = h.core.lifecycle.handle_call_completed("t/0", attempt, b"1", 0, h.now)
    assert first[0] == UnbindCall("t/0", "e1")
    assert h.core.lifecycle.handle_call_completed("t/0", attempt, b"1", 0, h.now) == []


def test_an_accepted_failure_starts_with_unbind_and_a_duplicate_gets_nothing():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 2)], "CONTINUE")
    attempt = h.attempt("t/0")
    first = h.core.lifecycle.handle_call_failed("t/0", attempt, "USER_ERROR", False, "boom", h.now)
    assert first[0] == UnbindCall("t/0", "e1")
    assert h.core.lifecycle.handle_call_failed("t/0", attempt, "USER_ERROR", False, "boom", h.now) == []


def test_frames_of_an_attempt_that_was_retried_get_nothing():
    h = Harness(DispatcherConfig(base_backoff_ms=100, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)])
    h.fail("t/0", "IO_ERROR", True)
    h.advance(100)
    assert h.attempt("t/0") == 2
    assert h.core.lifecycle.handle_call_failed("t/0", 1, "IO_ERROR", True, "late", h.now) == []
    assert h.core.lifecycle.handle_call_completed("t/0", 1, b"1", 0, h.now) == []
    assert h.core.tasks.call_state("t/0") == "RUNNING"


def test_a_retry_after_a_failed_attempt_is_flagged_as_a_retry():
    h = Harness(DispatcherConfig(base_backoff_ms=100, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)])
    cmds = h.fail("t/0", "IO_ERROR", True)
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 100, True)]


def test_a_retry_without_backoff_is_still_flagged_as_a_retry():
    h = Harness(DispatcherConfig(base_backoff_ms=0, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)], retry=RetryPolicy(3, 0, 0))
    cmds = h.fail("t/0", "IO_ERROR", True)
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 0, True)]


def test_a_re_arm_after_a_failed_bind_is_not_a_retry():
    h = Harness(executors=("e1", "e2"))
    h.fail_binds.add("e1")
    h.set_executor("e2", usable_contexts=0)
    cmds = h.submit("t", [spec("f", 1)])
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 0, False)]


def _retrying_harness():
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0, base_backoff_ms=100))
    h.submit("t", [spec("f", 1)])
    h.fail("t/0", "EXECUTOR_LOST", True)
    return h


def test_failure_while_backing_off_is_stale():
    h = _retrying_harness()
    assert h.core.tasks.call_state("t/0") == "READY" and h.core.tasks.call_attempts("t/0") == 1
    # A duplicate failure report for attempt 1 (e.g. executor lost after CallFailed).
    assert h.core.lifecycle.handle_call_failed("t/0", 1, "EXECUTOR_LOST", True, "dup", h.now) == []
    assert len(h.timers) == 1
    h.advance(100)
    assert h.attempt("t/0") == 2


def test_failure_with_an_old_attempt_seq_is_stale():
    h = _retrying_harness()
    h.advance(100)
    assert h.core.lifecycle.handle_call_failed("t/0", 1, "USER_ERROR", False, "old", h.now) == []
    assert h.core.tasks.call_state("t/0") == "RUNNING"
    assert h.core.lifecycle.handle_call_failed("t/0", 3, "USER_ERROR", False, "future", h.now) == []
    h.complete("t/0", output=b"ok")
    assert h.converged["t"].ok and h.converged["t"].calls_failed == 0


def test_completion_of_an_old_attempt_is_ignored():
    h = _retrying_harness()
    h.advance(100)
    assert h.core.lifecycle.handle_call_completed("t/0", 1, b"old", 0, h.now) == []
    assert h.core.tasks.call_state("t/0") == "RUNNING"
    h.complete("t/0", output=b"new")
    assert h.converged["t"].outputs == [b"new"]


def test_completion_while_backing_off_is_ignored():
    h = _retrying_harness()
    assert h.core.lifecycle.handle_call_completed("t/0", 1, b"late", 0, h.now) == []
    assert h.core.tasks.call_state("t/0") == "READY"


def test_done_ignores_every_late_event():
    h = Harness(DispatcherConfig(task_max_inflight_calls=1))
    h.submit("t", [spec("f", 1), spec("f", 2)])
    h.complete("t/0", output=b"first")
    core = h.core
    assert core.tasks.call_state("t/0") == "DONE"
    assert core.lifecycle.handle_call_completed("t/0", 1, b"again", 0, h.now) == []
    assert core.lifecycle.handle_call_failed("t/0", 1, "USER_ERROR", False, "late", h.now) == []
    assert core.lifecycle.handle_call_waiting("t/0", 1, h.now) == []
    assert core.lifecycle.handle_call_resumed("t/0", h.now) == []
    assert core.lifecycle.handle_retry_ready("t/0", h.now) == []
    assert core.tasks.call_state("t/0") == "DONE"
    h.complete("t/1", output=b"second")
    c = h.converged["t"]
    assert c.outputs == [b"first", b"second"] and c.calls_failed == 0


def test_events_for_unknown_calls_are_ignored():
    core = Harness().core
    assert core.lifecycle.handle_call_completed("nope/0", 1, b"1", 0, 0) == []
    assert core.lifecycle.handle_call_failed("nope/0", 1, "USER_ERROR", False, "", 0) == []
    assert core.lifecycle.handle_call_waiting("nope/0", 1, 0) == []
    assert core.lifecycle.handle_call_resumed("nope/0", 0) == []
    assert core.lifecycle.handle_retry_ready("nope/0", 0) == []
    assert core.lifecycle.handle_bind_failed("nope/0", 0) == []
    assert core.lifecycle.handle_executor_bound("nope/0", 0) == []


def test_terminal_events_before_the_bind_is_confirmed_are_stale():
    h = Harness()
    p = h.core.intake.prepare_call_phase("t", [spec("f", 1)])
    h.core.intake.commit_call_phase(p, 0)
    h.core.lifecycle.dispatch(0)   # BindCall emitted, not yet confirmed
    assert h.core.lifecycle.handle_call_failed("t/0", 1, "USER_ERROR", False, "", 0) == []
    assert h.core.lifecycle.handle_call_completed("t/0", 1, b"1", 0, 0) == []
    assert h.core.tasks.call_state("t/0") == "RUNNING"


def test_stale_failure_does_not_arm_a_second_timer():
    h = _retrying_harness()
    cmds = h.core.lifecycle.handle_call_failed("t/0", 1, "OUTBOX_FULL", True, "", h.now)
    assert of_type(cmds, ArmCallRetry) == [] and len(h.timers) == 1
    # A duplicate retry-ready event (timer fired twice) queues the call once.
    h.advance(100)
    assert h.core.lifecycle.handle_retry_ready("t/0", h.now) == []
    assert h.core.tasks.ready_count("t") == 0


def _two_executors(**cfg):
    cfg.setdefault("default_retry_jitter_percent", 0)
    return Harness(DispatcherConfig(**cfg), executors=("a", "b"), contexts=10)


def test_inflight_calls_on_the_lost_executor_are_retried_elsewhere():
    h = _two_executors()
    h.submit("t", [spec("f", i) for i in range(4)])
    on_a = sorted(c for c, cmd in h.live.items() if cmd.executor_id == "a")
    on_b = sorted(c for c, cmd in h.live.items() if cmd.executor_id == "b")
    assert on_a and on_b
    cmds = h.lose("a")
    assert sorted(c.call_id for c in of_type(cmds, UnbindCall)) == on_a
    assert sorted((c.call_id, c.fire_at_ms) for c in of_type(cmds, ArmCallRetry)) == [
        (c, 10) for c in on_a]
    assert h.core.executors.view("a").healthy is False
    assert h.core.executors.view("a").local_inflight == 0
    assert sorted(h.live) == on_b                 # b's calls untouched
    h.advance(10)
    for c in on_a:
        assert h.live[c].executor_id == "b" and h.live[c].attempt_seq == 2
    for c in list(h.live):
        h.complete(c)
    t = h.converged["t"]
    assert t.ok and len(t.outputs) == 4 and t.call_retries == len(on_a)


def test_late_frames_from_the_lost_executor_are_stale():
    h = _two_executors()
    h.submit("t", [spec("f", 1)])
    eid = h.live["t/0"].executor_id
    h.lose(eid)
    assert h.core.lifecycle.handle_call_completed("t/0", 1, b"late", 0, h.now) == []
    assert h.core.lifecycle.handle_call_failed("t/0", 1, "EXECUTOR_LOST", True, "", h.now) == []
    h.advance(10)
    assert h.attempt("t/0") == 2


def test_losing_every_attempt_fails_the_task_retryably():
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0), executors=("a",))
    h.submit("t", [spec("f", 1)])
    for _ in range(2):
        h.lose("a")
        h.set_executor("a", usable_contexts=8)
        h.advance(1000)
    h.lose("a")
    c = h.converged["t"]
    assert not c.ok and c.retryable and "EXECUTOR_LOST" in c.failure_message


def test_subtree_on_the_lost_executor_is_cancelled_not_resumed():
    h = _two_executors()
    h.submit("t", [spec("f", 1)])
    eid = h.live["t/0"].executor_id
    child, _ = h.subcall("t/0", "g", 1)
    grand, _ = h.subcall(child, "k", 1)
    assert h.core.executors.call_ids(eid) == ["t/0", child, grand]
    cmds = h.lose(eid)
    assert sorted(c.call_id for c in of_type(cmds, CancelCallCmd)) == sorted([child, grand])
    assert of_type(cmds, SubcallDone) == []
    assert h.core.executors.call_ids(eid) == []
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 10, True)]


def test_an_unconfirmed_bind_on_the_lost_executor_is_rolled_back():
    h = Harness(executors=("a",))
    p = h.core.intake.prepare_call_phase("t", [spec("f", 1)])
    h.core.intake.commit_call_phase(p, 0)
    assert of_type(h.core.lifecycle.dispatch(0), BindCall)
    cmds = h.core.lifecycle.handle_executor_lost("a", 0)
    assert cmds == [ArmCallRetry("t/0", 0, False)]
    assert h.core.tasks.call_attempts("t/0") == 0


def test_unknown_executor_loss_is_ignored():
    h = Harness()
    assert h.core.lifecycle.handle_executor_lost("ghost", 0) == []


def test_lost_executor_is_not_selected_until_a_snapshot_restores_it():
    h = Harness(executors=("a",))
    h.lose("a")
    h.submit("t", [spec("f", 1)])
    assert h.live == {}
    h.set_executor("a", usable_contexts=8, heartbeat_seq=1)
    assert list(h.live) == ["t/0"]


def test_a_loss_detail_reaches_the_failure_message():
    # The sandbox names the limit that killed an executor.
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0), executors=("a",))
    h.submit("t", [spec("f", 1)], retry=(1, 0, 0))
    h.core.lifecycle.handle_executor_lost("a", h.now, "killed by its memory limit")
    h.advance(0)
    c = h.converged["t"]
    assert "EXECUTOR_LOST: executor a lost: killed by its memory limit" in c.failure_message, c.failure_message
