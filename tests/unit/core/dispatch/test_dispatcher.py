"""The whole DispatcherCore through the fake adapter (harness.py): the harness
itself, task_progress (the read-only (total, done, failed, retried) of a task's
root calls that the adapters' progress updates carry), and random schedules.

The random schedules: tasks with duplicate keys (cache / singleflight),
completions, retryable and final failures, bind failures, executor loss and
return, capacity changes, subcalls (whose keys may match roots and each other:
subcall singleflight), cancellations and time. Invariants after every step: no
task has more root calls in flight than its window, no executor more root calls
than executor_max_inflight, the core's local_inflight equals the reservations
the adapter holds, a converged or cancelled task has nothing in flight, a task
converges at most once, a subcall waiting on a singleflight leader waits on one
that is live (a running root, or a subcall not DONE) under a running parent,
nothing waits on itself (the wait graph of children and leaders has no cycle),
and every subcall answer (SubcallDone) is the one its key's function gives. At teardown everything is driven to
quiescence and each surviving task must have converged exactly once with the
outputs an independent oracle predicts (call-list order, failed roots skipped)."""
from __future__ import annotations

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from blockx.core.dispatch.types import RetryPolicy
from blockx.core.dispatch.commands import BindCall
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.records import DONE, READY, RUNNING, WAITING
from blockx.core.dispatch.types import PinnedCall, RetryPolicy
from blockx.core.dispatch.commands import BindCall
from blockx.core.dispatch.types import PinnedCall

from tests.unit.core.dispatch.harness import Harness, spec
from tests.unit.core.dispatch.harness import Harness


def test_progress_of_a_call_list_counts_done_failed_and_retries():
    h = Harness(contexts=8)
    assert h.core.tasks.progress("t") is None
    h.submit("t", [spec("f", i) for i in range(4)], policy="CONTINUE", retry=RetryPolicy(2, 10, 0))
    assert h.core.tasks.progress("t") == (4, 0, 0, 0)
    h.complete("t/0")
    assert h.core.tasks.progress("t") == (4, 1, 0, 0)
    h.fail("t/1", retryable=True)                 # first attempt: retried, not done
    assert h.core.tasks.progress("t") == (4, 1, 0, 1)
    h.advance(10)
    h.fail("t/1", retryable=True)                 # second and last attempt: a failed root
    assert h.core.tasks.progress("t") == (4, 2, 1, 1)
    h.complete("t/2")
    h.complete("t/3")
    assert h.core.tasks.progress("t") == (4, 4, 1, 1)
    assert "t" in h.converged
    h.run(h.core.lifecycle.remove_task("t"))
    assert h.core.tasks.progress("t") is None


def test_progress_of_a_stream_has_no_total_until_production_ends():
    h = Harness(contexts=8)
    h.feed(h.core.intake.commit_call_stream("s", "FAST_FAIL", None, "", h.now))
    assert h.core.tasks.progress("s") == (0, 0, 0, 0)
    h.feed(h.core.intake.commit_call_batch(h.core.intake.prepare_call_batch("s", 0, [spec("f", 0), spec("f", 1)]), h.now))
    h.complete("s/0.0")
    assert h.core.tasks.progress("s") == (0, 1, 0, 0)
    h.feed(h.core.intake.production_done("s", h.now))
    assert h.core.tasks.progress("s") == (2, 1, 0, 0)
    h.complete("s/0.1")
    assert h.core.tasks.progress("s") == (2, 2, 0, 0)


def test_fast_fail_drain_counts_cancelled_roots_as_done():
    h = Harness(contexts=1)                        # one in flight at a time: the rest wait
    h.submit("t", [spec("f", 0), spec("f", 1), spec("f", 2)])
    h.fail("t/0")
    total, done, failed, retried = h.core.tasks.progress("t")
    assert (total, done, failed, retried) == (3, 3, 1, 0)


WINDOW = 3


MAX_INFLIGHT = 4


EXECUTORS = ("e1", "e2")


POISON = "p"   # a root of this function always fails with a user error


def _output(function_id: str, args_json: bytes) -> bytes:
    return b'{"' + function_id.encode() + b'":' + args_json + b"}"


