"""CallRecord, make_calls and the compact queued form (make_block / take_call),
run against the compiled module and its twin: the same defaults, the same ids,
keys and indexes, the same errors."""

import gc
from array import array
import weakref

import pytest

from blockx._fast import implementations, load

IMPLS = implementations("records", "blockx.core.dispatch")
cache_key = load("cachekey").cache_key
D = "d" * 64


@pytest.fixture(params=IMPLS, ids=[label for label, _ in IMPLS])
def mod(request):
    return request.param[1]


def test_constants_match_the_twin(mod):
    twin = IMPLS[-1][1]
    assert (mod.READY, mod.RUNNING, mod.WAITING, mod.DONE) == (0, 1, 2, 3)
    assert mod.STATE_NAMES == twin.STATE_NAMES == ("READY", "RUNNING", "WAITING", "DONE")


def test_a_new_context_has_the_documented_defaults(mod):
    c = mod.CallRecord("t/3", "f", D, "main", b"[1]", b"k", 3, 2)
    assert (c.call_id, c.function_id, c.digest, c.entry_selector, c.args_json, c.key) == (
        "t/3", "f", D, "main", b"[1]", b"k")
    assert (c.index, c.batch_idx, c.state, c.attempt_count, c.budget_ms, c.depth) == (3, 2, 0, 0, 0, 0)
    assert (c.bound, c.retry_armed, c.parked, c.ok, c.retryable) == (False,) * 5
    assert (c.task, c.exec, c.parent, c.children, c.waiters, c.leader, c.output) == (None,) * 7
    assert (c.executor_id, c.request_id, c.error_kind, c.error_message, c.budget_used_ms) == ("", "", "", "", 0)
    assert repr(c) == "<CallRecord t/3 READY attempt=0 executor=''>"


def test_fields_are_writable_and_read_back(mod):
    c = mod.CallRecord("t/0", "f", D, "main", b"[]", b"k", 0, 0)
    c.state, c.attempt_count, c.bound, c.index = 1, 2, True, 7
    c.budget_ms, c.budget_used_ms = 2 ** 70, 2 ** 70     # frame values: any int, no overflow
    c.retryable, c.children, c.executor_id = True, {}, "exec-1"
    assert (c.state, c.attempt_count, c.bound, c.index) == (1, 2, True, 7)
    assert (c.budget_ms, c.budget_used_ms, c.retryable, c.children, c.executor_id) == (
        2 ** 70, 2 ** 70, True, {}, "exec-1")
    c.index += 5
    assert c.index == 12
    with pytest.raises(AttributeError):
        c.not_a_field = 1


def test_make_calls_builds_ids_keys_and_indexes(mod):
    specs = [("f", D, b"[1]", "main"), ("g", D, b"[2]", ""), ("f", D, b"[1]", "other")]
    ctxs = mod.make_calls("t", "t/4.", specs, 4)
    assert [c.call_id for c in ctxs] == ["t/4.0", "t/4.1", "t/4.2"]
    assert [c.index for c in ctxs] == [0, 1, 2] and {c.batch_idx for c in ctxs} == {4}
    assert [c.entry_selector for c in ctxs] == ["main", "main", "other"]
    assert [c.key for c in ctxs] == [cache_key(f, d, a) for f, d, a, _ in specs]
    assert all(type(c) is mod.CallRecord and c.state == mod.READY and c.task is None for c in ctxs)
    assert mod.make_calls("t", "t/", iter([]), 0) == []


@pytest.mark.parametrize("spec, message", [
    (("f", D, b"[]"), f"call 1 must be (function_id, digest, args_json, entry_selector), got ('f', '{D}', b'[]')"),
    (7, "call 1 must be (function_id, digest, args_json, entry_selector), got 7"),
    (("", D, b"[]", "main"), "call 1 needs a non-empty function_id, got ''"),
    ((b"f", D, b"[]", "main"), "call 1 needs a non-empty function_id, got b'f'"),
    (("f", None, b"[]", "main"), "call 1 digest must be a str, got None"),
    (("f", D, "[]", "main"), "call 1 args_json must be canonical JSON bytes, got str"),
    (("f", D, b"[]", None), "call 1 entry_selector must be a str, got None"),
])
def test_make_calls_names_the_bad_spec(mod, spec, message):
    with pytest.raises(ValueError) as err:
        mod.make_calls("t", "t/", [("f", D, b"[]", "main"), spec], 0)
    assert str(err.value) == f"task t: {message}"
    with pytest.raises(ValueError) as err:
        mod.make_block("t", "t/", [("f", D, b"[]", "main"), spec], 0)
    assert str(err.value) == f"task t: {message}"


