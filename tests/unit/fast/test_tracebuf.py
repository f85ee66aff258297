"""Trace buffers (tracebuf), run against the compiled module and its twin: the
cap, whole-call sampling, compaction, the per-call hooks, and parity (the same
events in, the same trace out)."""
import pytest

from blockx._fast import compiled, implementations, twin
from blockx.core.dispatch.commands import DispatchCallCmd

IMPLS = implementations("tracebuf")


@pytest.fixture(params=IMPLS, ids=[label for label, _ in IMPLS])
def tb(request):
    return request.param[1]


def cmd(task_id, call_id, executor="exec-0", attempt=1, parent=""):
    return DispatchCallCmd(call_id, executor, task_id, "f", "digest", "main", b"[]", 0, attempt, parent)


def run_task(tb, n_calls, cap):
    tasks = {}
    rec = tb.CallRecorder(tasks)
    tr = tasks["t"] = tb.TraceBuffer("t", cap)
    tr.add_task_event((tb.TASK_START, 0))
    tr.add_task_event((tb.QUEUED, 0, n_calls, -1))
    for i in range(n_calls):
        rec.now_us = i
        cid = f"t/{i}"
        rec.call_sent(cmd("t", cid, f"exec-{i % 2}"))
        if i % 10 == 0:
            tr.add_call_event((tb.SUBCALL, i, cid, cid + "/sub-1"))
            rec.call_sent(cmd("t", cid + "/sub-1", parent=cid))
            rec.call_done({"taskId": "t", "attemptSeq": 1}, cid + "/sub-1", "exec-0", "")
        rec.call_done({"taskId": "t", "attemptSeq": 1, "budgetUsedMs": 2}, cid, f"exec-{i % 2}",
                      "" if i % 7 else "USER_ERROR")
    tr.add_task_event((tb.TASK_END, n_calls, "SUCCEEDED", "", "", ()))
    return tr


def test_below_the_cap_every_event_is_kept_in_order(tb):
    tr = run_task(tb, 20, 1000)
    assert not tr.sampled and tr.sample_every == 1 and tr.dropped == 0 and tr.truncated == 0
    kinds = [e[0] for e in tr.events]
    assert kinds[:3] == [tb.TASK_START, tb.QUEUED, tb.SENT] and kinds[-1] == tb.TASK_END
    assert len(tr.events) == 2 + 20 * 2 + 2 * 3 + 1
    assert tr.events[2] == (tb.SENT, 0, "t/0", "exec-0", 1, "", "f")
    done0 = next(e for e in tr.events if e[0] == tb.DONE and e[2] == "t/0")
    assert done0 == (tb.DONE, 0, "t/0", "exec-0", 1, "USER_ERROR", 2)


def test_past_the_cap_whole_call_trees_are_sampled_and_counted(tb):
    cap = 200
    tr = run_task(tb, 5000, cap)
    assert len(tr.events) <= cap and tr.sampled and tr.sample_every >= 32
    assert tr.dropped == (2 + 5000 * 2 + 500 * 3 + 1) - len(tr.events) and tr.truncated == 0
    seen = {}
    for e in tr.events:
        if e[0] in (tb.SENT, tb.DONE):
            seen.setdefault(e[2], set()).add(e[0])
            assert tr.keeps(e[2]) and tr.keeps(tr.root_of(e[2]))
    assert seen and all(v == {tb.SENT, tb.DONE} for v in seen.values())
    assert tr.root_of("t/12/sub-1/sub-4") == "t/12" and tr.root_of("t/12") == "t/12"


def test_a_call_phase_known_to_pass_the_cap_is_sampled_from_the_start(tb):
    tr = tb.TraceBuffer("t", 1000)
    tr.presample(2 * 100)                     # fits: every call recorded
    assert tr.sample_every == 1
    tr.presample(2 * 10_000)                  # 20,000 events for 992 rows: every 32nd call
    assert tr.sample_every == 32 and tr.sampled
    tasks = {"t": tr}
    rec = tb.CallRecorder(tasks)
    for i in range(10_000):
        rec.call_sent(cmd("t", f"t/{i}"))
        rec.call_done({"taskId": "t", "attemptSeq": 1}, f"t/{i}", "exec-0", "")
    assert len(tr) == 2 * 313 and tr.sample_every == 32          # calls 0, 32, 64, ...: no compaction needed
    assert tr.dropped == 20_000 - 2 * 313
    assert [e[2] for e in tr.events[:4]] == ["t/0", "t/0", "t/32", "t/32"]


