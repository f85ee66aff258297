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

State: ``SlotTable`` (capacity truth), ``_index`` (task id -> TaskIndexEntry:
a reservation, a submitted task, a retained terminal result, or a tombstone of
an expired reservation) and ``_tasks`` (task id -> TaskContext of submitted,
non-terminal tasks). All three change together inside one method: there is no
torn state.

Lifecycle of a task::

    handle_request_task_slot        -> slot ALLOCATED (lease), state ALLOCATED
    handle_submit_task              -> PrepareTaskActivation, state RUNNING (phase PREPARING)
    handle_task_activation_prepared -> slot RUNNING, StartBuilderPhase       (phase BUILDER)
    handle_task_phase_finished(BUILDER, ok)  -> StartCallPhase               (phase CALLS)
    handle_task_phase_finished(CALLS, ok)    -> StartWriterPhase             (phase PLUGIN)
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
- ``ready`` is reported in the heartbeat only; it does not gate admission.
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
  ``handle_request_task_slot(task_id, ttl_ms, now) -> RequestTaskSlotResult``
  ``handle_submit_task(req, adapter_task_ctx, now) -> SubmitTaskResult``
  ``handle_get_task_result(task_id) -> GetTaskResultOutput``
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
Status: ``set_ready``/``ready``, ``set_draining``/``draining``,
  ``active_task_count()``, ``free_capacity()``, ``derive_heartbeat(now)``,
  ``get_task_context(task_id)``.
