"""The per-task trace recorder: events in order, stamped once per batch, the cap
with call sampling, and the lifetime tied to the core's retained result."""
from __future__ import annotations

import pytest

from blockx._fast import compiled

from blockx.adapters.telemetry.trace_recorder import (
    DONE, IO_DONE, IO_WAIT, LOST, PHASE, QUEUED, RETRY, SENT, SUBCALL, TASK_END, TASK_START, TraceStore,
)
from blockx.core.dispatch.commands import ArmCallRetry, DispatchCallCmd
from blockx.core.types import (
    CallRetryPolicy, FunctionCall, PluginResult, ResultHandler, StartBuilderPhase, StartCallPhase,
    StartPluginPhase, TaskResult, TaskState,
)


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def advance_us(self, us: int) -> None:
        self.ns += us * 1000


def sent(task_id, call_id, executor="exec-0", attempt=1, parent=""):
    return DispatchCallCmd(call_id, executor, task_id, "f", "digest", "main", b"[]", 0, attempt, parent)


def frame(task_id, attempt=1, budget=0):
    return {"taskId": task_id, "attemptSeq": attempt, "budgetUsedMs": budget}


def phases(task_id):
    return [StartBuilderPhase(task_id, "s0", 1, FunctionCall("callList")),
            StartCallPhase(task_id, "s0", 1, [], False, "FAST_FAIL", CallRetryPolicy(), "", 0),
            StartPluginPhase(task_id, "s0", [], ResultHandler("log"))]


def test_a_task_records_its_events_in_order_with_the_batch_stamp():
    clock = Clock()
    store = TraceStore(1000, clock_ns=clock)
    mono = store.stamping(lambda: 42)
    store.task_started("t")
    b, c, w = phases("t")
    clock.advance_us(10)
    store.phase_started(b)
    clock.advance_us(10)
    store.phase_started(c)
    store.calls_queued("t", 2)
    clock.advance_us(10)
    assert mono() == 42                     # one clock read per actor batch stamps the calls
    store.call_sent(sent("t", "t/0"))
    store.call_sent(sent("t", "t/1", "exec-1"))
    clock.advance_us(100)                   # no stamp: the same batch
    store.call_sent(sent("t", "t/0/sub-1", parent="t/0"))
    mono()
    store.subcall("t", "t/0", "t/0/sub-1")
    store.io_wait({"taskId": "t", "backend": "devstub"}, "t/1", 1)
    clock.advance_us(5)
    store.io_done("t", "t/1", True)
    mono()
    store.call_done(frame("t", budget=3), "t/1", "exec-1", "USER_ERROR")
    store.call_retry(ArmCallRetry("t/1", fire_at_ms=52, is_retry=True), 42)
    store.call_done(frame("t"), "t/0", "exec-0", "")
    store.phase_started(w)
    store.task_ended("t", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED, plugin_results=[PluginResult("log", True)]))
    ev = store.get("t").events
    assert [e[0] for e in ev] == [TASK_START, PHASE, PHASE, QUEUED, SENT, SENT, SENT, SUBCALL, IO_WAIT, IO_DONE,
                                  DONE, RETRY, DONE, PHASE, TASK_END]
    t0 = ev[0][1]
    assert [e[1] - t0 for e in ev] == [0, 10, 20, 20, 30, 30, 30, 130, 130, 135, 135, 135, 135, 135, 135]
    assert ev[1][2:] == ("builder", "callList") and ev[2][2:] == ("calls", "") and ev[13][2:] == ("plugin", "log")
    assert ev[5][2:] == ("t/1", "exec-1", 1, "", "f")
    assert ev[6][5] == "t/0"                                  # the subcall names its parent
    assert ev[10][2:] == ("t/1", "exec-1", 1, "USER_ERROR", 3)
    assert ev[11][2:] == ("t/1", 10, True)                     # backoff = fire_at - now
    assert ev[14][2] == "SUCCEEDED"
    assert store.get("t").ended and not store.get("t").sampled


def test_events_of_unknown_tasks_are_ignored():
    store = TraceStore(1000)
    store.call_sent(sent("nobody", "nobody/0"))
    store.call_done(frame("nobody"), "nobody/0", "exec-0", "")
    store.call_retry(ArmCallRetry("nobody/0", 0, True), 0)
    store.io_wait({"taskId": "nobody"}, "nobody/0", 1)
    store.task_ended("nobody", "FAILED", TaskResult(TaskState.FAILED))
    assert len(store) == 0 and store.get("nobody") is None


def test_a_retry_finds_its_task_even_when_the_task_id_holds_slashes():
    store = TraceStore(1000)
    store.task_started("a/b")
    store.call_retry(ArmCallRetry("a/b/3/sub-2", 5, True), 0)
    assert [e[0] for e in store.get("a/b").events] == [TASK_START, RETRY]


