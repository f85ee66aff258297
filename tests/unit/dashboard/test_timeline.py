"""lanes_of: a Chrome trace as the page's lanes, sampled to a span budget."""
from __future__ import annotations

import pytest

from blockx.dashboard.timeline import lanes_of


def _trace(n_calls: int) -> dict:
    ev = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "worker: task phases"}},
          {"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": 1, "args": {"sort_index": 0}},
          {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1000, "args": {"name": "exec-0"}},
          {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2000, "args": {"name": "exec-1"}},
          {"name": "task t", "cat": "task", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10 * n_calls},
          {"name": "builder callList", "cat": "phase", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
          {"name": "retry", "ph": "i", "s": "t", "ts": 7, "pid": 1, "tid": 1000}]
    for i in range(n_calls):
        ev.append({"name": "add", "cat": "call", "ph": "X", "pid": 1, "tid": 1000 if i % 2 else 2000,
                   "ts": 10 * i, "dur": 9})
    return {"traceEvents": ev, "otherData": {"taskId": "t"}}


def test_lanes_names_order_and_spans():
    out = lanes_of(_trace(10))
    assert [l["name"] for l in out["lanes"]] == ["worker: task phases", "exec-0", "exec-1"]
    assert [l["count"] for l in out["lanes"]] == [2, 5, 5]
    assert out["lanes"][1]["spans"][0] == [10, 9, "call", "add"]
    assert out["instants"] == [[7, 1000, "retry"]]
    assert out["end_us"] == 100 and out["spans_total"] == 12 == out["spans_drawn"]
    assert out["other"] == {"taskId": "t"}


def test_a_big_trace_is_sampled_to_the_budget_keeping_each_lanes_ends():
    out = lanes_of(_trace(100_000), max_spans=2_000)
    assert out["spans_total"] == 100_002
    assert out["spans_drawn"] <= 2_000 + 2 * len(out["lanes"])
    for lane in out["lanes"][1:]:
        starts = [s[0] for s in lane["spans"]]
        assert starts == sorted(starts)
        assert lane["count"] == 50_000
    exec0 = out["lanes"][1]["spans"]
    assert exec0[0][0] == 10 and exec0[-1][0] == 10 * 99_999      # first and last kept


def test_bad_traces():
    with pytest.raises(ValueError):
        lanes_of({"nope": []})
    out = lanes_of({"traceEvents": [1, {"ph": "X", "tid": "x"}, {"ph": "X", "tid": 3, "ts": "a", "dur": 1}]})
    assert out["lanes"] == [] and out["spans_total"] == 0
