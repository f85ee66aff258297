"""WorkerCore under random event sequences (hypothesis stateful testing).

A small worker (3 slots, short TTLs and deadlines) is driven with random
RequestTaskSlot / SubmitTask / activation / phase results / timeouts / lease
expiry / Watch events / draining / time advances. A model built only from the
commands the core emitted must agree with the core, and after every step:
- the slot table and the task index agree (check_invariants);
- capacity is never negative and no slot is held by a terminal task;
- a task converges exactly once per acceptance;
- the scans report nothing while next_deadline() is in the future.
Liveness: finishing every phase, or moving past every deadline, leaves no
active task and no held slot.
"""
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from blockx.core import errors
from blockx.core.config import Config
from blockx.core.errors import WorkerError
from blockx.core.types import (ConvergeTask, PhaseOutcome, PrepareTaskActivation, SlotState,
                               StartBuilderPhase, StartCallPhase, StartPluginPhase, TaskPhase,
                               TaskState)
from blockx.core.worker.core import WorkerCore

from tests.unit.core.worker.test_support import check_invariants, req

TASK_IDS = ["a", "b", "c", "d", "e"]
TASKS = st.sampled_from(TASK_IDS)
# Events mostly target an active task (index into the active ones); the rest hit any
# id, active or not, to exercise stale and unknown-task delivery.
TARGETS = st.integers(0, 9)

NEXT_PHASE = {StartBuilderPhase: TaskPhase.BUILDER, StartCallPhase: TaskPhase.CALLS,
              StartPluginPhase: TaskPhase.PLUGIN}
MAX_TIMEOUT = 2000