def test_a_retry_of_a_task_whose_id_extends_another_tasks_id_lands_in_its_own_trace():
    store = TraceStore(1000)
    store.task_started("a")
    store.task_started("a/0")
    for call_id in ("a/0/0", "a/0/1.4", "a/0/0/sub-1/sub-2"):     # calls of task "a/0"
        store.call_retry(ArmCallRetry(call_id, 5, True), 0)
    store.call_retry(ArmCallRetry("a/0/sub-3", 5, True), 0)       # a subcall of task "a"'s call "a/0"
    assert [e[0] for e in store.get("a/0").events] == [TASK_START, RETRY, RETRY, RETRY]
    assert [e[0] for e in store.get("a").events] == [TASK_START, RETRY]


def test_the_cap_holds_for_a_100k_call_task_and_the_calls_are_sampled_whole():
    cap = 10_000
    store = TraceStore(cap)
    store.task_started("big")
    for ph in phases("big")[:2]:
        store.phase_started(ph)
    store.calls_queued("big", 100_000)
    peak = 0
    for i in range(100_000):
        cid = f"big/{i}"
        store.call_sent(sent("big", cid, f"exec-{i % 2}"))
        if i % 1000 == 0:
            store.subcall("big", cid, cid + "/sub-1")
            store.call_sent(sent("big", cid + "/sub-1", parent=cid))
            store.call_done(frame("big"), cid + "/sub-1", "exec-0", "")
        store.call_done(frame("big"), cid, f"exec-{i % 2}", "")
        peak = max(peak, len(store.get("big")))
    store.phase_started(phases("big")[2])
    store.task_ended("big", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    tr = store.get("big")
    assert peak <= cap and len(tr.events) <= cap
    assert tr.sampled and tr.sample_every >= 16 and tr.truncated == 0
    total = 100_000 * 2 + 100 * 3 + 6          # calls, subcall trees, task-level events
    assert tr.dropped == total - len(tr.events)
    by_call: dict[str, set] = {}
    for e in tr.events:
        if e[0] in (SENT, DONE):
            by_call.setdefault(e[2], set()).add(e[0])
    assert all(kinds == {SENT, DONE} for kinds in by_call.values()), "a kept call keeps all its events"
    kept = sorted(int(c.split("/")[1]) for c in by_call if c.count("/") == 1)
    # a uniform sample over the whole task, not its first calls only
    assert len(kept) > cap // 8
    assert sum(1 for i in kept if i >= 50_000) > len(kept) // 3
    for c in by_call:                            # a kept subcall's root call is kept too
        if "/sub-" in c:
            assert c.rsplit("/", 1)[0] in by_call
    kinds = [e[0] for e in tr.events]
    assert kinds[:4] == [TASK_START, PHASE, PHASE, QUEUED] and kinds[-2:] == [PHASE, TASK_END]


def test_task_level_events_past_the_cap_are_dropped_and_counted_as_truncation():
    store = TraceStore(100)
    store.task_started("t")
    for i in range(500):
        store.calls_queued("t", 1, i)
    store.phase_started(phases("t")[0])          # a phase is always kept
    tr = store.get("t")
    assert len(tr.events) <= 100
    assert tr.truncated > 0 and tr.dropped == tr.truncated
    assert tr.events[-1][0] == PHASE


def test_an_executor_loss_reaches_every_running_task():
    store = TraceStore(1000)
    store.task_started("a")
    store.task_started("b")
    store.task_ended("b", "FAILED", TaskResult(TaskState.FAILED))
    store.executor_lost("exec-1", "connection closed")
    assert store.get("a").events[-1][0] == LOST and store.get("a").events[-1][2:] == ("exec-1", "connection closed")
    assert store.get("b").events[-1][0] == TASK_END


def test_traces_go_with_their_tasks_retained_result():
    store = TraceStore(1000)
    known = {"a", "b", "c"}
    for tid in ("a", "b", "c"):
        store.task_started(tid)
    store.task_ended("a", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    store.task_ended("b", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    assert store.forget_purged(lambda t: t if t in known else None) == 0
    known.discard("a")                           # the core purged a's result
    assert store.forget_purged(lambda t: t if t in known else None) == 1
    assert store.get("a") is None and store.get("b") is not None and store.get("c") is not None
    known.discard("c")                           # c is running: the core forgets nothing of it, it stays
    known.discard("b")
    assert store.forget_purged(lambda t: t if t in known else None) == 1
    assert store.get("b") is None and store.get("c") is not None and len(store) == 1
    # a task id used again after its purge starts a new trace, which stays until its own purge
    store.task_started("a")
    known.add("a")
    store.task_ended("a", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    assert store.forget_purged(lambda t: t if t in known else None) == 0 and store.get("a") is not None


def test_a_cap_below_the_minimum_is_refused():
    import pytest
    with pytest.raises(ValueError, match="max_events must be >= 100"):
        TraceStore(10)


def test_waits_from_odd_frames_are_skipped_not_raised():
    # The IO wait hook runs before the wait is served: raising there would leave the call waiting.
    store = TraceStore(1000)
    store.task_started("t")
    store.io_wait({"taskId": "t", "backend": 3}, 42, 1)
    store.io_wait({"taskId": ["t"]}, "t/0", 1)
    store.io_done("t", None, True)
    store.io_wait({"taskId": "t", "backend": 3}, "t/0", "x")
    assert [e[0] for e in store.get("t").events] == [TASK_START, IO_WAIT]
    assert store.get("t").events[1][2:] == ("t/0", 0, "3")


def test_ended_traces_are_bounded_by_the_retained_budget_oldest_first():
    # Defect: at ~7k one-call tasks/s and the default 300 s retention, ended traces
    # (~2 KB each) would have held gigabytes. Ended traces now share a budget of
    # events (each counted at least RETAINED_FLOOR_EVENTS for its fixed overhead).
    from blockx.adapters.telemetry.trace_recorder import RETAINED_FLOOR_EVENTS
    budget = RETAINED_FLOOR_EVENTS * 50
    store = TraceStore(1000, retained_max_events=budget)
    for i in range(500):
        tid = f"t{i}"
        store.task_started(tid)
        store.task_ended(tid, "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    assert len(store) == 50 and store.evicted == 450
    assert store.get("t449") is None and store.get("t450") is not None and store.get("t499") is not None
    assert store.retained_events <= budget
    # a running task's trace is never evicted, however many end after it
    store.task_started("running")
    for i in range(500, 700):
        store.task_started(f"t{i}")
        store.task_ended(f"t{i}", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    assert store.get("running") is not None and len(store) == 51
    # the purge path keeps the accounting: forgetting every ended task empties the budget
    assert store.forget_purged(lambda t: None) == 50
    assert store.retained_events == 0 and len(store) == 1


def test_a_big_ended_trace_counts_its_events_against_the_budget():
    from blockx.adapters.telemetry.trace_recorder import RETAINED_FLOOR_EVENTS
    store = TraceStore(1000, retained_max_events=RETAINED_FLOOR_EVENTS * 40)
    store.task_started("big")
    for i in range(400):       # 800 events, under the per-task cap of 1000
        store.call_sent(sent("big", f"big/{i}"))
        store.call_done(frame("big"), f"big/{i}", "exec-0", "")
    store.task_ended("big", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    assert store.retained_events >= 800 > RETAINED_FLOOR_EVENTS * 40 // 2
    for i in range(30):      # small ones after it push the big, oldest one out
        store.task_started(f"s{i}")
        store.task_ended(f"s{i}", "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    assert store.get("big") is None and store.get("s29") is not None
    assert store.retained_events <= RETAINED_FLOOR_EVENTS * 40


def test_a_retained_budget_below_one_trace_is_refused():
    import pytest
    from blockx.adapters.telemetry.trace_recorder import RETAINED_FLOOR_EVENTS
    with pytest.raises(ValueError, match="retained_max_events"):
        TraceStore(1000, retained_max_events=RETAINED_FLOOR_EVENTS - 1)


def test_retained_traces_leave_nothing_for_the_cyclic_gc_to_scan(monkeypatch):
    # Thousands of ended traces are retained at once: each tracked object they kept
    # (an event tuple, a (trace, weight) pair) counted towards the next collection
    # and was scanned by it. With the compiled buffers they keep none. (The store
    # runs on the compiled buffers in both test runs: the twin's TraceBuffer is a
    # plain object, tracked by design.)
    import gc

    from blockx.adapters.telemetry import trace_recorder
    tb = compiled("tracebuf")
    monkeypatch.setattr(trace_recorder, "TraceBuffer", tb.TraceBuffer)
    monkeypatch.setattr(trace_recorder, "CallRecorder", tb.CallRecorder)
    store = TraceStore(10_000, Clock())
    gc.collect()
    n0 = len(gc.get_objects())
    for i in range(300):
        tid = f"t{i}"
        store.task_started(tid)
        for cmd in phases(tid):
            store.phase_started(cmd)
        store.calls_queued(tid, 1)
        store.call_sent(sent(tid, f"{tid}/0"))
        store.call_done(frame(tid), f"{tid}/0", "exec-0", "")
        store.task_ended(tid, "SUCCEEDED", TaskResult(TaskState.SUCCEEDED))
    gc.collect()
    assert len(store) == 300
    assert len(gc.get_objects()) - n0 < 30
