"""WorkerCore: slots, idempotency, submission errors, draining, deadlines,
result retention and next_deadline. Virtual clock from 0, exact instants."""
import pytest

from blockx.core import errors
from blockx.core import failure_codes as fcodes
from blockx.core.errors import WorkerError
from blockx.core.types import (CallRetryPolicy, ConvergeTask, FunctionCall, PhaseOutcome,
                               PrepareTaskActivation, ResultHandler, SlotState, TaskPhase,
                               TaskState)

from tests.unit.core.worker.test_support import FC, activate, check_invariants, finish, make, req, run_to, submit


def reserve(w, task_id, now=0, ttl=0):
    r = w.handle_request_task_slot(task_id, ttl, now)
    check_invariants(w)
    return r


def raises(code, fn, *args, match=None):
    with pytest.raises(WorkerError) as ei:
        fn(*args)
    assert ei.value.code == code, ei.value
    if match is not None:
        assert match in ei.value.message, ei.value.message
    return ei.value


def complete(w, task_id, now):
    run_to(w, task_id, TaskPhase.PLUGIN, now)
    return finish(w, task_id, TaskPhase.PLUGIN, now)


# ---- slots ----------------------------------------------------------------------


def test_slots_are_named_from_zero_and_allocated_first_free():
    w = make(task_slots=3)
    assert [s.slot_id for s in w.slots] == ["slot-0", "slot-1", "slot-2"]
    assert [reserve(w, t).snapshot.slot_id for t in "abc"] == ["slot-0", "slot-1", "slot-2"]
    # free the middle slot: the next reservation takes the first free one, slot-1
    submit(w, "b", 0, "slot-1")
    complete(w, "b", 1)
    assert w.slots[1].state is SlotState.FREE
    assert reserve(w, "d", 2).snapshot.slot_id == "slot-1"


def test_reservation_snapshot_lease_and_heartbeat():
    w = make(task_slots=4)
    r = reserve(w, "t1", now=100, ttl=250)
    assert r.applied and r.commands == []
    snap = r.snapshot
    assert (snap.task_id, snap.slot_id, snap.state, snap.result) == ("t1", "slot-0", TaskState.ALLOCATED, None)
    assert w.slots[0].state is SlotState.ALLOCATED and w.slots[0].lease_expires_at_ms == 350
    assert w.free_capacity() == 3
    assert w.derive_heartbeat(101) == {"taskSlots": 4, "reservedSlots": 1, "runningTasks": 0,
                                       "freeSlots": 3, "draining": False, "ready": False, "atMs": 101}


def test_ttl_zero_uses_default_ttl():
    w = make(default_ttl_ms=1234)
    reserve(w, "t", now=10)
    assert w.slots[0].lease_expires_at_ms == 1244
    assert w.next_deadline() == 1244


def test_negative_ttl_and_empty_task_id_are_invalid_argument():
    w = make()
    e = raises(errors.INVALID_ARGUMENT, w.handle_request_task_slot, "t", -1, 0, match="ttl_ms -1 is negative")
    assert isinstance(e, errors.InvalidArgumentError) and e.grpc_status_name == "INVALID_ARGUMENT"
    raises(errors.INVALID_ARGUMENT, w.handle_request_task_slot, "", 0, 0, match="task_id is required")
    raises(errors.INVALID_ARGUMENT, w.handle_submit_task, req(""), 0, match="task_id is required")
    raises(errors.INVALID_ARGUMENT, w.handle_get_task_result, "")
    assert w.free_capacity() == 50 and w._tasks._index == {}


def test_request_task_slot_is_idempotent_and_does_not_extend_the_lease():
    w = make()
    first = reserve(w, "t", now=0, ttl=1000)
    again = reserve(w, "t", now=500, ttl=9000)
    assert not again.applied
    assert again.snapshot == first.snapshot
    assert w.slots[0].lease_expires_at_ms == 1000
    assert w.free_capacity() == 49


def test_no_slot_when_every_slot_is_reserved_or_running():
    w = make(task_slots=2)
    reserve(w, "a")
    submit(w, "b")
    activate(w, "b", 1)
    e = raises(errors.NO_SLOT, w.handle_request_task_slot, "c", 0, 2,
               match="all 2 slots are reserved (1) or running (1)")
    assert e.grpc_status_name == "RESOURCE_EXHAUSTED"
    raises(errors.NO_SLOT, w.handle_submit_task, req("c"), 2)
    assert "c" not in w._tasks._index
    # a known task still gets its snapshot when the worker is full
    assert reserve(w, "a", 3).snapshot.slot_id == "slot-0"


