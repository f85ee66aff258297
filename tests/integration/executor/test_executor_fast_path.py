"""The executor's fast path, driven in-process over a socketpair: fresh calls run
back to back in one pooled runner greenlet, so a call that never calls the SDK
costs no greenlet switch of its own; a call that suspends keeps its runner, and
budgets, cancellation and error mapping are what they always were. Switches are
counted with greenlet.settrace."""

import time

import greenlet
import pytest

from blockx.protocol import messages as m
from blockx_executor.code_cache import source_digest

from . import functions as fn
from .test_executor_scheduler_inproc import make_scheduler, read_frames
from .fake_worker import codec


class SwitchCount:
    def __init__(self):
        self.n = 0

    def __enter__(self):
        self.prev = greenlet.settrace(self._trace)
        return self

    def _trace(self, event, args):
        if event in ("switch", "throw"):
            self.n += 1

    def __exit__(self, *exc):
        greenlet.settrace(self.prev)


def loaded(**kw):
    s, peer = make_scheduler(**kw)
    digests = {}
    for name, src in (("add", fn.ADD), ("io", fn.WORK_THEN_IO), ("sub", fn.WORK_THEN_CALL),
                      ("sleep", fn.SLEEP), ("spin", fn.SPIN), ("rb", fn.RAISE_BEFORE_IO),
                      ("ra", fn.RAISE_AFTER_IO)):
        d = source_digest(src)
        s.code.add(name, d, src, d)
        digests[name] = d
    return s, peer, codec.FrameDecoder(), digests


def execs(digests, calls, **kw):
    return [(m.execute_call(cid, "t", f, digests[f], args, 1, **kw), None) for cid, f, args in calls]


def by_id(frames):
    return {env["callId"]: env for env, _ in frames}


def test_calls_that_never_suspend_cost_two_switches_per_run_phase_not_per_call():
    s, peer, dec, d = loaded()
    s.handle_frames(execs(d, [(f"c{i}", "add", [i, 1]) for i in range(200)]))
    with SwitchCount() as sw:
        s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 200))
    assert {cid: e["payload"]["output"] for cid, e in out.items()} == {f"c{i}": i + 1 for i in range(200)}
    assert all(e["messageType"] == m.CALL_COMPLETED for e in out.values())
    assert sw.n == 2          # hub -> runner, runner -> hub
    assert len(s.idle) == 1 and s.inflight == 0 and not s.calls


def test_only_the_calls_that_suspend_pay_switches_and_keep_their_runner():
    s, peer, dec, d = loaded()
    calls = [("a0", "add", [1, 1]), ("io1", "io", [1]), ("a2", "add", [2, 2]), ("sub3", "sub", [5]),
             ("a4", "add", [4, 4])]
    s.handle_frames(execs(d, calls))
    with SwitchCount() as sw:
        s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 5))
    # two suspensions: hub->r1, r1 suspends (io1), hub->r2, r2 suspends (sub3), hub->r3, r3 parks
    assert sw.n == 6
    assert [out[c]["messageType"] for c in ("a0", "io1", "a2", "sub3", "a4")] == [
        m.CALL_COMPLETED, m.CALL_WAITING, m.CALL_COMPLETED, m.CALL_WAITING, m.CALL_COMPLETED]
    assert out["sub3"]["payload"]["args"] == [10, 1] and out["io1"]["payload"]["request"] == {"op": "echo", "x": 1}
    assert s.calls["io1"].greenlet is not s.calls["sub3"].greenlet
    assert len(s.idle) == 1
    # resuming: the call finishes in its own runner, which then parks in the pool
    s.handle_frames([(m.resume_call_result("io1", out["io1"]["requestId"], "io", "x"), None),
                     (m.resume_call_result("sub3", out["sub3"]["requestId"], "subcall", 11, 0), None)])
    with SwitchCount() as sw:
        s.run_ready()
    s.conn.flush()
    done = by_id(read_frames(peer, dec, 2))
    assert done["io1"]["payload"]["output"] == [499500, "x"] and done["sub3"]["payload"]["output"] == 11
    assert sw.n == 4 and len(s.idle) == 3 and not s.calls and s.inflight == 0


