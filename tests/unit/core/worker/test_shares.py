"""Fair shares in WorkerCore (core.worker.shares): an identity holds at most its
share of the slots (half by default) and of queued call bytes; admin and the
unrestricted caller are held only to taskSlots; the counts are the slot table's
and follow every way a slot is freed (converge, cancel, lease expiry)."""
import pytest

from blockx.core.config import Config, ConfigError
from blockx.core.errors import NoSlotError, ShareExceededError
from blockx.core.owners import Caller
from blockx.core.types import FunctionCall, PhaseOutcome, TaskPhase
from blockx.core.worker.shares import slot_cap

from tests.unit.core.worker.test_support import check_invariants, finish, make, req, run_to

ALICE, BOB, ADMIN = Caller("alice"), Caller("bob"), Caller("admin", admin=True)


def payload(n: int) -> FunctionCall:
    return FunctionCall("callList", b"x" * n)


def refused(fn, *args) -> ShareExceededError:
    with pytest.raises(ShareExceededError) as ei:
        fn(*args)
    return ei.value


def test_the_default_share_is_half_the_slots_and_at_least_one():
    assert [slot_cap(n, 0) for n in (1, 2, 3, 50)] == [1, 1, 1, 25]
    assert slot_cap(50, 10) == 10 and slot_cap(4, 10) == 4        # never more than the pool
    assert make(task_slots=50).identity_slot_share == 25


def test_an_identity_past_its_share_of_slots_is_refused_and_the_rest_stay_for_others():
    w = make(task_slots=4)
    w.handle_request_task_slot("a1", 60_000, 0, ALICE)
    w.handle_submit_task(req("a2"), 0, ALICE)                     # an inline reservation counts too
    err = refused(w.handle_request_task_slot, "a3", 60_000, 0, ALICE)
    assert isinstance(err, NoSlotError) and err.grpc_status_name == "RESOURCE_EXHAUSTED"
    assert (err.identity, err.share) == ("alice", "slots")
    assert "holds 2 of this worker's 4 task slots" in err.message
    assert "maxSlotsPerIdentity, MAX_SLOTS_PER_IDENTITY: 2" in err.message
    refused(w.handle_submit_task, req("a4"), 0, ALICE)
    assert w.get_index_entry("a3") is None and w.get_index_entry("a4") is None   # nothing reserved
    # Bob gets the other half; then the pool itself is full (NoSlot, not a share).
    w.handle_request_task_slot("b1", 60_000, 0, BOB)
    w.handle_submit_task(req("b2"), 0, BOB)
    with pytest.raises(NoSlotError) as ei:
        w.handle_request_task_slot("b3", 60_000, 0, BOB)
    assert type(ei.value) is NoSlotError and "all 4 slots" in ei.value.message   # the pool, not a share
    assert w.identity_holdings() == {"alice": (2, len(req("a2").function_call.payload)),
                                     "bob": (2, len(req("b2").function_call.payload))}
    check_invariants(w)


def test_admin_and_the_unrestricted_caller_have_no_share():
    w = make(task_slots=4)
    for i in range(3):
        w.handle_request_task_slot(f"adm-{i}", 60_000, 0, ADMIN)
    w.handle_request_task_slot("anon", 60_000, 0, None)
    assert w.free_capacity() == 0
    with pytest.raises(NoSlotError) as ei:                        # the pool is full: a plain NoSlot
        w.handle_request_task_slot("more", 60_000, 0, ADMIN)
    assert type(ei.value) is NoSlotError
    assert w.identity_holdings() == {"admin": (3, 0), "": (1, 0)}
    check_invariants(w)


def test_every_way_a_slot_is_freed_gives_the_share_back():
    w = make(task_slots=4, default_ttl_ms=100)
    w.handle_submit_task(req("done"), 0, ALICE)                   # converges
    w.handle_request_task_slot("lapses", 100, 0, ALICE)           # its lease runs out
    refused(w.handle_request_task_slot, "x", 60_000, 0, ALICE)
    run_to(w, "done", TaskPhase.CALLS, 10)
    finish(w, "done", TaskPhase.CALLS, 11, PhaseOutcome(outputs=[b"1"]))
    finish(w, "done", TaskPhase.PLUGIN, 12)
    assert w.identity_holdings() == {"alice": (1, 0)}
    w.handle_request_task_slot("cancelled", 60_000, 20, ALICE)
    w.handle_cancel_task("cancelled", "", 30, ALICE)
    w.tick(200)                                                   # "lapses" becomes a tombstone
    assert w.identity_holdings() == {}
    for i in range(2):
        w.handle_request_task_slot(f"again-{i}", 60_000, 300, ALICE)
    check_invariants(w)


def test_queued_call_bytes_are_an_identitys_share_too():
    w = make(task_slots=8, max_payload_bytes=1000, max_queued_call_bytes_per_identity=2500)
    w.handle_submit_task(req("a1", function_call=payload(1000)), 0, ALICE)
    w.handle_submit_task(req("a2", function_call=payload(1000)), 0, ALICE)
    err = refused(w.handle_submit_task, req("a3", function_call=payload(1000)), 0, ALICE)
    assert (err.identity, err.share) == ("alice", "queued_call_bytes")
    assert "has 2000 bytes of call payloads" in err.message and "maxQueuedCallBytesPerIdentity" in err.message
    assert w.get_index_entry("a3") is None                        # refused before it reserved a slot
    w.handle_submit_task(req("a4", function_call=payload(500)), 0, ALICE)       # what still fits
    w.handle_submit_task(req("b1", function_call=payload(1000)), 0, BOB)        # bob's own share
    w.handle_submit_task(req("adm", function_call=payload(1000)), 0, ADMIN)     # admin: none
    w.handle_submit_task(req("adm2", function_call=payload(1000)), 0, ADMIN)
    w.handle_submit_task(req("adm3", function_call=payload(1000)), 0, ADMIN)
    assert w.identity_holdings()["alice"] == (3, 2500)
    w.handle_cancel_task("a1", "", 1, ALICE)                      # its bytes go back with its slot
    w.handle_submit_task(req("a5", function_call=payload(1000)), 2, ALICE)
    assert w.identity_holdings()["alice"] == (3, 2500)
    check_invariants(w)


def test_a_reserved_slot_submitted_into_keeps_its_owner_and_charges_the_bytes():
    w = make(task_slots=4, max_payload_bytes=1000, max_queued_call_bytes_per_identity=1000)
    slot = w.handle_request_task_slot("r", 60_000, 0, ALICE).snapshot.slot_id
    w.handle_submit_task(req("r", slot, function_call=payload(800)), 1, ALICE)
    assert w.identity_holdings() == {"alice": (1, 800)}
    slot2 = w.handle_request_task_slot("r2", 60_000, 2, ALICE).snapshot.slot_id
    refused(w.handle_submit_task, req("r2", slot2, function_call=payload(800)), 3, ALICE)
    assert w.get_index_entry("r2").ctx is None                    # still a bare reservation
    check_invariants(w)


def test_the_share_of_bytes_must_hold_the_largest_payload():
    with pytest.raises(ConfigError, match="maxQueuedCallBytesPerIdentity .* must be at least maxPayloadBytes"):
        Config(max_payload_bytes=2000, max_queued_call_bytes_per_identity=1000).validate()
    with pytest.raises(ConfigError, match="maxSlotsPerIdentity"):
        Config(max_slots_per_identity=-1).validate()