def test_expired_reservation_is_reclaimed_and_the_slot_reused():
    w = make(task_slots=1)
    reserve(w, "a", now=0, ttl=100)
    assert w.expired_slots(99) == []
    assert w.expired_slots(100) == ["slot-0"]
    assert w.expired_slots(100) == ["slot-0"], "scans report until handled"
    r = w.handle_slot_lease_expired("slot-0", 100)
    check_invariants(w)
    assert r.applied and r.commands == [] and r.snapshot is None
    assert w.expired_slots(100) == [] and w.free_capacity() == 1
    assert not w.handle_slot_lease_expired("slot-0", 101).applied
    raises(errors.NOT_FOUND, w.handle_get_task_result, "a", match="reservation of slot-0 expired at 100 ms")
    # requesting again makes a fresh reservation
    assert reserve(w, "a", 150).snapshot.state is TaskState.ALLOCATED
    assert w.slots[0].lease_expires_at_ms == 150 + 5000


def test_lease_expiry_before_it_is_due_or_on_bad_slot_is_ignored_or_invalid():
    w = make()
    reserve(w, "a", ttl=100)
    assert not w.handle_slot_lease_expired("slot-0", 99).applied
    assert not w.handle_slot_lease_expired("slot-3", 200).applied   # FREE slot
    raises(errors.INVALID_SLOT, w.handle_slot_lease_expired, "slot-50", 0)    # not in this pool
    raises(errors.INVALID_ARGUMENT, w.handle_slot_lease_expired, "slot-x", 0)


# ---- idempotency ---------------------------------------------------------------------


def test_submit_task_is_idempotent_while_active():
    w = make()
    first = submit(w, "t", 0)
    assert first.applied and isinstance(first.commands[0], PrepareTaskActivation)
    dup = submit(w, "t", 5, slot_id="slot-9", task_timeout_ms=-1)
    assert not dup.applied and dup.commands == []
    assert dup.snapshot == first.snapshot
    assert dup.snapshot.state is TaskState.RUNNING
    activate(w, "t", 6)
    assert submit(w, "t", 7).snapshot.state is TaskState.RUNNING
    assert w.free_capacity() == 49 and w.active_task_count() == 1


def test_both_rpcs_return_the_terminal_snapshot_within_retention():
    w = make(result_retention_ms=1000)
    submit(w, "t", 0)
    done = complete(w, "t", 10)
    assert done.snapshot.state is TaskState.SUCCEEDED
    again = submit(w, "t", 500)
    assert not again.applied and again.commands == []
    assert again.snapshot.state is TaskState.SUCCEEDED and again.snapshot.result is done.snapshot.result
    slot = reserve(w, "t", 600)
    assert slot.snapshot.state is TaskState.SUCCEEDED and w.free_capacity() == 50
    assert w.handle_get_task_result("t").snapshot.result is done.snapshot.result


def test_request_task_slot_on_a_submitted_task_returns_running():
    w = make()
    submit(w, "t", 0)
    r = reserve(w, "t", 1)
    assert not r.applied and r.snapshot.state is TaskState.RUNNING and r.snapshot.slot_id == "slot-0"
    assert w.free_capacity() == 49


def test_after_purge_the_same_task_id_runs_again():
    w = make(result_retention_ms=100)
    submit(w, "t", 0)
    complete(w, "t", 0)
    assert w.purge_expired_results(100) == ["t"]
    raises(errors.NOT_FOUND, w.handle_get_task_result, "t", match="never submitted here, or its result was purged")
    r = submit(w, "t", 101)
    assert r.applied and isinstance(r.commands[0], PrepareTaskActivation)


# ---- SubmitTask with a slot -------------------------------------------------------------


def test_submit_on_reserved_slot_uses_it_and_keeps_it_allocated_until_activation():
    w = make()
    reserve(w, "other")
    reserve(w, "t", ttl=300)
    r = submit(w, "t", 10, slot_id="slot-1")
    cmd = r.commands[0]
    assert (cmd.task_id, cmd.slot_id, cmd.function_call, cmd.deadline_ms) == (
        "t", "slot-1", FC, 10 + 300_000)
    assert w.slots[1].state is SlotState.ALLOCATED and w.slots[1].lease_expires_at_ms == 300
    activate(w, "t", 20)
    assert w.slots[1].state is SlotState.RUNNING
    assert w.expired_slots(10_000) == ["slot-0"], "an activated slot has no lease any more"