def test_make_block_reads_callspecs_and_tuple_subclasses_like_plain_tuples(mod):
    # Builders hand over PinnedCall (a NamedTuple): the compiled pack reads it as a
    # tuple, with the same checks and the same errors as the twin.
    from blockx.core.dispatch.types import PinnedCall
    specs = [PinnedCall("f", D, b"[1]"), PinnedCall("g", D, b"[2]", "other"), ("f", D, b"[3]", "main")]
    block = mod.make_block("t", "t/", specs, 0)
    assert block.fns == [("f", D, "main"), ("g", D, "other")]
    assert list(block.fidx) == [0, 1, 0] and block.args == b"[1][2][3]"
    for bad, message in [(PinnedCall("", D, b"[]"), "call 1 needs a non-empty function_id, got ''"),
                         (PinnedCall("f", D, "[]"), "call 1 args_json must be canonical JSON bytes, got str"),
                         (PinnedCall("f", D, b"[]", None), "call 1 entry_selector must be a str, got None")]:
        with pytest.raises(ValueError) as err:
            mod.make_block("t", "t/", [specs[0], bad], 0)
        assert str(err.value) == f"task t: {message}"


def _queued_task(mod, block, base=0, batch_idx=0):
    """A task holding one registered block (what TaskCallTable.register_block does)."""
    task = mod.TaskCalls("t", True, 3, 0, 0, mod.InstanceState(""), False, None)
    batch = mod.Batch(batch_idx, [])
    batch.remaining = len(block)
    block.base, block.batch = base, batch
    task.blocks.append(block)
    task.queued += len(block)
    return task, batch


def test_take_call_builds_what_make_calls_builds(mod):
    specs = [("f", D, b"[1]", "main"), ("g", D, b"[2,\"x\"]", ""), ("f", D, b"[]", "other"),
             ("f", D, b"[1]", "main")]
    block = mod.make_block("t", "t/4.", iter(specs), 4)
    assert len(block) == 4 and block.fns == [("f", D, "main"), ("g", D, "main"), ("f", D, "other")]
    assert list(block.fidx) == [0, 1, 2, 0] and block.args == b'[1][2,"x"][][1]'
    task, batch = _queued_task(mod, block, base=10, batch_idx=4)
    by_id: dict = {}
    taken = [mod.take_call(task, by_id) for _ in specs]
    want = mod.make_calls("t", "t/4.", specs, 4)
    fields = ("call_id", "function_id", "digest", "entry_selector", "args_json", "key", "batch_idx",
              "state", "attempt_count", "executor_id", "budget_ms", "request_id", "error_kind",
              "error_message", "retryable", "budget_used_ms", "parent", "waiters")
    for got, exp in zip(taken, want):
        assert type(got) is mod.CallRecord and got.task is task
        assert [getattr(got, f) for f in fields] == [getattr(exp, f) for f in fields]
    assert [c.key for c in taken] == [cache_key(f, d, a) for f, d, a, _ in specs]   # cachekey's
    assert [c.index for c in taken] == [10, 11, 12, 13]
    assert list(by_id) == list(task.pending) == ["t/4.0", "t/4.1", "t/4.2", "t/4.3"]
    assert batch.calls == taken and batch.remaining == 4
    assert task.queued == 0 and not task.blocks and block.pos == 4


