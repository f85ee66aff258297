"""What the core tells the adapter about a terminal frame and a retry.

The adapter counts its call metrics from these answers, so they must be
exact: an accepted CallCompleted / CallFailed frame is answered with commands
that start with UnbindCall for that call; a stale or duplicated one with no
command at all. ArmCallRetry says whether it arms a retry (an attempt failed
retryably) or re-queues a call whose bind failed (no attempt consumed)."""
from blockx.core.dispatch.commands import ArmCallRetry, UnbindCall
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import RetryPolicy

from tests.unit.core.test_dispatcher_harness import Harness, of_type, spec


def test_an_accepted_completion_starts_with_unbind_and_a_duplicate_gets_nothing():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 2)])
    attempt = h.attempt("t/0")
    first = h.core.handle_call_completed("t/0", attempt, b"1", 0, h.now)
    assert first[0] == UnbindCall("t/0", "e1")
    assert h.core.handle_call_completed("t/0", attempt, b"1", 0, h.now) == []


def test_an_accepted_failure_starts_with_unbind_and_a_duplicate_gets_nothing():
    h = Harness()
    h.submit("t", [spec("f", 1), spec("f", 2)], "CONTINUE")
    attempt = h.attempt("t/0")
    first = h.core.handle_call_failed("t/0", attempt, "USER_ERROR", False, "boom", h.now)
    assert first[0] == UnbindCall("t/0", "e1")
    assert h.core.handle_call_failed("t/0", attempt, "USER_ERROR", False, "boom", h.now) == []


def test_frames_of_an_attempt_that_was_retried_get_nothing():
    h = Harness(DispatcherConfig(base_backoff_ms=100, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)])
    h.fail("t/0", "IO_ERROR", True)
    h.advance(100)
    assert h.attempt("t/0") == 2
    assert h.core.handle_call_failed("t/0", 1, "IO_ERROR", True, "late", h.now) == []
    assert h.core.handle_call_completed("t/0", 1, b"1", 0, h.now) == []
    assert h.core.call_state("t/0") == "RUNNING"


def test_a_retry_after_a_failed_attempt_is_flagged_as_a_retry():
    h = Harness(DispatcherConfig(base_backoff_ms=100, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)])
    cmds = h.fail("t/0", "IO_ERROR", True)
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 100, True)]


def test_a_retry_without_backoff_is_still_flagged_as_a_retry():
    h = Harness(DispatcherConfig(base_backoff_ms=0, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)], retry=RetryPolicy(3, 0, 0))
    cmds = h.fail("t/0", "IO_ERROR", True)
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 0, True)]


def test_a_re_arm_after_a_failed_bind_is_not_a_retry():
    h = Harness(executors=("e1", "e2"))
    h.fail_binds.add("e1")
    h.set_executor("e2", usable_contexts=0)
    cmds = h.submit("t", [spec("f", 1)])
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 0, False)]
