"""ReadyQueue contract, run against the compiled module and its twin, plus a
model-based parity check (random op sequences on both agree with a list)."""

import gc
import weakref

import pytest
from hypothesis import given, settings, strategies as st

from blockx._fast import implementations

IMPLS = implementations("readyqueue")


@pytest.fixture(params=IMPLS, ids=[label for label, _ in IMPLS])
def Q(request):
    return request.param[1].ReadyQueue


def test_empty(Q):
    q = Q()
    assert len(q) == 0
    assert not q
    assert q.peek() is None
    assert list(q) == []
    assert q.drain() == []
    with pytest.raises(IndexError):
        q.pop()


def test_fifo_order(Q):
    q = Q()
    for i in range(5):
        q.push(i)
    assert len(q) == 5 and q
    assert [q.pop() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert not q


def test_push_front_goes_ahead(Q):
    q = Q()
    q.push("a")
    q.push("b")
    q.push_front("retry")
    assert q.peek() == "retry"
    assert list(q) == ["retry", "a", "b"]
    assert q.pop() == "retry"


def test_peek_does_not_remove(Q):
    q = Q()
    q.push(1)
    assert q.peek() == 1
    assert len(q) == 1


def test_peek_returns_none_item_and_empty_alike(Q):
    # None is a legal item; peek() cannot distinguish it, len() can.
    q = Q()
    q.push(None)
    assert q.peek() is None and len(q) == 1
    assert q.pop() is None


def test_growth_preserves_order_across_wraparound(Q):
    q = Q()
    # Rotate the head into the middle of the storage, then grow past it.
    for i in range(6):
        q.push(i)
    for _ in range(5):
        q.pop()
    for i in range(6, 100):
        q.push(i)
    q.push_front(-1)
    q.push_front(-2)
    assert list(q) == [-2, -1] + list(range(5, 100))
    assert q.drain() == [-2, -1] + list(range(5, 100))
    assert len(q) == 0


def test_push_front_only_grows(Q):
    q = Q()
    for i in range(50):
        q.push_front(i)
    assert list(q) == list(range(49, -1, -1))


def test_large_burst_then_empty_then_reuse(Q):
    q = Q()
    for i in range(5000):
        q.push(i)
    assert [q.pop() for _ in range(5000)] == list(range(5000))
    assert not q
    q.push("x")
    q.push_front("y")
    assert q.drain() == ["y", "x"]


def test_clear(Q):
    q = Q()
    for i in range(20):
        q.push(i)
    q.clear()
    assert len(q) == 0 and q.peek() is None
    q.push(1)
    assert list(q) == [1]


def test_drain_empties(Q):
    q = Q()
    q.push(1)
    q.push(2)
    assert q.drain() == [1, 2]
    assert len(q) == 0
    assert q.drain() == []


def test_iter_is_a_snapshot(Q):
    q = Q()
    for i in range(4):
        q.push(i)
    seen = []
    for x in q:
        seen.append(x)
        q.remove(x)
        q.push(x + 10)
    assert seen == [0, 1, 2, 3]
    assert list(q) == [10, 11, 12, 13]


def test_remove(Q):
    q = Q()
    items = [object() for _ in range(5)]
    for it in items:
        q.push(it)
    assert q.remove(items[2]) is True
    assert list(q) == [items[0], items[1], items[3], items[4]]
    assert q.remove(items[2]) is False
    assert q.remove(items[0]) is True
    assert q.remove(items[4]) is True
    assert list(q) == [items[1], items[3]]
    assert q.pop() is items[1]


def test_remove_first_occurrence_by_equality(Q):
    q = Q()
    for x in [1, 2, 1, 3]:
        q.push(x)
    assert q.remove(1) is True
    assert list(q) == [2, 1, 3]


def test_remove_last_item_and_from_empty(Q):
    q = Q()
    assert q.remove("nope") is False
    q.push("a")
    assert q.remove("a") is True
    assert not q and q.peek() is None
    q.push("b")
    assert q.pop() == "b"


def test_items_released(Q):
    class Item:
        pass

    q = Q()
    it = Item()
    ref = weakref.ref(it)
    q.push(it)
    q.push(1)
    assert q.pop() is it
    del it
    gc.collect()
    assert ref() is None


def test_cycle_through_queue_is_collected(Q):
    # A call context pointing back at the task that owns the queue must not leak.
    class Task:
        pass

    t = Task()
    t.queue = Q()
    t.queue.push(t)
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None


# --- model-based parity -----------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 20)),
        st.tuples(st.just("push_front"), st.integers(0, 20)),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("peek"), st.none()),
        st.tuples(st.just("remove"), st.integers(0, 20)),
        st.tuples(st.just("drain"), st.none()),
        st.tuples(st.just("clear"), st.none()),
        st.tuples(st.just("iter"), st.none()),
    ),
    max_size=120,
)


def _apply(q, op, arg):
    if op == "push":
        return q.push(arg)
    if op == "push_front":
        return q.push_front(arg)
    if op == "pop":
        try:
            return ("ok", q.pop())
        except IndexError:
            return ("IndexError",)
    if op == "peek":
        return q.peek()
    if op == "remove":
        return q.remove(arg)
    if op == "drain":
        return q.drain()
    if op == "clear":
        return q.clear()
    return list(q)


def _model(m, op, arg):
    if op == "push":
        m.append(arg)
        return None
    if op == "push_front":
        m.insert(0, arg)
        return None
    if op == "pop":
        return ("ok", m.pop(0)) if m else ("IndexError",)
    if op == "peek":
        return m[0] if m else None
    if op == "remove":
        if arg in m:
            m.remove(arg)
            return True
        return False
    if op == "drain":
        out = list(m)
        m.clear()
        return out
    if op == "clear":
        m.clear()
        return None
    return list(m)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_all_implementations_match_a_list_model(ops):
    queues = [mod.ReadyQueue() for _, mod in IMPLS]
    model: list = []
    for op, arg in ops:
        expected = _model(model, op, arg)
        for q in queues:
            assert _apply(q, op, arg) == expected, (op, arg)
            assert len(q) == len(model)
            assert bool(q) == bool(model)
    for q in queues:
        assert list(q) == model
