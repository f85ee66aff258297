"""TaskCallTable with the lifecycle over it: registration, the single DONE
accounting point, the flush order (stop, drain, settle, converge), the window
and teardown; and streaming production: batches, the credit window,
BatchSettled, StopCallProduction, production_done, and the collected-output
cap; and hand_over, a stream whose settled batches take their outputs away."""
import pytest

from blockx.core.dispatch.records import DONE, CallRecord
from blockx.core.dispatch.commands import (
    CancelCallCmd, ConvergeTaskCalls, StopCallProduction)
from blockx.core.dispatch.commands import (
    BatchSettled, BindCall, CancelCallCmd, ConvergeTaskCalls, StopCallProduction)
from blockx.core.dispatch.config import DispatcherConfig

from tests.unit.core.dispatch.parts import Parts
from tests.unit.core.dispatch.harness import Harness, of_type, spec


def test_register_indexes_queues_and_marks_the_task_dirty():
    p = Parts()
    task, ctxs = p.task("t", 2)
    assert [p.calls.by_id[c.call_id] for c in ctxs] == ctxs
    assert list(task.pending) == ["t/0", "t/1"] and len(task.ready) == 2
    assert (task.total, task.unsettled, task.next_batch_idx, task.in_ring) == (2, 1, 1, True)
    assert p.lifecycle.flush() == []          # dirty, but nothing to converge yet
    assert p.lifecycle.flush() == []


def test_an_empty_phase_converges_at_the_next_flush():
    p = Parts()
    p.task("t", 0)
    assert p.lifecycle.flush() == [ConvergeTaskCalls("t", True, "", "", False, [], 0, 0, 0, 0)]
    assert p.lifecycle.flush() == []


def test_set_terminal_is_idempotent_and_outputs_keep_call_list_order():
    p = Parts()
    task, (a, b) = p.task("t", 2)
    out: list = []
    p.lifecycle.set_terminal(b, True, b"2", "", "", False, 0, True, out)
    p.lifecycle.set_terminal(b, True, b"never", "", "", False, 0, True, out)
    p.lifecycle.set_terminal(a, True, b"1", "", "", False, 0, True, out)
    assert out == [] and (a.state, b.state) == (DONE, DONE)
    assert (task.succeeded, task.cache[b.key]) == (2, b"2")
    assert p.lifecycle.flush() == [ConvergeTaskCalls("t", True, "", "", False, [b"1", b"2"], 2, 0, 0, 0)]
    assert len(p.calls) == 0               # the settled batch is forgotten


def test_fast_fail_stops_drains_the_rest_uncounted_and_converges_failed():
    p = Parts()
    task, (a, b, c) = p.task("t", 3)
    p.run(a)
    p.tasks.release(a)                     # the failed attempt gave its context back
    out: list = []
    p.lifecycle.set_terminal(a, False, None, "USER_ERROR", "boom", False, 0, True, out)
    assert task.stop_dispatching and task.stop_reason == "call failed"
    cmds = p.lifecycle.flush()
    assert (b.state, b.error_kind, c.state) == (DONE, "CANCELLED", DONE)
    assert cmds == [ConvergeTaskCalls(
        "t", False, "CALL_FAILED", "call t/0 (function f) failed after 1 attempt(s): USER_ERROR: boom",
        False, [], 3, 1, 0, 0)]


def test_a_stopped_task_waits_for_its_calls_in_flight_before_draining():
    p = Parts()
    task, (a, b) = p.task("t", 2)
    p.run(a)
    p.tasks.stop(task, "output bytes exceeded")
    assert p.lifecycle.flush() == []           # a still runs: no drain, no converge
    assert b.state != DONE
    p.tasks.release(a)                     # marks the stopped task dirty again
    out: list = []
    p.lifecycle.set_terminal(a, True, b"1", "", "", False, 0, True, out)
    [conv] = p.lifecycle.flush()
    assert (b.error_kind, conv.ok, conv.outputs) == ("CANCELLED", True, [b"1"])