def test_task_events_past_the_cap_are_truncated_but_pinned_ones_stay(tb):
    tr = tb.TraceBuffer("t", 100)
    for i in range(300):
        tr.add_task_event((tb.QUEUED, i, 1, i))
    tr.add_task_event((tb.PHASE, 300, "calls", ""))
    assert len(tr.events) <= 100 and tr.truncated == tr.dropped > 0 and tr.events[-1][0] == tb.PHASE


def test_hooks_ignore_unknown_tasks_and_malformed_task_ids(tb):
    tasks = {}
    rec = tb.CallRecorder(tasks)
    tasks["t"] = tb.TraceBuffer("t", 100)
    rec.call_sent(cmd("other", "other/0"))
    rec.call_done({"taskId": "other", "attemptSeq": 1}, "other/0", "exec-0", "")
    rec.call_done({"taskId": ["not", "a", "string"], "attemptSeq": 1}, "t/0", "exec-0", "")
    rec.call_done({"attemptSeq": 1}, "t/0", "exec-0", "")
    rec.call_done({"taskId": "t", "attemptSeq": 1}, 17, "exec-0", "")
    assert tasks["t"].events == []


def test_odd_values_from_a_frame_are_recorded_as_text_never_raised(tb):
    # A hook that raised inside the frame loop would lose the core's commands for that frame.
    tasks = {}
    rec = tb.CallRecorder(tasks)
    tr = tasks["t"] = tb.TraceBuffer("t", 100)
    rec.call_done({"taskId": "t", "attemptSeq": "one", "budgetUsedMs": [1]}, "t/0", "exec-0", 7)
    tr.add_call_event((tb.IO_WAIT, 5, "t/0", None, {"not": "a name"}))
    assert tr.events == [(tb.DONE, 0, "t/0", "exec-0", 0, "7", 0), (tb.IO_WAIT, 5, "t/0", 0, "{'not': 'a name'}")]


def test_the_compiled_module_and_its_twin_keep_the_same_trace():
    cy, py = compiled("tracebuf"), twin("tracebuf")
    a, b = run_task(cy, 3000, 300), run_task(py, 3000, 300)
    assert a.events == b.events
    assert (a.sample_every, a.dropped, a.truncated) == (b.sample_every, b.dropped, b.truncated)


def test_a_trimmed_trace_is_sealed_and_a_late_event_still_records(tb):
    tr = run_task(tb, 30, 10_000)
    before = tr.events
    tr.trim()
    assert tr.events == before                      # sealing changes nothing that is read
    # A late answer of a cancelled call, after the task ended: recorded like any other.
    rec = tb.CallRecorder({"t": tr})
    rec.call_done({"taskId": "t", "attemptSeq": 2}, "t/3/sub-9", "exec-late", "CANCELLED")
    tr.add_task_event((tb.TASK_END, 99, "FAILED", "X", "late", ()))
    after = tr.events
    assert after[:len(before)] == before and len(after) == len(before) + 2
    assert after[-2][2:] == ("t/3/sub-9", "exec-late", 2, "CANCELLED", 0)
    assert after[-1] == (tb.TASK_END, 99, "FAILED", "X", "late", ())
    tr.trim()
    assert tr.events == after


def test_retained_compiled_traces_add_nothing_for_the_cyclic_gc_to_scan():
    # Ended traces are retained by the thousand; each used to keep a list, a dict
    # and a list tracked by the GC, so every full collection scanned them all.
    import gc
    tb = compiled("tracebuf")
    gc.collect()
    n0 = len(gc.get_objects())
    traces = [run_task(tb, 3, 1_000) for _ in range(300)]
    for tr in traces:
        tr.trim()
    gc.collect()
    gc.collect()    # a tuple of tuples is untracked once its items were, one pass later
    assert len(gc.get_objects()) - n0 < 30
    assert not gc.is_tracked(traces[0])


@pytest.mark.parametrize("ev", [
    (0, 5),
    (2, 7, "builder", "callList"),
    (3, 9, 100_000, -1),
    (1, 11, "SUCCEEDED", "", "", ()),
    (10, 12, "exec-1", "heartbeat timeout"),
    (1, 13, "FAILED", "CALL_FAILED", "boom", ("plugin result",)),   # a non-empty tuple: kept as is
    (2, 14, "plugin", None),                                         # None: kept as is
    (3, 15, True, 2),                                                # a bool is not an int here
    (3, 16, 1 << 62, 0),                                             # past the row's ints
    (2, 17, "a", "b", "c", "d", "e", "f"),                           # six fields: kept as is
    (2, 18, 1.5, [1]),
])
def test_task_level_events_read_back_exactly_as_given(tb, ev):
    tr = tb.TraceBuffer("t", 100)
    tr.add_task_event(ev)
    tr.add_task_event((0, 1))
    assert tr.events == [ev, (0, 1)]
    tr.trim()
    assert tr.events == [ev, (0, 1)]
    assert [type(x) for x in tr.events[0]] == [type(x) for x in ev]


