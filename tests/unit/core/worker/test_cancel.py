"""WorkerCore.handle_cancel_task in every phase of a task: the exact commands,
the terminal result, the slot, and who may cancel."""
import pytest

from blockx.core import failure_codes as fc
from blockx.core.errors import InvalidArgumentError, NotFoundError
from blockx.core.owners import Caller
from blockx.core.types import (CancelTaskResult, ConvergeTask, PhaseOutcome, SlotState, TaskPhase,
                               TaskState)
from blockx.core.worker.cancel import MAX_CANCEL_REASON_CHARS

from tests.unit.core.worker.test_support import check_invariants, make, req, run_to, submit

ALICE = Caller("alice")
BOB = Caller("bob")
ADMIN = Caller("admin", admin=True)


def _cancelled(w, task_id, now, caller=None, reason="stop it"):
    r = w.handle_cancel_task(task_id, reason, now, caller)
    check_invariants(w)
    return r


def _assert_converged(r, task_id, slot_id, phase, now, message):
    assert type(r) is CancelTaskResult and r.applied is True
    assert len(r.commands) == 1
    cmd = r.commands[0]
    assert type(cmd) is ConvergeTask
    assert (cmd.task_id, cmd.slot_id, cmd.state, cmd.interrupted_phase) == (task_id, slot_id, TaskState.FAILED, phase)
    res = cmd.result
    assert (res.state, res.failure_code, res.failure_message, res.retryable) == (
        TaskState.FAILED, "CANCELLED", message, False)
    assert res.statistic.finished_at_ms == now
    assert r.snapshot.state is TaskState.FAILED and r.snapshot.result is res


@pytest.mark.parametrize("phase", [TaskPhase.PREPARING, TaskPhase.BUILDER, TaskPhase.CALLS, TaskPhase.PLUGIN])
def test_cancel_in_each_phase_converges_failed_cancelled_and_frees_the_slot(phase):
    w = make(task_slots=2)
    submit(w, "t", 100)
    run_to(w, "t", phase, 200)
    assert w.free_capacity() == 1
    r = _cancelled(w, "t", 1_250)
    _assert_converged(r, "t", "slot-0", phase, 1_250, "the task was cancelled through CancelTask: stop it")
    assert w.free_capacity() == 2 and w.slots[0].state is SlotState.FREE
    assert w.active_task_count() == 0 and w.get_task_context("t") is None
    st = r.commands[0].result.statistic
    assert st.accepted_at_ms == 100
    # the interrupted phase is charged with the time it ran until the cancel
    ran = {TaskPhase.BUILDER: st.builder_ms, TaskPhase.CALLS: st.calls_ms, TaskPhase.PLUGIN: st.plugin_ms}
    if phase in ran:
        assert ran[phase] == 1_050
    # the result is retained: GetTaskResult and a resubmit answer it
    assert w.handle_get_task_result("t").snapshot.result.failure_code == "CANCELLED"
    again = w.handle_submit_task(req("t"), 1_300)
    assert again.applied is False and again.snapshot.state is TaskState.FAILED and again.commands == []


def test_a_late_phase_outcome_after_the_cancel_is_dropped():
    w = make()
    submit(w, "t", 0)
    run_to(w, "t", TaskPhase.CALLS, 10)
    _cancelled(w, "t", 20)
    late = w.handle_task_phase_finished("t", TaskPhase.CALLS, PhaseOutcome(outputs=[b"1"]), 30)
    assert late.applied is False and late.commands == []
    assert late.snapshot.result.failure_code == "CANCELLED"
    check_invariants(w)


def test_cancelling_a_terminal_task_answers_its_state_and_changes_nothing():
    w = make()
    submit(w, "ok", 0)
    run_to(w, "ok", TaskPhase.PLUGIN, 1)
    w.handle_task_phase_finished("ok", TaskPhase.PLUGIN, PhaseOutcome(), 2)
    r = _cancelled(w, "ok", 3)
    assert r.applied is False and r.commands == []
    assert r.snapshot.state is TaskState.SUCCEEDED and r.snapshot.result.failure_code == ""
    submit(w, "c", 0)
    first = _cancelled(w, "c", 5, reason="first")
    second = _cancelled(w, "c", 6, reason="second")
    assert second.applied is False and second.commands == []
    assert second.snapshot.result is first.snapshot.result
    assert second.snapshot.result.failure_message == "the task was cancelled through CancelTask: first"