def test_blocks_are_taken_in_order_and_an_empty_list_is_an_empty_block(mod):
    a = mod.make_block("t", "t/0.", [("f", D, b"[0]", "main")], 0)
    b = mod.make_block("t", "t/1.", [("f", D, b"[1]", "main"), ("f", D, b"[2]", "main")], 1)
    task, _ = _queued_task(mod, a)
    task.blocks.append(b)
    task.queued += 2
    b.base, b.batch = 1, mod.Batch(1, [])
    ids = [mod.take_call(task, {}).call_id for _ in range(3)]
    assert ids == ["t/0.0", "t/1.0", "t/1.1"] and task.queued == 0
    empty = mod.make_block("t", "t/", iter([]), 0)
    assert len(empty) == 0 and empty.args == b"" and list(empty.offs) == [0]


def test_a_context_cycle_is_collected(mod):
    class Task:
        pass
    task = Task()
    c = mod.CallRecord("t/0", "f", D, "main", b"[]", b"k", 0, 0)
    c.task, task.calls = task, [c]
    ref = weakref.ref(task)
    del task, c
    gc.collect()
    assert ref() is None


def _fields(obj, names):
    return {n: getattr(obj, n) for n in names}


TASK_FIELDS = ("task_id", "fast_fail", "max_attempts", "base_backoff_ms", "jitter_percent",
               "streaming", "inflight", "pending", "total", "outputs", "output_bytes", "cache",
               "flights", "batches", "settle_ready", "next_batch_idx", "unsettled", "production_open",
               "stop_dispatching", "stop_reason", "stop_sent", "failure_code", "failure_message",
               "failure_retryable", "discard_outputs", "converged", "removed", "in_ring", "dirty",
               "succeeded", "calls_failed", "call_retries", "cache_hits", "first_failure",
               "failures_retryable")


@pytest.mark.parametrize("streaming", [False, True])
def test_records_start_like_the_twin(mod, streaming):
    twin = IMPLS[-1][1]
    made = []
    for m in (mod, twin):
        inst = m.InstanceState("A")
        task = m.TaskCalls("t", True, 3, 10, 5, inst, streaming, None)
        made.append((inst, task, m.Batch(2, [1, 2, 3]), m.ExecutorRecord("view")))
    (i1, t1, b1, r1), (i2, t2, b2, r2) = made
    assert _fields(t1, TASK_FIELDS) == _fields(t2, TASK_FIELDS)
    assert t1.instance is i1 and t1.ready is None
    inst_fields = ("instance_id", "inflight", "last_served", "tasks")
    assert _fields(i1, inst_fields) == _fields(i2, inst_fields) and list(i1.ring) == list(i2.ring) == []
    assert _fields(b1, ("idx", "calls", "remaining")) == _fields(b2, ("idx", "calls", "remaining"))
    rec_fields = ("view", "heartbeat_seq", "heartbeat_runnable", "completions", "calls", "attached")
    assert _fields(r1, rec_fields) == _fields(r2, rec_fields)


def test_a_block_made_by_hand_is_checked_and_its_cursor_is_not_writable_in_c(mod):
    fns = [("f", D, "main")]
    ok = mod.CallBlock("t/", 0, fns, array("I", [0, 0]), b"[1][2]", array("q", [0, 3, 6]))
    assert len(ok) == 2 and (ok.pos, ok.base, ok.batch) == (0, 0, None)
    with pytest.raises(TypeError):
        mod.CallBlock("t/", 0, fns, [0], b"[1]", array("q", [0, 3]))
    with pytest.raises(TypeError):
        mod.CallBlock("t/", 0, fns, array("I", [0]), b"[1]", array("q", [0]))
    for fidx, args, offs in ((array("I", [1]), b"[1]", [0, 3]),             # no function 1
                             (array("I", [0]), b"[1]", [0, 9]),             # past the buffer
                             (array("I", [0, 0]), b"[1][2]", [0, 7, 6]),    # backwards
                             (array("I", [0]), b"[1]", [1, 3])):            # not from 0
        with pytest.raises(ValueError):
            mod.CallBlock("t/", 0, fns, fidx, args, array("q", offs))
    if mod is not IMPLS[-1][1]:
        with pytest.raises(AttributeError):
            ok.pos = 5
