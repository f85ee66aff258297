"""Slot leases over gRPC against a real worker: lease, idempotency, expiry, NoSlot, InvalidSlot."""
import time

import grpc
import pytest

from blockx.worker.v1 import worker_pb2 as pb

pytestmark = pytest.mark.e2e


def _slot(w, task_id, ttl_ms=0):
    return w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id=task_id, ttl_ms=ttl_ms), timeout=5)


def test_lease_is_idempotent_and_submit_uses_it(worker):
    a = _slot(worker, "slot-idem")
    b = _slot(worker, "slot-idem")
    assert a.state == pb.TASK_STATE_ALLOCATED and a.slot_id.startswith("slot-")
    assert b.slot_id == a.slot_id and b.state == pb.TASK_STATE_ALLOCATED
    r = worker.submit_calls("slot-idem", [("add", [2, 3])], slot_id=a.slot_id)
    assert r.state == pb.TASK_STATE_RUNNING  # accepted; activation and calls run after the reply
    res = worker.wait_terminal("slot-idem")
    assert res.state == pb.TASK_STATE_SUCCEEDED and res.outputs == [b"5"]
    # Terminal and retained: the same task id gets the terminal snapshot, no new slot.
    again = _slot(worker, "slot-idem")
    assert again.state == pb.TASK_STATE_SUCCEEDED and again.result.outputs == [b"5"]


def test_no_slot_when_all_are_leased_and_expiry_frees_them(start_worker):
    w = start_worker({"TASK_SLOTS": "2"})
    _slot(w, "t1", ttl_ms=600)
    _slot(w, "t2", ttl_ms=600)
    with pytest.raises(grpc.RpcError) as ei:
        _slot(w, "t3")
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "no free task slot" in ei.value.details()
    # Leases expire (TTL 600 ms, 500 ms tick): a slot is free again.
    deadline = time.monotonic() + 5
    while True:
        try:
            got = _slot(w, "t3")
            break
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "leases never expired"
            time.sleep(0.1)
    assert got.state == pb.TASK_STATE_ALLOCATED


def test_invalid_and_foreign_slots_are_refused(worker):
    mine = _slot(worker, "slot-owner")
    with pytest.raises(grpc.RpcError) as ei:
        worker.submit_calls("slot-thief", [("add", [1, 1])], slot_id=mine.slot_id)
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as ei:
        worker.submit_calls("slot-bad", [("add", [1, 1])], slot_id="slot-99999")
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "slot-99999" in ei.value.details() and "RequestTaskSlot" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        worker.submit_calls("slot-bad", [("add", [1, 1])], slot_id="not-a-slot")
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bad_arguments_get_invalid_argument(worker):
    with pytest.raises(grpc.RpcError) as ei:
        _slot(worker, "")
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "task_id" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        worker.submit_calls("neg-timeout", [("add", [1, 1])], timeout_ms=-5)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "task_timeout_ms" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        worker.submit_calls("huge-timeout", [("add", [1, 1])], timeout_ms=10**12)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as ei:
        worker.stub.SubmitTask(pb.SubmitTaskRequest(task=pb.Task(task_id="no-builder")), timeout=5)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "function_call" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        worker.result("never-submitted")
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND


def test_watchers_of_an_expired_reservation_get_not_found(worker):
    _slot(worker, "slot-lapse", ttl_ms=600)
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as ei:
        for upd in worker.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["slot-lapse"]), timeout=10):
            assert upd.state == pb.TASK_STATE_ALLOCATED
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND and "expired" in ei.value.details()
    assert time.monotonic() - t0 < 5
