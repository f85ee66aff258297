"""CallTable: the calls by id, and CallRecord's starting state."""
from blockx.core.dispatch.records import DONE, READY, RUNNING, CallRecord
from blockx.core.dispatch.calls import CallTable


def _ctx(call_id: str) -> CallRecord:
    return CallRecord(call_id, "f", "d", "main", b"[]", b"k-" + call_id.encode(), 0, 0)


def test_a_new_call_is_ready_unbound_and_has_no_attempt():
    c = _ctx("t/0")
    assert (c.state, c.bound, c.attempt_count, c.exec, c.parent, c.parked, c.retry_armed) == (
        READY, False, 0, None, None, False, False)
    assert repr(c) == "<CallRecord t/0 READY attempt=0 executor=''>"


def test_add_forget_and_lookups():
    table = CallTable()
    a, b, c = _ctx("t/0"), _ctx("t/1"), _ctx("t/0/sub-1")
    table.add_all([a, b])
    table.add(c)
    assert len(table) == 3 and table.by_id["t/1"] is b
    a.state, a.attempt_count = RUNNING, 2
    assert (table.state_name("t/0"), table.attempts("t/0")) == ("RUNNING", 2)
    b.state = DONE
    assert table.state_name("t/1") == "DONE"
    table.forget([a, b, _ctx("never-added")])   # unknown calls are ignored
    assert list(table.by_id) == ["t/0/sub-1"]
    assert (table.state_name("t/0"), table.attempts("t/0")) == (None, None)


def test_the_index_is_never_rebound():
    """DispatcherCore keeps a direct reference to by_id for its per-call lookups."""
    table = CallTable()
    index = table.by_id
    table.add_all([_ctx("a"), _ctx("b")])
    table.forget([table.by_id["a"], table.by_id["b"]])
    table.add(_ctx("c"))
    assert table.by_id is index and list(index) == ["c"]
