"""Reservations (one executor connection's table of calls holding a context):
every rule stated in blockx/core/dispatch/reservations.py, against its compiled
and interpreted forms, and a hypothesis comparison of the two on random steps."""

import pytest
from hypothesis import given, settings, strategies as st

from blockx._fast import compiled, implementations, twin

IMPLS = implementations("reservations", "blockx.core.dispatch")


@pytest.fixture(params=[mod for _, mod in IMPLS], ids=[label for label, _ in IMPLS])
def impl(request):
    return request.param


@pytest.fixture
def res(impl):
    return impl.Reservations()


def test_not_dispatched_is_minus_one(impl):
    assert impl.NOT_DISPATCHED == -1


def test_reserve_once_per_call_and_within_capacity(impl, res):
    assert res.try_reserve("a", 2) is True
    assert res.try_reserve("a", 2) is False            # one reservation per call id
    assert res.try_reserve("b", 2) is True
    assert res.try_reserve("c", 2) is False            # full
    assert len(res) == 2 and "a" in res and "c" not in res
    assert res.attempt_of("a") == impl.NOT_DISPATCHED
    assert res.attempt_of("c") is None


def test_a_child_is_reserved_only_beside_a_live_parent(impl, res):
    assert res.try_reserve_child("p/sub-1", "p") is False        # parent holds nothing here
    assert "p/sub-1" not in res
    res.try_reserve("p", 1)
    assert res.try_reserve_child("p/sub-1", "p") is True         # no capacity check
    assert res.try_reserve_child("p/sub-1", "p") is False        # already reserved
    res.record_dispatch("p", 1)
    assert res.mark_draining("p") is True
    assert res.try_reserve_child("p/sub-2", "p") is False        # the parent drains
    assert len(res) == 2


def test_a_terminal_frame_frees_only_the_dispatched_attempt(impl):
    res2 = impl.Reservations()
    res2.try_reserve("a", 4)
    res2.record_dispatch("a", 2)
    assert res2.attempt_of("a") == 2
    assert res2.release_on_terminal("a", 1) is False             # an older attempt's frame
    assert "a" in res2
    assert res2.release_on_terminal("x", 2) is False             # no reservation
    assert res2.release_on_terminal("a", 2) is True
    assert "a" not in res2 and len(res2) == 0
    assert res2.release_on_terminal("a", 2) is False             # a duplicate


def test_a_terminal_frame_ends_the_drain(res):
    res.try_reserve("a", 4)
    res.record_dispatch("a", 1)
    assert res.mark_draining("a") is True
    assert res.is_draining("a") and res.draining_count == 1
    assert res.release_on_terminal("a", 1) is True
    assert not res.is_draining("a") and res.draining_count == 0 and len(res) == 0


def test_unbind_is_idempotent_and_leaves_a_draining_call(res):
    res.try_reserve("a", 4)
    assert res.unbind("a") is True
    assert res.unbind("a") is False
    res.try_reserve("b", 4)
    res.record_dispatch("b", 1)
    res.mark_draining("b")
    assert res.unbind("b") is False                              # keeps its context until it stops
    assert "b" in res


def test_draining_a_call_never_sent_releases_it_at_once(res):
    res.try_reserve("a", 4)
    assert res.mark_draining("a") is False
    assert "a" not in res and res.draining_count == 0
    assert res.mark_draining("nothing") is False


def test_release_and_clear(res):
    res.try_reserve("a", 4)
    res.record_dispatch("a", 1)
    res.mark_draining("a")
    res.try_reserve("b", 4)
    res.release("a")
    res.release("a")                                             # unconditional, idempotent
    assert "a" not in res and res.draining_count == 0 and len(res) == 1
    res.clear()
    assert len(res) == 0 and "b" not in res


def test_unhashable_call_ids_raise_in_both(res):
    with pytest.raises(TypeError):
        res.attempt_of(["a"])
    with pytest.raises(TypeError):
        res.release_on_terminal(["a"], 1)


_IDS = st.sampled_from(["a", "b", "c", "p", "p/sub-1"])
_STEPS = st.lists(st.one_of(
    st.tuples(st.just("try_reserve"), _IDS, st.integers(0, 3)),
    st.tuples(st.just("try_reserve_child"), _IDS, _IDS),
    st.tuples(st.just("record_dispatch"), _IDS, st.integers(-1, 3)),
    st.tuples(st.just("release_on_terminal"), _IDS, st.integers(-1, 3)),
    st.tuples(st.just("unbind"), _IDS),
    st.tuples(st.just("mark_draining"), _IDS),
    st.tuples(st.just("release"), _IDS),
    st.tuples(st.just("attempt_of"), _IDS),
    st.tuples(st.just("is_draining"), _IDS),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_STEPS)
def test_compiled_and_twin_agree_step_by_step(steps):
    a, b = compiled("reservations", "blockx.core.dispatch").Reservations(), twin("reservations", "blockx.core.dispatch").Reservations()
    for name, *args in steps:
        assert getattr(a, name)(*args) == getattr(b, name)(*args), (name, args)
        assert len(a) == len(b) and a.draining_count == b.draining_count
        for cid in ("a", "b", "c", "p", "p/sub-1"):
            assert (cid in a) == (cid in b) and a.attempt_of(cid) == b.attempt_of(cid)