def test_a_resumed_call_carries_on_with_the_fresh_calls_of_its_phase():
    s, peer, dec, d = loaded()
    s.handle_frames(execs(d, [("io1", "io", [1])]))
    s.run_ready()
    s.conn.flush()
    w = by_id(read_frames(peer, dec, 1))["io1"]
    s.handle_frames([(m.resume_call_result("io1", w["requestId"], "io", 0), None)]
                    + execs(d, [(f"c{i}", "add", [i, 0]) for i in range(50)]))
    with SwitchCount() as sw:
        s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 51))
    assert out["io1"]["payload"]["output"] == [499500, 0] and out["c49"]["payload"]["output"] == 49
    assert sw.n == 2          # into io1's runner; it ran io1 and the 50 fresh calls, then parked


def test_exceptions_before_and_after_suspending_map_as_before():
    s, peer, dec, d = loaded()
    s.handle_frames(execs(d, [("rb", "rb", [7]), ("ra", "ra", [8]), ("ok", "add", [1, 2])]))
    s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 3))
    rb = out["rb"]["payload"]
    assert out["rb"]["messageType"] == m.CALL_FAILED and rb["errorKind"] == "USER_ERROR"
    assert "before suspending: 7" in rb["errorMessage"] and "KeyError" in rb["errorStack"]
    assert out["ok"]["payload"]["output"] == 3 and out["ra"]["messageType"] == m.CALL_WAITING
    s.handle_frames([(m.resume_call_result("ra", out["ra"]["requestId"], "io", {"k": 1}), None)])
    s.run_ready()
    s.conn.flush()
    ra = by_id(read_frames(peer, dec, 1))["ra"]
    assert ra["messageType"] == m.CALL_FAILED and ra["payload"]["errorKind"] == "USER_ERROR"
    assert "after resuming with {'k': 1}" in ra["payload"]["errorMessage"]
    assert len(s.idle) == 2 and not s.calls     # ra's runner and the one that ran "ok"


def test_cancel_while_suspended_unwinds_that_call_only():
    s, peer, dec, d = loaded()
    s.handle_frames(execs(d, [("io1", "io", [1]), ("a", "add", [1, 1])]))
    s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 2))
    assert out["a"]["payload"]["output"] == 2
    s.handle_frames([(m.cancel_call("io1", 1, "task deadline"), None)]
                    + execs(d, [("b", "add", [2, 2])]))
    s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 2))
    p = out["io1"]["payload"]
    assert out["io1"]["messageType"] == m.CALL_FAILED and p["errorKind"] == "CANCELLED"
    assert "task deadline" in p["errorMessage"] and out["b"]["payload"]["output"] == 4
    # a late resume is dropped; nothing is live
    s.handle_frames([(m.resume_call_result("io1", "1", "io", 0), None)])
    s.run_ready()
    assert not s.calls and s.inflight == 0 and not s.ready


def test_budget_figures_count_compute_and_sleep_not_queueing():
    s, peer, dec, d = loaded(max_inflight=1)
    s.handle_frames(execs(d, [("spin", "spin", [40]), ("q", "add", [1, 1])], call_budget_ms=10_000))
    s.run_ready()               # spin runs 40 ms; its end admits q (one context)
    s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 2))
    assert 40 <= out["spin"]["payload"]["budgetUsedMs"] < 1000
    assert out["q"]["payload"]["budgetUsedMs"] < 20    # its 40 ms queued behind spin are not charged
    s.handle_frames(execs(d, [("sl", "sleep", [60])], call_budget_ms=10_000))
    s.run_ready()
    t_end = time.monotonic() + 5
    while "sl" in s.calls and time.monotonic() < t_end:
        time.sleep(0.005)
        s.fire_timers()
        s.run_ready()
    s.conn.flush()
    sl = by_id(read_frames(peer, dec, 1))["sl"]["payload"]
    assert sl["output"] == "woke" and 60 <= sl["budgetUsedMs"] < 1000


