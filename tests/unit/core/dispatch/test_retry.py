"""RetryScheduler: a retry consumes an attempt and counts, a re-queue after a
failed bind does neither; and (the lifecycle's part of it) a failed attempt
puts the call back to READY with its timer armed, and the timer hands the call
back only once."""
from blockx.core.dispatch.records import DONE, READY, RUNNING, CallRecord
from blockx.core.dispatch.commands import ArmCallRetry
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.retry import RetryScheduler

from tests.unit.core.dispatch.harness import Harness, spec


class _Task:
    def __init__(self, max_attempts=3, base=100, jitter=0, stopped=False):
        self.max_attempts = max_attempts
        self.base_backoff_ms = base
        self.jitter_percent = jitter
        self.stop_dispatching = stopped
        self.call_retries = 0


def _running(task, attempt=1, parent=None) -> CallRecord:
    c = CallRecord("t/0", "f", "d", "main", b"[]", b"k", 0, 0)
    c.task, c.state, c.bound, c.attempt_count, c.parent = task, RUNNING, True, attempt, parent
    return c


def test_may_retry_only_retryable_roots_with_attempts_left_of_a_running_task():
    r = RetryScheduler(lambda: 0.0, 0)
    assert r.may_retry(_running(_Task(3), attempt=2), True) is True
    assert r.may_retry(_running(_Task(3), attempt=3), True) is False     # attempts used up
    assert r.may_retry(_running(_Task(3)), False) is False               # not retryable
    assert r.may_retry(_running(_Task(3, stopped=True)), True) is False  # task stopped
    parent = _running(_Task(3))
    assert r.may_retry(_running(_Task(3), parent=parent), True) is False  # subcall: one attempt


def test_retry_backs_off_counts_and_says_it_is_a_retry():
    task = _Task(base=100, jitter=4)
    r = RetryScheduler(lambda: 0.5, 300)
    c = _running(task, attempt=2)
    out: list = []
    r.arm(c, 1000, out)
    assert out == [ArmCallRetry("t/0", 1000 + 200 + 4, True)]   # 100 * 2^1, + 2% of 200
    assert task.call_retries == 1
    out.clear()
    r.arm(_running(task, attempt=3), 0, out)                     # 400 capped at 300, + 2%
    assert out == [ArmCallRetry("t/0", 306, True)]


def test_requeue_fires_at_once_and_is_not_a_retry():
    task = _Task()
    c = _running(task)
    c.state = READY
    out: list = []
    RetryScheduler.requeue(c, 70, out)
    assert out == [ArmCallRetry("t/0", 70, False)]
    assert task.call_retries == 0


def test_a_failed_attempt_is_ready_unbound_and_armed_until_its_timer_fires():
    h = Harness(DispatcherConfig(base_backoff_ms=100, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)])
    ctx = h.core.calls.by_id["t/0"]
    h.fail("t/0", "EXECUTOR_LOST", True)
    assert (ctx.state, ctx.bound, ctx.retry_armed, ctx.task.call_retries) == (READY, False, True, 1)


def test_a_timer_hands_the_call_back_once_and_never_after_it_ended():
    h = Harness(DispatcherConfig(base_backoff_ms=100, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1), spec("f", 2)])
    c = h.core.calls.by_id["t/0"]
    h.fail("t/0", "EXECUTOR_LOST", True)
    ready = len(c.task.ready)
    assert h.core.lifecycle.handle_retry_ready("t/0", 100) == []
    assert not c.retry_armed and len(c.task.ready) == ready + 1
    assert h.core.lifecycle.handle_retry_ready("t/0", 100) == []           # a second timer for the same arm
    assert len(c.task.ready) == ready + 1
    c.retry_armed = True
    c.state = DONE                                              # ended while backing off
    h.core.lifecycle.handle_retry_ready("t/0", 100)
    assert len(c.task.ready) == ready + 1 and c.retry_armed
