"""Value types of WorkerCore: states, the task context, phase outcomes, results,
and the commands the core emits for the adapter to execute.

Rules:
- Everything here is a plain ``dataclass(slots=True)``: cheap to build on the
  per-task hot path and free of behaviour beyond small conveniences.
- ``TaskState`` values equal the proto enum numbers (ALLOCATED=1 .. FAILED=4),
  so the adapter can pass ``int(state)`` straight into a protobuf message.
- Commands are the core's only output. The adapter executes each one and feeds
  the outcome back as an event (``handle_*``). Every task command names its
  task and slot, so the adapter keeps no second copy of slot or phase truth.
- Byte payloads (``FunctionCall.payload``, outputs, plugin details) are opaque
  to the core; ``calls`` produced by a builder are opaque too.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final, Union


class SlotState(enum.IntEnum):
    FREE = 0
    ALLOCATED = 1   # reserved by RequestTaskSlot / inline reservation; has a lease
    RUNNING = 2     # its task was activated; no lease any more


class TaskPhase(enum.IntEnum):
    PREPARING = 0   # accepted by SubmitTask, activation (epoch pin, IO scope) pending
    BUILDER = 1
    CALLS = 2
    PLUGIN = 3
    TERMINAL = 4


class TaskState(enum.IntEnum):
    """Externally visible task state; values match ``blockx.worker.v1.TaskState``."""
    ALLOCATED = 1
    RUNNING = 2     # every internal phase before TERMINAL
    SUCCEEDED = 3
    FAILED = 4

    @property
    def is_terminal(self) -> bool:
        return self >= 3


# Call failure policies (proto CallFailurePolicy; UNSPECIFIED means FAST_FAIL).
FAST_FAIL: Final = "FAST_FAIL"
CONTINUE: Final = "CONTINUE"


@dataclass(slots=True)
class FunctionCall:
    """Builder name (``type``) and its JSON payload."""
    type: str
    payload: bytes = b""


@dataclass(slots=True)
class ResultHandler:
    """The task's plugin: its name (``type``) and its JSON config."""
    type: str
    config: bytes = b""


@dataclass(slots=True)
class CallRetryPolicy:
    """In a request, 0 in a field means "use the Config default". In a TaskContext
    every field is resolved (max_attempts >= 1)."""
    max_attempts: int = 0
    base_backoff_ms: int = 0
    jitter_percent: int = 0


@dataclass(slots=True)
class SubmitTaskRequest:
    """A decoded SubmitTask call. ``slot_id`` "" means "reserve one inline"."""
    task_id: str
    slot_id: str = ""
    function_call: FunctionCall | None = None
    result_handler: ResultHandler | None = None
    task_timeout_ms: int = 0                      # 0 means Config.task_deadline_ms
    call_failure_policy: str = FAST_FAIL          # "FAST_FAIL" | "CONTINUE" ("" = FAST_FAIL)
    call_retry_policy: CallRetryPolicy | None = None
    instance_id: str = ""                         # fairness key for the dispatcher


@dataclass(slots=True)
class PluginResult:
    """A plugin's report: what it returns, and what the task's result carries."""
    plugin: str
    ok: bool
    message: str = ""
    details: bytes = b""
    retryable: bool = False     # a failure that may pass on a retry (a transient database error)


@dataclass(slots=True)
class TaskStatistic:
    accepted_at_ms: int = 0
    finished_at_ms: int = 0
    builder_ms: int = 0
    calls_ms: int = 0
    plugin_ms: int = 0
    call_count: int = 0
    calls_failed: int = 0
    call_retries: int = 0
    cache_hits: int = 0


