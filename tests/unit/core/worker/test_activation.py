"""WorkerCore: activation, phase progression, every failure code path, exact
timer precedence and out-of-order events. Virtual clock from 0."""
import pytest

from blockx.core import failure_codes as fcodes
from blockx.core.errors import WorkerError
from blockx.core.types import (CallRetryPolicy, ConvergeTask, PhaseOutcome, PluginResult,
                               ResultHandler, SlotState, StartBuilderPhase, StartCallPhase,
                               StartPluginPhase, TaskPhase, TaskState, TaskStatistic)

from tests.unit.core.worker.test_support import FC, activate, check_invariants, finish, make, run_to, submit

B, C, P = TaskPhase.BUILDER, TaskPhase.CALLS, TaskPhase.PLUGIN


def only(result, cls):
    assert result.applied and len(result.commands) == 1, result
    cmd = result.commands[0]
    assert isinstance(cmd, cls), cmd
    return cmd


def converged(result, code=None, state=TaskState.FAILED):
    cmd = only(result, ConvergeTask)
    assert cmd.state is state and cmd.result.state is state
    if code is not None:
        assert cmd.result.failure_code == code, cmd.result
    assert result.snapshot.state is state and result.snapshot.result is cmd.result
    return cmd


# ---- activation -----------------------------------------------------------------


def test_activation_prepared_starts_the_builder_and_runs_the_slot():
    w = make()
    submit(w, "t", 0)
    r = activate(w, "t", 5, epoch="epoch-3")
    cmd = only(r, StartBuilderPhase)
    assert (cmd.task_id, cmd.slot_id, cmd.task_code_epoch, cmd.function_call) == (
        "t", "slot-0", "epoch-3", FC)
    ctx = w.get_task_context("t")
    assert ctx.phase is B and ctx.task_code_epoch == "epoch-3"
    assert w.slots[0].state is SlotState.RUNNING
    hb = w.derive_heartbeat(5)
    assert (hb["reservedSlots"], hb["runningTasks"], hb["freeSlots"]) == (0, 1, 49)


def test_activation_events_out_of_order_are_dropped():
    w = make()
    submit(w, "t", 0)
    r = w.handle_task_activation_prepared("t", "slot-1", 1, 1)          # wrong slot
    assert not r.applied and r.commands == [] and r.snapshot.state is TaskState.RUNNING
    assert not w.handle_task_activation_prepared("nope", "slot-0", 1, 1).applied
    assert w.handle_task_activation_prepared("nope", "slot-0", 1, 1).snapshot is None
    activate(w, "t", 2)
    assert not w.handle_task_activation_prepared("t", "slot-0", 1, 3).applied
    assert not w.handle_task_activation_failed("t", fcodes.ACTIVATION_FAILED, "late", 3).applied
    check_invariants(w)
    assert w.get_task_context("t").phase is B


@pytest.mark.parametrize("code,expected", [
    (fcodes.ACTIVATION_FAILED, fcodes.ACTIVATION_FAILED),
    (fcodes.IO_SCOPE_FAILED, fcodes.IO_SCOPE_FAILED),
    ("", fcodes.ACTIVATION_FAILED),
])
def test_activation_failure_converges_and_frees_the_slot(code, expected):
    w = make()
    submit(w, "t", 0)
    r = w.handle_task_activation_failed("t", code, "epoch resolver down", 7)
    check_invariants(w)
    cmd = converged(r, expected)
    assert cmd.result.failure_message == "epoch resolver down" and cmd.result.retryable is False
    assert cmd.interrupted_phase is TaskPhase.PREPARING
    assert w.free_capacity() == 50 and w.active_task_count() == 0
    assert cmd.result.statistic == TaskStatistic(accepted_at_ms=0, finished_at_ms=7)


def test_activation_failure_can_be_marked_retryable():
    w = make()
    submit(w, "t", 0)
    r = w.handle_task_activation_failed("t", fcodes.IO_SCOPE_FAILED, "x", 1, retryable=True)
    assert converged(r).result.retryable is True


# ---- SLOT_LOST ---------------------------------------------------------------------------


