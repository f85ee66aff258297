"""core.worker.timers: TaskTimers (task deadlines, Watch grace, and which due timer of
a task wins). Virtual clock, exact instants."""
from blockx.core import failure_codes as fcodes
from blockx.core.types import CallRetryPolicy, FunctionCall, TaskContext, TaskPhase
from blockx.core.worker.slots import SlotTable
from blockx.core.worker.timers import TaskTimers


def ctx(task_id="t", slot=0, deadline=1000, accepted=0):
    return TaskContext(task_id, f"slot-{slot}", slot, deadline, accepted, FunctionCall("callList"),
                       None, "FAST_FAIL", CallRetryPolicy(3, 10, 5), "")


# ---- TaskTimers -----------------------------------------------------------------------


def timers(grace=0, slots=2):
    table = SlotTable(slots)
    return TaskTimers(grace, table), table


def test_deadlines_are_reported_until_the_task_is_terminal():
    t, _ = timers()
    a, b = ctx("a", deadline=100), ctx("b", deadline=50)
    t.arm_deadline(a, 2)
    t.arm_deadline(b, 2)
    assert t.earliest() == 50
    assert t.timed_out(49) == [] and t.timed_out(100) == ["b", "a"]
    b.phase = TaskPhase.TERMINAL
    assert t.timed_out(100) == ["a"] and t.earliest() == 100


def test_watch_grace_is_armed_only_with_a_grace_and_cancelled_by_clearing_its_instant():
    t, _ = timers(grace=0)
    c = ctx(deadline=10_000)
    t.start_watch_grace(c, 5, 1)
    assert c.watch_disconnect_deadline_ms is None and t.earliest() is None

    t, _ = timers(grace=30)
    t.start_watch_grace(c, 5, 1)
    assert c.watch_disconnect_deadline_ms == 35 and t.earliest() == 35
    assert t.watch_expired(34) == [] and t.watch_expired(35) == ["t"]
    c.watch_disconnect_deadline_ms = None            # a stream reattached
    assert t.watch_expired(35) == [] and t.earliest() is None


def test_a_newer_watch_grace_supersedes_the_older_one():
    t, _ = timers(grace=30)
    c = ctx(deadline=10_000)
    t.start_watch_grace(c, 0, 1)
    c.watch_disconnect_deadline_ms = None
    t.start_watch_grace(c, 20, 1)
    assert t.watch_expired(40) == [] and t.earliest() == 50
    assert t.watch_expired(50) == ["t"]


def test_first_due_is_none_before_every_timer():
    t, slots = timers(grace=30)
    slots.allocate("t", 200)
    c = ctx(deadline=100)
    c.watch_disconnect_deadline_ms = 90
    assert t.first_due(c, 89) is None


def test_first_due_timeout_wins_ties_then_slot_lost_then_watch():
    t, slots = timers(grace=30)
    slots.allocate("t", 100)
    c = ctx(deadline=100, accepted=40)
    c.watch_disconnect_deadline_ms = 100
    at, code, message, retryable = t.first_due(c, 100)
    assert (at, code, retryable) == (100, fcodes.TIMED_OUT, True)
    assert message == ("task exceeded its timeout of 60 ms (accepted at 40 ms, deadline 100 ms) "
                       "during phase PREPARING")
    c.deadline_ms = 101
    at, code, message, retryable = t.first_due(c, 101)
    assert (at, code, retryable) == (100, fcodes.SLOT_LOST, False)
    assert message == ("the lease of slot-0 expired at 100 ms before the task was activated "
                       "(activation took longer than the slot TTL)")
    c.phase = TaskPhase.BUILDER                      # activated: the lease no longer counts
    at, code, message, retryable = t.first_due(c, 101)
    assert (at, code, retryable) == (100, fcodes.WATCH_DISCONNECTED, False)
    assert "watchDisconnectGraceMs (30 ms)" in message


def test_first_due_picks_the_earliest_instant_not_the_first_kind():
    t, slots = timers(grace=30)
    slots.allocate("t", 500)
    c = ctx(deadline=100)
    c.watch_disconnect_deadline_ms = 80
    assert t.first_due(c, 100)[:2] == (80, fcodes.WATCH_DISCONNECTED)
    c.watch_disconnect_deadline_ms = None
    assert t.first_due(c, 600)[:2] == (100, fcodes.TIMED_OUT)
