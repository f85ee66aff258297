"""TaskTable with the lifecycle over it: registration, the single DONE
accounting point, the flush order (stop, drain, settle, converge), the window
and teardown."""
from blockx.core.dispatch.calls import DONE, CallContext
from blockx.core.dispatch.commands import (
    CancelCallCmd, ConvergeTaskCalls, StopCallProduction)

from tests.unit.core.dispatcher_parts import Parts


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
    a = CallContext("s/0.0", "f", "d", "main", b"[0]", b"k", 0, 0)
    p.tasks.register(task, [a], 0)
    p.run(a)
    cmds = p.lifecycle.cancel_task("s", "task timed out", 0)
    assert cmds == [StopCallProduction("s", "task timed out"),
                    CancelCallCmd("s/0.0", "e1", "task timed out", 1)]
    assert a.state == DONE and task.removed and "s" not in p.tasks and len(p.calls) == 0
    assert p.exec.view("e1").local_inflight == 0
    assert p.lifecycle.cancel_task("s", "again", 0) == []
