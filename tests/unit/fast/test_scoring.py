"""selectExecutor (Filter -> Score) and filter_reason, against the compiled
module and its twin; every filter and every tie-break is pinned, and random view
sets must give identical answers on both implementations."""

import pytest
from hypothesis import given, settings, strategies as st

from blockx._fast import implementations

IMPLS = implementations("scoring")

# select_executor(views, now_ms, sample_size, max_runnable, max_inflight,
#                 memory_high_watermark, stall_timeout_ms)
NOW = 100_000
NO_LIMITS = dict(max_runnable=0, max_inflight=0, memory_high_watermark=0, stall_timeout_ms=0)


@pytest.fixture(params=IMPLS, ids=[label for label, _ in IMPLS])
def S(request):
    return request.param[1]


def ok(S, eid, **kw):
    """A view that passes every filter unless kw says otherwise."""
    base = dict(healthy=True, usable_contexts=4)
    base.update(kw)
    return S.ExecutorView(eid, **base)


def select(S, views, sample_size=0, now=NOW, **limits):
    lim = dict(NO_LIMITS)
    lim.update(limits)
    return S.select_executor(views, now, sample_size, lim["max_runnable"], lim["max_inflight"],
                             lim["memory_high_watermark"], lim["stall_timeout_ms"])


def select_from(S, views, start, sample_size=0, now=NOW, **limits):
    lim = dict(NO_LIMITS)
    lim.update(limits)
    return S.select_executor(views, now, sample_size, lim["max_runnable"], lim["max_inflight"],
                             lim["memory_high_watermark"], lim["stall_timeout_ms"], start)


def reason(S, view, now=NOW, **limits):
    lim = dict(NO_LIMITS)
    lim.update(limits)
    return S.filter_reason(view, now, lim["max_runnable"], lim["max_inflight"],
                           lim["memory_high_watermark"], lim["stall_timeout_ms"])


# --- the record ---------------------------------------------------------------

def test_view_defaults(S):
    v = S.ExecutorView("exec-1")
    assert v.executor_id == "exec-1"
    assert v.healthy is False
    assert (v.runnable, v.local_inflight, v.usable_contexts, v.memory_bytes,
            v.last_scheduler_active_at_ms, v.heartbeat_seq) == (0, 0, 0, 0, 0, 0)
    assert v.running_call_id == ""


def test_view_is_mutable(S):
    v = S.ExecutorView("e")
    v.healthy = True
    v.runnable = 3
    v.local_inflight = 2
    v.usable_contexts = 8
    v.memory_bytes = 1 << 40
    v.last_scheduler_active_at_ms = 123
    v.running_call_id = "call-1"
    v.heartbeat_seq = 9
    assert (v.healthy, v.runnable, v.local_inflight, v.usable_contexts, v.memory_bytes,
            v.last_scheduler_active_at_ms, v.running_call_id, v.heartbeat_seq) == (
        True, 3, 2, 8, 1 << 40, 123, "call-1", 9)
    assert "'e'" in repr(v)


def test_view_keyword_construction(S):
    v = S.ExecutorView("e", healthy=True, runnable=1, local_inflight=2, usable_contexts=3,
                       memory_bytes=4, last_scheduler_active_at_ms=5, running_call_id="c",
                       heartbeat_seq=6)
    assert (v.healthy, v.runnable, v.local_inflight, v.usable_contexts, v.memory_bytes,
            v.last_scheduler_active_at_ms, v.running_call_id, v.heartbeat_seq) == (
        True, 1, 2, 3, 4, 5, "c", 6)


@pytest.mark.parametrize("bad", [None, 1, b"e"])
def test_view_rejects_non_str_id(S, bad):
    with pytest.raises(TypeError):
        S.ExecutorView(bad)


def test_view_rejects_non_int_count(S):
    with pytest.raises(TypeError):
        S.ExecutorView("e", runnable=1.5)


def test_view_has_no_dict(S):
    with pytest.raises(AttributeError):
        S.ExecutorView("e").typo_field = 1


# --- filters ------------------------------------------------------------------

def test_eligible(S):
    assert reason(S, ok(S, "a")) == ""
    assert select(S, [ok(S, "a")]) == 0


def test_empty_list(S):
    assert select(S, []) == -1
    assert select(S, [], sample_size=8) == -1


def test_filter_unhealthy(S):
    v = ok(S, "a", healthy=False)
    assert reason(S, v) == "unhealthy"
    assert select(S, [v]) == -1


def test_filter_stalled(S):
    v = ok(S, "a", running_call_id="c1", last_scheduler_active_at_ms=NOW - 5001)
    assert reason(S, v, stall_timeout_ms=5000) == "stalled"
    assert select(S, [v], stall_timeout_ms=5000) == -1


