"""Retry backoff (computeBackoff) and the retry path through the dispatcher:
exact ArmCallRetry deadlines on a virtual clock, attempt accounting, caps."""
import pytest

from blockx.core.dispatch.commands import ArmCallRetry, BindCall
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.retry import compute_backoff, resolve_retry
from blockx.core.dispatch.types import RetryPolicy

from tests.unit.core.dispatch.harness import Harness, of_type, spec


@pytest.mark.parametrize("attempt,expected", [(1, 10), (2, 20), (3, 40), (4, 80), (10, 5120)])
def test_exponential_without_jitter(attempt, expected):
    assert compute_backoff(attempt, 10, 0, lambda: 0.99) == expected


def test_jitter_adds_at_most_the_percentage():
    assert compute_backoff(1, 1000, 5, lambda: 0.0) == 1000
    assert compute_backoff(1, 1000, 5, lambda: 0.5) == 1025
    assert compute_backoff(1, 1000, 5, lambda: 0.999999) == 1049   # never the full 5%
    assert compute_backoff(3, 1000, 5, lambda: 0.5) == 4100
    # Small delays: the jitter floors to 0 rather than rounding up.
    assert compute_backoff(1, 10, 5, lambda: 0.99) == 10


def test_cap_applies_before_jitter_and_huge_attempts_stay_bounded():
    assert compute_backoff(20, 10, 0, lambda: 0.0, max_backoff_ms=60_000) == 60_000
    assert compute_backoff(20, 10, 10, lambda: 0.5, max_backoff_ms=60_000) == 63_000
    assert compute_backoff(10_000, 1, 0, lambda: 0.0) == 1 << 40


def test_zero_base_means_immediate_retry():
    assert compute_backoff(3, 0, 5, lambda: 0.5) == 0


def test_rand_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError, match=r"rand\(\) must return a float in \[0, 1\)"):
        compute_backoff(1, 100, 5, lambda: 1.0)


def test_resolve_retry_defaults_and_overrides():
    cfg = DispatcherConfig(default_max_attempts=4, base_backoff_ms=25, default_retry_jitter_percent=3)
    assert resolve_retry(None, cfg) == (4, 25, 3)
    assert resolve_retry(RetryPolicy(0, 0, 0), cfg) == (4, 25, 0)
    assert resolve_retry(RetryPolicy(7, 100, 5), cfg) == (7, 100, 5)
    assert resolve_retry((2, 0, 1), cfg) == (2, 25, 1)
    with pytest.raises(ValueError, match="jitter_percent must be between 0 and 5, got 101"):
        resolve_retry(RetryPolicy(1, 1, 101), cfg)
    with pytest.raises(ValueError, match="jitter_percent must be between 0 and 5, got 6"):
        resolve_retry(RetryPolicy(1, 1000, 6), cfg)
    with pytest.raises(ValueError, match="must be an integer"):
        resolve_retry(RetryPolicy(True, 1, 1), cfg)
    with pytest.raises(ValueError, match="retry must be a RetryPolicy"):
        resolve_retry("3", cfg)


def test_a_task_jitter_above_five_percent_never_reaches_the_dispatcher():
    # With 100% a 1,000 ms backoff could become 1,999 ms; jitterPercent allows at most 5.
    h = Harness(DispatcherConfig(), rand=lambda: 0.999)
    with pytest.raises(ValueError, match="jitter_percent must be between 0 and 5, got 100"):
        h.submit("big", [spec("f", 1)], retry=RetryPolicy(2, 1000, 100))
    h.submit("t", [spec("f", 1)], retry=RetryPolicy(2, 1000, 5))
    cmds = h.fail("t/0", "EXECUTOR_LOST", True)
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 1049, True)]   # 1000 + floor(1000 * 5% * 0.999)


def test_retries_fire_at_exact_deadlines_and_reuse_the_call_id():
    h = Harness(DispatcherConfig(base_backoff_ms=10), rand=lambda: 0.5)
    h.submit("t", [spec("f", 1)], retry=RetryPolicy(4, 100, 5))
    cmds = h.fail("t/0", "EXECUTOR_LOST", True)
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 102, True)]   # 100 + 2% of 100
    assert h.core.tasks.call_state("t/0") == "READY"
    h.advance(101)
    assert "t/0" not in h.live
    h.advance(1)
    assert h.now == 102 and h.attempt("t/0") == 2
    h.now = 500
    cmds = h.fail("t/0", "OUTBOX_FULL", True)
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 500 + 205, True)]
    h.advance(205)
    assert h.attempt("t/0") == 3
    h.complete("t/0", output=b"3")
    c = h.converged["t"]
    assert c.ok and c.outputs == [b"3"] and c.call_retries == 2


def test_exhausting_max_attempts_is_a_final_failure():
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)])   # default: 3 attempts, base 10
    for expected_delay in (10, 20):
        cmds = h.fail("t/0", "EXECUTOR_LOST", True)
        assert of_type(cmds, ArmCallRetry)[0].fire_at_ms == h.now + expected_delay
        h.advance(expected_delay)
    assert h.attempt("t/0") == 3
    cmds = h.fail("t/0", "EXECUTOR_LOST", True, "gone")
    assert of_type(cmds, ArmCallRetry) == []
    c = h.converged["t"]
    assert not c.ok and c.retryable and c.call_retries == 2 and c.calls_failed == 1
    assert "after 3 attempt(s): EXECUTOR_LOST: gone" in c.failure_message


def test_non_retryable_failure_is_final_on_the_first_attempt():
    h = Harness()
    h.submit("t", [spec("f", 1)], retry=RetryPolicy(5, 10, 0))
    cmds = h.fail("t/0", "USER_ERROR", False)
    assert of_type(cmds, ArmCallRetry) == [] and h.converged["t"].call_retries == 0


def test_max_attempts_one_never_retries():
    h = Harness()
    h.submit("t", [spec("f", 1)], retry=RetryPolicy(1, 10, 0))
    assert of_type(h.fail("t/0", "EXECUTOR_LOST", True), ArmCallRetry) == []


def test_a_retry_goes_to_the_front_of_the_ready_queue():
    h = Harness(DispatcherConfig(task_max_inflight_calls=1, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", i) for i in range(3)])
    h.fail("t/0", "EXECUTOR_LOST", True)
    assert list(h.live) == ["t/1"]       # the window admitted the next call meanwhile
    h.advance(10)                         # t/0 is ready again, ahead of t/2
    h.complete("t/1")
    assert list(h.live) == ["t/0"]
    h.log.clear()
    h.complete("t/0")
    assert [c.call_id for c in of_type(h.log, BindCall)] == ["t/2"]


def test_a_backing_off_call_does_not_hold_the_window():
    h = Harness(DispatcherConfig(task_max_inflight_calls=1, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1), spec("f", 2)])
    h.fail("t/0", "EXECUTOR_LOST", True)
    assert h.core.tasks.inflight("t") == 1 and list(h.live) == ["t/1"]


def test_retry_timer_for_a_finished_call_is_ignored():
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1), spec("g", 1)])
    h.fail("t/0", "EXECUTOR_LOST", True)
    h.core.lifecycle.cancel_task("t", "timeout", h.now)
    assert h.core.lifecycle.handle_retry_ready("t/0", 10) == []
    assert h.advance(10) == []