@dataclass(slots=True)
class TaskResult:
    state: TaskState
    failure_code: str = ""
    failure_message: str = ""
    retryable: bool = False
    outputs: list[bytes] = field(default_factory=list)
    plugin_results: list[PluginResult] = field(default_factory=list)
    statistic: TaskStatistic = field(default_factory=TaskStatistic)
    outputs_written: int = 0     # outputs a streaming writer consumed as the task ran
    # The call that decided a CALL_FAILED: its id, its traceback (the user's code,
    # subcalls' chained in) and its innermost user frame's locals (name, repr).
    failure_call_id: str = ""
    failure_traceback: str = ""
    failure_locals: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class PhaseOutcome:
    """What the adapter reports when a phase finished.

    Builder: ``calls`` (the opaque call list) or ``streaming=True`` (a streaming
    builder prepared its producer). Calls: ``outputs`` (JSON bytes of each
    successful root call, call-list order) and the call stats. Plugin:
    ``plugin_results``. On failure ``failure_code`` may be left "" to get the
    phase's default code (BUILDER_FAILED / CALL_FAILED / PLUGIN_FAILED).
    """
    ok: bool = True
    failure_code: str = ""
    failure_message: str = ""
    retryable: bool = False
    outputs: list[bytes] = field(default_factory=list)
    plugin_results: list[PluginResult] = field(default_factory=list)
    call_count: int = 0
    calls_failed: int = 0
    call_retries: int = 0
    cache_hits: int = 0
    calls: list[Any] | None = None
    streaming: bool = False
    outputs_written: int = 0     # Plugin: outputs a streaming writer consumed during the Calls phase
    # Calls, failed: the deciding call's traceback and locals (TaskResult's fields of these names).
    failure_call_id: str = ""
    failure_traceback: str = ""
    failure_locals: tuple[tuple[str, str], ...] = ()

    @classmethod
    def failure(cls, failure_code: str = "", failure_message: str = "",
                retryable: bool = False, **kw: Any) -> "PhaseOutcome":
        return cls(False, failure_code, failure_message, retryable, **kw)


@dataclass(slots=True)
class SlotEntry:
    index: int
    slot_id: str                       # "slot-<index>"
    state: SlotState = SlotState.FREE
    task_id: str | None = None
    lease_expires_at_ms: int = 0       # meaningful only while ALLOCATED
    generation: int = 0                # bumped on every allocation; invalidates old lease timers
    owner: str = ""                    # the identity holding it (core.owners.owner_of), while not FREE
    queued_bytes: int = 0              # the payload bytes of the task submitted into it (its share)


@dataclass(slots=True)
class TaskContext:
    """Core-side record of a submitted, not yet terminal task (``tasks`` map)."""
    task_id: str
    slot_id: str
    slot_index: int
    deadline_ms: int
    accepted_at_ms: int
    function_call: FunctionCall
    result_handler: ResultHandler | None
    call_failure_policy: str
    call_retry_policy: CallRetryPolicy
    instance_id: str
    task_code_epoch: Any = None
    phase: TaskPhase = TaskPhase.PREPARING
    watch_attached: int = 0
    watch_ever_attached: bool = False
    watch_disconnect_deadline_ms: int | None = None
    phase_started_at_ms: int = 0
    builder_ms: int = 0
    calls_ms: int = 0
    plugin_ms: int = 0
    builder_outcome: PhaseOutcome | None = None
    calls_outcome: PhaseOutcome | None = None
    plugin_outcome: PhaseOutcome | None = None
    watch_seq: int = 0                 # identifies the armed Watch-grace timer


@dataclass(slots=True)
class TaskIndexEntry:
    """One per known task id: a reservation, a submitted task, or a retained result.

    A reservation whose lease expired before SubmitTask stays as a tombstone
    (``lease_lost_at_ms >= 0``, no slot) for the retention window, so that a late
    SubmitTask naming that slot gets SlotUncertain instead of a misleading
    InvalidSlot.
    """
    task_id: str
    state: TaskState
    slot_id: str                       # last slot held ("" for none); kept after release
    slot_index: int = -1               # -1 when the entry holds no slot
    ctx: TaskContext | None = None
    result: TaskResult | None = None
    lease_lost_at_ms: int = -1
    retained_until_ms: int = -1        # terminal results and tombstones: purge instant
    watch_attached: int = 0            # Watch streams attached before SubmitTask
    watch_ever_attached: bool = False
    owner: str = ""                    # the identity that reserved or submitted it (core.owners)
    created_at_ms: int = 0             # when it was reserved (ListTasks: the age of a reservation)
    instance_id: str = ""              # from SubmitTask, kept with the result (ListTasks filters on it)