def test_budget_exceeded_by_a_call_that_never_suspends():
    s, peer, dec, d = loaded()
    s.handle_frames(execs(d, [("spin", "spin", [30]), ("a", "add", [1, 1])], call_budget_ms=10))
    s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 2))
    assert out["spin"]["payload"]["errorKind"] == "BUDGET_EXCEEDED"
    assert out["a"]["payload"]["output"] == 2


def test_execute_call_batch_runs_every_element_like_single_frames():
    s, peer, dec, d = loaded()
    batch = m.execute_call_batch([e for e, _ in execs(d, [(f"c{i}", "add", [i, i]) for i in range(5)])])
    single = execs(d, [("s", "add", [9, 9])])
    s.handle_frames(dec.feed(codec.encode_frame(batch)) + single)
    s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, codec.FrameDecoder(), 6))
    assert {c: e["payload"]["output"] for c, e in out.items()} == {
        "c0": 0, "c1": 2, "c2": 4, "c3": 6, "c4": 8, "s": 18}


def test_a_bad_batch_element_rejects_the_whole_batch():
    s, peer, dec, d = loaded()
    good = [e for e, _ in execs(d, [("c0", "add", [1, 1])])]
    bad = {"messageType": "ExecuteCall", "callId": "c1", "payload": {"taskId": "t"}}
    with pytest.raises(m.ProtocolError, match="element 1"):
        s.handle_frames(codec.FrameDecoder().feed(codec.encode_frame(m.execute_call_batch(good + [bad]))))
    assert not s.calls and not s.ready


ENTRIES = '''
class Handler:
    @staticmethod
    def run(x):
        return ["dotted", x]

def main(x):
    return ["main", x]

CONSTANT = 42

def __getattr__(name):
    if name == "dynamic":
        return lambda x: ["dynamic", x]
    raise AttributeError(name)
'''


@pytest.mark.parametrize("selector, outcome", [
    ("main", ("ok", ["main", 1])),
    ("", ("ok", ["main", 1])),                       # empty selector: main
    ("Handler.run", ("ok", ["dotted", 1])),
    ("dynamic", ("ok", ["dynamic", 1])),             # a module __getattr__ (PEP 562)
    ("CONSTANT", ("FUNCTION_NOT_FOUND", "is a int, not a callable")),
    ("missing", ("FUNCTION_NOT_FOUND", "has no entry point 'missing'")),
    ("Handler.nope", ("FUNCTION_NOT_FOUND", "has no entry point 'Handler.nope'")),
])
def test_entry_selectors_resolve_the_same_on_every_call(selector, outcome):
    s, peer, dec, d = loaded()
    de = source_digest(ENTRIES)
    s.code.add("entries", de, ENTRIES, de)
    for round_ in range(2):                          # the module is loaded by the first call
        s.handle_frames([(m.execute_call(f"c{round_}", "t", "entries", de, [1], 1, selector), None)])
        s.run_ready()
        s.conn.flush()
        env = by_id(read_frames(peer, dec, 1))[f"c{round_}"]
        if outcome[0] == "ok":
            assert env["payload"]["output"] == outcome[1]
        else:
            assert env["payload"]["errorKind"] == outcome[0] and outcome[1] in env["payload"]["errorMessage"]


def test_digest_spellings_share_one_code_entry():
    s, peer, dec, d = loaded()
    raw = d["add"]
    s.handle_frames([(m.execute_call("a", "t", "add", raw, [1, 1], 1), None),
                     (m.execute_call("b", "t", "add", "SHA256:" + raw.upper(), [2, 2], 1), None),
                     (m.execute_call("c", "t", "add", " sha256:" + raw + " ", [3, 3], 1), None)])
    s.run_ready()
    s.conn.flush()
    out = by_id(read_frames(peer, dec, 3))
    assert [out[c]["payload"]["output"] for c in "abc"] == [2, 4, 6]
    assert len(s.code) == len(d)                     # no fetch, no second copy
