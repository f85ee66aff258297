"""Executor snapshots, Filter -> Score through the core, and runnable
compensation."""
import pytest

from blockx.core.dispatch.commands import BindCall
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import ExecutorSnapshot

from tests.unit.core.dispatch.harness import Harness, of_type, spec


def _first_bind(h, now=0):
    h.now = now
    h.submit("t", [spec("f", 1)])
    binds = of_type(h.log, BindCall)
    return binds[0].executor_id if binds else None


@pytest.mark.parametrize("field,value,reason", [
    ("healthy", False, "unhealthy"),
    ("usable_contexts", 0, "no_headroom"),
    ("runnable_count", 4, "runnable"),
    ("memory_bytes", 1000, "memory"),
])
def test_each_filter_excludes_an_executor(field, value, reason):
    h = Harness(DispatcherConfig(executor_max_runnable=4, executor_memory_high_watermark=1000),
                executors=("a", "b"))
    h.set_executor("a", heartbeat_seq=1, **{field: value})
    assert h.core.executors.filter_reasons(0) == {"a": reason, "b": ""}
    assert _first_bind(h) == "b"


def test_an_executor_whose_scheduler_stalled_is_filtered_running_a_call_or_not():
    # Filter: a scheduler stalled for longer than SchedulerStallTimeoutMs is out,
    # whatever the executor reports running (an idle scheduler still wakes every poll).
    h = Harness(DispatcherConfig(call_deadline_ms=5000), executors=("a", "b"))
    h.set_executor("a", last_scheduler_active_at_ms=0, running_call_id="x/0")
    h.set_executor("b", last_scheduler_active_at_ms=10_000)
    h.now = 10_000
    assert h.core.executors.filter_reasons(10_000)["a"] == ""          # exactly at the threshold
    assert h.core.executors.filter_reasons(10_001)["a"] == "stalled"
    h.set_executor("a", running_call_id="")
    assert h.core.executors.filter_reasons(10_001)["a"] == "stalled"
    assert _first_bind(h, now=10_001) == "b"
    h.set_executor("a", last_scheduler_active_at_ms=10_001)
    assert h.core.executors.filter_reasons(10_001)["a"] == ""


def test_inflight_filter_uses_the_local_count():
    h = Harness(DispatcherConfig(executor_max_inflight=2), executors=("a",), contexts=10)
    h.submit("t", [spec("f", i) for i in range(3)])
    assert len(h.live) == 2 and h.core.executors.filter_reasons(0) == {"a": "inflight"}


def test_score_prefers_lower_runnable_then_lower_inflight_then_id():
    h = Harness(executors=("a", "b", "c"), contexts=10)
    h.set_executor("a", runnable_count=3, heartbeat_seq=1)
    h.set_executor("b", runnable_count=1, heartbeat_seq=1)
    h.set_executor("c", runnable_count=1, heartbeat_seq=1)
    h.submit("t", [spec("f", i) for i in range(3)])
    assert [b.executor_id for b in of_type(h.log, BindCall)] == ["b", "c", "b"]


def test_sample_size_scores_only_the_sampled_views():
    h = Harness(DispatcherConfig(executor_selection_sample_size=1), executors=("a", "b"))
    h.set_executor("a", runnable_count=9, heartbeat_seq=1)
    h.submit("t", [spec("f", 1)])
    assert h.live["t/0"].executor_id == "a"   # the sample started at a; b (better) was never scored


class Draws:
    """An injected rand that replays fixed values and counts its draws."""

    def __init__(self, *values):
        self.values = list(values)
        self.drawn = 0

    def __call__(self):
        r = self.values[self.drawn % len(self.values)]
        self.drawn += 1
        return r


def test_a_sample_of_one_starts_at_a_random_executor_so_each_one_is_reached():
    # Three idle executors, sample size 1: the start of each decision's scan
    # comes from rand, floor(r * 3), so r = 0.0, 0.4, 0.7 picks a, b, c.
    rand = Draws(0.0, 0.4, 0.7)
    h = Harness(DispatcherConfig(executor_selection_sample_size=1, default_retry_jitter_percent=0),
                rand=rand, executors=("a", "b", "c"), contexts=10)
    h.submit("t", [spec("f", i) for i in range(6)])
    assert [b.executor_id for b in of_type(h.log, BindCall)] == ["a", "b", "c", "a", "b", "c"]
    assert rand.drawn == 6
    assert [h.core.executors.view(e).local_inflight for e in "abc"] == [2, 2, 2]