def test_lease_expiring_before_activation_fails_the_task_with_slot_lost():
    w = make(default_ttl_ms=100)
    submit(w, "t", 0)
    assert w.next_deadline() == 100
    assert w.expired_slots(100) == ["slot-0"]
    r = w.handle_slot_lease_expired("slot-0", 100)
    check_invariants(w)
    cmd = converged(r, fcodes.SLOT_LOST)
    assert cmd.result.retryable is False and "lease of slot-0 expired at 100 ms" in cmd.result.failure_message
    assert cmd.interrupted_phase is TaskPhase.PREPARING
    assert w.slots[0].state is SlotState.FREE
    # the activation that finally completes is dropped
    assert not w.handle_task_activation_prepared("t", "slot-0", 1, 120).applied


def test_activation_at_or_after_the_lease_instant_is_slot_lost():
    w = make()
    w.handle_request_task_slot("t", 50, 0)
    submit(w, "t", 10, "slot-0")
    converged(w.handle_task_activation_prepared("t", "slot-0", 1, 50), fcodes.SLOT_LOST)
    check_invariants(w)
    w2 = make()
    w2.handle_request_task_slot("t", 50, 0)
    submit(w2, "t", 10, "slot-0")
    only(w2.handle_task_activation_prepared("t", "slot-0", 1, 49), StartBuilderPhase)


def test_lease_expiry_of_an_activated_slot_is_ignored():
    w = make(default_ttl_ms=100)
    submit(w, "t", 0)
    activate(w, "t", 10)
    assert w.expired_slots(500) == []
    assert not w.handle_slot_lease_expired("slot-0", 500).applied
    assert w.get_task_context("t").phase is B


def test_timer_precedence_follows_the_timeline():
    # lease at 100, deadline at 200: a timeout event at 300 reports the earlier SLOT_LOST
    w = make(default_ttl_ms=100)
    submit(w, "t", 0, task_timeout_ms=200)
    assert w.timed_out_tasks(300) == ["t"] and w.expired_slots(300) == ["slot-0"]
    converged(w.handle_task_timed_out("t", 300), fcodes.SLOT_LOST)
    assert not w.handle_slot_lease_expired("slot-0", 300).applied
    # deadline at 50 before lease at 100: a lease event reports TIMED_OUT
    w = make(default_ttl_ms=100)
    submit(w, "t", 0, task_timeout_ms=50)
    converged(w.handle_slot_lease_expired("slot-0", 100), fcodes.TIMED_OUT)
    # same instant: TIMED_OUT wins the tie
    w = make(default_ttl_ms=100)
    submit(w, "t", 0, task_timeout_ms=100)
    assert converged(w.handle_slot_lease_expired("slot-0", 100), fcodes.TIMED_OUT).result.retryable


# ---- phase progression -----------------------------------------------------------------------


def test_full_success_path_and_statistics():
    w = make()
    rh = ResultHandler("log", b'{"level": "info"}')
    submit(w, "t", 100, result_handler=rh, call_failure_policy="CONTINUE",
           call_retry_policy=CallRetryPolicy(5, 7, 2), instance_id="i-1", task_timeout_ms=9000)
    activate(w, "t", 110, epoch=4)
    calls = [{"functionId": "add", "args": [1, 2]}, {"functionId": "add", "args": [3, 4]}]
    sc = only(finish(w, "t", B, 130, PhaseOutcome(calls=calls)), StartCallPhase)
    assert (sc.task_id, sc.slot_id, sc.task_code_epoch, sc.calls, sc.streaming) == ("t", "slot-0", 4, calls, False)
    assert (sc.call_failure_policy, sc.call_retry_policy, sc.instance_id, sc.deadline_ms) == (
        "CONTINUE", CallRetryPolicy(5, 7, 2), "i-1", 9100)
    assert w.get_task_context("t").phase is C
    outputs = [b"3", b"7"]
    sw = only(finish(w, "t", C, 170, PhaseOutcome(outputs=outputs, call_count=2, calls_failed=1,
                                                   call_retries=3, cache_hits=1)), StartPluginPhase)
    assert (sw.outputs, sw.result_handler) == (outputs, rh)
    prs = [PluginResult("log", True, "wrote 2", b"{}")]
    cmd = converged(finish(w, "t", P, 175, PhaseOutcome(plugin_results=prs)), "", TaskState.SUCCEEDED)
    res = cmd.result
    assert (res.failure_code, res.failure_message, res.retryable) == ("", "", False)
    assert res.outputs == outputs and res.plugin_results == prs
    assert res.statistic == TaskStatistic(accepted_at_ms=100, finished_at_ms=175, builder_ms=20,
                                          calls_ms=40, plugin_ms=5, call_count=2, calls_failed=1,
                                          call_retries=3, cache_hits=1)
    assert cmd.interrupted_phase is P
    assert w.free_capacity() == 50 and w.get_task_context("t") is None
    assert w.handle_get_task_result("t").snapshot.result is res


