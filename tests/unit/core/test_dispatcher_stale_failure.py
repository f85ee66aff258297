"""Stale events: a failure for a READY call that already
ran (backing off) or with another attempt seq is dropped; DONE ignores every
late terminal event; nothing stale changes accounting."""
from blockx.core.dispatch.commands import ArmCallRetry
from blockx.core.dispatch.config import DispatcherConfig

from tests.unit.core.test_dispatcher_harness import Harness, of_type, spec


def _retrying_harness():
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0, base_backoff_ms=100))
    h.submit("t", [spec("f", 1)])
    h.fail("t/0", "EXECUTOR_LOST", True)
    return h


def test_failure_while_backing_off_is_stale():
    h = _retrying_harness()
    assert h.core.call_state("t/0") == "READY" and h.core.call_attempts("t/0") == 1
    # A duplicate failure report for attempt 1 (e.g. executor lost after CallFailed).
    assert h.core.handle_call_failed("t/0", 1, "EXECUTOR_LOST", True, "dup", h.now) == []
    assert len(h.timers) == 1
    h.advance(100)
    assert h.attempt("t/0") == 2


def test_failure_with_an_old_attempt_seq_is_stale():
    h = _retrying_harness()
    h.advance(100)
    assert h.core.handle_call_failed("t/0", 1, "USER_ERROR", False, "old", h.now) == []
    assert h.core.call_state("t/0") == "RUNNING"
    assert h.core.handle_call_failed("t/0", 3, "USER_ERROR", False, "future", h.now) == []
    h.complete("t/0", output=b"ok")
    assert h.converged["t"].ok and h.converged["t"].calls_failed == 0


def test_completion_of_an_old_attempt_is_ignored():
    h = _retrying_harness()
    h.advance(100)
    assert h.core.handle_call_completed("t/0", 1, b"old", 0, h.now) == []
    assert h.core.call_state("t/0") == "RUNNING"
    h.complete("t/0", output=b"new")
    assert h.converged["t"].outputs == [b"new"]


def test_completion_while_backing_off_is_ignored():
    h = _retrying_harness()
    assert h.core.handle_call_completed("t/0", 1, b"late", 0, h.now) == []
    assert h.core.call_state("t/0") == "READY"


def test_done_ignores_every_late_event():
    h = Harness(DispatcherConfig(task_max_inflight_calls=1))
    h.submit("t", [spec("f", 1), spec("f", 2)])
    h.complete("t/0", output=b"first")
    core = h.core
    assert core.call_state("t/0") == "DONE"
    assert core.handle_call_completed("t/0", 1, b"again", 0, h.now) == []
    assert core.handle_call_failed("t/0", 1, "USER_ERROR", False, "late", h.now) == []
    assert core.handle_call_waiting("t/0", 1, h.now) == []
    assert core.handle_call_resumed("t/0", h.now) == []
    assert core.handle_retry_ready("t/0", h.now) == []
    assert core.call_state("t/0") == "DONE"
    h.complete("t/1", output=b"second")
    c = h.converged["t"]
    assert c.outputs == [b"first", b"second"] and c.calls_failed == 0


def test_events_for_unknown_calls_are_ignored():
    core = Harness().core
    assert core.handle_call_completed("nope/0", 1, b"1", 0, 0) == []
    assert core.handle_call_failed("nope/0", 1, "USER_ERROR", False, "", 0) == []
    assert core.handle_call_waiting("nope/0", 1, 0) == []
    assert core.handle_call_resumed("nope/0", 0) == []
    assert core.handle_retry_ready("nope/0", 0) == []
    assert core.handle_bind_failed("nope/0", 0) == []
    assert core.handle_executor_bound("nope/0", 0) == []


def test_terminal_events_before_the_bind_is_confirmed_are_stale():
    h = Harness()
    p = h.core.prepare_call_phase("t", [spec("f", 1)])
    h.core.commit_call_phase(p, 0)
    h.core.dispatch(0)   # BindCall emitted, not yet confirmed
    assert h.core.handle_call_failed("t/0", 1, "USER_ERROR", False, "", 0) == []
    assert h.core.handle_call_completed("t/0", 1, b"1", 0, 0) == []
    assert h.core.call_state("t/0") == "RUNNING"


def test_stale_failure_does_not_arm_a_second_timer():
    h = _retrying_harness()
    cmds = h.core.handle_call_failed("t/0", 1, "OUTBOX_FULL", True, "", h.now)
    assert of_type(cmds, ArmCallRetry) == [] and len(h.timers) == 1
    # A duplicate retry-ready event (timer fired twice) queues the call once.
    h.advance(100)
    assert h.core.handle_retry_ready("t/0", h.now) == []
    assert h.core.task_ready("t") == 0
