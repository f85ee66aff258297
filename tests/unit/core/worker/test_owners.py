"""WorkerCore ownership: a task id belongs to the identity that reserved or
submitted it; another identity reads it as unknown (NotFound, the same message)
and cannot reserve or submit it (AlreadyExists, never the owner's snapshot);
admin and the unrestricted caller (None) see everything."""
import pytest

from blockx.core.errors import WorkerError
from blockx.core.owners import Caller, may_use, owner_of
from blockx.core.types import PhaseOutcome, TaskPhase, TaskState

from tests.unit.core.worker.test_support import check_invariants, finish, make, req, run_to

ALICE, BOB, ADMIN = Caller("alice"), Caller("bob"), Caller("admin", admin=True)


def code_of(fn, *args, **kw) -> WorkerError:
    with pytest.raises(WorkerError) as ei:
        fn(*args, **kw)
    return ei.value


def succeed(w, task_id, now, outputs=(b'{"v": 1}',)):
    run_to(w, task_id, TaskPhase.CALLS, now)
    finish(w, task_id, TaskPhase.CALLS, now, PhaseOutcome(outputs=list(outputs)))
    finish(w, task_id, TaskPhase.PLUGIN, now)


def test_rules():
    assert owner_of(None) == "" and owner_of(ALICE) == "alice" and owner_of(ADMIN) == "admin"
    assert may_use("alice", ALICE) and not may_use("alice", BOB)
    assert may_use("alice", ADMIN) and may_use("alice", None) and may_use("", None)
    assert not may_use("", ALICE)          # an unauthenticated worker's task is not alice's


def test_submitted_task_records_its_owner():
    w = make()
    w.handle_submit_task(req("t"), 0, ALICE)
    assert w.get_index_entry("t").owner == "alice"
    w.handle_request_task_slot("r", 0, 0, BOB)
    assert w.get_index_entry("r").owner == "bob"
    w.handle_submit_task(req("n"), 0)
    assert w.get_index_entry("n").owner == ""
    check_invariants(w)


def test_other_identity_reads_a_task_as_unknown():
    w = make()
    w.handle_submit_task(req("t"), 0, ALICE)
    succeed(w, "t", 1)
    unknown = code_of(w.handle_get_task_result, "never-seen", BOB)
    err = code_of(w.handle_get_task_result, "t", BOB)
    assert err.code == "NotFound" == unknown.code
    assert err.message == unknown.message.replace("never-seen", "t")   # nothing tells it exists
    assert w.handle_get_task_result("t", ALICE).snapshot.result.outputs == [b'{"v": 1}']
    assert w.handle_get_task_result("t", ADMIN).snapshot.state is TaskState.SUCCEEDED
    assert w.handle_get_task_result("t").snapshot.state is TaskState.SUCCEEDED


def test_other_identity_cannot_resubmit_or_reserve_a_finished_task():
    w = make()
    w.handle_submit_task(req("t"), 0, ALICE)
    succeed(w, "t", 1)
    err = code_of(w.handle_submit_task, req("t"), 2, BOB)
    assert err.code == "AlreadyExists" and err.grpc_status_name == "ALREADY_EXISTS"
    assert "another identity" in err.message and '"v"' not in err.message
    assert code_of(w.handle_request_task_slot, "t", 0, 2, BOB).code == "AlreadyExists"
    # the owner and admin get the idempotent answer with the outputs
    assert w.handle_submit_task(req("t"), 2, ALICE).snapshot.result.outputs == [b'{"v": 1}']
    assert w.handle_submit_task(req("t"), 2, ADMIN).snapshot.result.outputs == [b'{"v": 1}']
    check_invariants(w)


def test_other_identity_cannot_take_a_reservation_or_a_running_task():
    w = make(task_slots=2)
    w.handle_request_task_slot("r", 1_000, 0, ALICE)
    assert code_of(w.handle_submit_task, req("r"), 1, BOB).code == "AlreadyExists"
    assert code_of(w.handle_submit_task, req("r", "slot-0"), 1, BOB).code == "AlreadyExists"
    assert code_of(w.handle_request_task_slot, "r", 0, 1, BOB).code == "AlreadyExists"
    assert w.get_index_entry("r").state is TaskState.ALLOCATED and w.free_capacity() == 1   # untouched
    w.handle_submit_task(req("r", "slot-0"), 2, ALICE)
    assert code_of(w.handle_submit_task, req("r"), 3, BOB).code == "AlreadyExists"
    assert w.get_index_entry("r").owner == "alice"
    check_invariants(w)


def test_tombstone_keeps_its_owner():
    w = make()
    w.handle_request_task_slot("r", 100, 0, ALICE)
    w.tick(100)                                     # the lease runs out: a tombstone
    assert code_of(w.handle_request_task_slot, "r", 0, 101, BOB).code == "AlreadyExists"
    assert code_of(w.handle_submit_task, req("r", "slot-0"), 101, BOB).code == "AlreadyExists"
    assert code_of(w.handle_submit_task, req("r", "slot-0"), 101, ALICE).code == "SlotUncertain"
    assert w.handle_request_task_slot("r", 0, 102, ALICE).snapshot.state is TaskState.ALLOCATED
    assert w.get_index_entry("r").owner == "alice"
    check_invariants(w)


def test_refusal_changes_nothing():
    w = make(task_slots=1)
    w.handle_submit_task(req("t"), 0, ALICE)
    before = (w.free_capacity(), w.active_task_count(), w.get_index_entry("t").state)
    for fn, args in ((w.handle_submit_task, (req("t"), 1, BOB)),
                     (w.handle_request_task_slot, ("t", 0, 1, BOB))):
        code_of(fn, *args)
    assert (w.free_capacity(), w.active_task_count(), w.get_index_entry("t").state) == before
    check_invariants(w)
