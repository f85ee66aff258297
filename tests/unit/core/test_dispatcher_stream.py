"""Streaming production: batches, the credit window, BatchSettled,
StopCallProduction, production_done, and the collected-output cap."""
import pytest

from blockx.core.dispatch.commands import (
    BatchSettled, BindCall, CancelCallCmd, ConvergeTaskCalls, StopCallProduction)
from blockx.core.dispatch.config import DispatcherConfig

from tests.unit.core.test_dispatcher_harness import Harness, of_type, spec


def _stream(h, task_id="t", policy="FAST_FAIL"):
    h.feed(h.core.commit_call_stream(task_id, policy, None, "", h.now))


def _batch(h, idx, calls, task_id="t"):
    p = h.core.prepare_call_batch(task_id, idx, calls)
    return h.feed(h.core.commit_call_batch(p, h.now))


def test_batches_run_settle_and_converge_in_call_order():
    h = Harness(contexts=10)
    _stream(h)
    assert h.core.batch_credits("t") == 2
    _batch(h, 0, [spec("f", 0), spec("f", 1)])
    _batch(h, 1, [spec("f", 2)])
    assert sorted(h.live) == ["t/0.0", "t/0.1", "t/1.0"]
    assert h.core.batch_credits("t") == 0
    h.complete("t/1.0", output=b"2")
    assert h.settled == [BatchSettled("t", 1)] and h.core.batch_credits("t") == 1
    assert h.core.call_state("t/1.0") is None        # forgotten once settled
    h.complete("t/0.1", output=b"1")
    h.complete("t/0.0", output=b"0")
    assert h.settled[-1] == BatchSettled("t", 0)
    assert "t" not in h.converged                     # the producer may still commit
    h.feed(h.core.production_done("t", h.now))
    c = h.converged["t"]
    assert c.ok and c.outputs == [b"0", b"1", b"2"] and c.call_count == 3


def test_credit_window_and_order_are_enforced():
    h = Harness(DispatcherConfig(max_outstanding_batches=1))
    _stream(h)
    _batch(h, 0, [spec("f", 0)])
    p = h.core.prepare_call_batch("t", 1, [spec("f", 1)])
    with pytest.raises(ValueError, match="credit window of 1 unsettled batches"):
        h.core.commit_call_batch(p, 0)
    h.complete("t/0.0")
    assert h.core.commit_call_batch(p, 0) == []        # the same prepared batch, now allowed
    h.epilogue()
    p3 = h.core.prepare_call_batch("t", 3, [spec("f", 3)])
    h.complete("t/1.0")
    with pytest.raises(ValueError, match="batch 3 committed out of order; expected batch 2"):
        h.core.commit_call_batch(p3, 0)
    with pytest.raises(ValueError, match="already committed"):
        h.core.commit_call_batch(p, 0)


def test_empty_batch_settles_at_once():
    h = Harness()
    _stream(h)
    _batch(h, 0, [])
    assert h.settled == [BatchSettled("t", 0)]
    h.feed(h.core.production_done("t", h.now))
    assert h.converged["t"].ok and h.converged["t"].outputs == []


def test_batch_limits_are_checked_in_prepare():
    h = Harness(DispatcherConfig(batch_max_rows=2, batch_max_args_bytes=10))
    with pytest.raises(ValueError, match="batch 0 has 3 calls, over batchMaxRows 2"):
        h.core.prepare_call_batch("t", 0, [spec("f", i) for i in range(3)])
    with pytest.raises(ValueError, match="carries 14 bytes of args, over batchMaxArgsBytes 10"):
        h.core.prepare_call_batch("t", 0, [spec("f", 12345), spec("f", 12345)])
    with pytest.raises(ValueError, match="batch_idx must be an integer >= 0"):
        h.core.prepare_call_batch("t", -1, [])


def test_prepare_batch_has_no_side_effects():
    h = Harness()
    _stream(h)
    h.core.prepare_call_batch("t", 0, [spec("f", 1)])
    assert h.core.call_state("t/0.0") is None and h.core.batch_credits("t") == 2


