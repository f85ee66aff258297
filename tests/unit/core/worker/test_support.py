"""Helpers shared by the WorkerCore tests (this module holds no tests).

``check_invariants`` cross-checks the slot table, the task index and the task
contexts through the core's internals; every test calls it after mutating."""
from __future__ import annotations

from blockx.core.config import Config
from blockx.core.types import (FunctionCall, PhaseOutcome, SlotState, SubmitTaskRequest,
                               TaskPhase, TaskState)
from blockx.core.worker.core import WorkerCore

FC = FunctionCall("callList", b'{"calls": [{"functionId": "add", "args": [1, 2]}]}')


def make(**cfg) -> WorkerCore:
    return WorkerCore(Config(**cfg))


def req(task_id: str, slot_id: str = "", **kw) -> SubmitTaskRequest:
    kw.setdefault("function_call", FC)
    return SubmitTaskRequest(task_id, slot_id, **kw)


def submit(w: WorkerCore, task_id: str, now: int = 0, slot_id: str = "", **kw):
    r = w.handle_submit_task(req(task_id, slot_id, **kw), now)
    check_invariants(w)
    return r


def activate(w: WorkerCore, task_id: str, now: int, epoch=7):
    ctx = w.get_task_context(task_id)
    r = w.handle_task_activation_prepared(task_id, ctx.slot_id, epoch, now)
    check_invariants(w)
    return r


def finish(w: WorkerCore, task_id: str, phase: TaskPhase, now: int, outcome=None):
    r = w.handle_task_phase_finished(task_id, phase, outcome or PhaseOutcome(), now)
    check_invariants(w)
    return r


def run_to(w: WorkerCore, task_id: str, phase: TaskPhase, now: int) -> None:
    """Drive an accepted task, all at ``now``, until it sits in ``phase``."""
    order = [TaskPhase.PREPARING, TaskPhase.BUILDER, TaskPhase.CALLS, TaskPhase.PLUGIN]
    for p in order[:order.index(phase)]:
        if p is TaskPhase.PREPARING:
            activate(w, task_id, now)
        else:
            finish(w, task_id, p, now, PhaseOutcome(calls=[]) if p is TaskPhase.BUILDER else None)
    assert w.get_task_context(task_id).phase is phase


def check_invariants(w: WorkerCore) -> None:
    slots = w._slots
    index = w._tasks._index
    tasks = w._tasks.active
    allocated = running = 0
    free = set()
    held: dict[str, list[int]] = {}          # owner -> [slots, queued bytes], from the slots themselves
    for s in slots.slots:
        assert s.slot_id == f"slot-{s.index}"
        if s.state is SlotState.FREE:
            assert s.task_id is None and s.owner == "" and s.queued_bytes == 0, s
            free.add(s.index)
            continue
        entry = index.get(s.task_id)
        assert entry is not None, f"{s.slot_id} held by unknown task {s.task_id}"
        assert s.owner == entry.owner, (s, entry)
        h = held.setdefault(s.owner, [0, 0])
        h[0] += 1
        h[1] += s.queued_bytes
        assert entry.slot_index == s.index and entry.slot_id == s.slot_id, (s, entry)
        assert entry.result is None and entry.lease_lost_at_ms < 0, "slot held by a terminal task"
        assert not entry.state.is_terminal
        if s.state is SlotState.ALLOCATED:
            allocated += 1
            assert entry.ctx is None or entry.ctx.phase is TaskPhase.PREPARING, (s, entry.ctx)
        else:
            running += 1
            assert entry.ctx is not None and entry.ctx.phase in (
                TaskPhase.BUILDER, TaskPhase.CALLS, TaskPhase.PLUGIN), (s, entry.ctx)
    assert (slots.allocated, slots.running) == (allocated, running)
    assert slots.holders() == {o: (n, b) for o, (n, b) in held.items()}      # the shares' counts are the slots'
    assert set(slots._free) == free and len(slots._free) == len(free)
    assert slots.free_capacity == len(free) >= 0
    for task_id, entry in index.items():
        assert entry.task_id == task_id
        if entry.slot_index >= 0:
            assert slots.slots[entry.slot_index].task_id == task_id
        if entry.result is not None:
            assert entry.state.is_terminal and entry.result.state is entry.state
            assert entry.ctx is None and entry.slot_index == -1
            assert task_id not in tasks
        elif entry.lease_lost_at_ms >= 0:
            assert entry.ctx is None and entry.slot_index == -1 and task_id not in tasks
        elif entry.ctx is not None:
            assert tasks[task_id] is entry.ctx and entry.state is TaskState.RUNNING
            assert entry.ctx.slot_index == entry.slot_index >= 0
            assert entry.ctx.phase is not TaskPhase.TERMINAL
        else:
            assert entry.state is TaskState.ALLOCATED and entry.slot_index >= 0
            assert slots.slots[entry.slot_index].state is SlotState.ALLOCATED
    for task_id, ctx in tasks.items():
        assert index[task_id].ctx is ctx
    assert w.active_task_count() == len(tasks)