def test_compiled_and_twin_encode_task_events_alike():
    evs = [(0, 1), (2, 2, "builder", "callList"), (3, 3, 7, -1), (2, 4, "plugin", None),
           (1, 5, "SUCCEEDED", "", "", ()), (10, 6, "exec-0", "gone")]
    out = []
    for mod in (compiled("tracebuf"), twin("tracebuf")):
        tr = mod.TraceBuffer("t", 100)
        for ev in evs:
            tr.add_task_event(ev)
        out.append(tr.events)
    assert out[0] == out[1] == evs


SUBCALL_IDS = [
    "t/3/sub-1", "t/0/sub-0", "t/3/sub-4294967295",           # a root's subcall: encoded in the row
    "t/3/sub-4294967296", "t/3/sub-007", "t/3/sub-", "t/3/sub-1x", "t/3/sub-1/sub-2",
    "t/3/subx1", "t/2.5/sub-1", f"t/{1 << 29}/sub-1", "t/03/sub-1", "u/3/sub-1",   # anything else: by name
]


@pytest.mark.parametrize("child", SUBCALL_IDS)
def test_subcall_ids_read_back_exactly_whatever_their_form(tb, child):
    tasks = {}
    rec = tb.CallRecorder(tasks)
    tr = tasks["t"] = tb.TraceBuffer("t", 1000)
    rec.now_us = 7
    rec.subcall("t", "t/3", child)
    rec.call_sent(cmd("t", child, parent="t/3"))
    rec.call_done({"taskId": "t", "attemptSeq": 1}, child, "exec-0", "")
    assert tr.events == [(tb.SUBCALL, 7, "t/3", child), (tb.SENT, 7, child, "exec-0", 1, "t/3", "f"),
                         (tb.DONE, 7, child, "exec-0", 1, "", 0)]
    tr.trim()
    assert tr.events[0] == (tb.SUBCALL, 7, "t/3", child)


def test_a_roots_subcall_key_is_its_root_and_sequence_and_nothing_else(tb):
    assert tb.sub_key("t/3/sub-12", 3, 3) == tb.SUB_FLAG | (3 << 32) | 12
    for s, root, end in [("t/3/sub-012", 3, 3), ("t/3/sub-", 3, 3), ("t/3/sub-4294967296", 3, 3),
                         ("t/3/sub-1/sub-2", 3, 3), ("t/3/sup-1", 3, 3), (f"t/{1 << 29}/sub-1", 1 << 29, 11)]:
        assert tb.sub_key(s, root, end) == -1, s


def test_subcalls_are_sampled_with_their_root(tb):
    tasks = {}
    rec = tb.CallRecorder(tasks)
    tr = tasks["t"] = tb.TraceBuffer("t", 200)
    seq = 0
    for r in range(100):
        for _ in range(5):
            seq += 1
            child = f"t/{r}/sub-{seq}"
            rec.subcall("t", f"t/{r}", child)
            rec.call_sent(cmd("t", child, parent=f"t/{r}"))
            rec.call_done({"taskId": "t", "attemptSeq": 1}, child, "exec-0", "")
    assert tr.sampled and len(tr.events) <= 200
    roots = {tr.root_of(e[2]) for e in tr.events}
    assert roots and all(tr.keeps(r) for r in roots)
    per_root = {}
    for e in tr.events:
        per_root[tr.root_of(e[2])] = per_root.get(tr.root_of(e[2]), 0) + 1
    assert all(n == 15 for n in per_root.values())      # a kept root keeps all its subcalls' events
    assert tr.dropped == 1500 - len(tr.events)


def test_the_subcall_hook_ignores_unknown_tasks_and_non_string_ids(tb):
    tasks = {}
    rec = tb.CallRecorder(tasks)
    tasks["t"] = tb.TraceBuffer("t", 100)
    rec.subcall("other", "other/0", "other/0/sub-1")
    rec.subcall(["t"], "t/0", "t/0/sub-1")
    rec.subcall("t", 0, "t/0/sub-1")
    rec.subcall("t", "t/0", None)
    assert tasks["t"].events == []