def test_fast_fail_stops_production_then_converges_and_discards_late_batches():
    h = Harness(contexts=10)
    _stream(h)
    _batch(h, 0, [spec("f", 0), spec("f", 1)])
    cmds = h.fail("t/0.0", "USER_ERROR", False, "bad row")
    assert of_type(cmds, StopCallProduction) == [StopCallProduction("t", "call failed")]
    assert "t" not in h.converged                      # t/0.1 still in flight
    cmds = h.complete("t/0.1")
    kinds = [type(c) for c in cmds if type(c) in (BatchSettled, ConvergeTaskCalls)]
    assert kinds == [BatchSettled, ConvergeTaskCalls]  # settle before converge
    c = h.converged["t"]
    assert not c.ok and c.failure_code == "CALL_FAILED" and c.outputs == []
    # A batch the producer had prepared before it saw the stop is discarded.
    late = h.core.prepare_call_batch("t", 1, [spec("f", 2)])
    assert h.core.commit_call_batch(late, h.now) == [BatchSettled("t", 1)]
    assert of_type(h.epilogue(), BindCall) == []
    assert h.core.production_done("t", h.now) == [] and h.epilogue() == []
    assert h.converge_count["t"] == 1 and len(h.stops) == 1


def test_output_cap_fails_the_task_and_discards_outputs():
    h = Harness(DispatcherConfig(max_collected_output_bytes=10, task_max_inflight_calls=1),
                contexts=10)
    _stream(h, policy="CONTINUE")
    _batch(h, 0, [spec("f", i) for i in range(4)])
    h.complete("t/0.0", output=b"123456")
    cmds = h.complete("t/0.1", output=b"789012")
    assert of_type(cmds, StopCallProduction) == [StopCallProduction("t", "output bytes exceeded")]
    c = h.converged["t"]
    assert not c.ok and c.failure_code == "OUTPUT_BYTES_EXCEEDED" and not c.retryable
    assert c.outputs == [] and "maxCollectedOutputBytes (10)" in c.failure_message
    assert h.settled == [BatchSettled("t", 0)]
    assert len(of_type(h.log, BindCall)) == 2            # nothing admitted after the cap


def test_output_cap_applies_to_one_shot_tasks_too():
    h = Harness(DispatcherConfig(max_collected_output_bytes=5))
    h.submit("t", [spec("f", 1), spec("f", 2)])
    h.complete("t/0", output=b"12345")
    h.complete("t/1", output=b"6")
    c = h.converged["t"]
    assert c.failure_code == "OUTPUT_BYTES_EXCEEDED" and c.outputs == []
    assert h.stops == []                                  # no producer to stop


def test_output_cap_exactly_at_the_limit_is_fine():
    h = Harness(DispatcherConfig(max_collected_output_bytes=6))
    h.submit("t", [spec("f", 1), spec("f", 2)])
    h.complete("t/0", output=b"123")
    h.complete("t/1", output=b"456")
    assert h.converged["t"].ok


def test_commit_after_production_done_is_an_error_and_batch_to_unknown_task_is_dropped():
    h = Harness()
    _stream(h)
    _batch(h, 0, [spec("f", 0)])
    h.feed(h.core.production_done("t", h.now))
    p = h.core.prepare_call_batch("t", 1, [spec("f", 1)])
    with pytest.raises(ValueError, match="committed after production_done"):
        h.core.commit_call_batch(p, 0)
    q = h.core.prepare_call_batch("gone", 0, [spec("f", 1)])
    assert h.core.commit_call_batch(q, 0) == []


def test_one_shot_and_stream_entry_points_are_not_interchangeable():
    h = Harness()
    h.submit("one", [spec("f", 1)])
    with pytest.raises(ValueError, match="one-shot call phase, not a stream"):
        h.core.production_done("one", 0)
    p = h.core.prepare_call_batch("one", 0, [])
    with pytest.raises(ValueError, match="one-shot call phase, not a stream"):
        h.core.commit_call_batch(p, 0)
    with pytest.raises(ValueError, match="goes to commit_call_batch"):
        h.core.commit_call_phase(p, 0)
    q = h.core.prepare_call_phase("x", [])
    with pytest.raises(ValueError, match="goes to commit_call_phase"):
        h.core.commit_call_batch(q, 0)


def test_cancel_task_stops_the_producer_and_cancels_inflight():
    h = Harness()
    _stream(h)
    _batch(h, 0, [spec("f", 0)])
    cmds = h.core.cancel_task("t", "timed out", h.now)
    assert cmds[0] == StopCallProduction("t", "timed out")
    assert of_type(cmds, CancelCallCmd)[0].call_id == "t/0.0"
    assert h.core.batch_credits("t") == 0


def test_streaming_roots_and_caches_span_batches():
    h = Harness(contexts=10)
    _stream(h)
    _batch(h, 0, [spec("f", 1)])
    h.complete("t/0.0", output=b"one")
    _batch(h, 1, [spec("f", 1)])
    assert [c.call_id for c in h.cache_hits] == ["t/1.0"]
    h.feed(h.core.production_done("t", h.now))
    assert h.converged["t"].outputs == [b"one", b"one"]
