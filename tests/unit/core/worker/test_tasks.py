"""core.worker.tasks.TaskIndex: reservations, admission, retirement, tombstones,
retention FIFO and Watch stream counts, without the rest of WorkerCore."""
from blockx.core.types import (CallRetryPolicy, FunctionCall, SlotEntry, TaskContext, TaskPhase,
                               TaskResult, TaskState)
from blockx.core.worker.tasks import TaskIndex


def ctx_for(entry, deadline=1000, accepted=0):
    return TaskContext(entry.task_id, entry.slot_id, entry.slot_index, deadline, accepted,
                       FunctionCall("callList"), None, "FAST_FAIL", CallRetryPolicy(3, 10, 5), "")


def test_reserve_admit_retire_moves_one_entry_through_its_forms():
    t = TaskIndex(result_retention_ms=100)
    e = t.reserve("a", SlotEntry(2, "slot-2"), None)
    assert (e.task_id, e.state, e.slot_id, e.slot_index, e.ctx) == ("a", TaskState.ALLOCATED, "slot-2", 2, None)
    assert t.entry("a") is e and t.context("a") is None

    c = ctx_for(e)
    assert t.admit(e, c) == 1
    assert e.ctx is c and e.state is TaskState.RUNNING and t.context("a") is c and t.active == {"a": c}

    result = TaskResult(TaskState.SUCCEEDED)
    t.retire(c, result, now=40)
    assert c.phase is TaskPhase.TERMINAL and t.active == {} and t.context("a") is None
    assert (e.ctx, e.result, e.state, e.slot_index, e.retained_until_ms) == (
        None, result, TaskState.SUCCEEDED, -1, 140)
    assert e.slot_id == "slot-2", "the last slot held stays on the entry"
    assert t.next_purge() == 140


def test_retire_cancels_a_running_watch_grace():
    t = TaskIndex(0)
    e = t.reserve("a", SlotEntry(0, "slot-0"), None)
    c = ctx_for(e)
    t.admit(e, c)
    c.watch_disconnect_deadline_ms = 30
    t.retire(c, TaskResult(TaskState.FAILED), 10)
    assert c.watch_disconnect_deadline_ms is None


def test_purge_forgets_in_fifo_order_and_only_when_due():
    t = TaskIndex(result_retention_ms=10)
    for i, name in enumerate("abc"):
        e = t.reserve(name, SlotEntry(i, f"slot-{i}"), None)
        c = ctx_for(e)
        t.admit(e, c)
        t.retire(c, TaskResult(TaskState.SUCCEEDED), now=i * 5)   # purge at 10, 15, 20
    assert t.purge(9) == [] and t.next_purge() == 10
    assert t.purge(15) == ["a", "b"] and t.entry("a") is None and t.entry("c") is not None
    assert t.next_purge() == 20 and t.purge(100) == ["c"] and t.next_purge() is None


def test_a_tombstone_is_kept_for_retention_and_a_new_reservation_replaces_it():
    t = TaskIndex(result_retention_ms=50)
    old = t.reserve("a", SlotEntry(0, "slot-0"), None)
    old.watch_attached, old.watch_ever_attached = 2, True
    t.tombstone(old, lease_lost_at_ms=100, now=120)
    assert (old.lease_lost_at_ms, old.slot_index, old.retained_until_ms) == (100, -1, 170)
    assert t.entry("a") is old and t.next_purge() == 170

    new = t.reserve("a", SlotEntry(1, "slot-1"), old)
    assert (new.watch_attached, new.watch_ever_attached, new.lease_lost_at_ms) == (2, True, -1)
    assert t.next_purge() is None, "the replaced tombstone's FIFO item is stale"
    assert t.purge(1000) == [] and t.entry("a") is new


def test_watch_counts_live_on_the_entry_then_move_to_the_context():
    t = TaskIndex(0)
    assert not t.attach_watch("nope") and not t.detach_watch("nope")
    e = t.reserve("a", SlotEntry(0, "slot-0"), None)
    assert t.attach_watch("a") and t.attach_watch("a")
    assert (e.watch_attached, e.watch_ever_attached) == (2, True)
    c = ctx_for(e)
    t.admit(e, c)
    assert (c.watch_attached, c.watch_ever_attached) == (2, True)
    c.watch_disconnect_deadline_ms = 99
    assert t.detach_watch("a") and c.watch_attached == 1
    assert t.attach_watch("a") and c.watch_attached == 2 and c.watch_disconnect_deadline_ms is None
    assert t.detach_watch("a") and t.detach_watch("a") and c.watch_attached == 0
    assert not t.detach_watch("a"), "an unbalanced detach is refused"
    assert c.watch_attached == 0


def test_a_terminal_task_takes_no_more_watch_attach_or_detach():
    t = TaskIndex(100)
    e = t.reserve("a", SlotEntry(0, "slot-0"), None)
    c = ctx_for(e)
    t.admit(e, c)
    t.attach_watch("a")
    t.retire(c, TaskResult(TaskState.SUCCEEDED), 0)
    assert not t.attach_watch("a") and not t.detach_watch("a") and c.watch_attached == 1