def test_release_frees_the_window_and_wakes_the_task():
    p = Parts()
    task, (a, _) = p.task("t", 2)
    p.run(a)
    view = p.exec.view("e1")
    assert (task.inflight, view.local_inflight) == (1, 1)
    task.in_ring = False
    task.instance.ring.clear()
    p.tasks.release(a)
    assert (task.inflight, task.instance.inflight, view.local_inflight) == (0, 0, 0)
    assert task.in_ring and list(task.instance.ring) == [task]
    assert a.exec is None and p.exec.call_ids("e1") == []


def test_the_output_cap_discards_outputs_and_stops_the_task():
    p = Parts(max_output=3)
    task, (a, b) = p.task("t", 2)
    out: list = []
    p.lifecycle.set_terminal(a, True, b"12", "", "", False, 0, True, out)
    assert not task.stop_dispatching
    p.lifecycle.set_terminal(b, True, b"34", "", "", False, 0, True, out)
    assert task.stop_dispatching and task.discard_outputs and task.outputs == []
    [conv] = p.lifecycle.flush()
    assert (conv.ok, conv.failure_code, conv.outputs) == (False, "OUTPUT_BYTES_EXCEEDED", [])


def test_cancel_stops_production_cancels_in_flight_and_forgets_everything():
    p = Parts()
    task = p.tasks.new("s", True, (3, 10, 0), "", True)
    a = CallRecord("s/0.0", "f", "d", "main", b"[0]", b"k", 0, 0)
    p.tasks.register(task, [a], 0)
    p.run(a)
    cmds = p.lifecycle.cancel_task("s", "task timed out", 0)
    assert cmds == [StopCallProduction("s", "task timed out"),
                    CancelCallCmd("s/0.0", "e1", "task timed out", 1)]
    assert a.state == DONE and task.removed and "s" not in p.tasks and len(p.calls) == 0
    assert p.exec.view("e1").local_inflight == 0
    assert p.lifecycle.cancel_task("s", "again", 0) == []


def _stream(h, task_id="t", policy="FAST_FAIL", hand_over=False):
    h.feed(h.core.intake.commit_call_stream(task_id, policy, None, "", h.now, hand_over=hand_over))


def _batch(h, idx, calls, task_id="t"):
    p = h.core.intake.prepare_call_batch(task_id, idx, calls)
    return h.feed(h.core.intake.commit_call_batch(p, h.now))


def test_batches_run_settle_and_converge_in_call_order():
    h = Harness(contexts=10)
    _stream(h)
    assert h.core.intake.batch_credits("t") == 2
    _batch(h, 0, [spec("f", 0), spec("f", 1)])
    _batch(h, 1, [spec("f", 2)])
    assert sorted(h.live) == ["t/0.0", "t/0.1", "t/1.0"]
    assert h.core.intake.batch_credits("t") == 0
    h.complete("t/1.0", output=b"2")
    assert h.settled == [BatchSettled("t", 1)] and h.core.intake.batch_credits("t") == 1
    assert h.core.tasks.call_state("t/1.0") is None        # forgotten once settled
    h.complete("t/0.1", output=b"1")
    h.complete("t/0.0", output=b"0")
    assert h.settled[-1] == BatchSettled("t", 0)
    assert "t" not in h.converged                     # the producer may still commit
    h.feed(h.core.intake.production_done("t", h.now))
    c = h.converged["t"]
    assert c.ok and c.outputs == [b"0", b"1", b"2"] and c.call_count == 3


def test_credit_window_and_order_are_enforced():
    h = Harness(DispatcherConfig(max_outstanding_batches=1))
    _stream(h)
    _batch(h, 0, [spec("f", 0)])
    p = h.core.intake.prepare_call_batch("t", 1, [spec("f", 1)])
    with pytest.raises(ValueError, match="credit window of 1 unsettled batches"):
        h.core.intake.commit_call_batch(p, 0)
    h.complete("t/0.0")
    assert h.core.intake.commit_call_batch(p, 0) == []        # the same prepared batch, now allowed
    h.epilogue()
    p3 = h.core.intake.prepare_call_batch("t", 3, [spec("f", 3)])
    h.complete("t/1.0")
    with pytest.raises(ValueError, match="batch 3 committed out of order; expected batch 2"):
        h.core.intake.commit_call_batch(p3, 0)
    with pytest.raises(ValueError, match="already committed"):
        h.core.intake.commit_call_batch(p, 0)