"""
from __future__ import annotations

from typing import Any

from . import failure_codes as fc
from .errors import InvalidArgumentError, UnavailableError, NotFoundError
from .types import (ActivationResult, Command, GetTaskResultOutput, PhaseOutcome,
                    PhaseTransitionResult, PrepareTaskActivation, RequestTaskSlotResult,
                    StartBuilderPhase, StartCallPhase, StartWriterPhase, SubmitTaskRequest,
                    SubmitTaskResult, TaskContext, TaskPhase, TaskSnapshot, TaskState)
from .worker_requests import require_task_id, resolve_submit, resolve_ttl
from .worker_scans import WorkerTimers
from .worker_state import _snapshot, _terminal_snapshot

_PREPARING = TaskPhase.PREPARING
_BUILDER = TaskPhase.BUILDER
_CALLS = TaskPhase.CALLS
_PLUGIN = TaskPhase.PLUGIN
_RUNNING = TaskState.RUNNING
_SUCCEEDED = TaskState.SUCCEEDED
_FAILED = TaskState.FAILED
_FINISHABLE = (_BUILDER, _CALLS, _PLUGIN)


class WorkerCore(WorkerTimers):
    """The Worker's Sans-IO decision engine (see the module docstring).

    Code layout: RPCs and phase events here; timer events and scans in
    ``worker_scans.WorkerTimers``; state and shared transitions in
    ``worker_state.WorkerState``; slot table in ``worker_slots``."""

    __slots__ = ()

    # ---- RPCs -------------------------------------------------------------------

    def handle_request_task_slot(self, task_id: str, ttl_ms: int, now: int) -> RequestTaskSlotResult:
        require_task_id(task_id)
        ttl = resolve_ttl(ttl_ms, self.config)
        entry = self._index.get(task_id)
        if entry is not None:
            if entry.ctx is None and entry.slot_index >= 0:
                self._expire_reservation_if_due(entry, now)
            if entry.lease_lost_at_ms < 0:
                return RequestTaskSlotResult(_snapshot(entry), [], False)
        if self._draining:
            raise UnavailableError(
                "worker is draining and takes no new tasks; request a slot on another worker")
        entry = self._reserve(task_id, ttl, now, entry)
        return RequestTaskSlotResult(_snapshot(entry))

    def handle_submit_task(self, req: SubmitTaskRequest, adapter_task_ctx: Any,
                           now: int) -> SubmitTaskResult:
        task_id = req.task_id
        require_task_id(task_id)
        entry = self._index.get(task_id)
        if entry is not None and (entry.ctx is not None or entry.result is not None):
            return SubmitTaskResult(_snapshot(entry), [], False)
        cfg = self.config
        r = resolve_submit(req, cfg)
        if req.slot_id:
            self._slots.parse(req.slot_id)      # InvalidArgument / InvalidSlot for an id that is no slot here
        if self._draining:
            raise UnavailableError(
                "worker is draining and takes no new tasks; submit the task to another worker")
        if entry is not None and entry.slot_index >= 0:
            self._expire_reservation_if_due(entry, now)
        if req.slot_id:
            self._check_reserved_slot(task_id, req.slot_id, entry)
        elif entry is None or entry.slot_index < 0:
            entry = self._reserve(task_id, cfg.default_ttl_ms, now, entry)
        assert entry is not None
        slot = self._slots.slots[entry.slot_index]

        ctx = TaskContext(task_id, slot.slot_id, slot.index, now + r.timeout_ms, now,
                          r.function_call, r.result_handler, r.call_failure_policy,
                          r.call_retry_policy, r.instance_id, adapter_task_ctx)
        ctx.watch_attached = entry.watch_attached
        ctx.watch_ever_attached = entry.watch_ever_attached
        entry.ctx = ctx
        entry.state = _RUNNING
        self._tasks[task_id] = ctx
        self._deadlines.push(ctx.deadline_ms, ctx, None, len(self._tasks))
        cmd = PrepareTaskActivation(task_id, slot.slot_id, r.function_call, r.instance_id,
                                    ctx.deadline_ms, adapter_task_ctx)
        return SubmitTaskResult(TaskSnapshot(task_id, slot.slot_id, _RUNNING), [cmd])

    def handle_get_task_result(self, task_id: str) -> GetTaskResultOutput:
        require_task_id(task_id)
        entry = self._index.get(task_id)
        if entry is None:
            raise NotFoundError(
                f"task {task_id!r} is not known to this worker: it was never submitted here, or "
                f"its result was purged {self.config.result_retention_ms} ms (resultRetentionMs) "
                "after it finished")
        if entry.lease_lost_at_ms >= 0:
            raise NotFoundError(
                f"task {task_id!r} was never submitted: its reservation of {entry.slot_id} expired "
                f"at {entry.lease_lost_at_ms} ms")
        return GetTaskResultOutput(_snapshot(entry), [], False)

    # ---- activation and phases ----------------------------------------------------

    def handle_task_activation_prepared(self, task_id: str, slot_id: str, task_code_epoch: Any,
                                        now: int) -> ActivationResult:
        ctx = self._tasks.get(task_id)
        if ctx is None or ctx.phase is not _PREPARING or ctx.slot_id != slot_id:
            return ActivationResult(self._maybe_snapshot(task_id), [], False)
        due = self._due_failure(ctx, now)
        if due is not None:
            return ActivationResult(*self._converge_due(ctx, due, now))
        self._slots.activate(self._slots.slots[ctx.slot_index])
        ctx.task_code_epoch = task_code_epoch
        ctx.phase = _BUILDER
        ctx.phase_started_at_ms = now
        cmd = StartBuilderPhase(task_id, slot_id, task_code_epoch, ctx.function_call,
                                ctx.adapter_task_ctx)
        return ActivationResult(TaskSnapshot(task_id, slot_id, _RUNNING), [cmd])

    def handle_task_activation_failed(self, task_id: str, failure_code: str, message: str,
                                      now: int, retryable: bool = False) -> ActivationResult:
        """``failure_code``: ACTIVATION_FAILED or IO_SCOPE_FAILED ("" means ACTIVATION_FAILED)."""
        ctx = self._tasks.get(task_id)
        if ctx is None or ctx.phase is not _PREPARING:
            return ActivationResult(self._maybe_snapshot(task_id), [], False)
        due = self._due_failure(ctx, now)
        if due is not None:
            return ActivationResult(*self._converge_due(ctx, due, now))
        cmd = self._converge(ctx, _FAILED, failure_code or fc.ACTIVATION_FAILED, message,
                             retryable, now)
        return ActivationResult(_terminal_snapshot(cmd), [cmd])

    def handle_task_phase_finished(self, task_id: str, phase: TaskPhase, outcome: PhaseOutcome,
                                   now: int) -> PhaseTransitionResult:
        if phase not in _FINISHABLE:
            raise InvalidArgumentError(
                f"phase {phase!r} cannot finish: report BUILDER, CALLS or PLUGIN (activation goes "
                "through handle_task_activation_prepared / handle_task_activation_failed)")
        ctx = self._tasks.get(task_id)
        if ctx is None or ctx.phase is not phase:
            return PhaseTransitionResult(self._maybe_snapshot(task_id), [], False)
        due = self._due_failure(ctx, now)
        if due is not None:
            return PhaseTransitionResult(*self._converge_due(ctx, due, now))
        elapsed = now - ctx.phase_started_at_ms
        cmd: Command
        if phase is _BUILDER:
            ctx.builder_ms = elapsed
            ctx.builder_outcome = outcome
            if not outcome.ok:
                cmd = self._converge(ctx, _FAILED, outcome.failure_code or fc.BUILDER_FAILED,
                                     outcome.failure_message, outcome.retryable, now, True)
                return PhaseTransitionResult(_terminal_snapshot(cmd), [cmd])
            ctx.phase = _CALLS
            ctx.phase_started_at_ms = now
            streaming = bool(outcome.streaming)
            calls = None if streaming else (outcome.calls if outcome.calls is not None else [])
            cmd = StartCallPhase(task_id, ctx.slot_id, ctx.task_code_epoch, calls, streaming,
                                 ctx.call_failure_policy, ctx.call_retry_policy, ctx.instance_id,
                                 ctx.deadline_ms, ctx.adapter_task_ctx)
        elif phase is _CALLS:
            ctx.calls_ms = elapsed
            ctx.calls_outcome = outcome
            if not outcome.ok:
                cmd = self._converge(ctx, _FAILED, outcome.failure_code or fc.CALL_FAILED,
                                     outcome.failure_message, outcome.retryable, now, True)
                return PhaseTransitionResult(_terminal_snapshot(cmd), [cmd])
            ctx.phase = _PLUGIN
            ctx.phase_started_at_ms = now
            cmd = StartWriterPhase(task_id, ctx.slot_id, outcome.outputs, ctx.result_handler,
                                   ctx.adapter_task_ctx)
        else:
            ctx.plugin_ms = elapsed
            ctx.plugin_outcome = outcome
            if outcome.ok:
                cmd = self._converge(ctx, _SUCCEEDED, "", "", False, now, True)
            else:
                cmd = self._converge(ctx, _FAILED, outcome.failure_code or fc.PLUGIN_FAILED,
                                     outcome.failure_message, outcome.retryable, now, True)
            return PhaseTransitionResult(_terminal_snapshot(cmd), [cmd])
        return PhaseTransitionResult(TaskSnapshot(task_id, ctx.slot_id, _RUNNING), [cmd])


__all__ = ["WorkerCore"]
