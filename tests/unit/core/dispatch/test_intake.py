"""CallIntake on its own: prepare touches nothing, commit hands the calls to
the TaskCallTable, and the stream's order and credit window are enforced."""
import pytest

from blockx._fast import load
from blockx.core.dispatch.commands import BatchSettled
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.intake import CallIntake

from tests.unit.core.dispatch.parts import Parts
from tests.unit.core.dispatch.harness import spec


from blockx.core.dispatch import records as _records


def _intake(**cfg):
    config = DispatcherConfig(**cfg)
    p = Parts(config)
    return p, CallIntake(config, p.tasks)


def test_prepare_touches_nothing_and_commit_registers_with_the_task_table():
    p, intake = _intake()
    prepared = intake.prepare_call_phase("t", [spec("f", 1), spec("g", 2)], "CONTINUE")
    assert len(prepared) == 2
    assert len(p.tasks) == 0 and len(p.calls) == 0
    assert intake.commit_call_phase(prepared, 0) == []
    assert prepared.calls is None       # the task owns the queued calls now
    task = p.tasks.by_id["t"]
    # Queued compactly: no context, id or key until a call is admitted.
    assert (task.fast_fail, task.total, task.queued, len(p.calls)) == (False, 2, 2, 0)
    taken = [_records.take_call(task, p.calls.by_id), _records.take_call(task, p.calls.by_id)]
    assert [(c.call_id, c.index, c.function_id, c.args_json) for c in taken] == [
        ("t/0", 0, "f", b"[1]"), ("t/1", 1, "g", b"[2]")]
    assert [c.key for c in taken] == [p.cache_key("f", "d0", b"[1]"), p.cache_key("g", "d0", b"[2]")]
    assert list(p.calls.by_id) == ["t/0", "t/1"] and list(task.pending) == ["t/0", "t/1"]
    assert task.queued == 0 and not task.blocks
    with pytest.raises(ValueError, match="already committed"):
        intake.commit_call_phase(prepared, 0)


def test_stream_batches_come_in_order_within_the_credit_window():
    p, intake = _intake(max_outstanding_batches=2)
    intake.commit_call_stream("s")
    assert intake.batch_credits("s") == 2
    with pytest.raises(ValueError, match="out of order; expected batch 0"):
        intake.commit_call_batch(intake.prepare_call_batch("s", 1, [spec("f", 1)]), 0)
    intake.commit_call_batch(intake.prepare_call_batch("s", 0, [spec("f", 0)]), 0)
    intake.commit_call_batch(intake.prepare_call_batch("s", 1, [spec("f", 1)]), 0)
    assert intake.batch_credits("s") == 0
    task = p.tasks.by_id["s"]
    assert task.queued == 2 and len(p.calls) == 0
    taken = [_records.take_call(task, p.calls.by_id) for _ in range(2)]
    assert [(c.call_id, c.index, c.batch_idx) for c in taken] == [("s/0.0", 0, 0), ("s/1.0", 1, 1)]
    assert list(p.calls.by_id) == ["s/0.0", "s/1.0"]
    with pytest.raises(ValueError, match="exceeds the credit window of 2"):
        intake.commit_call_batch(intake.prepare_call_batch("s", 2, [spec("f", 2)]), 0)


def test_a_batch_of_a_stopped_or_ended_task_is_settled_or_dropped_at_once():
    p, intake = _intake()
    intake.commit_call_stream("s")
    p.tasks.stop(p.tasks.by_id["s"], "call failed")
    late = intake.prepare_call_batch("s", 0, [spec("f", 0)])
    assert intake.commit_call_batch(late, 0) == [BatchSettled("s", 0)]
    assert late.committed and len(p.calls) == 0
    gone = intake.prepare_call_batch("x", 0, [spec("f", 0)])
    assert intake.commit_call_batch(gone, 0) == [] and gone.committed


def test_a_packed_call_list_queues_its_arrays_as_they_are_and_admits_like_a_spec_list():
    from array import array
    p, intake = _intake()
    fns = [("f", "d0", ""), ("g", "d1", "other")]
    fidx, offs, args = array("I", [0, 1, 0]), array("q", [0, 3, 6, 8]), b"[1][2][]"
    prepared = intake.prepare_packed_call_phase("t", fns, fidx, args, offs, "CONTINUE")
    assert len(prepared) == 3 and len(p.tasks) == 0      # no side effects before commit
    block = prepared.calls
    assert block.fidx is fidx and block.offs is offs and block.args is args   # not copied
    assert block.fns == [("f", "d0", "main"), ("g", "d1", "other")]          # entry defaulted
    intake.commit_call_phase(prepared, 0)
    task = p.tasks.by_id["t"]
    taken = [_records.take_call(task, p.calls.by_id) for _ in range(3)]
    assert [(c.call_id, c.index, c.function_id, c.digest, c.entry_selector, c.args_json, c.key)
            for c in taken] == [
        ("t/0", 0, "f", "d0", "main", b"[1]", p.cache_key("f", "d0", b"[1]")),
        ("t/1", 1, "g", "d1", "other", b"[2]", p.cache_key("g", "d1", b"[2]")),
        ("t/2", 2, "f", "d0", "main", b"[]", p.cache_key("f", "d0", b"[]"))]


@pytest.mark.parametrize("fns, fidx, args, offs, message", [
    ([("", "d", "")], [0], b"[]", [0, 2], "function 0 must be (function_id, digest, entry_selector)"),
    ([("f", None, "")], [0], b"[]", [0, 2], "function 0 must be"),
    (("f", "d", ""), [0], b"[]", [0, 2], "fns must be a list"),
    ([("f", "d", "")], [1], b"[]", [0, 2], "packed call list: CallBlock: fidx or offs out of range"),
    ([("f", "d", "")], [0, 0], b"[][]", [0, 3, 2], "packed call list: CallBlock: fidx or offs out of range"),
    ([("f", "d", "")], [0], b"[]", [0, 3], "packed call list: CallBlock: fidx or offs out of range"),
    ([("f", "d", "")], [0], b"[]", [0], "packed call list: CallBlock needs fidx = array('I')"),
    ([("f", "d", "")], [0], "[]", [0, 2], "args must be bytes, got str"),
])
def test_a_bad_packed_call_list_is_refused_whole_with_the_task_named(fns, fidx, args, offs, message):
    from array import array
    p, intake = _intake()
    with pytest.raises(ValueError) as err:
        intake.prepare_packed_call_phase("t", fns, array("I", fidx), args, array("q", offs))
    assert str(err.value).startswith("task t: ") and message in str(err.value)
    assert len(p.tasks) == 0