@dataclass(slots=True)
class TaskSnapshot:
    """What the gRPC layer returns: state, slot and (when terminal) the result."""
    task_id: str
    slot_id: str
    state: TaskState
    result: TaskResult | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state >= 3


# ---- commands (core -> adapter) -------------------------------------------


@dataclass(slots=True)
class PrepareTaskActivation:
    """Resolve the code epoch, pin the Function Code View, create the TaskIOScope;
    then call handle_task_activation_prepared or handle_task_activation_failed."""
    task_id: str
    slot_id: str
    function_call: FunctionCall
    instance_id: str
    deadline_ms: int


@dataclass(slots=True)
class StartBuilderPhase:
    """Run the call builder named by ``function_call.type`` (under builderSem);
    report handle_task_phase_finished(task_id, TaskPhase.BUILDER, outcome)."""
    task_id: str
    slot_id: str
    task_code_epoch: Any
    function_call: FunctionCall


@dataclass(slots=True)
class StartCallPhase:
    """Hand ``calls`` (or, when ``streaming``, the prepared producer) to the
    dispatcher; report handle_task_phase_finished(task_id, TaskPhase.CALLS, outcome)
    when the dispatcher converges the task's calls."""
    task_id: str
    slot_id: str
    task_code_epoch: Any
    calls: list[Any] | None
    streaming: bool
    call_failure_policy: str
    call_retry_policy: CallRetryPolicy
    instance_id: str
    deadline_ms: int


@dataclass(slots=True)
class StartPluginPhase:
    """Run the plugin named by ``result_handler.type`` over ``outputs``
    (under pluginSem); with no result_handler report success at once. Report
    handle_task_phase_finished(task_id, TaskPhase.PLUGIN, outcome)."""
    task_id: str
    slot_id: str
    outputs: list[bytes]
    result_handler: ResultHandler | None


@dataclass(slots=True)
class ConvergeTask:
    """The task is terminal and its slot is already free. Cancel whatever of
    ``interrupted_phase`` is still running (in-flight calls, builder, plugin),
    close the task's IO scope, drop the runtime, notify Watch subscribers."""
    task_id: str
    slot_id: str
    state: TaskState
    result: TaskResult
    interrupted_phase: TaskPhase       # the phase the task was in when it converged


Command = Union[PrepareTaskActivation, StartBuilderPhase, StartCallPhase, StartPluginPhase, ConvergeTask]


# ---- handler results -------------------------------------------------------


@dataclass(slots=True)
class CoreResult:
    """``snapshot``: the task after the event (None when the task is unknown).
    ``commands``: to execute in order. ``applied``: False when the event was
    stale or out of order and was dropped without any change."""
    snapshot: TaskSnapshot | None
    commands: list[Command] = field(default_factory=list)
    applied: bool = True


@dataclass(slots=True)
class RequestTaskSlotResult(CoreResult):
    pass


@dataclass(slots=True)
class SubmitTaskResult(CoreResult):
    pass


@dataclass(slots=True)
class ActivationResult(CoreResult):
    pass


@dataclass(slots=True)
class PhaseTransitionResult(CoreResult):
    pass


@dataclass(slots=True)
class LeaseExpiredResult(CoreResult):
    pass


@dataclass(slots=True)
class GetTaskResultOutput(CoreResult):
    pass


@dataclass(slots=True)
class CancelTaskResult(CoreResult):
    """``applied``: this request made the task terminal (False: it already was)."""
