"""timer_heap: timers invalidated lazily, reported by instant then arming order,
and compacted once stale entries outgrow the live bound."""
from blockx.core.timer_heap import TimerHeap


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