def test_stall_boundary_is_strictly_greater(S):
    v = ok(S, "a", running_call_id="c1", last_scheduler_active_at_ms=NOW - 5000)
    assert reason(S, v, stall_timeout_ms=5000) == ""


def test_a_stall_filters_an_executor_running_no_call_too(S):
    v = ok(S, "a", running_call_id="", last_scheduler_active_at_ms=NOW - 5001)
    assert reason(S, v, stall_timeout_ms=5000) == "stalled"
    assert select(S, [v], stall_timeout_ms=5000) == -1


def test_stall_disabled_by_zero_timeout(S):
    v = ok(S, "a", running_call_id="c1", last_scheduler_active_at_ms=0)
    assert reason(S, v, stall_timeout_ms=0) == ""


@pytest.mark.parametrize("usable,inflight", [(0, 0), (2, 2), (2, 3)])
def test_filter_no_headroom(S, usable, inflight):
    v = ok(S, "a", usable_contexts=usable, local_inflight=inflight)
    assert reason(S, v) == "no_headroom"
    assert select(S, [v]) == -1


def test_filter_runnable(S):
    v = ok(S, "a", runnable=3)
    assert reason(S, v, max_runnable=3) == "runnable"
    assert reason(S, v, max_runnable=4) == ""
    assert reason(S, v, max_runnable=0) == ""  # 0 = no limit
    assert select(S, [v], max_runnable=3) == -1


def test_filter_inflight(S):
    v = ok(S, "a", usable_contexts=10, local_inflight=2)
    assert reason(S, v, max_inflight=2) == "inflight"
    assert reason(S, v, max_inflight=3) == ""
    assert reason(S, v, max_inflight=0) == ""
    assert select(S, [v], max_inflight=2) == -1


def test_filter_memory(S):
    v = ok(S, "a", memory_bytes=1000)
    assert reason(S, v, memory_high_watermark=1000) == "memory"
    assert reason(S, v, memory_high_watermark=1001) == ""
    assert reason(S, v, memory_high_watermark=0) == ""
    assert select(S, [v], memory_high_watermark=1000) == -1


def test_filter_order_reports_first_failure(S):
    limits = dict(max_runnable=1, max_inflight=1, memory_high_watermark=1, stall_timeout_ms=10)
    v = S.ExecutorView("a", healthy=False, runnable=5, local_inflight=5, usable_contexts=0,
                       memory_bytes=5, running_call_id="c", last_scheduler_active_at_ms=0)
    expected = ["unhealthy", "stalled", "no_headroom", "runnable", "inflight", "memory", ""]
    got = []
    for fix in [lambda: setattr(v, "healthy", True),
                lambda: setattr(v, "last_scheduler_active_at_ms", NOW),
                lambda: setattr(v, "usable_contexts", 100),
                lambda: setattr(v, "runnable", 0),
                lambda: setattr(v, "local_inflight", 0),
                lambda: setattr(v, "memory_bytes", 0),
                lambda: None]:
        got.append(reason(S, v, **limits))
        fix()
    assert got == expected


def test_filtered_views_are_skipped(S):
    views = [ok(S, "a", healthy=False), ok(S, "b", usable_contexts=0), ok(S, "c", runnable=9)]
    assert select(S, views) == 2


# --- score --------------------------------------------------------------------

def test_lower_runnable_wins(S):
    views = [ok(S, "a", runnable=2), ok(S, "b", runnable=1, local_inflight=3, usable_contexts=4),
             ok(S, "c", runnable=3)]
    assert select(S, views) == 1


def test_runnable_tie_lower_local_inflight_wins(S):
    views = [ok(S, "a", runnable=1, local_inflight=2, usable_contexts=10),
             ok(S, "b", runnable=1, local_inflight=1, usable_contexts=2)]
    assert select(S, views) == 1


def test_inflight_tie_higher_headroom_wins(S):
    views = [ok(S, "a", runnable=1, local_inflight=1, usable_contexts=3),
             ok(S, "b", runnable=1, local_inflight=1, usable_contexts=5)]
    assert select(S, views) == 1


def test_headroom_tie_smaller_executor_id_wins(S):
    views = [ok(S, "exec-2"), ok(S, "exec-10"), ok(S, "exec-3")]
    # Lexicographic, not numeric: "exec-10" < "exec-2".
    assert select(S, views) == 1


def test_full_tie_keeps_first(S):
    views = [ok(S, "same"), ok(S, "same")]
    assert select(S, views) == 0


def test_score_independent_of_list_order_without_sampling(S):
    views = [ok(S, "c", runnable=1), ok(S, "a", runnable=1), ok(S, "b", runnable=0)]
    assert views[select(S, views)].executor_id == "b"
    views.reverse()
    assert views[select(S, views)].executor_id == "b"


# --- sample size ----------------------------------------------------------------