@pytest.mark.parametrize("slot_id", ["slot-01", "slot--1", "slot-", "foo", " slot-0", "SLOT-0", "slot-1x"])
def test_submit_with_a_slot_id_that_is_no_slot_is_invalid_argument(slot_id):
    w = make()
    reserve(w, "t")
    raises(errors.INVALID_ARGUMENT, w.handle_submit_task, req("t", slot_id), 0,
           match="is not a slot of this worker (expected slot-0 .. slot-49")
    assert w.get_index_entry("t").state is TaskState.ALLOCATED


@pytest.mark.parametrize("slot_id", ["slot-50", "slot-99999"])
def test_submit_with_a_slot_n_outside_this_pool_is_invalid_slot(slot_id):
    # A well-formed slot id leased from another worker is a precondition failure
    # (the caller talks to the wrong worker), not a malformed request.
    w = make()
    reserve(w, "t")
    e = raises(errors.INVALID_SLOT, w.handle_submit_task, req("t", slot_id), 0,
               match=f"{slot_id} is not a slot of this worker, which has slot-0 .. slot-49")
    assert e.grpc_status_name == "FAILED_PRECONDITION"
    assert "lease a slot on this worker with RequestTaskSlot" in e.message
    assert w.get_index_entry("t").state is TaskState.ALLOCATED


def test_submit_naming_a_slot_not_reserved_for_the_task_is_invalid_slot():
    w = make()
    reserve(w, "a")           # slot-0
    reserve(w, "b")           # slot-1
    e = raises(errors.INVALID_SLOT, w.handle_submit_task, req("b", "slot-0"), 1,
               match="slot-0 is not reserved for task 'b', which holds slot-1")
    assert e.grpc_status_name == "FAILED_PRECONDITION"
    raises(errors.INVALID_SLOT, w.handle_submit_task, req("c", "slot-0"), 1,
           match="call RequestTaskSlot first")
    raises(errors.INVALID_SLOT, w.handle_submit_task, req("c", "slot-7"), 1)   # FREE slot
    check_invariants(w)
    assert w.active_task_count() == 0 and w.free_capacity() == 48


def test_submit_after_the_reservation_was_reclaimed_is_slot_uncertain():
    w = make()
    reserve(w, "t", ttl=100)
    w.tick(100)
    reserve(w, "u", 101)      # slot-0 now belongs to u
    e = raises(errors.SLOT_UNCERTAIN, w.handle_submit_task, req("t", "slot-0"), 102,
               match="reservation of slot-0 for task 't' expired at 100 ms and the slot was reclaimed")
    assert e.grpc_status_name == "ABORTED"
    raises(errors.INVALID_SLOT, w.handle_submit_task, req("t", "slot-3"), 102,
           match="its reservation of slot-0 expired")
    check_invariants(w)
    # without a slot id the task reserves a fresh slot inline
    r = submit(w, "t", 103)
    assert r.applied and r.snapshot.slot_id == "slot-1"


def test_submit_at_the_lease_instant_reclaims_first_then_is_slot_uncertain():
    w = make()
    reserve(w, "t", ttl=100)
    raises(errors.SLOT_UNCERTAIN, w.handle_submit_task, req("t", "slot-0"), 100)
    check_invariants(w)
    assert w.slots[0].state is SlotState.FREE and w.expired_slots(100) == []
    # one millisecond earlier the same submit is accepted
    w2 = make()
    reserve(w2, "t", ttl=100)
    assert submit(w2, "t", 99, "slot-0").applied


def test_submit_without_slot_id_reserves_inline_or_reuses_the_reservation():
    w = make(default_ttl_ms=700)
    r = submit(w, "inline", 5)
    assert r.snapshot.slot_id == "slot-0" and w.slots[0].lease_expires_at_ms == 705
    reserve(w, "held", 6, ttl=50)             # slot-1
    r = submit(w, "held", 7)
    assert r.snapshot.slot_id == "slot-1" and w.slots[1].lease_expires_at_ms == 56
    assert w.free_capacity() == 48