def test_empty_batch_settles_at_once():
    h = Harness()
    _stream(h)
    _batch(h, 0, [])
    assert h.settled == [BatchSettled("t", 0)]
    h.feed(h.core.intake.production_done("t", h.now))
    assert h.converged["t"].ok and h.converged["t"].outputs == []


def test_batch_limits_are_checked_in_prepare():
    h = Harness(DispatcherConfig(batch_max_rows=2, batch_max_args_bytes=10))
    with pytest.raises(ValueError, match="batch 0 has 3 calls, over batchMaxRows 2"):
        h.core.intake.prepare_call_batch("t", 0, [spec("f", i) for i in range(3)])
    with pytest.raises(ValueError, match="carries 14 bytes of args, over batchMaxArgsBytes 10"):
        h.core.intake.prepare_call_batch("t", 0, [spec("f", 12345), spec("f", 12345)])
    with pytest.raises(ValueError, match="batch_idx must be an integer >= 0"):
        h.core.intake.prepare_call_batch("t", -1, [])


def test_prepare_batch_has_no_side_effects():
    h = Harness()
    _stream(h)
    h.core.intake.prepare_call_batch("t", 0, [spec("f", 1)])
    assert h.core.tasks.call_state("t/0.0") is None and h.core.intake.batch_credits("t") == 2


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
    late = h.core.intake.prepare_call_batch("t", 1, [spec("f", 2)])
    assert h.core.intake.commit_call_batch(late, h.now) == [BatchSettled("t", 1)]
    assert of_type(h.epilogue(), BindCall) == []
    assert h.core.intake.production_done("t", h.now) == [] and h.epilogue() == []
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
    h.feed(h.core.intake.production_done("t", h.now))
    p = h.core.intake.prepare_call_batch("t", 1, [spec("f", 1)])
    with pytest.raises(ValueError, match="committed after production_done"):
        h.core.intake.commit_call_batch(p, 0)
    q = h.core.intake.prepare_call_batch("gone", 0, [spec("f", 1)])
    assert h.core.intake.commit_call_batch(q, 0) == []


def test_one_shot_and_stream_entry_points_are_not_interchangeable():
    h = Harness()
    h.submit("one", [spec("f", 1)])
    with pytest.raises(ValueError, match="one-shot call phase, not a stream"):
        h.core.intake.production_done("one", 0)
    p = h.core.intake.prepare_call_batch("one", 0, [])
    with pytest.raises(ValueError, match="one-shot call phase, not a stream"):
        h.core.intake.commit_call_batch(p, 0)
    with pytest.raises(ValueError, match="goes to commit_call_batch"):
        h.core.intake.commit_call_phase(p, 0)
    q = h.core.intake.prepare_call_phase("x", [])
    with pytest.raises(ValueError, match="goes to commit_call_phase"):
        h.core.intake.commit_call_batch(q, 0)


def test_cancel_task_stops_the_producer_and_cancels_inflight():
    h = Harness()
    _stream(h)
    _batch(h, 0, [spec("f", 0)])
    cmds = h.core.lifecycle.cancel_task("t", "timed out", h.now)
    assert cmds[0] == StopCallProduction("t", "timed out")
    assert of_type(cmds, CancelCallCmd)[0].call_id == "t/0.0"
    assert h.core.intake.batch_credits("t") == 0


def test_streaming_roots_and_caches_span_batches():
    h = Harness(contexts=10)
    _stream(h)
    _batch(h, 0, [spec("f", 1)])
    h.complete("t/0.0", output=b"one")
    _batch(h, 1, [spec("f", 1)])
    assert [c.call_id for c in h.cache_hits] == ["t/1.0"]
    h.feed(h.core.intake.production_done("t", h.now))
    assert h.converged["t"].outputs == [b"one", b"one"]


# --- hand_over: a streaming task whose outputs leave the dispatcher with each
# BatchSettled (a writer consumes them as the task runs), so the core holds the
# outputs of unsettled batches only.

def _task(h, task_id="t"):
    return h.core.tasks.by_id[task_id]


