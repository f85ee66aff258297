"""DispatcherCore.task_progress: the read-only (total, done, failed, retried) of a
task's root calls that the adapters' progress updates carry."""
import pytest

from blockx.core.dispatch.types import RetryPolicy

from tests.unit.core.test_dispatcher_harness import Harness, spec


def test_progress_of_a_call_list_counts_done_failed_and_retries():
    h = Harness(contexts=8)
    assert h.core.task_progress("t") is None
    h.submit("t", [spec("f", i) for i in range(4)], policy="CONTINUE", retry=RetryPolicy(2, 10, 0))
    assert h.core.task_progress("t") == (4, 0, 0, 0)
    h.complete("t/0")
    assert h.core.task_progress("t") == (4, 1, 0, 0)
    h.fail("t/1", retryable=True)                 # first attempt: retried, not done
    assert h.core.task_progress("t") == (4, 1, 0, 1)
    h.advance(10)
    h.fail("t/1", retryable=True)                 # second and last attempt: a failed root
    assert h.core.task_progress("t") == (4, 2, 1, 1)
    h.complete("t/2")
    h.complete("t/3")
    assert h.core.task_progress("t") == (4, 4, 1, 1)
    assert "t" in h.converged
    h.run(h.core.remove_task("t"))
    assert h.core.task_progress("t") is None


def test_progress_of_a_stream_has_no_total_until_production_ends():
    h = Harness(contexts=8)
    h.feed(h.core.commit_call_stream("s", "FAST_FAIL", None, "", h.now))
    assert h.core.task_progress("s") == (0, 0, 0, 0)
    h.feed(h.core.commit_call_batch(h.core.prepare_call_batch("s", 0, [spec("f", 0), spec("f", 1)]), h.now))
    h.complete("s/0.0")
    assert h.core.task_progress("s") == (0, 1, 0, 0)
    h.feed(h.core.production_done("s", h.now))
    assert h.core.task_progress("s") == (2, 1, 0, 0)
    h.complete("s/0.1")
    assert h.core.task_progress("s") == (2, 2, 0, 0)


def test_fast_fail_drain_counts_cancelled_roots_as_done():
    h = Harness(contexts=1)                        # one in flight at a time: the rest wait
    h.submit("t", [spec("f", 0), spec("f", 1), spec("f", 2)])
    h.fail("t/0")
    total, done, failed, retried = h.core.task_progress("t")
    assert (total, done, failed, retried) == (3, 3, 1, 0)