# ---- validation -------------------------------------------------------------------------


@pytest.mark.parametrize("kw,match", [
    ({"function_call": None}, "task.function_call.type is required"),
    ({"function_call": FunctionCall("")}, "task.function_call.type is required"),
    ({"task_timeout_ms": -5}, "task_timeout_ms -5 is negative"),
    ({"task_timeout_ms": 999999999}, "task_timeout_ms 999999999 exceeds maxTaskTimeoutMs 28800000"),
    ({"call_failure_policy": "SOMETIMES"}, "call_failure_policy 'SOMETIMES' is not one of FAST_FAIL, CONTINUE"),
    ({"call_failure_policy": 7}, "call_failure_policy 7 is not one of"),
    ({"call_retry_policy": CallRetryPolicy(-1)}, "call_retry_policy.max_attempts -1 is negative"),
    ({"call_retry_policy": CallRetryPolicy(0, -2)}, "call_retry_policy.base_backoff_ms -2 is negative"),
    ({"call_retry_policy": CallRetryPolicy(0, 0, 101)}, "call_retry_policy.jitter_percent 101 is outside 0..5"),
    ({"call_retry_policy": CallRetryPolicy(0, 0, 6)}, "call_retry_policy.jitter_percent 6 is outside 0..5"),
    ({"call_retry_policy": CallRetryPolicy(0, 1000, 100)}, "call_retry_policy.jitter_percent 100 is outside 0..5"),
    ({"call_retry_policy": CallRetryPolicy(0, 0, -1)}, "call_retry_policy.jitter_percent -1 is outside 0..5"),
    ({"result_handler": ResultHandler("", b"{}")}, "task.result_handler.type is required"),
])
def test_invalid_submissions_are_rejected_without_side_effects(kw, match):
    w = make()
    reserve(w, "t")
    raises(errors.INVALID_ARGUMENT, w.handle_submit_task, req("t", "slot-0", **kw), 0, match=match)
    raises(errors.INVALID_ARGUMENT, w.handle_submit_task, req("fresh", **kw), 0, match=match)
    check_invariants(w)
    assert w.active_task_count() == 0 and w.free_capacity() == 49
    assert w.get_index_entry("t").state is TaskState.ALLOCATED and w.get_index_entry("fresh") is None


def test_a_task_jitter_is_held_to_the_five_percent_the_retries_allow():
    w = make(default_retry_jitter_percent=3)
    with pytest.raises(errors.InvalidArgumentError) as e:
        w.handle_submit_task(req("t", call_retry_policy=CallRetryPolicy(2, 1000, 100)), 0)
    assert e.value.code == errors.INVALID_ARGUMENT
    assert e.value.message == ("call_retry_policy.jitter_percent 100 is outside 0..5: a retry adds at most 5% "
                            "jitter to its backoff; use 0 for the worker default (3)")
    assert w.active_task_count() == 0
    submit(w, "five", 0, call_retry_policy=CallRetryPolicy(2, 1000, 5))
    assert w.get_task_context("five").call_retry_policy == CallRetryPolicy(2, 1000, 5)


def test_deadline_and_policies_resolve_from_request_or_config():
    w = make(task_deadline_ms=1000, default_max_attempts=4, default_base_backoff_ms=20,
             default_retry_jitter_percent=3)
    submit(w, "default", 10)
    ctx = w.get_task_context("default")
    assert ctx.deadline_ms == 1010 and ctx.accepted_at_ms == 10
    assert ctx.call_retry_policy == CallRetryPolicy(4, 20, 3)
    assert ctx.call_failure_policy == "FAST_FAIL" and ctx.result_handler is None
    submit(w, "custom", 10, task_timeout_ms=28_800_000, call_failure_policy=2,
           call_retry_policy=CallRetryPolicy(1, 0, 0), instance_id="inst",
           result_handler=ResultHandler("", b""))
    ctx = w.get_task_context("custom")
    assert ctx.deadline_ms == 10 + 28_800_000
    assert ctx.call_failure_policy == "CONTINUE" and ctx.instance_id == "inst"
    assert ctx.call_retry_policy == CallRetryPolicy(1, 20, 3)
    assert ctx.result_handler is None
    for policy in ("", "FAST_FAIL", "CALL_FAILURE_POLICY_UNSPECIFIED", 0, 1):
        submit(w, f"p{policy!r}", 0, call_failure_policy=policy)
        assert w.get_task_context(f"p{policy!r}").call_failure_policy == "FAST_FAIL"


