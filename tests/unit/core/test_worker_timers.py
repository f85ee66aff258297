"""worker_timers: the lazily invalidated TimerHeap, and TaskTimers (task deadlines,
Watch grace, and which due timer of a task wins). Virtual clock, exact instants."""
from blockx.core import failure_codes as fcodes
from blockx.core.types import CallRetryPolicy, FunctionCall, TaskContext, TaskPhase
from blockx.core.worker_slots import SlotTable
from blockx.core.worker_timers import TaskTimers, TimerHeap


def ctx(task_id="t", slot=0, deadline=1000, accepted=0):
    return TaskContext(task_id, f"slot-{slot}", slot, deadline, accepted, FunctionCall("callList"),
                       None, "FAST_FAIL", CallRetryPolicy(3, 10, 5), "")


# ---- TimerHeap ------------------------------------------------------------------------


def test_due_reports_live_items_by_instant_then_arming_order_without_consuming():
    live = {"a", "b", "c", "d"}
    h = TimerHeap(lambda at, item, token: item in live)
    for at, item in ((30, "c"), (10, "a"), (30, "d"), (10, "b"), (50, "late")):
        h.push(at, item, None, 10)
    assert h.due(9) == []
    assert h.due(30) == ["a", "b", "c", "d"]
    assert h.due(30) == ["a", "b", "c", "d"], "a due timer is reported until it goes stale"
    live.discard("a")
    assert h.due(30) == ["b", "c", "d"] and h.earliest() == 10


def test_earliest_skips_stale_entries_and_is_none_when_nothing_is_live():
    live = {"b"}
    h = TimerHeap(lambda at, item, token: item in live)
    h.push(5, "a", None, 10)
    h.push(7, "b", None, 10)
    assert h.earliest() == 7 and len(h) == 1, "the stale top was dropped"
    live.clear()
    assert h.earliest() is None and len(h) == 0


def test_token_tells_a_rearmed_timer_from_the_old_one():
    current = {"x": 2}
    h = TimerHeap(lambda at, item, token: current[item] == token)
    h.push(10, "x", 1, 1)
    h.push(20, "x", 2, 1)
    assert h.due(15) == [] and h.due(20) == ["x"] and h.earliest() == 20


def test_push_compacts_once_stale_entries_exceed_twice_the_live_bound_plus_slack():
    h = TimerHeap(lambda at, item, token: item >= 100)
    for i in range(67):                    # stale as soon as pushed
        h.push(i, i, None, 1)
    assert len(h) == 67                    # 2 * 1 + 64 is not exceeded until now
    h.push(1000, 100, None, 1)             # rebuilt first: only the new entry is left
    assert len(h) == 1 and h.earliest() == 1000


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