def test_a_sample_of_two_scores_the_start_and_its_successor_wrapping_around():
    rand = Draws(0.9)                          # start at c (floor(0.9 * 3) = 2), then a
    h = Harness(DispatcherConfig(executor_selection_sample_size=2, default_retry_jitter_percent=0),
                rand=rand, executors=("a", "b", "c"), contexts=10)
    h.set_executor("a", runnable_count=4, heartbeat_seq=1)
    h.set_executor("b", runnable_count=0, heartbeat_seq=1)   # the best, but outside the sample
    h.set_executor("c", runnable_count=2, heartbeat_seq=1)
    h.submit("t", [spec("f", 1)])
    assert h.live["t/0"].executor_id == "c"


def test_no_draw_when_the_sample_covers_the_pool_or_sampling_is_off():
    for sample in (0, 3, 5):
        rand = Draws(0.5)
        h = Harness(DispatcherConfig(executor_selection_sample_size=sample, default_retry_jitter_percent=0),
                    rand=rand, executors=("a", "b", "c"), contexts=10)
        h.set_executor("a", runnable_count=4, heartbeat_seq=1)
        h.submit("t", [spec("f", i) for i in range(3)])
        assert [b.executor_id for b in of_type(h.log, BindCall)] == ["b", "c", "b"]
        assert rand.drawn == 0


def test_a_sampling_rand_outside_the_unit_interval_is_refused():
    h = Harness(DispatcherConfig(executor_selection_sample_size=1), rand=lambda: 1.0,
                executors=("a", "b", "c"))
    with pytest.raises(ValueError, match=r"rand\(\) must return a float in \[0, 1\), got 1.0"):
        h.submit("t", [spec("f", 1)])


def test_runnable_count_changes_only_with_a_new_heartbeat():
    h = Harness(executors=("a",))
    h.set_executor("a", runnable_count=6, heartbeat_seq=3)
    h.set_executor("a", runnable_count=9)     # same heartbeat seen again: ignored
    assert h.core.executors.view("a").runnable == 6


def test_runnable_is_compensated_by_completions_since_the_heartbeat():
    h = Harness(executors=("a",), contexts=10)
    h.set_executor("a", runnable_count=5, heartbeat_seq=1)
    h.submit("t", [spec("f", i) for i in range(3)])
    assert h.core.executors.view("a").runnable == 5
    h.complete("t/0")
    h.fail("t/1", "USER_ERROR")  # a failure is a terminal frame too
    assert h.core.executors.view("a").runnable == 3
    h.sync()                       # same heartbeat seq: compensation kept
    assert h.core.executors.view("a").runnable == 3
    h.set_executor("a", runnable_count=4, heartbeat_seq=2)
    assert h.core.executors.view("a").runnable == 4


def test_compensated_runnable_never_goes_negative():
    h = Harness(executors=("a",), contexts=10)
    h.set_executor("a", runnable_count=1, heartbeat_seq=7)
    h.submit("t", [spec("f", i) for i in range(3)], policy="CONTINUE")
    for cid in ["t/0", "t/1", "t/2"]:
        h.complete(cid)
    assert h.core.executors.view("a").runnable == 0
    h.sync()
    assert h.core.executors.view("a").runnable == 0


def test_runnable_threshold_reopens_after_completions():
    h = Harness(DispatcherConfig(executor_max_runnable=2), executors=("a",), contexts=10)
    h.set_executor("a", runnable_count=3, heartbeat_seq=1)
    h.submit("t", [spec("f", 1)])
    assert h.live == {}
    # Another task's call completing on "a" is not possible here; simulate the
    # executor draining by a fresh heartbeat.
    h.set_executor("a", runnable_count=1, heartbeat_seq=2)
    assert list(h.live) == ["t/0"]


def test_views_are_kept_sorted_and_updated_in_place():
    h = Harness(executors=("c", "a", "b"))
    core = h.core
    views = core.executors.views
    assert [v.executor_id for v in views] == ["a", "b", "c"]
    va = core.executors.view("a")
    h.set_executor("a", memory_bytes=123)
    assert core.executors.view("a") is va and va.memory_bytes == 123
    assert core.executors.views is views


def test_executor_missing_from_a_snapshot_is_detached():
    h = Harness(executors=("a", "b"))
    h.submit("t", [spec("f", i) for i in range(2)])
    on_a = [c for c, cmd in h.live.items() if cmd.executor_id == "a"]
    assert on_a
    del h.snapshots["a"]
    h.sync()
    va = h.core.executors.view("a")
    assert va is not None and va.healthy is False   # kept while calls are bound there
    for cid in on_a:
        h.complete(cid)
    assert h.core.executors.view("a") is None
    del h.snapshots["b"]
    h.sync()
    assert h.core.executors.view("b") is not None      # b still runs a call


def test_a_snapshot_without_an_executor_id_is_rejected():
    h = Harness()
    with pytest.raises(ValueError, match="non-empty executor_id"):
        h.core.lifecycle.handle_executor_snapshot_updated([ExecutorSnapshot("")], 0)