# ---- draining ------------------------------------------------------------------------------


def test_draining_refuses_new_work_but_answers_known_tasks():
    w = make(result_retention_ms=10_000)
    reserve(w, "reserved")
    submit(w, "pending", 0)
    submit(w, "running", 0)
    activate(w, "running", 1)
    submit(w, "done", 0)
    complete(w, "done", 2)
    w.set_draining(True)
    assert w.draining and w.derive_heartbeat(3)["draining"] is True
    e = raises(errors.UNAVAILABLE, w.handle_request_task_slot, "new", 0, 3, match="draining")
    assert e.grpc_status_name == "UNAVAILABLE"
    raises(errors.UNAVAILABLE, w.handle_submit_task, req("new"), 3)
    raises(errors.UNAVAILABLE, w.handle_submit_task, req("reserved", "slot-0"), 3)
    assert reserve(w, "reserved", 3).snapshot.state is TaskState.ALLOCATED
    assert submit(w, "pending", 3).snapshot.state is TaskState.RUNNING
    assert submit(w, "running", 3).snapshot.state is TaskState.RUNNING
    assert submit(w, "done", 3).snapshot.state is TaskState.SUCCEEDED
    assert reserve(w, "done", 3).snapshot.state is TaskState.SUCCEEDED
    assert w.active_task_count() == 2
    # already accepted tasks keep running to completion while draining
    complete(w, "running", 4)
    activate(w, "pending", 4)
    complete(w, "pending", 5)
    assert w.active_task_count() == 0
    w.set_draining(False)
    assert reserve(w, "new", 6).applied


def test_ready_is_reported_but_does_not_gate_admission():
    w = make()
    assert not w.ready
    assert submit(w, "t", 0).applied
    w.set_ready(True)
    assert w.ready and w.derive_heartbeat(0)["ready"] is True


# ---- deadlines ------------------------------------------------------------------------------


def test_task_deadline_is_exact():
    w = make()
    submit(w, "t", 40, task_timeout_ms=60)
    activate(w, "t", 41)
    assert w.timed_out_tasks(99) == []
    assert w.timed_out_tasks(100) == ["t"]
    assert not w.handle_task_timed_out("t", 99).applied
    r = w.handle_task_timed_out("t", 100)
    check_invariants(w)
    res = r.snapshot.result
    assert (res.state, res.failure_code, res.retryable) == (TaskState.FAILED, fcodes.TIMED_OUT, True)
    assert "timeout of 60 ms" in res.failure_message and "BUILDER" in res.failure_message
    assert w.timed_out_tasks(1000) == [] and w.free_capacity() == 50


def test_timed_out_tasks_are_reported_in_deadline_order():
    w = make()
    for i, t in enumerate([300, 100, 200, 100]):
        submit(w, f"t{i}", 0, task_timeout_ms=t)
    assert w.timed_out_tasks(250) == ["t1", "t3", "t2"]
    assert [c.task_id for c in w.tick(250)] == ["t1", "t3", "t2"]
    assert w.timed_out_tasks(250) == []


# ---- retention and purge -------------------------------------------------------------------


def test_results_are_retained_then_purged_in_finish_order():
    w = make(result_retention_ms=1000)
    for i, t in enumerate(["a", "b", "c"]):
        submit(w, t, 0)
        complete(w, t, 10 * i)
    assert w.next_deadline() == 1000
    assert w.purge_expired_results(999) == []
    assert w.purge_expired_results(1010) == ["a", "b"]
    check_invariants(w)
    raises(errors.NOT_FOUND, w.handle_get_task_result, "a")
    assert w.handle_get_task_result("c").snapshot.state is TaskState.SUCCEEDED
    assert w.next_deadline() == 1020
    assert w.purge_expired_results(5000) == ["c"]
    assert w.next_deadline() is None and w._tasks._index == {}


def test_zero_retention_purges_at_the_finish_instant():
    w = make(result_retention_ms=0)
    submit(w, "t", 0)
    complete(w, "t", 5)
    assert w.next_deadline() == 5
    assert w.purge_expired_results(5) == ["t"]


