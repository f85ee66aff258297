"""WorkerCore: the Sans-IO state machine behind the Worker's slots, task index,
phase progression and terminal convergence.

Theory of operation
-------------------
The core never reads a clock, does IO or logs; every method takes ``now`` (int
ms, monotonic) and decides. The adapter (the orchestrator) executes the
commands it returns and feeds outcomes back as events. It keeps no second copy
of slot or phase truth. The core is single-threaded: call it from one event
loop only, and never from inside the execution of its own commands (queue such
events and apply them after the batch).

Parts (each owns its state; WorkerCore composes them and owns only the
``ready`` / ``draining`` flags):

- ``core.worker.slots.SlotTable``: the slots, capacity counters and slot leases.
- ``core.worker.tasks.TaskIndex``: the task index (reservations, submitted tasks,
  retained results, tombstones), the contexts of active tasks, the retention
  FIFO and the Watch stream counts.
- ``core.worker.timers.TaskTimers``: task deadlines and Watch grace timers, and the
  rule that picks a task's earliest due timer.
- ``core.worker.shares.Shares``: the fair share of slots and queued call bytes one
  identity may hold (counted by the slot table).
- ``core.worker.requests``: request validation and defaults (no state);
  ``core.worker.results``: the terminal result of a converging task (no state).

Every handler changes slot table and task index inside the same call, through
four transitions: reserve (slot ALLOCATED + new entry), tombstone (lease lost
before SubmitTask: slot FREE), admit (SubmitTask: context + deadline) and
converge (terminal result, slot FREE, retention armed). There is no torn state.

Lifecycle of a task::

    handle_request_task_slot        -> slot ALLOCATED (lease), state ALLOCATED
    handle_submit_task              -> PrepareTaskActivation, state RUNNING (phase PREPARING)
    handle_task_activation_prepared -> slot RUNNING, StartBuilderPhase       (phase BUILDER)
    handle_task_phase_finished(BUILDER, ok)  -> StartCallPhase               (phase CALLS)
    handle_task_phase_finished(CALLS, ok)    -> StartPluginPhase             (phase PLUGIN)
    handle_task_phase_finished(PLUGIN, any)  -> ConvergeTask SUCCEEDED/FAILED (slot FREE)

Any failure after SubmitTask accepted the task converges it (ConvergeTask with
a FAILED result); only the submission layer raises ``WorkerError``. The slot is
freed inside the same call that emits ConvergeTask; the context leaves
``get_task_context`` and the result stays for ``resultRetentionMs``.

Slots and submission
--------------------
- Slots are ``slot-0`` .. ``slot-{taskSlots-1}``; first FREE slot wins.
- A slot stays ALLOCATED (lease running) from reservation until activation, so
  a lease that runs out before activation converges the task FAILED/SLOT_LOST.
  Repeating RequestTaskSlot for a reserved task returns the same snapshot and
  does not extend the lease.
- SubmitTask without ``slot_id`` uses the task's own live reservation if it has
  one, else reserves inline with ``defaultTTLMs``.
- SubmitTask with ``slot_id``: not ``slot-N`` in range -> InvalidArgument; the
  task's reservation of that slot expired (reclaimed, maybe re-allocated) ->
  SlotUncertain ("request a new slot"); any other slot that is not the task's
  live reservation -> InvalidSlot. An expired reservation is remembered as a
  tombstone for ``resultRetentionMs`` to tell these apart; GetTaskResult on it
  is NotFound, and a new RequestTaskSlot / inline reservation replaces it.
- Order of checks: task_id, idempotency (known submitted or terminal task ->
  its snapshot, even while draining), request validation, draining
  (Unavailable), slot checks, capacity (NoSlot).
- ``ready`` is reported in the heartbeat only (as false while draining); it does
  not gate admission.
- Watch streams may attach to a bare reservation; the count carries over to
  the task at SubmitTask. Watch grace only ever reclaims submitted tasks.

Time
----
Every timer is an instant and is exact: a lease is expired, a deadline passed,
a Watch grace ran out when ``now >= instant``. Events arriving late are judged
by the timeline, not by the order the adapter happens to process them: every
task event first applies the earliest due timer of that task (TIMED_OUT wins
ties, then SLOT_LOST, then WATCH_DISCONNECTED). So a Builder outcome delivered
at or after the deadline converges TIMED_OUT, and ``handle_task_timed_out`` on
a task whose lease ran out earlier converges SLOT_LOST.

Adapter API (all ``now`` in ms)
-------------------------------
RPCs (raise ``WorkerError``; return a result with ``snapshot`` + ``commands``):
  ``handle_request_task_slot(task_id, ttl_ms, now, caller=None) -> RequestTaskSlotResult``
  ``handle_submit_task(req, now, caller=None) -> SubmitTaskResult``
  ``handle_get_task_result(task_id, caller=None) -> GetTaskResultOutput``
  ``handle_cancel_task(task_id, reason, now, caller=None) -> CancelTaskResult``
  (core.worker.cancel: FAILED / CANCELLED through ConvergeTask; NotFound for
  another's task, as for an unknown id), ``list_tasks(filter, now, caller=None) -> TaskListPage``
  (core.worker.listing).
  ``caller`` (core.owners.Caller; None: unrestricted) decides ownership: a task
  id belongs to the identity that reserved or submitted it; another identity
  reads it as NotFound and reserving or submitting it is AlreadyExists.
Events fed back by the adapter (a stale, out-of-order or unknown-task event
returns ``applied=False`` and changes nothing; they raise only for a slot id
that is no slot, or a phase other than BUILDER/CALLS/PLUGIN):
  ``handle_task_activation_prepared(task_id, slot_id, task_code_epoch, now)``
  ``handle_task_activation_failed(task_id, failure_code, message, now, retryable=False)``
  ``handle_task_phase_finished(task_id, phase, outcome, now)``
  ``handle_task_timed_out(task_id, now)``, ``handle_watch_disconnected(task_id, now)``,
  ``handle_slot_lease_expired(slot_id, now)``
  ``handle_watch_attached(task_id, now) -> bool``, ``handle_watch_detached(task_id, now) -> bool``
Timers: ``expired_slots(now)``, ``timed_out_tasks(now)``, ``watch_disconnected_tasks(now)``
  are side-effect-free queries (a due item is reported until handled);
  ``purge_expired_results(now)`` deletes; ``next_deadline()`` is the earliest
  instant any of them would report something (arm one timer for it);
  ``tick(now)`` runs all four scans and their handlers and returns the commands.
Shutdown: ``handle_shutdown(now)`` converges every task still submitted.
Status: ``set_ready``/``ready``, ``set_draining``/``draining``,
  ``active_task_count()``, ``free_capacity()``, ``derive_heartbeat(now)``,
  ``get_task_context(task_id)``, ``get_index_entry(task_id)``, ``slots``.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from blockx.core import failure_codes as fc
from blockx.core.config import Config
from blockx.core.errors import AlreadyExistsError, InvalidArgumentError, NoSlotError, NotFoundError, UnavailableError
from blockx.core.owners import Caller, may_use, owner_of
from blockx.core.types import (ActivationResult, CancelTaskResult, Command, ConvergeTask, CoreResult, GetTaskResultOutput,
                    LeaseExpiredResult, PhaseOutcome, PhaseTransitionResult,
                    PrepareTaskActivation, RequestTaskSlotResult, SlotEntry, SlotState,
                    StartBuilderPhase, StartCallPhase, StartPluginPhase, SubmitTaskRequest,
                    SubmitTaskResult, TaskContext, TaskIndexEntry, TaskPhase, TaskSnapshot,
                    TaskState)
from blockx.core.worker.cancel import cancel_message, check_reason, reservation_result
from blockx.core.worker.listing import TaskListFilter, TaskListPage, list_tasks
from blockx.core.worker.requests import check_reserved_slot, require_task_id, resolve_submit, resolve_ttl
from blockx.core.worker.results import terminal_result
from blockx.core.worker.shares import Shares
from blockx.core.worker.slots import SlotTable
from blockx.core.worker.tasks import TaskIndex
from blockx.core.worker.timers import DueFailure, TaskTimers

_PREPARING = TaskPhase.PREPARING
_BUILDER = TaskPhase.BUILDER
_CALLS = TaskPhase.CALLS
_PLUGIN = TaskPhase.PLUGIN
_RUNNING = TaskState.RUNNING
_SUCCEEDED = TaskState.SUCCEEDED
_FAILED = TaskState.FAILED
_FINISHABLE = (_BUILDER, _CALLS, _PLUGIN)
_SLOT_ALLOCATED = SlotState.ALLOCATED
R = TypeVar("R", bound=CoreResult)


class WorkerCore:
    """The Worker's Sans-IO decision engine (see the module docstring)."""

    __slots__ = ("config", "_slots", "_shares", "_tasks", "_timers", "_ready", "_draining")

    def __init__(self, config: Config | None = None) -> None:
        # A private copy: the slot table is sized once, so later edits to the caller's
        # Config must not change the core's view of it.
        self.config = cfg = replace(config if config is not None else Config()).validate()
        self._slots = SlotTable(cfg.task_slots)
        self._shares = Shares(cfg.task_slots, cfg.max_slots_per_identity, cfg.max_queued_call_bytes_per_identity)
        self._tasks = TaskIndex(cfg.result_retention_ms)
        self._timers = TaskTimers(cfg.watch_disconnect_grace_ms, self._slots)
        self._ready = False
        self._draining = False

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
        return len(self._tasks.active)

    def retained_result_count(self) -> int:
        """Terminal results still retained (for the memory diagnostics log line)."""
        return self._tasks.retained_result_count()

    def free_capacity(self) -> int:
        return self._slots.free_capacity

    def validate_state(self) -> None:
        """Check that the slot table and the task index agree (counts, holders, free
        list); raise AssertionError naming what does not. O(slots + tasks): for the
        hypothesis machine after every step, never on the hot path."""
        slots, index = self._slots, self._tasks._index
        free = {s.index for s in slots.slots if s.state is SlotState.FREE}
        held = [s for s in slots.slots if s.state is not SlotState.FREE]
        bad = [f"{s.slot_id} held by {s.task_id}, not an active task holding it" for s in held
               if (e := index.get(s.task_id or "")) is None or e.slot_index != s.index or e.state.is_terminal]
        bad += [f"task {t} points at slot {e.slot_index}, held by another" for t, e in index.items()
                if e.slot_index >= 0 and slots.slots[e.slot_index].task_id != t]
        allocated = sum(s.state is _SLOT_ALLOCATED for s in held)
        if (slots.allocated, slots.running) != (allocated, len(held) - allocated):
            bad.append(f"slot counts {slots.allocated}/{slots.running} but {allocated}/"
                       f"{len(held) - allocated} allocated/running")
        if set(slots._free) != free or len(slots._free) != len(free) or slots.free_capacity != len(free):
            bad.append(f"free list {sorted(slots._free)} but free slots {sorted(free)}")
        if bad:
            raise AssertionError("worker state: " + "; ".join(bad))

    @property
    def slots(self) -> list[SlotEntry]:
        """The slot table (read only)."""
        return self._slots.slots

    def get_task_context(self, task_id: str) -> TaskContext | None:
        """The context of a submitted, non-terminal task (read only), else None."""
        return self._tasks.context(task_id)

    def get_index_entry(self, task_id: str) -> TaskIndexEntry | None:
        return self._tasks.entry(task_id)

    def identity_holdings(self) -> dict[str, tuple[int, int]]:
        """identity -> (slots held, queued call bytes) for every identity holding a slot
        ("" is the unrestricted caller); a copy, for metrics."""
        return self._slots.holders()

    @property
    def identity_slot_share(self) -> int:
        """The slots one identity (not admin) may hold at once (core.worker.shares)."""
        return self._shares.slot_cap

    def derive_heartbeat(self, now: int) -> dict[str, Any]:
        s = self._slots
        return {"taskSlots": s.size, "reservedSlots": s.allocated, "runningTasks": s.running,
                "freeSlots": s.free_capacity, "draining": self._draining,
                "ready": self._ready and not self._draining,
                "atMs": now}

    # ---- RPCs -------------------------------------------------------------------

    def handle_request_task_slot(self, task_id: str, ttl_ms: int, now: int,
                                 caller: Caller | None = None) -> RequestTaskSlotResult:
        require_task_id(task_id)
        ttl = resolve_ttl(ttl_ms, self.config)
        entry = self._tasks.entry(task_id)
        if entry is not None:
            if not may_use(entry.owner, caller):
                raise _taken(task_id)
            if entry.ctx is None and entry.slot_index >= 0:
                self._expire_reservation_if_due(entry, now)
            if entry.lease_lost_at_ms < 0:
                return RequestTaskSlotResult(_snapshot(entry), [], False)
        if self._draining:
            raise UnavailableError(
                "worker is draining and takes no new tasks; request a slot on another worker")
        entry = self._reserve(task_id, ttl, now, entry, caller)
        return RequestTaskSlotResult(_snapshot(entry))

    def handle_submit_task(self, req: SubmitTaskRequest, now: int,
                           caller: Caller | None = None) -> SubmitTaskResult:
        task_id = req.task_id
        require_task_id(task_id)
        tasks = self._tasks
        entry = tasks.entry(task_id)
        if entry is not None:
            if not may_use(entry.owner, caller):
                raise _taken(task_id)
            if entry.ctx is not None or entry.result is not None:
                return SubmitTaskResult(_snapshot(entry), [], False)
        cfg = self.config
        (function_call, result_handler, timeout_ms, policy, retry,
         instance_id) = resolve_submit(req, cfg)
        if req.slot_id:
            self._slots.parse(req.slot_id)      # InvalidArgument / InvalidSlot for an id that is no slot here
        if self._draining:
            raise UnavailableError(
                "worker is draining and takes no new tasks; submit the task to another worker")
        if entry is not None and entry.slot_index >= 0:
            self._expire_reservation_if_due(entry, now)
        if req.slot_id:
            check_reserved_slot(task_id, req.slot_id, entry)
        nbytes = len(function_call.payload)
        self._shares.check_bytes(self._slots, caller, nbytes)     # before an inline reservation
        if not req.slot_id and (entry is None or entry.slot_index < 0):
            entry = self._reserve(task_id, cfg.default_ttl_ms, now, entry, caller)
        assert entry is not None
        self._slots.charge(self._slots.slots[entry.slot_index], nbytes)
        slot_id = entry.slot_id
        ctx = TaskContext(task_id, slot_id, entry.slot_index, now + timeout_ms, now, function_call,
                          result_handler, policy, retry, instance_id)
        self._timers.arm_deadline(ctx, tasks.admit(entry, ctx))
        cmd = PrepareTaskActivation(task_id, slot_id, function_call, instance_id,
                                    ctx.deadline_ms)
        return SubmitTaskResult(TaskSnapshot(task_id, slot_id, _RUNNING), [cmd])

    def handle_get_task_result(self, task_id: str, caller: Caller | None = None) -> GetTaskResultOutput:
        require_task_id(task_id)
        entry = self._tasks.entry(task_id)
        if entry is None or not may_use(entry.owner, caller):   # another's task reads as unknown
            raise self._unknown(task_id)
        if entry.lease_lost_at_ms >= 0:
            raise NotFoundError(
                f"task {task_id!r} was never submitted: its reservation of {entry.slot_id} expired "
                f"at {entry.lease_lost_at_ms} ms")
        return GetTaskResultOutput(_snapshot(entry), [], False)

    def handle_cancel_task(self, task_id: str, reason: str, now: int,
                           caller: Caller | None = None) -> CancelTaskResult:
        """CancelTask (rules in core.worker.cancel): a submitted task or a bare
        reservation converges FAILED / CANCELLED (ConvergeTask, slot freed);
        a terminal one answers its snapshot with applied=False."""
        require_task_id(task_id)
        reason = check_reason(reason)
        entry = self._tasks.entry(task_id)
        # Another identity's task reads as unknown here too: no answer tells that the id exists.
        if entry is None or entry.lease_lost_at_ms >= 0 or not may_use(entry.owner, caller):
            raise self._unknown(task_id)
        if entry.result is not None:
            return CancelTaskResult(_snapshot(entry), [], False)
        ctx = entry.ctx
        message = cancel_message(reason, caller)
        if ctx is None:                           # a bare reservation
            slot = self._slots.slots[entry.slot_index]
            if now >= slot.lease_expires_at_ms:   # lapsed: the timer scan reclaims it (watchers learn it is gone)
                raise NotFoundError(
                    f"task {task_id!r} was never submitted: its reservation of {entry.slot_id} expired "
                    f"at {slot.lease_expires_at_ms} ms")
            result = reservation_result(message, now)
            self._slots.release(slot)
            self._tasks.cancel_reservation(entry, result, now)
            return CancelTaskResult(TaskSnapshot(task_id, entry.slot_id, _FAILED, result),
                                    [ConvergeTask(task_id, entry.slot_id, _FAILED, result, _PREPARING)])
        due = self._timers.first_due(ctx, now)
        if due is not None:
            return self._converge_due(CancelTaskResult, ctx, due, now)
        return self._converge(CancelTaskResult, ctx, _FAILED, fc.CANCELLED, message, False, now)

    def list_tasks(self, query: TaskListFilter, now: int, caller: Caller | None = None) -> TaskListPage:
        """ListTasks (rules in core.worker.listing): the caller's view of the task
        index, filtered and one page long."""
        return list_tasks(self._tasks.entries(), query, now, caller)

    # ---- activation and phases ----------------------------------------------------

    def handle_task_activation_prepared(self, task_id: str, slot_id: str, task_code_epoch: Any,
                                        now: int) -> ActivationResult:
        ctx = self._tasks.context(task_id)
        if ctx is None or ctx.phase is not _PREPARING or ctx.slot_id != slot_id:
            return ActivationResult(self._maybe_snapshot(task_id), [], False)
        slots = self._slots
        due = self._timers.first_due(ctx, now)
        if due is not None:
            return self._converge_due(ActivationResult, ctx, due, now)
        slots.activate(slots.slots[ctx.slot_index])
        ctx.task_code_epoch = task_code_epoch
        ctx.phase = _BUILDER
        ctx.phase_started_at_ms = now
        cmd = StartBuilderPhase(task_id, slot_id, task_code_epoch, ctx.function_call)
        return ActivationResult(TaskSnapshot(task_id, slot_id, _RUNNING), [cmd])

    def handle_task_activation_failed(self, task_id: str, failure_code: str, message: str,
                                      now: int, retryable: bool = False) -> ActivationResult:
        """``failure_code``: ACTIVATION_FAILED or IO_SCOPE_FAILED ("" means ACTIVATION_FAILED)."""
        ctx = self._tasks.context(task_id)
        if ctx is None or ctx.phase is not _PREPARING:
            return ActivationResult(self._maybe_snapshot(task_id), [], False)
        due = self._timers.first_due(ctx, now)
        if due is not None:
            return self._converge_due(ActivationResult, ctx, due, now)
        return self._converge(ActivationResult, ctx, _FAILED, failure_code or fc.ACTIVATION_FAILED,
                              message, retryable, now)

    def handle_task_phase_finished(self, task_id: str, phase: TaskPhase, outcome: PhaseOutcome,
                                   now: int) -> PhaseTransitionResult:
        if phase not in _FINISHABLE:
            raise InvalidArgumentError(
                f"phase {phase!r} cannot finish: report BUILDER, CALLS or PLUGIN (activation goes "
                "through handle_task_activation_prepared / handle_task_activation_failed)")
        ctx = self._tasks.context(task_id)
        if ctx is None or ctx.phase is not phase:
            return PhaseTransitionResult(self._maybe_snapshot(task_id), [], False)
        due = self._timers.first_due(ctx, now)
        if due is not None:
            return self._converge_due(PhaseTransitionResult, ctx, due, now)
        elapsed = now - ctx.phase_started_at_ms
        cmd: Command
        if phase is _BUILDER:
            ctx.builder_ms = elapsed
            ctx.builder_outcome = outcome
            if not outcome.ok:
                return self._converge(PhaseTransitionResult, ctx, _FAILED,
                                      outcome.failure_code or fc.BUILDER_FAILED,
                                      outcome.failure_message, outcome.retryable, now, True)
            ctx.phase = _CALLS
            ctx.phase_started_at_ms = now
            streaming = bool(outcome.streaming)
            calls = None if streaming else (outcome.calls if outcome.calls is not None else [])
            cmd = StartCallPhase(task_id, ctx.slot_id, ctx.task_code_epoch, calls, streaming,
                                 ctx.call_failure_policy, ctx.call_retry_policy, ctx.instance_id,
                                 ctx.deadline_ms)
        elif phase is _CALLS:
            ctx.calls_ms = elapsed
            ctx.calls_outcome = outcome
            if not outcome.ok:
                return self._converge(PhaseTransitionResult, ctx, _FAILED,
                                      outcome.failure_code or fc.CALL_FAILED,
                                      outcome.failure_message, outcome.retryable, now, True)
            ctx.phase = _PLUGIN
            ctx.phase_started_at_ms = now
            cmd = StartPluginPhase(task_id, ctx.slot_id, outcome.outputs, ctx.result_handler)
        else:
            ctx.plugin_ms = elapsed
            ctx.plugin_outcome = outcome
            if outcome.ok:
                return self._converge(PhaseTransitionResult, ctx, _SUCCEEDED, "", "", False, now, True)
            return self._converge(PhaseTransitionResult, ctx, _FAILED,
                                  outcome.failure_code or fc.PLUGIN_FAILED,
                                  outcome.failure_message, outcome.retryable, now, True)
        return PhaseTransitionResult(TaskSnapshot(task_id, ctx.slot_id, _RUNNING), [cmd])

    # ---- timer events -------------------------------------------------------------

    def handle_task_timed_out(self, task_id: str, now: int) -> PhaseTransitionResult:
        """Converge the task if its deadline (or an earlier timer of it) is due."""
        return self._handle_timer_event(task_id, now)

    def handle_watch_disconnected(self, task_id: str, now: int) -> PhaseTransitionResult:
        """Converge the task if its Watch grace (or an earlier timer of it) is due."""
        return self._handle_timer_event(task_id, now)

    def _handle_timer_event(self, task_id: str, now: int) -> PhaseTransitionResult:
        ctx = self._tasks.context(task_id)
        due = self._timers.first_due(ctx, now) if ctx is not None else None
        if due is None:
            return PhaseTransitionResult(self._maybe_snapshot(task_id), [], False)
        assert ctx is not None
        return self._converge_due(PhaseTransitionResult, ctx, due, now)

    def handle_slot_lease_expired(self, slot_id: str, now: int) -> LeaseExpiredResult:
        """Reclaim an ALLOCATED slot whose lease is due. A bare reservation becomes a
        tombstone (snapshot None); a submitted, not yet activated task converges
        FAILED/SLOT_LOST. A slot that is FREE, RUNNING, re-allocated or not yet due
        is left alone (applied=False)."""
        slot = self._slots.parse(slot_id)
        if slot.state is not _SLOT_ALLOCATED or now < slot.lease_expires_at_ms:
            return LeaseExpiredResult(None, [], False)
        assert slot.task_id is not None
        entry = self._tasks.entry(slot.task_id)
        assert entry is not None
        ctx = entry.ctx
        if ctx is None:
            self._tombstone(entry, slot, now)
            return LeaseExpiredResult(None, [], True)
        due = self._timers.first_due(ctx, now)
        assert due is not None
        return self._converge_due(LeaseExpiredResult, ctx, due, now)

    def handle_watch_attached(self, task_id: str, now: int) -> bool:
        """First WatchTasks stream for the task attached (one call per attached stream).
        Cancels a running Watch grace. False for an unknown or terminal task."""
        return self._tasks.attach_watch(task_id)

    def handle_watch_detached(self, task_id: str, now: int) -> bool:
        """A stream watching the task went away. When the last one leaves a submitted
        task and watchDisconnectGraceMs > 0, the grace timer starts. False for an
        unknown or terminal task or an unbalanced detach."""
        tasks = self._tasks
        if not tasks.detach_watch(task_id):
            return False
        ctx = tasks.context(task_id)
        if ctx is not None and ctx.watch_attached == 0:
            self._timers.start_watch_grace(ctx, now, len(tasks.active))
        return True

    # ---- timer scans -----------------------------------------------------------------

    def expired_slots(self, now: int) -> list[str]:
        """Slot ids whose lease is due; feed each to handle_slot_lease_expired."""
        return self._slots.expired(now)

    def timed_out_tasks(self, now: int) -> list[str]:
        """Task ids whose deadline is due; feed each to handle_task_timed_out."""
        return self._timers.timed_out(now)

    def watch_disconnected_tasks(self, now: int) -> list[str]:
        """Task ids whose Watch grace ran out; feed each to handle_watch_disconnected."""
        return self._timers.watch_expired(now)

    def purge_expired_results(self, now: int) -> list[str]:
        """Forget terminal results (and expired-reservation tombstones) whose retention
        ended; returns their task ids. O(number purged)."""
        return self._tasks.purge(now)

    def next_deadline(self) -> int | None:
        """Earliest instant at which a scan (or purge) would return something; None if
        no timer is armed. May be <= now when something is due but not yet handled."""
        best = self._slots.earliest_lease()
        for t in (self._timers.earliest(), self._tasks.next_purge()):
            if t is not None and (best is None or t < best):
                best = t
        return best

    def tick(self, now: int) -> list[Command]:
        """Run every scan and feed it to its handler: lease expiry, task deadlines, Watch
        grace, then result purge. Returns the commands to execute (ConvergeTask)."""
        out: list[Command] = []
        for slot_id in self.expired_slots(now):
            out.extend(self.handle_slot_lease_expired(slot_id, now).commands)
        for task_id in self.timed_out_tasks(now):
            out.extend(self.handle_task_timed_out(task_id, now).commands)
        for task_id in self.watch_disconnected_tasks(now):
            out.extend(self.handle_watch_disconnected(task_id, now).commands)
        self.purge_expired_results(now)
        return out

    def handle_shutdown(self, now: int) -> list[Command]:
        """The drain ended with tasks still submitted (its timeout, a second
        signal): each converges FAILED / WORKER_SHUTDOWN (retryable: it may run
        on another worker), so its watchers get a terminal update. Returns the
        ConvergeTask commands; bare reservations are left to lapse."""
        out: list[Command] = []
        msg = ("the worker shut down before the task finished (drain timeout or a second "
               "signal); resubmit it to another worker")
        for ctx in list(self._tasks.active.values()):
            out.extend(self._converge(PhaseTransitionResult, ctx, _FAILED, fc.WORKER_SHUTDOWN, msg,
                                      True, now).commands)
        return out

    # ---- transitions shared by the handlers ------------------------------------------

    def _reserve(self, task_id: str, ttl_ms: int, now: int,
                 previous: TaskIndexEntry | None, caller: Caller | None) -> TaskIndexEntry:
        slots = self._slots
        if slots.free_capacity <= 0:
            raise NoSlotError(
                f"no free task slot: all {slots.size} slots are reserved ({slots.allocated}) or "
                f"running ({slots.running}); retry later or on another worker")
        self._shares.check_slot(slots, caller)
        owner = owner_of(caller)
        entry = self._tasks.reserve(task_id, slots.allocate(task_id, now + ttl_ms, owner), previous, owner)
        entry.created_at_ms = now
        return entry

    def _expire_reservation_if_due(self, entry: TaskIndexEntry, now: int) -> None:
        """Apply a due lease of a bare reservation now instead of waiting for the tick."""
        slot = self._slots.slots[entry.slot_index]
        if now >= slot.lease_expires_at_ms:
            self._tombstone(entry, slot, now)

    def _tombstone(self, entry: TaskIndexEntry, slot: SlotEntry, now: int) -> None:
        self._tasks.tombstone(entry, slot.lease_expires_at_ms, now)
        self._slots.release(slot)

    def _converge_due(self, answer: type[R], ctx: TaskContext, due: DueFailure, now: int) -> R:
        return self._converge(answer, ctx, _FAILED, due[1], due[2], due[3], now)

    def _converge(self, answer: type[R], ctx: TaskContext, state: TaskState, code: str,
                  message: str, retryable: bool, now: int, phase_done: bool = False) -> R:
        """Make the task terminal, free its slot, retain its result: the single exit of
        a submitted task. Returns ``answer`` (the handler's result type) holding the
        terminal snapshot and the ConvergeTask command."""
        phase = ctx.phase
        result = terminal_result(ctx, state, code, message, retryable, now, phase_done)
        slots = self._slots
        slots.release(slots.slots[ctx.slot_index])
        self._tasks.retire(ctx, result, now)
        task_id, slot_id = ctx.task_id, ctx.slot_id
        return answer(TaskSnapshot(task_id, slot_id, state, result),
                      [ConvergeTask(task_id, slot_id, state, result, phase)])

    def _unknown(self, task_id: str) -> NotFoundError:
        """The one answer for an id that is unknown, purged, or another identity's."""
        return NotFoundError(
            f"task {task_id!r} is not known to this worker: it was never submitted here, or "
            f"its result was purged {self.config.result_retention_ms} ms (resultRetentionMs) "
            "after it finished")

    def _maybe_snapshot(self, task_id: str) -> TaskSnapshot | None:
        entry = self._tasks.entry(task_id)
        if entry is None or entry.lease_lost_at_ms >= 0:
            return None
        return _snapshot(entry)


def _taken(task_id: str) -> AlreadyExistsError:
    return AlreadyExistsError(
        f"task id {task_id!r} is in use on this worker by another identity; choose another task id "
        "(task ids are owned by the identity that reserved or submitted them)")


def _snapshot(entry: TaskIndexEntry) -> TaskSnapshot:
    return TaskSnapshot(entry.task_id, entry.slot_id, entry.state, entry.result)


__all__ = ["WorkerCore"]