def _wait_cycle(calls) -> bool:
    """A cycle among live calls of: a call waits on its children, a subcall
    waiter on its leader."""
    def edges(c):
        out = [x for x in (c.children or {}).values() if x.state != DONE]
        if c.parent is not None and c.leader is not None and c.state != DONE:
            out.append(c.leader)
        return out
    colour: dict[int, int] = {}
    for start in calls:
        if start.state == DONE or id(start) in colour:
            continue
        stack = [(start, iter(edges(start)))]
        colour[id(start)] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[id(node)] = 2
                stack.pop()
            elif colour.get(id(nxt)) == 1:
                return True
            elif id(nxt) not in colour:
                colour[id(nxt)] = 1
                stack.append((nxt, iter(edges(nxt))))
    return False


class DispatcherMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.h = Harness(DispatcherConfig(task_max_inflight_calls=WINDOW,
                                          executor_max_inflight=MAX_INFLIGHT,
                                          base_backoff_ms=10, default_retry_jitter_percent=5),
                         rand=lambda: 0.5, executors=EXECUTORS, contexts=3)
        self.tasks: dict[str, tuple[str, list[PinnedCall]]] = {}
        self.cancelled: set[str] = set()
        self.lost: set[str] = set()
        self.hb = 1
        self.n = 0
        self.requests = 0
        self.seen_done = 0
        self.expected: dict[str, tuple[str, bytes]] = {}   # request id -> (function, args)
        self.answered: set[str] = set()
        # Count every root's transitions into DONE at the single accounting point.
        self.done_counts: dict[str, int] = {}
        core = self.h.core

        def counting(ctx):      # the CallLifecycle calls it as ctx enters DONE
            assert ctx.state != DONE
            if ctx.parent is None:
                self.done_counts[ctx.call_id] = self.done_counts.get(ctx.call_id, 0) + 1

        core.lifecycle.on_terminal = counting

    # --- rules ---------------------------------------------------------------------

    @rule(keys=st.lists(st.tuples(st.sampled_from(["f", "g", POISON]), st.integers(0, 2)),
                        min_size=0, max_size=6),
          policy=st.sampled_from(["FAST_FAIL", "CONTINUE"]),
          instance=st.sampled_from(["", "A", "B"]))
    def add_task(self, keys, policy, instance):
        self.n += 1
        tid = f"t{self.n}"
        calls = [PinnedCall(fn, "d", orjson.dumps([a])) for fn, a in keys]
        self.tasks[tid] = (policy, calls)
        self.h.submit(tid, calls, policy, RetryPolicy(10_000, 0, 5), instance)

    def _pick_live(self, i):
        live = sorted(self.h.live)
        return live[i % len(live)] if live else None

    @precondition(lambda self: self.h.live)
    @rule(i=st.integers(0, 100))
    def finish_call(self, i):
        self._finish(self._pick_live(i))

    def _finish(self, cid):
        cmd = self.h.live[cid]
        if cmd.function_id == POISON:
            self.h.fail(cid, "USER_ERROR", False, "poison")
        else:
            self.h.complete(cid, output=_output(cmd.function_id, cmd.args_json))

    @precondition(lambda self: self.h.live)
    @rule(i=st.integers(0, 100), kind=st.sampled_from(["EXECUTOR_LOST", "OUTBOX_FULL",
                                                         "RESUME_SEND_FAILED"]))
    def retryable_failure(self, i, kind):
        self.h.fail(self._pick_live(i), kind, True, "transient")

    @precondition(lambda self: self.h.live)
    @rule(i=st.integers(0, 100), fn=st.sampled_from(["s", "f", "g", POISON]), a=st.integers(0, 2),
          waiting=st.booleans())
    def request_subcall(self, i, fn, a, waiting):
        # Digest "d", as the roots': a subcall f(1) has the key of a root f(1).
        cid = self._pick_live(i)
        cmd = self.h.live[cid]
        if waiting:
            self.h.core.lifecycle.handle_call_waiting(cid, cmd.attempt_seq, self.h.now)
        self._ask(cid, fn, a)

    def _ask(self, cid, fn, a):
        cmd = self.h.live[cid]
        self.requests += 1
        rid = f"r{self.requests}"
        args = orjson.dumps([a])
        self.expected[rid] = (fn, args)
        _, cmds = self.h.core.lifecycle.add_subcall(cid, cmd.executor_id, rid, fn, "d", args, 100,
                                          self.h.now)
        self.h.feed(cmds)

    @precondition(lambda self: len(self.h.live) > 1)
    @rule(i=st.integers(0, 100), j=st.integers(1, 100), fn=st.sampled_from(["s", "f", POISON]),
          a=st.integers(0, 1))
    def two_calls_ask_alike(self, i, j, fn, a):
        # The same subcall from two live calls at once: the second waits on the first.
        live = sorted(self.h.live)
        first = live[i % len(live)]
        second = live[(i + j) % len(live)]
        self._ask(first, fn, a)
        if second != first and second in self.h.live:
            self._ask(second, fn, a)

    def _parents_with_live_children(self):
        live = self.h.live
        return sorted({c.parent_call_id for c in live.values()
                       if c.parent_call_id and c.parent_call_id in live})

    @precondition(lambda self: self._parents_with_live_children())
    @rule(i=st.integers(0, 100), how=st.sampled_from(["retry", "complete", "lose"]))
    def end_a_parent_attempt(self, i, how):
        parents = self._parents_with_live_children()
        cid = parents[i % len(parents)]
        if how == "retry":
            self.h.fail(cid, "RESUME_SEND_FAILED", True, "resume lost")
        elif how == "complete":
            self._finish(cid)
        else:
            eid = self.h.live[cid].executor_id
            if eid not in self.lost:
                self.lost.add(eid)
                self.h.lose(eid)

    @rule(eid=st.sampled_from(EXECUTORS))
    def toggle_bind_failures(self, eid):
        self.h.fail_binds ^= {eid}
        self.h.epilogue()

    @precondition(lambda self: len(self.lost) < len(EXECUTORS))
    @rule(eid=st.sampled_from(EXECUTORS))
    def lose_executor(self, eid):
        if eid not in self.lost:
            self.lost.add(eid)
            self.h.lose(eid)

    @rule(eid=st.sampled_from(EXECUTORS), contexts=st.integers(0, 6), healthy=st.booleans())
    def executor_heartbeat(self, eid, contexts, healthy):
        self.lost.discard(eid)
        self.hb += 1
        self.h.set_executor(eid, usable_contexts=contexts, healthy=healthy, heartbeat_seq=self.hb)

    @rule(ms=st.integers(0, 40))
    def advance(self, ms):
        self.h.advance(ms)

    @precondition(lambda self: self.tasks)
    @rule(i=st.integers(0, 100))
    def cancel_task(self, i):
        ids = sorted(self.tasks)
        tid = ids[i % len(ids)]
        self.h.run(self.h.core.lifecycle.cancel_task(tid, "cancelled", self.h.now))
        self.h.epilogue()
        if tid not in self.h.converged:
            self.cancelled.add(tid)
        del self.tasks[tid]

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def the_dispatchers_own_invariants_hold(self):
        self.h.core.validate_state()

    @invariant()
    def windows_and_capacity_hold(self):
        per_task: dict[str, int] = {}
        per_exec: dict[str, int] = {}
        for cmd in self.h.live.values():
            if not cmd.parent_call_id:
                per_task[cmd.task_id] = per_task.get(cmd.task_id, 0) + 1
                per_exec[cmd.executor_id] = per_exec.get(cmd.executor_id, 0) + 1
        assert all(n <= WINDOW for n in per_task.values()), per_task
        assert all(n <= MAX_INFLIGHT for n in per_exec.values()), per_exec

    @invariant()
    def local_inflight_matches_reservations(self):
        held: dict[str, int] = {}
        for eid in self.h.bound.values():
            held[eid] = held.get(eid, 0) + 1
        for eid in EXECUTORS:
            view = self.h.core.executors.view(eid)
            if view is None:
                assert held.get(eid, 0) == 0
            else:
                assert view.local_inflight == held.get(eid, 0), (eid, view, held)

    @invariant()
    def subcalls_run_under_a_live_parent_attempt(self):
        live = self.h.live
        for cid, cmd in live.items():
            if cmd.parent_call_id:
                parent = live.get(cmd.parent_call_id)
                assert parent is not None, f"{cid} outlived its parent's attempt"
                assert parent.executor_id == cmd.executor_id
        for done in self.h.subcall_done[self.seen_done:]:
            parent = live.get(done.parent_call_id)
            assert parent is not None and parent.attempt_seq == done.parent_attempt_seq, done
        self.seen_done = len(self.h.subcall_done)

    @invariant()
    def subcall_answers_are_their_functions_once(self):
        for done in self.h.subcall_done:
            if done.request_id in self.answered:
                continue
            self.answered.add(done.request_id)
            fn, args = self.expected[done.request_id]
            if done.ok:
                assert done.output_json == _output(fn, args), (done, fn, args)
            elif done.child_error_kind == "USER_ERROR":
                assert fn == POISON, done
        assert len({d.child_call_id for d in self.h.subcall_done}) == len(self.h.subcall_done)

    @invariant()
    def subcall_waiters_wait_on_live_leaders_without_cycles(self):
        calls = list(self.h.core.calls.by_id.values())
        for c in calls:
            if c.parent is None or c.leader is None or c.state == DONE:
                continue
            lead = c.leader
            assert c.state == READY and not c.parked, c
            assert lead.state != DONE and c in (lead.waiters or []), (c, lead)
            if lead.parent is None:
                assert lead.state in (RUNNING, WAITING), (c, lead)
            assert c.parent.state in (RUNNING, WAITING) and c.call_id in (c.parent.children or {}), c
        assert not _wait_cycle(calls)

    @invariant()
    def roots_end_done_at_most_once(self):
        assert all(n == 1 for n in self.done_counts.values()), self.done_counts

    @invariant()
    def finished_tasks_have_nothing_in_flight(self):
        for tid in list(self.h.converged) + list(self.cancelled):
            assert not self.h.live_of(tid), (tid, self.h.live_of(tid))
        assert all(n == 1 for n in self.h.converge_count.values())
        assert not (self.cancelled & set(self.h.converged))

    # --- teardown: drive to quiescence and check every outcome -------------------------

    def teardown(self):
        h = self.h
        h.fail_binds.clear()
        for eid in EXECUTORS:
            self.hb += 1
            h.set_executor(eid, usable_contexts=8, healthy=True, heartbeat_seq=self.hb)
        for _ in range(500):
            if h.live:
                self._finish(sorted(h.live)[0])
            elif h.timers:
                h.advance(h.timers[0][0] - h.now)
            else:
                break
        assert not h.live and not h.timers
        for tid, (policy, calls) in self.tasks.items():
            assert h.converge_count.get(tid) == 1, f"{tid} did not converge exactly once"
            c = h.converged[tid]
            assert c.call_count == len(calls)
            assert [self.done_counts.get(f"{tid}/{i}") for i in range(len(calls))] == \
                [1] * len(calls), f"{tid}: a root did not end DONE exactly once"
            poisoned = sum(s.function_id == POISON for s in calls)
            if (policy == "FAST_FAIL" and poisoned) or (calls and poisoned == len(calls)):
                assert not c.ok and c.failure_code == "CALL_FAILED" and c.outputs == []
            else:
                assert c.ok, c
                assert c.outputs == [_output(s.function_id, s.args_json) for s in calls
                                     if s.function_id != POISON]
                assert c.calls_failed == sum(s.function_id == POISON for s in calls)
        for eid in EXECUTORS:
            assert h.core.executors.view(eid).local_inflight == 0
        assert not h.bound
        assert h.core.subcalls.parked_ids() == []
        assert all(c.state == DONE for c in h.core.calls.by_id.values() if c.parent is not None)
        # Binds only ever went to executors that existed.
        assert {c.executor_id for c in h.log if type(c) is BindCall} <= set(EXECUTORS)


TestDispatcherMachine = DispatcherMachine.TestCase


TestDispatcherMachine.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])


def test_harness_runs_a_task_to_convergence():
    h = Harness()
    h.submit("t", [spec("f", i) for i in range(3)])
    assert sorted(h.live) == ["t/0", "t/1", "t/2"]
    for cid in list(h.live):
        h.complete(cid)
    c = h.converged["t"]
    assert c.ok and c.outputs == [b'{"r":[0]}', b'{"r":[1]}', b'{"r":[2]}']
    assert h.bound == {}


def test_harness_fires_timers_exactly_at_their_deadline():
    h = Harness(DispatcherConfig(base_backoff_ms=100, default_retry_jitter_percent=0))
    h.submit("t", [spec("f", 1)])
    h.fail("t/0", "EXECUTOR_LOST", True)
    assert h.timers == [(100, 1, "t/0")]
    h.advance(99)
    assert "t/0" not in h.live
    h.advance(1)
    assert h.now == 100 and h.attempt("t/0") == 2