def test_sample_size_limits_scored_candidates(S):
    views = [ok(S, "a", runnable=5), ok(S, "b", runnable=4), ok(S, "c", runnable=0)]
    assert select(S, views, sample_size=0) == 2
    assert select(S, views, sample_size=3) == 2
    assert select(S, views, sample_size=2) == 1
    assert select(S, views, sample_size=1) == 0


def test_sample_counts_only_eligible_views(S):
    views = [ok(S, "x", healthy=False), ok(S, "a", runnable=5), ok(S, "y", usable_contexts=0),
             ok(S, "b", runnable=4), ok(S, "c", runnable=0)]
    assert select(S, views, sample_size=2) == 3
    assert select(S, views, sample_size=1) == 1


def test_the_scan_starts_at_start_and_wraps_around(S):
    views = [ok(S, "a", runnable=1), ok(S, "b", runnable=3), ok(S, "c", runnable=2)]
    assert [select_from(S, views, start, sample_size=1) for start in (0, 1, 2)] == [0, 1, 2]
    assert [select_from(S, views, start, sample_size=2) for start in (0, 1, 2)] == [0, 2, 0]
    assert [select_from(S, views, start) for start in (0, 1, 2)] == [0, 0, 0]   # all scored: start is moot


def test_the_sample_from_start_counts_only_eligible_views(S):
    views = [ok(S, "a", runnable=0), ok(S, "x", healthy=False), ok(S, "b", runnable=5)]
    assert select_from(S, views, 1, sample_size=1) == 2       # x is skipped, b is the sample
    assert select_from(S, views, 1, sample_size=2) == 0       # b, then a after the wrap


@pytest.mark.parametrize("start", [-1, 3, 10])
def test_a_start_outside_the_views_is_refused(S, start):
    views = [ok(S, "a"), ok(S, "b"), ok(S, "c")]
    with pytest.raises(ValueError, match=f"start must be an index into the 3 views, got {start}"):
        select_from(S, views, start, sample_size=1)


def test_negative_sample_size_means_all(S):
    views = [ok(S, "a", runnable=5), ok(S, "b", runnable=0)]
    assert select(S, views, sample_size=-1) == 1


def test_sample_larger_than_pool(S):
    views = [ok(S, "a", runnable=5), ok(S, "b", runnable=0)]
    assert select(S, views, sample_size=100) == 1


def test_accepts_tuple(S):
    views = (ok(S, "a", runnable=5), ok(S, "b", runnable=0))
    assert select(S, views) == 1


# --- parity -----------------------------------------------------------------------

VIEW = st.fixed_dictionaries({
    "executor_id": st.sampled_from(["a", "b", "c", "exec-1", "exec-10", "exec-2", "é"]),
    "healthy": st.booleans(),
    "runnable": st.integers(0, 6),
    "local_inflight": st.integers(0, 6),
    "usable_contexts": st.integers(0, 8),
    "memory_bytes": st.integers(0, 2000),
    "last_scheduler_active_at_ms": st.integers(0, 2000),
    "running_call_id": st.sampled_from(["", "c1"]),
    "heartbeat_seq": st.integers(0, 3),
})


@settings(max_examples=200, deadline=None)
@given(views=st.lists(VIEW, max_size=24), now=st.integers(0, 3000),
       sample=st.integers(-1, 10), max_runnable=st.integers(0, 6),
       max_inflight=st.integers(0, 6), mem=st.sampled_from([0, 500, 1000, 1500]),
       stall=st.sampled_from([0, 100, 1000]), start=st.integers(0, 23))
def test_implementations_agree(views, now, sample, max_runnable, max_inflight, mem, stall, start):
    start = start % len(views) if views else 0
    results = set()
    reasons = set()
    for _, mod in IMPLS:
        vs = [mod.ExecutorView(d["executor_id"], **{k: d[k] for k in d if k != "executor_id"})
              for d in views]
        results.add(mod.select_executor(vs, now, sample, max_runnable, max_inflight, mem, stall, start))
        reasons.add(tuple(mod.filter_reason(v, now, max_runnable, max_inflight, mem, stall)
                          for v in vs))
    assert len(results) == 1 and len(reasons) == 1
    (idx,) = results
    (rs,) = reasons
    # Independent oracle: min of the score tuple over the sampled eligible views,
    # taken in scan order from start.
    order = list(range(start, len(views))) + list(range(start))
    eligible = [i for i in order if rs[i] == ""]
    if sample > 0:
        eligible = eligible[:sample]
    if not eligible:
        assert idx == -1
    else:
        def key(i):
            d = views[i]
            return (d["runnable"], d["local_inflight"],
                    -(d["usable_contexts"] - d["local_inflight"]), d["executor_id"], order.index(i))
        assert idx == min(eligible, key=key)
