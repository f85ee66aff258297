"""WorkerCore's state and the internal transitions every handler shares.

Rules: ``WorkerState`` owns the slot table, the task index, the task contexts,
the timer heaps and the retention FIFO. The only ways a slot or an index entry
change are the helpers here: ``_reserve`` (FREE -> ALLOCATED + new entry),
``_tombstone`` (lease lost before SubmitTask), ``_converge`` (the single exit of a
submitted task: terminal result, slot FREE, retention armed). Handlers in
``worker_scans`` and ``worker`` compose them, so slot table and task index can
only change together. See ``worker.py`` for the public API.
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from . import failure_codes as fc
from .config import Config
from .errors import InvalidSlotError, NoSlotError, SlotUncertainError
from .types import (ConvergeTask, Command, SlotEntry, TaskContext, TaskIndexEntry, TaskPhase,
                    TaskResult, TaskSnapshot, TaskState, TaskStatistic)
from .worker_slots import SlotTable
from .worker_timers import TimerHeap

_PREPARING = TaskPhase.PREPARING
_BUILDER = TaskPhase.BUILDER
_CALLS = TaskPhase.CALLS
_PLUGIN = TaskPhase.PLUGIN
_TERMINAL = TaskPhase.TERMINAL
_ALLOCATED = TaskState.ALLOCATED
_FAILED = TaskState.FAILED


def _deadline_live(at_ms: int, ctx: TaskContext, token: Any) -> bool:
    return ctx.phase is not _TERMINAL


def _watch_live(at_ms: int, ctx: TaskContext, seq: Any) -> bool:
    return (ctx.phase is not _TERMINAL and ctx.watch_seq == seq
            and ctx.watch_disconnect_deadline_ms is not None)


class WorkerState:
    __slots__ = ("config", "_slots", "_index", "_tasks", "_ready", "_draining",
                 "_deadlines", "_watch_timers", "_retention", "_watch_seq")

    def __init__(self, config: Config | None = None) -> None:
        # A private copy: the slot table is sized once, so later edits to the caller's
        # Config must not change the core's view of it.
        self.config = cfg = replace(config if config is not None else Config()).validate()
        self._slots = SlotTable(cfg.task_slots)
        self._index: dict[str, TaskIndexEntry] = {}
        self._tasks: dict[str, TaskContext] = {}
        self._ready = False
        self._draining = False
        self._deadlines = TimerHeap(_deadline_live)
        self._watch_timers = TimerHeap(_watch_live)
        # (purge_at_ms, task_id, entry) in purge order: terminal results and tombstones
        # are appended with now + resultRetentionMs, so the deque stays sorted.
        self._retention: deque[tuple[int, str, TaskIndexEntry]] = deque()
        self._watch_seq = 0

    # ---- status ---------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready

    def set_ready(self, ready: bool) -> None:
        """Reported in the heartbeat only; tasks are accepted either way."""
        self._ready = bool(ready)

    @property
    def draining(self) -> bool:
        return self._draining

    def set_draining(self, draining: bool) -> None:
        """While draining, new RequestTaskSlot and not-yet-accepted SubmitTask calls
        raise Unavailable; known task ids still get their snapshot."""
        self._draining = bool(draining)

    def active_task_count(self) -> int:
        """Submitted, non-terminal tasks (pending activation or running)."""
        return len(self._tasks)

    def free_capacity(self) -> int:
        return self._slots.free_capacity

    @property
    def slots(self) -> list[SlotEntry]:
        """The slot table (read only)."""
        return self._slots.slots

    def get_task_context(self, task_id: str) -> TaskContext | None:
        """The context of a submitted, non-terminal task (read only), else None."""
        return self._tasks.get(task_id)

    def get_index_entry(self, task_id: str) -> TaskIndexEntry | None:
        return self._index.get(task_id)

    def derive_heartbeat(self, now: int) -> dict[str, Any]:
        s = self._slots
        return {"taskSlots": s.size, "reservedSlots": s.allocated, "runningTasks": s.running,
                "freeSlots": s.free_capacity, "draining": self._draining, "ready": self._ready,
                "atMs": now}

    # ---- internals ---------------------------------------------------------------------

    def _retention_head(self) -> int | None:
        q, index = self._retention, self._index
        while q:
            _, task_id, entry = q[0]
            if index.get(task_id) is entry:
                return q[0][0]
            q.popleft()
        return None

    def _maybe_snapshot(self, task_id: str) -> TaskSnapshot | None:
        entry = self._index.get(task_id)
        if entry is None or entry.lease_lost_at_ms >= 0:
            return None
        return _snapshot(entry)

    def _reserve(self, task_id: str, ttl_ms: int, now: int,
                 previous: TaskIndexEntry | None) -> TaskIndexEntry:
        slots = self._slots
        if slots.free_capacity <= 0:
            raise NoSlotError(
                f"no free task slot: all {slots.size} slots are reserved ({slots.allocated}) or "
                f"running ({slots.running}); retry later or on another worker")
        slot = slots.allocate(task_id, now + ttl_ms)
        entry = TaskIndexEntry(task_id, _ALLOCATED, slot.slot_id, slot.index)
        if previous is not None:    # a tombstone being replaced: keep its Watch streams
            entry.watch_attached = previous.watch_attached
            entry.watch_ever_attached = previous.watch_ever_attached
        self._index[task_id] = entry
        return entry

    def _check_reserved_slot(self, task_id: str, slot_id: str,
                             entry: TaskIndexEntry | None) -> None:
        """SubmitTask named ``slot_id``: it must be the live reservation of this task."""
        if entry is None:
            raise InvalidSlotError(
                f"{slot_id} is not reserved for task {task_id!r}; call RequestTaskSlot first, "
                "or submit without slot_id to reserve a slot inline")
        if entry.lease_lost_at_ms >= 0:
            if entry.slot_id == slot_id:
                raise SlotUncertainError(
                    f"the reservation of {slot_id} for task {task_id!r} expired at "
                    f"{entry.lease_lost_at_ms} ms and the slot was reclaimed; request a new slot "
                    "(RequestTaskSlot) and submit again, within its TTL")
            raise InvalidSlotError(
                f"{slot_id} is not reserved for task {task_id!r} (its reservation of "
                f"{entry.slot_id} expired at {entry.lease_lost_at_ms} ms); request a new slot")
        if entry.slot_id != slot_id:
            raise InvalidSlotError(
                f"{slot_id} is not reserved for task {task_id!r}, which holds {entry.slot_id}; "
                f"submit with slot_id {entry.slot_id!r}")

    def _expire_reservation_if_due(self, entry: TaskIndexEntry, now: int) -> None:
        """Apply a due lease of a bare reservation now instead of waiting for the tick."""
        slot = self._slots.slots[entry.slot_index]
        if now >= slot.lease_expires_at_ms:
            self._tombstone(entry, slot, now)

    def _tombstone(self, entry: TaskIndexEntry, slot: SlotEntry, now: int) -> None:
        entry.lease_lost_at_ms = slot.lease_expires_at_ms
        entry.slot_index = -1
        self._slots.release(slot)
        entry.retained_until_ms = now + self.config.result_retention_ms
        self._retention.append((entry.retained_until_ms, entry.task_id, entry))

    def _due_failure(self, ctx: TaskContext, now: int) -> tuple[int, str, str, bool] | None:
        """The earliest due timer of the task as (instant, code, message, retryable)."""
        best: tuple[int, str, str, bool] | None = None
        d = ctx.deadline_ms
        if now >= d:
            best = (d, fc.TIMED_OUT,
                    f"task exceeded its timeout of {d - ctx.accepted_at_ms} ms (accepted at "
                    f"{ctx.accepted_at_ms} ms, deadline {d} ms) during phase {ctx.phase.name}", True)
        if ctx.phase is _PREPARING:
            lease = self._slots.slots[ctx.slot_index].lease_expires_at_ms
            if now >= lease and (best is None or lease < best[0]):
                best = (lease, fc.SLOT_LOST,
                        f"the lease of {ctx.slot_id} expired at {lease} ms before the task was "
                        "activated (activation took longer than the slot TTL)", False)
        w = ctx.watch_disconnect_deadline_ms
        if w is not None and now >= w and (best is None or w < best[0]):
            best = (w, fc.WATCH_DISCONNECTED,
                    "every WatchTasks stream of the task disconnected and none reattached within "
                    f"watchDisconnectGraceMs ({self.config.watch_disconnect_grace_ms} ms)", False)
        return best

    def _converge_due(self, ctx: TaskContext, due: tuple[int, str, str, bool],
                      now: int) -> tuple[TaskSnapshot, list[Command]]:
        cmd = self._converge(ctx, _FAILED, due[1], due[2], due[3], now)
        return _terminal_snapshot(cmd), [cmd]

    def _converge(self, ctx: TaskContext, state: TaskState, code: str, message: str,
                  retryable: bool, now: int, phase_done: bool = False) -> ConvergeTask:
        """Make the task terminal, free its slot, retain its result. The only exit
        from the ``_tasks`` map."""
        phase = ctx.phase
        if not phase_done:     # charge the interrupted phase with the time it ran
            elapsed = now - ctx.phase_started_at_ms
            if phase is _BUILDER:
                ctx.builder_ms = elapsed
            elif phase is _CALLS:
                ctx.calls_ms = elapsed
            elif phase is _PLUGIN:
                ctx.plugin_ms = elapsed
        stat = TaskStatistic(ctx.accepted_at_ms, now, ctx.builder_ms, ctx.calls_ms, ctx.plugin_ms)
        calls = ctx.calls_outcome
        outputs: list[bytes] = []
        if calls is not None:
            outputs = calls.outputs
            stat.call_count = calls.call_count
            stat.calls_failed = calls.calls_failed
            stat.call_retries = calls.call_retries
            stat.cache_hits = calls.cache_hits
        plugin = ctx.plugin_outcome
        result = TaskResult(state, code, message, retryable, outputs,
                            plugin.plugin_results if plugin is not None else [], stat)

        ctx.phase = _TERMINAL
        ctx.watch_disconnect_deadline_ms = None
        task_id = ctx.task_id
        entry = self._index[task_id]
        self._slots.release(self._slots.slots[ctx.slot_index])
        entry.slot_index = -1
        entry.ctx = None
        entry.result = result
        entry.state = state
        entry.retained_until_ms = until = now + self.config.result_retention_ms
        del self._tasks[task_id]
        self._retention.append((until, task_id, entry))
        return ConvergeTask(task_id, ctx.slot_id, state, result, phase, ctx.adapter_task_ctx)


def _snapshot(entry: TaskIndexEntry) -> TaskSnapshot:
    return TaskSnapshot(entry.task_id, entry.slot_id, entry.state, entry.result)


def _terminal_snapshot(cmd: ConvergeTask) -> TaskSnapshot:
    return TaskSnapshot(cmd.task_id, cmd.slot_id, cmd.state, cmd.result)