def test_streaming_builder_starts_a_streaming_call_phase():
    w = make()
    submit(w, "t", 0)
    activate(w, "t", 0)
    sc = only(finish(w, "t", B, 1, PhaseOutcome(streaming=True, calls=["ignored"])), StartCallPhase)
    assert sc.streaming is True and sc.calls is None


def test_builder_without_calls_starts_an_empty_call_phase():
    w = make()
    submit(w, "t", 0)
    activate(w, "t", 0)
    sc = only(finish(w, "t", B, 1, PhaseOutcome()), StartCallPhase)
    assert sc.calls == [] and sc.streaming is False


def test_task_without_result_handler_still_passes_through_the_plugin_phase():
    w = make()
    submit(w, "t", 0)
    run_to(w, "t", C, 0)
    sw = only(finish(w, "t", C, 1, PhaseOutcome(outputs=[b"1"])), StartPluginPhase)
    assert sw.result_handler is None
    converged(finish(w, "t", P, 2), state=TaskState.SUCCEEDED)


@pytest.mark.parametrize("phase,outcome_code,expected", [
    (B, "", fcodes.BUILDER_FAILED),
    (B, fcodes.BUILDER_NOT_FOUND, fcodes.BUILDER_NOT_FOUND),
    (C, "", fcodes.CALL_FAILED),
    (C, fcodes.OUTPUT_BYTES_EXCEEDED, fcodes.OUTPUT_BYTES_EXCEEDED),
    (P, "", fcodes.PLUGIN_FAILED),
])
def test_phase_failures_converge_with_the_outcome_code_or_the_phase_default(phase, outcome_code, expected):
    w = make()
    submit(w, "t", 0)
    run_to(w, "t", phase, 10)
    out = PhaseOutcome.failure(outcome_code, "boom", retryable=True, outputs=[b"1"], call_count=3)
    cmd = converged(finish(w, "t", phase, 25, out), expected)
    res = cmd.result
    assert res.failure_message == "boom" and res.retryable is True
    assert cmd.interrupted_phase is phase
    assert w.free_capacity() == 50 and w.active_task_count() == 0
    stat = res.statistic
    assert (stat.accepted_at_ms, stat.finished_at_ms) == (0, 25)
    assert (stat.builder_ms, stat.calls_ms, stat.plugin_ms) == {
        B: (15, 0, 0), C: (0, 15, 0), P: (0, 0, 15)}[phase]
    if phase is C:
        assert res.outputs == [b"1"] and stat.call_count == 3
    if phase is P:
        assert res.plugin_results == []


def test_plugin_failure_keeps_outputs_and_plugin_results():
    w = make()
    submit(w, "t", 0, result_handler=ResultHandler("test"))
    run_to(w, "t", C, 0)
    finish(w, "t", C, 1, PhaseOutcome(outputs=[b"42"]))
    prs = [PluginResult("test", False, "sink refused", b"\x00")]
    res = converged(finish(w, "t", P, 2, PhaseOutcome.failure("", "sink refused", plugin_results=prs)),
                    fcodes.PLUGIN_FAILED).result
    assert res.outputs == [b"42"] and res.plugin_results == prs


