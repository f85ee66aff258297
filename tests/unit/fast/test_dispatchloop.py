"""CallContext and make_calls, run against the compiled module and its twin:
the same defaults, the same ids, keys and indexes, the same errors."""

import gc
import weakref

import pytest

from blockx._fast import implementations, load

IMPLS = implementations("dispatchloop")
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
    c = mod.CallContext("t/3", "f", D, "main", b"[1]", b"k", 3, 2)
    assert (c.call_id, c.function_id, c.digest, c.entry_selector, c.args_json, c.key) == (
        "t/3", "f", D, "main", b"[1]", b"k")
    assert (c.index, c.batch_idx, c.state, c.attempt_count, c.budget_ms, c.depth) == (3, 2, 0, 0, 0, 0)
    assert (c.bound, c.retry_armed, c.parked, c.ok, c.retryable) == (False,) * 5
    assert (c.task, c.exec, c.parent, c.children, c.waiters, c.leader, c.output) == (None,) * 7
    assert (c.executor_id, c.request_id, c.error_kind, c.error_message, c.budget_used_ms) == ("", "", "", "", 0)
    assert repr(c) == "<CallContext t/3 READY attempt=0 executor=''>"


def test_fields_are_writable_and_read_back(mod):
    c = mod.CallContext("t/0", "f", D, "main", b"[]", b"k", 0, 0)
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
    ctxs = mod.make_calls("t", "t/4.", specs, 4, cache_key)
    assert [c.call_id for c in ctxs] == ["t/4.0", "t/4.1", "t/4.2"]
    assert [c.index for c in ctxs] == [0, 1, 2] and {c.batch_idx for c in ctxs} == {4}
    assert [c.entry_selector for c in ctxs] == ["main", "main", "other"]
    assert [c.key for c in ctxs] == [cache_key(f, d, a) for f, d, a, _ in specs]
    assert all(type(c) is mod.CallContext and c.state == mod.READY and c.task is None for c in ctxs)
    assert mod.make_calls("t", "t/", iter([]), 0, cache_key) == []


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
        mod.make_calls("t", "t/", [("f", D, b"[]", "main"), spec], 0, cache_key)
    assert str(err.value) == f"task t: {message}"


def test_a_context_cycle_is_collected(mod):
    class Task:
        pass
    task = Task()
    c = mod.CallContext("t/0", "f", D, "main", b"[]", b"k", 0, 0)
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


def test_the_scheduler_takes_turns_like_the_twin(mod):
    """One fair scheduler per implementation, the same operations, the same picks."""
    from blockx._fast import load
    ReadyQueue = load("readyqueue").ReadyQueue
    twin = IMPLS[-1][1]
    picks = []
    for m in (mod, twin):
        sched = m.TaskScheduler(True, 2, 4)
        tasks = []
        for tid, inst in (("a", "X"), ("b", "X"), ("c", "Y")):
            t = m.TaskCalls(tid, True, 3, 10, 0, sched.attach(inst), False, ReadyQueue())
            t.ready.push(object())
            sched.wake(t)
            tasks.append(t)
        order = []
        for _ in range(7):
            t = sched.next_task()
            order.append(t.task_id)
            t.inflight += 1
            t.instance.inflight += 1
            sched.served(t)
        sched.detach(tasks[0])
        order.append(sorted(sched.instance_inflight().items()))
        sched.unserved()
        order.append(sched.next_task().task_id)
        picks.append(order)
    assert picks[0] == picks[1]
    # X and Y tie (in flight, last served): X by id first, quantum 2 each, then turns
    assert picks[0][:7] == ["a", "b", "c", "c", "a", "b", "c"], picks[0]