def test_purge_skips_entries_that_were_replaced():
    w = make(result_retention_ms=100)
    reserve(w, "t", 0, ttl=10)
    w.tick(10)                          # tombstone, purge due at 110
    submit(w, "t", 20)                  # fresh reservation replaces the tombstone
    assert w.purge_expired_results(500) == []
    assert w.get_task_context("t") is not None


def test_get_task_result_shows_allocated_and_running():
    w = make()
    reserve(w, "a")
    submit(w, "b", 0)
    out = w.handle_get_task_result("a")
    assert out.snapshot.state is TaskState.ALLOCATED and out.commands == []
    assert w.handle_get_task_result("b").snapshot.state is TaskState.RUNNING
    e = raises(errors.NOT_FOUND, w.handle_get_task_result, "zzz")
    assert e.grpc_status_name == "NOT_FOUND"


# ---- next_deadline ---------------------------------------------------------------------------


def test_next_deadline_is_the_earliest_armed_timer():
    w = make(result_retention_ms=50, watch_disconnect_grace_ms=30)
    assert w.next_deadline() is None
    reserve(w, "r", 0, ttl=5000)
    assert w.next_deadline() == 5000
    submit(w, "t", 0, task_timeout_ms=4000)             # inline lease at 5000, deadline 4000
    assert w.next_deadline() == 4000
    activate(w, "t", 1)
    w.handle_watch_attached("t", 2)
    w.handle_watch_detached("t", 3)
    assert w.next_deadline() == 33
    w.handle_watch_attached("t", 4)
    assert w.next_deadline() == 4000
    run_to(w, "t", TaskPhase.PLUGIN, 10)
    finish(w, "t", TaskPhase.PLUGIN, 10)
    assert w.next_deadline() == 60                      # retention of t
    w.purge_expired_results(60)
    assert w.next_deadline() == 5000
    w.tick(5000)
    assert w.next_deadline() == 5050                    # tombstone of r
    w.tick(5050)
    assert w.next_deadline() is None


def test_timer_heaps_stay_bounded_under_churn():
    w = make(task_slots=4, result_retention_ms=0)
    for i in range(3000):
        t = f"t{i}"
        submit(w, t, i)
        complete(w, t, i)
        w.purge_expired_results(i)
    assert len(w._timers._deadlines) <= 2 * w.active_task_count() + 65
    assert len(w._slots._leases) <= 2 * 4 + 65
    assert w.next_deadline() is None


# ---- errors -----------------------------------------------------------------------------------


def test_error_codes_and_grpc_mapping():
    assert errors.GRPC_STATUS_NAME == {
        "InvalidArgument": "INVALID_ARGUMENT", "NoSlot": "RESOURCE_EXHAUSTED",
        "Unavailable": "UNAVAILABLE", "InvalidSlot": "FAILED_PRECONDITION",
        "NotFound": "NOT_FOUND", "SlotUncertain": "ABORTED", "AlreadyExists": "ALREADY_EXISTS",
        "PermissionDenied": "PERMISSION_DENIED"}
    for code, cls in errors.BY_CODE.items():
        e = cls("msg")
        assert isinstance(e, WorkerError) and e.code == code and str(e) == f"{code}: msg"
    assert WorkerError("NoSlot", "x").grpc_status_name == "RESOURCE_EXHAUSTED"
    with pytest.raises(ValueError, match="unknown WorkerError code"):
        WorkerError("Nope", "x")


def test_failure_codes_and_retryability():
    assert fcodes.is_retryable(fcodes.TIMED_OUT) and fcodes.is_retryable(fcodes.WORKER_SHUTDOWN)
    for code in fcodes.ALL - {fcodes.TIMED_OUT, fcodes.WORKER_SHUTDOWN}:
        assert not fcodes.is_retryable(code)
    assert len(fcodes.ALL) == 12


def test_converge_command_shape():
    w = make()
    submit(w, "t", 0)
    run_to(w, "t", TaskPhase.CALLS, 1)
    cmd = w.tick(300_001)[0]
    assert isinstance(cmd, ConvergeTask)
    assert (cmd.task_id, cmd.slot_id, cmd.state, cmd.interrupted_phase) == (
        "t", "slot-0", TaskState.FAILED, TaskPhase.CALLS)
    assert cmd.result.statistic.calls_ms == 300_000
    assert PhaseOutcome().ok