# ---- timeouts in each phase ----------------------------------------------------------------


@pytest.mark.parametrize("phase", [TaskPhase.PREPARING, B, C, P])
def test_timeout_in_any_phase_converges_timed_out_and_charges_the_phase(phase):
    w = make(default_ttl_ms=10_000)
    submit(w, "t", 0, task_timeout_ms=1000)
    run_to(w, "t", phase, 100)
    assert w.timed_out_tasks(999) == []
    cmd = w.tick(1000)
    assert len(cmd) == 1 and cmd[0].interrupted_phase is phase
    res = cmd[0].result
    assert (res.state, res.failure_code, res.retryable) == (TaskState.FAILED, fcodes.TIMED_OUT, True)
    stat = res.statistic
    assert {B: stat.builder_ms, C: stat.calls_ms, P: stat.plugin_ms}.get(phase, 0) == (
        0 if phase is TaskPhase.PREPARING else 900)
    check_invariants(w)
    assert w.free_capacity() == 50
    if phase is not TaskPhase.PREPARING:
        assert not finish(w, "t", phase, 1001).applied


def test_phase_outcome_at_or_after_the_deadline_converges_timed_out():
    w = make()
    submit(w, "t", 0, task_timeout_ms=500)
    run_to(w, "t", C, 10)
    converged(finish(w, "t", C, 500, PhaseOutcome(outputs=[b"1"])), fcodes.TIMED_OUT)
    w = make()
    submit(w, "t", 0, task_timeout_ms=500)
    run_to(w, "t", C, 10)
    only(finish(w, "t", C, 499, PhaseOutcome(outputs=[b"1"])), StartPluginPhase)


def test_activation_after_the_deadline_converges_timed_out():
    w = make(default_ttl_ms=10_000)
    submit(w, "t", 0, task_timeout_ms=20)
    converged(w.handle_task_activation_prepared("t", "slot-0", 1, 20), fcodes.TIMED_OUT)
    w = make(default_ttl_ms=10_000)
    submit(w, "t", 0, task_timeout_ms=20)
    converged(w.handle_task_activation_failed("t", fcodes.IO_SCOPE_FAILED, "x", 25), fcodes.TIMED_OUT)


# ---- out-of-order phase events ------------------------------------------------------------------


def test_out_of_order_phase_events_are_dropped():
    w = make()
    submit(w, "t", 0)
    for phase in (B, C, P):                     # nothing finishes while PREPARING
        r = finish(w, "t", phase, 1)
        assert not r.applied and r.commands == [] and r.snapshot.state is TaskState.RUNNING
    activate(w, "t", 2)
    assert not finish(w, "t", C, 3).applied
    assert not finish(w, "t", P, 3).applied
    assert w.get_task_context("t").phase is B
    only(finish(w, "t", B, 4, PhaseOutcome(calls=[])), StartCallPhase)
    assert not finish(w, "t", B, 5, PhaseOutcome.failure("X")).applied, "a duplicate Builder result"
    only(finish(w, "t", C, 6), StartPluginPhase)
    converged(finish(w, "t", P, 7), state=TaskState.SUCCEEDED)
    for phase in (B, C, P):                     # nothing changes a terminal task
        r = finish(w, "t", phase, 8, PhaseOutcome.failure("X"))
        assert not r.applied and r.snapshot.state is TaskState.SUCCEEDED
    assert not w.handle_task_timed_out("t", 10**9).applied
    assert not w.handle_watch_disconnected("t", 10**9).applied
    assert not finish(w, "unknown", B, 9).applied and finish(w, "unknown", B, 9).snapshot is None


@pytest.mark.parametrize("phase", [TaskPhase.PREPARING, TaskPhase.TERMINAL])
def test_finishing_a_non_finishable_phase_is_a_programming_error(phase):
    w = make()
    submit(w, "t", 0)
    with pytest.raises(WorkerError, match="cannot finish"):
        w.handle_task_phase_finished("t", phase, PhaseOutcome(), 1)
    assert w.get_task_context("t").phase is TaskPhase.PREPARING