def test_settled_batches_carry_their_outputs_in_call_order_and_the_core_keeps_none():
    h = Harness(contexts=10)
    _stream(h, hand_over=True)
    _batch(h, 0, [spec("f", 0), spec("f", 1), spec("f", 2)])
    _batch(h, 1, [spec("f", 3)])
    h.complete("t/1.0", output=b"3")
    assert h.settled == [BatchSettled("t", 1, [b"3"])]
    h.complete("t/0.2", output=b"2")
    h.complete("t/0.0", output=b"0")
    h.complete("t/0.1", output=b"1")
    assert h.settled[-1] == BatchSettled("t", 0, [b"0", b"1", b"2"])
    task = _task(h)
    assert task.output_bytes == 0 and task.cache == {}
    assert [o for o in task.outputs if o is not None] == []
    h.feed(h.core.intake.production_done("t", h.now))
    c = h.converged["t"]
    assert c.ok and c.outputs == [] and c.call_count == 4


def test_without_hand_over_batches_carry_nothing_and_outputs_stay():
    h = Harness(contexts=10)
    _stream(h)
    _batch(h, 0, [spec("f", 0)])
    h.complete("t/0.0", output=b"0")
    assert h.settled == [BatchSettled("t", 0, None)]
    h.feed(h.core.intake.production_done("t", h.now))
    assert h.converged["t"].outputs == [b"0"]


def test_failed_roots_are_left_out_under_continue():
    h = Harness(contexts=10)
    _stream(h, policy="CONTINUE", hand_over=True)
    _batch(h, 0, [spec("f", 0), spec("f", 1)])
    h.fail("t/0.0")
    h.complete("t/0.1", output=b"1")
    assert h.settled == [BatchSettled("t", 0, [b"1"])]


def test_the_output_cap_counts_only_what_the_core_still_holds():
    # 3 batches of 6 bytes each under a 10-byte cap: each batch leaves before the
    # next one arrives, so the task never holds more than 6 bytes and succeeds.
    h = Harness(DispatcherConfig(max_collected_output_bytes=10), contexts=10)
    _stream(h, hand_over=True)
    for i in range(3):
        _batch(h, i, [spec("f", i)])
        h.complete(f"t/{i}.0", output=b"123456")
    h.feed(h.core.intake.production_done("t", h.now))
    assert h.converged["t"].ok
    assert [len(b.outputs) for b in h.settled] == [1, 1, 1]


def test_a_cancelled_task_forgets_its_hand_over():
    h = Harness(contexts=10)
    _stream(h, hand_over=True)
    _batch(h, 0, [spec("f", 0)])
    h.feed(h.core.lifecycle.cancel_task("t", "timed out", h.now))
    assert "t" not in h.core.tasks._hand_over
    # the same id again, as a plain stream: its outputs stay in the core
    _stream(h)
    _batch(h, 0, [spec("f", 0)])
    h.complete("t/0.0", output=b"0")
    assert h.settled[-1] == BatchSettled("t", 0, None)
    h.feed(h.core.intake.production_done("t", h.now))
    assert h.converged["t"].outputs == [b"0"]


def test_later_batches_reuse_the_output_slots_of_settled_ones():
    h = Harness(contexts=10)
    _stream(h, hand_over=True)
    for i in range(50):
        _batch(h, i, [spec("f", i, j) for j in range(4)])
        for j in (3, 1, 0, 2):
            h.complete(f"t/{i}.{j}", output=b"%d" % (i * 4 + j))
        assert h.settled[-1] == BatchSettled("t", i, [b"%d" % (i * 4 + j) for j in range(4)])
    assert len(_task(h).outputs) == 4                     # one batch's slots, not 200
    # a smaller last batch fits in the freed slots; two batches in flight take two regions
    _batch(h, 50, [spec("g", 0), spec("g", 1)])
    _batch(h, 51, [spec("g", 2), spec("g", 3), spec("g", 4), spec("g", 5)])
    assert len(_task(h).outputs) == 8
    for cid, out in (("t/51.0", b"a"), ("t/50.1", b"y"), ("t/51.3", b"d"), ("t/51.2", b"c"),
                     ("t/50.0", b"x"), ("t/51.1", b"b")):
        h.complete(cid, output=out)
    assert h.settled[-2:] == [BatchSettled("t", 50, [b"x", b"y"]), BatchSettled("t", 51, [b"a", b"b", b"c", b"d"])]
    h.feed(h.core.intake.production_done("t", h.now))
    c = h.converged["t"]
    assert c.ok and c.outputs == [] and c.call_count == 206