class WorkerMachine(RuleBasedStateMachine):
    @initialize(grace=st.sampled_from([0, 200]), retention=st.sampled_from([0, 300]))
    def setup(self, grace, retention):
        self.w = WorkerCore(Config(task_slots=3, default_ttl_ms=300, task_deadline_ms=1000,
                                   max_task_timeout_ms=MAX_TIMEOUT, result_retention_ms=retention,
                                   watch_disconnect_grace_ms=grace))
        self.now = 0
        self.model: dict[str, TaskPhase] = {}     # phase per accepted task, from commands only
        self.accepted = 0
        self.converged = 0

    # ---- command bookkeeping ------------------------------------------------------

    def apply(self, result):
        for cmd in result.commands:
            self.apply_cmd(cmd)
        check_invariants(self.w)
        return result

    def apply_cmd(self, cmd):
        t = cmd.task_id
        if isinstance(cmd, PrepareTaskActivation):
            assert self.model.get(t, TaskPhase.TERMINAL) is TaskPhase.TERMINAL
            self.model[t] = TaskPhase.PREPARING
            self.accepted += 1
        elif isinstance(cmd, ConvergeTask):
            assert self.model.get(t) not in (None, TaskPhase.TERMINAL), f"{t} converged twice"
            assert cmd.interrupted_phase is self.model[t]
            assert cmd.result.state is cmd.state and cmd.state.is_terminal
            self.model[t] = TaskPhase.TERMINAL
            self.converged += 1
        else:
            expected_from = {TaskPhase.BUILDER: TaskPhase.PREPARING, TaskPhase.CALLS: TaskPhase.BUILDER,
                             TaskPhase.PLUGIN: TaskPhase.CALLS}[NEXT_PHASE[type(cmd)]]
            assert self.model.get(t) is expected_from, (cmd, self.model.get(t))
            self.model[t] = NEXT_PHASE[type(cmd)]

    def target(self, i):
        active = sorted(self.w._tasks.active)
        if active and i < 7:
            return active[i % len(active)]
        return TASK_IDS[i % len(TASK_IDS)]

    def call_rpc(self, fn, *args, allowed=()):
        try:
            return self.apply(fn(*args))
        except WorkerError as e:
            assert e.code in allowed, e
            check_invariants(self.w)
            return None

    # ---- rules ----------------------------------------------------------------------
    # Few rules with weighted kinds: hypothesis' swarm testing disables random subsets
    # of rules per example, and fewer, broader rules keep tasks reaching deep phases.

    @rule(dt=st.sampled_from([0, 1, 5, 10, 20, 40, 40, 80, 80, 150, 400, 1200]))
    def advance(self, dt):
        self.now += dt

    @rule(task=TASKS, ttl=st.sampled_from([0, 50, 300, 900]))
    def request_slot(self, task, ttl):
        self.call_rpc(self.w.handle_request_task_slot, task, ttl, self.now,
                      allowed=(errors.NO_SLOT, errors.UNAVAILABLE))

    @rule(task=TASKS, slot=st.sampled_from(["", "", "own", "own", "own", "slot-0", "slot-2", "slot-7"]),
          timeout=st.sampled_from([0, 0, 0, 150, 600, MAX_TIMEOUT, -1]))
    def submit_rule(self, task, slot, timeout):
        self.submit(task, slot, timeout)

    def submit(self, task, slot, timeout):
        entry = self.w.get_index_entry(task)
        if slot == "own":
            slot = entry.slot_id if entry is not None else ""
        known = entry is not None and (entry.ctx is not None or entry.result is not None)
        r = self.call_rpc(self.w.handle_submit_task, req(task, slot, task_timeout_ms=timeout),
                          self.now, allowed=(errors.NO_SLOT, errors.UNAVAILABLE, errors.INVALID_SLOT,
                                             errors.SLOT_UNCERTAIN, errors.INVALID_ARGUMENT))
        if known:
            assert r is not None and not r.applied and r.commands == []
        elif r is not None:
            assert r.applied and r.snapshot.state is TaskState.RUNNING
            assert timeout >= 0 and slot != "slot-7"

    @rule(i=TARGETS, kind=st.sampled_from(
        ["next-ok"] * 6 + ["next-fail", "activation-failed", "builder", "calls", "plugin"]),
        streaming=st.booleans(), code=st.sampled_from(["", "ACTIVATION_FAILED", "IO_SCOPE_FAILED",
                                                       "OUTPUT_BYTES_EXCEEDED"]))
    def task_event(self, i, kind, streaming, code):
        """An activation or phase result: mostly the task's next step, sometimes a
        failure, sometimes a phase delivered out of order. With nothing active it
        submits a task instead, so that most steps act on a live task."""
        if not self.w.active_task_count():
            self.submit(TASK_IDS[i % len(TASK_IDS)], "own", 0)
            return
        task = self.target(i)
        before = self.model.get(task)
        ctx = self.w.get_task_context(task)
        if kind == "activation-failed" or (kind == "next-fail" and before is TaskPhase.PREPARING):
            self.apply(self.w.handle_task_activation_failed(task, code, "m", self.now))
            return
        if kind in ("next-ok", "next-fail"):
            if before is TaskPhase.PREPARING or ctx is None:
                slot_id = ctx.slot_id if ctx is not None else "slot-0"
                self.apply(self.w.handle_task_activation_prepared(task, slot_id, i, self.now))
                return
            phase = before
        else:
            phase = {"builder": TaskPhase.BUILDER, "calls": TaskPhase.CALLS, "plugin": TaskPhase.PLUGIN}[kind]
        out = PhaseOutcome(ok=kind != "next-fail", failure_code=code if kind == "next-fail" else "",
                           calls=[1], streaming=streaming, outputs=[b"1"])
        r = self.apply(self.w.handle_task_phase_finished(task, phase, out, self.now))
        if before is not phase:
            assert not r.applied and r.commands == []

    @rule(i=TARGETS, kind=st.sampled_from(
        ["timed_out", "lease", "attach", "attach", "detach", "disconnected", "tick"]))
    def timer_or_watch(self, i, kind):
        task = self.target(i)
        if kind == "timed_out":
            self.apply(self.w.handle_task_timed_out(task, self.now))
        elif kind == "lease":
            self.apply(self.w.handle_slot_lease_expired(f"slot-{i % 3}", self.now))
        elif kind == "attach":
            self.w.handle_watch_attached(task, self.now)
        elif kind == "detach":      # a stream that came and went, or the last one leaving
            ctx = self.w.get_task_context(task)
            if ctx is not None and ctx.watch_attached == 0:
                assert self.w.handle_watch_attached(task, self.now)
            self.w.handle_watch_detached(task, self.now)
        elif kind == "disconnected":
            self.apply(self.w.handle_watch_disconnected(task, self.now))
        else:
            self.tick()
        check_invariants(self.w)

    def tick(self):
        for cmd in self.w.tick(self.now):
            self.apply_cmd(cmd)
        check_invariants(self.w)
        assert self.w.expired_slots(self.now) == []
        assert self.w.timed_out_tasks(self.now) == []
        assert self.w.watch_disconnected_tasks(self.now) == []

    @rule(task=TASKS, drain=st.sampled_from([None, None, None, False, True]))
    def query_or_drain(self, task, drain):
        if drain is not None:
            self.w.set_draining(drain)
        try:
            snap = self.w.handle_get_task_result(task).snapshot
        except WorkerError as e:
            assert e.code == errors.NOT_FOUND
            return
        phase = self.model.get(task)
        if snap.state is TaskState.RUNNING:
            assert phase not in (None, TaskPhase.TERMINAL)
        elif snap.state.is_terminal:
            assert phase is TaskPhase.TERMINAL and snap.result is not None

    @precondition(lambda self: self.w.active_task_count() > 0)
    @rule(past_deadlines=st.sampled_from([False, False, True]))
    def liveness(self, past_deadlines):
        """Finishing every phase of every active task makes it terminal; moving past every
        lease, deadline and grace leaves nothing active and every slot free."""
        if past_deadlines:
            self.now += MAX_TIMEOUT + 1000
            self.tick()
            assert self.w.active_task_count() == 0
            assert all(s.state is SlotState.FREE for s in self.w.slots)
            assert self.w.free_capacity() == 3
            return
        for task in list(self.w._tasks.active):
            for _ in range(4):
                ctx = self.w.get_task_context(task)
                if ctx is None:
                    break
                if ctx.phase is TaskPhase.PREPARING:
                    self.apply(self.w.handle_task_activation_prepared(task, ctx.slot_id, 1, self.now))
                else:
                    self.apply(self.w.handle_task_phase_finished(task, ctx.phase, PhaseOutcome(), self.now))
            assert self.w.get_task_context(task) is None
            assert self.model[task] is TaskPhase.TERMINAL
        assert self.w.active_task_count() == 0

    # ---- invariants ------------------------------------------------------------------

    @invariant()
    def consistent(self):
        self.w.validate_state()
        check_invariants(self.w)
        assert self.w.free_capacity() >= 0
        active = {t for t, p in self.model.items() if p is not TaskPhase.TERMINAL}
        assert active == set(self.w._tasks.active)
        for t in active:
            assert self.w.get_task_context(t).phase is self.model[t]
        assert self.accepted - self.converged == len(active)

    @invariant()
    def scans_quiet_before_next_deadline(self):
        nd = self.w.next_deadline()
        if nd is None or nd > self.now:
            assert self.w.expired_slots(self.now) == []
            assert self.w.timed_out_tasks(self.now) == []
            assert self.w.watch_disconnected_tasks(self.now) == []


WorkerMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestWorkerMachine = WorkerMachine.TestCase


def test_validate_state_names_a_slot_table_that_disagrees_with_the_tasks():
    from .test_support import make, submit
    w = make(task_slots=2)
    submit(w, "a")
    w.validate_state()
    w._slots.allocated += 1
    with pytest.raises(AssertionError, match="slot counts 2/0 but 1/0"):
        w.validate_state()