def test_cancelling_an_unknown_task_or_a_lapsed_reservation_is_not_found():
    w = make(task_slots=1)
    with pytest.raises(NotFoundError, match="'nope' is not known to this worker"):
        w.handle_cancel_task("nope", "", 0)
    w.handle_request_task_slot("lapsing", 100, 0)
    with pytest.raises(NotFoundError, match="reservation of slot-0 expired at 100 ms"):
        w.handle_cancel_task("lapsing", "", 100)
    check_invariants(w)
    assert w.tick(100) == []                        # the scan reclaims it as ever
    with pytest.raises(NotFoundError):
        w.handle_cancel_task("lapsing", "", 101)    # now a tombstone
    with pytest.raises(InvalidArgumentError, match="task_id"):
        w.handle_cancel_task("", "", 0)


def test_a_bare_reservation_is_cancelled_and_a_late_submit_gets_the_result():
    w = make(task_slots=1)
    w.handle_request_task_slot("r", 60_000, 0, ALICE)
    assert w.free_capacity() == 0
    r = _cancelled(w, "r", 50, ALICE, reason="")
    _assert_converged(r, "r", "slot-0", TaskPhase.PREPARING, 50, "the task was cancelled by 'alice'")
    assert w.free_capacity() == 1
    assert w.next_deadline() == 50 + w.config.result_retention_ms     # no lease timer left: only the purge
    late = w.handle_submit_task(req("r", "slot-0"), 60, ALICE)
    assert late.applied is False and late.snapshot.result.failure_code == "CANCELLED"
    assert w.free_capacity() == 1
    check_invariants(w)


def _unknown_message(w, task_id: str) -> str:
    with pytest.raises(NotFoundError) as ei:
        w.handle_cancel_task(task_id, "", 0, BOB)
    return ei.value.message


def test_only_the_owner_or_an_admin_may_cancel_and_another_identity_learns_nothing():
    w = make(task_slots=4)
    w.handle_submit_task(req("a1"), 0, ALICE)
    w.handle_submit_task(req("a2"), 0, ALICE)
    # For bob, alice's task does not exist: the very answer of an id never used.
    with pytest.raises(NotFoundError) as ei:
        w.handle_cancel_task("a1", "mine now", 10, BOB)
    assert ei.value.message == _unknown_message(w, "never-used").replace("never-used", "a1")
    assert w.get_task_context("a1") is not None       # nothing changed
    check_invariants(w)
    r = _cancelled(w, "a1", 11, ALICE)
    assert r.applied and r.commands[0].result.failure_message == "the task was cancelled by 'alice': stop it"
    r = _cancelled(w, "a2", 12, ADMIN, reason="maintenance")
    assert r.applied and r.commands[0].result.failure_message == "the task was cancelled by 'admin': maintenance"
    with pytest.raises(NotFoundError) as ei:          # a terminal task is still not bob's to see
        w.handle_cancel_task("a1", "", 13, BOB)
    assert ei.value.message == _unknown_message(w, "never-used").replace("never-used", "a1")


def test_a_due_deadline_wins_over_the_cancel():
    w = make()
    submit(w, "t", 0, task_timeout_ms=1_000)
    run_to(w, "t", TaskPhase.CALLS, 10)
    r = _cancelled(w, "t", 1_000)
    assert r.applied is True
    assert r.commands[0].result.failure_code == fc.TIMED_OUT


def test_the_reason_is_bounded():
    w = make()
    submit(w, "t", 0)
    with pytest.raises(InvalidArgumentError,
                       match=f"reason is {MAX_CANCEL_REASON_CHARS + 1} characters; the limit is {MAX_CANCEL_REASON_CHARS}"):
        w.handle_cancel_task("t", "x" * (MAX_CANCEL_REASON_CHARS + 1), 1)
    assert w.get_task_context("t") is not None
    r = _cancelled(w, "t", 2, reason="  spaced  ")
    assert r.commands[0].result.failure_message.endswith(": spaced")


def test_cancelled_is_a_failure_code_and_not_retryable():
    assert fc.CANCELLED == "CANCELLED" and fc.CANCELLED in fc.ALL
    assert not fc.is_retryable(fc.CANCELLED)
